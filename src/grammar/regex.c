/* Patterns to automata (regex.h): a recursive-descent parser that builds
 * the character sets as it goes (their meaning depends on the polarity,
 * which flips inside [^...] and (?!...)), a syntax tree, then Thompson's
 * construction into an NFA and the DFA of fsa_nfa.c.
 *
 * Anchors and lookaheads are resolved per top-level alternative: the
 * alternative is the sequence e1 .. ek with an optional ^ before it and $
 * after it; without ^ it is preceded by any string, without $ followed by
 * any string (re.search).  A lookahead (?=X) at position i intersects the
 * language of e(i+1) .. ek and what follows with X followed by anything
 * (X ending in $: exactly X); (?!X) with the complement of that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"

#define RX_MAX_REPEAT 10000
#define RX_MAX_DEPTH 100

enum { RN_SET, RN_CAT, RN_ALT, RN_REP, RN_BOL, RN_EOL, RN_LOOK, RN_EMPTY };

typedef struct rnode {
    int kind;
    size_t pos;
    fsa_edge *r; /* RN_SET: sorted, merged ranges */
    int32_t nr;
    struct rnode **kid; /* RN_CAT, RN_ALT */
    int32_t nk;
    struct rnode *sub; /* RN_REP, RN_LOOK */
    int32_t min, max;  /* RN_REP (max -1: unbounded); RN_LOOK: min 1 = negative */
    bool group;        /* an unquantified ( ) */
    bool nl;           /* RN_EOL: may follow a final "\n" (Python's $, RX_SUPERSET) */
} rnode;

typedef struct rxp {
    const char *s;
    size_t n, pos;
    rnode **all; /* every node, for freeing */
    int32_t n_all, cap_all;
    int depth;
    bool failed;
} rxp;

static int rerr(rxp *p, size_t pos, const char *msg) {
    char copy[400]; /* msg may be the error buffer itself */
    snprintf(copy, sizeof copy, "%s", msg);
    if (!p->failed) tutti_set_error("pattern, offset %zu: %s", pos, copy);
    p->failed = true;
    return TUTTI_ERR;
}

static rnode *node(rxp *p, int kind, size_t pos) {
    if (p->n_all == p->cap_all) {
        int32_t nc = p->cap_all ? p->cap_all * 2 : 32;
        rnode **a = realloc(p->all, sizeof(rnode *) * (size_t)nc);
        if (!a) return rerr(p, pos, "out of memory"), NULL;
        p->all = a, p->cap_all = nc;
    }
    rnode *x = calloc(1, sizeof *x);
    if (!x) {
        rerr(p, pos, "out of memory");
        return NULL;
    }
    x->kind = kind, x->pos = pos;
    p->all[p->n_all++] = x;
    return x;
}

static bool add_kid(rxp *p, rnode *x, rnode *k) {
    rnode **a = realloc(x->kid, sizeof(rnode *) * (size_t)(x->nk + 1));
    if (!a) return rerr(p, x->pos, "out of memory"), false;
    x->kid = a;
    x->kid[x->nk++] = k;
    return true;
}

/* ---- code point sets ---- */

typedef struct cset {
    fsa_edge *r;
    int32_t n, cap;
} cset;

static void cs_add(cset *c, uint32_t lo, uint32_t hi) {
    if (c->n == c->cap) {
        int32_t nc = c->cap ? c->cap * 2 : 8;
        fsa_edge *r = realloc(c->r, sizeof(fsa_edge) * (size_t)nc);
        if (!r) return; /* a dropped range only narrows the set: caught as oom below */
        c->r = r, c->cap = nc;
    }
    c->r[c->n++] = (fsa_edge){lo, hi, 0};
}

static int cmp_range(const void *a, const void *b) {
    const fsa_edge *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void cs_norm(cset *c) {
    qsort(c->r, (size_t)c->n, sizeof(fsa_edge), cmp_range);
    int32_t k = 0;
    for (int32_t i = 0; i < c->n; i++) {
        if (k && c->r[i].lo <= c->r[k - 1].hi + 1) {
            if (c->r[i].hi > c->r[k - 1].hi) c->r[k - 1].hi = c->r[i].hi;
        } else {
            c->r[k++] = c->r[i];
        }
    }
    c->n = k;
}

/* The complement (over every code point but the surrogates). */
static void cs_invert(cset *c) {
    cs_norm(c);
    cset o = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < c->n; i++) {
        if (c->r[i].lo > next) cs_add(&o, next, c->r[i].lo - 1);
        next = c->r[i].hi + 1;
    }
    if (next <= FSA_MAX_CP) cs_add(&o, next, FSA_MAX_CP);
    free(c->r);
    *c = o;
}

/* \d \w \s (upper case: their complements) at polarity pol. */
static void class_escape(cset *c, char e, int pol) {
    bool neg = e == 'D' || e == 'W' || e == 'S';
    int p = neg ? !pol : pol; /* the complement of a superset is a subset */
    cset t = {0};
    switch (e) {
    case 'd':
    case 'D':
        cs_add(&t, '0', '9');
        if (p == RX_SUPERSET) cs_add(&t, 0x80, FSA_MAX_CP); /* Python: every Unicode digit */
        break;
    case 'w':
    case 'W':
        cs_add(&t, '0', '9'), cs_add(&t, 'A', 'Z'), cs_add(&t, '_', '_'), cs_add(&t, 'a', 'z');
        if (p == RX_SUPERSET) cs_add(&t, 0x80, FSA_MAX_CP); /* Python: every Unicode letter or digit */
        break;
    default: /* s S: ECMA's white space and line terminators against Python's str.isspace() */
        cs_add(&t, '\t', '\r'), cs_add(&t, ' ', ' '), cs_add(&t, 0xA0, 0xA0), cs_add(&t, 0x1680, 0x1680);
        cs_add(&t, 0x2000, 0x200A), cs_add(&t, 0x2028, 0x2029), cs_add(&t, 0x202F, 0x202F);
        cs_add(&t, 0x205F, 0x205F), cs_add(&t, 0x3000, 0x3000);
        if (p == RX_SUPERSET) cs_add(&t, 0x1C, 0x1F), cs_add(&t, 0x85, 0x85), cs_add(&t, 0xFEFF, 0xFEFF);
        break;
    }
    if (neg) cs_invert(&t);
    for (int32_t i = 0; i < t.n; i++) cs_add(c, t.r[i].lo, t.r[i].hi);
    free(t.r);
}

static rnode *set_node(rxp *p, size_t pos, cset *c) {
    cs_norm(c);
    rnode *x = node(p, RN_SET, pos);
    if (!x) {
        free(c->r);
        return NULL;
    }
    x->r = c->r, x->nr = c->n;
    c->r = NULL, c->n = c->cap = 0;
    return x;
}

/* ---- lexing ---- */

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static int next_cp(rxp *p, uint32_t *cp) {
    int k = gr_utf8_decode((const unsigned char *)p->s + p->pos, p->n - p->pos, cp);
    if (!k) return rerr(p, p->pos, "invalid UTF-8");
    p->pos += (size_t)k;
    return 0;
}

/* A character escape after the backslash (p->pos at the letter): 1 with
 * *cp, 0 when it is a class escape (\d ...: left unread), or an error. */
static int char_escape(rxp *p, bool in_class, uint32_t *cp) {
    size_t at = p->pos - 1;
    if (p->pos >= p->n) return rerr(p, at, "the pattern ends with a backslash");
    char e = p->s[p->pos];
    switch (e) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S': return 0;
    case 'n': *cp = '\n'; break;
    case 't': *cp = '\t'; break;
    case 'r': *cp = '\r'; break;
    case 'f': *cp = '\f'; break;
    case 'v': *cp = '\v'; break;
    case 'b':
        if (!in_class) return rerr(p, at, "\\b (a word boundary) is not supported");
        *cp = '\b';
        break;
    case '0':
        if (p->pos + 1 < p->n && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9')
            return rerr(p, at, "octal escapes are not supported (\\0 is, not followed by a digit)");
        *cp = 0;
        break;
    case 'x':
    case 'u': {
        int nd = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 1; i <= nd; i++) {
            int h = p->pos + (size_t)i < p->n ? hexval(p->s[p->pos + (size_t)i]) : -1;
            if (h < 0) return rerr(p, at, e == 'x' ? "\\x needs two hex digits" : "\\u needs four hex digits");
            v = v * 16 + (uint32_t)h;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return rerr(p, at, "a surrogate code point is not a character");
        p->pos += (size_t)nd;
        *cp = v;
        break;
    }
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
            char msg[160];
            snprintf(msg, sizeof msg, "the escape \\%c is not supported (%s)", e,
                     e >= '1' && e <= '9' ? "backreferences cannot be matched by a grammar"
                                          : "supported: \\d \\D \\w \\W \\s \\S \\n \\t \\r \\f \\v \\0 \\xhh \\uhhhh "
                                            "and escaped punctuation");
            return rerr(p, at, msg);
        }
        /* an escaped punctuation character or any non-ASCII one: itself */
        return next_cp(p, cp) < 0 ? TUTTI_ERR : 1;
    }
    p->pos++;
    return 1;
}

/* [...] at p->pos (after '['). */
static rnode *parse_class(rxp *p, int pol) {
    size_t at = p->pos - 1;
    bool neg = p->pos < p->n && p->s[p->pos] == '^';
    if (neg) p->pos++;
    int ip = neg ? !pol : pol;
    cset c = {0};
    if (p->pos < p->n && p->s[p->pos] == ']') {
        rerr(p, p->pos, "']' first in a class means different things in ECMA-262 and Python: escape it as \\]");
        return NULL;
    }
    while (p->pos < p->n && p->s[p->pos] != ']') {
        size_t ip0 = p->pos;
        uint32_t lo;
        if (p->s[p->pos] == '[') {
            rerr(p, p->pos, "'[' inside a class: escape it as \\[ (nested sets are not supported)");
            goto fail;
        }
        if (p->s[p->pos] == '\\') {
            p->pos++;
            int k = char_escape(p, true, &lo);
            if (k < 0) goto fail;
            if (k == 0) {
                class_escape(&c, p->s[p->pos++], ip);
                if (p->pos + 1 < p->n && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
                    rerr(p, p->pos, "a range cannot start or end at a class escape (\\d, \\w, \\s)");
                    goto fail;
                }
                continue;
            }
        } else if (next_cp(p, &lo) < 0) {
            goto fail;
        }
        uint32_t hi = lo;
        if (p->pos + 1 < p->n && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (p->s[p->pos] == '\\') {
                p->pos++;
                int k = char_escape(p, true, &hi);
                if (k < 0) goto fail;
                if (k == 0) {
                    rerr(p, p->pos - 1, "a range cannot start or end at a class escape (\\d, \\w, \\s)");
                    goto fail;
                }
            } else if (next_cp(p, &hi) < 0) {
                goto fail;
            }
            if (hi < lo) {
                rerr(p, ip0, "a range with its end before its start");
                goto fail;
            }
        }
        cs_add(&c, lo, hi);
    }
    if (p->pos >= p->n) {
        rerr(p, at, "unterminated [");
        goto fail;
    }
    p->pos++;
    if (neg) cs_invert(&c);
    return set_node(p, at, &c);
fail:
    free(c.r);
    return NULL;
}

/* {m}, {m,}, {m,n}, {,n} at p->pos: 1 with the bounds (pos after '}'),
 * 0 when it is not one (then '{' is a literal, as in both engines). */
static int parse_braces(rxp *p, int32_t *mn, int32_t *mx) {
    size_t i = p->pos + 1;
    int64_t a = -1, b = -1;
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
        a = (a < 0 ? 0 : a) * 10 + (p->s[i++] - '0'), a = a > 1e9 ? 1e9 : a;
    bool comma = i < p->n && p->s[i] == ',';
    if (comma) {
        i++;
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
            b = (b < 0 ? 0 : b) * 10 + (p->s[i++] - '0'), b = b > 1e9 ? 1e9 : b;
    }
    if (i >= p->n || p->s[i] != '}' || (a < 0 && b < 0)) return 0;
    if (a < 0) a = 0; /* {,n}: Python's {0,n} */
    if (!comma) b = a;
    size_t at = p->pos;
    p->pos = i + 1;
    if (b >= 0 && b < a) return rerr(p, at, "repetition {m,n} with n < m");
    if (a > RX_MAX_REPEAT || b > RX_MAX_REPEAT) return rerr(p, at, "repetition bound above 10000");
    *mn = (int32_t)a, *mx = (int32_t)b;
    return 1;
}

static rnode *parse_alt(rxp *p, int pol);

static rnode *parse_group(rxp *p, int pol) {
    size_t at = p->pos - 1;
    rnode *look = NULL;
    if (p->pos < p->n && p->s[p->pos] == '?') {
        const char *q = p->s + p->pos + 1;
        size_t left = p->n - p->pos - 1;
        if (left >= 1 && q[0] == ':') {
            p->pos += 2;
        } else if (left >= 1 && (q[0] == '=' || q[0] == '!')) {
            if (!(look = node(p, RN_LOOK, at))) return NULL;
            look->min = q[0] == '!';
            p->pos += 2;
        } else if ((left >= 2 && q[0] == 'P' && q[1] == '<') ||
                   (left >= 2 && q[0] == '<' && q[1] != '=' && q[1] != '!')) {
            const char *e = memchr(q, '>', left);
            if (!e) return rerr(p, at, "unterminated group name"), NULL;
            p->pos = (size_t)(e - p->s) + 1;
        } else if (left >= 1 && q[0] == '<') {
            return rerr(p, at, "lookbehind (?<= ) (?<! ) is not supported"), NULL;
        } else {
            return rerr(p, at,
                        "this (? ) group is not supported (supported: (?: ) (?= ) (?! ) (?<name> ) (?P<name> ))"),
                   NULL;
        }
    }
    if (++p->depth > RX_MAX_DEPTH) return rerr(p, at, "groups nested more than 100 deep"), NULL;
    rnode *in = parse_alt(p, look && look->min ? !pol : pol);
    p->depth--;
    if (!in) return NULL;
    if (p->pos >= p->n || p->s[p->pos] != ')') return rerr(p, at, "missing )"), NULL;
    p->pos++;
    if (look) {
        look->sub = in;
        return look;
    }
    in->group = true; /* parse_alt gives an RN_ALT or an RN_CAT */
    return in;
}

static rnode *parse_atom(rxp *p, int pol) {
    size_t at = p->pos;
    char ch = p->s[p->pos];
    cset c = {0};
    if (ch == '(') {
        p->pos++;
        return parse_group(p, pol);
    }
    if (ch == '[') {
        p->pos++;
        return parse_class(p, pol);
    }
    if (ch == '^' || ch == '$') {
        p->pos++;
        rnode *x = node(p, ch == '^' ? RN_BOL : RN_EOL, at);
        if (x) x->nl = ch == '$' && pol == RX_SUPERSET;
        return x;
    }
    if (ch == '*' || ch == '+' || ch == '?') return rerr(p, at, "a quantifier with nothing to repeat"), NULL;
    if (ch == '{') {
        int32_t a, b;
        size_t save = p->pos;
        int k = parse_braces(p, &a, &b);
        if (k < 0) return NULL;
        if (k > 0) return rerr(p, at, "a quantifier with nothing to repeat"), NULL;
        p->pos = save + 1;
        cs_add(&c, '{', '{');
        return set_node(p, at, &c);
    }
    if (ch == '.') {
        p->pos++;
        /* Python: anything but \n; ECMA also not \r U+2028 U+2029 */
        cs_add(&c, '\n', '\n');
        if (pol == RX_SUBSET) cs_add(&c, '\r', '\r'), cs_add(&c, 0x2028, 0x2029);
        cs_invert(&c);
        return set_node(p, at, &c);
    }
    uint32_t cp;
    if (ch == '\\') {
        p->pos++;
        int k = char_escape(p, false, &cp);
        if (k < 0) return NULL;
        if (k == 0) {
            class_escape(&c, p->s[p->pos++], pol);
            return set_node(p, at, &c);
        }
    } else if (next_cp(p, &cp) < 0) {
        return NULL;
    }
    cs_add(&c, cp, cp);
    return set_node(p, at, &c);
}

static rnode *parse_seq(rxp *p, int pol) {
    rnode *seq = node(p, RN_CAT, p->pos);
    if (!seq) return NULL;
    while (p->pos < p->n && p->s[p->pos] != '|' && p->s[p->pos] != ')') {
        rnode *a = parse_atom(p, pol);
        if (!a) return NULL;
        for (;;) {
            if (p->pos >= p->n) break;
            char q = p->s[p->pos];
            size_t qat = p->pos;
            int32_t mn = 0, mx = -1;
            if (q == '*' || q == '+' || q == '?') {
                p->pos++;
                mn = q == '+' ? 1 : 0, mx = q == '?' ? 1 : -1;
            } else if (q == '{') {
                int k = parse_braces(p, &mn, &mx);
                if (k < 0) return NULL;
                if (k == 0) break;
            } else {
                break;
            }
            if (a->kind == RN_BOL || a->kind == RN_EOL || a->kind == RN_LOOK)
                return rerr(p, qat, "a quantifier after an anchor or a lookahead"), NULL;
            if (p->pos < p->n && p->s[p->pos] == '?') p->pos++; /* lazy: the same strings match */
            if (p->pos < p->n &&
                (p->s[p->pos] == '+' || p->s[p->pos] == '*' || p->s[p->pos] == '?' || p->s[p->pos] == '{')) {
                int32_t x, y;
                size_t save = p->pos;
                bool brace = p->s[p->pos] == '{';
                int k = brace ? parse_braces(p, &x, &y) : 1;
                p->pos = save;
                if (k < 0) return NULL;
                if (k > 0)
                    return rerr(p, p->pos,
                                p->s[p->pos] == '+' ? "possessive quantifiers are not supported"
                                                    : "a quantifier after a quantifier"),
                           NULL;
            }
            rnode *r = node(p, RN_REP, qat);
            if (!r) return NULL;
            r->sub = a, r->min = mn, r->max = mx;
            a = r;
        }
        if (!add_kid(p, seq, a)) return NULL;
    }
    return seq;
}

static rnode *parse_alt(rxp *p, int pol) {
    size_t at = p->pos;
    rnode *first = parse_seq(p, pol);
    if (!first || p->pos >= p->n || p->s[p->pos] != '|') return first;
    rnode *alt = node(p, RN_ALT, at);
    if (!alt || !add_kid(p, alt, first)) return NULL;
    while (p->pos < p->n && p->s[p->pos] == '|') {
        p->pos++;
        rnode *s = parse_seq(p, pol);
        if (!s || !add_kid(p, alt, s)) return NULL;
    }
    return alt;
}

/* ---- construction ---- */

/* Thompson fragment of x between new states *s and *f; anchors and
 * lookaheads here (not at a top-level position) are refused. */
static int thompson(rxp *p, nfa *m, const rnode *x, int32_t *s, int32_t *f) {
    *s = nfa_state(m), *f = nfa_state(m);
    if (m->oom) return rerr(p, x->pos, tutti_last_error());
    switch (x->kind) {
    case RN_SET:
        for (int32_t i = 0; i < x->nr; i++) nfa_edge(m, *s, x->r[i].lo, x->r[i].hi, *f);
        return 0;
    case RN_EMPTY: nfa_eps(m, *s, *f); return 0;
    case RN_CAT: {
        int32_t cur = *s;
        for (int32_t i = 0; i < x->nk; i++) {
            int32_t a, b;
            if (thompson(p, m, x->kid[i], &a, &b) < 0) return TUTTI_ERR;
            nfa_eps(m, cur, a);
            cur = b;
        }
        nfa_eps(m, cur, *f);
        return 0;
    }
    case RN_ALT:
        for (int32_t i = 0; i < x->nk; i++) {
            int32_t a, b;
            if (thompson(p, m, x->kid[i], &a, &b) < 0) return TUTTI_ERR;
            nfa_eps(m, *s, a), nfa_eps(m, b, *f);
        }
        return 0;
    case RN_REP: {
        int32_t cur = *s;
        for (int32_t i = 0; i < x->min; i++) {
            int32_t a, b;
            if (thompson(p, m, x->sub, &a, &b) < 0) return TUTTI_ERR;
            nfa_eps(m, cur, a);
            cur = b;
        }
        if (x->max < 0) {
            int32_t a, b;
            if (thompson(p, m, x->sub, &a, &b) < 0) return TUTTI_ERR;
            nfa_eps(m, cur, a), nfa_eps(m, b, cur);
        } else {
            for (int32_t i = x->min; i < x->max; i++) {
                int32_t a, b;
                if (thompson(p, m, x->sub, &a, &b) < 0) return TUTTI_ERR;
                nfa_eps(m, cur, a), nfa_eps(m, cur, *f);
                cur = b;
            }
        }
        nfa_eps(m, cur, *f);
        return 0;
    }
    case RN_BOL:
        return rerr(p, x->pos, "^ is supported only at the start of the pattern or of a top-level alternative");
    case RN_EOL: return rerr(p, x->pos, "$ is supported only at the end of the pattern or of a top-level alternative");
    default: return rerr(p, x->pos, "lookaheads are supported only in the top-level sequence");
    }
}

/* The top-level alternatives of x, groups that make up a whole alternative
 * opened up: (a|b) and a|b alike. */
static int branches(rxp *p, rnode *x, rnode ***out, int32_t *n) {
    if (x->kind == RN_ALT) {
        for (int32_t i = 0; i < x->nk; i++)
            if (branches(p, x->kid[i], out, n) < 0) return TUTTI_ERR;
        return 0;
    }
    if (x->kind == RN_CAT && x->nk == 1 && x->kid[0]->group) return branches(p, x->kid[0], out, n);
    rnode **o = realloc(*out, sizeof(rnode *) * (size_t)(*n + 1));
    if (!o) return rerr(p, x->pos, "out of memory");
    *out = o;
    (*out)[(*n)++] = x;
    return 0;
}

static fsa *all_or_nl(bool anchored, bool nl) {
    if (!anchored) return fsa_all();
    if (!nl) {
        uint32_t none = 0;
        return fsa_literal(&none, 0);
    }
    uint32_t e = 0, lf = '\n';
    fsa *a = fsa_literal(&e, 0), *b = fsa_literal(&lf, 1);
    fsa *r = a && b ? fsa_or(a, b) : NULL;
    fsa_free(a), fsa_free(b);
    return r;
}

/* The elements kid[from .. to) as an NFA, then tail. */
static fsa *seq_then(rxp *p, rnode *const *kid, int32_t from, int32_t to, const fsa *tail, bool any_before) {
    nfa m = {0};
    int32_t s = nfa_state(&m), cur = s;
    if (any_before) {
        nfa_edge(&m, s, 0, FSA_MAX_CP, s);
    }
    for (int32_t i = from; i < to && !m.oom; i++) {
        int32_t a, b;
        if (thompson(p, &m, kid[i], &a, &b) < 0) {
            nfa_free(&m);
            return NULL;
        }
        nfa_eps(&m, cur, a);
        cur = b;
    }
    int32_t ts, tf;
    nfa_embed(&m, tail, &ts, &tf);
    nfa_eps(&m, cur, ts);
    fsa *r = m.oom ? NULL : nfa_to_fsa(&m, s, tf);
    if (!r && !p->failed) rerr(p, 0, tutti_last_error());
    nfa_free(&m);
    return r;
}

static fsa *branches_fsa(rxp *p, rnode *x, bool top);

/* One alternative: [^] e1 .. ek [$]. */
static fsa *branch_fsa(rxp *p, rnode *b, bool top) {
    rnode *one = b;
    rnode *const *kid = b->kind == RN_CAT ? b->kid : &one;
    int32_t k = b->kind == RN_CAT ? b->nk : 1, lo = 0, hi = k;
    bool bol = false, eol = false, nl = false;
    while (lo < hi && kid[lo]->kind == RN_BOL) bol = true, lo++;
    while (hi > lo && kid[hi - 1]->kind == RN_EOL) eol = true, nl |= kid[hi - 1]->nl, hi--;
    if (bol && !top) return rerr(p, kid[0]->pos, "^ inside a lookahead is not supported"), NULL;
    fsa *tail = all_or_nl(eol, nl);
    if (!tail) return rerr(p, b->pos, tutti_last_error()), NULL;
    int32_t end = hi;
    for (int32_t i = hi - 1; i >= lo - 1 && tail; i--) {
        if (i >= lo && kid[i]->kind != RN_LOOK) continue;
        /* kid[i + 1 .. end) then tail */
        fsa *t2 = seq_then(p, kid, i + 1, end, tail, i < lo && top && !bol);
        fsa_free(tail);
        tail = t2;
        if (!tail || i < lo) break;
        fsa *la = branches_fsa(p, kid[i]->sub, false);
        if (!la) {
            fsa_free(tail);
            return NULL;
        }
        fsa *t3 = kid[i]->min ? fsa_minus(tail, la) : fsa_and(tail, la);
        fsa_free(la), fsa_free(tail);
        tail = t3;
        if (!tail) rerr(p, kid[i]->pos, tutti_last_error());
        end = i;
    }
    return tail;
}

/* The union of x's alternatives; top: the whole pattern (else a
 * lookahead's content, followed by anything unless it ends in $). */
static fsa *branches_fsa(rxp *p, rnode *x, bool top) {
    rnode **bs = NULL;
    int32_t nb = 0;
    if (branches(p, x, &bs, &nb) < 0) return NULL;
    fsa *u = NULL;
    for (int32_t i = 0; i < nb; i++) {
        fsa *b = branch_fsa(p, bs[i], top);
        if (!b) {
            fsa_free(u);
            u = NULL;
            break;
        }
        if (!u) {
            u = b;
            continue;
        }
        fsa *v = fsa_or(u, b);
        fsa_free(u), fsa_free(b);
        u = v;
        if (!u) {
            rerr(p, bs[i]->pos, tutti_last_error());
            break;
        }
    }
    free(bs);
    return u;
}

fsa *rx_compile(const char *pat, size_t n, int polarity) {
    rxp p = {.s = pat, .n = n};
    fsa *r = NULL;
    rnode *top = parse_alt(&p, polarity);
    if (top && p.pos < p.n) rerr(&p, p.pos, "unmatched )");
    else if (top) r = branches_fsa(&p, top, true);
    for (int32_t i = 0; i < p.n_all; i++) free(p.all[i]->r), free(p.all[i]->kid), free(p.all[i]);
    free(p.all);
    return r;
}
