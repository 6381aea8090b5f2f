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
/* Bytes of a row of n elements, or 0 if n is not a multiple of the block size.
 * Also answers for the repacked layouts below (bytes per row on average). */
size_t tutti_row_size(int type, int64_t n);

/* Reference dequantization (scalar); returns false for unsupported types.
 * Bit-exact with ggml's dequantize_row_* / gguf-py.  Also returns false,
 * with tutti_last_error set, when n is negative or not a multiple of the
 * block size, or a pointer is NULL while n > 0.  src needs no alignment. */
bool tutti_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* Reference dot product of one weight row of `type` with a float32 vector x,
 * n elements: dequantizes block by block and accumulates in float32.  The
 * scalar reference every SIMD path is tested against.  On bad input (as for
 * tutti_dequantize_row) returns NaN with tutti_last_error set. */
float tutti_vec_dot_ref(int type, const void *w_row, const float *x, int64_t n);

/* ------------------------------------------------------------------------ */
/* Reference quantizers: float32 -> ggml blocks.
 *
 * Bit-exact with ggml's quantize_row_*_ref (ggml/src/ggml-quants.c), i.e.
 * with what llama-quantize writes when no importance matrix is given, and
 * with gguf-py's gguf.quants.quantize for the types it implements.  Rounding
 * rules (as in ggml):
 *   - Q8_0: d = amax / 127, q = roundf(x / d) (ties away from zero).
 *   - Q8_K: iscale = -127 / max where max is the element of largest |x|
 *     (sign kept), q = min(127, round-to-nearest-even(iscale * x)),
 *     d = 1 / iscale (float32); bsums = sums of each 16 consecutive q.
 *   - Q4_0 / Q5_0: d = max / -8 (/ -16), q = min(15 (31), trunc(x/d + 8.5
 *     (16.5))).  Q4_1 / Q5_1: d = (max - min) / 15 (31), m = min,
 *     q = trunc((x - min) / d + 0.5).
 *   - Q4_K / Q5_K: per 32-element sub-block, a weighted least-squares search
 *     over scale and min (ggml's make_qkx2_quants, weights sqrt(mean x^2) +
 *     |x|); 6-bit sub-scales relative to f16 d = max_scale / 63 and
 *     dmin = max_min / 63; elements re-rounded (ties to even) against the
 *     stored scales.
 *   - Q6_K: per 16-element sub-block, ggml's make_qx_quants (weights x^2,
 *     19 trial scales); int8 sub-scales relative to d = max_scale / -128.
 *   - MXFP4: E8M0 scale e = floor(log2f(amax)) - 2 + 127 (its low 8 bits),
 *     each element the first nearest of the 16 E2M1 values times
 *     2^(e - 127) (ggml's quantize_row_mxfp4_ref, gguf-py's quantize).
 * The i-quants (IQ1_S .. IQ3_S) have no quantizer here: llama-quantize
 * fits them to their codebooks with an importance matrix.
 * All-zero blocks give all-zero data.
 *
 * n must be a non-negative multiple of the block size (32, or 256 for the K
 * types); dst receives tutti_row_size(type, n) bytes, with no alignment
 * requirement.  The typed functions below assume that and that every x is
 * finite; tutti_quantize_row_ref checks both and reports bad input as an
 * error. */

#define TUTTI_QK8_0 32
#define TUTTI_QK_K 256

/* Q8_0 block, 34 bytes, the same bytes as ggml's block_q8_0. */
typedef struct tutti_block_q8_0 {
    uint16_t d; /* IEEE half scale */
    int8_t qs[TUTTI_QK8_0];
} tutti_block_q8_0;

/* Q8_K block, 292 bytes, the same bytes as ggml's block_q8_K: the 8-bit
 * activation format of llama.cpp's K-quant dot products.  Not a tensor type
 * of GGUF files (tutti_type_supported(TUTTI_TYPE_Q8_K) is false). */
typedef struct tutti_block_q8_K {
    float d; /* float32 scale: x ~= d * qs[i] */
    int8_t qs[TUTTI_QK_K];
    int16_t bsums[TUTTI_QK_K / 16]; /* bsums[j] = sum of qs[16j .. 16j+15] */
} tutti_block_q8_K;

void tutti_quantize_row_q8_0_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q8_K_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q4_0_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q4_1_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q5_0_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q5_1_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q4_K_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q5_K_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_q6_K_ref(const float *x, void *dst, int64_t n);
void tutti_quantize_row_mxfp4_ref(const float *x, void *dst, int64_t n);

/* true when tutti_quantize_row_ref can produce `type` (F32, F16, BF16 and the
 * types above). */
bool tutti_type_can_quantize(int type);

/* Quantizes n floats into dst (tutti_row_size(type, n) bytes).  Returns
 * false and records an error (tutti_last_error) when the type has no
 * quantizer, n is negative or not a multiple of the block size, a pointer
 * is NULL while n > 0, or an input is NaN or infinite. */
bool tutti_quantize_row_ref(int type, const float *x, void *dst, int64_t n);

/* ------------------------------------------------------------------------ */
/* Repacked weight layouts: internal, never in a file (ids past every ggml id,
 * so tutti_type_get and the GGUF reader refuse them).
 *
 * Q4_K_X8: 8 consecutive Q4_K rows interleaved so that a SIMD kernel feeds one
 * broadcast activation quad to all 8 rows at once, with each 32-bit lane
 * belonging to one row (the idea of llama.cpp's block_q4_Kx8 repack; the
 * layout here is our own).  A tensor of n_rows (a multiple of 8) x n_cols
 * (a multiple of 256) becomes n_rows / 8 panels, each n_cols / 256 blocks in
 * column order: 148 bytes per row and super-block (Q4_K: 144).  Only SIMD
 * paths with a kernel for it use it (tutti_vec_dot_get), so the model
 * loader repacks only then; row offsets into it must be multiples of 8. */
enum { TUTTI_TYPE_Q4_K_X8 = TUTTI_TYPE_COUNT, TUTTI_TYPE_ALL_COUNT };

typedef struct tutti_block_q4_Kx8 {
    uint16_t d[8], dmin[8]; /* f16 super-block scale and min scale of rows 0..7 */
    uint8_t sc[8][8];       /* [sub-block j][row]: 6-bit scale */
    uint8_t m[8][8];        /* [sub-block j][row]: 6-bit min */
    /* [p][row]: bytes 4p..4p+3 of the row's Q4_K qs: low nibbles are elements
     * 64(p/8) + 4(p%8) + 0..3, high nibbles the same + 32 */
    uint8_t qs[32][8][4];
} tutti_block_q4_Kx8;

/* The repacked layout of `type` (TUTTI_TYPE_Q4_K -> TUTTI_TYPE_Q4_K_X8), or -1. */
int tutti_repack_type(int type);
/* Bytes of `type` (n_rows x n_cols) repacked, or 0 when the type has no
 * repacked layout or the shape does not fit it. */
size_t tutti_repack_size(int type, int64_t n_rows, int64_t n_cols);
/* Repacks the n_rows x n_cols tensor src of `type` into dst
 * (tutti_repack_size bytes, any alignment; 32-byte alignment lets kernels
 * use aligned loads).  Returns the repacked type id, or -1 when
 * tutti_repack_size is 0. */
int tutti_repack(int type, const void *src, void *dst, int64_t n_rows, int64_t n_cols);

#endif
