/* The generic decoder-only transformer forward pass (pre-norm, RMSNorm,
 * rotary attention with grouped KV heads, gated FFN), driven by the
 * architecture switches of tutti_arch.  It reads top to bottom like the
 * papers:
 *
 *   x = embed(ids) [· embd_scale]
 *   per layer:  h = rmsnorm(x)                       attn_norm
 *               q, k, v = h·Wq, h·Wk, h·Wv [+ biases] (or fused Wqkv)
 *               q, k = rmsnorm per head / whole       (qk_norm)
 *               q, k = rope(q, k)                     normal / neox, per-layer base [· attn_factor]
 *               cache ← k, v (f16)
 *               a = softmax(q·kᵀ·scale [softcap] [window] [sink]) · v
 *                 (or multi-head latent attention: mla.c)
 *               x += [rmsnorm](a·Wo [+ bo]) [· residual_scale]    (post_norms)
 *               h = rmsnorm(x)                        ffn_norm
 *               x += [rmsnorm](act(h·Wgate) ⊙ h·Wup)·Wdown [· residual_scale]
 *                 (or the routed experts and shared ones: moe.c)
 *   logits = rmsnorm(x)·Woutᵀ [softcap] [· 1/logit_scale]
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "model/model.h"

void tutti_fwd_matmul(tutti_session *s, const tutti_weight *w, const float *x, int64_t n_tok, float *y) {
    tutti_matmul(s->tp, w->type, w->data, w->n_rows, w->n_cols, x, n_tok, y);
}

/* The gated activation over n values, split over the threads in pieces of
 * a multiple of 64 values (so every value takes the same vector or tail
 * path as in one call: the bits do not depend on the thread count).  One
 * thread for small n, where waking the pool costs more: measured, a heavy
 * twin's 4 x 641,792 values took 2.2 ms per layer on one thread. */
typedef struct glu_job {
    float *gate;
    const float *up;
    int64_t n;
    bool gelu;
} glu_job;

static void glu_part(void *arg, int ith, int nth) {
    const glu_job *j = arg;
    int64_t per = ((j->n + nth - 1) / nth + 63) / 64 * 64, a = (int64_t)ith * per;
    int64_t b = a + per < j->n ? a + per : j->n;
    if (a >= b) return;
    if (j->gelu) tutti_geglu(j->gate + a, j->up + a, b - a);
    else tutti_swiglu(j->gate + a, j->up + a, b - a);
}

void tutti_glu_pool(tutti_threadpool *tp, float *gate, const float *up, int64_t n, bool gelu) {
    glu_job j = {gate, up, n, gelu};
    if (n < 65536) glu_part(&j, 0, 1);
    else tutti_threadpool_run(tp, glu_part, &j);
}

void tutti_fwd_glu(tutti_session *s, float *gate, const float *up, int64_t n, bool gelu) {
    tutti_glu_pool(s->tp, gate, up, n, gelu);
}

void tutti_fwd_add_bias(float *x, const float *b, int64_t n_tok, int64_t n) {
    if (!b) return;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n; i++) x[t * n + i] += b[i];
}

void tutti_fwd_ffn(tutti_session *s, const tutti_weight *gate, const tutti_weight *up, const tutti_weight *down,
                   int64_t n_ff, const float *h, int32_t n, float *out) {
    if (!gate->data) {
        /* fused [gate; up] rows: split each token's 2*n_ff outputs */
        tutti_fwd_matmul(s, up, h, n, s->gate);
        for (int32_t t = 0; t < n; t++) { /* forward order: writes stay behind reads */
            memcpy(s->up + t * n_ff, s->gate + t * 2 * n_ff + n_ff, sizeof(float) * (size_t)n_ff);
            memmove(s->gate + t * n_ff, s->gate + t * 2 * n_ff, sizeof(float) * (size_t)n_ff);
        }
    } else {
        tutti_fwd_matmul(s, gate, h, n, s->gate);
        tutti_fwd_matmul(s, up, h, n, s->up);
    }
    tutti_fwd_glu(s, s->gate, s->up, (int64_t)n * n_ff, s->model->arch->act == TUTTI_ACT_GELU_TANH);
    tutti_fwd_matmul(s, down, s->gate, n, out);
}

void tutti_forward_ubatch(tutti_session *s, const int32_t *ids, int32_t n, float *out) {
    const tutti_fwd_seg seg = {s, ids, n, NULL, NULL, false};
    tutti_forward_segments(s, &seg, 1, out, NULL);
}

/* Several timelines in one pass: every token of every segment goes through
 * the same matmuls (the weights are read once for the whole batch, which is
 * what a one-token step costs on a model larger than the caches), and only
 * rope, the cache writes and attention are done per segment, at that
 * segment's own positions and over its own session's cache. */
void tutti_forward_segments(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, float *out, float *rows) {
    tutti_forward_range(s, seg, n_seg, 0, s->model->hp.n_layer, TUTTI_FWD_EMBED | TUTTI_FWD_HEAD, out, rows);
}

/* q, k, v of the n normed rows in s->h, with biases and q/k norms. */
static void attn_project(tutti_session *s, const tutti_layer *L, int32_t n) {
    const tutti_hparams *hp = &s->model->hp;
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t nk = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    if (L->wqkv.data) {
        tutti_fwd_matmul(s, &L->wqkv, s->h, n, s->qkv);
        for (int32_t t = 0; t < n; t++) {
            const float *r = s->qkv + t * (nq + nk + nv);
            memcpy(s->q + t * nq, r, sizeof(float) * (size_t)nq);
            memcpy(s->k + t * nk, r + nq, sizeof(float) * (size_t)nk);
            memcpy(s->v + t * nv, r + nq + nk, sizeof(float) * (size_t)nv);
        }
    } else {
        tutti_fwd_matmul(s, &L->wq, s->h, n, s->q);
        tutti_fwd_matmul(s, &L->wk, s->h, n, s->k);
        tutti_fwd_matmul(s, &L->wv, s->h, n, s->v);
    }
    tutti_fwd_add_bias(s->q, L->bq.data, n, nq);
    tutti_fwd_add_bias(s->k, L->bk.data, n, nk);
    tutti_fwd_add_bias(s->v, L->bv.data, n, nv);
    /* per head, or (olmoe) over each token's whole projection */
    const bool full = s->model->arch->qk_norm_full;
    if (L->q_norm.data)
        tutti_rmsnorm(s->q, L->q_norm.data, s->q, full ? n : (int64_t)n * hp->n_head, full ? nq : hp->head_dim_k,
                      hp->rms_eps);
    if (L->k_norm.data)
        tutti_rmsnorm(s->k, L->k_norm.data, s->k, full ? n : (int64_t)n * hp->n_head_kv, full ? nk : hp->head_dim_k,
                      hp->rms_eps);
}

void tutti_fwd_rope(const tutti_session *s, const tutti_layer *L, float *x, int32_t nt, int32_t n_heads,
                    int32_t head_dim, int32_t pos0) {
    const tutti_hparams *hp = &s->model->hp;
    tutti_rope(x, nt, n_heads, head_dim, hp->n_rot, pos0, L->rope_base, L->rope_scale, s->rope_factors,
               s->model->arch->rope_mode);
    if (hp->rope_attn_factor != 1.0f) {
        /* ggml's rope multiplies cos and sin by attn_factor: the rotated dims grow, the rest pass */
        for (int64_t h = 0; h < (int64_t)nt * n_heads; h++)
            for (int32_t i = 0; i < hp->n_rot; i++) x[h * head_dim + i] *= hp->rope_attn_factor;
    }
}

/* Rope, cache writes and attention of every segment, into s->att. */
static void attn_segments(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, int32_t il) {
    const tutti_model *m = s->model;
    const tutti_hparams *hp = &m->hp;
    const tutti_layer *L = &m->layers[il];
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t nk = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t no = (int64_t)hp->n_head * hp->head_dim_v;
    for (int32_t j = 0, t0 = 0; j < n_seg; t0 += seg[j].n, j++) {
        tutti_session *ss = seg[j].s;
        const int32_t nt = seg[j].n, pos0 = ss->n_past;
        float *q = s->q + (int64_t)t0 * nq, *k = s->k + (int64_t)t0 * nk;
        /* the segment's own rope factors (they depend on its n_ctx) */
        tutti_fwd_rope(ss, L, q, nt, hp->n_head, hp->head_dim_k, pos0);
        tutti_fwd_rope(ss, L, k, nt, hp->n_head_kv, hp->head_dim_k, pos0);
        if (m->arch->attn_scale_on_q)
            for (int64_t i = 0; i < (int64_t)nt * nq; i++) q[i] *= hp->attn_scale;

        uint16_t *kc = ss->k_cache + (size_t)il * ss->n_ctx * nk;
        uint16_t *vc = ss->v_cache + (size_t)il * ss->n_ctx * nv;
        tutti_f32_to_f16_row(k, kc + (size_t)pos0 * nk, (int64_t)nt * nk);
        tutti_f32_to_f16_row(s->v + (int64_t)t0 * nv, vc + (size_t)pos0 * nv, (int64_t)nt * nv);

        tutti_attn_params ap = {
            .n_tok = nt,
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .head_dim_k = hp->head_dim_k,
            .head_dim_v = hp->head_dim_v,
            .pos0 = pos0,
            .n_ctx = ss->n_ctx,
            .n_swa = L->n_swa,
            .scale = m->arch->attn_scale_on_q ? 1.0f : hp->attn_scale,
            .softcap = hp->attn_softcap,
            .sinks = L->attn_sinks.data,
            .q = q,
            .k = kc,
            .v = vc,
            .out = s->att + (int64_t)t0 * no,
            .scratch = s->attn_scratch,
        };
        tutti_attention(s->tp, &ap);
    }
}

/* x += [post-norm](branch) [· residual_scale], n rows. */
static void residual(tutti_session *s, const tutti_weight *post_norm, int32_t n) {
    const tutti_hparams *hp = &s->model->hp;
    const int64_t n_embd = hp->n_embd;
    if (post_norm->data) tutti_rmsnorm(s->o, post_norm->data, s->o, n, n_embd, hp->rms_eps);
    if (hp->residual_scale != 1.0f)
        for (int64_t i = 0; i < (int64_t)n * n_embd; i++) s->o[i] *= hp->residual_scale;
    for (int64_t i = 0; i < (int64_t)n * n_embd; i++) s->x[i] += s->o[i];
}

/* softcap and logit scale of n_rows logits rows */
static void head_scale(const tutti_hparams *hp, float *x, int64_t n_rows) {
    if (hp->final_softcap > 0) tutti_softcap(x, n_rows * hp->n_vocab, hp->final_softcap);
    if (hp->logit_scale != 1.0f)
        for (int64_t i = 0; i < n_rows * hp->n_vocab; i++) x[i] *= hp->logit_scale;
}

/* The output of a pass over n tokens (s->x the activations after the last
 * layer): all rows into `out`, or per segment: its rows after the output
 * norm into seg.embd, all its logits rows into seg.out, nothing
 * (no_logits), or its last row: one segment's into its logits, several
 * into rows[n_seg][n_vocab] and each into its own session's logits. */
static void forward_head(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, int32_t n, float *out,
                         float *rows) {
    const tutti_model *m = s->model;
    const tutti_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd;
    if (out) {
        tutti_rmsnorm(s->x, m->output_norm.data, s->h, n, n_embd, hp->rms_eps);
        tutti_fwd_matmul(s, &m->output, s->h, n, out);
        head_scale(hp, out, n);
        for (int32_t j = 0, t0 = 0; j < n_seg; t0 += seg[j].n, j++)
            memcpy(seg[j].s->logits, out + (int64_t)(t0 + seg[j].n - 1) * hp->n_vocab,
                   sizeof(float) * (size_t)hp->n_vocab);
        return;
    }
    int32_t n_last = 0, last = -1;
    for (int32_t j = 0, t0 = 0; j < n_seg; t0 += seg[j].n, j++) {
        const float *xs = s->x + (int64_t)t0 * n_embd;
        if (seg[j].embd) tutti_rmsnorm(xs, m->output_norm.data, seg[j].embd, seg[j].n, n_embd, hp->rms_eps);
        if (seg[j].no_logits) continue;
        if (!seg[j].out) {
            n_last++, last = j;
            continue;
        }
        tutti_rmsnorm(xs, m->output_norm.data, s->h, seg[j].n, n_embd, hp->rms_eps);
        tutti_fwd_matmul(s, &m->output, s->h, seg[j].n, seg[j].out);
        head_scale(hp, seg[j].out, seg[j].n);
        memcpy(seg[j].s->logits, seg[j].out + (int64_t)(seg[j].n - 1) * hp->n_vocab,
               sizeof(float) * (size_t)hp->n_vocab);
    }
    if (n_last == 0) return;
    for (int32_t j = 0, t0 = 0, k = 0; j < n_seg; t0 += seg[j].n, j++)
        if (!seg[j].out && !seg[j].no_logits)
            tutti_rmsnorm(s->x + (int64_t)(t0 + seg[j].n - 1) * n_embd, m->output_norm.data,
                          s->h + (int64_t)k++ * n_embd, 1, n_embd, hp->rms_eps);
    float *dst = n_last == 1 ? seg[last].s->logits : rows;
    tutti_fwd_matmul(s, &m->output, s->h, n_last, dst);
    head_scale(hp, dst, n_last);
    if (n_last > 1)
        for (int32_t j = 0, k = 0; j < n_seg; j++)
            if (!seg[j].out && !seg[j].no_logits)
                memcpy(seg[j].s->logits, rows + (int64_t)k++ * hp->n_vocab, sizeof(float) * (size_t)hp->n_vocab);
}

/* The whole pass, or a part of it (a model split by layers over ranks,
 * src/mpi/split.c): the same code runs the same arithmetic on every row
 * either way, so a split pass gives the same bits. */
void tutti_forward_range(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, int32_t il0, int32_t il1, int flags,
                         float *out, float *rows) {
    const tutti_model *m = s->model;
    const tutti_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd;
    int32_t n = 0;
    for (int32_t j = 0; j < n_seg; j++) n += seg[j].n;

    /* token embeddings (without TUTTI_FWD_EMBED, s->x holds the previous
     * rank's activations) */
    for (int32_t j = 0, t = 0; j < n_seg && (flags & TUTTI_FWD_EMBED); j++)
        for (int32_t i = 0; i < seg[j].n; i++, t++)
            tutti_get_row(m->token_embd.type, m->token_embd.data, n_embd, seg[j].ids[i], s->x + t * n_embd);
    if ((flags & TUTTI_FWD_EMBED) && hp->embd_scale != 1.0f)
        for (int64_t i = 0; i < (int64_t)n * n_embd; i++) s->x[i] *= hp->embd_scale;

    for (int32_t il = il0; il < il1; il++) {
        const tutti_layer *L = &m->layers[il];

        /* ---- attention ---- */
        tutti_rmsnorm(s->x, L->attn_norm.data, s->h, n, n_embd, hp->rms_eps);
        if (m->arch->mla) {
            tutti_attn_mla(s, seg, n_seg, il);
        } else {
            attn_project(s, L, n);
            attn_segments(s, seg, n_seg, il);
            tutti_fwd_matmul(s, &L->wo, s->att, n, s->o);
        }
        tutti_fwd_add_bias(s->o, L->bo.data, n, n_embd);
        residual(s, &L->post_attn_norm, n);

        /* ---- feed-forward: dense, or routed experts ---- */
        tutti_rmsnorm(s->x, L->ffn_norm.data, s->h, n, n_embd, hp->rms_eps);
        if (L->ffn_gate_inp.data) tutti_ffn_moe(s, L, n);
        else tutti_fwd_ffn(s, &L->ffn_gate, &L->ffn_up, &L->ffn_down, hp->n_ff, s->h, n, s->o);
        residual(s, &L->post_ffn_norm, n);
    }

    if (!(flags & TUTTI_FWD_HEAD)) return; /* s->x: the activations after layer il1 - 1 */

    forward_head(s, seg, n_seg, n, out, rows);
}
