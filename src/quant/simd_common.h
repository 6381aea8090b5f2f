/* Internal to the quant layer's SIMD kernels (vecdot.c, simd_x86.c,
 * simd_neon.c): byte-level field readers and the hooks each path uses to fill
 * its kernel table. */
#ifndef TUTTI_QUANT_SIMD_COMMON_H
#define TUTTI_QUANT_SIMD_COMMON_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_impl.h"
#include "quant/vecdot.h"
#include "util/fp16.h"

/* Blocks are packed back to back at odd sizes (18, 22, 110 ... bytes), so
 * multi-byte fields are read with memcpy, never through a cast pointer. */
static inline uint16_t simd_rd_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t simd_rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline float simd_rd_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* Table-driven half -> float (vecdot.c); exact. */
extern float tutti_simd_f16_table[65536];
/* tutti_e8m0_half(e) for every e (vecdot.c), for the MXFP4 kernels. */
extern float tutti_simd_e8m0_table[256];
static inline float simd_rd_half(const uint8_t *p) { return tutti_simd_f16_table[simd_rd_u16(p)]; }

/* Sign vectors for vpsignb-style kernels (vecdot_iq.c, filled with the
 * scalar table): byte j of tutti_simd_sign8[s] is 0xFF where bit j of s is
 * set (a minus sign), else 0x01; tutti_simd_ksign64[i] =
 * tutti_simd_sign8[tutti_iq_ksigns[i]]. */
extern uint64_t tutti_simd_sign8[256];
extern uint64_t tutti_simd_ksign64[128];

/* ggml's kvalues_iq4nl: the 16 levels of IQ4_NL / IQ4_XS. */
extern const int8_t tutti_simd_iq4nl_values[16];

/* Sizes of the activation blocks. */
#define SIMD_Q8_0_BYTES 34
#define SIMD_Q8_1_BYTES 36
#define SIMD_Q8_K_BYTES 292

/* 6-bit scale and min j (0..7) of Q4_K / Q5_K from their 12 scale bytes. */
static inline void simd_k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q3_K's 16 six-bit scales (biased by 32, returned unbiased). */
static inline void simd_q3k_scales(const uint8_t *sb, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? (sb[j] & 0x0F) : (sb[j - 8] >> 4);
        const int hi = (sb[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* The float order of the Q8_0-activation kernels that every path shares
 * (vecdot.c's vd_q8_0 explains why it is llama.cpp's): per 32-element
 * block, lane k (of 8) takes the exact integer sum of elements 4k..4k+3
 * through acc[k] = fma(d, isum_k, acc[k]); the lanes are added as
 * ((0+4) + (2+6)) + ((1+5) + (3+7)), as hsum_ps does in the x86 kernels. */
static inline void simd_lanes8_acc(float acc[8], float d, const int8_t *w, const int8_t *x) {
    for (int k = 0; k < 8; k++) {
        int isum = 0;
        for (int j = 4 * k; j < 4 * k + 4; j++) isum += w[j] * x[j];
        acc[k] = fmaf(d, (float)isum, acc[k]);
    }
}
static inline float simd_lanes8_sum(const float acc[8]) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* The scalar steps of the i-quant kernels (vecdot_iq.c explains them),
 * shared by every path so that all give the same bits: the weight scale of
 * a super-block (IQ1_M keeps its f16 in the top nibbles of its 4 scale
 * words), and the row's result from the sum of the grid lanes and the
 * delta part (IQ1 only). */
static inline float simd_iq_d(int type, const uint8_t *b) {
    if (type != TUTTI_TYPE_IQ1_M) return simd_rd_half(b);
    uint16_t h = 0;
    for (int k = 0; k < 4; k++) h |= (uint16_t)((simd_rd_u16(b + 48 + 2 * k) >> 12) << (4 * k));
    return tutti_simd_f16_table[h];
}
static inline float simd_iq_finish(int type, float sum, float delta_sum) {
    switch (type) {
    case TUTTI_TYPE_IQ2_XXS:
    case TUTTI_TYPE_IQ2_XS:
    case TUTTI_TYPE_IQ2_S: return 0.125f * sum;
    case TUTTI_TYPE_IQ3_XXS: return 0.25f * sum;
    case TUTTI_TYPE_IQ1_S:
    case TUTTI_TYPE_IQ1_M: return sum + TUTTI_IQ1_DELTA * delta_sum;
    default: return sum;
    }
}

/* Generic tile product built from a vec_dot (used where a path has no
 * dedicated tile kernel). */
/* Defines gemm_NAME, the table entry that runs vd_NAME over every (row, token) pair. */
#define TUTTI_GEMM_FROM_VEC_DOT(NAME)                                                                         \
    static void gemm_##NAME(int64_t n, const void *w, size_t ldw, int nr, const void *vx, size_t ldx, int nc, \
                            float *s, size_t lds) {                                                           \
        tutti_simd_gemm_from_vec_dot(vd_##NAME, n, w, ldw, nr, vx, ldx, nc, s, lds);                          \
    }
void tutti_simd_gemm_from_vec_dot(tutti_vec_dot_fn vd, int64_t n, const void *w, size_t ldw, int nr, const void *vx,
                                  size_t ldx, int nc, float *s, size_t lds);

/* Each path overwrites the entries it has kernels for (tab indexed by
 * weight type; entries arrive filled with the simpler path's kernels). */
void tutti_simd_fill_avx2(tutti_vec_dot_traits *tab);
void tutti_simd_fill_avx512(tutti_vec_dot_traits *tab);
void tutti_simd_fill_neon(tutti_vec_dot_traits *tab);
/* The scalar kernels of MXFP4 and the i-quants (vecdot_iq.c). */
void tutti_simd_fill_scalar_iq(tutti_vec_dot_traits *tab);
/* CPU feature tests of the paths (false when not compiled in). */
bool tutti_simd_cpu_avx2(void);
bool tutti_simd_cpu_avx512(void);
bool tutti_simd_cpu_neon(void);

#endif
