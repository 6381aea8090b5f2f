/* The merge methods, one output tensor at a time (mergekit's
 * merge_methods/ files).  Inputs are float32; arithmetic is double, rounded
 * once to float32 at the end.  Task vectors (delta = model - base) are
 * float32 like mergekit's, so magnitude orderings see the same values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "merge/merge.h"
#include "util/error.h"

int merge_need_weight(const merge_tensor_args *a, int i) {
    if (isnan(a->weight[i]))
        return tutti_set_error("merge: %s: model %d has no 'weight' parameter for tensor %s",
                               merge_method_name(a->method), i + 1, a->name);
    return 0;
}

float *merge_task_vector(const merge_tensor_args *a, int i) {
    const float *base = a->in[a->base];
    float *d = malloc(sizeof(float) * (size_t)(a->n ? a->n : 1));
    if (!d) return tutti_set_error("merge: out of memory (task vector of %s)", a->name), NULL;
    for (int64_t j = 0; j < a->n; j++) d[j] = a->in[i][j] - base[j];
    return d;
}

static int linear(const merge_tensor_args *a, float *out) {
    double wsum = 0;
    for (int i = 0; i < a->n_in; i++) {
        if (merge_need_weight(a, i)) return TUTTI_ERR;
        wsum += a->weight[i];
    }
    if (a->normalize && wsum == 0)
        return tutti_set_error("merge: linear: the weights of tensor %s sum to 0 (normalize: false?)", a->name);
    for (int64_t j = 0; j < a->n; j++) {
        /* from the first term, not 0: -0.0 weights stay -0.0 (x merged with x = x, bytes too) */
        double r = a->weight[0] * (double)a->in[0][j];
        for (int i = 1; i < a->n_in; i++) r += a->weight[i] * (double)a->in[i][j];
        if (a->normalize) r /= wsum;
        out[j] = (float)r;
    }
    return 0;
}

static double norm(const float *x, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += (double)x[j] * (double)x[j];
    return sqrt(s);
}

static int slerp(const merge_tensor_args *a, float *out) {
    if (a->n_in != 2 || a->base < 0)
        return tutti_set_error("merge: slerp needs exactly two models, one of them base_model (tensor %s)", a->name);
    const float *v0 = a->in[a->base], *v1 = a->in[1 - a->base];
    double t = a->t;
    if (isnan(t)) return tutti_set_error("merge: slerp: parameter t missing for tensor %s", a->name);
    /* the endpoints exactly (the formula gives them only up to rounding) */
    if (t == 0 || t == 1) {
        memcpy(out, t == 0 ? v0 : v1, sizeof *out * (size_t)a->n);
        return 0;
    }
    double n0 = norm(v0, a->n), n1 = norm(v1, a->n);
    double s0 = n0 > 1e-8 ? n0 : 1, s1 = n1 > 1e-8 ? n1 : 1;
    double dot = 0;
    for (int64_t j = 0; j < a->n; j++) dot += ((double)v0[j] / s0) * ((double)v1[j] / s1);
    if (fabs(dot) > 0.9995) { /* (anti)colinear: the angle is meaningless, lerp */
        for (int64_t j = 0; j < a->n; j++) out[j] = (float)((1 - t) * (double)v0[j] + t * (double)v1[j]);
        return 0;
    }
    double th = acos(dot), s = sin(th);
    double c0 = sin(th - th * t) / s, c1 = sin(th * t) / s;
    for (int64_t j = 0; j < a->n; j++) out[j] = (float)(c0 * (double)v0[j] + c1 * (double)v1[j]);
    return 0;
}

/* nuslerp of vectors v0, v1 (len elements at stride) into r (double). */
static void nuslerp_vec(double t, const double *v0, const double *v1, double *r, int64_t len, int64_t stride) {
    double n0 = 0, n1 = 0;
    for (int64_t k = 0; k < len; k++) {
        n0 += v0[k * stride] * v0[k * stride];
        n1 += v1[k * stride] * v1[k * stride];
    }
    n0 = fmax(sqrt(n0), 1e-7);
    n1 = fmax(sqrt(n1), 1e-7);
    double c = 0;
    for (int64_t k = 0; k < len; k++) c += (v0[k * stride] / n0) * (v1[k * stride] / n1);
    c = fmin(1, fmax(-1, c));
    double th = acos(c), s = sin(th);
    if (fabs(s) < 1e-8) {
        for (int64_t k = 0; k < len; k++) r[k * stride] = (1 - t) * v0[k * stride] + t * v1[k * stride];
        return;
    }
    double a0 = sin((1 - t) * th), a1 = sin(t * th);
    for (int64_t k = 0; k < len; k++) r[k * stride] = (a0 * v0[k * stride] + a1 * v1[k * stride]) / s;
}

static int nuslerp(const merge_tensor_args *a, float *out) {
    int idx[2], m = 0;
    for (int i = 0; i < a->n_in; i++)
        if (i != a->base) {
            if (m == 2) break;
            idx[m++] = i;
        }
    if (a->n_in - (a->base >= 0) != 2)
        return tutti_set_error("merge: nuslerp needs exactly two models besides the optional base_model "
                               "(tensor %s)",
                               a->name);
    for (int i = 0; i < 2; i++)
        if (merge_need_weight(a, idx[i])) return TUTTI_ERR;
    double w0 = a->weight[idx[0]], w1 = a->weight[idx[1]];
    double t = fabs(w0 + w1) < 1e-6 ? 0.5 : w1 / (w0 + w1);
    size_t bytes = sizeof(double) * (size_t)a->n;
    double *v0 = malloc(bytes), *v1 = malloc(bytes), *r = malloc(bytes);
    if (!v0 || !v1 || !r) {
        free(v0), free(v1), free(r);
        return tutti_set_error("merge: out of memory (nuslerp of %s)", a->name);
    }
    const float *b = a->base >= 0 ? a->in[a->base] : NULL;
    for (int64_t j = 0; j < a->n; j++) {
        v0[j] = (double)a->in[idx[0]][j] - (b ? (double)b[j] : 0);
        v1[j] = (double)a->in[idx[1]][j] - (b ? (double)b[j] : 0);
    }
    if (a->flatten) {
        nuslerp_vec(t, v0, v1, r, a->n, 1);
    } else if (a->row_wise && a->outer != a->n) { /* vectors along the outermost dimension */
        int64_t inner = a->n / a->outer;
        for (int64_t j = 0; j < inner; j++) nuslerp_vec(t, v0 + j, v1 + j, r + j, a->outer, inner);
    } else {
        for (int64_t rr = 0; rr < a->rows; rr++)
            nuslerp_vec(t, v0 + rr * a->ne0, v1 + rr * a->ne0, r + rr * a->ne0, a->ne0, 1);
    }
    for (int64_t j = 0; j < a->n; j++) out[j] = (float)(b ? (double)b[j] + r[j] : r[j]);
    free(v0), free(v1), free(r);
    return 0;
}

static int model_stock(const merge_tensor_args *a, float *out) {
    if (a->base < 0 || a->n_in < 3)
        return tutti_set_error("merge: model_stock needs base_model and at least two other models (tensor %s)",
                               a->name);
    int nw = a->n_in - 1;
    const float *w0 = a->in[a->base];
    int64_t vlen = a->filter_wise ? a->ne0 : a->n, nvec = a->n / vlen;
    for (int64_t v = 0; v < nvec; v++) {
        int64_t o = v * vlen;
        double csum = 0;
        int ncs = 0;
        for (int i = 0; i < a->n_in; i++) {
            if (i == a->base) continue;
            for (int j = i + 1; j < a->n_in; j++) {
                if (j == a->base) continue;
                double ni = 0, nj = 0, d = 0;
                for (int64_t k = o; k < o + vlen; k++) {
                    double di = (double)a->in[i][k] - (double)w0[k], dj = (double)a->in[j][k] - (double)w0[k];
                    ni += di * di;
                    nj += dj * dj;
                    d += di * dj;
                }
                double c = d / fmax(sqrt(ni) * sqrt(nj), 1e-6);
                csum += fmin(1, fmax(-1, c));
                ncs++;
            }
        }
        double cos = csum / ncs;
        double t = nw * cos / (1 + (nw - 1) * cos);
        for (int64_t k = o; k < o + vlen; k++) {
            double s = 0;
            for (int i = 0, first = 1; i < a->n_in; i++)
                if (i != a->base) s = first ? (double)a->in[i][k] : s + (double)a->in[i][k], first = 0;
            out[k] = (float)(t * (s / nw) + (1 - t) * (double)w0[k]);
        }
    }
    return 0;
}

/* Task arithmetic, TIES, DARE, DELLA, breadcrumbs: mergekit's
 * GeneralizedTaskArithmeticMerge. */
static int task_arithmetic(const merge_tensor_args *a, float *out) {
    bool consensus = false;
    merge_sparsify_kind kind = MSP_NONE;
    switch (a->method) {
    case MM_TIES: consensus = true, kind = MSP_MAGNITUDE; break;
    case MM_DARE_TIES: consensus = true, kind = MSP_RANDOM; break;
    case MM_DARE_LINEAR: kind = MSP_RANDOM; break;
    case MM_BREADCRUMBS: kind = MSP_OUTLIERS; break;
    case MM_BREADCRUMBS_TIES: consensus = true, kind = MSP_OUTLIERS; break;
    case MM_DELLA: consensus = true, kind = MSP_DELLA; break;
    case MM_DELLA_LINEAR: kind = MSP_DELLA; break;
    default: break;
    }
    if (a->base < 0) return tutti_set_error("merge: %s needs base_model", merge_method_name(a->method));
    const float *base = a->in[a->base];
    int nd = a->n_in - 1;
    if (nd == 0) {
        memcpy(out, base, sizeof *out * (size_t)a->n);
        return 0;
    }
    float **d = calloc((size_t)nd, sizeof *d);
    double *w = calloc((size_t)nd, sizeof *w), *f = calloc((size_t)nd, sizeof *f);
    int rc = d && w && f ? 0 : tutti_set_error("merge: out of memory (%s)", a->name);
    for (int i = 0, k = 0; rc == 0 && i < a->n_in; i++) {
        if (i == a->base) continue;
        if ((rc = merge_need_weight(a, i))) break;
        w[k] = a->weight[i];
        if (!(d[k] = merge_task_vector(a, i))) {
            rc = TUTTI_ERR;
            break;
        }
        double dens = isnan(a->density[i]) ? 1.0 : a->density[i];
        double gamma = isnan(a->gamma[i]) ? 0.01 : a->gamma[i];
        double eps = isnan(a->epsilon[i]) ? 0.15 : a->epsilon[i];
        rc = merge_sparsify(kind, d[k], a->n, a->rows, dens, gamma, eps, a->rescale, merge_rng_key(a->name, a->seed, i),
                            &f[k]);
        k++;
    }
    if (rc == 0) {
        double wsum = 0;
        for (int k = 0; k < nd; k++) wsum += w[k];
        if (fabs(wsum) < 1e-8) wsum = 1;
        for (int64_t j = 0; j < a->n; j++) {
            double mixed = 0, div;
            if (consensus) { /* elect the sign of the summed task vectors, keep agreeing ones */
                double total = 0;
                for (int k = 0; k < nd; k++) total += w[k] * ((double)d[k][j] * f[k]);
                double major = total >= 0 ? 1 : -1;
                div = 0;
                for (int k = 0; k < nd; k++) {
                    double wd = w[k] * ((double)d[k][j] * f[k]);
                    double sg = wd > 0 ? 1 : wd < 0 ? -1 : 0;
                    if (sg == major) {
                        mixed += wd;
                        div += w[k];
                    }
                }
                if (div == 0) div = 1;
            } else {
                for (int k = 0; k < nd; k++) mixed += w[k] * ((double)d[k][j] * f[k]);
                div = wsum;
            }
            if (a->normalize) mixed /= div;
            mixed *= a->lambda;
            out[j] = mixed == 0 ? base[j] : (float)((double)base[j] + mixed); /* keeps -0.0 */
        }
    }
    for (int k = 0; d && k < nd; k++) free(d[k]);
    free(d), free(w), free(f);
    return rc;
}

int merge_tensor(const merge_tensor_args *a, float *out) {
    if (a->method == MM_PASSTHROUGH || a->n_in == 1) {
        double sc = a->method == MM_PASSTHROUGH && !isnan(a->scale) ? a->scale : 1;
        for (int64_t j = 0; j < a->n; j++) out[j] = sc == 1 ? a->in[0][j] : (float)(sc * (double)a->in[0][j]);
        return 0;
    }
    switch (a->method) {
    case MM_LINEAR: return linear(a, out);
    case MM_SLERP: return slerp(a, out);
    case MM_NUSLERP: return nuslerp(a, out);
    case MM_MODEL_STOCK: return model_stock(a, out);
    case MM_SCE: return merge_sce(a, out);
    case MM_KARCHER: return merge_karcher(a, out);
    case MM_MULTISLERP: return merge_multislerp(a, out);
    case MM_NEARSWAP: return merge_nearswap(a, out);
    case MM_ARCEE_FUSION: return merge_arcee_fusion(a, out);
    default: return task_arithmetic(a, out);
    }
}
