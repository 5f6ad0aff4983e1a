/* The Caffe glog line grammar of _LINE_RE (parsers/caffe.py) in plain C: no Python objects.
 *
 * match_glog_line() finds the groups of one line; _caffe_scan.c turns them into events.
 */
#ifndef TRAINVISOR_CAFFE_GRAMMAR_H
#define TRAINVISOR_CAFFE_GRAMMAR_H

#include <string.h>

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

enum { K_NONE, K_LOSS, K_LR, K_TESTING, K_OUTPUT, K_SNAPSHOT, K_SOLVING };

/* One metric line, as the groups of _LINE_RE. */
typedef struct {
    int kind, is_train, is_state;
    span date, usec, it, speed, val, name, path;
} glog_line;

/* V = [-+0-9.eEnaifNAIF#QD]+ at p; returns end or NULL. */
static const char *match_value(const char *p, const char *end) {
    const char *q = p;
    while (q < end && is_value_char(*q)) q++;
    return q > p ? q : NULL;
}

/* " (?:loss = V|lr = V|Testing net \(#(\d+)\))" at p: the kind, or K_NONE */
static int match_iter_rest(const char *p, const char *end, span *val) {
    const char *q;
    if (p >= end || *p != ' ') return K_NONE;
    p++;
    if (starts(p, end, "loss = ") && (q = match_value(p + 7, end))) {
        val->s = p + 7; val->e = q; return K_LOSS;
    }
    if (starts(p, end, "lr = ") && (q = match_value(p + 5, end))) {
        val->s = p + 5; val->e = q; return K_LR;
    }
    if (starts(p, end, "Testing net (#")) {
        q = p + 14;
        while (q < end && is_digit(*q)) q++;
        if (q == p + 14 || q >= end || *q != ')') return K_NONE;
        val->s = p + 14; val->e = q; return K_TESTING;
    }
    return K_NONE;
}

/* "Iteration (\d+)(?: \(([^ )\n]+) iter/s[^)\n]*\))?,(?: [^,\n=]*,)? " + match_iter_rest */
static void match_iteration(const char *msg, const char *eol, glog_line *g) {
    const char *r = msg + 10, *s;
    g->it.s = r;
    while (r < eol && is_digit(*r)) r++;
    g->it.e = r;
    if (r == g->it.s) return;
    if (r + 1 < eol && r[0] == ' ' && r[1] == '(') {
        s = r + 2;
        while (s < eol && *s != ' ' && *s != ')') s++;
        if (s > r + 2 && starts(s, eol, " iter/s")) {
            const char *t = s + 7;
            while (t < eol && *t != ')') t++;
            if (t < eol) { g->speed.s = r + 2; g->speed.e = s; r = t + 1; }
        }
    }
    if (r >= eol || *r != ',') return;
    r++;
    /* the optional " [^,\n=]*," first, then without it */
    if (r < eol && *r == ' ') {
        s = r + 1;
        while (s < eol && *s != ',' && *s != '=') s++;
        if (s < eol && *s == ',') g->kind = match_iter_rest(s + 1, eol, &g->val);
    }
    if (g->kind == K_NONE) g->kind = match_iter_rest(r, eol, &g->val);
}

/* "(Tr|Te)[a-z]+ net output #\d+: (\S+) = (V)" */
static void match_net_output(const char *msg, const char *eol, glog_line *g) {
    const char *r = msg + 2, *s;
    while (r < eol && *r >= 'a' && *r <= 'z') r++;
    if (r == msg + 2 || !starts(r, eol, " net output #")) return;
    s = r = r + 13;
    while (r < eol && is_digit(*r)) r++;
    if (r == s || !starts(r, eol, ": ")) return;
    r += 2;
    g->name.s = r;
    while (r < eol && !is_py_space(*r)) r++;
    g->name.e = r;
    if (g->name.e > g->name.s && starts(r, eol, " = ")) {
        const char *v = match_value(r + 3, eol);
        if (v) { g->val.s = r + 3; g->val.e = v; g->kind = K_OUTPUT; g->is_train = msg[1] == 'r'; }
    }
}

/* "Snapshotting (solver state )?to (?:binary proto file ?|HDF5 file ?)?([^\n]*?) *$" */
static void match_snapshot(const char *msg, const char *eol, glog_line *g) {
    const char *r = msg + 13;
    if (starts(r, eol, "solver state ")) { r += 13; g->is_state = 1; }
    if (!starts(r, eol, "to ")) return;
    r += 3;
    if (starts(r, eol, "binary proto file")) { r += 17; if (r < eol && *r == ' ') r++; }
    else if (starts(r, eol, "HDF5 file")) { r += 9; if (r < eol && *r == ' ') r++; }
    const char *e = eol;
    while (e > r && e[-1] == ' ') e--;
    g->path.s = r; g->path.e = e; g->kind = K_SNAPSHOT;
}

/* The line [p, eol) against _LINE_RE: its kind (K_NONE when no metric line). */
static int match_glog_line(const char *p, const char *eol, glog_line *g) {
    memset(g, 0, sizeof *g);
    /* [IWEF](.{4} .{8})\.(.{6}) [^\]\n]*\] + */
    if (eol - p < 23 || !(*p == 'I' || *p == 'W' || *p == 'E' || *p == 'F')) return K_NONE;
    if (p[5] != ' ' || p[14] != '.' || p[21] != ' ') return K_NONE;
    g->date.s = p + 1; g->date.e = p + 14; g->usec.s = p + 15; g->usec.e = p + 21;
    const char *q = p + 22;
    while (q < eol && *q != ']') q++;
    if (q >= eol || q + 1 >= eol || q[1] != ' ') return K_NONE;
    q++;
    while (q < eol && *q == ' ') q++;
    if (starts(q, eol, "Iteration ")) match_iteration(q, eol, g);
    else if (q + 1 < eol && q[0] == 'T' && (q[1] == 'r' || q[1] == 'e')) match_net_output(q, eol, g);
    else if (starts(q, eol, "Snapshotting ")) match_snapshot(q, eol, g);
    else if (starts(q, eol, "Solving") && (q + 7 >= eol || !is_word(q[7]))) g->kind = K_SOLVING;
    return g->kind;
}

#endif /* TRAINVISOR_CAFFE_GRAMMAR_H */
