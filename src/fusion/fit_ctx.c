/* Fitting context weights (fit_ctx.h) and measuring the selective-fusion
 * threshold.
 *
 * Parameters theta = (a_i, b_ik): w_i(t) = softmax over the members present
 * of a_i + Σ_k b_ik f_ik(t).  The loss is the text's negative
 * log-likelihood, as eval scores it:
 *   MIX      L_t = -log Σ_i w_i p_i(y_t)
 *   PRODUCT  L_t = -(s_t(y_t) - log Σ_x exp s_t(x)),  s_t(x) = Σ_i w_i log p_i(x)
 * with dL_t/dw_i = g_i = -p_i(y)/Σ_j w_j p_j(y) (MIX) or -(log p_i(y) -
 * E_fused[log p_i]) (PRODUCT), and through the softmax dL_t/d(a_i + b_i·f_i)
 * = w_i (g_i - Σ_j w_j g_j).  Features are standardised for the descent
 * (Adam), and the result mapped back exactly: b_raw = b/sd, a_raw = a -
 * Σ_k b_k mean_k/sd_k, the member weights W = softmax(a_raw).  Every fourth
 * chunk is held out; the descent keeps the parameters where the held-out
 * loss is lowest (early stopping), so the coefficients do not chase the
 * fitted text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ctxweights.h"
#include "fusion/fit_ctx.h"
#include "util/error.h"

/* Loss of both parts in one pass (L[0] fitted units, L[1] held out) and the
 * gradient of the units of `part` (-1: all). */
static void objective2(const ctx_fit_data *d, const double *theta, int part, double *grad, double *L, double *s) {
    int32_t n = d->n, K = d->K;
    L[0] = L[1] = 0;
    if (grad) memset(grad, 0, sizeof(double) * (size_t)(n + n * K));
    for (int64_t u = 0; u < d->n_units; u++) {
        int hp = d->held && d->held[u];
        const double *lp = d->lp + (size_t)u * (size_t)n, *f = d->f + (size_t)u * (size_t)n * (size_t)K;
        const bool *gone = d->gone + (size_t)u * (size_t)n;
        double z[TUTTI_ENSEMBLE_MAX_MEMBERS], c[TUTTI_ENSEMBLE_MAX_MEMBERS], g[TUTTI_ENSEMBLE_MAX_MEMBERS];
        double mx = -INFINITY, lmx = -INFINITY, zs = 0;
        for (int32_t i = 0; i < n; i++) {
            c[i] = 0;
            if (!d->active[i] || gone[i]) continue;
            z[i] = theta[i];
            for (int32_t k = 0; k < K; k++) z[i] += theta[n + i * K + k] * f[i * K + k];
            if (z[i] > mx) mx = z[i];
            if (lp[i] > lmx) lmx = lp[i];
        }
        if (mx == -INFINITY || lmx == -INFINITY) continue; /* nobody can score this unit: no weight changes that */
        for (int32_t i = 0; i < n; i++)
            if (d->active[i] && !gone[i]) zs += (c[i] = exp(z[i] - mx));
        for (int32_t i = 0; i < n; i++) c[i] /= zs;
        double Lu;
        if (d->rule == TUTTI_RULE_PRODUCT) {
            const float *r[TUTTI_ENSEMBLE_MAX_MEMBERS];
            for (int32_t i = 0; i < n; i++) r[i] = c[i] > 0 ? d->rows[i] + (size_t)u * (size_t)d->width : NULL;
            Lu = -fusion_pool_unit(n, r, c, d->width, d->y[u], s, grad ? g : NULL);
            for (int32_t i = 0; grad && i < n; i++) g[i] = r[i] ? -g[i] : 0;
        } else {
            double q = 0, e[TUTTI_ENSEMBLE_MAX_MEMBERS];
            for (int32_t i = 0; i < n; i++) q += c[i] * (e[i] = c[i] > 0 ? exp(lp[i] - lmx) : 0);
            Lu = -(lmx + log(q));
            for (int32_t i = 0; i < n; i++) g[i] = -e[i] / q;
        }
        L[hp] += Lu;
        if (!grad || (part >= 0 && part != hp)) continue;
        double gb = 0;
        for (int32_t i = 0; i < n; i++) gb += c[i] * g[i];
        for (int32_t i = 0; i < n; i++) {
            if (!(c[i] > 0)) continue;
            double dz = c[i] * (g[i] - gb);
            grad[i] += dz;
            for (int32_t k = 0; k < K; k++) grad[n + i * K + k] += dz * f[i * K + k];
        }
    }
}

double fusion_ctx_objective(const ctx_fit_data *d, const double *theta, int part, double *grad) {
    double L[2];
    double *s = d->rule == TUTTI_RULE_PRODUCT ? malloc(sizeof(double) * (size_t)d->width) : NULL;
    if (d->rule == TUTTI_RULE_PRODUCT && !s) return INFINITY;
    objective2(d, theta, part, grad, L, s);
    free(s);
    return part < 0 ? L[0] + L[1] : L[part];
}

double fusion_ctx_descend(const ctx_fit_data *d, double *theta, int max_iters) {
    int32_t dim = d->n + d->n * d->K;
    double g[TUTTI_ENSEMBLE_MAX_MEMBERS * (1 + TUTTI_N_FEATURES)],
        m1[TUTTI_ENSEMBLE_MAX_MEMBERS * (1 + TUTTI_N_FEATURES)] = {0},
                                             m2[TUTTI_ENSEMBLE_MAX_MEMBERS * (1 + TUTTI_N_FEATURES)] = {0},
                                             best_t[TUTTI_ENSEMBLE_MAX_MEMBERS * (1 + TUTTI_N_FEATURES)];
    int64_t n_fit = 0;
    bool held = false;
    for (int64_t u = 0; u < d->n_units; u++) {
        bool h = d->held && d->held[u];
        held |= h;
        n_fit += !h;
    }
    double *s = d->rule == TUTTI_RULE_PRODUCT ? malloc(sizeof(double) * (size_t)d->width) : NULL;
    if (d->rule == TUTTI_RULE_PRODUCT && !s) return INFINITY;
    double best = INFINITY;
    memcpy(best_t, theta, sizeof(double) * (size_t)dim);
    int since = 0;
    for (int it = 0; it <= max_iters; it++) {
        double L[2];
        objective2(d, theta, held ? 0 : -1, g, L, s);
        double score = held ? L[1] : L[0] + L[1];
        if (best == INFINITY ? score < best : score < best - 1e-9 * fabs(best)) {
            best = score;
            memcpy(best_t, theta, sizeof(double) * (size_t)dim);
            since = 0;
        } else if (held && ++since > 60) {
            break; /* the held-out loss stopped improving */
        }
        if (it == max_iters) break;
        for (int32_t j = 0; j < dim; j++) {
            int32_t i = j < d->n ? j : (j - d->n) / d->K;
            if (!d->active[i]) continue;
            double gt = g[j] / (double)(n_fit ? n_fit : 1);
            m1[j] = 0.9 * m1[j] + 0.1 * gt;
            m2[j] = 0.999 * m2[j] + 0.001 * gt * gt;
            double mh = m1[j] / (1 - pow(0.9, it + 1)), vh = m2[j] / (1 - pow(0.999, it + 1));
            theta[j] -= 0.05 * mh / (sqrt(vh) + 1e-8);
        }
    }
    free(s);
    memcpy(theta, best_t, sizeof(double) * (size_t)dim);
    return best;
}

void fusion_ctx_data_free(ctx_fit_data *d) {
    free(d->lp), free(d->gone), free(d->f), free(d->held);
    memset(d, 0, sizeof *d);
}

typedef struct build_hook {
    ctx_fit_data *d;
    const int32_t *features;
    bool hold; /* every fourth chunk held out */
} build_hook;

static void record_unit(void *user, int64_t u, int chunk, const fusion_weigher *s, const double *lp, const bool *gone) {
    build_hook *h = user;
    ctx_fit_data *d = h->d;
    for (int32_t i = 0; i < d->n; i++) {
        d->lp[u * d->n + i] = lp[i];
        d->gone[u * d->n + i] = gone[i];
        for (int32_t k = 0; k < d->K; k++)
            d->f[((size_t)u * (size_t)d->n + (size_t)i) * (size_t)d->K + (size_t)k] = s->f[i][h->features[k]];
    }
    d->held[u] = h->hold && chunk % 4 == 3;
}

int fusion_ctx_data_build(const tutti_ensemble *e, const text_data *d, float *const *rows, const float *W,
                          const int32_t *features, int32_t K, double halflife, ctx_fit_data *out, double *mean,
                          double *sd) {
    memset(out, 0, sizeof *out);
    int32_t n = e->n;
    int64_t nu = text_data_units(e, d);
    out->n = n, out->K = K, out->n_units = nu;
    out->rule = e->align == TUTTI_ALIGN_SPAN ? TUTTI_RULE_MIX : e->rule;
    out->width = d->width, out->rows = rows, out->y = d->y;
    out->lp = malloc(sizeof(double) * (size_t)(nu ? nu : 1) * (size_t)n);
    out->gone = malloc(sizeof(bool) * (size_t)(nu ? nu : 1) * (size_t)n);
    out->f = malloc(sizeof(double) * (size_t)(nu ? nu : 1) * (size_t)n * (size_t)(K ? K : 1));
    out->held = calloc((size_t)(nu ? nu : 1), sizeof(bool));
    if (!out->lp || !out->gone || !out->f || !out->held) {
        fusion_ctx_data_free(out);
        return tutti_set_error("fit: out of memory");
    }
    for (int32_t i = 0; i < n; i++) out->active[i] = W[i] > 0;
    /* the features at every unit, exactly as the weigher computes them in
     * eval and generation: one pass of eval's weighed path with the
     * features measured and the weights left static */
    tutti_ensemble *em = (tutti_ensemble *)e;
    tutti_context_weights saved = em->ctx;
    double saved_sel = em->select;
    bool saved_adapt = em->adapt_on;
    memset(&em->ctx, 0, sizeof em->ctx);
    em->select = -1, em->adapt_on = false;
    fusion_weigher s;
    int rc = fusion_weigher_begin(&s, em, W);
    if (rc == 0) {
        fusion_weigher_measure(&s, features, K, halflife);
        build_hook h = {out, features, d->n_chunks >= 4};
        double nll;
        rc = fusion_weighed_nll(em, d, rows, W, &nll, NULL, &s, record_unit, &h);
        fusion_weigher_free(&s);
    }
    em->ctx = saved, em->select = saved_sel, em->adapt_on = saved_adapt;
    if (rc < 0) {
        fusion_ctx_data_free(out);
        return TUTTI_ERR;
    }
    /* standardise over the fitted units where the member is present */
    for (int32_t k = 0; k < K; k++) {
        double s1 = 0, s2 = 0, cnt = 0;
        for (int64_t u = 0; u < nu; u++)
            for (int32_t i = 0; i < n; i++) {
                if (out->held[u] || out->gone[u * n + i] || !out->active[i]) continue;
                double v = out->f[((size_t)u * (size_t)n + (size_t)i) * (size_t)K + (size_t)k];
                s1 += v, s2 += v * v, cnt++;
            }
        mean[k] = cnt > 0 ? s1 / cnt : 0;
        double var = cnt > 0 ? s2 / cnt - mean[k] * mean[k] : 0;
        sd[k] = var > 1e-12 ? sqrt(var) : 1;
        for (int64_t u = 0; u < nu; u++)
            for (int32_t i = 0; i < n; i++) {
                double *v = &out->f[((size_t)u * (size_t)n + (size_t)i) * (size_t)K + (size_t)k];
                *v = (*v - mean[k]) / sd[k];
            }
    }
    return 0;
}

int fusion_fit_context(tutti_ensemble *e, const text_data *d, float *const *rows, const int32_t *features, int32_t K,
                       double *heldout_bits) {
    int32_t n = e->n;
    bool loss = false;
    for (int32_t k = 0; k < K; k++) loss |= features[k] == TUTTI_FEAT_LOSS;
    static const double halflives[] = {4, 16, 64};
    int n_hl = loss ? 3 : 1;
    double best = INFINITY, best_hl = 16, best_mean[TUTTI_N_FEATURES] = {0}, best_sd[TUTTI_N_FEATURES] = {0};
    double best_t[TUTTI_ENSEMBLE_MAX_MEMBERS * (1 + TUTTI_N_FEATURES)] = {0};
    double wsum = 0;
    for (int32_t i = 0; i < n; i++) wsum += e->w[i] > 0 ? e->w[i] : 0;
    for (int h = 0; h < n_hl; h++) {
        double hl = loss ? halflives[h] : 16, mean[TUTTI_N_FEATURES], sd[TUTTI_N_FEATURES];
        ctx_fit_data cd;
        if (fusion_ctx_data_build(e, d, rows, e->w, features, K, hl, &cd, mean, sd) < 0) return TUTTI_ERR;
        double theta[TUTTI_ENSEMBLE_MAX_MEMBERS * (1 + TUTTI_N_FEATURES)] = {0};
        for (int32_t i = 0; i < n; i++) theta[i] = e->w[i] > 0 ? log(e->w[i] / wsum) : 0;
        double L = fusion_ctx_descend(&cd, theta, 400);
        fusion_ctx_data_free(&cd);
        if (L < best) {
            best = L, best_hl = hl;
            memcpy(best_t, theta, sizeof best_t);
            memcpy(best_mean, mean, sizeof best_mean);
            memcpy(best_sd, sd, sizeof best_sd);
        }
    }
    /* back to raw features: b/sd, and the means into the members' weights */
    tutti_context_weights cw;
    memset(&cw, 0, sizeof cw);
    cw.n_features = K;
    memcpy(cw.features, features, sizeof(int32_t) * (size_t)K);
    cw.halflife = best_hl;
    double a[TUTTI_ENSEMBLE_MAX_MEMBERS], amx = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        a[i] = -INFINITY;
        if (!(e->w[i] > 0)) continue;
        a[i] = best_t[i];
        for (int32_t k = 0; k < K; k++) {
            double b = best_t[n + i * K + k] / best_sd[k];
            b = b > TUTTI_COEF_MAX ? TUTTI_COEF_MAX : b < -TUTTI_COEF_MAX ? -TUTTI_COEF_MAX : b;
            cw.coef[i][k] = (float)b;
            a[i] -= (double)cw.coef[i][k] * best_mean[k];
        }
        if (a[i] > amx) amx = a[i];
    }
    float W[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += a[i] > -INFINITY ? exp(a[i] - amx) : 0;
    for (int32_t i = 0; i < n; i++) W[i] = a[i] > -INFINITY ? (float)(exp(a[i] - amx) / z) : 0.0f;
    if (tutti_ensemble_set_weights(e, W, NULL) < 0 || tutti_ensemble_set_context(e, &cw) < 0) return TUTTI_ERR;
    /* the held-out figure in bits per byte */
    int64_t held_bytes = 0;
    for (int c = 3; c < d->n_chunks && d->n_chunks >= 4; c += 4) held_bytes += (int64_t)strlen(d->chunks[c]);
    if (heldout_bits) *heldout_bits = held_bytes > 0 ? best / (log(2.0) * (double)held_bytes) : NAN;
    return 0;
}

typedef struct d_hook {
    double *v;
} d_hook;

static void record_d(void *user, int64_t u, int chunk, const fusion_weigher *s, const double *lp, const bool *gone) {
    (void)chunk, (void)lp, (void)gone;
    ((d_hook *)user)->v[u] = s->d;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int fusion_select_threshold(tutti_ensemble *e, const text_data *d, float *const *rows, double share, double *thr) {
    int64_t nu = text_data_units(e, d);
    if (nu == 0) return tutti_set_error("select: no units to measure");
    d_hook h = {malloc(sizeof(double) * (size_t)nu)};
    if (!h.v) return tutti_set_error("select: out of memory");
    double saved = e->select;
    e->select = -1;
    fusion_weigher s;
    int rc = fusion_weigher_begin(&s, e, e->w);
    if (rc == 0) {
        fusion_weigher_measure(&s, NULL, 0, 16);
        double nll;
        rc = fusion_weighed_nll(e, d, rows, e->w, &nll, NULL, &s, record_d, &h);
        fusion_weigher_free(&s);
    }
    e->select = saved;
    if (rc == 0) {
        qsort(h.v, (size_t)nu, sizeof(double), cmp_double);
        int64_t k = (int64_t)floor((1 - share) * (double)nu);
        *thr = h.v[k < 0 ? 0 : k >= nu ? nu - 1 : k];
    }
    free(h.v);
    return rc;
}
