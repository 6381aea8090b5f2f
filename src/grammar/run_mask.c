/* The run path of token masks: states inside a run of one character class.
 *
 * Why: the trie scan (vocab_mask.c) costs a walk over every token the
 * state allows, ~2.5 ms for a 151k vocabulary inside a JSON string, and it
 * is paid once per automaton state.  Counted repetitions (maxLength,
 * {m,n}, formats) and every distinct context of a string make new states,
 * so a generation met that cost at almost every token.
 *
 * The idea (XGrammar's context-independent tokens, made exact with the
 * automaton): pick the state's run class R, the code points on which the
 * state moves uniformly (every stack's class holds all of R or none of it;
 * the stacks that hold it move, the others die), so all characters of R
 * lead to one successor state.  Following R from state S gives a chain
 * S = C0 -> C1 -> ... that ends (no stack holds R), loops (Ck+1 = Ck, as
 * in x*) or reaches the longest token.  Then:
 *   - a token made only of characters of R ("pure", n characters) is
 *     allowed iff the chain is alive for n steps: per vocabulary and R the
 *     pure tokens are precomputed as bitsets "n characters or fewer", so
 *     this part of the mask is one copy of a 19 KB bitset, whatever the
 *     count or the context;
 *   - every other token starts with j characters of R and then a byte b
 *     outside R: it is checked exactly, byte by byte, from Cj.  Those
 *     tokens are grouped by (j, b), so one transition rejects a whole group
 *     (e.g. control characters inside a string); what remains is the few
 *     tokens that close the string or escape, i.e. the context-dependent
 *     ones.
 * A state whose chain meets a stack that holds part of R falls back to the
 * trie scan, as does a state inside an unfinished UTF-8 character or one
 * whose class has few tokens (structural positions, where the scan is a
 * few microseconds anyway). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/error.h"

int32_t gm_run_min_nodes = 20000;
int32_t gv_big_group = 64, gv_pure_bits = 2048;

static bool in_ranges(const gr_range *r, int32_t n, uint32_t cp) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

const gr_range *gm_class_ranges(const tutti_grammar *g, int32_t cls, int32_t *n) {
    *n = g->classes[cls].n;
    return g->ranges + g->classes[cls].r0;
}

bool gm_covers_all(const tutti_grammar *g, int32_t cls, const gr_range *r, int32_t nr) {
    for (int32_t i = 0; i < nr; i++)
        if (!gr_class_covers(g, cls, r[i].lo, r[i].hi)) return false;
    return true;
}

bool gm_meets_any(const tutti_grammar *g, int32_t cls, const gr_range *r, int32_t nr) {
    for (int32_t i = 0; i < nr; i++)
        if (gr_class_meets(g, cls, r[i].lo, r[i].hi)) return true;
    return false;
}

static uint64_t class_size(const tutti_grammar *g, int32_t cls) {
    int32_t n;
    const gr_range *cr = gm_class_ranges(g, cls, &n);
    uint64_t size = 0;
    for (int32_t k = 0; k < n; k++) size += (uint64_t)cr[k].hi - cr[k].lo + 1;
    return size;
}

int32_t gm_run_top_class(const tutti_grammar_matcher *m, int32_t s) {
    const tutti_grammar *g = m->g;
    const gm_state *st = &m->st[s];
    if (st->rem) return -1;
    const int32_t *ids = m->pool + st->off;
    int32_t best = -1;
    uint64_t best_size = 0;
    for (int32_t i = 0; i < st->n; i++) {
        if (ids[i] == 0) continue;
        int32_t cls = g->elems[m->stk[ids[i]].pos].arg;
        uint64_t size = class_size(g, cls);
        if (size > best_size) best_size = size, best = cls;
    }
    return best;
}

static uint8_t lead_byte(uint32_t cp) {
    return cp < 0x80      ? (uint8_t)cp
           : cp < 0x800   ? (uint8_t)(0xC0 | (cp >> 6))
           : cp < 0x10000 ? (uint8_t)(0xE0 | (cp >> 12))
                          : (uint8_t)(0xF0 | (cp >> 18));
}

static int utf8_encode(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) return o[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return o[0] = (uint8_t)(0xC0 | (cp >> 6)), o[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (uint8_t)(0xE0 | (cp >> 12)), o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)),
               o[2] = (uint8_t)(0x80 | (cp & 0x3F)), 3;
    o[0] = (uint8_t)(0xF0 | (cp >> 18)), o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Trie nodes under the first bytes of R's characters: what a scan would
 * at most walk for the tokens that start in R. */
static int64_t run_nodes(const tutti_grammar_vocab *v, const gr_range *r, int32_t nr) {
    bool first[256] = {0};
    for (int32_t i = 0; i < nr; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi;
        for (uint32_t c = lo; c <= hi && c < 0x80; c++) first[c] = true;
        if (hi >= 0x80)
            for (int b = lead_byte(lo < 0x80 ? 0x80 : lo); b <= lead_byte(hi); b++) first[b] = true;
    }
    int64_t n = 0;
    for (int b = 0; b < 256; b++)
        if (first[b]) n += v->root_nodes[b];
    return n;
}

static void run_free(gv_run *t) {
    if (!t) return;
    free(t->ptok), free(t->pj0), free(t->r), free(t->cum), free(t->ltok), free(t->lnc), free(t->grp_j), free(t->grp0),
        free(t->grp_b), free(t->gtok), free(t->gpos), free(t->glcp);
    if (t->gpure)
        for (int32_t q = 0; q < t->n_grp; q++) free(t->gpure[q]);
    free(t->gpure), free(t->gsplit);
    free(t);
}

void gv_runs_free(tutti_grammar_vocab *v) {
    for (int32_t i = 0; i < v->n_runs; i++) run_free(v->runs[i]);
    free(v->runs);
    v->runs = NULL, v->n_runs = v->cap_runs = 0;
}

/* s[0..n) is an unfinished UTF-8 character (a lead byte and fewer
 * continuation bytes than it needs) that can still become a code point of
 * R: the interval of its completions, narrowed as the matcher does
 * (overlong and out-of-range forms excluded), meets R. */
static bool partial_in(const uint8_t *s, int32_t n, const gr_range *r, int32_t nr) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000}, max_cp[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    uint8_t b = s[0];
    int len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (!len || n >= len) return false;
    uint32_t v = b & (0x7Fu >> len);
    for (int32_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return false;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    /* every prefix's interval holds the final one, so checking the final
     * interval is enough (the matcher checks each) */
    int rem = len - n;
    uint32_t lo = v << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < min_cp[len]) lo = min_cp[len];
    if (hi > max_cp[len]) hi = max_cp[len];
    for (int32_t i = 0; i < nr && lo <= hi; i++)
        if (r[i].lo <= hi && r[i].hi >= lo) return true;
    return false;
}

/* The long pure tokens by length (insertion sort: a few hundred). */
static void sort_long(gv_run *t) {
    for (int32_t i = 1; i < t->n_long; i++) {
        int32_t id = t->ltok[i], nc = t->lnc[i], j = i;
        for (; j > 0 && t->lnc[j - 1] > nc; j--) t->ltok[j] = t->ltok[j - 1], t->lnc[j] = t->lnc[j - 1];
        t->ltok[j] = id, t->lnc[j] = nc;
    }
}

/* A token of a group: its bytes after the group's byte (the suffix), and
 * whether they are characters of R only (complete ones: "pure"). */
typedef struct suffix_ref {
    const uint8_t *p;
    int32_t n, id, pos;
    bool pure;
} suffix_ref;

static int cmp_suffix(const void *a, const void *b) {
    const suffix_ref *x = a, *y = b;
    if (x->pure != y->pure) return x->pure ? 1 : -1;
    int c = memcmp(x->p, y->p, (size_t)(x->n < y->n ? x->n : y->n));
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool suffix_pure(const suffix_ref *x, const gr_range *r, int32_t nr) {
    for (int32_t q = 0; q < x->n;) {
        uint32_t cp;
        int len = gr_utf8_decode(x->p + q, (size_t)(x->n - q), &cp);
        if (!len || !in_ranges(r, nr, cp)) return false;
        q += len;
    }
    return true;
}

/* Sorts each group's tokens by suffix and sets glcp (the common prefix of
 * consecutive suffixes, capped at 255), so that group_allowed walks them
 * as a trie: a suffix byte the grammar rejects skips every later token
 * that shares it.  Groups with j = 0 and under gv_big_group tokens are in
 * order already (the tokens that start with one byte, in the vocabulary's
 * byte order).  A group of at least gv_big_group tokens (e.g. every token
 * that starts with a space, for a class without the space) puts the tokens
 * with pure suffixes last, from gsplit[q] (and, gv_pure_bits of them or
 * more, as the bitset gpure[q] too): from a state where every string of P
 * is allowed they all are, one bitset OR or a list instead of thousands of
 * walks.  0 or -1. */
static int group_order(const tutti_grammar_vocab *v, gv_run *t) {
    int32_t n = t->grp0[t->n_grp], max = 0, W = v->n_words;
    /* the class P that suffixes are pure in: a JSON string's characters
     * when R is some of them (after a byte outside R, e.g. a letter that
     * continues a declared name, the key goes on as any string), else R */
    static const gr_range k_json[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, GR_MAX_CP}};
    bool in_json = true;
    for (int32_t i = 0; i < t->nr && in_json; i++) {
        bool in = false;
        for (int k = 0; k < 4 && !in; k++) in = t->r[i].lo >= k_json[k].lo && t->r[i].hi <= k_json[k].hi;
        in_json = in;
    }
    t->pr = in_json ? k_json : t->r, t->npr = in_json ? 4 : t->nr;
    t->glcp = malloc((size_t)(n > 0 ? n : 1));
    t->gsplit = malloc(sizeof(int32_t) * (size_t)(t->n_grp + 1));
    t->gpure = calloc((size_t)(t->n_grp + 1), sizeof *t->gpure);
    if (!t->glcp || !t->gsplit || !t->gpure) return -1;
    for (int32_t q = 0; q < t->n_grp; q++)
        if (t->grp0[q + 1] - t->grp0[q] > max) max = t->grp0[q + 1] - t->grp0[q];
    suffix_ref *sr = malloc(sizeof *sr * (size_t)(max > 0 ? max : 1));
    if (!sr) return -1;
    for (int32_t q = 0; q < t->n_grp; q++) {
        int32_t a = t->grp0[q], c = t->grp0[q + 1] - a;
        bool big = c >= gv_big_group;
        int32_t n_pure = 0;
        for (int32_t k = 0; k < c; k++) {
            int32_t id = t->gtok[a + k], pos = t->gpos[a + k] + 1;
            sr[k] = (suffix_ref){v->pbytes + v->poff[id] + pos, v->plen[id] - pos, id, pos - 1, false};
            if (big) n_pure += sr[k].pure = suffix_pure(&sr[k], t->pr, t->npr);
        }
        if (t->grp_j[q] > 0 || n_pure) qsort(sr, (size_t)c, sizeof *sr, cmp_suffix);
        t->gsplit[q] = a + c - n_pure;
        if (n_pure >= gv_pure_bits && !(t->gpure[q] = calloc((size_t)W, sizeof(uint64_t)))) {
            free(sr);
            return -1;
        }
        for (int32_t k = 0; k < c; k++) {
            int32_t l = 0;
            if (k > 0 && sr[k].pure == sr[k - 1].pure) {
                int32_t mx = sr[k].n < sr[k - 1].n ? sr[k].n : sr[k - 1].n;
                mx = mx < 255 ? mx : 255;
                while (l < mx && sr[k].p[l] == sr[k - 1].p[l]) l++;
            }
            t->gtok[a + k] = sr[k].id, t->gpos[a + k] = sr[k].pos, t->glcp[a + k] = (uint8_t)l;
            if (sr[k].pure && t->gpure[q]) t->gpure[q][sr[k].id >> 6] |= 1ull << (sr[k].id & 63);
        }
    }
    free(sr);
    return 0;
}

/* A hash of a class's ranges: the tables are found by it before their
 * ranges are compared (a lookup per class of every grammar). */
static uint64_t ranges_key(const gr_range *r, int32_t nr) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)nr;
    for (int32_t i = 0; i < nr; i++) {
        h ^= ((uint64_t)r[i].lo << 32 | r[i].hi) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
    }
    return h ^ (h >> 31);
}

/* The run table of R over v: one pass over every token's bytes. */
static gv_run *run_build(const tutti_grammar_vocab *v, const gr_range *r, int32_t nr) {
    int32_t nt = v->n_toks, W = v->n_words;
    gv_run *t = calloc(1, sizeof *t);
    int32_t *plen = malloc(sizeof(int32_t) * (size_t)(nt + 1)); /* chars of a pure token, else -1 */
    int32_t *bj = malloc(sizeof(int32_t) * (size_t)(nt + 1)), *bq = malloc(sizeof(int32_t) * (size_t)(nt + 1));
    int32_t *key_n = NULL;
    if (!t || !plen || !bj || !bq) goto oom;
    if (!(t->r = malloc(sizeof(gr_range) * (size_t)nr))) goto oom;
    memcpy(t->r, r, sizeof(gr_range) * (size_t)nr);
    t->nr = nr;
    t->key = ranges_key(r, nr);
    int32_t n_b = 0, n_p = 0;
    for (int32_t k = 0; k < nt; k++) {
        int32_t id = v->toks[k], L = v->plen[id], j = 0, q = 0;
        const uint8_t *p = v->pbytes + v->poff[id];
        while (q < L) {
            uint32_t cp;
            int len = gr_utf8_decode(p + q, (size_t)(L - q), &cp);
            if (!len || !in_ranges(r, nr, cp)) break;
            j++, q += len;
        }
        bj[k] = j, bq[k] = q;
        plen[k] = q == L ? j : partial_in(p + q, L - q, r, nr) ? -2 - j : -1;
        int32_t pc = plen[k] >= 0 ? j : plen[k] <= -2 ? j + 1 : -1;
        if (pc > t->max_pure) t->max_pure = pc;
        if (pc > t->max_j) t->max_j = pc;
        if (j > t->max_j) t->max_j = j;
        n_b += plen[k] == -1;
        n_p += plen[k] <= -2;
    }
    /* bitsets up to GV_CUM_MAX characters; the few longer pure tokens
     * (runs of spaces, dashes: up to 128 characters in Llama 3) are a
     * list by length instead, so a table is ~1.3 MB, not ~3 MB */
    t->n_cum = t->max_pure < GV_CUM_MAX ? t->max_pure : GV_CUM_MAX;
    int32_t n_long = 0;
    for (int32_t k = 0; k < nt; k++) {
        int32_t pc = plen[k] >= 0 ? plen[k] : plen[k] <= -2 ? -plen[k] - 1 : -1;
        n_long += pc > t->n_cum;
    }
    t->ltok = malloc(sizeof(int32_t) * (size_t)(n_long + 1));
    t->lnc = malloc(sizeof(int32_t) * (size_t)(n_long + 1));
    if (!t->ltok || !t->lnc) goto oom;
    t->cum = calloc((size_t)(t->n_cum + 1) * (size_t)W, sizeof(uint64_t));
    t->gtok = malloc(sizeof(int32_t) * (size_t)(n_b + 1));
    t->gpos = malloc(sizeof(int32_t) * (size_t)(n_b + 1));
    /* counting sort of the other tokens by key j * 256 + b */
    int64_t nkeys = ((int64_t)t->max_j + 1) * 256;
    key_n = calloc((size_t)nkeys + 1, sizeof(int32_t));
    t->ptok = malloc(sizeof(int32_t) * (size_t)(n_p + 1));
    t->pj0 = calloc((size_t)t->max_j + 2, sizeof(int32_t));
    if (!t->cum || !t->gtok || !t->gpos || !key_n || !t->ptok || !t->pj0) goto oom;
    for (int32_t k = 0; k < nt; k++) {
        int32_t id = v->toks[k];
        int32_t pc = plen[k] >= 0 ? plen[k] : plen[k] <= -2 ? -plen[k] - 1 : -1;
        if (pc > t->n_cum) t->ltok[t->n_long] = id, t->lnc[t->n_long++] = pc;
        else if (pc >= 0) t->cum[(size_t)pc * W + (id >> 6)] |= 1ull << (id & 63);
        if (plen[k] <= -2) t->pj0[-plen[k] - 2 + 1]++;
        else if (plen[k] == -1) key_n[(int64_t)bj[k] * 256 + v->pbytes[v->poff[id] + bq[k]] + 1]++;
    }
    sort_long(t);
    for (int32_t n = 1; n <= t->n_cum; n++)
        for (int32_t i = 0; i < W; i++) t->cum[(size_t)n * W + i] |= t->cum[(size_t)(n - 1) * W + i];
    int32_t n_grp = 0;
    for (int64_t q = 1; q <= nkeys; q++) n_grp += key_n[q] > 0;
    t->grp_j = malloc(sizeof(int32_t) * (size_t)(n_grp + 1));
    t->grp0 = malloc(sizeof(int32_t) * (size_t)(n_grp + 1));
    t->grp_b = malloc((size_t)(n_grp + 1));
    if (!t->grp_j || !t->grp0 || !t->grp_b) goto oom;
    int32_t g = 0, acc = 0;
    for (int64_t q = 0; q < nkeys; q++) {
        int32_t c = key_n[q + 1];
        key_n[q + 1] = acc; /* now: first slot of key q */
        if (c) {
            t->grp_j[g] = (int32_t)(q / 256), t->grp_b[g] = (uint8_t)(q % 256), t->grp0[g] = acc;
            g++;
        }
        acc += c;
    }
    t->grp0[g] = acc;
    t->n_grp = g;
    for (int32_t j = 0; j <= t->max_j; j++) t->pj0[j + 1] += t->pj0[j];
    int32_t *pfill = malloc(sizeof(int32_t) * (size_t)(t->max_j + 1));
    if (!pfill) goto oom;
    memcpy(pfill, t->pj0, sizeof(int32_t) * (size_t)(t->max_j + 1));
    for (int32_t k = 0; k < nt; k++)
        if (plen[k] <= -2) t->ptok[pfill[-plen[k] - 2]++] = v->toks[k];
    free(pfill);
    for (int32_t k = 0; k < nt; k++) {
        if (plen[k] != -1) continue;
        int32_t id = v->toks[k];
        int64_t q = (int64_t)bj[k] * 256 + v->pbytes[v->poff[id] + bq[k]];
        int32_t slot = key_n[q + 1]++;
        t->gtok[slot] = id, t->gpos[slot] = bq[k];
    }
    if (group_order(v, t) < 0) goto oom;
    free(plen), free(bj), free(bq), free(key_n);
    return t;
oom:
    free(plen), free(bj), free(bq), free(key_n);
    run_free(t);
    return NULL;
}

/* Tables kept per vocabulary (~1.3 MB each for 128k tokens, so at most
 * ~125 MB; MaskBench's schemas meet over 32 distinct large classes, and a
 * class without a table costs a full trie scan, ms, per new state): a grammar
 * with more distinct large classes than this gets the trie scan for the
 * others instead of unbounded memory and set-up time. */

/* The run table of R, made on first use (one per vocabulary and class);
 * NULL + *full when the vocabulary has GV_MAX_RUNS tables already, NULL
 * alone when out of memory. */
static gv_run *run_get(const tutti_grammar_vocab *cv, const gr_range *r, int32_t nr, bool *full) {
    tutti_grammar_vocab *v = (tutti_grammar_vocab *)cv; /* the cache is internal and locked */
    gv_run *t = NULL;
    uint64_t key = ranges_key(r, nr);
    *full = false;
    pthread_mutex_lock(&v->lock);
    for (int32_t i = 0; i < v->n_runs && !t; i++)
        if (v->runs[i]->key == key && v->runs[i]->nr == nr && !memcmp(v->runs[i]->r, r, sizeof(gr_range) * (size_t)nr))
            t = v->runs[i];
    if (!t && v->n_runs >= GV_MAX_RUNS) {
        *full = true;
        pthread_mutex_unlock(&v->lock);
        return NULL;
    }
    if (!t && v->n_runs == v->cap_runs) {
        int32_t nc = v->cap_runs ? v->cap_runs * 2 : 8;
        gv_run **nv = realloc(v->runs, sizeof(gv_run *) * (size_t)nc);
        if (nv) v->runs = nv, v->cap_runs = nc;
    }
    if (!t && v->n_runs < v->cap_runs && (t = run_build(v, r, nr))) {
        v->runs[v->n_runs++] = t;
    }
    pthread_mutex_unlock(&v->lock);
    return t;
}

/* The run table of R if the vocabulary has one already. */
static const gv_run *run_find(const tutti_grammar_vocab *cv, const gr_range *r, int32_t nr) {
    tutti_grammar_vocab *v = (tutti_grammar_vocab *)cv;
    const gv_run *t = NULL;
    uint64_t key = ranges_key(r, nr);
    pthread_mutex_lock(&v->lock);
    for (int32_t i = 0; i < v->n_runs && !t; i++)
        if (v->runs[i]->key == key && v->runs[i]->nr == nr && !memcmp(v->runs[i]->r, r, sizeof(gr_range) * (size_t)nr))
            t = v->runs[i];
    pthread_mutex_unlock(&v->lock);
    return t;
}

static uint64_t memo_hash(const gv_run *t, int32_t nx, int32_t q) {
    uint64_t h = (uint64_t)(uintptr_t)t * 0x9E3779B97F4A7C15ull ^ ((uint64_t)(uint32_t)nx << 32 | (uint32_t)q);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

static int memo_grow(tutti_grammar_matcher *m) {
    int32_t nc = m->gmemo_cap ? m->gmemo_cap * 2 : 1024;
    gm_gmemo *n = calloc((size_t)nc, sizeof *n);
    if (!n) return -1;
    for (int32_t i = 0; i < m->gmemo_cap; i++) {
        const gm_gmemo *e = &m->gmemo[i];
        if (!e->t) continue;
        uint64_t j = memo_hash(e->t, e->nx, e->q) & (uint64_t)(nc - 1);
        while (n[j].t) j = (j + 1) & (uint64_t)(nc - 1);
        n[j] = *e;
    }
    free(m->gmemo);
    m->gmemo = n, m->gmemo_cap = nc;
    return 0;
}

#define GM_CLOSED_MAX 64 /* states a closure check explores before it gives up */

/* Every string of P's characters (t->pr, the class suffixes are pure in)
 * is allowed from state nx: each state that P-strings reach from nx takes
 * every character of P.  The states are explored breadth first, one
 * character per interval of P on which the stacks' classes agree (those
 * characters lead to one state); more than GM_CLOSED_MAX states, a pending
 * character or a character of P no stack takes: false.  E.g. after a byte
 * outside R inside a free string (nx loops on P), or inside a small tree
 * of declared names of an other-name key (its nodes all lead back to the
 * free name's loop).  Remembered per (t,
 * nx) in the group memo (q = -1); -3 out of memory. */
static int r_closed_now(tutti_grammar_matcher *m, const gv_run *t, int32_t nx) {
    const tutti_grammar *g = m->g;
    enum { H = 2 * GM_CLOSED_MAX };
    int32_t seen[GM_CLOSED_MAX], n_seen = 1, head = 0, hs[H];
    for (int32_t i = 0; i < H; i++) hs[i] = -1;
    seen[0] = nx, hs[(uint32_t)nx * 2654435761u % H] = nx;
    while (head < n_seen) {
        int32_t x = seen[head++];
        if (m->st[x].rem || t->npr > 256) return 0;
        /* the interval starts: P's own and those of the stacks' classes */
        uint32_t cut[512];
        int32_t n_cut = 0;
        for (int32_t i = 0; i < t->npr && n_cut < 510; i++) cut[n_cut++] = t->pr[i].lo;
        int32_t n = m->st[x].n;
        for (int32_t i = 0; i < n; i++) {
            int32_t id = m->pool[m->st[x].off + i];
            if (id == 0) continue;
            int32_t nc;
            const gr_range *cr = gm_class_ranges(g, g->elems[m->stk[id].pos].arg, &nc);
            for (int32_t k = 0; k < nc; k++) {
                if (n_cut >= 510) return 0;
                cut[n_cut++] = cr[k].lo;
                if (cr[k].hi < GR_MAX_CP) cut[n_cut++] = cr[k].hi + 1;
            }
        }
        for (int32_t c = 0; c < n_cut; c++) {
            uint32_t cp = cut[c];
            if (!in_ranges(t->pr, t->npr, cp) || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
            uint8_t rep[4];
            int nrep = utf8_encode(cp, rep);
            int32_t y = x;
            for (int b = 0; b < nrep && y >= 0; b++) y = gm_step(m, y, rep[b]);
            if (y == -3) return -3;
            if (y < 0) return 0;
            uint32_t h = (uint32_t)y * 2654435761u % H;
            while (hs[h] >= 0 && hs[h] != y) h = (h + 1) % H;
            if (hs[h] == y) continue;
            if (n_seen == GM_CLOSED_MAX) return 0;
            hs[h] = y, seen[n_seen++] = y;
        }
    }
    return 1;
}

/* A free slot of the memo for (t, nx, q), which it does not hold (the
 * table has room: group_allowed grew it). */
static uint64_t memo_slot(const tutti_grammar_matcher *m, const gv_run *t, int32_t nx, int32_t q) {
    uint64_t j = memo_hash(t, nx, q) & (uint64_t)(m->gmemo_cap - 1);
    while (m->gmemo[j].t) j = (j + 1) & (uint64_t)(m->gmemo_cap - 1);
    return j;
}

/* The tokens of group q of t allowed once its first byte led to state nx
 * (computed on first use by a walk of the group's sorted suffixes, then
 * remembered; with pure set, the group's pure suffixes are all allowed and
 * not in the list); q = -1: the closure check of nx (n: 1 or 0).  NULL:
 * out of memory. */
static const gm_gmemo *group_allowed(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, const gv_run *t, int32_t q,
                                     int32_t nx) {
    if ((int64_t)(m->gmemo_n + 1) * 2 > m->gmemo_cap && memo_grow(m) < 0) return NULL;
    uint64_t j = memo_hash(t, nx, q) & (uint64_t)(m->gmemo_cap - 1);
    while (m->gmemo[j].t) {
        const gm_gmemo *e = &m->gmemo[j];
        if (e->t == t && e->nx == nx && e->q == q) return e;
        j = (j + 1) & (uint64_t)(m->gmemo_cap - 1);
    }
    if (q < 0) {
        int rc = r_closed_now(m, t, nx);
        if (rc < 0) return NULL;
        j = memo_slot(m, t, nx, q);
        m->gmemo[j] = (gm_gmemo){t, nx, q, 0, rc, false};
        m->gmemo_n++;
        return &m->gmemo[j];
    }
    int32_t cnt = t->grp0[q + 1] - t->grp0[q];
    bool pure = false;
    if (t->gsplit[q] < t->grp0[q + 1]) {
        const gm_gmemo *c = group_allowed(m, v, t, -1, nx); /* whether P-strings are free from nx */
        if (!c) return NULL;
        pure = c->n;
    }
    if (m->n_gids + cnt > m->cap_gids) {
        int64_t nc = m->cap_gids ? m->cap_gids * 2 : 4096;
        while (nc < m->n_gids + cnt) nc *= 2;
        int32_t *g = realloc(m->gids, sizeof(int32_t) * (size_t)nc);
        if (!g) return NULL;
        m->gids = g, m->cap_gids = nc;
    }
    int64_t off = m->n_gids;
    int32_t n = 0;
    m->n_pure += pure;
    /* the suffixes in sorted order, as a trie: walk[d] is the state after
     * the first d bytes of the current suffix, valid up to depth ok (what
     * the previous suffix reached); a suffix rejected at byte d skips the
     * following ones that share its first d + 1 bytes (glcp > d) */
    int32_t *walk = m->walk, ok = 0;
    walk[0] = nx;
    for (int32_t k = t->grp0[q], e = pure ? t->gsplit[q] : t->grp0[q + 1]; k < e;) {
        int32_t id = t->gtok[k], pos = t->gpos[k] + 1, L = v->plen[id] - pos, x = nx;
        const uint8_t *p = v->pbytes + v->poff[id] + pos;
        int32_t d = t->glcp[k] < ok ? t->glcp[k] : ok;
        for (; d < L; d++) {
            if ((x = gm_step(m, walk[d], p[d])) < 0) break;
            walk[d + 1] = x;
        }
        if (x == -3) return NULL;
        k++;
        if (d == L) {
            m->gids[off + n++] = id;
            ok = L;
        } else {
            ok = d;
            while (k < e && t->glcp[k] > d) k++;
        }
    }
    m->n_gids += n;
    m->mask_bytes += sizeof(int32_t) * (size_t)n + sizeof(gm_gmemo) * 2;
    j = memo_slot(m, t, nx, q); /* the closure check may have added an entry */
    m->gmemo[j] = (gm_gmemo){t, nx, q, off, n, pure};
    m->gmemo_n++;
    return &m->gmemo[j];
}

/* The tokens that start with a byte of bx come from the table of the
 * superset S, which read their first character as one of S: they are
 * cleared and computed by scanning their subtrees from s (the branches of
 * the stacks whose classes hold S's other characters, e.g. the declared
 * names next to an other-name key).  Every character of S outside the
 * class starts with a byte of bx, so the table's answer for the remaining
 * tokens is exact.  Returns 1 or -3. */
static int sub_first(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s, const uint64_t *bx,
                     uint64_t *bits) {
    m->n_sub++;
    for (int b = 0; b < 256; b++) {
        if (!(bx[b >> 6] >> (b & 63) & 1)) continue;
        for (int32_t k = v->root_k0[b]; k < v->root_k1[b]; k++) bits[v->toks[k] >> 6] &= ~(1ull << (v->toks[k] & 63));
        if (gm_scan_first(m, v, s, (uint8_t)b, bits) < 0) return -3;
    }
    return 1;
}

/* The surrogate code points (U+D800..U+DFFF) in r. */
static uint64_t surrogates(const gr_range *r, int32_t nr) {
    uint64_t n = 0;
    for (int32_t i = 0; i < nr; i++) {
        uint32_t lo = r[i].lo > 0xD800 ? r[i].lo : 0xD800, hi = r[i].hi < 0xDFFF ? r[i].hi : 0xDFFF;
        if (lo <= hi) n += hi - lo + 1;
    }
    return n;
}

/* Marks in first[] the first bytes of the code points lo..hi. */
static void mark_first(bool *first, uint32_t lo, uint32_t hi) {
    for (uint32_t c = lo; c <= hi && c < 0x80; c++) first[c] = true;
    if (hi >= 0x80)
        for (int b = lead_byte(lo < 0x80 ? 0x80 : lo); b <= lead_byte(hi); b++) first[b] = true;
}

/* The first bytes of the code points of class c outside r (c holds r). */
static void diff_first(const tutti_grammar *g, int32_t c, const gr_range *r, int32_t nr, bool *first) {
    int32_t nc;
    const gr_range *cr = gm_class_ranges(g, c, &nc);
    for (int32_t i = 0; i < nc; i++) {
        uint64_t lo = cr[i].lo;
        for (int32_t k = 0; k < nr && lo <= cr[i].hi; k++) {
            if (r[k].hi < lo || r[k].lo > cr[i].hi) continue;
            if (r[k].lo > lo) mark_first(first, (uint32_t)lo, r[k].lo - 1);
            lo = (uint64_t)r[k].hi + 1;
        }
        if (lo <= cr[i].hi) mark_first(first, (uint32_t)lo, cr[i].hi);
    }
}

/* Why a superset: a JSON schema's other-name keys make one class per node
 * of the tree of declared names ("string character minus the letters that
 * continue a name"); a table each would fill GV_MAX_RUNS, and a table costs
 * as much as a scan.  Such a class R is served from the table of a class S
 * of the grammar that holds R and whose other characters start with bytes
 * under few trie nodes (at most a quarter of R's: R's own table would
 * check those tokens in its groups, and at every later character too, at
 * more cost than the scan): those tokens are scanned (sub_first).  The largest such S is taken, so the nested classes of a
 * tree of names share one table (the string character's: the class of the
 * states after the first character; surrogates, which no token holds, do
 * not count, so S is the class without them when there is one).  Returns S
 * (its first bytes outside R in first[]) or -1. */
static int32_t superset_of(const tutti_grammar *g, const tutti_grammar_vocab *v, int32_t cls, const gr_range *r,
                           int32_t nr, const int32_t *cand, int32_t n_cand, bool *best_first) {
    int32_t best = -1;
    int64_t max_cost = run_nodes(v, r, nr) / 4, best_cost = 0;
    uint64_t best_size = 0;
    for (int32_t ci = 0; ci < (cand ? n_cand : g->n_classes); ci++) {
        int32_t c = cand ? cand[ci] : ci;
        int32_t nc;
        const gr_range *cr = gm_class_ranges(g, c, &nc);
        if (c == cls || nc == 0 || !gm_covers_all(g, c, r, nr)) continue;
        bool first[256] = {0};
        diff_first(g, c, r, nr, first);
        int64_t cost = 0;
        for (int b = 0; b < 256; b++) cost += first[b] ? v->root_nodes[b] : 0;
        uint64_t size = class_size(g, c) - surrogates(cr, nc);
        if (cost <= max_cost && (size > best_size || (size == best_size && cost < best_cost)) &&
            run_nodes(v, cr, nc) >= gm_run_min_nodes)
            best = c, best_cost = cost, best_size = size, memcpy(best_first, first, sizeof first);
    }
    return best;
}

/* Sets cls_run[cls] (and cls_bx[cls]: a superset's table); 0 or -3. */
static int class_table(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t cls, const gr_range *r,
                       int32_t nr) {
    const tutti_grammar *g = m->g;
    const gv_run *t = run_find(v, r, nr);
    if (!t && run_nodes(v, r, nr) >= gm_run_min_nodes) {
        bool first[256] = {0}, full = false;
        if (!m->big_cls) {
            /* the classes that may serve as a superset (those large enough
             * for a table of their own), once per matcher: a grammar's
             * thousands of small classes are not looked at again for each
             * class's first mask */
            if (!(m->big_cls = malloc(sizeof(int32_t) * (size_t)(g->n_classes + 1)))) return -3;
            m->n_big = 0;
            for (int32_t c = 0; c < g->n_classes; c++) {
                int32_t nc;
                const gr_range *cr = gm_class_ranges(g, c, &nc);
                if (nc > 0 && run_nodes(v, cr, nc) >= gm_run_min_nodes) m->big_cls[m->n_big++] = c;
            }
        }
        int32_t best = superset_of(g, v, cls, r, nr, m->big_cls, m->n_big, first), nc;
        const gr_range *cr = best >= 0 ? gm_class_ranges(g, best, &nc) : NULL;
        if (cr && (t = run_get(v, cr, nc, &full))) {
            for (int b = 0; b < 256; b++)
                if (first[b]) m->cls_bx[cls][b >> 6] |= 1ull << (b & 63);
            /* bx empty: S is R as a set, its table is R's */
        } else if (cr && !full) return -3;
        if (!t) t = run_get(v, r, nr, &full);
        if (!t && !full) return -3;
    }
    m->cls_run[cls] = t ? t : GM_NO_RUN;
    return 0;
}

/* A superset whose characters split the states after the first (e.g. S =
 * [a-z0-9] for R = [a-z] in [a-z]+), or a state that R leads back to: R
 * gets its own table from now on, as without supersets. */
static int drop_superset(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s, int32_t cls,
                         const gr_range *r, int32_t nr) {
    memset(m->cls_bx[cls], 0, sizeof m->cls_bx[cls]);
    bool full = false;
    const gv_run *t = run_get(v, r, nr, &full);
    if (!t && !full) return -3;
    m->cls_run[cls] = t ? t : GM_NO_RUN;
    return gm_run_mask(m, v, s);
}

int gm_run_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s) {
    if (gm_run_min_nodes < 0) return 0;
    const tutti_grammar *g = m->g;
    int32_t cls = gm_run_top_class(m, s), nr;
    if (cls < 0) return 0;
    const gr_range *r = gm_class_ranges(g, cls, &nr);
    /* the class's table, looked up once per matcher (run_get locks and
     * compares ranges: a tenth of the time of wide schemas' masks) */
    if (!m->cls_run && !(m->cls_run = calloc((size_t)g->n_classes, sizeof *m->cls_run))) return -3;
    if (!m->cls_bx && !(m->cls_bx = calloc((size_t)g->n_classes, sizeof *m->cls_bx))) return -3;
    if (!m->cls_run[cls]) {
        int rc = class_table(m, v, cls, r, nr);
        if (rc < 0) return rc;
    }
    const gv_run *t = m->cls_run[cls];
    if (t == GM_NO_RUN) return 0;
    const uint64_t *bx = m->cls_bx[cls];
    int32_t cls_s = cls;
    bool sub = bx[0] | bx[1] | bx[2] | bx[3];
    if (m->cap_chain < t->max_j + 1) {
        int32_t *c = realloc(m->chain, sizeof(int32_t) * (size_t)(t->max_j + 1));
        if (!c) return -3;
        m->chain = c, m->cap_chain = t->max_j + 1;
    }
    uint8_t rep[4], rep0[4];
    int nrep = utf8_encode(t->r[0].lo, rep), nrep0 = utf8_encode(r[0].lo, rep0);
    int32_t *chain = m->chain;
    chain[0] = s;
    int32_t N = 0, loop = -1;
    for (int32_t j = 0; j < t->max_j; j++) {
        /* with a superset's table, the first character is one of the class
         * (the others start with a byte of bx: scanned apart below) */
        const gr_range *rj = j == 0 ? r : t->r;
        int32_t nrj = j == 0 ? nr : t->nr, T = chain[j];
        const gm_state *st = &m->st[T];
        if (st->rem) return 0;
        const int32_t *ids = m->pool + st->off;
        bool cover = false;
        for (int32_t i = 0; i < st->n; i++) {
            if (ids[i] == 0) continue;
            int32_t cls = g->elems[m->stk[ids[i]].pos].arg;
            if (gm_covers_all(g, cls, rj, nrj)) cover = true;
            else if (gm_meets_any(g, cls, rj, nrj)) /* not uniform: R splits here */
                return sub && j > 0 ? drop_superset(m, v, s, cls_s, r, nr) : 0;
        }
        if (!cover) break; /* no stack takes R: the run ends after j characters */
        int32_t x = T;
        for (int b = 0; b < (j ? nrep : nrep0) && x >= 0; b++) x = gm_step(m, x, j ? rep[b] : rep0[b]);
        if (x == -3) return -3;
        if (x < 0) return 0;
        if (x == T) {
            /* R loops on itself (e.g. [^w"]*): later characters are R's too */
            if (sub && j == 0) return drop_superset(m, v, s, cls_s, r, nr);
            loop = j;
            break;
        }
        chain[j + 1] = x;
        N = j + 1;
    }
    if (loop >= 0) N = INT32_MAX;
    int32_t W = v->n_words;
    uint64_t *bits = m->bits;
    int32_t lim = N < t->max_pure ? N : t->max_pure;
    memcpy(bits, t->cum + (size_t)(lim < t->n_cum ? lim : t->n_cum) * W, sizeof(uint64_t) * (size_t)W);
    for (int32_t k = 0; k < t->n_long && t->lnc[k] <= lim; k++) bits[t->ltok[k] >> 6] |= 1ull << (t->ltok[k] & 63);
    if (N < t->max_j) /* finite run: partial tokens after exactly N characters */
        for (int32_t k = t->pj0[N]; k < t->pj0[N + 1]; k++) {
            int32_t id = t->ptok[k], L = v->plen[id], x = chain[0]; /* the whole token */
            const uint8_t *p = v->pbytes + v->poff[id];
            for (int32_t i = 0; i < L && x >= 0; i++) x = gm_step(m, x, p[i]);
            if (x == -3) return -3;
            if (x >= 0) bits[id >> 6] |= 1ull << (id & 63);
        }
    for (int32_t q = 0; q < t->n_grp; q++) {
        int32_t j = t->grp_j[q];
        if (j > N) break; /* groups are sorted by j */
        int32_t nx = gm_step(m, chain[loop >= 0 && j > loop ? loop : j], t->grp_b[q]);
        if (nx == -3) return -3;
        if (nx < 0) continue;
        const gm_gmemo *g = group_allowed(m, v, t, q, nx);
        if (!g) return -3;
        for (int32_t k = 0; k < g->n; k++) {
            int32_t id = m->gids[g->off + k];
            bits[id >> 6] |= 1ull << (id & 63);
        }
        if (g->pure && t->gpure[q])
            for (int32_t i = 0; i < W; i++) bits[i] |= t->gpure[q][i];
        else if (g->pure)
            for (int32_t k = t->gsplit[q]; k < t->grp0[q + 1]; k++) bits[t->gtok[k] >> 6] |= 1ull << (t->gtok[k] & 63);
    }
    if (sub) return sub_first(m, v, s, bx, bits);
    return 1;
}

int gm_run_prepare(const tutti_grammar_vocab *v, const tutti_grammar *g) {
    for (int32_t c = 0; c < g->n_classes; c++) {
        int32_t nr;
        const gr_range *r = gm_class_ranges(g, c, &nr);
        bool full = false, first[256];
        if (nr > 0 && run_nodes(v, r, nr) >= gm_run_min_nodes && superset_of(g, v, c, r, nr, NULL, 0, first) < 0 &&
            !run_get(v, r, nr, &full))
            return full ? 0 : -3;
    }
    return 0;
}
