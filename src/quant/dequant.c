/* PLACEHOLDER: replaced by the quant layer's reference dequantizers. */
#include "quant/quant_impl.h"
#include <string.h>
#define PH(name) void name(const void *src, float *dst, int64_t n) { (void)src; memset(dst, 0, sizeof(float) * (size_t)n); }
PH(tutti_to_float_f32) PH(tutti_to_float_f16) PH(tutti_to_float_bf16) PH(tutti_to_float_q4_0)
PH(tutti_to_float_q4_1) PH(tutti_to_float_q5_0) PH(tutti_to_float_q5_1) PH(tutti_to_float_q8_0)
PH(tutti_to_float_q2_k) PH(tutti_to_float_q3_k) PH(tutti_to_float_q4_k) PH(tutti_to_float_q5_k)
PH(tutti_to_float_q6_k) PH(tutti_to_float_iq4_nl) PH(tutti_to_float_iq4_xs)
