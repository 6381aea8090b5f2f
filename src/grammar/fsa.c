/* Finite automata over code points (fsa.h): construction, the boolean
 * operations, minimisation.
 *
 * Every constructor builds a raw DFA breadth first (state q's edges are
 * appended while q is processed, so they are contiguous), then
 * fsa_finish() trims it (drops states that reach no accepting state),
 * minimises it (Moore's partition refinement: states split by their
 * accepting flag, then by the classes their ranges lead to, until stable)
 * and renumbers it breadth first.  Ranges of one state are kept sorted,
 * disjoint and merged when adjacent with the same target. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/fsa.h"
#include "grammar/grammar.h"
#include "util/buf.h"

/* Moore's refinement takes as many rounds as the longest distinguishing
 * suffix (a long counted chain needs one round per link): past this many
 * the automaton is kept as it is, trimmed and correct, only not minimal. */
#define FSA_MINIMIZE_ROUNDS 64

/* ---- text buffer ---- */

void sb_putn(sbuf *b, const char *s, size_t n) {
    if (!b->oom && tutti_buf_append(&b->s, &b->n, &b->cap, s, n) < 0) b->oom = true;
}

void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sb_putn(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    sb_putn(b, big, (size_t)k);
    free(big);
}

/* ---- raw DFA under construction ---- */

typedef struct raw {
    int32_t n, cap; /* states */
    int32_t *e0;    /* [cap + 1] */
    uint8_t *acc;
    fsa_edge *ed;
    int32_t n_ed, cap_ed;
    bool fail;
} raw;

static int32_t raw_state(raw *r, bool acc) {
    if (r->fail) return -1;
    if (r->n >= FSA_MAX_STATES) {
        tutti_set_error("automaton over %d states", FSA_MAX_STATES);
        r->fail = true;
        return -1;
    }
    if (r->n == r->cap) {
        int32_t nc = r->cap ? r->cap * 2 : 16;
        int32_t *e0 = realloc(r->e0, sizeof(int32_t) * (size_t)(nc + 1));
        if (e0) r->e0 = e0;
        uint8_t *a = e0 ? realloc(r->acc, (size_t)nc) : NULL;
        if (a) r->acc = a;
        if (!e0 || !a) {
            tutti_set_error("out of memory");
            r->fail = true;
            return -1;
        }
        r->cap = nc;
    }
    r->acc[r->n] = acc;
    r->e0[r->n] = r->n_ed; /* set again when the state is processed */
    return r->n++;
}

/* Appends an edge of the state being processed (merged with the previous
 * one when adjacent with the same target). */
static void raw_edge(raw *r, int32_t from_first_edge, uint32_t lo, uint32_t hi, int32_t to) {
    if (r->fail || to < 0) return;
    if (r->n_ed > from_first_edge) {
        fsa_edge *p = &r->ed[r->n_ed - 1];
        if (p->to == to && p->hi + 1 == lo) {
            p->hi = hi;
            return;
        }
    }
    if (r->n_ed == r->cap_ed) {
        int32_t nc = r->cap_ed ? r->cap_ed * 2 : 64;
        fsa_edge *e = realloc(r->ed, sizeof(fsa_edge) * (size_t)nc);
        if (!e) {
            tutti_set_error("out of memory");
            r->fail = true;
            return;
        }
        r->ed = e, r->cap_ed = nc;
    }
    r->ed[r->n_ed++] = (fsa_edge){lo, hi, to};
}

static void raw_free(raw *r) { free(r->e0), free(r->acc), free(r->ed); }

void fsa_free(fsa *a) {
    if (!a) return;
    free(a->e0), free(a->edges), free(a->acc);
    free(a);
}

static fsa *fsa_alloc(int32_t n, int32_t ne) {
    fsa *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->n = n;
    a->e0 = calloc((size_t)n + 1, sizeof(int32_t));
    a->acc = calloc((size_t)n, 1);
    a->edges = malloc(sizeof(fsa_edge) * (size_t)(ne > 0 ? ne : 1));
    if (!a->e0 || !a->acc || !a->edges) {
        fsa_free(a);
        return NULL;
    }
    return a;
}

fsa *fsa_copy(const fsa *a) {
    fsa *c = fsa_alloc(a->n, a->e0[a->n]);
    if (!c) {
        tutti_set_error("out of memory");
        return NULL;
    }
    memcpy(c->e0, a->e0, sizeof(int32_t) * (size_t)(a->n + 1));
    memcpy(c->acc, a->acc, (size_t)a->n);
    memcpy(c->edges, a->edges, sizeof(fsa_edge) * (size_t)a->e0[a->n]);
    return c;
}

/* ---- trim, minimise, renumber ---- */

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

/* The signature of q under partition cls: its class, then its ranges with
 * the class of their target, adjacent ranges of one class merged. */
static int32_t signature(const raw *r, const int32_t *cls, const uint8_t *live, int32_t q, uint64_t *sig, int32_t cap) {
    int32_t k = 0;
    sig[k++] = (uint64_t)(uint32_t)cls[q];
    uint32_t plo = 0, phi = 0;
    int32_t pc = -1;
    for (int32_t i = r->e0[q]; i < r->e0[q + 1]; i++) {
        const fsa_edge *e = &r->ed[i];
        if (!live[e->to]) continue;
        int32_t c = cls[e->to];
        if (pc == c && phi + 1 == e->lo) {
            phi = e->hi;
            continue;
        }
        if (pc >= 0 && k + 2 < cap) sig[k++] = ((uint64_t)plo << 32) | phi, sig[k++] = (uint64_t)(uint32_t)pc;
        plo = e->lo, phi = e->hi, pc = c;
    }
    if (pc >= 0 && k + 2 < cap) sig[k++] = ((uint64_t)plo << 32) | phi, sig[k++] = (uint64_t)(uint32_t)pc;
    return k;
}

/* Moore refinement: cls[q] for live states; returns the class count or -1. */
static int32_t minimize(const raw *r, const uint8_t *live, int32_t *cls) {
    int32_t n = r->n, n_cls = 0;
    int32_t max_e = 0;
    for (int32_t q = 0; q < n; q++)
        if (r->e0[q + 1] - r->e0[q] > max_e) max_e = r->e0[q + 1] - r->e0[q];
    int32_t cap_sig = 2 * max_e + 2;
    uint64_t *sig = malloc(sizeof(uint64_t) * (size_t)cap_sig * (size_t)n);
    int32_t *len = malloc(sizeof(int32_t) * (size_t)n), *ncls = malloc(sizeof(int32_t) * (size_t)n);
    int32_t hcap = 16;
    while (hcap < 2 * n) hcap *= 2;
    int32_t *h = malloc(sizeof(int32_t) * (size_t)hcap);
    if (!sig || !len || !ncls || !h) {
        free(sig), free(len), free(ncls), free(h);
        return -1;
    }
    for (int32_t q = 0; q < n; q++) cls[q] = live[q] ? r->acc[q] : -1;
    int32_t prev = -1, rounds = 0;
    for (;;) {
        if (++rounds > FSA_MINIMIZE_ROUNDS) {
            n_cls = -2;
            break;
        }
        for (int32_t i = 0; i < hcap; i++) h[i] = -1;
        n_cls = 0;
        for (int32_t q = 0; q < n; q++) {
            if (!live[q]) {
                ncls[q] = -1;
                continue;
            }
            uint64_t *s = sig + (size_t)q * (size_t)cap_sig;
            len[q] = signature(r, cls, live, q, s, cap_sig);
            uint64_t hv = 0;
            for (int32_t k = 0; k < len[q]; k++) hv = mix(hv, s[k]);
            int32_t j = (int32_t)(hv & (uint64_t)(hcap - 1));
            for (;;) {
                int32_t o = h[j];
                if (o < 0) {
                    h[j] = q;
                    ncls[q] = n_cls++;
                    break;
                }
                if (len[o] == len[q] &&
                    !memcmp(sig + (size_t)o * (size_t)cap_sig, s, sizeof(uint64_t) * (size_t)len[q])) {
                    ncls[q] = ncls[o];
                    break;
                }
                j = (j + 1) & (hcap - 1);
            }
        }
        memcpy(cls, ncls, sizeof(int32_t) * (size_t)n);
        if (n_cls == prev) break;
        prev = n_cls;
    }
    free(sig), free(len), free(ncls), free(h);
    return n_cls;
}

/* The finished automaton of r (consumed). */
static fsa *fsa_finish(raw *r) {
    if (r->fail) {
        raw_free(r);
        return NULL;
    }
    if (r->n == 0) raw_state(r, false);
    r->e0[r->n] = r->n_ed;
    int32_t n = r->n;
    /* live: reaches an accepting state (reverse reachability) */
    uint8_t *live = calloc((size_t)n, 1);
    int32_t *rc = calloc((size_t)n + 1, sizeof(int32_t)), *rv = malloc(sizeof(int32_t) * (size_t)(r->n_ed + 1));
    int32_t *stack = malloc(sizeof(int32_t) * (size_t)n), *cls = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *map = malloc(sizeof(int32_t) * (size_t)n);
    fsa *out = NULL;
    if (!live || !rc || !rv || !stack || !cls || !map) goto oom;
    for (int32_t i = 0; i < r->n_ed; i++) rc[r->ed[i].to + 1]++;
    for (int32_t q = 0; q < n; q++) rc[q + 1] += rc[q];
    {
        int32_t *fill = malloc(sizeof(int32_t) * (size_t)(n + 1));
        if (!fill) goto oom;
        memcpy(fill, rc, sizeof(int32_t) * (size_t)(n + 1));
        for (int32_t q = 0; q < n; q++)
            for (int32_t i = r->e0[q]; i < r->e0[q + 1]; i++) rv[fill[r->ed[i].to]++] = q;
        free(fill);
    }
    int32_t sp = 0;
    for (int32_t q = 0; q < n; q++)
        if (r->acc[q]) live[q] = 1, stack[sp++] = q;
    while (sp) {
        int32_t q = stack[--sp];
        for (int32_t i = rc[q]; i < rc[q + 1]; i++)
            if (!live[rv[i]]) live[rv[i]] = 1, stack[sp++] = rv[i];
    }
    if (!live[0]) {
        out = fsa_alloc(1, 0);
        goto done;
    }
    int32_t mr = minimize(r, live, cls);
    if (mr == -1) goto oom;
    if (mr == -2)
        for (int32_t q = 0; q < n; q++) cls[q] = live[q] ? q : -1;
    /* breadth-first renumbering of the classes from the start's */
    for (int32_t q = 0; q < n; q++) map[q] = -1;
    int32_t *rep = stack; /* rep[new id] = a state of that class */
    int32_t n_new = 0, head = 0, n_edges = 0;
    map[cls[0]] = n_new, rep[n_new++] = 0;
    while (head < n_new) {
        int32_t q = rep[head++];
        for (int32_t i = r->e0[q]; i < r->e0[q + 1]; i++) {
            int32_t t = r->ed[i].to;
            if (!live[t]) continue;
            n_edges++;
            if (map[cls[t]] < 0) map[cls[t]] = n_new, rep[n_new++] = t;
        }
    }
    out = fsa_alloc(n_new, n_edges);
    if (!out) goto oom;
    int32_t ne = 0;
    for (int32_t k = 0; k < n_new; k++) {
        int32_t q = rep[k];
        out->e0[k] = ne;
        out->acc[k] = r->acc[q];
        for (int32_t i = r->e0[q]; i < r->e0[q + 1]; i++) {
            const fsa_edge *e = &r->ed[i];
            if (!live[e->to]) continue;
            int32_t t = map[cls[e->to]];
            if (ne > out->e0[k] && out->edges[ne - 1].to == t && out->edges[ne - 1].hi + 1 == e->lo)
                out->edges[ne - 1].hi = e->hi;
            else out->edges[ne++] = (fsa_edge){e->lo, e->hi, t};
        }
    }
    out->e0[n_new] = ne;
    goto done;
oom:
    tutti_set_error("out of memory");
done:
    free(live), free(rc), free(rv), free(stack), free(cls), free(map);
    raw_free(r);
    if (!out) tutti_set_error("out of memory");
    return out;
}

fsa *fsa_from_parts(int32_t n, int32_t *e0, uint8_t *acc, fsa_edge *ed, int32_t n_ed, bool fail);
fsa *fsa_from_parts(int32_t n, int32_t *e0, uint8_t *acc, fsa_edge *ed, int32_t n_ed, bool fail) {
    raw r = {.n = n, .cap = n, .e0 = e0, .acc = acc, .ed = ed, .n_ed = n_ed, .cap_ed = n_ed, .fail = fail};
    if (!fail && !e0) { /* no state at all */
        raw_free(&r);
        return fsa_nothing();
    }
    return fsa_finish(&r);
}

/* ---- simple languages ---- */

fsa *fsa_nothing(void) {
    raw r = {0};
    return fsa_finish(&r);
}

fsa *fsa_all(void) {
    raw r = {0};
    raw_state(&r, true);
    r.e0[0] = 0;
    raw_edge(&r, 0, 0, 0xD7FF, 0);
    raw_edge(&r, 0, 0xE000, FSA_MAX_CP, 0);
    return fsa_finish(&r);
}

fsa *fsa_literal(const uint32_t *cp, int32_t n) {
    raw r = {0};
    for (int32_t i = 0; i <= n; i++) raw_state(&r, i == n);
    for (int32_t i = 0; i < n && !r.fail; i++) {
        r.e0[i] = r.n_ed;
        if (cp[i] <= FSA_MAX_CP && (cp[i] < 0xD800 || cp[i] > 0xDFFF)) raw_edge(&r, r.n_ed, cp[i], cp[i], i + 1);
    }
    if (!r.fail) r.e0[n] = r.n_ed;
    return fsa_finish(&r);
}

fsa *fsa_utf8_literal(const char *s, size_t n) {
    uint32_t *cp = malloc(sizeof(uint32_t) * (n + 1));
    if (!cp) return NULL;
    int32_t k = 0;
    for (size_t i = 0; i < n;) {
        int l = gr_utf8_decode((const unsigned char *)s + i, n - i, &cp[k]);
        if (!l) {
            free(cp);
            return NULL;
        }
        i += (size_t)l, k++;
    }
    fsa *a = fsa_literal(cp, k);
    free(cp);
    return a;
}

typedef struct lit_ref {
    uint32_t *cp;
    int32_t n;
} lit_ref;

static int cmp_lit(const void *a, const void *b) {
    const lit_ref *x = a, *y = b;
    for (int32_t i = 0; i < x->n && i < y->n; i++)
        if (x->cp[i] != y->cp[i]) return x->cp[i] < y->cp[i] ? -1 : 1;
    return (x->n > y->n) - (x->n < y->n);
}

fsa *fsa_utf8_literals(const char *const *s, int32_t k) {
    /* the trie of the sorted strings, breadth first: a node is the run
     * [a, b) of strings that share its first d code points; its children
     * are the runs that agree on code point d (ascending, so its edges come
     * out sorted) */
    lit_ref *l = calloc((size_t)(k > 0 ? k : 1), sizeof *l);
    int32_t(*q)[3] = NULL;
    raw r = {0};
    fsa *out = NULL;
    int64_t total = 0;
    if (!l) goto oom;
    for (int32_t i = 0; i < k; i++) {
        size_t n = strlen(s[i]);
        if (!(l[i].cp = malloc(sizeof(uint32_t) * (n + 1)))) goto oom;
        for (size_t j = 0; j < n;) {
            int len = gr_utf8_decode((const unsigned char *)s[i] + j, n - j, &l[i].cp[l[i].n]);
            if (!len) {
                tutti_set_error("invalid UTF-8 in a name");
                goto fail;
            }
            j += (size_t)len, l[i].n++;
        }
        total += l[i].n;
    }
    qsort(l, (size_t)k, sizeof *l, cmp_lit);
    /* nodes <= 1 + every code point */
    if (total + 1 > FSA_MAX_STATES) {
        tutti_set_error("automaton over %d states", FSA_MAX_STATES);
        goto fail;
    }
    if (!(q = malloc(sizeof *q * (size_t)(total + 1)))) goto oom;
    int32_t nq = 0;
    int32_t root = raw_state(&r, k > 0 && l[0].n == 0);
    if (root < 0) goto fail;
    q[nq][0] = 0, q[nq][1] = k, q[nq++][2] = 0;
    for (int32_t h = 0; h < nq && !r.fail; h++) { /* node h is state h */
        int32_t a = q[h][0], b = q[h][1], d = q[h][2];
        r.e0[h] = r.n_ed;
        int32_t first = r.n_ed;
        while (a < b && l[a].n <= d) a++; /* the strings that end here */
        while (a < b) {
            int32_t e = a + 1;
            while (e < b && l[e].cp[d] == l[a].cp[d]) e++;
            uint32_t c = l[a].cp[d];
            int32_t t = raw_state(&r, l[a].n == d + 1);
            if (t < 0) break;
            if (c <= FSA_MAX_CP && (c < 0xD800 || c > 0xDFFF)) raw_edge(&r, first, c, c, t);
            q[nq][0] = a, q[nq][1] = e, q[nq++][2] = d + 1;
            a = e;
        }
    }
    if (r.fail) goto fail;
    out = fsa_finish(&r);
    goto done;
oom:
    tutti_set_error("out of memory");
fail:
    raw_free(&r);
done:
    if (l)
        for (int32_t i = 0; i < k; i++) free(l[i].cp);
    free(l), free(q);
    return out;
}

/* ---- pairs: product automata ---- */

typedef struct pair_map {
    int64_t *key;
    int32_t *val;
    int32_t cap, n;
} pair_map;

/* The state of pair (x, y) (each -1 for "dead"), created in r when new;
 * its index in *q_of for the work list. */
static int32_t pair_get(pair_map *pm, raw *r, int32_t x, int32_t y, bool acc, int64_t **keys, int32_t *cap_keys) {
    if ((pm->n + 1) * 2 > pm->cap) {
        int32_t nc = pm->cap ? pm->cap * 2 : 256;
        int64_t *k = malloc(sizeof(int64_t) * (size_t)nc);
        int32_t *v = malloc(sizeof(int32_t) * (size_t)nc);
        if (!k || !v) {
            free(k), free(v);
            r->fail = true;
            return -1;
        }
        for (int32_t i = 0; i < nc; i++) k[i] = INT64_MIN;
        for (int32_t i = 0; i < pm->cap; i++)
            if (pm->key[i] != INT64_MIN) {
                int32_t j = (int32_t)(mix(0, (uint64_t)pm->key[i]) & (uint64_t)(nc - 1));
                while (k[j] != INT64_MIN) j = (j + 1) & (nc - 1);
                k[j] = pm->key[i], v[j] = pm->val[i];
            }
        free(pm->key), free(pm->val);
        pm->key = k, pm->val = v, pm->cap = nc;
    }
    int64_t key = ((int64_t)(x + 1) << 32) | (uint32_t)(y + 1);
    int32_t j = (int32_t)(mix(0, (uint64_t)key) & (uint64_t)(pm->cap - 1));
    while (pm->key[j] != INT64_MIN) {
        if (pm->key[j] == key) return pm->val[j];
        j = (j + 1) & (pm->cap - 1);
    }
    int32_t s = raw_state(r, acc);
    if (s < 0) return -1;
    if (s >= *cap_keys) {
        int32_t nc = *cap_keys ? *cap_keys * 2 : 256;
        int64_t *nk = realloc(*keys, sizeof(int64_t) * (size_t)nc);
        if (!nk) {
            r->fail = true;
            return -1;
        }
        *keys = nk, *cap_keys = nc;
    }
    (*keys)[s] = key;
    pm->key[j] = key, pm->val[j] = s, pm->n++;
    return s;
}

enum { OP_AND, OP_OR, OP_MINUS };

static bool op_acc(int op, bool a, bool b) { return op == OP_AND ? a && b : op == OP_OR ? a || b : a && !b; }

static fsa *product(const fsa *a, const fsa *b, int op) {
    raw r = {0};
    pair_map pm = {0};
    int64_t *keys = NULL;
    int32_t cap_keys = 0;
    pair_get(&pm, &r, 0, 0, op_acc(op, a->acc[0], b->acc[0]), &keys, &cap_keys);
    for (int32_t q = 0; q < r.n && !r.fail; q++) {
        r.e0[q] = r.n_ed;
        int32_t x = (int32_t)(keys[q] >> 32) - 1, y = (int32_t)(keys[q] & 0xFFFFFFFF) - 1;
        int32_t i = x >= 0 ? a->e0[x] : 0, ie = x >= 0 ? a->e0[x + 1] : 0;
        int32_t j = y >= 0 ? b->e0[y] : 0, je = y >= 0 ? b->e0[y + 1] : 0;
        /* sweep the code point line: each piece where both sides keep
         * one target (or none) */
        for (uint32_t at = 0; !r.fail;) {
            while (i < ie && a->edges[i].hi < at) i++;
            while (j < je && b->edges[j].hi < at) j++;
            if (i >= ie && j >= je) break;
            int32_t tx = -1, ty = -1;
            uint32_t hx = FSA_MAX_CP, hy = FSA_MAX_CP;
            if (i < ie) {
                if (a->edges[i].lo <= at) tx = a->edges[i].to, hx = a->edges[i].hi;
                else hx = a->edges[i].lo - 1;
            }
            if (j < je) {
                if (b->edges[j].lo <= at) ty = b->edges[j].to, hy = b->edges[j].hi;
                else hy = b->edges[j].lo - 1;
            }
            uint32_t hi = hx < hy ? hx : hy;
            bool keep = op == OP_AND ? tx >= 0 && ty >= 0 : op == OP_OR ? tx >= 0 || ty >= 0 : tx >= 0;
            if (keep) {
                bool acc = op_acc(op, tx >= 0 && a->acc[tx], ty >= 0 && b->acc[ty]);
                int32_t t = pair_get(&pm, &r, tx, ty, acc, &keys, &cap_keys);
                raw_edge(&r, r.e0[q], at, hi, t);
            }
            if (hi >= FSA_MAX_CP) break;
            at = hi + 1;
        }
    }
    free(pm.key), free(pm.val), free(keys);
    return fsa_finish(&r);
}

fsa *fsa_and(const fsa *a, const fsa *b) { return product(a, b, OP_AND); }
fsa *fsa_or(const fsa *a, const fsa *b) { return product(a, b, OP_OR); }
fsa *fsa_minus(const fsa *a, const fsa *b) { return product(a, b, OP_MINUS); }

fsa *fsa_not(const fsa *a) {
    fsa *all = fsa_all();
    if (!all) return NULL;
    fsa *r = fsa_minus(all, a);
    fsa_free(all);
    return r;
}

fsa *fsa_length(const fsa *a, int64_t min, int64_t max) {
    if (min < 0) min = 0;
    if (max >= 0 && max < min) return fsa_nothing();
    int64_t top = max >= 0 ? max : min; /* counts saturate at top when unbounded */
    if (top >= FSA_MAX_STATES) {
        tutti_set_error("automaton over %d states (a length bound of %lld)", FSA_MAX_STATES, (long long)top);
        return NULL;
    }
    raw r = {0};
    pair_map pm = {0};
    int64_t *keys = NULL;
    int32_t cap_keys = 0;
    pair_get(&pm, &r, 0, 0, a->acc[0] && 0 >= min, &keys, &cap_keys);
    for (int32_t q = 0; q < r.n && !r.fail; q++) {
        r.e0[q] = r.n_ed;
        int32_t x = (int32_t)(keys[q] >> 32) - 1, c = (int32_t)(keys[q] & 0xFFFFFFFF) - 1;
        int32_t nc = c + 1;
        if (max < 0 && nc > top) nc = (int32_t)top;
        if (max >= 0 && nc > max) continue;
        for (int32_t i = a->e0[x]; i < a->e0[x + 1] && !r.fail; i++) {
            const fsa_edge *e = &a->edges[i];
            int32_t t = pair_get(&pm, &r, e->to, nc, a->acc[e->to] && nc >= min, &keys, &cap_keys);
            raw_edge(&r, r.e0[q], e->lo, e->hi, t);
        }
    }
    free(pm.key), free(pm.val), free(keys);
    return fsa_finish(&r);
}

fsa *fsa_concat(const fsa *a, const fsa *b) {
    nfa m = {0};
    int32_t s1, f1, s2, f2;
    nfa_embed(&m, a, &s1, &f1);
    nfa_embed(&m, b, &s2, &f2);
    nfa_eps(&m, f1, s2);
    fsa *r = m.oom ? NULL : nfa_to_fsa(&m, s1, f2);
    nfa_free(&m);
    return r;
}

/* ---- predicates ---- */

bool fsa_is_empty(const fsa *a) { return a->n == 1 && !a->acc[0] && a->e0[1] == 0; }

int fsa_length_range(const fsa *a, int64_t *min, int64_t *max) {
    int32_t n = a->n;
    int64_t *lo = malloc(sizeof(int64_t) * (size_t)n), *hi = malloc(sizeof(int64_t) * (size_t)n);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n), *indeg = calloc((size_t)n, sizeof(int32_t));
    if (!lo || !hi || !order || !indeg) {
        free(lo), free(hi), free(order), free(indeg);
        return tutti_set_error("out of memory");
    }
    /* states in topological order (Kahn); a state left out is on a cycle */
    for (int32_t i = 0; i < a->e0[n]; i++) indeg[a->edges[i].to]++;
    int32_t k = 0, head = 0;
    for (int32_t q = 0; q < n; q++)
        if (!indeg[q]) order[k++] = q;
    while (head < k) {
        int32_t q = order[head++];
        for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++)
            if (--indeg[a->edges[i].to] == 0) order[k++] = a->edges[i].to;
    }
    bool cyclic = k < n;
    /* shortest: breadth-first from the start (states are in that order
     * already only for the first level, so relax in rounds) */
    for (int32_t q = 0; q < n; q++) lo[q] = INT64_MAX, hi[q] = -1;
    lo[0] = 0, hi[0] = 0;
    order[0] = 0;
    int32_t qn = 1;
    for (int32_t h = 0; h < qn; h++) { /* BFS: lo */
        int32_t q = order[h];
        for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++)
            if (lo[a->edges[i].to] == INT64_MAX) lo[a->edges[i].to] = lo[q] + 1, order[qn++] = a->edges[i].to;
    }
    *min = -1, *max = -1;
    for (int32_t q = 0; q < n; q++)
        if (a->acc[q] && lo[q] != INT64_MAX && (*min < 0 || lo[q] < *min)) *min = lo[q];
    if (!cyclic) { /* longest: over the topological order, recomputed */
        k = 0, head = 0;
        memset(indeg, 0, sizeof(int32_t) * (size_t)n);
        for (int32_t i = 0; i < a->e0[n]; i++) indeg[a->edges[i].to]++;
        for (int32_t q = 0; q < n; q++)
            if (!indeg[q]) order[k++] = q;
        while (head < k) {
            int32_t q = order[head++];
            for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++) {
                int32_t t = a->edges[i].to;
                if (hi[q] >= 0 && hi[q] + 1 > hi[t]) hi[t] = hi[q] + 1;
                if (--indeg[t] == 0) order[k++] = t;
            }
        }
        for (int32_t q = 0; q < n; q++)
            if (a->acc[q] && hi[q] > *max) *max = hi[q];
    }
    free(lo), free(hi), free(order), free(indeg);
    return 0;
}

bool fsa_is_all(const fsa *a) {
    if (a->n != 1 || !a->acc[0] || a->e0[1] != 2) return false;
    return a->edges[0].lo == 0 && a->edges[0].hi == 0xD7FF && a->edges[1].lo == 0xE000 && a->edges[1].hi == FSA_MAX_CP;
}

bool fsa_equal(const fsa *a, const fsa *b) {
    fsa *x = fsa_minus(a, b), *y = x ? fsa_minus(b, a) : NULL;
    bool eq = x && y && fsa_is_empty(x) && fsa_is_empty(y);
    fsa_free(x), fsa_free(y);
    return eq;
}

static int32_t step(const fsa *a, int32_t q, uint32_t c) {
    int32_t lo = a->e0[q], hi = a->e0[q + 1];
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (c < a->edges[mid].lo) hi = mid;
        else if (c > a->edges[mid].hi) lo = mid + 1;
        else return a->edges[mid].to;
    }
    return -1;
}

bool fsa_accepts(const fsa *a, const uint32_t *cp, int32_t n) {
    int32_t q = 0;
    for (int32_t i = 0; i < n && q >= 0; i++) q = step(a, q, cp[i]);
    return q >= 0 && a->acc[q];
}

bool fsa_accepts_utf8(const fsa *a, const char *s, size_t n) {
    int32_t q = 0;
    for (size_t i = 0; i < n && q >= 0;) {
        uint32_t c;
        int l = gr_utf8_decode((const unsigned char *)s + i, n - i, &c);
        if (!l) return false;
        q = step(a, q, c);
        i += (size_t)l;
    }
    return q >= 0 && a->acc[q];
}

int64_t fsa_min_length(const fsa *a) {
    if (fsa_is_empty(a)) return -1;
    int32_t *dist = malloc(sizeof(int32_t) * (size_t)a->n), *queue = malloc(sizeof(int32_t) * (size_t)a->n);
    int64_t best = -1;
    if (dist && queue) {
        for (int32_t q = 0; q < a->n; q++) dist[q] = -1;
        int32_t h = 0, t = 0;
        dist[0] = 0, queue[t++] = 0;
        while (h < t) {
            int32_t q = queue[h++];
            if (a->acc[q]) {
                best = dist[q];
                break;
            }
            for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++)
                if (dist[a->edges[i].to] < 0) dist[a->edges[i].to] = dist[q] + 1, queue[t++] = a->edges[i].to;
        }
    }
    free(dist), free(queue);
    return best;
}

/* Longest path in the (trimmed, so every state is useful) automaton: -1
 * when a cycle makes it unbounded. */
int64_t fsa_max_length(const fsa *a) {
    if (fsa_is_empty(a)) return -1;
    int32_t n = a->n;
    int32_t *indeg = calloc((size_t)n, sizeof(int32_t)), *queue = malloc(sizeof(int32_t) * (size_t)n);
    int64_t *len = calloc((size_t)n, sizeof(int64_t));
    int64_t best = 0;
    if (!indeg || !queue || !len) {
        best = -1;
        goto done;
    }
    for (int32_t i = 0; i < a->e0[n]; i++) indeg[a->edges[i].to]++;
    int32_t h = 0, t = 0;
    for (int32_t q = 0; q < n; q++)
        if (!indeg[q]) queue[t++] = q;
    while (h < t) {
        int32_t q = queue[h++];
        if (a->acc[q] && len[q] > best) best = len[q];
        for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++) {
            int32_t to = a->edges[i].to;
            if (len[q] + 1 > len[to]) len[to] = len[q] + 1;
            if (--indeg[to] == 0) queue[t++] = to;
        }
    }
    if (t < n) best = -1; /* a cycle */
done:
    free(indeg), free(queue), free(len);
    return best;
}
