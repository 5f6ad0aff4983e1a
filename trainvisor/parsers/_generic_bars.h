/* Progress-bar lines in the generic C loop: bars.py `read_bar` for tqdm's form with a percentage
 * (`_TQDM_PCT_RE`), rich's form (`_RICH_RE`) and the Keras 2 form with a `[=>.]` bar (`_KERAS_RE`),
 * then `BarMetrics.read` on the parser's own bar state (ScanEnv.bar_states, BarMetrics.states).
 * Included by _generic_scan.c, after _generic_events.h and _generic_grammar.h.
 *
 * Python's \d, \s and \w are Unicode-aware: a non-ASCII byte where a regex tests a class (or
 * where `str.strip` looks) makes the reading unsure, and the line goes to Python. Non-ASCII bytes
 * are read here only where the regexes take any character: a tqdm bar's description and the bar
 * itself (`█`), the description not right before a percentage of fewer than 3 digits (a Unicode
 * digit there would open it), nor in a description whose postfix gives metrics (its strip and its
 * `Epoch` are Python's); and in a rich line whose only non-ASCII characters are its bar's and its
 * `•` (none of them \s, \d or \w). Every other form (tqdm's without a percentage, Keras 3, ...)
 * and every doubt is Python's: DONE only for what read_bar certainly reads, NOT_MINE only for an
 * ASCII line no form can match. */
#ifndef TRAINVISOR_GENERIC_BARS_H
#define TRAINVISOR_GENERIC_BARS_H

enum { BAR_NO = 0, BAR_YES = 1, BAR_UNSURE = 2 };

#define MAX_BAR_PAIRS 64
#define MAX_COUNT_DIGITS 18 /* n, total, an epoch: a long long; longer (int()'s limit, ...) are Python's */

typedef struct {
    const char *ds, *de;           /* the description: the text before the form */
    const char *ns, *ne, *ts, *te; /* n, total (ts NULL: none) */
    const char *ps, *pe;           /* tqdm's bracket, rich's or Keras' tail */
    int form;
} bar_line;

enum { FORM_TQDM, FORM_RICH, FORM_KERAS };

typedef struct { const char *ks, *ke, *vs, *ve; } bar_pair; /* a postfix's raw name and NUMBER */

static inline int is_wide(char c) { return (unsigned char)c >= 0x80; }

static int any_wide(const char *s, const char *e) {
    for (; s < e; s++)
        if (is_wide(*s)) return 1;
    return 0;
}

/* ---- read_bar's forms ---- */

/* `%\|[^|]*\|\s*(\d+)(?:/(\d+))?\s*\[([^\]]*)\]` from the "%|" at p (_TQDM_PCT_RE after its digits) */
static int tqdm_rest(const char *p, const char *e, bar_line *b) {
    const char *q = memchr(p + 2, '|', (size_t)(e - p - 2)), *t;
    if (!q) return BAR_NO;
    q = skip_ws(q + 1, e);
    b->ns = q;
    b->ne = q = digits(q, e);
    if (q < e && is_wide(*q)) return BAR_UNSURE; /* a Unicode space or digit */
    if (b->ne == b->ns) return BAR_NO;
    b->ts = NULL;
    if (q + 1 < e && *q == '/') {
        if (is_wide(q[1])) return BAR_UNSURE;
        if ((t = digits(q + 1, e)) > q + 1) {
            if (t < e && is_wide(*t)) return BAR_UNSURE;
            b->ts = q + 1, b->te = q = t;
        }
    }
    q = skip_ws(q, e);
    if (q < e && is_wide(*q)) return BAR_UNSURE;
    if (q >= e || *q != '[') return BAR_NO;
    b->ps = q + 1;
    if (!(b->pe = memchr(b->ps, ']', (size_t)(e - b->ps)))) return BAR_NO;
    return BAR_YES;
}

/* _TQDM_PCT_RE after the lazy description: the first "%|" after 1-3 digits whose rest matches. */
static int tqdm_pct(const char *ls, const char *e, bar_line *b) {
    for (const char *p = ls; (p = memmem(p, (size_t)(e - p), "%|", 2)); p += 2) {
        const char *d = p;
        while (d > ls && p - d < 3 && is_digit(d[-1])) d--;
        if (p - d < 3 && d > ls && is_wide(d[-1])) return BAR_UNSURE; /* a Unicode digit may open the percentage */
        if (d == p) continue;
        int r = tqdm_rest(p, e, b);
        if (r == BAR_NO) continue; /* the rest is the same from each start before this "%|" */
        b->ds = ls, b->de = d, b->form = FORM_TQDM;
        return r;
    }
    return BAR_NO;
}

/* _TQDM_COUNT_RE needs a "[" opening the times (_TIMES_OPEN_RE): 1 when one may (Unicode digits too). */
static int may_be_count_form(const char *ls, const char *e) {
    for (const char *p = ls; (p = memchr(p, '[', (size_t)(e - p))) && ++p < e;)
        if (is_digit(*p) || *p == ':' || is_wide(*p)) return 1;
    return 0;
}

/* rich's characters (UTF-8): its bar's `━╸╺─` (1), its `•` (2), another (0) */
static int rich_char(const char *p, const char *e) {
    if (e - p < 3 || (unsigned char)p[0] != 0xE2) return 0;
    unsigned char b1 = (unsigned char)p[1], b2 = (unsigned char)p[2];
    if ((b1 == 0x94 && (b2 == 0x80 || b2 == 0x81)) || (b1 == 0x95 && (b2 == 0xB8 || b2 == 0xBA))) return 1;
    return b1 == 0x80 && b2 == 0xA2 ? 2 : 0;
}

static const char *skip_bar_chars(const char *p, const char *e) {
    while (rich_char(p, e) == 1) p += 3;
    return p;
}

/* `\s+(\d+)/(\d+)\s+[\d:]+\s*•\s*[-\d:]+` after a rich bar: the end, or NULL (no backtracking
 * finds another way: each run stops where the next part cannot start) */
static const char *rich_counts(const char *p, const char *e, bar_line *b) {
    const char *q = skip_ws(p, e);
    if (q == p) return NULL;
    b->ns = q;
    if ((b->ne = q = digits(q, e)) == b->ns || q >= e || *q != '/') return NULL;
    b->ts = q + 1;
    if ((b->te = q = digits(q + 1, e)) == b->ts || (p = skip_ws(q, e)) == q) return NULL;
    for (q = p; q < e && (is_digit(*q) || *q == ':');) q++;
    if (q == p || rich_char(q = skip_ws(q, e), e) != 2) return NULL;
    for (p = q = skip_ws(q + 3, e); q < e && (is_digit(*q) || *q == ':' || *q == '-');) q++;
    return q > p ? q : NULL;
}

/* After the times: `\s*(?P<rate>\S+/s|\S+/it)?`, each \S+ as long as it can be; where the post starts */
static const char *rich_post(const char *p, const char *e) {
    const char *r = skip_ws(p, e), *re = r;
    while (re < e && !is_ws(*re)) re++;
    for (const char *k = re - 2; re - r >= 3 && k > r; k--)
        if (k[0] == '/' && k[1] == 's') return k + 2;
    for (const char *k = re - 3; re - r >= 4 && k > r; k--)
        if (k[0] == '/' && k[1] == 'i' && k[2] == 't') return k + 3;
    return r;
}

/* _RICH_RE on a line whose non-ASCII characters are all rich's: the lazy description ends where a
 * blank run before a bar run starts, the first bar run the counts and times follow; the post
 * `(.*)$` then always matches. */
static int rich_form(const char *ls, const char *e, bar_line *b) {
    for (const char *p = ls; p < e; p++)
        if (is_wide(*p)) {
            if (!rich_char(p, e)) return BAR_UNSURE;
            p += 2;
        }
    for (const char *p = ls; p < e;) {
        if (rich_char(p, e) != 1) {
            p++;
            continue;
        }
        const char *be = skip_bar_chars(p, e), *w = p, *t = rich_counts(be, e, b);
        if (t) {
            while (w > ls && is_ws(w[-1])) w--;
            b->ds = ls, b->de = w, b->ps = rich_post(t, e), b->pe = e, b->form = FORM_RICH;
            return BAR_YES;
        }
        p = be;
    }
    return BAR_UNSURE; /* Python's regex finds none: the Keras form's turn */
}

/* (?:\s+(?P<per>[\d.]+)(?P<unit>[mu]?s)/step)? at p: its end, or p */
static const char *keras_per_step(const char *p, const char *e) {
    if (p >= e || !is_ws(*p)) return p;
    const char *r = skip_ws(p, e), *f = r;
    while (f < e && (is_digit(*f) || *f == '.')) f++;
    if (f == r) return p;
    if (f + 1 < e && (*f == 'm' || *f == 'u') && f[1] == 's') f += 2;
    else if (f < e && *f == 's') f++;
    else return p;
    return lit(f, e, "/step") ? f + 5 : p;
}

/* _KERAS_RE on an ASCII line, its bar `\[[=>.]*\]` (another bar is Keras 3's: Python's). The regex
 * backtracks to no other match: each step below is the only way on. */
static int keras_form(const char *ls, const char *e, bar_line *b) {
    const char *p = skip_ws(ls, e), *q;
    b->ns = p;
    if ((b->ne = p = digits(p, e)) == b->ns || p >= e || *p != '/') return BAR_NO;
    b->ts = p + 1;
    if ((b->te = p = digits(p + 1, e)) == b->ts || p >= e || !is_ws(*p)) return BAR_NO;
    if ((p = skip_ws(p, e)) >= e || *p != '[') return BAR_UNSURE;
    for (q = p + 1; q < e && (*q == '=' || *q == '>' || *q == '.');) q++;
    if (q >= e || *q != ']') return BAR_UNSURE;
    p = skip_ws(q + 1, e);
    if (p + 1 < e && *p == '-' && is_ws(p[1])) p = skip_ws(p + 1, e); /* (?:-\s+)? */
    if ((q = lit(p, e, "ETA: "))) {                                    /* ETA: \S+ */
        for (p = q; p < e && !is_ws(*p);) p++;
        if (p == q) return BAR_UNSURE;
    } else { /* \d+m?s, then maybe the time per step */
        if ((q = digits(p, e)) == p) return BAR_UNSURE;
        if (q + 1 < e && q[0] == 'm' && q[1] == 's') q += 2;
        else if (q < e && *q == 's') q++;
        else return BAR_UNSURE;
        p = keras_per_step(q, e);
    }
    if (p < e) { /* (?P<post>(?:\s+-\s+.*)?)$ */
        q = skip_ws(p, e);
        if (q == p || q + 1 >= e || *q != '-' || !is_ws(q[1])) return BAR_UNSURE;
    }
    b->ds = b->de = ls, b->ps = p, b->pe = e, b->form = FORM_KERAS;
    return BAR_YES;
}

/* ---- postfix pairs ---- */

static const char *const BOOKKEEPING[] = {"v_num", "it/s", "s/it", "ETA", "eta", NULL}; /* bars._BOOKKEEPING */

static int ends_part(const char *v, const char *e) { return v == e; }                                     /* $ */
static int ends_rich_value(const char *v, const char *e) { return v == e || is_ws(*v); }                  /* (?!\S) */

/* `[A-Za-z_][\w./@-]*` at p: its end, or NULL */
static const char *bar_name(const char *p, const char *e) {
    if (p >= e || !is_first(*p)) return NULL;
    while (++p < e && is_name(*p)) {}
    return p;
}

static int add_pair(bar_pair *prs, int n, const char *ks, const char *ke, const char *vs, const char *ve) {
    if (key_is(ks, ke, BOOKKEEPING)) return n;
    if (n == MAX_BAR_PAIRS) return -1;
    prs[n] = (bar_pair){ks, ke, vs, ve};
    return n + 1;
}

/* bars._tqdm_part over the bracket's parts after the times (an ASCII bracket): the pairs, or -1 */
static int tqdm_pairs(const bar_line *b, bar_pair *prs) {
    int n = 0;
    if (any_wide(b->ps, b->pe)) return -1;
    const char *s = memchr(b->ps, ',', (size_t)(b->pe - b->ps));
    while (s && n >= 0) {
        const char *ps = skip_ws(s + 1, b->pe), *pe = memchr(ps, ',', (size_t)(b->pe - ps));
        const char *end = pe ? pe : b->pe;
        while (end > ps && is_ws(end[-1])) end--; /* part.strip() */
        const char *k = bar_name(ps, end), *v;
        if (k && k < end && *k == '=' && (v = number_then(k + 1, end, ends_part)))
            n = add_pair(prs, n, ps, k, k + 1, v);
        s = pe;
    }
    return n;
}

/* _KERAS_PAIR_RE.findall over the post: the pairs, or -1 */
static int keras_pairs(const bar_line *b, bar_pair *prs) {
    int n = 0;
    for (const char *i = b->ps; n >= 0 && i + 3 <= b->pe;) {
        const char *k = memcmp(i, " - ", 3) == 0 ? bar_name(i + 3, b->pe) : NULL, *v = NULL;
        if (k && b->pe - k >= 2 && k[0] == ':' && k[1] == ' ' && (v = number_then(k + 2, b->pe, ends_value))) {
            n = add_pair(prs, n, i + 3, k, k + 2, v);
            i = v;
        } else {
            i++;
        }
    }
    return n;
}

/* _RICH_PAIR_RE.findall over the post (ASCII but for rich's characters, none a name's): the pairs, or -1 */
static int rich_pairs(const bar_line *b, bar_pair *prs) {
    int n = 0;
    for (const char *i = b->ps; n >= 0 && i < b->pe;) {
        const char *k = bar_name(i, b->pe), *v = NULL;
        if (k && b->pe - k >= 2 && k[0] == ':' && k[1] == ' ' && (v = number_then(k + 2, b->pe, ends_rich_value))) {
            n = add_pair(prs, n, i, k, k + 2, v);
            i = v;
        } else {
            i++;
        }
    }
    return n;
}

/* ---- BarMetrics.read ---- */

static PyObject *digits_int(const char *s, const char *e) { /* int() of at most MAX_COUNT_DIGITS digits */
    long long v = 0;
    for (; s < e; s++) v = v * 10 + (*s - '0');
    return PyLong_FromLongLong(v);
}

/* bars._state's description: desc.strip().rstrip(":").rstrip() of an ASCII one, as *ds..*de */
static void strip_desc(const char **ds, const char **de) {
    const char *s = skip_ws(*ds, *de), *e = *de;
    while (e > s && is_ws(e[-1])) e--;
    while (e > s && e[-1] == ':') e--;
    while (e > s && is_ws(e[-1])) e--;
    *ds = s, *de = e;
}

/* fnum of the number `_EPOCH_RE` (`[Ee]poch\s*\[?\s*(\d+)`) finds in the description, Py_None
 * without one, NULL with an error; *unsure for a number too long to convert here. New ref. */
static PyObject *desc_epoch(const char *s, const char *e, int *unsure) {
    for (const char *p = s; p + 5 <= e; p++) {
        if ((*p != 'E' && *p != 'e') || memcmp(p + 1, "poch", 4) != 0) continue;
        const char *q = skip_ws(p + 5, e);
        if (q < e && *q == '[') q = skip_ws(q + 1, e);
        const char *d = digits(q, e);
        if (d == q) continue;
        if (d - q > MAX_COUNT_DIGITS) return *unsure = 1, NULL;
        long long v = 0;
        for (; q < d; q++) v = v * 10 + (*q - '0');
        return PyFloat_FromDouble((double)v);
    }
    return Py_NewRef(Py_None);
}

/* The (raw name, value) postfix tuple (NUMBERs that to_float takes), as read_bar builds it. New ref. */
static PyObject *postfix_tuple(scan *sc, const bar_pair *prs, int n) {
    PyObject *items = PyList_New(0), *t = NULL;
    if (!items) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = to_float(prs[i].vs, prs[i].ve, sc->float_fb), *k = NULL, *pair = NULL;
        if (v && v != Py_None && (k = key_str(sc, prs[i].ks, prs[i].ke))) pair = PyTuple_Pack(2, k, v);
        int failed = !v || (v != Py_None && (!pair || PyList_Append(items, pair)));
        Py_XDECREF(v), Py_XDECREF(k), Py_XDECREF(pair);
        if (failed) goto done;
    }
    t = PyList_AsTuple(items);
done:
    Py_DECREF(items);
    return t;
}

/* One Metric a postfix value, named by BarMetrics' NameTable, running until the bar's total. */
static int append_bar_value(scan *sc, PyObject *pair, PyObject *step, PyObject *epoch, PyObject *line, int done) {
    PyObject *hit = PyObject_CallOneArg(sc->bar_names, PyTuple_GET_ITEM(pair, 0));
    if (!hit) return -1;
    int r = -1;
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2)
        PyErr_SetString(PyExc_TypeError, "BarMetrics names must be (name, phase)");
    else
        r = append_tailed(sc, done ? sc->mtail : sc->running_tail, PyTuple_GET_ITEM(hit, 0), PyTuple_GET_ITEM(hit, 1),
                          PyTuple_GET_ITEM(pair, 1), step, epoch, line);
    Py_DECREF(hit);
    return r;
}

/* BarMetrics.read once read_bar read `b`: its postfix values when they changed since the last
 * state of its description, or it reached its total. DONE, PYTHON (unsure: nothing changed), ERR. */
static int emit_bar(scan *sc, const bar_line *b, const bar_pair *prs, int np, Py_ssize_t number) {
    const char *ds = b->ds, *de = b->de;
    if (b->ne - b->ns > MAX_COUNT_DIGITS || (b->ts && b->te - b->ts > MAX_COUNT_DIGITS)) return PYTHON;
    if (any_wide(ds, de)) /* Python strips it and reads its epoch (int() may fail on a long one) */
        return np || memmem(ds, (size_t)(de - ds), "poch", 4) ? PYTHON : DONE;
    strip_desc(&ds, &de);
    int unsure = 0, rc = ERR;
    PyObject *epoch = desc_epoch(ds, de, &unsure), *postfix = NULL, *desc = NULL, *key = NULL, *step = NULL;
    PyObject *line = NULL, *total = NULL;
    if (!epoch) return unsure ? PYTHON : ERR;
    if (!np || !(postfix = postfix_tuple(sc, prs, np)) || !PyTuple_GET_SIZE(postfix)) {
        rc = np && !postfix ? ERR : DONE; /* no postfix: no record, and BarMetrics' state untouched */
        goto out;
    }
    if (!(step = digits_int(b->ns, b->ne))) goto out;
    if (b->ts && !(total = digits_int(b->ts, b->te))) goto out;
    int done = total ? PyObject_RichCompareBool(step, total, Py_GE) : 0;
    if (done < 0 || !(desc = PyUnicode_FromStringAndSize(ds, de - ds))
        || !(key = PyTuple_Pack(2, postfix, done ? Py_True : Py_False)))
        goto out;
    PyObject *last = PyDict_GetItemWithError(sc->bar_states, desc); /* borrowed */
    int same = last ? PyObject_RichCompareBool(last, key, Py_EQ) : (PyErr_Occurred() ? -1 : 0);
    if (same) {
        rc = same < 0 ? ERR : DONE;
        goto out;
    }
    if (PyDict_SetItem(sc->bar_states, desc, key) || !(line = PyLong_FromSsize_t(number))) goto out;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(postfix); i++)
        if (append_bar_value(sc, PyTuple_GET_ITEM(postfix, i), step, epoch, line, done)) goto out;
    rc = DONE;
out:
    Py_XDECREF(epoch), Py_XDECREF(postfix), Py_XDECREF(desc), Py_XDECREF(key), Py_XDECREF(step);
    Py_XDECREF(line), Py_XDECREF(total);
    return rc;
}

/* GenericParser.parse_line's first reader (a line markers() gave M_BAR: may_be_bar holds): read_bar's
 * forms in its order, then BarMetrics.read. DONE, PYTHON, NOT_MINE (an ASCII line that is no bar), ERR. */
static int read_bar_line(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    bar_line b = {0};
    bar_pair prs[MAX_BAR_PAIRS];
    int r = tqdm_pct(ls, e, &b);
    if (r == BAR_NO && may_be_count_form(ls, e)) r = BAR_UNSURE; /* tqdm's form without a percentage */
    if (r == BAR_NO && memmem(ls, (size_t)(e - ls), "\xE2\x80\xA2", 3)) r = rich_form(ls, e, &b); /* a "•" */
    if (r == BAR_NO && any_wide(ls, e)) r = BAR_UNSURE;          /* Keras 3, Unicode classes */
    if (r == BAR_NO) r = keras_form(ls, e, &b);
    if (r == BAR_NO) return NOT_MINE;
    if (r == BAR_UNSURE) return PYTHON;
    int np = b.form == FORM_KERAS ? keras_pairs(&b, prs) : b.form == FORM_RICH ? rich_pairs(&b, prs) : tqdm_pairs(&b, prs);
    return np < 0 ? PYTHON : emit_bar(sc, &b, prs, np, number);
}

#endif
