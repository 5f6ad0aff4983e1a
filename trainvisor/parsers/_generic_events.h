/* The generic C loop's working state and the events it appends (Metric tuples, names from
 * the parser's cache): included by _generic_scan.c, before the readers of each kind of line
 * (_generic_tables.h, _generic_json.h, _generic_bars.h), which append through these. */
#ifndef TRAINVISOR_GENERIC_EVENTS_H
#define TRAINVISOR_GENERIC_EVENTS_H

#include "../_native/fastnum.h"

/* What a reader of one line did: appended its events (DONE), left it to the parser's Python `line`
 * (PYTHON), to the next reader (NOT_MINE), or failed with a Python error set (ERR). */
enum { ERR = -1, DONE = 0, PYTHON = 1, NOT_MINE = 2 };

#define KEY_SLOTS 64 /* a block's recent keys: a log repeats a few names on every line */

typedef struct { PyObject *key, *hit; } key_slot; /* a key's str and its (name, phase) once known; owned */

/* The parser's EvalTables (tables.py) while the C loop reads its lines: its fields, loaded at the
 * block's start and after each handoff, stored before each handoff and at the block's end when
 * changed (_generic_tables.h). */
typedef struct {
    PyObject *obj;                               /* ScanEnv.tables */
    PyObject *coco_type, *md_task, *md_head;     /* owned: str, str, list of str */
    PyObject *coco_prefix;                       /* owned: EvalTables.coco_prefix, `bbox/` or "" */
    PyObject *closed; /* owned: the task of the table this line ended, NULL after the line (table_settle) */
    Py_ssize_t md_row;
    int changed;
} eval_tables;

typedef struct {
    key_slot keys[KEY_SLOTS];
    PyObject *out, *wall, *stream, *state, *cache, *held, *resolve, *line_fn, *mtype, *mtail, *float_fb;
    PyObject *sticky_step, *sticky_epoch, *step, *epoch; /* owned; read from / written to state */
    eval_tables tables;
    PyObject *bar_states, *bar_names, *running_tail;      /* BarMetrics' state and names, a running Metric's tail */
    int fast;
    int atomic_tail; /* Metric's default fields are None, bool, int, float or str, like the nine set here */
} scan;

static PyObject *S_val; /* events.PHASE_VAL */

/* ---- attributes by name ---- */

/* PyObject_GetAttrString builds and hashes a new str on every call; the loop reads and writes a
 * few fields of the parser's objects on every block and every handoff, so their names are made
 * once, interned, and found again by the address of the C literal naming them. */
#define ATTR_NAMES 32
static struct { const char *key; PyObject *name; } attr_names[ATTR_NAMES];

/* The interned name of `key`, borrowed; NULL with an error set, or without one when the table is full. */
static PyObject *attr_name(const char *key) {
    int i = 0;
    for (; i < ATTR_NAMES && attr_names[i].key; i++)
        if (attr_names[i].key == key) return attr_names[i].name;
    if (i == ATTR_NAMES) return NULL;
    PyObject *name = PyUnicode_InternFromString(key);
    if (name) attr_names[i].key = key, attr_names[i].name = name; /* kept for the life of the process */
    return name;
}

static PyObject *get_attr(PyObject *obj, const char *key) {
    PyObject *name = attr_name(key);
    if (name) return PyObject_GetAttr(obj, name);
    return PyErr_Occurred() ? NULL : PyObject_GetAttrString(obj, key);
}

static int set_attr(PyObject *obj, const char *key, PyObject *v) {
    PyObject *name = attr_name(key);
    if (name) return PyObject_SetAttr(obj, name, v);
    return PyErr_Occurred() ? -1 : PyObject_SetAttrString(obj, key, v);
}

/* ---- values ---- */

/* to_float(text): the exact fast path, CPython's parser, else the Python fallback. New ref. */
static PyObject *to_float(const char *s, const char *e, PyObject *fallback) {
    char buf[64];
    size_t n = (size_t)(e - s);
    double d;
    if (fast_text_to_double(s, e, &d) == 0) return PyFloat_FromDouble(d);
    if (n < sizeof(buf)) {
        char *endp = NULL;
        memcpy(buf, s, n);
        buf[n] = 0;
        d = PyOS_string_to_double(buf, &endp, NULL);
        if (!(d == -1.0 && PyErr_Occurred()) && endp == buf + n) return PyFloat_FromDouble(d);
        PyErr_Clear();
    }
    PyObject *t = PyUnicode_FromStringAndSize(s, (Py_ssize_t)n);
    if (!t) return NULL;
    PyObject *r = PyObject_CallOneArg(fallback, t);
    Py_DECREF(t);
    return r;
}

static PyObject *int_of(const char *s, const char *e) { /* int() of a run of digits */
    if (e - s < 18) {
        long long v = 0;
        for (; s < e; s++) v = v * 10 + (*s - '0');
        return PyLong_FromLongLong(v);
    }
    PyObject *t = PyUnicode_FromStringAndSize(s, e - s);
    PyObject *r = t ? PyLong_FromUnicodeObject(t, 10) : NULL;
    Py_XDECREF(t);
    return r;
}


static inline void set_ref(PyObject **slot, PyObject *v) { Py_XSETREF(*slot, Py_NewRef(v)); }

/* ---- events ---- */

/* Appends Metric(name, value, step, phase, None, None, epoch, wall, line, stream, *tail[1:]): the
 * block's stream, which the pipeline would otherwise write into a copy of each (events.with_stream);
 * `tail`: the Metric's fields from the stream on, as ScanEnv gives them (atomic, of sc->mtail's size). */
static int append_tailed(scan *sc, PyObject *tail, PyObject *name, PyObject *phase, PyObject *value, PyObject *step,
                         PyObject *epoch, PyObject *line) {
    Py_ssize_t ntail = PyTuple_GET_SIZE(tail);
    PyObject *m = ((PyTypeObject *)sc->mtype)->tp_alloc((PyTypeObject *)sc->mtype, 9 + ntail);
    if (!m) return -1;
    PyObject *items[9] = {name, value, step, phase, Py_None, Py_None, epoch, sc->wall, line};
    for (int i = 0; i < 9; i++) PyTuple_SET_ITEM(m, i, Py_NewRef(items[i]));
    PyTuple_SET_ITEM(m, 9, Py_NewRef(sc->stream));
    for (Py_ssize_t i = 1; i < ntail; i++) PyTuple_SET_ITEM(m, 9 + i, Py_NewRef(PyTuple_GET_ITEM(tail, i)));
    if (sc->atomic_tail && PyObject_GC_IsTracked(m)) PyObject_GC_UnTrack(m); /* atoms only: in no cycle */
    int r = PyList_Append(sc->out, m);
    Py_DECREF(m);
    return r;
}

/* The Metric of a finished value (running=False and the other defaults). */
static int append_named(scan *sc, PyObject *name, PyObject *phase, PyObject *value, PyObject *step, PyObject *epoch,
                        PyObject *line) {
    return append_tailed(sc, sc->mtail, name, phase, value, step, epoch, line);
}

/* Appends an event of the parser's Python code with the block's stream, as events.with_stream would
 * (a Metric whose stream is another is copied with this one): every event of the C loop then says
 * the block's stream (GenericParser.stamps_stream). Events other than Metrics are appended as they are. */
static int append_stamped(scan *sc, PyObject *ev) {
    if (Py_TYPE(ev) != (PyTypeObject *)sc->mtype || PyTuple_GET_SIZE(ev) < 10) return PyList_Append(sc->out, ev);
    PyObject *old = PyTuple_GET_ITEM(ev, 9);
    int same = old == sc->stream ? 1 : PyObject_RichCompareBool(old, sc->stream, Py_EQ);
    if (same) return same < 0 ? -1 : PyList_Append(sc->out, ev);
    Py_ssize_t n = PyTuple_GET_SIZE(ev);
    PyObject *m = ((PyTypeObject *)sc->mtype)->tp_alloc((PyTypeObject *)sc->mtype, n);
    if (!m) return -1;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(m, i, Py_NewRef(i == 9 ? sc->stream : PyTuple_GET_ITEM(ev, i)));
    int r = PyList_Append(sc->out, m);
    Py_DECREF(m);
    return r;
}

static key_slot *slot_of(scan *sc, const char *s, const char *e) { /* FNV-1a of the key's bytes */
    uint32_t h = 2166136261u;
    for (; s < e; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return &sc->keys[h % KEY_SLOTS];
}

/* The str of the key at s..e (ASCII): this block's if it met it lately, else a new one. New ref. */
static PyObject *key_str(scan *sc, const char *s, const char *e) {
    key_slot *k = slot_of(sc, s, e);
    Py_ssize_t n = e - s;
    if (k->key && PyUnicode_GET_LENGTH(k->key) == n && memcmp(PyUnicode_DATA(k->key), s, (size_t)n) == 0)
        return Py_NewRef(k->key);
    PyObject *key = PyUnicode_FromStringAndSize(s, n);
    if (!key) return NULL;
    Py_XSETREF(k->key, Py_NewRef(key));
    Py_CLEAR(k->hit);
    return key;
}

/* The metric of `key`: its (name, phase) remembered in its slot, from the parser's cache, or its
 * `resolve` on a miss (a pure function of the key: a block may keep what it found). A record's own
 * `phase` (a JSON record's `mode`), when not NULL, comes before the name's (`_emit`'s `phase or ph`). */
static int append_metric_in(scan *sc, PyObject *key, PyObject *value, PyObject *phase, PyObject *step,
                            PyObject *epoch, PyObject *line) {
    const char *ks = PyUnicode_DATA(key);
    key_slot *k = slot_of(sc, ks, ks + PyUnicode_GET_LENGTH(key));
    PyObject *hit = k->key == key ? k->hit : NULL;
    if (hit) Py_INCREF(hit);
    else if ((hit = PyDict_GetItemWithError(sc->cache, key))) Py_INCREF(hit);
    else if (PyErr_Occurred() || !(hit = PyObject_CallOneArg(sc->resolve, key))) return -1;
    if (k->key == key) set_ref(&k->hit, hit);
    int r = -1;
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2)
        PyErr_SetString(PyExc_TypeError, "GenericParser names must be (name, phase)");
    else
        r = append_named(sc, PyTuple_GET_ITEM(hit, 0), phase ? phase : PyTuple_GET_ITEM(hit, 1), value, step, epoch,
                         line);
    Py_DECREF(hit);
    return r;
}

static int append_metric(scan *sc, PyObject *key, PyObject *value, PyObject *step, PyObject *epoch, PyObject *line) {
    return append_metric_in(sc, key, value, NULL, step, epoch, line);
}

static inline int is_none(PyObject *x) { return x == NULL || x == Py_None; }

#endif
