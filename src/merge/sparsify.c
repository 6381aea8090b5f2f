/* Task-vector sparsification (mergekit's sparsify.py) and the random masks.
 *
 * Orderings by |delta| break ties by element index (a stable sort): with
 * quantized inputs many deltas share one magnitude, and mergekit's
 * torch.argsort leaves their order unspecified.  Random masks use a
 * counter-based generator (splitmix64 of key + (i + 1) * golden ratio), so
 * a mask does not depend on the order tensors are processed in, and the
 * numpy reference (tests/merge_ref.py) reproduces it exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "merge/merge.h"
#include "util/error.h"

#define GOLDEN 0x9E3779B97F4A7C15ull
#define MIX 0xD1B54A32D192ED03ull

uint64_t merge_rng_key(const char *name, uint64_t seed, int source) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a 64 */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001B3ull;
    return h ^ (seed * GOLDEN) ^ ((uint64_t)(source + 1) * MIX);
}

double merge_rng_uniform(uint64_t key, int64_t i) {
    uint64_t z = key + (uint64_t)(i + 1) * GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct mag_idx {
    float m;
    uint32_t i;
} mag_idx;

static int cmp_asc(const void *a, const void *b) {
    const mag_idx *x = a, *y = b;
    if (x->m != y->m) return x->m < y->m ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int cmp_desc(const void *a, const void *b) {
    const mag_idx *x = a, *y = b;
    if (x->m != y->m) return x->m > y->m ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Elements of x[0..n) ordered by |x| (ascending or descending), ties by index. */
static mag_idx *order_by_magnitude(const float *x, int64_t n, bool descending) {
    mag_idx *o = malloc(sizeof *o * (size_t)(n ? n : 1));
    if (!o) return NULL;
    for (int64_t i = 0; i < n; i++) o[i] = (mag_idx){fabsf(x[i]), (uint32_t)i};
    qsort(o, (size_t)n, sizeof *o, descending ? cmp_desc : cmp_asc);
    return o;
}

int merge_sparsify(merge_sparsify_kind kind, float *delta, int64_t n, int64_t rows, double density, double gamma,
                   double epsilon, bool rescale, uint64_t key, double *factor) {
    *factor = 1.0;
    if (kind == MSP_NONE || density >= 1) return 0;
    if (n > (int64_t)UINT32_MAX)
        return tutti_set_error("merge: tensor of %lld elements is too large to sparsify", (long long)n);
    double before = 0;
    for (int64_t i = 0; i < n; i++) before += fabs((double)delta[i]);
    unsigned char *keep = calloc((size_t)(n ? n : 1), 1);
    if (!keep) return tutti_set_error("merge: out of memory (sparsification mask)");
    switch (kind) {
    case MSP_MAGNITUDE: { /* keep the int(density n) largest */
        int64_t k = (int64_t)(density * (double)n);
        if (k > 0) {
            mag_idx *o = order_by_magnitude(delta, n, true);
            if (!o) {
                free(keep);
                return tutti_set_error("merge: out of memory (magnitude order)");
            }
            for (int64_t j = 0; j < k && j < n; j++) keep[o[j].i] = 1;
            free(o);
        }
        break;
    }
    case MSP_OUTLIERS: { /* breadcrumbs: drop the gamma largest and the smallest */
        int64_t target = (int64_t)(density * (double)n), n_top = (int64_t)(gamma * (double)n);
        int64_t n_bot = n - target - n_top;
        if (n_bot < 0) {
            n_top += n_bot;
            n_bot = 0;
        }
        mag_idx *o = order_by_magnitude(delta, n, false);
        if (!o) {
            free(keep);
            return tutti_set_error("merge: out of memory (magnitude order)");
        }
        for (int64_t j = n_bot; j < n - n_top; j++) keep[o[j].i] = 1;
        free(o);
        break;
    }
    case MSP_RANDOM:
        for (int64_t i = 0; i < n; i++) keep[i] = merge_rng_uniform(key, i) < density;
        break;
    case MSP_DELLA: {
        if (density <= 0) break; /* all dropped */
        if (density + epsilon >= 1 || density - epsilon <= 0) {
            free(keep);
            return tutti_set_error("merge: della: epsilon %g must keep density +- epsilon inside (0, 1) "
                                   "(density %g)",
                                   epsilon, density);
        }
        int64_t cols = rows > 0 ? n / rows : n;
        for (int64_t r = 0; r < rows; r++) {
            mag_idx *o = order_by_magnitude(delta + r * cols, cols, false);
            if (!o) {
                free(keep);
                return tutti_set_error("merge: out of memory (magnitude order)");
            }
            /* keep probability grows linearly with the magnitude rank in the row */
            for (int64_t j = 0; j < cols; j++) {
                double rn = cols > 1 ? (double)j / (double)(cols - 1) : 0.0;
                double p = (density - epsilon) + rn * 2 * epsilon;
                int64_t i = r * cols + o[j].i;
                keep[i] = merge_rng_uniform(key, i) < p;
            }
            free(o);
        }
        break;
    }
    case MSP_NONE: break;
    }
    double after = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!keep[i]) delta[i] = 0.0f;
        after += fabs((double)delta[i]);
    }
    free(keep);
    if (rescale && !(before < 1e-7 || after < 1e-7)) *factor = before / after;
    return 0;
}
