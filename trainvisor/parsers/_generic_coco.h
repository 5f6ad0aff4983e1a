/* The pycocotools summary line of GenericParser's evaluation tables (tables.py `_COCO_RE`, searched,
 * and `coco_name`): `Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.002`
 * -> `AP`, after the prefix of the last `IoU metric: bbox` title (`bbox/AP`). Included by
 * _generic_tables.h, whose reader takes the line. */
#ifndef TRAINVISOR_GENERIC_COCO_H
#define TRAINVISOR_GENERIC_COCO_H

typedef struct { const char *ks, *is, *ie, *as, *ae, *ms, *me, *vs, *ve; } coco_line; /* kind is 2 chars */

static int is_iou(char c) { return is_digit(c) || c == '.' || c == ':'; }
static int is_wc(char c) { return is_w(c); }
static int is_dc(char c) { return is_digit(c); }

/* _COCO_RE at p, the text after an "Average ": 1 with its groups in *c, else 0 */
static int coco_at(const char *p, const char *e, coco_line *c) {
    const char *q = lit(p, e, "Precision");
    if (!q) q = lit(p, e, "Recall");
    if (!q || q >= e || !is_ws(*q) || !(q = ws_lit(q, e, "(A")) || q + 1 >= e || (*q != 'P' && *q != 'R')
        || q[1] != ')')
        return 0;
    c->ks = q - 1;
    c->is = ws_lit(ws_lit(q + 2, e, "@["), e, "IoU=");
    if (!(c->ie = run(c->is, e, is_iou))) return 0;
    c->as = ws_lit(ws_lit(c->ie, e, "|"), e, "area=");
    if (!(c->as = c->as ? skip_ws(c->as, e) : NULL) || !(c->ae = run(c->as, e, is_wc))) return 0;
    c->ms = ws_lit(ws_lit(c->ae, e, "|"), e, "maxDets=");
    if (!(c->ms = c->ms ? skip_ws(c->ms, e) : NULL) || !(c->me = run(c->ms, e, is_dc))) return 0;
    c->vs = ws_lit(ws_lit(c->me, e, "]"), e, "=");
    if (!(c->vs = c->vs ? skip_ws(c->vs, e) : NULL) || !(c->ve = number_any(c->vs, e))) return 0;
    return 1;
}

/* The first match of _COCO_RE in a line holding "] = " (tables.EvalTables._coco); 1 or 0 */
static int find_coco(const char *ls, const char *e, coco_line *c) {
    if (!memmem(ls, (size_t)(e - ls), "] = ", 4)) return 0;
    for (const char *p = ls; (p = memmem(p, (size_t)(e - p), "Average ", 8)); p++)
        if (coco_at(p + 8, e, c)) return 1;
    return 0;
}

/* tables.coco_name: AP/AR + IoU (50, 75) + area (s, m, l), AR over all areas and IoUs + maxDets;
 * after the prefix of the last `IoU metric: bbox` title (`bbox/`). */
static PyObject *coco_name(scan *sc, const coco_line *c) {
    size_t n = 2, iou = (size_t)(c->ie - c->is), area = (size_t)(c->ae - c->as), dets = (size_t)(c->me - c->ms);
    int ranged = memchr(c->is, ':', iou) != NULL;
    char *buf = PyMem_Malloc(iou + dets + 4);
    if (!buf) return PyErr_NoMemory();
    memcpy(buf, c->ks, 2);
    if ((iou == 4 && memcmp(c->is, "0.50", 4) == 0) || (iou == 3 && memcmp(c->is, "0.5", 3) == 0))
        memcpy(buf + n, "50", 2), n += 2;
    else if (iou == 4 && memcmp(c->is, "0.75", 4) == 0)
        memcpy(buf + n, "75", 2), n += 2;
    else if (!ranged)
        memcpy(buf + n, c->is, iou), n += iou;
    if (area == 5 && memcmp(c->as, "small", 5) == 0) buf[n++] = 's';
    else if (area == 6 && memcmp(c->as, "medium", 6) == 0) buf[n++] = 'm';
    else if (area == 5 && memcmp(c->as, "large", 5) == 0) buf[n++] = 'l';
    if (c->ks[1] == 'R' && area == 3 && memcmp(c->as, "all", 3) == 0 && ranged) memcpy(buf + n, c->ms, dets), n += dets;
    PyObject *tail = PyUnicode_FromStringAndSize(buf, (Py_ssize_t)n);
    PyMem_Free(buf);
    PyObject *name = tail ? PyUnicode_Concat(sc->tables.coco_prefix, tail) : NULL;
    Py_XDECREF(tail);
    return name;
}

/* A pycocotools summary line: one `val` metric at the parser's last step and epoch. */
static int emit_coco(scan *sc, const coco_line *c, Py_ssize_t number) {
    PyObject *name = coco_name(sc, c), *value = name ? to_float(c->vs, c->ve, sc->float_fb) : NULL;
    PyObject *line = value ? PyLong_FromSsize_t(number) : NULL;
    int r = line ? append_named(sc, name, S_val, value, sc->step, sc->epoch, line) : -1;
    Py_XDECREF(name);
    Py_XDECREF(value);
    Py_XDECREF(line);
    return r;
}

#endif
