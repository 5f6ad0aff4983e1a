/* The generic C loop's readers of JSON records (generic.py `GenericParser._json`) and of Katib's
 * `{metricName: X, metricValue: N}` records (the `_KATIB_RE` branch of `GenericParser.parse_line`):
 * included by _generic_scan.c, after its pairs (`holds_any`) and before `scan_line`.
 *
 * The JSON reader is a strict, exact reader of what json.loads accepts for the objects logs print;
 * it validates the whole line first (json.loads fails -> the line gives nothing) and builds no
 * Python object until it knows the record is its own. What it cannot be sure to match exactly
 * goes to the parser's Python `line` (PYTHON): an escape in a top-level key or in a top-level
 * string value that is not a time, a duplicate top-level key (a dict keeps the first position and
 * the last value), an integer of more than JSON_INT_DIGITS digits (float() of a huge int, and
 * CPython's limit on int digits), nesting deeper than JSON_MAX_DEPTH (Python's recursion limit),
 * more than JSON_MAX_KEYS keys. Non-ASCII lines never reach it (markers: M_PYTHON). */
#ifndef TRAINVISOR_GENERIC_JSON_H
#define TRAINVISOR_GENERIC_JSON_H

#define JSON_MAX_KEYS 256  /* top-level keys of one record read here */
#define JSON_MAX_DEPTH 64  /* nested lists and objects read here */
#define JSON_MAX_LIST 64   /* generic.py _MAX_LIST */
#define JSON_INT_DIGITS 18 /* below 2^63: (double) of a long long is float() of the int */

/* What a JSON value is, as `_json` tells them apart by their Python type. */
enum { J_FLOAT, J_INT, J_NAN, J_INF, J_NINF, J_STR, J_LIST, J_OTHER /* true, false, null, an object */ };

typedef struct {
    const char *ks, *ke; /* the key's text, quotes excluded */
    const char *vs, *ve; /* the value's text (a string's without its quotes, a list's with its brackets) */
    int kind, escaped;   /* escaped: the key or the string value holds a backslash escape */
} json_entry;

typedef struct {
    const char *e; /* the end of the record */
    int depth;
    int python; /* set when the record must go to Python (see above); the readers then return NULL */
} json_reader;

static const char *const TIME_KEYS[] = {"timestamp", "time", "wall_time", NULL};
static const char *const PHASE_KEYS[] = {"mode", "phase", "split", NULL};
static const char *const VAL_PHASES[] = {"val", "eval", "valid", "validation", "test", NULL};

static PyObject *S_train; /* events.PHASE_TRAIN, made on first use */

/* ---- the JSON grammar, as the json module's C scanner reads it (strict) ---- */

static const char *json_ws(const char *p, const char *e) { /* JSON whitespace only */
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* A string at p (its opening quote): the position after its closing quote, or NULL when invalid (a
 * control character, a bad escape, no end). *escaped: it holds an escape. */
static const char *json_string(const json_reader *jr, const char *p, int *escaped) {
    for (p++; p < jr->e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c != '\\') continue;
        *escaped = 1;
        if (++p >= jr->e) return NULL;
        if (*p == 'u') {
            if (jr->e - p < 5 || !is_hex(p[1]) || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4])) return NULL;
            p += 4;
        } else if (!memchr("\"\\/bfnrt", *p, 8)) {
            return NULL;
        }
    }
    return NULL;
}

/* -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)? at p: its end, or NULL; *kind J_INT or J_FLOAT (json's
 * _match_number). A longer int is Python's (jr->python). What follows is the caller's to check. */
static const char *json_number(json_reader *jr, const char *p, int *kind) {
    const char *e = jr->e, *d;
    if (p < e && *p == '-') p++;
    if (p >= e || !is_digit(*p)) return NULL;
    d = *p == '0' ? p + 1 : digits(p, e);
    *kind = d - p > JSON_INT_DIGITS ? -1 : J_INT; /* -1: a long int, unless a fraction or exponent follows */
    if (d + 1 < e && *d == '.' && is_digit(d[1])) d = digits(d + 1, e), *kind = J_FLOAT;
    if (d < e && (*d == 'e' || *d == 'E')) {
        const char *x = d + 1;
        if (x < e && (*x == '+' || *x == '-')) x++;
        if (x < e && is_digit(*x)) d = digits(x, e), *kind = J_FLOAT;
    }
    if (*kind < 0) return jr->python = 1, NULL;
    return d;
}

static const char *json_value(json_reader *jr, const char *p, int *kind, int *escaped);

/* A list or an object at p (its opening bracket), its items (and keys) read and dropped: the position
 * after it, or NULL. *count: its items. */
static const char *json_container(json_reader *jr, const char *p, int *count) {
    const char *e = jr->e;
    char close = *p == '[' ? ']' : '}';
    int kind, escaped = 0;
    *count = 0;
    if (++jr->depth > JSON_MAX_DEPTH) return jr->python = 1, NULL;
    p = json_ws(p + 1, e);
    if (p < e && *p == close) return jr->depth--, p + 1;
    for (;;) {
        if (close == '}') {
            if (p >= e || *p != '"' || !(p = json_string(jr, p, &escaped))) return NULL;
            p = json_ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = json_ws(p + 1, e);
        }
        if (!(p = json_value(jr, p, &kind, &escaped))) return NULL;
        ++*count;
        p = json_ws(p, e);
        if (p < e && *p == close) return jr->depth--, p + 1;
        if (p >= e || *p != ',') return NULL;
        p = json_ws(p + 1, e);
    }
}

/* One value at p: its end, or NULL (invalid, or jr->python); *kind as `_json` tells it apart. */
static const char *json_value(json_reader *jr, const char *p, int *kind, int *escaped) {
    const char *e = jr->e, *q;
    int count;
    if (p >= e) return NULL;
    switch (*p) {
    case '"': *kind = J_STR; return json_string(jr, p, escaped);
    case '[': *kind = J_LIST; return json_container(jr, p, &count);
    case '{': *kind = J_OTHER; return json_container(jr, p, &count);
    case 'n': *kind = J_OTHER; return lit(p, e, "null");
    case 't': *kind = J_OTHER; return lit(p, e, "true");
    case 'f': *kind = J_OTHER; return lit(p, e, "false");
    case 'N': *kind = J_NAN; return lit(p, e, "NaN");
    case 'I': *kind = J_INF; return lit(p, e, "Infinity");
    default:
        if (*p == '-' && (q = lit(p, e, "-Infinity"))) return *kind = J_NINF, q;
        return json_number(jr, p, kind); /* also a negative number */
    }
}

/* The record a..z (stripped, `{` to `}`): its top-level entries into ent, their number; -1 when
 * json.loads fails on it, -2 when it is Python's (see the top of this file). */
static int json_record(const char *a, const char *z, json_entry *ent) {
    json_reader jr = {z, 1, 0};
    const char *p = json_ws(a + 1, z);
    int n = 0;
    if (p < z && *p == '}') return p + 1 == z ? 0 : -1;
    for (;;) {
        if (n == JSON_MAX_KEYS) return -2;
        json_entry *t = &ent[n++];
        t->escaped = 0;
        t->ks = p + 1;
        if (p >= z || *p != '"' || !(p = json_string(&jr, p, &t->escaped))) return -1;
        t->ke = p - 1;
        p = json_ws(p, z);
        if (p >= z || *p != ':') return -1;
        p = json_ws(p + 1, z);
        t->vs = p;
        if (!(p = json_value(&jr, p, &t->kind, &t->escaped))) return jr.python ? -2 : -1;
        t->ve = p;
        p = json_ws(p, z);
        if (p < z && *p == '}') return p + 1 == z ? n : -1;
        if (p >= z || *p != ',') return -1;
        p = json_ws(p + 1, z);
    }
}

/* ---- the values of a record, as `_json` reads them ---- */

static int entry_key_is(const json_entry *t, const char *const *words) { return key_is(t->ks, t->ke, words); }

/* _NUMBER_TEXT.fullmatch of a string's text: 1 with the number's own text in *ns..*ne, else 0. */
static int number_text(const char *s, const char *e, const char **ns, const char **ne) {
    const char *a = skip_ws(s, e), *p = a, *v;
    if (p < e && (*p == '+' || *p == '-')) p++;
    if (!(v = alt_windows(p, e)) || skip_ws(v, e) != e)
        if (!(v = alt_decimal(p, e)) || skip_ws(v, e) != e)
            if (!(v = alt_word(p, e)) || skip_ws(v, e) != e) return 0;
    *ns = a, *ne = v;
    return 1;
}

/* The float of a number (an int as float() gives it): a new ref; Py_None (new) for a string that is
 * no number (`_NUMBER_TEXT`); NULL with an error set. */
static PyObject *json_float(scan *sc, int kind, const char *s, const char *e) {
    const char *ns, *ne;
    switch (kind) {
    case J_FLOAT: return to_float(s, e, sc->float_fb);
    case J_NAN: return PyFloat_FromDouble(Py_NAN);
    case J_INF: return PyFloat_FromDouble(Py_HUGE_VAL);
    case J_NINF: return PyFloat_FromDouble(-Py_HUGE_VAL);
    case J_INT: {
        int neg = *s == '-';
        long long v = 0;
        for (s += neg; s < e; s++) v = v * 10 + (*s - '0');
        return PyFloat_FromDouble((double)(neg ? -v : v));
    }
    case J_STR: return number_text(s, e, &ns, &ne) ? to_float(ns, ne, sc->float_fb) : Py_NewRef(Py_None);
    default: return Py_NewRef(Py_None);
    }
}

static int is_number_kind(int kind) { return kind <= J_NINF; }

/* The record's step, epoch and phase (`_json`'s loop, for its index and phase keys): *step and *epoch
 * new refs or NULL, *phase borrowed or NULL. 0, or -1 with an error set. */
static int json_position(scan *sc, const json_entry *ent, int n, PyObject **step, PyObject **epoch,
                         PyObject **phase) {
    for (int i = 0; i < n; i++) {
        const json_entry *t = &ent[i];
        if (t->kind == J_STR && entry_key_is(t, PHASE_KEYS)) {
            *phase = key_is(t->vs + 1, t->ve - 1, VAL_PHASES) ? S_val : S_train;
            continue;
        }
        int iter = entry_key_is(t, ITER_KEYS);
        if ((!iter && !entry_key_is(t, EPOCH_KEYS)) || !(is_number_kind(t->kind) || t->kind == J_STR)) continue;
        PyObject *f = json_float(sc, t->kind, t->vs + (t->kind == J_STR), t->ve - (t->kind == J_STR));
        if (!f) return -1;
        if (f == Py_None && t->kind == J_STR) { /* no number: the key is skipped */
            Py_DECREF(f);
            continue;
        }
        if (!iter) {
            Py_XSETREF(*epoch, f);
            continue;
        }
        double d = f == Py_None ? NAN : PyFloat_AsDouble(f);
        Py_DECREF(f);
        Py_XSETREF(*step, isfinite(d) ? PyLong_FromDouble(d) : NULL);
        if (isfinite(d) && !*step) return -1;
    }
    return 0;
}

/* One metric of the record: `key` (a new ref, taken) and its float (taken; Py_None appends nothing). */
static int json_metric(scan *sc, PyObject *key, PyObject *v, PyObject *phase, PyObject *st, PyObject *ep,
                       PyObject *line) {
    int r = (key && v) ? 0 : -1;
    if (!r && v != Py_None) r = append_metric_in(sc, key, v, phase, st, ep, line);
    Py_XDECREF(key);
    Py_XDECREF(v);
    return r;
}

/* A list of at most JSON_MAX_LIST: `key/i` for its int and float items (not bools), in order. */
static int json_list_metrics(scan *sc, const json_entry *t, PyObject *phase, PyObject *st, PyObject *ep,
                             PyObject *line) {
    json_reader jr = {t->ve, 0, 0};
    int count, kind, escaped = 0;
    json_container(&jr, t->vs, &count);
    if (count > JSON_MAX_LIST) return 0;
    size_t kn = (size_t)(t->ke - t->ks);
    char *buf = PyMem_Malloc(kn + 8);
    if (!buf) return PyErr_NoMemory(), -1;
    memcpy(buf, t->ks, kn);
    buf[kn] = '/';
    const char *p = json_ws(t->vs + 1, t->ve);
    for (int i = 0; i < count; i++) {
        const char *s = p;
        p = json_value(&jr, p, &kind, &escaped);
        if (is_number_kind(kind)) {
            size_t n = kn + 1 + (size_t)snprintf(buf + kn + 1, 7, "%d", i);
            if (json_metric(sc, key_str(sc, buf, buf + n), json_float(sc, kind, s, p), phase, st, ep, line))
                return PyMem_Free(buf), -1;
        }
        p = json_ws(json_ws(p, t->ve) + 1, t->ve); /* past the comma */
    }
    PyMem_Free(buf);
    return 0;
}

/* The metrics of the record's entries, in its order (`_json`'s items, then `_emit`). */
static int json_metrics(scan *sc, const json_entry *ent, int n, PyObject *phase, PyObject *st, PyObject *ep,
                        Py_ssize_t number) {
    PyObject *line = PyLong_FromSsize_t(number);
    if (!line) return -1;
    for (int i = 0; i < n; i++) {
        const json_entry *t = &ent[i];
        int r = 0;
        if (entry_key_is(t, TIME_KEYS)) continue;
        if (t->kind == J_LIST) {
            r = json_list_metrics(sc, t, phase, st, ep, line);
        } else if (is_number_kind(t->kind) || (t->kind == J_STR && !entry_key_is(t, PHASE_KEYS))) {
            if (entry_key_is(t, ITER_KEYS) || entry_key_is(t, EPOCH_KEYS)) continue;
            int q = t->kind == J_STR;
            r = json_metric(sc, key_str(sc, t->ks, t->ke), json_float(sc, t->kind, t->vs + q, t->ve - q), phase, st,
                            ep, line);
        }
        if (r) return Py_DECREF(line), -1;
    }
    Py_DECREF(line);
    return 0;
}

/* Python's part of a record read here: an escape where its text is read, a key given twice. */
static int json_is_pythons(const json_entry *ent, int n) {
    for (int i = 0; i < n; i++) {
        const json_entry *t = &ent[i];
        if (t->escaped && !entry_key_is(t, TIME_KEYS)) return 1; /* a time's value is never read */
        for (int j = 0; j < i; j++)
            if (ent[j].ke - ent[j].ks == t->ke - t->ks && memcmp(ent[j].ks, t->ks, (size_t)(t->ke - t->ks)) == 0)
                return 1;
    }
    return 0;
}

/* A line that strips to `{...}` with a quote (M_JSON): GenericParser._json. */
static int read_json_line(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    json_entry ent[JSON_MAX_KEYS];
    const char *a = skip_ws(ls, e), *z = e;
    while (z > a && is_ws(z[-1])) z--;
    int n = json_record(a, z, ent);
    if (n == -1) return DONE; /* json.loads fails: nothing, and no pairs */
    if (n == -2 || json_is_pythons(ent, n)) return PYTHON;
    if (!S_train && !(S_train = PyUnicode_InternFromString("train"))) return ERR;
    PyObject *step = NULL, *epoch = NULL, *phase = NULL;
    int rc = ERR;
    if (json_position(sc, ent, n, &step, &epoch, &phase)) goto done;
    PyObject *st = step ? step : sc->sticky_step, *ep = epoch ? epoch : sc->sticky_epoch;
    if (st != Py_None) set_ref(&sc->step, st);
    if (ep != Py_None) set_ref(&sc->epoch, ep);
    if (!json_metrics(sc, ent, n, phase, st, ep, number)) rc = DONE;
done:
    Py_XDECREF(step);
    Py_XDECREF(epoch);
    return rc;
}

/* ---- Katib's records ---- */

static int is_katib_name(char c) { return is_w(c) || c == '|' || c == '-'; }
static int then_brace(const char *v, const char *e) { return v < e && *v == '}'; }

/* _KATIB_RE at p (a `{`): 1 with the name in *ks..*ke and the number in *vs..*ve, else 0. NUMBER then
 * `}`: each alternative has one end (greedy), and the first one a `}` follows is the match. */
static int katib_at(const char *p, const char *e, const char **ks, const char **ke, const char **vs,
                    const char **ve) {
    if (!(*ks = lit(p, e, "{metricName: ")) || !(*ke = run(*ks, e, is_katib_name))
        || !(*vs = lit(*ke, e, ", metricValue: ")))
        return 0;
    return (*ve = number_then(*vs, e, then_brace)) != NULL;
}

/* A line holding `metricName` (M_KATIB): its `_KATIB_RE.findall` records, then `_record` (started:
 * `_emit` at the sticky position). None found: the pairs' line. A held name: Python's (its series). */
static int read_katib_line(scan *sc, const char *ls, const char *e, Py_ssize_t number) {
    PyObject *keys[MAX_PAIRS], *vals[MAX_PAIRS], *line = NULL;
    const char *ks, *ke, *vs, *ve;
    int n = 0, rc = ERR;
    for (const char *p = ls; (p = memchr(p, '{', (size_t)(e - p))); p++) {
        if (!katib_at(p, e, &ks, &ke, &vs, &ve)) continue;
        if (n == MAX_PAIRS) {
            rc = PYTHON;
            goto done;
        }
        if (!(keys[n] = key_str(sc, ks, ke))) goto done;
        if (!(vals[n] = to_float(vs, ve, sc->float_fb))) {
            Py_DECREF(keys[n]);
            goto done;
        }
        n++;
        p = ve;
    }
    if (n == 0) return NOT_MINE;
    if ((rc = holds_any(sc, keys, n))) goto done; /* PYTHON, or ERR */
    rc = ERR;
    if (sc->sticky_step != Py_None) set_ref(&sc->step, sc->sticky_step);
    if (sc->sticky_epoch != Py_None) set_ref(&sc->epoch, sc->sticky_epoch);
    if (!(line = PyLong_FromSsize_t(number))) goto done;
    for (int i = 0; i < n; i++)
        if (append_metric(sc, keys[i], vals[i], sc->sticky_step, sc->sticky_epoch, line)) goto done;
    rc = DONE;
done:
    for (int i = 0; i < n; i++) Py_DECREF(keys[i]), Py_DECREF(vals[i]);
    Py_XDECREF(line);
    return rc;
}

#endif
