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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "util/error.h"

void fusion_log_softmax(const float *logits, int32_t n, float temp, float *out) {
    float inv = temp > 0 ? 1.0f / temp : 1.0f;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i] * inv;
        out[i] = v;
        if (v > mx) mx = v;
    }
    if (mx == -INFINITY) return;
    float sum = 0.0f;
    /* float partial sums in blocks keep the rounding error near 1e-7
     * relative while letting the loop vectorise */
    double total = 0.0;
    for (int32_t i = 0; i < n; i += 1024) {
        int32_t e = i + 1024 < n ? i + 1024 : n;
        sum = 0.0f;
        for (int32_t j = i; j < e; j++) sum += fusion_fast_exp(out[j] - mx);
        total += sum;
    }
    float lse = mx + (float)log(total);
    for (int32_t i = 0; i < n; i++) out[i] -= lse;
}

double fusion_entropy(const float *logp, int32_t n) {
    double h = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (logp[i] > -INFINITY) h -= (double)fusion_fast_exp(logp[i]) * logp[i];
    return h;
}

/* out = work normalised in log space; returns -1 when every outcome is impossible. */
static int log_normalise_lin(const double *work, int32_t n, float *out) {
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += work[i];
    if (!(s > 0)) return tutti_set_error("fusion: every outcome has probability 0 under the fused distribution");
    double ls = log(s);
    for (int32_t i = 0; i < n; i++) out[i] = work[i] > 0 ? (float)(log(work[i]) - ls) : -INFINITY;
    return 0;
}

static int log_normalise_log(const double *work, int32_t n, float *out) {
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (work[i] > mx) mx = work[i];
    if (mx == -INFINITY || isnan(mx))
        return tutti_set_error("fusion: every outcome has probability 0 under the fused distribution");
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += exp(work[i] - mx);
    double lse = mx + log(s);
    for (int32_t i = 0; i < n; i++) out[i] = (float)(work[i] - lse);
    return 0;
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
    switch (p->rule) {
    case TUTTI_RULE_MIX:
    case TUTTI_RULE_PRODUCT:
        if (n_active == 1) {
            /* one active member: its distribution exactly (no rounding) */
            memcpy(out, logp[last], sizeof(float) * (size_t)n);
            return 0;
        }
        if (!(wsum > 0)) return tutti_set_error("fusion: weights must sum to a positive number");
        if (p->rule == TUTTI_RULE_MIX) {
            /* Σ w_i p_i computed relative to the largest log-prob so that
             * members whose probabilities all underflow still count */
            for (int32_t x = 0; x < n; x++) work[x] = 0.0;
            for (int32_t i = 0; i < n_members; i++) {
                float w = (float)(p->weights[i] / wsum);
                if (w == 0) continue;
                const float *l = logp[i];
                for (int32_t x = 0; x < n; x++) work[x] += (double)(w * fusion_fast_exp(l[x]));
            }
            return log_normalise_lin(work, n, out);
        } else {
            for (int32_t x = 0; x < n; x++) work[x] = 0.0;
            for (int32_t i = 0; i < n_members; i++) {
                double w = p->weights[i] / wsum;
                if (w == 0) continue;
                const float *l = logp[i];
                for (int32_t x = 0; x < n; x++) work[x] += w * (double)l[x];
            }
            return log_normalise_log(work, n, out);
        }
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
        for (int32_t x = 0; x < n; x++) {
            if (!(e[x] >= cut)) {
                work[x] = -INFINITY;
                continue;
            }
            double s = 0.0;
            for (int32_t i = 0; i < n_members; i++)
                if (p->weights[i] != 0) {
                    float l = logp[i][x];
                    /* an amateur that rules x out would make the score +inf:
                     * treat its log-prob as very small instead */
                    if (l == -INFINITY) l = -1e4f;
                    s += p->weights[i] * (double)l;
                }
            work[x] = s;
        }
        return log_normalise_log(work, n, out);
    }
    default:
        return tutti_set_error("fusion: unknown rule %d", p->rule);
    }
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
