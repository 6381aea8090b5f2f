/* AArch64 Advanced SIMD (NEON) path.  ASIMD is mandatory on AArch64, so the
 * path is available on every AArch64 CPU; the int8 products use
 * vmull_s8 + vpadalq_s16 (baseline ARMv8.0, exact: |a*b| <= 127*127 fits in
 * int16) rather than the optional SDOT instruction.
 *
 * Kernels: Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K, F32, F16.  The other types keep
 * the scalar kernels (tutti_vec_dot_get reports path "scalar" for them).
 * Tile products loop over vec_dot (tutti_simd_gemm_from_vec_dot). */
#include "quant/simd_common.h"

#if defined(__aarch64__)
#include <arm_neon.h>

bool tutti_simd_cpu_neon(void) { return true; }

/* acc + sum of a[i]*b[i] over groups of 4 lanes (int32). */
static inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

static inline float h2f(const uint8_t *p) { return tutti_fp16_to_f32(simd_rd_u16(p)); }

/* Signed 32-element legacy blocks with Q8_0 activations; DECODE sets w0
 * (elements 0..15) and w1 (16..31). */
#define LEGACY_SIGNED(NAME, BS, DECODE)                                                  \
    static void vd_##NAME(int64_t n, float *s, const void *vw, const void *vx) {         \
        const uint8_t *w = vw, *x = vx;                                                  \
        float32x4_t acc = vdupq_n_f32(0);                                                \
        for (int64_t ib = 0; ib < n / 32; ib++, w += BS, x += SIMD_Q8_0_BYTES) {         \
            int8x16_t w0, w1;                                                            \
            DECODE;                                                                      \
            int32x4_t p = dot_s8(vdupq_n_s32(0), w0, vld1q_s8((const int8_t *)(x + 2))); \
            p = dot_s8(p, w1, vld1q_s8((const int8_t *)(x + 18)));                       \
            acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(w) * h2f(x));                   \
        }                                                                                \
        *s = vaddvq_f32(acc);                                                            \
    }

/* Q8_0 in the float order of the scalar vd_q8_0 (quant/vecdot.c), i.e. of
 * llama.cpp's x86 kernels: lane k (of 8) takes the exact integer sum of
 * elements 4k..4k+3 of each block through acc[k] = fma(d_w * d_x, isum_k,
 * acc[k]), lanes added as ((0+4) + (2+6)) + ((1+5) + (3+7)).  Bit-identical
 * to the scalar kernel; another order flips 8-bit activation roundings
 * downstream (TinyStories-656K-Q8_0 p4: 0.176 in log-softmax). */
static inline int32x4_t sum4_s8(int8x16_t a, int8x16_t b) { /* lane k: sum of a[i]*b[i], i = 4k..4k+3 */
    return vpaddq_s32(vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b))), vpaddlq_s16(vmull_high_s8(a, b)));
}

static void vd_q8_0(int64_t n, float *s, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
    for (int64_t ib = 0; ib < n / 32; ib++, w += 34, x += SIMD_Q8_0_BYTES) {
        const float32x4_t d = vdupq_n_f32(h2f(w) * h2f(x));
        const int32x4_t g0 = sum4_s8(vld1q_s8((const int8_t *)(w + 2)), vld1q_s8((const int8_t *)(x + 2)));
        const int32x4_t g1 = sum4_s8(vld1q_s8((const int8_t *)(w + 18)), vld1q_s8((const int8_t *)(x + 18)));
        acc0 = vfmaq_f32(acc0, d, vcvtq_f32_s32(g0));
        acc1 = vfmaq_f32(acc1, d, vcvtq_f32_s32(g1));
    }
    const float32x4_t t = vaddq_f32(acc0, acc1);                       /* 0+4, 1+5, 2+6, 3+7 */
    const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t)); /* (0+4)+(2+6), (1+5)+(3+7) */
    *s = vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
}

LEGACY_SIGNED(q4_0, 18, {
    const uint8x16_t q = vld1q_u8(w + 2);
    w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(15))), vdupq_n_s8(8));
    w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
})
LEGACY_SIGNED(iq4_nl, 18, {
    const uint8x16_t q = vld1q_u8(w + 2);
    const int8x16_t tab = vld1q_s8(tutti_simd_iq4nl_values);
    w0 = vqtbl1q_s8(tab, vandq_u8(q, vdupq_n_u8(15)));
    w1 = vqtbl1q_s8(tab, vshrq_n_u8(q, 4));
})

static void vd_q4_k(int64_t n, float *s, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t ib = 0; ib < n / 256; ib++, w += 144, x += SIMD_Q8_K_BYTES) {
        const int8_t *qx = (const int8_t *)(x + 4);
        int isum = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            const uint8x16_t a = vld1q_u8(w + 16 + 32 * c), b = vld1q_u8(w + 16 + 32 * c + 16);
            const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(a, vdupq_n_u8(15)));
            const int8x16_t lo1 = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(15)));
            const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(a, 4));
            const int8x16_t hi1 = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
            int32x4_t pl = dot_s8(vdupq_n_s32(0), lo0, vld1q_s8(qx + 64 * c));
            pl = dot_s8(pl, lo1, vld1q_s8(qx + 64 * c + 16));
            int32x4_t ph = dot_s8(vdupq_n_s32(0), hi0, vld1q_s8(qx + 64 * c + 32));
            ph = dot_s8(ph, hi1, vld1q_s8(qx + 64 * c + 48));
            int sc, m;
            simd_k4_scale_min(w + 4, 2 * c, &sc, &m);
            isum += sc * vaddvq_s32(pl);
            summ += m * ((int16_t)simd_rd_u16(x + 260 + 2 * (4 * c)) + (int16_t)simd_rd_u16(x + 260 + 2 * (4 * c + 1)));
            simd_k4_scale_min(w + 4, 2 * c + 1, &sc, &m);
            isum += sc * vaddvq_s32(ph);
            summ +=
                m * ((int16_t)simd_rd_u16(x + 260 + 2 * (4 * c + 2)) + (int16_t)simd_rd_u16(x + 260 + 2 * (4 * c + 3)));
        }
        const float dy = simd_rd_f32(x);
        sum += dy * h2f(w) * (float)isum - dy * h2f(w + 2) * (float)summ;
    }
    *s = sum;
}

static void vd_q6_k(int64_t n, float *s, const void *vw, const void *vx) {
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t ib = 0; ib < n / 256; ib++, w += 210, x += SIMD_Q8_K_BYTES) {
        const int8_t *qx = (const int8_t *)(x + 4);
        const int8_t *sc = (const int8_t *)(w + 192);
        int isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            for (int half = 0; half < 2; half++) { /* l = 16*half .. 16*half+15 */
                const uint8x16_t A = vld1q_u8(ql + 16 * half), B = vld1q_u8(ql + 32 + 16 * half);
                const uint8x16_t H = vld1q_u8(qh + 16 * half);
                const uint8x16_t m4 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
                uint8x16_t q[4];
                q[0] = vorrq_u8(vandq_u8(A, m4), vshlq_n_u8(vandq_u8(H, m3), 4));
                q[1] = vorrq_u8(vandq_u8(B, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(H, 2), m3), 4));
                q[2] = vorrq_u8(vshrq_n_u8(A, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(H, 4), m3), 4));
                q[3] = vorrq_u8(vshrq_n_u8(B, 4), vshlq_n_u8(vshrq_n_u8(H, 6), 4));
                for (int g = 0; g < 4; g++) {
                    /* elements 128h + 32g + 16*half + (0..15), scale (128h+32g+16half)/16 */
                    const int e0 = 128 * h + 32 * g + 16 * half;
                    const int8x16_t v = vsubq_s8(vreinterpretq_s8_u8(q[g]), vdupq_n_s8(32));
                    isum += sc[e0 / 16] * vaddvq_s32(dot_s8(vdupq_n_s32(0), v, vld1q_s8(qx + e0)));
                }
            }
        }
        sum += simd_rd_f32(x) * h2f(w + 208) * (float)isum;
    }
    *s = sum;
}

static void vd_f32(int64_t n, float *s, const void *vw, const void *vx) {
    const uint8_t *w = vw;
    const float *x = vx;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a0 = vfmaq_f32(a0, vld1q_f32((const float *)(w + 4 * i)), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, vld1q_f32((const float *)(w + 4 * i + 16)), vld1q_f32(x + i + 4));
    }
    float t = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) t += simd_rd_f32(w + 4 * i) * x[i];
    *s = t;
}

static void vd_f16(int64_t n, float *s, const void *vw, const void *vx) {
    const uint8_t *w = vw;
    const uint16_t *x = vx;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t wv = vld1q_u16((const uint16_t *)(w + 2 * i)), xv = vld1q_u16(x + i);
        a0 = vfmaq_f32(a0, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(wv))),
                       vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(xv))));
        a1 = vfmaq_f32(a1, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(wv))),
                       vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(xv))));
    }
    float t = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) t += h2f(w + 2 * i) * tutti_fp16_to_f32(x[i]);
    *s = t;
}

TUTTI_GEMM_FROM_VEC_DOT(q8_0)
TUTTI_GEMM_FROM_VEC_DOT(q4_0)
TUTTI_GEMM_FROM_VEC_DOT(iq4_nl)
TUTTI_GEMM_FROM_VEC_DOT(q4_k)
TUTTI_GEMM_FROM_VEC_DOT(q6_k)
TUTTI_GEMM_FROM_VEC_DOT(f32)
TUTTI_GEMM_FROM_VEC_DOT(f16)

void tutti_simd_fill_neon(tutti_vec_dot_traits *t) {
#define SET(T, NAME)                 \
    do {                             \
        t[T].vec_dot = vd_##NAME;    \
        t[T].gemm = gemm_##NAME;     \
        t[T].path = TUTTI_SIMD_NEON; \
    } while (0)
    SET(TUTTI_TYPE_Q8_0, q8_0);
    SET(TUTTI_TYPE_Q4_0, q4_0);
    SET(TUTTI_TYPE_IQ4_NL, iq4_nl);
    SET(TUTTI_TYPE_Q4_K, q4_k);
    SET(TUTTI_TYPE_Q6_K, q6_k);
    SET(TUTTI_TYPE_F32, f32);
    SET(TUTTI_TYPE_F16, f16);
#undef SET
}

#else /* not AArch64 */

bool tutti_simd_cpu_neon(void) { return false; }
void tutti_simd_fill_neon(tutti_vec_dot_traits *tab) { (void)tab; }

#endif
