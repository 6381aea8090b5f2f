/* The draft model's proposals (draft.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/draft.h"
#include "util/error.h"

fusion_draft *fusion_draft_new(tutti_ensemble *e, const tutti_sampler_params *sp) {
    fusion_draft *d = calloc(1, sizeof *d);
    if (!d) return tutti_set_error("draft: out of memory"), NULL;
    d->m = e->draft;
    d->p = e->draft_p;
    d->V = e->m[0]->n_vocab;
    /* the draft's choices need not follow the repetition penalty (any q is
     * lossless); its own random numbers, so the target's draws stay
     * independent of them */
    tutti_sampler_params dp = *sp;
    dp.repeat_penalty = 1.0f;
    dp.seed = sp->seed ^ 0x9e3779b97f4a7c15ull;
    d->smp = tutti_sampler_new(&dp);
    d->tok = malloc(sizeof(int32_t) * (size_t)d->p.n_max);
    d->q = malloc(sizeof(float) * (size_t)d->p.n_max * (size_t)d->V);
    d->scratch = malloc(sizeof(float) * (size_t)d->V);
    if (d->m && e->draft_respell) { /* buffers for the whole context and a round */
        d->respell = true;
        d->target = e->m[0]->vocab;
        d->cap = e->m[0]->n_ctx + d->p.n_max + 8;
        if (d->cap < d->m->n_ctx + 8) d->cap = d->m->n_ctx + 8;
        d->text = malloc((size_t)d->cap * 64);
        d->dids = malloc(sizeof(int32_t) * (size_t)d->cap);
        d->tids = malloc(sizeof(int32_t) * (size_t)d->cap);
        free(d->scratch);
        d->scratch = malloc(sizeof(float) * (size_t)(d->m->n_vocab > d->V ? d->m->n_vocab : d->V));
        if (!d->text || !d->dids || !d->tids) d->scratch = (free(d->scratch), NULL);
    }
    if (!d->smp || !d->tok || !d->q || !d->scratch) {
        if (d->smp) tutti_set_error("draft: out of memory");
        fusion_draft_free(d);
        return NULL;
    }
    return d;
}

void fusion_draft_free(fusion_draft *d) {
    if (!d) return;
    tutti_sampler_free(d->smp);
    free(d->tok), free(d->q), free(d->scratch);
    free(d->text), free(d->dids), free(d->tids);
    fusion_retok_free(&d->rd), fusion_retok_free(&d->rt);
    free(d);
}

/* The largest probability of softmax(z) (temperature 1): 1 / Σ exp(z - max),
 * in vectorised float blocks summed in double. */
static double top_prob(const float *z, int32_t n) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = z[i] > mx ? z[i] : mx;
    double s = 0;
    for (int32_t i0 = 0; i0 < n; i0 += 1024) {
        int32_t i1 = i0 + 1024 < n ? i0 + 1024 : n;
        float b = 0;
        for (int32_t i = i0; i < i1; i++) b += fusion_fast_exp(z[i] - mx);
        s += b;
    }
    return s > 0 ? 1.0 / s : 0.0;
}

/* A deterministic proposal (prompt lookup, a re-spelled draft): the m
 * tokens src[0..m) with one-hot q, after ids[0..n).  src may lie inside
 * ids before n + j (lookup repeats what it has just proposed), so the
 * tokens are copied one at a time. */
static int32_t propose_one_hot(fusion_draft *d, const int32_t *src, int32_t m, int32_t *ids, int32_t n) {
    d->n = 0;
    for (int32_t j = 0; j < m; j++) {
        int32_t x = src[j];
        float *q = d->q + (size_t)j * (size_t)d->V;
        memset(q, 0, sizeof(float) * (size_t)d->V);
        q[x] = 1.0f;
        d->tok[j] = ids[n + j] = x;
        d->n = j + 1;
    }
    if (d->n < d->p.n_min) d->n = 0;
    return d->n;
}

/* Prompt lookup: the tokens that followed the latest earlier occurrence of
 * the last lookup_n tokens (a continuation that runs into the tokens it
 * proposes repeats them: ids[n + j] reads positions before it), each with
 * a one-hot q. */
static int32_t lookup_propose(fusion_draft *d, int32_t *ids, int32_t n, int32_t k) {
    int32_t N = d->p.lookup_n, at = -1;
    d->n = 0;
    if (n <= N) return 0;
    for (int32_t s = n - N - 1; s >= 0 && at < 0; s--)
        if (!memcmp(ids + s, ids + n - N, sizeof(int32_t) * (size_t)N)) at = s + N;
    if (at < 0) return 0;
    return propose_one_hot(d, ids + at, k, ids, n);
}

/* The most likely token of z[0..n). */
static int32_t argmax(const float *z, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (z[i] > z[b]) b = i;
    return b;
}

/* The bytes of token id in running text (0 for control tokens). */
static int32_t piece_len(const tutti_vocab *v, int32_t id) {
    char b[256];
    int32_t len = tutti_token_to_piece(v, id, false, b, (int32_t)sizeof b);
    return len < 0 ? -len : len;
}

/* Where the committed text ends in member 1's tokens of the text with the
 * continuation, d->tids[0..nr): past their common prefix with ids[0..n),
 * the first token boundary at the committed text's end (the prompt, or a
 * generated token, may be spelled otherwise than the tokenizer spells the
 * whole text); -1 where a token straddles it. */
static int32_t respell_boundary(fusion_draft *d, const int32_t *ids, int32_t n, int32_t nr) {
    int32_t c = 0;
    while (c < n && c < nr && d->tids[c] == ids[c]) c++;
    int64_t rest = 0, acc = 0;
    for (int32_t i = c; i < n; i++) rest += piece_len(d->target, ids[i]);
    int32_t j = c;
    while (j < nr && acc < rest) acc += piece_len(d->target, d->tids[j++]);
    return acc == rest && j < nr ? j : -1;
}

/* The draft continues its tokens d->dids[0..nd) (its tokenization of the
 * text d->text[0..*nt)) greedily by up to k tokens while confident (its
 * most likely token has probability >= p_min) and not at an end (which
 * has no text), appending the tokens to d->dids and their bytes to d->text
 * (room for tcap bytes; *nt grows).  Returns the tokens added or
 * TUTTI_ERR. */
static int32_t greedy_continue(fusion_draft *d, int32_t nd, int32_t k, int32_t *nt, int32_t tcap) {
    const tutti_vocab *dv = d->m->vocab;
    int32_t Vd = d->m->n_vocab;
    if (k > d->m->n_ctx - nd + 1) k = d->m->n_ctx - nd + 1; /* the draft conditions on at most n_ctx tokens */
    if (k > d->cap - nd) k = d->cap - nd;
    int32_t j = 0;
    for (; j < k; j++) {
        const float *z = fusion_member_logits_view(d->m, d->dids, nd + j, d->scratch);
        if (!z) {
            tutti_error_prefix("draft");
            return TUTTI_ERR;
        }
        if (top_prob(z, Vd) < d->p.p_min) break;
        int32_t x = argmax(z, Vd);
        if (tutti_vocab_is_eog(dv, x)) break; /* an end has no text to re-spell */
        int32_t len = tutti_token_to_piece(dv, x, false, d->text + *nt, tcap - *nt);
        if (len < 0) break;
        *nt += len;
        d->dids[nd + j] = x;
    }
    return j;
}

/* v's tokens of text[0..n) into out[0..cap) through r (retok.h: only the
 * text's tail is tokenized again); 0 where it does not tokenize or has
 * more than cap tokens, TUTTI_ERR. */
static int32_t retok(fusion_retok *r, const tutti_vocab *v, const char *text, int32_t n, int32_t *out, int32_t cap) {
    int32_t m = fusion_retok_update(r, v, tutti_vocab_add_bos(v), text, n);
    if (m <= 0 || m > cap) return m < 0 ? m : 0;
    memcpy(out, r->ids, sizeof(int32_t) * (size_t)m);
    return m;
}

/* A draft with another tokenizer: the committed text (member 1's tokens
 * decoded) is tokenized by the draft, which continues it greedily while
 * confident; the text with the continuation is tokenized by member 1, and
 * its tokens past the committed ones are the proposal, with one-hot q (any
 * proposal made independently of the target's random numbers is exact
 * under min(1, p(x)) acceptance and the residual p without x).  No
 * proposal where member 1's tokens of the text do not start with the
 * committed ones (a generation need not be spelled canonically). */
static int32_t respell_propose(fusion_draft *d, int32_t *ids, int32_t n, int32_t k) {
    const tutti_vocab *dv = d->m->vocab;
    int32_t tcap = d->cap * 64;
    d->n = 0;
    int32_t nt = tutti_detokenize(d->target, ids, n, d->text, tcap);
    if (nt < 0) return 0;
    int32_t nd = retok(&d->rd, dv, d->text, nt, d->dids, d->cap);
    if (nd <= 0) return nd;
    int32_t j = greedy_continue(d, nd, k, &nt, tcap);
    if (j <= 0) return j;
    int32_t nr = retok(&d->rt, d->target, d->text, nt, d->tids, d->cap);
    if (nr <= 0) return nr;
    int32_t at = respell_boundary(d, ids, n, nr);
    if (at < 0) return 0;
    return propose_one_hot(d, d->tids + at, k < nr - at ? k : nr - at, ids, n);
}

int32_t fusion_draft_propose(fusion_draft *d, int32_t *ids, int32_t n, int32_t k) {
    if (k > d->p.n_max) k = d->p.n_max;
    if (!d->m) return lookup_propose(d, ids, n, k);
    if (d->respell) return respell_propose(d, ids, n, k);
    const tutti_vocab *vocab = d->m->vocab;
    int32_t V = d->V;
    d->n = 0;
    if (k > d->m->n_ctx - n + 1) k = d->m->n_ctx - n + 1; /* the draft conditions on at most n_ctx tokens */
    for (int32_t j = 0; j < k; j++) {
        const float *z = fusion_member_logits_view(d->m, ids, n + j, d->scratch);
        if (!z) {
            tutti_error_prefix("draft");
            return TUTTI_ERR;
        }
        if (top_prob(z, V) < d->p.p_min) break;
        float *q = d->q + (size_t)j * (size_t)V;
        if (tutti_sampler_probs(d->smp, z, V, q) < 0) return TUTTI_ERR;
        int32_t x = tutti_sampler_draw(d->smp, q, V);
        if (x < 0) return TUTTI_ERR;
        d->tok[j] = ids[n + j] = x;
        d->n = j + 1;
        if (tutti_vocab_is_eog(vocab, x)) break; /* nothing follows the end */
    }
    if (d->n < d->p.n_min) d->n = 0;
    return d->n;
}

fusion_draft *fusion_draft_new_bytes(tutti_ensemble *e) {
    fusion_draft *d = calloc(1, sizeof *d);
    if (!d) return tutti_set_error("draft: out of memory"), NULL;
    d->m = e->draft;
    d->p = e->draft_p;
    d->bytes = true;
    d->scratch = malloc(sizeof(float) * (size_t)d->m->n_vocab);
    if (!d->scratch) {
        fusion_draft_free(d);
        return tutti_set_error("draft: out of memory"), NULL;
    }
    return d;
}

int32_t fusion_draft_propose_bytes(fusion_draft *d, const char *text, size_t n, int32_t k, const char **out) {
    const tutti_vocab *dv = d->m->vocab;
    *out = NULL;
    if (k > d->p.n_max) k = d->p.n_max;
    if (k < 1 || n > (size_t)INT32_MAX / 2) return 0;
    /* room: the text, 256 bytes per drafted token (longer pieces end the
     * proposal), and the text's tokens (at most one per byte, BOS and the
     * tokenizer's prefix) with the continuation */
    int32_t need_b = (int32_t)n + 256 * k, need_t = (int32_t)n + 8 + k;
    if (need_b > d->cap_text) {
        char *t = realloc(d->text, (size_t)need_b);
        if (!t) return tutti_set_error("draft: out of memory");
        d->text = t, d->cap_text = need_b;
    }
    if (need_t > d->cap) {
        int32_t *ids = realloc(d->dids, sizeof(int32_t) * (size_t)need_t);
        if (!ids) return tutti_set_error("draft: out of memory");
        d->dids = ids, d->cap = need_t;
    }
    memcpy(d->text, text, n);
    int32_t nt = (int32_t)n;
    int32_t nd = retok(&d->rd, dv, d->text, (int32_t)n, d->dids, d->cap);
    if (nd < 0) return nd;
    if (nd == 0 || nd > d->m->n_ctx) return 0; /* nothing to condition on, or more than the draft's context */
    int32_t j = greedy_continue(d, nd, k, &nt, d->cap_text);
    if (j <= 0) return j;
    if (j < d->p.n_min) return 0;
    *out = d->text + n;
    return nt - (int32_t)n;
}
