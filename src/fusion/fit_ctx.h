/* Fitting context weights (internal; fit_ctx.c): the log-loss of a text
 * under w_i(t) ∝ exp(a_i + Σ_k b_ik f_ik(t)) and its gradient, from the
 * scoring tables of eval_impl.h.  The features do not depend on (a, b)
 * (ctxweights.c), so they are computed once; the loss is then a sum over
 * units of a log-sum-exp of the members' log-probabilities (MIX, SPAN) or
 * of a log-linear pool (PRODUCT), differentiated exactly. */
#ifndef TUTTI_FUSION_FIT_CTX_H
#define TUTTI_FUSION_FIT_CTX_H

#include "fusion/eval_impl.h"

typedef struct ctx_fit_data {
    int32_t n, K;           /* members; features fitted */
    tutti_fusion_rule rule; /* MIX (and SPAN's span mixture) or PRODUCT */
    int64_t n_units;
    double *lp; /* [n_units][n] log-probability of the true unit, -inf: none */
    bool *gone; /* [n_units][n] no distribution there */
    double *f;  /* [n_units][n][K] features, standardised (mean 0, sd 1 over the fitted units) */
    bool *held; /* [n_units] held out (early stopping), or NULL: none */
    bool active[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* the member has weight > 0 (others stay at 0) */
    /* PRODUCT: each member's rows [..][width] and unit u's row and true outcome */
    int width;
    float *const *rows;
    const int32_t *y;
} ctx_fit_data;

/* Negative log-likelihood (nats) of the units of one part: 0 the fitted
 * units, 1 the held-out ones, -1 all; theta = [a_0..a_{n-1}, b_00 .. b_{n-1,K-1}]
 * (row-major per member); grad[n + n*K] (may be NULL) its gradient. */
double fusion_ctx_objective(const ctx_fit_data *d, const double *theta, int part, double *grad);

/* Adam from theta (in place) on part 0, keeping the parameters with the
 * lowest part-1 loss (every unit when held is NULL: a fixed number of
 * steps).  Returns that part-1 loss (nats). */
double fusion_ctx_descend(const ctx_fit_data *d, double *theta, int max_iters);

/* Builds the data of text d (tables rows at the ensemble's temperatures)
 * for the context weights' features (features[0..K), halflife): every
 * fourth chunk held out.  Free with fusion_ctx_data_free. */
int fusion_ctx_data_build(const tutti_ensemble *e, const text_data *d, float *const *rows, const float *W,
                          const int32_t *features, int32_t K, double halflife, ctx_fit_data *out, double *mean,
                          double *sd);
void fusion_ctx_data_free(ctx_fit_data *d);

/* The whole fit: context weights over features[0..K) from the ensemble's
 * weights e->w, each half-life of {4, 16, 64} (one when LOSS is not among
 * them), set on the ensemble with the fitted weights.  *heldout: the
 * held-out loss per byte of the chosen setting (nats), NAN without
 * held-out chunks. */
int fusion_fit_context(tutti_ensemble *e, const text_data *d, float *const *rows, const int32_t *features, int32_t K,
                       double *heldout_bits);

/* The selective-fusion threshold that fuses a share `share` of the text's
 * units under the ensemble's settings (the (1 - share) quantile of D(t)). */
int fusion_select_threshold(tutti_ensemble *e, const text_data *d, float *const *rows, double share, double *thr);

#endif
