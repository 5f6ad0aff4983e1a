/* What the C files of the sinks' extension (_format.c, _pivot.c, _phase_csv.c, _latest.c, _count.c) share:
 * a growing text buffer, one CSV cell, and the entry points of the others. */
#ifndef TRAINVISOR_SINKS_FORMAT_H
#define TRAINVISOR_SINKS_FORMAT_H

#include "../_native/fastnum.h"

typedef struct { char *buf; size_t len, cap; } sbuf;

static inline int sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        char *nb = PyMem_Realloc(b->buf, cap);
        if (!nb) { PyErr_NoMemory(); return -1; }
        b->buf = nb; b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    return 0;
}
static inline int sb_str(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }

/* One cell: 0 written, 1 not a float/int/None (the caller falls back), -1 error. */
static inline int put_csv_cell(sbuf *b, PyObject *v) {
    double d;
    if (v == Py_None) return 0;
    if (PyFloat_CheckExact(v)) d = PyFloat_AS_DOUBLE(v);
    else if (PyLong_CheckExact(v)) {
        d = PyLong_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
    } else return 1;
    char buf[40];
    int len;
    char *r = double_repr_alloc(d, buf, &len);
    if (!r) return -1;
    int rc = sb_put(b, r, (size_t)len);
    if (r != buf) PyMem_Free(r);
    return rc ? -1 : 0;
}

/* csv_pivot(events, state, env): see _pivot.c */
PyObject *csv_pivot(PyObject *self, PyObject *args);
/* phase_csv_write(events, sink, env): see _phase_csv.c */
PyObject *phase_csv_write(PyObject *self, PyObject *args);
/* latest_update(events, metric_type, checkpoint_type, positions, latest, iteration, epoch): see _latest.c */
PyObject *latest_update(PyObject *self, PyObject *args);
/* count_lines(fd, start, stop, pattern) -> (newlines, patterns): see _count.c */
PyObject *count_lines(PyObject *self, PyObject *args);

#endif /* TRAINVISOR_SINKS_FORMAT_H */
