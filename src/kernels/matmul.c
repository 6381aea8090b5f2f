/* Matrix multiplication y = x · Wᵀ for weights of any supported ggml type.
 *
 * Fast path (every type, every kernel path): the activation rows are
 * converted once per call to the weight type's vec_dot format
 * (quant/vecdot.h: 8-bit blocks with llama.cpp's rounding, or F16 / BF16 /
 * F32), in parallel over rows, into the pool's scratch; then the threads
 * claim runs of weight rows from a shared atomic counter (guided: long runs
 * first, short ones at the end; see claim_rows) and multiply each run with
 * all activation rows by the path's tile kernel (several rows x 4 tokens in
 * registers; K-quant rows decoded once per 8-row panel, or repacked into
 * panels at load, quant.h): the run's rows stay in L1/L2 while the token
 * tiles stream past, so a prompt reads the weights once.
 *
 * Reference path (kept as the fallback when no scratch memory can be had):
 * weights dequantized exactly to float, activations rounded through the
 * same formats, float dot products. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdatomic.h>

#include "kernels/kernels.h"
#include "quant/quant.h"
#include "quant/vecdot.h"
#include "util/fp16.h"

/* Columns dequantized at a time: a multiple of every block size (1, 32, 256). */
#define MM_CHUNK 1024
#define MM_TILE_ROWS 4

/* ---- backend selection ---- */

const char *tutti_kernels_backend(void) { return tutti_simd_name(tutti_simd_current()); }

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

/* ---- activation rounding (llama.cpp's vec_dot types) ---- */

typedef enum act_fmt { ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_K } act_fmt;

/* The weight type's vec_dot format (quant/vecdot.h), so that the reference
 * path rounds activations as the kernels do for every type they know. */
static act_fmt act_format(int wtype) {
    const tutti_vec_dot_traits *vt = tutti_vec_dot_get_path(TUTTI_SIMD_SCALAR, wtype);
    switch (vt ? vt->vec_type : TUTTI_TYPE_F32) {
    case TUTTI_TYPE_F16: return ACT_F16;
    case TUTTI_TYPE_BF16: return ACT_BF16;
    case TUTTI_TYPE_Q8_0:
    case TUTTI_TYPE_Q8_1: return ACT_Q8_0; /* the same rounding */
    case TUTTI_TYPE_Q8_K: return ACT_Q8_K;
    default: return ACT_F32;
    }
}

/* xr = x rounded through format f (quantize, then back to float). */
static void round_row(act_fmt f, const float *x, float *xr, int64_t n) {
    switch (f) {
    case ACT_F32: memcpy(xr, x, sizeof(float) * (size_t)n); break;
    case ACT_F16:
        for (int64_t i = 0; i < n; i++) xr[i] = tutti_fp16_to_f32(tutti_f32_to_fp16(x[i]));
        break;
    case ACT_BF16:
        for (int64_t i = 0; i < n; i++) xr[i] = tutti_bf16_to_f32(tutti_f32_to_bf16(x[i]));
        break;
    case ACT_Q8_0:
        /* ggml's SIMD quantize_row_q8_0 / q8_1 (what llama.cpp runs on x86
         * and ARM), which differs from its _ref in the last bit: scale by
         * 127/amax (not 1/d) and round half to even.  d is stored as f16. */
        for (int64_t b = 0; b + TUTTI_QK8_0 <= n; b += TUTTI_QK8_0) {
            float amax = 0;
            for (int i = 0; i < TUTTI_QK8_0; i++) {
                const float a = fabsf(x[b + i]);
                if (a > amax) amax = a;
            }
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            const float d = tutti_fp16_to_f32(tutti_f32_to_fp16(amax / 127.0f));
            for (int i = 0; i < TUTTI_QK8_0; i++) xr[b + i] = d * nearbyintf(x[b + i] * id);
        }
        break;
    case ACT_Q8_K:
        for (int64_t b = 0; b + TUTTI_QK_K <= n; b += TUTTI_QK_K) {
            tutti_block_q8_K blk;
            tutti_quantize_row_q8_K_ref(x + b, &blk, TUTTI_QK_K);
            for (int i = 0; i < TUTTI_QK_K; i++) xr[b + i] = blk.d * (float)blk.qs[i];
        }
        break;
    }
}

typedef struct round_job {
    act_fmt f;
    const float *x;
    float *xr;
    int64_t n_tok, n_cols;
} round_job;

static void round_worker(void *arg, int ith, int nth) {
    const round_job *j = arg;
    for (int64_t t = ith; t < j->n_tok; t += nth)
        round_row(j->f, j->x + t * j->n_cols, j->xr + t * j->n_cols, j->n_cols);
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

static void mm_reference(tutti_threadpool *tp, int wtype, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                         int64_t n_tok, float *y) {
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
    const bool small = n_rows * n_cols * n_tok < 32768 || n_rows < 2 * MM_TILE_ROWS;

    const act_fmt f = act_format(wtype);
    float *owned = NULL;
    if (f != ACT_F32) {
        const size_t need = (size_t)n_tok * (size_t)n_cols;
        float *xr = tp ? tutti_threadpool_scratch(tp, need) : (owned = malloc(need * sizeof(float)));
        if (xr) {
            round_job rj = {f, x, xr, n_tok, n_cols};
            if (small || n_tok == 1) round_worker(&rj, 0, 1);
            else tutti_threadpool_run(tp, round_worker, &rj);
            j.x = xr;
        }
    }
    /* Tiny products are not worth waking the pool for. */
    if (small) mm_scalar_worker(&j, 0, 1);
    else tutti_threadpool_run(tp, mm_scalar_worker, &j);
    free(owned);
}

/* ---- fast path ---- */

#define MM_CHUNK_ROWS 16

typedef struct fast_job {
    const tutti_vec_dot_traits *vt;
    int wtype;
    int64_t seg_cols; /* rows longer than this are cut into segments (seg_run) */
    const char *w;
    size_t ldw, ldx;
    int64_t n_rows, n_cols, n_tok;
    const float *x; /* float rows to convert (NULL when xq already holds them) */
    char *xq;       /* [n_tok][ldx] activation blocks */
    float *y;
    atomic_int_fast64_t next; /* next activation row (conversion), then next weight row */
} fast_job;

/* Activation rows are converted in pieces of MM_CONV_COLS columns (a
 * multiple of every activation block, 32 and 256), claimed by the threads
 * from j->next: a single long row (one token through a heavy twin's
 * ffn_down, 6.4e5 columns) is shared too.  Blocks are converted
 * independently, so the bytes do not depend on the split. */
#define MM_CONV_COLS 16384

static void convert_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    fast_job *j = arg;
    const int64_t per_row = (j->n_cols + MM_CONV_COLS - 1) / MM_CONV_COLS;
    for (;;) {
        const int64_t it = atomic_fetch_add(&j->next, 1);
        if (it >= j->n_tok * per_row) break;
        const int64_t t = it / per_row, c0 = it % per_row * MM_CONV_COLS;
        const int64_t nc = j->n_cols - c0 < MM_CONV_COLS ? j->n_cols - c0 : MM_CONV_COLS;
        j->vt->from_float(j->x + t * j->n_cols + c0, j->xq + (size_t)t * j->ldx + tutti_row_size(j->vt->vec_type, c0),
                          nc);
    }
}

/* Guided self-scheduling over weight rows: a thread claims
 * remaining / (2 * nth) rows (a multiple of MM_CHUNK_ROWS, the kernels'
 * decode unit), so runs are long at first -- one token streams the weights
 * once and is memory-bound, and a long contiguous run keeps the hardware
 * prefetcher on one stream per thread -- and shrink towards the end, so
 * the threads finish together (fixed chunks left a thread idle for up to a
 * chunk) and a thread that the OS delayed hands its share over.  Returns
 * the number of rows claimed (0: none left). */
static int64_t claim_rows(fast_job *j, int nth, int64_t *r0) {
    int_fast64_t cur = atomic_load(&j->next);
    for (;;) {
        if (cur >= j->n_rows) return 0;
        int64_t n = (j->n_rows - cur) / (2 * (int64_t)nth);
        n = (n + MM_CHUNK_ROWS - 1) / MM_CHUNK_ROWS * MM_CHUNK_ROWS;
        if (n < MM_CHUNK_ROWS) n = MM_CHUNK_ROWS;
        if (n > j->n_rows - cur) n = j->n_rows - cur;
        if (atomic_compare_exchange_weak(&j->next, &cur, cur + n)) {
            *r0 = cur;
            return n;
        }
    }
}

/* Long rows (issue 12: a heavy twin's ffn_down has rows of 10^5..10^6
 * columns): n tokens' activation rows no longer fit in L2, and a kernel that
 * dots one full weight row with them re-reads them from the last-level
 * cache (or memory) for every weight row -- several times the weights' own
 * traffic.  Such rows are cut into segments of seg_cols columns whose
 * activations (all tokens) stay in L2 while every row of the run streams its
 * segment past them; y is the sum of the segments' dot products, added in
 * segment order.  The cut depends only on the row length and the activation
 * format, never on the number of tokens or threads, so a token's result is
 * the same alone or in any batch; rows up to seg_cols (every layer of the
 * usual models) are not cut, and keep llama.cpp's summation order. */
#define MM_SEG_BYTES (96 * 1024) /* activation bytes of one token's segment */
#define MM_SEG_ROWS 8            /* rows per kernel call (a K-quant panel, a repacked panel) */
#define MM_SEG_TOK 64            /* tokens per kernel call (stack buffer below) */

static int64_t seg_cols_for(const fast_job *j) {
    const double per_col = (double)j->ldx / (double)j->n_cols;
    int64_t c = (int64_t)((double)MM_SEG_BYTES / per_col) / TUTTI_QK_K * TUTTI_QK_K;
    return c < TUTTI_QK_K ? TUTTI_QK_K : c;
}

/* Byte offset of column c0 (a multiple of 256) within a row (repacked
 * layouts: within a panel row of 8 interleaved rows). */
static size_t col_offset(int wtype, int64_t c0) {
    if (wtype >= TUTTI_TYPE_COUNT) return 8 * tutti_row_size(wtype, c0);
    return tutti_row_size(wtype, c0);
}

static void seg_run(const fast_job *j, int64_t r0, int64_t nrow) {
    const tutti_vec_dot_traits *vt = j->vt;
    float tmp[MM_SEG_TOK * MM_SEG_ROWS];
    for (int64_t c0 = 0; c0 < j->n_cols; c0 += j->seg_cols) {
        const int64_t nc = j->n_cols - c0 < j->seg_cols ? j->n_cols - c0 : j->seg_cols;
        const char *w = j->w + col_offset(j->wtype, c0);
        const char *xq = j->xq + tutti_row_size(vt->vec_type, c0);
        for (int64_t rs = r0; rs < r0 + nrow; rs += MM_SEG_ROWS) {
            const int nr = (int)(r0 + nrow - rs < MM_SEG_ROWS ? r0 + nrow - rs : MM_SEG_ROWS);
            for (int64_t t0 = 0; t0 < j->n_tok; t0 += MM_SEG_TOK) {
                const int nt = (int)(j->n_tok - t0 < MM_SEG_TOK ? j->n_tok - t0 : MM_SEG_TOK);
                vt->gemm(nc, w + (size_t)rs * j->ldw, j->ldw, nr, xq + (size_t)t0 * j->ldx, j->ldx, nt, tmp,
                         MM_SEG_ROWS);
                for (int t = 0; t < nt; t++) {
                    float *y = j->y + (size_t)(t0 + t) * (size_t)j->n_rows + (size_t)rs;
                    const float *p = tmp + (size_t)t * MM_SEG_ROWS;
                    if (c0 == 0) memcpy(y, p, sizeof(float) * (size_t)nr);
                    else
                        for (int r = 0; r < nr; r++) y[r] += p[r];
                }
            }
        }
    }
}

static void fast_worker(void *arg, int ith, int nth) {
    (void)ith;
    fast_job *j = arg;
    const tutti_vec_dot_traits *vt = j->vt;
    int64_t r0, nrow;
    while ((nrow = claim_rows(j, nth, &r0)) > 0) {
        if (j->n_cols > j->seg_cols) {
            seg_run(j, r0, nrow);
            continue;
        }
        /* all tokens at once: the kernel tiles them, decoding each weight
         * block once per 4 tokens (K-quants: once per 8-row panel) */
        for (int64_t rs = r0; rs < r0 + nrow; rs += MM_CHUNK_ROWS) {
            const int nr = (int)(r0 + nrow - rs < MM_CHUNK_ROWS ? r0 + nrow - rs : MM_CHUNK_ROWS);
            vt->gemm(j->n_cols, j->w + (size_t)rs * j->ldw, j->ldw, nr, j->xq, j->ldx, (int)j->n_tok, j->y + rs,
                     (size_t)j->n_rows);
        }
    }
}

void tutti_matmul(tutti_threadpool *tp, int wtype, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                  int64_t n_tok, float *y) {
    tutti_matmul_path(tp, (int)tutti_simd_current(), wtype, w, n_rows, n_cols, x, n_tok, y);
}

void tutti_matmul_path(tutti_threadpool *tp, int path, int wtype, const void *w, int64_t n_rows, int64_t n_cols,
                       const float *x, int64_t n_tok, float *y) {
    const tutti_vec_dot_traits *vt = tutti_vec_dot_get_path((tutti_simd)path, wtype);
    if (!vt) {
        mm_reference(tp, wtype, w, n_rows, n_cols, x, n_tok, y);
        return;
    }
    fast_job j = {
        .vt = vt,
        .wtype = wtype,
        .w = w,
        .ldw = tutti_row_size(wtype, n_cols),
        .ldx = tutti_row_size(vt->vec_type, n_cols),
        .n_rows = n_rows,
        .n_cols = n_cols,
        .n_tok = n_tok,
        .y = y,
    };
    j.seg_cols = seg_cols_for(&j);
    atomic_init(&j.next, 0);
    char *owned = NULL;
    if (vt->vec_type == TUTTI_TYPE_F32) {
        j.xq = (char *)x; /* F32 weights dot the float rows directly */
    } else {
        const size_t need = (size_t)n_tok * j.ldx;
        j.xq = tp ? (char *)tutti_threadpool_scratch(tp, (need + sizeof(float) - 1) / sizeof(float))
                  : (owned = malloc(need));
        if (!j.xq) {
            if (wtype >= TUTTI_TYPE_COUNT) { /* repacked: no reference path; out of memory shows as NaN */
                for (int64_t i = 0; i < n_rows * n_tok; i++) y[i] = NAN;
                return;
            }
            mm_reference(tp, wtype, w, n_rows, n_cols, x, n_tok, y);
            return;
        }
        j.x = x;
        if (!tp || n_tok * n_cols < 2 * MM_CONV_COLS) convert_worker(&j, 0, 1);
        else tutti_threadpool_run_dynamic(tp, convert_worker, &j);
        atomic_store(&j.next, 0);
    }
    /* tiny products are not worth waking the pool for */
    if (n_rows * n_cols * n_tok < 32768 || n_rows < 2 * MM_CHUNK_ROWS) fast_worker(&j, 0, 1);
    else tutti_threadpool_run_dynamic(tp, fast_worker, &j);
    free(owned);
}

/* ---- a batch of products in one job ---- */

/* Products per job (the bookkeeping lives on the stack: eval allocates nothing). */
#define MM_BATCH_MAX 256

/* One product of a batch: its traits, its converted activations (xq, ldx),
 * whether it made them (conv) or shares an earlier product's, and where its
 * runs of weight rows start among the batch's units. */
typedef struct batch_mm {
    const tutti_mm *mm;
    const tutti_vec_dot_traits *vt;
    size_t ldw, ldx;
    const char *xq;
    bool conv;
    int64_t unit0, run_rows;
} batch_mm;

typedef struct batch_job {
    const batch_mm *b;
    int n;
    int64_t n_units, n_conv_items;
    atomic_int_fast64_t next;
} batch_job;

/* Conversion items: (product that converts, token row, piece of MM_CONV_COLS columns). */
static void batch_convert_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    batch_job *j = arg;
    for (;;) {
        int64_t it = atomic_fetch_add(&j->next, 1);
        if (it >= j->n_conv_items) break;
        const batch_mm *b = j->b;
        for (;; b++) { /* the product of item it */
            if (!b->conv) continue;
            const int64_t n_it = b->mm->n_tok * ((b->mm->n_cols + MM_CONV_COLS - 1) / MM_CONV_COLS);
            if (it < n_it) break;
            it -= n_it;
        }
        const int64_t per_row = (b->mm->n_cols + MM_CONV_COLS - 1) / MM_CONV_COLS;
        const int64_t t = it / per_row, c0 = it % per_row * MM_CONV_COLS;
        const int64_t nc = b->mm->n_cols - c0 < MM_CONV_COLS ? b->mm->n_cols - c0 : MM_CONV_COLS;
        b->vt->from_float(b->mm->x + t * b->mm->n_cols + c0,
                          (char *)b->xq + (size_t)t * b->ldx + tutti_row_size(b->vt->vec_type, c0), nc);
    }
}

/* Units: runs of run_rows weight rows of one product, in product order (the
 * threads that share a product share its activations in cache). */
static void batch_mm_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    batch_job *j = arg;
    int k = 0;
    for (;;) {
        const int64_t u = atomic_fetch_add(&j->next, 1);
        if (u >= j->n_units) break;
        while (k + 1 < j->n && j->b[k + 1].unit0 <= u) k++; /* units are claimed in increasing order */
        const batch_mm *b = &j->b[k];
        const int64_t r0 = (u - b->unit0) * b->run_rows;
        const int64_t r1 = r0 + b->run_rows < b->mm->n_rows ? r0 + b->run_rows : b->mm->n_rows;
        for (int64_t rs = r0; rs < r1; rs += MM_CHUNK_ROWS) {
            const int nr = (int)(r1 - rs < MM_CHUNK_ROWS ? r1 - rs : MM_CHUNK_ROWS);
            b->vt->gemm(b->mm->n_cols, (const char *)b->mm->w + (size_t)rs * b->ldw, b->ldw, nr, b->xq, b->ldx,
                        (int)b->mm->n_tok, b->mm->y + rs, (size_t)b->mm->n_rows);
        }
    }
}

/* The fast-path kernel of a product that can join a batch (rows short
 * enough for one segment: seg_run's cut is tutti_matmul's alone), or NULL. */
static const tutti_vec_dot_traits *batchable(const tutti_mm *m, size_t *ldx) {
    const tutti_vec_dot_traits *vt = tutti_vec_dot_get_path(tutti_simd_current(), m->wtype);
    if (!vt || m->n_tok < 1) return NULL;
    fast_job fj = {.ldx = tutti_row_size(vt->vec_type, m->n_cols), .n_cols = m->n_cols};
    if (m->n_cols > seg_cols_for(&fj)) return NULL;
    *ldx = fj.ldx;
    return vt;
}

/* An earlier product whose conversion this one can read (same input, rows and format), or NULL. */
static const batch_mm *same_input(const batch_mm *b, int i) {
    for (int k = 0; k < i; k++)
        if (b[k].mm->x == b[i].mm->x && b[k].mm->n_tok == b[i].mm->n_tok && b[k].mm->n_cols == b[i].mm->n_cols &&
            b[k].vt->from_float == b[i].vt->from_float)
            return &b[k];
    return NULL;
}

/* At most MM_BATCH_MAX products, all batchable, as one conversion job and one product job. */
static void batch_run(tutti_threadpool *tp, batch_mm *b, int n) {
    size_t need = 0;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        rows += b[i].mm->n_rows;
        if (b[i].vt->vec_type != TUTTI_TYPE_F32 && !same_input(b, i))
            need += ((size_t)b[i].mm->n_tok * b[i].ldx + 63) / 64 * 64;
    }
    char *scratch = need && tp ? (char *)tutti_threadpool_scratch(tp, need / sizeof(float) + 1) : NULL;
    if (need && !scratch) { /* every product on its own (tutti_matmul's fallbacks) */
        for (int i = 0; i < n; i++)
            tutti_matmul(tp, b[i].mm->wtype, b[i].mm->w, b[i].mm->n_rows, b[i].mm->n_cols, b[i].mm->x, b[i].mm->n_tok,
                         b[i].mm->y);
        return;
    }
    /* runs small enough for the threads to finish together, in whole kernel chunks */
    const int nth = tp ? tutti_threadpool_n_threads(tp) : 1;
    int64_t run = rows / (8 * (int64_t)nth) / MM_CHUNK_ROWS * MM_CHUNK_ROWS;
    if (run < MM_CHUNK_ROWS) run = MM_CHUNK_ROWS;
    batch_job j = {.b = b, .n = n};
    for (int i = 0; i < n; i++) {
        const batch_mm *k = same_input(b, i);
        b[i].conv = false;
        if (b[i].vt->vec_type == TUTTI_TYPE_F32) {
            b[i].xq = (const char *)b[i].mm->x; /* F32 weights dot the float rows */
        } else if (k) {
            b[i].xq = k->xq;
        } else {
            b[i].xq = scratch;
            b[i].conv = true;
            scratch += ((size_t)b[i].mm->n_tok * b[i].ldx + 63) / 64 * 64;
            j.n_conv_items += b[i].mm->n_tok * ((b[i].mm->n_cols + MM_CONV_COLS - 1) / MM_CONV_COLS);
        }
        b[i].ldw = tutti_row_size(b[i].mm->wtype, b[i].mm->n_cols);
        b[i].run_rows = run;
        b[i].unit0 = j.n_units;
        j.n_units += (b[i].mm->n_rows + run - 1) / run;
    }
    atomic_init(&j.next, 0);
    if (j.n_conv_items) {
        if (!tp || j.n_conv_items < 4) batch_convert_worker(&j, 0, 1);
        else tutti_threadpool_run_dynamic(tp, batch_convert_worker, &j);
        atomic_store(&j.next, 0);
    }
    if (!tp || j.n_units == 1) batch_mm_worker(&j, 0, 1);
    else tutti_threadpool_run_dynamic(tp, batch_mm_worker, &j);
}

void tutti_matmul_batch(tutti_threadpool *tp, const tutti_mm *mm, int n_mm) {
    batch_mm b[MM_BATCH_MAX];
    int n = 0;
    for (int i = 0; i < n_mm; i++) {
        batch_mm bi = {.mm = &mm[i]};
        if (!(bi.vt = batchable(&mm[i], &bi.ldx))) {
            tutti_matmul(tp, mm[i].wtype, mm[i].w, mm[i].n_rows, mm[i].n_cols, mm[i].x, mm[i].n_tok, mm[i].y);
            continue;
        }
        b[n++] = bi;
        if (n == MM_BATCH_MAX) batch_run(tp, b, n), n = 0;
    }
    if (n) batch_run(tp, b, n);
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
