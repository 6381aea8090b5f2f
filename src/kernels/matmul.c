/* Matrix multiplication y = x · Wᵀ for weights of any supported ggml type —
 * the scalar reference path, and the run-time seam where SIMD paths go.
 *
 * Work split: each thread takes a contiguous range of weight rows.  Within
 * it, a tile of MM_TILE_ROWS rows is dequantized MM_CHUNK columns at a time
 * into a stack buffer (dequantizing each weight element exactly once per
 * call), and that tile is dotted with the same columns of every activation
 * row, so a prompt of n_tok tokens reads the weights once.  Dequantization
 * is exact (the quant layer's reference); accumulation is float32 with eight
 * independent partial sums. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

/* Columns dequantized at a time: a multiple of every block size (1, 32, 256). */
#define MM_CHUNK 1024
#define MM_TILE_ROWS 4

/* ---- backend selection ---- */

static const char *g_backend;

const char *tutti_kernels_backend(void) {
    /* Benign race: every thread computes the same answer. */
    if (!g_backend) {
        /* Only the scalar path exists so far; TUTTI_KERNELS is honoured for
         * "scalar" and every other value falls back to it. */
        g_backend = "scalar";
    }
    return g_backend;
}

/* ---- scalar reference ---- */

static float dot_f32(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    float tail = 0;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

typedef struct mm_job {
    int wtype;
    const char *w;
    size_t row_bytes;
    int64_t n_rows, n_cols, n_tok;
    const float *x;
    float *y;
    const tutti_type_traits *tr;
} mm_job;

static void mm_scalar_worker(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    const int64_t per = (j->n_rows + nth - 1) / nth;
    const int64_t r0 = per * ith;
    const int64_t r1 = r0 + per < j->n_rows ? r0 + per : j->n_rows;
    float buf[MM_TILE_ROWS][MM_CHUNK];
    const bool is_f32 = j->wtype == TUTTI_TYPE_F32;

    for (int64_t rt = r0; rt < r1; rt += MM_TILE_ROWS) {
        const int nr = (int)(r1 - rt < MM_TILE_ROWS ? r1 - rt : MM_TILE_ROWS);
        for (int64_t c0 = 0; c0 < j->n_cols; c0 += MM_CHUNK) {
            const int64_t nc = j->n_cols - c0 < MM_CHUNK ? j->n_cols - c0 : MM_CHUNK;
            const float *wrow[MM_TILE_ROWS];
            for (int r = 0; r < nr; r++) {
                const char *row = j->w + (size_t)(rt + r) * j->row_bytes;
                if (is_f32) {
                    wrow[r] = (const float *)row + c0;
                } else {
                    /* c0 is a multiple of the block size: byte offset exact */
                    size_t off = (size_t)(c0 / j->tr->block_size) * j->tr->type_size;
                    j->tr->to_float(row + off, buf[r], nc);
                    wrow[r] = buf[r];
                }
            }
            for (int64_t t = 0; t < j->n_tok; t++) {
                const float *xt = j->x + t * j->n_cols + c0;
                float *yt = j->y + t * j->n_rows + rt;
                for (int r = 0; r < nr; r++) {
                    float d = dot_f32(wrow[r], xt, nc);
                    yt[r] = c0 == 0 ? d : yt[r] + d;
                }
            }
        }
    }
}

void tutti_matmul(tutti_threadpool *tp, int wtype, const void *w, int64_t n_rows, int64_t n_cols,
                  const float *x, int64_t n_tok, float *y) {
    mm_job j = {
        .wtype = wtype,
        .w = w,
        .row_bytes = tutti_row_size(wtype, n_cols),
        .n_rows = n_rows,
        .n_cols = n_cols,
        .n_tok = n_tok,
        .x = x,
        .y = y,
        .tr = tutti_type_get(wtype),
    };
    (void)tutti_kernels_backend(); /* the only path so far is the scalar one */
    /* Tiny products are not worth waking the pool for. */
    if (n_rows * n_cols * n_tok < 32768 || n_rows < 2 * MM_TILE_ROWS) {
        mm_scalar_worker(&j, 0, 1);
        return;
    }
    tutti_threadpool_run(tp, mm_scalar_worker, &j);
}

void tutti_get_row(int wtype, const void *w, int64_t n_cols, int64_t row, float *dst) {
    const tutti_type_traits *tr = tutti_type_get(wtype);
    const char *src = (const char *)w + (size_t)row * tutti_row_size(wtype, n_cols);
    if (wtype == TUTTI_TYPE_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n_cols);
        return;
    }
    tr->to_float(src, dst, n_cols);
}
