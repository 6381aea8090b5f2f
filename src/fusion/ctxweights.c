/* Context-dependent weights, selective fusion and the per-unit weigher that
 * applies them with adapt's fixed share (ctxweights.h; the formulas are in
 * tutti.h at tutti_context_weights and tutti_ensemble_set_select).
 *
 * Why these features: a fixed weight per member cannot say "trust the poem
 * model inside a poem and the story model in dialogue"; what each member
 * shows at every unit can.  A member that knows the text is usually sure
 * (low ENTROPY, high TOP), predicted the last units well (low LOSS) and
 * agrees with the others where the text is easy (AGREE).  All four are
 * computed from the members' own distributions and the text so far, never
 * from the fused result, so they do not depend on the weights being fitted
 * (fit_ctx.c computes them once per text) and mean the same in every
 * alignment (ENTROPY is divided by the log of the outcome count). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ctxweights.h"
#include "util/error.h"

static const char *const feature_names[TUTTI_N_FEATURES] = {"entropy", "top", "loss", "agree"};

const char *tutti_feature_name(tutti_feature f) { return (unsigned)f < TUTTI_N_FEATURES ? feature_names[f] : "?"; }

int tutti_feature_parse(const char *name) {
    for (int k = 0; k < TUTTI_N_FEATURES; k++)
        if (name && !strcmp(name, feature_names[k])) return k;
    return -1;
}

int tutti_ensemble_set_context(tutti_ensemble *e, const tutti_context_weights *cw) {
    if (!e) return tutti_set_error("context weights: missing ensemble");
    if (!cw || cw->n_features == 0) {
        memset(&e->ctx, 0, sizeof e->ctx);
        return 0;
    }
    if (tutti_check_context(cw, e->n) < 0) return TUTTI_ERR;
    if (e->rule != TUTTI_RULE_MIX && e->rule != TUTTI_RULE_PRODUCT)
        return tutti_set_error("context weights need the mix or product rule, not %s", tutti_rule_name(e->rule));
    e->ctx = *cw;
    for (int32_t i = e->n; i < TUTTI_ENSEMBLE_MAX_MEMBERS; i++)
        for (int32_t k = 0; k < TUTTI_N_FEATURES; k++) e->ctx.coef[i][k] = 0;
    return 0;
}

int32_t tutti_ensemble_context(const tutti_ensemble *e, tutti_context_weights *out) {
    if (!e) return 0;
    if (out) *out = e->ctx;
    return e->ctx.n_features;
}

int tutti_ensemble_set_select(tutti_ensemble *e, double threshold) {
    if (!e) return tutti_set_error("selective fusion: missing ensemble");
    if (threshold < 0) {
        e->select = -1;
        return 0;
    }
    if (tutti_check_select(threshold) < 0) return TUTTI_ERR;
    if (e->align == TUTTI_ALIGN_SPAN)
        return tutti_set_error("selective fusion needs token or byte alignment (a span draft is one member's)");
    if (e->rule == TUTTI_RULE_CONTRASTIVE)
        return tutti_set_error("selective fusion needs weights >= 0 (mix, product or gate), not contrastive");
    e->select = threshold;
    return 0;
}

double tutti_ensemble_select(const tutti_ensemble *e) { return e && e->select >= 0 ? e->select : -1; }

/* ---- features ---- */

void fusion_loss_reset(fusion_loss_state *ls, double halflife) {
    memset(ls, 0, sizeof *ls);
    ls->lambda = pow(2.0, -1.0 / (halflife > 0 ? halflife : 16));
}

void fusion_loss_push(fusion_loss_state *ls, int32_t n_members, const double *lp, const bool *gone, double bytes) {
    for (int32_t i = 0; i < n_members; i++) {
        if (gone && gone[i]) continue;
        double l = lp[i] > -INFINITY ? -lp[i] / (bytes > 0 ? bytes : 1) : FUSION_LOSS_CLAMP;
        l = l < 0 ? 0 : l > FUSION_LOSS_CLAMP ? FUSION_LOSS_CLAMP : l;
        ls->m[i] = ls->lambda * ls->m[i] + l;
        ls->z[i] = ls->lambda * ls->z[i] + 1;
    }
}

/* p[x] = exp(logp[x]) and the row's entropy in nats */
static double row_exp(const float *logp, int32_t n, float *p) {
    double h = 0;
    for (int32_t x = 0; x < n; x++) {
        float l = logp[x];
        p[x] = l > -INFINITY ? fusion_fast_exp(l) : 0.0f;
        if (p[x] > 0) h -= (double)p[x] * (double)l;
    }
    return h;
}

void fusion_unit_features(int32_t n_members, const float *const *logp, int32_t n, const bool *gone,
                          const fusion_loss_state *ls, unsigned need, float *scratch, double (*f)[TUTTI_N_FEATURES]) {
    float *sum = scratch + (size_t)n_members * (size_t)n;
    int32_t n_present = 0;
    bool rows = need & ((1u << TUTTI_FEAT_ENTROPY) | (1u << TUTTI_FEAT_TOP) | (1u << TUTTI_FEAT_AGREE));
    bool agree = need & (1u << TUTTI_FEAT_AGREE);
    if (agree)
        for (int32_t x = 0; x < n; x++) sum[x] = 0;
    double logn = n > 1 ? log((double)n) : 1;
    for (int32_t i = 0; i < n_members; i++) {
        for (int k = 0; k < TUTTI_N_FEATURES; k++) f[i][k] = 0;
        if (gone && gone[i]) continue;
        n_present++;
        f[i][TUTTI_FEAT_LOSS] = ls && ls->z[i] > 0 ? ls->m[i] / ls->z[i] : 0;
        if (!rows) continue;
        float *p = scratch + (size_t)i * (size_t)n;
        double h = row_exp(logp[i], n, p);
        f[i][TUTTI_FEAT_ENTROPY] = n > 1 ? h / logn : 0;
        float mx = 0;
        for (int32_t x = 0; x < n; x++) mx = p[x] > mx ? p[x] : mx;
        f[i][TUTTI_FEAT_TOP] = mx;
        if (agree)
            for (int32_t x = 0; x < n; x++) sum[x] += p[x];
    }
    for (int32_t i = 0; agree && n_present > 1 && i < n_members; i++) {
        if (gone && gone[i]) continue;
        const float *p = scratch + (size_t)i * (size_t)n;
        double a = 0;
        for (int32_t x = 0; x < n; x++) a += (double)p[x] * ((double)sum[x] - (double)p[x]);
        f[i][TUTTI_FEAT_AGREE] = a / (n_present - 1);
    }
    for (int32_t i = 0; i < n_members; i++)
        for (int k = 0; k < TUTTI_N_FEATURES; k++)
            if (!(need & (1u << k))) f[i][k] = 0;
}

bool fusion_context_apply(const tutti_context_weights *cw, int32_t n_members, const float *W,
                          const double (*f)[TUTTI_N_FEATURES], const bool *gone, double *w) {
    double u[TUTTI_ENSEMBLE_MAX_MEMBERS], mx = -INFINITY;
    for (int32_t i = 0; i < n_members; i++) {
        u[i] = -INFINITY;
        if (!(W[i] > 0) || (gone && gone[i])) continue;
        double a = log((double)W[i]);
        for (int32_t k = 0; k < cw->n_features; k++) a += (double)cw->coef[i][k] * f[i][cw->features[k]];
        u[i] = a;
        if (a > mx) mx = a;
    }
    double z = 0;
    for (int32_t i = 0; i < n_members; i++) z += (w[i] = u[i] > -INFINITY ? exp(u[i] - mx) : 0);
    if (!(z > 0)) return false;
    for (int32_t i = 0; i < n_members; i++) w[i] /= z;
    return true;
}

double fusion_disagreement(int32_t n_members, const float *const *logp, const float *p, int32_t n, const double *w,
                           float *mix) {
    double hw = 0;
    for (int32_t x = 0; x < n; x++) mix[x] = 0;
    for (int32_t i = 0; i < n_members; i++) {
        if (!(w[i] > 0)) continue;
        const float *pi = p + (size_t)i * (size_t)n, *li = logp[i];
        double h = 0;
        float wi = (float)w[i];
        for (int32_t x = 0; x < n; x++) {
            if (pi[x] > 0) h -= (double)pi[x] * (double)li[x];
            mix[x] += wi * pi[x];
        }
        hw += w[i] * h;
    }
    double hm = 0;
    for (int32_t x = 0; x < n; x++)
        if (mix[x] > 0) hm -= (double)mix[x] * log((double)mix[x]);
    return hm - hw > 0 ? hm - hw : 0;
}

/* ---- the weigher ---- */

int fusion_weigher_begin(fusion_weigher *s, const tutti_ensemble *e, const float *W) {
    memset(s, 0, sizeof *s);
    s->e = e;
    s->n = e->n;
    s->rule = e->rule;
    s->ctx = e->ctx.n_features > 0;
    s->adapt = e->adapt_on;
    s->alpha = e->adapt_alpha;
    s->select = e->select >= 0;
    s->threshold = e->select;
    s->cw = e->ctx;
    if (s->ctx && e->rule != TUTTI_RULE_MIX && e->rule != TUTTI_RULE_PRODUCT)
        return tutti_set_error("context weights need the mix or product rule, not %s", tutti_rule_name(e->rule));
    if (s->select && e->rule == TUTTI_RULE_CONTRASTIVE)
        return tutti_set_error("selective fusion needs weights >= 0 (mix, product or gate), not contrastive");
    for (int32_t k = 0; k < s->cw.n_features; k++) s->need |= 1u << s->cw.features[k];
    memcpy(s->W, W, sizeof(float) * (size_t)e->n);
    fusion_adapt_prior(e, W, s->prior);
    s->halflife = s->ctx ? s->cw.halflife : 16;
    fusion_loss_reset(&s->ls, s->halflife);
    return 0;
}

void fusion_weigher_measure(fusion_weigher *s, const int32_t *features, int32_t K, double halflife) {
    s->measure = true;
    s->mneed = 0;
    for (int32_t k = 0; k < K; k++) s->mneed |= 1u << features[k];
    if (!s->ctx && K > 0) s->halflife = halflife;
    fusion_loss_reset(&s->ls, s->halflife);
}

void fusion_weigher_free(fusion_weigher *s) {
    free(s->scratch);
    s->scratch = NULL;
    s->cap = 0;
}

bool fusion_weigher_varies(const fusion_weigher *s) { return s->ctx || s->adapt; }
bool fusion_weigher_needs_rows(const fusion_weigher *s) {
    return (s->ctx && (s->need & ~(1u << TUTTI_FEAT_LOSS))) || s->select || s->measure;
}
bool fusion_weigher_needs_logp(const fusion_weigher *s) {
    return s->adapt || ((s->need | s->mneed) & (1u << TUTTI_FEAT_LOSS));
}

void fusion_weigher_stream(fusion_weigher *s) { fusion_loss_reset(&s->ls, s->halflife); }

/* the rows' probabilities in scratch (members that features skipped) */
static void fill_rows(fusion_weigher *s, const float *const *logp, int32_t n, const bool *gone, bool have) {
    if (have) return;
    for (int32_t i = 0; i < s->n; i++)
        if (!(gone && gone[i]) && s->w[i] > 0) row_exp(logp[i], n, s->scratch + (size_t)i * (size_t)n);
}

/* Adapt: this unit's log-weights s->lw (every member): the posterior after
 * the last unit with fixed share toward the base weights among the members
 * present (a gone member sleeps: adapt.c), or at the first unit the base
 * weights (a gone member's base is its prior: it has no context weight);
 * then the weights of the members present into base (normalised over them;
 * relative to the largest, so that they do not underflow when a sleeping
 * member leads). */
static void adapt_weights(fusion_weigher *s, const bool *gone, double *base) {
    if (s->have_post) {
        memcpy(s->lw, s->lpost, sizeof(double) * (size_t)s->n);
        fusion_adapt_share(s->e, s->alpha, base, s->lw, gone);
    } else {
        double b[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < s->n; i++) b[i] = gone && gone[i] ? s->prior[i] : base[i];
        fusion_adapt_start(s->e, b, s->lw);
    }
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < s->n; i++)
        if (!(gone && gone[i]) && s->lw[i] > mx) mx = s->lw[i];
    for (int32_t i = 0; i < s->n; i++) z += (base[i] = (gone && gone[i]) || mx == -INFINITY ? 0 : exp(s->lw[i] - mx));
    for (int32_t i = 0; z > 0 && i < s->n; i++) base[i] /= z;
}

int32_t fusion_weigher_unit(fusion_weigher *s, const float *const *logp, int32_t n, const bool *gone, float *w) {
    bool rows = logp && fusion_weigher_needs_rows(s);
    if (rows) {
        size_t want = (size_t)(s->n + 2) * (size_t)n;
        if (want > s->cap) {
            float *ns = realloc(s->scratch, sizeof(float) * want);
            if (!ns) return tutti_set_error("fusion: out of memory"), TUTTI_ERR;
            s->scratch = ns, s->cap = want;
        }
    }
    double base[TUTTI_ENSEMBLE_MAX_MEMBERS];
    unsigned fneed = (s->ctx ? s->need : 0) | (s->measure ? s->mneed : 0);
    if (!rows) fneed &= 1u << TUTTI_FEAT_LOSS;
    bool have_p = fneed & ~(1u << TUTTI_FEAT_LOSS);
    if (fneed) fusion_unit_features(s->n, logp, n, gone, &s->ls, fneed, s->scratch, s->f);
    if (s->ctx) {
        if (!fusion_context_apply(&s->cw, s->n, s->W, (const double(*)[TUTTI_N_FEATURES])s->f, gone, base))
            return tutti_set_error("fusion: no member with weight > 0 is left"), TUTTI_ERR;
    } else {
        memcpy(base, s->prior, sizeof(double) * (size_t)s->n);
    }
    if (s->adapt) adapt_weights(s, gone, base);
    double sum = 0;
    for (int32_t i = 0; i < s->n; i++) {
        s->w[i] = gone && gone[i] ? 0 : base[i];
        sum += s->w[i];
        w[i] = (float)s->w[i];
    }
    if (!(sum > 0)) return tutti_set_error("fusion: no member with weight > 0 is left"), TUTTI_ERR;
    s->n_units++;
    s->d = 0;
    if (rows && (s->select || s->measure)) {
        double wn[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < s->n; i++) wn[i] = s->w[i] / sum;
        fill_rows(s, logp, n, gone, have_p);
        s->d = fusion_disagreement(s->n, logp, s->scratch, n, wn, s->scratch + (size_t)(s->n + 1) * (size_t)n);
    }
    if (s->select && s->d < s->threshold) {
        int32_t lead = 0;
        for (int32_t i = 1; i < s->n; i++)
            if (s->w[i] > s->w[lead]) lead = i;
        return lead;
    }
    s->n_fused++;
    return -1;
}

double fusion_weigher_observe(fusion_weigher *s, const double *lp, const bool *gone, double bytes) {
    /* Bayes' rule over the members present (alpha 0): the posterior, and
     * the mixture's probability of the unit as its normaliser */
    double lw[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < s->n; i++) lw[i] = s->adapt ? s->lw[i] : s->w[i] > 0 ? log(s->w[i]) : -INFINITY;
    double r = fusion_adapt_update(s->e, 0, s->prior, lw, lp, gone);
    if (s->adapt) {
        memcpy(s->lpost, lw, sizeof(double) * (size_t)s->n);
        s->have_post = true;
    }
    if ((s->need | s->mneed) & (1u << TUTTI_FEAT_LOSS)) fusion_loss_push(&s->ls, s->n, lp, gone, bytes);
    return r;
}
