/* The one validator of ensemble settings (include/tutti.h, "Checking
 * ensemble settings"): the ensemble itself, ensemble files, the command
 * line and `tutti serve` all call these, so a value is refused everywhere
 * with the same message.  Messages name the member and the value, never a
 * file path or a flag: the caller prefixes where the value came from.  They
 * are the caller's usage (tutti_last_error_kind: TUTTI_ERR_UNSUPPORTED, the
 * CLI exits 2). */
#include <math.h>
#include <string.h>

#include "util/error.h"

int tutti_check_temp(int32_t member, float t) {
    if (isnan(t)) return 0; /* the default, 1 */
    if (!(t >= TUTTI_TEMP_MIN && t <= TUTTI_TEMP_MAX))
        return tutti_set_usage_error("member %d: temperature %g is out of range: a member's temperature must be in "
                                     "[%g, %g] (1 = the model's own distribution)",
                                     member, (double)t, TUTTI_TEMP_MIN, TUTTI_TEMP_MAX);
    return 0;
}

float tutti_default_weight(int32_t member, int32_t n_members, tutti_fusion_rule rule) {
    if (n_members < 1) return NAN;
    if (rule == TUTTI_RULE_CONTRASTIVE) return member == 1 ? 1.0f : -0.5f / (float)(n_members > 1 ? n_members - 1 : 1);
    return 1.0f / (float)n_members;
}

int tutti_check_weights(const float *given, int32_t n, tutti_fusion_rule rule) {
    if (n < 1 || n > TUTTI_ENSEMBLE_MAX_MEMBERS)
        return tutti_set_usage_error("an ensemble needs 1 to %d members (got %d)", TUTTI_ENSEMBLE_MAX_MEMBERS, n);
    if ((unsigned)rule > TUTTI_RULE_CONTRASTIVE) return tutti_set_usage_error("unknown fusion rule %d", (int)rule);
    if (rule == TUTTI_RULE_CONTRASTIVE && n < 2)
        return tutti_set_usage_error(
            "the contrastive rule needs an expert and at least one amateur (2 or more members, "
            "got %d)",
            n);
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool any = false;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        w[i] = given && !isnan(given[i]) ? given[i] : tutti_default_weight(i + 1, n, rule);
        if (isinf(w[i]))
            return tutti_set_usage_error("member %d: weight %g is not a finite number", i + 1, (double)w[i]);
        if (w[i] < 0 && rule != TUTTI_RULE_CONTRASTIVE)
            return tutti_set_usage_error("member %d: weight %g is negative: only the contrastive rule takes negative "
                                         "weights (its amateurs)",
                                         i + 1, (double)w[i]);
        any |= w[i] != 0;
        sum += w[i];
    }
    if (!any) return tutti_set_usage_error("every weight is 0: give at least one member a positive weight");
    if (rule == TUTTI_RULE_CONTRASTIVE && !(w[0] > 0))
        return tutti_set_usage_error("member 1: the contrastive rule's expert needs a positive weight (got %g)",
                                     (double)w[0]);
    if ((rule == TUTTI_RULE_MIX || rule == TUTTI_RULE_PRODUCT) && !(sum > 0))
        return tutti_set_usage_error("the weights must sum to a positive number (they sum to %g)", sum);
    return 0;
}

int tutti_check_adapt(double alpha) {
    if (!(alpha >= 0 && alpha <= 1))
        return tutti_set_usage_error("adapt: the fixed-share alpha must be in [0, 1] (got %g)", alpha);
    return 0;
}

int tutti_check_route(double tau) {
    if (!(tau >= TUTTI_ROUTE_TAU_MIN && tau <= TUTTI_ROUTE_TAU_MAX))
        return tutti_set_usage_error("route: the temperature tau must be in [%g, %g] nats per byte (got %g)",
                                     TUTTI_ROUTE_TAU_MIN, TUTTI_ROUTE_TAU_MAX, tau);
    return 0;
}

int tutti_ensemble_params_check(const tutti_ensemble_params *p) {
    if (!p || !p->members || p->n_members < 1 || p->n_members > TUTTI_ENSEMBLE_MAX_MEMBERS)
        return tutti_set_usage_error("an ensemble needs 1 to %d members (got %d)", TUTTI_ENSEMBLE_MAX_MEMBERS,
                                     p ? p->n_members : 0);
    if ((unsigned)p->rule > TUTTI_RULE_CONTRASTIVE)
        return tutti_set_usage_error("unknown fusion rule %d", (int)p->rule);
    if ((unsigned)p->align > TUTTI_ALIGN_SPAN) return tutti_set_usage_error("unknown alignment %d", (int)p->align);
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < p->n_members; i++) {
        if (tutti_check_temp(i + 1, p->members[i].temp) < 0) return TUTTI_ERR;
        w[i] = p->members[i].weight;
    }
    if (tutti_check_weights(w, p->n_members, p->rule) < 0) return TUTTI_ERR;
    /* 0 (or below) takes the default */
    if (p->beta > 0 && !(p->beta <= 1))
        return tutti_set_usage_error("the contrastive plausibility cut beta must be in (0, 1] (got %g)",
                                     (double)p->beta);
    if (p->prune >= 0 && !(p->prune < 1))
        return tutti_set_usage_error("the byte alignment's pruning share must be in [0, 1) (got %g)", p->prune);
    if (p->max_hyps > 4096)
        return tutti_set_usage_error("the byte alignment keeps at most 4096 hypotheses per member (got %d)",
                                     p->max_hyps);
    return 0;
}

int tutti_check_context(const tutti_context_weights *cw, int32_t n_members) {
    if (!cw || cw->n_features == 0) return 0;
    if (cw->n_features < 0 || cw->n_features > TUTTI_N_FEATURES)
        return tutti_set_error("context weights: %d features (1 to %d)", cw->n_features, TUTTI_N_FEATURES);
    unsigned seen = 0;
    for (int32_t k = 0; k < cw->n_features; k++) {
        int32_t f = cw->features[k];
        if (f < 0 || f >= TUTTI_N_FEATURES) return tutti_set_error("context weights: unknown feature %d", f);
        if (seen & (1u << f))
            return tutti_set_error("context weights: feature %s named twice", tutti_feature_name((tutti_feature)f));
        seen |= 1u << f;
    }
    if (!(cw->halflife >= TUTTI_HALFLIFE_MIN && cw->halflife <= TUTTI_HALFLIFE_MAX))
        return tutti_set_error("context weights: half-life %g is not in [%g, %g] units", cw->halflife,
                               TUTTI_HALFLIFE_MIN, TUTTI_HALFLIFE_MAX);
    for (int32_t i = 0; i < n_members; i++)
        for (int32_t k = 0; k < cw->n_features; k++) {
            float b = cw->coef[i][k];
            if (!isfinite(b) || fabsf(b) > TUTTI_COEF_MAX)
                return tutti_set_error("context weights: member %d's coefficient for %s is %g (finite, |b| <= %g)",
                                       i + 1, tutti_feature_name((tutti_feature)cw->features[k]), (double)b,
                                       TUTTI_COEF_MAX);
        }
    return 0;
}

int tutti_check_select(double threshold) {
    if (threshold < 0) return 0; /* off */
    if (!(threshold <= TUTTI_SELECT_MAX))
        return tutti_set_error("selective fusion: threshold %g is not in [0, %g] nats", threshold, TUTTI_SELECT_MAX);
    return 0;
}
