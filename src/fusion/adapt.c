/* Weights that follow the text: the exact sequence-level mixture of the
 * members (a Bayesian posterior over "which member is writing"), with fixed
 * share (Herbster and Warmuth 1998, "Tracking the best expert"; the variant
 * that shares toward the prior, Bousquet and Warmuth 2002) so the mixture
 * can move to another member when the text changes subject.  At unit x_t,
 * over the members A present there (W_A their weight, P_A their prior):
 *
 *   w_i <- (1 - alpha) w_i + alpha W_A prior_i / P_A     (fixed share)
 *   w_i <- w_i p_i(x_t) W_A / Σ_{j in A} w_j p_j(x_t)    (Bayes after x_t)
 *
 * alpha = 0 is Bayes' rule (the weights of a mixture of whole sequences),
 * alpha = 1 the static prior every step.  The prior is the ensemble's weights
 * (given or fitted) normalised; a member with prior weight 0 stays at 0.
 * The unit is what the alignment commits: a token, a byte or a span.  A
 * member with no distribution at a unit (gone: its context is full, or its
 * tokens cannot spell the text so far) has no say there: the mixture is over
 * the members present, renormalised, and the gone member sleeps (Freund,
 * Schapire, Singer and Warmuth 1997, "Using and combining predictors that
 * specialize"): its weight stays as it was, in both steps.  With alpha 0
 * that is the exact mixture of the members completed by the mixture itself
 * where they are gone (a sleeping member predicts what the mixture does,
 * which leaves its posterior unchanged), so the sequence mixture stays
 * within ln(1/prior_i) of every member that is never gone, and a member that
 * was gone comes back with the weight it had.  (Sharing toward a sleeping
 * member would hand it back its prior while it cannot be checked: a member
 * that left an English paragraph would come back at full weight.)  The
 * fixed share happens before the unit, among the members present at it, so
 * that eval and generation (whose context weights are known only then) do
 * the same.
 *
 * The weights are kept as logarithms: a member hundreds of nats behind has
 * a weight below the smallest double (e^-745), which as a plain number
 * would be 0 and could never grow again although Bayes' rule lets it
 * (with alpha 0 it is only behind, not ruled out).  Only a member that gave
 * the text probability 0 has weight 0 under alpha 0. */
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
        return tutti_set_usage_error(
            "adapt: weights that follow the text need the mix rule (or span alignment), not %s",
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

double fusion_lse2(double a, double b) {
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

void fusion_adapt_start(const tutti_ensemble *e, const double *prior, double *lw) {
    for (int32_t i = 0; i < e->n; i++) lw[i] = prior[i] > 0 ? log(prior[i]) : -INFINITY;
}

void fusion_adapt_share(const tutti_ensemble *e, double alpha, const double *base, double *lw, const bool *gone) {
    if (alpha <= 0) return;
    double la = -INFINITY, lt = -INFINITY, bs = 0;
    for (int32_t i = 0; i < e->n; i++) {
        lt = fusion_lse2(lt, lw[i]);
        if (gone && gone[i]) continue;
        la = fusion_lse2(la, lw[i]);
        bs += base[i] > 0 ? base[i] : 0;
    }
    if (!(bs > 0) || lt == -INFINITY) return;
    /* the members present share alpha of their weight by base; a member
     * that sleeps keeps its own.  When the members present have no weight
     * at all (each ruled out), alpha of everyone's is theirs instead. */
    bool all = la == -INFINITY;
    double l1 = alpha < 1 ? log1p(-alpha) : -INFINITY, ls = log(alpha) + (all ? lt : la) - log(bs);
    for (int32_t i = 0; i < e->n; i++) {
        if (gone && gone[i]) {
            if (all) lw[i] += l1;
            continue;
        }
        lw[i] = fusion_lse2(l1 + lw[i], base[i] > 0 ? ls + log(base[i]) : -INFINITY);
    }
}

double fusion_adapt_update(const tutti_ensemble *e, double alpha, const double *prior, double *lw, const double *logp,
                           const bool *gone) {
    fusion_adapt_share(e, alpha, prior, lw, gone);
    /* la: log of the present members' weight, lq: log of their mixture's
     * mass on the unit (unnormalised) */
    double la = -INFINITY, lq = -INFINITY;
    for (int32_t i = 0; i < e->n; i++) {
        if ((gone && gone[i]) || lw[i] == -INFINITY) continue;
        la = fusion_lse2(la, lw[i]);
        if (logp[i] > -INFINITY) lq = fusion_lse2(lq, lw[i] + logp[i]);
    }
    if (lq == -INFINITY) return -INFINITY; /* no member gave the unit any mass */
    double r = lq - la;
    /* Bayes over the members present, which keep their share la between
     * them; a gone member sleeps (its weight as it was) */
    for (int32_t i = 0; i < e->n; i++)
        if (!(gone && gone[i]) && lw[i] > -INFINITY) lw[i] += logp[i] - r;
    double s = -INFINITY;
    for (int32_t i = 0; i < e->n; i++) s = fusion_lse2(s, lw[i]);
    for (int32_t i = 0; i < e->n; i++) lw[i] -= s; /* rounding only: both steps keep the sum at 1 */
    return r;
}
