/* Sessions: KV cache, activation buffers, the thread pool, and the public
 * tutti_session_* calls.  All memory is allocated in tutti_session_new; eval
 * allocates nothing. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "util/fp16.h"
#include "util/error.h"

#define MAX_CTX (1 << 22)
#define MAX_THREADS 512
#define MAX_UBATCH 512

tutti_session_params tutti_session_default_params(void) {
    tutti_session_params p = {.n_ctx = 0, .n_threads = 0};
    return p;
}

/* calloc of a * b * c elements of `size` bytes, refusing overflow. */
static void *alloc3(size_t a, size_t b, size_t c, size_t size) {
    if (b && a > SIZE_MAX / b) return NULL;
    size_t n = a * b;
    if (c && n > SIZE_MAX / c) return NULL;
    n *= c;
    if (n == 0) n = 1;
    return calloc(n, size);
}

/* YaRN as ggml's rope computes it (ext_factor 1, beta_fast 32, beta_slow 1):
 * rotation i turns by theta_i · (s·(1 - mix_i) + mix_i), s = 1/factor,
 * mix_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1), where lo and hi
 * are the rotations with 32 and 1 turns over the original context.  That
 * blend does not depend on the position, so it becomes a frequency divisor
 * of the existing ones. */
static float yarn_corr_dim(int n_rot, int n_ctx_orig, float n_turns, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (n_turns * 6.28318531f)) / (2.0f * logf(base));
}

static int yarn_factors(tutti_session *s) {
    const tutti_hparams *hp = &s->model->hp;
    const int n = hp->n_rot / 2;
    s->yarn_factors = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!s->yarn_factors) return tutti_set_error("tutti_session_new: out of memory");
    float lo = floorf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, 32.0f, hp->rope_base));
    float hi = ceilf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, 1.0f, hp->rope_base));
    if (lo < 0) lo = 0;
    if (hi > hp->n_rot - 1) hi = (float)(hp->n_rot - 1);
    for (int i = 0; i < n; i++) {
        float y = ((float)i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
        y = y < 0 ? 0 : y > 1 ? 1 : y;
        const float mix = 1.0f - y;
        const float ff = s->rope_factors ? s->rope_factors[i] : 1.0f;
        s->yarn_factors[i] = ff / (hp->yarn_scale * (1.0f - mix) + mix);
    }
    s->rope_factors = s->yarn_factors;
    return TUTTI_OK;
}

/* What sessions sharing a workspace hold in common (see
 * tutti_session_new_sharing): the thread pool (with the matmul's input
 * scratch) and the activations; the last session to go frees them. */
struct tutti_work {
    int refs;
    bool owns_tp; /* the pool is the sessions' own (not a batch's, batch.c) */
};

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The mixture-of-experts activations (moe.c), [ub] rows. */
static bool alloc_moe(tutti_moe_bufs *mb, const tutti_hparams *hp, size_t ub) {
    const size_t ne = (size_t)hp->n_expert, k = (size_t)hp->n_expert_used, d = (size_t)hp->n_embd;
    mb->router = alloc3(ub, ne, 1, sizeof(float));
    mb->sel = alloc3(ub, k, 1, sizeof(int32_t));
    mb->sel_w = alloc3(ub, k, 1, sizeof(float));
    mb->route = alloc3(ub, k, 1, sizeof(int32_t));
    mb->where = alloc3(ub, k, 1, sizeof(int32_t));
    mb->offs = alloc3(ne + 1, 1, 1, sizeof(int32_t));
    mb->xe = alloc3(ub * k, d, 1, sizeof(float));
    mb->ge = alloc3(ub * k, (size_t)hp->n_ff_exp, 1, sizeof(float));
    mb->ue = alloc3(ub * k, (size_t)hp->n_ff_exp, 1, sizeof(float));
    mb->slots = alloc3(ub * k, d, 1, sizeof(float));
    mb->ye = alloc3(ub, d, 1, sizeof(float));
    mb->mm = alloc3(2 * ne, 1, 1, sizeof(tutti_mm));
    return mb->router && mb->sel && mb->sel_w && mb->route && mb->where && mb->offs && mb->xe && mb->ge && mb->ue &&
           mb->slots && mb->ye && mb->mm;
}

static void free_moe(tutti_moe_bufs *mb) {
    free(mb->router), free(mb->sel), free(mb->sel_w), free(mb->route), free(mb->where), free(mb->offs);
    free(mb->xe), free(mb->ge), free(mb->ue), free(mb->slots), free(mb->ye), free(mb->mm);
}

/* The latent-attention activations (mla.c), [ub] rows. */
static bool alloc_mla(tutti_mla_bufs *mb, const tutti_hparams *hp, size_t ub) {
    const size_t nh = (size_t)hp->n_head, rope = (size_t)hp->n_rot, kvl = (size_t)hp->n_lora_kv;
    const size_t nope = (size_t)hp->head_dim_k_mla - rope, dv = (size_t)hp->head_dim_v_mla;
    mb->q = alloc3(ub, nh, (size_t)hp->head_dim_k_mla, sizeof(float));
    mb->qa = alloc3(ub, max_sz((size_t)hp->n_lora_q, 1), 1, sizeof(float));
    mb->kv = alloc3(ub, kvl + rope, 1, sizeof(float));
    mb->in = alloc3(ub, max_sz(TUTTI_MLA_HEADS * max_sz(nope, kvl), nh * rope), 1, sizeof(float));
    mb->out = alloc3(ub, TUTTI_MLA_HEADS, max_sz(kvl, dv), sizeof(float));
    mb->att = alloc3(ub, nh, dv, sizeof(float));
    return mb->q && mb->qa && mb->kv && mb->in && mb->out && mb->att;
}

static void free_mla(tutti_mla_bufs *mb) {
    free(mb->q), free(mb->qa), free(mb->kv), free(mb->in), free(mb->out), free(mb->att);
}

/* Every activation buffer of s, [ub] rows, the attention scratch for n_ctx
 * positions and the pool's matmul scratch (sized for the widest matmul
 * input). */
static int alloc_activations(tutti_session *s, size_t ub, int32_t n_ctx) {
    const tutti_model *model = s->model;
    const tutti_hparams *hp = &model->hp;
    const size_t nq = (size_t)hp->n_head * hp->head_dim_k, nk = (size_t)hp->n_head_kv * hp->head_dim_k,
                 nv = (size_t)hp->n_head_kv * hp->head_dim_v, no = (size_t)hp->n_head * hp->head_dim_v;
    const size_t n_ff = max_sz((size_t)hp->n_ff, (size_t)hp->n_ff_shexp);
    s->x = alloc3(ub, (size_t)hp->n_embd, 1, sizeof(float));
    s->h = alloc3(ub, (size_t)hp->n_embd, 1, sizeof(float));
    s->o = alloc3(ub, (size_t)hp->n_embd, 1, sizeof(float));
    s->q = alloc3(ub, nq, 1, sizeof(float));
    s->k = alloc3(ub, nk, 1, sizeof(float));
    s->v = alloc3(ub, nv, 1, sizeof(float));
    s->att = alloc3(ub, no, 1, sizeof(float));
    s->gate = alloc3(ub, 2, n_ff, sizeof(float)); /* room for a fused [gate; up] */
    s->up = alloc3(ub, n_ff, 1, sizeof(float));
    s->attn_scratch = alloc3(
        (size_t)tutti_threadpool_n_threads(s->tp),
        tutti_attn_scratch_floats(n_ctx, hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->head_dim_v), 1, sizeof(float));
    if (model->arch->fused_qkv) s->qkv = alloc3(ub, nq + nk + nv, 1, sizeof(float));
    /* the matmul's rounded copy of its input: widest input row is one of these */
    size_t max_in = max_sz(max_sz((size_t)hp->n_embd, no), max_sz(n_ff, (size_t)hp->n_ff_exp));
    max_in = max_sz(max_in, max_sz((size_t)hp->n_lora_q, (size_t)hp->head_dim_k_mla));
    max_in = max_sz(max_in, max_sz((size_t)hp->n_lora_kv, (size_t)hp->n_head * hp->head_dim_v_mla));
    /* a batch of products (tutti_matmul_batch) converts all their inputs at
     * once: every expert's rows (and a 64-byte pad each), every head's */
    size_t scratch = ub * max_in;
    if (hp->n_expert > 0)
        scratch = max_sz(scratch, ub * (size_t)hp->n_expert_used * max_sz((size_t)hp->n_embd, (size_t)hp->n_ff_exp) +
                                      16 * (size_t)hp->n_expert);
    if (model->arch->mla)
        scratch = max_sz(scratch, ub * TUTTI_MLA_HEADS * max_sz((size_t)hp->n_lora_kv, (size_t)hp->head_dim_k_mla) +
                                      16 * TUTTI_MLA_HEADS);
    if (!tutti_threadpool_scratch(s->tp, scratch))
        return tutti_set_error("tutti_session_new: out of memory for the activation scratch");
    if (!s->x || !s->h || !s->o || !s->q || !s->k || !s->v || !s->att || !s->gate || !s->up || !s->attn_scratch ||
        (model->arch->fused_qkv && !s->qkv) || (hp->n_expert > 0 && !alloc_moe(&s->moe, hp, ub)) ||
        (model->arch->mla && !alloc_mla(&s->mla, hp, ub)))
        return tutti_set_error("tutti_session_new: out of memory for the activations (n_ctx = %d)", n_ctx);
    return TUTTI_OK;
}

tutti_session *tutti_session_new(const tutti_model *model, const tutti_session_params *params) {
    return tutti_session_new_sharing(model, params, NULL);
}

/* The activations of one pass of up to ub tokens, the attention scratch
 * for n_ctx positions and the matmul's input scratch, on thread pool tp
 * (s->work counts the sessions sharing them). */
int tutti_session_alloc_work(tutti_session *s, int32_t ub_tokens, int32_t n_ctx, tutti_threadpool *tp, bool owns_tp) {
    if (!(s->work = calloc(1, sizeof *s->work))) {
        if (owns_tp) tutti_threadpool_free(tp);
        return tutti_set_error("tutti_session_new: out of memory");
    }
    s->work->refs = 1;
    s->work->owns_tp = owns_tp;
    s->tp = tp;
    return alloc_activations(s, (size_t)ub_tokens, n_ctx);
}

/* The parts every session owns: the KV cache (unless !kv: a batch's
 * workspace), the logits row, the rope factors.  NULL + error. */
tutti_session *tutti_session_alloc_own(const tutti_model *model, const tutti_session_params *params, bool kv) {
    if (!model) {
        tutti_set_error("tutti_session_new: model is NULL");
        return NULL;
    }
    tutti_session_params p = params ? *params : tutti_session_default_params();
    const tutti_hparams *hp = &model->hp;
    if (p.n_ctx < 0 || p.n_ctx > MAX_CTX) {
        tutti_set_error("tutti_session_new: n_ctx = %d is out of range (0 = default, up to %d)", p.n_ctx, MAX_CTX);
        return NULL;
    }
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.ctx_shift && p.n_keep < 0) {
        tutti_set_error("tutti_session_new: n_keep = %d is negative", p.n_keep);
        return NULL;
    }
    /* as llama-server: at most n_ctx - 4, so that a shift drops something */
    if (p.ctx_shift && p.n_keep > p.n_ctx - 4) p.n_keep = p.n_ctx - 4 > 0 ? p.n_ctx - 4 : 0;
    tutti_session *s = calloc(1, sizeof *s);
    if (!s) {
        tutti_set_error("tutti_session_new: out of memory");
        return NULL;
    }
    s->model = model;
    s->n_ctx = p.n_ctx;
    s->ctx_shift = p.ctx_shift;
    s->n_keep = p.n_keep;
    /* llama.cpp: rope_freqs if present, else Phi-3's long factors when the
     * context exceeds the original one, else the short ones */
    s->rope_factors = model->rope_freqs.data      ? model->rope_freqs.data
                      : s->n_ctx > hp->n_ctx_orig ? model->rope_long.data
                                                  : model->rope_short.data;
    if (hp->yarn_scale > 0 && yarn_factors(s)) goto fail;
    s->n_ubatch = p.n_ctx < MAX_UBATCH ? p.n_ctx : MAX_UBATCH;
    size_t nk, nv;
    tutti_cache_widths(model, &nk, &nv);
    if (kv) {
        s->k_cache = alloc3((size_t)hp->n_layer, (size_t)s->n_ctx, nk, sizeof(uint16_t));
        s->v_cache = nv ? alloc3((size_t)hp->n_layer, (size_t)s->n_ctx, nv, sizeof(uint16_t)) : NULL;
    }
    s->logits = alloc3((size_t)hp->n_vocab, 1, 1, sizeof(float));
    if ((kv && (!s->k_cache || (nv && !s->v_cache))) || !s->logits) {
        tutti_set_error("tutti_session_new: out of memory for n_ctx = %d (KV cache %.1f MiB)", s->n_ctx,
                        2.0 * hp->n_layer * (double)s->n_ctx * (double)(nk + nv) / (1 << 20));
        goto fail;
    }
    return s;
fail:
    tutti_session_free(s);
    return NULL;
}

int32_t tutti_session_threads(int32_t n_threads) {
    if (n_threads != 0) return n_threads;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : (c > MAX_THREADS ? MAX_THREADS : (int32_t)c);
}

tutti_session *tutti_session_new_sharing(const tutti_model *model, const tutti_session_params *params,
                                         tutti_session *with) {
    tutti_session_params p = params ? *params : tutti_session_default_params();
    if (p.n_threads < 0 || p.n_threads > MAX_THREADS) {
        tutti_set_error("tutti_session_new: n_threads = %d is out of range (0 = all CPUs, up to %d)", p.n_threads,
                        MAX_THREADS);
        return NULL;
    }
    p.n_threads = tutti_session_threads(p.n_threads);
    tutti_session *s = tutti_session_alloc_own(model, &p, true);
    if (!s) return NULL;
    if (with) {
        if (with->model != model || with->n_ctx != s->n_ctx || with->pipe || with->batch ||
            tutti_threadpool_n_threads(with->tp) != p.n_threads) {
            tutti_set_error("tutti_session_new_sharing: the sessions differ (model, n_ctx, threads, split or batch)");
            goto fail;
        }
        s->work = with->work;
        s->work->refs++;
        s->tp = with->tp;
        s->x = with->x, s->h = with->h, s->o = with->o, s->q = with->q, s->k = with->k, s->v = with->v;
        s->att = with->att, s->gate = with->gate, s->up = with->up, s->qkv = with->qkv;
        s->attn_scratch = with->attn_scratch;
        s->moe = with->moe, s->mla = with->mla;
        return s;
    }
    tutti_threadpool *tp = tutti_threadpool_new(p.n_threads);
    if (!tp) goto fail;
    if (tutti_session_alloc_work(s, s->n_ubatch, s->n_ctx, tp, true) < 0) goto fail;
    return s;
fail:
    tutti_session_free(s);
    return NULL;
}

void tutti_session_free(tutti_session *s) {
    if (!s) return;
    if (s->pipe) s->pipe->free(s->pipe);
    if (s->moe_remote) s->moe_remote->free(s->moe_remote);
    if (s->batch) tutti_batch_detach(s);
    if (s->work && --s->work->refs == 0) { /* the last of the sessions sharing them */
        if (s->work->owns_tp) tutti_threadpool_free(s->tp);
        free(s->x);
        free(s->h);
        free(s->o);
        free(s->qkv);
        free(s->q);
        free(s->k);
        free(s->v);
        free(s->att);
        free(s->gate);
        free(s->up);
        free(s->attn_scratch);
        free_moe(&s->moe);
        free_mla(&s->mla);
        free(s->work);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s->logits);
    free(s->yarn_factors);
    free(s->rows);
    free(s);
}

/* With routed experts on other ranks (--split-experts): TUTTI_ERR once an
 * exchange failed (that pass's error is set; later passes say so). */
static int remote_failed(const tutti_session *s, bool before) {
    if (!s->moe_remote || !s->moe_remote->failed) return TUTTI_OK;
    if (before) tutti_set_error("--split-experts: the expert split is broken by an earlier error");
    return TUTTI_ERR;
}

/* The checks of an eval of ids[0..n) on s (TUTTI_OK or an error). */
static int check_eval(const tutti_session *s, const int32_t *ids, int32_t n) {
    if (!s) return tutti_set_error("tutti_session_eval: session is NULL");
    if (n < 0) return tutti_set_error("tutti_session_eval: n = %d is negative", n);
    if (n == 0) return TUTTI_OK;
    if (!ids) return tutti_set_error("tutti_session_eval: ids is NULL");
    if (!s->ctx_shift && (int64_t)s->n_past + n > s->n_ctx)
        return tutti_set_error("tutti_session_eval: context full: n_past %d + %d new tokens > n_ctx %d (rewind, "
                               "or create the session with a larger n_ctx)",
                               s->n_past, n, s->n_ctx);
    if (s->ctx_shift && (int64_t)tutti_session_n_tokens(s) + n > INT32_MAX)
        return tutti_set_error("tutti_session_eval: the timeline would pass 2^31 tokens");
    const int32_t n_vocab = s->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return tutti_set_error("tutti_session_eval: token id %d at index %d is out of range (n_vocab %d)", ids[i],
                                   i, n_vocab);
    return TUTTI_OK;
}

/* Runs ids[0..n) at n_past (room checked by the caller) in micro-batches,
 * or as the batch's requests for a batched session. */
static int eval_run(tutti_session *s, const int32_t *ids, int32_t n, float *logits) {
    if (s->pipe) return s->pipe->eval(s->pipe, s, ids, n, logits);
    if (remote_failed(s, true) < 0) return TUTTI_ERR;
    if (s->batch) return tutti_batch_eval(&s, &ids, &n, &logits, NULL, 1) < 0 ? TUTTI_ERR : TUTTI_OK;
    const int32_t n_vocab = s->model->hp.n_vocab;
    for (int32_t done = 0; done < n;) {
        const int32_t chunk = n - done < s->n_ubatch ? n - done : s->n_ubatch;
        /* Without a caller buffer only the last row of each micro-batch is
         * computed (one row; the final one is what the caller gets). */
        float *out = logits ? logits + (int64_t)done * n_vocab : NULL;
        tutti_forward_ubatch(s, ids + done, chunk, out);
        if (remote_failed(s, false) < 0) return TUTTI_ERR;
        s->n_past += chunk;
        done += chunk;
    }
    s->has_logits = true;
    return TUTTI_OK;
}

/* With ctx_shift: llama.cpp's rule, before each token: at n_past = n_ctx - 1
 * the oldest half after n_keep goes.  The tokens between two such points go
 * in one pass. */
static int eval_shifting(tutti_session *s, const int32_t *ids, int32_t n, float *logits) {
    const int32_t n_vocab = s->model->hp.n_vocab;
    for (int32_t done = 0; done < n;) {
        if (s->n_past + 1 >= s->n_ctx) {
            int32_t n_discard = (s->n_past - s->n_keep) / 2;
            if (n_discard < 1)
                return tutti_set_error("tutti_session_eval: context full (n_ctx %d) and nothing to shift out "
                                       "(n_keep %d)",
                                       s->n_ctx, s->n_keep);
            if (tutti_session_shift(s, s->n_keep, n_discard) < 0) return TUTTI_ERR;
        }
        int32_t room = s->n_ctx - 1 - s->n_past, chunk = n - done < room ? n - done : room;
        if (eval_run(s, ids + done, chunk, logits ? logits + (int64_t)done * n_vocab : NULL) < 0) return TUTTI_ERR;
        done += chunk;
    }
    return TUTTI_OK;
}

int tutti_session_eval(tutti_session *s, const int32_t *ids, int32_t n, float *logits) {
    if (n == 0 && s) return TUTTI_OK;
    if (check_eval(s, ids, n) < 0) return TUTTI_ERR;
    if (s->ctx_shift && s->n_past + n > s->n_ctx - 1) return eval_shifting(s, ids, n, logits);
    return eval_run(s, ids, n, logits);
}

int tutti_session_eval_multi(tutti_session *const *ss, const int32_t *const *ids, const int32_t *n, int32_t n_seq) {
    return tutti_session_eval_multi_rows(ss, ids, n, NULL, n_seq);
}

int tutti_session_eval_multi_rows(tutti_session *const *ss, const int32_t *const *ids, const int32_t *n,
                                  float *const *out, int32_t n_seq) {
    if (n_seq < 1 || !ss || !ids || !n) return tutti_set_error("tutti_session_eval_multi: no sequences");
    for (int32_t i = 0; i < n_seq; i++) {
        tutti_session *s = ss[i];
        if (!s || n[i] < 1 || !ids[i])
            return tutti_set_error("tutti_session_eval_multi: sequence %d is empty or has no session", i);
        if (s->model != ss[0]->model || s->n_ctx != ss[0]->n_ctx)
            return tutti_set_error("tutti_session_eval_multi: sessions of different models or contexts");
        for (int32_t j = 0; j < i; j++)
            if (ss[j] == s) return tutti_set_error("tutti_session_eval_multi: session given twice");
        if (!s->ctx_shift && (int64_t)s->n_past + n[i] > s->n_ctx)
            return tutti_set_error("tutti_session_eval_multi: context full: n_past %d + %d new tokens > n_ctx %d",
                                   s->n_past, n[i], s->n_ctx);
        for (int32_t k = 0; k < n[i]; k++)
            if (ids[i][k] < 0 || ids[i][k] >= s->model->hp.n_vocab)
                return tutti_set_error("tutti_session_eval_multi: token id %d is out of range (n_vocab %d)", ids[i][k],
                                       s->model->hp.n_vocab);
    }
    tutti_session *s0 = ss[0];
    for (int32_t i = 0; i < n_seq; i++)
        if (!ss[i]->batch != !s0->batch)
            return tutti_set_error("tutti_session_eval_multi: batched sessions mixed with others");
    if (s0->batch) {
        /* a sequence reaching a context shift: each on its own (the shift
         * comes first) */
        bool shift = false;
        for (int32_t i = 0; i < n_seq; i++) shift |= ss[i]->ctx_shift && ss[i]->n_past + n[i] > ss[i]->n_ctx - 1;
        if (!shift) return tutti_batch_eval(ss, ids, n, out, NULL, n_seq); /* the steps it took */
        for (int32_t i = 0; i < n_seq; i++)
            if (tutti_session_eval(ss[i], ids[i], n[i], out ? out[i] : NULL) < 0) return TUTTI_ERR;
        return n_seq;
    }
    /* a model split by layers: the pipeline runs each batch (src/mpi/split.c) */
    for (int32_t i = 0; i < n_seq; i++)
        if (!ss[i]->pipe != !s0->pipe || (s0->pipe && !s0->pipe->eval_segments))
            return tutti_set_error("tutti_session_eval_multi: sessions of a model split by layers mixed with others "
                                   "(or a pipeline that takes no batches)");
    const int32_t ub = s0->n_ubatch, n_vocab = s0->model->hp.n_vocab;
    if (n_seq > 1 && s0->cap_rows < n_seq) {
        float *r = realloc(s0->rows, sizeof(float) * (size_t)n_seq * (size_t)n_vocab);
        if (!r) return tutti_set_error("tutti_session_eval_multi: out of memory");
        s0->rows = r, s0->cap_rows = n_seq;
    }
    tutti_fwd_seg *seg = malloc(sizeof *seg * (size_t)n_seq);
    if (!seg) return tutti_set_error("tutti_session_eval_multi: out of memory");
    int n_pass = 0;
    for (int32_t i = 0; i < n_seq;) {
        /* longer than a micro-batch, or reaching a context shift, or all
         * rows of a model split by layers (its pipeline gives last rows):
         * on its own */
        if (n[i] > ub || (ss[i]->ctx_shift && ss[i]->n_past + n[i] > ss[i]->n_ctx - 1) || (s0->pipe && out && out[i])) {
            if (tutti_session_eval(ss[i], ids[i], n[i], out ? out[i] : NULL) < 0) {
                free(seg);
                return TUTTI_ERR;
            }
            n_pass += (n[i] + ub - 1) / ub;
            i++;
            continue;
        }
        int32_t k = 0, tok = 0;
        while (i + k < n_seq && n[i + k] <= ub && tok + n[i + k] <= ub &&
               !(ss[i + k]->ctx_shift && ss[i + k]->n_past + n[i + k] > ss[i + k]->n_ctx - 1) &&
               !(s0->pipe && out && out[i + k])) {
            seg[k] = (tutti_fwd_seg){.s = ss[i + k], .ids = ids[i + k], .n = n[i + k], .out = out ? out[i + k] : NULL};
            tok += n[i + k];
            k++;
        }
        if (!s0->pipe) {
            if (remote_failed(s0, true) == 0) tutti_forward_segments(s0, seg, k, NULL, s0->rows);
            if (remote_failed(s0, false) < 0) {
                free(seg);
                return TUTTI_ERR;
            }
        } else if (s0->pipe->eval_segments(s0->pipe, s0, seg, k, s0->rows) < 0) {
            free(seg);
            return TUTTI_ERR;
        }
        for (int32_t j = 0; j < k; j++) {
            seg[j].s->n_past += seg[j].n;
            seg[j].s->has_logits = true;
        }
        n_pass++;
        i += k;
    }
    free(seg);
    return n_pass;
}

int tutti_session_embed(tutti_session *s, const int32_t *ids, int32_t n, float *rows) {
    if (n == 0 && s) return TUTTI_OK;
    if (check_eval(s, ids, n) < 0) return TUTTI_ERR;
    if (!rows) return tutti_set_error("tutti_session_embed: rows is NULL");
    if (s->pipe) return tutti_set_error("tutti_session_embed: not for a model split by layers");
    if ((int64_t)s->n_past + n > s->n_ctx) /* no context shift: every position is part of the vector */
        return tutti_set_error("tutti_session_embed: n_past %d + %d tokens > n_ctx %d", s->n_past, n, s->n_ctx);
    s->has_logits = false;
    if (s->batch) return tutti_batch_eval(&s, &ids, &n, NULL, &rows, 1) < 0 ? TUTTI_ERR : TUTTI_OK;
    for (int32_t done = 0; done < n;) {
        const int32_t chunk = n - done < s->n_ubatch ? n - done : s->n_ubatch;
        const tutti_fwd_seg seg = {.s = s,
                                   .ids = ids + done,
                                   .n = chunk,
                                   .embd = rows + (size_t)done * (size_t)s->model->hp.n_embd,
                                   .no_logits = true};
        tutti_forward_segments(s, &seg, 1, NULL, NULL);
        s->n_past += chunk;
        done += chunk;
    }
    return TUTTI_OK;
}

const float *tutti_session_logits(const tutti_session *s) { return s && s->has_logits ? s->logits : NULL; }
int32_t tutti_session_n_past(const tutti_session *s) { return s ? s->n_past : 0; }
int32_t tutti_session_n_ctx(const tutti_session *s) { return s ? s->n_ctx : 0; }

int tutti_session_rewind(tutti_session *s, int32_t n_past) {
    if (!s) return tutti_set_error("tutti_session_rewind: session is NULL");
    if (n_past < 0 || n_past > s->n_past)
        return tutti_set_error("tutti_session_rewind: n_past = %d is outside 0..%d (the current length)", n_past,
                               s->n_past);
    /* Cache rows >= n_past are simply overwritten by later evals. */
    s->n_past = n_past;
    if (n_past == 0) s->has_logits = false, s->n_discarded = s->shift_floor = 0;
    return TUTTI_OK;
}

/* ---- context shift ---- */

int tutti_session_shift(tutti_session *s, int32_t n_keep, int32_t n_discard) {
    if (!s) return tutti_set_error("tutti_session_shift: session is NULL");
    if (s->pipe) return tutti_set_error("tutti_session_shift: a model split over MPI ranks cannot shift its context");
    if (n_keep < 0 || n_discard < 0 || (int64_t)n_keep + n_discard > s->n_past)
        return tutti_set_error("tutti_session_shift: keep %d, discard %d: outside the %d cached positions", n_keep,
                               n_discard, s->n_past);
    if (n_discard == 0) return TUTTI_OK;
    const tutti_model *m = s->model;
    const tutti_hparams *hp = &m->hp;
    /* latent attention's key rows hold the compressed kv and, after it, the
     * rope part: re-rotating them as heads would turn the wrong values */
    if (m->arch->mla)
        return tutti_set_error("tutti_session_shift: %s uses latent attention, whose context cannot shift yet; "
                               "raise -c (or turn the context shift off)",
                               m->path);
    size_t nk, nv;
    tutti_cache_widths(m, &nk, &nv);
    const int32_t n_move = s->n_past - n_keep - n_discard;
    /* s->k (the activations' [n_ubatch][nk] keys) is free between passes; a
     * batched session has no activations of its own */
    float *row = s->k ? s->k : malloc(sizeof(float) * (size_t)s->n_ubatch * nk);
    if (!row) return tutti_set_error("tutti_session_shift: out of memory");
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const tutti_layer *L = &m->layers[il];
        uint16_t *kc = s->k_cache + (size_t)il * (size_t)s->n_ctx * nk;
        uint16_t *vc = s->v_cache + (size_t)il * (size_t)s->n_ctx * nv;
        for (int32_t p = 0; p < n_move; p += s->n_ubatch) {
            const int32_t c = n_move - p < s->n_ubatch ? n_move - p : s->n_ubatch;
            const uint16_t *src = kc + (size_t)(n_keep + n_discard + p) * nk;
            for (size_t j = 0; j < (size_t)c * nk; j++) row[j] = tutti_fp16_to_f32(src[j]);
            /* every row turned by the same -n_discard positions: the chunk
             * is one "token" of c * n_head_kv heads */
            tutti_rope(row, 1, c * hp->n_head_kv, hp->head_dim_k, hp->n_rot, -n_discard, L->rope_base, L->rope_scale,
                       s->rope_factors, m->arch->rope_mode);
            tutti_f32_to_f16_row(row, kc + (size_t)(n_keep + p) * nk, (int64_t)c * (int64_t)nk);
        }
        memmove(vc + (size_t)n_keep * nv, vc + (size_t)(n_keep + n_discard) * nv,
                sizeof(uint16_t) * nv * (size_t)n_move);
    }
    if (row != s->k) free(row);
    s->n_past -= n_discard;
    s->n_discarded += n_discard;
    s->shift_floor = s->n_past + s->n_discarded;
    return TUTTI_OK;
}

int32_t tutti_session_n_tokens(const tutti_session *s) { return s ? s->n_past + s->n_discarded : 0; }

int32_t tutti_session_rewind_floor(const tutti_session *s) { return s ? s->shift_floor : 0; }

int32_t tutti_session_rewind_tokens(tutti_session *s, int32_t n_tokens) {
    if (!s) return tutti_set_error("tutti_session_rewind_tokens: session is NULL");
    if (n_tokens < 0 || n_tokens > tutti_session_n_tokens(s))
        return tutti_set_error("tutti_session_rewind_tokens: %d is outside 0..%d (the timeline's length)", n_tokens,
                               tutti_session_n_tokens(s));
    if (n_tokens < s->shift_floor) n_tokens = 0; /* the rows it needs were shifted out */
    if (tutti_session_rewind(s, n_tokens ? n_tokens - s->n_discarded : 0) < 0) return TUTTI_ERR;
    return n_tokens;
}

void tutti_cache_widths(const tutti_model *m, size_t *nk, size_t *nv) {
    const tutti_hparams *hp = &m->hp;
    *nk = (size_t)hp->n_head_kv * hp->head_dim_k;
    /* latent attention: values are read from the key rows (no v_cache) */
    *nv = m->arch->mla ? 0 : (size_t)hp->n_head_kv * hp->head_dim_v;
}

void tutti_cache_copy_rows(tutti_session *d, const tutti_session *s, int32_t il0, int32_t il1, int32_t k) {
    size_t nk, nv;
    tutti_cache_widths(s->model, &nk, &nv);
    for (int32_t l = il0; l < il1; l++) {
        memcpy(d->k_cache + (size_t)l * (size_t)d->n_ctx * nk, s->k_cache + (size_t)l * (size_t)s->n_ctx * nk,
               sizeof(uint16_t) * nk * (size_t)k);
        if (nv)
            memcpy(d->v_cache + (size_t)l * (size_t)d->n_ctx * nv, s->v_cache + (size_t)l * (size_t)s->n_ctx * nv,
                   sizeof(uint16_t) * nv * (size_t)k);
    }
}

void tutti_session_copy_tokens(tutti_session *d, const tutti_session *s, int32_t n_tokens) {
    const int32_t k = n_tokens - s->n_discarded; /* the cache rows of that state */
    tutti_cache_copy_rows(d, s, 0, s->model->hp.n_layer, k);
    d->n_past = k;
    d->n_discarded = s->n_discarded;
    d->shift_floor = s->shift_floor;
    d->has_logits = false;
}
