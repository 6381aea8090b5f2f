/* The CLI forms our acceptance checks use, run as a user would (the built
 * binary, TUTTI_CLI), compared with llama.cpp's reference outputs. */
#include "test_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"

/* Runs a shell command, captures stdout (malloc'd) and the exit status. */
/* Value of "text" in the last line of a ref/models jsonl (no escapes other
 * than \" and \\ and \n in these files). */
static char *ref_text(const char *jsonl) {
    size_t len;
    char *s = read_file(shared_path(jsonl), &len);
    assert_non_null(s);
    char *t = strstr(s, "\"text\":\"");
    assert_non_null(t);
    t += 8;
    char *out = malloc(strlen(t) + 1), *o = out;
    for (; *t && *t != '"'; t++) {
        if (*t == '\\') {
            t++;
            *o++ = *t == 'n' ? '\n' : *t;
        } else {
            *o++ = *t;
        }
    }
    *o = 0;
    free(s);
    return out;
}

static void test_generate_greedy_matches_llama_cpp(void **state) {
    (void)state;
    require_shared();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p \"Once upon a time\" -n 48 --temp 0 2>/dev/null", TUTTI_CLI,
             shared_path("models/stories260K.gguf"));
    int st;
    char *out = run_cmd(cmd, &st), *want = ref_text("ref/models/stories260K.p1.jsonl");
    assert_int_equal(st, 0);
    assert_string_equal(out, want);
    free(out);
    free(want);
}

static void test_generate_same_seed_same_text(void **state) {
    (void)state;
    require_shared();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p \"Lily and Ben\" -n 32 --seed 11 2>/dev/null", TUTTI_CLI,
             shared_path("models/stories260K.gguf"));
    int st1, st2;
    char *a = run_cmd(cmd, &st1), *b = run_cmd(cmd, &st2);
    assert_int_equal(st1, 0);
    assert_true(strlen(a) > 10);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

static void test_logits_match_reference(void **state) {
    (void)state;
    require_shared();
    char out_path[] = "/tmp/tutti_cli_logitsXXXXXX";
    int fd = mkstemp(out_path);
    assert_true(fd >= 0);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s logits -m %s -p \"$(cat %s)\" --out %s 2>/dev/null", TUTTI_CLI,
             shared_path("models/stories260K.gguf"), shared_path("ref/models/p2.txt"), out_path);
    int st;
    free(run_cmd(cmd, &st));
    assert_int_equal(st, 0);
    size_t n_got, n_ref;
    char *got = read_file(out_path, &n_got), *ref = read_file(shared_path("ref/models/stories260K.p2.logits.f32"), &n_ref);
    unlink(out_path);
    assert_non_null(got);
    assert_non_null(ref);
    assert_int_equal(n_got, n_ref);
    double d = max_logsoftmax_diff((float *)got, (float *)ref, (int)(n_ref / 4 / 512), 512);
    print_message("stories260K p2 via CLI: max |dlogsoftmax| = %.2e\n", d);
    assert_true(d <= 0.02);
    free(got);
    free(ref);
}

static void test_tokenize_inp_matches_reference(void **state) {
    (void)state;
    require_shared();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s --inp %s", TUTTI_CLI, shared_path("models/vocab/ggml-vocab-llama3.gguf"),
             shared_path("ref/tokenize/tokenizer-tests.inp"));
    int st;
    char *out = run_cmd(cmd, &st), *want = read_file(shared_path("ref/tokenize/llama3.out"), NULL);
    assert_int_equal(st, 0);
    assert_non_null(want);
    assert_string_equal(out, want);
    free(out);
    free(want);
}

static void test_bad_input_exits_with_message(void **state) {
    (void)state;
    require_shared();
    const char *cases[][2] = {
        {"generate -m /nonexistent.gguf -p hi", "1"},
        {"generate -p hi", "2"},
        {"generate -m MODEL -p hi -n abc", "2"},
        {"generate -m MODEL -p hi --bogus", "2"},
        {"generate -m MODEL -p hi --top-p 2", "2"},
        {"logits -m MODEL --ids 1,x,3 --out /dev/null", "2"},
        {"logits -m MODEL --ids 1,99999 --out /dev/null", "1"},
        {"nosuchcommand", "2"},
        {"generate -m MODEL -p \"$(head -c 20000 /dev/zero | tr '\\0' a)\" -c 64", "1"},
        {"run -m MODEL -m MODEL -p a -n 4 -w 1,nan", "1"},
        {"run -m MODEL -m MODEL -p a -n 4 --temps 0,1", "1"},
        {"run -m MODEL -m MODEL -p a -n 4 -w 1,2,3", "1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1024], cmd[4096];
        /* every MODEL stands for stories260K */
        size_t len = 0;
        for (const char *p = cases[i][0]; *p && len + 1 < sizeof args;) {
            if (!strncmp(p, "MODEL", 5)) {
                len += (size_t)snprintf(args + len, sizeof args - len, "%s", shared_path("models/stories260K.gguf"));
                p += 5;
            } else {
                args[len++] = *p++;
            }
        }
        args[len < sizeof args ? len : sizeof args - 1] = 0;
        snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", TUTTI_CLI, args);
        int st;
        char *err = run_cmd(cmd, &st);
        print_message("%s -> %d: %s", args, st, err);
        assert_int_equal(st, atoi(cases[i][1]));
        assert_true(strlen(err) > 10); /* says what was wrong */
        free(err);
    }
}

/* Copy of a GGUF with tokenizer.chat_template set to `tmpl` (written to path). */
static void write_with_template(const char *src, const char *tmpl, const char *path) {
    gguf_file *f = gguf_open(src);
    assert_non_null(f);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        if (gguf_str_eq(gguf_kv_key(f, i), "general.alignment")) continue;
        assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
    }
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.chat_template", tmpl), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data), 0);
    }
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_close(f);
}

/* --chat renders the model's template (phi-3's, on the phi3 test model whose
 * vocabulary has <|user|>, <|end|>, <|assistant|> as control tokens): the
 * prompt must be the template's rendering with its markers as single special
 * tokens, and user text that looks like a marker must stay plain text. */
static void test_generate_chat(void **state) {
    (void)state;
    require_shared();
    char dir[] = "/tmp/tutti_chatXXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/phi3-chat.gguf", dir);
    char *tmpl = read_file(shared_path("ref/chat/phi-3.jinja"), NULL);
    assert_non_null(tmpl);
    write_with_template(shared_path("ref/arch/phi3-F16.gguf"), tmpl, path);
    free(tmpl);
    char cmd[4096];
    int st;
    /* phi-3 renders "<|user|>\nhi<|end|>\n<|assistant|>\n": BOS + <|user|> + "\nhi" pieces
     * + <|end|> + "\n" + <|assistant|> + "\n"; the stderr line reports the count. */
    snprintf(cmd, sizeof cmd, "%s generate -m %s --chat -p hi -n 4 --temp 0 2>&1 >/dev/null", TUTTI_CLI, path);
    char *err = run_cmd(cmd, &st);
    print_message("%s", err);
    assert_int_equal(st, 0);
    char *plain_cmd = cmd + 2048;
    snprintf(plain_cmd, 2048, "%s tokenize -m %s -p \"$(printf '<|user|>\\nhi<|end|>\\n<|assistant|>\\n')\" --special", TUTTI_CLI, path);
    int st2;
    char *ids = run_cmd(plain_cmd, &st2);
    assert_int_equal(st2, 0);
    int n_ids = 0;
    for (char *p = ids; *p; p++) n_ids += *p == ' ';
    char want[64];
    snprintf(want, sizeof want, "prompt %d tokens", n_ids);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(ids, " 5 ")); /* <|user|> is one special token */
    free(ids);
    free(err);
    /* user text "<|end|>" must not become the control token: the prompt then
     * has exactly one <|end|> (id 4), the template's own. */
    snprintf(cmd, sizeof cmd, "%s generate -m %s --chat -p '<|end|>' -n 1 --temp 0 --verbose-prompt 2>&1 >/dev/null",
             TUTTI_CLI, path);
    err = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    char *line = strstr(err, "prompt ids:");
    assert_non_null(line);
    *strchr(line, '\n') = 0;
    int n_end = 0;
    for (char *p = line; (p = strstr(p, " 4")); p += 2) n_end += p[2] == ' ' || p[2] == 0;
    print_message("%s\n", line);
    assert_int_equal(n_end, 1);
    assert_non_null(strstr(line, "prompt ids: 1 5 ")); /* BOS, <|user|> */
    free(err);
    /* a model without a template: a clear error */
    snprintf(cmd, sizeof cmd, "%s generate -m %s --chat -p hi 2>&1 >/dev/null", TUTTI_CLI, shared_path("models/stories260K.gguf"));
    err = run_cmd(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(err, "chat_template"));
    free(err);
    unlink(path);
    rmdir(dir);
}

/* Hostile inputs (fuzz/corpus/model/ holds the tiny hostile models written
 * by tests/test_model_hostile.c): each must end with the given exit status
 * and a message on stderr naming the problem. */
static void test_hostile_inputs(void **state) {
    (void)state;
    require_shared();
    const char *corpus = TUTTI_SOURCE_DIR "/fuzz/corpus/model";
    const char *stories = shared_path("models/stories260K.gguf");
    struct {
        char args[1024];
        int status;
        const char *msg;
    } cases[8];
    int n = 0;
#define CASE(st, m, ...) (snprintf(cases[n].args, sizeof cases[n].args, __VA_ARGS__), cases[n].status = (st), \
                          cases[n].msg = (m), n++)
    CASE(1, "NaN or infinite logits", "generate -m %s/ok-nan-weights.in -p the --temp 0", corpus);
    CASE(1, "NaN or infinite logits", "generate -m %s/ok-nan-weights.in -p the --seed 1", corpus);
    CASE(1, "is a directory", "generate -m %s -f /tmp -n 2", stories);
    CASE(2, "-m given twice", "generate -m %s -m %s/ok-base.in -p a", stories, corpus);
    CASE(2, "in [1, 512]", "generate -m %s -p a -t 513", stories);
    CASE(1, "has 50 rows but the vocabulary", "info -m %s/vocab-lt-embd.in", corpus);
    CASE(1, "has no tensors", "info -m %s", shared_path("models/vocab/ggml-vocab-llama3.gguf"));
    CASE(2, "-m given twice", "info -m %s -m %s", stories, stories);
#undef CASE
    for (int i = 0; i < n; i++) {
        char cmd[16384];
        snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", TUTTI_CLI, cases[i].args);
        int st;
        char *err = run_cmd(cmd, &st);
        if (st != cases[i].status || !strstr(err, cases[i].msg))
            fail_msg("tutti %s: exit %d (want %d), stderr '%s' (want '%s')", cases[i].args, st, cases[i].status,
                     err, cases[i].msg);
        free(err);
    }
}

/* Byte alignment: a member whose tokens cannot spell the prompt (the
 * character-level BabyLlama-tok105 has no "🐶") leaves the generation
 * instead of failing it; the others go on. */
static void test_run_member_leaves(void **state) {
    (void)state;
    require_shared();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s run -m %s -m %s -p 'Tom saw a \xf0\x9f\x90\xb6. He' -n 20 --seed 1 2>&1", TUTTI_CLI,
             shared_path("models/stories260K.gguf"), shared_path("models/BabyLlama-tok105/babyllama-tok105.gguf"));
    int st;
    char *out = run_cmd(cmd, &st);
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    char *m2 = strstr(out, "member 2");
    assert_non_null(m2);
    assert_non_null(strstr(m2, "left: its tokens cannot spell the text"));
    char *m1 = strstr(out, "member 1"), *left = strstr(m1, "left:");
    assert_true(left > m2); /* member 1 stayed */
    free(out);
}

/* One member, token alignment: tutti run prints exactly what tutti generate
 * prints (generated text only), greedy and seeded. */
static void test_run_one_member_equals_generate(void **state) {
    (void)state;
    require_shared();
    const char *opts[] = {"--temp 0 -n 40", "--seed 9 -n 40"};
    for (int k = 0; k < 2; k++) {
        char cmd[4096];
        int st1, st2;
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Lily and Ben' %s 2>/dev/null", TUTTI_CLI,
                 shared_path("models/stories260K.gguf"), opts[k]);
        char *want = run_cmd(cmd, &st1);
        snprintf(cmd, sizeof cmd, "%s run -m %s --align token -p 'Lily and Ben' %s 2>/dev/null", TUTTI_CLI,
                 shared_path("models/stories260K.gguf"), opts[k]);
        char *got = run_cmd(cmd, &st2);
        assert_int_equal(st1, 0);
        assert_int_equal(st2, 0);
        assert_true(strlen(want) > 20);
        assert_string_equal(got, want);
        free(want);
        free(got);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_greedy_matches_llama_cpp),
        cmocka_unit_test(test_generate_same_seed_same_text),
        cmocka_unit_test(test_logits_match_reference),
        cmocka_unit_test(test_tokenize_inp_matches_reference),
        cmocka_unit_test(test_bad_input_exits_with_message),
        cmocka_unit_test(test_generate_chat),
        cmocka_unit_test(test_run_member_leaves),
        cmocka_unit_test(test_run_one_member_equals_generate),
        cmocka_unit_test(test_hostile_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
