/* Run-time choice of the SIMD path, and the scalar path: activation
 * quantizers and integer dot products of every supported weight type with
 * its vec_dot type (see vecdot.h for the pairing).
 *
 * The scalar kernels state the arithmetic every SIMD kernel must reproduce:
 * per block an exact integer sum of weight quant x activation quant, then
 * one float multiply by the two scales (llama.cpp's ggml_vec_dot_*_ref
 * semantics).  SIMD kernels compute the same integer sums, so they differ
 * from these only in the order of the float accumulation. */
#include "quant/vecdot.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/simd_common.h"
#include "util/error.h"

float tutti_simd_f16_table[65536];
float tutti_simd_e8m0_table[256];

const int8_t tutti_simd_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ---- activation quantizers ------------------------------------------------ */

/* Q8_0 / Q8_1 activations as ggml's SIMD quantize_row_q8_0 / q8_1 (what
 * llama.cpp runs on x86 and ARM; its _ref differs in the last bit): per
 * block of 32, d = amax / 127 stored as half, q = round-half-even(x * 127 /
 * amax); Q8_1 adds s = d * sum(q) as half. */
static void quantize_q8_0_1(const float *x, uint8_t *b, int64_t n, bool with_sum) {
    const size_t bs = with_sum ? SIMD_Q8_1_BYTES : SIMD_Q8_0_BYTES;
    const int off = with_sum ? 4 : 2;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += bs) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int q = (int)nearbyintf(x[j] * id);
            b[off + j] = (uint8_t)(int8_t)q;
            sum += q;
        }
        const uint16_t hd = tutti_f32_to_fp16(d);
        memcpy(b, &hd, 2);
        if (with_sum) {
            const uint16_t hs = tutti_f32_to_fp16((float)sum * d);
            memcpy(b + 2, &hs, 2);
        }
    }
}

void tutti_quantize_row_q8_0_act(const float *x, void *vy, int64_t n) { quantize_q8_0_1(x, vy, n, false); }
void tutti_quantize_row_q8_1(const float *x, void *vy, int64_t n) { quantize_q8_0_1(x, vy, n, true); }

static void from_float_f32(const float *x, void *vy, int64_t n) { memcpy(vy, x, sizeof(float) * (size_t)n); }
static void from_float_f16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy; /* activation buffers are allocated by us: aligned */
    for (int64_t i = 0; i < n; i++) y[i] = tutti_f32_to_fp16(x[i]);
}
static void from_float_bf16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = tutti_f32_to_bf16(x[i]);
}

/* ---- scalar dot products ----------------------------------------------------
 * w: weight blocks (byte pointer, packed); x: activation blocks. */

static void vd_f32(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *a = w;
    const float *b = vx;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += simd_rd_f32(a + 4 * (i + k)) * b[i + k];
    float t = 0;
    for (; i < n; i++) t += simd_rd_f32(a + 4 * i) * b[i];
    *s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t;
}

static void vd_f16(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *a = w;
    const uint16_t *b = vx;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += simd_rd_half(a + 2 * (i + k)) * tutti_simd_f16_table[b[i + k]];
    float t = 0;
    for (; i < n; i++) t += simd_rd_half(a + 2 * i) * tutti_simd_f16_table[b[i]];
    *s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t;
}

static void vd_bf16(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *a = w;
    const uint16_t *b = vx;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += tutti_bf16_to_f32(simd_rd_u16(a + 2 * (i + k))) * tutti_bf16_to_f32(b[i + k]);
    float t = 0;
    for (; i < n; i++) t += tutti_bf16_to_f32(simd_rd_u16(a + 2 * i)) * tutti_bf16_to_f32(b[i]);
    *s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t;
}

/* Element j (0..31) of a 4-bit legacy block: byte j%16, low nibble for
 * j < 16, high nibble otherwise. */
static inline int nib(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

static void vd_q4_0(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++, b += 18, y += SIMD_Q8_0_BYTES) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += (nib(b + 2, j) - 8) * (int8_t)y[2 + j];
        sum += (float)isum * (simd_rd_half(b) * simd_rd_half(y));
    }
    *s = sum;
}

static void vd_q4_1(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++, b += 20, y += SIMD_Q8_1_BYTES) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += nib(b + 4, j) * (int8_t)y[4 + j];
        sum += (float)isum * (simd_rd_half(b) * simd_rd_half(y)) + simd_rd_half(b + 2) * simd_rd_half(y + 2);
    }
    *s = sum;
}

static void vd_q5_0(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++, b += 22, y += SIMD_Q8_0_BYTES) {
        const uint32_t qh = simd_rd_u32(b + 2);
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += ((nib(b + 6, j) | (int)(((qh >> j) & 1) << 4)) - 16) * (int8_t)y[2 + j];
        sum += (float)isum * (simd_rd_half(b) * simd_rd_half(y));
    }
    *s = sum;
}

static void vd_q5_1(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++, b += 24, y += SIMD_Q8_1_BYTES) {
        const uint32_t qh = simd_rd_u32(b + 4);
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += (nib(b + 8, j) | (int)(((qh >> j) & 1) << 4)) * (int8_t)y[4 + j];
        sum += (float)isum * (simd_rd_half(b) * simd_rd_half(y)) + simd_rd_half(b + 2) * simd_rd_half(y + 2);
    }
    *s = sum;
}

/* In the order of llama.cpp's x86 kernels (ggml_vec_dot_q8_0_q8_0 and
 * llamafile's tinyBLAS_Q0_AVX, AVX2 and AVX-512 builds alike) and of our
 * AVX2/AVX-512 q8_0 kernel: eight float lanes, lane k taking the exact
 * integer sum of elements 4k..4k+3 of each block through
 * acc[k] = fma(d_w * d_x, isum_k, acc[k]), lanes added as
 * ((0+4) + (2+6)) + ((1+5) + (3+7)).  This is bit-identical to llama.cpp
 * (checked on every matmul of TinyStories-656K-Q8_0 against the oracle's
 * tensors); a per-block float sum is not, and one last-bit difference can
 * flip a later 8-bit activation rounding (0.18 in log-softmax on p3). */
static void vd_q8_0(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / 32; i++, b += 34, y += SIMD_Q8_0_BYTES)
        simd_lanes8_acc(acc, simd_rd_half(b) * simd_rd_half(y), (const int8_t *)(b + 2), (const int8_t *)(y + 2));
    *s = simd_lanes8_sum(acc);
}

static void vd_iq4_nl(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++, b += 18, y += SIMD_Q8_0_BYTES) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += tutti_simd_iq4nl_values[nib(b + 2, j)] * (int8_t)y[2 + j];
        sum += (float)isum * (simd_rd_half(b) * simd_rd_half(y));
    }
    *s = sum;
}

/* Q8_K activation block fields. */
static inline float q8k_d(const uint8_t *y) { return simd_rd_f32(y); }
static inline const int8_t *q8k_qs(const uint8_t *y) { return (const int8_t *)(y + 4); }
static inline int q8k_bsum(const uint8_t *y, int j) { return (int16_t)simd_rd_u16(y + 260 + 2 * j); }

static void vd_q2_k(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++, b += 84, y += SIMD_Q8_K_BYTES) {
        const uint8_t *sc = b, *qs = b + 16;
        const int8_t *x = q8k_qs(y);
        int summ = 0, isum = 0;
        for (int j = 0; j < 16; j++) summ += (sc[j] >> 4) * q8k_bsum(y, j);
        for (int e0 = 0; e0 < 256; e0 += 16) {
            int t = 0;
            for (int e = e0; e < e0 + 16; e++) {
                const int h = e / 128, sh = (e % 128) / 32, l = e % 32;
                t += ((qs[32 * h + l] >> (2 * sh)) & 3) * x[e];
            }
            isum += (sc[e0 / 16] & 15) * t;
        }
        const float dy = q8k_d(y);
        sum += dy * simd_rd_half(b + 80) * (float)isum - dy * simd_rd_half(b + 82) * (float)summ;
    }
    *s = sum;
}

static void vd_q3_k(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++, b += 110, y += SIMD_Q8_K_BYTES) {
        const uint8_t *hm = b, *qs = b + 32;
        int8_t sc[16];
        simd_q3k_scales(b + 96, sc);
        const int8_t *x = q8k_qs(y);
        int isum = 0;
        for (int e0 = 0; e0 < 256; e0 += 16) {
            int t = 0;
            for (int e = e0; e < e0 + 16; e++) {
                const int h = e / 128, sh = (e % 128) / 32, l = e % 32;
                const int q = (qs[32 * h + l] >> (2 * sh)) & 3;
                t += (q - ((hm[l] >> (4 * h + sh)) & 1 ? 0 : 4)) * x[e];
            }
            isum += sc[e0 / 16] * t;
        }
        sum += q8k_d(y) * simd_rd_half(b + 108) * (float)isum;
    }
    *s = sum;
}

static void vd_q45_k(int64_t n, float *s, const void *w, const void *vx, bool five) {
    const size_t bs = five ? 176 : 144;
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++, b += bs, y += SIMD_Q8_K_BYTES) {
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = five ? b + 48 : b + 16;
        const int8_t *x = q8k_qs(y);
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            simd_k4_scale_min(scales, j, &sc, &m);
            summ += m * (q8k_bsum(y, 2 * j) + q8k_bsum(y, 2 * j + 1));
            const int c = j / 2, hi = j & 1;
            int t = 0;
            for (int l = 0; l < 32; l++) {
                int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
                if (five) q |= ((qh[l] >> j) & 1) << 4;
                t += q * x[32 * j + l];
            }
            isum += sc * t;
        }
        const float dy = q8k_d(y);
        sum += dy * simd_rd_half(b) * (float)isum - dy * simd_rd_half(b + 2) * (float)summ;
    }
    *s = sum;
}
static void vd_q4_k(int64_t n, float *s, const void *w, const void *vx) { vd_q45_k(n, s, w, vx, false); }
static void vd_q5_k(int64_t n, float *s, const void *w, const void *vx) { vd_q45_k(n, s, w, vx, true); }

static void vd_q6_k(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++, b += 210, y += SIMD_Q8_K_BYTES) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const int8_t *x = q8k_qs(y);
        int isum = 0;
        for (int e0 = 0; e0 < 256; e0 += 16) {
            int t = 0;
            for (int e = e0; e < e0 + 16; e++) {
                const int h = e / 128, g = (e % 128) / 32, l = e % 32;
                const uint8_t lb = ql[64 * h + l + 32 * (g & 1)];
                const int lo = (g >> 1) ? (lb >> 4) : (lb & 15);
                const int hi2 = (qh[32 * h + l] >> (2 * g)) & 3;
                t += ((lo | (hi2 << 4)) - 32) * x[e];
            }
            isum += sc[e0 / 16] * t;
        }
        sum += q8k_d(y) * simd_rd_half(b + 208) * (float)isum;
    }
    *s = sum;
}

static void vd_iq4_xs(int64_t n, float *s, const void *w, const void *vx) {
    const uint8_t *b = w, *y = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / 256; i++, b += 136, y += SIMD_Q8_K_BYTES) {
        const uint16_t sh = simd_rd_u16(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8;
        const int8_t *x = q8k_qs(y);
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            int t = 0;
            for (int j = 0; j < 32; j++) t += tutti_simd_iq4nl_values[nib(qs + 16 * ib, j)] * x[32 * ib + j];
            isum += (ls - 32) * t;
        }
        sum += q8k_d(y) * simd_rd_half(b) * (float)isum;
    }
    *s = sum;
}

/* ---- generic tile product ---------------------------------------------------- */

void tutti_simd_gemm_from_vec_dot(tutti_vec_dot_fn vd, int64_t n, const void *w, size_t ldw, int nr, const void *vx,
                                  size_t ldx, int nc, float *s, size_t lds) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            vd(n, s + (size_t)c * lds + r, (const char *)w + (size_t)r * ldw, (const char *)vx + (size_t)c * ldx);
}

TUTTI_GEMM_FROM_VEC_DOT(f32)
TUTTI_GEMM_FROM_VEC_DOT(f16)
TUTTI_GEMM_FROM_VEC_DOT(bf16)
TUTTI_GEMM_FROM_VEC_DOT(q4_0)
TUTTI_GEMM_FROM_VEC_DOT(q4_1)
TUTTI_GEMM_FROM_VEC_DOT(q5_0)
TUTTI_GEMM_FROM_VEC_DOT(q5_1)
TUTTI_GEMM_FROM_VEC_DOT(q8_0)
TUTTI_GEMM_FROM_VEC_DOT(iq4_nl)
TUTTI_GEMM_FROM_VEC_DOT(q2_k)
TUTTI_GEMM_FROM_VEC_DOT(q3_k)
TUTTI_GEMM_FROM_VEC_DOT(q4_k)
TUTTI_GEMM_FROM_VEC_DOT(q5_k)
TUTTI_GEMM_FROM_VEC_DOT(q6_k)
TUTTI_GEMM_FROM_VEC_DOT(iq4_xs)

/* ---- dispatch ---------------------------------------------------------------- */

static tutti_vec_dot_traits g_tab[TUTTI_SIMD_COUNT][TUTTI_TYPE_ALL_COUNT];
static bool g_avail[TUTTI_SIMD_COUNT];
static pthread_once_t g_tab_once = PTHREAD_ONCE_INIT;

static void fill_scalar(tutti_vec_dot_traits *t) {
#define E(T, VT, FF, NAME) t[T] = (tutti_vec_dot_traits){VT, FF, vd_##NAME, gemm_##NAME, TUTTI_SIMD_SCALAR}
    E(TUTTI_TYPE_F32, TUTTI_TYPE_F32, from_float_f32, f32);
    E(TUTTI_TYPE_F16, TUTTI_TYPE_F16, from_float_f16, f16);
    E(TUTTI_TYPE_BF16, TUTTI_TYPE_BF16, from_float_bf16, bf16);
    E(TUTTI_TYPE_Q4_0, TUTTI_TYPE_Q8_0, tutti_quantize_row_q8_0_act, q4_0);
    E(TUTTI_TYPE_Q4_1, TUTTI_TYPE_Q8_1, tutti_quantize_row_q8_1, q4_1);
    E(TUTTI_TYPE_Q5_0, TUTTI_TYPE_Q8_0, tutti_quantize_row_q8_0_act, q5_0);
    E(TUTTI_TYPE_Q5_1, TUTTI_TYPE_Q8_1, tutti_quantize_row_q8_1, q5_1);
    E(TUTTI_TYPE_Q8_0, TUTTI_TYPE_Q8_0, tutti_quantize_row_q8_0_act, q8_0);
    E(TUTTI_TYPE_IQ4_NL, TUTTI_TYPE_Q8_0, tutti_quantize_row_q8_0_act, iq4_nl);
    E(TUTTI_TYPE_Q2_K, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, q2_k);
    E(TUTTI_TYPE_Q3_K, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, q3_k);
    E(TUTTI_TYPE_Q4_K, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, q4_k);
    E(TUTTI_TYPE_Q5_K, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, q5_k);
    E(TUTTI_TYPE_Q6_K, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, q6_k);
    E(TUTTI_TYPE_IQ4_XS, TUTTI_TYPE_Q8_K, tutti_quantize_row_q8_K_ref, iq4_xs);
#undef E
}

static void build_tables(void) {
    for (uint32_t h = 0; h < 65536; h++) tutti_simd_f16_table[h] = tutti_fp16_to_f32((uint16_t)h);
    for (int e = 0; e < 256; e++) tutti_simd_e8m0_table[e] = tutti_e8m0_half((uint8_t)e);
    fill_scalar(g_tab[TUTTI_SIMD_SCALAR]);
    tutti_simd_fill_scalar_iq(g_tab[TUTTI_SIMD_SCALAR]);
    g_avail[TUTTI_SIMD_SCALAR] = true;
    g_avail[TUTTI_SIMD_AVX2] = tutti_simd_cpu_avx2();
    g_avail[TUTTI_SIMD_AVX512] = g_avail[TUTTI_SIMD_AVX2] && tutti_simd_cpu_avx512();
    g_avail[TUTTI_SIMD_NEON] = tutti_simd_cpu_neon();
    memcpy(g_tab[TUTTI_SIMD_AVX2], g_tab[TUTTI_SIMD_SCALAR], sizeof g_tab[0]);
    if (g_avail[TUTTI_SIMD_AVX2]) tutti_simd_fill_avx2(g_tab[TUTTI_SIMD_AVX2]);
    memcpy(g_tab[TUTTI_SIMD_AVX512], g_tab[TUTTI_SIMD_AVX2], sizeof g_tab[0]);
    if (g_avail[TUTTI_SIMD_AVX512]) tutti_simd_fill_avx512(g_tab[TUTTI_SIMD_AVX512]);
    memcpy(g_tab[TUTTI_SIMD_NEON], g_tab[TUTTI_SIMD_SCALAR], sizeof g_tab[0]);
    if (g_avail[TUTTI_SIMD_NEON]) tutti_simd_fill_neon(g_tab[TUTTI_SIMD_NEON]);
}

static const char *const g_names[TUTTI_SIMD_COUNT] = {"scalar", "avx2", "avx512", "neon"};

const char *tutti_simd_name(tutti_simd path) { return (unsigned)path < TUTTI_SIMD_COUNT ? g_names[path] : "?"; }

int tutti_simd_parse(const char *name) {
    for (int i = 0; i < TUTTI_SIMD_COUNT; i++)
        if (name && strcmp(name, g_names[i]) == 0) return i;
    return -1;
}

bool tutti_simd_available(tutti_simd path) {
    pthread_once(&g_tab_once, build_tables);
    return (unsigned)path < TUTTI_SIMD_COUNT && g_avail[path];
}

tutti_simd tutti_simd_best(void) {
    pthread_once(&g_tab_once, build_tables);
    if (g_avail[TUTTI_SIMD_AVX512]) return TUTTI_SIMD_AVX512;
    if (g_avail[TUTTI_SIMD_AVX2]) return TUTTI_SIMD_AVX2;
    if (g_avail[TUTTI_SIMD_NEON]) return TUTTI_SIMD_NEON;
    return TUTTI_SIMD_SCALAR;
}

static tutti_simd g_current = TUTTI_SIMD_SCALAR;
static bool g_init_ok;
static char g_init_err[256];
static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;

static void choose_path(void) {
    const char *env = getenv("TUTTI_KERNELS");
    if (!env || !*env) {
        g_current = tutti_simd_best();
        g_init_ok = true;
        return;
    }
    const int p = tutti_simd_parse(env);
    if (p >= 0 && tutti_simd_available((tutti_simd)p)) {
        g_current = (tutti_simd)p;
        g_init_ok = true;
        return;
    }
    char avail[64] = "";
    for (int i = 0; i < TUTTI_SIMD_COUNT; i++) {
        if (!tutti_simd_available((tutti_simd)i)) continue;
        if (*avail) strcat(avail, "|");
        strcat(avail, g_names[i]);
    }
    snprintf(g_init_err, sizeof g_init_err,
             "environment variable TUTTI_KERNELS=%.40s: %s; this CPU and build support %s "
             "(unset it to pick the best)",
             env, p < 0 ? "unknown kernel path" : "this CPU or build cannot run that path", avail);
    g_current = TUTTI_SIMD_SCALAR;
    g_init_ok = false;
}

int tutti_simd_init(void) {
    pthread_once(&g_init_once, choose_path);
    if (!g_init_ok) return tutti_set_error("%s", g_init_err);
    return TUTTI_OK;
}

tutti_simd tutti_simd_current(void) {
    pthread_once(&g_init_once, choose_path);
    return g_current;
}

const tutti_vec_dot_traits *tutti_vec_dot_get_path(tutti_simd path, int wtype) {
    if (!tutti_simd_available(path) || wtype < 0 || wtype >= TUTTI_TYPE_ALL_COUNT) return NULL;
    const tutti_vec_dot_traits *t = &g_tab[path][wtype];
    return t->gemm ? t : NULL;
}

const tutti_vec_dot_traits *tutti_vec_dot_get(int wtype) { return tutti_vec_dot_get_path(tutti_simd_current(), wtype); }
