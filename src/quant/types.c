/* The table of ggml tensor types: names and block geometry for every id ggml
 * has assigned (so that a file with a type tutti cannot compute still opens
 * and the error can name the tensor), plus the reference dequantizers of the
 * types tutti supports (quant/dequant.c). */
#include "quant/quant.h"

#include <stdio.h>

#include "quant/quant_impl.h"

static const tutti_type_traits g_types[TUTTI_TYPE_COUNT] = {
    [TUTTI_TYPE_F32] = {"f32", 1, 4, tutti_to_float_f32},
    [TUTTI_TYPE_F16] = {"f16", 1, 2, tutti_to_float_f16},
    [TUTTI_TYPE_Q4_0] = {"q4_0", 32, 18, tutti_to_float_q4_0},
    [TUTTI_TYPE_Q4_1] = {"q4_1", 32, 20, tutti_to_float_q4_1},
    [TUTTI_TYPE_Q5_0] = {"q5_0", 32, 22, tutti_to_float_q5_0},
    [TUTTI_TYPE_Q5_1] = {"q5_1", 32, 24, tutti_to_float_q5_1},
    [TUTTI_TYPE_Q8_0] = {"q8_0", 32, 34, tutti_to_float_q8_0},
    [TUTTI_TYPE_Q8_1] = {"q8_1", 32, 36, NULL},
    [TUTTI_TYPE_Q2_K] = {"q2_K", 256, 84, tutti_to_float_q2_k},
    [TUTTI_TYPE_Q3_K] = {"q3_K", 256, 110, tutti_to_float_q3_k},
    [TUTTI_TYPE_Q4_K] = {"q4_K", 256, 144, tutti_to_float_q4_k},
    [TUTTI_TYPE_Q5_K] = {"q5_K", 256, 176, tutti_to_float_q5_k},
    [TUTTI_TYPE_Q6_K] = {"q6_K", 256, 210, tutti_to_float_q6_k},
    [TUTTI_TYPE_Q8_K] = {"q8_K", 256, 292, NULL},
    [TUTTI_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, tutti_to_float_iq2_xxs},
    [TUTTI_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, tutti_to_float_iq2_xs},
    [TUTTI_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, tutti_to_float_iq3_xxs},
    [TUTTI_TYPE_IQ1_S] = {"iq1_s", 256, 50, tutti_to_float_iq1_s},
    [TUTTI_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, tutti_to_float_iq4_nl},
    [TUTTI_TYPE_IQ3_S] = {"iq3_s", 256, 110, tutti_to_float_iq3_s},
    [TUTTI_TYPE_IQ2_S] = {"iq2_s", 256, 82, tutti_to_float_iq2_s},
    [TUTTI_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, tutti_to_float_iq4_xs},
    [TUTTI_TYPE_I8] = {"i8", 1, 1, NULL},
    [TUTTI_TYPE_I16] = {"i16", 1, 2, NULL},
    [TUTTI_TYPE_I32] = {"i32", 1, 4, NULL},
    [TUTTI_TYPE_I64] = {"i64", 1, 8, NULL},
    [TUTTI_TYPE_F64] = {"f64", 1, 8, NULL},
    [TUTTI_TYPE_IQ1_M] = {"iq1_m", 256, 56, tutti_to_float_iq1_m},
    [TUTTI_TYPE_BF16] = {"bf16", 1, 2, tutti_to_float_bf16},
    [TUTTI_TYPE_TQ1_0] = {"tq1_0", 256, 54, NULL},
    [TUTTI_TYPE_TQ2_0] = {"tq2_0", 256, 66, NULL},
    [TUTTI_TYPE_MXFP4] = {"mxfp4", 32, 17, tutti_to_float_mxfp4},
};

const tutti_type_traits *tutti_type_get(int type) {
    if (type < 0 || type >= TUTTI_TYPE_COUNT || !g_types[type].name) return NULL;
    return &g_types[type];
}

bool tutti_type_supported(int type) {
    const tutti_type_traits *t = tutti_type_get(type);
    return t && t->to_float;
}

const char *tutti_type_name(int type) {
    const tutti_type_traits *t = tutti_type_get(type);
    if (t) return t->name;
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "unknown type id %d", type);
    return buf;
}

size_t tutti_row_size(int type, int64_t n) {
    if (type == TUTTI_TYPE_Q4_K_X8)
        return n < 0 || n % TUTTI_QK_K ? 0 : (size_t)(n / TUTTI_QK_K) * (sizeof(tutti_block_q4_Kx8) / 8);
    const tutti_type_traits *t = tutti_type_get(type);
    if (!t || n < 0 || n % t->block_size) return 0;
    return (size_t)(n / t->block_size) * t->type_size;
}
