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

/* Reductions with 8 explicit partial sums so that the compiler can keep
 * them in vector registers (a plain float sum is a serial dependency it may
 * not reorder without -ffast-math). */
static float max8(const float *x, int32_t n) {
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = -INFINITY;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    for (; j < n; j++) m[0] = x[j] > m[0] ? x[j] : m[0];
    float r = m[0];
    for (int k = 1; k < 8; k++) r = m[k] > r ? m[k] : r;
    return r;
}

/* Σ exp(x[j] - shift) in double over float blocks of 1024. */
static double sum_exp8(const float *x, int32_t n, float shift) {
    double total = 0.0;
    for (int32_t j0 = 0; j0 < n; j0 += 1024) {
        int32_t j1 = j0 + 1024 < n ? j0 + 1024 : n, j = j0;
        float acc[8] = {0};
        for (; j + 8 <= j1; j += 8)
            for (int k = 0; k < 8; k++) acc[k] += fusion_fast_exp(x[j + k] - shift);
        for (; j < j1; j++) acc[0] += fusion_fast_exp(x[j] - shift);
        float b = 0.0f;
        for (int k = 0; k < 8; k++) b += acc[k];
        total += b;
    }
    return total;
}

static double sum8(const float *x, int32_t n) {
    double total = 0.0;
    for (int32_t j0 = 0; j0 < n; j0 += 1024) {
        int32_t j1 = j0 + 1024 < n ? j0 + 1024 : n, j = j0;
        float acc[8] = {0};
        for (; j + 8 <= j1; j += 8)
            for (int k = 0; k < 8; k++) acc[k] += x[j + k];
        for (; j < j1; j++) acc[0] += x[j];
        float b = 0.0f;
        for (int k = 0; k < 8; k++) b += acc[k];
        total += b;
    }
    return total;
}

void fusion_log_softmax(const float *logits, int32_t n, float temp, float *out) {
    float inv = temp > 0 ? 1.0f / temp : 1.0f;
    if (inv == 1.0f) memcpy(out, logits, sizeof(float) * (size_t)n);
    else
        for (int32_t i = 0; i < n; i++) out[i] = logits[i] * inv;
    float mx = max8(out, n);
    if (mx == -INFINITY) return;
    float lse = mx + (float)log(sum_exp8(out, n, mx));
    for (int32_t i = 0; i < n; i++) out[i] -= lse;
}

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

int fusion_combine(const fusion_rule_params *p, int32_t n_members, const float *const *logp,
                   int32_t n, float *out, double *work, int32_t *chosen) {
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
            double s = sum8(acc, n);
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
            float mx = max8(acc, n);
            if (!(mx > -INFINITY)) return no_support();
            float lse = mx + (float)log(sum_exp8(acc, n, mx));
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
        float lse = m2 + (float)log(sum_exp8(acc, n, m2));
        for (int32_t x = 0; x < n; x++) out[x] = acc[x] - lse;
        return 0;
    }
    default:
        return tutti_set_error("fusion: unknown rule %d", p->rule);
    }
}

int fusion_combine_logits(const fusion_rule_params *p, const float *temps, int32_t n_members,
                          const float *const *logits, int32_t n, float *out, float *scratch) {
    double wsum = 0.0;
    for (int32_t i = 0; i < n_members; i++) wsum += p->weights[i];
    if (!(wsum > 0)) return tutti_set_error("fusion: weights must sum to a positive number");
    if (p->rule == TUTTI_RULE_PRODUCT) {
        /* Σ w_i log softmax(z_i/τ_i) = Σ (w_i/τ_i) z_i - const: one
         * log-softmax of the weighted logits */
        for (int32_t x = 0; x < n; x++) out[x] = 0.0f;
        for (int32_t i = 0; i < n_members; i++) {
            float c = (float)(p->weights[i] / wsum) / (temps[i] > 0 ? temps[i] : 1.0f);
            if (c == 0) continue;
            const float *z = logits[i];
            for (int32_t x = 0; x < n; x++) out[x] += c * z[x];
        }
        float mx = max8(out, n);
        if (!(mx > -INFINITY)) return no_support();
        float lse = mx + (float)log(sum_exp8(out, n, mx));
        for (int32_t x = 0; x < n; x++) out[x] -= lse;
        return 0;
    }
    if (p->rule != TUTTI_RULE_MIX) return tutti_set_error("fusion: fusion_combine_logits handles mix and product");
    /* Σ w_i softmax(z_i/τ_i): one exp pass per member, the mixture is
     * normalised by construction */
    float *acc = scratch;
    for (int32_t x = 0; x < n; x++) acc[x] = 0.0f;
    for (int32_t i = 0; i < n_members; i++) {
        float w = (float)(p->weights[i] / wsum);
        if (w == 0) continue;
        float inv = 1.0f / (temps[i] > 0 ? temps[i] : 1.0f);
        const float *z = logits[i];
        float *e = out; /* out as per-member scratch */
        float mx = max8(z, n) * inv; /* inv > 0: the max commutes with the scaling */
        if (!(mx > -INFINITY)) continue;
        double tot = 0.0;
        for (int32_t x0 = 0; x0 < n; x0 += 1024) {
            int32_t x1 = x0 + 1024 < n ? x0 + 1024 : n, x = x0;
            float a8[8] = {0};
            for (; x + 8 <= x1; x += 8)
                for (int k = 0; k < 8; k++) a8[k] += e[x + k] = fusion_fast_exp(z[x + k] * inv - mx);
            for (; x < x1; x++) a8[0] += e[x] = fusion_fast_exp(z[x] * inv - mx);
            float b = 0.0f;
            for (int k = 0; k < 8; k++) b += a8[k];
            tot += b;
        }
        float c = (float)(w / tot);
        for (int32_t x = 0; x < n; x++) acc[x] += c * e[x];
    }
    for (int32_t x = 0; x < n; x++) out[x] = fusion_fast_log(acc[x]);
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
    for (int b = 0; b < 257; b++)
        allowed[b] = b < 0x80 || (b >= 0xC2 && b <= 0xF4) || b == FUSION_END;
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
