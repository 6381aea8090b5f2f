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

struct tutti_grammar_vocab {
    int32_t n_vocab;
    int32_t n_nodes, max_depth;
    uint8_t *byte;
    int32_t *depth, *end, *tok0, *ntok;
    int32_t *toks; /* token ids in byte order */
    int32_t *eog;  /* end-of-generation ids */
    int32_t n_eog;
};

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
    free(v->byte), free(v->depth), free(v->end), free(v->tok0), free(v->ntok), free(v->toks), free(v->eog);
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
    if (!v || !pr) goto oom;
    v->n_vocab = n_vocab;
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
    int32_t max_len = 0;
    for (int32_t k = 0; k < np; k++)
        if (pr[k].len > max_len) max_len = pr[k].len;
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(max_len + 1));
    if (!v->eog || !v->toks || !v->byte || !v->depth || !v->end || !v->tok0 || !v->ntok || !path) {
        free(path);
        goto oom;
    }
    if (eog)
        for (int32_t i = 0; i < n_vocab; i++)
            if (eog[i]) v->eog[v->n_eog++] = i;
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

void gm_masks_clear(tutti_grammar_matcher *m) {
    for (int32_t i = 0; i < m->n_masks; i++) free(m->masks[i].ids);
    m->n_masks = 0;
    m->mask_bytes = 0;
    for (int32_t s = 0; s < m->n_st; s++) m->st[s].mask = -1;
}

/* Computes (and caches) the mask of state s over v; returns its slot. */
static int32_t mask_compute(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, int32_t s) {
    int32_t V = v->n_vocab;
    if (m->gv != v) {
        gm_masks_clear(m);
        free(m->walk), free(m->save), free(m->ids_tmp);
        m->walk = malloc(sizeof(int32_t) * (size_t)(v->max_depth + 1));
        m->save = malloc(sizeof(float) * (size_t)V);
        m->ids_tmp = malloc(sizeof(int32_t) * (size_t)V);
        m->gv = m->walk && m->save && m->ids_tmp ? v : NULL;
        if (!m->gv) return -3;
    }
    if (m->mask_bytes > GM_MASK_BUDGET) gm_masks_clear(m);
    /* ids_tmp collects the allowed tokens */
    int32_t na = 0;
    if (m->st[s].accept)
        for (int32_t k = 0; k < v->n_eog; k++) m->ids_tmp[na++] = v->eog[k];
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
    gm_mask mk = {.n_allowed = na};
    if (na <= V / 2) {
        mk.allowed_list = true;
        mk.n = na;
        mk.ids = malloc(sizeof(int32_t) * (size_t)(na > 0 ? na : 1));
        if (!mk.ids) return -3;
        memcpy(mk.ids, m->ids_tmp, sizeof(int32_t) * (size_t)na);
    } else {
        /* the rejected ids: complement of the allowed list */
        uint8_t *on = calloc((size_t)V, 1);
        if (!on) return -3;
        for (int32_t k = 0; k < na; k++) on[m->ids_tmp[k]] = 1;
        mk.n = V - na;
        mk.ids = malloc(sizeof(int32_t) * (size_t)(mk.n > 0 ? mk.n : 1));
        if (!mk.ids) {
            free(on);
            return -3;
        }
        int32_t j = 0;
        for (int32_t id = 0; id < V; id++)
            if (!on[id]) mk.ids[j++] = id;
        free(on);
    }
    if (m->n_masks == m->cap_masks) {
        int32_t nc = m->cap_masks ? m->cap_masks * 2 : 64;
        gm_mask *nm = realloc(m->masks, sizeof(gm_mask) * (size_t)nc);
        if (!nm) {
            free(mk.ids);
            return -3;
        }
        m->masks = nm, m->cap_masks = nc;
    }
    m->masks[m->n_masks] = mk;
    m->mask_bytes += sizeof(int32_t) * (size_t)mk.n + sizeof mk;
    m->st[s].mask = m->n_masks;
    return m->n_masks++;
}

int32_t tutti_grammar_matcher_mask(tutti_grammar_matcher *m, const tutti_grammar_vocab *v, float *logits) {
    if (!m || !v || !logits) return tutti_set_error("grammar mask: missing argument");
    int32_t s = m->cur;
    int32_t slot = (m->gv == v) ? m->st[s].mask : -1;
    if (slot < 0) slot = mask_compute(m, v, s);
    if (slot < 0) return tutti_set_error("grammar mask: out of memory");
    const gm_mask *mk = &m->masks[slot];
    if (mk->allowed_list) {
        /* keep the allowed values, fill the row with -inf, put them back */
        for (int32_t k = 0; k < mk->n; k++) m->save[k] = logits[mk->ids[k]];
        for (int32_t i = 0; i < v->n_vocab; i++) logits[i] = -INFINITY;
        for (int32_t k = 0; k < mk->n; k++) logits[mk->ids[k]] = m->save[k];
    } else {
        for (int32_t k = 0; k < mk->n; k++) logits[mk->ids[k]] = -INFINITY;
    }
    return mk->n_allowed;
}
