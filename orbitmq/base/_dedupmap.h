/* DedupMap: the producer de-dup table's compact native map (orbitmq/base/_dedupmap.c). */
#ifndef ORBITMQ_DEDUPMAP_H
#define ORBITMQ_DEDUPMAP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

extern PyTypeObject orbitmq_DedupMap_Type;

/* Put key -> value (UTF-8 bytes) with store time `ts` at the young end; an existing key moves there (its old
 * record is dead) unless keep_existing, which leaves it. Returns 0 (put), 1 (kept) or -1 (MemoryError set). */
int orbitmq_dm_put(PyObject *map, const char *key, Py_ssize_t klen, const char *value, Py_ssize_t vlen, int64_t ts,
                   int keep_existing);

/* Adds the DedupMap type to the module; -1 on error. */
int orbitmq_dm_add_type(PyObject *module);

#endif
