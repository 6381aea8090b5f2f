/* The quant layer's scalar reference path: row dequantization with argument
 * checks, the reference dot product, and the reference quantizers
 * float32 -> Q8_0 / Q8_K / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K /
 * MXFP4.
 *
 * The quantizers reproduce ggml's quantize_row_*_ref (ggml-quants.c) bit for
 * bit, which is what llama-quantize writes without an importance matrix.
 * That fixes more than the algorithm: float32 expressions are evaluated in
 * ggml's order (a*b*c is (a*b)*c, sums run in index order), maxima keep the
 * first element reaching them, and the two rounding rules are kept apart:
 * roundf (ties away from zero) for Q8_0, round-to-nearest-even (round_even)
 * for Q8_K and the K-quants, truncation of x + 0.5 (or + 8.5 / + 16.5) for
 * Q4_x / Q5_x.  Float-to-integer conversions are clamped first so that no
 * input, not even a NaN passed to a typed function, causes undefined
 * behaviour. */
#include "quant/quant.h"

/* Keep a*b + c as two roundings: an FMA would change the last bit.  GCC
 * already does this in ISO C mode (-std=c11); clang needs the pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/quant_impl.h"
#include "util/error.h"
#include "util/fp16.h"

_Static_assert(sizeof(tutti_block_q8_0) == 34, "tutti_block_q8_0 must match ggml's block_q8_0");
_Static_assert(sizeof(tutti_block_q8_K) == 292, "tutti_block_q8_K must match ggml's block_q8_K");

/* ---- argument checks shared by the entry points -------------------------- */

static bool check_row(const char *what, int type, int64_t n, bool ptrs_ok) {
    const tutti_type_traits *t = tutti_type_get(type);
    if (!t) {
        tutti_set_error("%s: %s is not a ggml tensor type", what, tutti_type_name(type));
        return false;
    }
    if (n < 0 || n % t->block_size) {
        tutti_set_error("%s: row of %lld elements of type %s: must be a non-negative multiple of "
                        "the block size %lld",
                        what, (long long)n, t->name, (long long)t->block_size);
        return false;
    }
    if (n > 0 && !ptrs_ok) {
        tutti_set_error("%s: NULL buffer for a row of %lld %s elements", what, (long long)n, t->name);
        return false;
    }
    return true;
}

bool tutti_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    if (!check_row("dequantize", type, n, src && dst)) return false;
    const tutti_type_traits *t = tutti_type_get(type);
    if (!t->to_float) {
        tutti_set_error("dequantize: tensor type %s is not supported by tutti", t->name);
        return false;
    }
    if (n > 0) t->to_float(src, dst, n);
    return true;
}

/* Dequantizes one block at a time (256 elements at a time for the 1-element
 * "blocks" of F32/F16/BF16) into a stack buffer and accumulates
 * w[i] * x[i] in float32, in index order.  Deliberately naive: it is the
 * yardstick, not a fast path. */
float tutti_vec_dot_ref(int type, const void *w_row, const float *x, int64_t n) {
    if (!check_row("vec_dot_ref", type, n, w_row && x)) return NAN;
    const tutti_type_traits *t = tutti_type_get(type);
    if (!t->to_float) {
        tutti_set_error("vec_dot_ref: tensor type %s is not supported by tutti", t->name);
        return NAN;
    }
    enum { CHUNK = 256 }; /* the largest block size of a supported type */
    const int64_t step = t->block_size == 1 ? CHUNK : t->block_size;
    const uint8_t *src = w_row;
    float buf[CHUNK];
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i += step) {
        const int64_t m = n - i < step ? n - i : step;
        t->to_float(src + (size_t)(i / t->block_size) * t->type_size, buf, m);
        for (int64_t j = 0; j < m; j++) sum += buf[j] * x[i + j];
    }
    return sum;
}

/* ---- rounding helpers ---------------------------------------------------- */

/* Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int):
 * adding 1.5 * 2^23 leaves no fraction bits, so the float addition itself
 * rounds, and the integer is read back from the mantissa.  Bit arithmetic
 * only, so a NaN or huge v gives some integer, never undefined behaviour;
 * every caller clamps the result. */
static inline int round_even(float v) {
    const float t = v + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    return (int)(bits & 0x007fffffu) - 0x00400000;
}

/* (int)v clamped to [lo, hi], NaN -> lo: C's truncating conversion for
 * values strictly inside the range, where it is defined. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline void wr_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void wr_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void wr_half(uint8_t *p, float f) { wr_u16(p, tutti_f32_to_fp16(f)); }
static inline float half_round_trip(float f) { return tutti_fp16_to_f32(tutti_f32_to_fp16(f)); }

/* ---- 8-bit ------------------------------------------------------------------ */

/* Q8_0 (34 bytes: f16 d | i8 qs[32]): d = amax / 127, q = roundf(x / d)
 * computed as x * (1 / d) with the float32 d, not the stored half. */
void tutti_quantize_row_q8_0_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_half(b, d);
        for (int j = 0; j < 32; j++) {
            const float r = roundf(x[j] * id);
            b[2 + j] = (uint8_t)(int8_t)(r != r ? 0 : r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
        }
    }
}

/* Q8_K (tutti_block_q8_K): scale from the element of largest magnitude,
 * keeping its sign (iscale = -127 / max), so that element maps to -127 or
 * 127 and nothing rounds to +128. */
void tutti_quantize_row_q8_K_ref(const float *x, void *dst, int64_t n) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n / TUTTI_QK_K; i++, x += TUTTI_QK_K, out += sizeof(tutti_block_q8_K)) {
        tutti_block_q8_K y;
        memset(&y, 0, sizeof y);
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < TUTTI_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax != 0.0f) {
            const float iscale = -127.0f / max;
            for (int j = 0; j < TUTTI_QK_K; j++) {
                const int v = round_even(iscale * x[j]);
                y.qs[j] = (int8_t)clampi(v, -128, 127);
            }
            for (int j = 0; j < TUTTI_QK_K / 16; j++) {
                int sum = 0;
                for (int k = 0; k < 16; k++) sum += y.qs[16 * j + k];
                y.bsums[j] = (int16_t)sum;
            }
            y.d = 1.0f / iscale;
        }
        memcpy(out, &y, sizeof y); /* dst may be unaligned */
    }
}

/* ---- legacy 4/5-bit ------------------------------------------------------- */

/* First element of largest magnitude, with its sign. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Q4_0 (f16 d | qs[16]): d = max / -8, so the largest-magnitude element
 * becomes level 0 and the levels -8..7 are used asymmetrically. */
void tutti_quantize_row_q4_0_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 18) {
        const float d = signed_absmax(x, 32) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_half(b, d);
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_clamp(x[j] * id + 8.5f, 0, 15);
            const int q1 = trunc_clamp(x[j + 16] * id + 8.5f, 0, 15);
            b[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q4_1 (f16 d | f16 m | qs[16]): d = (max - min) / 15, m = min. */
void tutti_quantize_row_q4_1_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 20) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_half(b, d);
        wr_half(b + 2, mn);
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 0, 15);
            const int q1 = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 0, 15);
            b[4 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q5_0 (f16 d | u32 qh | qs[16]): d = max / -16, levels -16..15. */
void tutti_quantize_row_q5_0_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 22) {
        const float d = signed_absmax(x, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_half(b, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_clamp(x[j] * id + 16.5f, 0, 31);
            const int q1 = trunc_clamp(x[j + 16] * id + 16.5f, 0, 31);
            b[6 + j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        wr_u32(b + 2, qh);
    }
}

/* Q5_1 (f16 d | f16 m | u32 qh | qs[16]): d = (max - min) / 31, m = min. */
void tutti_quantize_row_q5_1_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 24) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_half(b, d);
        wr_half(b + 2, mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 0, 31);
            const int q1 = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 0, 31);
            b[8 + j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        wr_u32(b + 4, qh);
    }
}

/* ---- K-quants ------------------------------------------------------------- */

/* Fits x[i] ~= scale * L[i] - the_min with L[i] in 0..nmax and the_min >= 0
 * (ggml's make_qkx2_quants): start from the min/max grid, then try
 * nstep + 1 grids with iscale = (rmin + rdelta*is + nmax) / (max - min); for
 * each, solve the weighted least-squares scale and min for those levels and
 * keep the grid with the smallest weighted squared (or, with use_mad,
 * absolute) error.  Returns the scale. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, uint8_t *Laux,
                           float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(round_even(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(round_even(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Symmetric fit x[i] ~= scale * (L[i] - nmax), L[i] in 0..2*nmax-1, weights
 * x^2 (ggml's make_qx_quants with rmse_type 1 and no importance weights):
 * the grid through the largest-magnitude element, then 18 perturbed grids
 * iscale = -(nmax + 0.1*is) / max, keeping the one maximising
 * (sum w x l)^2 / (sum w l^2); the scale is the least-squares one. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) { /* ggml's GROUP_MAX_EPS: treat as all zero */
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(round_even(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Packs 8 six-bit scales and mins into the 12-byte `scales` field of
 * Q4_K / Q5_K (inverse of k4_scale_min in dequant.c). */
static void k4_pack_scales(uint8_t s[12], const uint8_t ls[8], const uint8_t lm[8]) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void k4_unpack(const uint8_t s[12], int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Common part of Q4_K and Q5_K: per-sub-block fit, 6-bit quantization of the
 * scales and mins, f16 d / dmin written to hdr[0..3], scales to hdr[4..15],
 * and the final levels (0..nmax) re-rounded against the stored scales. */
static void k4_quantize_block(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t hdr[16],
                              uint8_t L[TUTTI_QK_K]) {
    uint8_t Laux[32];
    float w[32], scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xb = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xb[l] * xb[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xb[l]);
        scales[j] = fit_scale_min(32, nmax, xb, w, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        /* ggml stores the int in a uint8_t before clamping to 63: keep the wrap */
        ls[j] = (uint8_t)round_even(inv_scale * scales[j]);
        lm[j] = (uint8_t)round_even(inv_min * mins[j]);
        if (ls[j] > 63) ls[j] = 63;
        if (lm[j] > 63) lm[j] = 63;
    }
    k4_pack_scales(hdr + 4, ls, lm);
    wr_half(hdr, max_scale / 63.0f);
    wr_half(hdr + 2, max_min / 63.0f);
    const float d_all = tutti_fp16_to_f32((uint16_t)(hdr[0] | (hdr[1] << 8)));
    const float dmin_all = tutti_fp16_to_f32((uint16_t)(hdr[2] | (hdr[3] << 8)));
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_unpack(hdr + 4, j, &sc, &m);
        const float d = d_all * (float)sc;
        if (d == 0.0f) continue; /* keep the levels of the fit */
        const float dm = dmin_all * (float)m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(round_even((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

/* Q4_K (f16 d | f16 dmin | scales[12] | qs[128]); see dequant.c for the
 * layout. */
void tutti_quantize_row_q4_K_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    uint8_t L[TUTTI_QK_K];
    for (int64_t i = 0; i < n / TUTTI_QK_K; i++, x += TUTTI_QK_K, b += 144) {
        k4_quantize_block(x, 15, -1.0f, 0.1f, 20, b, L);
        uint8_t *qs = b + 16;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* Q5_K (f16 d | f16 dmin | scales[12] | qh[32] | qs[128]). */
void tutti_quantize_row_q5_K_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    uint8_t L[TUTTI_QK_K];
    for (int64_t i = 0; i < n / TUTTI_QK_K; i++, x += TUTTI_QK_K, b += 176) {
        k4_quantize_block(x, 31, -0.5f, 0.1f, 15, b, L);
        uint8_t *qh = b + 16, *qs = b + 48;
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
                qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

/* Q6_K (ql[128] | qh[64] | i8 scales[16] | f16 d): per 16 elements a
 * symmetric 6-bit fit; the sub-scales are int8 relative to d = max / -128,
 * where max is the sub-scale of largest magnitude. */
void tutti_quantize_row_q6_K_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    int8_t L[TUTTI_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / TUTTI_QK_K; i++, x += TUTTI_QK_K, b += 210) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(b, 0, 210);
        if (max_abs_scale < 1e-15f) continue; /* all-zero block */
        const float iscale = -128.0f / max_scale;
        wr_half(b + 208, 1 / iscale);
        int8_t *sc = (int8_t *)(b + 192);
        for (int ib = 0; ib < 16; ib++) sc[ib] = (int8_t)clampi(round_even(iscale * scales[ib]), -128, 127);
        const float d_all = half_round_trip(1 / iscale);
        for (int j = 0; j < 16; j++) {
            const float d = d_all * (float)sc[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(round_even(x[16 * j + l] / d), -32, 31) + 32);
        }
        uint8_t *ql = b, *qh = b + 128;
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                ql[64 * h + l] = (uint8_t)((q1 & 0x0F) | ((q3 & 0x0F) << 4));
                ql[64 * h + l + 32] = (uint8_t)((q2 & 0x0F) | ((q4 & 0x0F) << 4));
                qh[32 * h + l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* ---- MXFP4 ------------------------------------------------------------------- */

/* MXFP4 (17 bytes: u8 e | u8 qs[16], quant_impl.h), ggml's
 * quantize_row_mxfp4_ref: e = floor(log2f(amax)) - 2 + 127 (0 for an
 * all-zero block), d = 2^(e - 128), and each element takes the first code
 * whose value * d is nearest.  The largest element then lies in [8d, 16d),
 * so it maps to 8d or 12d.  Below amax = 2^-125 the exponent goes negative;
 * ggml stores its low 8 bits (a huge scale: every element becomes code 0),
 * and so does this. */
void tutti_quantize_row_mxfp4_ref(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 17) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* log2f of a finite positive float lies in [-150, 128]: the int is exact */
        const int ie = amax > 0.0f ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
        const uint8_t e = (uint8_t)(ie & 0xFF);
        const float d = tutti_e8m0_half(e);
        b[0] = e;
        for (int j = 0; j < 16; j++) {
            uint8_t q[2];
            for (int h = 0; h < 2; h++) {
                const float v = x[j + 16 * h];
                int best = 0;
                float best_err = fabsf((float)tutti_mxfp4_values[0] * d - v);
                for (int k = 1; k < 16; k++) {
                    const float err = fabsf((float)tutti_mxfp4_values[k] * d - v);
                    if (err < best_err) best = k, best_err = err;
                }
                q[h] = (uint8_t)best;
            }
            b[1 + j] = (uint8_t)(q[0] | (q[1] << 4));
        }
    }
}

/* ---- dispatch --------------------------------------------------------------- */

static void quantize_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, sizeof(float) * (size_t)n); }
static void quantize_f16(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n; i++) wr_u16(b + 2 * i, tutti_f32_to_fp16(x[i]));
}
static void quantize_bf16(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n; i++) wr_u16(b + 2 * i, tutti_f32_to_bf16(x[i]));
}

typedef void (*quantize_fn)(const float *x, void *dst, int64_t n);

static quantize_fn quantizer(int type) {
    switch (type) {
    case TUTTI_TYPE_F32: return quantize_f32;
    case TUTTI_TYPE_F16: return quantize_f16;
    case TUTTI_TYPE_BF16: return quantize_bf16;
    case TUTTI_TYPE_Q8_0: return tutti_quantize_row_q8_0_ref;
    case TUTTI_TYPE_Q8_K: return tutti_quantize_row_q8_K_ref;
    case TUTTI_TYPE_Q4_0: return tutti_quantize_row_q4_0_ref;
    case TUTTI_TYPE_Q4_1: return tutti_quantize_row_q4_1_ref;
    case TUTTI_TYPE_Q5_0: return tutti_quantize_row_q5_0_ref;
    case TUTTI_TYPE_Q5_1: return tutti_quantize_row_q5_1_ref;
    case TUTTI_TYPE_Q4_K: return tutti_quantize_row_q4_K_ref;
    case TUTTI_TYPE_Q5_K: return tutti_quantize_row_q5_K_ref;
    case TUTTI_TYPE_Q6_K: return tutti_quantize_row_q6_K_ref;
    case TUTTI_TYPE_MXFP4: return tutti_quantize_row_mxfp4_ref;
    default: return NULL;
    }
}

bool tutti_type_can_quantize(int type) { return quantizer(type) != NULL; }

bool tutti_quantize_row_ref(int type, const float *x, void *dst, int64_t n) {
    if (!check_row("quantize", type, n, x && dst)) return false;
    quantize_fn fn = quantizer(type);
    if (!fn) {
        tutti_set_error("quantize: no quantizer for type %s", tutti_type_name(type));
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            tutti_set_error("quantize: element %lld of the row is %s; only finite values can be "
                            "quantized to %s",
                            (long long)i, isnan(x[i]) ? "NaN" : "infinite", tutti_type_name(type));
            return false;
        }
    }
    if (n > 0) fn(x, dst, n);
    return true;
}
