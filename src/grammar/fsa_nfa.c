/* NFAs with epsilon moves and range edges, and their DFA by subset
 * construction (fsa.h).  A DFA state is the epsilon closure of a set of
 * NFA states; its edges come from cutting the code point line at every
 * range boundary of its members' edges, so each piece has one target set. */
#include <stdlib.h>
#include <string.h>

#include "grammar/fsa.h"

#define NFA_MAX_STATES 200000
#define NFA_MAX_WORK 1000000 /* edges gathered and active edges summed over the pieces of every DFA state */

int32_t nfa_state(nfa *m) {
    if (m->oom) return -1;
    if (m->n >= NFA_MAX_STATES) {
        tutti_set_error("automaton over %d states", NFA_MAX_STATES);
        m->oom = true;
        return -1;
    }
    if (m->n == m->cap) {
        int32_t nc = m->cap ? m->cap * 2 : 64;
        nfa_st *s = realloc(m->st, sizeof(nfa_st) * (size_t)nc);
        if (!s) {
            tutti_set_error("out of memory");
            m->oom = true;
            return -1;
        }
        m->st = s, m->cap = nc;
    }
    memset(&m->st[m->n], 0, sizeof(nfa_st));
    return m->n++;
}

void nfa_eps(nfa *m, int32_t from, int32_t to) {
    if (m->oom || from < 0 || to < 0) return;
    nfa_st *s = &m->st[from];
    if (s->n_eps == s->cap_eps) {
        int32_t nc = s->cap_eps ? s->cap_eps * 2 : 2;
        int32_t *e = realloc(s->eps, sizeof(int32_t) * (size_t)nc);
        if (!e) {
            tutti_set_error("out of memory");
            m->oom = true;
            return;
        }
        s->eps = e, s->cap_eps = nc;
    }
    s->eps[s->n_eps++] = to;
}

static void edge1(nfa *m, int32_t from, uint32_t lo, uint32_t hi, int32_t to) {
    nfa_st *s = &m->st[from];
    if (s->n_ed == s->cap_ed) {
        int32_t nc = s->cap_ed ? s->cap_ed * 2 : 2;
        fsa_edge *e = realloc(s->ed, sizeof(fsa_edge) * (size_t)nc);
        if (!e) {
            tutti_set_error("out of memory");
            m->oom = true;
            return;
        }
        s->ed = e, s->cap_ed = nc;
    }
    s->ed[s->n_ed++] = (fsa_edge){lo, hi, to};
}

void nfa_edge(nfa *m, int32_t from, uint32_t lo, uint32_t hi, int32_t to) {
    if (m->oom || from < 0 || to < 0 || lo > hi) return;
    if (hi > FSA_MAX_CP) hi = FSA_MAX_CP;
    if (lo < 0xD800 && hi >= 0xD800) {
        edge1(m, from, lo, 0xD7FF, to);
        if (hi > 0xDFFF) edge1(m, from, 0xE000, hi, to);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
        if (hi > 0xDFFF) edge1(m, from, 0xE000, hi, to);
    } else {
        edge1(m, from, lo, hi, to);
    }
}

void nfa_embed(nfa *m, const fsa *a, int32_t *s, int32_t *f) {
    int32_t base = m->n;
    for (int32_t q = 0; q < a->n; q++) nfa_state(m);
    *f = nfa_state(m);
    *s = base;
    if (m->oom) return;
    for (int32_t q = 0; q < a->n; q++) {
        for (int32_t i = a->e0[q]; i < a->e0[q + 1]; i++)
            edge1(m, base + q, a->edges[i].lo, a->edges[i].hi, base + a->edges[i].to);
        if (a->acc[q]) nfa_eps(m, base + q, *f);
    }
}

void nfa_free(nfa *m) {
    for (int32_t i = 0; i < m->n; i++) free(m->st[i].eps), free(m->st[i].ed);
    free(m->st);
    memset(m, 0, sizeof *m);
}

/* ---- subset construction ---- */

typedef struct sets {
    int32_t *pool; /* members of set k: pool[off[k] .. off[k + 1]) */
    int64_t n_pool, cap_pool;
    int64_t *off;
    int32_t n, cap;
    int32_t *hash;
    int32_t hcap;
} sets;

static uint64_t set_hash(const int32_t *s, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 32);
}

/* Index of set s[0..n) (sorted), added when new; -1 out of memory. */
static int32_t set_get(sets *ss, const int32_t *s, int32_t n, bool *is_new) {
    *is_new = false;
    if ((ss->n + 1) * 2 > ss->hcap) {
        int32_t nc = ss->hcap ? ss->hcap * 2 : 256;
        int32_t *h = malloc(sizeof(int32_t) * (size_t)nc);
        if (!h) return -1;
        for (int32_t i = 0; i < nc; i++) h[i] = -1;
        for (int32_t k = 0; k < ss->n; k++) {
            int32_t j =
                (int32_t)(set_hash(ss->pool + ss->off[k], (int32_t)(ss->off[k + 1] - ss->off[k])) & (uint64_t)(nc - 1));
            while (h[j] >= 0) j = (j + 1) & (nc - 1);
            h[j] = k;
        }
        free(ss->hash);
        ss->hash = h, ss->hcap = nc;
    }
    int32_t j = (int32_t)(set_hash(s, n) & (uint64_t)(ss->hcap - 1));
    while (ss->hash[j] >= 0) {
        int32_t k = ss->hash[j];
        if (ss->off[k + 1] - ss->off[k] == n && !memcmp(ss->pool + ss->off[k], s, sizeof(int32_t) * (size_t)n))
            return k;
        j = (j + 1) & (ss->hcap - 1);
    }
    if (ss->n + 2 > ss->cap) {
        int32_t nc = ss->cap ? ss->cap * 2 : 64;
        int64_t *o = realloc(ss->off, sizeof(int64_t) * (size_t)(nc + 1));
        if (!o) return -1;
        ss->off = o, ss->cap = nc;
        if (ss->n == 0) ss->off[0] = 0;
    }
    if (ss->n_pool + n > ss->cap_pool) {
        int64_t nc = ss->cap_pool ? ss->cap_pool * 2 : 1024;
        while (nc < ss->n_pool + n) nc *= 2;
        int32_t *p = realloc(ss->pool, sizeof(int32_t) * (size_t)nc);
        if (!p) return -1;
        ss->pool = p, ss->cap_pool = nc;
    }
    memcpy(ss->pool + ss->n_pool, s, sizeof(int32_t) * (size_t)n);
    ss->n_pool += n;
    ss->off[ss->n + 1] = ss->n_pool;
    ss->hash[j] = ss->n;
    *is_new = true;
    return ss->n++;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct scratch {
    uint32_t *mark;
    uint32_t stamp;
    int32_t *stack, *out;
    fsa_edge *ed;
    int32_t cap_ed;
    uint32_t *cut;
    int32_t cap_cut;
    int32_t *tg, *act;
    int32_t cap_tg;
} scratch;

static int cmp_edge(const void *a, const void *b) {
    const fsa_edge *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Epsilon closure of in[0..n) into sc->out (sorted); returns its size.
 * A set holding a universal state (it accepts every continuation) is that
 * state alone: what else the set could still match no longer matters, so
 * "anything may follow" after a match (re.search) does not multiply the
 * states. */
static int32_t closure(const nfa *m, scratch *sc, const int32_t *in, int32_t n, const uint8_t *univ) {
    if (++sc->stamp == 0) {
        memset(sc->mark, 0, sizeof(uint32_t) * (size_t)m->n);
        sc->stamp = 1;
    }
    int32_t sp = 0, no = 0;
    for (int32_t i = 0; i < n; i++)
        if (sc->mark[in[i]] != sc->stamp) sc->mark[in[i]] = sc->stamp, sc->stack[sp++] = in[i];
    while (sp) {
        int32_t q = sc->stack[--sp];
        sc->out[no++] = q;
        for (int32_t k = 0; k < m->st[q].n_eps; k++) {
            int32_t t = m->st[q].eps[k];
            if (sc->mark[t] != sc->stamp) sc->mark[t] = sc->stamp, sc->stack[sp++] = t;
        }
    }
    for (int32_t i = 0; i < no; i++)
        if (univ[sc->out[i]]) {
            sc->out[0] = sc->out[i];
            return 1;
        }
    qsort(sc->out, (size_t)no, sizeof(int32_t), cmp_i32);
    return no;
}

/* univ[q]: q loops on every code point and reaches final by epsilon moves
 * alone (so it accepts every continuation). */
static uint8_t *universal_states(const nfa *m, int32_t final, scratch *sc) {
    uint8_t *u = calloc((size_t)m->n, 1);
    fsa_edge *loops = NULL;
    int32_t cap = 0;
    if (!u) return NULL;
    for (int32_t q = 0; q < m->n; q++) {
        const nfa_st *s = &m->st[q];
        int32_t k = 0;
        for (int32_t i = 0; i < s->n_ed; i++) {
            if (s->ed[i].to != q) continue;
            if (k == cap) {
                fsa_edge *l = realloc(loops, sizeof(fsa_edge) * (size_t)(cap = cap * 2 + 8));
                if (!l) {
                    free(loops), free(u);
                    return NULL;
                }
                loops = l;
            }
            loops[k++] = s->ed[i];
        }
        if (!k) continue;
        qsort(loops, (size_t)k, sizeof(fsa_edge), cmp_edge);
        uint32_t need = 0; /* every code point but the surrogates, in order */
        for (int32_t i = 0; i < k && need <= FSA_MAX_CP; i++) {
            if (loops[i].lo > need) break;
            if (loops[i].hi >= need) need = loops[i].hi == 0xD7FF ? 0xE000 : loops[i].hi + 1;
        }
        if (need <= FSA_MAX_CP) continue;
        int32_t nc = closure(m, sc, &q, 1, u); /* u[q] is still 0: a plain closure */
        for (int32_t i = 0; i < nc; i++)
            if (sc->out[i] == final) u[q] = 1;
    }
    free(loops);
    return u;
}

static bool grow_scratch(scratch *sc, int32_t n_ed) {
    if (n_ed > sc->cap_ed) {
        int32_t nc = n_ed * 2;
        fsa_edge *e = realloc(sc->ed, sizeof(fsa_edge) * (size_t)nc);
        uint32_t *c = e ? realloc(sc->cut, sizeof(uint32_t) * (size_t)(2 * nc + 2)) : NULL;
        int32_t *t = c ? realloc(sc->tg, sizeof(int32_t) * (size_t)(nc + 1)) : NULL;
        int32_t *a = t ? realloc(sc->act, sizeof(int32_t) * (size_t)(nc + 1)) : NULL;
        if (e) sc->ed = e;
        if (c) sc->cut = c;
        if (t) sc->tg = t;
        if (a) sc->act = a;
        if (!e || !c || !t || !a) return false;
        sc->cap_ed = nc;
    }
    return true;
}

/* The raw DFA builder lives in fsa.c; this file builds the same layout
 * (states in creation order, edges contiguous per state) and hands it over
 * as an fsa that fsa.c finishes. */
fsa *fsa_from_parts(int32_t n, int32_t *e0, uint8_t *acc, fsa_edge *ed, int32_t n_ed, bool fail);

fsa *nfa_to_fsa(const nfa *m, int32_t start, int32_t final) {
    if (m->oom || start < 0 || final < 0) return NULL;
    sets ss = {0};
    scratch sc = {0};
    int32_t n_dfa = 0, cap_dfa = 0, n_ed = 0, cap_ed = 0;
    int32_t *e0 = NULL;
    uint8_t *acc = NULL;
    fsa_edge *ed = NULL;
    bool fail = false;
    uint8_t *univ = NULL;
    int64_t work = 0;
    sc.mark = calloc((size_t)m->n, sizeof(uint32_t));
    sc.stack = malloc(sizeof(int32_t) * (size_t)m->n);
    sc.out = malloc(sizeof(int32_t) * (size_t)m->n);
    if (!sc.mark || !sc.stack || !sc.out) goto oom;
    univ = universal_states(m, final, &sc);
    if (!univ) goto oom;
    bool nw;
    int32_t n0 = closure(m, &sc, &start, 1, univ);
    if (set_get(&ss, sc.out, n0, &nw) < 0) goto oom;
    for (int32_t q = 0; q < ss.n; q++) {
        if (q >= FSA_MAX_STATES) {
            tutti_set_error("automaton over %d states", FSA_MAX_STATES);
            fail = true;
            break;
        }
        if (q + 1 >= cap_dfa) {
            int32_t nc = cap_dfa ? cap_dfa * 2 : 64;
            int32_t *ne0 = realloc(e0, sizeof(int32_t) * (size_t)(nc + 1));
            if (ne0) e0 = ne0;
            uint8_t *na = ne0 ? realloc(acc, (size_t)nc) : NULL;
            if (na) acc = na;
            if (!ne0 || !na) goto oom;
            cap_dfa = nc;
        }
        n_dfa = q + 1;
        e0[q] = n_ed;
        const int32_t *mem = ss.pool + ss.off[q];
        int32_t nm = (int32_t)(ss.off[q + 1] - ss.off[q]);
        acc[q] = 0;
        int32_t ne = 0;
        for (int32_t k = 0; k < nm; k++) {
            acc[q] |= mem[k] == final || univ[mem[k]];
            ne += m->st[mem[k]].n_ed;
        }
        work += ne;
        if (!grow_scratch(&sc, ne + 1)) goto oom;
        ne = 0;
        for (int32_t k = 0; k < nm; k++)
            for (int32_t i = 0; i < m->st[mem[k]].n_ed; i++) sc.ed[ne++] = m->st[mem[k]].ed[i];
        if (!ne) continue;
        qsort(sc.ed, (size_t)ne, sizeof(fsa_edge), cmp_edge);
        int32_t nc = 0;
        for (int32_t i = 0; i < ne; i++) {
            sc.cut[nc++] = sc.ed[i].lo;
            if (sc.ed[i].hi < FSA_MAX_CP) sc.cut[nc++] = sc.ed[i].hi + 1;
        }
        qsort(sc.cut, (size_t)nc, sizeof(uint32_t), cmp_u32);
        int32_t u = 0;
        for (int32_t i = 0; i < nc; i++)
            if (!u || sc.cut[u - 1] != sc.cut[i]) sc.cut[u++] = sc.cut[i];
        nc = u;
        /* sweep: the edges covering the current piece are the active ones
         * (started at or before it, not ended) */
        int32_t next = 0, n_act = 0;
        int32_t *act = sc.act;
        for (int32_t c = 0; c < nc; c++) {
            uint32_t lo = sc.cut[c], hi = c + 1 < nc ? sc.cut[c + 1] - 1 : FSA_MAX_CP;
            int32_t k = 0;
            for (int32_t i = 0; i < n_act; i++)
                if (sc.ed[act[i]].hi >= lo) act[k++] = act[i];
            n_act = k;
            while (next < ne && sc.ed[next].lo <= lo) act[n_act++] = next++;
            if (!n_act) continue;
            for (int32_t i = 0; i < n_act; i++) sc.tg[i] = sc.ed[act[i]].to;
            work += n_act;
            if (work > NFA_MAX_WORK) {
                tutti_set_error("automaton too complex (over %d steps of its construction)", NFA_MAX_WORK);
                fail = true;
                goto done;
            }
            int32_t ncl = closure(m, &sc, sc.tg, n_act, univ);
            int32_t t = set_get(&ss, sc.out, ncl, &nw);
            if (t < 0) goto oom;
            if (n_ed > e0[q] && ed[n_ed - 1].to == t && ed[n_ed - 1].hi + 1 == lo) {
                ed[n_ed - 1].hi = hi;
                continue;
            }
            if (n_ed == cap_ed) {
                int32_t nce = cap_ed ? cap_ed * 2 : 256;
                fsa_edge *ne2 = realloc(ed, sizeof(fsa_edge) * (size_t)nce);
                if (!ne2) goto oom;
                ed = ne2, cap_ed = nce;
            }
            ed[n_ed++] = (fsa_edge){lo, hi, t};
        }
    }
    goto done;
oom:
    tutti_set_error("out of memory");
    fail = true;
done:
    free(ss.pool), free(ss.off), free(ss.hash);
    free(sc.mark), free(sc.stack), free(sc.out), free(sc.ed), free(sc.cut), free(sc.tg), free(sc.act), free(univ);
    return fsa_from_parts(n_dfa, e0, acc, ed, n_ed, fail);
}
