/* Optional native twins of the per-message hot paths (see docs/design/performance.md, "Native fast path").
 *
 * Every function here has a pure-Python twin in the tree that is the reference; the Python modules import this
 * extension when it was built and fall back silently otherwise. tests/property/test_speedups_props.py feeds the
 * same generated inputs to both and requires identical results. API_VERSION (module init) must match
 * orbitmq/base/native.py's.
 *
 *   crc32(data)                      zlib.crc32(data) (slicing-by-8 table, no zlib headers needed)
 *   java_hash(s)                     model/tags.py java_hash_py: Java String.hashCode over UTF-16 code units
 *   command_from_header(cls, header, body)
 *                                    protocol/header_json.py command_from_header_py: the common JSON header shape
 *                                    to a RemotingCommand, None for anything the general decoder must decide
 *   encode_json_frame(cmd)           protocol/frame.py encode_json_frame_py: the whole serialize-type-0 frame of a
 *                                    command of the common shape (plain strings, int fields, str extFields), None
 *                                    for anything the Python encoder must decide (escapes, conversions, errors)
 *   decode_send_v2(cls, ext)         protocol/headers.py decode_send_v2_py: the common send extFields (V2 or V1)
 *                                    to a SendMessageRequestHeader, None for anything the Python decoder decides
 *   decode_properties(text)          model/properties.py decode_properties_py
 *   encode_record_into(buf, pos, ...) model/record.py encode_record_into_py: one stored record written in place
 *   decode_record_v4(buf, pos, check_crc, cls, host_memo)
 *                                    model/record.py decode_record_py's fast path (V1 magic, IPv4 hosts); returns
 *                                    None whenever the general Python decoder must decide (it raises the errors)
 *   decode_records_v4(buf, pos, cls, host_memo)
 *                                    model/record.py iter_records_py: consecutive common records, (list, next pos)
 *   index_put(buf, entries_at, slot_num, n, key_hash, phys, store_ts, begin_ts, begin_phys, slot_count)
 *                                    store/index_file.py index_put_py: entry n, its slot and the header in place
 *   split_batch_body(body)           broker/handlers/send.py decode_batch_body_py; None whenever the body is
 *                                    malformed (the Python decoder raises the error)
 *   encode_run_into(buf, pos, topic, born, store, queue_id, queue_offset, seg_base, store_ts, msgs, props,
 *                   id_prefix)       model/record.py encode_run_into_py: a one-queue run of records, msg ids
 *   index_put_key(buf, entries_at, slot_num, n, topic, key, phys, store_ts, begin_ts, begin_phys, slot_count)
 *                                    store/index_file.py index_put_key_py: index_put of the key "topic#key"
 *   new_slotted(cls, *values)        cls(*values) for a class whose __init__ only assigns its __slots__ in order
 *   parse_json_header(data)          orjson.loads(data) for a JSON header of the plain shape, else None
 *   decode_frames(data, max_frame_size, cls)
 *                                    protocol/frame.py FrameDecoder._parse_view for the common JSON frames at the
 *                                    start of a read: (commands, where the Python parser goes on)
 *   append_singles(msgs, hosts, max_body, max_record, max_total, begin, table, schedule_topic, dispatch_cls,
 *                  result_cls, put_ok)
 *                                    store/commitlog.py append_singles_py: several single-message puts in one
 *                                    pass (records, queue offsets, PutResults, DispatchRequests)
 *   put_ok_answer(cls, code, head, msg_id, queue_id, queue_offset, opaque, tail)
 *                                    broker/handlers/send.py put_ok_answer_py: the PUT_OK answer's frame in one buffer
 *   dedup_remember(items, start, map, put_ok, skip_prefixes, skip_topics)
 *                                    broker/services/dedup.py DedupService.after_put_many_py's loop for the common
 *                                    stored single: (where the Python code goes on, last store time)
 *   DedupMap(seed)                   broker/services/dedup.py PyDedupMap: the de-dup table's map (_dedupmap.c)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_dedupmap.h"

static PyObject *struct_error; /* struct.error: what struct.pack raises for an out-of-range field */

/* ---- CRC32 (IEEE, reflected, as zlib) --------------------------------------------------------------- */
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
#if PY_BIG_ENDIAN
        a = __builtin_bswap32(a);
        b = __builtin_bswap32(b);
#endif
        a ^= crc;
        crc = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^ crc_table[5][(a >> 16) & 0xFF] ^
              crc_table[4][a >> 24] ^ crc_table[3][b & 0xFF] ^ crc_table[2][(b >> 8) & 0xFF] ^
              crc_table[1][(b >> 16) & 0xFF] ^ crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static PyObject *sp_crc32(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = crc32_update(0, (const unsigned char *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/* ---- Java String.hashCode ---------------------------------------------------------------------------- */
/* Java String.hashCode of str s over its UTF-16 code units; *ok = 0 for a lone surrogate (no UTF-16 form). */
static uint32_t java_hash_units(PyObject *s, int *ok) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    uint32_t h = 0;
    *ok = 1;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *u = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++) h = 31u * h + u[i];
        return h;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF) {
            *ok = 0;
            return 0;
        }
        if (c >= 0x10000) {
            c -= 0x10000;
            h = 31u * h + (0xD800u + (c >> 10));
            h = 31u * h + (0xDC00u + (c & 0x3FF));
        } else {
            h = 31u * h + c;
        }
    }
    return h;
}

static PyObject *sp_java_hash(PyObject *self, PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "java_hash() argument must be str, not %.100s", Py_TYPE(s)->tp_name);
        return NULL;
    }
    int ok;
    uint32_t h = java_hash_units(s, &ok);
    if (!ok) { /* a lone surrogate has no UTF-16 form: raise what the Python twin's encode raises */
        PyObject *r = PyUnicode_AsEncodedString(s, "utf-16-be", "strict");
        Py_XDECREF(r);
        if (r != NULL) PyErr_SetString(PyExc_ValueError, "lone surrogate");
        return NULL;
    }
    return PyLong_FromLong((long)(int32_t)h);
}

/* ---- remoting command from a decoded JSON header (fast path) ------------------------------------------ */
/* command_from_header(cls, header, body) -> cls instance or None.
 * header is what orjson.loads gave for a serialize-type-0 header. The common shape only: a dict whose code,
 * version, opaque and flag are ints (code present, the others default to 0), language a str, remark absent/null
 * or a str, extFields absent/null or a dict of str values (kept as is, not copied) or of str keys and str / int /
 * bool / null values (the C++ client sends queueId, sysFlag, flag and defaultTopicQueueNums as numbers): a new
 * dict as the general decoder converts it (ints in decimal, booleans "true"/"false", nulls dropped). Anything
 * else returns None and protocol/header_json.py's general decoder decides (conversions, defaults and
 * ProtocolErrors). */
static PyObject *hdr_keys[7];  /* code, version, opaque, flag, language, remark, extFields */
static PyObject *cmd_attrs[9]; /* code, version, opaque, flag, language, remark, ext_fields, body, serialize_type */
static PyObject *int_zero, *str_true, *str_false;

/* extFields with a non-str value -> the converted copy, or None (not converted here) with no error set. */
static PyObject *ext_converted(PyObject *ext) {
    Py_ssize_t pos = 0;
    PyObject *k, *val;
    while (PyDict_Next(ext, &pos, &k, &val))
        if (!PyUnicode_CheckExact(k) || !(PyUnicode_CheckExact(val) || val == Py_None || val == Py_True ||
                                          val == Py_False || PyLong_CheckExact(val)))
            return Py_NewRef(Py_None);
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    pos = 0;
    while (PyDict_Next(ext, &pos, &k, &val)) {
        PyObject *text;
        if (val == Py_None) continue;
        if (val == Py_True) text = Py_NewRef(str_true);
        else if (val == Py_False) text = Py_NewRef(str_false);
        else if (PyUnicode_CheckExact(val)) text = Py_NewRef(val);
        else if ((text = PyObject_Str(val)) == NULL) { /* e.g. beyond the int str() digit limit: general path */
            PyErr_Clear();
            Py_DECREF(out);
            return Py_NewRef(Py_None);
        }
        int rc = PyDict_SetItem(out, k, text);
        Py_DECREF(text);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static int header_names_init(void) {
    static const char *keys[7] = {"code", "version", "opaque", "flag", "language", "remark", "extFields"};
    static const char *attrs[9] = {"code",   "version",    "opaque", "flag",          "language",
                                   "remark", "ext_fields", "body",   "serialize_type"};
    for (int i = 0; i < 7; i++)
        if ((hdr_keys[i] = PyUnicode_InternFromString(keys[i])) == NULL) return -1;
    for (int i = 0; i < 9; i++)
        if ((cmd_attrs[i] = PyUnicode_InternFromString(attrs[i])) == NULL) return -1;
    int_zero = PyLong_FromLong(0);
    str_true = PyUnicode_InternFromString("true");
    str_false = PyUnicode_InternFromString("false");
    return int_zero == NULL || str_true == NULL || str_false == NULL ? -1 : 0;
}

/* Where cls stores each of cmd_attrs: __slots__ members are written in place (what their descriptors do),
 * looked up once per class and again whenever the class changes (its version tag). Any attribute that is not a
 * plain object slot makes the class use PyObject_SetAttr instead. */
static PyTypeObject *slots_cls;      /* strong reference */
static unsigned int slots_version;
static Py_ssize_t slots_off[9];      /* all > 0 when usable */

static int slot_offsets(PyTypeObject *tp) {
    if (tp == slots_cls && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == slots_version)
        return slots_off[0] > 0;
    Py_ssize_t off[9];
    int usable = 1;
    for (int i = 0; i < 9 && usable; i++) {
        PyObject *descr = _PyType_Lookup(tp, cmd_attrs[i]); /* borrowed; refreshes the version tag */
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
            usable = 0;
            break;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY) || m->offset <= 0) usable = 0;
        off[i] = m->offset;
    }
    Py_INCREF(tp);
    Py_XSETREF(slots_cls, tp);
    slots_version = (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    for (int i = 0; i < 9; i++) slots_off[i] = usable ? off[i] : 0;
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) /* no version tag to notice a change by: not cached */
        Py_CLEAR(slots_cls);
    return usable;
}

static PyObject *sp_command_from_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "command_from_header(cls, header, body)");
        return NULL;
    }
    PyObject *cls = args[0], *d = args[1], *v[9];
    if (!PyDict_CheckExact(d)) Py_RETURN_NONE;
    PyObject *zero = int_zero;
    for (int i = 0; i < 4; i++) { /* code (required), version, opaque, flag */
        PyObject *x = PyDict_GetItemWithError(d, hdr_keys[i]);
        if (x == NULL) {
            if (PyErr_Occurred()) return NULL;
            if (i == 0) Py_RETURN_NONE;
            x = zero;
        }
        if (!PyLong_CheckExact(x)) Py_RETURN_NONE;
        v[i] = x;
    }
    PyObject *x = PyDict_GetItemWithError(d, hdr_keys[4]); /* language */
    if (x == NULL && PyErr_Occurred()) return NULL;
    if (x == NULL || !PyUnicode_CheckExact(x)) Py_RETURN_NONE;
    v[4] = x;
    x = PyDict_GetItemWithError(d, hdr_keys[5]); /* remark */
    if (x == NULL && PyErr_Occurred()) return NULL;
    if (x == NULL) x = Py_None;
    if (x != Py_None && !PyUnicode_CheckExact(x)) Py_RETURN_NONE;
    v[5] = x;
    x = PyDict_GetItemWithError(d, hdr_keys[6]); /* extFields */
    if (x == NULL && PyErr_Occurred()) return NULL;
    if (x == NULL) x = Py_None;
    PyObject *converted = NULL; /* owned: extFields converted from non-str values */
    if (x != Py_None) {
        if (!PyDict_CheckExact(x)) Py_RETURN_NONE;
        Py_ssize_t pos = 0;
        PyObject *k, *val;
        while (PyDict_Next(x, &pos, &k, &val))
            if (!PyUnicode_CheckExact(val)) {
                converted = ext_converted(x);
                if (converted == NULL || converted == Py_None) return converted;
                x = converted;
                break;
            }
    }
    v[6] = x;
    v[7] = args[2];
    v[8] = zero;
    PyTypeObject *tp = (PyTypeObject *)cls;
    PyObject *cmd = tp->tp_alloc(tp, 0);
    if (cmd == NULL) {
        Py_XDECREF(converted);
        return NULL;
    }
    if (slot_offsets(tp)) {
        for (int i = 0; i < 9; i++) {
            PyObject **slot = (PyObject **)((char *)cmd + slots_off[i]);
            Py_XSETREF(*slot, Py_NewRef(v[i]));
        }
        Py_XDECREF(converted);
        return cmd;
    }
    for (int i = 0; i < 9; i++) {
        if (PyObject_SetAttr(cmd, cmd_attrs[i], v[i]) < 0) {
            Py_DECREF(cmd);
            Py_XDECREF(converted);
            return NULL;
        }
    }
    Py_XDECREF(converted);
    return cmd;
}

/* ---- decode_send_v2(cls, ext): the common SEND_MESSAGE_V2 header -------------------------------------
 * protocol/headers.py decode_send_v2_py: a dict of str keys and str values, each field once by its V1 name or
 * (when "a" or "b" is a key) its V2 letter, other keys ignored; the required fields present, every int field
 * present written as plain ASCII decimal (-?[0-9]{1,19}) within its Java range -> a SendMessageRequestHeader (cls)
 * with every attribute set; anything else None (the Python decoder decides: defaults, lenient parses, errors). */
/* ---- slotted instances ---------------------------------------------------------------------------- */
/* Instances of slotted classes built without their __init__: the slots written through the member offsets the
 * class's descriptors name (what the generated __init__ assigns, nothing else: no defaults, no
 * __post_init__). The layout is read once per class and checked every time the class object changes. */
typedef struct {
    PyTypeObject *cls;
    int n;
    Py_ssize_t off[16];
} slot_layout;

static int slot_layout_of(slot_layout *lay, PyObject *cls, const char *const *names, int n) {
    if (lay->cls == (PyTypeObject *)cls) return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "expected a class");
        return -1;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString(cls, names[i]); /* the member descriptor, from the class or a base */
        if (d == NULL) return -1;
        int is_member = Py_TYPE(d) == &PyMemberDescr_Type;
        PyMemberDef *md = is_member ? ((PyMemberDescrObject *)d)->d_member : NULL;
        Py_DECREF(d); /* the class keeps it */
        if (!is_member) {
            PyErr_Format(PyExc_TypeError, "%.100s.%s is not a slot", tp->tp_name, names[i]);
            return -1;
        }
        if (md->type != T_OBJECT_EX || (md->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "%.100s.%s is not a writable object slot", tp->tp_name, names[i]);
            return -1;
        }
        lay->off[i] = md->offset;
    }
    lay->n = n;
    Py_INCREF(cls);
    Py_XDECREF((PyObject *)lay->cls);
    lay->cls = tp;
    return 0;
}

/* New instance with every slot set; steals the references in v (all of them, also on failure). */
static PyObject *slotted_new(slot_layout *lay, PyObject **v) {
    PyObject *o = lay->cls->tp_alloc(lay->cls, 0);
    if (o == NULL) {
        for (int i = 0; i < lay->n; i++) Py_XDECREF(v[i]);
        return NULL;
    }
    for (int i = 0; i < lay->n; i++) *(PyObject **)((char *)o + lay->off[i]) = v[i];
    return o;
}

static PyObject *send_attrs[14]; /* indexed by letter - 'a' */
static PyObject *str_tbw102, *int_four, *str_a, *str_b, *send_key_index;

/* new_slotted(cls, *values) -> cls instance   (API 8)
 * cls(*values) for a class whose __init__ only assigns its __slots__, in order (a slotted dataclass without
 * defaults taken, EncodedResponse): the slots written directly. The layout of the last few classes is kept. */
#define SLOTTED_CACHE 4
static slot_layout slotted_cache[SLOTTED_CACHE];
static int slotted_next;

static slot_layout *layout_of_slots(PyObject *cls, Py_ssize_t nvalues) {
    for (int i = 0; i < SLOTTED_CACHE; i++)
        if (slotted_cache[i].cls == (PyTypeObject *)cls) return slotted_cache[i].n == nvalues ? &slotted_cache[i] : NULL;
    if (!PyType_Check(cls)) return NULL;
    PyObject *slots = PyObject_GetAttrString(cls, "__slots__");
    if (slots == NULL) {
        PyErr_Clear();
        return NULL;
    }
    slot_layout *lay = NULL;
    if (PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == nvalues && nvalues <= 16) {
        const char *names[16];
        int ok = 1;
        for (Py_ssize_t i = 0; i < nvalues && ok; i++) {
            PyObject *name = PyTuple_GET_ITEM(slots, i);
            ok = PyUnicode_Check(name) && (names[i] = PyUnicode_AsUTF8(name)) != NULL;
        }
        slot_layout fresh = {0};
        if (ok && slot_layout_of(&fresh, cls, names, (int)nvalues) == 0) {
            slot_layout *slot = &slotted_cache[slotted_next];
            slotted_next = (slotted_next + 1) % SLOTTED_CACHE;
            Py_XDECREF((PyObject *)slot->cls);
            *slot = fresh; /* owns the class reference slot_layout_of took */
            lay = slot;
        }
    }
    Py_DECREF(slots);
    PyErr_Clear();
    return lay;
}

static PyObject *sp_new_slotted(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "new_slotted(cls, *values)");
        return NULL;
    }
    slot_layout *lay = layout_of_slots(args[0], nargs - 1);
    if (lay == NULL) return PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), NULL); /* cls(*values) */
    PyObject *v[16];
    for (Py_ssize_t i = 1; i < nargs; i++) v[i - 1] = Py_NewRef(args[i]);
    return slotted_new(lay, v);
}

static const char *const send_names[14] = {"producer_group", "topic", "default_topic", "default_topic_queue_nums",
                                           "queue_id", "sys_flag", "born_timestamp", "flag", "properties",
                                           "reconsume_times", "unit_mode", "max_reconsume_times", "batch", "bname"};
static slot_layout send_layout;

static int send_names_init(void) {
    for (int i = 0; i < 14; i++)
        if ((send_attrs[i] = PyUnicode_InternFromString(send_names[i])) == NULL) return -1;
    static const char *v1[14] = {"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                                 "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
                                 "maxReconsumeTimes", "batch", "bname"};
    if ((send_key_index = PyDict_New()) == NULL) return -1;
    for (int i = 0; i < 14; i++) {
        char letter[2] = {(char)('a' + i), 0};
        PyObject *n1 = PyLong_FromLong(i), *n2 = PyLong_FromLong(16 + i);
        int bad = n1 == NULL || n2 == NULL || PyDict_SetItemString(send_key_index, v1[i], n1) < 0 ||
                  PyDict_SetItemString(send_key_index, letter, n2) < 0;
        Py_XDECREF(n1);
        Py_XDECREF(n2);
        if (bad) return -1;
    }
    str_tbw102 = PyUnicode_InternFromString("TBW102");
    str_a = PyUnicode_InternFromString("a");
    str_b = PyUnicode_InternFromString("b");
    int_four = PyLong_FromLong(4);
    return (str_tbw102 == NULL || int_four == NULL || str_a == NULL || str_b == NULL) ? -1 : 0;
}

/* Plain decimal within [lo, hi] -> 1 and *out; anything else 0. */
static int plain_decimal(PyObject *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!PyUnicode_IS_ASCII(s)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const char *p = (const char *)PyUnicode_DATA(s);
    int neg = 0;
    if (n > 0 && p[0] == '-') {
        neg = 1;
        p++;
        n--;
    }
    if (n < 1 || n > 19) return 0;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (uint64_t)(p[i] - '0'); /* 19 digits < 2^64: no overflow */
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return 0;
        int64_t x = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        if (x < lo) return 0;
        *out = x;
    } else {
        if (v > (uint64_t)INT64_MAX || (int64_t)v > hi) return 0;
        *out = (int64_t)v;
    }
    return 1;
}

/* ASCII case-insensitive "true" (what str.lower() == "true" is for any str). */
static int is_true_text(PyObject *s) {
    if (!PyUnicode_IS_ASCII(s) || PyUnicode_GET_LENGTH(s) != 4) return 0;
    const char *p = (const char *)PyUnicode_DATA(s);
    return (p[0] | 0x20) == 't' && (p[1] | 0x20) == 'r' && (p[2] | 0x20) == 'u' && (p[3] | 0x20) == 'e';
}

static PyObject *sp_decode_send_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_send_v2(cls, ext)");
        return NULL;
    }
    PyObject *ext = args[1];
    if (!PyDict_CheckExact(ext)) Py_RETURN_NONE;
    PyObject *f[14] = {NULL}; /* borrowed values by letter */
    int letters = PyDict_Contains(ext, str_a);
    if (letters == 0) letters = PyDict_Contains(ext, str_b);
    if (letters < 0) return NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *val;
    while (PyDict_Next(ext, &pos, &k, &val)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(val)) Py_RETURN_NONE;
        if (letters && PyUnicode_GET_LENGTH(k) == 1 && PyUnicode_IS_ASCII(k)) { /* a V2 letter: no lookup */
            long i = (long)((const unsigned char *)PyUnicode_DATA(k))[0] - 'a';
            if (i < 0 || i >= 14) continue; /* another key: ignored */
            if (f[i] != NULL) Py_RETURN_NONE;
            f[i] = val;
            continue;
        }
        PyObject *ix = PyDict_GetItemWithError(send_key_index, k); /* long name -> i, letter -> 16 + i */
        if (ix == NULL) {
            if (PyErr_Occurred()) return NULL;
            continue; /* another key: ignored, as by the general path */
        }
        long i = PyLong_AsLong(ix);
        if (i >= 16) {
            if (!letters) continue; /* not a V2 header: letters are other keys */
            i -= 16;
        }
        if (f[i] != NULL) Py_RETURN_NONE; /* a field by both names: the general path decides */
        f[i] = val;
    }
    static const int required[6] = {0, 1, 4, 5, 6, 7};
    for (int i = 0; i < 6; i++)
        if (f[required[i]] == NULL) Py_RETURN_NONE;
    /* int fields: e f g h (required), j d l (optional) */
    static const int int_idx[7] = {4, 5, 6, 7, 9, 3, 11};
    int64_t nums[7];
    for (int i = 0; i < 7; i++) {
        PyObject *s = f[int_idx[i]];
        if (s == NULL) continue;
        int64_t lo = int_idx[i] == 6 ? INT64_MIN : INT32_MIN, hi = int_idx[i] == 6 ? INT64_MAX : INT32_MAX;
        if (!plain_decimal(s, lo, hi, &nums[i])) Py_RETURN_NONE;
    }
    PyObject *v[14];
    int owned[14] = {0};
    for (int i = 0; i < 14; i++) v[i] = f[i] != NULL ? f[i] : Py_None;
    int ok = 1;
    for (int i = 0; i < 7 && ok; i++) {
        int idx = int_idx[i];
        if (f[idx] == NULL) continue;
        if ((v[idx] = PyLong_FromLongLong(nums[i])) == NULL) ok = 0;
        else owned[idx] = 1;
    }
    if (f[9] == NULL) v[9] = int_zero;  /* reconsume_times */
    if (f[3] == NULL) v[3] = int_four;  /* default_topic_queue_nums */
    if (f[2] == NULL) v[2] = str_tbw102; /* default_topic */
    v[10] = (f[10] != NULL && is_true_text(f[10])) ? Py_True : Py_False; /* unit_mode */
    if (f[12] == NULL) v[12] = Py_False; /* batch: "1" or "true" in any case */
    else v[12] = (PyUnicode_CompareWithASCIIString(f[12], "1") == 0 || is_true_text(f[12])) ? Py_True : Py_False;
    PyObject *h = NULL;
    if (ok && slot_layout_of(&send_layout, args[0], send_names, 14) == 0) { /* the slots written directly */
        PyObject *refs[14];
        for (int i = 0; i < 14; i++) refs[i] = Py_NewRef(v[i]);
        h = slotted_new(&send_layout, refs);
    } else if (ok) { /* not a class of 14 object slots: through setattr */
        PyErr_Clear();
        PyTypeObject *tp = (PyTypeObject *)args[0];
        h = tp->tp_alloc(tp, 0);
        for (int i = 0; h != NULL && i < 14; i++) {
            if (PyObject_SetAttr(h, send_attrs[i], v[i]) < 0) Py_CLEAR(h);
        }
    }
    for (int i = 0; i < 14; i++)
        if (owned[i]) Py_DECREF(v[i]);
    return h;
}

/* ---- short strings seen again and again ------------------------------------------------------------ */
/* The short values of request headers and the names and short values of message properties repeat from one
 * request to the next (a topic, a group, "0", "false", "JAVA", UNIQ_KEY, TAGS): small_ascii gives the str of
 * p[0..n) (ASCII) from a direct-mapped cache of the last one seen per slot instead of a new one each
 * time. Long strings and long runs of digits (timestamps, offsets) are not cached: they seldom repeat, and would
 * push out the ones that do. Strings are immutable, so sharing one is invisible to the caller. */
#define SCACHE_SLOTS 512
#define SCACHE_MAXLEN 24
static PyObject *scache[SCACHE_SLOTS];

static PyObject *small_ascii(const unsigned char *p, Py_ssize_t n) {
    if (n > SCACHE_MAXLEN || n == 0) return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, p, n);
    uint32_t h = 2166136261u;
    int digits = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 16777619u;
        digits &= p[i] >= '0' && p[i] <= '9';
    }
    if (digits && n > 4) return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, p, n);
    PyObject **slot = &scache[(h ^ (h >> 15)) & (SCACHE_SLOTS - 1)];
    PyObject *c = *slot;
    if (c != NULL && PyUnicode_GET_LENGTH(c) == n && memcmp(PyUnicode_1BYTE_DATA(c), p, (size_t)n) == 0)
        return Py_NewRef(c);
    PyObject *s = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, p, n);
    if (s != NULL) Py_XSETREF(*slot, Py_NewRef(s));
    return s;
}

/* ---- properties: name \x01 value \x02 ... ------------------------------------------------------------ */
static PyObject *decode_props_text(PyObject *text) {
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    int ascii = PyUnicode_IS_ASCII(text);
    Py_ssize_t start = 0;
    while (start <= n) {
        /* one segment [start, end): up to the next \x02 */
        Py_ssize_t end = start, sep = -1;
        while (end < n) {
            Py_UCS4 c = PyUnicode_READ(kind, data, end);
            if (c == 2) break;
            if (c == 1 && sep < 0) sep = end;
            end++;
        }
        if (sep > start && sep < end - 1) {
            PyObject *k, *v;
            if (ascii) { /* names and short values from the cache */
                k = small_ascii((const unsigned char *)data + start, sep - start);
                v = k ? small_ascii((const unsigned char *)data + sep + 1, end - sep - 1) : NULL;
            } else {
                k = PyUnicode_Substring(text, start, sep);
                v = k ? PyUnicode_Substring(text, sep + 1, end) : NULL;
            }
            if (v == NULL || PyDict_SetItem(out, k, v) < 0) {
                Py_XDECREF(k);
                Py_XDECREF(v);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(k);
            Py_DECREF(v);
        }
        start = end + 1;
    }
    return out;
}

static PyObject *sp_decode_properties(PyObject *self, PyObject *text) {
    if (text == Py_None) return PyDict_New();
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "decode_properties() argument must be str or None, not %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (PyUnicode_GET_LENGTH(text) == 0) return PyDict_New();
    return decode_props_text(text);
}

/* ---- record encode ------------------------------------------------------------------------------------ */
static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static inline uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t get64(const unsigned char *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

static int as_i32(PyObject *o, int32_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
        }
        return -1;
    }
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_SetString(struct_error, "argument out of range");
        }
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

#define BORNHOST_V6 0x10
#define STOREHOST_V6 0x20
#define MAGIC_V1 ((uint32_t)0xDAA320A7u)

/* One V1 stored record (model/record.py's layout) written at p: `total` bytes, sys_flag with its host bits set. */
typedef struct {
    const void *p;
    Py_ssize_t n;
} span;

static void write_record(unsigned char *p, uint32_t total, uint32_t crc, int32_t queue_id, int32_t flag,
                         int64_t queue_offset, int64_t phys, int32_t sys_flag, int64_t born_ts, span born,
                         int64_t store_ts, span store, int32_t reconsume, int64_t prepared, span body, span topic,
                         span props) {
    put32(p, total);
    put32(p + 4, MAGIC_V1);
    put32(p + 8, crc);
    put32(p + 12, (uint32_t)queue_id);
    put32(p + 16, (uint32_t)flag);
    put64(p + 20, (uint64_t)queue_offset);
    put64(p + 28, (uint64_t)phys);
    put32(p + 36, (uint32_t)sys_flag);
    put64(p + 40, (uint64_t)born_ts);
    p += 48;
    memcpy(p, born.p, (size_t)born.n);
    p += born.n;
    put64(p, (uint64_t)store_ts);
    p += 8;
    memcpy(p, store.p, (size_t)store.n);
    p += store.n;
    put32(p, (uint32_t)reconsume);
    put64(p + 4, (uint64_t)prepared);
    put32(p + 12, (uint32_t)body.n);
    p += 16;
    memcpy(p, body.p, (size_t)body.n);
    p += body.n;
    *p++ = (unsigned char)topic.n;
    memcpy(p, topic.p, (size_t)topic.n);
    p += topic.n;
    p[0] = (unsigned char)(props.n >> 8);
    p[1] = (unsigned char)props.n;
    memcpy(p + 2, props.p, (size_t)props.n);
}

/* encode_record_into(buf, pos, topic, body, properties, queue_id, flag, sys_flag, born_timestamp, born_host,
 *                    store_host, reconsume_times, prepared_transaction_offset, queue_offset, phys_offset,
 *                    store_timestamp, crc) -> record size */
static PyObject *sp_encode_record_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 17) {
        PyErr_Format(PyExc_TypeError, "encode_record_into() takes 17 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer out = {0}, topic = {0}, body = {0}, props = {0}, born = {0}, store = {0};
    PyObject *result = NULL;
    int32_t queue_id, flag, sys_flag, reconsume, crc_arg = 0;
    int64_t born_ts, prepared, queue_offset, phys_offset, store_ts;
    Py_ssize_t pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (PyObject_GetBuffer(args[2], &topic, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[3], &body, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[4], &props, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[9], &born, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[10], &store, PyBUF_SIMPLE) < 0) goto done;
    if (topic.len > 127) {
        PyErr_SetString(PyExc_ValueError, "topic longer than 127 bytes");
        goto done;
    }
    if (props.len > 32767) {
        PyErr_SetString(PyExc_ValueError, "properties longer than 32767 bytes");
        goto done;
    }
    if (as_i32(args[5], &queue_id) < 0 || as_i32(args[6], &flag) < 0 || as_i32(args[7], &sys_flag) < 0 ||
        as_i64(args[8], &born_ts) < 0 || as_i32(args[11], &reconsume) < 0 || as_i64(args[12], &prepared) < 0 ||
        as_i64(args[13], &queue_offset) < 0 || as_i64(args[14], &phys_offset) < 0 || as_i64(args[15], &store_ts) < 0)
        goto done;
    if (args[16] != Py_None && as_i32(args[16], &crc_arg) < 0) goto done;
    if (body.len > INT32_MAX - 4096) {
        PyErr_SetString(struct_error, "body too long");
        goto done;
    }
    sys_flag &= ~(BORNHOST_V6 | STOREHOST_V6);
    if (born.len == 20) sys_flag |= BORNHOST_V6;
    if (store.len == 20) sys_flag |= STOREHOST_V6;
    Py_ssize_t total = 48 + born.len + 8 + store.len + 16 + body.len + 1 + topic.len + 2 + props.len;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE) < 0) goto done;
    if (pos < 0 || pos > out.len || total > out.len - pos) {
        PyErr_Format(PyExc_ValueError, "record of %zd bytes does not fit the buffer at %zd", total, pos);
        goto done;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(struct_error, "record too long");
        goto done;
    }
    uint32_t crc = args[16] == Py_None
                       ? crc32_update(0, (const unsigned char *)body.buf, (size_t)body.len) & 0x7FFFFFFFu
                       : (uint32_t)crc_arg;
    write_record((unsigned char *)out.buf + pos, (uint32_t)total, crc, queue_id, flag, queue_offset, phys_offset,
                 sys_flag, born_ts, (span){born.buf, born.len}, store_ts, (span){store.buf, store.len}, reconsume,
                 prepared, (span){body.buf, body.len}, (span){topic.buf, topic.len}, (span){props.buf, props.len});
    result = PyLong_FromSsize_t(total);
done:
    if (out.obj) PyBuffer_Release(&out);
    if (topic.obj) PyBuffer_Release(&topic);
    if (body.obj) PyBuffer_Release(&body);
    if (props.obj) PyBuffer_Release(&props);
    if (born.obj) PyBuffer_Release(&born);
    if (store.obj) PyBuffer_Release(&store);
    return result;
}

/* ---- record decode (fast path) ------------------------------------------------------------------------ */
/* decode_record_v4(buf, pos, check_crc, cls, host_memo) -> cls(...) or None.
 * None = "not the common case or not well-formed": the caller's general decoder decides (and raises). Hosts are
 * looked up in host_memo (raw 8 bytes -> "ip:port"); an unknown host also returns None (the general path fills the
 * memo). */
static PyObject *decode_v4(const unsigned char *b, Py_ssize_t len, Py_ssize_t pos, int check_crc, PyObject *cls,
                           PyObject *memo) {
    PyObject *result = NULL, *f[16] = {NULL};
    if (pos < 0 || pos > len || len - pos < 88) goto fallback;
    const unsigned char *r = b + pos;
    int32_t total = (int32_t)get32(r);
    uint32_t magic = get32(r + 4);
    int32_t sys_flag = (int32_t)get32(r + 36);
    if (magic != MAGIC_V1 || (sys_flag & (BORNHOST_V6 | STOREHOST_V6)) || total < 48 || total > len - pos)
        goto fallback;
    int32_t body_len = (int32_t)get32(r + 84);
    Py_ssize_t p = 88, end = total;
    if (body_len < 0 || p + body_len + 3 > end) goto fallback;
    Py_ssize_t body_at = p;
    p += body_len;
    int topic_len = r[p];
    p += 1;
    if (topic_len > 127 || p + topic_len + 2 > end) goto fallback;
    Py_ssize_t topic_at = p;
    p += topic_len;
    int16_t props_len = (int16_t)(((unsigned)r[p] << 8) | r[p + 1]);
    p += 2;
    if (props_len < 0 || p + props_len != end) goto fallback;
    uint32_t crc = get32(r + 8);
    if (check_crc && (crc32_update(0, r + body_at, (size_t)body_len) & 0x7FFFFFFFu) != crc) goto fallback;
    /* hosts: both must already be memoized */
    PyObject *born_key = PyBytes_FromStringAndSize((const char *)r + 48, 8);
    if (born_key == NULL) goto error;
    PyObject *born_text = PyDict_GetItemWithError(memo, born_key);
    Py_DECREF(born_key);
    if (born_text == NULL) {
        if (PyErr_Occurred()) goto error;
        goto fallback;
    }
    PyObject *store_key = PyBytes_FromStringAndSize((const char *)r + 64, 8);
    if (store_key == NULL) goto error;
    PyObject *store_text = PyDict_GetItemWithError(memo, store_key);
    Py_DECREF(store_key);
    if (store_text == NULL) {
        if (PyErr_Occurred()) goto error;
        goto fallback;
    }
    f[0] = PyUnicode_DecodeUTF8((const char *)r + topic_at, topic_len, "strict");
    if (f[0] == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            goto fallback;
        }
        goto error;
    }
    if (props_len) {
        PyObject *text = PyUnicode_DecodeUTF8((const char *)r + p, props_len, "strict");
        if (text == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                goto fallback;
            }
            goto error;
        }
        f[2] = decode_props_text(text);
        Py_DECREF(text);
    } else {
        f[2] = PyDict_New();
    }
    if (f[2] == NULL) goto error;
    f[1] = PyBytes_FromStringAndSize((const char *)r + body_at, body_len);
    f[3] = PyLong_FromLong((int32_t)get32(r + 16));           /* flag */
    f[4] = PyLong_FromLong((int32_t)get32(r + 12));           /* queue id */
    f[5] = PyLong_FromLongLong((int64_t)get64(r + 20));       /* queue offset */
    f[6] = PyLong_FromLongLong((int64_t)get64(r + 28));       /* phys offset */
    f[7] = PyLong_FromLong(sys_flag);
    f[8] = PyLong_FromLongLong((int64_t)get64(r + 40));       /* born timestamp */
    Py_INCREF(born_text);
    f[9] = born_text;
    f[10] = PyLong_FromLongLong((int64_t)get64(r + 56));      /* store timestamp */
    Py_INCREF(store_text);
    f[11] = store_text;
    f[12] = PyLong_FromLong((int32_t)get32(r + 72));          /* reconsume times */
    f[13] = PyLong_FromLongLong((int64_t)get64(r + 76));      /* prepared transaction offset */
    f[14] = PyLong_FromLong((int32_t)crc);
    f[15] = PyLong_FromLong(total);
    for (int i = 0; i < 16; i++)
        if (f[i] == NULL) goto error;
    result = PyObject_Vectorcall(cls, f, 16, NULL);
    goto cleanup;
fallback:
    result = Py_NewRef(Py_None);
    goto cleanup;
error:
    result = NULL;
cleanup:
    for (int i = 0; i < 16; i++) Py_XDECREF(f[i]);
    return result;
}

static int decode_args(PyObject *const *args, int check_at, int *check_crc, PyObject *memo) {
    *check_crc = PyObject_IsTrue(args[check_at]);
    if (*check_crc < 0) return -1;
    if (!PyDict_Check(memo)) {
        PyErr_SetString(PyExc_TypeError, "host_memo must be a dict");
        return -1;
    }
    return 0;
}

static PyObject *sp_decode_record_v4(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "decode_record_v4() takes 5 positional arguments (%zd given)", nargs);
        return NULL;
    }
    int check_crc;
    Py_ssize_t pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if ((pos == -1 && PyErr_Occurred()) || decode_args(args, 2, &check_crc, args[4]) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *r = decode_v4((const unsigned char *)view.buf, view.len, pos, check_crc, args[3], args[4]);
    PyBuffer_Release(&view);
    return r;
}

/* decode_records_v4(buf, pos, cls, host_memo) -> (list of cls, next pos): consecutive common records from pos
 * while at least 8 bytes remain, stopping at the first one decode_record_v4 would hand to the general decoder
 * (the caller decodes that one in Python, then may call again). */
static PyObject *sp_decode_records_v4(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "decode_records_v4() takes 4 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (!PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "host_memo must be a dict");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyList_New(0);
    const unsigned char *b = (const unsigned char *)view.buf;
    while (out != NULL && pos >= 0 && pos + 8 <= view.len) {
        PyObject *m = decode_v4(b, view.len, pos, 0, args[2], args[3]);
        if (m == NULL) {
            Py_CLEAR(out);
            break;
        }
        if (m == Py_None) {
            Py_DECREF(m);
            break;
        }
        pos += (Py_ssize_t)(int32_t)get32(b + pos); /* total size: checked by decode_v4 (>= 48, inside buf) */
        if (PyList_Append(out, m) < 0) Py_CLEAR(out);
        Py_DECREF(m);
    }
    PyBuffer_Release(&view);
    if (out == NULL) return NULL;
    PyObject *res = Py_BuildValue("(Nn)", out, pos);
    return res;
}

/* ---- IndexFile put ------------------------------------------------------------------------------------ */
#define INDEX_HEADER_SIZE 40
#define INDEX_ENTRY_SIZE 20

/* index_put(buf, entries_at, slot_num, n, key_hash, phys_offset, store_timestamp, begin_ts, begin_phys,
 *           slot_count) -> prev (the entry number the new entry chains to, 0 for none) */
static PyObject *sp_index_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "index_put() takes 10 positional arguments (%zd given)", nargs);
        return NULL;
    }
    int64_t entries_at, slot_num, n, key_hash, phys, store_ts, begin_ts, begin_phys, slot_count;
    if (as_i64(args[1], &entries_at) < 0 || as_i64(args[2], &slot_num) < 0 || as_i64(args[3], &n) < 0 ||
        as_i64(args[4], &key_hash) < 0 || as_i64(args[5], &phys) < 0 || as_i64(args[6], &store_ts) < 0 ||
        as_i64(args[7], &begin_ts) < 0 || as_i64(args[8], &begin_phys) < 0 || as_i64(args[9], &slot_count) < 0)
        return NULL;
    if (slot_num <= 0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "slot_num must be positive");
        return NULL;
    }
    if (key_hash < INT32_MIN || key_hash > INT32_MAX || n < INT32_MIN || n >= INT32_MAX ||
        slot_count < INT32_MIN || slot_count >= INT32_MAX) {
        PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) return NULL;
    int64_t slot = key_hash % slot_num;
    if (slot < 0) slot += slot_num; /* Python's modulo */
    int64_t slot_pos = INDEX_HEADER_SIZE + slot * 4;
    int64_t entry_pos = entries_at + n * INDEX_ENTRY_SIZE;
    if (view.len < INDEX_HEADER_SIZE || slot_pos < 0 || slot_pos > view.len - 4 || entry_pos < 0 ||
        entry_pos > view.len - INDEX_ENTRY_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(struct_error, "index_put out of the buffer");
        return NULL;
    }
    unsigned char *b = (unsigned char *)view.buf;
    int32_t prev = (int32_t)get32(b + slot_pos);
    if (prev <= 0 || prev >= n) prev = 0;
    int64_t delta, diff;
    if (__builtin_sub_overflow(store_ts, begin_ts, &delta))
        diff = store_ts > begin_ts ? INT32_MAX : 0;
    else {
        diff = delta / 1000 - ((delta % 1000) < 0); /* floor division */
        if (diff < 0) diff = 0;
        else if (diff > INT32_MAX) diff = INT32_MAX;
    }
    unsigned char *e = b + entry_pos;
    put32(e, (uint32_t)key_hash);
    put64(e + 4, (uint64_t)phys);
    put32(e + 12, (uint32_t)diff);
    put32(e + 16, (uint32_t)prev);
    put32(b + slot_pos, (uint32_t)n);
    put64(b, (uint64_t)begin_ts);
    put64(b + 8, (uint64_t)store_ts);
    put64(b + 16, (uint64_t)begin_phys);
    put64(b + 24, (uint64_t)phys);
    put32(b + 32, (uint32_t)(slot_count + (prev == 0)));
    put32(b + 36, (uint32_t)(n + 1));
    PyBuffer_Release(&view);
    return PyLong_FromLong(prev);
}

/* ---- SEND_BATCH_MESSAGE body (API 2) ------------------------------------------------------------------- */
/* split_batch_body(body) -> [(flag, body bytes, properties str)], or None when the body is malformed in any way
 * (the Python decoder, broker/handlers/send.py decode_batch_body_py, then raises the ValueError that says why).
 * Record: total size, magic, body crc, flag, body length (5 x int), body, short properties length, UTF-8 text. */
static PyObject *sp_split_batch_body(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto error;
    while (pos < n) {
        if (n - pos < 20) goto malformed;
        int32_t total = (int32_t)get32(b + pos);
        int32_t flag = (int32_t)get32(b + pos + 12);
        int32_t body_len = (int32_t)get32(b + pos + 16);
        if (body_len < 0 || (Py_ssize_t)body_len > n - pos - 22) goto malformed;
        Py_ssize_t p = pos + 20 + body_len;
        int16_t props_len = (int16_t)(((unsigned)b[p] << 8) | b[p + 1]);
        if (props_len < 0 || (Py_ssize_t)props_len > n - p - 2) goto malformed;
        Py_ssize_t end = p + 2 + props_len;
        if ((Py_ssize_t)total != end - pos) goto malformed;
        PyObject *props = PyUnicode_DecodeUTF8((const char *)b + p + 2, props_len, NULL);
        if (props == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto error;
            PyErr_Clear();
            goto malformed;
        }
        PyObject *item = PyTuple_New(3);
        PyObject *fl = PyLong_FromLong(flag);
        PyObject *data = PyBytes_FromStringAndSize((const char *)b + pos + 20, body_len);
        if (item == NULL || fl == NULL || data == NULL) {
            Py_XDECREF(item);
            Py_XDECREF(fl);
            Py_XDECREF(data);
            Py_DECREF(props);
            goto error;
        }
        PyTuple_SET_ITEM(item, 0, fl);
        PyTuple_SET_ITEM(item, 1, data);
        PyTuple_SET_ITEM(item, 2, props);
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0) goto error;
        pos = end;
    }
    PyBuffer_Release(&view);
    return out;
malformed:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* encode_run_into(buf, pos, topic, born_host, store_host, queue_id, queue_offset, seg_base, store_timestamp,
 *                 msgs, props_list, id_prefix) -> msg ids   (API 2)
 * model/record.py encode_run_into_py: the records of a one-queue run written back to back from pos, each by
 * encode_record_into (same checks, same errors; records before a failing one stay written, as there), with
 * consecutive queue offsets from queue_offset and phys = seg_base + its position; msg id = id_prefix + phys as
 * 16 upper-case hex digits. Message fields are read as attributes (body, flag, sys_flag, born_timestamp,
 * reconsume_times, prepared_transaction_offset); sys_flag loses its host bits (& ~0x30) like the caller's. */
static PyObject *str_body, *str_flag, *str_sys_flag, *str_born_ts, *str_reconsume, *str_prepared, *not_v6;

static PyObject *hex_id(PyObject *prefix, int64_t phys) {
    static const char digits[] = "0123456789ABCDEF";
    if (phys >= 0 && PyUnicode_IS_ASCII(prefix)) {
        Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
        PyObject *s = PyUnicode_New(plen + 16, 127);
        if (s == NULL) return NULL;
        char *d = (char *)PyUnicode_DATA(s);
        memcpy(d, PyUnicode_DATA(prefix), (size_t)plen);
        for (int i = 15; i >= 0; i--, phys >>= 4) d[plen + i] = digits[phys & 0xF];
        return s;
    }
    PyObject *num = PyLong_FromLongLong(phys);
    if (num == NULL) return NULL;
    PyObject *spec = PyUnicode_FromString("016X");
    PyObject *text = spec ? PyObject_Format(num, spec) : NULL;
    Py_DECREF(num);
    Py_XDECREF(spec);
    if (text == NULL) return NULL;
    PyObject *s = PyUnicode_Concat(prefix, text);
    Py_DECREF(text);
    return s;
}

static PyObject *sp_encode_run_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12) {
        PyErr_Format(PyExc_TypeError, "encode_run_into() takes 12 positional arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *prefix = args[11];
    if (!PyUnicode_Check(prefix)) {
        PyErr_SetString(PyExc_TypeError, "id_prefix must be str");
        return NULL;
    }
    int64_t pos, queue_offset, seg_base;
    if (as_i64(args[1], &pos) < 0 || as_i64(args[6], &queue_offset) < 0 || as_i64(args[7], &seg_base) < 0)
        return NULL;
    PyObject *msgs = PySequence_Fast(args[9], "msgs must be a sequence");
    if (msgs == NULL) return NULL;
    PyObject *props = PySequence_Fast(args[10], "props_list must be a sequence");
    if (props == NULL) {
        Py_DECREF(msgs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(msgs);
    PyObject *ids = NULL;
    if (PySequence_Fast_GET_SIZE(props) != n) {
        PyErr_SetString(PyExc_ValueError, "msgs and props_list differ in length");
        goto done;
    }
    ids = PyList_New(n);
    if (ids == NULL) goto done;
    int queue_offset_over = 0;
    PyObject *call[17];
    call[0] = args[0];
    call[2] = args[2];
    call[5] = args[5];
    call[9] = args[3];
    call[10] = args[4];
    call[15] = args[8];
    call[16] = Py_None;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PySequence_Fast_ITEMS(msgs)[i];
        int64_t phys;
        /* phys beyond int64 goes in as the Python int it is: encode_record_into refuses it in its own order */
        int phys_overflow = __builtin_add_overflow(seg_base, pos, &phys);
        PyObject *fields[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
        PyObject *ints[3] = {PyLong_FromLongLong(pos),
                             queue_offset_over ? PyLong_FromUnsignedLongLong((unsigned long long)INT64_MAX + 1)
                                               : PyLong_FromLongLong(queue_offset),
                             NULL};
        if (ints[0] != NULL)
            ints[2] = phys_overflow ? PyNumber_Add(args[7], ints[0]) : PyLong_FromLongLong(phys);
        PyObject *sys_flag = NULL, *size = NULL;
        int ok = ints[0] && ints[1] && ints[2] && (fields[0] = PyObject_GetAttr(m, str_body)) &&
                 (fields[1] = PyObject_GetAttr(m, str_flag)) && (fields[2] = PyObject_GetAttr(m, str_sys_flag)) &&
                 (fields[3] = PyObject_GetAttr(m, str_born_ts)) && (fields[4] = PyObject_GetAttr(m, str_reconsume)) &&
                 (fields[5] = PyObject_GetAttr(m, str_prepared)) && (sys_flag = PyNumber_And(fields[2], not_v6));
        if (ok) {
            call[1] = ints[0];
            call[3] = fields[0];
            call[4] = PySequence_Fast_ITEMS(props)[i];
            call[6] = fields[1];
            call[7] = sys_flag;
            call[8] = fields[3];
            call[11] = fields[4];
            call[12] = fields[5];
            call[13] = ints[1];
            call[14] = ints[2];
            size = sp_encode_record_into(NULL, call, 17);
        }
        for (int k = 0; k < 6; k++) Py_XDECREF(fields[k]);
        for (int k = 0; k < 3; k++) Py_XDECREF(ints[k]);
        Py_XDECREF(sys_flag);
        if (size == NULL) goto fail;
        Py_ssize_t written = PyLong_AsSsize_t(size);
        Py_DECREF(size);
        PyObject *id = hex_id(prefix, phys);
        if (id == NULL) goto fail;
        PyList_SET_ITEM(ids, i, id);
        pos += written;
        queue_offset_over = __builtin_add_overflow(queue_offset, 1, &queue_offset); /* the next one is refused */
    }
    goto done;
fail:
    Py_CLEAR(ids);
done:
    Py_DECREF(msgs);
    Py_DECREF(props);
    return ids;
}

/* index_put_key(buf, entries_at, slot_num, n, topic, key, phys_offset, store_timestamp, begin_ts, begin_phys,
 *               slot_count) -> prev   (API 2)
 * store/index_file.py index_put_key_py: index_put with key_hash = index_key_hash(f"{topic}#{key}") (abs of the
 * Java hashCode, MIN_VALUE -> 0), without building the key string when both parts are 1-byte-kind str. */
static PyObject *sp_index_put_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "index_put_key() takes 11 positional arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *topic = args[4], *key = args[5];
    int32_t h;
    if (PyUnicode_CheckExact(topic) && PyUnicode_CheckExact(key) && PyUnicode_KIND(topic) == PyUnicode_1BYTE_KIND &&
        PyUnicode_KIND(key) == PyUnicode_1BYTE_KIND) {
        uint32_t u = 0;
        const Py_UCS1 *t = PyUnicode_1BYTE_DATA(topic), *k = PyUnicode_1BYTE_DATA(key);
        for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(topic); i < n; i++) u = 31u * u + t[i];
        u = 31u * u + '#';
        for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(key); i < n; i++) u = 31u * u + k[i];
        h = (int32_t)u;
    } else { /* the general form: the key string as the f-string builds it, hashed by java_hash */
        PyObject *empty = PyUnicode_New(0, 0);
        PyObject *ts = empty ? PyObject_Format(topic, empty) : NULL;
        PyObject *ks = ts ? PyObject_Format(key, empty) : NULL;
        PyObject *text = ks ? PyUnicode_FromFormat("%U#%U", ts, ks) : NULL;
        PyObject *hv = text ? sp_java_hash(NULL, text) : NULL;
        Py_XDECREF(empty);
        Py_XDECREF(ts);
        Py_XDECREF(ks);
        Py_XDECREF(text);
        if (hv == NULL) return NULL;
        h = (int32_t)PyLong_AsLong(hv);
        Py_DECREF(hv);
    }
    long key_hash = h == INT32_MIN ? 0 : (h < 0 ? -(long)h : (long)h);
    PyObject *hash_obj = PyLong_FromLong(key_hash);
    if (hash_obj == NULL) return NULL;
    PyObject *call[10] = {args[0], args[1], args[2], args[3], hash_obj, args[6], args[7], args[8], args[9], args[10]};
    PyObject *r = sp_index_put(NULL, call, 10);
    Py_DECREF(hash_obj);
    return r;
}

/* ---- encode_json_frame(cmd): a whole serialize-type-0 frame of the common command shape -------------------
 * protocol/frame.py encode_json_frame_py: code, version, opaque and flag ints within int64, language a str,
 * remark None or a str, ext_fields None or a dict of str keys and str values, body None or bytes, serialize_type 0,
 * every string with nothing JSON must escape ('"', '\\', control characters) and valid as UTF-8 -> exactly the
 * bytes protocol/frame.py encode_frame gives (length prefix, header length word, the compact JSON header with
 * sorted keys, null remark left out, then the body). Anything else returns None and encode_frame's Python code
 * decides (escapes, conversions, errors). Attributes are read from RemotingCommand's slots in place. */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char small[768];
} wbuf;

static int wb_reserve(wbuf *b, Py_ssize_t extra) {
    if (b->n + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->n + extra) cap = b->n + extra;
    char *q = PyMem_Malloc((size_t)cap);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(q, b->p, (size_t)b->n);
    if (b->p != b->small) PyMem_Free(b->p);
    b->p = q;
    b->cap = cap;
    return 0;
}

static int wb_put(wbuf *b, const char *s, Py_ssize_t n) {
    if (wb_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

#define WB_LIT(b, s) wb_put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* an int within int64: 1 written, 0 not one (bool, another type, out of range), -1 error */
static int wb_i64(wbuf *b, PyObject *x) {
    if (!PyLong_CheckExact(x)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow) return 0;
    if (v == -1 && PyErr_Occurred()) return -1;
    char tmp[24], *e = tmp + sizeof tmp, *q = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--q = '-';
    return wb_put(b, q, e - q) < 0 ? -1 : 1;
}

/* a plain JSON string's UTF-8 (no quotes): 1, 0 (not plain), -1 error */
static int plain_utf8(PyObject *s, const char **u, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(s)) return 0;
    *u = PyUnicode_AsUTF8AndSize(s, n);
    if (*u == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear(); /* lone surrogates: orjson refuses them, so does the Python path */
        return 0;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        unsigned char c = (unsigned char)(*u)[i];
        if (c < 0x20 || c == '"' || c == '\\') return 0;
    }
    return 1;
}

/* a JSON string: 1 written, 0 not plain (needs escaping or is no valid UTF-8: the Python encoder decides),
 * -1 error */
static int wb_str(wbuf *b, PyObject *s) {
    const char *u;
    Py_ssize_t n;
    int r = plain_utf8(s, &u, &n);
    if (r != 1) return r;
    if (wb_reserve(b, n + 2) < 0) return -1;
    b->p[b->n++] = '"';
    memcpy(b->p + b->n, u, (size_t)n);
    b->n += n;
    b->p[b->n++] = '"';
    return 1;
}

#define EXT_SMALL 16
/* the ext dict as a JSON object with sorted keys: 1, 0 (not the common shape), -1 error. Up to EXT_SMALL items
 * are sorted in place by their UTF-8 bytes (= code point order, orjson's order); larger dicts through a list. */
static int wb_ext(wbuf *b, PyObject *ext) {
    if (!PyDict_CheckExact(ext)) return 0;
    Py_ssize_t size = PyDict_GET_SIZE(ext);
    if (size <= EXT_SMALL) {
        const char *ku[EXT_SMALL], *vu[EXT_SMALL];
        Py_ssize_t kn[EXT_SMALL], vn[EXT_SMALL], total = 2, cnt = 0, pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(ext, &pos, &k, &v)) {
            if (cnt == EXT_SMALL) return 0;
            const char *a, *c;
            Py_ssize_t an, cn;
            int r = plain_utf8(k, &a, &an);
            if (r != 1) return r;
            if ((r = plain_utf8(v, &c, &cn)) != 1) return r;
            Py_ssize_t j = cnt++; /* insertion sort by key bytes */
            while (j > 0) {
                Py_ssize_t m = kn[j - 1] < an ? kn[j - 1] : an;
                int d = memcmp(ku[j - 1], a, (size_t)m);
                if (d < 0 || (d == 0 && kn[j - 1] <= an)) break;
                ku[j] = ku[j - 1], kn[j] = kn[j - 1], vu[j] = vu[j - 1], vn[j] = vn[j - 1];
                j--;
            }
            ku[j] = a, kn[j] = an, vu[j] = c, vn[j] = cn;
            total += an + cn + 6;
        }
        if (wb_reserve(b, total) < 0) return -1;
        char *o = b->p + b->n;
        *o++ = '{';
        for (Py_ssize_t i = 0; i < cnt; i++) {
            if (i) *o++ = ',';
            *o++ = '"';
            memcpy(o, ku[i], (size_t)kn[i]);
            o += kn[i];
            *o++ = '"';
            *o++ = ':';
            *o++ = '"';
            memcpy(o, vu[i], (size_t)vn[i]);
            o += vn[i];
            *o++ = '"';
        }
        *o++ = '}';
        b->n = o - b->p;
        return 1;
    }
    PyObject *keys = PyDict_Keys(ext);
    if (keys == NULL) return -1;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    int r = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(keys, i))) {
            r = 0;
            goto done;
        }
    }
    if (n > 1 && PyList_Sort(keys) < 0) { /* exact str keys: code point order = orjson's UTF-8 byte order */
        r = -1;
        goto done;
    }
    if (wb_put(b, "{", 1) < 0) {
        r = -1;
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        PyObject *v = PyDict_GetItemWithError(ext, k); /* borrowed */
        if (v == NULL) {
            r = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        if (i && wb_put(b, ",", 1) < 0) {
            r = -1;
            goto done;
        }
        if ((r = wb_str(b, k)) != 1) goto done;
        if (wb_put(b, ":", 1) < 0) {
            r = -1;
            goto done;
        }
        if ((r = wb_str(b, v)) != 1) goto done;
    }
    r = wb_put(b, "}", 1) < 0 ? -1 : 1;
done:
    Py_DECREF(keys);
    return r;
}

static PyObject *sp_encode_json_frame(PyObject *self, PyObject *cmd) {
    PyTypeObject *tp = Py_TYPE(cmd);
    if (!slot_offsets(tp)) Py_RETURN_NONE;
    PyObject *v[9];
    for (int i = 0; i < 9; i++) {
        v[i] = *(PyObject **)((char *)cmd + slots_off[i]);
        if (v[i] == NULL) Py_RETURN_NONE; /* unset: the Python encoder raises the AttributeError */
    }
    /* v: code, version, opaque, flag, language, remark, ext_fields, body, serialize_type */
    PyObject *stype = v[8], *remark = v[5], *ext = v[6], *body = v[7];
    if (!PyLong_CheckExact(stype) || PyLong_AsLong(stype) != 0) {
        if (PyErr_Occurred()) PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (body != Py_None && !PyBytes_CheckExact(body)) Py_RETURN_NONE;
    wbuf b;
    b.p = b.small;
    b.n = 8; /* the length prefix and header length word, written last */
    b.cap = (Py_ssize_t)sizeof b.small;
    int r;
    PyObject *out = NULL;
    if (WB_LIT(&b, "{\"code\":") < 0 || (r = wb_i64(&b, v[0])) < 0) goto error;
    if (!r) goto fallback;
    if (ext != Py_None) {
        if (WB_LIT(&b, ",\"extFields\":") < 0 || (r = wb_ext(&b, ext)) < 0) goto error;
        if (!r) goto fallback;
    }
    if (WB_LIT(&b, ",\"flag\":") < 0 || (r = wb_i64(&b, v[3])) < 0) goto error;
    if (!r) goto fallback;
    if (WB_LIT(&b, ",\"language\":") < 0 || (r = wb_str(&b, v[4])) < 0) goto error;
    if (!r) goto fallback;
    if (WB_LIT(&b, ",\"opaque\":") < 0 || (r = wb_i64(&b, v[2])) < 0) goto error;
    if (!r) goto fallback;
    if (remark != Py_None) {
        if (WB_LIT(&b, ",\"remark\":") < 0 || (r = wb_str(&b, remark)) < 0) goto error;
        if (!r) goto fallback;
    }
    if (WB_LIT(&b, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") < 0 || (r = wb_i64(&b, v[1])) < 0)
        goto error;
    if (!r) goto fallback;
    if (wb_put(&b, "}", 1) < 0) goto error;
    Py_ssize_t hlen = b.n - 8;
    Py_ssize_t blen = body == Py_None ? 0 : PyBytes_GET_SIZE(body);
    if (hlen > 0xFFFFFF || 4 + hlen + blen > INT32_MAX) goto fallback; /* the Python encoder raises */
    put32((unsigned char *)b.p, (uint32_t)(4 + hlen + blen));
    put32((unsigned char *)b.p + 4, (uint32_t)hlen); /* serialize type 0 in the top byte */
    out = PyBytes_FromStringAndSize(NULL, b.n + blen);
    if (out == NULL) goto error;
    memcpy(PyBytes_AS_STRING(out), b.p, (size_t)b.n);
    if (blen) memcpy(PyBytes_AS_STRING(out) + b.n, PyBytes_AS_STRING(body), (size_t)blen);
    if (b.p != b.small) PyMem_Free(b.p);
    return out;
fallback:
    if (b.p != b.small) PyMem_Free(b.p);
    Py_RETURN_NONE;
error:
    if (b.p != b.small) PyMem_Free(b.p);
    return NULL;
}

/* ---- several single-message puts in one pass (store/commitlog.py append_singles) ------------------------ */
static const char *const dispatch_fields[12] = {"topic", "queue_id", "phys_offset", "size", "tags_code",
                                                "store_timestamp", "queue_offset", "keys", "uniq_key", "sys_flag",
                                                "prepared_transaction_offset", "properties"};
static const char *const result_fields[7] = {"status", "phys_offset", "wrote_bytes", "msg_ids", "queue_offset",
                                             "msg_count", "store_timestamp"};
static slot_layout dispatch_layout, result_layout;
static PyObject *str_topic, *str_queue_id, *str_born_host, *str_store_host, *str_properties, *str_tags, *str_keys,
    *str_uniq_key, *int_one;

typedef struct {
    PyObject *m;        /* borrowed (msgs holds it) */
    PyObject *topic;    /* owned attributes */
    PyObject *props;
    PyObject *body;
    PyObject *props_b;  /* owned: the UTF-8 properties text */
    PyObject *f[6];     /* owned: queue_id, flag, sys_flag, born_timestamp, reconsume_times,
                           prepared_transaction_offset (ints) */
    PyObject *born;     /* borrowed from hosts */
    PyObject *store;
    Py_ssize_t size;
} single_part;

/* The properties text name\x01value\x02... as UTF-8 bytes; NotImplemented (new ref) when a key or value is not
 * a str (the Python encoder decides: it skips Nones and formats other values). */
static PyObject *props_utf8(PyObject *props) {
    Py_ssize_t pos = 0, total = 0, count = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v)) Py_RETURN_NOTIMPLEMENTED;
        Py_ssize_t kn, vn;
        if (PyUnicode_AsUTF8AndSize(k, &kn) == NULL || PyUnicode_AsUTF8AndSize(v, &vn) == NULL) return NULL;
        total += kn + 1 + vn;
        count++;
    }
    if (count) total += count - 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    char *d = PyBytes_AS_STRING(out);
    pos = 0;
    Py_ssize_t i = 0;
    while (PyDict_Next(props, &pos, &k, &v)) {
        Py_ssize_t kn, vn;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kn), *vs = PyUnicode_AsUTF8AndSize(v, &vn);
        if (i++) *d++ = '\x02';
        memcpy(d, ks, (size_t)kn);
        d += kn;
        *d++ = '\x01';
        memcpy(d, vs, (size_t)vn);
        d += vn;
    }
    return out;
}

static void parts_clear(single_part *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(p[i].topic);
        Py_XDECREF(p[i].props);
        Py_XDECREF(p[i].body);
        Py_XDECREF(p[i].props_b);
        for (int k = 0; k < 6; k++) Py_XDECREF(p[i].f[k]);
    }
}

static int as_i32_plain(PyObject *o, int32_t *out) {
    if (!PyLong_Check(o)) return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

static int as_i64_plain(PyObject *o, int64_t *out) {
    if (!PyLong_Check(o)) return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return -1;
    *out = (int64_t)v;
    return 0;
}


/* append_singles(msgs, hosts, max_body, max_record, max_total, begin, table, schedule_topic, dispatch_cls,
 *                result_cls, put_ok) -> (seg, start, end, results, requests) | None | NotImplemented   (API 8)
 * store/commitlog.py CommitLog._append_singles_py, whose contract this is:
 *  - NotImplemented, before anything is taken: a message the Python twin must handle (a properties key or value
 *    that is not a str, a body that is not bytes, a SCHEDULE_TOPIC record whose tags code is its delivery time,
 *    an attribute of another type than the handler makes);
 *  - None: declined (a transaction half or rollback, a header field out of its Java range, an unknown host, a
 *    topic of 0 or > 127 bytes, a body, properties text or record over its limit, a run over max_total bytes, or,
 *    after begin(total) picked the segment, a queue offset past int64: the queue offsets taken are given back);
 *  - else the records are written back to back from the segment's position, each with the next queue offset of
 *    its "topic-queueId" in table, and one PutResult and one DispatchRequest per message.
 * begin(total) -> (seg, buf, pos, base, store_ts) is CommitLog._begin_write's segment pick. */
static PyObject *sp_append_singles(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "append_singles() takes 11 positional arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *msgs = args[0], *hosts = args[1], *begin = args[5], *table = args[6], *schedule = args[7];
    PyObject *put_ok = args[10];
    if (!PyList_CheckExact(msgs) || !PyDict_CheckExact(hosts) || !PyDict_CheckExact(table)) {
        PyErr_SetString(PyExc_TypeError, "append_singles(list, dict, ..., dict, ...)");
        return NULL;
    }
    if (slot_layout_of(&dispatch_layout, args[8], dispatch_fields, 12) < 0 ||
        slot_layout_of(&result_layout, args[9], result_fields, 7) < 0)
        return NULL;
    int64_t max_body, max_record, max_total;
    if (as_i64(args[2], &max_body) < 0 || as_i64(args[3], &max_record) < 0 || as_i64(args[4], &max_total) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (n == 0) Py_RETURN_NONE;
    single_part *parts = PyMem_Calloc((size_t)n, sizeof(single_part));
    if (parts == NULL) return PyErr_NoMemory();
    PyObject *ret = NULL, *begun = NULL, *results = NULL, *requests = NULL, *store_hex = NULL, *last_store = NULL;
    PyObject **undo_keys = NULL, **undo_prior = NULL;
    Py_ssize_t taken = 0;
    Py_buffer out = {0};
    int64_t total = 0;
    /* phase 1: every check that needs no segment, the sizes and the properties text */
    for (Py_ssize_t i = 0; i < n; i++) {
        single_part *p = &parts[i];
        PyObject *m = p->m = PyList_GET_ITEM(msgs, i);
        PyObject *const names[6] = {str_queue_id, str_flag, str_sys_flag, str_born_ts, str_reconsume,
                                    str_prepared};
        for (int k = 0; k < 6; k++) {
            if ((p->f[k] = PyObject_GetAttr(m, names[k])) == NULL) goto error;
            if (!PyLong_Check(p->f[k])) goto not_impl; /* struct's __index__ cases: the Python twin */
        }
        int32_t sys_flag, i32;
        int64_t i64;
        if (as_i32_plain(p->f[2], &sys_flag)) goto not_impl; /* & TRANSACTION_MASK of a wide int: the twin */
        int tx = sys_flag & 0xC;
        if (tx == 0x4 || tx == 0xC) goto decline;
        /* a header field out of its Java range: declined before the segment pick (no store timestamp taken) */
        if (as_i32_plain(p->f[0], &i32) || as_i32_plain(p->f[1], &i32) || as_i64_plain(p->f[3], &i64) ||
            as_i32_plain(p->f[4], &i32) || as_i64_plain(p->f[5], &i64))
            goto decline;
        if ((p->topic = PyObject_GetAttr(m, str_topic)) == NULL) goto error;
        if (!PyUnicode_CheckExact(p->topic)) goto not_impl;
        int is_schedule = PyUnicode_Compare(p->topic, schedule);
        if (is_schedule == -1 && PyErr_Occurred()) goto error;
        if (is_schedule == 0) goto not_impl;
        PyObject *bh = PyObject_GetAttr(m, str_born_host), *sh = bh ? PyObject_GetAttr(m, str_store_host) : NULL;
        if (sh == NULL) {
            Py_XDECREF(bh);
            goto error;
        }
        p->born = PyDict_GetItemWithError(hosts, bh);
        p->store = p->born ? PyDict_GetItemWithError(hosts, sh) : NULL;
        Py_DECREF(bh);
        Py_DECREF(sh);
        if (PyErr_Occurred()) goto error;
        Py_ssize_t topic_len;
        if (PyUnicode_AsUTF8AndSize(p->topic, &topic_len) == NULL) goto error;
        if (topic_len == 0 || topic_len > 127 || p->born == NULL || p->store == NULL) goto decline;
        if (!PyBytes_CheckExact(p->born) || !PyBytes_CheckExact(p->store)) goto not_impl;
        if ((p->props = PyObject_GetAttr(m, str_properties)) == NULL) goto error;
        if (!PyDict_CheckExact(p->props)) goto not_impl;
        if ((p->props_b = props_utf8(p->props)) == NULL) goto error;
        if (p->props_b == Py_NotImplemented) goto not_impl;
        if ((p->body = PyObject_GetAttr(m, str_body)) == NULL) goto error;
        if (!PyBytes_CheckExact(p->body)) goto not_impl;
        Py_ssize_t body_len = PyBytes_GET_SIZE(p->body), props_len = PyBytes_GET_SIZE(p->props_b);
        p->size = 75 + PyBytes_GET_SIZE(p->born) + PyBytes_GET_SIZE(p->store) + body_len + topic_len + props_len;
        if (body_len > max_body || props_len > 32767 || p->size > max_record) goto decline;
        total += p->size;
    }
    if (total > max_total) goto decline;
    /* the segment: from here on a refusal gives back what it took */
    PyObject *total_o = PyLong_FromLongLong(total);
    if (total_o == NULL) goto error;
    begun = PyObject_CallOneArg(begin, total_o);
    Py_DECREF(total_o);
    if (begun == NULL) goto error;
    if (!PyTuple_CheckExact(begun) || PyTuple_GET_SIZE(begun) != 5) {
        PyErr_SetString(PyExc_TypeError, "begin() must return (seg, buf, pos, base, store_ts)");
        goto error;
    }
    int64_t pos, base, store_ts;
    if (as_i64(PyTuple_GET_ITEM(begun, 2), &pos) < 0 || as_i64(PyTuple_GET_ITEM(begun, 3), &base) < 0 ||
        as_i64(PyTuple_GET_ITEM(begun, 4), &store_ts) < 0)
        goto error;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(begun, 1), &out, PyBUF_WRITABLE) < 0) goto error;
    if (pos < 0 || pos > out.len || total > out.len - pos) {
        PyErr_Format(PyExc_ValueError, "%lld bytes do not fit the segment at %lld", (long long)total, (long long)pos);
        goto error;
    }
    int64_t start_pos = pos;
    PyObject *store_ts_o = PyTuple_GET_ITEM(begun, 4);
    results = PyList_New(n);
    requests = PyList_New(n);
    undo_keys = PyMem_Calloc((size_t)n, sizeof(PyObject *));
    undo_prior = PyMem_Calloc((size_t)n, sizeof(PyObject *));
    if (results == NULL || requests == NULL || undo_keys == NULL || undo_prior == NULL) goto error;
    /* phase 2: the records, in order */
    for (Py_ssize_t i = 0; i < n; i++) {
        single_part *p = &parts[i];
        if (p->store != last_store) {
            Py_XDECREF(store_hex);
            static const char hexd[] = "0123456789ABCDEF";
            Py_ssize_t sl = PyBytes_GET_SIZE(p->store);
            const unsigned char *sb = (const unsigned char *)PyBytes_AS_STRING(p->store);
            store_hex = PyUnicode_New(2 * sl, 127);
            if (store_hex == NULL) goto error;
            char *hd = (char *)PyUnicode_DATA(store_hex);
            for (Py_ssize_t k = 0; k < sl; k++) {
                hd[2 * k] = hexd[sb[k] >> 4];
                hd[2 * k + 1] = hexd[sb[k] & 0xF];
            }
            last_store = p->store;
        }
        PyObject *qid_o = p->f[0];
        PyObject *key = PyUnicode_FromFormat("%U-%S", p->topic, qid_o);
        if (key == NULL) goto error;
        PyObject *prior = PyDict_GetItemWithError(table, key);
        if (prior == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto error;
        }
        int64_t queue_offset = 0;
        int32_t queue_id, flag, sys_flag, reconsume;
        int64_t born_ts, prepared;
        int truthy = prior == NULL ? 0 : PyObject_IsTrue(prior);
        if (truthy < 0) {
            Py_DECREF(key);
            goto error;
        }
        if ((truthy && as_i64_plain(prior, &queue_offset)) || as_i32_plain(qid_o, &queue_id) ||
            as_i32_plain(p->f[1], &flag) || as_i32_plain(p->f[2], &sys_flag) || as_i64_plain(p->f[3], &born_ts) ||
            as_i32_plain(p->f[4], &reconsume) || as_i64_plain(p->f[5], &prepared)) {
            Py_DECREF(key); /* a header field out of its Java range: what encode_run_into refuses */
            PyErr_Clear();
            goto give_back;
        }
        /* the record (model/record.py's V1 layout, as encode_record_into writes it) */
        Py_ssize_t born_len = PyBytes_GET_SIZE(p->born), store_len = PyBytes_GET_SIZE(p->store);
        Py_ssize_t body_len = PyBytes_GET_SIZE(p->body), props_len = PyBytes_GET_SIZE(p->props_b), topic_len;
        const char *topic_b = PyUnicode_AsUTF8AndSize(p->topic, &topic_len);
        int32_t flag_bits = sys_flag & ~(BORNHOST_V6 | STOREHOST_V6);
        if (born_len == 20) flag_bits |= BORNHOST_V6;
        if (store_len == 20) flag_bits |= STOREHOST_V6;
        int64_t phys = base + pos;
        const unsigned char *body = (const unsigned char *)PyBytes_AS_STRING(p->body);
        write_record((unsigned char *)out.buf + pos, (uint32_t)p->size,
                     crc32_update(0, body, (size_t)body_len) & 0x7FFFFFFFu, queue_id, flag, queue_offset, phys,
                     flag_bits, born_ts, (span){PyBytes_AS_STRING(p->born), born_len}, store_ts,
                     (span){PyBytes_AS_STRING(p->store), store_len}, reconsume, prepared, (span){body, body_len},
                     (span){topic_b, topic_len}, (span){PyBytes_AS_STRING(p->props_b), props_len});
        /* the queue offset taken (given back on a later refusal) */
        undo_keys[taken] = key; /* owns the key */
        undo_prior[taken] = Py_XNewRef(prior);
        taken++;
        PyObject *next = queue_offset == INT64_MAX ? PyNumber_Add(prior, int_one)
                                                   : PyLong_FromLongLong(queue_offset + 1);
        if (next == NULL || PyDict_SetItem(table, key, next) < 0) {
            Py_XDECREF(next);
            goto error;
        }
        Py_DECREF(next);
        /* the answer and the dispatch request */
        PyObject *tags = PyDict_GetItemWithError(p->props, str_tags);
        int64_t tags_code = 0;
        if (tags != NULL && PyUnicode_GET_LENGTH(tags) > 0) {
            int ok;
            tags_code = (int32_t)java_hash_units(tags, &ok);
            if (!ok) { /* unreachable: the properties were UTF-8 encoded above */
                PyErr_SetString(PyExc_ValueError, "lone surrogate");
            }
        }
        PyObject *keys = PyErr_Occurred() ? NULL : PyDict_GetItemWithError(p->props, str_keys);
        PyObject *uniq = PyErr_Occurred() ? NULL : PyDict_GetItemWithError(p->props, str_uniq_key);
        PyObject *phys_o = PyLong_FromLongLong(phys), *size_o = PyLong_FromSsize_t(p->size);
        PyObject *qoff_o = PyLong_FromLongLong(queue_offset), *tags_o = PyLong_FromLongLong(tags_code);
        PyObject *id = hex_id(store_hex, phys);
        PyObject *ids = id ? PyList_New(1) : NULL;
        if (PyErr_Occurred() || phys_o == NULL || size_o == NULL || qoff_o == NULL || tags_o == NULL || ids == NULL) {
            Py_XDECREF(phys_o);
            Py_XDECREF(size_o);
            Py_XDECREF(qoff_o);
            Py_XDECREF(tags_o);
            Py_XDECREF(id);
            Py_XDECREF(ids);
            goto error;
        }
        PyList_SET_ITEM(ids, 0, id);
        PyObject *rv[7] = {Py_NewRef(put_ok), Py_NewRef(phys_o), Py_NewRef(size_o), ids, Py_NewRef(qoff_o),
                           Py_NewRef(int_one), Py_NewRef(store_ts_o)};
        PyObject *res = slotted_new(&result_layout, rv);
        PyObject *dv[12] = {Py_NewRef(p->topic), Py_NewRef(qid_o), phys_o, size_o, tags_o, Py_NewRef(store_ts_o),
                            qoff_o, Py_NewRef(keys ? keys : Py_None), Py_NewRef(uniq ? uniq : Py_None),
                            Py_NewRef(p->f[2]), Py_NewRef(p->f[5]), Py_NewRef(p->props)};
        PyObject *req = slotted_new(&dispatch_layout, dv);
        if (res == NULL || req == NULL) {
            Py_XDECREF(res);
            Py_XDECREF(req);
            goto error;
        }
        PyList_SET_ITEM(results, i, res);
        PyList_SET_ITEM(requests, i, req);
        pos += p->size;
    }
    {
        PyObject *s = PyLong_FromLongLong(start_pos), *e = PyLong_FromLongLong(pos);
        if (s != NULL && e != NULL)
            ret = PyTuple_Pack(5, PyTuple_GET_ITEM(begun, 0), s, e, results, requests);
        Py_XDECREF(s);
        Py_XDECREF(e);
    }
    if (ret == NULL) goto error;
    goto done;
give_back:
    for (Py_ssize_t k = taken - 1; k >= 0; k--) {
        int rc = undo_prior[k] == NULL ? PyDict_DelItem(table, undo_keys[k])
                                       : PyDict_SetItem(table, undo_keys[k], undo_prior[k]);
        if (rc < 0) goto error;
    }
decline:
    ret = Py_NewRef(Py_None);
    goto done;
not_impl:
    ret = Py_NewRef(Py_NotImplemented);
    goto done;
error:
    ret = NULL;
done:
    if (out.obj) PyBuffer_Release(&out);
    if (undo_keys != NULL)
        for (Py_ssize_t k = 0; k < taken; k++) {
            Py_DECREF(undo_keys[k]);
            Py_XDECREF(undo_prior[k]);
        }
    PyMem_Free(undo_keys);
    PyMem_Free(undo_prior);
    Py_XDECREF(store_hex);
    Py_XDECREF(results);
    Py_XDECREF(requests);
    Py_XDECREF(begun);
    parts_clear(parts, n);
    PyMem_Free(parts);
    return ret;
}

/* ---- frames of a read (protocol/frame.py FrameDecoder) ----------------------------------------------------- */
/* A JSON header parsed into the dict orjson.loads gives, for the plain shape only: one object whose values are
 * strings, integers of at most 18 digits, true / false / null, or (one level down) objects of those. Anything else
 * (floats, arrays, deeper objects, a string with a raw control character, a lone surrogate or invalid UTF-8, a
 * syntax error) gives `unusual` and the caller hands the frame to orjson, which decides (and raises). */
typedef struct {
    const unsigned char *p, *end;
    int unusual;
} jscan;

static void js_ws(jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Four hex digits -> their value, -1 if one is not a hex digit. */
static int hex4(const unsigned char *p) {
    int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3]);
    return (a | b | c | d) < 0 ? -1 : a << 12 | b << 8 | c << 4 | d;
}

static PyObject *one_char_keys[128];
static PyObject *known_keys[32]; /* NULL-terminated: the JSON header's keys and the V1 send header's */
static PyObject *js_unescape(jscan *s, const unsigned char *start, const unsigned char *q, int key);

/* A decoded string: interned when it is a key; invalid UTF-8 (NULL with UnicodeDecodeError) is unusual. */
static PyObject *js_done(jscan *s, PyObject *out, int key) {
    if (out == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
        PyErr_Clear();
        s->unusual = 1;
        return NULL;
    }
    if (key) PyUnicode_InternInPlace(&out);
    return out;
}

/* The string at s->p (just past its opening quote). key: a dict key (interned). NULL with unusual set, or with
 * an exception (memory). */
/* js_class[c]: 0 for a byte a JSON string takes as it is (printable ASCII but '"' and '\\'), else what it is */
enum { JS_PLAIN = 0, JS_QUOTE, JS_ESCAPE, JS_CONTROL, JS_HIGH };
static unsigned char js_class[256];

static void js_class_init(void) {
    for (int c = 0; c < 256; c++)
        js_class[c] = c < 0x20 ? JS_CONTROL : c >= 0x80 ? JS_HIGH : c == '"' ? JS_QUOTE : c == '\\' ? JS_ESCAPE : JS_PLAIN;
}

static PyObject *js_string(jscan *s, int key) {
    const unsigned char *start = s->p, *q = s->p, *end = s->end;
    int escaped = 0, ascii = 1;
    for (;;) { /* one table lookup per plain byte */
        while (q < end && js_class[*q] == JS_PLAIN) q++;
        if (q >= end) goto unusual;
        unsigned char cls = js_class[*q];
        if (cls == JS_QUOTE) break;
        if (cls == JS_CONTROL) goto unusual;
        if (cls == JS_ESCAPE) {
            escaped = 1;
            if (++q >= end) goto unusual;
        } else {
            ascii = 0;
        }
        q++;
    }
    s->p = q + 1;
    PyObject *out;
    if (!escaped) {
        Py_ssize_t n = q - start;
        if (key) {
            if (n == 1 && start[0] < 128 && one_char_keys[start[0]] != NULL)
                return Py_NewRef(one_char_keys[start[0]]);
            for (int i = 0; known_keys[i] != NULL; i++) /* the header's own keys: no new string */
                if (PyUnicode_GET_LENGTH(known_keys[i]) == n && memcmp(PyUnicode_DATA(known_keys[i]), start, (size_t)n) == 0)
                    return Py_NewRef(known_keys[i]);
        }
        out = ascii ? (key ? PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, start, n) : small_ascii(start, n))
                    : PyUnicode_DecodeUTF8((const char *)start, n, "strict");
    } else if (ascii && !key) { /* escapes in an ASCII string: written straight into the str when all ASCII */
        out = PyUnicode_New(q - start, 127);
        if (out == NULL) return NULL;
        Py_UCS1 *d = PyUnicode_1BYTE_DATA(out);
        Py_ssize_t n = 0;
        const unsigned char *r = start;
        while (r < q) {
            if (*r != '\\') { /* the run up to the next escape, copied at once */
                const unsigned char *e = memchr(r, '\\', (size_t)(q - r));
                size_t run = (size_t)((e != NULL ? e : q) - r);
                memcpy(d + n, r, run);
                n += (Py_ssize_t)run;
                r += run;
                continue;
            }
            unsigned char c = r[1];
            int v = -1;
            if (c == 'u' && q - r >= 6 && r[2] == '0' && r[3] == '0') {
                int h2 = hexval(r[4]), h3 = hexval(r[5]);
                if (h2 >= 0 && h3 >= 0 && h2 < 8) v = h2 << 4 | h3;
                r += 6;
            } else {
                v = c == '"' ? '"' : c == '\\' ? '\\' : c == '/' ? '/' : c == 'b' ? '\b' : c == 'f' ? '\f'
                    : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : -1;
                r += 2;
            }
            if (v < 0) { /* a non-ASCII escape or a bad one: the general unescape below decides */
                Py_DECREF(out);
                out = NULL;
                break;
            }
            d[n++] = (Py_UCS1)v;
        }
        if (out != NULL) {
            if (n != q - start && PyUnicode_Resize(&out, n) < 0) return NULL;
            return out;
        }
        return js_unescape(s, start, q, key);
    } else {
        return js_unescape(s, start, q, key);
    }
    return js_done(s, out, key);
unusual:
    s->unusual = 1;
    return NULL;
}

/* A string with escapes (start..q, the closing quote at q): unescaped into UTF-8, then decoded (which validates
 * the raw UTF-8 parts too). */
static PyObject *js_unescape(jscan *s, const unsigned char *start, const unsigned char *q, int key) {
    PyObject *out;
    {
        char small[512];
        small[0] = 0;
        Py_ssize_t cap = q - start;
        char *buf = cap <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)cap);
        if (buf == NULL) return PyErr_NoMemory();
        Py_ssize_t n = 0;
        const unsigned char *r = start;
        int bad = 0;
        while (r < q && !bad) {
            if (*r != '\\') {
                buf[n++] = (char)*r++;
                continue;
            }
            r++;
            unsigned char c = *r++;
            switch (c) {
            case '"': buf[n++] = '"'; break;
            case '\\': buf[n++] = '\\'; break;
            case '/': buf[n++] = '/'; break;
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            case 'u': {
                int hi = q - r >= 4 ? hex4(r) : -1;
                if (hi < 0) {
                    bad = 1;
                    break;
                }
                uint32_t cp = (uint32_t)hi;
                r += 4;
                if (cp >= 0xD800 && cp <= 0xDFFF) { /* surrogates: a pair becomes one code point */
                    int lo = cp < 0xDC00 && q - r >= 6 && r[0] == '\\' && r[1] == 'u' ? hex4(r + 2) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        bad = 1;
                        break;
                    }
                    r += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                }
                /* UTF-8 of cp (never longer than the 6 or 12 escape bytes it replaces) */
                if (cp < 0x80) {
                    buf[n++] = (char)cp;
                } else if (cp < 0x800) {
                    buf[n++] = (char)(0xC0 | cp >> 6);
                    buf[n++] = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    buf[n++] = (char)(0xE0 | cp >> 12);
                    buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                    buf[n++] = (char)(0x80 | (cp & 0x3F));
                } else {
                    buf[n++] = (char)(0xF0 | cp >> 18);
                    buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                    buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                    buf[n++] = (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default:
                bad = 1;
            }
        }
        out = bad ? NULL : PyUnicode_DecodeUTF8(buf, n, "strict");
        if (buf != small) PyMem_Free(buf);
        if (bad) goto unusual;
    }
    return js_done(s, out, key);
unusual:
    s->unusual = 1;
    return NULL;
}

static PyObject *js_value(jscan *s, int depth);

static PyObject *js_object(jscan *s, int depth) { /* s->p just past '{' */
    /* sized for a RemotingCommand header (7 keys) and a send's extFields (13): no resize while it fills */
    PyObject *d = _PyDict_NewPresized(depth ? 14 : 8);
    if (d == NULL) return NULL;
    js_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return d;
    }
    for (;;) {
        js_ws(s);
        if (s->p >= s->end || *s->p != '"') goto unusual;
        s->p++;
        PyObject *k = js_string(s, 1);
        if (k == NULL) goto fail;
        js_ws(s);
        if (s->p >= s->end || *s->p != ':') {
            Py_DECREF(k);
            goto unusual;
        }
        s->p++;
        js_ws(s);
        PyObject *v = js_value(s, depth);
        if (v == NULL) {
            Py_DECREF(k);
            goto fail;
        }
        int rc = PyDict_SetItem(d, k, v);
        Py_DECREF(k);
        Py_DECREF(v);
        if (rc < 0) goto fail;
        js_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return d;
        }
        goto unusual;
    }
unusual:
    s->unusual = 1;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *js_value(jscan *s, int depth) {
    if (s->p >= s->end) goto unusual;
    unsigned char c = *s->p;
    if (c == '"') {
        s->p++;
        return js_string(s, 0);
    }
    if (c == '{') {
        if (depth > 0) goto unusual;
        s->p++;
        return js_object(s, depth + 1);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const unsigned char *q = s->p;
        int neg = *q == '-';
        if (neg) q++;
        const unsigned char *digits = q;
        int64_t v = 0;
        while (q < s->end && *q >= '0' && *q <= '9') v = v * 10 + (*q++ - '0');
        Py_ssize_t nd = q - digits;
        if (nd == 0 || nd > 18 || (nd > 1 && digits[0] == '0')) goto unusual;
        if (q < s->end && (*q == '.' || *q == 'e' || *q == 'E')) goto unusual;
        s->p = q;
        return PyLong_FromLongLong(neg ? -v : v);
    }
    if (s->end - s->p >= 4 && memcmp(s->p, "true", 4) == 0) {
        s->p += 4;
        Py_RETURN_TRUE;
    }
    if (s->end - s->p >= 5 && memcmp(s->p, "false", 5) == 0) {
        s->p += 5;
        Py_RETURN_FALSE;
    }
    if (s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) {
        s->p += 4;
        Py_RETURN_NONE;
    }
unusual:
    s->unusual = 1;
    return NULL;
}

/* parse_json_header(data) -> dict | None: the dict orjson.loads(data) gives, or None when the header is not of
 * the plain shape (orjson decides).   (API 8) */
static PyObject *parse_header(const unsigned char *p, Py_ssize_t n) {
    jscan s = {p, p + n, 0};
    js_ws(&s);
    if (s.p >= s.end || *s.p != '{') Py_RETURN_NONE;
    s.p++;
    PyObject *d = js_object(&s, 0);
    if (d == NULL) {
        if (!s.unusual) return NULL;
        Py_RETURN_NONE;
    }
    js_ws(&s);
    if (s.p != s.end) {
        Py_DECREF(d);
        Py_RETURN_NONE;
    }
    return d;
}

static PyObject *sp_parse_json_header(PyObject *self, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *d = parse_header((const unsigned char *)v.buf, v.len);
    PyBuffer_Release(&v);
    return d;
}

/* decode_frames(data, max_frame_size, cls) -> (commands, pos)   (API 8)
 * protocol/frame.py FrameDecoder._parse_view for the frames it takes whole: from the start of `data` (bytes), every
 * complete frame of serialize type 0 whose header parse_json_header and command_from_header take becomes
 * cls(...) with its body (bytes, None when empty); it stops at the first frame it does not take (incomplete, a
 * prefix the Python parser refuses, another serialize type, an unusual header) and returns where that frame
 * starts: the Python parser goes on from there (and raises what it raises). */
static PyObject *sp_decode_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_frames(data, max_frame_size, cls)");
        return NULL;
    }
    int64_t max_size;
    if (as_i64(args[1], &max_size) < 0) return NULL;
    Py_buffer view; /* everything is copied out of it: a bytearray may be resized afterwards */
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    while (end - pos >= 8) {
        int64_t length = (int32_t)get32(b + pos);
        uint32_t word = get32(b + pos + 4);
        if (length < 4 || length + 4 > max_size) break;
        Py_ssize_t frame_end = pos + 4 + (Py_ssize_t)length;
        if (frame_end > end) break;
        int64_t hlen = word & 0xFFFFFF;
        if ((word >> 24) != 0 || hlen > length - 4) break;
        Py_ssize_t hstart = pos + 8, bstart = hstart + (Py_ssize_t)hlen;
        PyObject *d = parse_header(b + hstart, (Py_ssize_t)hlen);
        if (d == NULL) goto error;
        if (d == Py_None) {
            Py_DECREF(d);
            break;
        }
        PyObject *body = bstart < frame_end
                             ? PyBytes_FromStringAndSize((const char *)b + bstart, frame_end - bstart)
                             : Py_NewRef(Py_None);
        if (body == NULL) {
            Py_DECREF(d);
            goto error;
        }
        PyObject *call[3] = {args[2], d, body};
        PyObject *cmd = sp_command_from_header(NULL, call, 3);
        Py_DECREF(d);
        Py_DECREF(body);
        if (cmd == NULL) goto error;
        if (cmd == Py_None) {
            Py_DECREF(cmd);
            break;
        }
        int rc = PyList_Append(out, cmd);
        Py_DECREF(cmd);
        if (rc < 0) goto error;
        pos = frame_end;
    }
    PyBuffer_Release(&view);
    PyObject *p = PyLong_FromSsize_t(pos);
    if (p == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *ret = PyTuple_Pack(2, out, p);
    Py_DECREF(out);
    Py_DECREF(p);
    return ret;
error:
    PyBuffer_Release(&view);
    Py_DECREF(out);
    return NULL;
}


/* ---- dedup_remember(items, start, map, put_ok, skip_prefixes, skip_topics) -> (next, last_ts) (API 10) ----------
 * broker/services/dedup.py DedupService.after_put_many_py's loop for the common item, from items[start]: an item
 * (req, [msg], result) stored PUT_OK with its store time, a str UNIQ_KEY, no REAL_TOPIC, a topic that is not a
 * retry / DLQ / skipped one and reconsume times <= 0 puts key "uniq SEP topic" -> "ts SEP queueId SEP queueOffset
 * SEP msgId SEP group" into `map` (a DedupMap, _dedupmap.c) at the young end, straight from the fields' bytes (no
 * str is made); an item without a UNIQ_KEY, or one de-dup skips, puts nothing. It stops at the first item the
 * Python code must take (another status, REAL_TOPIC, a non-ASCII, odd-typed or very long field, no store time) and
 * returns its index, or len(items); last_ts: the store time of the last PUT_OK single it went past (-1 if none), as
 * the Python loop's. */
static PyObject *str_status, *str_msg_ids, *str_store_ts, *str_queue_offset, *str_ext_fields, *str_real_topic,
    *str_producer_group;

static int dd_ascii_str(PyObject *o) { return o != NULL && PyUnicode_CheckExact(o) && PyUnicode_IS_ASCII(o); }

static Py_ssize_t dd_itoa(int64_t v, char *out) { /* decimal, as str(int) */
    char tmp[24];
    Py_ssize_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    Py_ssize_t len = 0;
    if (v < 0) out[len++] = '-';
    while (n) out[len++] = tmp[--n];
    return len;
}

static PyObject *sp_dedup_remember(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyObject_TypeCheck(args[2], &orbitmq_DedupMap_Type)
        || !PyTuple_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "dedup_remember(items, start, map, put_ok, skip_prefixes, skip_topics)");
        return NULL;
    }
    PyObject *items = args[0], *map = args[2], *put_ok = args[3], *prefixes = args[4], *skip_topics = args[5];
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    if (k == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    int64_t last_ts = -1;
    PyObject *status = NULL, *msgs = NULL, *ids = NULL, *tsobj = NULL, *m = NULL, *props = NULL, *topic = NULL,
             *rt = NULL, *qid = NULL, *qoff = NULL, *ext = NULL, *key = NULL;
    int failed = 0;
    char kbuf[512], vbuf[512]; /* a key or entry that does not fit is left to the Python code */
    for (; k < n && !failed; k++) {
        Py_CLEAR(status); Py_CLEAR(msgs); Py_CLEAR(ids); Py_CLEAR(tsobj); Py_CLEAR(m); Py_CLEAR(props);
        Py_CLEAR(topic); Py_CLEAR(rt); Py_CLEAR(qid); Py_CLEAR(qoff); Py_CLEAR(ext);
        PyObject *it = PyList_GET_ITEM(items, k);
        if (!PyTuple_CheckExact(it) || PyTuple_GET_SIZE(it) != 3) break;
        PyObject *req = PyTuple_GET_ITEM(it, 0), *result = PyTuple_GET_ITEM(it, 2);
        msgs = Py_NewRef(PyTuple_GET_ITEM(it, 1));
        if ((status = PyObject_GetAttr(result, str_status)) == NULL) goto fail;
        if (status != put_ok || !PyList_CheckExact(msgs) || PyList_GET_SIZE(msgs) != 1) break;
        if ((ids = PyObject_GetAttr(result, str_msg_ids)) == NULL) goto fail;
        if (!PyList_CheckExact(ids) || PyList_GET_SIZE(ids) == 0) break;
        if ((tsobj = PyObject_GetAttr(result, str_store_ts)) == NULL) goto fail;
        if (!PyLong_CheckExact(tsobj)) break;
        int overflow = 0;
        long long ts = PyLong_AsLongLongAndOverflow(tsobj, &overflow);
        if (overflow || ts <= 0) { /* 0: the Python code takes the clock's time */
            if (PyErr_Occurred()) goto fail;
            break;
        }
        last_ts = ts;
        m = Py_NewRef(PyList_GET_ITEM(msgs, 0));
        if ((props = PyObject_GetAttr(m, str_properties)) == NULL) goto fail;
        if (!PyDict_CheckExact(props)) break;
        PyObject *uniq = PyDict_GetItemWithError(props, str_uniq_key); /* borrowed */
        if (uniq == NULL) {
            if (PyErr_Occurred()) goto fail;
            continue; /* nothing to remember */
        }
        Py_INCREF(uniq);
        Py_XSETREF(key, uniq); /* held until the next item */
        if (!dd_ascii_str(uniq)) break;
        if ((topic = PyObject_GetAttr(m, str_topic)) == NULL) goto fail;
        if (!dd_ascii_str(topic)) break;
        if ((rt = PyObject_GetAttr(m, str_reconsume)) == NULL) goto fail;
        if (!PyLong_CheckExact(rt)) break;
        if (PyDict_GetItemWithError(props, str_real_topic) != NULL) break; /* the response queue id: Python */
        if (PyErr_Occurred()) goto fail;
        long reconsume = PyLong_AsLongAndOverflow(rt, &overflow);
        if (overflow > 0 || reconsume > 0) continue;
        if (overflow < 0) break;
        int skip = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(prefixes) && !skip; i++) {
            Py_ssize_t r = PyUnicode_Tailmatch(topic, PyTuple_GET_ITEM(prefixes, i), 0, PY_SSIZE_T_MAX, -1);
            if (r < 0) goto fail;
            skip = (int)r;
        }
        if (!skip) {
            int in = PySet_Contains(skip_topics, topic);
            if (in < 0) goto fail;
            skip = in;
        }
        if (skip) continue;
        if ((qid = PyObject_GetAttr(m, str_queue_id)) == NULL || (qoff = PyObject_GetAttr(result, str_queue_offset)) == NULL
            || (ext = PyObject_GetAttr(req, str_ext_fields)) == NULL)
            goto fail;
        if (!PyLong_CheckExact(qid) || !PyLong_CheckExact(qoff)) break;
        PyObject *group = NULL; /* borrowed */
        if (ext != Py_None) {
            if (!PyDict_CheckExact(ext)) break;
            group = PyDict_GetItemWithError(ext, str_producer_group);
            if (group == NULL && PyErr_Occurred()) goto fail;
            if (group != NULL && !PyUnicode_CheckExact(group)) break;
            if (group == NULL || PyUnicode_GET_LENGTH(group) == 0) {
                group = PyDict_GetItemWithError(ext, str_a);
                if (group == NULL && PyErr_Occurred()) goto fail;
                if (group != NULL && !PyUnicode_CheckExact(group)) break;
            }
        }
        if (group != NULL && !PyUnicode_IS_ASCII(group)) break;
        PyObject *msg_id = PyList_GET_ITEM(ids, 0);
        if (!dd_ascii_str(msg_id)) break;
        long long q = PyLong_AsLongLongAndOverflow(qid, &overflow);
        if (overflow) break;
        long long qo = PyLong_AsLongLongAndOverflow(qoff, &overflow);
        if (overflow) break;
        /* the key: uniq SEP topic; the entry: ts SEP qid SEP queueOffset SEP msgId SEP group */
        Py_ssize_t ul = PyUnicode_GET_LENGTH(uniq), tl = PyUnicode_GET_LENGTH(topic);
        Py_ssize_t il = PyUnicode_GET_LENGTH(msg_id), gl = group == NULL ? 0 : PyUnicode_GET_LENGTH(group);
        if (ul + 1 + tl > (Py_ssize_t)sizeof kbuf || 72 + il + 1 + gl > (Py_ssize_t)sizeof vbuf) break;
        memcpy(kbuf, PyUnicode_DATA(uniq), (size_t)ul);
        kbuf[ul] = 0x1f;
        memcpy(kbuf + ul + 1, PyUnicode_DATA(topic), (size_t)tl);
        Py_ssize_t a = dd_itoa(ts, vbuf);
        vbuf[a++] = 0x1f;
        a += dd_itoa(q, vbuf + a);
        vbuf[a++] = 0x1f;
        a += dd_itoa(qo, vbuf + a);
        vbuf[a++] = 0x1f;
        memcpy(vbuf + a, PyUnicode_DATA(msg_id), (size_t)il);
        a += il;
        vbuf[a++] = 0x1f;
        if (gl) memcpy(vbuf + a, PyUnicode_DATA(group), (size_t)gl);
        if (orbitmq_dm_put(map, kbuf, ul + 1 + tl, vbuf, a + gl, ts, 0) < 0) goto fail;
    }
    goto done;
fail:
    failed = 1;
done:
    Py_XDECREF(status); Py_XDECREF(msgs); Py_XDECREF(ids); Py_XDECREF(tsobj); Py_XDECREF(m); Py_XDECREF(props);
    Py_XDECREF(topic); Py_XDECREF(rt); Py_XDECREF(qid); Py_XDECREF(qoff); Py_XDECREF(ext); Py_XDECREF(key);
    if (failed) return NULL;
    return Py_BuildValue("(nL)", k, (long long)last_ts);
}

/* ---- put_ok_answer(cls, code, head, msg_id, queue_id, queue_offset, opaque, tail) -> cls | None (API 9) --------
 * broker/handlers/send.py put_ok_answer_py: cls(code, frame) where frame is the JSON frame of the send handler's
 * PUT_OK, header = head + msgId + '","queueId":"' + queueId + '","queueOffset":"' + queueOffset
 * + '"},"flag":1,"language":"JAVA","opaque":' + opaque + ',' + tail (head and tail UTF-8 bytes); None when msg_id is
 * not an ASCII str or a number is not an int (the Python twin decides). */
static PyObject *sp_put_ok_answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyBytes_CheckExact(args[2]) || !PyBytes_CheckExact(args[7])) {
        PyErr_SetString(PyExc_TypeError, "put_ok_answer(cls, code, head, msg_id, queue_id, queue_offset, opaque, tail)");
        return NULL;
    }
    PyObject *msg_id = args[3];
    if (!dd_ascii_str(msg_id) || !PyLong_CheckExact(args[4]) || !PyLong_CheckExact(args[5]) || !PyLong_CheckExact(args[6]))
        Py_RETURN_NONE;
    int64_t nums[3];
    for (int i = 0; i < 3; i++) {
        int overflow = 0;
        nums[i] = PyLong_AsLongLongAndOverflow(args[4 + i], &overflow);
        if (overflow) Py_RETURN_NONE;
        if (nums[i] == -1 && PyErr_Occurred()) return NULL;
    }
    static const char q1[] = "\",\"queueId\":\"", q2[] = "\",\"queueOffset\":\"",
                      q3[] = "\"},\"flag\":1,\"language\":\"JAVA\",\"opaque\":";
    char digits[3][24];
    Py_ssize_t dl[3];
    for (int i = 0; i < 3; i++) dl[i] = dd_itoa(nums[i], digits[i]);
    Py_ssize_t hl = PyBytes_GET_SIZE(args[2]), il = PyUnicode_GET_LENGTH(msg_id), tl = PyBytes_GET_SIZE(args[7]);
    Py_ssize_t n = hl + il + (Py_ssize_t)(sizeof q1 - 1) + dl[0] + (Py_ssize_t)(sizeof q2 - 1) + dl[1] +
                   (Py_ssize_t)(sizeof q3 - 1) + dl[2] + 1 + tl;
    if (n > 0x00FFFFFF) Py_RETURN_NONE;
    PyObject *frame = PyBytes_FromStringAndSize(NULL, 8 + n);
    if (frame == NULL) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(frame);
    uint32_t total = (uint32_t)(4 + n), hdr = (uint32_t)n;
    w[0] = (unsigned char)(total >> 24); w[1] = (unsigned char)(total >> 16); w[2] = (unsigned char)(total >> 8);
    w[3] = (unsigned char)total;
    w[4] = (unsigned char)(hdr >> 24); w[5] = (unsigned char)(hdr >> 16); w[6] = (unsigned char)(hdr >> 8);
    w[7] = (unsigned char)hdr;
    w += 8;
#define PUT(src, len) do { memcpy(w, (src), (size_t)(len)); w += (len); } while (0)
    PUT(PyBytes_AS_STRING(args[2]), hl);
    PUT(PyUnicode_DATA(msg_id), il);
    PUT(q1, sizeof q1 - 1);
    PUT(digits[0], dl[0]);
    PUT(q2, sizeof q2 - 1);
    PUT(digits[1], dl[1]);
    PUT(q3, sizeof q3 - 1);
    PUT(digits[2], dl[2]);
    *w++ = ',';
    PUT(PyBytes_AS_STRING(args[7]), tl);
#undef PUT
    slot_layout *lay = layout_of_slots(args[0], 2);
    if (lay == NULL) {
        PyObject *cargs[2] = {args[1], frame};
        PyObject *r = PyObject_Vectorcall(args[0], cargs, 2, NULL);
        Py_DECREF(frame);
        return r;
    }
    PyObject *v[2] = {Py_NewRef(args[1]), frame};
    return slotted_new(lay, v);
}

static PyMethodDef methods[] = {
    {"crc32", sp_crc32, METH_O, "zlib.crc32(data) (unsigned)."},
    {"java_hash", sp_java_hash, METH_O, "Java String.hashCode over UTF-16 code units, signed 32-bit."},
    {"command_from_header", (PyCFunction)(void (*)(void))sp_command_from_header, METH_FASTCALL,
     "RemotingCommand from a decoded JSON header of the common shape, or None."},
    {"encode_json_frame", sp_encode_json_frame, METH_O,
     "The whole JSON (serialize type 0) frame of a RemotingCommand of the common shape, or None."},
    {"decode_send_v2", (PyCFunction)(void (*)(void))sp_decode_send_v2, METH_FASTCALL,
     "SendMessageRequestHeader from the common send extFields (V2 or V1 names), or None."},
    {"decode_properties", sp_decode_properties, METH_O, "Lenient decode of a message properties string."},
    {"encode_record_into", (PyCFunction)(void (*)(void))sp_encode_record_into, METH_FASTCALL,
     "Write one V1 stored record at buf[pos:]; returns its size."},
    {"decode_records_v4", (PyCFunction)(void (*)(void))sp_decode_records_v4, METH_FASTCALL,
     "Decode consecutive common records from pos; returns (list, next pos)."},
    {"decode_record_v4", (PyCFunction)(void (*)(void))sp_decode_record_v4, METH_FASTCALL,
     "Decode the common record (V1 magic, IPv4 hosts) or return None."},
    {"index_put", (PyCFunction)(void (*)(void))sp_index_put, METH_FASTCALL,
     "IndexFile put: entry, slot and header written in place; returns prev."},
    {"split_batch_body", sp_split_batch_body, METH_O,
     "SEND_BATCH_MESSAGE body -> [(flag, body, properties text)], None when malformed."},
    {"encode_run_into", (PyCFunction)(void (*)(void))sp_encode_run_into, METH_FASTCALL,
     "Records of a one-queue run written back to back; returns their msg ids."},
    {"index_put_key", (PyCFunction)(void (*)(void))sp_index_put_key, METH_FASTCALL,
     "index_put of index_key_hash(topic + '#' + key); returns prev."},
    {"parse_json_header", sp_parse_json_header, METH_O,
     "The dict orjson.loads gives for a JSON header of the plain shape, else None."},
    {"decode_frames", (PyCFunction)(void (*)(void))sp_decode_frames, METH_FASTCALL,
     "The complete common JSON frames at the start of a read: (commands, where the rest starts)."},
    {"new_slotted", (PyCFunction)(void (*)(void))sp_new_slotted, METH_FASTCALL,
     "cls(*values) for a class whose __init__ only assigns its __slots__ in order: the slots set directly."},
    {"append_singles", (PyCFunction)(void (*)(void))sp_append_singles, METH_FASTCALL,
     "Several single-message puts written in one pass: (seg, start, end, results, requests), None or "
     "NotImplemented."},
    {"put_ok_answer", (PyCFunction)(void (*)(void))sp_put_ok_answer, METH_FASTCALL,
     "The send handler's PUT_OK as cls(code, frame), built in one buffer, or None."},
    {"dedup_remember", (PyCFunction)(void (*)(void))sp_dedup_remember, METH_FASTCALL,
     "De-dup entries of the common stored singles from items[start]: (where Python goes on, last store time)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "orbitmq.base._speedups",
                                    "Native twins of OrbitMQ's per-message hot paths.", -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
    js_class_init();
    if (header_names_init() < 0 || send_names_init() < 0) return NULL;
    PyObject *st = PyImport_ImportModule("struct");
    if (st == NULL) return NULL;
    struct_error = PyObject_GetAttrString(st, "error");
    Py_DECREF(st);
    if (struct_error == NULL) return NULL;
    /* the attribute and property names the native code looks up, interned once */
    static const struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&str_body, "body"}, {&str_flag, "flag"}, {&str_sys_flag, "sys_flag"}, {&str_born_ts, "born_timestamp"},
        {&str_reconsume, "reconsume_times"}, {&str_prepared, "prepared_transaction_offset"}, {&str_topic, "topic"},
        {&str_queue_id, "queue_id"}, {&str_born_host, "born_host"}, {&str_store_host, "store_host"},
        {&str_properties, "properties"}, {&str_tags, "TAGS"}, {&str_keys, "KEYS"}, {&str_uniq_key, "UNIQ_KEY"},
        {&str_status, "status"}, {&str_msg_ids, "msg_ids"}, {&str_store_ts, "store_timestamp"},
        {&str_queue_offset, "queue_offset"}, {&str_ext_fields, "ext_fields"}, {&str_real_topic, "REAL_TOPIC"}, {&str_producer_group, "producerGroup"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    not_v6 = PyLong_FromLong(~(long)(BORNHOST_V6 | STOREHOST_V6));
    int_one = PyLong_FromLong(1);
    if (!not_v6 || !int_one) return NULL;
    static const char *const known[] = {"code", "extFields", "flag", "language", "opaque", "remark",
                                        "serializeTypeCurrentRPC", "version", "producerGroup", "topic",
                                        "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                                        "bornTimestamp", "properties", "reconsumeTimes", "unitMode", "batch",
                                        "maxReconsumeTimes", NULL};
    for (int i = 0; known[i] != NULL; i++)
        if ((known_keys[i] = PyUnicode_InternFromString(known[i])) == NULL) return NULL;
    for (int c = 'a'; c <= 'z'; c++) { /* the V2 send header's one-letter keys, interned once */
        char k[2] = {(char)c, 0};
        if ((one_char_keys[c] = PyUnicode_InternFromString(k)) == NULL) return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    /* native.py loads the module only when this matches its API_VERSION: a stale build from an older source
     * (an editable install not rebuilt) is ignored instead of missing functions. Bump it with every change of a
     * function's contract or the set of functions. */
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "API_VERSION", 10) < 0 || orbitmq_dm_add_type(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
