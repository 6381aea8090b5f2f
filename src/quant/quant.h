/* Tensor element types — the `quant` layer.
 *
 * Block formats follow ggml (ggml-common.h / ggml-quants.c): a row of n
 * elements is n / block_size blocks of type_size bytes.  This layer knows the
 * byte layout of every type, turns rows into float32 (the scalar reference
 * path) and computes dot products.  It knows nothing about GGUF or models.
 *
 * Ids are ggml's type ids, as stored in GGUF tensor infos. */
#ifndef TUTTI_QUANT_H
#define TUTTI_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tutti_type {
    TUTTI_TYPE_F32 = 0,
    TUTTI_TYPE_F16 = 1,
    TUTTI_TYPE_Q4_0 = 2,
    TUTTI_TYPE_Q4_1 = 3,
    TUTTI_TYPE_Q5_0 = 6,
    TUTTI_TYPE_Q5_1 = 7,
    TUTTI_TYPE_Q8_0 = 8,
    TUTTI_TYPE_Q8_1 = 9,
    TUTTI_TYPE_Q2_K = 10,
    TUTTI_TYPE_Q3_K = 11,
    TUTTI_TYPE_Q4_K = 12,
    TUTTI_TYPE_Q5_K = 13,
    TUTTI_TYPE_Q6_K = 14,
    TUTTI_TYPE_Q8_K = 15,
    TUTTI_TYPE_IQ2_XXS = 16,
    TUTTI_TYPE_IQ2_XS = 17,
    TUTTI_TYPE_IQ3_XXS = 18,
    TUTTI_TYPE_IQ1_S = 19,
    TUTTI_TYPE_IQ4_NL = 20,
    TUTTI_TYPE_IQ3_S = 21,
    TUTTI_TYPE_IQ2_S = 22,
    TUTTI_TYPE_IQ4_XS = 23,
    TUTTI_TYPE_I8 = 24,
    TUTTI_TYPE_I16 = 25,
    TUTTI_TYPE_I32 = 26,
    TUTTI_TYPE_I64 = 27,
    TUTTI_TYPE_F64 = 28,
    TUTTI_TYPE_IQ1_M = 29,
    TUTTI_TYPE_BF16 = 30,
    TUTTI_TYPE_TQ1_0 = 34,
    TUTTI_TYPE_TQ2_0 = 35,
    TUTTI_TYPE_MXFP4 = 39,
    TUTTI_TYPE_COUNT = 40
};

typedef struct tutti_type_traits {
    const char *name;   /* ggml's name, e.g. "q4_K" */
    int64_t block_size; /* elements per block (1 for F32/F16/BF16) */
    size_t type_size;   /* bytes per block */
    /* Reference dequantization of n elements (n % block_size == 0); NULL when
     * this type is known (sizes) but not computable by tutti. */
    void (*to_float)(const void *src, float *dst, int64_t n);
} tutti_type_traits;

/* Traits of a ggml type id, or NULL for an id ggml never assigned. */
const tutti_type_traits *tutti_type_get(int type);
/* true when tutti can compute with weights of this type. */
bool tutti_type_supported(int type);
/* Name for messages; "unknown(N)" style for bad ids (static storage). */
const char *tutti_type_name(int type);
/* Bytes of a row of n elements, or 0 if n is not a multiple of the block size. */
size_t tutti_row_size(int type, int64_t n);

/* Reference dequantization (scalar); returns false for unsupported types. */
bool tutti_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* Reference dot product of one weight row of `type` with a float32 vector x,
 * n elements: dequantizes block by block and accumulates in float32.  The
 * scalar reference every SIMD path is tested against. */
float tutti_vec_dot_ref(int type, const void *w_row, const float *x, int64_t n);

#endif
