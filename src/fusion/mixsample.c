/* Mixture sampling: when it is exact, and the writer chain (mixsample.h). */
#include <math.h>

#include "fusion/mixsample.h"
#include "util/error.h"

int tutti_ensemble_set_mix_sample(tutti_ensemble *e, bool on) {
    if (!e) return tutti_set_error("mix sample: missing ensemble");
    e->mix_sample = on;
    return 0;
}

bool tutti_ensemble_mix_sample(const tutti_ensemble *e) { return e && e->mix_sample; }

const char *mix_sample_inexact(const tutti_ensemble *e, const tutti_sampler_params *sp, const tutti_mask *mask,
                               bool has_grammar, bool drafting) {
    if (e->rule != TUTTI_RULE_MIX) return "the rule is not mix";
    if (e->align != TUTTI_ALIGN_TOKEN) return "the alignment is not token";
    if (drafting) return "a draft verifies with every member";
    if (e->ctx.n_features > 0) return "context weights read every member's row";
    if (e->select >= 0) return "selective fusion reads every member's row";
    /* the sampler's chain (src/sample/sample.c): each of these changes the
     * fused distribution before the draw */
    if (sp->temp != 1.0f) return "the sampler's temperature is not 1: it acts on the mixture";
    if (sp->top_k > 0 && sp->top_k < e->m[0]->n_vocab) return "top-k acts on the mixture";
    if (sp->top_p < 1.0f) return "top-p acts on the mixture";
    if (sp->min_p > 0) return "min-p acts on the mixture";
    if (sp->repeat_penalty != 1.0f && sp->repeat_last_n > 0) return "the repetition penalty acts on the mixture";
    if (mask && mask->n_bias > 0) return "a logit bias acts on the mixture";
    if (token_mask_needed(mask)) return "allowed/forbidden strings or ignore_eos mask the mixture";
    if (has_grammar) return "a grammar masks the mixture";
    for (int32_t i = 0; i < e->n; i++)
        if (!fusion_member_local_model(e->m[i])) return "a member is not local";
    return NULL;
}

int mix_chain_start(mix_chain *c, const tutti_ensemble *e, const float *w) {
    c->n = e->n;
    c->z = -1;
    double s = 0;
    for (int32_t i = 0; i < e->n; i++) s += w[i] > 0 ? (double)w[i] : 0;
    if (!(s > 0)) return tutti_set_error("mix sample: no member has a weight > 0");
    for (int32_t i = 0; i < e->n; i++) c->prior[i] = w[i] > 0 ? (float)((double)w[i] / s) : 0.0f;
    double alpha = e->adapt_on ? e->adapt_alpha : 1.0;
    c->fresh_each = alpha >= 1;
    c->stay[0] = (float)(1 - alpha);
    c->stay[1] = (float)alpha;
    return 0;
}

int32_t mix_chain_next(mix_chain *c, tutti_sampler *smp) {
    /* adapt's fixed share: the writer stays with probability 1 - alpha
     * (alpha 0: always, no random number used) */
    if (c->z >= 0 && !c->fresh_each) {
        int32_t sw = c->stay[1] > 0 ? tutti_sampler_draw(smp, c->stay, 2) : 0;
        if (sw < 0) return -1;
        if (sw == 0) return c->z;
    }
    return c->z = tutti_sampler_draw(smp, c->prior, c->n);
}
