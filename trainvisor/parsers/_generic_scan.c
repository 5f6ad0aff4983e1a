/* Optional C implementation of GenericParser's line loop (parsers/generic.py).
 *
 * Once training has started, most lines of most logs are `name: value` pairs
 * or carry none; Python's regex engine and the per-line calls cost ~15 us a line,
 * this ~0.3 us. It implements exactly `_PAIR_RE.findall` (ordered alternatives
 * and backtracking included) and the per-match logic of `GenericParser.parse_line`
 * for ASCII lines, the evaluation tables (_generic_tables.h), JSON and Katib records
 * (_generic_json.h); every other line (not yet started, non-ASCII, more than MAX_PAIRS
 * pairs, a record the JSON reader leaves to Python) is handed to the parser's Python
 * `line` method, in order.
 * tests/test_generic_speedups.py checks that both give identical events on every
 * log the project can read. State crosses the boundary as the parser's
 * GenericScanState and EvalTables (fields by name), written before and read after
 * each handoff.
 */
#include "_generic_events.h" /* first: Python.h, and with it _GNU_SOURCE for memmem */
#include "_generic_grammar.h"
#include "_generic_tables.h"
#include "_generic_bars.h"

static const char *STATE_FIELDS[4] = {"sticky_step", "sticky_epoch", "step", "epoch"};

static const char *last_word(const pair *p) {
    const char *w = p->ks;
    for (const char *c = p->ks; c < p->ke; c++)
        if (*c == ' ') w = c + 1;
    return w;
}

/* A line of index keys alone: the position of the records after it (GenericParser._stick). */
static void stick(scan *sc, const pair *prs, int n, PyObject *step, PyObject *epoch) {
    for (int k = 0; k < n; k++) {
        const char *w = last_word(&prs[k]);
        if (!key_is(w, prs[k].ke, STICKY_KEYS)) continue;
        if (key_is(w, prs[k].ke, EPOCH_KEYS)) set_ref(&sc->sticky_epoch, is_none(epoch) ? Py_None : epoch);
        else set_ref(&sc->sticky_step, is_none(step) ? Py_None : step);
    }
}

/* One pair: an index key sets *step / *epoch, a step in parentheses *step and *sfx, a value
 * becomes keys[*ni], vals[*ni]. */
static int read_pair(scan *sc, const pair *p, PyObject **step, PyObject **sfx, PyObject **epoch, PyObject **keys,
                     PyObject **vals, int *ni) {
    const char *w = last_word(p);
    if (p->ss) {
        PyObject *s = int_of(p->ss, p->se);
        if (!s) return -1;
        Py_XSETREF(*step, Py_NewRef(s));
        Py_XSETREF(*sfx, s);
    }
    PyObject *v = to_float(p->vs, p->ve, sc->float_fb);
    if (!v) return -1;
    if (key_is(w, p->ke, ITER_KEYS)) {
        double d = v == Py_None ? NAN : PyFloat_AsDouble(v);
        Py_DECREF(v);
        if (d == d && fabs(d) < 1e15) {
            PyObject *s = PyLong_FromLongLong((long long)d);
            if (!s) return -1;
            Py_XSETREF(*step, s);
        }
    } else if (key_is(w, p->ke, EPOCH_KEYS)) {
        Py_XSETREF(*epoch, v);
    } else if (v == Py_None) {
        Py_DECREF(v);
    } else {
        PyObject *key = key_str(sc, p->ks, p->ke);
        if (!key) return Py_DECREF(v), -1;
        keys[*ni] = key;
        vals[(*ni)++] = v;
    }
    return 0;
}

/* A name of the record the parser holds (configuration until printed again): its line is Python's. */
static int holds_any(scan *sc, PyObject **keys, int ni) {
    if (!PyDict_GET_SIZE(sc->held)) return 0;
    for (int i = 0; i < ni; i++) {
        int r = PyDict_Contains(sc->held, keys[i]);
        if (r) return r;
    }
    return 0;
}

/* The events of one line's pairs once training has started (GenericParser.parse_line):
 * DONE, PYTHON (the line is the parser's: nothing changed), ERR. */
static int emit_pairs(scan *sc, const pair *prs, int n, Py_ssize_t number) {
    PyObject *step = NULL, *sfx = NULL, *epoch = NULL, *keys[MAX_PAIRS], *vals[MAX_PAIRS], *line = NULL;
    int ni = 0, rc = -1;
    for (int k = 0; k < n; k++)
        if (read_pair(sc, &prs[k], &step, &sfx, &epoch, keys, vals, &ni)) goto done;
    if ((rc = holds_any(sc, keys, ni))) goto done;
    rc = -1;
    if (sfx) set_ref(&sc->sticky_step, sfx);
    if (ni == 0 && (!is_none(step) || !is_none(epoch))) stick(sc, prs, n, step, epoch);
    PyObject *st = is_none(step) ? sc->sticky_step : step, *ep = is_none(epoch) ? sc->sticky_epoch : epoch;
    if (st != Py_None) set_ref(&sc->step, st);
    if (ep != Py_None) set_ref(&sc->epoch, ep);
    if (ni && !(line = PyLong_FromSsize_t(number))) goto done;
    for (int i = 0; i < ni; i++)
        if (append_metric(sc, keys[i], vals[i], st, ep, line)) goto done;
    rc = 0;
done:
    for (int i = 0; i < ni; i++) Py_DECREF(keys[i]), Py_DECREF(vals[i]);
    Py_XDECREF(step);
    Py_XDECREF(sfx);
    Py_XDECREF(epoch);
    Py_XDECREF(line);
    return rc;
}

/* ---- state and the block ---- */

static PyObject **state_slot(scan *sc, int i) {
    PyObject **slots[4] = {&sc->sticky_step, &sc->sticky_epoch, &sc->step, &sc->epoch};
    return slots[i];
}

static int load_state(scan *sc) {
    for (int i = 0; i < 4; i++) {
        PyObject *v = get_attr(sc->state, STATE_FIELDS[i]);
        if (!v) return -1;
        Py_XSETREF(*state_slot(sc, i), v);
    }
    if (tables_load(sc)) return -1;
    PyObject *fast = get_attr(sc->state, "fast");
    if (!fast) return -1;
    sc->fast = PyObject_IsTrue(fast);
    Py_DECREF(fast);
    return sc->fast < 0 ? -1 : 0;
}

static int store_state(scan *sc) {
    for (int i = 0; i < 4; i++)
        if (set_attr(sc->state, STATE_FIELDS[i], *state_slot(sc, i))) return -1;
    return tables_store(sc);
}

/* The parser's Python `line` for one line, its events appended with the block's stream; then its
 * state read back. */
static int handoff(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    if (store_state(sc)) return -1;
    PyObject *text = PyUnicode_DecodeUTF8(ls, e - ls, NULL), *r = NULL, *seq = NULL;
    int rc = -1;
    if (!text || !(r = PyObject_CallFunction(sc->line_fn, "OnO", text, number, sc->wall))) goto done;
    if (r != Py_None) {
        if (!(seq = PySequence_Fast(r, "GenericParser.line must return a list or None"))) goto done;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
            if (append_stamped(sc, PySequence_Fast_GET_ITEM(seq, i))) goto done;
    }
    rc = load_state(sc);
done:
    Py_XDECREF(text);
    Py_XDECREF(r);
    Py_XDECREF(seq);
    return rc;
}

/* ---- the readers of lines other than pairs: progress bars (_generic_bars.h), the evaluation
 * tables (_generic_tables.h), JSON and Katib records (here: they read the pairs' `holds_any`) ---- */

#include "_generic_json.h" /* read_json_line, read_katib_line */

/* A line of pairs (the last of GenericParser.parse_line's readers). */
static int read_pairs_line(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    pair prs[MAX_PAIRS];
    size_t n = (size_t)(e - ls);
    if (!memchr(ls, ':', n) && !memchr(ls, '=', n)) return DONE;
    int found = find_pairs(ls, e, prs);
    if (found < 0) return PYTHON;
    if (found > 1 || (found == 1 && skip_ws(ls, e) != prs[0].ks))  /* as GenericParser._leads */
        for (int k = 0; k < found; k++) prs[k].ss = NULL;
    return found > 0 ? emit_pairs(sc, prs, found, number) : DONE;
}

/* One line, its readers tried in GenericParser.parse_line's order: a progress bar, the evaluation
 * tables, a JSON record, Katib's records, pairs. Each gives DONE, PYTHON (the line is the parser's
 * Python `line`), NOT_MINE (the next reader's) or ERR. Before training starts every line is Python's. */
static int scan_line(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    int m = sc->fast ? markers(ls, e) : M_PYTHON, r = NOT_MINE;
    if (m & M_PYTHON) r = PYTHON;
    if (r == NOT_MINE && (m & M_BAR)) r = read_bar_line(sc, ls, e, number); /* _generic_bars.h */
    if (r == NOT_MINE && (m & M_WIDE)) r = PYTHON; /* non-ASCII: no other reader's */
    if (r == NOT_MINE && ((m & M_TABLE) || table_open(sc))) r = read_table_line(sc, ls, e, number, m);
    if (r == NOT_MINE && (m & M_JSON)) r = read_json_line(sc, ls, e, number);
    if (r == NOT_MINE && (m & M_KATIB)) r = read_katib_line(sc, ls, e, number);
    if (r == NOT_MINE) r = read_pairs_line(sc, ls, e, number);
    if (sc->tables.closed) table_settle(sc, r);
    return r == PYTHON ? handoff(sc, ls, e, number) : r;
}

static int scan_lines(scan *sc, const char *ls, const char *end, Py_ssize_t number) {
    for (; ls < end; number++) {
        const char *e = memchr(ls, '\n', (size_t)(end - ls));
        if (!e) break;  /* as feed_lines: a block ends with its last line's newline */
        if (scan_line(sc, ls, e, number) < 0) return -1;
        ls = e + 1;
    }
    return 0;
}

#define ENV_SIZE 10
static const char *ENV_FIELDS[ENV_SIZE] = {"cache",       "held",     "resolve",    "line",      "metric_type",
                                           "metric_tail", "to_float", "bar_states", "bar_names", "running_tail"};

static PyObject **env_slot(scan *sc, int i) {
    PyObject **slots[ENV_SIZE] = {&sc->cache, &sc->held,     &sc->resolve,    &sc->line_fn,   &sc->mtype,
                                  &sc->mtail, &sc->float_fb, &sc->bar_states, &sc->bar_names, &sc->running_tail};
    return slots[i];
}

static void scan_clear(scan *sc) {
    for (int i = 0; i < KEY_SLOTS; i++) {
        Py_CLEAR(sc->keys[i].key);
        Py_CLEAR(sc->keys[i].hit);
    }
    for (int i = 0; i < ENV_SIZE; i++) Py_CLEAR(*env_slot(sc, i));
    for (int i = 0; i < 4; i++) Py_CLEAR(*state_slot(sc, i));
    tables_clear(sc);
    Py_CLEAR(sc->out);
}

/* feed(text, first_line, wall_time, stream, state, env) -> list of events, or NotImplemented for a text
 * that has no UTF-8 form (lone surrogates). state: the parser's GenericScanState; env: its ScanEnv. */
static PyObject *feed(PyObject *self, PyObject *args) {
    PyObject *text, *out = NULL;
    Py_ssize_t first_line, len;
    scan sc;
    memset(&sc, 0, sizeof sc);
    PyObject *env;
    if (!PyArg_ParseTuple(args, "UnOUOO", &text, &first_line, &sc.wall, &sc.stream, &sc.state, &env)) return NULL;
    const char *s = PyUnicode_AsUTF8AndSize(text, &len);
    if (!s) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    for (int i = 0; i < ENV_SIZE; i++)
        if (!(*env_slot(&sc, i) = get_attr(env, ENV_FIELDS[i]))) goto done;
    if (!PyDict_Check(sc.cache) || !PyDict_Check(sc.held) || !PyDict_Check(sc.bar_states) || !PyTuple_Check(sc.mtail)
        || !PyTuple_GET_SIZE(sc.mtail) || !PyTuple_Check(sc.running_tail)
        || PyTuple_GET_SIZE(sc.running_tail) != PyTuple_GET_SIZE(sc.mtail)) {
        PyErr_SetString(PyExc_TypeError, "ScanEnv.cache, .held and .bar_states must be dicts, .metric_tail and "
                                         ".running_tail tuples of one size from stream on");
        goto done;
    }
    sc.atomic_tail = 1;
    for (Py_ssize_t n = PyTuple_GET_SIZE(sc.mtail), i = 0; i < 2 * n; i++) { /* both tails */
        PyObject *d = PyTuple_GET_ITEM(i < n ? sc.mtail : sc.running_tail, i % n);
        sc.atomic_tail &= d == Py_None || PyBool_Check(d) || PyLong_CheckExact(d) || PyFloat_CheckExact(d)
                          || PyUnicode_CheckExact(d);
    }
    if (tables_attach(&sc, env) || load_state(&sc) || !(sc.out = PyList_New(0))) goto done;
    if (!scan_lines(&sc, s, s + len, first_line) && !store_state(&sc)) out = Py_NewRef(sc.out);
done:
    scan_clear(&sc);
    return out;
}

static PyMethodDef methods[] = {
    {"feed", feed, METH_VARARGS, "GenericParser's line loop over a block (see generic.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_generic_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__generic_scan(void) {
    init_char_classes();
    if (!(S_val = PyUnicode_InternFromString("val"))) return NULL;
    return PyModule_Create(&moduledef);
}
