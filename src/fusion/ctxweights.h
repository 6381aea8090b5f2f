/* The weights of one unit (internal): static, context-dependent
 * (tutti_ensemble_set_context), following the text (adapt.c's fixed share)
 * and selective fusion (tutti_ensemble_set_select), computed the same way
 * in generation (gen.c and the alignments), evaluation and fitting
 * (eval.c, fit_ctx.c), so a fitted setting scores in eval what it fitted.
 *
 * A weigher follows one stream of units (a generation; eval's chunks, each
 * from BOS, in a row):
 *
 *   fusion_weigher_begin(&s, e, W)        the given weights W (e->w or routed)
 *   per stream:  fusion_weigher_stream(&s)   (an eval chunk's BOS)
 *   per unit:    lead = fusion_weigher_unit(&s, logp, n, gone, w)
 *                ... fuse with w (or take member `lead` alone when >= 0) ...
 *                fusion_weigher_observe(&s, unit_logp, gone, unit_bytes)
 *
 * Features (tutti.h): member i's row logp[i][0..n) gives ENTROPY, TOP and
 * AGREE; LOSS comes from the log-probabilities observe() received.  Adapt
 * mixes its posterior with the unit's base weights (the context weights, or
 * the normalised W): w(t) = (1 - alpha) post(t-1) + alpha base(t); post is
 * Bayes' rule over the members present (fusion_adapt_update with alpha 0: a
 * gone member sleeps, its weight kept for when it is back), in logarithms,
 * carried from stream to stream as eval does. */
#ifndef TUTTI_FUSION_CTXWEIGHTS_H
#define TUTTI_FUSION_CTXWEIGHTS_H

#include "fusion/ensemble_impl.h"

/* Log-losses are clamped here (nats) before they enter LOSS: a member that
 * rules the unit out would otherwise make the feature infinite. */
#define FUSION_LOSS_CLAMP 30.0

/* LOSS state: per member the decayed sums of clamped log-losses (m) and of
 * weights (z); the feature is m/z (0 while z is 0). */
typedef struct fusion_loss_state {
    double lambda; /* 2^(-1/halflife) */
    double m[TUTTI_ENSEMBLE_MAX_MEMBERS], z[TUTTI_ENSEMBLE_MAX_MEMBERS];
} fusion_loss_state;

void fusion_loss_reset(fusion_loss_state *ls, double halflife);
/* After a unit: member i's log-probability of it per byte (lp[i] / bytes;
 * -inf counts as the clamp), skipped for gone members. */
void fusion_loss_push(fusion_loss_state *ls, int32_t n_members, const double *lp, const bool *gone, double bytes);

/* The features of every member at one unit, f[i][TUTTI_FEAT_*], from the
 * rows logp[i][0..n) (log-probabilities; gone[i]: no row, features 0) and
 * the loss state.  need: bit (1 << TUTTI_FEAT_*) per feature wanted (the
 * others are 0).  scratch: (n_members + 1) * n floats. */
void fusion_unit_features(int32_t n_members, const float *const *logp, int32_t n, const bool *gone,
                          const fusion_loss_state *ls, unsigned need, float *scratch, double (*f)[TUTTI_N_FEATURES]);

/* Context weights of one unit: w[i] = W_i exp(Σ_k b_ik f[i][features[k]])
 * normalised over the members with W_i > 0 that are not gone (the others
 * 0).  false when no member is left (w all 0). */
bool fusion_context_apply(const tutti_context_weights *cw, int32_t n_members, const float *W,
                          const double (*f)[TUTTI_N_FEATURES], const bool *gone, double *w);

/* The generalised Jensen-Shannon divergence H(Σ w_i p_i) - Σ w_i H(p_i)
 * (nats, clamped at 0) of the rows under the weights w (sum 1 over the
 * members with w > 0).  p: the rows' probabilities, [n_members][n] (as
 * fusion_unit_features leaves them in scratch when it ran); mix: n floats. */
double fusion_disagreement(int32_t n_members, const float *const *logp, const float *p, int32_t n, const double *w,
                           float *mix);

typedef struct fusion_weigher {
    const tutti_ensemble *e; /* borrowed: the member count for adapt.c */
    int32_t n;
    tutti_fusion_rule rule;
    bool ctx, adapt, select, measure; /* measure: features and d at every unit, unused (fitting) */
    tutti_context_weights cw;
    double alpha, threshold;
    unsigned need;   /* features the context weights use */
    unsigned mneed;  /* measure: features computed, unused */
    double halflife; /* of LOSS (the context weights', or measure's) */
    float W[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double prior[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* W normalised over W > 0 */
    double lpost[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* adapt: log posterior after the last unit (every member) */
    double lw[TUTTI_ENSEMBLE_MAX_MEMBERS];    /* adapt: this unit's log-weights (every member) */
    bool have_post;
    fusion_loss_state ls;
    float *scratch;
    size_t cap;
    /* this unit */
    double f[TUTTI_ENSEMBLE_MAX_MEMBERS][TUTTI_N_FEATURES];
    double w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double d; /* disagreement (select or measure), else 0 */
    int64_t n_units, n_fused;
} fusion_weigher;

/* Takes the ensemble's settings and the given weights W[n] (copied).
 * TUTTI_ERR: context weights under a rule other than MIX and PRODUCT. */
int fusion_weigher_begin(fusion_weigher *s, const tutti_ensemble *e, const float *W);
void fusion_weigher_free(fusion_weigher *s);
/* true when the weights change from unit to unit (context, adapt). */
bool fusion_weigher_varies(const fusion_weigher *s);
/* true when fusion_weigher_unit needs the members' rows (context, select). */
bool fusion_weigher_needs_rows(const fusion_weigher *s);
/* true when observe needs each member's log-probability of the unit
 * (adapt, LOSS). */
bool fusion_weigher_needs_logp(const fusion_weigher *s);
/* Computes the features features[0..K) (halflife for LOSS) at every unit
 * without using them (the weights stay as they were) and the disagreement
 * D(t) (s->f, s->d): what fitting reads. */
void fusion_weigher_measure(fusion_weigher *s, const int32_t *features, int32_t K, double halflife);
/* A new stream from BOS (an eval chunk): LOSS starts again. */
void fusion_weigher_stream(fusion_weigher *s);
/* This unit's weights into w[n] (float; 0 for gone members), also kept in
 * s->w (double).  logp may be NULL unless needs_rows.  Returns the member
 * that speaks alone (selective fusion, the members agree: the largest
 * weight, lowest index on ties), or -1: fuse.  TUTTI_ERR (< -1) when no
 * member with weight > 0 is present. */
int32_t fusion_weigher_unit(fusion_weigher *s, const float *const *logp, int32_t n, const bool *gone, float *w);
/* After the unit: lp[i] member i's log-probability of it (-inf: none),
 * gone, and the unit's bytes (SPAN; 1 otherwise, LOSS is per byte).
 * Returns the mixture's log-probability of the unit under this unit's
 * weights, log (Σ w_i p_i / Σ w_i) over the members present (-inf when none
 * gave it mass). */
double fusion_weigher_observe(fusion_weigher *s, const double *lp, const bool *gone, double bytes);

#endif
