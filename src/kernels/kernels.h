/* Compute kernels — the `kernels` layer: threaded matmul over any weight
 * type, RMSNorm, RoPE, softmax, activations, attention over an F16 KV cache.
 * Knows nothing about models: every kernel takes plain arrays and sizes.
 *
 * Every kernel has a scalar reference; SIMD paths (issue: speed) are chosen
 * at run time and can be forced with TUTTI_KERNELS=scalar|avx2|avx512|neon.
 * The seam is tutti_kernels_backend(): tutti_matmul and tutti_attention
 * dispatch on it, so a faster path is added beside the scalar one without
 * touching callers.
 *
 * Layout conventions: matrices are row-major; "[a][b]" means a rows of b
 * contiguous elements.  Activations are float32.  Nothing here allocates
 * memory or fails: sizes are the caller's responsibility (the model layer
 * checks every shape when it loads a file). */
#ifndef TUTTI_KERNELS_H
#define TUTTI_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- backend selection ---- */

/* Name of the kernel path in use: "scalar", "avx2", "avx512" or "neon"
 * (quant/vecdot.h).  Read once from the environment variable TUTTI_KERNELS
 * (unset: the best path this CPU supports); an unknown or unsupported value
 * makes tutti_threadpool_new (hence every session) fail with a message
 * naming the paths this CPU supports. */
const char *tutti_kernels_backend(void);

/* ---- thread pool ---- */

/* A persistent pool of worker threads (created once per session, never per
 * token).  Workers sleep on a condition variable between jobs. */
typedef struct tutti_threadpool tutti_threadpool;

/* n_threads >= 1 (the caller's thread counts as one: n_threads - 1 workers
 * are started).  NULL with an error message if threads cannot be created. */
tutti_threadpool *tutti_threadpool_new(int n_threads);
void tutti_threadpool_free(tutti_threadpool *tp);
int tutti_threadpool_n_threads(const tutti_threadpool *tp);
/* Runs fn(arg, ith, nth) for ith = 0..nth-1 on the pool (the caller's thread
 * takes ith 0) and returns when all are done.  tp == NULL runs fn(arg, 0, 1).
 * Not reentrant: one job at a time per pool. */
void tutti_threadpool_run(tutti_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg);
/* Like tutti_threadpool_run, but fn must claim its work items itself (e.g.
 * from an atomic counter in arg) because only the caller is sure to run it:
 * a worker that starts late (busy machine) skips the job, and the call
 * returns as soon as the caller and the workers that did join are done.
 * ith is still unique among the threads that run fn (per-thread scratch). */
void tutti_threadpool_run_dynamic(tutti_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg);
/* A float buffer of at least n_floats owned by the pool, for the kernels'
 * temporaries (grown on demand, reused across calls; call from the thread
 * that runs jobs, outside a job).  NULL if tp is NULL or memory runs out.
 * Sessions call it once at creation with the largest size they will need,
 * so that evaluation never allocates. */
float *tutti_threadpool_scratch(tutti_threadpool *tp, size_t n_floats);

/* ---- matrix multiplication ---- */

/* y[t][r] = Σ_c W[r][c] · x̃[t][c]
 *   W: n_rows rows of n_cols elements of ggml type wtype, rows contiguous
 *      (row r at (char*)w + r * tutti_row_size(wtype, n_cols)); wtype must be
 *      tutti_type_supported() and n_cols a multiple of its block size; or a
 *      repacked layout of quant.h (e.g. TUTTI_TYPE_Q4_K_X8, made by
 *      tutti_repack when tutti_vec_dot_get has a kernel for it).
 *   x: float32 [n_tok][n_cols];  y: float32 [n_tok][n_rows] (overwritten)
 *   x̃: x rounded to the activation format llama.cpp uses with weights of
 *      this type (its "vec_dot type"), so that our numerics follow the
 *      reference implementation: F32 weights: x itself; F16 / BF16: x
 *      rounded to F16 / BF16; Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL MXFP4: 8-bit
 *      blocks of 32 (Q8_0 rounding: d = amax/127 stored as f16, q =
 *      round(x/d)); K-quants, IQ4_XS and the i-quants (IQ1_S .. IQ3_S):
 *      8-bit blocks of 256 (Q8_K rounding).  The
 *      weights themselves are dequantized exactly.  (If the pool's scratch
 *      cannot be had, x is used unrounded.)
 * Rows are split across the pool's threads (tp may be NULL: single thread);
 * each weight block is read from memory once for all n_tok activation rows
 * (register tiles of several rows x up to 4 tokens, 8 for Q8_0 / Q4_0 /
 * Q5_0 / IQ4_NL / MXFP4 on AVX-512; rows longer than about 96 KiB of one token's
 * activations are cut into segments so that the tokens' activations stay
 * in L2), so a batch of a few tokens costs about one pass over the weights,
 * like one token (Q8_0, 2 threads, 2-4 tokens: 1.1-1.4x the 1-token time,
 * bench/RESULTS.md).  A token's result does not
 * depend on n_tok or on the thread count (except K-quant batches of 8 or
 * more tokens, whose panel kernels add in another order). */
void tutti_matmul(tutti_threadpool *tp, int wtype, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                  int64_t n_tok, float *y);

/* tutti_matmul on kernel path `path` (a tutti_simd of quant/vecdot.h; it
 * must be available) instead of the process's: tests and benchmarks
 * compare the paths in one process. */
void tutti_matmul_path(tutti_threadpool *tp, int path, int wtype, const void *w, int64_t n_rows, int64_t n_cols,
                       const float *x, int64_t n_tok, float *y);

/* Several independent products as one job (the routed experts of a batch,
 * the heads of latent attention): tutti_matmul's arguments per product.
 * The activations of every product are converted first, once for products
 * that share x, n_tok and activation format (an expert's gate and up), then
 * the threads claim runs of weight rows across all products, so many small
 * products cost one hand-off to the pool instead of two each.  Every y is
 * bit-identical to tutti_matmul of its product alone.  Allocates nothing:
 * the converted activations go to the pool's scratch, which must hold those
 * of 256 products (sessions size it at creation; when it cannot, and for
 * products without a fast kernel or with rows longer than one segment,
 * products run through tutti_matmul one by one). */
typedef struct tutti_mm {
    int wtype;
    const void *w;
    int64_t n_rows, n_cols;
    const float *x;
    int64_t n_tok;
    float *y;
} tutti_mm;
void tutti_matmul_batch(tutti_threadpool *tp, const tutti_mm *mm, int n_mm);

/* Row `row` of a weight matrix as float32 (embedding lookup, "get_rows"):
 * dst[0..n_cols). */
void tutti_get_row(int wtype, const void *w, int64_t n_cols, int64_t row, float *dst);

/* ---- element-wise and row kernels (single-threaded, cheap) ---- */

/* RMSNorm (Zhang & Sennrich 2019), row by row:
 *   out[t][i] = x[t][i] / sqrt(mean_i(x[t]²) + eps) · (w ? w[i] : 1)
 * x, out: [n_rows][n]; may alias.  w: [n] or NULL. */
void tutti_rmsnorm(const float *x, const float *w, float *out, int64_t n_rows, int64_t n, float eps);

/* In-place softmax of one row of n floats (max-subtracted; -INFINITY
 * entries get probability 0; a row of only -INFINITY becomes all zero). */
void tutti_softmax(float *x, int64_t n);

/* Rotary position embedding (RoPE, Su et al. 2021) in place on
 * x [n_tok][n_heads][head_dim] (row stride n_heads*head_dim), token t at
 * position pos0 + t.  Only the first n_rot dimensions of each head rotate;
 * the rest pass through.  Rotation i (0 <= i < n_rot/2) uses angle
 *   theta_i = pos · freq_scale · freq_base^(-2i/n_rot) / (freq_factors ? freq_factors[i] : 1)
 * and pairs (x[2i], x[2i+1]) in normal mode (GPT-J / original llama) or
 * (x[i], x[i + n_rot/2]) in NeoX mode (GPT-NeoX, Qwen, Gemma, Phi-3). */
typedef enum tutti_rope_mode { TUTTI_ROPE_NORMAL = 0, TUTTI_ROPE_NEOX = 2 } tutti_rope_mode;
void tutti_rope(float *x, int64_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot, int32_t pos0,
                float freq_base, float freq_scale, const float *freq_factors, tutti_rope_mode mode);

/* Gated feed-forward activations, in place on gate [n]:
 *   SwiGLU:    gate[i] = silu(gate[i]) · up[i],     silu(a) = a / (1 + e^-a)
 *   GeGLU:     gate[i] = gelu_tanh(gate[i]) · up[i] (tanh approximation of GELU,
 *              evaluated like ggml: on the f16-rounded input, result rounded
 *              to f16, 0 below -10, identity above 10) */
void tutti_swiglu(float *gate, const float *up, int64_t n);
void tutti_geglu(float *gate, const float *up, int64_t n);
/* gpt-oss's clamped SwiGLU (ggml's swiglu_oai), in place on gate [n]:
 *   x = min(gate, limit), y = clamp(up, -limit, limit),
 *   gate = x / (1 + e^(-alpha x)) · (y + 1)    (alpha 1.702, limit 7) */
void tutti_swiglu_oai(float *gate, const float *up, int64_t n, float alpha, float limit);

/* x[i] = cap · tanh(x[i] / cap) (Gemma 2 logit soft-capping). */
void tutti_softcap(float *x, int64_t n, float cap);

/* ---- attention ---- */

/* Causal multi-head attention with grouped-query heads (GQA: query head h
 * reads KV head h / (n_head / n_head_kv)) over an F16 (IEEE binary16) KV
 * cache, as in "Attention Is All You Need" with the Gemma 2 extras
 * (soft-capped scores, sliding window).
 *
 *   q   float32 [n_tok][n_head * head_dim_k], rotated; row t is at position
 *       pos0 + t and sees the keys at positions 0 .. pos0 + t
 *   k   f16 [>= pos0 + n_tok][n_head_kv * head_dim_k]  (cache rows = positions)
 *   v   f16 [>= pos0 + n_tok][n_head_kv * head_dim_v]
 *   out float32 [n_tok][n_head * head_dim_v]
 *   score(t, j) = scale · q_t · k_j, then softcap·tanh(score/softcap) if
 *   softcap > 0; key j is masked when n_swa > 0 and (pos0 + t) - j >= n_swa.
 *   sinks (optional, [n_head]): head h's softmax also counts e^sinks[h]
 *   in its denominator (a logit no value goes with: gpt-oss).
 *   v_stride: elements between two cache rows of v (0: n_head_kv *
 *   head_dim_v); latent attention reads its values as the first head_dim_v
 *   of each key row (v = k, v_stride = head_dim_k).
 *   scratch: float32 [n_threads][tutti_attn_scratch_floats(n_ctx, ...)]
 *   (scores, rounded queries and converted key/value chunks of one work
 *   item); n_ctx >= pos0 + n_tok
 * Numerics follow ggml's (non-flash) attention: q and the probabilities are
 * rounded to f16 before their products with the f16 cache. */
typedef struct tutti_attn_params {
    int32_t n_tok, n_head, n_head_kv, head_dim_k, head_dim_v;
    int32_t pos0;
    int32_t n_ctx; /* sizes the per-thread scratch: >= pos0 + n_tok */
    int32_t n_swa;
    float scale;
    float softcap;
    const float *sinks;
    int32_t v_stride;
    const float *q;
    const uint16_t *k;
    const uint16_t *v;
    float *out;
    float *scratch;
} tutti_attn_params;

void tutti_attention(tutti_threadpool *tp, const tutti_attn_params *p);
/* Floats of attention scratch one thread needs for contexts up to n_ctx. */
size_t tutti_attn_scratch_floats(int32_t n_ctx, int32_t n_head, int32_t n_head_kv, int32_t head_dim_k,
                                 int32_t head_dim_v);

/* f32 -> f16 for cache writes. */
void tutti_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);

#endif
