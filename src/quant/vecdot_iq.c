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

/* ---- the i-quants with Q8_K activations ------------------------------------------
 * A super-block is decoded (iq_block) into 256 int8 values v in element
 * order, 16 integer scales sc (one per 16 elements, sc = 2s + 1) and, for
 * IQ1_S / IQ1_M, the sign dsign (+-1) of the delta of each group of 8:
 *   IQ2_XXS, IQ2_XS, IQ2_S: v = grid * sign, |v| <= 43;  IQ3_XXS: <= 62;
 *   IQ3_S: <= 15;  IQ1_S, IQ1_M: v = grid in -1, 0, 1.
 * The integer sums are ggml_vec_dot_iq*_q8_K's, and so is the float order,
 * that of llama.cpp's AVX2 kernels (the ones it runs on x86-64): 8 int32
 * lanes per super-block, lane k the exact sum of sc * v * q over elements
 * 4k..4k+3 of each of the 8 sub-blocks of 32, are added to 8 float lanes by
 * acc[k] = fma(d_w * d_x, lane[k], acc[k]), and the row's result is the
 * lanes' sum in simd_lanes8_sum's order (hsum_float_8) times C = 1/8 (IQ2),
 * 1/4 (IQ3_XXS) or 1 (IQ3_S).  IQ1's delta part, sum of sc * dsign * q
 * (times 1/8), goes alongside: IQ1_M in 8 more float lanes, IQ1_S as one
 * integer per super-block (its sub-blocks share one delta sign) into one
 * float, fma(d, sum, acc1); the result is the grid lanes' sum + 1/8 times
 * the delta part's.  Bit-identical to llama.cpp's x86 dot product, which
 * matters: a last-bit difference can flip a later 8-bit activation
 * rounding (0.03-0.04 in log-softmax on tests/data/quant/models). */
typedef struct iq_block {
    int8_t v[256];
    int sc[16];
    int8_t dsign[32];
} iq_block;
typedef void (*iq_decode_fn)(const uint8_t *b, iq_block *k);

static inline void put_signed(int8_t *v, uint64_t e, uint8_t signs) {
    for (int j = 0; j < 8; j++) {
        const int g = (int)((e >> (8 * j)) & 0xFF);
        v[j] = (int8_t)(signs >> j & 1 ? -g : g);
    }
}

static void dec_iq2_xxs(const uint8_t *b, iq_block *k) {
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = tutti_rd_u32(q + 4);
        k->sc[2 * ib] = k->sc[2 * ib + 1] = 2 * (int)(aux >> 28) + 1;
        for (int l = 0; l < 4; l++)
            put_signed(k->v + 32 * ib + 8 * l, tutti_iq2xxs_grid[q[l]], tutti_iq_ksigns[(aux >> (7 * l)) & 127]);
    }
}

static void dec_iq2_xs(const uint8_t *b, iq_block *k) {
    for (int ib = 0; ib < 8; ib++) {
        k->sc[2 * ib] = 2 * (b[66 + ib] & 15) + 1;
        k->sc[2 * ib + 1] = 2 * (b[66 + ib] >> 4) + 1;
        for (int l = 0; l < 4; l++) {
            const uint16_t q = tutti_rd_u16(b + 2 + 8 * ib + 2 * l);
            put_signed(k->v + 32 * ib + 8 * l, tutti_iq2xs_grid[q & 511], tutti_iq_ksigns[q >> 9]);
        }
    }
}

static void dec_iq2_s(const uint8_t *b, iq_block *k) {
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        k->sc[2 * ib] = 2 * (scales[ib] & 15) + 1;
        k->sc[2 * ib + 1] = 2 * (scales[ib] >> 4) + 1;
        for (int l = 0; l < 4; l++) {
            const int idx = qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300);
            put_signed(k->v + 32 * ib + 8 * l, tutti_iq2s_grid[idx], signs[4 * ib + l]);
        }
    }
}

static void dec_iq3_xxs(const uint8_t *b, iq_block *k) {
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = tutti_rd_u32(b + 66 + 4 * ib);
        k->sc[2 * ib] = k->sc[2 * ib + 1] = 2 * (int)(aux >> 28) + 1;
        for (int l = 0; l < 4; l++) {
            const uint64_t e = tutti_iq3xxs_grid[q[2 * l]] | (uint64_t)tutti_iq3xxs_grid[q[2 * l + 1]] << 32;
            put_signed(k->v + 32 * ib + 8 * l, e, tutti_iq_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

static void dec_iq3_s(const uint8_t *b, iq_block *k) {
    const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
    for (int ib = 0; ib < 8; ib++) {
        k->sc[2 * ib] = k->sc[2 * ib + 1] = 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
        for (int l = 0; l < 4; l++) {
            const int i0 = qs[8 * ib + 2 * l] | ((qh[ib] >> (2 * l) & 1) << 8);
            const int i1 = qs[8 * ib + 2 * l + 1] | ((qh[ib] >> (2 * l + 1) & 1) << 8);
            const uint64_t e = tutti_iq3s_grid[i0] | (uint64_t)tutti_iq3s_grid[i1] << 32;
            put_signed(k->v + 32 * ib + 8 * l, e, signs[4 * ib + l]);
        }
    }
}

static inline void put_grid(int8_t *v, uint64_t e) {
    for (int j = 0; j < 8; j++) v[j] = (int8_t)((e >> (8 * j)) & 0xFF);
}

static void dec_iq1_s(const uint8_t *b, iq_block *k) {
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t qh = tutti_rd_u16(b + 34 + 2 * ib);
        k->sc[2 * ib] = k->sc[2 * ib + 1] = 2 * ((qh >> 12) & 7) + 1;
        for (int l = 0; l < 4; l++) {
            put_grid(k->v + 32 * ib + 8 * l, tutti_iq1s_grid[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)]);
            k->dsign[4 * ib + l] = qh & 0x8000 ? -1 : 1;
        }
    }
}

static void dec_iq1_m(const uint8_t *b, iq_block *k) {
    const uint8_t *qs = b, *qh = b + 32, *scw = b + 48;
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t w = tutti_rd_u16(scw + 2 * (ib / 2));
        k->sc[2 * ib] = 2 * ((w >> (6 * (ib % 2))) & 7) + 1;
        k->sc[2 * ib + 1] = 2 * ((w >> (6 * (ib % 2) + 3)) & 7) + 1;
        for (int l = 0; l < 4; l++) {
            const int nib = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
            put_grid(k->v + 32 * ib + 8 * l, tutti_iq1s_grid[qs[4 * ib + l] | ((nib & 7) << 8)]);
            k->dsign[4 * ib + l] = nib & 8 ? -1 : 1;
        }
    }
}

static void vd_iq(int type, iq_decode_fn dec, int64_t n, float *s, const void *w, const void *vx) {
    const size_t bs = tutti_type_get(type)->type_size;
    const bool iq1 = type == TUTTI_TYPE_IQ1_S || type == TUTTI_TYPE_IQ1_M;
    const uint8_t *b = w, *y = vx;
    float acc[8] = {0}, acc_d[8] = {0}, acc1 = 0;
    for (int64_t i = 0; i < n / 256; i++, b += bs, y += SIMD_Q8_K_BYTES) {
        iq_block k;
        dec(b, &k);
        const int8_t *q = (const int8_t *)(y + 4);
        int lane[8] = {0}, lane_d[8] = {0};
        for (int e = 0; e < 256; e++) {
            lane[(e % 32) / 4] += k.sc[e / 16] * k.v[e] * q[e];
            if (iq1) lane_d[(e % 32) / 4] += k.sc[e / 16] * k.dsign[e / 8] * q[e];
        }
        const float d = simd_iq_d(type, b) * simd_rd_f32(y);
        int sum_d = 0;
        for (int l = 0; l < 8; l++) {
            acc[l] = fmaf(d, (float)lane[l], acc[l]);
            if (type == TUTTI_TYPE_IQ1_M) acc_d[l] = fmaf(d, (float)lane_d[l], acc_d[l]);
            sum_d += lane_d[l];
        }
        if (type == TUTTI_TYPE_IQ1_S) acc1 = fmaf(d, (float)sum_d, acc1);
    }
    *s = simd_iq_finish(type, simd_lanes8_sum(acc), type == TUTTI_TYPE_IQ1_M ? simd_lanes8_sum(acc_d) : acc1);
}

#define IQ_KERNEL(NAME, TYPE)                                                   \
    static void vd_##NAME(int64_t n, float *s, const void *w, const void *vx) { \
        vd_iq(TYPE, dec_##NAME, n, s, w, vx);                                   \
    }                                                                           \
    TUTTI_GEMM_FROM_VEC_DOT(NAME)
IQ_KERNEL(iq2_xxs, TUTTI_TYPE_IQ2_XXS)
IQ_KERNEL(iq2_xs, TUTTI_TYPE_IQ2_XS)
IQ_KERNEL(iq2_s, TUTTI_TYPE_IQ2_S)
IQ_KERNEL(iq3_xxs, TUTTI_TYPE_IQ3_XXS)
IQ_KERNEL(iq3_s, TUTTI_TYPE_IQ3_S)
IQ_KERNEL(iq1_s, TUTTI_TYPE_IQ1_S)
IQ_KERNEL(iq1_m, TUTTI_TYPE_IQ1_M)

TUTTI_GEMM_FROM_VEC_DOT(mxfp4)

uint64_t tutti_simd_sign8[256];
uint64_t tutti_simd_ksign64[128];

void tutti_simd_fill_scalar_iq(tutti_vec_dot_traits *t) {
    for (int s = 0; s < 256; s++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)(s >> j & 1 ? 0xFF : 0x01) << (8 * j);
        tutti_simd_sign8[s] = v;
    }
    for (int i = 0; i < 128; i++) tutti_simd_ksign64[i] = tutti_simd_sign8[tutti_iq_ksigns[i]];
#define E(T, VT, FF, NAME) t[T] = (tutti_vec_dot_traits){VT, FF, vd_##NAME, gemm_##NAME, TUTTI_SIMD_SCALAR}
    E(TUTTI_TYPE_MXFP4, TUTTI_TYPE_Q8_0, tutti_quantize_row_q8_0_act, mxfp4);
    E(TUTTI_TYPE_IQ2_XXS, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq2_xxs);
    E(TUTTI_TYPE_IQ2_XS, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq2_xs);
    E(TUTTI_TYPE_IQ2_S, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq2_s);
    E(TUTTI_TYPE_IQ3_XXS, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq3_xxs);
    E(TUTTI_TYPE_IQ3_S, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq3_s);
    E(TUTTI_TYPE_IQ1_S, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq1_s);
    E(TUTTI_TYPE_IQ1_M, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq1_m);
#undef E
}
