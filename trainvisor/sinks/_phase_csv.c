/* The per-phase CSV tables' per-metric loop in C: exactly PhaseCsvSink._write,
 * _Table.add and _Table.emit (sinks/phase_csv.py), which tests/test_phase_csv_speedups.py
 * compares it with, byte for byte.
 *
 * The state stays in the Python objects (the sink's `_by_phase`, each _Table's `open`,
 * `index`, `columns`, `fh`; each open _Row's key, rank, seconds, values): the loop reads
 * and changes them in place, so nothing needs storing back. What C adds is the text of
 * the rows it completes, kept per table and handed to the file's write() once per call,
 * or before Python writes to that file. The rare paths stay Python's: a table's first
 * appearance (sink._table), a row whose column the header lacks or whose file is not
 * open yet (_Table.emit: the header widened, the file rewritten), a row whose cells need
 * CSV quoting (env.format_row: the csv module's own rule), close.
 */
#include "_format.h"

#define MAX_TABLES 16  /* tables touched in one call; past that, all are flushed and let go */

/* The open row last used, its slots read once: most metrics go to the row the previous one
 * went to. Valid while nothing but this loop changes the table's `open` (within one call). */
typedef struct { PyObject *row, *rank, *key, *values; int no_seconds; } rowcache;  /* owned; row NULL: none */

typedef struct {
    PyObject *obj, *open, *index, *write;  /* owned; write: fh.write, NULL while fh is None */
    Py_ssize_t ncols;
    sbuf b;  /* rows written by C, not yet handed to write() */
    rowcache c;
} ptable;

typedef struct { PyObject *obj; int kind; } cell;  /* kind: 0 empty, 1 str(obj), 2 repr(obj) */

typedef struct {
    PyObject *sink, *by_phase, *mtype, *rtype, *num, *format_row;  /* sink borrowed, the rest owned */
    PyObject *last_phase, *last_net;  /* borrowed, valid while the batch lives */
    ptable *last;
    ptable t[MAX_TABLES];
    int n;
    cell *cells;
    Py_ssize_t cap;
} pcsv;

enum { S_OPEN, S_INDEX, S_COLUMNS, S_FH, S_WRITE, S_KEY, S_RANK, S_SECONDS, S_VALUES, S_EMIT, S_BY_PHASE,
       S_TABLE, S_METRIC, S_ROW, S_NUM, S_FORMAT_ROW, S_COUNT };
static const char *NAMES[S_COUNT] = {"open", "index", "columns", "fh", "write", "key", "rank", "seconds",
                                     "values", "emit", "_by_phase", "_table", "metric", "row", "num",
                                     "format_row"};
static PyObject *S[S_COUNT];  /* interned once, kept for the process's life */

static int names_init(void) {
    for (int i = 0; i < S_COUNT; i++)
        if (!S[i] && !(S[i] = PyUnicode_InternFromString(NAMES[i]))) return -1;
    return 0;
}

/* A table's fields as they are now (again after Python has emitted a row: a widening
 * replaces index, columns and fh). */
static int table_reload(ptable *t) {
    Py_CLEAR(t->index); Py_CLEAR(t->write);
    PyObject *cols = NULL, *fh = NULL;
    int rc = -1;
    if ((t->index = PyObject_GetAttr(t->obj, S[S_INDEX])) && (cols = PyObject_GetAttr(t->obj, S[S_COLUMNS])) &&
        (fh = PyObject_GetAttr(t->obj, S[S_FH])) && (fh == Py_None || (t->write = PyObject_GetAttr(fh, S[S_WRITE])))) {
        t->ncols = PyObject_Length(cols);
        if (t->ncols >= 0) {
            if (PyDict_Check(t->index)) rc = 0;
            else PyErr_SetString(PyExc_TypeError, "_Table.index must be a dict");
        }
    }
    Py_XDECREF(cols); Py_XDECREF(fh);
    return rc;
}

static int table_load(ptable *t, PyObject *obj) {
    memset(t, 0, sizeof *t);
    t->obj = Py_NewRef(obj);
    if (!(t->open = PyObject_GetAttr(obj, S[S_OPEN]))) return -1;
    if (!PyDict_Check(t->open)) { PyErr_SetString(PyExc_TypeError, "_Table.open must be a dict"); return -1; }
    return table_reload(t);
}

/* The rows C has written for this table, into its file. */
static int table_flush(ptable *t) {
    if (!t->b.len) return 0;
    if (!t->write) { PyErr_SetString(PyExc_RuntimeError, "rows held for a file that is not open"); return -1; }
    PyObject *text = PyUnicode_DecodeUTF8(t->b.buf, (Py_ssize_t)t->b.len, "strict");
    t->b.len = 0;
    PyObject *r = text ? PyObject_CallOneArg(t->write, text) : NULL;
    Py_XDECREF(text);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

static void cache_clear(rowcache *c) {
    Py_CLEAR(c->row); Py_CLEAR(c->rank); Py_CLEAR(c->key); Py_CLEAR(c->values);
}

static void table_clear(ptable *t) {
    cache_clear(&t->c);
    Py_CLEAR(t->obj); Py_CLEAR(t->open); Py_CLEAR(t->index); Py_CLEAR(t->write);
    PyMem_Free(t->b.buf);
    memset(&t->b, 0, sizeof t->b);
}

/* Every table's rows into its file, then let go; an error already set is kept over a new one. */
static int flush_all(pcsv *p) {
    int rc = 0;
    for (int i = 0; i < p->n; i++) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (table_flush(&p->t[i])) rc = -1;
        if (type) { PyErr_Clear(); PyErr_Restore(type, value, tb); }
        table_clear(&p->t[i]);
    }
    p->n = 0;
    p->last = NULL;
    return rc;
}

/* The table of (phase, test_net): sink._by_phase's, else sink._table(...)'s (a new file). */
static ptable *find_table(pcsv *p, PyObject *phase, PyObject *net) {
    if (p->last && phase == p->last_phase && net == p->last_net) return p->last;
    PyObject *key = PyTuple_Pack(2, phase, net);
    if (!key) return NULL;
    PyObject *obj = PyDict_GetItemWithError(p->by_phase, key);
    Py_XINCREF(obj);
    Py_DECREF(key);
    if (!obj && (PyErr_Occurred() || !(obj = PyObject_CallMethodObjArgs(p->sink, S[S_TABLE], phase, net, NULL))))
        return NULL;
    ptable *t = NULL;
    for (int i = 0; i < p->n && !t; i++)
        if (p->t[i].obj == obj) t = &p->t[i];
    if (!t && p->n == MAX_TABLES && flush_all(p)) t = NULL;
    else if (!t) {
        t = &p->t[p->n++];
        if (table_load(t, obj)) t = NULL;
    }
    Py_DECREF(obj);
    if (t) { p->last = t; p->last_phase = phase; p->last_net = net; }
    return t;
}

/* str(x) of an int that fits. */
static int put_ll(sbuf *b, long long x) {
    char tmp[32];
    int n = 0;
    if (x < 0) tmp[n++] = '-';
    n += put_uint(tmp + n, x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x);
    return sb_put(b, tmp, (size_t)n) ? -1 : 0;
}

/* An integral float as str(int(v)). */
static int put_integral(sbuf *b, double d) {
    if (fabs(d) < 9e18) return put_ll(b, (long long)d);
    PyObject *i = PyLong_FromDouble(d), *s = i ? PyObject_Str(i) : NULL;
    Py_ssize_t n;
    const char *txt = s ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    int rc = (!txt || sb_put(b, txt, (size_t)n)) ? -1 : 0;
    Py_XDECREF(i); Py_XDECREF(s);
    return rc;
}

/* A text cell: 0 written, 1 it needs CSV quoting (the caller lets Python write the row), -1 error. */
static int put_text(sbuf *b, PyObject *s) {
    Py_ssize_t n;
    const char *txt = s ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    if (!txt) return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (txt[i] == ',' || txt[i] == '"' || txt[i] == '\n' || txt[i] == '\r') return 1;
    return sb_put(b, txt, (size_t)n) ? -1 : 0;
}

/* One cell as _num (kind 3), repr (2) or str (1) gives it; same returns as put_text. */
static int put_cell(pcsv *p, sbuf *b, PyObject *v, int kind) {
    if (!v || v == Py_None) {
        if (kind == 3 || !v) return 0;
    }
    if (PyLong_CheckExact(v)) {  /* iteration, rank: str, repr and _num agree on an int */
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (!overflow) return put_ll(b, x);
    }
    if (PyFloat_CheckExact(v) && kind != 1) {
        double d = PyFloat_AS_DOUBLE(v);
        if (kind == 3 && Py_IS_FINITE(d) && d == floor(d)) return put_integral(b, d);
        char buf[40];
        int len;
        char *r = double_repr_alloc(d, buf, &len);
        if (!r) return -1;
        int rc = sb_put(b, r, (size_t)len) ? -1 : 0;
        if (r != buf) PyMem_Free(r);
        return rc;
    }
    PyObject *s = kind == 3 ? PyObject_CallOneArg(p->num, v) : kind == 2 ? PyObject_Repr(v) : PyObject_Str(v);
    if (s && !PyUnicode_Check(s)) { Py_DECREF(s); PyErr_SetString(PyExc_TypeError, "a cell must be text"); s = NULL; }
    int rc = put_text(b, s);
    Py_XDECREF(s);
    return rc;
}

/* The scratch cells of one row, `n` of them, all empty. */
static int cells_reset(pcsv *p, Py_ssize_t n) {
    if (n > p->cap) {
        cell *c = PyMem_Realloc(p->cells, (size_t)n * sizeof *c);
        if (!c) { PyErr_NoMemory(); return -1; }
        p->cells = c;
        p->cap = n;
    }
    memset(p->cells, 0, (size_t)n * sizeof *p->cells);
    return 0;
}

/* The row's line, as csv.writer(lineterminator="\n") writes _Table._cells: 0 written, 1 a cell
 * needs quoting (nothing written), -1 error. */
static int format_row(pcsv *p, ptable *t, PyObject *key, PyObject *seconds) {
    sbuf *b = &t->b;
    size_t mark = b->len;
    int rc = put_cell(p, b, PyTuple_GET_ITEM(key, 0), 3);
    if (!rc) rc = sb_put(b, ",", 1) ? -1 : put_cell(p, b, PyTuple_GET_ITEM(key, 1), 3);
    if (!rc) rc = sb_put(b, ",", 1) ? -1 : put_cell(p, b, seconds, 3);
    for (Py_ssize_t i = 3; i < t->ncols && !rc; i++)
        rc = sb_put(b, ",", 1) ? -1 : put_cell(p, b, p->cells[i].obj, p->cells[i].kind);
    if (!rc) rc = sb_put(b, "\n", 1) ? -1 : 0;
    if (rc) b->len = mark;
    return rc;
}

/* Places the row's cells by column index: 0 placed, 1 a column is missing (Python's emit
 * widens the header), -1 error. */
static int place_cells(pcsv *p, ptable *t, PyObject *rank, PyObject *values) {
    if (!t->write) return 1;
    if (cells_reset(p, t->ncols)) return -1;
    PyObject *name, *value, *idx;
    Py_ssize_t pos = 0, i;
    if (rank != Py_None) {
        if (!(idx = PyDict_GetItemWithError(t->index, S[S_RANK]))) return PyErr_Occurred() ? -1 : 1;
        if ((i = PyLong_AsSsize_t(idx)) < 0 || i >= t->ncols) return PyErr_Occurred() ? -1 : 1;
        p->cells[i].obj = rank, p->cells[i].kind = 1;
    }
    while (PyDict_Next(values, &pos, &name, &value)) {
        if (!(idx = PyDict_GetItemWithError(t->index, name))) return PyErr_Occurred() ? -1 : 1;
        if ((i = PyLong_AsSsize_t(idx)) < 0 || i >= t->ncols) return PyErr_Occurred() ? -1 : 1;
        p->cells[i].obj = value, p->cells[i].kind = 2;
    }
    return 0;
}

/* Python writes the row: _Table.emit, after the rows C holds for that file (a new column,
 * a file not open yet: the header is widened, the file rewritten). */
static int emit_widening(ptable *t, PyObject *row) {
    if (t->write && table_flush(t)) return -1;
    PyObject *r = PyObject_CallMethodObjArgs(t->obj, S[S_EMIT], row, NULL);
    if (!r) return -1;
    Py_DECREF(r);
    return table_reload(t);
}

/* A row with a cell that needs CSV quoting: the line env.format_row gives (the csv module's). */
static int emit_quoted(pcsv *p, ptable *t, PyObject *row) {
    PyObject *line = PyObject_CallFunctionObjArgs(p->format_row, t->obj, row, NULL);
    Py_ssize_t n;
    const char *txt = line && PyUnicode_Check(line) ? PyUnicode_AsUTF8AndSize(line, &n) : NULL;
    if (line && !txt && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "format_row must give text");
    int rc = (!txt || sb_put(&t->b, txt, (size_t)n)) ? -1 : 0;
    Py_XDECREF(line);
    return rc;
}

/* _Table.emit: the row is complete; written into the table's buffer (or by Python). */
static int emit_row(pcsv *p, ptable *t, PyObject *row) {
    PyObject *key = PyObject_GetAttr(row, S[S_KEY]), *rank = PyObject_GetAttr(row, S[S_RANK]);
    PyObject *seconds = PyObject_GetAttr(row, S[S_SECONDS]), *values = PyObject_GetAttr(row, S[S_VALUES]);
    int rc = -1;
    if (!key || !rank || !seconds || !values) goto done;
    if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 || !PyDict_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "_Row.key must be a pair and values a dict");
        goto done;
    }
    rc = place_cells(p, t, rank, values);
    if (rc > 0) { rc = emit_widening(t, row); goto done; }
    if (rc < 0 || (rc = PyDict_DelItem(t->open, rank))) goto done;
    rc = format_row(p, t, key, seconds);
    if (rc > 0) rc = emit_quoted(p, t, row);
done:
    Py_XDECREF(key); Py_XDECREF(rank); Py_XDECREF(seconds); Py_XDECREF(values);
    return rc;
}

/* _Row(m): a new open row for the metric's rank (its slots set as __init__ sets them), cached. */
static int new_row(pcsv *p, ptable *t, PyObject **f) {
    PyTypeObject *type = (PyTypeObject *)p->rtype;
    rowcache *c = &t->c;
    cache_clear(c);
    c->row = type->tp_alloc(type, 0);
    c->key = PyTuple_Pack(2, f[2], f[6]);
    c->values = PyDict_New();
    c->rank = Py_NewRef(f[10]);
    c->no_seconds = f[5] == Py_None;
    if (c->row && c->key && c->values && !PyObject_SetAttr(c->row, S[S_KEY], c->key) &&
        !PyObject_SetAttr(c->row, S[S_RANK], f[10]) && !PyObject_SetAttr(c->row, S[S_SECONDS], f[5]) &&
        !PyObject_SetAttr(c->row, S[S_VALUES], c->values) && !PyDict_SetItem(t->open, f[10], c->row))
        return 0;
    cache_clear(c);
    return -1;
}

/* The open row of `rank` in the cache: 1 there, 0 none, -1 error. */
static int cache_fill(ptable *t, PyObject *rank) {
    rowcache *c = &t->c;
    if (c->row && c->rank == rank) return 1;
    cache_clear(c);
    PyObject *row = PyDict_GetItemWithError(t->open, rank), *seconds = NULL;
    if (!row) return PyErr_Occurred() ? -1 : 0;
    c->row = Py_NewRef(row);
    c->rank = Py_NewRef(rank);
    if ((c->key = PyObject_GetAttr(row, S[S_KEY])) && (c->values = PyObject_GetAttr(row, S[S_VALUES])) &&
        (seconds = PyObject_GetAttr(row, S[S_SECONDS]))) {
        c->no_seconds = seconds == Py_None;
        Py_DECREF(seconds);
        if (PyTuple_Check(c->key) && PyTuple_GET_SIZE(c->key) == 2 && PyDict_Check(c->values)) return 1;
        PyErr_SetString(PyExc_TypeError, "_Row.key must be a pair and values a dict");
    }
    cache_clear(c);
    return -1;
}

/* The open row of the metric's rank: 1 it stays open for this metric (same iteration and
 * epoch, the name not in it yet), 0 there is none (any other was emitted), -1 error. */
static int open_row(pcsv *p, ptable *t, PyObject **f) {
    int same = cache_fill(t, f[10]);
    if (same <= 0) return same;
    if ((same = PyObject_RichCompareBool(PyTuple_GET_ITEM(t->c.key, 0), f[2], Py_EQ)) == 1)
        same = PyObject_RichCompareBool(PyTuple_GET_ITEM(t->c.key, 1), f[6], Py_EQ);
    if (same == 1 && (same = PyDict_Contains(t->c.values, f[0])) >= 0) same = !same;
    if (same != 0) return same;
    PyObject *row = Py_NewRef(t->c.row);
    cache_clear(&t->c);
    int rc = emit_row(p, t, row);
    Py_DECREF(row);
    return rc ? -1 : 0;
}

/* _Table.add for one Metric (its fields f). */
static int add_metric(pcsv *p, ptable *t, PyObject **f) {
    int rc = open_row(p, t, f);
    if (rc == 0) rc = new_row(p, t, f);
    else if (rc == 1 && t->c.no_seconds) {  /* the row's seconds: its first metric's that has them */
        rc = PyObject_SetAttr(t->c.row, S[S_SECONDS], f[5]);
        t->c.no_seconds = f[5] == Py_None;
    } else if (rc == 1) rc = 0;
    return rc ? -1 : PyDict_SetItem(t->c.values, f[0], f[1]);
}

static int env_load(pcsv *p, PyObject *sink, PyObject *env) {
    p->sink = sink;
    if (names_init() || !(p->by_phase = PyObject_GetAttr(sink, S[S_BY_PHASE])) ||
        !(p->mtype = PyObject_GetAttr(env, S[S_METRIC])) || !(p->rtype = PyObject_GetAttr(env, S[S_ROW])) ||
        !(p->num = PyObject_GetAttr(env, S[S_NUM])) || !(p->format_row = PyObject_GetAttr(env, S[S_FORMAT_ROW])))
        return -1;
    if (PyDict_Check(p->by_phase) && PyType_Check(p->rtype)) return 0;
    PyErr_SetString(PyExc_TypeError, "sink._by_phase must be a dict and env.row a type");
    return -1;
}

/* phase_csv_write(events, sink, env) -> None: PhaseCsvSink.write. env: _CSV_ENV (the Metric
 * and _Row types, _num, the quoting row formatter). */
PyObject *phase_csv_write(PyObject *self, PyObject *args) {
    PyObject *events, *sink, *env;
    if (!PyArg_ParseTuple(args, "OOO", &events, &sink, &env)) return NULL;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (!seq) return NULL;
    pcsv p;
    memset(&p, 0, sizeof p);
    int rc = env_load(&p, sink, env);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n && !rc; i++) {
        PyObject *ev = items[i];
        if ((PyObject *)Py_TYPE(ev) != p.mtype || PyTuple_GET_SIZE(ev) != 12) continue;
        PyObject **f = &PyTuple_GET_ITEM(ev, 0);
        int running = f[11] == Py_False ? 0 : PyObject_IsTrue(f[11]);
        if (running) { rc = running < 0 ? -1 : 0; continue; }
        ptable *t = find_table(&p, f[3], f[4]);
        rc = t ? add_metric(&p, t, f) : -1;
    }
    if (flush_all(&p)) rc = -1;
    Py_XDECREF(p.by_phase); Py_XDECREF(p.mtype); Py_XDECREF(p.rtype); Py_XDECREF(p.num); Py_XDECREF(p.format_row);
    PyMem_Free(p.cells);
    Py_DECREF(seq);
    return rc ? NULL : Py_NewRef(Py_None);
}
