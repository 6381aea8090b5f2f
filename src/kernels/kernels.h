/* Compute kernels — the `kernels` layer: threaded matmul over any weight
 * type, RMSNorm, RoPE, softmax, attention.  Knows nothing about models.
 *
 * Every kernel has a scalar reference; SIMD paths (issue: speed) are chosen
 * at run time and can be forced with TUTTI_KERNELS=scalar|avx2|avx512|neon. */
#ifndef TUTTI_KERNELS_H
#define TUTTI_KERNELS_H

#include <stdint.h>

/* A persistent pool of worker threads (created once per session, never per
 * token). */
typedef struct tutti_threadpool tutti_threadpool;

tutti_threadpool *tutti_threadpool_new(int n_threads);
void tutti_threadpool_free(tutti_threadpool *tp);
int tutti_threadpool_n_threads(const tutti_threadpool *tp);
/* Runs fn(arg, ith, nth) for ith = 0..nth-1 on the pool (the caller's thread
 * takes ith 0) and returns when all are done. */
void tutti_threadpool_run(tutti_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg);

/* y[t][r] = Σ_c W[r][c] · x[t][c]
 *   W: n_rows rows of n_cols elements of ggml type wtype, rows contiguous
 *      (row r at (char*)w + r * tutti_row_size(wtype, n_cols))
 *   x: float32 [n_tok][n_cols];  y: float32 [n_tok][n_rows]
 * Split across the pool's threads (tp may be NULL: single thread). */
void tutti_matmul(tutti_threadpool *tp, int wtype, const void *w, int64_t n_rows, int64_t n_cols,
                  const float *x, int64_t n_tok, float *y);

#endif
