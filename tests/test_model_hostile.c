/* Hostile model files: structurally valid GGUF whose model metadata or
 * tensors lie (zero or huge dimensions, shapes that do not match the
 * metadata, out-of-range token ids, missing or unsupported tensors, ...).
 * Every case is built in memory with the project's GGUF writer from a tiny,
 * self-made llama model (n_embd 16, one layer, a 40-token SentencePiece
 * vocabulary); the loader must refuse it with a message naming the problem,
 * or, for the cases marked "loads", load it and evaluate tokens without
 * reading out of bounds (the sanitizer CI build checks that).
 *
 * Every case is also held against llama.cpp's verdict on the same file
 * (tests/data/gguf_oracle/hostile.txt, made by run.sh there in the oracle
 * chroot): it must refuse what tutti refuses and load what tutti loads,
 * unless the case says why not (.diverges: tutti refuses metadata llama.cpp
 * takes, or a tensor it does not implement).
 *
 * The same builder wrote the seeds of fuzz/fuzz_model.c (fuzz/corpus/model.tar):
 *   TUTTI_HOSTILE_DUMP=/tmp/seeds build/tests/test_model_hostile
 * writes every case there as <name>.in; fuzz/corpus.sh add model /tmp/seeds/...
 * puts them in the pack. */
#include "test_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_write.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tutti.h"

/* Dimensions of the base model. */
enum { N_EMBD = 16, N_HEAD = 2, N_HEAD_KV = 1, HEAD_DIM = 8, N_FF = 32, N_CTX = 64 };

/* What a case changes in the base model.  Zero-initialised = the base. */
typedef struct hostile {
    const char *name;
    const char *expect; /* substring of the error; NULL = must load and run */
    const char *arch;
    int64_t block_count, context_length, embedding_length, feed_forward_length, head_count, head_count_kv, key_length,
        rope_dims;           /* 0 = base value, -1 = key omitted, 0x80000000 = written as 0 */
    int64_t n_layer_tensors; /* layers actually written (0 = 1) */
    float rms_eps;           /* 0 = base, NAN allowed */
    bool rms_eps_set;
    int64_t bos, eos;    /* 0 = base (1/2), else this value (-1 = key omitted) */
    int64_t n_tokens;    /* 0 = base (40), -1 = empty list */
    int64_t embd_rows;   /* token_embd rows (0 = n_tokens) */
    int64_t output_rows; /* 0 = tied (no output.weight), else that many rows */
    int64_t output_cols; /* 0 = N_EMBD */
    const char *skip;    /* tensor left out */
    const char *retype;  /* tensor written with type `type` instead */
    int type;
    bool nan_weights;      /* every weight NaN */
    bool embd_1d;          /* token_embd written as one dimension */
    const char *tok_model; /* tokenizer.ggml.model (NULL = "llama") */
    struct {
        const char *name;
        int64_t ne0, ne1; /* ne1 == 0: 1-D */
    } extra[3];           /* tensors added (f32, after the others) */
    const char *reshape;  /* tensor written with ne1 = reshape_ne1 (a 1-D one becomes 2-D) */
    int64_t reshape_ne1;
    size_t truncate;      /* bytes cut off the end of the file */
    const char *diverges; /* why llama.cpp decides otherwise (NULL: it loads exactly the "loads" cases;
                               tests/data/gguf_oracle/hostile.txt holds its verdicts) */
} hostile;

/* Gemma 2 requires its two post-norms per layer. */
#define GEMMA2_NORMS \
    {"blk.0.post_attention_norm.weight", N_EMBD, 0}, { "blk.0.post_ffw_norm.weight", N_EMBD, 0 }

static const hostile g_cases[] = {
    {.name = "ok-base"},
    {.name = "ok-output", .output_rows = 40},
    {.name = "ok-nan-weights", .nan_weights = true},
    {.name = "n_head-0", .expect = "head_count = 0", .head_count = 0x7fffffff + 1LL},
    {.name = "n_head_kv-0", .expect = "head_count_kv = 0", .head_count_kv = 0x7fffffff + 1LL},
    {.name = "n_head_kv-not-dividing",
     .expect = "not a multiple of attention.head_count_kv",
     .head_count = 2,
     .head_count_kv = 3},
    {.name = "n_embd-mismatch",
     .expect = "tensor 'token_embd.weight' has wrong shape; expected [24, 40], got [16, 40]",
     .embedding_length = 24},
    {.name = "n_embd-smaller-than-heads", .expect = "head size", .embedding_length = 1, .key_length = -1},
    {.name = "block_count-huge", .expect = "block_count = 1000000", .block_count = 1000000},
    {.name = "block_count-too-many", .expect = "missing tensor 'blk.1.attn_norm.weight'", .block_count = 4000},
    {.name = "context_length-0",
     .expect = "context_length = 0",
     .diverges = "metadata: llama.cpp takes 0",
     .context_length = 0x7fffffff + 1LL},
    {.name = "context_length-huge",
     .expect = "context_length = 4294967295",
     .diverges = "metadata",
     .context_length = 0xffffffffLL},
    {.name = "rope-odd", .expect = "rope.dimension_count = 7", .rope_dims = 7},
    {.name = "rope-gt-head", .expect = "rope.dimension_count = 10", .rope_dims = 10},
    {.name = "key_length-huge", .expect = "too large", .key_length = 1 << 20},
    {.name = "n_ff-mismatch",
     .expect = "tensor 'blk.0.ffn_gate.weight' has wrong shape; expected [16, 33], got [16, 32]",
     .feed_forward_length = 33},
    {.name = "rms_eps-nan", .expect = "not finite", .diverges = "metadata", .rms_eps = NAN, .rms_eps_set = true},
    {.name = "rms_eps-0", .expect = "out of range", .diverges = "metadata", .rms_eps = -0.0f, .rms_eps_set = true},
    {.name = "vocab-gt-embd", .expect = "tokens", .embd_rows = 30},
    {.name = "vocab-lt-embd", .expect = "tokens", .embd_rows = 50},
    {.name = "bos-out-of-range", .expect = "bos_token_id: token id 1000", .diverges = "tokenizer", .bos = 1000},
    {.name = "ok-eos-negative",
     .eos = -5,
     .diverges = "llama.cpp wants token ids as u32"}, /* negative = no such token, as in llama.cpp */
    {.name = "tokens-empty", .expect = "not a usable vocabulary size", .n_tokens = -1},
    {.name = "missing-wq", .expect = "missing tensor 'blk.0.attn_q.weight'", .skip = "blk.0.attn_q.weight"},
    {.name = "missing-output_norm", .expect = "missing tensor 'output_norm.weight'", .skip = "output_norm.weight"},
    {.name = "missing-token_embd", .expect = "missing tensor 'token_embd.weight'", .skip = "token_embd.weight"},
    {.name = "type-i16",
     .expect = "cannot compute with",
     .diverges = "tutti computes fewer types",
     .retype = "blk.0.ffn_up.weight",
     .type = TUTTI_TYPE_I16},
    {.name = "type-i32",
     .expect = "cannot compute with",
     .diverges = "tutti computes fewer types",
     .retype = "blk.0.attn_k.weight",
     .type = TUTTI_TYPE_I32},
    {.name = "norm-f16",
     .expect = "expected f32",
     .diverges = "tutti wants f32 norms",
     .retype = "blk.0.attn_norm.weight",
     .type = TUTTI_TYPE_F16},
    {.name = "output-wrong-rows",
     .expect = "tensor 'output.weight' has wrong shape; expected [16, 40], got [16, 39]",
     .output_rows = 39},
    {.name = "output-wrong-cols",
     .expect = "tensor 'output.weight' has wrong shape; expected [16, 40], got [8, 40]",
     .output_rows = 40,
     .output_cols = 8},
    {.name = "embd-1d", .expect = "has 1 rows but the vocabulary", .embd_1d = true},
    {.name = "arch-unknown", .expect = "not supported", .arch = "mamba"},
    {.name = "tok-model-unknown", .expect = "tokenizer", .tok_model = "wordpiece-x"},
    /* llama.cpp's shape rule: dimensions past the expected ones must be 1 */
    {.name = "ok-norm-2d-1", .reshape = "blk.0.attn_norm.weight", .reshape_ne1 = 1},
    {.name = "norm-2d",
     .expect = "tensor 'blk.0.attn_norm.weight' has wrong shape; expected [16], got [16, 2]",
     .reshape = "blk.0.attn_norm.weight",
     .reshape_ne1 = 2},
    /* llama.cpp's loader: every tensor of the file must be used (n_created == n_tensors) */
    {.name = "extra-unknown",
     .expect = "tensor 'foo.weight' is not used by architecture llama",
     .extra = {{"foo.weight", 4, 0}}},
    {.name = "extra-layer",
     .expect = "tensor 'blk.1.attn_norm.weight' is not used by architecture llama",
     .extra = {{"blk.1.attn_norm.weight", N_EMBD, 0}}},
    /* llama.cpp would add this bias; tutti does not implement it: refused, not ignored */
    {.name = "extra-up-bias",
     .expect = "tensor 'blk.0.ffn_up.bias' is not used by architecture llama",
     .extra = {{"blk.0.ffn_up.bias", N_FF, 0}},
     .diverges = "llama.cpp adds this bias"},
    {.name = "ok-wo-bias", .extra = {{"blk.0.attn_output.bias", N_EMBD, 0}}},
    /* which optional tensors llama.cpp takes depends on the architecture */
    {.name = "ok-rope-freqs", .extra = {{"rope_freqs.weight", HEAD_DIM / 2, 0}}},
    {.name = "ok-qkv-bias",
     .extra = {{"blk.0.attn_q.bias", N_HEAD *HEAD_DIM, 0},
               {"blk.0.attn_k.bias", N_HEAD_KV *HEAD_DIM, 0},
               {"blk.0.attn_v.bias", N_HEAD_KV *HEAD_DIM, 0}}},
    {.name = "ok-qwen2", .arch = "qwen2"},
    {.name = "qwen2-rope-freqs",
     .expect = "tensor 'rope_freqs.weight' is not used by architecture qwen2",
     .arch = "qwen2",
     .extra = {{"rope_freqs.weight", HEAD_DIM / 2, 0}}},
    {.name = "ok-gemma2", .arch = "gemma2", .extra = {GEMMA2_NORMS}},
    {.name = "gemma2-output",
     .expect = "tensor 'output.weight' is not used by architecture gemma2",
     .arch = "gemma2",
     .output_rows = 40,
     .extra = {GEMMA2_NORMS}},
    /* llama.cpp's loader: "tensor '...' data is not within the file bounds" */
    {.name = "truncated", .expect = "tensor 'blk.0.ffn_down.weight': data [", .truncate = 8},
};
#define N_CASES (sizeof g_cases / sizeof g_cases[0])

static int64_t pick(int64_t v, int64_t base) { return v == 0 ? base : v; }

/* Deterministic small weights (no RNG state shared between cases). */
static void fill(float *p, size_t n, uint32_t seed, bool nan) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = nan ? NAN : ((float)(x % 2001) / 1000.0f - 1.0f) * 0.5f;
    }
}

/* A u32 metadata key; -1 omits it, values >= 2^31 are written as u32 (so
 * 0x80000000 encodes "0" through the 'base value' convention: see cases). */
static int add_dim(gguf_writer *w, const char *key, int64_t v, int64_t base) {
    if (v == -1) return 0;
    v = pick(v, base);
    if (v == 0x80000000LL) v = 0; /* explicit zero */
    return gguf_writer_add_u32(w, key, (uint32_t)v);
}

static int add_id(gguf_writer *w, const char *key, int64_t v) {
    return v < 0 ? gguf_writer_add_i32(w, key, (int32_t)v) : gguf_writer_add_u32(w, key, (uint32_t)v);
}

/* Builds case c into a malloc'ed buffer. */
static void *build(const hostile *c, size_t *size) {
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    const char *arch = c->arch ? c->arch : "llama";
    char key[128];
#define K(s) (snprintf(key, sizeof key, "%s." s, arch), key)
    assert_int_equal(gguf_writer_add_str(w, "general.architecture", arch), 0);
    assert_int_equal(gguf_writer_add_str(w, "general.name", c->name), 0);
    assert_int_equal(add_dim(w, K("block_count"), c->block_count, 1), 0);
    assert_int_equal(add_dim(w, K("context_length"), c->context_length, N_CTX), 0);
    assert_int_equal(add_dim(w, K("embedding_length"), c->embedding_length, N_EMBD), 0);
    assert_int_equal(add_dim(w, K("feed_forward_length"), c->feed_forward_length, N_FF), 0);
    assert_int_equal(add_dim(w, K("attention.head_count"), c->head_count, N_HEAD), 0);
    assert_int_equal(add_dim(w, K("attention.head_count_kv"), c->head_count_kv, N_HEAD_KV), 0);
    if (c->key_length > 0)
        assert_int_equal(gguf_writer_add_u32(w, K("attention.key_length"), (uint32_t)c->key_length), 0);
    if (c->rope_dims > 0)
        assert_int_equal(gguf_writer_add_u32(w, K("rope.dimension_count"), (uint32_t)c->rope_dims), 0);
    assert_int_equal(gguf_writer_add_f32(w, K("attention.layer_norm_rms_epsilon"), c->rms_eps_set ? c->rms_eps : 1e-5f),
                     0);
#undef K

    /* tokenizer: <unk> <s> </s> ▁ a..z and a few pieces */
    static const char *const extra[] = {"▁a", "▁the", "▁cat", "at", "he", "▁", ".", ",", "!", "?", "'"};
    const int64_t n_base_tok = 3 + 26 + (int64_t)(sizeof extra / sizeof extra[0]);
    const int64_t n_tok = c->n_tokens < 0 ? 0 : pick(c->n_tokens, n_base_tok);
    char **toks = calloc((size_t)n_base_tok, sizeof *toks);
    float *scores = calloc((size_t)n_base_tok, sizeof *scores);
    int32_t *types = calloc((size_t)n_base_tok, sizeof *types);
    assert_true(toks && scores && types);
    for (int64_t i = 0; i < n_base_tok; i++) {
        toks[i] = malloc(16);
        assert_non_null(toks[i]);
        if (i < 3) snprintf(toks[i], 16, "%s", (const char *[]){"<unk>", "<s>", "</s>"}[i]);
        else if (i < 29) snprintf(toks[i], 16, "%c", (char)('a' + i - 3));
        else snprintf(toks[i], 16, "%s", extra[i - 29]);
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
    }
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model", c->tok_model ? c->tok_model : "llama"), 0);
    assert_int_equal(gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n_tok),
                     0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n_tok), 0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n_tok), 0);
    /* token ids as u32, the type llama.cpp requires (a negative one as i32) */
    if (c->bos != -1) assert_int_equal(add_id(w, "tokenizer.ggml.bos_token_id", pick(c->bos, 1)), 0);
    if (c->eos != -1) assert_int_equal(add_id(w, "tokenizer.ggml.eos_token_id", pick(c->eos, 2)), 0);

    /* tensors (all data in one arena, borrowed by the writer until written) */
    const int64_t n_vocab = pick(c->embd_rows, n_base_tok);
    const int64_t nq = N_HEAD * HEAD_DIM, nk = N_HEAD_KV * HEAD_DIM;
    struct {
        const char *name;
        int64_t ne0, ne1; /* ne1 == 0: 1-D */
    } ts[20];
    int nt = 0;
#define T(n, a, b) (ts[nt].name = (n), ts[nt].ne0 = (a), ts[nt].ne1 = (b), nt++)
    T("token_embd.weight", N_EMBD, c->embd_1d ? 0 : n_vocab);
    T("output_norm.weight", N_EMBD, 0);
    if (c->output_rows) T("output.weight", pick(c->output_cols, N_EMBD), c->output_rows);
    T("blk.0.attn_norm.weight", N_EMBD, 0);
    T("blk.0.attn_q.weight", N_EMBD, nq);
    T("blk.0.attn_k.weight", N_EMBD, nk);
    T("blk.0.attn_v.weight", N_EMBD, nk);
    T("blk.0.attn_output.weight", nq, N_EMBD);
    T("blk.0.ffn_norm.weight", N_EMBD, 0);
    T("blk.0.ffn_gate.weight", N_EMBD, N_FF);
    T("blk.0.ffn_up.weight", N_EMBD, N_FF);
    T("blk.0.ffn_down.weight", N_FF, N_EMBD);
    for (int i = 0; i < 3 && c->extra[i].name; i++) T(c->extra[i].name, c->extra[i].ne0, c->extra[i].ne1);
    for (int i = 0; i < nt; i++)
        if (c->reshape && !strcmp(c->reshape, ts[i].name)) ts[i].ne1 = c->reshape_ne1;
#undef T
    size_t total = 0;
    for (int i = 0; i < nt; i++) total += (size_t)(ts[i].ne0 * (ts[i].ne1 ? ts[i].ne1 : 1));
    float *arena = malloc(total * sizeof(float) + 4096);
    assert_non_null(arena);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        if (c->skip && !strcmp(c->skip, ts[i].name)) continue;
        size_t n = (size_t)(ts[i].ne0 * (ts[i].ne1 ? ts[i].ne1 : 1));
        bool is_norm = strstr(ts[i].name, "norm") != NULL;
        fill(arena + off, n, (uint32_t)i + 1, c->nan_weights);
        if (is_norm && !c->nan_weights)
            for (size_t j = 0; j < n; j++) arena[off + j] = 1.0f;
        int type = TUTTI_TYPE_F32;
        if (c->retype && !strcmp(c->retype, ts[i].name)) type = c->type;
        int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        /* a retyped tensor reuses the f32 bytes: enough for every type used */
        assert_int_equal(gguf_writer_add_tensor(w, ts[i].name, type, ts[i].ne1 ? 2 : 1, ne, arena + off), 0);
        off += n;
    }
    void *buf = NULL;
    assert_int_equal(gguf_writer_write_buffer(w, &buf, size), 0);
    assert_true(c->truncate < *size);
    *size -= c->truncate;
    gguf_writer_free(w);
    free(arena);
    for (int64_t i = 0; i < n_base_tok; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return buf;
}

/* llama.cpp's verdict on case `name` (tests/data/gguf_oracle/hostile.txt,
 * written by run.sh there): true if it loaded the model, false if it refused
 * it (or crashed); fails when the case has no verdict. */
static bool oracle_loads(const char *name) {
    static char *text;
    size_t len;
    if (!text && !(text = read_file(TUTTI_SOURCE_DIR "/tests/data/gguf_oracle/hostile.txt", &len)))
        fail_msg("tests/data/gguf_oracle/hostile.txt is missing");
    char head[200];
    snprintf(head, sizeof head, "== %s.in: ", name);
    const char *p = strstr(text, head);
    if (!p) fail_msg("case %s has no llama.cpp verdict (run tests/data/gguf_oracle/run.sh)", name);
    return strncmp(p + strlen(head), "LOADED", 6) == 0;
}

static void test_hostile_models(void **state) {
    (void)state;
    const char *dump = getenv("TUTTI_HOSTILE_DUMP");
    for (size_t i = 0; i < N_CASES; i++) {
        const hostile *c = &g_cases[i];
        size_t size = 0;
        void *buf = build(c, &size);
        if (dump) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.in", dump, c->name);
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(buf, 1, size, f), size);
            fclose(f);
        }
        /* llama.cpp refuses what tutti refuses, and loads what it loads, unless the case says why not */
        if (!dump && oracle_loads(c->name) != !c->expect && !c->diverges)
            fail_msg("case %s: llama.cpp %s it", c->name, c->expect ? "loads" : "refuses");
        if (!dump && oracle_loads(c->name) == !c->expect && c->diverges)
            fail_msg("case %s: marked as diverging (%s), but llama.cpp agrees", c->name, c->diverges);
        tutti_model *m = tutti_model_load_buffer(buf, size, c->name, NULL);
        if (c->expect) {
            if (m) fail_msg("case %s: loaded, expected an error containing '%s'", c->name, c->expect);
            const char *err = tutti_last_error();
            if (!strstr(err, c->expect)) fail_msg("case %s: error '%s' does not contain '%s'", c->name, err, c->expect);
            if (!strstr(err, c->name)) fail_msg("case %s: error '%s' does not name the file", c->name, err);
        } else {
            if (!m) fail_msg("case %s: %s", c->name, tutti_last_error());
            tutti_session *s = tutti_session_new(m, NULL);
            assert_non_null(s);
            int32_t ids[3] = {1, 5, tutti_model_n_vocab(m) - 1};
            assert_int_equal(tutti_session_eval(s, ids, 3, NULL), 0);
            const float *lg = tutti_session_logits(s);
            assert_non_null(lg);
            /* a NaN model gives NaN logits; the base model finite ones */
            if (!c->nan_weights)
                for (int32_t j = 0; j < tutti_model_n_vocab(m); j++) assert_true(isfinite(lg[j]));
            /* out-of-range ids are refused, nothing appended */
            int32_t bad = tutti_model_n_vocab(m);
            assert_int_not_equal(tutti_session_eval(s, &bad, 1, NULL), 0);
            assert_int_equal(tutti_session_n_past(s), 3);
            tutti_session_free(s);
            tutti_model_free(m);
        }
        free(buf);
    }
}

/* ------------------------------------------------------------------------ */
/* The tensor sets of real architectures: the ref/arch models with tensors
 * added or removed, exactly as tests/data/gguf_oracle/tensor_sets.py makes
 * them for llama.cpp; tutti must load the variants llama.cpp loads and refuse
 * the ones it refuses (tensor_sets.txt), but for the features tutti does not
 * implement (the FFN biases llama.cpp adds to Llama: refused rather than
 * ignored). */

typedef struct variant {
    const char *name;
    const char *drop[3]; /* tensor names; "*suffix" drops it in every layer */
    struct {
        const char *name;
        int64_t ne0, ne1; /* sizes, or -D_* for the base model's; ne1 == 0: 1-D */
    } add[3];
} variant;

enum { D_EMBD = 1, D_VOCAB, D_NQ, D_NK, D_FF };

static const variant g_variants[] = {
    {"base", {NULL}, {{NULL, 0, 0}}},
    {"plus-qkv-bias",
     {NULL},
     {{"blk.0.attn_q.bias", -D_NQ, 0}, {"blk.0.attn_k.bias", -D_NK, 0}, {"blk.0.attn_v.bias", -D_NK, 0}}},
    {"plus-wo-bias", {NULL}, {{"blk.0.attn_output.bias", -D_EMBD, 0}}},
    {"plus-ffn-up-bias", {NULL}, {{"blk.0.ffn_up.bias", -D_FF, 0}}},
    {"plus-rope-freqs", {NULL}, {{"rope_freqs.weight", 32, 0}}},
    {"plus-unknown", {NULL}, {{"foo.weight", 4, 0}}},
    {"plus-q-norm", {NULL}, {{"blk.0.attn_q_norm.weight", 64, 0}, {"blk.0.attn_k_norm.weight", 64, 0}}},
    {"plus-post-norm",
     {NULL},
     {{"blk.0.post_attention_norm.weight", -D_EMBD, 0}, {"blk.0.post_ffw_norm.weight", -D_EMBD, 0}}},
    {"plus-layer", {NULL}, {{"blk.99.attn_norm.weight", -D_EMBD, 0}}},
    {"minus-output", {"output.weight"}, {{NULL, 0, 0}}},
    {"plus-output", {NULL}, {{"output.weight", -D_EMBD, -D_VOCAB}}},
    {"minus-qkv-bias", {"*attn_q.bias", "*attn_k.bias", "*attn_v.bias"}, {{NULL, 0, 0}}},
    {"minus-q-norm", {"*attn_q_norm.weight", "*attn_k_norm.weight"}, {{NULL, 0, 0}}},
    {"minus-post-norm", {"*post_attention_norm.weight"}, {{NULL, 0, 0}}},
};

/* Variants llama.cpp loads and tutti refuses: features tutti does not compute. */
static const char *const g_unimplemented[] = {"llama-plus-ffn-up-bias"};

static bool dropped(const variant *v, const char *name) {
    for (int i = 0; i < 3 && v->drop[i]; i++) {
        const char *d = v->drop[i];
        size_t n = strlen(name), k = strlen(d + 1);
        if (d[0] == '*' ? n >= k && !strcmp(name + n - k, d + 1) : !strcmp(name, d)) return true;
    }
    return false;
}

static void test_arch_tensor_sets_match_llamacpp(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *verdicts = read_file(TUTTI_SOURCE_DIR "/tests/data/gguf_oracle/tensor_sets.txt", &len);
    if (!verdicts) fail_msg("tests/data/gguf_oracle/tensor_sets.txt is missing");
    const char *archs[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"};
    float *ones = malloc(sizeof(float) << 20);
    assert_non_null(ones);
    for (int i = 0; i < 1 << 20; i++) ones[i] = 1.0f;
    int n_checked = 0;
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        char base[128];
        snprintf(base, sizeof base, "ref/arch/%s-F16.gguf", archs[a]);
        gguf_file *f = gguf_open(shared_path(base));
        if (!f) fail_msg("%s", tutti_last_error());
        const gguf_tensor_info *te = gguf_find_tensor(f, "token_embd.weight"),
                               *tq = gguf_find_tensor(f, "blk.0.attn_q.weight"),
                               *tk = gguf_find_tensor(f, "blk.0.attn_k.weight"),
                               *td = gguf_find_tensor(f, "blk.0.ffn_down.weight");
        const int64_t dims[] = {0, te->ne[0], te->ne[1], tq ? tq->ne[1] : 0, tk ? tk->ne[1] : 0, td->ne[0]};
        for (size_t k = 0; k < sizeof g_variants / sizeof *g_variants; k++) {
            const variant *v = &g_variants[k];
            char name[128], head[160];
            snprintf(name, sizeof name, "%s-%s", archs[a], v->name);
            snprintf(head, sizeof head, "== %s.gguf: ", name);
            const char *p = strstr(verdicts, head);
            if (!p) continue; /* the variant does not apply (tensor_sets.py skips it) */
            const bool llama_loads = !strncmp(p + strlen(head), "LOADED", 6);
            gguf_writer *w = gguf_writer_new();
            assert_non_null(w);
            for (int64_t i = 0; i < gguf_n_kv(f); i++)
                if (!gguf_str_eq(gguf_kv_key(f, i), "general.alignment"))
                    assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
            for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
                const gguf_tensor_info *t = gguf_tensor(f, i);
                char tn[64];
                snprintf(tn, sizeof tn, "%.*s", (int)t->name.len, t->name.data);
                if (dropped(v, tn)) continue;
                assert_int_equal(gguf_writer_add_tensor(w, tn, t->type, t->n_dims, t->ne, t->data), 0);
            }
            for (int i = 0; i < 3 && v->add[i].name; i++) {
                const int64_t n0 = v->add[i].ne0, n1 = v->add[i].ne1;
                int64_t ne[2] = {n0 < 0 ? dims[-n0] : n0, n1 < 0 ? dims[-n1] : n1 ? n1 : 1};
                assert_true(ne[0] * ne[1] <= 1 << 20);
                assert_int_equal(gguf_writer_add_tensor(w, v->add[i].name, TUTTI_TYPE_F32, n1 ? 2 : 1, ne, ones), 0);
            }
            void *buf;
            size_t size;
            assert_int_equal(gguf_writer_write_buffer(w, &buf, &size), 0);
            gguf_writer_free(w);
            tutti_model *m = tutti_model_load_buffer(buf, size, name, NULL);
            bool unimplemented = false;
            for (size_t u = 0; u < sizeof g_unimplemented / sizeof *g_unimplemented; u++)
                unimplemented = unimplemented || !strcmp(name, g_unimplemented[u]);
            if (unimplemented) {
                if (m || !llama_loads) fail_msg("%s: expected llama.cpp to load it and tutti to refuse it", name);
                if (!strstr(tutti_last_error(), "is not used by architecture"))
                    fail_msg("%s: %s", name, tutti_last_error());
            } else if (llama_loads && !m) {
                fail_msg("%s: llama.cpp loads it, tutti refuses: %s", name, tutti_last_error());
            } else if (!llama_loads && m) {
                fail_msg("%s: llama.cpp refuses it, tutti loads it", name);
            }
            tutti_model_free(m);
            free(buf);
            n_checked++;
        }
        gguf_close(f);
    }
    assert_int_equal(n_checked, 60); /* every variant of tensor_sets.txt */
    free(ones);
    free(verdicts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_models),
        shared_unit_test(test_arch_tensor_sets_match_llamacpp),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
