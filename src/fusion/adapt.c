/* Weights that follow the text: the exact sequence-level mixture of the
 * members (a Bayesian posterior over "which member is writing"), with fixed
 * share (Herbster and Warmuth 1998, "Tracking the best expert"; the variant
 * that shares toward the prior, Bousquet and Warmuth 2002) so the mixture
 * can move to another member when the text changes subject:
 *
 *   v_i      = w_i p_i(x_t) / Σ_j w_j p_j(x_t)        (Bayes after unit x_t)
 *   w_i(t+1) = (1 - alpha) v_i + alpha prior_i
 *
 * alpha = 0 is Bayes' rule (the weights of a mixture of whole sequences),
 * alpha = 1 the static prior every step.  The prior is the ensemble's weights
 * (given or fitted) normalised; a member with prior weight 0 stays at 0.
 * The unit is what the alignment commits: a token, a byte or a span.  A
 * member with no distribution at a unit (gone: its context is full, or its
 * tokens cannot spell the text so far) has no say there: the mixture is over
 * the members present, renormalised, and the gone member's posterior is 0
 * (fixed share gives it back alpha prior_i, so it returns when it can). */
#include <math.h>

#include "fusion/ensemble_impl.h"
#include "util/error.h"

int tutti_ensemble_set_adapt(tutti_ensemble *e, double alpha) {
    if (!e) return tutti_set_error("adapt: missing ensemble");
    if (alpha < 0) {
        e->adapt_on = false;
        return 0;
    }
    if (tutti_check_adapt(alpha) < 0) return TUTTI_ERR;
    if (e->rule != TUTTI_RULE_MIX && e->align != TUTTI_ALIGN_SPAN)
        return tutti_set_usage_error("adapt: weights that follow the text need the mix rule (or span alignment), not %s",
                               tutti_rule_name(e->rule));
    e->adapt_on = true;
    e->adapt_alpha = alpha;
    return 0;
}

double tutti_ensemble_adapt(const tutti_ensemble *e) { return e && e->adapt_on ? e->adapt_alpha : -1; }

void fusion_adapt_prior(const tutti_ensemble *e, const float *w, double *prior) {
    double s = 0;
    for (int32_t i = 0; i < e->n; i++) s += w[i] > 0 ? (double)w[i] : 0;
    for (int32_t i = 0; i < e->n; i++) prior[i] = w[i] > 0 && s > 0 ? (double)w[i] / s : 0;
}

double fusion_adapt_update(const tutti_ensemble *e, double alpha, const double *prior, double *w,
                           const double *logp, const bool *gone) {
    double mx = -INFINITY, wa = 0;
    for (int32_t i = 0; i < e->n; i++) {
        if (gone && gone[i]) continue;
        wa += w[i];
        if (w[i] > 0 && logp[i] > mx) mx = logp[i];
    }
    if (mx == -INFINITY) return -INFINITY; /* no member gave the unit any mass: keep the weights */
    double v[TUTTI_ENSEMBLE_MAX_MEMBERS], z = 0;
    for (int32_t i = 0; i < e->n; i++) z += (v[i] = w[i] > 0 && !(gone && gone[i]) ? w[i] * exp(logp[i] - mx) : 0);
    for (int32_t i = 0; i < e->n; i++) w[i] = (1 - alpha) * (v[i] / z) + alpha * prior[i];
    /* the members present share the mixture (as a member that left a
     * generation gives its weight to the others) */
    return mx + log(z) - log(wa);
}

void fusion_adapt_begin(const tutti_ensemble *e, fusion_adapt *a) {
    a->on = e->adapt_on;
    a->alpha = e->adapt_alpha;
    fusion_adapt_prior(e, e->w, a->prior);
    for (int32_t i = 0; i < e->n; i++) a->w[i] = a->prior[i];
}

void fusion_adapt_step(const tutti_ensemble *e, fusion_adapt *a, const double *logp, const bool *gone, float *w) {
    if (!a->on) return;
    fusion_adapt_update(e, a->alpha, a->prior, a->w, logp, gone);
    for (int32_t i = 0; i < e->n; i++) w[i] = gone && gone[i] ? 0.0f : (float)a->w[i];
}
