/* The `model` layer (internal): hyper-parameters, weights bound by name, and
 * the per-architecture switches that drive ONE generic decoder-only
 * transformer forward pass (forward.c).  Public entry points are in
 * include/tutti.h (tutti_model_*, tutti_session_*).
 *
 * Adding an architecture = one row in the arch table (arch.c) plus, at most,
 * a new switch here used by the loader (hparams.c, tensors.c) and the
 * forward pass (forward.c; the routed experts in moe.c, latent attention in
 * mla.c).  There is no per-architecture copy of the forward pass. */
#ifndef TUTTI_MODEL_H
#define TUTTI_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tutti.h"

/* Per-architecture switches (data, not code). */
typedef enum tutti_ffn_act { TUTTI_ACT_SILU, TUTTI_ACT_GELU_TANH } tutti_ffn_act;

/* Mixture-of-experts switches (see moe.c for the routing they drive). */
typedef enum tutti_moe_kind {
    TUTTI_MOE_NONE = 0, /* dense only: expert_count is refused */
    TUTTI_MOE_OPTIONAL, /* MoE layers when expert_count > 0 (llama: Mixtral) */
    TUTTI_MOE_REQUIRED, /* every layer past the leading dense ones routes */
} tutti_moe_kind;
/* How router logits become expert weights (llama.cpp's expert_gating_func):
 * softmax over all experts, an independent sigmoid per expert, or (gpt-oss)
 * the raw logits select and a softmax over the selected ones weighs. */
typedef enum tutti_gating {
    TUTTI_GATING_SOFTMAX = 1,
    TUTTI_GATING_SIGMOID = 2,
    TUTTI_GATING_SOFTMAX_WEIGHT = 3
} tutti_gating;
/* Width of a routed expert: feed_forward_length itself (llama, olmoe,
 * granitemoe), expert_feed_forward_length with the default
 * feed_forward_length / expert_used_count (qwen2moe, qwen3moe), or the key
 * required (deepseek2, glm4moe, gpt-oss). */
typedef enum tutti_exp_width { TUTTI_EXPW_N_FF, TUTTI_EXPW_KEY_OR_DIV, TUTTI_EXPW_KEY } tutti_exp_width;
/* Shared experts beside the routed ones: none, expert_shared_feed_forward_length
 * wide gated by sigmoid(ffn_gate_inp_shexp . x) (qwen2moe; default width
 * feed_forward_length), expert_shared_count x the expert width (deepseek2,
 * glm4moe), or expert_shared_feed_forward_length when present (granitemoe). */
typedef enum tutti_shexp_kind {
    TUTTI_SHEXP_NONE,
    TUTTI_SHEXP_GATED,
    TUTTI_SHEXP_COUNT,
    TUTTI_SHEXP_LEN
} tutti_shexp_kind;

typedef struct tutti_arch {
    const char *name;          /* general.architecture, also the metadata key prefix */
    tutti_rope_mode rope_mode; /* NORMAL (llama) or NEOX (qwen, gemma, phi3) */
    tutti_ffn_act act;         /* gate activation of the gated FFN */
    bool fused_qkv;            /* blk.N.attn_qkv = [q; k; v] rows instead of attn_q/k/v */
    bool fused_gate_up;        /* blk.N.ffn_up = [gate; up] rows, no ffn_gate */
    bool qk_norm;              /* blk.N.attn_q_norm / attn_k_norm: RMSNorm per head before rope */
    bool post_norms;           /* blk.N.post_attention_norm / post_ffw_norm on the branch outputs */
    bool embd_scale;           /* token embeddings × sqrt(n_embd) (Gemma) */
    /* Sliding-window layer pattern: 0 = no sliding window; p > 0 = layer il
     * is local (window n_swa) when il % p < p - 1 and global otherwise
     * (gemma2: 2, gemma3: 6 = five local, one global). */
    int swa_pattern; /* default of attention.sliding_window_pattern */
    /* Local layers use rope.freq_base_swa in both Gemmas; this flag: its
     * default is 10000 (not rope.freq_base) and local layers are not
     * position-scaled (gemma3). */
    bool swa_local_rope_base;
    int32_t swa_default; /* attention.sliding_window when absent (gemma2: 4096; 0 = no window) */
    /* Soft-capping as llama.cpp reads it: gemma2 caps attention scores and
     * final logits (attn_logit_softcapping / final_logit_softcapping,
     * defaults 50 and 30); gemma3 caps the final logits only when the key is
     * there; the other architectures ignore both keys. */
    bool softcap;
    bool final_softcap_key;
    /* block_count of the size whose query scale is 1/sqrt(n_embd/n_head)
     * instead of 1/sqrt(head_dim) (Gemma 2 and 3 27B, after gemma_pytorch's
     * query_pre_attn_scalar; llama.cpp decides the size by layer count). */
    int32_t n_layer_scale_embd;
    bool rot_full;  /* rope.dimension_count must equal head_dim (llama, qwen2, qwen3) */
    bool no_output; /* output.weight is refused: the output is always token_embd (gemma2) */
    bool longrope;  /* rope_factors_long/short tensors (Phi-3 LongRoPE) */
    /* The 1/sqrt(head_dim) attention scale multiplies q (after rope) instead
     * of the scores (Gemma, Phi-3 in llama.cpp); the same in exact
     * arithmetic, but it decides what gets rounded to f16. */
    bool attn_scale_on_q;

    /* ---- mixture of experts (llama.cpp's build_moe_ffn) ---- */
    tutti_moe_kind moe;
    tutti_gating gating; /* default of expert_gating_func */
    bool gating_key;     /* expert_gating_func is read (deepseek2, glm4moe) */
    bool moe_norm_w;     /* top-k weights renormalized to sum 1 (default of expert_weights_norm) */
    bool moe_norm_key;   /* expert_weights_norm is read (deepseek2, glm4moe) */
    tutti_exp_width exp_width;
    tutti_shexp_kind shexp;
    bool dense_lead; /* leading_dense_block_count dense layers first (deepseek2, glm4moe) */
    int exp_probs_b; /* ffn exp_probs_b selection bias: 0 none, 1 optional, 2 required */
    bool moe_oai;    /* gpt-oss: router and expert biases, clamped SwiGLU (alpha 1.702, limit 7) */
    /* ---- attention variants ---- */
    bool attn_out_bias;        /* optional attn_output.bias (llama, granitemoe, gpt-oss) */
    bool attn_sinks;           /* attn_sinks: one learnt logit per head in every softmax (gpt-oss) */
    bool qk_norm_full;         /* q/k RMS norms over the whole projection, not per head (olmoe) */
    bool qk_norm_optional;     /* q/k norms when present (glm4moe) */
    bool q_is_n_embd;          /* head_count x head size must be embedding_length (qwen2moe, olmoe) */
    bool mla;                  /* DeepSeek multi-head latent attention (deepseek2) */
    bool granite_scales;       /* embedding_scale, residual_scale, attention.scale, logit_scale */
    bool yarn_with_swa;        /* YaRN on every layer, sliding-window ones too (gpt-oss) */
    bool swa_required;         /* attention.sliding_window must be there (gpt-oss) */
    const char *ffn_norm_name; /* the pre-FFN norm's tensor (NULL: ffn_norm; gpt-oss, glm4moe:
                                   post_attention_norm) */
} tutti_arch;

/* Most experts a file may have (llama.cpp's LLAMA_MAX_EXPERTS). */
#define TUTTI_MAX_EXPERTS 512

/* Looks up an architecture by name; NULL if unsupported. */
const tutti_arch *tutti_arch_find(const char *name, size_t len);
/* Comma-separated list of supported names (for error messages). */
const char *tutti_arch_list(void);

/* A weight bound to a GGUF tensor: data stays in the mapping.  2-D tensors
 * are n_rows rows of n_cols elements (GGUF ne[0] = n_cols); 1-D tensors have
 * n_rows = 1.  data == NULL: tensor absent (optional). */
typedef struct tutti_weight {
    const void *data;
    int type;
    int64_t n_cols, n_rows;
    int64_t n_mat; /* 3-D tensors (experts, per-head MLA matrices): n_mat matrices of n_rows x n_cols,
                      one after the other (tutti_weight_mat); 1 otherwise */
    /* A 3-D weight placed in part (a rank's own experts, --split-experts):
     * matrices [part0, part1) are at part, of type part_type (copied or
     * repacked), the others still where data points (type).  part NULL:
     * all n_mat at data. */
    const void *part;
    int part_type;
    int64_t part0, part1;
} tutti_weight;

/* Matrix i of a 3-D weight (expert i, head i): its first row, and its type. */
const void *tutti_weight_mat(const tutti_weight *w, int64_t i);
int tutti_weight_mat_type(const tutti_weight *w, int64_t i);

typedef struct tutti_layer {
    tutti_weight attn_norm; /* f32 [n_embd] */
    tutti_weight wq, wk,
        wv;            /* [n_head*head_dim_k][n_embd], [n_head_kv*head_dim_k][n_embd], [n_head_kv*head_dim_v][n_embd] */
    tutti_weight wqkv; /* fused: [q + k + v rows][n_embd] */
    tutti_weight bq, bk, bv;       /* optional f32 biases of the q/k/v projections */
    tutti_weight q_norm, k_norm;   /* f32 [head_dim_k] */
    tutti_weight wo;               /* [n_embd][n_head*head_dim_v] */
    tutti_weight post_attn_norm;   /* f32 [n_embd] */
    tutti_weight ffn_norm;         /* f32 [n_embd] */
    tutti_weight ffn_gate, ffn_up; /* [n_ff][n_embd]; fused up: [2*n_ff][n_embd] */
    tutti_weight ffn_down;         /* [n_embd][n_ff] */
    tutti_weight post_ffn_norm;    /* f32 [n_embd] */
    tutti_weight bo;               /* optional f32 [n_embd]: attn_output.bias */
    tutti_weight attn_sinks;       /* f32 [n_head] (gpt-oss) */
    /* mixture of experts: the layer routes when ffn_gate_inp.data != NULL */
    tutti_weight ffn_gate_inp;                   /* router [n_expert][n_embd] */
    tutti_weight ffn_gate_inp_b;                 /* f32 [n_expert] router bias (gpt-oss) */
    tutti_weight exp_probs_b;                    /* f32 [n_expert] selection bias (DeepSeek-V3, GLM-4.5) */
    tutti_weight ffn_gate_exps, ffn_up_exps;     /* n_expert x [n_ff_exp][n_embd] */
    tutti_weight ffn_down_exps;                  /* n_expert x [n_embd][n_ff_exp] */
    tutti_weight ffn_gate_exps_b, ffn_up_exps_b; /* f32 [n_expert][n_ff_exp] (gpt-oss) */
    tutti_weight ffn_down_exps_b;                /* f32 [n_expert][n_embd] (gpt-oss) */
    tutti_weight ffn_gate_shexp, ffn_up_shexp;   /* shared expert [n_ff_shexp][n_embd] */
    tutti_weight ffn_down_shexp;                 /* [n_embd][n_ff_shexp] */
    tutti_weight ffn_gate_inp_shexp;             /* f32 [n_embd]: the shared expert's gate (qwen2moe) */
    /* multi-head latent attention (deepseek2) */
    tutti_weight wq_a, q_a_norm, wq_b; /* q LoRA: [n_lora_q][n_embd], f32 [n_lora_q],
                                                    [n_head*head_dim_k_mla][n_lora_q] (or wq alone) */
    tutti_weight wkv_a_mqa, kv_a_norm; /* [n_lora_kv + n_rot][n_embd], f32 [n_lora_kv] */
    tutti_weight wk_b;                 /* n_head x [n_lora_kv][head_dim_k_mla - n_rot] */
    tutti_weight wv_b;                 /* n_head x [head_dim_v_mla][n_lora_kv] */
    int32_t n_swa;                     /* 0 = full causal attention, else window size */
    float rope_base, rope_scale;       /* this layer's rope frequency base and position scale */
} tutti_layer;

typedef struct tutti_hparams {
    int32_t n_vocab;        /* rows of the output matrix = logits per position */
    int32_t n_ctx_train;    /* context_length */
    int32_t n_embd;         /* embedding_length */
    int32_t n_layer;        /* block_count */
    int32_t n_ff;           /* feed_forward_length */
    int32_t n_head;         /* attention.head_count */
    int32_t n_head_kv;      /* attention.head_count_kv (default n_head) */
    int32_t head_dim_k;     /* attention.key_length (default n_embd / n_head) */
    int32_t head_dim_v;     /* attention.value_length (default head_dim_k) */
    int32_t n_rot;          /* rope.dimension_count (default head_dim_k) */
    float rms_eps;          /* attention.layer_norm_rms_epsilon */
    float rope_base;        /* rope.freq_base (default 10000) */
    float rope_base_swa;    /* rope.freq_base_swa (local layers, gemma3) */
    float rope_scale;       /* position multiplier = 1 / rope.scaling.factor (linear) */
    float rope_attn_factor; /* rope.scaling.attn_factor: multiplies the rotated q and k dims (default 1;
                               YaRN multiplies it by 1 + 0.1 ln(factor)) */
    float yarn_scale;       /* rope.scaling.type yarn: 1 / rope.scaling.factor (0 = no YaRN; rope_scale is
                             then 1 and the session folds the YaRN blend into its rope factors) */
    float kq_mscale;        /* deepseek2: the mscale of its q·k scale mscale² / sqrt(head_dim_k_mla) */
    int32_t n_ctx_orig;     /* rope.scaling.original_context_length (default n_ctx_train): a session
                             with n_ctx above it uses Phi-3's long rope factors */
    int32_t n_swa;          /* attention.sliding_window (0 = none) */
    int32_t swa_pattern;    /* attention.sliding_window_pattern p: layer il is local when il % p < p - 1
                             (p = 0: every layer) */
    float attn_softcap;     /* attn_logit_softcapping (0 = off) */
    float final_softcap;    /* final_logit_softcapping (0 = off) */
    float attn_scale;       /* multiplier of q·k (1/sqrt(head_dim_k)) */
    /* granitemoe's scales (1 = none): embeddings, each branch before its
     * residual add, and the logits (multiplied by 1/logit_scale); Gemma's
     * sqrt(n_embd) is embd_scale too */
    float embd_scale, residual_scale, logit_scale;

    /* mixture of experts (n_expert = 0: dense) */
    int32_t n_expert;           /* expert_count */
    int32_t n_expert_used;      /* expert_used_count: top-k */
    int32_t n_ff_exp;           /* width of one routed expert */
    int32_t n_ff_shexp;         /* width of the shared expert(s), 0 = none */
    int32_t n_layer_dense_lead; /* leading_dense_block_count */
    int32_t n_expert_groups;    /* expert_group_count (1 = no groups) */
    int32_t n_group_used;       /* expert_group_used_count */
    tutti_gating gating;
    bool expert_norm_w;         /* expert_weights_norm */
    float expert_weights_scale; /* expert_weights_scale (0 or 1: none) */

    /* multi-head latent attention (deepseek2): the cache holds n_lora_kv +
     * n_rot values per token (head_dim_k, one KV head), values are its first
     * n_lora_kv (head_dim_v) */
    int32_t n_lora_q, n_lora_kv; /* attention.q_lora_rank (0: plain q), attention.kv_lora_rank */
    int32_t head_dim_k_mla;      /* attention.key_length_mla: nope + rope dims of a query head */
    int32_t head_dim_v_mla;      /* attention.value_length_mla */
} tutti_hparams;

struct tutti_model {
    char *path;
    gguf_file *gguf; /* owns the mapping every weight points into */
    const tutti_arch *arch;
    tutti_hparams hp;
    tutti_weight token_embd;  /* [n_vocab][n_embd] */
    tutti_weight output_norm; /* f32 [n_embd] */
    tutti_weight output;      /* [n_vocab][n_embd]; == token_embd when tied */
    bool tied;
    tutti_weight rope_freqs;            /* optional f32 [n_rot/2]: per-frequency divisors (Llama 3.1) */
    tutti_weight rope_long, rope_short; /* optional f32 [n_rot/2]: Phi-3 LongRoPE divisors */
    tutti_layer *layers;                /* [n_layer] */
    tutti_vocab *vocab;                 /* owned (tokenizer.ggml.* of the same file) */
    bool mapped;                        /* weights point into an mmap of the file (not a caller's buffer) */
    void *weights_mem;                  /* owned arena of the weights moved out of the mapping (load.c) */
    size_t weights_mem_size;            /* its bytes (copied or repacked weights) */
    size_t weights_in_place;            /* bytes of weights read where the file is mapped (2 MiB pages) */
    size_t weights_reread;              /* bytes of the file re-read into 2 MiB folios at load (gguf_reread_small) */
    /* The part this process computes (a model split by layers over ranks):
     * layers [part_il0, part_il1), and the embeddings and head when
     * part_head.  Only those weights are placed (moved out of the mapping);
     * the others stay mapped and untouched, so they are never read from
     * disk nor resident.  Whole model: 0, n_layer, true. */
    int32_t part_il0, part_il1;
    bool part_head;
    /* Of the routed experts (--split-experts), only matrices [part_e0,
     * part_e1) of each expert tensor are placed, the others stay mapped and
     * untouched (they still compute, read from the file); with
     * part_experts_only nothing else is placed either (a rank that computes
     * only its experts).  Whole model: 0, n_expert, false. */
    int32_t part_e0, part_e1;
    bool part_experts_only;
};

/* Loader steps (hparams.c, tensors.c): metadata -> m->hp, then every
 * tensor bound into m's weights (m->gguf and m->arch set).  TUTTI_ERR with
 * the message set. */
int tutti_load_hparams(tutti_model *m);
int tutti_bind_tensors(tutti_model *m);

/* tutti_model_load of the part [il0, il1) (+ embeddings and head when
 * head) of the model: every tensor is still bound and checked (the file
 * must be a whole valid model), but only the part's weights are placed. */
tutti_model *tutti_model_load_part(const char *path, const tutti_model_params *params, int32_t il0, int32_t il1,
                                   bool head);
/* tutti_model_load placing of the routed experts only the share of rank
 * `rank` of n_ranks, experts [E rank / n_ranks, E (rank + 1) / n_ranks)
 * (m->part_e0, part_e1), and with experts_only none of the other weights:
 * the rest stays mapped, never read unless used.  A dense model is
 * placed whole (unless experts_only). */
tutti_model *tutti_model_load_experts(const char *path, const tutti_model_params *params, int32_t rank, int32_t n_ranks,
                                      bool experts_only);

/* Activations of the mixture-of-experts feed-forward, [n_ubatch] rows (all
 * NULL for a dense model; moe.c). */
typedef struct tutti_moe_bufs {
    float *router;  /* [n_ubatch][n_expert] router logits, then scratch of the routing */
    int32_t *sel;   /* [n_ubatch][n_expert_used] the selected experts of each token, in rank order */
    float *sel_w;   /* [n_ubatch][n_expert_used] their weights */
    int32_t *route; /* [n_ubatch * n_expert_used] the slots t * n_expert_used + j grouped by expert */
    int32_t *where; /* [n_ubatch * n_expert_used] each slot's row in route order */
    int32_t *offs;  /* [n_expert + 1] where each expert's rows start in route order */
    float *xe;      /* [n_ubatch * n_expert_used][n_embd] the routed rows, gathered in route order */
    float *ge, *ue; /* [n_ubatch * n_expert_used][n_ff_exp] their gate and up projections */
    float *slots;   /* [n_ubatch * n_expert_used][n_embd] their experts' outputs, in route order */
    float *ye;      /* [n_ubatch][n_embd] the shared experts' output */
    tutti_mm *mm;   /* [2 * n_expert] the batched products of one step */
} tutti_moe_bufs;

/* Heads of latent attention whose per-head products run as one batch. */
#define TUTTI_MLA_HEADS 16

/* Activations of multi-head latent attention, [n_ubatch] rows (NULL
 * otherwise; mla.c). */
typedef struct tutti_mla_bufs {
    float *q;   /* [n_head * head_dim_k_mla] the query before absorption */
    float *qa;  /* [n_lora_q] the q LoRA's inner rows */
    float *kv;  /* [n_lora_kv + n_rot] compressed kv and the rope part of the key */
    float *in;  /* [max(TUTTI_MLA_HEADS * max(nope, n_lora_kv), n_head * n_rot)] rows of a group of
                        heads, gathered (or the rope parts of all heads) */
    float *out; /* [TUTTI_MLA_HEADS * max(n_lora_kv, head_dim_v_mla)] their products */
    float *att; /* [n_head * head_dim_v_mla] attention output, decompressed per head */
} tutti_mla_bufs;

/* A session: one timeline of tokens with its own KV cache and buffers.
 * The cache is F16 like llama.cpp's default, one K and one V row per
 * position and layer: k_cache[il] is [n_ctx][n_head_kv*head_dim_k].  A batch
 * of n tokens is evaluated in micro-batches of at most n_ubatch tokens (the
 * activations below are sized for n_ubatch); causality makes that identical
 * to one pass. */
struct tutti_session {
    const tutti_model *model;
    int32_t n_ctx, n_past, n_ubatch;
    tutti_threadpool *tp;
    uint16_t *k_cache, *v_cache; /* [n_layer][n_ctx][n_head_kv*head_dim]; MLA: no v_cache (values are
                                    the first n_lora_kv of each key row) */
    /* activations, [n_ubatch][...] */
    float *x;            /* residual stream [n_embd] */
    float *h;            /* normed input of a branch [n_embd] */
    float *qkv;          /* projections [q + k + v] (q | k | v contiguous per token when fused) */
    float *q, *k, *v;    /* [n_head*head_dim_k], [n_head_kv*head_dim_k], [n_head_kv*head_dim_v] */
    float *att;          /* attention output [n_head*head_dim_v] */
    float *o;            /* branch output [n_embd] */
    float *gate;         /* [n_ff] (fused: [2*n_ff] before the split) */
    float *up;           /* [n_ff] */
    float *attn_scratch; /* [n_threads][tutti_attn_scratch_floats(n_ctx, ...)] */
    tutti_moe_bufs moe;
    tutti_mla_bufs mla;
    float *logits;             /* [n_vocab]: last evaluated position */
    const float *rope_factors; /* rope frequency divisors [n_rot/2] or NULL (rope_freqs, or Phi-3's
                                  long/short by n_ctx > n_ctx_orig, as llama.cpp; with YaRN: yarn_factors) */
    float *yarn_factors;       /* owned [n_rot/2] when the model uses YaRN */
    float *rows;               /* [cap_rows][n_vocab]: last rows of a multi-sequence pass */
    int32_t cap_rows;
    bool has_logits;
    /* A model split by layers over MPI ranks: tutti_session_eval hands the
     * (validated) tokens to the pipeline instead (src/mpi/split.c), which
     * runs this rank's layers and the head here and the rest on the other
     * ranks.  Owned: freed with the session. */
    struct tutti_pipe *pipe;
    /* Routed experts split over MPI ranks (src/mpi/experts.c,
     * --split-experts): owned, freed with the session. */
    struct tutti_moe_remote *moe_remote;
    struct tutti_work *work; /* owner count of tp and the activations (shared: tutti_session_new_sharing) */
    /* A batched session (batch.c): its evals are requests to the batch,
     * whose workspace ws for the model runs them; no activations here. */
    struct tutti_batch *batch;
    struct batch_ws *ws;
    /* context shift (tutti_session_params.ctx_shift): the timeline holds
     * n_past + n_discarded tokens; rewinds below shift_floor (its length at
     * the last shift) must start over */
    bool ctx_shift;
    int32_t n_keep, n_discarded, shift_floor;
};

/* Session construction in parts (session.c, batch.c): the session's own
 * state (KV cache when kv, logits, rope factors), and the activations of
 * ub tokens with the attention scratch of n_ctx positions on pool tp
 * (freed with the last session sharing them, and tp too when owns_tp).
 * tutti_session_threads: n_threads, or the online CPUs for 0. */
tutti_session *tutti_session_alloc_own(const tutti_model *model, const tutti_session_params *params, bool kv);
int tutti_session_alloc_work(tutti_session *s, int32_t ub, int32_t n_ctx, tutti_threadpool *tp, bool owns_tp);
int32_t tutti_session_threads(int32_t n_threads);
/* A batched session's evaluation (validated, one model): sequence i is
 * ids[i][0..n[i]) on ss[i], its rows into out[i] when out and out[i] are
 * not NULL, or (embd and embd[i]) its rows after the output norm and no
 * logits.  Returns the steps it took.  tutti_batch_detach: at free. */
int tutti_batch_eval(tutti_session *const *ss, const int32_t *const *ids, const int32_t *n, float *const *out,
                     float *const *embd, int32_t n_seq);
void tutti_batch_detach(tutti_session *s);

/* Session dst takes the state of src after the first n_tokens tokens of
 * src's timeline (same model and n_ctx; n_tokens >= the floor of src, see
 * tutti_session_rewind_floor): the cache rows they occupy and the shift
 * bookkeeping.  dst's logits are not current afterwards. */
void tutti_session_copy_tokens(tutti_session *dst, const tutti_session *src, int32_t n_tokens);
/* Halves of a KV-cache row of m in F16 values: keys nk, values nv (latent
 * attention: the compressed kv and its rope part in the key row, nv 0). */
void tutti_cache_widths(const tutti_model *m, size_t *nk, size_t *nv);
/* The first k cache positions of layers [il0, il1) from src to dst (same
 * model and n_ctx). */
void tutti_cache_copy_rows(tutti_session *dst, const tutti_session *src, int32_t il0, int32_t il1, int32_t k);

/* A session that shares `with`'s thread pool and activation buffers (not
 * its KV cache, logits or rows): sessions of one member that never run at
 * the same time (the pool of hypotheses' timelines of byte alignment) then
 * keep one hot pool of threads and touch one set of activation pages,
 * instead of one each (measured on a heavy twin: ~12% per pass, and the
 * activations' resident memory once, not per session).  with: same model,
 * n_ctx and threads, not split; NULL = tutti_session_new.  Sessions
 * sharing a workspace must not be evaluated concurrently. */
tutti_session *tutti_session_new_sharing(const tutti_model *model, const tutti_session_params *params,
                                         tutti_session *with);

struct tutti_fwd_seg;
typedef struct tutti_pipe {
    /* as tutti_session_eval after its checks: ids[0..n) at s->n_past, which
     * it advances; logits (non-NULL) receives all n rows */
    int (*eval)(struct tutti_pipe *p, tutti_session *s, const int32_t *ids, int32_t n, float *logits);
    void (*free)(struct tutti_pipe *p);
    /* as tutti_forward_segments(s, seg, n_seg, NULL, rows) for
     * tutti_session_eval_multi, whose sessions all have pipes (s is one of
     * them): advances nothing.  0 or TUTTI_ERR.  NULL: not supported. */
    int (*eval_segments)(struct tutti_pipe *p, tutti_session *s, const struct tutti_fwd_seg *seg, int32_t n_seg,
                         float *rows);
} tutti_pipe;

/* tutti_model_load over a caller-owned GGUF image of size bytes (fuzzer and
 * tests); buf must outlive the model (weights point into it).  name is used
 * in error messages.  NULL with tutti_last_error() set on error. */
tutti_model *tutti_model_load_buffer(const void *buf, size_t size, const char *name, const tutti_model_params *params);

/* Forward pass of ids[0..n) (n <= n_ubatch) at positions n_past.. ; writes
 * the K/V rows, advances nothing (the caller does).  If out is non-NULL it
 * receives all n rows of logits; the last row always goes to s->logits. */
void tutti_forward_ubatch(tutti_session *s, const int32_t *ids, int32_t n, float *out);

/* One timeline's part of a multi-sequence forward pass: ids[0..n) appended
 * to session s at its n_past. */
typedef struct tutti_fwd_seg {
    tutti_session *s;
    const int32_t *ids;
    int32_t n;
    float *out;     /* non-NULL: all n rows of logits [n][n_vocab] (the last also into s->logits) */
    float *embd;    /* non-NULL: the n rows after the output norm [n][n_embd] (embeddings) */
    bool no_logits; /* no logits (a prompt chunk before its last, or embeddings only) */
} tutti_fwd_seg;

/* Forward pass of n_seg timelines as one batch: the matmuls run once over
 * all Σ n tokens (the weights are read once), rope, cache writes and
 * attention per segment in its own session, at its positions, with its
 * rope factors.  Activations, scratch and the thread pool are s's: every
 * seg[j].s has s's model and an n_ctx <= s's, and Σ n <= s->n_ubatch.  The
 * last row of each segment goes to seg[j].s->logits; out (non-NULL)
 * receives all Σ n rows in order; otherwise each segment's seg.out,
 * seg.embd and no_logits say what it gets, and rows (more than one
 * segment wanting only its last row) is scratch of n_seg * n_vocab floats.
 * Advances nothing. */
void tutti_forward_segments(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, float *out, float *rows);

/* Part of a forward pass, for a model split by layers (src/mpi/split.c):
 * TUTTI_FWD_EMBED looks up the tokens' embeddings into s->x (without it,
 * s->x holds the Σ n × n_embd activations that layer il0 takes: the
 * previous rank's output); layers [il0, il1) run; TUTTI_FWD_HEAD then
 * computes the logits as tutti_forward_segments does (without it, s->x
 * holds the activations after layer il1 - 1).  seg[j].ids is read only
 * with TUTTI_FWD_EMBED.  tutti_forward_segments = the range [0, n_layer)
 * with both flags. */
enum { TUTTI_FWD_EMBED = 1, TUTTI_FWD_HEAD = 2 };
void tutti_forward_range(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, int32_t il0, int32_t il1, int flags,
                         float *out, float *rows);

/* ---- pieces of the forward pass (forward.c, moe.c, mla.c) ---- */

/* y [n_tok][w->n_rows] = x [n_tok][w->n_cols] · wᵀ on s's threads. */
void tutti_fwd_matmul(tutti_session *s, const tutti_weight *w, const float *x, int64_t n_tok, float *y);
/* gate[i] = act(gate[i]) · up[i], i < n (SwiGLU, or GeGLU when gelu). */
void tutti_fwd_glu(tutti_session *s, float *gate, const float *up, int64_t n, bool gelu);
/* The same on the threads of tp (the bits do not depend on their number). */
void tutti_glu_pool(tutti_threadpool *tp, float *gate, const float *up, int64_t n, bool gelu);
/* x [n_tok][n] += b [n] (b NULL: nothing). */
void tutti_fwd_add_bias(float *x, const float *b, int64_t n_tok, int64_t n);
/* out [n][n_embd] = down(act(gate(h)) ⊙ up(h)), n_ff wide (gate->data NULL:
 * up holds [gate; up] rows); uses s->gate and s->up. */
void tutti_fwd_ffn(tutti_session *s, const tutti_weight *gate, const tutti_weight *up, const tutti_weight *down,
                   int64_t n_ff, const float *h, int32_t n, float *out);
/* The rotary embedding of layer L on x [nt][n_heads][head_dim] at positions
 * pos0.. (the first n_rot dims of each head, with the rope magnitude). */
void tutti_fwd_rope(const tutti_session *s, const tutti_layer *L, float *x, int32_t nt, int32_t n_heads,
                    int32_t head_dim, int32_t pos0);
/* Routed experts (+ shared ones) of the n normed rows in s->h, into s->o
 * (with s->moe_remote: the other processes' experts there). */
void tutti_ffn_moe(tutti_session *s, const tutti_layer *L, int32_t n);
/* Experts [e0, e1) of layer L of m on tp: the rows routed to expert e are
 * xe[offs[e] .. offs[e + 1]) ([n_embd] each), their outputs go to the same
 * rows of slots; ge and ue ([n_ff_exp] per row) are scratch, mm room for
 * 2 * (e1 - e0) products.  A product's bits do not depend on the other
 * experts, the rows of other experts or the thread count, so any split of
 * the experts over processes gives the single pass's bits. */
void tutti_moe_experts(tutti_threadpool *tp, const tutti_model *m, const tutti_layer *L, const int32_t *offs,
                       int32_t e0, int32_t e1, const float *xe, float *ge, float *ue, float *slots, tutti_mm *mm);
/* Multi-head latent attention of layer il for the normed rows in s->h, over
 * the segments' caches, through the output projection into s->o. */
void tutti_attn_mla(tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, int32_t il);

/* Routed experts computed partly by other processes (src/mpi/experts.c,
 * --split-experts).  This process computes experts [e0, e1) of every MoE
 * layer; send hands over the rows routed to the others (xe in route order,
 * offs [n_expert + 1] as in tutti_moe_bufs) before, recv waits for their
 * outputs into the same rows of slots after.  On a failure either returns
 * TUTTI_ERR with the error set and sets failed: the pass goes on with
 * zeros in those rows and tutti_session_eval returns the error. */
typedef struct tutti_moe_remote {
    int32_t e0, e1;
    bool failed;
    int (*send)(struct tutti_moe_remote *r, int32_t il, const int32_t *offs, const float *xe);
    int (*recv)(struct tutti_moe_remote *r, int32_t il, const int32_t *offs, float *slots);
    void (*free)(struct tutti_moe_remote *r);
} tutti_moe_remote;

/* Expert routing as llama.cpp's build_moe_ffn computes it (moe.c). */
typedef struct tutti_moe_routing {
    int32_t n_expert, n_expert_used; /* 1 <= n_expert_used <= n_expert <= TUTTI_MAX_EXPERTS */
    tutti_gating gating;
    const float *probs_bias;        /* [n_expert] selection bias (exp_probs_b) or NULL */
    int32_t n_groups, n_group_used; /* expert groups (1: none); n_expert % n_groups == 0 */
    bool norm_w;                    /* weights renormalized to sum 1 */
    float scale;                    /* weights × scale (0 or 1: none) */
} tutti_moe_routing;
/* The routing of layer L of m. */
void tutti_moe_routing_of(const tutti_model *m, const tutti_layer *L, tutti_moe_routing *r);
/* Routes n_tok tokens: logits [n_tok][n_expert] (the router's output,
 * overwritten by the gate probabilities) -> sel [n_tok][n_expert_used], the
 * chosen experts best first (equal scores: the lower index first, as ggml's
 * argsort of up to 16 values), and their weights w [n_tok][n_expert_used]. */
void tutti_moe_route(const tutti_moe_routing *r, float *logits, int32_t n_tok, int32_t *sel, float *w);

/* Evaluates ids[i][0..n[i]) on session ss[i] for every i < n_seq (sessions
 * distinct, of one model and one n_ctx), batching the sequences into as few
 * forward passes as the micro-batch size allows (tutti_forward_segments);
 * a sequence that reaches its session's context shift runs on its own
 * (tutti_session_eval).
 * Each session's logits are then its last row, as after tutti_session_eval.
 * Returns the number of forward passes run, or TUTTI_ERR (nothing is run
 * when an argument is invalid). */
int tutti_session_eval_multi(tutti_session *const *ss, const int32_t *const *ids, const int32_t *n, int32_t n_seq);
/* As tutti_session_eval_multi, and sequence i's rows of logits, all n[i]
 * of them, into out[i] [n[i]][n_vocab] where out and out[i] are not NULL
 * (a speculative round's rows and other timelines' last rows in one pass:
 * byte alignment's drafting). */
int tutti_session_eval_multi_rows(tutti_session *const *ss, const int32_t *const *ids, const int32_t *n,
                                  float *const *out, int32_t n_seq);

#endif
