/* Fusion rules on log-probability vectors (token vocabularies or the 257
 * byte outcomes) and the UTF-8 validity mask.
 *
 *   mix          p = Σ w_i p_i / Σ w_i                         (linear pool)
 *   product      log p ∝ Σ w_i log p_i / Σ w_i                 (log-linear pool,
 *                "logit averaging" once each member is normalised)
 *   gate         p = p_j, j = member of lowest entropy this step
 *   contrastive  log p ∝ Σ w_i log p_i on {x : p_1(x) >= beta · max p_1}
 *                (Li et al. 2023, "Contrastive Decoding": member 1 is the
 *                expert, negative weights make the others amateurs)
 *
 * Members with weight 0 are ignored, so (1,0,...,0) gives member 1 exactly. */
/* FP exception flags are never read here; without trapping math GCC
 * if-converts the clamps in fusion_fast_exp and vectorises the loops over
 * the vocabulary (measured: several times faster on 151,669 tokens). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "util/error.h"

/* Loops over a whole vocabulary (151,669 tokens for Qwen3) run on every
 * generated token, so they are written for the vectoriser (checked with
 * -fopt-info-vec on GCC 12): exp and log in plain element-wise loops (a
 * loop body holding a reduction as well is not vectorised), sums with 16
 * explicit partial sums (a plain float sum is a serial dependency the
 * compiler may not reorder without -ffast-math), the maximum with vector
 * types (tutti_vec_max), and TUTTI_VEC_CLONES on the entry points
 * (AVX-512 / AVX2 / baseline builds of each). */
#define LANES 16
#define BLOCK 1024            /* exp values are summed in float blocks of BLOCK, folded into a double */
#define FUSION_MAX_BLOCKS 256 /* mix: per-block maxima of each member (blocks grow past BLOCK for huge n) */

#define vmax tutti_vec_max

/* Σ x[0..n) in float (n <= BLOCK: float rounding stays ~1e-7 relative) */
TUTTI_VEC_INLINE float sum_block(const float *x, int32_t n) {
    float acc[LANES] = {0};
    int32_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[j + k];
    for (; j < n; j++) acc[0] += x[j];
    float b = 0.0f;
    for (int k = 0; k < LANES; k++) b += acc[k];
    return b;
}

TUTTI_VEC_INLINE double vsum(const float *x, int32_t n) {
    double total = 0.0;
    for (int32_t j0 = 0; j0 < n; j0 += BLOCK) total += sum_block(x + j0, n - j0 < BLOCK ? n - j0 : BLOCK);
    return total;
}

/* Σ exp(x[j]·scale - shift), through an L1-resident block buffer */
TUTTI_VEC_INLINE double vsum_exp(const float *x, int32_t n, float scale, float shift) {
    float t[BLOCK];
    double total = 0.0;
    for (int32_t j0 = 0; j0 < n; j0 += BLOCK) {
        int32_t m = n - j0 < BLOCK ? n - j0 : BLOCK;
        for (int32_t j = 0; j < m; j++) t[j] = tutti_fast_exp(x[j0 + j] * scale - shift);
        total += sum_block(t, m);
    }
    return total;
}

/* Online log-sum-exp state: Σ exp(v - max) with the running maximum
 * (one pass; the sum is rescaled when the maximum grows). */
typedef struct lse_acc {
    float mx;
    double sum;
} lse_acc;

/* Adds exp(x[0..m)·scale) (m <= BLOCK, scale > 0): the block's maximum,
 * then its exps while it is in L1. */
TUTTI_VEC_INLINE void lse_add(lse_acc *a, const float *x, int32_t m, float scale) {
    float bm = vmax(x, m) * scale;
    if (!(bm > -INFINITY)) return;
    if (bm > a->mx) {
        a->sum = a->mx > -INFINITY ? a->sum * exp((double)a->mx - (double)bm) : 0.0;
        a->mx = bm;
    }
    float t[BLOCK], mx = a->mx;
    for (int32_t j = 0; j < m; j++) t[j] = tutti_fast_exp(x[j] * scale - mx);
    a->sum += sum_block(t, m);
}

/* log Σ exp(x[j]·scale), -inf when every x is -inf */
TUTTI_VEC_INLINE float vlse(const float *x, int32_t n, float scale) {
    lse_acc a = {-INFINITY, 0.0};
    for (int32_t j0 = 0; j0 < n; j0 += BLOCK) lse_add(&a, x + j0, n - j0 < BLOCK ? n - j0 : BLOCK, scale);
    return a.mx > -INFINITY ? a.mx + (float)log(a.sum) : -INFINITY;
}

TUTTI_VEC_CLONES
void fusion_log_softmax(const float *logits, int32_t n, float temp, float *out) {
    float inv = temp > 0 ? 1.0f / temp : 1.0f;
    float lse = vlse(logits, n, inv); /* one pass */
    if (lse == -INFINITY) {
        for (int32_t i = 0; i < n; i++) out[i] = -INFINITY;
        return;
    }
    for (int32_t i = 0; i < n; i++) out[i] = logits[i] * inv - lse;
}

TUTTI_VEC_CLONES
double fusion_entropy(const float *logp, int32_t n) {
    float h = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float l = logp[i] > -1e30f ? logp[i] : -1e30f;
        h -= fusion_fast_exp(l) * (logp[i] > -1e30f ? l : 0.0f);
    }
    return h;
}

/* Mixture and product in float with vectorisable loops: a 151,669-token
 * vocabulary must fuse in well under a millisecond.  `work` is used as float
 * scratch (it holds n doubles, so 2n floats fit). */
static int no_support(void) {
    return tutti_set_error("fusion: every outcome has probability 0 under the fused distribution");
}

TUTTI_VEC_CLONES
int fusion_combine(const fusion_rule_params *p, int32_t n_members, const float *const *logp, int32_t n, float *out,
                   double *work, int32_t *chosen) {
    if (chosen) *chosen = -1;
    double wsum = 0.0;
    int32_t n_active = 0, last = -1;
    for (int32_t i = 0; i < n_members; i++) {
        if (p->weights[i] != 0) n_active++, last = i;
        wsum += p->weights[i];
    }
    if (n_active == 0) return tutti_set_error("fusion: every member has weight 0");
    float *acc = (float *)work;
    switch (p->rule) {
    case TUTTI_RULE_MIX:
    case TUTTI_RULE_PRODUCT:
        if (n_active == 1) {
            /* one active member: its distribution exactly (no rounding) */
            memcpy(out, logp[last], sizeof(float) * (size_t)n);
            return 0;
        }
        if (!(wsum > 0)) return tutti_set_error("fusion: weights must sum to a positive number");
        for (int32_t x = 0; x < n; x++) acc[x] = 0.0f;
        if (p->rule == TUTTI_RULE_MIX) {
            /* log Σ w_i p_i, relative to the largest member log-prob per
             * outcome is not needed: p_i >= 1e-38 covers every outcome a
             * float log-softmax can express */
            for (int32_t i = 0; i < n_members; i++) {
                float w = (float)(p->weights[i] / wsum);
                if (w == 0) continue;
                const float *l = logp[i];
                for (int32_t x = 0; x < n; x++) acc[x] += w * fusion_fast_exp(l[x]);
            }
            double s = vsum(acc, n);
            if (!(s > 0)) return no_support();
            float ls = (float)log(s);
            for (int32_t x = 0; x < n; x++) out[x] = fusion_fast_log(acc[x]) - ls;
            return 0;
        }
        /* product: Σ w_i log p_i, renormalised; an outcome some active
         * member rules out stays ruled out */
        for (int32_t i = 0; i < n_members; i++) {
            float w = (float)(p->weights[i] / wsum);
            if (w == 0) continue;
            const float *l = logp[i];
            for (int32_t x = 0; x < n; x++) acc[x] += w * l[x];
        }
        {
            float mx = vmax(acc, n);
            if (!(mx > -INFINITY)) return no_support();
            float lse = mx + (float)log(vsum_exp(acc, n, 1.0f, mx));
            for (int32_t x = 0; x < n; x++) out[x] = acc[x] - lse;
        }
        return 0;
    case TUTTI_RULE_GATE: {
        int32_t best = -1;
        double hbest = INFINITY;
        for (int32_t i = 0; i < n_members; i++) {
            if (p->weights[i] == 0) continue;
            double h = fusion_entropy(logp[i], n);
            if (h < hbest) hbest = h, best = i;
        }
        memcpy(out, logp[best], sizeof(float) * (size_t)n);
        if (chosen) *chosen = best;
        return 0;
    }
    case TUTTI_RULE_CONTRASTIVE: {
        const float *e = logp[0];
        float mx = -INFINITY;
        for (int32_t x = 0; x < n; x++)
            if (e[x] > mx) mx = e[x];
        float cut = mx + logf(p->beta > 0 ? p->beta : 1e-30f);
        for (int32_t x = 0; x < n; x++) acc[x] = 0.0f;
        for (int32_t i = 0; i < n_members; i++) {
            float w = p->weights[i];
            if (w == 0) continue;
            const float *l = logp[i];
            /* an amateur that rules x out would make the score +inf: treat
             * its log-prob as very small instead */
            for (int32_t x = 0; x < n; x++) acc[x] += w * (l[x] < -1e4f ? -1e4f : l[x]);
        }
        float m2 = -INFINITY;
        for (int32_t x = 0; x < n; x++) {
            if (!(e[x] >= cut)) acc[x] = -INFINITY;
            m2 = acc[x] > m2 ? acc[x] : m2;
        }
        if (!(m2 > -INFINITY)) return no_support();
        float lse = m2 + (float)log(vsum_exp(acc, n, 1.0f, m2));
        for (int32_t x = 0; x < n; x++) out[x] = acc[x] - lse;
        return 0;
    }
    default: return tutti_set_error("fusion: unknown rule %d", p->rule);
    }
}

TUTTI_VEC_CLONES
int fusion_combine_logits(const fusion_rule_params *p, const float *temps, int32_t n_members,
                          const float *const *logits, int32_t n, float *out, float *scratch) {
    double wsum = 0.0;
    for (int32_t i = 0; i < n_members; i++) wsum += p->weights[i];
    if (!(wsum > 0)) return tutti_set_error("fusion: weights must sum to a positive number");
    int32_t n_act = 0;
    float c[TUTTI_ENSEMBLE_MAX_MEMBERS];
    const float *za[TUTTI_ENSEMBLE_MAX_MEMBERS];
    if (p->rule == TUTTI_RULE_PRODUCT) {
        /* Σ w_i log softmax(z_i/τ_i) = Σ (w_i/τ_i) z_i - const: the weighted
         * logits are summed block by block and their log-sum-exp taken
         * while the block is in L1 (one pass), then normalised */
        for (int32_t i = 0; i < n_members && n_act < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) {
            float ci = (float)(p->weights[i] / wsum) / (temps[i] > 0 ? temps[i] : 1.0f);
            if (ci != 0) c[n_act] = ci, za[n_act++] = logits[i];
        }
        if (n_act == 0) return no_support();
        lse_acc acc = {-INFINITY, 0.0};
        for (int32_t x0 = 0; x0 < n; x0 += BLOCK) {
            int32_t m = n - x0 < BLOCK ? n - x0 : BLOCK;
            float *o = out + x0;
            const float *z0 = za[0] + x0;
            for (int32_t x = 0; x < m; x++) o[x] = c[0] * z0[x];
            for (int32_t a = 1; a < n_act; a++) {
                const float *z = za[a] + x0;
                float ca = c[a];
                for (int32_t x = 0; x < m; x++) o[x] += ca * z[x];
            }
            lse_add(&acc, o, m, 1.0f);
        }
        if (!(acc.mx > -INFINITY)) return no_support();
        float lse = acc.mx + (float)log(acc.sum);
        for (int32_t x = 0; x < n; x++) out[x] -= lse;
        return 0;
    }
    if (p->rule != TUTTI_RULE_MIX) return tutti_set_error("fusion: fusion_combine_logits handles mix and product");
    /* Σ w_i softmax(z_i/τ_i).  One pass per member stores e_i =
     * exp(z_i/τ_i - max of the block) block by block (the block's maximum
     * taken while it is in L1) with the block's sum; e of the first active
     * member goes to out, the others to scratch.  A last pass forms
     * log Σ f_ib e_i with f_ib = w_i exp(max_ib - max_i) / Σe_i, normalised
     * by construction. */
    int32_t blk = n / FUSION_MAX_BLOCKS + 1;
    blk = blk < BLOCK ? BLOCK : (blk + 15) / 16 * 16;
    int32_t nb = (n + blk - 1) / blk;
    float shift[TUTTI_ENSEMBLE_MAX_MEMBERS][FUSION_MAX_BLOCKS];
    double bsum[FUSION_MAX_BLOCKS];
    float *e[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < n_members && n_act < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) {
        float w = (float)(p->weights[i] / wsum);
        if (w == 0) continue;
        float inv = 1.0f / (temps[i] > 0 ? temps[i] : 1.0f);
        const float *z = logits[i];
        float *ei = n_act == 0 ? out : scratch + (size_t)(n_act - 1) * (size_t)n;
        float mx = -INFINITY;
        for (int32_t b = 0; b < nb; b++) {
            int32_t x0 = b * blk, m = n - x0 < blk ? n - x0 : blk;
            float bm = vmax(z + x0, m) * inv; /* inv > 0: the max commutes with the scaling */
            shift[n_act][b] = bm;
            if (!(bm > -INFINITY)) {
                for (int32_t x = 0; x < m; x++) ei[x0 + x] = 0.0f;
                bsum[b] = 0.0;
                continue;
            }
            for (int32_t x = 0; x < m; x++) ei[x0 + x] = tutti_fast_exp(z[x0 + x] * inv - bm);
            bsum[b] = vsum(ei + x0, m);
            mx = bm > mx ? bm : mx;
        }
        if (!(mx > -INFINITY)) continue; /* this member rules out everything: it adds nothing */
        double tot = 0.0;
        for (int32_t b = 0; b < nb; b++)
            if (bsum[b] > 0) tot += bsum[b] * exp((double)shift[n_act][b] - mx);
        /* shift becomes the block factor f_ib */
        for (int32_t b = 0; b < nb; b++)
            shift[n_act][b] = bsum[b] > 0 ? (float)((double)w * exp((double)shift[n_act][b] - mx) / tot) : 0.0f;
        e[n_act] = ei;
        c[n_act++] = w;
    }
    if (n_act == 0) return no_support();
    for (int32_t b = 0; b < nb; b++) {
        int32_t x0 = b * blk, m = n - x0 < blk ? n - x0 : blk;
        float *o = out + x0;
        float f0 = shift[0][b];
        for (int32_t x = 0; x < m; x++) o[x] *= f0;
        for (int32_t a = 1; a < n_act; a++) {
            const float *ea = e[a] + x0;
            float fa = shift[a][b];
            for (int32_t x = 0; x < m; x++) o[x] += fa * ea[x];
        }
        for (int32_t x = 0; x < m; x++) o[x] = tutti_fast_log(o[x]);
    }
    return 0;
}

void fusion_utf8_init(fusion_utf8 *u) {
    u->need = 0;
    u->lo = 0x80, u->hi = 0xBF;
}

void fusion_utf8_allowed(const fusion_utf8 *u, bool *allowed) {
    if (u->need > 0) {
        for (int b = 0; b < 257; b++) allowed[b] = b >= u->lo && b <= u->hi;
        return;
    }
    for (int b = 0; b < 257; b++) allowed[b] = b < 0x80 || (b >= 0xC2 && b <= 0xF4) || b == FUSION_END;
}

void fusion_utf8_push(fusion_utf8 *u, uint8_t b) {
    if (u->need > 0) {
        u->need--;
        u->lo = 0x80, u->hi = 0xBF;
        return;
    }
    u->lo = 0x80, u->hi = 0xBF;
    if (b < 0x80) u->need = 0;
    else if (b < 0xE0) u->need = 1;
    else if (b < 0xF0) {
        u->need = 2;
        if (b == 0xE0) u->lo = 0xA0;
        if (b == 0xED) u->hi = 0x9F;
    } else {
        u->need = 3;
        if (b == 0xF0) u->lo = 0x90;
        if (b == 0xF4) u->hi = 0x8F;
    }
}
