/* Means on the hypersphere: karcher and multislerp (mergekit's
 * merge_methods/karcher.py and multislerp.py).
 *
 * Both treat a whole tensor as one vector: its direction is averaged on the
 * unit sphere, its length is the weighted mean of the inputs' lengths.
 *   karcher     the Riemannian (Karcher / Fréchet) mean of every input
 *               (the base model too, when listed: mergekit gives the method
 *               all its inputs with equal weights 1/n), found by Riemannian
 *               gradient steps from the normalized Euclidean mean: each step
 *               moves along the exponential map by the weighted mean of the
 *               log maps theta_i / sin(theta_i) (u_i - cos(theta_i) u); at
 *               most max_iter (10) steps, stopping when the step is below
 *               tol (1e-5); inputs of norm <= tol take no part in the
 *               direction (see https://en.wikipedia.org/wiki/Karcher_mean).
 *   multislerp  barycentric interpolation on the sphere (Goddard's
 *               "Multi-SLERP"): the unit vectors of the task vectors (the
 *               tensors minus base_model, when given) are projected onto the
 *               tangent space at their weighted mean direction, averaged
 *               there with the weights (normalized to sum 1 unless
 *               normalize_weights is false) and mapped back with the
 *               exponential map; eps (1e-8) guards the divisions as in
 *               mergekit.
 * Arithmetic is double on the float32 inputs (mergekit rounds its unit
 * vectors to the tensor's dtype; the difference is below float32's
 * resolution of the result).  The unit vectors are formed on the fly, so a
 * merge holds two double vectors of the tensor's size, not one per input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "merge/merge.h"
#include "util/error.h"

static double dot_f(const float *x, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += (double)x[j] * (double)x[j];
    return s;
}

static double norm_d(const double *x, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += x[j] * x[j];
    return sqrt(s);
}

int merge_karcher(const merge_tensor_args *a, float *out) {
    int n_in = a->n_in;
    double alpha = 1.0 / n_in, tol = isnan(a->tol) ? 1e-5 : a->tol;
    int max_iter = a->max_iter;
    double norms[64], na[64];
    bool valid[64];
    if (n_in > 64) return tutti_set_error("merge: karcher: at most 64 models (tensor %s)", a->name);
    double alpha_sum = 0;
    int first = -1;
    for (int i = 0; i < n_in; i++) {
        norms[i] = sqrt(dot_f(a->in[i], a->n));
        valid[i] = norms[i] > tol;
        if (valid[i]) alpha_sum += alpha, first = first < 0 ? i : first;
    }
    if (first < 0) { /* every input (near) zero */
        memset(out, 0, sizeof *out * (size_t)a->n);
        return 0;
    }
    for (int i = 0; i < n_in; i++) na[i] = valid[i] ? alpha / alpha_sum : 0;
    size_t bytes = sizeof(double) * (size_t)(a->n ? a->n : 1);
    double *u = malloc(bytes), *tg = malloc(bytes);
    if (!u || !tg) {
        free(u), free(tg);
        return tutti_set_error("merge: out of memory (karcher of %s)", a->name);
    }
    /* start: the normalized weighted mean of the unit vectors */
    for (int64_t j = 0; j < a->n; j++) {
        double s = 0;
        for (int i = 0; i < n_in; i++)
            if (valid[i]) s += na[i] * ((double)a->in[i][j] / norms[i]);
        u[j] = s;
    }
    double nu = norm_d(u, a->n);
    for (int64_t j = 0; j < a->n; j++) u[j] = nu < tol ? (double)a->in[first][j] / norms[first] : u[j] / nu;
    for (int it = 0; it < max_iter; it++) {
        memset(tg, 0, bytes);
        for (int i = 0; i < n_in; i++) {
            if (!valid[i]) continue;
            double d = 0;
            for (int64_t j = 0; j < a->n; j++) d += u[j] * ((double)a->in[i][j] / norms[i]);
            d = fmin(1, fmax(-1, d));
            double th = acos(d);
            if (th < tol) continue;
            double c = na[i] * th / sin(th);
            for (int64_t j = 0; j < a->n; j++) tg[j] += c * ((double)a->in[i][j] / norms[i] - d * u[j]);
        }
        double nt = norm_d(tg, a->n);
        if (nt < tol) break;
        double cs = cos(nt), sn = sin(nt) / nt;
        for (int64_t j = 0; j < a->n; j++) u[j] = cs * u[j] + sn * tg[j];
        double un = norm_d(u, a->n);
        if (un > tol)
            for (int64_t j = 0; j < a->n; j++) u[j] /= un;
    }
    double scale = 0; /* the mean length, zero inputs included */
    for (int i = 0; i < n_in; i++) scale += alpha * norms[i];
    for (int64_t j = 0; j < a->n; j++) out[j] = (float)(scale * u[j]);
    free(u), free(tg);
    return 0;
}

int merge_multislerp(const merge_tensor_args *a, float *out) {
    int idx[64], m = 0;
    if (a->n_in > 64) return tutti_set_error("merge: multislerp: at most 64 models (tensor %s)", a->name);
    for (int i = 0; i < a->n_in; i++)
        if (i != a->base) idx[m++] = i;
    if (m == 1) { /* one model besides the base: that model (mergekit) */
        memcpy(out, a->in[idx[0]], sizeof *out * (size_t)a->n);
        return 0;
    }
    double w[64], norms[64], wsum = 0, eps = isnan(a->eps) ? 1e-8 : a->eps;
    for (int k = 0; k < m; k++) {
        if (merge_need_weight(a, idx[k])) return TUTTI_ERR;
        w[k] = a->weight[idx[k]];
        wsum += w[k];
    }
    if (a->normalize_weights) {
        if (wsum == 0)
            return tutti_set_error("merge: multislerp: the weights of tensor %s sum to 0 (normalize_weights: "
                                   "false?)",
                                   a->name);
        for (int k = 0; k < m; k++) w[k] /= wsum;
    }
    const float *b = a->base >= 0 ? a->in[a->base] : NULL;
#define TV(k, j) ((double)a->in[idx[k]][j] - (b ? (double)b[j] : 0.0))
    for (int k = 0; k < m; k++) {
        double s = 0;
        for (int64_t j = 0; j < a->n; j++) s += TV(k, j) * TV(k, j);
        norms[k] = sqrt(s);
    }
    size_t bytes = sizeof(double) * (size_t)(a->n ? a->n : 1);
    double *mean = malloc(bytes), *tr = malloc(bytes);
    if (!mean || !tr) {
        free(mean), free(tr);
        return tutti_set_error("merge: out of memory (multislerp of %s)", a->name);
    }
    for (int64_t j = 0; j < a->n; j++) {
        double s = 0;
        for (int k = 0; k < m; k++) s += w[k] * (TV(k, j) / (norms[k] + eps));
        mean[j] = s;
    }
    double mn = norm_d(mean, a->n);
    int rc = 0;
    if (mn < eps && m == 2) { /* antipodal pair: the linear interpolation */
        for (int64_t j = 0; j < a->n; j++)
            out[j] = (float)(w[0] * TV(0, j) + w[1] * TV(1, j) + (b ? (double)b[j] : 0.0));
        goto done;
    }
    if (mn < eps) {
        rc = tutti_set_error("merge: multislerp: the weighted mean of the unit task vectors of tensor %s is zero "
                             "(antipodal inputs whose weights cancel); change the weights",
                             a->name);
        goto done;
    }
    for (int64_t j = 0; j < a->n; j++) mean[j] /= mn;
    double dots[64];
    for (int k = 0; k < m; k++) {
        double s = 0;
        for (int64_t j = 0; j < a->n; j++) s += (TV(k, j) / (norms[k] + eps)) * mean[j];
        dots[k] = s;
    }
    for (int64_t j = 0; j < a->n; j++) {
        double s = 0;
        for (int k = 0; k < m; k++) s += w[k] * (TV(k, j) / (norms[k] + eps) - dots[k] * mean[j]);
        tr[j] = s;
    }
    double tn = norm_d(tr, a->n) + eps, len = 0;
    for (int k = 0; k < m; k++) len += norms[k] * w[k];
    double cs = cos(tn), sn = sin(tn) / tn;
    for (int64_t j = 0; j < a->n; j++) out[j] = (float)((mean[j] * cs + tr[j] * sn) * len + (b ? (double)b[j] : 0.0));
#undef TV
done:
    free(mean), free(tr);
    return rc;
}
