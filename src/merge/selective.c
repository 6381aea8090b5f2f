/* Element-wise selections: sce, nearswap, arcee_fusion (mergekit's
 * merge_methods/sce.py, nearswap.py, arcee_fusion.py).
 *
 *   sce           Select, Calculate, Erase (Wan et al. 2024, "FuseChat",
 *                 arXiv:2408.07990): keep the select_topk fraction of the
 *                 elements whose task vectors vary most across the models
 *                 (population variance; the fraction is of the elements with
 *                 nonzero variance), weight each task vector by its mean
 *                 square (normalized to sum 1; equal weights when the sum is
 *                 below 1e-6), erase the elements whose sign disagrees with
 *                 the sign of the summed task vectors, and add the weighted
 *                 mean of what is left (divided by the kept weights, at least
 *                 1e-6) to the base.  No per-model weight.
 *   nearswap      base_model and one other: each element moves from the base
 *                 towards the other by min(1, t / |base - other|) (|.| at
 *                 least 1e-6): elements that already agree to within t take
 *                 the other model's value, distant ones stay near the base.
 *   arcee_fusion  base_model and one other: the importance of an element is
 *                 |other - base| times the KL divergence between the
 *                 softmaxes of its row (the last dimension, ne[0]) in the two
 *                 models (each softmax + 1e-8); elements whose importance
 *                 reaches median + 1.5 x (q3 - q1) of the tensor's
 *                 importances take the other model's value, the rest the
 *                 base's.  Quantiles are sorted[floor(q (n - 1))] as
 *                 mergekit's; mergekit estimates them from a random sample of
 *                 10^6 elements above that size, tutti always uses every
 *                 element (the same for tensors up to 10^6 elements, and
 *                 reproducible beyond).
 * Orderings break ties by element index (a stable sort), as the other
 * magnitude orderings (sparsify.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "merge/merge.h"
#include "util/error.h"

typedef struct val_idx {
    double v;
    int64_t i;
} val_idx;

static int cmp_desc(const void *a, const void *b) {
    const val_idx *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int base_and_one(const merge_tensor_args *a, const char *method, int *other) {
    if (a->base < 0 || a->n_in != 2)
        return tutti_set_error("merge: %s needs base_model and exactly one other model (tensor %s)", method, a->name);
    *other = 1 - a->base;
    return 0;
}

/* Zeroes the elements of the nd task vectors outside the top fraction by
 * variance across them (sce's selection). */
static int sce_select(float **d, int nd, int64_t n, double frac, const char *name) {
    if (frac >= 1) return 0;
    int64_t k = 0;
    val_idx *o = NULL;
    if (frac > 0) {
        o = malloc(sizeof *o * (size_t)(n ? n : 1));
        if (!o) return tutti_set_error("merge: out of memory (sce selection of %s)", name);
        int64_t nonzero = 0;
        for (int64_t j = 0; j < n; j++) {
            double mean = 0, var = 0;
            for (int i = 0; i < nd; i++) mean += d[i][j];
            mean /= nd;
            for (int i = 0; i < nd; i++) var += ((double)d[i][j] - mean) * ((double)d[i][j] - mean);
            o[j] = (val_idx){var / nd, j};
            nonzero += var != 0;
        }
        k = (int64_t)((double)nonzero * frac);
        if (k > 0) qsort(o, (size_t)n, sizeof *o, cmp_desc);
    }
    unsigned char *keep = calloc((size_t)(n ? n : 1), 1);
    if (!keep) {
        free(o);
        return tutti_set_error("merge: out of memory (sce selection of %s)", name);
    }
    for (int64_t j = 0; j < k; j++) keep[o[j].i] = 1;
    for (int i = 0; i < nd; i++)
        for (int64_t j = 0; j < n; j++)
            if (!keep[j]) d[i][j] = 0.0f;
    free(keep);
    free(o);
    return 0;
}

int merge_sce(const merge_tensor_args *a, float *out) {
    if (a->base < 0) return tutti_set_error("merge: sce needs base_model");
    const float *base = a->in[a->base];
    int nd = a->n_in - 1;
    float **d = calloc((size_t)nd, sizeof *d);
    double *w = calloc((size_t)nd, sizeof *w);
    int rc = d && w ? 0 : tutti_set_error("merge: out of memory (%s)", a->name);
    for (int i = 0, k = 0; rc == 0 && i < a->n_in; i++) {
        if (i == a->base) continue;
        /* float32 task vectors, as mergekit's (the variance ordering sees its values) */
        if (!(d[k++] = merge_task_vector(a, i))) rc = TUTTI_ERR;
    }
    double frac = isnan(a->select_topk) ? 1.0 : a->select_topk;
    if (rc == 0) rc = sce_select(d, nd, a->n, frac, a->name);
    if (rc == 0) {
        double wsum = 0;
        for (int k = 0; k < nd; k++) {
            double s = 0;
            for (int64_t j = 0; j < a->n; j++) s += (double)d[k][j] * (double)d[k][j];
            w[k] = a->n ? s / (double)a->n : 0;
            wsum += w[k];
        }
        for (int k = 0; k < nd; k++) w[k] = fabs(wsum) < 1e-6 ? 1.0 / nd : w[k] / wsum;
        for (int64_t j = 0; j < a->n; j++) {
            double total = 0;
            for (int k = 0; k < nd; k++) total += d[k][j];
            double major = total >= 0 ? 1 : -1, mixed = 0, div = 0;
            for (int k = 0; k < nd; k++) {
                double x = d[k][j], sg = x > 0 ? 1 : x < 0 ? -1 : 0;
                if (sg != major) continue;
                mixed += w[k] * x;
                div += w[k];
            }
            mixed /= fmax(div, 1e-6);
            out[j] = mixed == 0 ? base[j] : (float)((double)base[j] + mixed); /* keeps -0.0 */
        }
    }
    for (int k = 0; d && k < nd; k++) free(d[k]);
    free(d), free(w);
    return rc;
}

int merge_nearswap(const merge_tensor_args *a, float *out) {
    int o = 0;
    if (base_and_one(a, "nearswap", &o)) return TUTTI_ERR;
    if (isnan(a->t)) return tutti_set_error("merge: nearswap: parameter t missing for tensor %s", a->name);
    const float *v0 = a->in[a->base], *v1 = a->in[o];
    for (int64_t j = 0; j < a->n; j++) {
        double x0 = v0[j], x1 = v1[j];
        double w = fmin(1, fmax(0, a->t / fmax(fabs(x0 - x1), 1e-6)));
        out[j] = (float)(w * x1 + (1 - w) * x0);
    }
    return 0;
}

/* KL(softmax(p) + 1e-8 || softmax(q) + 1e-8) of one row of len elements. */
static double row_kl(const float *p, const float *q, int64_t len) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0;
    for (int64_t k = 0; k < len; k++) mp = fmax(mp, p[k]), mq = fmax(mq, q[k]);
    for (int64_t k = 0; k < len; k++) sp += exp((double)p[k] - mp), sq += exp((double)q[k] - mq);
    double kl = 0;
    for (int64_t k = 0; k < len; k++) {
        double x = exp((double)p[k] - mp) / sp + 1e-8, y = exp((double)q[k] - mq) / sq + 1e-8;
        kl += x * log(x / y);
    }
    return kl;
}

int merge_arcee_fusion(const merge_tensor_args *a, float *out) {
    int o = 0;
    if (base_and_one(a, "arcee_fusion", &o)) return TUTTI_ERR;
    const float *b = a->in[a->base], *x = a->in[o];
    if (a->n == 0) return 0;
    size_t bytes = sizeof(double) * (size_t)(a->n ? a->n : 1);
    double *imp = malloc(bytes), *sorted = malloc(bytes);
    if (!imp || !sorted) {
        free(imp), free(sorted);
        return tutti_set_error("merge: out of memory (arcee_fusion of %s)", a->name);
    }
    int64_t len = a->ne0 > 0 ? a->ne0 : 1;
    for (int64_t r = 0; r < a->n / len; r++) {
        double kl = row_kl(x + r * len, b + r * len, len);
        for (int64_t k = r * len; k < (r + 1) * len; k++) imp[k] = fabs((double)x[k] - (double)b[k]) * kl;
    }
    memcpy(sorted, imp, bytes);
    qsort(sorted, (size_t)a->n, sizeof *sorted, cmp_double);
    double last = (double)(a->n - 1);
    double q1 = sorted[(int64_t)(0.25 * last)], med = sorted[(int64_t)(0.5 * last)],
           q3 = sorted[(int64_t)(0.75 * last)];
    double thr = med + 1.5 * (q3 - q1);
    for (int64_t j = 0; j < a->n; j++) out[j] = imp[j] >= thr ? x[j] : b[j];
    free(imp), free(sorted);
    return 0;
}
