/* Fast dot products of quantized weight rows with quantized activations,
 * and the run-time choice of the SIMD path that computes them.
 *
 * As in llama.cpp, a matmul with weights of type T first converts each
 * activation row (float32) to T's "vec_dot type" (8-bit blocks for the
 * quantized types, F16 / BF16 for the half types, F32 for F32), once per
 * row, and then dots every weight row with it in integer (or half)
 * arithmetic:
 *
 *   weight type                          vec_dot type (activation blocks)
 *   Q4_0 Q5_0 Q8_0 IQ4_NL MXFP4          Q8_0: f16 d | i8 qs[32], d = amax/127
 *   Q4_1 Q5_1                            Q8_1: f16 d | f16 s = d*sum(qs) | i8 qs[32]
 *   Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS      Q8_K: f32 d | i8 qs[256] | i16 bsums[16]
 *   IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S     Q8_K
 *   IQ3_XXS IQ3_S
 *   F16 / BF16 / F32                     F16 / BF16 / F32
 *
 * MXFP4 and the i-quants are bit-identical on every path (their scalar
 * kernels, quant/vecdot_iq.c, add in the SIMD kernels' float order, which
 * is llama.cpp's x86 one); so is Q8_0.
 *
 * The activation rounding is that of ggml's SIMD quantize_row_q8_0/q8_1 and
 * of quantize_row_q8_K, so results follow llama.cpp's numerics, not the exact float product
 * (tutti_vec_dot_ref); the difference is bounded by the activation rounding
 * error (at most d/2 per element, see tests/test_kernels.c).
 *
 * Paths: "scalar" (portable C, the reference every SIMD path is tested
 * against), "avx2" (AVX2 + FMA + F16C), "avx512" (AVX-512 F/BW/VL/DQ with
 * VNNI, on 256-bit vectors but for the 512-bit Q8_0 / Q4_0 / Q5_0 / IQ4_NL
 * / MXFP4 tiles), "neon" (AArch64 Advanced SIMD, baseline
 * ARMv8.0).  Each is compiled with per-function
 * target attributes, so one binary runs on any x86-64 and picks the best
 * path at run time from the CPU's features.  A path lacking a kernel for
 * some type uses the next simpler path's kernel for it (avx512 -> avx2 ->
 * scalar); tutti_vec_dot_get reports which one it is.
 *
 * The environment variable TUTTI_KERNELS=scalar|avx2|avx512|neon forces a
 * path (for tests and comparisons); forcing one this CPU cannot run is an
 * error reported by tutti_simd_init. */
#ifndef TUTTI_QUANT_VECDOT_H
#define TUTTI_QUANT_VECDOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tutti_simd {
    TUTTI_SIMD_SCALAR = 0,
    TUTTI_SIMD_AVX2 = 1,
    TUTTI_SIMD_AVX512 = 2,
    TUTTI_SIMD_NEON = 3,
    TUTTI_SIMD_COUNT = 4
} tutti_simd;

/* Converts n floats (n a multiple of the vec_dot type's block size) to
 * activation blocks at vy (tutti_row_size(vec_type, n) bytes, any
 * alignment). */
typedef void (*tutti_from_float_fn)(const float *x, void *vy, int64_t n);

/* *s = dot of one weight row w (n elements of the weight type) with one
 * activation row vx (n elements of the vec_dot type). */
typedef void (*tutti_vec_dot_fn)(int64_t n, float *s, const void *w, const void *vx);

/* Matrix product of nr weight rows and nc activation rows (any nr, nc >= 1):
 *   s[c * lds + r] = dot(weight row r at (char*)w + r*ldw,
 *                        activation row c at (char*)vx + c*ldx)
 * Kernels tile it in registers (several rows x 4 tokens; AVX-512 Q8_0 and
 * its signed kin: 8 rows x 4 tokens), so a weight block is decoded once per
 * 4 tokens or less (prompt processing). */
typedef void (*tutti_gemm_fn)(int64_t n, const void *w, size_t ldw, int nr, const void *vx, size_t ldx, int nc,
                              float *s, size_t lds);

typedef struct tutti_vec_dot_traits {
    int vec_type; /* TUTTI_TYPE_Q8_0 / Q8_1 / Q8_K / F16 / BF16 / F32 */
    tutti_from_float_fn from_float;
    tutti_vec_dot_fn vec_dot; /* NULL for repacked layouts (quant.h): rows live in panels */
    tutti_gemm_fn gemm;       /* never NULL */
    tutti_simd path;          /* path whose vec_dot kernel this is */
} tutti_vec_dot_traits;

/* "scalar", "avx2", "avx512", "neon" ("?" for bad values). */
const char *tutti_simd_name(tutti_simd path);
/* Parses a name as above; -1 if unknown. */
int tutti_simd_parse(const char *name);
/* true when this build and this CPU can run the path. */
bool tutti_simd_available(tutti_simd path);
/* Best path this CPU supports. */
tutti_simd tutti_simd_best(void);

/* Chooses the path for the process (idempotent; thread-safe after the first
 * call returns): TUTTI_KERNELS if set, else tutti_simd_best().  Returns
 * TUTTI_OK, or TUTTI_ERR with a message naming the value and the paths this
 * CPU supports when TUTTI_KERNELS is unknown or unavailable (the path then
 * stays scalar, so computing never fails). */
int tutti_simd_init(void);
/* The chosen path (calls tutti_simd_init on first use). */
tutti_simd tutti_simd_current(void);

/* Kernels of weight type `wtype` on `path` (NULL if the type has no
 * kernel, e.g. unsupported types, or the path is unavailable).  wtype may
 * be a repacked layout of quant.h (TUTTI_TYPE_Q4_K_X8): non-NULL exactly
 * when the path has kernels for it, which is when loaders should repack.  The
 * returned table is static. */
const tutti_vec_dot_traits *tutti_vec_dot_get_path(tutti_simd path, int wtype);
/* Same on the current path. */
const tutti_vec_dot_traits *tutti_vec_dot_get(int wtype);

/* Q8_1 activation block (36 bytes, ggml's block_q8_1): used with Q4_1 and
 * Q5_1 weights, whose offset m then contributes m * s. */
typedef struct tutti_block_q8_1 {
    uint16_t d; /* half: amax / 127 */
    uint16_t s; /* half: d * sum(qs) */
    int8_t qs[32];
} tutti_block_q8_1;

/* Scalar activation quantizers of Q8_0 / Q8_1 with the rounding of ggml's
 * SIMD quantize_row_q8_0 / q8_1 (q = round-half-even(x * 127 / amax)), which
 * is what llama.cpp computes with on x86 and ARM.  Q8_K activations use
 * tutti_quantize_row_q8_K_ref (ggml uses its _ref there too). */
void tutti_quantize_row_q8_0_act(const float *x, void *vy, int64_t n);
void tutti_quantize_row_q8_1(const float *x, void *vy, int64_t n);

#endif
