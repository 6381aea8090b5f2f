/* The CLI forms our acceptance checks use, run as a user would (the built
 * binary, TUTTI_CLI), compared with llama.cpp's reference outputs. */
#include "test_common.h"

#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include <cJSON.h>

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

/* Runs `tutti ARGS` (printf-style; MODEL, BABY stand for nothing: give full
 * paths), returns stdout (malloc'd); stderr goes to *err (malloc'd), the
 * exit status to *st. */
static char *tutti(int *st, char **err, const char *fmt, ...) {
    char args[12288], cmd[16384], errp[] = "/tmp/tutti_cli_errXXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int fd = mkstemp(errp);
    assert_true(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s %s 2>%s", TUTTI_CLI, args, errp);
    char *out = run_cmd(cmd, st);
    char *e = read_file(errp, NULL);
    unlink(errp);
    assert_non_null(e);
    if (err) *err = e;
    else free(e);
    return out;
}

static const char *stories(void) { return shared_path("models/stories260K.gguf"); }

static void test_generate_greedy_matches_llama_cpp(void **state) {
    (void)state;
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
    char *got = read_file(out_path, &n_got),
         *ref = read_file(shared_path("ref/models/stories260K.p2.logits.f32"), &n_ref);
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
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s --inp %s", TUTTI_CLI,
             shared_path("models/vocab/ggml-vocab-llama3.gguf"), shared_path("ref/tokenize/tokenizer-tests.inp"));
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
        /* bad values are usage errors (2) in every command */
        {"run -m MODEL -m MODEL -p a -n 4 -w 1,nan", "2"},
        {"run -m MODEL -m MODEL -p a -n 4 --temps 0,1", "2"},
        {"run -m MODEL -m MODEL -p a -n 4 -w 1,2,3", "2"},
        {"run -m MODEL -p a --temp abc", "2"},
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
    snprintf(plain_cmd, 2048, "%s tokenize -m %s -p \"$(printf '<|user|>\\nhi<|end|>\\n<|assistant|>\\n')\" --special",
             TUTTI_CLI, path);
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
    snprintf(cmd, sizeof cmd, "%s generate -m %s --chat -p hi 2>&1 >/dev/null", TUTTI_CLI,
             shared_path("models/stories260K.gguf"));
    err = run_cmd(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(err, "chat_template"));
    free(err);
    unlink(path);
    rmdir(dir);
}

/* Hostile inputs (fuzz/corpus/model.tar holds the tiny hostile models written
 * by tests/test_model_hostile.c): each must end with the given exit status
 * and a message on stderr naming the problem. */
static void test_hostile_inputs(void **state) {
    (void)state;
    const char *corpus = corpus_dir("model");
    const char *stories = shared_path("models/stories260K.gguf");
    struct {
        char args[1024];
        int status;
        const char *msg;
    } cases[8];
    int n = 0;
#define CASE(st, m, ...) \
    (snprintf(cases[n].args, sizeof cases[n].args, __VA_ARGS__), cases[n].status = (st), cases[n].msg = (m), n++)
    CASE(1, "NaN or infinite logits", "generate -m %s/ok-nan-weights.in -p the --temp 0", corpus);
    CASE(1, "NaN or infinite logits", "generate -m %s/ok-nan-weights.in -p the --seed 1", corpus);
    CASE(1, "is a directory", "generate -m %s -f /tmp -n 2", stories);
    CASE(2, "-m given twice", "generate -m %s -m %s/ok-base.in -p a", stories, corpus);
    CASE(2, "in [1, 512]", "generate -m %s -p a -t 513", stories);
    CASE(1, "has 50 rows but the vocabulary", "info -m %s/vocab-lt-embd.in", corpus);
    CASE(2, "-m given twice", "info -m %s -m %s", stories, stories);
#undef CASE
    for (int i = 0; i < n; i++) {
        char cmd[16384];
        snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", TUTTI_CLI, cases[i].args);
        int st;
        char *err = run_cmd(cmd, &st);
        if (st != cases[i].status || !strstr(err, cases[i].msg))
            fail_msg("tutti %s: exit %d (want %d), stderr '%s' (want '%s')", cases[i].args, st, cases[i].status, err,
                     cases[i].msg);
        free(err);
    }
}

/* Byte alignment: a member whose tokens cannot spell the prompt (the
 * character-level BabyLlama-tok105 has no "🐶") leaves the generation
 * instead of failing it; the others go on. */
static void test_run_member_leaves(void **state) {
    (void)state;
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

/* Issue 9: the same flag names in every command (llama.cpp's, the old ones
 * as aliases), the --flag=value form, -n -1, -c 0, -s. */
static void test_flag_forms(void **state) {
    (void)state;
    int st;
    char *err;
    /* --flag=value and -s are the same as --flag value and --seed */
    char *a = tutti(&st, NULL, "generate -m %s -p 'Lily and Ben' -n 24 --seed 5", stories());
    assert_int_equal(st, 0);
    char *b = tutti(&st, NULL, "generate --model=%s --prompt='Lily and Ben' --n-predict=24 -s 5", stories());
    assert_int_equal(st, 0);
    assert_true(strlen(a) > 10);
    assert_string_equal(a, b);
    free(b);
    b = tutti(&st, NULL, "run -m %s --align=token -p 'Lily and Ben' -n 24 --seed=5 --ctx-size 256", stories());
    assert_int_equal(st, 0);
    assert_string_equal(a, b);
    free(a);
    free(b);
    /* the same bad value gets the same message from every command */
    const char *cmds[] = {"generate -m %s -p a",        "run -m %s -p a", "eval -m %s --text /dev/null",
                          "fit -m %s --text /dev/null", "bench -m %s",    "logits -m %s -p a -o /dev/null"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char fmt[256];
        snprintf(fmt, sizeof fmt, "%s -t 0", cmds[i]);
        free(tutti(&st, &err, fmt, stories()));
        print_message("%s -> %d %s", fmt, st, err);
        assert_int_equal(st, 2);
        assert_non_null(strstr(err, "-t needs an integer in [1, 512], got '0'"));
        free(err);
        snprintf(fmt, sizeof fmt, "%s --threads=x", cmds[i]);
        free(tutti(&st, &err, fmt, stories()));
        assert_int_equal(st, 2);
        assert_non_null(strstr(err, "--threads needs an integer in [1, 512], got 'x'"));
        free(err);
    }
    /* -c 0: the trained context (2048); -n -1 with --ignore-eos: until it is full */
    a = tutti(&st, &err, "generate -m %s -p 'Once upon a time' -n -1 -c 0 --ignore-eos --temp 0", stories());
    print_message("%s", err);
    assert_int_equal(st, 0);
    char *p = strstr(err, "prompt 5 tokens"), *g = strstr(err, "generated ");
    assert_non_null(p);
    assert_non_null(g);
    /* the last token is drawn from the logits of position 2047 and printed, not evaluated */
    assert_int_equal(atoi(g + 10), 2048 - 5 + 1);
    assert_null(strstr(err, "warning"));
    free(a);
    free(err);
    /* TinyStories-656K's greedy story ends (EOS) after 108 tokens; --ignore-eos goes on */
    const char *ts = shared_path("models/TinyStories-656K-Q8_0.gguf");
    free(tutti(&st, &err, "generate -m %s -p 'Once upon a time' -n 140 --temp 0", ts));
    assert_int_equal(st, 0);
    g = strstr(err, "generated ");
    assert_non_null(g);
    int n_plain = atoi(g + 10);
    free(err);
    free(tutti(&st, &err, "generate -m %s -p 'Once upon a time' -n 140 --temp 0 --ignore-eos", ts));
    assert_int_equal(st, 0);
    g = strstr(err, "generated ");
    assert_non_null(g);
    print_message("656K greedy: %d tokens, --ignore-eos: %d\n", n_plain, atoi(g + 10));
    assert_true(n_plain < 140);
    assert_int_equal(atoi(g + 10), 140);
    free(err);
    /* bench takes llama-bench's long names */
    a = tutti(&st, &err, "bench -m %s --n-prompt 8 --n-gen 4 --repetitions 1 --threads 1 --json", stories());
    assert_int_equal(st, 0);
    assert_non_null(strstr(a, "\"test\":\"pp8\""));
    free(a);
    free(err);
}

/* The seed comes from getrandom(2), is printed ("seed: N"), and repeats the run. */
static void test_seed_printed_and_repeatable(void **state) {
    (void)state;
    const char *cmds[] = {"generate -m %s -p 'Lily and Ben' -n 32", "run -m %s --align token -p 'Lily and Ben' -n 32"};
    for (int c = 0; c < 2; c++) {
        int st;
        char *e1, *e2, *e3;
        char *o1 = tutti(&st, &e1, cmds[c], stories());
        assert_int_equal(st, 0);
        char *o2 = tutti(&st, &e2, cmds[c], stories());
        assert_int_equal(st, 0);
        char *s1 = strstr(e1, "seed: "), *s2 = strstr(e2, "seed: ");
        assert_non_null(s1);
        assert_non_null(s2);
        unsigned long long n1 = strtoull(s1 + 6, NULL, 10), n2 = strtoull(s2 + 6, NULL, 10);
        print_message("seeds %llu %llu\n", n1, n2);
        assert_true(n1 != n2); /* two runs in the same second still differ */
        char fmt[256];
        snprintf(fmt, sizeof fmt, "%s --seed %llu", cmds[c], n1);
        char *o3 = tutti(&st, &e3, fmt, stories());
        assert_int_equal(st, 0);
        assert_string_equal(o3, o1);
        assert_non_null(strstr(e3, "seed: "));
        assert_int_equal(strtoull(strstr(e3, "seed: ") + 6, NULL, 10), n1);
        free(o1), free(o2), free(o3), free(e1), free(e2), free(e3);
    }
}

static void test_ctx_warning(void **state) {
    (void)state;
    int st;
    char *err;
    /* stories260K's trained context is 2048 (llama.cpp: print_info n_ctx_train = 2048) */
    free(tutti(&st, &err, "generate -m %s -p a -n 2 -c 4096", stories()));
    assert_int_equal(st, 0);
    assert_non_null(strstr(err, "warning: -c 4096 exceeds"));
    assert_non_null(strstr(err, "2048"));
    free(err);
    free(tutti(&st, &err, "generate -m %s -p a -n 2 -c 2048", stories()));
    assert_null(strstr(err, "warning"));
    free(err);
    free(tutti(&st, &err, "run -m %s -m %s -p a -n 2 -c 3000", stories(),
               shared_path("models/BabyLlama-tok105/babyllama-tok105.gguf")));
    assert_int_equal(st, 0);
    assert_non_null(strstr(err, "warning: -c 3000 exceeds member 1"));
    free(err);
}

/* Prompt text as llama.cpp builds it (escapes, -f's trailing newline),
 * compared with llama-completion's own prompt tokens
 * (tests/data/cli/make_refs.sh). */
static void test_prompt_text_matches_llama_cpp(void **state) {
    (void)state;
    char *refs = read_file(TUTTI_SOURCE_DIR "/tests/data/cli/prompt_ids.txt", NULL);
    assert_non_null(refs);
    char dir[] = "/tmp/tutti_cli_promptXXXXXX";
    assert_non_null(mkdtemp(dir));
    char f1[600], f2[600];
    snprintf(f1, sizeof f1, "%s/f1.txt", dir);
    snprintf(f2, sizeof f2, "%s/f2.txt", dir);
    FILE *f = fopen(f1, "w");
    fputs("Once\\nupon a \\x41 time\\t\"x\"\n", f);
    fclose(f);
    f = fopen(f2, "w");
    fputs("a b\n\n", f);
    fclose(f);
    struct {
        const char *name;
        char args[700];
    } cases[] = {
        {"p_escapes", "-p 'Tom\\nsaw \\x41\\x4g \\\"x\\\" \\q\\\\ \\t|\\x 1|\\x2'"},
        {"p_trailing_backslash", "-p 'end\\'"},
        {"p_no_escape", "--no-escape -p 'a\\nb\\x41'"},
        {"f_escapes", ""},
        {"f_two_newlines", ""},
    };
    snprintf(cases[3].args, sizeof cases[3].args, "-f %s", f1);
    snprintf(cases[4].args, sizeof cases[4].args, "-f %s", f2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s:", cases[i].name);
        char *line = strstr(refs, key);
        assert_non_null(line);
        line += strlen(key);
        char want[1024];
        snprintf(want, sizeof want, "%.*s", (int)(strchr(line, '\n') - line), line);
        int st;
        char *err;
        /* tokenize and generate --verbose-prompt see the same prompt */
        char *got = tutti(&st, NULL, "tokenize -m %s %s", stories(), cases[i].args);
        assert_int_equal(st, 0);
        *strchr(got, '\n') = 0;
        print_message("%s: %s | llama.cpp: %s\n", cases[i].name, got, want);
        assert_string_equal(got, want);
        free(got);
        free(tutti(&st, &err, "generate -m %s %s -n 1 --verbose-prompt", stories(), cases[i].args));
        assert_int_equal(st, 0);
        char *pl = strstr(err, "prompt ids:");
        assert_non_null(pl);
        *strchr(pl, '\n') = 0;
        assert_string_equal(pl + 11, want);
        free(err);
    }
    unlink(f1);
    unlink(f2);
    rmdir(dir);
    free(refs);
    /* the BOS text with --special after the BOS the model adds: llama.cpp's warning */
    int st;
    char *err;
    free(tutti(&st, &err, "generate -m %s -p '<s>Once' --special -n 1", stories()));
    assert_int_equal(st, 0);
    assert_non_null(strstr(err, "2 BOS tokens"));
    free(err);
    free(tutti(&st, &err, "generate -m %s -p '<s>Once' -n 1", stories()));
    assert_null(strstr(err, "2 BOS"));
    free(err);
}

/* --stop cuts llama.cpp's greedy text at the stop string (not printed). */
static void test_generate_stop(void **state) {
    (void)state;
    char *want = ref_text("ref/models/stories260K.p1.jsonl");
    /* the last one with an escape: "red\x20ball" is "red ball" */
    const char *stops[] = {"Lily", "play", "red\\x20ball"};
    for (int k = 0; k < 3; k++) {
        char stop[16];
        snprintf(stop, sizeof stop, "%s", k == 2 ? "red ball" : stops[k]);
        char *at = strstr(want, stop);
        assert_non_null(at);
        int st;
        char *got = tutti(&st, NULL, "generate -m %s -p 'Once upon a time' -n 48 --temp 0 --stop '%s' --stop zzzz",
                          stories(), stops[k]);
        assert_int_equal(st, 0);
        print_message("--stop %s: '%s'\n", stops[k], got);
        assert_int_equal(strlen(got), (size_t)(at - want));
        assert_memory_equal(got, want, (size_t)(at - want));
        free(got);
    }
    free(want);
}

/* Ctrl-C: the current token finishes, the text so far and the timings are
 * printed, exit 130. */
static void test_sigint_stops_cleanly(void **state) {
    (void)state;
    const char *argvs[][16] = {
        {"tutti", "generate", "-m", NULL, "-p", "Once", "-n", "-1", "-c", "400000", "--ignore-eos", "-t", "1", NULL},
        {"tutti", "run", "-m", NULL, "--align", "token", "-p", "Once", "-n", "-1", "-c", "400000", "-t", "1", NULL},
    };
    for (int c = 0; c < 2; c++) {
        char errp[] = "/tmp/tutti_cli_sigXXXXXX";
        int efd = mkstemp(errp), pfd[2];
        assert_true(efd >= 0);
        assert_int_equal(pipe(pfd), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char *av[16];
            for (int i = 0; i < 16; i++) av[i] = argvs[c][i] ? (char *)argvs[c][i] : NULL;
            av[3] = (char *)stories();
            dup2(pfd[1], 1);
            dup2(efd, 2);
            close(pfd[0]);
            execv(TUTTI_CLI, av);
            _exit(99);
        }
        close(pfd[1]);
        char buf[1 << 16];
        size_t n = 0;
        ssize_t r = read(pfd[0], buf, sizeof buf - 1); /* the generation has begun */
        assert_true(r > 0);
        n = (size_t)r;
        usleep(200000);
        kill(pid, SIGINT);
        while (n < sizeof buf - 1 && (r = read(pfd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
        buf[n] = 0;
        close(pfd[0]);
        int ws;
        waitpid(pid, &ws, 0);
        char *err = read_file(errp, NULL);
        unlink(errp);
        close(efd);
        print_message("%s: %zu bytes out, stderr: %s\n", argvs[c][1], n, err);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 130);
        assert_true(n > 0);
        assert_non_null(strstr(err, "interrupted"));
        assert_non_null(strstr(err, "tokens/s"));
        free(err);
    }
}

static void test_quiet_version_help(void **state) {
    (void)state;
    int st;
    char *err;
    char *out = tutti(&st, &err, "generate -m %s -p 'Lily and Ben' -n 16 --quiet", stories());
    assert_int_equal(st, 0);
    assert_true(strlen(out) > 10);
    assert_string_equal(err, "");
    free(out);
    free(err);
    out = tutti(&st, &err, "run -m %s -m %s -p 'Lily' -n 16 --quiet", stories(),
                shared_path("models/BabyLlama-tok105/babyllama-tok105.gguf"));
    assert_int_equal(st, 0);
    assert_string_equal(err, "");
    free(out);
    free(err);
    const char *cmds[] = {"", "generate", "run", "eval", "fit", "bench", "logits", "tokenize", "info"};
    char *first = NULL;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        out = tutti(&st, NULL, "%s --version", cmds[i]);
        assert_int_equal(st, 0);
        assert_true(!strncmp(out, "tutti ", 6));
        if (!first) first = strdup(out);
        assert_string_equal(out, first);
        free(out);
        if (!*cmds[i]) continue;
        /* every flag line of --help gives its default */
        out = tutti(&st, NULL, "%s --help", cmds[i]);
        assert_int_equal(st, 0);
        int n_flags = 0;
        for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
            if (strncmp(l, "  -", 3) && strncmp(l, "      --", 8)) continue;
            char *e = strchr(l, '\n');
            size_t len = e ? (size_t)(e - l) : strlen(l);
            /* a flag's help may go on over several lines: up to the next flag */
            char *next = e;
            while (next && next[1] == ' ' && !(next[1 + 2] == '-' || !strncmp(next + 1, "      --", 8))) {
                next = strchr(next + 1, '\n');
                if (!next) break;
            }
            size_t span = next ? (size_t)(next - l) : strlen(l);
            char one[2048];
            snprintf(one, sizeof one, "%.*s", (int)(span < sizeof one - 1 ? span : sizeof one - 1), l);
            bool builtin =
                strstr(one, "--help") || strstr(one, "--version") || strstr(one, "--quiet") || strstr(one, "--no-");
            if (!builtin && !strstr(one, "(default: ")) fail_msg("tutti %s --help: no default in '%s'", cmds[i], one);
            n_flags++;
            (void)len;
        }
        print_message("%s --help: %d flags\n", cmds[i], n_flags);
        assert_true(n_flags >= 4);
        free(out);
    }
    free(first);
}

/* Every bad flag or flag value of every command is a usage error: exit
 * status 2 and a message naming what was wrong (issue 21, item 11: some
 * exited 1, e.g. weights, --align token or --adapt that the models or the
 * rule do not allow, an inline grammar, an empty or "-" output name).  In
 * the commands, {S} and {B} stand for two models with different
 * vocabularies (stories260K, BabyLlama-tok361), {D} for a scratch folder. */
static void test_flag_errors_exit_2(void **state) {
    (void)state;
    require_shared();
    static const char *const cases[][2] = {
        /* what the parser refuses, the same in every command */
        {"generate -m {S} -p a --temp x", "--temp needs a number"},
        {"generate -m {S} -m {S} -p a", "given twice"},
        {"generate -m {S} -p a --nope", "unknown option"},
        {"generate -m {S} -p a -n", "needs a value"},
        {"generate -m {S} -p a --ignore-eos=1", "takes no value"},
        {"generate -m {S} -p a --keep -2", "--keep needs an integer"},
        {"run -m {S} -p a --rule nope", "not one of"},
        {"run -m {S} -p a --ignore-eos=x", "takes no value"},
        {"eval -m {S} --text /dev/null --route-tau 0", "--route-tau"},
        {"fit -m {S} --text /dev/null --temp-grid 1,x", "--temp-grid"},
        {"logits -m {S} --ids 1,x -o /dev/null", "--ids"},
        {"tokenize -m {S} -p a --inp x", "exactly one"},
        {"info -m {S} -m {S}", "given twice"},
        {"bench -m {S} -p x", "-p needs an integer"},
        {"bench -m {S} --fused", "two -m members"},
        {"merge -m {S} -m {S} --method nope -o {D}/x.gguf", "unknown merge_method"},
        {"merge -m {S} -m {S} --method ties --base {S} --density 1.5 -o {D}/x.gguf", "--density"},
        {"merge -m {S} -m {S} --method slerp --t -0.5 -o {D}/x.gguf", "--t needs"},
        {"serve -m {S} --port 70000", "--port"},
        /* grammars and schemas given inline are flag values */
        {"generate -m {S} -p a --grammar 'root ::= x'", "undefined rule"},
        {"generate -m {S} -p a --json-schema '{\"type\":\"nope\"}'", "unknown type"},
        {"run -m {S} -p a --json-schema '{\"type\":5}'", "type must be"},
        /* flags the models or the rule do not allow */
        {"run -m {S} -m {S} -p a -w -1,2", "negative weight"},
        {"run -m {S} -m {S} -p a -w 0,0", "every weight is 0"},
        {"run -m {S} -m {B} -p a --align token", "different vocabularies"},
        {"run -m {S} -m {S} -p a --rule product --adapt", "need the mix rule"},
        {"run -m {S} -m {S} -p a --rule gate --route", "mix or product"},
        {"eval -m {S} -m {B} --align token --text /dev/null", "different vocabularies"},
        {"eval -m {S} -m {S} --rule product --adapt --text /dev/null", "need the mix rule"},
        {"fit -m {S} -m {S} -w -1,1 --text /dev/null", "negative weight"},
        {"bench -m {S} -m {B} --fused --align token -p 8 -n 4 -r 1", "different vocabularies"},
        {"serve -m {S} -m {S} -w -1,2 --port 0", "negative weight"},
        {"serve -m {S} -m {B} --align token --port 0", "different vocabularies"},
        /* output names */
        {"eval -m {S} --text /dev/null --plot -", "stdout holds"},
        {"logits -m {S} -p a -o ''", "empty file name"},
        {"fit -m {S} --text /dev/null -o ''", "empty file name"},
        {"merge -m {S} -m {S} --method linear -o ''", "empty file name"},
    };
    char dir[] = "/tmp/tutti_cli_flagsXXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048];
        size_t len = 0;
        for (const char *p = cases[i][0]; *p && len + 600 < sizeof args;) {
            const char *sub = !strncmp(p, "{S}", 3)   ? shared_path("models/stories260K.gguf")
                              : !strncmp(p, "{B}", 3) ? shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf")
                              : !strncmp(p, "{D}", 3) ? dir
                                                      : NULL;
            if (sub) {
                len += (size_t)snprintf(args + len, sizeof args - len, "%s", sub);
                p += 3;
            } else {
                args[len++] = *p++;
            }
        }
        args[len] = 0;
        char cmd[4096];
        /* serve must refuse before it serves: the timeout only guards the test */
        snprintf(cmd, sizeof cmd, "timeout 60 %s %s 2>&1 >/dev/null", TUTTI_CLI, args);
        int st;
        char *err = run_cmd(cmd, &st);
        if (st != 2 || !strstr(err, cases[i][1]))
            fail_msg("tutti %s: exit %d (want 2), message: %s(want '%s')", args, st, err, cases[i][1]);
        free(err);
    }
    /* -o - is stdout (the same bytes as a file), never a file named "-" */
    char cmd[4096];
    int st;
    snprintf(cmd, sizeof cmd,
             "cd %s && %s logits -m %s -p 'Lily and Ben' -o file.f32 2>/dev/null && %s logits -m %s "
             "-p 'Lily and Ben' -o - 2>/dev/null > stdout.f32 && cmp file.f32 stdout.f32 && test ! -e ./-",
             dir, TUTTI_CLI, stories(), TUTTI_CLI, stories());
    free(run_cmd(cmd, &st));
    assert_int_equal(st, 0);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    assert_int_equal(system(rm), 0);
}

/* run takes every sampling flag of generate (one table, CLI_SAMPLING_OPTS),
 * --ignore-eos included (issue 21, item 14: refused before), which rules out
 * end of text in every alignment; the summary says what it counts. */
static void test_run_takes_generate_sampling_flags(void **state) {
    (void)state;
    require_shared();
    int st;
    char *err;
    /* the flags of generate's "sampling" section, as its --help lists them */
    char *help = tutti(&st, NULL, "generate --help");
    assert_int_equal(st, 0);
    char *sec = strstr(help, "\nsampling:\n");
    assert_non_null(sec);
    char *run_help = tutti(&st, NULL, "run --help");
    int n_flags = 0;
    for (char *l = sec + 11; *l && *l != '\n'; l = strchr(l, '\n') + 1) {
        char *dash = strstr(l, "--");
        if (dash && dash - l < 12) {
            char name[64];
            sscanf(dash, "%63[a-z-]", name);
            if (!strstr(run_help, name)) fail_msg("run --help lacks generate's sampling flag %s", name);
            n_flags++;
        }
        if (!strchr(l, '\n')) break;
    }
    assert_true(n_flags >= 8);
    free(help), free(run_help);
    static const char *const values[] = {"--temp 0.5",           "--top-k 5",          "--top-p 0.9", "--min-p 0.05",
                                         "--repeat-penalty 1.1", "--repeat-last-n 32", "--seed 3",    "--ignore-eos"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        free(tutti(&st, &err, "run -m %s -m %s -p 'Once' -n 4 -t 1 %s", stories(),
                   shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf"), values[i]));
        if (st != 0) fail_msg("run %s: exit %d: %s", values[i], st, err);
        free(err);
    }
    /* TinyStories-656K's greedy story ends after 108 tokens; --ignore-eos
     * goes on to -n in token alignment and in byte alignment */
    const char *ts = shared_path("models/TinyStories-656K-Q8_0.gguf");
    free(tutti(&st, &err, "run -m %s -p 'Once upon a time' -n 140 --temp 0 -t 1", ts));
    assert_non_null(strstr(err, "108 tokens generated"));
    assert_non_null(strstr(err, "finish: stop"));
    free(err);
    free(tutti(&st, &err, "run -m %s -p 'Once upon a time' -n 140 --temp 0 -t 1 --ignore-eos", ts));
    assert_int_equal(st, 0);
    assert_non_null(strstr(err, "140 tokens generated"));
    assert_non_null(strstr(err, "finish: length: -n 140 reached"));
    free(err);
    for (int ign = 0; ign < 2; ign++) {
        char *out = tutti(&st, &err, "run -m %s -m %s -p 'Once upon a time' -n 130 --temp 0 -t 1%s", ts, stories(),
                          ign ? " --ignore-eos" : "");
        assert_int_equal(st, 0);
        print_message("byte alignment%s: %s", ign ? " --ignore-eos" : "", strstr(err, "byte alignment"));
        /* byte alignment: the summary counts the bytes it sampled and the
         * ones it output, and says why they differ */
        if (ign) {
            assert_non_null(strstr(err, "finish: length: -n 130 reached"));
            char *b = strstr(err, "bytes sampled, ");
            if (b) assert_non_null(strstr(b, "-n counts member 1's tokens"));
        } else {
            assert_non_null(strstr(err, "finish: stop"));
        }
        free(out), free(err);
    }
}

/* One prefix per message: "tutti CMD: ...", never twice, never "error: error:". */
static void test_messages_have_one_prefix(void **state) {
    (void)state;
    struct {
        const char *cmd, *fmt;
    } cases[] = {
        {"run", "run -m %s --rule nope -p a"},
        {"run", "run -m %s -p a -n x"},
        {"run", "run -m /nonexistent.gguf -p a"},
        {"run", "run -e /nonexistent.ens -p a"},
        {"eval", "eval -m %s --text /nonexistent"},
        {"eval", "eval -m /nonexistent.gguf --text /dev/null"},
        {"fit", "fit -m %s --text /dev/null --temp-grid 0,x"},
        {"bench", "bench -m %s -p x"},
        {"generate", "generate -m /nonexistent.gguf -p a"},
        {"info", "info -m /nonexistent.gguf"},
        {"tokenize", "tokenize -m /nonexistent.gguf -p a"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st;
        char *err;
        free(tutti(&st, &err, cases[i].fmt, stories()));
        char want[64], twice[128];
        snprintf(want, sizeof want, "tutti %s: ", cases[i].cmd);
        snprintf(twice, sizeof twice, "tutti %s: tutti", cases[i].cmd);
        print_message("%s -> %d: %s", cases[i].fmt, st, err);
        assert_true(st == 1 || st == 2);
        if (strncmp(err, want, strlen(want))) fail_msg("'%s' does not start with '%s'", err, want);
        assert_null(strstr(err, twice));
        assert_null(strstr(err, "error: error"));
        assert_null(strstr(err + 1, "tutti: "));
        free(err);
    }
}

/* tutti info: a vocabulary-only file, and --json (parsed by cJSON).
 * Expected values: Llama 3's published special ids (BOS 128000
 * <|begin_of_text|>, EOS 128001, EOT 128009 <|eot_id|>) and llama.cpp's
 * print_info for stories260K (model params = 292.80 K, BOS 1 '<s>', EOS 2). */
static void test_info(void **state) {
    (void)state;
    require_shared();
    int st;
    char *err;
    const char *l3 = shared_path("models/vocab/ggml-vocab-llama3.gguf");
    char *out = tutti(&st, &err, "info -m %s", l3);
    print_message("%s%s", out, err);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "bos: 128000 '<|begin_of_text|>'"));
    assert_non_null(strstr(out, "eot: 128009 '<|eot_id|>'"));
    assert_non_null(strstr(out, "add_bos: true"));
    assert_non_null(strstr(out, "chat template ("));
    assert_non_null(strstr(out, "general.name: "));
    free(out);
    free(err);
    out = tutti(&st, NULL, "info -m %s --json", l3);
    assert_int_equal(st, 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    cJSON *tok = cJSON_GetObjectItem(j, "tokenizer");
    assert_int_equal((int)cJSON_GetObjectItem(tok, "bos_id")->valuedouble, 128000);
    assert_int_equal((int)cJSON_GetObjectItem(tok, "eos_id")->valuedouble, 128001);
    assert_int_equal((int)cJSON_GetObjectItem(tok, "eot_id")->valuedouble, 128009);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(tok, "add_bos")));
    /* the template exactly as stored in the file */
    gguf_file *g = gguf_open(l3);
    gguf_str ts;
    assert_true(gguf_get_str(g, "tokenizer.chat_template", &ts));
    const cJSON *ct = cJSON_GetObjectItem(j, "chat_template");
    assert_true(cJSON_IsString(ct));
    assert_int_equal(strlen(ct->valuestring), ts.len);
    assert_memory_equal(ct->valuestring, ts.data, ts.len);
    gguf_close(g);
    assert_int_equal((int)cJSON_GetObjectItem(j, "n_params")->valuedouble, 0);
    cJSON_Delete(j);
    free(out);
    out = tutti(&st, NULL, "info -m %s --json", stories());
    assert_int_equal(st, 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_int_equal((int)cJSON_GetObjectItem(j, "n_params")->valuedouble, 292800);
    tok = cJSON_GetObjectItem(j, "tokenizer");
    assert_int_equal((int)cJSON_GetObjectItem(tok, "bos_id")->valuedouble, 1);
    assert_string_equal(cJSON_GetObjectItem(tok, "bos")->valuestring, "<s>");
    assert_int_equal((int)cJSON_GetObjectItem(tok, "eos_id")->valuedouble, 2);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "chat_template")));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "general"), "general.architecture")->valuestring,
                        "llama");
    cJSON_Delete(j);
    free(out);
    out = tutti(&st, NULL, "info -m %s", stories());
    assert_non_null(strstr(out, "chat template: none"));
    assert_non_null(strstr(out, "parameters: 292800"));
    free(out);
}

/* JSON output stays valid for any file name (quotes, backslashes, control
 * characters); ensemble files as documented (relative paths, quotes,
 * comments, rule/align lines); bench --fused --align. */
static void test_json_and_ensemble_files(void **state) {
    (void)state;
    char dir[] = "/tmp/tutti_cli_jsonXXXXXX";
    assert_non_null(mkdtemp(dir));
    char odd[700], ens[700], link2[700];
    snprintf(odd, sizeof odd, "%s/a\"b\\c\td.gguf", dir);
    snprintf(link2, sizeof link2, "%s/my model.gguf", dir);
    assert_int_equal(symlink(stories(), odd), 0);
    assert_int_equal(symlink(shared_path("models/BabyLlama-tok105/babyllama-tok105.gguf"), link2), 0);
    char text[700];
    snprintf(text, sizeof text, "%s/t.txt", dir);
    FILE *f = fopen(text, "w");
    fputs("Tom had a red ball. He liked to play with it in the park.\n", f);
    fclose(f);
    int st;
    char *err;
    char *out = tutti(&st, &err, "bench -m '%s' -p 8 -n 4 -r 1 -t 1 --json", odd);
    print_message("%s%s", out, err);
    assert_int_equal(st, 0);
    int lines = 0;
    for (char *l = out; *l; lines++) {
        char *e = strchr(l, '\n');
        assert_non_null(e);
        *e = 0;
        cJSON *j = cJSON_Parse(l);
        if (!j) fail_msg("not JSON: %s", l);
        assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, strrchr(odd, '/') + 1);
        cJSON_Delete(j);
        l = e + 1;
    }
    assert_int_equal(lines, 2);
    free(out);
    free(err);
    out = tutti(&st, NULL, "eval -m '%s' --text %s --json", odd, text);
    assert_int_equal(st, 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "members"), 0), "model")->valuestring, odd);
    cJSON_Delete(j);
    free(out);
    /* an ensemble file: relative paths (to the file's folder), quotes, comments, rule/align */
    snprintf(ens, sizeof ens, "%s/team.ens", dir);
    f = fopen(ens, "w");
    fprintf(f, "# two members\n\n  rule product   # the rule\nalign byte\n\"my model.gguf\" 0.25 1.5\n%s 0.75\n",
            stories());
    fclose(f);
    out = tutti(&st, &err, "eval -e %s --text %s --json", ens, text);
    print_message("%s%s", out, err);
    assert_int_equal(st, 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    cJSON *m = cJSON_GetObjectItem(j, "members");
    assert_int_equal(cJSON_GetArraySize(m), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 0), "model")->valuestring, link2);
    assert_true(fabs(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 0), "temp")->valuedouble - 1.5) < 1e-6);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "ensemble"), "rule")->valuestring, "product");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "ensemble"), "align")->valuestring, "byte");
    cJSON_Delete(j);
    free(out);
    free(err);
    /* the format is documented where users look */
    out = tutti(&st, NULL, "run --help");
    assert_non_null(strstr(out, "Ensemble file"));
    assert_non_null(strstr(out, "relative to the ensemble file's folder"));
    assert_non_null(strstr(out, "rule NAME"));
    free(out);
    /* bench --fused --align byte over two vocabularies */
    out = tutti(&st, &err, "bench -m %s -m '%s' --fused --align byte -p 0 -n 8 -r 1 -t 1 --json", stories(), link2);
    print_message("%s%s", out, err);
    assert_int_equal(st, 0);
    char *last = strstr(out, "{\"test\":\"fused");
    assert_non_null(last);
    j = cJSON_Parse(last);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "align")->valuestring, "byte");
    assert_true(cJSON_GetObjectItem(j, "ratio")->valuedouble > 0);
    cJSON_Delete(j);
    free(out);
    free(err);
    unlink(odd);
    unlink(link2);
    unlink(text);
    unlink(ens);
    rmdir(dir);
}

/* eval and fit say they are working when they take longer than the
 * reporting interval (a second; 20 ms here, so that the check does not
 * depend on how fast the machine is: the run below takes ~0.7 s when it is
 * quiet). */
static void test_eval_progress(void **state) {
    (void)state;
    char text[] = "/tmp/tutti_cli_evalXXXXXX";
    int fd = mkstemp(text);
    assert_true(fd >= 0);
    close(fd);
    char cmd[2048];
    const char *dev = shared_path("eval/stories-dev.txt");
    snprintf(cmd, sizeof cmd, "cat %s %s > %s", dev, dev, text);
    int st;
    free(run_cmd(cmd, &st));
    char *err;
    setenv("TUTTI_PROGRESS_MS", "20", 1);
    free(tutti(&st, &err, "eval -m %s -m %s --text %s -t 1", stories(),
               shared_path("models/TinyStories-656K-Q8_0.gguf"), text));
    print_message("%s", err);
    assert_int_equal(st, 0);
    assert_non_null(strstr(err, "tutti eval: scoring "));
    assert_non_null(strstr(err, " s\n"));
    free(err);
    free(tutti(&st, &err, "fit -m %s -m %s --text %s -t 1 --temp-grid 1", stories(),
               shared_path("models/TinyStories-656K-Q8_0.gguf"), text));
    print_message("%s", err);
    assert_int_equal(st, 0);
    assert_non_null(strstr(err, "tutti fit: fitting on "));
    free(err);
    unsetenv("TUTTI_PROGRESS_MS");
    free(tutti(&st, &err, "eval -m %s -m %s --text %s -t 1 --quiet", stories(),
               shared_path("models/TinyStories-656K-Q8_0.gguf"), text));
    assert_int_equal(st, 0);
    assert_string_equal(err, "");
    free(err);
    unlink(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_greedy_matches_llama_cpp),
        cmocka_unit_test(test_generate_same_seed_same_text),
        cmocka_unit_test(test_logits_match_reference),
        shared_unit_test(test_tokenize_inp_matches_reference),
        cmocka_unit_test(test_bad_input_exits_with_message),
        shared_unit_test(test_generate_chat),
        cmocka_unit_test(test_run_member_leaves),
        cmocka_unit_test(test_run_one_member_equals_generate),
        cmocka_unit_test(test_hostile_inputs),
        cmocka_unit_test(test_flag_forms),
        cmocka_unit_test(test_seed_printed_and_repeatable),
        cmocka_unit_test(test_ctx_warning),
        cmocka_unit_test(test_prompt_text_matches_llama_cpp),
        cmocka_unit_test(test_generate_stop),
        cmocka_unit_test(test_sigint_stops_cleanly),
        cmocka_unit_test(test_quiet_version_help),
        cmocka_unit_test(test_messages_have_one_prefix),
        shared_unit_test(test_flag_errors_exit_2),
        shared_unit_test(test_run_takes_generate_sampling_flags),
        shared_unit_test(test_info),
        cmocka_unit_test(test_json_and_ensemble_files),
        cmocka_unit_test(test_eval_progress),
    };
    test_select_part();
    /* TUTTI_TEST_FILTER=test_info runs one test (cmocka's pattern; shared
     * cases are named shared_test_...) */
    if (getenv("TUTTI_TEST_FILTER")) cmocka_set_test_filter(getenv("TUTTI_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
