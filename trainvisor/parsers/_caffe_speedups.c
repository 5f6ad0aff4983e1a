/* Optional C implementation of CaffeParser.feed's per-line loop.
 *
 * It implements exactly the grammar of _LINE_RE in caffe.py (see the comments
 * there) and the per-match logic of CaffeParser._feed_python, for blocks that
 * are pure ASCII; anything else stays on the Python path. tests/test_caffe_speedups.py
 * checks that both give identical events on every log the project can read.
 * Built at install time when a compiler is there (setup.py, optional=True).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <math.h>

static PyObject *S_train, *S_test, *S_total_loss, *S_lr, *S_iter_per_sec, *S_checkpoint;

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_value_char(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c == 'n' ||
           c == 'a' || c == 'i' || c == 'f' || c == 'N' || c == 'A' || c == 'I' || c == 'F' || c == '#' ||
           c == 'Q' || c == 'D';
}
/* Python's \s for str patterns, restricted to ASCII. */
static int is_py_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || (c >= 0x1c && c <= 0x1f);
}
static int is_word(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int starts(const char *p, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

typedef struct { const char *s, *e; } span;

/* V = [-+0-9.eEnaifNAIF#QD]+ at p; returns end or NULL. */
static const char *match_value(const char *p, const char *end) {
    const char *q = p;
    while (q < end && is_value_char(*q)) q++;
    return q > p ? q : NULL;
}

/* " (?:loss = V|lr = V|Testing net \(#(\d+)\))" at p. kind: 1 loss, 2 lr, 3 testing */
static int match_iter_rest(const char *p, const char *end, int *kind, span *val) {
    const char *q;
    if (p >= end || *p != ' ') return 0;
    p++;
    if (starts(p, end, "loss = ")) {
        q = match_value(p + 7, end);
        if (!q) return 0;
        *kind = 1; val->s = p + 7; val->e = q; return 1;
    }
    if (starts(p, end, "lr = ")) {
        q = match_value(p + 5, end);
        if (!q) return 0;
        *kind = 2; val->s = p + 5; val->e = q; return 1;
    }
    if (starts(p, end, "Testing net (#")) {
        q = p + 14;
        while (q < end && is_digit(*q)) q++;
        if (q == p + 14 || q >= end || *q != ')') return 0;
        *kind = 3; val->s = p + 14; val->e = q; return 1;
    }
    return 0;
}


/* ---- floats: exact fast paths for text -> double and double -> repr() text ----
 *
 * Both rest on one fact: an integer m < 2^53 and a power of ten 10^p with p <= 22 are exact
 * doubles, so m * 10^p and m / 10^p are single IEEE operations, correctly rounded (Clinger's
 * fast path). Anything outside it takes CPython's own routines, so results are always
 * identical to float(text) and repr(x); tests/test_caffe_speedups.py checks both with
 * hypothesis. */
static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* float(text) for plain decimals with at most 15 significant digits; 0 done, -1 not handled */
static int fast_text_to_double(const char *s, const char *e, double *out) {
    int neg = 0, digits = 0, exp10 = 0, seen = 0;
    unsigned long long m = 0;
    if (s < e && (*s == '-' || *s == '+')) { neg = *s == '-'; s++; }
    while (s < e && *s == '0') { s++; seen = 1; }            /* leading zeros: not significant */
    for (; s < e && *s >= '0' && *s <= '9'; s++, seen = 1) {
        if (++digits > 15) return -1;
        m = m * 10 + (unsigned)(*s - '0');
    }
    if (s < e && *s == '.') {
        s++;
        for (; s < e && *s >= '0' && *s <= '9'; s++, seen = 1) {
            if (m == 0 && *s == '0') { exp10--; continue; }    /* 0.000x: zeros after the point */
            if (++digits > 15) return -1;
            m = m * 10 + (unsigned)(*s - '0');
            exp10--;
        }
    }
    if (!seen) return -1;
    if (s < e && (*s == 'e' || *s == 'E')) {
        int eneg = 0, ev = 0, ed = 0;
        s++;
        if (s < e && (*s == '-' || *s == '+')) { eneg = *s == '-'; s++; }
        for (; s < e && *s >= '0' && *s <= '9'; s++) { if (++ed > 4) return -1; ev = ev * 10 + (*s - '0'); }
        if (!ed) return -1;
        exp10 += eneg ? -ev : ev;
    }
    if (s != e) return -1;
    double d = (double)m;
    if (m == 0) d = 0.0;
    else if (exp10 < 0) { if (exp10 < -22) return -1; d /= POW10[-exp10]; }
    else { if (exp10 > 22) return -1; d *= POW10[exp10]; }
    *out = neg ? -d : d;
    return 0;
}

static int put_uint(char *out, unsigned long long v) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

/* repr(x) into out (>= 32 bytes) for whole numbers below 1e15 and for values in [1e-22, 1e15)
 * whose shortest round-trip form has at most 15 significant digits (below 1e-4 in repr's
 * exponent form): the smallest number p of
 * decimals for which exactly one integer m near x * 10^p gives back x as m / 10^p.
 * Returns the length, or -1 when x needs CPython's general algorithm. */
static int fast_double_repr(double x, char *out) {
    double a = fabs(x);
    int n = 0;
    if (!(a < 1e15) || (a == 0.0 && signbit(x))) return -1;     /* also NaN and inf */
    if (x < 0) out[n++] = '-';
    if (a == floor(a)) {
        n += put_uint(out + n, (unsigned long long)a);
        out[n++] = '.'; out[n++] = '0';
        return n;
    }
    int sci = a < 1e-4;                                             /* repr uses an exponent */
    if (sci && a < 1e-22) return -1;
    for (int p = 1; p <= (sci ? 22 + 15 : 17) && p <= 22; p++) {
        double scaled = a * POW10[p];
        if (scaled >= 4503599627370496.0) return -1;               /* m +- 1 must stay exact */
        double m0 = nearbyint(scaled), found = -1.0;
        int hits = 0;
        for (int k = -1; k <= 1; k++) {
            double m = m0 + k;
            if (m > 0 && m / POW10[p] == a) { hits++; found = m; }
        }
        if (hits > 1) return -1;                                    /* two candidates: let dtoa pick */
        if (hits == 0) continue;
        char digits[24];
        int nd = put_uint(digits, (unsigned long long)found);
        if (sci) {                                                  /* d[.ddd]e-XX */
            int e10 = nd - 1 - p;
            out[n++] = digits[0];
            if (nd > 1) { out[n++] = '.'; memcpy(out + n, digits + 1, (size_t)(nd - 1)); n += nd - 1; }
            out[n++] = 'e'; out[n++] = '-';
            e10 = -e10;
            if (e10 < 10) out[n++] = '0';
            n += put_uint(out + n, (unsigned long long)e10);
            return n;
        }
        if (nd <= p) {
            out[n++] = '0'; out[n++] = '.';
            for (int i = nd; i < p; i++) out[n++] = '0';
            memcpy(out + n, digits, (size_t)nd); n += nd;
        } else {
            memcpy(out + n, digits, (size_t)(nd - p)); n += nd - p;
            out[n++] = '.';
            memcpy(out + n, digits + nd - p, (size_t)p); n += p;
        }
        return n;
    }
    return -1;
}

/* repr(x) appended through `put`: the fast path, else CPython's dtoa */
static char *double_repr_alloc(double x, char *buf, int *len) {
    int n = fast_double_repr(x, buf);
    if (n >= 0) { buf[n] = 0; *len = n; return buf; }
    char *r = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (r) *len = (int)strlen(r);
    return r;
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

static PyObject *py_text_to_float(PyObject *self, PyObject *arg) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) return NULL;
    double d;
    if (fast_text_to_double(s, s + n, &d) == 0) return PyFloat_FromDouble(d);
    Py_RETURN_NONE;
}

/* Convert like float(); on failure call the Python fallback (_float). Returns new ref, or Py_None ref, or NULL on error. */
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
    {
        PyObject *s = PyUnicode_FromStringAndSize(v.s, (Py_ssize_t)n);
        PyObject *r;
        if (!s) return NULL;
        r = PyObject_CallOneArg(fallback, s);
        Py_DECREF(s);
        return r;
    }
}

static PyObject *int_from_span(span d) {
    char buf[32];
    size_t n = (size_t)(d.e - d.s);
    if (n < 19) {
        long long v = 0;
        for (const char *c = d.s; c < d.e; c++) v = v * 10 + (*c - '0');
        return PyLong_FromLongLong(v);
    }
    {
        PyObject *s = PyUnicode_FromStringAndSize(d.s, (Py_ssize_t)n);
        PyObject *r;
        if (!s) return NULL;
        r = PyLong_FromUnicodeObject(s, 10);
        Py_DECREF(s);
        (void)buf;
        return r;
    }
}

/* iteration / ipe, or None */
static PyObject *epoch_of(PyObject *iteration, PyObject *ipe) {
    if (ipe == Py_None || iteration == Py_None || !PyObject_IsTrue(ipe)) Py_RETURN_NONE;
    return PyNumber_TrueDivide(iteration, ipe);
}

static int append_metric(PyObject *out, PyObject *mtype, PyObject *name, PyObject *value, PyObject *iteration,
                         PyObject *phase, PyObject *test_net, PyObject *seconds, PyObject *epoch, PyObject *wall,
                         PyObject *line) {
    /* What tuple.__new__(Metric, (...)) does, without the intermediate tuple. */
    PyObject *items[9] = {name, value, iteration, phase, test_net, seconds, epoch, wall, line};
    PyObject *m = ((PyTypeObject *)mtype)->tp_alloc((PyTypeObject *)mtype, 9);
    int r;
    if (!m) return -1;
    for (int i = 0; i < 9; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(m, i, items[i]);
    }
    r = PyList_Append(out, m);
    Py_DECREF(m);
    return r;
}

/* parse_block(text, first_line, wall, ipe, cache, base_fn, state, metric_type, float_fallback, int_fallback)
 * state: list [start_us|None, iteration|None, test_iteration|None, test_net|None], updated in place.
 * Returns (events, n_checkpoints): Metric objects and ("checkpoint", path, is_state, line, iteration)
 * tuples in line order, or NotImplemented for a block that is not pure ASCII. */
static PyObject *parse_block(PyObject *self, PyObject *args) {
    PyObject *text, *wall, *ipe, *cache, *base_fn, *state, *mtype, *ffb, *ifb;
    Py_ssize_t first_line;
    if (!PyArg_ParseTuple(args, "UnOOO!OO!OOO", &text, &first_line, &wall, &ipe, &PyDict_Type, &cache, &base_fn,
                          &PyList_Type, &state, &mtype, &ffb, &ifb))
        return NULL;
    if (!PyUnicode_IS_ASCII(text) || PyList_GET_SIZE(state) != 4) Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t len;
    const char *buf = PyUnicode_AsUTF8AndSize(text, &len);
    if (!buf) return NULL;
    const char *end = buf + len;
    PyObject *out = PyList_New(0);
    Py_ssize_t n_checkpoints = 0;
    if (!out) return NULL;
    PyObject *start_t = PyList_GET_ITEM(state, 0); Py_INCREF(start_t);
    PyObject *iteration = PyList_GET_ITEM(state, 1); Py_INCREF(iteration);
    PyObject *test_iteration = PyList_GET_ITEM(state, 2); Py_INCREF(test_iteration);
    PyObject *test_net = PyList_GET_ITEM(state, 3); Py_INCREF(test_net);
    long long start_us = 0;
    int have_start = start_t != Py_None;
    if (have_start) { start_us = PyLong_AsLongLong(start_t); if (PyErr_Occurred()) goto error; }
    Py_ssize_t line_no = first_line - 1;
    const char *ln = buf;
    char prev_date[13];
    PyObject *prev_base = NULL;
    while (ln < end) {
        const char *eol = memchr(ln, '\n', (size_t)(end - ln));
        if (!eol) eol = end;
        line_no++;
        const char *p = ln;
        ln = eol + 1;
        /* [IWEF](.{4} .{8})\.(.{6}) [^\]\n]*\] + */
        if (eol - p < 23) continue;
        if (!(*p == 'I' || *p == 'W' || *p == 'E' || *p == 'F')) continue;
        if (p[5] != ' ' || p[14] != '.' || p[21] != ' ') continue;
        span date = {p + 1, p + 14}, usec = {p + 15, p + 21};
        const char *q = p + 22;
        while (q < eol && *q != ']') q++;
        if (q >= eol || q + 1 >= eol || q[1] != ' ') continue;
        q++;
        while (q < eol && *q == ' ') q++;
        const char *msg = q;
        /* alternatives */
        int kind = 0; /* 1 loss 2 lr 3 testing 4 output 5 snapshot 6 solving */
        span it = {0, 0}, speed = {0, 0}, val = {0, 0}, name = {0, 0}, path = {0, 0};
        int is_train = 0, is_state = 0;
        if (starts(msg, eol, "Iteration ")) {
            const char *r = msg + 10, *s;
            it.s = r;
            while (r < eol && is_digit(*r)) r++;
            it.e = r;
            if (r > it.s) {
                /* optional " (X iter/s...)" */
                if (r + 1 < eol && r[0] == ' ' && r[1] == '(') {
                    s = r + 2;
                    while (s < eol && *s != ' ' && *s != ')') s++;
                    if (s > r + 2 && starts(s, eol, " iter/s")) {
                        const char *t = s + 7;
                        while (t < eol && *t != ')') t++;
                        if (t < eol) { speed.s = r + 2; speed.e = s; r = t + 1; }
                    }
                }
                if (r < eol && *r == ',') {
                    r++;
                    int k = 0;
                    span v;
                    /* optional " [^,\n=]*," first, then without it */
                    if (r < eol && *r == ' ') {
                        s = r + 1;
                        while (s < eol && *s != ',' && *s != '=') s++;
                        if (s < eol && *s == ',' && match_iter_rest(s + 1, eol, &k, &v)) { kind = k; val = v; }
                    }
                    if (!kind && match_iter_rest(r, eol, &k, &v)) { kind = k; val = v; }
                }
            }
        } else if (msg + 1 < eol && msg[0] == 'T' && (msg[1] == 'r' || msg[1] == 'e')) {
            const char *r = msg + 2, *s;
            while (r < eol && *r >= 'a' && *r <= 'z') r++;
            if (r > msg + 2 && starts(r, eol, " net output #")) {
                s = r + 13;
                r = s;
                while (r < eol && is_digit(*r)) r++;
                if (r > s && starts(r, eol, ": ")) {
                    r += 2;
                    name.s = r;
                    while (r < eol && !is_py_space(*r)) r++;
                    name.e = r;
                    if (name.e > name.s && starts(r, eol, " = ")) {
                        const char *v = match_value(r + 3, eol);
                        if (v) { val.s = r + 3; val.e = v; kind = 4; is_train = msg[1] == 'r'; }
                    }
                }
            }
        } else if (starts(msg, eol, "Snapshotting ")) {
            const char *r = msg + 13;
            if (starts(r, eol, "solver state ")) { r += 13; is_state = 1; }
            if (starts(r, eol, "to ")) {
                r += 3;
                if (starts(r, eol, "binary proto file")) { r += 17; if (r < eol && *r == ' ') r++; }
                else if (starts(r, eol, "HDF5 file")) { r += 9; if (r < eol && *r == ' ') r++; }
                const char *e = eol;
                while (e > r && e[-1] == ' ') e--;
                path.s = r; path.e = e; kind = 5;
            }
        } else if (starts(msg, eol, "Solving") && (msg + 7 >= eol || !is_word(msg[7]))) {
            kind = 6;
        }
        if (!kind) continue;

        /* time */
        PyObject *seconds = NULL, *tobj = NULL;
        int have_t = 0;
        long long t_us = 0;
        {
            PyObject *base;
            if (prev_base && memcmp(prev_date, date.s, 13) == 0) {
                /* Same second as the previous metric line: the cache lookup would give
                 * the same object (nothing can have cleared it in between). */
                base = prev_base;
                Py_INCREF(base);
            } else {
                PyObject *key = PyUnicode_FromStringAndSize(date.s, 13);
                if (!key) goto error;
                base = PyDict_GetItemWithError(cache, key);
                if (base) Py_INCREF(base);
                else if (PyErr_Occurred()) { Py_DECREF(key); goto error; }
                else { base = PyObject_CallOneArg(base_fn, key); if (!base) { Py_DECREF(key); goto error; } }
                Py_DECREF(key);
                Py_XDECREF(prev_base);
                prev_base = base;
                Py_INCREF(prev_base);
                memcpy(prev_date, date.s, 13);
            }
            if (base != Py_None) {
                int digits = 1;
                for (const char *c = usec.s; c < usec.e; c++) if (!is_digit(*c)) digits = 0;
                if (digits) {
                    long long u = 0;
                    for (const char *c = usec.s; c < usec.e; c++) u = u * 10 + (*c - '0');
                    t_us = PyLong_AsLongLong(base) + u;
                    if (PyErr_Occurred()) { Py_DECREF(base); goto error; }
                    have_t = 1;
                } else {
                    /* Python's int() accepts more (spaces, signs, underscores): ask it. */
                    PyObject *us = PyUnicode_FromStringAndSize(usec.s, 6);
                    PyObject *ui = us ? PyObject_CallOneArg(ifb, us) : NULL;
                    Py_XDECREF(us);
                    if (!ui) { Py_DECREF(base); goto error; }
                    if (ui != Py_None) {
                        t_us = PyLong_AsLongLong(base) + PyLong_AsLongLong(ui);
                        if (PyErr_Occurred()) { Py_DECREF(ui); Py_DECREF(base); goto error; }
                        have_t = 1;
                    }
                    Py_DECREF(ui);
                }
            }
            Py_DECREF(base);
        }
        if (!have_start) {
            if (have_t) {
                have_start = 1; start_us = t_us;
                Py_DECREF(start_t);
                start_t = PyLong_FromLongLong(t_us);
                if (!start_t) goto error;
                seconds = PyFloat_FromDouble(0.0);
            } else { seconds = Py_None; Py_INCREF(seconds); }
        } else if (have_t) {
            seconds = PyFloat_FromDouble((double)(t_us - start_us) / 1e6);
        } else { seconds = Py_None; Py_INCREF(seconds); }
        if (!seconds) goto error;
        (void)tobj;
        if (kind == 6) { Py_DECREF(seconds); continue; }

        PyObject *line_obj = PyLong_FromSsize_t(line_no);
        if (!line_obj) { Py_DECREF(seconds); goto error; }
        int rc = 0;
        if (kind <= 3) {
            PyObject *itv = int_from_span(it);
            if (!itv) { rc = -1; goto done; }
            Py_DECREF(iteration);
            iteration = itv;
            PyObject *epoch = epoch_of(iteration, ipe);
            if (!epoch) { rc = -1; goto done; }
            if (kind == 1) {
                if (speed.s) {
                    PyObject *sv = to_float(speed, ffb);
                    if (!sv) { Py_DECREF(epoch); rc = -1; goto done; }
                    if (sv != Py_None)
                        rc = append_metric(out, mtype, S_iter_per_sec, sv, iteration, S_train, Py_None, seconds, epoch, wall, line_obj);
                    Py_DECREF(sv);
                    if (rc) { Py_DECREF(epoch); goto done; }
                }
                PyObject *v = to_float(val, ffb);
                if (!v) { Py_DECREF(epoch); rc = -1; goto done; }
                if (v != Py_None)
                    rc = append_metric(out, mtype, S_total_loss, v, iteration, S_train, Py_None, seconds, epoch, wall, line_obj);
                Py_DECREF(v);
            } else if (kind == 2) {
                PyObject *v = to_float(val, ffb);
                if (!v) { Py_DECREF(epoch); rc = -1; goto done; }
                if (v != Py_None)
                    rc = append_metric(out, mtype, S_lr, v, iteration, S_train, Py_None, seconds, epoch, wall, line_obj);
                Py_DECREF(v);
            } else {
                PyObject *net = int_from_span(val);
                if (!net) { Py_DECREF(epoch); rc = -1; goto done; }
                Py_DECREF(test_iteration); test_iteration = iteration; Py_INCREF(test_iteration);
                Py_DECREF(test_net); test_net = net;
            }
            Py_DECREF(epoch);
        } else if (kind == 4) {
            PyObject *v = to_float(val, ffb);
            if (!v) { rc = -1; goto done; }
            if (v != Py_None) {
                PyObject *nm = PyUnicode_FromStringAndSize(name.s, name.e - name.s);
                if (!nm) { Py_DECREF(v); rc = -1; goto done; }
                PyObject *itv = is_train ? iteration : test_iteration;
                PyObject *epoch = epoch_of(itv, ipe);
                if (!epoch) { Py_DECREF(nm); Py_DECREF(v); rc = -1; goto done; }
                rc = append_metric(out, mtype, nm, v, itv, is_train ? S_train : S_test, is_train ? Py_None : test_net,
                                   seconds, epoch, wall, line_obj);
                Py_DECREF(epoch);
                Py_DECREF(nm);
            }
            Py_DECREF(v);
        } else {
            PyObject *ps = PyUnicode_FromStringAndSize(path.s, path.e - path.s);
            if (!ps) { rc = -1; goto done; }
            PyObject *tup = PyTuple_Pack(5, S_checkpoint, ps, is_state ? Py_True : Py_False, line_obj, iteration);
            Py_DECREF(ps);
            if (!tup) { rc = -1; goto done; }
            rc = PyList_Append(out, tup);
            Py_DECREF(tup);
            n_checkpoints++;
        }
    done:
        Py_DECREF(line_obj);
        Py_DECREF(seconds);
        if (rc) goto error;
    }
    Py_XDECREF(prev_base);
    prev_base = NULL;
    if (PyList_SetItem(state, 0, start_t) < 0) { start_t = NULL; goto error; }
    start_t = NULL;
    if (PyList_SetItem(state, 1, iteration) < 0) { iteration = NULL; goto error; }
    iteration = NULL;
    if (PyList_SetItem(state, 2, test_iteration) < 0) { test_iteration = NULL; goto error; }
    test_iteration = NULL;
    if (PyList_SetItem(state, 3, test_net) < 0) { test_net = NULL; goto error; }
    {
        PyObject *r = Py_BuildValue("(Nn)", out, n_checkpoints);
        return r;
    }
error:
    Py_XDECREF(prev_base);
    Py_XDECREF(start_t);
    Py_XDECREF(iteration);
    Py_XDECREF(test_iteration);
    Py_XDECREF(test_net);
    Py_DECREF(out);
    return NULL;
}

/* ---- JSON Lines formatting of Metric records (sinks/jsonl.py's _format_metric) ---- */

typedef struct { char *buf; size_t len, cap; } sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        char *nb = PyMem_Realloc(b->buf, cap);
        if (!nb) { PyErr_NoMemory(); return -1; }
        b->buf = nb; b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    return 0;
}
static int sb_str(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }

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

/* int or None; same conventions */
static int put_int(sbuf *b, PyObject *v) {
    char tmp[32];
    if (v == Py_None) return sb_str(b, "null");
    if (!PyLong_CheckExact(v)) return 1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 1; }
    snprintf(tmp, sizeof tmp, "%lld", x);
    return sb_str(b, tmp) ? -1 : 0;
}
static int put_cached(sbuf *b, PyObject *names, PyObject *key) {
    PyObject *q = PyDict_GetItemWithError(names, key);
    if (!q) return PyErr_Occurred() ? -1 : 1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(q, &n);
    if (!s) return -1;
    return sb_put(b, s, (size_t)n) ? -1 : 0;
}

/* format_metrics(events, metric_type, names, fallback) -> str */
static PyObject *format_metrics(PyObject *self, PyObject *args) {
    PyObject *events, *mtype, *names, *fallback;
    if (!PyArg_ParseTuple(args, "OOO!O", &events, &mtype, &PyDict_Type, &names, &fallback)) return NULL;
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
        if ((PyObject *)Py_TYPE(ev) == mtype && PyTuple_GET_SIZE(ev) == 9) {
            PyObject **f = &PyTuple_GET_ITEM(ev, 0);
            rc = 0;
            if (!rc) rc = sb_str(&b, "{\"name\": ") ? -1 : put_cached(&b, names, f[0]);
            if (!rc) rc = sb_str(&b, ", \"value\": ") ? -1 : put_number(&b, f[1]);
            if (!rc) rc = sb_str(&b, ", \"iteration\": ") ? -1 : put_int(&b, f[2]);
            if (!rc) rc = sb_str(&b, ", \"phase\": ") ? -1 : put_cached(&b, names, f[3]);
            if (!rc) rc = sb_str(&b, ", \"test_net\": ") ? -1 : put_int(&b, f[4]);
            if (!rc) rc = sb_str(&b, ", \"seconds\": ") ? -1 : put_number_cached(&b, f[5], &seconds_cache);
            if (!rc) rc = sb_str(&b, ", \"epoch\": ") ? -1 : put_number(&b, f[6]);
            if (!rc) rc = sb_str(&b, ", \"wall_time\": ") ? -1 : put_number_cached(&b, f[7], &wall_cache);
            if (!rc) rc = sb_str(&b, ", \"line\": ") ? -1 : put_int(&b, f[8]);
            if (!rc) rc = sb_str(&b, "}\n") ? -1 : 0;
        }
        if (rc < 0) goto error;
        if (rc > 0) { /* anything unusual: the Python formatter, exactly */
            b.len = mark;
            PyObject *line = PyObject_CallOneArg(fallback, ev);
            if (!line) goto error;
            Py_ssize_t ln;
            const char *s = PyUnicode_AsUTF8AndSize(line, &ln);
            if (!s || sb_put(&b, s, (size_t)ln)) { Py_DECREF(line); goto error; }
            Py_DECREF(line);
        }
    }
    Py_DECREF(seq);
    PyObject *res = PyUnicode_DecodeUTF8(b.buf ? b.buf : "", (Py_ssize_t)b.len, "strict");
    PyMem_Free(b.buf);
    Py_XDECREF(seconds_cache.obj);
    Py_XDECREF(wall_cache.obj);
    return res;
error:
    Py_XDECREF(seconds_cache.obj);
    Py_XDECREF(wall_cache.obj);
    Py_DECREF(seq);
    PyMem_Free(b.buf);
    return NULL;
}

/* csv_row(items) -> "a,b,c": each item a float (repr), an int (as float(int): NumIters is
 * written as 100.0 by parse_log.py) or None (empty cell). Anything else: NotImplemented. */
static PyObject *csv_row(PyObject *self, PyObject *items) {
    PyObject *seq = PySequence_Fast(items, "csv_row takes a sequence");
    if (!seq) return NULL;
    sbuf b = {NULL, 0, 0};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **it = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = it[i];
        if (i && sb_put(&b, ",", 1)) goto error;
        if (v == Py_None) continue;
        double d;
        if (PyFloat_CheckExact(v)) d = PyFloat_AS_DOUBLE(v);
        else if (PyLong_CheckExact(v)) {
            d = PyLong_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) goto error;
        } else {
            Py_DECREF(seq);
            PyMem_Free(b.buf);
            Py_RETURN_NOTIMPLEMENTED;
        }
        char buf[40];
        int len;
        char *r = double_repr_alloc(d, buf, &len);
        if (!r) goto error;
        int rc = sb_put(&b, r, (size_t)len);
        if (r != buf) PyMem_Free(r);
        if (rc) goto error;
    }
    Py_DECREF(seq);
    PyObject *res = PyUnicode_DecodeASCII(b.buf ? b.buf : "", (Py_ssize_t)b.len, "strict");
    PyMem_Free(b.buf);
    return res;
error:
    Py_DECREF(seq);
    PyMem_Free(b.buf);
    return NULL;
}

/* ---- the Caffe CSV tables (sinks/caffe_csv.py), per-metric loop and row formatting ---- */

/* table state list: [cur_key, cur_row, columns, rows, first, lines, narrowest]; cur_row = [it, seconds, lr, {idx: v}].
 * Rows are padded to the columns known when they are formatted; `narrowest` is the
 * smallest such width, so close() knows whether any row needs more padding. */
enum { T_KEY, T_CUR, T_COLUMNS, T_ROWS, T_FIRST, T_LINES, T_NARROWEST };

static PyObject *NO_ROW; /* set from Python: the sentinel for "no current row" */

/* The rows one csv_pivot call completes for one table, as one "\r\n"-joined text. */
typedef struct { PyObject *t; sbuf b; } tabbuf;

/* One cell: 0 written, 1 not a float/int/None (the caller falls back), -1 error. */
static int put_csv_cell(sbuf *b, PyObject *v) {
    double d;
    if (v == Py_None) return 0;
    if (PyFloat_CheckExact(v)) d = PyFloat_AS_DOUBLE(v);
    else if (PyLong_CheckExact(v)) {
        d = PyLong_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
    } else return 1;
    char buf[40];
    int len;
    char *r = double_repr_alloc(d, buf, &len);
    if (!r) return -1;
    int rc = sb_put(b, r, (size_t)len);
    if (r != buf) PyMem_Free(r);
    return rc ? -1 : 0;
}

static int format_row_into(tabbuf *tb, PyObject *row, PyObject *format_fallback) {
    PyObject *t = tb->t;
    PyObject *values = PyList_GET_ITEM(row, 3);
    Py_ssize_t width = PyDict_GET_SIZE(PyList_GET_ITEM(t, T_COLUMNS)), pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(values, &pos, &k, &v)) {
        Py_ssize_t i = PyLong_AsSsize_t(k);
        if (i == -1 && PyErr_Occurred()) return -1;
        if (i + 1 > width) width = i + 1;
    }
    Py_ssize_t narrowest = PyLong_AsSsize_t(PyList_GET_ITEM(t, T_NARROWEST));
    if (narrowest < 0 || width < narrowest) {
        PyObject *w = PyLong_FromSsize_t(width);
        if (!w) return -1;
        PyList_SetItem(t, T_NARROWEST, w);
    }
    sbuf *b = &tb->b;
    size_t mark = b->len;
    if (b->len && sb_put(b, "\r\n", 2)) return -1;
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (i && sb_put(b, ",", 1)) return -1;
        rc = put_csv_cell(b, PyList_GET_ITEM(row, i));
    }
    for (Py_ssize_t i = 0; i < width && rc == 0; i++) {
        if (sb_put(b, ",", 1)) return -1;
        PyObject *key = PyLong_FromSsize_t(i);
        if (!key) return -1;
        PyObject *c = PyDict_GetItemWithError(values, key);
        Py_DECREF(key);
        if (!c) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        rc = put_csv_cell(b, c);
    }
    if (rc < 0) return -1;
    if (rc == 0) return 0;
    /* A cell of another type: the Python formatter for the whole row, exactly. */
    b->len = mark;
    PyObject *cells = PyList_New(3 + width);
    if (!cells) return -1;
    for (int i = 0; i < 3; i++) {
        PyObject *c = PyList_GET_ITEM(row, i);
        Py_INCREF(c);
        PyList_SET_ITEM(cells, i, c);
    }
    for (Py_ssize_t i = 0; i < width; i++) {
        PyObject *key = PyLong_FromSsize_t(i);
        if (!key) { Py_DECREF(cells); return -1; }
        PyObject *c = PyDict_GetItemWithError(values, key);
        Py_DECREF(key);
        if (!c) {
            if (PyErr_Occurred()) { Py_DECREF(cells); return -1; }
            c = Py_None;
        }
        Py_INCREF(c);
        PyList_SET_ITEM(cells, 3 + i, c);
    }
    PyObject *line = PyObject_CallOneArg(format_fallback, cells);
    Py_DECREF(cells);
    if (!line) return -1;
    Py_ssize_t n;
    const char *txt = PyUnicode_AsUTF8AndSize(line, &n);
    int rc2 = (!txt || (b->len && sb_put(b, "\r\n", 2)) || sb_put(b, txt, (size_t)n)) ? -1 : 0;
    Py_DECREF(line);
    return rc2;
}

/* the rows of `tb` as one entry of the table's pending lines */
static int flush_tabbuf(tabbuf *tb) {
    int rc = 0;
    if (tb->t && tb->b.len) {
        PyObject *text = PyUnicode_DecodeUTF8(tb->b.buf, (Py_ssize_t)tb->b.len, "strict");
        rc = text ? PyList_Append(PyList_GET_ITEM(tb->t, T_LINES), text) : -1;
        Py_XDECREF(text);
    }
    PyMem_Free(tb->b.buf);
    tb->b.buf = NULL;
    tb->b.len = tb->b.cap = 0;
    return rc;
}

/* _push: the current row is complete */
static int push_row(tabbuf *tb, PyObject *format_fallback) {
    PyObject *t = tb->t;
    PyObject *row = PyList_GET_ITEM(t, T_CUR);
    Py_INCREF(row);
    Py_INCREF(Py_None);
    PyList_SetItem(t, T_CUR, Py_None);
    Py_INCREF(NO_ROW);
    PyList_SetItem(t, T_KEY, NO_ROW);
    Py_ssize_t rows = PyLong_AsSsize_t(PyList_GET_ITEM(t, T_ROWS)) + 1;
    PyObject *r = PyLong_FromSsize_t(rows);
    if (!r) { Py_DECREF(row); return -1; }
    PyList_SetItem(t, T_ROWS, r);
    if (rows == 1) { /* held back until the second row brings a learning rate */
        PyList_SetItem(t, T_FIRST, row);
        return 0;
    }
    PyObject *first = PyList_GET_ITEM(t, T_FIRST);
    if (first != Py_None) {
        Py_INCREF(first);
        Py_INCREF(Py_None);
        PyList_SetItem(t, T_FIRST, Py_None);
        PyObject *flr = PyList_GET_ITEM(first, 2);
        if (PyFloat_Check(flr) && Py_IS_NAN(PyFloat_AS_DOUBLE(flr))) {
            PyObject *lr = PyList_GET_ITEM(row, 2);
            Py_INCREF(lr);
            PyList_SetItem(first, 2, lr);
        }
        int rc = format_row_into(tb, first, format_fallback);
        Py_DECREF(first);
        if (rc) { Py_DECREF(row); return -1; }
    }
    int rc = format_row_into(tb, row, format_fallback);
    Py_DECREF(row);
    return rc;
}

/* values dict of table t for key `iteration`, starting a new row when the key changes (borrowed ref) */
static PyObject *row_values(tabbuf *tb, PyObject *iteration, PyObject *seconds, PyObject *lr, PyObject *format_fallback) {
    PyObject *t = tb->t;
    int same = PyObject_RichCompareBool(iteration, PyList_GET_ITEM(t, T_KEY), Py_EQ);
    if (same < 0) return NULL;
    if (same) return PyList_GET_ITEM(PyList_GET_ITEM(t, T_CUR), 3);
    if (PyList_GET_ITEM(t, T_CUR) != Py_None && push_row(tb, format_fallback)) return NULL;
    PyObject *values = PyDict_New();
    if (!values) return NULL;
    PyObject *row = PyList_New(4);
    if (!row) { Py_DECREF(values); return NULL; }
    Py_INCREF(iteration); PyList_SET_ITEM(row, 0, iteration);
    Py_INCREF(seconds); PyList_SET_ITEM(row, 1, seconds);
    Py_INCREF(lr); PyList_SET_ITEM(row, 2, lr);
    PyList_SET_ITEM(row, 3, values);
    PyList_SetItem(t, T_CUR, row);
    Py_INCREF(iteration);
    PyList_SetItem(t, T_KEY, iteration);
    return values;
}

static int set_value(PyObject *t, PyObject *values, PyObject *name, PyObject *value) {
    PyObject *columns = PyList_GET_ITEM(t, T_COLUMNS);
    PyObject *idx = PyDict_GetItemWithError(columns, name);
    if (!idx) {
        if (PyErr_Occurred()) return -1;
        PyObject *n = PyLong_FromSsize_t(PyDict_GET_SIZE(columns));
        if (!n) return -1;
        int rc = PyDict_SetItem(columns, name, n);
        Py_DECREF(n);
        if (rc) return -1;
        idx = PyDict_GetItemWithError(columns, name);
        if (!idx) return -1;
    }
    return PyDict_SetItem(values, idx, value);
}

/* csv_pivot(events, metric_type, state, train, test, loss, format_fallback, no_row)
 * state: [lr, loss_only_active]; returns None. Mirrors CaffeCsvSink.write exactly. */
static PyObject *csv_pivot(PyObject *self, PyObject *args) {
    PyObject *events, *mtype, *state, *train, *test, *loss, *ffb, *no_row;
    if (!PyArg_ParseTuple(args, "OOO!O!O!OOO", &events, &mtype, &PyList_Type, &state, &PyList_Type, &train,
                          &PyList_Type, &test, &loss, &ffb, &no_row))
        return NULL;
    NO_ROW = no_row;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (!seq) return NULL;
    tabbuf tb_train = {train, {NULL, 0, 0}}, tb_test = {test, {NULL, 0, 0}};
    tabbuf tb_loss = {loss == Py_None ? NULL : loss, {NULL, 0, 0}};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *lr = PyList_GET_ITEM(state, 0);
    Py_INCREF(lr);
    int loss_active = PyObject_IsTrue(PyList_GET_ITEM(state, 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ev = items[i];
        if ((PyObject *)Py_TYPE(ev) != mtype) continue;
        PyObject *name = PyTuple_GET_ITEM(ev, 0), *value = PyTuple_GET_ITEM(ev, 1);
        PyObject *iteration = PyTuple_GET_ITEM(ev, 2), *phase = PyTuple_GET_ITEM(ev, 3);
        PyObject *test_net = PyTuple_GET_ITEM(ev, 4), *seconds = PyTuple_GET_ITEM(ev, 5);
        PyObject *t, *values;
        tabbuf *tb;
        PyObject *col = NULL; /* owned when set */
        int is_train = PyUnicode_Check(phase) && PyUnicode_Compare(phase, S_train) == 0;
        if (is_train) {
            int is_lr = PyUnicode_Check(name) && PyUnicode_Compare(name, S_lr) == 0;
            int is_total = PyUnicode_Check(name) && PyUnicode_Compare(name, S_total_loss) == 0;
            int is_speed = PyUnicode_Check(name) && PyUnicode_Compare(name, S_iter_per_sec) == 0;
            if (PyErr_Occurred()) goto error;
            if (is_lr || is_total || is_speed) {
                if (is_lr) { Py_INCREF(value); Py_DECREF(lr); lr = value; }
                else if (is_total && loss_active) {
                    values = row_values(&tb_loss, iteration, seconds, lr, ffb);
                    if (!values) goto error;
                    PyObject *lname = PyUnicode_InternFromString("loss");
                    if (!lname || set_value(loss, values, lname, value)) { Py_XDECREF(lname); goto error; }
                    Py_DECREF(lname);
                }
                continue;
            }
            loss_active = 0;
            t = train;
            tb = &tb_train;
        } else {
            t = test;
            tb = &tb_test;
            int tn = PyObject_IsTrue(test_net);
            if (tn < 0) goto error;
            if (tn) { col = PyUnicode_FromFormat("%S#%S", name, test_net); if (!col) goto error; }
        }
        values = row_values(tb, iteration, seconds, lr, ffb);
        if (!values) { Py_XDECREF(col); goto error; }
        int rc = set_value(t, values, col ? col : name, value);
        Py_XDECREF(col);
        if (rc) goto error;
    }
    Py_DECREF(seq);
    PyList_SetItem(state, 0, lr);
    PyList_SetItem(state, 1, PyBool_FromLong(loss_active));
    {
        int rc = flush_tabbuf(&tb_train);
        rc |= flush_tabbuf(&tb_test);
        rc |= flush_tabbuf(&tb_loss);
        if (rc) return NULL;
    }
    Py_RETURN_NONE;
error:
    Py_DECREF(seq);
    Py_DECREF(lr);
    PyMem_Free(tb_train.b.buf);
    PyMem_Free(tb_test.b.buf);
    PyMem_Free(tb_loss.b.buf);
    return NULL;
}

static PyMethodDef methods[] = {
    {"csv_pivot", csv_pivot, METH_VARARGS, "Caffe CSV tables: per-metric loop and rows (see sinks/caffe_csv.py)."},
    {"float_repr", py_float_repr, METH_O, "repr(x) for a float, through the fast path when it applies (for tests)."},
    {"text_to_float", py_text_to_float, METH_O, "float(text) through the exact fast path, or None when it does not apply (for tests)."},
    {"csv_row", csv_row, METH_O, "One CSV row of numbers in repr() form (see sinks/caffe_csv.py)."},
    {"format_metrics", format_metrics, METH_VARARGS, "JSON Lines for a list of events (see sinks/jsonl.py)."},
    {"parse_block", parse_block, METH_VARARGS, "Parse an ASCII block of Caffe glog lines (see caffe.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_caffe_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__caffe_speedups(void) {
    S_train = PyUnicode_InternFromString("train");
    S_test = PyUnicode_InternFromString("test");
    S_total_loss = PyUnicode_InternFromString("total_loss");
    S_lr = PyUnicode_InternFromString("lr");
    S_iter_per_sec = PyUnicode_InternFromString("iter_per_sec");
    S_checkpoint = PyUnicode_InternFromString("checkpoint");
    if (!S_train || !S_test || !S_total_loss || !S_lr || !S_iter_per_sec || !S_checkpoint) return NULL;
    return PyModule_Create(&moduledef);
}
