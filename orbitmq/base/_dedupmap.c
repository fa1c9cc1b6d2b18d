/* DedupMap: the producer de-dup table's map without a Python object per entry (part of orbitmq.base._speedups).
 *
 * Its pure-Python twin is broker/services/dedup.py PyDedupMap (a str -> str dict plus an order log); both keep
 * str keys -> str values in insertion order with absolute positions (one per put, a re-put takes a new one and its
 * old one is stale), and evict from the old end. tests/property/test_dedupmap_props.py drives both with the same
 * operations and requires the same answers. Why and layout: docs/design/filter-dedup.md ("The native map").
 *
 * Layout, all in malloc'd arrays (no Python object, so nothing for the cyclic GC or pymalloc; from 2 MiB on, in
 * transparent huge pages where the kernel gives them):
 * - arena: a ring of records in position order, each a dm_rec header (hash, store time, lengths, live flag)
 *   followed by the key's and the value's UTF-8 bytes, 8-byte aligned; a record never wraps (the bytes before the
 *   end are skipped instead). Offsets are logical (they grow; the byte is at offset % acap). Appending is
 *   sequential and eviction frees the old end, so a steady load goes round the ring without copying; a full ring
 *   is copied into one 1.5 times what it holds (and a mostly empty one into a smaller one). The ring's size is a
 *   multiple of 2 MiB (of 4 KiB below that), not a power of two: a ring wraps, so all of it becomes resident, and
 *   doubling made a table of 33.6 MB (200,000 batch entries) take 64 MiB.
 * - offs: the logical arena offset of each position from `plo` on (position -> record), for the journal's walk.
 * - slots: open addressing with linear probing over (hash, logical offset + 1), load at most 1/2, deletion by
 *   backward shift (no tombstones). A lookup that misses reads one slot run; a hit also reads its record to
 *   compare the key bytes. The hash is CPython's keyed SipHash of the key bytes (dm_hash).
 */
#include "_dedupmap.h"

#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

typedef struct {
    uint64_t hash;
    int64_t ts;
    uint32_t klen, vlen;
    uint32_t live; /* 0: a stale position (re-put or deleted), skipped by eviction and the journal walk */
    uint32_t pad;
} dm_rec;

typedef struct {
    uint64_t hash;
    uint64_t off; /* logical arena offset + 1; 0: empty */
} dm_slot;

typedef struct {
    PyObject_HEAD
    uint64_t seed;
    char *arena;
    uint64_t acap, aend; /* acap: a multiple of 4 KiB (or 0); aend: the logical end */
    uint64_t *offs;
    uint64_t ocap, plo, pend, head; /* offs[0] is position plo; pend: the next put's position; head: first kept */
    dm_slot *slots;
    uint64_t nslots, used; /* used: live entries */
} DedupMap;

#define ARENA_MIN ((uint64_t)1 << 16)
#define OFFS_MIN ((uint64_t)1 << 12)
#define SLOTS_MIN ((uint64_t)1 << 10)
#define SHRINK_FROM ((uint64_t)1 << 20)
#define MAX_FIELD ((Py_ssize_t)1 << 30)

#define HUGE_PAGE ((size_t)2 << 20)

/* malloc, but an array of 2 MiB or more is aligned to 2 MiB and asked for transparent huge pages: the index and the
 * ring are read at random, and with 4 KiB pages nearly every access also missed the TLB (on a VM a two-level page
 * walk). On Linux such an array is its own mapping, so that freeing it (the old ring after a growth) gives its
 * memory back at once; through malloc, glibc's rising mmap threshold kept the freed rings in the heap (+21 MiB
 * resident for a 46 MiB table). Freed with dm_release(p, the same size). */
static size_t dm_page_round(size_t size) { return (size + 4095) & ~(size_t)4095; }

static void *dm_alloc(size_t size) {
    if (size < HUGE_PAGE) return malloc(size);
#ifdef __linux__
    size = dm_page_round(size);
    size_t len = size + HUGE_PAGE;
    char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + len > p + size) munmap(p + size, (size_t)(raw + len - (p + size)));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, size, MADV_HUGEPAGE); /* advice only: without THP the pages are small */
#endif
    return p;
#else
    void *p = NULL;
    return posix_memalign(&p, HUGE_PAGE, size) == 0 ? p : NULL;
#endif
}

static void dm_release(void *p, size_t size) {
#ifdef __linux__
    if (p != NULL && size >= HUGE_PAGE) {
        munmap(p, dm_page_round(size));
        return;
    }
#endif
    free(p);
}

static inline dm_rec *rec_at(DedupMap *m, uint64_t off) { return (dm_rec *)(m->arena + off % m->acap); }
static inline const char *rec_key(dm_rec *r) { return (const char *)(r + 1); }
static inline const char *rec_value(dm_rec *r) { return (const char *)(r + 1) + r->klen; }
static inline uint64_t rec_size(uint64_t klen, uint64_t vlen) {
    return (sizeof(dm_rec) + klen + vlen + 7) & ~(uint64_t)7;
}

/* The key's hash: CPython's own keyed hash of bytes (SipHash-1-3 under the process's random key, the one `hash(b)`
 * uses), so that keys cannot be chosen to collide and make every probe run long; `seed` only varies the slots the
 * keys land in (tests). In-process only: it never reaches a file. */
static inline uint64_t dm_hash(uint64_t seed, const char *p, size_t n) {
    return (uint64_t)_Py_HashBytes(p, (Py_ssize_t)n) ^ seed;
}

static dm_slot *dm_find(DedupMap *m, uint64_t h, const char *k, size_t klen) {
    if (m->nslots == 0) return NULL;
    uint64_t mask = m->nslots - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        dm_slot *s = &m->slots[i];
        if (s->off == 0) return NULL;
        if (s->hash == h) {
            dm_rec *r = rec_at(m, s->off - 1);
            if (r->klen == klen && memcmp(rec_key(r), k, klen) == 0) return s;
        }
    }
}

static void dm_slot_delete(DedupMap *m, uint64_t i) { /* backward shift: the run after i stays reachable */
    uint64_t mask = m->nslots - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->slots[j].off == 0) break;
        uint64_t ideal = m->slots[j].hash & mask;
        if (((j - ideal) & mask) >= ((j - i) & mask)) { /* i lies in [ideal, j): j's entry may move to i */
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].hash = 0;
    m->slots[i].off = 0;
}

static void dm_index(DedupMap *m, uint64_t h, uint64_t off) {
    uint64_t mask = m->nslots - 1, i = h & mask;
    while (m->slots[i].off) i = (i + 1) & mask;
    m->slots[i].hash = h;
    m->slots[i].off = off + 1;
}

static void dm_unindex(DedupMap *m, uint64_t h, uint64_t off) {
    uint64_t mask = m->nslots - 1;
    for (uint64_t i = h & mask; m->slots[i].off; i = (i + 1) & mask)
        if (m->slots[i].off == off + 1) {
            dm_slot_delete(m, i);
            return;
        }
}

static int dm_slots_rebuild(DedupMap *m, uint64_t n) { /* the index at n slots (a power of two > used) */
    dm_slot *fresh = dm_alloc(n * sizeof(dm_slot));
    if (fresh == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(fresh, 0, n * sizeof(dm_slot));
    dm_slot *old = m->slots;
    uint64_t old_n = m->nslots;
    m->slots = fresh;
    m->nslots = n;
    for (uint64_t i = 0; i < old_n; i++)
        if (old[i].off) dm_index(m, old[i].hash, old[i].off - 1);
    dm_release(old, old_n * sizeof(dm_slot));
    return 0;
}

static int dm_slots_reserve(DedupMap *m) { /* room for one more live entry at load <= 1/2 */
    if ((m->used + 1) * 2 <= m->nslots) return 0;
    return dm_slots_rebuild(m, m->nslots ? m->nslots * 2 : SLOTS_MIN);
}

static uint64_t pow2_at_least(uint64_t want, uint64_t floor) {
    uint64_t c = floor;
    while (c < want) c *= 2;
    return c;
}

/* a ring size for `want` bytes: a multiple of 2 MiB from 2 MiB on (whole huge pages), of 4 KiB below */
static uint64_t arena_size(uint64_t want) {
    uint64_t unit = want >= HUGE_PAGE ? HUGE_PAGE : 4096;
    want = want < ARENA_MIN ? ARENA_MIN : want;
    return (want + unit - 1) / unit * unit;
}

static uint64_t dm_lo(DedupMap *m) { /* the logical offset of the head record (aend when there is none) */
    return m->head < m->pend ? m->offs[m->head - m->plo] : m->aend;
}

static uint64_t dm_pad(DedupMap *m, uint64_t size) { /* bytes skipped so that a record of `size` does not wrap */
    uint64_t at = m->aend % m->acap;
    return at + size > m->acap ? m->acap - at : 0;
}

/* The records of positions head.. copied in order to the start of a new arena of `cap` bytes (holding them 1.5
 * times when the ring is full, twice when it shrinks); their offsets change, so the index is
 * rebuilt. Growth (the ring is full) and shrinking only: a steady load wraps around the ring and never copies. */
static int dm_arena_rebase(DedupMap *m, uint64_t cap) {
    char *fresh = dm_alloc(cap);
    if (fresh == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t at = 0;
    for (uint64_t p = m->head; p < m->pend; p++) {
        uint64_t *off = &m->offs[p - m->plo];
        dm_rec *r = rec_at(m, *off);
        uint64_t size = rec_size(r->klen, r->vlen);
        memcpy(fresh + at, r, size);
        *off = at;
        at += size;
    }
    dm_release(m->arena, m->acap);
    m->arena = fresh;
    m->acap = cap;
    m->aend = at;
    if (m->nslots) {
        memset(m->slots, 0, m->nslots * sizeof(dm_slot));
        for (uint64_t p = m->head; p < m->pend; p++) {
            dm_rec *r = rec_at(m, m->offs[p - m->plo]);
            if (r->live) dm_index(m, r->hash, m->offs[p - m->plo]);
        }
    }
    return 0;
}

/* offs from the head position on, moved to the front of a buffer holding them twice (a new one when that is bigger
 * or a quarter the size) */
static int dm_offs_resize(DedupMap *m, uint64_t need) {
    uint64_t live = m->pend - m->head, cap = pow2_at_least(2 * (live + need), OFFS_MIN);
    if (cap <= m->ocap && cap * 4 > m->ocap) {
        if (m->head != m->plo) memmove(m->offs, m->offs + (m->head - m->plo), live * sizeof(uint64_t));
    } else {
        uint64_t *fresh = dm_alloc(cap * sizeof(uint64_t));
        if (fresh == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (live) memcpy(fresh, m->offs + (m->head - m->plo), live * sizeof(uint64_t));
        dm_release(m->offs, m->ocap * sizeof(uint64_t));
        m->offs = fresh;
        m->ocap = cap;
    }
    m->plo = m->head;
    return 0;
}

int orbitmq_dm_put(PyObject *map, const char *k, Py_ssize_t klen, const char *v, Py_ssize_t vlen, int64_t ts,
                   int keep_existing) {
    DedupMap *m = (DedupMap *)map;
    if (klen < 0 || vlen < 0 || klen > MAX_FIELD || vlen > MAX_FIELD) {
        PyErr_SetString(PyExc_ValueError, "de-dup key or entry too long");
        return -1;
    }
    uint64_t size = rec_size((uint64_t)klen, (uint64_t)vlen);
    /* every allocation first: a failure leaves the map as it was (an existing key is not lost) */
    if (dm_slots_reserve(m) < 0) return -1;
    if ((m->acap == 0 || m->aend + dm_pad(m, size) + size - dm_lo(m) > m->acap)
        && dm_arena_rebase(m, arena_size((m->aend - dm_lo(m) + size) * 3 / 2)) < 0)
        return -1;
    if (m->pend - m->plo >= m->ocap && dm_offs_resize(m, 1) < 0) return -1;
    uint64_t h = dm_hash(m->seed, k, (size_t)klen);
    dm_slot *s = dm_find(m, h, k, (size_t)klen);
    if (s != NULL) {
        if (keep_existing) return 1;
        rec_at(m, s->off - 1)->live = 0; /* its position becomes stale */
        dm_slot_delete(m, (uint64_t)(s - m->slots));
        m->used--;
    }
    uint64_t off = m->aend + dm_pad(m, size);
    dm_rec *r = rec_at(m, off);
    r->hash = h;
    r->ts = ts;
    r->klen = (uint32_t)klen;
    r->vlen = (uint32_t)vlen;
    r->live = 1;
    r->pad = 0;
    memcpy((char *)(r + 1), k, (size_t)klen);
    memcpy((char *)(r + 1) + klen, v, (size_t)vlen);
    m->aend = off + size;
    m->offs[m->pend - m->plo] = off;
    m->pend++;
    dm_index(m, h, off);
    m->used++;
    return 0;
}

/* ---- Python API ---- */

/* the UTF-8 bytes of str `s` (surrogates passed through, as the twin's str keys may hold them); *tmp owns them
 * when they had to be encoded */
static const char *dm_utf8(PyObject *s, Py_ssize_t *n, PyObject **tmp) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "DedupMap keys and entries are str, not %.100s", Py_TYPE(s)->tp_name);
        return NULL;
    }
    if (PyUnicode_IS_COMPACT_ASCII(s)) {
        *n = PyUnicode_GET_LENGTH(s);
        return (const char *)PyUnicode_DATA(s);
    }
    *tmp = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (*tmp == NULL) return NULL;
    *n = PyBytes_GET_SIZE(*tmp);
    return PyBytes_AS_STRING(*tmp);
}

static PyObject *dm_str(const char *p, uint32_t n) { return PyUnicode_DecodeUTF8(p, n, "surrogatepass"); }

static dm_slot *dm_lookup(DedupMap *m, PyObject *key) { /* NULL with an error set, or NULL for a missing key */
    PyObject *tmp = NULL;
    Py_ssize_t n;
    const char *k = dm_utf8(key, &n, &tmp);
    if (k == NULL) return NULL;
    dm_slot *s = dm_find(m, dm_hash(m->seed, k, (size_t)n), k, (size_t)n);
    Py_XDECREF(tmp);
    return s;
}

static PyObject *dm_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"seed", NULL};
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|K:DedupMap", kwlist, &seed)) return NULL;
    DedupMap *m = (DedupMap *)type->tp_alloc(type, 0);
    if (m == NULL) return NULL;
    m->seed = (uint64_t)seed; /* tp_alloc zeroed the rest */
    return (PyObject *)m;
}

static void dm_free_arrays(DedupMap *m) {
    dm_release(m->arena, m->acap);
    dm_release(m->offs, m->ocap * sizeof(uint64_t));
    dm_release(m->slots, m->nslots * sizeof(dm_slot));
    uint64_t seed = m->seed;
    memset((char *)m + sizeof(PyObject), 0, sizeof(DedupMap) - sizeof(PyObject));
    m->seed = seed;
}

static void dm_dealloc(DedupMap *m) {
    dm_free_arrays(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static Py_ssize_t dm_len(DedupMap *m) { return (Py_ssize_t)m->used; }

static int dm_contains(DedupMap *m, PyObject *key) {
    dm_slot *s = dm_lookup(m, key);
    if (s == NULL) return PyErr_Occurred() ? -1 : 0;
    return 1;
}

static PyObject *dm_value_of(DedupMap *m, dm_slot *s) {
    dm_rec *r = rec_at(m, s->off - 1);
    return dm_str(rec_value(r), r->vlen);
}

static PyObject *dm_subscript(DedupMap *m, PyObject *key) {
    dm_slot *s = dm_lookup(m, key);
    if (s == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return dm_value_of(m, s);
}

static int dm_ass_subscript(DedupMap *m, PyObject *key, PyObject *value) {
    if (value != NULL) {
        PyErr_SetString(PyExc_TypeError, "DedupMap: use put(key, entry)");
        return -1;
    }
    dm_slot *s = dm_lookup(m, key);
    if (s == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    rec_at(m, s->off - 1)->live = 0;
    dm_slot_delete(m, (uint64_t)(s - m->slots));
    m->used--;
    return 0;
}

static PyObject *dm_get(DedupMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    dm_slot *s = dm_lookup(m, args[0]);
    if (s != NULL) return dm_value_of(m, s);
    if (PyErr_Occurred()) return NULL;
    return Py_NewRef(nargs == 2 ? args[1] : Py_None);
}

/* the store time: the entry's decimal prefix before the first 0x1f */
static int dm_entry_ts(const char *v, Py_ssize_t n, int64_t *ts) {
    Py_ssize_t i = 0;
    int neg = 0;
    if (n > 0 && v[0] == '-') {
        neg = 1;
        i = 1;
    }
    uint64_t acc = 0;
    Py_ssize_t start = i;
    for (; i < n && v[i] >= '0' && v[i] <= '9'; i++) {
        if (acc > (UINT64_C(1) << 62) / 10) return -1;
        acc = acc * 10 + (uint64_t)(v[i] - '0');
    }
    if (i == start || i >= n || v[i] != 0x1f) return -1;
    *ts = neg ? -(int64_t)acc : (int64_t)acc;
    return 0;
}

static PyObject *dm_put_py(DedupMap *m, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"key", "entry", "keep_existing", NULL};
    PyObject *key, *value;
    int keep = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|$p:put", kwlist, &key, &value, &keep)) return NULL;
    PyObject *kt = NULL, *vt = NULL, *res = NULL;
    Py_ssize_t kn, vn;
    int64_t ts;
    const char *k = dm_utf8(key, &kn, &kt);
    const char *v = k == NULL ? NULL : dm_utf8(value, &vn, &vt);
    if (v == NULL) goto out;
    if (dm_entry_ts(v, vn, &ts) < 0) {
        PyErr_SetString(PyExc_ValueError, "de-dup entry without a store time");
        goto out;
    }
    if (orbitmq_dm_put((PyObject *)m, k, kn, v, vn, ts, keep) >= 0) res = Py_NewRef(Py_None);
out:
    Py_XDECREF(kt);
    Py_XDECREF(vt);
    return res;
}

/* after eviction: give back what a burst made the arrays grow to, once a buffer a quarter the size (or less) holds
 * twice the live part, and the index once a quarter of it holds the live entries at load 1/4 */
static void dm_maybe_shrink(DedupMap *m) {
    if (m->acap >= SHRINK_FROM) {
        uint64_t cap = arena_size(2 * (m->aend - dm_lo(m)));
        if (cap * 4 <= m->acap && dm_arena_rebase(m, cap) < 0) PyErr_Clear();
    }
    if (m->ocap * sizeof(uint64_t) >= SHRINK_FROM && pow2_at_least(2 * (m->pend - m->head), OFFS_MIN) * 4 <= m->ocap
        && dm_offs_resize(m, 0) < 0)
        PyErr_Clear();
    if (m->nslots * sizeof(dm_slot) >= SHRINK_FROM) {
        uint64_t n = pow2_at_least(4 * (m->used + 1), SLOTS_MIN);
        if (n * 4 <= m->nslots && dm_slots_rebuild(m, n) < 0) PyErr_Clear();
    }
}

static PyObject *dm_evict(DedupMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "evict(limit, max_entries)");
        return NULL;
    }
    long long limit = PyLong_AsLongLong(args[0]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    long long max_entries = PyLong_AsLongLong(args[1]);
    if (max_entries == -1 && PyErr_Occurred()) return NULL;
    PyObject *res = NULL;
    while (m->head < m->pend) {
        uint64_t off = m->offs[m->head - m->plo];
        dm_rec *r = rec_at(m, off);
        if (r->live) {
            if ((long long)m->used <= max_entries && r->ts >= limit) {
                res = PyLong_FromLongLong(r->ts);
                break;
            }
            dm_unindex(m, r->hash, off);
            r->live = 0;
            m->used--;
        }
        m->head++;
    }
    dm_maybe_shrink(m);
    return res != NULL || PyErr_Occurred() ? res : Py_NewRef(Py_None);
}

/* (key, entry) of each live record at positions [start, end) (keys only when `pairs` is 0), oldest first */
static PyObject *dm_walk(DedupMap *m, uint64_t start, uint64_t end, int pairs) {
    if (start < m->head) start = m->head;
    if (end > m->pend) end = m->pend;
    PyObject *out = PyList_New(0);
    for (uint64_t p = start; out != NULL && p < end; p++) {
        dm_rec *r = rec_at(m, m->offs[p - m->plo]);
        if (!r->live) continue;
        PyObject *k = dm_str(rec_key(r), r->klen), *item = k;
        if (k != NULL && pairs) {
            PyObject *v = dm_str(rec_value(r), r->vlen);
            item = v == NULL ? NULL : PyTuple_Pack(2, k, v);
            Py_DECREF(k);
            Py_XDECREF(v);
        }
        if (item == NULL || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
    }
    return out;
}

static PyObject *dm_rows(DedupMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "rows(start, end)");
        return NULL;
    }
    long long start = PyLong_AsLongLong(args[0]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    long long end = PyLong_AsLongLong(args[1]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    return dm_walk(m, start < 0 ? 0 : (uint64_t)start, end < 0 ? 0 : (uint64_t)end, 1);
}

static PyObject *dm_keys(DedupMap *m, PyObject *unused) { return dm_walk(m, m->head, m->pend, 0); }
static PyObject *dm_items(DedupMap *m, PyObject *unused) { return dm_walk(m, m->head, m->pend, 1); }

static PyObject *dm_iter(DedupMap *m) {
    PyObject *keys = dm_walk(m, m->head, m->pend, 0);
    if (keys == NULL) return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyObject *dm_clear(DedupMap *m, PyObject *unused) {
    dm_free_arrays(m);
    Py_RETURN_NONE;
}

static PyObject *dm_get_position(DedupMap *m, void *c) { return PyLong_FromUnsignedLongLong(m->pend); }
static PyObject *dm_get_head(DedupMap *m, void *c) { return PyLong_FromUnsignedLongLong(m->head); }
static PyObject *dm_get_nbytes(DedupMap *m, void *c) {
    return PyLong_FromUnsignedLongLong(m->acap + m->ocap * sizeof(uint64_t) + m->nslots * sizeof(dm_slot));
}

static PyMethodDef dm_methods[] = {
    {"put", (PyCFunction)(void (*)(void))dm_put_py, METH_VARARGS | METH_KEYWORDS,
     "put(key, entry, *, keep_existing=False): remember entry (its store time first) at the young end"},
    {"get", (PyCFunction)(void (*)(void))dm_get, METH_FASTCALL, "get(key, default=None)"},
    {"evict", (PyCFunction)(void (*)(void))dm_evict, METH_FASTCALL,
     "evict(limit, max_entries): drop entries from the old end while there are more than max_entries or the oldest "
     "is older than limit; the store time of the oldest kept, or None when empty"},
    {"rows", (PyCFunction)(void (*)(void))dm_rows, METH_FASTCALL,
     "rows(start, end): [(key, entry)] of the live positions in [start, end), oldest first"},
    {"keys", (PyCFunction)dm_keys, METH_NOARGS, "the keys, oldest first (a list)"},
    {"items", (PyCFunction)dm_items, METH_NOARGS, "(key, entry) pairs, oldest first (a list)"},
    {"clear", (PyCFunction)dm_clear, METH_NOARGS, "forget everything, positions from 0 again"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef dm_getset[] = {
    {"position", (getter)dm_get_position, NULL, "the position of the next put", NULL},
    {"head", (getter)dm_get_head, NULL, "the first position not evicted", NULL},
    {"nbytes", (getter)dm_get_nbytes, NULL, "bytes allocated for the arrays", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMappingMethods dm_as_mapping = {(lenfunc)dm_len, (binaryfunc)dm_subscript, (objobjargproc)dm_ass_subscript};
static PySequenceMethods dm_as_sequence = {.sq_length = (lenfunc)dm_len, .sq_contains = (objobjproc)dm_contains};

PyTypeObject orbitmq_DedupMap_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "orbitmq.base._speedups.DedupMap",
    .tp_basicsize = sizeof(DedupMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The de-dup table's str -> str map in insertion order, without a Python object per entry.",
    .tp_new = dm_new,
    .tp_dealloc = (destructor)dm_dealloc,
    .tp_as_mapping = &dm_as_mapping,
    .tp_as_sequence = &dm_as_sequence,
    .tp_iter = (getiterfunc)dm_iter,
    .tp_methods = dm_methods,
    .tp_getset = dm_getset,
};

int orbitmq_dm_add_type(PyObject *module) {
    if (PyType_Ready(&orbitmq_DedupMap_Type) < 0) return -1;
    Py_INCREF(&orbitmq_DedupMap_Type);
    if (PyModule_AddObject(module, "DedupMap", (PyObject *)&orbitmq_DedupMap_Type) < 0) {
        Py_DECREF(&orbitmq_DedupMap_Type);
        return -1;
    }
    return 0;
}
