/* Scalar dot products of MXFP4 and the i-quants with their activation
 * blocks: the reference each SIMD kernel of simd_x86_kernels.inc reproduces
 * bit for bit.
 *
 * Every kernel here forms exact integer sums of weight codes x activation
 * quants and then does its float arithmetic in one fixed order; the SIMD
 * kernels compute the same integer sums (in any order: integers are exact)
 * and then the same float operations on them, so all paths return the same
 * bits.  The integer sums and scale factors are llama.cpp's
 * (ggml_vec_dot_*_generic), so results stay within activation rounding of
 * llama.cpp's. */
#include "quant/simd_common.h"

/* Keep a*b + c as two roundings (the fma of simd_lanes8_acc is explicit). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- MXFP4 with Q8_0 activations ----------------------------------------------
 * In the lane order of vd_q8_0 (simd_lanes8_acc), which is the order of the
 * x86 legacy kernels' 8 float lanes. */
static void vd_mxfp4(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / 32; i++, b += 17, y += SIMD_Q8_0_BYTES) {
        int8_t v[32];
        for (int j = 0; j < 16; j++) {
            v[j] = tutti_mxfp4_values[b[1 + j] & 15];
            v[j + 16] = tutti_mxfp4_values[b[1 + j] >> 4];
        }
        simd_lanes8_acc(acc, tutti_simd_e8m0_table[b[0]] * simd_rd_half(y), v, (const int8_t *)(y + 2));
    }
    *s = simd_lanes8_sum(acc);
}

TUTTI_GEMM_FROM_VEC_DOT(mxfp4)

void tutti_simd_fill_scalar_iq(tutti_vec_dot_traits *t) {
#define E(T, VT, FF, NAME) t[T] = (tutti_vec_dot_traits){VT, FF, vd_##NAME, gemm_##NAME, TUTTI_SIMD_SCALAR}
    E(TUTTI_TYPE_MXFP4, TUTTI_TYPE_Q8_0, tutti_quantize_row_q8_0_act, mxfp4);
#undef E
}
