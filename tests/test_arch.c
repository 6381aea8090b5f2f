/* Forward pass of every architecture and tensor type against llama.cpp.
 *
 * Reference: ../shared/ref/arch/NAME.gguf (random weights) fed the 41 ids of
 * ref/arch/input.ids; NAME.logits.f32 holds llama.cpp's logits [41][512]
 * (see ../shared/README.md and oracle/make_refs.sh).  The measure is the max
 * over positions and ids of |Δ log-softmax|.  Each file is checked twice:
 * the whole prompt in one batch, and split (a prefix batch, then one token at
 * a time) so that the KV-cache path is checked against the same reference.
 *
 * Rows named "quant/..." are the small llama files of the tensor types that
 * ../shared has no file of (MXFP4, the i-quants): tests/data/quant/models,
 * written by llama-quantize with llama.cpp's logits beside them (made by
 * tests/data/quant/make_models.sh), of the 105-token vocabulary of
 * BabyLlama-tok105 and fed the 33 ids of tests/data/quant/models/input.ids:
 * [33][105].
 *
 * Adding an architecture = adding rows to g_rows.  The tolerances come from
 * the task: F32/F16 0.02, BF16 0.05, quantized 0.15 (llama.cpp quantizes
 * activations to 8 bits for quantized weights, we do not).
 *
 * The second half checks load-time errors on deliberately broken copies of
 * llama-F16.gguf (made with the gguf writer): wrong shape, unsupported type,
 * missing tensor, unknown architecture; and session errors. */
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

#define N_IDS 41 /* ref/arch/input.ids */
#define N_VOCAB 512
#define N_VOCAB_QUANT 105

typedef struct arch_row {
    const char *name; /* ref/arch/<name>.gguf */
    double tol;
} arch_row;

#define TOL_FLOAT 0.02
#define TOL_BF16 0.05
#define TOL_QUANT 0.15

static const arch_row g_rows[] = {
    {"llama-F32", TOL_FLOAT},           {"llama-F16", TOL_FLOAT},           {"llama-BF16", TOL_BF16},
    {"llama-Q8_0", TOL_QUANT},          {"llama-Q4_0", TOL_QUANT},          {"llama-Q4_1", TOL_QUANT},
    {"llama-Q5_0", TOL_QUANT},          {"llama-Q5_1", TOL_QUANT},          {"llama-Q2_K", TOL_QUANT},
    {"llama-Q3_K_M", TOL_QUANT},        {"llama-Q4_K_M", TOL_QUANT},        {"llama-Q5_K_M", TOL_QUANT},
    {"llama-Q6_K", TOL_QUANT},          {"llama-IQ4_NL", TOL_QUANT},        {"llama-IQ4_XS", TOL_QUANT},
    {"llama-tied-F16", TOL_FLOAT},      {"llama-ropefreqs-F16", TOL_FLOAT}, {"qwen2-F16", TOL_FLOAT},
    {"qwen2-Q8_0", TOL_QUANT},          {"qwen2-Q4_K_M", TOL_QUANT},        {"qwen3-F16", TOL_FLOAT},
    {"qwen3-Q8_0", TOL_QUANT},          {"qwen3-Q4_K_M", TOL_QUANT},        {"gemma2-F16", TOL_FLOAT},
    {"gemma2-Q8_0", TOL_QUANT},         {"gemma2-Q4_K_M", TOL_QUANT},       {"gemma3-F16", TOL_FLOAT},
    {"gemma3-Q8_0", TOL_QUANT},         {"gemma3-Q4_K_M", TOL_QUANT},       {"phi3-F16", TOL_FLOAT},
    {"phi3-Q8_0", TOL_QUANT},           {"phi3-Q4_K_M", TOL_QUANT},         {"quant/llama-MXFP4", TOL_QUANT},
    {"quant/llama-IQ2_XXS", TOL_QUANT}, {"quant/llama-IQ2_XS", TOL_QUANT},  {"quant/llama-IQ2_S", TOL_QUANT},
    {"quant/llama-IQ3_XXS", TOL_QUANT}, {"quant/llama-IQ3_S", TOL_QUANT},   {"quant/llama-IQ1_S", TOL_QUANT},
    {"quant/llama-IQ1_M", TOL_QUANT},
};
#define N_ROWS (sizeof g_rows / sizeof g_rows[0])

static bool is_quant_row(const char *name) { return !strncmp(name, "quant/", 6); }

/* The row's prompt ids (BOS first); returns their count. */
static int read_input_ids(const char *name, int32_t *ids) {
    char path[512];
    if (is_quant_row(name)) snprintf(path, sizeof path, "%s/tests/data/quant/models/input.ids", TUTTI_SOURCE_DIR);
    else snprintf(path, sizeof path, "%s", shared_path("ref/arch/input.ids"));
    char *s = read_file(path, NULL);
    if (!s) fail_msg("cannot read %s", path);
    int n = parse_ids(s, ids, N_IDS + 1);
    free(s);
    return n;
}

/* Path of row `name`'s file with suffix ext (".gguf", ".logits.f32"). */
static const char *row_path(const char *name, const char *ext) {
    static char buf[2][512];
    static int k;
    char *b = buf[k++ % 2], rel[256];
    if (is_quant_row(name)) {
        snprintf(b, 512, "%s/tests/data/quant/models/%s%s", TUTTI_SOURCE_DIR, name + 6, ext);
        return b;
    }
    snprintf(rel, sizeof rel, "ref/arch/%s%s", name, ext);
    snprintf(b, 512, "%s", shared_path(rel));
    return b;
}

static float *read_ref_logits(const char *name, int n_ids, int n_vocab) {
    const char *path = row_path(name, ".logits.f32");
    size_t len = 0;
    float *ref = (float *)read_file(path, &len);
    if (!ref) fail_msg("cannot read %s", path);
    assert_int_equal(len, sizeof(float) * (size_t)n_ids * (size_t)n_vocab);
    return ref;
}

static void test_arch_row(void **state) {
    const arch_row *row = *state;
    if (!is_quant_row(row->name)) require_shared();
    int32_t ids[N_IDS + 1];
    const int n_ids = read_input_ids(row->name, ids), n_vocab = is_quant_row(row->name) ? N_VOCAB_QUANT : N_VOCAB;
    assert_int_equal(n_ids, is_quant_row(row->name) ? 33 : N_IDS);
    float *ref = read_ref_logits(row->name, n_ids, n_vocab);

    tutti_model *m = tutti_model_load(row_path(row->name, ".gguf"), NULL);
    if (!m) fail_msg("%s: %s", row->name, tutti_last_error());
    assert_int_equal(tutti_model_n_vocab(m), n_vocab);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    tutti_session *s = tutti_session_new(m, &sp);
    if (!s) fail_msg("%s: %s", row->name, tutti_last_error());

    /* 1. the whole prompt in one batch */
    float *logits = malloc(sizeof(float) * (size_t)n_ids * (size_t)n_vocab);
    assert_int_equal(tutti_session_eval(s, ids, n_ids, logits), TUTTI_OK);
    assert_int_equal(tutti_session_n_past(s), n_ids);
    const double d_batch = max_logsoftmax_diff(logits, ref, n_ids, n_vocab);
    /* the last row is also what tutti_session_logits gives */
    assert_memory_equal(tutti_session_logits(s), logits + (size_t)(n_ids - 1) * (size_t)n_vocab,
                        sizeof(float) * (size_t)n_vocab);

    /* 2. rewind, a 17-token batch, then one token at a time through the cache */
    eval_prefix_then_steps(s, ids, 17, n_ids, n_vocab, logits);
    const double d_incr = max_logsoftmax_diff(logits, ref, n_ids, n_vocab);

    print_message("%-22s max |dlogsoftmax| batch %.5f, incremental %.5f (tolerance %.2f)\n", row->name, d_batch, d_incr,
                  row->tol);
    assert_true(d_batch <= row->tol);
    assert_true(d_incr <= row->tol);
    free(logits);
    free(ref);
    tutti_session_free(s);
    tutti_model_free(m);
}

/* ---- errors on broken files ---- */

typedef struct mutation {
    const char *tensor; /* tensor to change (NULL: none) */
    bool drop;          /* leave it out */
    int64_t ne1;        /* > 0: new row count (data: zeros) */
    int type;           /* >= 0: new type (data: zeros) */
    const char *arch;   /* non-NULL: new general.architecture */
} mutation;

/* Writes a modified copy of ref/arch/llama-F16.gguf to a temporary file;
 * returns its path (static buffer). */
static const char *write_mutant(const mutation *mu, void **zeros) {
    static char path[64];
    gguf_file *f = gguf_open(shared_path("ref/arch/llama-F16.gguf"));
    if (!f) fail_msg("%s", tutti_last_error());
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        if (mu->arch && gguf_str_eq(gguf_kv_key(f, i), "general.architecture")) {
            assert_int_equal(gguf_writer_add_str(w, "general.architecture", mu->arch), 0);
            continue;
        }
        if (gguf_str_eq(gguf_kv_key(f, i), "general.alignment")) continue;
        assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
    }
    *zeros = calloc(1, 4 << 20);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        int64_t ne[GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        int type = t->type;
        const void *data = t->data;
        if (mu->tensor && strcmp(name, mu->tensor) == 0) {
            if (mu->drop) continue;
            if (mu->ne1 > 0) ne[1] = mu->ne1;
            if (mu->type >= 0) type = mu->type;
            data = *zeros;
        }
        assert_int_equal(gguf_writer_add_tensor(w, name, type, t->n_dims, ne, data), 0);
    }
    snprintf(path, sizeof path, "/tmp/tutti-test-arch-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    if (gguf_writer_write(w, path) != 0) fail_msg("%s", tutti_last_error());
    gguf_writer_free(w);
    gguf_close(f);
    return path;
}

static void expect_load_error(const mutation *mu, const char *const *needles) {
    require_shared();
    void *zeros = NULL;
    const char *path = write_mutant(mu, &zeros);
    tutti_model *m = tutti_model_load(path, NULL);
    const char *err = tutti_last_error();
    unlink(path);
    free(zeros);
    if (m) {
        tutti_model_free(m);
        fail_msg("a broken model loaded without error");
    }
    print_message("error: %s\n", err);
    for (int i = 0; needles[i]; i++)
        if (!strstr(err, needles[i])) fail_msg("error message lacks \"%s\": %s", needles[i], err);
}

static void test_error_shape(void **state) {
    (void)state;
    mutation mu = {.tensor = "blk.1.attn_k.weight", .ne1 = 64, .type = -1};
    const char *needles[] = {"blk.1.attn_k.weight", "has wrong shape; expected [256, 128], got [256, 64]", NULL};
    expect_load_error(&mu, needles);
}

static void test_error_type(void **state) {
    (void)state;
    mutation mu = {.tensor = "blk.0.ffn_up.weight", .type = TUTTI_TYPE_Q8_1};
    const char *needles[] = {"blk.0.ffn_up.weight", "q8_1", NULL};
    expect_load_error(&mu, needles);
}

static void test_error_missing(void **state) {
    (void)state;
    mutation mu = {.tensor = "blk.1.ffn_down.weight", .drop = true, .type = -1};
    const char *needles[] = {"blk.1.ffn_down.weight", "missing", NULL};
    expect_load_error(&mu, needles);
}

static void test_error_arch(void **state) {
    (void)state;
    mutation mu = {.arch = "gpt-j-9000", .type = -1};
    const char *needles[] = {"gpt-j-9000", "not supported", "llama", NULL};
    expect_load_error(&mu, needles);
}

static void test_session_errors(void **state) {
    (void)state;
    require_shared();
    assert_null(tutti_model_load(shared_path("ref/arch/does-not-exist.gguf"), NULL));
    tutti_model *m = tutti_model_load(shared_path("ref/arch/llama-F16.gguf"), NULL);
    if (!m) fail_msg("%s", tutti_last_error());
    assert_string_equal(tutti_model_arch(m), "llama");
    assert_int_equal(tutti_model_n_ctx_train(m), 512);
    assert_non_null(tutti_model_vocab(m));
    assert_int_equal(tutti_vocab_n_tokens(tutti_model_vocab(m)), 512);
    /* describe: the facts of gen_arch_models.py's llama build */
    char *desc = NULL;
    size_t desc_len = 0;
    FILE *mf = open_memstream(&desc, &desc_len);
    assert_non_null(mf);
    tutti_model_describe(m, mf);
    fclose(mf);
    const char *facts[] = {"architecture: llama", "n_embd 256",     "n_layer 2", "n_ff 768", "n_head 4",
                           "n_head_kv 2",         "head_dim 64/64", "f16",       NULL};
    for (int i = 0; facts[i]; i++)
        if (!strstr(desc, facts[i])) fail_msg("describe lacks \"%s\":\n%s", facts[i], desc);
    free(desc);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 8;
    sp.n_threads = 1;
    tutti_session *s = tutti_session_new(m, &sp);
    assert_non_null(s);
    assert_null(tutti_session_logits(s));
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    /* context overflow: nothing appended */
    assert_int_equal(tutti_session_eval(s, ids, 9, NULL), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "n_ctx"));
    assert_int_equal(tutti_session_n_past(s), 0);
    assert_int_equal(tutti_session_eval(s, ids, 6, NULL), TUTTI_OK);
    assert_int_equal(tutti_session_eval(s, ids, 3, NULL), TUTTI_ERR);
    assert_int_equal(tutti_session_n_past(s), 6);
    /* id out of range */
    int32_t bad = 512;
    assert_int_equal(tutti_session_eval(s, &bad, 1, NULL), TUTTI_ERR);
    assert_non_null(strstr(tutti_last_error(), "512"));
    bad = -1;
    assert_int_equal(tutti_session_eval(s, &bad, 1, NULL), TUTTI_ERR);
    /* rewind bounds */
    assert_int_equal(tutti_session_rewind(s, 7), TUTTI_ERR);
    assert_int_equal(tutti_session_rewind(s, -1), TUTTI_ERR);
    assert_int_equal(tutti_session_rewind(s, 2), TUTTI_OK);
    assert_int_equal(tutti_session_n_past(s), 2);
    /* bad session params */
    sp.n_ctx = -5;
    assert_null(tutti_session_new(m, &sp));
    tutti_session_free(s);
    tutti_model_free(m);
}

int main(void) {
    struct CMUnitTest tests[N_ROWS + 5];
    size_t n = 0;
    for (size_t i = 0; i < N_ROWS; i++) {
        tests[n] = (struct CMUnitTest){g_rows[i].name, test_arch_row, NULL, NULL, (void *)&g_rows[i]};
        n++;
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_error_shape);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_error_type);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_error_missing);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_error_arch);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_session_errors);
    return _cmocka_run_group_tests("arch", tests, n, NULL, NULL);
}
