/* The mixture-of-experts feed-forward (Shazeer et al. 2017, "Outrageously
 * Large Neural Networks"; top-k routing as in Switch / Mixtral), computed as
 * llama.cpp 0.7.0's build_moe_ffn computes it:
 *
 *   logits = h · Wrouterᵀ [+ b]                     [n_expert] per token
 *   probs  = softmax(logits) | sigmoid(logits) | logits (gpt-oss)
 *   select = probs [+ exp_probs_b]                  the bias chooses, it does not weigh
 *   groups: keep the n_group_used groups whose two best select scores sum
 *           highest, the others' experts drop out (DeepSeek-V3)
 *   sel    = the n_expert_used best of select, best first
 *   w      = probs[sel] | softmax(logits[sel]) (gpt-oss)
 *            [/ max(Σ w, 2^-14)] [· expert_weights_scale]
 *   out    = Σ_j w_j · down_j(act(gate_j(h)) ⊙ up_j(h))   in rank order j
 *            [+ shared expert(s) [· sigmoid(h · w_shexp_gate)]]
 *
 * A prompt batch is computed expert by expert: the rows routed to an expert
 * are gathered and go through its three matrices as batched matmuls (the
 * weights are read once per batch, not once per token; all experts' gate
 * and up products are one job of the pool, their down products another), so
 * a token reads only the experts it is routed to and its result does not
 * depend on the others in the batch. */
#include <math.h>
#include <string.h>

#include "model/model.h"

/* ggml's descending argsort (std::sort with a > b) restricted to the k
 * best: for the expert counts of real models (up to 16 per sort) libstdc++
 * sorts by insertion, which keeps equal values in index order, and so does
 * this; NaN never ranks above a number.  idx[0..k) gets the indices. */
static void topk_desc(const float *v, int32_t n, int32_t k, int32_t *idx) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t p = m;
        while (p > 0 && (v[i] > v[idx[p - 1]] || (isnan(v[idx[p - 1]]) && !isnan(v[i])))) p--;
        if (p >= k) continue;
        if (m < k) m++;
        memmove(idx + p + 1, idx + p, sizeof *idx * (size_t)(m - 1 - p));
        idx[p] = i;
    }
}

/* DeepSeek-V3's group-limited routing: sel[] of the experts outside the
 * n_group_used best groups (by the sum of their two best scores) becomes
 * -infinity. */
static void mask_groups(const tutti_moe_routing *r, float *sel) {
    const int32_t per = r->n_expert / r->n_groups;
    float score[TUTTI_MAX_EXPERTS];
    int32_t best[2], keep[TUTTI_MAX_EXPERTS];
    for (int32_t g = 0; g < r->n_groups; g++) {
        topk_desc(sel + g * per, per, 2, best);
        score[g] = sel[g * per + best[0]] + sel[g * per + best[1]];
    }
    topk_desc(score, r->n_groups, r->n_group_used, keep);
    for (int32_t g = 0; g < r->n_groups; g++) {
        bool kept = false;
        for (int32_t i = 0; i < r->n_group_used; i++) kept = kept || keep[i] == g;
        if (!kept)
            for (int32_t e = 0; e < per; e++) sel[g * per + e] = -INFINITY;
    }
}

void tutti_moe_route(const tutti_moe_routing *r, float *logits, int32_t n_tok, int32_t *sel, float *w) {
    const int32_t ne = r->n_expert, k = r->n_expert_used;
    float select[TUTTI_MAX_EXPERTS];
    for (int32_t t = 0; t < n_tok; t++) {
        float *p = logits + (int64_t)t * ne;
        int32_t *st = sel + (int64_t)t * k;
        float *wt = w + (int64_t)t * k;
        if (r->gating == TUTTI_GATING_SOFTMAX) tutti_softmax(p, ne);
        if (r->gating == TUTTI_GATING_SIGMOID)
            for (int32_t e = 0; e < ne; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
        for (int32_t e = 0; e < ne; e++) select[e] = r->probs_bias ? p[e] + r->probs_bias[e] : p[e];
        if (r->n_groups > 1) mask_groups(r, select);
        topk_desc(select, ne, k, st);
        for (int32_t j = 0; j < k; j++) wt[j] = p[st[j]];
        if (r->gating == TUTTI_GATING_SOFTMAX_WEIGHT) tutti_softmax(wt, k);
        if (r->norm_w) {
            double sum = 0; /* ggml_sum_rows: in double, in rank order */
            for (int32_t j = 0; j < k; j++) sum += wt[j];
            float s = (float)sum;
            if (!(s >= 6.103515625e-5f)) s = 6.103515625e-5f; /* clamp to the smallest normal f16 */
            for (int32_t j = 0; j < k; j++) wt[j] /= s;
        }
        if (r->scale != 0.0f && r->scale != 1.0f)
            for (int32_t j = 0; j < k; j++) wt[j] *= r->scale;
    }
}

void tutti_moe_routing_of(const tutti_model *m, const tutti_layer *L, tutti_moe_routing *r) {
    const tutti_hparams *hp = &m->hp;
    *r = (tutti_moe_routing){
        .n_expert = hp->n_expert,
        .n_expert_used = hp->n_expert_used,
        .gating = hp->gating,
        .probs_bias = L->exp_probs_b.data,
        .n_groups = hp->n_expert_groups,
        .n_group_used = hp->n_group_used,
        .norm_w = hp->expert_norm_w,
        .scale = hp->expert_weights_scale,
    };
}

/* Product of matrix e of the 3-D weight w with m rows x into y. */
static tutti_mm expert_mm(const tutti_weight *w, int32_t e, const float *x, int64_t m, float *y) {
    return (tutti_mm){tutti_weight_mat_type(w, e), tutti_weight_mat(w, e), w->n_rows, w->n_cols, x, m, y};
}

/* Row e of an f32 bias matrix (NULL when absent). */
static const float *bias_row(const tutti_weight *b, int32_t e) {
    return b->data ? (const float *)b->data + (int64_t)e * b->n_cols : NULL;
}

void tutti_moe_experts(tutti_threadpool *tp, const tutti_model *m, const tutti_layer *L, const int32_t *offs,
                       int32_t e0, int32_t e1, const float *xe, float *ge, float *ue, float *slots, tutti_mm *mm) {
    const int64_t n_embd = m->hp.n_embd, nf = m->hp.n_ff_exp;
    int n_mm = 0;
    for (int32_t e = e0; e < e1; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - o;
        if (n == 0) continue;
        mm[n_mm++] = expert_mm(&L->ffn_up_exps, e, xe + o * n_embd, n, ue + o * nf);
        mm[n_mm++] = expert_mm(&L->ffn_gate_exps, e, xe + o * n_embd, n, ge + o * nf);
    }
    tutti_matmul_batch(tp, mm, n_mm);
    for (int32_t e = e0; e < e1 && L->ffn_up_exps_b.data; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - o;
        tutti_fwd_add_bias(ue + o * nf, bias_row(&L->ffn_up_exps_b, e), n, nf);
        tutti_fwd_add_bias(ge + o * nf, bias_row(&L->ffn_gate_exps_b, e), n, nf);
    }
    /* the activation over the range's rows (elementwise: the same bits in
     * any grouping) */
    const int64_t r0 = offs[e0], nv = (offs[e1] - r0) * nf;
    if (m->arch->moe_oai) tutti_swiglu_oai(ge + r0 * nf, ue + r0 * nf, nv, 1.702f, 7.0f);
    else tutti_glu_pool(tp, ge + r0 * nf, ue + r0 * nf, nv, false);
    n_mm = 0;
    for (int32_t e = e0; e < e1; e++) {
        const int64_t o = offs[e], n = offs[e + 1] - o;
        if (n) mm[n_mm++] = expert_mm(&L->ffn_down_exps, e, ge + o * nf, n, slots + o * n_embd);
    }
    tutti_matmul_batch(tp, mm, n_mm);
    for (int32_t e = e0; e < e1 && L->ffn_down_exps_b.data; e++)
        tutti_fwd_add_bias(slots + offs[e] * n_embd, bias_row(&L->ffn_down_exps_b, e), offs[e + 1] - offs[e], n_embd);
}

/* Every routed expert of the batch: the rows routed to expert e are
 * mb->route[offs[e] .. offs[e + 1]); they are gathered in that order into
 * mb->xe and go through their experts (tutti_moe_experts) into mb->slots in
 * the same order, here or, with s->moe_remote, the other processes' share
 * there while this one computes its own. */
static void run_experts(tutti_session *s, const tutti_layer *L, int32_t n) {
    const tutti_model *m = s->model;
    const int64_t n_embd = m->hp.n_embd, k = m->hp.n_expert_used, rows = (int64_t)n * k;
    tutti_moe_bufs *mb = &s->moe;
    for (int64_t i = 0; i < rows; i++)
        memcpy(mb->xe + i * n_embd, s->h + mb->route[i] / k * n_embd, sizeof(float) * (size_t)n_embd);
    tutti_moe_remote *rm = s->moe_remote;
    const int32_t il = (int32_t)(L - m->layers);
    int32_t e0 = 0, e1 = m->hp.n_expert;
    if (rm) {
        e0 = rm->e0, e1 = rm->e1;
        if (rm->failed || rm->send(rm, il, mb->offs, mb->xe) < 0) rm->failed = true;
    }
    tutti_moe_experts(s->tp, m, L, mb->offs, e0, e1, mb->xe, mb->ge, mb->ue, mb->slots, mb->mm);
    if (rm && (rm->failed || rm->recv(rm, il, mb->offs, mb->slots) < 0)) {
        rm->failed = true; /* the pass's result is void: zeros instead of whatever the buffer held */
        memset(mb->slots, 0, sizeof(float) * (size_t)mb->offs[e0] * (size_t)n_embd);
        memset(mb->slots + (int64_t)mb->offs[e1] * n_embd, 0,
               sizeof(float) * (size_t)(rows - mb->offs[e1]) * (size_t)n_embd);
    }
}

/* The shared expert(s) of the n rows in s->h, added to s->o (qwen2moe:
 * scaled by sigmoid(h · gate_inp_shexp), computed as ggml does, silu(g)/g). */
static void shared_experts(tutti_session *s, const tutti_layer *L, int32_t n) {
    const tutti_hparams *hp = &s->model->hp;
    const int64_t n_embd = hp->n_embd;
    float *sh = s->moe.ye;
    tutti_fwd_ffn(s, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, hp->n_ff_shexp, s->h, n, sh);
    if (L->ffn_gate_inp_shexp.data) {
        float *g = s->moe.router; /* free again: one value per row */
        tutti_fwd_matmul(s, &L->ffn_gate_inp_shexp, s->h, n, g);
        for (int32_t t = 0; t < n; t++) {
            const float sig = g[t] / (1.0f + expf(-g[t])) / g[t];
            for (int64_t i = 0; i < n_embd; i++) sh[t * n_embd + i] *= sig;
        }
    }
    for (int64_t i = 0; i < (int64_t)n * n_embd; i++) s->o[i] += sh[i];
}

void tutti_ffn_moe(tutti_session *s, const tutti_layer *L, int32_t n) {
    const tutti_model *m = s->model;
    const tutti_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd;
    const int32_t ne = hp->n_expert, k = hp->n_expert_used;
    tutti_moe_bufs *mb = &s->moe;

    tutti_fwd_matmul(s, &L->ffn_gate_inp, s->h, n, mb->router);
    tutti_fwd_add_bias(mb->router, L->ffn_gate_inp_b.data, n, ne);
    tutti_moe_routing r;
    tutti_moe_routing_of(m, L, &r);
    tutti_moe_route(&r, mb->router, n, mb->sel, mb->sel_w);

    /* the slots t * k + j grouped by expert (counting sort: token order
     * within an expert); where[slot] = its row in that order */
    int32_t *offs = mb->offs;
    memset(offs, 0, sizeof *offs * (size_t)(ne + 1));
    for (int64_t i = 0; i < (int64_t)n * k; i++) offs[mb->sel[i] + 1]++;
    for (int32_t e = 0; e < ne; e++) offs[e + 1] += offs[e];
    for (int64_t i = 0; i < (int64_t)n * k; i++) {
        const int32_t row = offs[mb->sel[i]]++;
        mb->route[row] = (int32_t)i;
        mb->where[i] = row;
    }
    for (int32_t e = ne; e > 0; e--) offs[e] = offs[e - 1];
    offs[0] = 0;
    run_experts(s, L, n);

    /* weigh and add in rank order, as ggml adds the experts' views */
    for (int32_t t = 0; t < n; t++) {
        float *o = s->o + (int64_t)t * n_embd;
        for (int32_t j = 0; j < k; j++) {
            const float *y = mb->slots + (int64_t)mb->where[(int64_t)t * k + j] * n_embd;
            const float wj = mb->sel_w[(int64_t)t * k + j];
            for (int64_t i = 0; i < n_embd; i++) o[i] = j == 0 ? y[i] * wj : o[i] + y[i] * wj;
        }
    }
    if (L->ffn_up_shexp.data) shared_experts(s, L, n);
}
