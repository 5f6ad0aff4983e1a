/* Exact fast number routines shared by the C speedups of parsers/ and sinks/.
 *
 * Header-only (static inline): each extension compiles its own copy, so neither
 * extension imports the other and sinks/ never depends on parsers/.
 */
#ifndef TRAINVISOR_FASTNUM_H
#define TRAINVISOR_FASTNUM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

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
static inline int fast_text_to_double(const char *s, const char *e, double *out) {
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

static inline int put_uint(char *out, unsigned long long v) {
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
static inline int fast_double_repr(double x, char *out) {
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

/* repr(x) as text: the fast path into `buf`, else CPython's dtoa (then the caller frees the
 * result with PyMem_Free when it is not `buf`); NULL on error. */
static inline char *double_repr_alloc(double x, char *buf, int *len) {
    int n = fast_double_repr(x, buf);
    if (n >= 0) { buf[n] = 0; *len = n; return buf; }
    char *r = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (r) *len = (int)strlen(r);
    return r;
}

#endif /* TRAINVISOR_FASTNUM_H */
