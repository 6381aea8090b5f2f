/* Reference dequantizers: one row of n elements of a ggml block type -> float32.
 *
 * Bit-exact with ggml's dequantize_row_* (ggml/src/ggml-quants.c) and with
 * gguf-py's gguf.quants.dequantize: every product is formed in the same order
 * with the same float32 operands (e.g. Q4_K computes (d*sc)*q - dmin*m, not
 * d*(sc*q) - ...), because rounding differs otherwise.
 *
 * Block layouts are those of ggml-common.h.  Blocks are packed back to back
 * (18, 22, 110, ... bytes) and GGUF only aligns a tensor's start to 32 bytes,
 * so fields are read byte by byte, never through a cast struct pointer.
 * Multi-byte fields are little-endian.  QK_K = 256 for the K and IQ4_XS
 * super-blocks.
 *
 * Preconditions (checked by tutti_dequantize_row in quant.c, not here):
 * n >= 0 and n is a multiple of the type's block size; src holds
 * tutti_row_size(type, n) bytes; dst holds n floats. */
#include "quant/quant_impl.h"

/* Keep a*b + c as two roundings: an FMA would change the last bit.  GCC
 * already does this in ISO C mode (-std=c11); clang needs the pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <string.h>

#include "util/fp16.h"

#define QK 32   /* elements per block of the legacy types, IQ4_NL and MXFP4 */
#define QKK 256 /* elements per K / IQ4_XS super-block */

#define rd_u16 tutti_rd_u16
#define rd_u32 tutti_rd_u32
#define rd_half tutti_rd_half

/* The 16 non-linear levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl). */
static const int8_t k_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ---- plain floats -------------------------------------------------------- */

void tutti_to_float_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, sizeof(float) * (size_t)n); }

void tutti_to_float_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = rd_half(p + 2 * i);
}

void tutti_to_float_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = tutti_bf16_to_f32(rd_u16(p + 2 * i));
}

/* ---- legacy 32-element blocks --------------------------------------------
 * In all of them byte j of qs holds element j in its low nibble and element
 * j + 16 in its high nibble. */

/* Q4_0, 18 bytes: f16 d | u8 qs[16].  x = (q - 8) * d, q in 0..15. */
void tutti_to_float_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        const float d = rd_half(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)((qs[j] & 0x0F) - 8) * d;
            dst[j + QK / 2] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1, 20 bytes: f16 d | f16 m | u8 qs[16].  x = q * d + m. */
void tutti_to_float_q4_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 20, dst += QK) {
        const float d = rd_half(b), m = rd_half(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)(qs[j] & 0x0F) * d + m;
            dst[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0, 22 bytes: f16 d | u32 qh (LE; bit j = 5th bit of element j) |
 * u8 qs[16].  x = (q - 16) * d, q in 0..31. */
void tutti_to_float_q5_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 22, dst += QK) {
        const float d = rd_half(b);
        const uint32_t qh = rd_u32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < QK / 2; j++) {
            const int lo = (qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            const int hi = (qs[j] >> 4) | (int)(((qh >> (j + QK / 2)) & 1u) << 4);
            dst[j] = (float)(lo - 16) * d;
            dst[j + QK / 2] = (float)(hi - 16) * d;
        }
    }
}

/* Q5_1, 24 bytes: f16 d | f16 m | u32 qh | u8 qs[16].  x = q * d + m. */
void tutti_to_float_q5_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 24, dst += QK) {
        const float d = rd_half(b), m = rd_half(b + 2);
        const uint32_t qh = rd_u32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < QK / 2; j++) {
            const int lo = (qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            const int hi = (qs[j] >> 4) | (int)(((qh >> (j + QK / 2)) & 1u) << 4);
            dst[j] = (float)lo * d + m;
            dst[j + QK / 2] = (float)hi * d + m;
        }
    }
}

/* Q8_0, 34 bytes: f16 d | i8 qs[32].  x = q * d. */
void tutti_to_float_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 34, dst += QK) {
        const float d = rd_half(b);
        for (int j = 0; j < QK; j++) dst[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* IQ4_NL, 18 bytes: f16 d | u8 qs[16] (nibbles as Q4_0).
 * x = d * k_iq4nl_values[q]. */
void tutti_to_float_iq4_nl(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        const float d = rd_half(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * (float)k_iq4nl_values[qs[j] & 0x0F];
            dst[j + QK / 2] = d * (float)k_iq4nl_values[qs[j] >> 4];
        }
    }
}

/* MXFP4, 17 bytes: u8 e (E8M0 scale) | u8 qs[16] (E2M1 codes, nibbles as
 * Q4_0).  x = code value * 2^(e - 128) (quant_impl.h: values doubled, scale
 * halved; both factors exact, so is their product unless it underflows). */
const int8_t tutti_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void tutti_to_float_mxfp4(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 17, dst += QK) {
        const float d = tutti_e8m0_half(b[0]);
        const uint8_t *qs = b + 1;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)tutti_mxfp4_values[qs[j] & 0x0F] * d;
            dst[j + QK / 2] = (float)tutti_mxfp4_values[qs[j] >> 4] * d;
        }
    }
}

/* ---- K-quants: 256-element super-blocks ---------------------------------
 * The 2- and 3-bit types share one packing of the low bits: the super-block
 * is two halves of 128; in half h, byte l (0..31) of qs[32h..32h+31] holds
 * elements 128h + 32s + l in bits 2s..2s+1 (s = 0..3).  Sub-block scales
 * cover 16 consecutive elements, so element e uses scale e / 16. */

/* Q2_K, 84 bytes: u8 scales[16] (low nibble: scale, high nibble: min) |
 * u8 qs[64] (2-bit q) | f16 d | f16 dmin.
 * x = (d * sc) * q - (dmin * m). */
void tutti_to_float_q2_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 84, dst += QKK) {
        const uint8_t *scales = b, *qs = b + 16;
        const float d = rd_half(b + 80), dmin = rd_half(b + 82);
        for (int e = 0; e < QKK; e++) {
            const int h = e / 128, s = (e % 128) / 32, l = e % 32;
            const uint8_t sc = scales[e / 16];
            const float dl = d * (float)(sc & 0x0F), ml = dmin * (float)(sc >> 4);
            const int q = (qs[32 * h + l] >> (2 * s)) & 3;
            dst[e] = dl * (float)q - ml;
        }
    }
}

/* Q3_K, 110 bytes: u8 hmask[32] | u8 qs[64] (low 2 bits, packed as Q2_K) |
 * u8 scales[12] (16 six-bit scales) | f16 d.
 * The 3rd bit of element 128h + 32s + l is bit (4h + s) of hmask[l]; when it
 * is CLEAR the value is q - 4 (q = low bits), else q: signed range -4..3.
 * Scale j (biased by 32): low 4 bits are the low nibble of scales[j] (j < 8)
 * or the high nibble of scales[j - 8]; high 2 bits are bits 2*(j/4).. of
 * scales[8 + j%4].  x = (d * (scale - 32)) * value. */
void tutti_to_float_q3_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 110, dst += QKK) {
        const uint8_t *hmask = b, *qs = b + 32, *sb = b + 96;
        const float d = rd_half(b + 108);
        int scale[16];
        for (int j = 0; j < 16; j++) {
            const int lo = j < 8 ? (sb[j] & 0x0F) : (sb[j - 8] >> 4);
            const int hi = (sb[8 + j % 4] >> (2 * (j / 4))) & 3;
            scale[j] = (lo | (hi << 4)) - 32;
        }
        for (int e = 0; e < QKK; e++) {
            const int h = e / 128, s = (e % 128) / 32, l = e % 32;
            const int q = (qs[32 * h + l] >> (2 * s)) & 3;
            const int v = q - ((hmask[l] >> (4 * h + s)) & 1 ? 0 : 4);
            const float dl = d * (float)scale[e / 16];
            dst[e] = dl * (float)v;
        }
    }
}

/* 6-bit scale and min of sub-block j (0..7) of Q4_K / Q5_K from their
 * 12-byte `scales`: j < 4: low 6 bits of bytes j and j + 4; j >= 4: a nibble
 * of byte j + 4 plus the top 2 bits of bytes j - 4 (scale) and j (min). */
static inline void k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K, 144 bytes: f16 d | f16 dmin | u8 scales[12] (8 x 6-bit scale and
 * min) | u8 qs[128].  Four chunks of 64: chunk c uses qs[32c..32c+31], low
 * nibbles = elements 64c + l with sub-block 2c, high nibbles = elements
 * 64c + 32 + l with sub-block 2c + 1.  x = (d * sc) * q - (dmin * m). */
void tutti_to_float_q4_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 144, dst += QKK) {
        const float d = rd_half(b), dmin = rd_half(b + 2);
        const uint8_t *scales = b + 4, *qs = b + 16;
        for (int c = 0; c < 4; c++) {
            int sc, m;
            k4_scale_min(scales, 2 * c, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            k4_scale_min(scales, 2 * c + 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const uint8_t *q = qs + 32 * c;
            float *y = dst + 64 * c;
            for (int l = 0; l < 32; l++) {
                y[l] = d1 * (float)(q[l] & 0x0F) - m1;
                y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
            }
        }
    }
}

/* Q5_K, 176 bytes: f16 d | f16 dmin | u8 scales[12] (as Q4_K) | u8 qh[32] |
 * u8 qs[128] (low nibbles, as Q4_K).  The 5th bit of element 64c + l is bit
 * 2c of qh[l]; of element 64c + 32 + l, bit 2c + 1.
 * x = (d * sc) * q - (dmin * m), q in 0..31. */
void tutti_to_float_q5_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 176, dst += QKK) {
        const float d = rd_half(b), dmin = rd_half(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
        for (int c = 0; c < 4; c++) {
            int sc, m;
            k4_scale_min(scales, 2 * c, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            k4_scale_min(scales, 2 * c + 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const uint8_t *q = qs + 32 * c;
            float *y = dst + 64 * c;
            for (int l = 0; l < 32; l++) {
                const int lo = (q[l] & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4);
                const int hi = (q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
                y[l] = d1 * (float)lo - m1;
                y[l + 32] = d2 * (float)hi - m2;
            }
        }
    }
}

/* Q6_K, 210 bytes: u8 ql[128] (low 4 bits) | u8 qh[64] (high 2 bits) |
 * i8 scales[16] | f16 d.  Two halves of 128; in half h, with
 * ql' = ql + 64h and qh' = qh + 32h, for l = 0..31:
 *   element 128h +      l: low nibble of ql'[l],      bits 0-1 of qh'[l]
 *   element 128h + 32 + l: low nibble of ql'[l + 32], bits 2-3
 *   element 128h + 64 + l: high nibble of ql'[l],     bits 4-5
 *   element 128h + 96 + l: high nibble of ql'[l + 32], bits 6-7
 * Element e uses scales[e / 16].  x = (d * scale) * (q - 32). */
void tutti_to_float_q6_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 210, dst += QKK) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        const float d = rd_half(b + 208);
        for (int e = 0; e < QKK; e++) {
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            const uint8_t lb = ql[64 * h + l + 32 * (g & 1)];
            const int lo = (g >> 1) ? (lb >> 4) : (lb & 0x0F);
            const int hi = (qh[32 * h + l] >> (2 * g)) & 3;
            const int q = (lo | (hi << 4)) - 32;
            dst[e] = d * (float)scales[e / 16] * (float)q;
        }
    }
}

/* IQ4_XS, 136 bytes: f16 d | u16 scales_h (LE) | u8 scales_l[4] |
 * u8 qs[128].  Eight sub-blocks of 32; sub-block ib has the 6-bit scale
 * ls = nibble (ib % 2) of scales_l[ib / 2] | bits 2ib..2ib+1 of scales_h << 4,
 * and its 32 elements are packed as one IQ4_NL block in qs[16ib..16ib+15].
 * x = (d * (ls - 32)) * k_iq4nl_values[q]. */
void tutti_to_float_iq4_xs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 136, dst += QKK) {
        const float d = rd_half(b);
        const uint16_t scales_h = rd_u16(b + 2);
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        for (int ib = 0; ib < QKK / 32; ib++) {
            const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *q = qs + 16 * ib;
            float *y = dst + 32 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)k_iq4nl_values[q[j] & 0x0F];
                y[j + 16] = dl * (float)k_iq4nl_values[q[j] >> 4];
            }
        }
    }
}
