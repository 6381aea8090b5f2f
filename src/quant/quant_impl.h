/* Internal to the quant layer: reference dequantizers (quant/dequant.c). */
#ifndef TUTTI_QUANT_IMPL_H
#define TUTTI_QUANT_IMPL_H

#include <stdint.h>

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

#endif
