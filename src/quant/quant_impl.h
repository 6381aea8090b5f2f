/* Internal to the quant layer: reference dequantizers (quant/dequant.c) and
 * the value tables of the non-linear formats, shared with the kernels. */
#ifndef TUTTI_QUANT_IMPL_H
#define TUTTI_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "util/fp16.h"

/* Little-endian fields of packed blocks, read byte by byte (blocks sit at
 * any alignment). */
static inline uint16_t tutti_rd_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t tutti_rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline float tutti_rd_half(const uint8_t *p) { return tutti_fp16_to_f32(tutti_rd_u16(p)); }

/* MXFP4 (OCP Microscaling Formats v1.0, FP4 E2M1 elements with a shared
 * E8M0 scale), as ggml stores it: the 16 E2M1 codes as integers twice their
 * value (ggml's kvalues_mxfp4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 doubled; code 8 is
 * -0), so that they fit int8 dot products, and the scale halved to match:
 * x = tutti_e8m0_half(e) * tutti_mxfp4_values[code]. */
extern const int8_t tutti_mxfp4_values[16];

/* Half the E8M0 scale 2^(e - 127), i.e. 2^(e - 128), exactly as float32 for
 * every e (ggml's GGML_E8M0_TO_FP32_HALF): e < 2 are the subnormals 2^-128
 * and 2^-127.  E8M0's NaN code 0xFF is read as 2^127, as ggml does. */
static inline float tutti_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The i-quant codebooks of the GGUF format (ggml-common.h), generated into
 * iq_grids.inc by gen_iq_grids.py from gguf-py.  Entry k of a grid holds the
 * 8 (IQ3: 4) values of code k in its bytes, element j in byte j
 * (little-endian): IQ2 grids the magnitudes 8, 25, 43; IQ3_XXS 4..62 and
 * IQ3_S 1..15; IQ1's grid int8 -1, 0, +1 (IQ1_S and IQ1_M share it). */
extern const uint64_t tutti_iq2xxs_grid[256];
extern const uint64_t tutti_iq2xs_grid[512];
extern const uint64_t tutti_iq2s_grid[1024];
extern const uint32_t tutti_iq3xxs_grid[256];
extern const uint32_t tutti_iq3s_grid[512];
extern const uint64_t tutti_iq1s_grid[2048];
/* Signs of 8 values from a 7-bit index (IQ2_XXS, IQ2_XS, IQ3_XXS): bit j
 * set = value j negative; bit 7 makes the count of minus signs even. */
extern const uint8_t tutti_iq_ksigns[128];
/* IQ1_S / IQ1_M: every value of a group is shifted by +-1/8 (ggml's
 * IQ1S_DELTA, IQ1M_DELTA). */
#define TUTTI_IQ1_DELTA 0.125f

void tutti_to_float_f32(const void *src, float *dst, int64_t n);
void tutti_to_float_f16(const void *src, float *dst, int64_t n);
void tutti_to_float_bf16(const void *src, float *dst, int64_t n);
void tutti_to_float_q4_0(const void *src, float *dst, int64_t n);
void tutti_to_float_q4_1(const void *src, float *dst, int64_t n);
void tutti_to_float_q5_0(const void *src, float *dst, int64_t n);
void tutti_to_float_q5_1(const void *src, float *dst, int64_t n);
void tutti_to_float_q8_0(const void *src, float *dst, int64_t n);
void tutti_to_float_q2_k(const void *src, float *dst, int64_t n);
void tutti_to_float_q3_k(const void *src, float *dst, int64_t n);
void tutti_to_float_q4_k(const void *src, float *dst, int64_t n);
void tutti_to_float_q5_k(const void *src, float *dst, int64_t n);
void tutti_to_float_q6_k(const void *src, float *dst, int64_t n);
void tutti_to_float_iq4_nl(const void *src, float *dst, int64_t n);
void tutti_to_float_iq4_xs(const void *src, float *dst, int64_t n);
void tutti_to_float_mxfp4(const void *src, float *dst, int64_t n);
void tutti_to_float_iq2_xxs(const void *src, float *dst, int64_t n);
void tutti_to_float_iq2_xs(const void *src, float *dst, int64_t n);
void tutti_to_float_iq2_s(const void *src, float *dst, int64_t n);
void tutti_to_float_iq3_xxs(const void *src, float *dst, int64_t n);
void tutti_to_float_iq3_s(const void *src, float *dst, int64_t n);
void tutti_to_float_iq1_s(const void *src, float *dst, int64_t n);
void tutti_to_float_iq1_m(const void *src, float *dst, int64_t n);

#endif
