/* The evaluation tables of GenericParser (tables.py `EvalTables.read`) for ASCII lines: pycocotools
 * summaries and the titles naming them, detectron2's markdown tables, mmdetection's `bbox_mAP`
 * values, YOLOX's `best AP is`, the Ultralytics `all` row. Included by _generic_scan.c, after
 * _generic_events.h and _generic_grammar.h; the table being read lives in the parser's EvalTables,
 * whose fields the loop loads and stores around Python's lines (tables_load, tables_store), so
 * a table goes on across handed-back lines and blocks as in the Python loop. */
#ifndef TRAINVISOR_GENERIC_TABLES_H
#define TRAINVISOR_GENERIC_TABLES_H

#include "_generic_coco.h"

/* ---- the EvalTables' fields ---- */

static const char *const TABLE_FIELDS[3] = {"_coco_type", "_md_task", "_md_head"};

static PyObject **table_slot(eval_tables *t, int i) {
    PyObject **slots[3] = {&t->coco_type, &t->md_task, &t->md_head};
    return slots[i];
}

/* EvalTables.coco_prefix of the loaded or set `_coco_type`. */
static int set_coco_prefix(eval_tables *t) {
    PyObject *p = PyUnicode_GET_LENGTH(t->coco_type) ? PyUnicode_FromFormat("%U/", t->coco_type) : PyUnicode_New(0, 0);
    if (!p) return -1;
    Py_XSETREF(t->coco_prefix, p);
    return 0;
}

static int tables_attach(scan *sc, PyObject *env) {
    return (sc->tables.obj = get_attr(env, "tables")) ? 0 : -1;
}

static int tables_load(scan *sc) {
    eval_tables *t = &sc->tables;
    PyObject *coco_type = t->coco_type ? Py_NewRef(t->coco_type) : NULL;
    int rc = -1;
    for (int i = 0; i < 3; i++) {
        PyObject *v = get_attr(t->obj, TABLE_FIELDS[i]);
        if (!v) goto done;
        Py_XSETREF(*table_slot(t, i), v);
        if (i < 2 ? !PyUnicode_Check(v) : !PyList_Check(v)) {
            PyErr_Format(PyExc_TypeError, "EvalTables.%s must be a %s", TABLE_FIELDS[i], i < 2 ? "str" : "list");
            goto done;
        }
    }
    PyObject *row = get_attr(t->obj, "_md_row");
    if (!row) goto done;
    t->md_row = PyLong_AsSsize_t(row);
    Py_DECREF(row);
    if ((t->md_row == -1 && PyErr_Occurred()) || (t->coco_type != coco_type && set_coco_prefix(t))) goto done;
    t->changed = 0;
    rc = 0;
done:
    Py_XDECREF(coco_type);
    return rc;
}

/* The fields back into the EvalTables, when a line read here changed them. */
static int tables_store(scan *sc) {
    eval_tables *t = &sc->tables;
    if (!t->changed) return 0;
    for (int i = 0; i < 3; i++)
        if (set_attr(t->obj, TABLE_FIELDS[i], *table_slot(t, i))) return -1;
    PyObject *row = PyLong_FromSsize_t(t->md_row);
    int r = row ? set_attr(t->obj, "_md_row", row) : -1;
    Py_XDECREF(row);
    t->changed = r != 0;
    return r;
}

static void tables_clear(scan *sc) {
    eval_tables *t = &sc->tables;
    Py_CLEAR(t->obj);
    for (int i = 0; i < 3; i++) Py_CLEAR(*table_slot(t, i));
    Py_CLEAR(t->coco_prefix);
    Py_CLEAR(t->closed);
}

/* `_md_task`: a markdown table's title was read, its next lines are the table's first. */
static inline int table_open(const scan *sc) { return PyUnicode_GET_LENGTH(sc->tables.md_task) > 0; }

/* A str field set to the ASCII text s..e. */
static int set_field(scan *sc, PyObject **slot, const char *s, const char *e) {
    PyObject *v = PyUnicode_FromStringAndSize(s, e - s);
    if (!v) return -1;
    Py_XSETREF(*slot, v);
    sc->tables.changed = 1;
    return 0;
}

/* ---- metrics: all `val`, at the parser's last step and epoch ---- */

static int emit_val(scan *sc, PyObject *name, PyObject *value, PyObject *line) {
    return append_named(sc, name, S_val, value, sc->step, sc->epoch, line);
}

/* EvalTables._pairs for one (name, number text): appends it unless the name ends with `_copypaste`
 * or the text is no number; *emitted counts what it appended. */
static int emit_pair(scan *sc, const char *ks, const char *ke, const char *vs, const char *ve, PyObject *line,
                     int *emitted) {
    if (ke - ks >= 10 && memcmp(ke - 10, "_copypaste", 10) == 0) return 0;
    PyObject *value = to_float(vs, ve, sc->float_fb), *name = NULL;
    if (!value) return -1;
    int r = 0;
    if (value != Py_None) {
        r = (name = PyUnicode_FromStringAndSize(ks, ke - ks)) ? emit_val(sc, name, value, line) : -1;
        *emitted += r == 0;
    }
    Py_XDECREF(name);
    Py_DECREF(value);
    return r;
}

/* ---- titles (EvalTables._titles): `IoU metric: bbox`, `Evaluate annotation type *bbox*`,
 * `Evaluation results for bbox:`; DONE when one names what comes next, else NOT_MINE ---- */

/* _COCO_TYPE_RE searched: the leftmost of its two forms; the type's end, its start in *ts. */
static const char *coco_type_title(const char *ls, const char *e, const char **ts) {
    for (const char *p = ls; p < e; p++) {
        const char *q, *r;
        if (*p == 'I' && (q = lit(p, e, "IoU metric: ")) && (r = run(q, e, is_wc))) return *ts = q, r;
        if (*p == 'E' && (q = lit(p, e, "Evaluate annotation type *")) && (r = run(q, e, is_wc)) && r < e
            && *r == '*')
            return *ts = q, r;
    }
    return NULL;
}

/* _MD_TITLE_RE searched, `Evaluation results for (\w+):\s*$`: the task's end, its start in *ts. */
static const char *markdown_title(const char *ls, const char *e, const char **ts) {
    for (const char *p = ls; (p = memmem(p, (size_t)(e - p), "Evaluation results for ", 23)); p++) {
        const char *q = p + 23, *r = run(q, e, is_wc);
        if (r && r < e && *r == ':' && skip_ws(r + 1, e) == e) return *ts = q, r;
    }
    return NULL;
}

static int read_titles(scan *sc, const char *ls, const char *e) {
    eval_tables *t = &sc->tables;
    const char *ts, *te;
    if ((te = coco_type_title(ls, e, &ts)))
        return set_field(sc, &t->coco_type, ts, te) || set_coco_prefix(t) ? ERR : DONE;
    if (!(te = markdown_title(ls, e, &ts))) return NOT_MINE;
    PyObject *head = PyList_New(0);
    if (!head || set_field(sc, &t->md_task, ts, te)) return Py_XDECREF(head), ERR;
    Py_XSETREF(t->md_head, head);
    t->md_row = 0;
    return DONE;
}

/* ---- detectron2's markdown table (EvalTables._markdown): header, `|:---:|` rule, one row of
 * values -> `bbox/AP` ...; a line not framed by `|` ends the table and is NOT_MINE ---- */

/* The cell of a row's inside (s[1:-1]) at *c, stripped, in *cs..*ce; *c moves past its `|`, to
 * NULL after the last cell (as `str.split("|")`, then `strip()`). */
static void next_cell(const char **c, const char *e, const char **cs, const char **ce) {
    const char *bar = memchr(*c, '|', (size_t)(e - *c)), *end = bar ? bar : e;
    *cs = skip_ws(*c, end);
    while (end > *cs && is_ws(end[-1])) end--;
    *ce = end;
    *c = bar ? bar + 1 : NULL;
}

/* The header's cells as a new list of str. */
static PyObject *header_cells(const char *s, const char *e) {
    PyObject *cells = PyList_New(0);
    for (const char *c = s, *cs, *ce; c && cells;) {
        next_cell(&c, e, &cs, &ce);
        PyObject *cell = PyUnicode_FromStringAndSize(cs, ce - cs);
        if (!cell || PyList_Append(cells, cell)) Py_CLEAR(cells);
        Py_XDECREF(cell);
    }
    return cells;
}

/* The row of values: `task/head` for each cell, when there are as many as the header's and all
 * are numbers (else the row gives nothing). */
static int emit_values(scan *sc, PyObject *task, PyObject *head, const char *s, const char *e, Py_ssize_t number) {
    Py_ssize_t n = 1, i = 0;
    for (const char *c = s; (c = memchr(c, '|', (size_t)(e - c))); c++) n++;
    if (n != PyList_GET_SIZE(head)) return DONE;
    PyObject *values = PyList_New(n), *line = NULL;
    int rc = ERR;
    if (!values) return ERR;
    for (const char *c = s, *cs, *ce; c; i++) {
        next_cell(&c, e, &cs, &ce);
        PyObject *v = to_float(cs, ce, sc->float_fb);
        if (!v) goto done;
        PyList_SET_ITEM(values, i, v);
        if (v == Py_None) {
            rc = DONE;
            goto done;
        }
    }
    if (!(line = PyLong_FromSsize_t(number))) goto done;
    for (i = 0; i < n; i++) {
        PyObject *h = PyList_GET_ITEM(head, i), *name;
        if (!PyUnicode_Check(h)) {
            PyErr_SetString(PyExc_TypeError, "EvalTables._md_head must hold str");
            goto done;
        }
        if (!(name = PyUnicode_FromFormat("%U/%U", task, h))) goto done;
        int r = emit_val(sc, name, PyList_GET_ITEM(values, i), line);
        Py_DECREF(name);
        if (r) goto done;
    }
    rc = DONE;
done:
    Py_DECREF(values);
    Py_XDECREF(line);
    return rc;
}

static int read_markdown(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    eval_tables *t = &sc->tables;
    const char *a = skip_ws(ls, e), *z = e;
    while (z > a && is_ws(z[-1])) z--;
    t->changed = 1;
    PyObject *none = PyUnicode_New(0, 0); /* "": no table */
    if (!none) return ERR;
    if (z == a || *a != '|' || z[-1] != '|') { /* kept in `closed` until the line is read */
        t->closed = t->md_task;
        t->md_task = none;
        return NOT_MINE;
    }
    const char *s = a + 1, *ie = z - 1 > s ? z - 1 : s; /* s[1:-1] */
    if (++t->md_row > 2) { /* the row of values: the table ends */
        PyObject *task = t->md_task, *head = Py_NewRef(t->md_head);
        t->md_task = none;
        int r = emit_values(sc, task, head, s, ie, number);
        Py_DECREF(task);
        Py_DECREF(head);
        return r;
    }
    Py_DECREF(none);
    if (t->md_row == 2) return DONE; /* the rule */
    PyObject *head = header_cells(s, ie);
    if (!head) return ERR;
    Py_SETREF(t->md_head, head);
    return DONE;
}

/* After a line that ended a table: the table is open again when a later reader handed the line to
 * Python (r PYTHON), whose EvalTables.read then ends it, as the Python loop reads the line. */
static void table_settle(scan *sc, int r) {
    eval_tables *t = &sc->tables;
    if (r == PYTHON) Py_SETREF(t->md_task, t->closed);
    else Py_DECREF(t->closed);
    t->closed = NULL;
}

/* ---- mmdetection's `bbox_mAP` values (`_MMDET_RE`, found all) ---- */

/* (?:bbox|segm|proposal)_mAP\w*['"]?\s*[:=,]\s*NUMBER(?![\w.]) at p: the match's end, the name's
 * end in *ke and the value in *vs..*ve, or NULL */
static const char *mmdet_rest(const char *p, const char *e, const char **ke, const char **vs, const char **ve) {
    const char *q = lit(p, e, "bbox");
    if (!q) q = lit(p, e, "segm");
    if (!q) q = lit(p, e, "proposal");
    if (!(q = lit(q, e, "_mAP"))) return NULL;
    while (q < e && is_w(*q)) q++;
    *ke = q;
    if (q < e && (*q == '\'' || *q == '"')) q++;
    q = skip_ws(q, e);
    if (q >= e || (*q != ':' && *q != '=' && *q != ',')) return NULL;
    *vs = skip_ws(q + 1, e);
    return (*ve = number_then(*vs, e, ends_value));
}

/* _MMDET_RE.findall, each pair appended as EvalTables._pairs does: DONE, or NOT_MINE when it gave
 * none (the line goes on to the pairs). No lookbehind: a match may start inside a word. */
static int read_mmdet(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    PyObject *line = PyLong_FromSsize_t(number);
    const char *run_end = ls, *ke, *vs, *ve, *m;
    int emitted = 0;
    if (!line) return ERR;
    for (const char *i = ls; i < e;) {
        if (i >= run_end && is_w(*i)) /* (?:\w+/)? : the \w run from i ends where the one it is in does */
            for (run_end = i; run_end < e && is_w(*run_end);) run_end++;
        m = NULL;
        if (i < run_end && run_end < e && *run_end == '/') m = mmdet_rest(run_end + 1, e, &ke, &vs, &ve);
        if (!m) m = mmdet_rest(i, e, &ke, &vs, &ve);
        if (!m) {
            i++;
        } else if (emit_pair(sc, i, ke, vs, ve, line, &emitted)) {
            Py_DECREF(line);
            return ERR;
        } else {
            i = m;
        }
    }
    Py_DECREF(line);
    return emitted ? DONE : NOT_MINE;
}

/* ---- YOLOX's `best AP is N` (`_BEST_AP_RE`, searched) -> best_AP ---- */

static int read_best_ap(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    for (const char *p = ls; (p = memmem(p, (size_t)(e - p), "best AP is ", 11)); p++) {
        const char *ve = number_any(p + 11, e);
        if (!ve) continue;
        PyObject *line = PyLong_FromSsize_t(number);
        static const char name[] = "best_AP";
        int emitted = 0, r = line ? emit_pair(sc, name, name + 7, p + 11, ve, line, &emitted) : -1;
        Py_XDECREF(line);
        return r ? ERR : emitted ? DONE : NOT_MINE;
    }
    return NOT_MINE;
}

/* ---- the Ultralytics `all N M P R mAP50 mAP50-95` row (`_ALL_ROW_RE`, matched) ---- */

static int then_blank(const char *v, const char *e) { return v < e && is_ws(*v); }
static int then_end(const char *v, const char *e) { return skip_ws(v, e) == e; }

static int read_all_row(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    static const char *const names[4] = {"P", "R", "mAP50", "mAP50-95"};
    const char *p = lit(skip_ws(ls, e), e, "all"), *vs[4], *ve[4];
    for (int k = 0; k < 2; k++) { /* \s+\d+ twice */
        if (!p || p >= e || !is_ws(*p)) return NOT_MINE;
        const char *d = skip_ws(p, e);
        p = digits(d, e);
        if (p == d) return NOT_MINE;
    }
    for (int k = 0; k < 4; k++) {
        if (p >= e || !is_ws(*p)) return NOT_MINE;
        vs[k] = skip_ws(p, e);
        if (!(p = ve[k] = number_then(vs[k], e, k < 3 ? then_blank : then_end))) return NOT_MINE;
    }
    PyObject *line = PyLong_FromSsize_t(number);
    int emitted = 0;
    if (!line) return ERR;
    for (int k = 0; k < 4; k++)
        if (emit_pair(sc, names[k], names[k] + strlen(names[k]), vs[k], ve[k], line, &emitted)) {
            Py_DECREF(line);
            return ERR;
        }
    Py_DECREF(line);
    return emitted ? DONE : NOT_MINE;
}

/* ---- EvalTables.read ---- */

static int has(const char *ls, const char *e, const char *w) { return memmem(ls, (size_t)(e - ls), w, strlen(w)) != NULL; }

/* The evaluation tables' reading of a line, in EvalTables.read's order: while a markdown table is
 * open every line is its; then `IoU` (a summary line or its title), `Evaluat` (titles), `AP`
 * (mmdetection's `_mAP`, else `best AP is`), `all `. DONE (events or a title), NOT_MINE (the
 * pairs' line), ERR. `m` (markers): M_IOU when the line holds `IoU`. */
static int read_table_line(scan *sc, const char *ls, const char *e, Py_ssize_t number, int m) {
    if (table_open(sc)) return read_markdown(sc, ls, e, number);
    if (m & M_IOU) {
        coco_line c;
        if (has(ls, e, "] = ")) return !find_coco(ls, e, &c) ? NOT_MINE : emit_coco(sc, &c, number) ? ERR : DONE;
        return has(ls, e, "IoU metric: ") ? read_titles(sc, ls, e) : NOT_MINE;
    }
    if (has(ls, e, "Evaluat")) return read_titles(sc, ls, e);
    if (has(ls, e, "AP")) {
        if (has(ls, e, "mAP")) return has(ls, e, "_mAP") ? read_mmdet(sc, ls, e, number) : NOT_MINE;
        return has(ls, e, "best AP is") ? read_best_ap(sc, ls, e, number) : NOT_MINE;
    }
    return has(ls, e, "all ") ? read_all_row(sc, ls, e, number) : NOT_MINE;
}

#endif
