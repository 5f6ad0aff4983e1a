/* The Caffe CSV tables' per-metric loop in C: exactly CaffeCsvSink._pivot and
 * _Table (sinks/caffe_csv.py), which tests/test_caffe_speedups.py compares it with.
 *
 * State crosses the boundary by name: a call reads the sink's _PivotState (lr,
 * train, test, loss_only) and each _Table's fields (key, current, columns, rows,
 * first, lines, narrowest; rows are _Row objects: iteration, seconds, lr, values)
 * into C structs, works on those, and writes them back when it is done. The rows
 * it completes go to the table's `lines` as one "\r\n"-joined entry per call.
 */
#include "_format.h"

typedef struct { PyObject *iteration, *seconds, *lr, *values; } crow;  /* owned; iteration NULL: no row */

typedef struct {
    PyObject *obj, *key, *columns, *lines;  /* obj: the _Table (NULL: none); the rest owned */
    crow cur, first;
    Py_ssize_t rows, narrowest;
    sbuf b;
} ctable;

typedef struct { PyObject *row_type, *no_row, *fallback; } penv;  /* borrowed */

static const char *ROW_FIELDS[] = {"iteration", "seconds", "lr", "values"};

static PyObject **row_slot(crow *r, int i) {
    PyObject **slots[] = {&r->iteration, &r->seconds, &r->lr, &r->values};
    return slots[i];
}
static void row_clear(crow *r) {
    for (int i = 0; i < 4; i++) Py_CLEAR(*row_slot(r, i));
}
static int row_load(crow *r, PyObject *obj) {
    if (obj == Py_None) return 0;
    for (int i = 0; i < 4; i++)
        if (!(*row_slot(r, i) = PyObject_GetAttrString(obj, ROW_FIELDS[i]))) return -1;
    return 0;
}
/* A new _Row for r (None when there is none); r is left empty. */
static PyObject *row_store(crow *r, const penv *env) {
    if (!r->iteration) return Py_NewRef(Py_None);
    PyObject *obj = PyObject_CallFunctionObjArgs(env->row_type, r->iteration, r->seconds, r->lr, NULL);
    if (obj && PyObject_SetAttrString(obj, "values", r->values)) Py_CLEAR(obj);
    row_clear(r);
    return obj;
}

static int table_load(ctable *t, PyObject *obj) {
    memset(t, 0, sizeof *t);
    if (obj == Py_None) return 0;
    t->obj = obj;
    PyObject *rows = NULL, *narrowest = NULL, *cur = NULL, *first = NULL;
    int rc = -1;
    if ((t->key = PyObject_GetAttrString(obj, "key")) && (t->columns = PyObject_GetAttrString(obj, "columns")) &&
        (t->lines = PyObject_GetAttrString(obj, "lines")) && (rows = PyObject_GetAttrString(obj, "rows")) &&
        (narrowest = PyObject_GetAttrString(obj, "narrowest")) && (cur = PyObject_GetAttrString(obj, "current")) &&
        (first = PyObject_GetAttrString(obj, "first")) && !row_load(&t->cur, cur) && !row_load(&t->first, first)) {
        t->rows = PyLong_AsSsize_t(rows);
        t->narrowest = PyLong_AsSsize_t(narrowest);
        if (!PyErr_Occurred()) {
            if (PyDict_Check(t->columns) && PyList_Check(t->lines)) rc = 0;
            else PyErr_SetString(PyExc_TypeError, "_Table.columns must be a dict and lines a list");
        }
    }
    Py_XDECREF(rows); Py_XDECREF(narrowest); Py_XDECREF(cur); Py_XDECREF(first);
    return rc;
}

/* The completed rows as one entry of `lines`, then every field back on the _Table. */
static int table_store(ctable *t, const penv *env) {
    if (!t->obj) return 0;
    int rc = 0;
    if (t->b.len) {
        PyObject *text = PyUnicode_DecodeUTF8(t->b.buf, (Py_ssize_t)t->b.len, "strict");
        rc = text ? PyList_Append(t->lines, text) : -1;
        Py_XDECREF(text);
    }
    PyObject *vals[4] = {Py_NewRef(t->key), PyLong_FromSsize_t(t->rows), PyLong_FromSsize_t(t->narrowest),
                         row_store(&t->cur, env)};
    PyObject *first = row_store(&t->first, env);
    const char *names[4] = {"key", "rows", "narrowest", "current"};
    for (int i = 0; i < 4; i++) {
        if (!vals[i] || PyObject_SetAttrString(t->obj, names[i], vals[i])) rc = -1;
        Py_XDECREF(vals[i]);
    }
    if (!first || PyObject_SetAttrString(t->obj, "first", first)) rc = -1;
    Py_XDECREF(first);
    return rc;
}

static void table_clear(ctable *t) {
    Py_CLEAR(t->key); Py_CLEAR(t->columns); Py_CLEAR(t->lines);
    row_clear(&t->cur); row_clear(&t->first);
    PyMem_Free(t->b.buf);
    t->b.buf = NULL;
}

/* The cells of a row, padded to `width` columns (for the Python formatter). */
static PyObject *row_cells(const crow *row, Py_ssize_t width) {
    PyObject *cells = PyList_New(3 + width);
    if (!cells) return NULL;
    PyObject *fixed[3] = {row->iteration, row->seconds, row->lr};
    for (int i = 0; i < 3; i++) PyList_SET_ITEM(cells, i, Py_NewRef(fixed[i]));
    for (Py_ssize_t i = 0; i < width; i++) {
        PyObject *key = PyLong_FromSsize_t(i);
        PyObject *c = key ? PyDict_GetItemWithError(row->values, key) : NULL;
        Py_XDECREF(key);
        if (!c && (!key || PyErr_Occurred())) { Py_DECREF(cells); return NULL; }
        PyList_SET_ITEM(cells, 3 + i, Py_NewRef(c ? c : Py_None));
    }
    return cells;
}

/* _Table._format: one row of numbers (else the Python formatter's text), after a "\r\n". */
static int format_row(ctable *t, const crow *row, const penv *env) {
    Py_ssize_t width = PyDict_GET_SIZE(t->columns), pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(row->values, &pos, &k, &v)) {
        Py_ssize_t i = PyLong_AsSsize_t(k);
        if (i == -1 && PyErr_Occurred()) return -1;
        if (i + 1 > width) width = i + 1;
    }
    if (t->narrowest < 0 || width < t->narrowest) t->narrowest = width;
    PyObject *cells = row_cells(row, width);
    if (!cells) return -1;
    size_t mark = t->b.len;
    int rc = (t->b.len && sb_put(&t->b, "\r\n", 2)) ? -1 : 0;
    for (Py_ssize_t i = 0; i < 3 + width && rc == 0; i++)
        rc = (i && sb_put(&t->b, ",", 1)) ? -1 : put_csv_cell(&t->b, PyList_GET_ITEM(cells, i));
    if (rc > 0) {  /* a cell of another type: the Python formatter for the whole row, exactly */
        t->b.len = mark;
        PyObject *line = PyObject_CallOneArg(env->fallback, cells);
        Py_ssize_t n;
        const char *txt = line ? PyUnicode_AsUTF8AndSize(line, &n) : NULL;
        rc = (!txt || (t->b.len && sb_put(&t->b, "\r\n", 2)) || sb_put(&t->b, txt, (size_t)n)) ? -1 : 0;
        Py_XDECREF(line);
    }
    Py_DECREF(cells);
    return rc;
}

/* _Table._push: the current row is complete. */
static int push_row(ctable *t, const penv *env) {
    crow row = t->cur;
    memset(&t->cur, 0, sizeof t->cur);
    Py_SETREF(t->key, Py_NewRef(env->no_row));
    if (++t->rows == 1) {  /* held back until the second row brings a learning rate */
        t->first = row;
        return 0;
    }
    int rc = 0;
    if (t->first.iteration) {
        if (PyFloat_Check(t->first.lr) && Py_IS_NAN(PyFloat_AS_DOUBLE(t->first.lr)))
            Py_SETREF(t->first.lr, Py_NewRef(row.lr));
        rc = format_row(t, &t->first, env);
        row_clear(&t->first);
    }
    if (!rc) rc = format_row(t, &row, env);
    row_clear(&row);
    return rc;
}

/* _Table.values_for + _Table.set: value under column `name` of the row of `iteration`. */
static int table_set(ctable *t, const penv *env, PyObject *iteration, PyObject *seconds, PyObject *lr,
                     PyObject *name, PyObject *value) {
    int same = PyObject_RichCompareBool(iteration, t->key, Py_EQ);
    if (same < 0) return -1;
    if (!same) {
        if (t->cur.iteration && push_row(t, env)) return -1;
        if (!(t->cur.values = PyDict_New())) return -1;
        t->cur.iteration = Py_NewRef(iteration);
        t->cur.seconds = Py_NewRef(seconds);
        t->cur.lr = Py_NewRef(lr);
        Py_SETREF(t->key, Py_NewRef(iteration));
    }
    PyObject *idx = PyDict_GetItemWithError(t->columns, name);
    if (!idx) {
        PyObject *n = PyErr_Occurred() ? NULL : PyLong_FromSsize_t(PyDict_GET_SIZE(t->columns));
        int rc = n ? PyDict_SetItem(t->columns, name, n) : -1;
        Py_XDECREF(n);
        if (rc || !(idx = PyDict_GetItemWithError(t->columns, name))) return -1;
    }
    return PyDict_SetItem(t->cur.values, idx, value);
}

typedef struct { ctable train, test, loss; PyObject *lr; int loss_active; PyObject *mtype; penv env; } pivot;

static int is_str(PyObject *s, const char *lit) { return PyUnicode_Check(s) && PyUnicode_CompareWithASCIIString(s, lit) == 0; }

/* CaffeCsvSink._pivot for one Metric. */
static int pivot_metric(pivot *p, PyObject *ev) {
    PyObject *name = PyTuple_GET_ITEM(ev, 0), *value = PyTuple_GET_ITEM(ev, 1);
    PyObject *iteration = PyTuple_GET_ITEM(ev, 2), *phase = PyTuple_GET_ITEM(ev, 3);
    PyObject *test_net = PyTuple_GET_ITEM(ev, 4), *seconds = PyTuple_GET_ITEM(ev, 5);
    if (is_str(phase, "train")) {
        if (is_str(name, "lr")) { Py_SETREF(p->lr, Py_NewRef(value)); return 0; }
        if (is_str(name, "total_loss")) {
            if (!p->loss_active) return 0;
            PyObject *loss = PyUnicode_FromString("loss");
            int rc = loss ? table_set(&p->loss, &p->env, iteration, seconds, p->lr, loss, value) : -1;
            Py_XDECREF(loss);
            return rc;
        }
        if (is_str(name, "iter_per_sec")) return 0;
        p->loss_active = 0;
        return table_set(&p->train, &p->env, iteration, seconds, p->lr, name, value);
    }
    int tn = PyObject_IsTrue(test_net);
    if (tn < 0) return -1;
    PyObject *col = tn ? PyUnicode_FromFormat("%S#%S", name, test_net) : Py_NewRef(name);
    int rc = col ? table_set(&p->test, &p->env, iteration, seconds, p->lr, col, value) : -1;
    Py_XDECREF(col);
    return rc;
}

static int pivot_load(pivot *p, PyObject *state, PyObject *env) {
    PyObject *train = NULL, *test = NULL, *loss = NULL;
    int rc = -1;
    if ((p->mtype = PyObject_GetAttrString(env, "metric")) && (p->env.row_type = PyObject_GetAttrString(env, "row")) &&
        (p->env.no_row = PyObject_GetAttrString(env, "no_row")) &&
        (p->env.fallback = PyObject_GetAttrString(env, "format_cells")) &&
        (p->lr = PyObject_GetAttrString(state, "lr")) && (train = PyObject_GetAttrString(state, "train")) &&
        (test = PyObject_GetAttrString(state, "test")) && (loss = PyObject_GetAttrString(state, "loss_only")))
        rc = table_load(&p->train, train) || table_load(&p->test, test) || table_load(&p->loss, loss) ? -1 : 0;
    p->loss_active = loss && loss != Py_None;
    Py_XDECREF(train); Py_XDECREF(test); Py_XDECREF(loss);
    return rc;
}

static int pivot_store(pivot *p, PyObject *state) {
    int rc = table_store(&p->train, &p->env) | table_store(&p->test, &p->env) | table_store(&p->loss, &p->env);
    if (PyObject_SetAttrString(state, "lr", p->lr)) rc = -1;
    if (!p->loss_active && PyObject_SetAttrString(state, "loss_only", Py_None)) rc = -1;
    return rc;
}

/* csv_pivot(events, state, env) -> None. state: the sink's _PivotState, updated;
 * env: _PIVOT_ENV (metric type, row type, no-row sentinel, Python row formatter). */
PyObject *csv_pivot(PyObject *self, PyObject *args) {
    PyObject *events, *state, *env, *res = NULL;
    if (!PyArg_ParseTuple(args, "OOO", &events, &state, &env)) return NULL;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (!seq) return NULL;
    pivot p;
    memset(&p, 0, sizeof p);
    if (pivot_load(&p, state, env)) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((PyObject *)Py_TYPE(items[i]) == p.mtype && pivot_metric(&p, items[i])) goto done;
    if (!pivot_store(&p, state)) res = Py_NewRef(Py_None);
done:
    table_clear(&p.train); table_clear(&p.test); table_clear(&p.loss);
    Py_XDECREF(p.lr); Py_XDECREF(p.mtype);
    Py_XDECREF(p.env.row_type); Py_XDECREF(p.env.no_row); Py_XDECREF(p.env.fallback);
    Py_DECREF(seq);
    return res;
}
