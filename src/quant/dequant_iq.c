/* Reference dequantizers of the i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ1_S, IQ1_M (ggml-common.h's block_iq*; 256-element super-blocks
 * of eight 32-element sub-blocks).
 *
 * Each group of 8 (IQ3: 4) consecutive elements is one codebook entry
 * (quant_impl.h's grids) picked by an 8..11-bit index; the IQ2/IQ3 grids
 * hold magnitudes and a sign byte negates some of them, the IQ1 grid holds
 * -1/0/+1 shifted by +-1/8.  A sub-block (or half of one) has an odd scale
 * 2s + 1 (IQ2_XXS/XS/S and IQ3_XXS store s in 4 bits as 0.5 + s, which is
 * the same up to the constant factor below).
 *
 * Bit-exact with ggml's dequantize_row_iq* and gguf-py: the same float
 * operations in the same order, d * scale first (e.g. IQ2_XXS:
 * ((d * (0.5 + s)) * 0.25) * grid * sign).  Preconditions as in dequant.c. */
#include "quant/quant_impl.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QKK 256

/* Byte j of grid entry e. */
static inline int g8(uint64_t e, int j) { return (int)((e >> (8 * j)) & 0xFF); }
static inline float sign_of(uint8_t signs, int j) { return signs >> j & 1 ? -1.0f : 1.0f; }

/* 8 elements of an IQ2 grid entry, each times db and its sign. */
static inline void put8(float *y, float db, uint64_t e, uint8_t signs) {
    for (int j = 0; j < 8; j++) y[j] = db * (float)g8(e, j) * sign_of(signs, j);
}

/* IQ2_XXS, 66 bytes: f16 d | 8 x (u8 idx[4] | u32 aux).  aux: four 7-bit
 * ksigns indices (bits 7l..7l+6), scale s in bits 28..31.
 * x = d * (0.5 + s) * 0.25 * iq2xxs_grid[idx[l]][j] * sign. */
void tutti_to_float_iq2_xxs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 66) {
        const float d = tutti_rd_half(b);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const uint8_t *q = b + 2 + 8 * ib;
            const uint32_t aux = tutti_rd_u32(q + 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++)
                put8(dst + 8 * l, db, tutti_iq2xxs_grid[q[l]], tutti_iq_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

/* IQ2_XS, 74 bytes: f16 d | u16 qs[32] (9-bit grid index, 7-bit ksigns
 * index above it) | u8 scales[8] (sub-block ib: low nibble for its first 16
 * elements, high nibble for the rest).  x = d * (0.5 + s) * 0.25 * grid * sign. */
void tutti_to_float_iq2_xs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 74) {
        const float d = tutti_rd_half(b);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const uint8_t sc = b[66 + ib];
            const float db[2] = {d * (0.5f + (float)(sc & 15)) * 0.25f, d * (0.5f + (float)(sc >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint16_t q = tutti_rd_u16(b + 2 + 8 * ib + 2 * l);
                put8(dst + 8 * l, db[l / 2], tutti_iq2xs_grid[q & 511], tutti_iq_ksigns[q >> 9]);
            }
        }
    }
}

/* IQ2_S, 82 bytes: f16 d | u8 qs[32] (low 8 bits of the 10-bit grid
 * indices) | u8 signs[32] (one byte of 8 explicit signs per group) | u8
 * qh[8] (bits 2l..2l+1 of qh[ib]: index bits 8..9 of group l of sub-block
 * ib) | u8 scales[8] (as IQ2_XS). */
void tutti_to_float_iq2_s(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 82) {
        const float d = tutti_rd_half(b);
        const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const uint8_t sc = scales[ib];
            const float db[2] = {d * (0.5f + (float)(sc & 15)) * 0.25f, d * (0.5f + (float)(sc >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const int idx = qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300);
                put8(dst + 8 * l, db[l / 2], tutti_iq2s_grid[idx], signs[4 * ib + l]);
            }
        }
    }
}

/* IQ3_XXS, 98 bytes: f16 d | u8 qs[64] (8-bit grid index per 4 elements) |
 * u32 aux[8] (per sub-block: four 7-bit ksigns indices, each for 8
 * elements, and the scale s in bits 28..31).
 * x = d * (0.5 + s) * 0.5 * iq3xxs_grid[idx][j] * sign. */
void tutti_to_float_iq3_xxs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 98) {
        const float d = tutti_rd_half(b);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const uint8_t *q = b + 2 + 8 * ib;
            const uint32_t aux = tutti_rd_u32(b + 66 + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t signs = tutti_iq_ksigns[(aux >> (7 * l)) & 127];
                const uint64_t e = tutti_iq3xxs_grid[q[2 * l]] | (uint64_t)tutti_iq3xxs_grid[q[2 * l + 1]] << 32;
                put8(dst + 8 * l, db, e, signs);
            }
        }
    }
}

/* IQ3_S, 110 bytes: f16 d | u8 qs[64] (low 8 bits of the 9-bit grid
 * indices, one per 4 elements) | u8 qh[8] (bit m of qh[ib]: bit 8 of index
 * m of sub-block ib) | u8 signs[32] (explicit, one byte per 8 elements) |
 * u8 scales[4] (sub-block ib: nibble ib % 2 of scales[ib / 2]).
 * x = d * (1 + 2 s) * iq3s_grid[idx][j] * sign. */
void tutti_to_float_iq3_s(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 110) {
        const float d = tutti_rd_half(b);
        const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const float db = d * (float)(1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 15));
            for (int l = 0; l < 4; l++) {
                const int i0 = qs[8 * ib + 2 * l] | ((qh[ib] >> (2 * l) & 1) << 8);
                const int i1 = qs[8 * ib + 2 * l + 1] | ((qh[ib] >> (2 * l + 1) & 1) << 8);
                const uint64_t e = tutti_iq3s_grid[i0] | (uint64_t)tutti_iq3s_grid[i1] << 32;
                put8(dst + 8 * l, db, e, signs[4 * ib + l]);
            }
        }
    }
}

/* 8 elements of an IQ1 grid entry: dl * (value + delta). */
static inline void put8_iq1(float *y, float dl, uint64_t e, float delta) {
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)g8(e, j) + delta);
}

/* IQ1_S, 50 bytes: f16 d | u8 qs[32] (low 8 bits of the 11-bit grid
 * indices) | u16 qh[8] (sub-block ib: index bits 8..10 of group l in bits
 * 3l..3l+2, scale s in bits 12..14, the sign of delta in bit 15).
 * x = d * (2 s + 1) * (grid + delta), delta = +-1/8. */
void tutti_to_float_iq1_s(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 50) {
        const float d = tutti_rd_half(b);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const uint16_t qh = tutti_rd_u16(b + 34 + 2 * ib);
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -TUTTI_IQ1_DELTA : TUTTI_IQ1_DELTA;
            for (int l = 0; l < 4; l++)
                put8_iq1(dst + 8 * l, dl, tutti_iq1s_grid[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], delta);
        }
    }
}

/* IQ1_M's f16 super-block scale: the top nibbles of its four u16 scale
 * words, lowest word first. */
static inline float iq1m_d(const uint8_t *sc) {
    uint16_t h = 0;
    for (int k = 0; k < 4; k++) h |= (uint16_t)((tutti_rd_u16(sc + 2 * k) >> 12) << (4 * k));
    return tutti_fp16_to_f32(h);
}

/* IQ1_M, 56 bytes: u8 qs[32] (low index bits) | u8 qh[16] (per group of 8:
 * a nibble, low nibble first: index bits 8..10 and, in bit 3, the sign of
 * delta) | u16 scales[4] (3-bit scales s of the 16 half sub-blocks of 16
 * elements, word ib / 2 bits 6 (ib % 2) + 3h.., and the f16 d in the top
 * nibbles).  x = d * (2 s + 1) * (grid + delta). */
void tutti_to_float_iq1_m(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += 56) {
        const uint8_t *qs = b, *qh = b + 32, *sc = b + 48;
        const float d = iq1m_d(sc);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            const uint16_t w = tutti_rd_u16(sc + 2 * (ib / 2));
            for (int l = 0; l < 4; l++) {
                const int s = (w >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
                const float dl = d * (float)(2 * s + 1);
                const int nib = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
                const float delta = nib & 8 ? -TUTTI_IQ1_DELTA : TUTTI_IQ1_DELTA;
                put8_iq1(dst + 8 * l, dl, tutti_iq1s_grid[qs[4 * ib + l] | ((nib & 7) << 8)], delta);
            }
        }
    }
}
