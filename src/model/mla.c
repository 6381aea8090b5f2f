/* Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, §2.1), in the
 * "absorbed" form llama.cpp 0.7.0 computes (deepseek2's graph with
 * attn_k_b / attn_v_b): the cache holds, per token, the normed compressed
 * key-value c (kv_lora_rank values) and the rotated shared key part k_pe
 * (n_rot values), one KV head of head_dim_k = kv_lora_rank + n_rot; the
 * values are c itself (the first head_dim_v of each cached row).
 *
 *   q      = h·Wq  or  rmsnorm(h·Wq_a)·Wq_b      [n_head][nope | rope]
 *   c, k_pe = h·Wkv_a_mqa                          [kv_lora_rank | rope]
 *   c      = rmsnorm(c)          k_pe, q_pe = rope(k_pe), rope(q_pe)
 *   q_abs  = W_k_b[h] · q_nope   (the key decompression absorbed into the query)
 *   Q = [q_abs | q_pe] per head, K = [c | k_pe], V = c      (multi-query attention)
 *   a      = softmax(Q·Kᵀ · mscale² / sqrt(nope + rope)) · V    [n_head][kv_lora_rank]
 *   o      = (W_v_b[h] · a[h])_h · Wo */
#include <string.h>

#include "model/model.h"

/* Head hd of x [n][n_head][stride] at column c0, w columns, into y [n][w] (or back). */
static void gather(const float *x, int64_t stride, int64_t c0, int64_t w, int32_t n, int32_t n_head, int32_t hd,
                   float *y) {
    for (int32_t t = 0; t < n; t++)
        memcpy(y + (int64_t)t * w, x + ((int64_t)t * n_head + hd) * stride + c0, sizeof(float) * (size_t)w);
}
static void scatter(const float *y, int64_t stride, int64_t c0, int64_t w, int32_t n, int32_t n_head, int32_t hd,
                    float *x) {
    for (int32_t t = 0; t < n; t++)
        memcpy(x + ((int64_t)t * n_head + hd) * stride + c0, y + (int64_t)t * w, sizeof(float) * (size_t)w);
}

/* y [n_head][n][w->n_rows] = (head hd's matrix of w) · x [n_head][n][w->n_cols]
 * for every head, as batched products of up to TUTTI_MLA_HEADS heads at a
 * time: each group's rows x are gathered by gather_head(hd, into) and the
 * results go out through scatter_head(hd, from). */
typedef struct head_io {
    const float *src;
    int64_t src_stride, src_c0;
    float *dst;
    int64_t dst_stride, dst_c0;
} head_io;

static void per_head(tutti_session *s, const tutti_weight *w, int32_t n, const head_io *io) {
    const tutti_hparams *hp = &s->model->hp;
    tutti_mla_bufs *mb = &s->mla;
    const int32_t nh = hp->n_head;
    const int64_t ci = w->n_cols, co = w->n_rows;
    tutti_mm mm[TUTTI_MLA_HEADS];
    for (int32_t h0 = 0; h0 < nh; h0 += TUTTI_MLA_HEADS) {
        const int32_t hn = nh - h0 < TUTTI_MLA_HEADS ? nh - h0 : TUTTI_MLA_HEADS;
        for (int32_t g = 0; g < hn; g++) {
            float *x = mb->in + (int64_t)g * n * ci, *y = mb->out + (int64_t)g * n * co;
            gather(io->src, io->src_stride, io->src_c0, ci, n, nh, h0 + g, x);
            mm[g] = (tutti_mm){w->type, tutti_weight_mat(w, h0 + g), co, ci, x, n, y};
        }
        tutti_matmul_batch(s->tp, mm, hn);
        for (int32_t g = 0; g < hn; g++)
            scatter(mb->out + (int64_t)g * n * co, io->dst_stride, io->dst_c0, co, n, nh, h0 + g, io->dst);
    }
}

/* The absorbed queries s->q [n][n_head][kv_lora | rope] and the cache rows
 * s->k [n][kv_lora | rope] of the n normed rows in s->h (rope still to come). */
static void mla_project(tutti_session *s, const tutti_layer *L, int32_t n) {
    const tutti_hparams *hp = &s->model->hp;
    tutti_mla_bufs *mb = &s->mla;
    const int32_t nh = hp->n_head, rope = hp->n_rot, kvl = hp->n_lora_kv;
    const int64_t dq = hp->head_dim_k_mla, nope = dq - rope, dk = hp->head_dim_k;
    if (L->wq_a.data) {
        tutti_fwd_matmul(s, &L->wq_a, s->h, n, mb->qa);
        tutti_rmsnorm(mb->qa, L->q_a_norm.data, mb->qa, n, hp->n_lora_q, hp->rms_eps);
        tutti_fwd_matmul(s, &L->wq_b, mb->qa, n, mb->q);
    } else {
        tutti_fwd_matmul(s, &L->wq, s->h, n, mb->q);
    }
    tutti_fwd_matmul(s, &L->wkv_a_mqa, s->h, n, mb->kv);
    /* the key decompression absorbed into each head's query */
    const head_io absorb = {mb->q, dq, 0, s->q, dk, 0};
    per_head(s, &L->wk_b, n, &absorb);
    for (int32_t hd = 0; hd < nh; hd++) {
        gather(mb->q, dq, nope, rope, n, nh, hd, mb->in);
        scatter(mb->in, dk, kvl, rope, n, nh, hd, s->q);
    }
    for (int32_t t = 0; t < n; t++) {
        const float *kv = mb->kv + (int64_t)t * (kvl + rope);
        tutti_rmsnorm(kv, L->kv_a_norm.data, s->k + (int64_t)t * dk, 1, kvl, hp->rms_eps);
        memcpy(s->k + (int64_t)t * dk + kvl, kv + kvl, sizeof(float) * (size_t)rope);
    }
}

/* Rope on the rope part (columns kvl..) of n rows of n_heads heads of dk. */
static void rope_tail(tutti_session *s, const tutti_layer *L, float *x, int32_t n, int32_t n_heads, int32_t pos0) {
    const tutti_hparams *hp = &s->model->hp;
    const int32_t rope = hp->n_rot, kvl = hp->n_lora_kv, dk = hp->head_dim_k;
    float *tmp = s->mla.in;
    for (int64_t r = 0; r < (int64_t)n * n_heads; r++)
        memcpy(tmp + r * rope, x + r * dk + kvl, sizeof(float) * (size_t)rope);
    tutti_fwd_rope(s, L, tmp, n, n_heads, rope, pos0);
    for (int64_t r = 0; r < (int64_t)n * n_heads; r++)
        memcpy(x + r * dk + kvl, tmp + r * rope, sizeof(float) * (size_t)rope);
}

void tutti_attn_mla(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, int32_t il) {
    const tutti_model *m = s->model;
    const tutti_hparams *hp = &m->hp;
    const tutti_layer *L = &m->layers[il];
    tutti_mla_bufs *mb = &s->mla;
    int32_t n = 0;
    for (int32_t j = 0; j < n_seg; j++) n += seg[j].n;
    const int32_t nh = hp->n_head, kvl = hp->n_lora_kv, dk = hp->head_dim_k;
    mla_project(s, L, n);
    for (int32_t j = 0, t0 = 0; j < n_seg; t0 += seg[j].n, j++) {
        tutti_session *ss = seg[j].s;
        const int32_t nt = seg[j].n, pos0 = ss->n_past;
        float *q = s->q + (int64_t)t0 * nh * dk, *k = s->k + (int64_t)t0 * dk;
        rope_tail(s, L, q, nt, nh, pos0);
        rope_tail(s, L, k, nt, 1, pos0);
        uint16_t *kc = ss->k_cache + (size_t)il * ss->n_ctx * dk;
        tutti_f32_to_f16_row(k, kc + (size_t)pos0 * dk, (int64_t)nt * dk);
        tutti_attn_params ap = {
            .n_tok = nt,
            .n_head = nh,
            .n_head_kv = 1,
            .head_dim_k = dk,
            .head_dim_v = kvl,
            .pos0 = pos0,
            .n_ctx = ss->n_ctx,
            .scale = hp->attn_scale,
            .v_stride = dk,
            .q = q,
            .k = kc,
            .v = kc,
            .out = s->att + (int64_t)t0 * nh * kvl,
            .scratch = s->attn_scratch,
        };
        tutti_attention(s->tp, &ap);
    }
    /* decompress each head's values, then the output projection */
    const head_io decompress = {s->att, kvl, 0, mb->att, hp->head_dim_v_mla, 0};
    per_head(s, &L->wv_b, n, &decompress);
    tutti_fwd_matmul(s, &L->wo, mb->att, n, s->o);
}
