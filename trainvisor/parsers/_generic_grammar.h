/* The grammar of GenericParser's pairs (generic.py `_PAIR_RE`) for ASCII lines, and which
 * lines stay in Python: included by _generic_scan.c only. */
#ifndef TRAINVISOR_GENERIC_GRAMMAR_H
#define TRAINVISOR_GENERIC_GRAMMAR_H

#include <string.h> /* memmem: _GNU_SOURCE comes with Python.h */

#define MAX_PAIRS 64

typedef struct { const char *ks, *ke, *vs, *ve, *ss, *se; } pair; /* key, value, (step) or ss NULL */

/* ---- characters, as Python's re sees them in an ASCII str: one table read each ---- */
enum { C_DIGIT = 1, C_FIRST = 2, C_NAME_ONLY = 4, C_NAME2_ONLY = 8, C_AFTER_ONLY = 16, C_WS = 32 };
/* C_FIRST: [A-Za-z_]; \w is C_DIGIT|C_FIRST; the name characters add . / @ - (C_NAME_ONLY: the `/`
 * of the first word), the second word's . @ - (C_NAME2_ONLY), what may not follow a value . : */
static unsigned char CHAR_CLASS[256];

static void init_char_classes(void) {
    for (int c = 0; c < 128; c++) {
        unsigned char k = 0;
        if (c >= '0' && c <= '9') k |= C_DIGIT;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') k |= C_FIRST;
        if (c == '.' || c == '/' || c == '@' || c == '-') k |= C_NAME_ONLY;
        if (c == '.' || c == '@' || c == '-') k |= C_NAME2_ONLY;
        if (c == '.' || c == ':') k |= C_AFTER_ONLY;
        if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) k |= C_WS;
        CHAR_CLASS[c] = k;
    }
}

#define CLS(c) CHAR_CLASS[(unsigned char)(c)]
static inline int is_digit(char c) { return CLS(c) & C_DIGIT; }
static inline int is_w(char c) { return CLS(c) & (C_DIGIT | C_FIRST); }
static inline int is_first(char c) { return CLS(c) & C_FIRST; }
static inline int is_name(char c) { return CLS(c) & (C_DIGIT | C_FIRST | C_NAME_ONLY); }
static inline int is_name2(char c) { return CLS(c) & (C_DIGIT | C_FIRST | C_NAME2_ONLY); }
static inline int is_after(char c) { return CLS(c) & (C_DIGIT | C_FIRST | C_AFTER_ONLY); }
static inline int is_ws(char c) { return CLS(c) & C_WS; }
static inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c; }

static const char *digits(const char *p, const char *e) { while (p < e && is_digit(*p)) p++; return p; }
static const char *skip_ws(const char *p, const char *e) { while (p < e && is_ws(*p)) p++; return p; }

static int word_at(const char *p, const char *e, const char *w) { /* case-insensitive prefix */
    for (; *w; w++, p++)
        if (p >= e || lower(*p) != *w) return 0;
    return 1;
}

/* ---- NUMBER, then (?:/\d+)?(?![\w.:]): the match's end, or NULL ---- */
static const char *tail(const char *v, const char *e) {
    if (v + 1 < e && *v == '/' && is_digit(v[1])) {
        const char *f = digits(v + 1, e);
        if (f == e || !is_after(*f)) return f;
    }
    return (v == e || !is_after(*v)) ? v : NULL;
}

static const char *alt_windows(const char *p, const char *e) { /* \d+\.#(?:INF|QNAN|SNAN|IND)\w* */
    static const char *const tags[4] = {"INF", "QNAN", "SNAN", "IND"};
    const char *q = digits(p, e);
    if (q == p || q + 1 >= e || q[0] != '.' || q[1] != '#') return NULL;
    q += 2;
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(tags[i]);
        if ((size_t)(e - q) >= n && memcmp(q, tags[i], n) == 0) {
            for (q += n; q < e && is_w(*q);) q++;
            return q;
        }
    }
    return NULL;
}

static const char *alt_decimal(const char *p, const char *e) { /* (?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)? */
    if (p < e && is_digit(*p)) {
        p = digits(p, e);
        if (p < e && *p == '.') p = digits(p + 1, e);
    } else if (p + 1 < e && *p == '.' && is_digit(p[1])) {
        p = digits(p + 1, e);
    } else {
        return NULL;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        const char *x = p + 1;
        if (x < e && (*x == '+' || *x == '-')) x++;
        if (x < e && is_digit(*x)) p = digits(x, e);
    }
    return p;
}

static const char *alt_word(const char *p, const char *e) { /* [nN][aA][nN]|[iI][nN][fF](?:inity)? */
    if (word_at(p, e, "nan")) return p + 3;
    if (!word_at(p, e, "inf")) return NULL;
    return word_at(p + 3, e, "inity") ? p + 8 : p + 3;
}

/* NUMBER at p in the order the alternatives are tried; sets *vend, returns the match end or NULL */
static const char *number(const char *p, const char *e, const char **vend) {
    const char *s = (p < e && (*p == '+' || *p == '-')) ? p + 1 : p, *v, *m;
    if ((v = alt_windows(s, e)) && (m = tail(v, e))) return *vend = v, m;
    if ((v = alt_decimal(s, e)) && (m = tail(v, e))) return *vend = v, m;
    if ((v = alt_word(s, e)) && (m = tail(v, e))) return *vend = v, m;
    return NULL;
}

/* (?:\s+\((?:step\s+)?(\d+)\)\s*$)? after the match end m; the match's new end */
static const char *suffix(const char *m, const char *e, pair *pr) {
    const char *p = m, *d;
    if (!(p < e && is_ws(*p))) return m;
    while (p < e && is_ws(*p)) p++;
    if (p >= e || *p != '(') return m;
    p++;
    if (e - p > 4 && memcmp(p, "step", 4) == 0 && is_ws(p[4])) {
        const char *q = p + 4;
        while (q < e && is_ws(*q)) q++;
        if (q < e && is_digit(*q)) p = q;
    }
    d = digits(p, e);
    if (d == p || d >= e || *d != ')') return m;
    const char *r = d + 1;
    while (r < e && is_ws(*r)) r++;
    if (r != e) return m;
    pr->ss = p;
    pr->se = d;
    return e;
}

/* \s*[:=]\s*NUMBER... after a name ending at p; the match end or NULL */
static const char *rest(const char *p, const char *e, pair *pr) {
    while (p < e && is_ws(*p)) p++;
    if (p >= e || (*p != ':' && *p != '=')) return NULL;
    for (p++; p < e && is_ws(*p);) p++;
    const char *vend, *m = number(p, e, &vend);
    if (!m) return NULL;
    pr->vs = p;
    pr->ve = vend;
    pr->ss = pr->se = NULL;
    return suffix(m, e, pr);
}

/* s..e is one of `words` (NULL-ended): a byte loop, as most keys differ from every word in
 * their first byte, and a word's end is its NUL. */
static int key_is(const char *s, const char *e, const char *const *words) {
    size_t n = (size_t)(e - s);
    for (; *words; words++) {
        const char *w = *words;
        size_t i = 0;
        while (i < n && w[i] && w[i] == s[i]) i++;
        if (i == n && !w[n]) return 1;
    }
    return 0;
}

/* The extensions of generic.py `SOURCE_SUFFIXES`, none longer than 3 */
static const char *const SOURCE_EXTS[] = {"c", "h", "cc", "cu", "go", "hh", "py", "cpp", "cuh", "cxx", "hpp", "pyx", NULL};

/* The name s..e ends in `.` and a source file's extension (`estimator.py:371]` is a place in the
 * code, not a pair: _PAIR_RE's lookbehinds). Only the text after the last `.` can be one. */
static int source_file(const char *s, const char *e) {
    for (const char *d = e - 1; d > s && e - d <= 4; d--)
        if (*d == '.') return key_is(d + 1, e, SOURCE_EXTS);
    return 0;
}

/* _PAIR_RE tried at i; the match end or NULL. The name is tested after the rest matched: most
 * names are followed by no value, and a source file's name is as rare as its test is cheap. */
static const char *match_at(const char *ls, const char *i, const char *e, pair *pr) {
    if ((i > ls && is_name(i[-1])) || !is_first(*i)) return NULL;
    const char *j = i + 1, *m;
    while (j < e && is_name(*j)) j++;
    if (j + 1 < e && *j == ' ' && is_first(j[1])) {
        const char *k = j + 2;
        while (k < e && is_name2(*k)) k++;
        if ((m = rest(k, e, pr)) && !source_file(i, k)) return pr->ks = i, pr->ke = k, m;
    }
    if ((m = rest(j, e, pr)) && !source_file(i, j)) return pr->ks = i, pr->ke = j, m;
    return NULL;
}

/* _PAIR_RE.findall over one line: the number of pairs, or -1 for more than MAX_PAIRS */
static int find_pairs(const char *ls, const char *e, pair *prs) {
    int n = 0;
    for (const char *i = ls; i < e;) {
        const char *m = match_at(ls, i, e, &prs[n]);
        if (m) {
            if (++n == MAX_PAIRS) return -1;
            i = m;
        } else if (is_name(*i)) {  /* positions inside this word fail the lookbehind */
            while (++i < e && is_name(*i)) {}
        } else {
            i++;
        }
    }
    return n;
}

/* ---- index keys (generic.py `_ITER_KEYS`, `_EPOCH_KEYS`, `_STICKY_KEYS`) ---- */

static const char *const ITER_KEYS[] = {"step", "iter", "iteration", "global_step", "it", "batch", "Step", "Iter",
                                        "Iteration", NULL};
static const char *const EPOCH_KEYS[] = {"epoch", "Epoch", NULL};
static const char *const STICKY_KEYS[] = {"step", "global_step", "Step", "epoch", "Epoch", NULL};

/* ---- which lines stay in Python ---- */

/* ---- literals, runs and numbers, as the table readers (_generic_tables.h) match them ---- */

static const char *lit(const char *p, const char *e, const char *w) { /* p after the literal w, or NULL */
    size_t n = strlen(w);
    return (p && (size_t)(e - p) >= n && memcmp(p, w, n) == 0) ? p + n : NULL;
}

static const char *ws_lit(const char *p, const char *e, const char *w) { return p ? lit(skip_ws(p, e), e, w) : NULL; }

static const char *run(const char *p, const char *e, int (*in)(char)) { /* the end of a run of one or more */
    const char *q = p;
    while (p && q < e && in(*q)) q++;
    return p && q > p ? q : NULL;
}

/* [-+]?NUMBER as re tries it, followed by what `follows` accepts: the value's end, or NULL. Each
 * alternative's longest match is the only one that can pass the tests the readers give (a shorter
 * one is followed by a digit, `.`, `e` or a letter); the tables', bars' and Katib's numbers. */
static const char *number_then(const char *p, const char *e, int (*follows)(const char *, const char *)) {
    const char *s = (p < e && (*p == '+' || *p == '-')) ? p + 1 : p, *v;
    if ((v = alt_windows(s, e)) && follows(v, e)) return v;
    if ((v = alt_decimal(s, e)) && follows(v, e)) return v;
    if ((v = alt_word(s, e)) && follows(v, e)) return v;
    return NULL;
}

/* After a value: (?![\w.]) */
static int ends_value(const char *v, const char *e) { return v == e || !(is_w(*v) || *v == '.'); }

/* [-+]?NUMBER with nothing required after it; its end or NULL */
static const char *number_any(const char *p, const char *e) {
    const char *s = (p < e && (*p == '+' || *p == '-')) ? p + 1 : p, *v;
    if ((v = alt_windows(s, e)) || (v = alt_decimal(s, e)) || (v = alt_word(s, e))) return v;
    return NULL;
}

/* What a line may be (markers): M_PYTHON lines go to the parser's Python `line` (a `\r`, a non-ASCII
 * byte outside what may be a bar); the others to the C reader of their kind first. */
enum { M_PYTHON = 1, M_BAR = 2, M_IOU = 4, M_TABLE = 8, M_JSON = 16, M_KATIB = 32, M_WIDE = 64 };

/* The ASCII bytes that open a marker below (the first byte of each test); a line is mostly others. */
static const unsigned char MARK_BYTE[128] = {['\r'] = 1, ['/'] = 1, ['%'] = 1, ['['] = 1, [']'] = 1,
                                             ['I'] = 1, ['E'] = 1, ['A'] = 1, ['N'] = 1};

static int is_time(char c) { return is_digit(c) || c == ':'; }
static int is_eta(char c) { return is_time(c) || c == '?'; }

/* After a `[`: tqdm's times as read_bar's second form needs them, `[\d:]+(?:<[\d:?]+)?, `. */
static int tqdm_times(const char *p, const char *e) {
    const char *q = run(p, e, is_time);
    if (q && q < e && *q == '<') q = run(q + 1, e, is_eta);
    return q && e - q >= 2 && q[0] == ',' && q[1] == ' ';
}

/* What of an `Evaluat` the tables take (`_COCO_TYPE_RE`, `_MD_TITLE_RE`): another
 * (`Evaluating predictions`) leaves the line to the pairs, in either loop. */
static int titled(const char *p, const char *e) {
    return (e - p >= 26 && memcmp(p, "Evaluate annotation type *", 26) == 0)
           || (e - p >= 23 && memcmp(p, "Evaluation results for ", 23) == 0);
}

/* What of a line the evaluation tables, the JSON or the Katib reader may take (generic.py,
 * tables.py): M_IOU | M_TABLE for `IoU` (a summary line, or a title), M_TABLE for a title (`titled`),
 * `_mAP` (a `mAP` without it is read as pairs: tables.read returns None for it),
 * `best AP is`, `metricName`, a `{...}` record with a quote, `all` opening the line, a `\r`
 * (a line's terminal states) and what bars.may_be_bar takes for a progress bar and bars.read_bar
 * may read (its forms need `%|`, tqdm's `[00:01<00:02, `, a count opening the line, or a
 * non-ASCII `•`: Caffe's `(4.99 iter/s, ...)` stays here);
 * M_WIDE for a non-ASCII byte: such a line is the bar reader's when it may be a bar (its non-ASCII
 * characters may be a description's, a bar's `█`, rich's `━` and `•`), else Python's (M_PYTHON
 * alone). Each marker holds a capital, rarer than the rest. */
static int markers(const char *ls, const char *e) {
    const char *a = skip_ws(ls, e), *z = e;
    int m = 0;
    while (z > a && is_ws(z[-1])) z--;
    if (z - a >= 2 && *a == '{' && z[-1] == '}' && memchr(a, '"', (size_t)(z - a))) m |= M_JSON;
    if (z - a >= 4 && memcmp(a, "all", 3) == 0 && is_ws(a[3])) m |= M_TABLE;
    int slash = 0, bar = 0, wide = 0;  /* bars.may_be_bar: a '/' and one of "%|", "/s", "/it", "] - " */
    int shape = a < z && is_digit(*a); /* what read_bar needs: "%|", "[" then a digit or ':', or a count first */
    for (const char *p = ls; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x80 && !MARK_BYTE[c]) continue;  /* most bytes: one table read */
        if (c >= 0x80) {
            wide = 1;
            if (c == 0xE2 && e - p >= 3 && (unsigned char)p[1] == 0x80 && (unsigned char)p[2] == 0xA2) shape = 1; /* • */
            continue;
        }
        if (c == '\r') m |= M_PYTHON;  /* a rewritten line: its states, one by one, in Python */
        if (c == '/') {
            slash = 1;
            if (e - p >= 2 && (p[1] == 's' || (e - p >= 3 && p[1] == 'i' && p[2] == 't'))) bar = 1;
        }
        if (c == '%' && e - p >= 2 && p[1] == '|') bar = shape = 1;
        if (c == '[' && tqdm_times(p + 1, e)) shape = 1;
        if (c == ']' && e - p >= 4 && memcmp(p + 1, " - ", 3) == 0) bar = 1;
        if (c == 'I' && e - p >= 3 && memcmp(p, "IoU", 3) == 0) m |= M_IOU | M_TABLE;
        if (c == 'E' && titled(p, e)) m |= M_TABLE;
        if (c == 'A' && e - p >= 2 && p[1] == 'P') {
            if (p - ls >= 2 && p[-1] == 'm' && p[-2] == '_') m |= M_TABLE;
            if (p - ls >= 5 && e - p >= 5 && memcmp(p - 5, "best AP is", 10) == 0) m |= M_TABLE;
        }
        if (c == 'N' && p - ls >= 6 && e - p >= 4 && memcmp(p - 6, "metricName", 10) == 0) m |= M_KATIB;
    }
    if (slash && bar && shape) m |= M_BAR;  /* maybe a progress bar: _generic_bars.h reads it */
    if (wide) return (m & M_BAR) ? m | M_WIDE : M_PYTHON;
    return m;
}

#endif
