/* Hyper-parameter rules of every architecture against llama.cpp.
 *
 * Each row of g_specs is a small random-weight model made HERE, at test
 * time, deterministically (a seeded integer PRNG, F32 weights, the 512-token
 * vocabulary of ../shared/ref/arch/ARCH-F16.gguf): model files are never
 * committed.  What is committed is llama.cpp's answer on exactly that file
 * (tests/data/arch/NAME.logits.f32: the logits of positions 0, 10, ..., 40 of
 * ref/arch/input.ids, or NAME.fail when llama.cpp refuses the file or
 * computes non-finite logits; tutti must then refuse it with a clear error), made by
 * tests/data/arch/make_refs.sh, which writes the same files with
 * `test_arch_rules --write NAME PATH` and runs the oracle on them.
 *
 * The rows leave out optional metadata keys (so the loader's defaults are
 * what is checked), use the layer counts that llama.cpp maps to a model size
 * with its own rule (Gemma 2 27B = 46 layers, Gemma 3 27B = 62), and make
 * head_dim differ from n_embd/n_head so that rules choosing between the two
 * can be told apart.  Dimensions are tiny so that 62 layers stay small.
 * Measure: max |Δ log-softmax| over the stored positions, tolerance 0.02
 * (F32), for the whole prompt in one batch and for a prefix batch followed
 * by one token at a time. */
#include "test_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"
#include "tutti.h"

#define N_IDS 41
#define N_VOCAB 512
#define POS_STEP 10
#define N_POS ((N_IDS - 1) / POS_STEP + 1) /* positions 0, 10, ..., 40 */
#define TOL 0.02

enum {
    F_TIED = 1 << 0,       /* no output.weight */
    F_QKV_BIAS = 1 << 1,   /* attn_q/k/v.bias */
    F_QK_NORM = 1 << 2,    /* attn_q_norm / attn_k_norm */
    F_POST_NORMS = 1 << 3, /* post_attention_norm / post_ffw_norm */
    F_FUSED_QKV = 1 << 4,  /* attn_qkv instead of attn_q/k/v (phi3) */
    F_FUSED_UP = 1 << 7,   /* [gate; up] in ffn_up, no ffn_gate (phi3) */
#define F_FUSED (F_FUSED_QKV | F_FUSED_UP)
    F_LONGROPE = 1 << 5,   /* rope_factors_long / rope_factors_short */
    F_ROPE_FREQS = 1 << 6, /* rope_freqs (Llama 3.1) */
};

typedef struct spec {
    const char *name; /* tests/data/arch/<name>.logits.f32 or .fail */
    const char *arch;
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer;
    unsigned flags;
    float qk_gain; /* multiplies the q and k weights: larger scores make softcapping and scale visible */
    /* extra metadata "key=type:value" separated by ';' (key without the
     * "<arch>." prefix; type u32, f32 or str); "-key" leaves out one of the
     * keys written by default (context_length, attention.layer_norm_rms_epsilon) */
    const char *kv;
    const char *rule;  /* what the row checks (printed) */
    const char *error; /* NULL: compare logits; else tutti must refuse the file with this text */
} spec;

/* Head geometry written as metadata only when the row says so: the "kv"
 * field names key_length/value_length/head_count_kv explicitly. */
static const spec g_specs[] = {
    /* ---- Gemma 2 ---- */
    {"gemma2-27b", "gemma2", 64, 4, 2, 32, 128, 46, F_TIED | F_POST_NORMS, 1.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32",
     "gemma2 27B (46 layers): q scale 1/sqrt(n_embd/n_head); softcaps 50/30 and window 4096 when absent", NULL},
    {"gemma2-defaults", "gemma2", 64, 4, 2, 32, 128, 6, F_TIED | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32",
     "gemma2 other sizes: q scale 1/sqrt(head_dim); softcaps 50/30 when absent", NULL},
    {"gemma2-window", "gemma2", 64, 4, 2, 32, 128, 4, F_TIED | F_POST_NORMS, 1.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:6;attn_logit_softcapping=f32:20;final_logit_softcapping=f32:8;"
     "rope.freq_base=f32:20000",
     "gemma2: sliding window on even layers, softcaps read from the keys", NULL},
    /* ---- Gemma 3 ---- */
    {"gemma3-27b", "gemma3", 64, 4, 2, 32, 128, 62, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:8;rope.freq_base=f32:1000000;rope.scaling.type=str:linear;"
     "rope.scaling.factor=f32:8",
     "gemma3 27B (62 layers): q scale 1/sqrt(n_embd/n_head); local layers rope base 10000 unscaled, "
     "global layers base and linear factor 8",
     NULL},
    {"gemma3-defaults", "gemma3", 64, 4, 2, 32, 128, 8, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:8;rope.freq_base=f32:1000000",
     "gemma3 other sizes: q scale 1/sqrt(head_dim); no softcapping; local rope base 10000", NULL},
    {"gemma3-swa-base", "gemma3", 64, 4, 2, 32, 128, 8, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:8;rope.freq_base=f32:1000000;rope.freq_base_swa=f32:50000",
     "gemma3: rope.freq_base_swa sets the local layers' base", NULL},
    {"gemma3-softcap-keys", "gemma3", 64, 4, 2, 32, 128, 8, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:8;rope.freq_base=f32:1000000;attn_logit_softcapping=f32:10;"
     "final_logit_softcapping=f32:5",
     "gemma3: final_logit_softcapping is applied, attn_logit_softcapping is not", NULL},
    {"gemma3-no-window", "gemma3", 64, 4, 2, 32, 128, 8, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "rope.freq_base=f32:1000000",
     "gemma3 without attention.sliding_window: no window, all layers global", NULL},
    /* ---- Llama ---- */
    {"llama-defaults", "llama", 64, 4, 4, 16, 128, 3, F_TIED, 2.0f, "",
     "llama: head_count_kv = head_count, head_dim = n_embd/n_head, n_rot = head_dim, rope base 10000, "
     "tied output when output.weight is absent",
     NULL},
    {"llama-rope-linear", "llama", 64, 4, 2, 16, 128, 2, 0, 2.0f,
     "attention.head_count_kv=u32:2;rope.scaling.factor=f32:4",
     "llama: rope.scaling.factor without rope.scaling.type is linear", NULL},
    {"llama-rope-none", "llama", 64, 4, 2, 16, 128, 2, 0, 2.0f,
     "attention.head_count_kv=u32:2;rope.scaling.type=str:none;rope.scaling.factor=f32:4",
     "llama: rope.scaling.type none ignores the factor", NULL},
    {"llama-rope-oldkey", "llama", 64, 4, 2, 16, 128, 2, 0, 2.0f,
     "attention.head_count_kv=u32:2;rope.scale_linear=f32:4",
     "llama: the old key rope.scale_linear when rope.scaling.factor is absent", NULL},
    {"llama-attn-factor", "llama", 64, 4, 2, 16, 128, 2, 0, 2.0f,
     "attention.head_count_kv=u32:2;rope.scaling.attn_factor=f32:1.5", "llama: rope.scaling.attn_factor", NULL},
    {"llama-ropefreqs", "llama", 64, 4, 2, 16, 128, 2, F_ROPE_FREQS, 2.0f,
     "attention.head_count_kv=u32:2;rope.freq_base=f32:500000;rope.dimension_count=u32:16",
     "llama 3.1: rope_freqs divisors", NULL},
    {"llama-softcap-keys", "llama", 64, 4, 2, 16, 128, 2, 0, 2.0f,
     "attention.head_count_kv=u32:2;attn_logit_softcapping=f32:3;final_logit_softcapping=f32:2",
     "llama: softcapping keys are not read", NULL},
    {"llama-nrot", "llama", 64, 4, 2, 16, 128, 2, 0, 1.0f, "attention.head_count_kv=u32:2;rope.dimension_count=u32:8",
     "llama: rope.dimension_count must equal head_dim", "rope.dimension_count"},
    {"llama-experts", "llama", 64, 4, 2, 16, 128, 2, 0, 1.0f,
     "attention.head_count_kv=u32:2;expert_count=u32:4;expert_used_count=u32:2",
     "llama: expert_count > 0 is a mixture of experts (Mixtral): its layers need a router", "ffn_gate_inp"},
    /* ---- Qwen ---- */
    {"qwen2-defaults", "qwen2", 64, 4, 2, 16, 128, 2, F_TIED | F_QKV_BIAS, 2.0f,
     "attention.head_count_kv=u32:2;attn_logit_softcapping=f32:3;final_logit_softcapping=f32:2;"
     "attention.sliding_window=u32:4",
     "qwen2: neox rope, base 10000 when absent; softcapping and sliding-window keys are not read", NULL},
    {"qwen3-headdim", "qwen3", 64, 8, 2, 32, 128, 3, F_TIED | F_QK_NORM, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "rope.freq_base=f32:1000000",
     "qwen3: head_dim from key_length (n_head*head_dim != n_embd)", NULL},
    {"qwen3-no-value-length", "qwen3", 64, 8, 2, 32, 128, 2, F_TIED | F_QK_NORM, 1.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32",
     "qwen3: value_length defaults to n_embd/n_head, not key_length", "value_length"},
    /* ---- Phi-3 ---- */
    {"phi3-window", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED, 2.0f, "attention.sliding_window=u32:6",
     "phi3: attention.sliding_window is not applied", NULL},
    {"phi3-longrope-short", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED | F_LONGROPE, 2.0f,
     "context_length=u32:4096;rope.scaling.original_context_length=u32:4096;rope.scaling.attn_factor=f32:1.19",
     "phi3 longrope: short factors when n_ctx <= original context; attn_factor", NULL},
    {"phi3-longrope-long", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED | F_LONGROPE, 2.0f,
     "context_length=u32:4096;rope.scaling.original_context_length=u32:32;rope.scaling.attn_factor=f32:1.19",
     "phi3 longrope: long factors when n_ctx > original context", NULL},
    /* ---- second round ---- */
    {"gemma2-swa-base", "gemma2", 64, 4, 2, 32, 128, 4, F_TIED | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:6;rope.freq_base=f32:20000;rope.freq_base_swa=f32:500",
     "gemma2: rope.freq_base_swa", NULL},
    {"gemma2-output", "gemma2", 64, 4, 2, 32, 128, 2, F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32",
     "gemma2 refuses an output.weight (llama.cpp: unused tensor)", "output.weight"},
    {"gemma3-pattern", "gemma3", 64, 4, 2, 32, 128, 6, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:8;rope.freq_base=f32:1000000;attention.sliding_window_pattern=u32:3",
     "gemma3: attention.sliding_window_pattern", NULL},
    {"qwen2-partial-rot", "qwen2", 64, 4, 2, 16, 128, 2, F_TIED | F_QKV_BIAS, 2.0f,
     "attention.head_count_kv=u32:2;rope.dimension_count=u32:8", "qwen2: rope.dimension_count must equal head_dim",
     "rope.dimension_count"},
    {"phi3-longrope-type", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED | F_LONGROPE, 2.0f,
     "context_length=u32:4096;rope.scaling.original_context_length=u32:32;rope.scaling.attn_factor=f32:1.19;"
     "rope.scaling.type=str:longrope",
     "phi3: rope.scaling.type longrope", NULL},
    {"phi3-separate-qkv", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED_UP, 2.0f, "",
     "phi3 with attn_q/k/v instead of attn_qkv", NULL},
    {"llama-yarn", "llama", 64, 4, 2, 16, 128, 2, 0, 2.0f,
     "attention.head_count_kv=u32:2;rope.scaling.type=str:yarn;rope.scaling.factor=f32:4;"
     "rope.scaling.original_context_length=u32:128",
     "llama: yarn rope scaling (blend of interpolated and original frequencies, magnitude 1 + 0.1 ln 4)", NULL},
    {"gemma3-output", "gemma3", 64, 4, 2, 32, 128, 2, F_QK_NORM | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:8",
     "gemma3 uses an output.weight when present", NULL},
    {"gemma2-pattern", "gemma2", 64, 4, 2, 32, 128, 4, F_TIED | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:6;attention.sliding_window_pattern=u32:3",
     "gemma2: attention.sliding_window_pattern", NULL},
    {"qwen3-partial-rot", "qwen3", 64, 4, 2, 16, 128, 2, F_TIED | F_QK_NORM, 2.0f,
     "attention.head_count_kv=u32:2;rope.dimension_count=u32:8", "qwen3: rope.dimension_count must equal head_dim",
     "rope.dimension_count"},
    {"gemma2-partial-rot", "gemma2", 64, 4, 2, 16, 128, 2, F_TIED | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;rope.dimension_count=u32:8", "gemma2: partial rotary", NULL},
    {"gemma3-partial-rot", "gemma3", 64, 4, 2, 16, 128, 2, F_TIED | F_QK_NORM | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;rope.dimension_count=u32:8;attention.sliding_window=u32:8",
     "gemma3: partial rotary", NULL},
    {"phi3-partial-rot", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED, 2.0f, "rope.dimension_count=u32:8",
     "phi3: partial rotary", NULL},
    {"qwen2-yarn", "qwen2", 64, 4, 2, 16, 128, 2, F_TIED | F_QKV_BIAS, 2.0f,
     "attention.head_count_kv=u32:2;rope.freq_base=f32:1000000;rope.scaling.type=str:yarn;"
     "rope.scaling.factor=f32:4;rope.scaling.original_context_length=u32:16",
     "qwen2: yarn rope scaling (Qwen2.5 long-context files), neox", NULL},
    {"gemma2-rope-linear", "gemma2", 64, 4, 2, 32, 128, 4, F_TIED | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:6;rope.scaling.type=str:linear;rope.scaling.factor=f32:4",
     "gemma2: linear rope scaling on local and global layers alike", NULL},
    {"gemma3-window0", "gemma3", 64, 4, 2, 32, 128, 7, F_TIED | F_QK_NORM | F_POST_NORMS, 3.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:0;rope.freq_base=f32:1000000",
     "gemma3: attention.sliding_window 0 = no window", NULL},
    {"gemma2-window0", "gemma2", 64, 4, 2, 32, 128, 2, F_TIED | F_POST_NORMS, 2.0f,
     "attention.head_count_kv=u32:2;attention.key_length=u32:32;attention.value_length=u32:32;"
     "attention.sliding_window=u32:0",
     "gemma2: attention.sliding_window 0 masks every key (llama.cpp: NaN logits)", "sliding_window"},
    {"phi3-tied", "phi3", 64, 4, 4, 16, 128, 2, F_FUSED | F_TIED, 2.0f, "",
     "phi3: tied output when output.weight is absent", NULL},
    {"llama-no-ctx", "llama", 64, 4, 2, 16, 128, 2, 0, 1.0f, "attention.head_count_kv=u32:2;-context_length",
     "llama: context_length is required", "context_length"},
    {"llama-no-eps", "llama", 64, 4, 2, 16, 128, 2, 0, 1.0f,
     "attention.head_count_kv=u32:2;-attention.layer_norm_rms_epsilon",
     "llama: attention.layer_norm_rms_epsilon is required", "layer_norm_rms_epsilon"},
};
#define N_SPECS (sizeof g_specs / sizeof g_specs[0])

/* ---- the deterministic generator ---- */

typedef struct rng {
    uint64_t s;
} rng;

/* splitmix64: integer-only, so the same weights on every machine. */
static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1): 24 random bits, exact in float */
static float rng_unit(rng *r) { return (float)(int32_t)(rng_next(r) >> 40) / 8388608.0f - 1.0f; }

typedef struct gen {
    gguf_writer *w;
    rng r;
    float **bufs;
    int n_bufs, cap_bufs;
} gen;

static float *gen_buf(gen *g, int64_t n) {
    if (g->n_bufs == g->cap_bufs) {
        g->cap_bufs = g->cap_bufs ? 2 * g->cap_bufs : 64;
        g->bufs = realloc(g->bufs, sizeof *g->bufs * (size_t)g->cap_bufs);
        assert_non_null(g->bufs);
    }
    float *b = malloc(sizeof(float) * (size_t)n);
    assert_non_null(b);
    g->bufs[g->n_bufs++] = b;
    return b;
}

/* [rows][cols] F32, uniform with variance gain²/cols */
static void gen_matrix(gen *g, const char *name, int64_t rows, int64_t cols, float gain) {
    float *b = gen_buf(g, rows * cols);
    const float s = gain * sqrtf(3.0f / (float)cols);
    for (int64_t i = 0; i < rows * cols; i++) b[i] = s * rng_unit(&g->r);
    int64_t ne[2] = {cols, rows};
    assert_int_equal(gguf_writer_add_tensor(g->w, name, TUTTI_TYPE_F32, 2, ne, b), 0);
}

/* [n] F32 around `center` */
static void gen_vector(gen *g, const char *name, int64_t n, float center, float spread) {
    float *b = gen_buf(g, n);
    for (int64_t i = 0; i < n; i++) b[i] = center + spread * rng_unit(&g->r);
    int64_t ne[1] = {n};
    assert_int_equal(gguf_writer_add_tensor(g->w, name, TUTTI_TYPE_F32, 1, ne, b), 0);
}

static void add_kv(gguf_writer *w, const char *arch, const char *item) {
    char key[160], val[160];
    const char *eq = strchr(item, '='), *colon = eq ? strchr(eq, ':') : NULL;
    assert_non_null(colon);
    snprintf(key, sizeof key, "%s.%.*s", arch, (int)(eq - item), item);
    snprintf(val, sizeof val, "%s", colon + 1);
    if (strncmp(eq + 1, "u32", 3) == 0)
        assert_int_equal(gguf_writer_add_u32(w, key, (uint32_t)strtoul(val, NULL, 10)), 0);
    else if (strncmp(eq + 1, "f32", 3) == 0) assert_int_equal(gguf_writer_add_f32(w, key, strtof(val, NULL)), 0);
    else assert_int_equal(gguf_writer_add_str(w, key, val), 0);
}

static bool kv_has(const spec *sp, const char *key) {
    const char *p = strstr(sp->kv, key);
    return p && (p == sp->kv || p[-1] == ';') && p[strlen(key)] == '=';
}

/* Writes the model of sp to path. */
static void write_model(const spec *sp, const char *path) {
    char rel[64];
    snprintf(rel, sizeof rel, "ref/arch/%s-F16.gguf", sp->arch); /* its vocabulary (phi3's has its specials) */
    gguf_file *voc = gguf_open(shared_path(rel));
    if (!voc) fail_msg("%s", tutti_last_error());
    gen g = {.w = gguf_writer_new(), .r = {0x7475747469ull}};
    for (const char *c = sp->name; *c; c++) g.r.s = g.r.s * 131 + (unsigned char)*c; /* seed from the name */
    assert_non_null(g.w);
    const char *a = sp->arch;
    char key[160], item[200];
    assert_int_equal(gguf_writer_add_str(g.w, "general.architecture", a), 0);
    snprintf(item, sizeof item, "random %s", sp->name);
    assert_int_equal(gguf_writer_add_str(g.w, "general.name", item), 0);
    /* the keys llama.cpp requires */
    if (!kv_has(sp, "context_length") && !strstr(sp->kv, "-context_length")) add_kv(g.w, a, "context_length=u32:512");
#define KV_U32(k, v) (snprintf(item, sizeof item, k "=u32:%d", (v)), add_kv(g.w, a, item))
    KV_U32("embedding_length", sp->n_embd);
    KV_U32("block_count", sp->n_layer);
    KV_U32("feed_forward_length", sp->n_ff);
    KV_U32("attention.head_count", sp->n_head);
#undef KV_U32
    if (!strstr(sp->kv, "-attention.layer_norm_rms_epsilon"))
        add_kv(g.w, a, "attention.layer_norm_rms_epsilon=f32:0.000001");
    /* the row's own keys */
    for (const char *p = sp->kv; *p;) {
        const char *e = strchr(p, ';');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(item, sizeof item, "%.*s", (int)n, p);
        if (item[0] != '-') add_kv(g.w, a, item);
        p += n + (e ? 1 : 0);
    }
    (void)key;
    /* the vocabulary */
    for (int64_t i = 0; i < gguf_n_kv(voc); i++) {
        gguf_str k = gguf_kv_key(voc, i);
        if (k.len > 10 && memcmp(k.data, "tokenizer.", 10) == 0) assert_int_equal(gguf_writer_copy_kv(g.w, voc, i), 0);
    }

    const int64_t E = sp->n_embd, q = (int64_t)sp->n_head * sp->head_dim, kv = (int64_t)sp->n_head_kv * sp->head_dim,
                  F = sp->n_ff;
    gen_matrix(&g, "token_embd.weight", N_VOCAB, E, sp->flags & F_TIED ? 3.0f : 1.0f);
    gen_vector(&g, "output_norm.weight", E, 1.0f, 0.2f);
    if (!(sp->flags & F_TIED)) gen_matrix(&g, "output.weight", N_VOCAB, E, 3.0f);
    if (sp->flags & F_ROPE_FREQS) gen_vector(&g, "rope_freqs.weight", sp->head_dim / 2, 4.5f, 3.5f);
    if (sp->flags & F_LONGROPE) {
        gen_vector(&g, "rope_factors_long.weight", sp->head_dim / 2, 6.0f, 5.0f);
        gen_vector(&g, "rope_factors_short.weight", sp->head_dim / 2, 1.5f, 0.5f);
    }
    char n[96];
    for (int il = 0; il < sp->n_layer; il++) {
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
        gen_vector(&g, NAME("attn_norm.weight"), E, 1.0f, 0.2f);
        if (sp->flags & F_FUSED_QKV) {
            gen_matrix(&g, NAME("attn_qkv.weight"), q + 2 * kv, E, sp->qk_gain);
        } else {
            gen_matrix(&g, NAME("attn_q.weight"), q, E, sp->qk_gain);
            gen_matrix(&g, NAME("attn_k.weight"), kv, E, sp->qk_gain);
            gen_matrix(&g, NAME("attn_v.weight"), kv, E, 1.0f);
        }
        if (sp->flags & F_QKV_BIAS) {
            gen_vector(&g, NAME("attn_q.bias"), q, 0.0f, 0.5f);
            gen_vector(&g, NAME("attn_k.bias"), kv, 0.0f, 0.5f);
            gen_vector(&g, NAME("attn_v.bias"), kv, 0.0f, 0.5f);
        }
        if (sp->flags & F_QK_NORM) {
            gen_vector(&g, NAME("attn_q_norm.weight"), sp->head_dim, 1.0f, 0.2f);
            gen_vector(&g, NAME("attn_k_norm.weight"), sp->head_dim, 1.0f, 0.2f);
        }
        gen_matrix(&g, NAME("attn_output.weight"), E, q, 1.0f);
        if (sp->flags & F_POST_NORMS) {
            gen_vector(&g, NAME("post_attention_norm.weight"), E, 1.0f, 0.2f);
            gen_vector(&g, NAME("post_ffw_norm.weight"), E, 1.0f, 0.2f);
        }
        gen_vector(&g, NAME("ffn_norm.weight"), E, 1.0f, 0.2f);
        if (sp->flags & F_FUSED_UP) {
            gen_matrix(&g, NAME("ffn_up.weight"), 2 * F, E, 1.0f);
        } else {
            gen_matrix(&g, NAME("ffn_gate.weight"), F, E, 1.0f);
            gen_matrix(&g, NAME("ffn_up.weight"), F, E, 1.0f);
        }
        gen_matrix(&g, NAME("ffn_down.weight"), E, F, 1.0f);
#undef NAME
    }
    if (gguf_writer_write(g.w, path) != 0) fail_msg("%s", tutti_last_error());
    gguf_writer_free(g.w);
    for (int i = 0; i < g.n_bufs; i++) free(g.bufs[i]);
    free(g.bufs);
    gguf_close(voc);
}

/* ---- the test ---- */

static const char *data_path(const char *name, const char *ext) {
    static char p[512];
    snprintf(p, sizeof p, "%s/tests/data/arch/%s.%s", TUTTI_SOURCE_DIR, name, ext);
    return p;
}

static void eval_all(tutti_session *s, const int32_t *ids, int split, float *logits) {
    assert_int_equal(tutti_session_rewind(s, 0), TUTTI_OK);
    if (split <= 0) {
        assert_int_equal(tutti_session_eval(s, ids, N_IDS, logits), TUTTI_OK);
        return;
    }
    assert_int_equal(tutti_session_eval(s, ids, split, logits), TUTTI_OK);
    for (int i = split; i < N_IDS; i++) {
        assert_int_equal(tutti_session_eval(s, ids + i, 1, NULL), TUTTI_OK);
        memcpy(logits + (size_t)i * N_VOCAB, tutti_session_logits(s), sizeof(float) * N_VOCAB);
    }
}

static void test_spec(void **state) {
    const spec *sp = *state;
    require_shared();
    char path[64];
    snprintf(path, sizeof path, "/tmp/tutti-test-rules-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_model(sp, path);
    tutti_model *m = tutti_model_load(path, NULL);
    unlink(path);

    if (sp->error) {
        /* llama.cpp refused the file too (make_refs.sh wrote .fail) */
        char *fail = read_file(data_path(sp->name, "fail"), NULL);
        if (!fail) fail_msg("%s: no %s: llama.cpp's refusal is not recorded", sp->name, data_path(sp->name, "fail"));
        free(fail);
        if (m) {
            tutti_model_free(m);
            fail_msg("%s (%s): loaded, but llama.cpp refuses it", sp->name, sp->rule);
        }
        print_message("%-24s refused like llama.cpp: %s\n", sp->name, tutti_last_error());
        if (!strstr(tutti_last_error(), sp->error))
            fail_msg("error message lacks \"%s\": %s", sp->error, tutti_last_error());
        return;
    }
    if (!m) fail_msg("%s: %s", sp->name, tutti_last_error());
    size_t len = 0;
    float *ref = (float *)read_file(data_path(sp->name, "logits.f32"), &len);
    if (!ref) fail_msg("cannot read %s", data_path(sp->name, "logits.f32"));
    assert_int_equal(len, sizeof(float) * N_POS * N_VOCAB);
    int32_t ids[N_IDS + 1];
    char *s_ids = read_file(shared_path("ref/arch/input.ids"), NULL);
    assert_non_null(s_ids);
    assert_int_equal(parse_ids(s_ids, ids, N_IDS + 1), N_IDS);
    free(s_ids);

    tutti_session_params p = tutti_session_default_params();
    p.n_ctx = N_IDS + 16; /* as dumplogits: it decides Phi-3's long/short rope factors */
    p.n_threads = 2;
    tutti_session *s = tutti_session_new(m, &p);
    if (!s) fail_msg("%s: %s", sp->name, tutti_last_error());
    float *logits = malloc(sizeof(float) * N_IDS * N_VOCAB), *rows = malloc(sizeof(float) * N_POS * N_VOCAB);
    double d[2];
    for (int k = 0; k < 2; k++) {
        eval_all(s, ids, k ? 17 : 0, logits);
        for (int i = 0; i < N_POS; i++)
            memcpy(rows + (size_t)i * N_VOCAB, logits + (size_t)i * POS_STEP * N_VOCAB, sizeof(float) * N_VOCAB);
        d[k] = max_logsoftmax_diff(rows, ref, N_POS, N_VOCAB);
    }
    print_message("%-24s max |dlogsoftmax| batch %.5f, incremental %.5f  (%s)\n", sp->name, d[0], d[1], sp->rule);
    free(logits);
    free(rows);
    free(ref);
    tutti_session_free(s);
    tutti_model_free(m);
    assert_true(d[0] <= TOL);
    assert_true(d[1] <= TOL);
}

int main(int argc, char **argv) {
    /* make_refs.sh: --list, --write NAME PATH */
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < N_SPECS; i++) printf("%s\n", g_specs[i].name);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "--write") == 0) {
        for (size_t i = 0; i < N_SPECS; i++)
            if (strcmp(g_specs[i].name, argv[2]) == 0) {
                write_model(&g_specs[i], argv[3]);
                return 0;
            }
        fprintf(stderr, "no model named %s\n", argv[2]);
        return 2;
    }
    struct CMUnitTest tests[N_SPECS];
    for (size_t i = 0; i < N_SPECS; i++)
        tests[i] = (struct CMUnitTest){g_specs[i].name, test_spec, NULL, NULL, (void *)&g_specs[i]};
    return _cmocka_run_group_tests("arch_rules", tests, N_SPECS, NULL, NULL);
}
