/* Mixture-of-experts architectures against llama.cpp.
 *
 * Reference: the random-weight models of tests/data/moe (made by
 * tests/data/moe/make_refs.sh with ../shared/oracle/gen_moe_models.py: two
 * shapes and seeds per architecture, F32 and F16 of shape a, Q8_0 and
  * Q4_K_M of shape b, a K-quant shape of qwen3moe, gpt-oss's MXFP4) fed the ids of
 * tests/data/moe/input.ids; NAME.logits.f32 holds llama.cpp's logits at
 * positions 0, 2, 4, ... [(N_IDS + 1) / 2][105], the positions compared.
 * The measure is the max over those positions and ids of |Δ log-softmax|, tolerances as for the dense architectures (test_arch.c):
 * 0.02 F32/F16, 0.15 quantized.  Each file is checked three ways: the whole
 * prompt in one batch (experts computed over the rows routed to them), a
 * prefix then one token at a time (a generated token reads only its
 * experts), and two timelines in one pass (tutti_session_eval_multi).
 *
 * The routing itself is also checked on crafted router logits: llama.cpp's
 * selection (softmax, sigmoid with the selection bias, groups, gpt-oss's
 * softmax over the selected), renormalization, scaling, and exact ties.
 *
 * And an MoE model as an ensemble member on the command line, beside dense
 * models: fused greedy runs in token and byte alignment and an eval with a
 * model of another tokenizer, against what llama.cpp's logits give
 * (tests/data/moe/make_cli_refs.py). */
#include "test_common.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tutti.h"

#define N_IDS 33
#define N_REF ((N_IDS + 1) / 2) /* the references keep positions 0, 2, 4, ... */
#define N_VOCAB 105
#define TOL_FLOAT 0.02
#define TOL_QUANT 0.15

typedef struct moe_row {
    const char *name; /* tests/data/moe/<name>.gguf */
    double tol;
} moe_row;

#define ARCH_ROWS(a) \
    {a "-a-F32", TOL_FLOAT}, {a "-a-F16", TOL_FLOAT}, {a "-b-Q8_0", TOL_QUANT}, { a "-b-Q4_K_M", TOL_QUANT }

static const moe_row g_rows[] = {
    ARCH_ROWS("qwen3moe"),
    {"qwen3moe-k-Q4_K_M", TOL_QUANT},
    ARCH_ROWS("mixtral"),
    ARCH_ROWS("qwen2moe"),
    ARCH_ROWS("olmoe"),
    ARCH_ROWS("granitemoe"),
    ARCH_ROWS("glm4moe"),
    ARCH_ROWS("gpt-oss"),
    ARCH_ROWS("deepseek2"),
    ARCH_ROWS("deepseek3"),
    /* gpt-oss's experts in MXFP4: the generator's gguf-py file (the rest F32, as
     * released), llama-quantize's MXFP4_MOE (the rest Q8_0) */
    {"gpt-oss-a-MXFP4", TOL_QUANT},
    {"gpt-oss-b-MXFP4_MOE", TOL_QUANT},
};
#define N_ROWS (sizeof g_rows / sizeof g_rows[0])

static const char *moe_path(const char *name, const char *ext) {
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/tests/data/moe/%s%s", TUTTI_SOURCE_DIR, name, ext);
    return path[k];
}

static void read_ids(int32_t *ids) {
    char *s = read_file(moe_path("input", ".ids"), NULL);
    assert_non_null(s);
    assert_int_equal(parse_ids(s, ids, N_IDS + 1), N_IDS);
    free(s);
}

static float *read_ref(const char *name) {
    size_t len = 0;
    float *ref = (float *)read_file(moe_path(name, ".logits.f32"), &len);
    if (!ref) fail_msg("cannot read %s", moe_path(name, ".logits.f32"));
    assert_int_equal(len, sizeof(float) * N_REF * N_VOCAB);
    return ref;
}

static void test_moe_row(void **state) {
    const moe_row *row = *state;
    int32_t ids[N_IDS + 1];
    read_ids(ids);
    float *ref = read_ref(row->name);
    tutti_model *m = tutti_model_load(moe_path(row->name, ".gguf"), NULL);
    if (!m) fail_msg("%s: %s", row->name, tutti_last_error());
    assert_int_equal(tutti_model_n_vocab(m), N_VOCAB);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    tutti_session *s = tutti_session_new(m, &sp), *s2 = tutti_session_new(m, &sp);
    if (!s || !s2) fail_msg("%s: %s", row->name, tutti_last_error());
    float *logits = malloc(sizeof(float) * N_IDS * N_VOCAB);
    assert_non_null(logits);

    /* 1. the whole prompt in one batch */
    assert_int_equal(tutti_session_eval(s, ids, N_IDS, logits), TUTTI_OK);
    const double d_batch = max_logsoftmax_diff_every(logits, 0, N_IDS, ref, 2, N_VOCAB);

    /* 2. a 9-token batch, then one token at a time through the cache */
    eval_prefix_then_steps(s, ids, 9, N_IDS, N_VOCAB, logits);
    const double d_incr = max_logsoftmax_diff_every(logits, 0, N_IDS, ref, 2, N_VOCAB);

    /* 3. two timelines in one pass: the last token of a 21-token prefix and
     * of the whole prompt, each over its own cache */
    assert_int_equal(tutti_session_rewind(s, 0), TUTTI_OK);
    assert_int_equal(tutti_session_eval(s, ids, 20, NULL), TUTTI_OK);
    assert_int_equal(tutti_session_eval(s2, ids, N_IDS - 1, NULL), TUTTI_OK);
    tutti_session *ss[2] = {s, s2};
    const int32_t *seq[2] = {ids + 20, ids + N_IDS - 1};
    const int32_t nn[2] = {1, 1};
    assert_int_equal(tutti_session_eval_multi(ss, seq, nn, 2), 1);
    const double d_multi = fmax(max_logsoftmax_diff_every(tutti_session_logits(s), 20, 1, ref, 2, N_VOCAB),
                                max_logsoftmax_diff_every(tutti_session_logits(s2), N_IDS - 1, 1, ref, 2, N_VOCAB));

    /* 4. a timeline that starts from another's first 12 cache rows (byte
     * alignment's sibling hypotheses: tutti_session_copy_tokens; latent
     * attention has a compressed key cache and no value cache) */
    tutti_session_copy_tokens(s2, s, 12);
    assert_int_equal(tutti_session_eval(s2, ids + 12, N_IDS - 12, logits), TUTTI_OK);
    const double d_copy = max_logsoftmax_diff_every(logits, 12, N_IDS - 12, ref, 2, N_VOCAB);

    print_message("%-20s max |dlogsoftmax| batch %.5f, incremental %.5f, two timelines %.5f, copied cache %.5f "
                  "(tolerance %.2f)\n",
                  row->name, d_batch, d_incr, d_multi, d_copy, row->tol);
    assert_true(d_batch <= row->tol);
    assert_true(d_incr <= row->tol);
    assert_true(d_multi <= row->tol);
    assert_true(d_copy <= row->tol);
    /* a context shift re-rotates cached keys: latent attention's compressed
     * rows are refused with a message (they crashed: no value cache) */
    const bool mla = strncmp(row->name, "deepseek", 8) == 0;
    assert_int_equal(tutti_session_shift(s2, 1, 4), mla ? TUTTI_ERR : TUTTI_OK);
    if (mla) assert_non_null(strstr(tutti_last_error(), "latent attention"));
    free(logits);
    free(ref);
    tutti_session_free(s);
    tutti_session_free(s2);
    tutti_model_free(m);
}

/* ---- routing on crafted router logits ----
 * Expected values are worked out here in double from the definitions
 * (llama.cpp's build_moe_ffn), not by the code under test. */

static tutti_moe_routing routing(int32_t n_expert, int32_t k, tutti_gating g) {
    return (tutti_moe_routing){.n_expert = n_expert, .n_expert_used = k, .gating = g, .n_groups = 1, .n_group_used = 1};
}

static void expect_route(const tutti_moe_routing *r, const float *logits_in, const int32_t *want_sel,
                         const double *want_w) {
    float logits[64];
    int32_t sel[8];
    float w[8];
    memcpy(logits, logits_in, sizeof(float) * (size_t)r->n_expert);
    tutti_moe_route(r, logits, 1, sel, w);
    for (int32_t j = 0; j < r->n_expert_used; j++) {
        if (sel[j] != want_sel[j]) fail_msg("rank %d: expert %d, expected %d", j, sel[j], want_sel[j]);
        if (fabs(w[j] - want_w[j]) > 1e-6 * fmax(1.0, fabs(want_w[j])))
            fail_msg("rank %d: weight %.9g, expected %.9g", j, w[j], want_w[j]);
    }
}

/* softmax over all experts, the best k, renormalized (Mixtral, Qwen3-MoE) or not (Qwen2-MoE, OLMoE), scaled */
static void test_route_softmax(void **state) {
    (void)state;
    const float lg[5] = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f};
    double z = 0;
    for (int e = 0; e < 5; e++) z += exp(lg[e]);
    const double p1 = exp(2.0) / z, p3 = exp(1.5) / z, p0 = exp(0.5) / z;
    tutti_moe_routing r = routing(5, 3, TUTTI_GATING_SOFTMAX);
    expect_route(&r, lg, (int32_t[]){1, 3, 0}, (double[]){p1, p3, p0});
    r.norm_w = true;
    const double s = p1 + p3 + p0;
    expect_route(&r, lg, (int32_t[]){1, 3, 0}, (double[]){p1 / s, p3 / s, p0 / s});
    r.scale = 2.5f;
    expect_route(&r, lg, (int32_t[]){1, 3, 0}, (double[]){2.5 * p1 / s, 2.5 * p3 / s, 2.5 * p0 / s});
    r.scale = 1.0f; /* 1 and 0 mean no scaling */
    expect_route(&r, lg, (int32_t[]){1, 3, 0}, (double[]){p1 / s, p3 / s, p0 / s});
}

/* Equal scores: the lower index ranks first (ggml's argsort of a few values
 * is an insertion sort); one ulp apart, the larger wins. */
static void test_route_ties(void **state) {
    (void)state;
    const float tie[4] = {1.0f, 3.0f, 3.0f, 0.0f};
    tutti_moe_routing r = routing(4, 1, TUTTI_GATING_SOFTMAX);
    r.norm_w = true;
    expect_route(&r, tie, (int32_t[]){1}, (double[]){1.0});
    r.n_expert_used = 2;
    expect_route(&r, tie, (int32_t[]){1, 2}, (double[]){0.5, 0.5});
    const float near[4] = {1.0f, 3.0f, nextafterf(3.0f, 4.0f), 0.0f};
    r.n_expert_used = 1;
    expect_route(&r, near, (int32_t[]){2}, (double[]){1.0});
    /* a NaN logit never ranks above a number (and the routing stays defined) */
    const float nan_lg[4] = {NAN, 0.5f, 0.25f, NAN};
    r = routing(4, 2, TUTTI_GATING_SIGMOID);
    expect_route(&r, nan_lg, (int32_t[]){1, 2}, (double[]){1 / (1 + exp(-0.5)), 1 / (1 + exp(-0.25))});
}

/* DeepSeek-V3 / GLM-4.5: sigmoid scores, the bias only chooses, the unbiased
 * scores weigh (renormalized, scaled); a sum below 2^-14 is clamped. */
static void test_route_sigmoid_bias(void **state) {
    (void)state;
    const float lg[4] = {2.0f, 1.0f, 0.0f, -1.0f};
    const float bias[4] = {0.0f, 0.0f, 0.0f, 1.0f}; /* lifts expert 3 (0.27 + 1) above all */
    tutti_moe_routing r = routing(4, 2, TUTTI_GATING_SIGMOID);
    r.probs_bias = bias;
    r.norm_w = true;
    r.scale = 2.0f;
    const double s3 = 1 / (1 + exp(1.0)), s0 = 1 / (1 + exp(-2.0));
    expect_route(&r, lg, (int32_t[]){3, 0}, (double[]){2 * s3 / (s3 + s0), 2 * s0 / (s3 + s0)});
    const float tiny[4] = {-20.0f, -21.0f, -30.0f, -30.0f};
    r.probs_bias = NULL;
    r.scale = 0;
    const double t0 = 1 / (1 + exp(20.0)), t1 = 1 / (1 + exp(21.0));
    expect_route(&r, tiny, (int32_t[]){0, 1}, (double[]){t0 / 6.103515625e-5, t1 / 6.103515625e-5});
}

/* Group-limited routing: 8 experts in 4 groups of 2, the 2 groups whose two
 * best scores sum highest are kept; the single best expert (6, alone in a
 * weak group) drops out. */
static void test_route_groups(void **state) {
    (void)state;
    const float lg[8] = {1.0f, 1.2f, 0.1f, 0.0f, 0.9f, 0.95f, 3.0f, -3.0f};
    /* group sums of sigmoid scores: g0 .73+.77, g1 .52+.5, g2 .71+.72, g3 .95+.05: keep g0 and g2 */
    tutti_moe_routing r = routing(8, 3, TUTTI_GATING_SIGMOID);
    r.n_groups = 4;
    r.n_group_used = 2;
    const double sg[8] = {1 / (1 + exp(-1.0)), 1 / (1 + exp(-1.2)), 0, 0, 1 / (1 + exp(-0.9)), 1 / (1 + exp(-0.95))};
    expect_route(&r, lg, (int32_t[]){1, 0, 5}, (double[]){sg[1], sg[0], sg[5]});
    r.n_groups = 1; /* without groups expert 6 leads */
    expect_route(&r, lg, (int32_t[]){6, 1, 0}, (double[]){1 / (1 + exp(-3.0)), sg[1], sg[0]});
}

/* gpt-oss: the raw (biased) logits select, a softmax over the selected ones weighs. */
static void test_route_softmax_weight(void **state) {
    (void)state;
    const float lg[4] = {0.0f, 2.0f, 1.0f, 3.0f};
    tutti_moe_routing r = routing(4, 2, TUTTI_GATING_SOFTMAX_WEIGHT);
    const double z = exp(3.0) + exp(2.0);
    expect_route(&r, lg, (int32_t[]){3, 1}, (double[]){exp(3.0) / z, exp(2.0) / z});
}

/* ---- broken mixture-of-experts metadata: clear errors, no crash ---- */

typedef struct bad_key {
    const char *file;   /* tests/data/moe/<file>.gguf */
    const char *key;    /* key replaced (or removed: value < 0) */
    int64_t value;      /* new u32 value */
    const char *expect; /* substring of the error */
} bad_key;

static const bad_key g_bad[] = {
    {"qwen3moe-a-F32", "qwen3moe.expert_used_count", 0, "expert_used_count = 0 is out of range (1..4)"},
    {"qwen3moe-a-F32", "qwen3moe.expert_used_count", 5, "expert_used_count = 5 is out of range (1..4)"},
    {"qwen3moe-a-F32", "qwen3moe.expert_used_count", -1, "expert_used_count is missing"},
    {"qwen3moe-a-F32", "qwen3moe.expert_count", 100000, "expert_count = 100000 is out of range (0..512)"},
    {"qwen3moe-a-F32", "qwen3moe.expert_count", -1, "expert_count must be set"},
    {"mixtral-a-F32", "llama.expert_count", 3, "tensor 'blk.0.ffn_gate_inp.weight' has wrong shape"},
    {"deepseek3-a-F32", "deepseek2.expert_group_count", 3, "do not fit expert_count 8"},
    {"deepseek3-a-F32", "deepseek2.expert_group_used_count", 4, "do not fit expert_count 8"},
    {"deepseek3-a-F32", "deepseek2.expert_gating_func", 7, "expert_gating_func = 7 is out of range"},
    {"deepseek3-a-F32", "deepseek2.attention.key_length_mla", -1, "old layout (attn_kv_b"},
    {"deepseek3-a-F32", "deepseek2.attention.kv_lora_rank", 12, "latent attention needs"},
    {"deepseek3-a-F32", "deepseek2.leading_dense_block_count", 3, "leading_dense_block_count = 3 is out of range"},
    {"glm4moe-a-F32", "glm4moe.expert_shared_count", -1, "expert_shared_count is missing"},
    {"gpt-oss-a-F32", "gpt-oss.attention.sliding_window", -1, "attention.sliding_window is missing"},
    {"granitemoe-a-F32", "granitemoe.logit_scale", -1, "logit_scale is missing"},
    {"olmoe-a-F32", "olmoe.attention.head_count", 4, "must equal embedding_length"},
};

static void test_moe_bad_metadata(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof g_bad / sizeof g_bad[0]; c++) {
        const bad_key *b = &g_bad[c];
        gguf_file *f = gguf_open(moe_path(b->file, ".gguf"));
        if (!f) fail_msg("%s", tutti_last_error());
        gguf_writer *w = gguf_writer_new();
        assert_non_null(w);
        for (int64_t i = 0; i < gguf_n_kv(f); i++) {
            if (gguf_str_eq(gguf_kv_key(f, i), "general.alignment") || gguf_str_eq(gguf_kv_key(f, i), b->key)) continue;
            assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
        }
        if (b->value >= 0) assert_int_equal(gguf_writer_add_u32(w, b->key, (uint32_t)b->value), 0);
        for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor_info *t = gguf_tensor(f, i);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
            assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data), 0);
        }
        void *buf;
        size_t size;
        assert_int_equal(gguf_writer_write_buffer(w, &buf, &size), 0);
        gguf_writer_free(w);
        gguf_close(f);
        tutti_model *m = tutti_model_load_buffer(buf, size, b->file, NULL);
        if (m) fail_msg("%s with %s = %lld: loaded", b->file, b->key, (long long)b->value);
        if (!strstr(tutti_last_error(), b->expect))
            fail_msg("%s with %s = %lld: '%s' lacks '%s'", b->file, b->key, (long long)b->value, tutti_last_error(),
                     b->expect);
        free(buf);
    }
}

/* ---- an MoE model as an ensemble member (tutti run, tutti eval) ---- */

static char *cli(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", TUTTI_CLI, args);
    int st = -1;
    char *out = run_cmd(cmd, &st);
    if (st != 0) fail_msg("exit %d: tutti %s", st, args);
    return out;
}

static void expect_text(const char *args, const char *ref) {
    char *want = read_file(moe_path(ref, ".txt"), NULL), *got = cli(args);
    assert_non_null(want);
    if (strcmp(got, want)) fail_msg("tutti %s\n  printed  [%s]\n  llama.cpp [%s]", args, got, want);
    free(want);
    free(got);
}

/* BabyLlama-tok105 writes add_bos_token / add_eos_token, the generator
 * leaves them at their defaults (the same values): token alignment compares
 * the keys, so the MoE file gets them too. */
static void add_bos_keys(struct gguf_writer *w, const void *arg) {
    (void)arg;
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true), 0);
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false), 0);
}

/* Greedy fused runs of deepseek3-a (latent attention, expert groups) with
 * the dense BabyLlama-tok105 (same characters as tokens) in token and byte
 * alignment, and with stories260K (another tokenizer; weight 0: the text is
 * the MoE model's). */
static void test_cli_fused_runs(void **state) {
    (void)state;
    require_shared();
    char moe[] = "/tmp/tutti-test-moe-XXXXXX", args[2048];
    int fd = mkstemp(moe);
    assert_true(fd >= 0);
    close(fd);
    write_gguf_copy(moe_path("deepseek3-a-F32", ".gguf"), moe, add_bos_keys, NULL);
    const char *baby = shared_path("models/BabyLlama-tok105/babyllama-tok105.gguf");
    const char *common = "--temp 0 -n 24 -t 2 -p \"Once upon a time\"";
    snprintf(args, sizeof args, "run -m %s -m %s --align token %s", moe, baby, common);
    expect_text(args, "cli-run-token");
    snprintf(args, sizeof args, "run -m %s -m %s --align byte %s", moe, baby, common);
    expect_text(args, "cli-run-byte");
    snprintf(args, sizeof args, "run -m %s -m %s -w 1,0 %s", moe_path("deepseek3-a-F32", ".gguf"),
             shared_path("models/stories260K.gguf"), common);
    expect_text(args, "cli-run-moe");
    unlink(moe);
}

/* Bits per byte of gpt-oss-a (sliding window, sinks) and stories260K on the
 * story text (byte alignment): each member's token-level figure is
 * llama.cpp's; the equal mixture costs at most a bit per byte more than its
 * better member. */
static void test_cli_eval(void **state) {
    (void)state;
    require_shared();
    char args[2048];
    snprintf(args, sizeof args, "eval --text %s -m %s -m %s --json -t 2", shared_path("eval/stories-dev.txt"),
             moe_path("gpt-oss-a-F32", ".gguf"), shared_path("models/stories260K.gguf"));
    char *out = cli(args), *ref = read_file(moe_path("cli-eval", ".txt"), NULL);
    assert_non_null(ref);
    double want[2];
    assert_int_equal(sscanf(ref, "%lf %lf", &want[0], &want[1]), 2);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *members = cJSON_GetObjectItem(j, "members");
    assert_int_equal(cJSON_GetArraySize(members), 2);
    double best_byte = INFINITY;
    for (int i = 0; i < 2; i++) {
        const cJSON *mi = cJSON_GetArrayItem(members, i);
        const double bpb = cJSON_GetObjectItem(mi, "bits_per_byte")->valuedouble;
        best_byte = fmin(best_byte, cJSON_GetObjectItem(mi, "byte_bits_per_byte")->valuedouble);
        print_message("member %d: %.6f bits per byte, llama.cpp %.6f\n", i + 1, bpb, want[i]);
        assert_true(fabs(bpb - want[i]) < 1e-4 * want[i]);
    }
    const double ens = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "ensemble"), "bits_per_byte")->valuedouble;
    print_message("ensemble %.6f (byte alignment, best member %.6f)\n", ens, best_byte);
    assert_true(isfinite(ens) && ens <= best_byte + 1.0);
    cJSON_Delete(j);
    free(out);
    free(ref);
}

/* ---- a rank's share of the experts (--split-experts) ----
 * tutti_model_load_experts places of each routed-expert tensor only the
 * share's matrices (copied or repacked out of the mapping), leaving the
 * others in the file's mapping; with experts_only (ranks 1..K-1) nothing
 * else is placed.  Checked on the tensors themselves, and the share's
 * products (tutti_moe_experts over random rows) equal the whole model's
 * bit for bit (end to end, tests/test_mpi.sh compares the logits). */
static const void *file_data(const tutti_model *m, const char *name) {
    const gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
    assert_non_null(t);
    return t->data;
}

static void expect_share(const tutti_model *whole, const tutti_model *part, int32_t rank, int32_t k, bool only) {
    const int32_t ne = part->hp.n_expert, e0 = ne * rank / k, e1 = ne * (rank + 1) / k;
    assert_int_equal(part->part_e0, e0);
    assert_int_equal(part->part_e1, e1);
    const int32_t il = part->hp.n_layer - 1; /* an MoE layer */
    const tutti_layer *L = &part->layers[il];
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
    /* the share placed, the other experts where the file has them */
    assert_ptr_equal(L->ffn_up_exps.data, file_data(part, name));
    assert_non_null(L->ffn_up_exps.part);
    assert_true(L->ffn_up_exps.part0 == e0 && L->ffn_up_exps.part1 == e1);
    const size_t mat = (size_t)L->ffn_up_exps.n_rows * tutti_row_size(L->ffn_up_exps.type, L->ffn_up_exps.n_cols);
    assert_ptr_equal(tutti_weight_mat(&L->ffn_up_exps, e0), L->ffn_up_exps.part);
    if (e1 < ne)
        assert_ptr_equal(tutti_weight_mat(&L->ffn_up_exps, e1), (const char *)file_data(part, name) + e1 * mat);
    if (e0 > 0) assert_ptr_equal(tutti_weight_mat(&L->ffn_up_exps, 0), file_data(part, name));
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il); /* the router: rank 0's */
    if (only) assert_ptr_equal(L->ffn_gate_inp.data, file_data(part, name));
    else assert_ptr_not_equal(L->ffn_gate_inp.data, file_data(part, name));
    /* the share's products are the whole model's */
    const int64_t n_embd = part->hp.n_embd, nf = part->hp.n_ff_exp, rows = 3 * (int64_t)ne;
    int32_t offs[TUTTI_MAX_EXPERTS + 1];
    for (int32_t e = 0; e <= ne; e++) offs[e] = 3 * e;
    float *xe = malloc(sizeof(float) * (size_t)(rows * n_embd)), *buf[2][3];
    assert_non_null(xe);
    for (int64_t i = 0; i < rows * n_embd; i++) xe[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    tutti_mm mm[2 * TUTTI_MAX_EXPERTS];
    tutti_threadpool *tp = tutti_threadpool_new(2);
    assert_non_null(tp);
    assert_non_null(tutti_threadpool_scratch(tp, (size_t)(rows * (n_embd > nf ? n_embd : nf)) + 16 * (size_t)ne));
    const tutti_model *ms[2] = {whole, part};
    for (int v = 0; v < 2; v++) {
        buf[v][0] = calloc((size_t)(rows * nf), sizeof(float));
        buf[v][1] = calloc((size_t)(rows * nf), sizeof(float));
        buf[v][2] = calloc((size_t)(rows * n_embd), sizeof(float));
        tutti_moe_experts(tp, ms[v], &ms[v]->layers[il], offs, e0, e1, xe, buf[v][0], buf[v][1], buf[v][2], mm);
    }
    assert_memory_equal(buf[0][2] + offs[e0] * n_embd, buf[1][2] + offs[e0] * n_embd,
                        sizeof(float) * (size_t)((offs[e1] - offs[e0]) * n_embd));
    for (int v = 0; v < 2; v++)
        for (int j = 0; j < 3; j++) free(buf[v][j]);
    free(xe);
    tutti_threadpool_free(tp);
}

static void test_expert_share_load(void **state) {
    (void)state;
    const char *files[] = {"qwen3moe-k-Q4_K_M", "gpt-oss-b-MXFP4_MOE", "deepseek3-b-Q8_0"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        tutti_model *whole = tutti_model_load(moe_path(files[f], ".gguf"), NULL);
        assert_non_null(whole);
        for (int32_t k = 2; k <= 3; k++)
            for (int32_t r = 0; r < k; r++) {
                tutti_model *part = tutti_model_load_experts(moe_path(files[f], ".gguf"), NULL, r, k, r > 0);
                if (!part) fail_msg("%s: %s", files[f], tutti_last_error());
                expect_share(whole, part, r, k, r > 0);
                tutti_model_free(part);
            }
        tutti_model_free(whole);
    }
    assert_null(tutti_model_load_experts(moe_path(files[0], ".gguf"), NULL, 2, 2, true));
}

/* ---- the 1-3-bit i-quants of the MoE downloads, against llama.cpp ----
 * Where the oracle chroot exists (root; not in CI: skipped there, as
 * TUTTI_TEST_NO_ORACLE=1 pretends), ../shared/oracle/gen_moe_models.py
 * writes a qwen3moe (the generator's default shape: n_embd 256, 8 experts
 * of 256, top 2, two layers, stories260K's 512 tokens; a seed of its own)
 * with --quant into a temporary directory: llama-imatrix computes an
 * importance matrix on generated text and llama-quantize makes the
 * IQ2_XXS, IQ2_S (IQ2_XS tensors), IQ2_M (IQ2_S tensors) and IQ3_S copies
 * from it.  Each file's experts must be of that type (no silent fallback),
 * and llama.cpp's logits (/oracle/dumplogits) of the ids of input.ids
 * must be tutti's at the quantized tolerance, in one batch (experts over
 * the rows routed to them) and token by token.  The files are ~1.2-1.8 MB
 * each, too large for tests/data; the run takes ~40 s. */
#define ORACLE "/opt/llamacpp-oracle"

typedef struct iq_case {
    const char *ftype; /* llama-quantize's name, in the generator's file name */
    int type;          /* what the routed experts' tensors hold */
} iq_case;

static float *oracle_logits(const char *dir, const char *file, const char *ids, int32_t n, int32_t nv) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "chroot " ORACLE " /oracle/dumplogits -m %s/%s --ids %s -t 2 --out %s/%s.f32 >/dev/null 2>&1",
             dir + strlen(ORACLE), file, ids, dir + strlen(ORACLE), file);
    int st = -1;
    free(run_cmd(cmd, &st));
    if (st != 0) fail_msg("dumplogits failed (%d) on %s", st, file);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.f32", dir, file);
    size_t len = 0;
    float *ref = (float *)read_file(path, &len);
    assert_non_null(ref);
    assert_int_equal(len, sizeof(float) * (size_t)n * (size_t)nv);
    return ref;
}

static void check_iq_file(const char *dir, const iq_case *c, const char *ids_text, const int32_t *ids) {
    char file[128], path[1024];
    snprintf(file, sizeof file, "qwen3moe-%s.gguf", c->ftype);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tutti_model *m = tutti_model_load(path, NULL);
    if (!m) fail_msg("%s: %s", file, tutti_last_error());
    const int32_t nv = tutti_model_n_vocab(m);
    static const char *const exps[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int32_t il = 0; il < m->hp.n_layer; il++)
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, exps[k]);
            const gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
            assert_non_null(t);
            if (t->type != c->type)
                fail_msg("%s: %s is %s, expected %s", file, name, tutti_type_name(t->type), tutti_type_name(c->type));
        }
    float *ref = oracle_logits(dir, file, ids_text, N_IDS, nv);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    tutti_session *s = tutti_session_new(m, &sp);
    assert_non_null(s);
    float *logits = malloc(sizeof(float) * N_IDS * (size_t)nv);
    assert_non_null(logits);
    assert_int_equal(tutti_session_eval(s, ids, N_IDS, logits), TUTTI_OK);
    const double d_batch = max_logsoftmax_diff(logits, ref, N_IDS, nv);
    eval_prefix_then_steps(s, ids, 9, N_IDS, nv, logits);
    const double d_incr = max_logsoftmax_diff(logits, ref, N_IDS, nv);
    print_message("%-24s experts %-7s max |dlogsoftmax| batch %.5f, incremental %.5f (tolerance %.2f)\n", file,
                  tutti_type_name(c->type), d_batch, d_incr, TOL_QUANT);
    assert_true(d_batch <= TOL_QUANT);
    assert_true(d_incr <= TOL_QUANT);
    free(logits);
    free(ref);
    tutti_session_free(s);
    tutti_model_free(m);
}

static void test_iquants_oracle(void **state) {
    (void)state;
    struct stat sb;
    if (stat(ORACLE "/oracle/dumplogits", &sb) != 0 || geteuid() != 0 || getenv("TUTTI_TEST_NO_ORACLE")) {
        print_message("no oracle chroot at " ORACLE " (or not root): the i-quant MoE files are not made\n");
        skip();
    }
    require_shared();
    char dir[] = ORACLE "/tmp/tutti-moe-iq-XXXXXX", cmd[4096];
    assert_non_null(mkdtemp(dir));
    const char *in = dir + strlen(ORACLE);
    snprintf(cmd, sizeof cmd,
             "cp %s %s %s/ && chroot " ORACLE " python3 %s/gen_moe_models.py %s/stories260K.gguf %s --only qwen3moe "
             "--seed 23 --quant >%s/gen.log 2>&1",
             shared_path("oracle/gen_moe_models.py"), shared_path("models/stories260K.gguf"), dir, in, in, in, dir);
    int st = -1;
    free(run_cmd(cmd, &st));
    if (st != 0) fail_msg("gen_moe_models.py --quant failed (%d): see %s/gen.log", st, dir);
    char *ids_text = read_file(moe_path("input", ".ids"), NULL);
    assert_non_null(ids_text);
    ids_text[strcspn(ids_text, "\r\n")] = 0;
    int32_t ids[N_IDS + 1];
    read_ids(ids);
    static const iq_case cases[] = {{"IQ2_XXS", TUTTI_TYPE_IQ2_XXS},
                                    {"IQ2_S", TUTTI_TYPE_IQ2_XS},
                                    {"IQ2_M", TUTTI_TYPE_IQ2_S},
                                    {"IQ3_S", TUTTI_TYPE_IQ3_S}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_iq_file(dir, &cases[i], ids_text, ids);
    free(ids_text);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    free(run_cmd(cmd, &st));
}

int main(void) {
    struct CMUnitTest tests[N_ROWS + 10];
    for (size_t i = 0; i < N_ROWS; i++) {
        tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_moe_row, (void *)&g_rows[i]);
        tests[i].name = g_rows[i].name;
    }
    const struct CMUnitTest route[] = {
        cmocka_unit_test(test_route_softmax),        cmocka_unit_test(test_route_ties),
        cmocka_unit_test(test_route_sigmoid_bias),   cmocka_unit_test(test_route_groups),
        cmocka_unit_test(test_route_softmax_weight), cmocka_unit_test(test_moe_bad_metadata),
        cmocka_unit_test(test_cli_fused_runs),       cmocka_unit_test(test_cli_eval),
        cmocka_unit_test(test_expert_share_load),    cmocka_unit_test(test_iquants_oracle),
    };
    memcpy(tests + N_ROWS, route, sizeof route);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
