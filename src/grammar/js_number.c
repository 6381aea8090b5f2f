/* Number languages (js_number.h).
 *
 * A bound b becomes two thresholds.  For integer literals (Python ints) the
 * comparison is exact: x >= b iff x >= ceil(b).  For the other spellings
 * python-jsonschema compares round(x), the double nearest x (ties to
 * even), so x >= b iff round(x) >= c, c the smallest double >= b, iff x is
 * at least the midpoint m between c and the double below it (m itself
 * included when the tie goes to c, i.e. c's significand is even).  m is an
 * exact decimal of up to ~1100 digits; on the accepted spellings (at most
 * 24 decimals, 17 significant digits in exponent form) x >= m is the same
 * as x >= g for g = m rounded up to that grid, a short number, so the
 * comparison automata stay small.  Each comparison is written as a regular
 * expression over digit strings (compiled by regex.c) and the pieces are
 * intersected with the spelling's syntax.
 *
 * Exact decimals are digit strings here (integer and fraction parts), with
 * the few operations the thresholds need; a double's exact expansion comes
 * from printf, which glibc prints exactly at any precision. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/js_number.h"
#include "grammar/regex.h"

#define DEC_MAX 1700 /* digits of either part: 2^1024 has 309, the smallest double 1074 decimals */
#define DEC_FRAC 24  /* decimals of the accepted decimal spelling */
#define SCI_FRAC 16  /* decimals of the accepted exponent spelling's mantissa */

typedef struct dec {
    bool neg;
    int ni, nf; /* digits: i[0..ni) (>= 1, no leading zero unless "0"), f[0..nf) (no trailing zero) */
    char i[DEC_MAX], f[DEC_MAX];
} dec;

static void dec_norm(dec *a) {
    int k = 0;
    while (k < a->ni - 1 && a->i[k] == '0') k++;
    if (k) memmove(a->i, a->i + k, (size_t)(a->ni - k)), a->ni -= k;
    if (a->ni == 0) a->i[0] = '0', a->ni = 1;
    while (a->nf > 0 && a->f[a->nf - 1] == '0') a->nf--;
    if (a->ni == 1 && a->i[0] == '0' && a->nf == 0) a->neg = false;
}

static bool dec_is_zero(const dec *a) { return a->ni == 1 && a->i[0] == '0' && a->nf == 0; }

/* From the digits of an integer or decimal literal (no exponent). */
static void dec_set(dec *a, bool neg, const char *ip, int ni, const char *fp, int nf) {
    a->neg = neg;
    a->ni = ni < DEC_MAX ? ni : DEC_MAX - 1;
    a->nf = nf < DEC_MAX ? nf : DEC_MAX - 1;
    memcpy(a->i, ip, (size_t)a->ni);
    memcpy(a->f, fp, (size_t)a->nf);
    dec_norm(a);
}

static void dec_from_double(dec *a, double d) {
    char buf[DEC_MAX * 2 + 16];
    snprintf(buf, sizeof buf, "%.1100f", fabs(d));
    char *pt = strchr(buf, '.');
    dec_set(a, signbit(d) && d != 0, buf, (int)(pt - buf), pt + 1, (int)strlen(pt + 1));
}

/* 2^1024: the first power of two past the doubles (overflow's midpoint). */
static void dec_two_1024(dec *a) {
    char d[DEC_MAX];
    int n = 1;
    d[0] = 1; /* little-endian digit values */
    for (int k = 0; k < 1024; k++) {
        int carry = 0;
        for (int i = 0; i < n; i++) {
            int v = d[i] * 2 + carry;
            d[i] = (char)(v % 10), carry = v / 10;
        }
        if (carry) d[n++] = (char)carry;
    }
    a->neg = false, a->nf = 0, a->ni = n;
    for (int i = 0; i < n; i++) a->i[i] = (char)('0' + d[n - 1 - i]);
}

/* |a| vs |b| */
static int mag_cmp(const dec *a, const dec *b) {
    if (a->ni != b->ni) return a->ni < b->ni ? -1 : 1;
    int c = memcmp(a->i, b->i, (size_t)a->ni);
    if (c) return c < 0 ? -1 : 1;
    int n = a->nf > b->nf ? a->nf : b->nf;
    for (int k = 0; k < n; k++) {
        char x = k < a->nf ? a->f[k] : '0', y = k < b->nf ? b->f[k] : '0';
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

static int dec_cmp(const dec *a, const dec *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int m = mag_cmp(a, b);
    return a->neg ? -m : m;
}

/* Digits of |a| as one integer scaled by 10^nf (nf >= a->nf), little-endian values. */
static int scaled(const dec *a, int nf, char *out) {
    int n = 0;
    for (int k = nf - 1; k >= 0; k--) out[n++] = (char)(k < a->nf ? a->f[k] - '0' : 0);
    for (int k = a->ni - 1; k >= 0; k--) out[n++] = (char)(a->i[k] - '0');
    return n;
}

static void unscale(dec *r, bool neg, const char *v, int n, int nf) {
    char ip[DEC_MAX], fp[DEC_MAX];
    int ni = 0, nfr = 0;
    for (int k = n - 1; k >= nf; k--) ip[ni++] = (char)('0' + v[k]);
    for (int k = nf - 1; k >= 0; k--) fp[nfr++] = (char)('0' + v[k]);
    dec_set(r, neg, ip, ni, fp, nfr);
}

/* r = (a + b) / 2, exactly. */
static void dec_mid(dec *r, const dec *a, const dec *b) {
    char x[2 * DEC_MAX + 4], y[2 * DEC_MAX + 4], s[2 * DEC_MAX + 4];
    int nf = (a->nf > b->nf ? a->nf : b->nf) + 1; /* one more decimal for the halving */
    int nx = scaled(a, nf, x), ny = scaled(b, nf, y);
    int n = nx > ny ? nx : ny;
    for (int k = nx; k < n + 1; k++) x[k] = 0;
    for (int k = ny; k < n + 1; k++) y[k] = 0;
    bool neg;
    if (a->neg == b->neg) {
        int c = 0;
        for (int k = 0; k <= n; k++) {
            int v = x[k] + y[k] + c;
            s[k] = (char)(v % 10), c = v / 10;
        }
        n++;
        neg = a->neg;
    } else { /* the larger magnitude minus the smaller */
        bool a_big = mag_cmp(a, b) >= 0;
        const char *p = a_big ? x : y, *q = a_big ? y : x;
        int br = 0;
        for (int k = 0; k <= n; k++) {
            int v = p[k] - q[k] - br;
            br = v < 0;
            s[k] = (char)(v < 0 ? v + 10 : v);
        }
        n++;
        neg = a_big ? a->neg : b->neg;
    }
    int rem = 0; /* halve, most significant first */
    for (int k = n - 1; k >= 0; k--) {
        int v = rem * 10 + s[k];
        s[k] = (char)(v / 2), rem = v % 2;
    }
    unscale(r, neg, s, n, nf); /* rem is 0: nf has room for the half */
}

/* |a| truncated or rounded up to p decimals (positive values). */
static void dec_round(dec *r, const dec *a, int p, bool up) {
    *r = *a;
    if (a->nf <= p) return;
    r->nf = p;
    if (!up) {
        dec_norm(r);
        return;
    }
    /* add one unit of the p-th decimal */
    int k = p - 1;
    for (; k >= 0; k--) {
        if (r->f[k] == '9') r->f[k] = '0';
        else {
            r->f[k]++;
            break;
        }
    }
    if (k < 0) {
        int j = r->ni - 1;
        for (; j >= 0; j--) {
            if (r->i[j] == '9') r->i[j] = '0';
            else {
                r->i[j]++;
                break;
            }
        }
        if (j < 0) memmove(r->i + 1, r->i, (size_t)r->ni), r->i[0] = '1', r->ni++;
    }
    dec_norm(r);
}

/* |a| plus or minus one unit of the p-th decimal (a on that grid; minus:
 * a > 0). */
static void dec_step(dec *r, const dec *a, int p, bool plus) {
    *r = *a;
    while (r->nf < p) r->f[r->nf++] = '0';
    char *v = r->f; /* the digits as one string: i then f */
    char all[2 * DEC_MAX];
    memcpy(all, r->i, (size_t)r->ni), memcpy(all + r->ni, v, (size_t)p);
    int n = r->ni + p, k = n - 1;
    if (plus) {
        for (; k >= 0 && all[k] == '9'; k--) all[k] = '0';
        if (k < 0) memmove(all + 1, all, (size_t)n), all[0] = '1', n++, r->ni++;
        else all[k]++;
    } else {
        for (; k >= 0 && all[k] == '0'; k--) all[k] = '9';
        if (k >= 0) all[k]--;
    }
    memcpy(r->i, all, (size_t)r->ni), memcpy(r->f, all + r->ni, (size_t)(n - r->ni));
    r->nf = n - r->ni;
    r->neg = false;
    dec_norm(r);
}

static bool on_grid(const dec *a, int p) { return a->nf <= p; }

/* The exact value of a JSON number literal as Python reads it: an int for
 * an integer literal, else the nearest double.  false: not a finite number. */
static bool literal_value(const char *text, dec *a, double *d, bool *is_int) {
    *is_int = num_is_int_literal(text);
    char *end;
    *d = strtod(text, &end);
    if (*end || !isfinite(*d)) return false;
    if (*is_int) {
        bool neg = text[0] == '-';
        const char *p = text + neg;
        dec_set(a, neg, p, (int)strlen(p), "", 0);
    } else {
        dec_from_double(a, *d);
    }
    return true;
}

bool num_is_int_literal(const char *t) {
    if (*t == '-') t++;
    if (*t == '0') return t[1] == 0;
    if (*t < '1' || *t > '9') return false;
    while (*t >= '0' && *t <= '9') t++;
    return *t == 0;
}

static bool dbl_even(double c) {
    if (c == 0) return true;
    uint64_t u;
    memcpy(&u, &c, sizeof u);
    return (u & 1) == 0;
}

/* The F-form threshold of bound b: round(x) >= b (upper: <=), strict or
 * not, as x >= m (or >) with *m_strict.  false: out of the doubles. */
static bool float_threshold(const dec *b, double d, bool upper, bool strict, dec *m, bool *m_strict) {
    dec ex;
    dec_from_double(&ex, d);
    int c0 = dec_cmp(&ex, b);
    double c;
    /* c: the smallest double >= b (> b), or the largest <= b (< b) */
    if (!upper) c = (strict ? c0 > 0 : c0 >= 0) ? d : nextafter(d, INFINITY);
    else c = (strict ? c0 < 0 : c0 <= 0) ? d : nextafter(d, -INFINITY);
    if (c == 0) c = 0.0; /* -0.0 is the same value */
    dec cd, nd;
    if (!isfinite(c)) {
        /* past the largest double: only texts that overflow to infinity,
         * from the midpoint between it and 2^1024 (a tie goes to infinity) */
        dec_two_1024(&cd);
        cd.neg = c < 0;
        dec_from_double(&nd, c < 0 ? -DBL_MAX : DBL_MAX);
        dec_mid(m, &cd, &nd);
        *m_strict = false;
        return true;
    }
    double nb = nextafter(c, upper ? INFINITY : -INFINITY);
    dec_from_double(&cd, c);
    if (isfinite(nb)) {
        dec_from_double(&nd, nb == 0 ? 0.0 : nb);
    } else {
        dec_two_1024(&nd); /* the overflow boundary, an even "double" */
        nd.neg = !upper;
    }
    dec_mid(m, &cd, &nd);
    *m_strict = !dbl_even(c); /* a tie at m goes to the even one */
    return true;
}

/* ---- regular expressions over digit strings ---- */

/* Digit strings of length n from a to z (a <= z, same length; a NULL: all
 * zeros, z NULL: all nines), for short ones (exponents): one group per
 * digit. */
static void rs_between(sbuf *b, const char *a, const char *z, int n) {
    if (n == 0) return;
    char a0c = a ? a[0] : '0', z0c = z ? z[0] : '9';
    if (a0c == z0c) {
        sb_printf(b, "%c", a0c);
        rs_between(b, a ? a + 1 : NULL, z ? z + 1 : NULL, n - 1);
        return;
    }
    bool a0 = true, z9 = true;
    for (int k = 1; k < n; k++) a0 &= !a || a[k] == '0', z9 &= !z || z[k] == '9';
    char lo = a0 ? a0c : (char)(a0c + 1), hi = z9 ? z0c : (char)(z0c - 1);
    bool first = true;
    sb_puts(b, "(?:");
    if (!a0) {
        sb_printf(b, "%c", a0c);
        rs_between(b, a + 1, NULL, n - 1);
        first = false;
    }
    if (lo <= hi) {
        sb_printf(b, "%s[%c-%c]", first ? "" : "|", lo, hi);
        if (n > 1) sb_printf(b, "[0-9]{%d}", n - 1);
        first = false;
    }
    if (!z9) {
        sb_printf(b, "%s%c", first ? "" : "|", z0c);
        rs_between(b, NULL, z + 1, n - 1);
    }
    sb_puts(b, ")");
}

/* The same as an automaton built directly (bounds may have hundreds of
 * digits): states (position, still equal to a, still equal to z). */
static fsa *f_between(const char *a, const char *z, int n) {
    nfa m = {0};
    int32_t base = m.n;
    for (int32_t i = 0; i < 4 * (n + 1); i++) nfa_state(&m);
    for (int i = 0; i < n && !m.oom; i++)
        for (int t = 0; t < 4; t++) {
            bool lt = t & 1, ht = t & 2;
            for (int d = '0'; d <= '9'; d++) {
                if ((lt && d < a[i]) || (ht && d > z[i])) continue;
                int nt = (lt && d == a[i] ? 1 : 0) | (ht && d == z[i] ? 2 : 0);
                nfa_edge(&m, base + 4 * i + t, (uint32_t)d, (uint32_t)d, base + 4 * (i + 1) + nt);
            }
        }
    int32_t f = nfa_state(&m);
    for (int t = 0; t < 4; t++) nfa_eps(&m, base + 4 * n + t, f);
    fsa *r = m.oom ? NULL : nfa_to_fsa(&m, base + 3, f);
    nfa_free(&m);
    return r;
}

/* Unsigned integers (no leading zero) >= the digits n[0..len). */
static void rs_uint_ge(sbuf *b, const char *n, int len) {
    if (len == 1 && n[0] == '0') {
        sb_puts(b, "(?:0|[1-9][0-9]*)");
        return;
    }
    sb_printf(b, "(?:[1-9][0-9]{%d,}|", len);
    rs_between(b, n, NULL, len);
    sb_puts(b, ")");
}

/* Unsigned integers <= n. */
static void rs_uint_le(sbuf *b, const char *n, int len) {
    sb_puts(b, "(?:0");
    for (int l = 1; l < len; l++) sb_printf(b, "|[1-9][0-9]{%d}", l - 1);
    if (!(len == 1 && n[0] == '0')) {
        /* len digits from 10..0 to n: a leading digit 1..n[0] */
        sb_puts(b, "|");
        if (n[0] > '1') {
            sb_printf(b, "(?:[1-%c]", n[0] - 1);
            if (len > 1) sb_printf(b, "[0-9]{%d}", len - 1);
            sb_puts(b, "|");
        } else {
            sb_puts(b, "(?:");
        }
        sb_printf(b, "%c", n[0]);
        rs_between(b, NULL, n + 1, len - 1);
        sb_puts(b, ")");
    }
    sb_puts(b, ")");
}

/* Fractions F ([0-9]+) with 0.F >= 0.T (ge) or <= 0.T, T = t[0..k) without
 * trailing zeros. */
static void rs_frac(sbuf *b, const char *t, int k, bool ge) {
    sb_puts(b, "(?:");
    if (ge) {
        sb_printf(b, "%.*s[0-9]*", k, t);
        for (int j = 0; j < k; j++)
            if (t[j] < '9') sb_printf(b, "|%.*s[%c-9][0-9]*", j, t, t[j] + 1);
    } else {
        sb_printf(b, "%.*s0*", k, t);
        sb_puts(b, "|0+");
        for (int j = 1; j < k; j++) sb_printf(b, "|%.*s0*", j, t);
        for (int j = 0; j < k; j++)
            if (t[j] > '0') sb_printf(b, "|%.*s[0-%c][0-9]*", j, t, t[j] - 1);
    }
    sb_puts(b, ")");
}

/* Exponent texts [+-]?[0-9]+ equal to e, above it (cmp 1) or below (-1). */
static void rs_exp(sbuf *b, long e, int cmp) {
    char d[32], d1[32];
    long a = labs(e);
    if (cmp == 0) {
        if (e == 0) sb_puts(b, "[+-]?0+");
        else sb_printf(b, "%s0*%ld", e > 0 ? "\\+?" : "-", a);
        return;
    }
    bool up = cmp > 0;
    sb_puts(b, "(?:");
    if ((up && e >= 0) || (!up && e <= 0)) {
        /* same side, farther from zero: |E| >= |e| + 1 */
        snprintf(d, sizeof d, "%ld", a + 1);
        sb_puts(b, up ? "\\+?0*" : "-0*");
        rs_uint_ge(b, d, (int)strlen(d));
    } else {
        /* toward zero or past it: the other side entirely, and |E| <= |e| - 1 on this side */
        sb_puts(b, up ? "\\+?[0-9]+|-0*" : "-[0-9]+|\\+?0*");
        snprintf(d1, sizeof d1, "%ld", a - 1);
        rs_uint_le(b, d1, (int)strlen(d1));
    }
    sb_puts(b, ")");
}

/* ---- the pieces ---- */

static fsa *compile(const sbuf *b) {
    if (b->oom) {
        tutti_set_error("out of memory");
        return NULL;
    }
    return rx_compile(b->s, b->n, RX_SUBSET);
}

static fsa *rx(const char *re) { return rx_compile(re, strlen(re), RX_SUBSET); }

static fsa *concat2(fsa *a, fsa *b) {
    fsa *r = a && b ? fsa_concat(a, b) : NULL;
    fsa_free(a), fsa_free(b);
    return r;
}

static fsa *or2(fsa *a, fsa *b);

/* Unsigned integers (no leading zero) >= n / <= n as automata (n of any
 * length). */
static fsa *f_uint_ge(const char *n, int len) {
    if (len == 1 && n[0] == '0') return rx("^(?:0|[1-9][0-9]*)$");
    char longer[64];
    snprintf(longer, sizeof longer, "^[1-9][0-9]{%d,}$", len);
    char *nines = malloc((size_t)len + 1);
    if (!nines) return NULL;
    memset(nines, '9', (size_t)len);
    fsa *r = or2(rx(longer), f_between(n, nines, len));
    free(nines);
    return r;
}

static fsa *f_uint_le(const char *n, int len) {
    if (len == 1 && n[0] == '0') return rx("^0$");
    char shorter[64];
    snprintf(shorter, sizeof shorter, "^(?:0|[1-9][0-9]{0,%d})$", len - 2);
    char *lo = malloc((size_t)len + 1);
    if (!lo) return NULL;
    memset(lo, '0', (size_t)len);
    lo[0] = '1';
    fsa *r = or2(len > 1 ? rx(shorter) : rx("^0$"), f_between(lo, n, len));
    free(lo);
    return r;
}

static fsa *lit(const char *s, size_t n) { return fsa_utf8_literal(s, n); }

/* Unsigned decimals (the text after an optional '-') v >= g or v <= g,
 * g >= 0 exact: the integer part beyond g's (any fraction), or equal to
 * it and the fraction compared. */
static fsa *f_dec_cmp(const dec *g, bool ge) {
    dec gi = *g, adj;
    gi.nf = 0;
    bool beyond = ge || !dec_is_zero(&gi);
    sbuf b = {0};
    sb_puts(&b, "^\\.");
    rs_frac(&b, g->f, g->nf, ge);
    sb_puts(&b, "$");
    fsa *eq = concat2(lit(g->i, (size_t)g->ni), compile(&b));
    free(b.s);
    if (!beyond) return eq;
    dec_step(&adj, &gi, 0, ge);
    fsa *far = concat2(ge ? f_uint_ge(adj.i, adj.ni) : f_uint_le(adj.i, adj.ni), rx("^\\.[0-9]+$"));
    return or2(eq, far);
}

/* Unsigned normalised exponent spellings v >= m or v <= m (m > 0, m's
 * mantissa already on the SCI_FRAC grid when it matters). */
static void rs_sci_cmp(sbuf *b, const dec *m, bool ge, bool strict) {
    /* m = s0.s1s2... x 10^e */
    char sig[2 * DEC_MAX];
    int ns = 0;
    long e;
    if (!(m->ni == 1 && m->i[0] == '0')) {
        e = m->ni - 1;
        memcpy(sig, m->i, (size_t)m->ni), ns = m->ni;
        memcpy(sig + ns, m->f, (size_t)m->nf), ns += m->nf;
    } else {
        int z = 0;
        while (z < m->nf && m->f[z] == '0') z++;
        e = -(long)(z + 1);
        memcpy(sig, m->f + z, (size_t)(m->nf - z)), ns = m->nf - z;
    }
    while (ns > 1 && sig[ns - 1] == '0') ns--;
    dec mant, g;
    dec_set(&mant, false, sig, 1, sig + 1, ns - 1);
    /* g: the mantissa grid value >= (>) or <= (<) the mantissa */
    if (ge) {
        if (strict && on_grid(&mant, SCI_FRAC)) dec_step(&g, &mant, SCI_FRAC, true);
        else dec_round(&g, &mant, SCI_FRAC, true);
    } else {
        if (strict && on_grid(&mant, SCI_FRAC)) dec_step(&g, &mant, SCI_FRAC, false);
        else dec_round(&g, &mant, SCI_FRAC, false);
    }
    bool g_out = ge ? g.ni > 1 : (g.ni == 1 && g.i[0] == '0'); /* 10 or more / below 1: no mantissa at e */
    sb_puts(b, "^(?:[1-9](?:\\.[0-9]+)?[eE]");
    rs_exp(b, e, ge ? 1 : -1);
    if (!g_out) {
        sb_puts(b, "|");
        char g0 = g.i[0];
        if (ge) {
            if (g0 < '9') sb_printf(b, "[%c-9](?:\\.[0-9]+)?[eE]", g0 + 1), rs_exp(b, e, 0), sb_puts(b, "|");
            if (g.nf == 0) sb_printf(b, "%c(?:\\.[0-9]+)?[eE]", g0);
            else sb_printf(b, "%c\\.", g0), rs_frac(b, g.f, g.nf, true), sb_puts(b, "[eE]");
        } else {
            if (g0 > '1') sb_printf(b, "[1-%c](?:\\.[0-9]+)?[eE]", g0 - 1), rs_exp(b, e, 0), sb_puts(b, "|");
            sb_printf(b, "%c(?:\\.", g0), rs_frac(b, g.f, g.nf, false), sb_puts(b, ")?[eE]");
        }
        rs_exp(b, e, 0);
    }
    sb_puts(b, ")$");
}

/* and of a and b, both consumed (NULL propagates). */
static fsa *and2(fsa *a, fsa *b) {
    fsa *r = a && b ? fsa_and(a, b) : NULL;
    fsa_free(a), fsa_free(b);
    return r;
}

static fsa *or2(fsa *a, fsa *b) {
    fsa *r = a && b ? fsa_or(a, b) : NULL;
    fsa_free(a), fsa_free(b);
    return r;
}

/* One side's limit for the unsigned text: v >= lo / v <= hi (NULL: none). */
typedef struct lim {
    const dec *v;
    bool strict;
} lim;

/* Unsigned decimal and exponent spellings with value in [lo, hi]. */
static fsa *pos_float(lim lo, lim hi) {
    fsa *d = rx("^(?:0|[1-9][0-9]*)\\.[0-9]{1,24}$"), *s = rx("^[1-9](?:\\.[0-9]{1,16})?[eE][+-]?[0-9]+$");
    sbuf b = {0};
    for (int side = 0; side < 2 && d && s; side++) {
        lim l = side ? hi : lo;
        if (!l.v) continue;
        bool ge = side == 0;
        if (ge && dec_is_zero(l.v) && !l.strict) continue; /* v >= 0: everything */
        if (!ge && dec_is_zero(l.v)) {                     /* v <= 0: the zeros; v < 0: nothing */
            fsa *z = l.strict ? fsa_nothing() : rx("^0\\.0+$");
            d = and2(d, z);
            fsa_free(s);
            s = fsa_nothing();
            continue;
        }
        /* decimals: the grid value past the threshold */
        dec g;
        if (ge) {
            if (l.strict && on_grid(l.v, DEC_FRAC)) dec_step(&g, l.v, DEC_FRAC, true);
            else dec_round(&g, l.v, DEC_FRAC, true);
        } else {
            if (l.strict && on_grid(l.v, DEC_FRAC)) dec_step(&g, l.v, DEC_FRAC, false);
            else dec_round(&g, l.v, DEC_FRAC, false);
        }
        d = and2(d, f_dec_cmp(&g, ge));
        b.n = 0;
        if (ge && dec_is_zero(l.v)) continue; /* v > 0: every exponent spelling */
        rs_sci_cmp(&b, l.v, ge, l.strict);
        s = and2(s, compile(&b));
    }
    free(b.s);
    return or2(d, s);
}

/* Unsigned integer literals in [lo, hi] (integer thresholds, inclusive). */
static fsa *pos_int(const dec *lo, const dec *hi) {
    fsa *r = rx("^(?:0|[1-9][0-9]*)$");
    if (lo) r = and2(r, f_uint_ge(lo->i, lo->ni));
    if (hi) r = and2(r, f_uint_le(hi->i, hi->ni));
    return r;
}

static fsa *minus_of(fsa *a) {
    if (!a) return NULL;
    uint32_t m = '-';
    fsa *l = fsa_literal(&m, 1);
    fsa *r = l ? fsa_concat(l, a) : NULL;
    fsa_free(l), fsa_free(a);
    return r;
}

/* t = a + 1 or a - 1 (a a signed integer). */
static void signed_step(dec *t, const dec *a, bool plus) {
    if (dec_is_zero(a)) {
        dec_set(t, !plus, "1", 1, "", 0);
        return;
    }
    dec_step(t, a, 0, a->neg ? !plus : plus); /* on the magnitude */
    t->neg = a->neg;
    dec_norm(t);
}

/* The integer thresholds: x >= ceil(b) (strict: floor(b) + 1), x <= floor(b)
 * (strict: ceil(b) - 1). */
static void int_threshold(const dec *b, bool upper, bool strict, dec *t) {
    dec tr = *b;
    tr.nf = 0;
    dec_norm(&tr);
    /* ceil/floor of a fraction, or strict on a whole number: one step from
     * the truncation toward the allowed side */
    bool step = b->nf > 0 ? (upper ? b->neg : !b->neg) : strict;
    if (step) signed_step(t, &tr, !upper);
    else *t = tr;
}

fsa *num_range(bool integer, num_bound lo, num_bound hi) {
    dec blo, bhi, ilo, ihi, mlo, mhi, nlo, nhi;
    double dlo = 0, dhi = 0;
    bool int_lo, int_hi;
    if (lo.text && !literal_value(lo.text, &blo, &dlo, &int_lo)) {
        tutti_set_error("the bound %s is not a finite number", lo.text);
        return NULL;
    }
    if (hi.text && !literal_value(hi.text, &bhi, &dhi, &int_hi)) {
        tutti_set_error("the bound %s is not a finite number", hi.text);
        return NULL;
    }
    /* integer literals: exact */
    if (lo.text) int_threshold(&blo, false, lo.strict, &ilo);
    if (hi.text) int_threshold(&bhi, true, hi.strict, &ihi);
    if (lo.text && hi.text && dec_cmp(&ilo, &ihi) > 0 && integer) return fsa_nothing();
    /* non-negative texts: v in [max(lo, 0), hi]; negative texts "-u": u in [max(-hi, 0), -lo] */
    dec zero;
    dec_set(&zero, false, "0", 1, "", 0);
    fsa *pos = NULL, *neg = NULL;
    bool pos_none = hi.text && ihi.neg, neg_none = lo.text && !ilo.neg && !dec_is_zero(&ilo);
    pos = pos_none ? fsa_nothing() : pos_int(lo.text && !ilo.neg ? &ilo : NULL, hi.text ? &ihi : NULL);
    if (neg_none) neg = fsa_nothing();
    else {
        dec a, c;
        bool has_a = hi.text && (ihi.neg || dec_is_zero(&ihi)), has_c = lo.text;
        if (has_a) a = ihi, a.neg = false;
        if (has_c) c = ilo, c.neg = false;
        neg = minus_of(pos_int(has_a ? &a : NULL, has_c ? &c : NULL));
    }
    fsa *r = or2(pos, neg);
    if (integer || !r) return r;
    /* the other spellings: thresholds on round(x) */
    bool s_lo = false, s_hi = false;
    if (lo.text && !float_threshold(&blo, dlo, false, lo.strict, &mlo, &s_lo)) goto range;
    if (hi.text && !float_threshold(&bhi, dhi, true, hi.strict, &mhi, &s_hi)) goto range;
    lim plo = {NULL, false}, phi = {NULL, false}, nl = {NULL, false}, nh = {NULL, false};
    bool fpos_none = false, fneg_none = false;
    /* positive texts */
    if (lo.text && !mlo.neg) plo = (lim){&mlo, s_lo};
    if (hi.text) {
        if (mhi.neg) fpos_none = true;
        else phi = (lim){&mhi, s_hi};
    }
    /* negative texts: -v >= mlo iff v <= -mlo; -v <= mhi iff v >= -mhi */
    if (lo.text) {
        if (!mlo.neg && !(dec_is_zero(&mlo) && !s_lo)) fneg_none = true;
        else nlo = mlo, nlo.neg = false, nh = (lim){&nlo, s_lo};
    }
    if (hi.text && (mhi.neg || (dec_is_zero(&mhi) && s_hi))) nhi = mhi, nhi.neg = false, nl = (lim){&nhi, s_hi};
    fsa *fp = fpos_none ? fsa_nothing() : pos_float(plo, phi);
    fsa *fn = fneg_none ? fsa_nothing() : minus_of(pos_float(nl, nh));
    return or2(r, or2(fp, fn));
range:
    fsa_free(r);
    tutti_set_error("a bound beyond the range of doubles");
    return NULL;
}

fsa *num_any(bool integer) {
    return rx(integer ? "^-?(?:0|[1-9][0-9]*)$" : "^-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$");
}

fsa *num_multiple_of(const char *k_text) {
    char *end;
    long long k = strtoll(k_text, &end, 10);
    if (*end || !num_is_int_literal(k_text) || k < 1) {
        tutti_set_error("multipleOf %s: only positive integers are supported", k_text);
        return NULL;
    }
    if (k > FSA_MAX_STATES - 8) {
        tutti_set_error("multipleOf %s: too large (at most %d)", k_text, FSA_MAX_STATES - 8);
        return NULL;
    }
    /* states: 0 start, 1 after '-', 2 "0", 3 + r: residue r after a non-zero lead */
    nfa m = {0};
    int32_t n = 3 + (int32_t)k, f;
    for (int32_t q = 0; q < n; q++) nfa_state(&m);
    f = nfa_state(&m);
    nfa_edge(&m, 0, '-', '-', 1);
    for (int s = 0; s < 2; s++) {
        nfa_edge(&m, s, '0', '0', 2);
        for (int d = 1; d <= 9; d++) nfa_edge(&m, s, (uint32_t)('0' + d), (uint32_t)('0' + d), 3 + (int32_t)(d % k));
    }
    for (long long r = 0; r < k && !m.oom; r++)
        for (int d = 0; d <= 9; d++)
            nfa_edge(&m, 3 + (int32_t)r, (uint32_t)('0' + d), (uint32_t)('0' + d), 3 + (int32_t)((r * 10 + d) % k));
    nfa_eps(&m, 2, f);
    nfa_eps(&m, 3, f);
    fsa *a = m.oom ? NULL : nfa_to_fsa(&m, 0, f);
    nfa_free(&m);
    return a;
}
