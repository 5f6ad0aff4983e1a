/* Optional C implementation of CaffeParser's per-line loop (parsers/caffe.py).
 *
 * It implements exactly the grammar of _LINE_RE in caffe.py (see the comments
 * there) and the per-match logic of CaffeParser._feed_python, for blocks that
 * are pure ASCII; anything else stays on the Python path. tests/test_caffe_speedups.py
 * checks that both give identical events on every log the project can read.
 * State crosses the boundary as objects with named fields: the parser's
 * CaffeScanState (read at the start of a block, written back at its end) and
 * its ScanEnv (the collaborators). Built at install time when a compiler is
 * there (setup.py, optional=True).
 */
#include "../_native/fastnum.h"
#include "_caffe_grammar.h"

static PyObject *S_train, *S_test, *S_total_loss, *S_lr, *S_iter_per_sec;

/* ---- objects: numbers and the events ---- */

/* Like _float(): the fast path, CPython's parser, else the Python fallback. New ref (maybe None). */
static PyObject *to_float(span v, PyObject *fallback) {
    char buf[64];
    size_t n = (size_t)(v.e - v.s);
    if (n < sizeof(buf)) {
        char *endp = NULL;
        double d;
        if (fast_text_to_double(v.s, v.e, &d) == 0) return PyFloat_FromDouble(d);
        memcpy(buf, v.s, n);
        buf[n] = 0;
        d = PyOS_string_to_double(buf, &endp, NULL);
        if (!(d == -1.0 && PyErr_Occurred()) && endp == buf + n) return PyFloat_FromDouble(d);
        PyErr_Clear();
    }
    PyObject *s = PyUnicode_FromStringAndSize(v.s, (Py_ssize_t)n);
    if (!s) return NULL;
    PyObject *r = PyObject_CallOneArg(fallback, s);
    Py_DECREF(s);
    return r;
}

/* int() of a run of digits */
static PyObject *int_from_span(span d) {
    size_t n = (size_t)(d.e - d.s);
    if (n < 19) {
        long long v = 0;
        for (const char *c = d.s; c < d.e; c++) v = v * 10 + (*c - '0');
        return PyLong_FromLongLong(v);
    }
    PyObject *s = PyUnicode_FromStringAndSize(d.s, (Py_ssize_t)n);
    if (!s) return NULL;
    PyObject *r = PyLong_FromUnicodeObject(s, 10);
    Py_DECREF(s);
    return r;
}

/* What a block's scan works with; the references are owned. */
typedef struct {
    PyObject *out, *wall, *line, *stream;
    PyObject *ipe, *cache, *base_fn, *mtype, *float_fb, *int_fb, *checkpoint_fn;  /* from ScanEnv */
    PyObject *start, *iteration, *test_iteration, *test_net;                    /* CaffeScanState */
    int have_start;
    long long start_us;
    char prev_date[13];
    PyObject *prev_base;
} scan;

/* iteration / ipe, or None */
static PyObject *epoch_of(scan *sc, PyObject *iteration) {
    if (sc->ipe == Py_None || iteration == Py_None || !PyObject_IsTrue(sc->ipe)) Py_RETURN_NONE;
    return PyNumber_TrueDivide(iteration, sc->ipe);
}

/* Appends tuple.__new__(Metric, (...)) without the intermediate tuple; steals `value`. */
static int append_metric(scan *sc, PyObject *name, PyObject *value, PyObject *iteration, PyObject *phase,
                         PyObject *test_net, PyObject *seconds) {
    if (!value) return -1;
    if (value == Py_None) { Py_DECREF(value); return 0; }  /* no number: no metric */
    PyObject *epoch = epoch_of(sc, iteration);
    PyObject *m = epoch ? ((PyTypeObject *)sc->mtype)->tp_alloc((PyTypeObject *)sc->mtype, 12) : NULL;
    if (!m) { Py_XDECREF(epoch); Py_DECREF(value); return -1; }
    PyObject *items[12] = {name, value, iteration, phase, test_net, seconds, epoch, sc->wall, sc->line,
                           sc->stream, Py_None, Py_False};
    for (int i = 0; i < 12; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(m, i, items[i]);
    }
    Py_DECREF(epoch);
    Py_DECREF(value);
    int r = PyList_Append(sc->out, m);
    Py_DECREF(m);
    return r;
}

/* ---- time: microseconds from the glog date, seconds since the first line ---- */

/* The whole-second base of the line's date (cached by the clock); new ref, maybe None. */
static PyObject *date_base(scan *sc, span date) {
    if (sc->prev_base && memcmp(sc->prev_date, date.s, 13) == 0) {
        /* Same second as the previous metric line: the cache lookup would give
         * the same object (nothing can have cleared it in between). */
        Py_INCREF(sc->prev_base);
        return sc->prev_base;
    }
    PyObject *key = PyUnicode_FromStringAndSize(date.s, 13);
    if (!key) return NULL;
    PyObject *base = PyDict_GetItemWithError(sc->cache, key);
    if (base) Py_INCREF(base);
    else if (!PyErr_Occurred()) base = PyObject_CallOneArg(sc->base_fn, key);
    Py_DECREF(key);
    if (!base) return NULL;
    Py_XSETREF(sc->prev_base, Py_NewRef(base));
    memcpy(sc->prev_date, date.s, 13);
    return base;
}

/* The line's time in microseconds: 1 found, 0 none, -1 error. */
static int line_time(scan *sc, const glog_line *g, long long *t_us) {
    PyObject *base = date_base(sc, g->date);
    if (!base) return -1;
    int found = 0;
    if (base != Py_None) {
        int digits = 1;
        long long u = 0;
        for (const char *c = g->usec.s; c < g->usec.e; c++) {
            if (!is_digit(*c)) digits = 0;
            else u = u * 10 + (*c - '0');
        }
        if (!digits) {  /* Python's int() accepts more (spaces, signs, underscores): ask it. */
            PyObject *us = PyUnicode_FromStringAndSize(g->usec.s, 6);
            PyObject *ui = us ? PyObject_CallOneArg(sc->int_fb, us) : NULL;
            Py_XDECREF(us);
            if (!ui) { Py_DECREF(base); return -1; }
            u = ui == Py_None ? 0 : PyLong_AsLongLong(ui);
            digits = ui != Py_None;
            Py_DECREF(ui);
        }
        if (digits) { *t_us = PyLong_AsLongLong(base) + u; found = 1; }
    }
    Py_DECREF(base);
    return PyErr_Occurred() ? -1 : found;
}

/* Seconds since the run's first timed line (which becomes the start); new ref, maybe None. */
static PyObject *line_seconds(scan *sc, const glog_line *g) {
    long long t_us = 0;
    int found = line_time(sc, g, &t_us);
    if (found < 0) return NULL;
    if (!found) Py_RETURN_NONE;
    if (sc->have_start) return PyFloat_FromDouble((double)(t_us - sc->start_us) / 1e6);
    PyObject *start = PyLong_FromLongLong(t_us);
    if (!start) return NULL;
    Py_SETREF(sc->start, start);
    sc->have_start = 1;
    sc->start_us = t_us;
    return PyFloat_FromDouble(0.0);
}

/* ---- the events of one matched line ---- */

static int emit_iteration(scan *sc, const glog_line *g, PyObject *seconds) {
    PyObject *it = int_from_span(g->it);
    if (!it) return -1;
    Py_SETREF(sc->iteration, it);
    if (g->kind == K_LOSS) {
        if (g->speed.s && append_metric(sc, S_iter_per_sec, to_float(g->speed, sc->float_fb), it, S_train,
                                        Py_None, seconds))
            return -1;
        return append_metric(sc, S_total_loss, to_float(g->val, sc->float_fb), it, S_train, Py_None, seconds);
    }
    if (g->kind == K_LR)
        return append_metric(sc, S_lr, to_float(g->val, sc->float_fb), it, S_train, Py_None, seconds);
    PyObject *net = int_from_span(g->val);  /* Testing net (#j) */
    if (!net) return -1;
    Py_SETREF(sc->test_net, net);
    Py_SETREF(sc->test_iteration, Py_NewRef(it));
    return 0;
}

static int emit_output(scan *sc, const glog_line *g, PyObject *seconds) {
    PyObject *v = to_float(g->val, sc->float_fb);
    if (!v || v == Py_None) { Py_XDECREF(v); return v ? 0 : -1; }
    PyObject *name = PyUnicode_FromStringAndSize(g->name.s, g->name.e - g->name.s);
    if (!name) { Py_DECREF(v); return -1; }
    int rc = g->is_train ? append_metric(sc, name, v, sc->iteration, S_train, Py_None, seconds)
                         : append_metric(sc, name, v, sc->test_iteration, S_test, sc->test_net, seconds);
    Py_DECREF(name);
    return rc;
}

static int emit_snapshot(scan *sc, const glog_line *g) {
    PyObject *path = PyUnicode_FromStringAndSize(g->path.s, g->path.e - g->path.s);
    if (!path) return -1;
    PyObject *ev = PyObject_CallFunctionObjArgs(sc->checkpoint_fn, path, g->is_state ? Py_True : Py_False,
                                                sc->wall, sc->line, sc->iteration, NULL);
    Py_DECREF(path);
    if (!ev) return -1;
    int rc = PyList_Append(sc->out, ev);
    Py_DECREF(ev);
    return rc;
}

static int emit_line(scan *sc, const glog_line *g, Py_ssize_t line_no) {
    PyObject *seconds = line_seconds(sc, g);
    if (!seconds) return -1;
    int rc = 0;
    if (g->kind != K_SOLVING) {
        sc->line = PyLong_FromSsize_t(line_no);
        if (!sc->line) rc = -1;
        else if (g->kind <= K_TESTING) rc = emit_iteration(sc, g, seconds);
        else if (g->kind == K_OUTPUT) rc = emit_output(sc, g, seconds);
        else rc = emit_snapshot(sc, g);
        Py_CLEAR(sc->line);
    }
    Py_DECREF(seconds);
    return rc;
}

/* ---- the block: state in from named fields, scan, state back out ---- */

static const char *ENV_FIELDS[] = {"iters_per_epoch", "cache", "base", "metric", "float_fallback", "int_fallback",
                                   "checkpoint"};
static const char *STATE_FIELDS[] = {"start", "iteration", "test_iteration", "test_net"};

static PyObject **env_slot(scan *sc, int i) {
    PyObject **slots[] = {&sc->ipe, &sc->cache, &sc->base_fn, &sc->mtype, &sc->float_fb, &sc->int_fb,
                          &sc->checkpoint_fn};
    return slots[i];
}
static PyObject **state_slot(scan *sc, int i) {
    PyObject **slots[] = {&sc->start, &sc->iteration, &sc->test_iteration, &sc->test_net};
    return slots[i];
}

static void scan_clear(scan *sc) {
    for (int i = 0; i < 7; i++) Py_CLEAR(*env_slot(sc, i));
    for (int i = 0; i < 4; i++) Py_CLEAR(*state_slot(sc, i));
    Py_CLEAR(sc->prev_base);
    Py_CLEAR(sc->out);
}

static int scan_load(scan *sc, PyObject *env, PyObject *state) {
    for (int i = 0; i < 7; i++)
        if (!(*env_slot(sc, i) = PyObject_GetAttrString(env, ENV_FIELDS[i]))) return -1;
    for (int i = 0; i < 4; i++)
        if (!(*state_slot(sc, i) = PyObject_GetAttrString(state, STATE_FIELDS[i]))) return -1;
    if (!PyDict_Check(sc->cache)) { PyErr_SetString(PyExc_TypeError, "ScanEnv.cache must be a dict"); return -1; }
    sc->have_start = sc->start != Py_None;
    if (sc->have_start && (sc->start_us = PyLong_AsLongLong(sc->start)) == -1 && PyErr_Occurred()) return -1;
    return (sc->out = PyList_New(0)) ? 0 : -1;
}

static int scan_store(scan *sc, PyObject *state) {
    for (int i = 0; i < 4; i++)
        if (PyObject_SetAttrString(state, STATE_FIELDS[i], *state_slot(sc, i))) return -1;
    return 0;
}

/* parse_block(text, first_line, wall_time, stream, env, state) -> list of events, or NotImplemented
 * for a block that is not pure ASCII. env: the parser's ScanEnv; state: its CaffeScanState,
 * updated when the block is done; stream: the block's, set on every Metric. */
static PyObject *parse_block(PyObject *self, PyObject *args) {
    PyObject *text, *wall, *stream, *env, *state, *out = NULL;
    Py_ssize_t first_line, len;
    if (!PyArg_ParseTuple(args, "UnOUOO", &text, &first_line, &wall, &stream, &env, &state)) return NULL;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NOTIMPLEMENTED;
    const char *ln = PyUnicode_AsUTF8AndSize(text, &len);
    if (!ln) return NULL;
    const char *end = ln + len;
    scan sc;
    memset(&sc, 0, sizeof sc);
    sc.wall = wall;
    sc.stream = stream;
    if (scan_load(&sc, env, state)) goto done;
    /* a \r starts another state of the same line (a rewritten line, see lines.py) */
    const int has_cr = memchr(ln, '\r', (size_t)len) != NULL;
    const char *eol = NULL; /* the end of the physical line ln is in: found once for all its states */
    for (Py_ssize_t line_no = first_line; ln < end;) {
        if (eol < ln && !(eol = memchr(ln, '\n', (size_t)(end - ln)))) eol = end;
        const char *cr = has_cr ? memchr(ln, '\r', (size_t)(eol - ln)) : NULL;
        const char *stop = cr ? cr : eol;
        glog_line g;
        if (match_glog_line(ln, stop, &g) != K_NONE && emit_line(&sc, &g, line_no)) goto done;
        ln = stop + 1;
        if (!cr) line_no++;
    }
    if (!scan_store(&sc, state)) out = Py_NewRef(sc.out);
done:
    sc.wall = NULL;
    sc.stream = NULL;
    scan_clear(&sc);
    return out;
}

static PyObject *py_text_to_float(PyObject *self, PyObject *arg) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) return NULL;
    double d;
    if (fast_text_to_double(s, s + n, &d) == 0) return PyFloat_FromDouble(d);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse_block", parse_block, METH_VARARGS, "Parse an ASCII block of Caffe glog lines (see caffe.py)."},
    {"text_to_float", py_text_to_float, METH_O,
     "float(text) through the exact fast path, or None when it does not apply (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_caffe_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__caffe_scan(void) {
    S_train = PyUnicode_InternFromString("train");
    S_test = PyUnicode_InternFromString("test");
    S_total_loss = PyUnicode_InternFromString("total_loss");
    S_lr = PyUnicode_InternFromString("lr");
    S_iter_per_sec = PyUnicode_InternFromString("iter_per_sec");
    if (!S_train || !S_test || !S_total_loss || !S_lr || !S_iter_per_sec) return NULL;
    return PyModule_Create(&moduledef);
}
