/* Token masks: which tokens of a vocabulary the grammar accepts next.
 *
 * The vocabulary's pieces (the exact bytes each token writes) form a byte
 * trie stored in preorder: node i has a byte, a depth and the end of its
 * subtree.  From grammar state S one scan over the nodes finds every token
 * whose bytes the grammar accepts: a node's state is the transition of its
 * parent's (kept in walk[depth]) on its byte; a rejected node skips its
 * whole subtree.  Transitions are memoised by the matcher, so the scan
 * costs a table lookup per visited node; its result is cached per state
 * (the ids of the smaller side: allowed or rejected), so a state seen
 * again costs only writing -inf.  End-of-generation tokens are allowed
 * exactly when the grammar is complete; tokens that write no bytes
 * (control tokens) never are, as in llama.cpp. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/error.h"

#define GM_MASK_BUDGET ((size_t)256 << 20) /* cached masks of one matcher; cleared when exceeded */

typedef struct piece_ref {
    const char *p;
    int32_t len, id;
} piece_ref;

static int cmp_piece(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    int32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, (size_t)n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void tutti_grammar_vocab_free(tutti_grammar_vocab *v) {
    if (!v) return;
    gv_runs_free(v);
    pthread_mutex_destroy(&v->lock);
    free(v->byte), free(v->depth), free(v->end), free(v->tok0), free(v->ntok), free(v->toks), free(v->eog);
    free(v->pbytes), free(v->poff), free(v->plen);
    free(v);
}

tutti_grammar_vocab *tutti_grammar_vocab_from_pieces(int32_t n_vocab, const char *const *pieces, const int32_t *lens,
                                                     const bool *eog) {
    if (n_vocab <= 0 || !pieces || !lens) {
        tutti_set_error("grammar vocabulary: no tokens");
        return NULL;
    }
    tutti_grammar_vocab *v = calloc(1, sizeof *v);
    piece_ref *pr = malloc(sizeof(piece_ref) * (size_t)n_vocab);
    if (!v || !pr) {
        free(v), free(pr);
        tutti_set_error("grammar vocabulary: out of memory");
        return NULL;
    }
    pthread_mutex_init(&v->lock, NULL);
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 63) / 64;
    int32_t np = 0, n_eog = 0;
    int64_t total = 1;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (eog && eog[i]) {
            n_eog++;
            continue;
        }
        if (lens[i] <= 0 || !pieces[i]) continue;
        pr[np++] = (piece_ref){pieces[i], lens[i], i};
        total += lens[i];
    }
    if (total > INT32_MAX / 2) {
        tutti_set_error("grammar vocabulary: pieces too long");
        goto fail;
    }
    qsort(pr, (size_t)np, sizeof *pr, cmp_piece);
    v->eog = malloc(sizeof(int32_t) * (size_t)(n_eog + 1));
    v->toks = malloc(sizeof(int32_t) * (size_t)(np + 1));
    /* nodes <= 1 + total bytes (an upper bound; shrunk below) */
    v->byte = malloc((size_t)total);
    v->depth = malloc(sizeof(int32_t) * (size_t)total);
    v->end = malloc(sizeof(int32_t) * (size_t)total);
    v->tok0 = malloc(sizeof(int32_t) * (size_t)total);
    v->ntok = calloc((size_t)total, sizeof(int32_t));
    v->pbytes = malloc((size_t)total);
    v->poff = calloc((size_t)n_vocab, sizeof(int64_t));
    v->plen = calloc((size_t)n_vocab, sizeof(int32_t));
    int32_t max_len = 0;
    for (int32_t k = 0; k < np; k++)
        if (pr[k].len > max_len) max_len = pr[k].len;
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(max_len + 1));
    if (!v->eog || !v->toks || !v->byte || !v->depth || !v->end || !v->tok0 || !v->ntok || !path || !v->pbytes ||
        !v->poff || !v->plen) {
        free(path);
        goto oom;
    }
    if (eog)
        for (int32_t i = 0; i < n_vocab; i++)
            if (eog[i]) v->eog[v->n_eog++] = i;
    int64_t po = 0;
    for (int32_t k = 0; k < np; k++) {
        memcpy(v->pbytes + po, pr[k].p, (size_t)pr[k].len);
        v->poff[pr[k].id] = po, v->plen[pr[k].id] = pr[k].len;
        po += pr[k].len;
    }
    int32_t nn = 1, plen = 0; /* current path: path[0..plen] node ids, path[0] = root */
    v->byte[0] = 0, v->depth[0] = 0, v->tok0[0] = 0;
    path[0] = 0;
    for (int32_t k = 0; k < np; k++) {
        const piece_ref *cur = &pr[k];
        int32_t l = 0;
        if (k > 0) {
            const piece_ref *prev = &pr[k - 1];
            int32_t mx = prev->len < cur->len ? prev->len : cur->len;
            while (l < mx && prev->p[l] == cur->p[l]) l++;
        }
        if (l > plen) l = plen;
        for (int32_t d = plen; d > l; d--) v->end[path[d]] = nn; /* close subtrees left behind */
        for (int32_t d = l + 1; d <= cur->len; d++) {
            v->byte[nn] = (uint8_t)cur->p[d - 1];
            v->depth[nn] = d;
            v->tok0[nn] = 0;
            path[d] = nn++;
        }
        plen = cur->len;
        int32_t node = path[plen];
        if (v->ntok[node] == 0) v->tok0[node] = k;
        v->ntok[node]++;
        v->toks[k] = cur->id;
    }
    for (int32_t d = plen; d >= 0; d--) v->end[path[d]] = nn;
    free(path);
    v->n_nodes = nn;
    v->max_depth = max_len;
    v->n_toks = np;
    for (int32_t i = 1; i < nn; i = v->end[i]) v->root_nodes[v->byte[i]] = v->end[i] - i, v->root_at[v->byte[i]] = i;
    for (int32_t k = np - 1; k >= 0; k--) { /* toks is in byte order: one range per first byte */
        uint8_t b = (uint8_t)pr[k].p[0];
        if (!v->root_k1[b]) v->root_k1[b] = k + 1;
        v->root_k0[b] = k;
    }
    free(pr);
    return v;
oom:
    tutti_set_error("grammar vocabulary: out of memory");
fail:
    free(pr);
    tutti_grammar_vocab_free(v);
    return NULL;
}

tutti_grammar_vocab *tutti_grammar_vocab_new(const tutti_vocab *vocab) {
    if (!vocab) {
        tutti_set_error("grammar vocabulary: no vocabulary");
        return NULL;
    }
    int32_t n = tutti_vocab_n_tokens(vocab);
    char **pieces = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    int32_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof(int32_t));
    bool *eog = calloc((size_t)(n > 0 ? n : 1), sizeof(bool));
    tutti_grammar_vocab *v = NULL;
    if (!pieces || !lens || !eog) {
        tutti_set_error("grammar vocabulary: out of memory");
        goto done;
    }
    char buf[512];
    for (int32_t i = 0; i < n; i++) {
        eog[i] = tutti_vocab_is_eog(vocab, i);
        int32_t k = tutti_token_to_piece(vocab, i, false, buf, sizeof buf);
        if (k == TUTTI_ERR_SIZE) continue;
        char *p = malloc(k < 0 ? (size_t)-k : (size_t)k + 1);
        if (!p) {
            tutti_set_error("grammar vocabulary: out of memory");
            goto done;
        }
        if (k < 0) k = tutti_token_to_piece(vocab, i, false, p, -k);
        else memcpy(p, buf, (size_t)k);
        pieces[i] = p, lens[i] = k > 0 ? k : 0;
    }
    v = tutti_grammar_vocab_from_pieces(n, (const char *const *)pieces, lens, eog);
done:
    if (pieces)
        for (int32_t i = 0; i < n; i++) free(pieces[i]);
    free(pieces), free(lens), free(eog);
    return v;
}

int32_t tutti_grammar_vocab_n_tokens(const tutti_grammar_vocab *v) { return v->n_vocab; }

int tutti_grammar_vocab_prepare(tutti_grammar_vocab *v, const tutti_grammar *g) {
    if (!v || !g) return tutti_set_error("grammar vocabulary: missing argument");
    if (gm_run_prepare(v, g) < 0) return tutti_set_error("grammar vocabulary: out of memory");
    return 0;
}

void gm_masks_clear(tutti_grammar_matcher *m) {
    for (int32_t i = 0; i < m->n_masks; i++) free(m->masks[i].ids), free(m->masks[i].bits);
    m->n_masks = 0;
    m->mask_bytes = 0;
    for (int32_t s = 0; s < m->n_st; s++) m->st[s].mask = -1;
    free(m->gmemo), free(m->gids);
    m->gmemo = NULL, m->gids = NULL;
    m->gmemo_n = m->gmemo_cap = 0;
    m->n_gids = m->cap_gids = 0;
}

/* The allowed tokens of state s by one scan of the trie, appended to
 * m->ids_tmp[0..na); returns the new count or -3. */
static int32_t scan_trie(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s, int32_t na) {
    int32_t *walk = m->walk;
    walk[0] = s;
    const uint8_t *byte = v->byte;
    const int32_t *depth = v->depth, *end = v->end, *ntok = v->ntok;
    for (int32_t i = 1; i < v->n_nodes;) {
        int32_t nx = gm_step(m, walk[depth[i] - 1], byte[i]);
        if (nx < 0) {
            if (nx == -3) return -3;
            i = end[i];
            continue;
        }
        walk[depth[i]] = nx;
        if (ntok[i]) {
            const int32_t *t = v->toks + v->tok0[i];
            for (int32_t k = 0; k < ntok[i]; k++) m->ids_tmp[na++] = t[k];
        }
        i++;
    }
    return na;
}

int gm_scan_first(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s, uint8_t b, uint64_t *bits) {
    int32_t i0 = v->root_at[b];
    if (!i0) return 0;
    int32_t *walk = m->walk;
    walk[0] = s;
    for (int32_t i = i0, e = v->end[i0]; i < e;) {
        int32_t nx = gm_step(m, walk[v->depth[i] - 1], v->byte[i]);
        if (nx < 0) {
            if (nx == -3) return -3;
            i = v->end[i];
            continue;
        }
        walk[v->depth[i]] = nx;
        for (int32_t k = 0; k < v->ntok[i]; k++) {
            int32_t id = v->toks[v->tok0[i] + k];
            bits[id >> 6] |= 1ull << (id & 63);
        }
        i++;
    }
    return 0;
}

static int32_t mask_compute(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s);

static void mask_or_bits(const gm_mask *mk, uint64_t *w, int32_t W) {
    if (mk->bits)
        for (int32_t i = 0; i < W; i++) w[i] |= mk->bits[i];
    else
        for (int32_t k = 0; k < mk->n; k++) w[mk->ids[k] >> 6] |= 1ull << (mk->ids[k] & 63);
}

/* A state whose stacks disagree on its largest class K (some hold part of
 * it) is split: the stacks that hold all of K or none of it (A: the run
 * path applies) and the others (B: small classes, e.g. literal keys next
 * to a free-form key).  A token is accepted from a set of stacks iff it is
 * from one of them, so the mask is the union, and A's mask is shared by
 * every state with the same A.  Returns 1 with the union (eog excluded) in
 * m->bits, 0 when there is nothing to split, -3. */
static int split_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s) {
    int32_t cls = gm_run_top_class(m, s);
    if (cls < 0) return 0;
    const tutti_grammar *g = m->g;
    int32_t nk, n = m->st[s].n;
    const gr_range *K = gm_class_ranges(g, cls, &nk);
    int32_t buf[128];
    int32_t *ids = n <= 64 ? buf : malloc(sizeof(int32_t) * 2 * (size_t)n);
    if (!ids) return -3;
    int32_t *a = ids, *b = ids + n, na = 0, nb = 0;
    const int32_t *st = m->pool + m->st[s].off;
    for (int32_t i = 0; i < n; i++) {
        if (st[i] == 0) continue;
        int32_t c = g->elems[m->stk[st[i]].pos].arg;
        if (c == cls || gm_covers_all(g, c, K, nk) || !gm_meets_any(g, c, K, nk)) a[na++] = st[i];
        else b[nb++] = st[i];
    }
    int rc = 0;
    if (nb && na) {
        int32_t sa = gm_state_of(m, a, na), sb = sa >= 0 ? gm_state_of(m, b, nb) : -3;
        int32_t ka = sa >= 0 ? (m->st[sa].mask >= 0 ? m->st[sa].mask : mask_compute(m, v, sa)) : -3;
        int32_t kb = ka >= 0 ? (m->st[sb].mask >= 0 ? m->st[sb].mask : mask_compute(m, v, sb)) : -3;
        if (kb < 0) rc = -3;
        else {
            memset(m->bits, 0, sizeof(uint64_t) * (size_t)v->n_words);
            mask_or_bits(&m->masks[ka], m->bits, v->n_words);
            mask_or_bits(&m->masks[kb], m->bits, v->n_words);
            rc = 1;
        }
    }
    if (ids != buf) free(ids);
    return rc;
}

/* Computes (and caches) the mask of state s over v; returns its slot. */
static int32_t mask_compute(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s) {
    int32_t V = v->n_vocab;
    if (m->gv != v) {
        gm_masks_clear(m);
        free(m->walk), free(m->save), free(m->ids_tmp), free(m->bits), free(m->cls_run), free(m->cls_bx);
        free(m->big_cls);
        m->cls_run = NULL, m->cls_bx = NULL, m->big_cls = NULL; /* the run tables are the vocabulary's */
        m->walk = malloc(sizeof(int32_t) * (size_t)(v->max_depth + 1));
        m->save = malloc(sizeof(float) * (size_t)V);
        m->ids_tmp = malloc(sizeof(int32_t) * (size_t)V);
        m->bits = malloc(sizeof(uint64_t) * (size_t)v->n_words);
        m->gv = m->walk && m->save && m->ids_tmp && m->bits ? v : NULL;
        if (!m->gv) return -3;
    }
    const bool accept = m->st[s].accept;
    gm_mask mk = {0};
    int32_t W = v->n_words;
    uint64_t *w = m->bits;
    int run = split_mask(m, v, s);
    if (!run) run = gm_run_mask(m, v, s);
    if (run < 0) return -3;
    int32_t na;
    if (run) {
        /* m->bits: the allowed tokens (without eog) */
        m->n_run++;
        if (accept)
            for (int32_t k = 0; k < v->n_eog; k++) w[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
        int64_t cnt = 0;
        for (int32_t i = 0; i < W; i++) cnt += __builtin_popcountll(w[i]);
        na = (int32_t)cnt;
    } else {
        m->n_scan++;
        /* ids_tmp collects the allowed tokens */
        na = 0;
        if (accept)
            for (int32_t k = 0; k < v->n_eog; k++) m->ids_tmp[na++] = v->eog[k];
        na = scan_trie(m, v, s, na);
        if (na < 0) return -3;
        if (na > W) {
            memset(w, 0, sizeof(uint64_t) * (size_t)W);
            for (int32_t k = 0; k < na; k++) w[m->ids_tmp[k] >> 6] |= 1ull << (m->ids_tmp[k] & 63);
        }
    }
    mk.n_allowed = na;
    if (na <= W) {
        /* few allowed: their ids (no larger than half the bitset) */
        mk.n = na;
        mk.ids = malloc(sizeof(int32_t) * (size_t)(na > 0 ? na : 1));
        if (!mk.ids) return -3;
        if (run) {
            int32_t j = 0;
            for (int32_t i = 0; i < W; i++)
                for (uint64_t x = w[i]; x; x &= x - 1) mk.ids[j++] = i * 64 + __builtin_ctzll(x);
        } else memcpy(mk.ids, m->ids_tmp, sizeof(int32_t) * (size_t)na);
    } else {
        /* the bitset: a fixed 19 KB for 151k tokens, however many are
         * allowed (id lists of large masks cost more to allocate) */
        mk.bits = malloc(sizeof(uint64_t) * (size_t)W);
        if (!mk.bits) return -3;
        memcpy(mk.bits, w, sizeof(uint64_t) * (size_t)W);
    }
    if (m->n_masks == m->cap_masks) {
        int32_t nc = m->cap_masks ? m->cap_masks * 2 : 64;
        gm_mask *nm = realloc(m->masks, sizeof(gm_mask) * (size_t)nc);
        if (!nm) {
            free(mk.ids), free(mk.bits);
            return -3;
        }
        m->masks = nm, m->cap_masks = nc;
    }
    m->masks[m->n_masks] = mk;
    m->mask_bytes += (mk.bits ? sizeof(uint64_t) * (size_t)W : sizeof(int32_t) * (size_t)mk.n) + sizeof mk;
    m->st[s].mask = m->n_masks;
    return m->n_masks++;
}

/* The current state's cached mask, computed if it is not cached yet;
 * NULL (error set) when out of memory. */
static const gm_mask *current_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v) {
    int32_t s = m->cur;
    int32_t slot = (m->gv == v) ? m->st[s].mask : -1;
    if (slot < 0) {
        if (m->mask_bytes > GM_MASK_BUDGET) gm_masks_clear(m); /* here: never inside a split */
        slot = mask_compute(m, v, s);
    }
    if (slot < 0) return tutti_set_error("grammar mask: out of memory"), NULL;
    return &m->masks[slot];
}

int32_t tutti_grammar_matcher_bitmask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, uint32_t *bits) {
    if (!m || !v || !bits) return tutti_set_error("grammar mask: missing argument");
    const gm_mask *mk = current_mask(m, v);
    if (!mk) return TUTTI_ERR;
    int32_t W = v->n_words, W32 = (v->n_vocab + 31) / 32;
    if (mk->bits) {
        /* 32-bit words spelled out (not a memcpy of the 64-bit ones), so
         * the layout holds on any byte order; bits past n_vocab cleared */
        for (int32_t i = 0; i < W; i++) {
            uint64_t x = mk->bits[i];
            if (i == W - 1 && (v->n_vocab & 63)) x &= (1ull << (v->n_vocab & 63)) - 1;
            bits[2 * i] = (uint32_t)x;
            if (2 * i + 1 < W32) bits[2 * i + 1] = (uint32_t)(x >> 32);
        }
    } else {
        memset(bits, 0, sizeof(uint32_t) * (size_t)W32);
        for (int32_t k = 0; k < mk->n; k++) bits[mk->ids[k] >> 5] |= 1u << (mk->ids[k] & 31);
    }
    return mk->n_allowed;
}

int32_t tutti_grammar_matcher_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, float *logits) {
    if (!m || !v || !logits) return tutti_set_error("grammar mask: missing argument");
    const gm_mask *mk = current_mask(m, v);
    if (!mk) return TUTTI_ERR;
    int32_t V = v->n_vocab, W = v->n_words;
    if (!mk->bits) {
        /* keep the allowed values, fill the row with -inf, put them back */
        for (int32_t k = 0; k < mk->n; k++) m->save[k] = logits[mk->ids[k]];
        for (int32_t i = 0; i < V; i++) logits[i] = -INFINITY;
        for (int32_t k = 0; k < mk->n; k++) logits[mk->ids[k]] = m->save[k];
    } else if (mk->n_allowed <= V / 2) {
        int32_t n = 0;
        for (int32_t i = 0; i < W; i++)
            for (uint64_t x = mk->bits[i]; x; x &= x - 1) m->save[n++] = logits[i * 64 + __builtin_ctzll(x)];
        for (int32_t i = 0; i < V; i++) logits[i] = -INFINITY;
        n = 0;
        for (int32_t i = 0; i < W; i++)
            for (uint64_t x = mk->bits[i]; x; x &= x - 1) logits[i * 64 + __builtin_ctzll(x)] = m->save[n++];
    } else {
        /* write -inf at the rejected ids only: the zero bits below V */
        for (int32_t i = 0; i < W; i++) {
            uint64_t x = ~mk->bits[i];
            if (i == W - 1 && (V & 63)) x &= (1ull << (V & 63)) - 1;
            for (; x; x &= x - 1) logits[i * 64 + __builtin_ctzll(x)] = -INFINITY;
        }
    }
    return mk->n_allowed;
}
