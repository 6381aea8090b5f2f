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
    for (int32_t j = 0; j < k; j++) {
        int32_t x = ids[at + j];
        float *q = d->q + (size_t)j * (size_t)d->V;
        memset(q, 0, sizeof(float) * (size_t)d->V);
        q[x] = 1.0f;
        d->tok[j] = ids[n + j] = x;
        d->n = j + 1;
    }
    if (d->n < d->p.n_min) d->n = 0;
    return d->n;
}

int32_t fusion_draft_propose(fusion_draft *d, int32_t *ids, int32_t n, int32_t k) {
    if (k > d->p.n_max) k = d->p.n_max;
    if (!d->m) return lookup_propose(d, ids, n, k);
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
