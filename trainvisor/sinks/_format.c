/* Optional C formatting of the sinks' records: JSON Lines (sinks/jsonl.py) and
 * CSV rows (sinks/caffe_csv.py), byte for byte what their Python formatters give
 * (tests/test_caffe_speedups.py checks both with hypothesis). Numbers use the
 * shared exact repr() fast path (_native/fastnum.h). Anything unusual goes to the
 * Python formatter the caller passes, so results never differ.
 * Built at install time when a compiler is there (setup.py, optional=True).
 */
#include "_format.h"

/* ---- a growing text buffer and the JSON pieces ---- */

/* JSON number for a float or None; 0 ok, 1 not a float/None (caller falls back), -1 error */
static int put_number(sbuf *b, PyObject *v) {
    if (v == Py_None) return sb_str(b, "null");
    if (!PyFloat_CheckExact(v)) return 1;
    double d = PyFloat_AS_DOUBLE(v);
    char buf[40];
    int n;
    char *r = double_repr_alloc(d, buf, &n);
    if (!r) return -1;
    int rc;
    if (Py_IS_NAN(d) || Py_IS_INFINITY(d)) { /* not JSON numbers: strings */
        rc = sb_str(b, "\"") || sb_put(b, r, (size_t)n) || sb_str(b, "\"");
    } else rc = sb_put(b, r, (size_t)n);
    if (r != buf) PyMem_Free(r);
    return rc ? -1 : 0;
}
/* put_number for a field whose object often repeats (wall_time is one object per
 * block, seconds one per line): the text of the last object is reused. The cache
 * holds a reference, so an address cannot be reused by another object meanwhile. */
typedef struct { PyObject *obj; char text[40]; size_t len; } numcache;

static int put_number_cached(sbuf *b, PyObject *v, numcache *c) {
    if (v == c->obj) return sb_put(b, c->text, c->len) ? -1 : 0;
    size_t mark = b->len;
    int rc = put_number(b, v);
    if (rc == 0 && b->len - mark < sizeof c->text) {
        Py_XDECREF(c->obj);
        Py_INCREF(v);
        c->obj = v;
        c->len = b->len - mark;
        memcpy(c->text, b->buf + mark, c->len);
    }
    return rc;
}

/* int or None; same conventions. Digits by put_uint: snprintf cost a fifth of a record. */
static int put_int(sbuf *b, PyObject *v) {
    char tmp[32];
    int n = 0;
    if (v == Py_None) return sb_str(b, "null");
    if (!PyLong_CheckExact(v)) return 1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 1; }
    if (x < 0) tmp[n++] = '-';
    n += put_uint(tmp + n, x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x);
    return sb_put(b, tmp, (size_t)n) ? -1 : 0;
}
static int put_cached(sbuf *b, PyObject *names, PyObject *key) {
    PyObject *q = PyDict_GetItemWithError(names, key);
    if (!q) return PyErr_Occurred() ? -1 : 1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(q, &n);
    if (!s) return -1;
    return sb_put(b, s, (size_t)n) ? -1 : 0;
}


/* One Metric as a JSON line into b: 0 written, 1 not plain (the caller falls back), -1 error. */
static int format_metric_into(sbuf *b, PyObject *ev, PyObject *names, numcache *seconds, numcache *wall) {
    PyObject **f = &PyTuple_GET_ITEM(ev, 0);
    int rc = sb_str(b, "{\"name\": ") ? -1 : put_cached(b, names, f[0]);
    if (!rc) rc = sb_str(b, ", \"value\": ") ? -1 : put_number(b, f[1]);
    if (!rc) rc = sb_str(b, ", \"iteration\": ") ? -1 : put_int(b, f[2]);
    if (!rc) rc = sb_str(b, ", \"phase\": ") ? -1 : put_cached(b, names, f[3]);
    if (!rc) rc = sb_str(b, ", \"test_net\": ") ? -1 : put_int(b, f[4]);
    if (!rc) rc = sb_str(b, ", \"seconds\": ") ? -1 : put_number_cached(b, f[5], seconds);
    if (!rc) rc = sb_str(b, ", \"epoch\": ") ? -1 : put_number(b, f[6]);
    if (!rc) rc = sb_str(b, ", \"wall_time\": ") ? -1 : put_number_cached(b, f[7], wall);
    if (!rc) rc = sb_str(b, ", \"line\": ") ? -1 : put_int(b, f[8]);
    if (!rc) rc = sb_str(b, ", \"stream\": ") ? -1 : put_cached(b, names, f[9]);
    if (!rc && f[10] != Py_None) rc = sb_str(b, ", \"rank\": ") ? -1 : put_int(b, f[10]);
    if (!rc && f[11] != Py_False) rc = f[11] == Py_True ? (sb_str(b, ", \"running\": true") ? -1 : 0) : 1;
    if (!rc) rc = sb_str(b, "}\n") ? -1 : 0;
    return rc;
}

/* The run's constant fields (`, "attempt": 2`) before the closing brace of the record that
 * ends the buffer, as it is written: one pass, where a str.replace over the batch cost a third
 * of the sink's time (a record is one line ending in "}\n"; one that does not is left as is). */
static int end_record(sbuf *b, size_t mark, const char *suffix, size_t n) {
    if (!n || b->len - mark < 2 || memcmp(b->buf + b->len - 2, "}\n", 2)) return 0;
    b->len -= 2;
    return (sb_put(b, suffix, n) || sb_put(b, "}\n", 2)) ? -1 : 0;
}

/* The Python formatter's text for one event, appended to b. */
static int append_fallback(sbuf *b, PyObject *fallback, PyObject *arg) {
    PyObject *line = PyObject_CallOneArg(fallback, arg);
    if (!line) return -1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(line, &n);
    int rc = (!s || sb_put(b, s, (size_t)n)) ? -1 : 0;
    Py_DECREF(line);
    return rc;
}

/* format_metrics(events, metric_type, names, fallback[, suffix]) -> str: the JSON lines of the events.
 * names: the JSON text of each name and phase seen (sinks/jsonl.py keeps it); suffix: constant
 * fields written before each record's closing brace (", \"attempt\": 1"), none by default. */
static PyObject *format_metrics(PyObject *self, PyObject *args) {
    PyObject *events, *mtype, *names, *fallback, *res = NULL;
    const char *suffix = "";
    Py_ssize_t suffix_len = 0;
    if (!PyArg_ParseTuple(args, "OOO!O|s#", &events, &mtype, &PyDict_Type, &names, &fallback,
                          &suffix, &suffix_len)) return NULL;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (!seq) return NULL;
    sbuf b = {NULL, 0, 0};
    numcache seconds_cache = {NULL, {0}, 0}, wall_cache = {NULL, {0}, 0};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ev = items[i];
        size_t mark = b.len;
        int rc = 1;
        if ((PyObject *)Py_TYPE(ev) == mtype && PyTuple_GET_SIZE(ev) == 12)
            rc = format_metric_into(&b, ev, names, &seconds_cache, &wall_cache);
        if (rc > 0) { /* anything unusual: the Python formatter, exactly */
            b.len = mark;
            rc = append_fallback(&b, fallback, ev);
        }
        if (rc == 0) rc = end_record(&b, mark, suffix, (size_t)suffix_len);
        if (rc < 0) goto done;
    }
    res = PyUnicode_DecodeUTF8(b.buf ? b.buf : "", (Py_ssize_t)b.len, "strict");
done:
    Py_XDECREF(seconds_cache.obj);
    Py_XDECREF(wall_cache.obj);
    Py_DECREF(seq);
    PyMem_Free(b.buf);
    return res;
}

/* ---- CSV rows (sinks/caffe_csv.py) ---- */


/* csv_row(items) -> "a,b,c": each item a float (repr), an int (as float(int): NumIters is
 * written as 100.0 by parse_log.py) or None (empty cell). Anything else: NotImplemented. */
static PyObject *csv_row(PyObject *self, PyObject *items) {
    PyObject *seq = PySequence_Fast(items, "csv_row takes a sequence");
    if (!seq) return NULL;
    sbuf b = {NULL, 0, 0};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **it = PySequence_Fast_ITEMS(seq), *res = NULL;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        if (i && sb_put(&b, ",", 1)) rc = -1;
        else rc = put_csv_cell(&b, it[i]);
    }
    if (rc > 0) res = Py_NewRef(Py_NotImplemented);
    else if (rc == 0) res = PyUnicode_DecodeASCII(b.buf ? b.buf : "", (Py_ssize_t)b.len, "strict");
    Py_DECREF(seq);
    PyMem_Free(b.buf);
    return res;
}

static PyObject *py_float_repr(PyObject *self, PyObject *arg) {
    double d = PyFloat_AsDouble(arg);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    char buf[40];
    int n;
    char *r = double_repr_alloc(d, buf, &n);
    if (!r) return NULL;
    PyObject *res = PyUnicode_FromStringAndSize(r, n);
    if (r != buf) PyMem_Free(r);
    return res;
}

static PyMethodDef methods[] = {
    {"format_metrics", format_metrics, METH_VARARGS, "JSON Lines for a list of events (see sinks/jsonl.py)."},
    {"csv_row", csv_row, METH_O, "One CSV row of numbers in repr() form (see sinks/caffe_csv.py)."},
    {"float_repr", py_float_repr, METH_O, "repr(x) for a float, through the fast path when it applies (for tests)."},
    {"csv_pivot", csv_pivot, METH_VARARGS, "Caffe CSV tables: the per-metric loop and rows (see _pivot.c)."},
    {"phase_csv_write", phase_csv_write, METH_VARARGS, "Per-phase CSV tables: the per-metric loop (see _phase_csv.c)."},
    {"latest_update", latest_update, METH_VARARGS, "Prometheus' latest values: the per-record loop (see _latest.c)."},
    {"count_lines", count_lines, METH_VARARGS, "Newlines and a pattern's lines in a stretch of a file, lock released (see _count.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_format", NULL, -1, methods};

PyMODINIT_FUNC PyInit__format(void) { return PyModule_Create(&moduledef); }
