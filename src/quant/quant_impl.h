/* Internal to the quant layer: reference dequantizers (quant/dequant.c) and
 * the value tables of the non-linear formats, shared with the kernels. */
#ifndef TUTTI_QUANT_IMPL_H
#define TUTTI_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

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

#endif
