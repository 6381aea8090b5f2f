/* Tests of mergekit-moe configurations in tutti merge (src/merge/moe.c,
 * moe_router.c): stories260K and its two fine-tunes as a mixture of experts.
 *
 * Against tests/moe_ref.py, an independent numpy implementation of
 * mergekit-moe (its own float64 llama forward pass for the hidden states,
 * token ids of the prompts from llama.cpp's tokenizer, tests/data/moe_merge/
 * prompts.json): the router of every layer for each gate_mode (hidden,
 * hidden_avg, cheap_embed with negative prompts, random, uniform_random), the
 * experts' matrices (residual_scale applied), everything else the base's.
 * Against llama.cpp (tests/data/moe_merge/make_refs.sh): the files merged
 * here have the tensors of the files llama.cpp ran (sha256 of every tensor),
 * so its logits on them are references for tutti's own forward pass of the
 * mixture.  And the configurations mergekit refuses. */
#include "test_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "merge_common.h"
#include "tutti.h"

static const char *data_path(const char *name) {
    static char buf[4][1024];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 1024, "%s/tests/data/moe_merge/%s", TUTTI_SOURCE_DIR, name);
    return b;
}

/* tests/data/moe_merge/NAME.yaml with SHARED/ made the ../shared path, into
 * tmp(NAME.yaml); a replacement for its gate_mode line when mode is given. */
static const char *config_from(const char *name, const char *mode, const char *out_name) {
    size_t len;
    char *t = read_file(data_path(name), &len);
    assert_non_null(t);
    const char *shared = shared_path("");
    size_t sl = strlen(shared);
    if (sl && shared[sl - 1] == '/') sl--;
    FILE *f = fopen(tmp(out_name), "w");
    assert_non_null(f);
    for (char *line = t, *nl; *line; line = nl) {
        nl = strchr(line, '\n');
        nl = nl ? nl + 1 : line + strlen(line);
        if (mode && !strncmp(line, "gate_mode:", 10)) {
            fprintf(f, "gate_mode: %s\n", mode);
            continue;
        }
        for (char *p = line; p < nl; p++) {
            if (!strncmp(p, "SHARED/", 7)) {
                fwrite(shared, 1, sl, f);
                p += 5; /* "SHARED" -> the folder, keep the slash */
                continue;
            }
            fputc(*p, f);
        }
    }
    fclose(f);
    free(t);
    return tmp(out_name);
}

static void reference_check(const char *cfg, const char *gguf, int seed) {
    reference_run(NULL, "moe_ref.py check %s %s %s %d", cfg, gguf, data_path("prompts.json"), seed);
}

/* tests/data/moe_merge/NAME.yaml merged into tmp(PREFIX-NAME.gguf), whose
 * path goes to gguf[512]. */
static void merge_config(const char *name, const char *prefix, char *gguf) {
    char yaml[64], out[64], args[2048];
    snprintf(yaml, sizeof yaml, "%s.yaml", name);
    snprintf(out, sizeof out, "%s-%s.gguf", prefix, name);
    snprintf(gguf, 512, "%s", tmp(out));
    snprintf(args, sizeof args, "--config %s -o %s", config_from(yaml, NULL, yaml), gguf);
    merge_ok(args);
}

static void test_moe_vs_reference(void **state) {
    (void)state;
    require_shared();
    static const char *const modes[] = {NULL, "hidden_avg", "random", "uniform_random"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        char name[64], out[64], args[2048];
        snprintf(name, sizeof name, "hidden-%s.yaml", modes[i] ? modes[i] : "hidden");
        snprintf(out, sizeof out, "hidden-%s.gguf", modes[i] ? modes[i] : "hidden");
        const char *cfg = config_from("hidden.yaml", modes[i], name);
        snprintf(args, sizeof args, "--config %s -o %s --seed 5", cfg, tmp(out));
        merge_ok(args);
        reference_check(cfg, tmp(out), 5);
    }
    const char *cfg = config_from("cheap.yaml", NULL, "cheap.yaml");
    char args[2048];
    snprintf(args, sizeof args, "--config %s -o %s", cfg, tmp("cheap.gguf"));
    merge_ok(args);
    reference_check(cfg, tmp("cheap.gguf"), 0);
}

/* sha256 of every tensor's data, "name hash" lines as make_refs.sh wrote them. */
static void assert_tensors_as(const char *gguf, const char *want_file) {
    size_t len;
    char *want = read_file(data_path(want_file), &len);
    assert_non_null(want);
    gguf_file *f = gguf_open(gguf);
    assert_non_null(f);
    int n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++, n++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char hex[65], line[256];
        sha256_hex(t->data, t->size, hex);
        snprintf(line, sizeof line, "%.*s %s\n", (int)t->name.len, t->name.data, hex);
        if (!strstr(want, line))
            fail_msg("%s: tensor %.*s is not the one llama.cpp ran (%s)", gguf, (int)t->name.len, t->name.data,
                     want_file);
    }
    int lines = 0;
    for (size_t k = 0; k < len; k++) lines += want[k] == '\n';
    assert_int_equal(n, lines);
    gguf_close(f);
    free(want);
}

/* The mixtures llama.cpp ran: the same tensors here, so its logits are
 * references for tutti's forward pass of them. */
static void test_moe_files_as_llamacpp_ran(void **state) {
    (void)state;
    require_shared();
    static const char *const names[] = {"hidden", "cheap"};
    for (int i = 0; i < 2; i++) {
        char gguf[512], tensors[64];
        merge_config(names[i], "ll", gguf);
        snprintf(tensors, sizeof tensors, "%s.tensors", names[i]);
        assert_tensors_as(gguf, tensors);
        gguf_file *f = gguf_open(gguf);
        uint32_t v;
        assert_true(gguf_get_u32(f, "llama.expert_count", &v));
        assert_int_equal(v, 3);
        assert_true(gguf_get_u32(f, "llama.expert_used_count", &v));
        assert_int_equal(v, i == 0 ? 1 : 2);
        gguf_close(f);
    }
}

/* tutti's own forward pass of the mixtures against llama.cpp's logits on
 * them, in log-softmax: the float32 mixture within 0.02 (the bound;
 * measured with the MoE branch's tutti: 0.009), the float16 one with two
 * experts a token within 0.05 (measured 0.048 at one of 118 positions, median
 * 0.007: rounding of F16 weights and activations spread over every position,
 * not a different choice of experts). */
static void test_moe_logits_vs_llamacpp(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *idt = read_file(data_path("input.ids"), &len);
    assert_non_null(idt);
    int32_t ids[512];
    int n = parse_ids(idt, ids, 512);
    free(idt);
    assert_true(n > 100);
    static const char *const names[] = {"hidden", "cheap"};
    for (int i = 0; i < 2; i++) {
        char gguf[512], ref_name[64];
        merge_config(names[i], "lg", gguf);
        snprintf(ref_name, sizeof ref_name, "%s.logits.f32", names[i]);
        tutti_model *m = tutti_model_load(gguf, NULL);
        if (!m) fail_msg("%s: %s", gguf, tutti_last_error());
        int n_vocab = tutti_model_n_vocab(m);
        /* the reference keeps positions 0, 4, 8, ... (make_refs.sh) */
        const int n_ref = (n + 3) / 4;
        float *ref = (float *)read_file(data_path(ref_name), &len);
        assert_non_null(ref);
        assert_int_equal(len, sizeof(float) * (size_t)n_ref * (size_t)n_vocab);
        tutti_session_params sp = tutti_session_default_params();
        sp.n_ctx = 256;
        sp.n_threads = 2;
        tutti_session *s = tutti_session_new(m, &sp);
        assert_non_null(s);
        float *logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
        assert_non_null(logits);
        assert_int_equal(tutti_session_eval(s, ids, n, logits), TUTTI_OK);
        double d = max_logsoftmax_diff_every(logits, 0, n, ref, 4, n_vocab);
        print_message("moe %s: tutti vs llama.cpp max |dlogsoftmax| %.4f over %d of %d positions\n", names[i], d, n_ref,
                      n);
        assert_true(d <= (i == 0 ? 0.02 : 0.05));
        free(logits), free(ref);
        tutti_session_free(s);
        tutti_model_free(m);
    }
}

/* The configuration that fmt makes is refused: status 1, needle on
 * stderr, no output file. */
static void expect_config_refusal(const char *needle, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_config_refusal(const char *needle, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    char *yaml = malloc((size_t)n + 1);
    assert_non_null(yaml);
    vsnprintf(yaml, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    write_text(tmp("bad.yaml"), yaml);
    char args[2048], *err;
    snprintf(args, sizeof args, "--config %s -o %s", tmp("bad.yaml"), tmp("bad.gguf"));
    int st = merge_cli(args, &err);
    if (st != 1 || !strstr(err, needle))
        fail_msg("config:\n%s\nstatus %d, stderr: %s (want '%s')", yaml, st, err, needle);
    free(err), free(yaml);
    assert_int_equal(access(tmp("bad.gguf"), F_OK), -1);
}

static void test_moe_refusals(void **state) {
    (void)state;
    require_shared();
    const char *b = shared_path("models/stories260K.gguf"),
               *d = shared_path("models/stories260K-ft/stories260K-dreams.gguf");
    expect_config_refusal("base_model missing", "experts:\n  - source_model: %s\n    positive_prompts: [a]\n", d);
    expect_config_refusal(
        "experts_per_token is larger",
        "base_model: %s\nexperts_per_token: 3\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n"
        "  - {source_model: %s, positive_prompts: [b]}\n",
        b, b, d);
    expect_config_refusal("same prompts",
                          "base_model: %s\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n"
                          "  - {source_model: %s, positive_prompts: [a]}\n",
                          b, b, d);
    expect_config_refusal("same source_model",
                          "base_model: %s\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n"
                          "  - {source_model: %s, positive_prompts: [b]}\n",
                          b, d, d);
    expect_config_refusal("expert 2 has no positive_prompts",
                          "base_model: %s\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n"
                          "  - {source_model: %s}\n",
                          b, b, d);
    expect_config_refusal("shared_experts",
                          "base_model: %s\nshared_experts:\n  - {source_model: %s}\nexperts:\n  - {source_model: %s, "
                          "positive_prompts: [a]}\n",
                          b, b, d);
    expect_config_refusal(
        "Mixtral layout only",
        "base_model: %s\narchitecture: qwen\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n", b, d);
    expect_config_refusal(
        "gate_mode must be",
        "base_model: %s\ngate_mode: psychic\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n", b, d);
    expect_config_refusal(
        "noise_scale must be",
        "base_model: %s\nexperts_per_token: 1\nexperts:\n  - {source_model: %s, positive_prompts: [a], noise_scale: -1}\n",
        b, d);
    expect_config_refusal("unknown key in an expert",
                          "base_model: %s\nexperts:\n  - {source_model: %s, positive_prompts: [a], wieght: 1}\n", b, d);
    /* inputs: another vocabulary, another shape, an MoE already, a prompt too long */
    expect_config_refusal("different vocabularies",
                          "base_model: %s\ngate_mode: random\nexperts_per_token: 1\nexperts:\n  - {source_model: %s}\n",
                          b, shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf"));
    expect_config_refusal("different architectures",
                          "base_model: %s\ngate_mode: random\nexperts_per_token: 1\nexperts:\n  - {source_model: %s}\n",
                          shared_path("ref/arch/llama-F16.gguf"), shared_path("ref/arch/qwen2-F16.gguf"));
    expect_config_refusal("layers",
                          "base_model: %s\ngate_mode: random\nexperts_per_token: 1\nexperts:\n  - {source_model: %s}\n",
                          b, shared_path("ref/arch/llama-F16.gguf"));
    char *long_prompt = malloc(20000);
    assert_non_null(long_prompt);
    memset(long_prompt, 'a', 19999);
    long_prompt[19999] = 0;
    expect_config_refusal(
        "longer than",
        "base_model: %s\nexperts:\n  - {source_model: %s, positive_prompts: [a]}\n  - {source_model: %s, "
        "positive_prompts: [\"%s\"]}\n",
        b, b, d, long_prompt);
    free(long_prompt);
}

static int setup(void **state) {
    (void)state;
    return merge_dir_make("/tmp/tutti-merge-moe-XXXXXX");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_vs_reference),
        cmocka_unit_test(test_moe_files_as_llamacpp_ran),
        cmocka_unit_test(test_moe_logits_vs_llamacpp),
        cmocka_unit_test(test_moe_refusals),
    };
    if (getenv("TUTTI_TEST_FILTER")) cmocka_set_test_filter(getenv("TUTTI_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, merge_dir_remove);
}
