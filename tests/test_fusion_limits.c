/* Fusion at its limits (issue 9): NaN/inf members, contexts that fill up,
 * members leaving a byte-aligned generation and why, ensemble file paths,
 * what eval refuses, and what `tutti run -n` counts.  Expected values come
 * from the definitions and from the public single-model API, never from the
 * fusion code itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_common.h"
#include "ensemble/ensemble.h"
#include "fusion/ensemble_impl.h"

static const char *M_STORIES = "models/stories260K.gguf";
static const char *M_656K = "models/TinyStories-656K-Q8_0.gguf";
static const char *M_TOK105 = "models/BabyLlama-tok105/babyllama-tok105.gguf";
static const char *M_TOK361 = "models/BabyLlama-tok361/babyllama-tok361.gguf";
#define CORPUS corpus_dir("model") /* fuzz/corpus/model.tar, unpacked */

static tutti_ensemble *make_ens(const char *const *rel, int n, tutti_align align, tutti_fusion_rule rule, int n_ctx) {
    tutti_member_desc d[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int i = 0; i < n; i++)
        d[i] = (tutti_member_desc){strdup(rel[i][0] == '/' ? rel[i] : shared_path(rel[i])), NAN, NAN};
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = d;
    p.n_members = n;
    p.align = align;
    p.rule = rule;
    p.n_threads = 1;
    p.n_ctx = n_ctx;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) printf("ensemble: %s\n", tutti_last_error());
    for (int i = 0; i < n; i++) free((char *)d[i].model_path);
    return e;
}

typedef struct sbuf {
    char b[8192];
    size_t n;
} sbuf;
static int sbuf_cb(const char *bytes, size_t n, void *u) {
    sbuf *s = u;
    if (s->n + n < sizeof s->b) memcpy(s->b + s->n, bytes, n), s->n += n, s->b[s->n] = 0;
    return 0;
}
typedef struct notes {
    char text[4096];
    int n;
} notes;
static void note_cb(const char *msg, void *u) {
    notes *t = u;
    size_t l = strlen(t->text);
    snprintf(t->text + l, sizeof t->text - l, "%s\n", msg);
    t->n++;
}

/* ---- 1: NaN logits are an error naming the member, in every alignment,
 * in eval and in fit (fuzz/corpus/model.tar's ok-nan-weights.in: every
 * weight NaN, same vocabulary as ok-base.in) ---- */
static void test_nan_member_is_an_error(void **state) {
    (void)state;
    char base[4200], nan_w[4200];
    snprintf(base, sizeof base, "%s/ok-base.in", CORPUS);
    snprintf(nan_w, sizeof nan_w, "%s/ok-nan-weights.in", CORPUS);
    const char *models[2] = {base, nan_w};
    const char *want = "member 2 (ok-nan-weights.in): logits contain NaN at position ";
    for (int al = TUTTI_ALIGN_TOKEN; al <= TUTTI_ALIGN_SPAN; al++) {
        tutti_ensemble *e = make_ens(models, 2, (tutti_align)al, TUTTI_RULE_MIX, 0);
        assert_non_null(e);
        tutti_sampler_params sp = tutti_sampler_default_params();
        tutti_mask m = {.max_len = 8};
        sbuf out = {.n = 0};
        tutti_ensemble_stats st;
        int rc = tutti_ensemble_generate(e, "the", 3, &sp, &m, sbuf_cb, &out, &st);
        printf("%s: rc %d: %s\n", tutti_align_name((tutti_align)al), rc, tutti_last_error());
        assert_int_equal(rc, TUTTI_ERR);
        assert_non_null(strstr(tutti_last_error(), want));
        const char *text = "the cat sat. the dog ran.";
        tutti_bpb_result r;
        rc = tutti_ensemble_eval_bpb(e, text, strlen(text), &r);
        printf("  eval: rc %d: %s\n", rc, tutti_last_error());
        assert_int_equal(rc, TUTTI_ERR);
        assert_non_null(strstr(tutti_last_error(), want));
        rc = tutti_ensemble_fit(e, text, strlen(text), NULL, 0, NULL);
        printf("  fit: rc %d: %s\n", rc, tutti_last_error());
        assert_int_equal(rc, TUTTI_ERR);
        assert_non_null(strstr(tutti_last_error(), want));
        tutti_ensemble_free(e);
    }
}

/* ---- 3: a prompt longer than a member's context is an error naming it;
 * a context filling up mid-way is a clean stop that says which ---- */
static void test_context_limits(void **state) {
    (void)state;
    char prompt[401];
    const char *s = "Once upon a time there was a little girl named Lily who loved to play outside. ";
    for (int i = 0; i < 400; i++) prompt[i] = s[i % strlen(s)];
    prompt[400] = 0;
    const char *models[2] = {M_TOK361, M_STORIES}; /* tok361: 256-token context, ~1 token per character */
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    for (int al = TUTTI_ALIGN_BYTE; al <= TUTTI_ALIGN_SPAN; al++) {
        tutti_ensemble *e = make_ens(models, 2, (tutti_align)al, TUTTI_RULE_MIX, 0);
        assert_non_null(e);
        tutti_mask m = {.max_len = 40};
        sbuf out = {.n = 0};
        int rc = tutti_ensemble_generate(e, prompt, 400, &sp, &m, sbuf_cb, &out, NULL);
        printf("%s, 400-byte prompt: rc %d: %s\n", tutti_align_name((tutti_align)al), rc, tutti_last_error());
        assert_int_equal(rc, TUTTI_ERR);
        assert_non_null(strstr(tutti_last_error(), "member 1 (babyllama-tok361.gguf)"));
        assert_non_null(strstr(tutti_last_error(), "context of 256 tokens"));
        tutti_ensemble_free(e);
        /* mid-way: 24 tokens of context, 17 used by the prompt */
        e = make_ens(models, 2, (tutti_align)al, TUTTI_RULE_MIX, 24);
        notes nt = {.n = 0};
        tutti_ensemble_set_notice(e, note_cb, &nt);
        tutti_ensemble_stats st;
        out.n = 0;
        rc = tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &m, sbuf_cb, &out, &st);
        printf("  n_ctx 24: rc %d, \"%s\", notices: %s", rc, out.b, nt.text);
        assert_int_equal(rc, 0);
        assert_int_equal(st.ctx_full_member, 0);
        assert_non_null(strstr(nt.text, "member 1 (babyllama-tok361.gguf): context full (24 tokens)"));
        tutti_ensemble_free(e);
    }
    /* token alignment: two copies of tok361 */
    const char *same[2] = {M_TOK361, M_TOK361};
    tutti_ensemble *e = make_ens(same, 2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, 24);
    notes nt = {.n = 0};
    tutti_ensemble_set_notice(e, note_cb, &nt);
    tutti_ensemble_stats st;
    tutti_mask m = {.max_len = 40};
    sbuf out = {.n = 0};
    assert_int_equal(tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &m, sbuf_cb, &out, &st), 0);
    assert_int_equal(st.ctx_full_member, 0);
    assert_non_null(strstr(nt.text, "context full (24 tokens)"));
    tutti_ensemble_free(e);
}

/* ---- 5: pruning never drops a member's last hypothesis that spells the
 * committed bytes.  This text (a fused generation of the four story models,
 * seed 2, every filter off) made TinyStories-656K leave at the default
 * pruning (1e-4) although it spells it exactly (prune 0): the
 * tokenization ending at the committed bytes fell below 1e-4 next to a
 * long token still in progress. ---- */
static const char *PRUNE_TEXT =
    ", there was a 3 year old lady. She loved to chase her ball and would show her dad have even impraote. "
    "Every day, she would always keep draw and just like enoubown and end of the setting necklace.\n"
    "One day, Lily went to the park with her mom";

static void test_pruning_keeps_a_spelling_hypothesis(void **state) {
    (void)state;
    const char *models[1] = {M_656K};
    tutti_ensemble *e = make_ens(models, 1, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, 0);
    assert_non_null(e);
    const double prunes[2] = {0.0, 1e-4};
    for (int k = 0; k < 2; k++) {
        fusion_bytes_params bp = ens_bytes_params(e, 0);
        bp.prune = prunes[k];
        fusion_bytes *st = fusion_bytes_new(e->m[0], e->trie[0], &bp);
        assert_int_equal(fusion_bytes_start(st, "Once upon a time", 16), 0);
        double p[FUSION_N_BYTE_OUT];
        size_t n = strlen(PRUNE_TEXT), i = 0;
        for (; i < n; i++) {
            assert_int_equal(fusion_bytes_next(st, p), 0);
            if (!(p[(uint8_t)PRUNE_TEXT[i]] > 0)) break;
            assert_int_equal(fusion_bytes_commit(st, (uint8_t)PRUNE_TEXT[i]), 0);
        }
        printf("prune %g: %zu of %zu bytes with probability > 0 (%d hypotheses, pruned share %.3g)\n", prunes[k], i, n,
               fusion_bytes_n_hyps(st), fusion_bytes_pruned(st));
        assert_int_equal(i, n);
        int32_t nb;
        assert_non_null(fusion_bytes_best_path(st, &nb)); /* a path spelling the text is kept */
        fusion_bytes_free(st);
    }
    tutti_ensemble_free(e);
}

/* A member that leaves says so as it happens, with the reason (tok105 has
 * no '#': forced through an allowed string). */
static void test_leaving_is_announced(void **state) {
    (void)state;
    const char *models[2] = {M_STORIES, M_TOK105};
    const char *allowed[1] = {" there was a #1 dog."};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 2;
    for (int al = TUTTI_ALIGN_BYTE; al <= TUTTI_ALIGN_SPAN; al++) {
        tutti_ensemble *e = make_ens(models, 2, (tutti_align)al, TUTTI_RULE_MIX, 0);
        notes nt = {.n = 0};
        tutti_ensemble_set_notice(e, note_cb, &nt);
        tutti_mask m = {.allowed = allowed, .n_allowed = 1, .max_len = 60};
        sbuf got = {.n = 0};
        tutti_ensemble_stats st;
        assert_int_equal(tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &m, sbuf_cb, &got, &st), 0);
        printf("%s: notices: %s", tutti_align_name((tutti_align)al), nt.text);
        assert_true(st.member_left[1] && !st.member_left[0]);
        assert_int_equal(st.member_left_reason[1], TUTTI_LEFT_SPELL);
        assert_int_equal(nt.n, 1);
        assert_non_null(strstr(nt.text, "member 2 (babyllama-tok105.gguf) leaves the generation after"));
        tutti_ensemble_free(e);
    }
}

/* ---- 6: tutti_ensemble_file_write's paths name the same files when the
 * file is read back from another folder ---- */
static void test_ensemble_file_paths(void **state) {
    (void)state;
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    char shared[4096]; /* the repository root: its models/ holds both files */
    snprintf(shared, sizeof shared, "%s", TUTTI_SOURCE_DIR);
    assert_int_equal(chdir(shared), 0);
    const char *rel[2] = {"./models/stories260K.gguf", "models/BabyLlama-tok361/babyllama-tok361.gguf"};
    tutti_member_desc d[2] = {{rel[0], 0.25f, 1.0f}, {rel[1], 0.75f, 1.1f}};
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = d;
    p.n_members = 2;
    p.n_threads = 1;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    assert_non_null(e);
    char dir[] = "/tmp/tutti-ensfile-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[4200];
    snprintf(path, sizeof path, "%s/fitted.ens", dir);
    FILE *f = fopen(path, "w");
    assert_int_equal(tutti_ensemble_file_write(e, f), 0);
    fclose(f);
    tutti_ensemble_free(e);
    assert_int_equal(chdir(cwd), 0); /* read it from elsewhere */
    tutti_ensemble_file *ef = tutti_ensemble_file_read(path);
    assert_non_null(ef);
    assert_int_equal(ef->n_members, 2);
    for (int i = 0; i < 2; i++) {
        struct stat a, b;
        char orig[8192];
        snprintf(orig, sizeof orig, "%s/%s", shared, rel[i]);
        printf("member %d: %s\n", i + 1, ef->members[i].model_path);
        assert_int_equal(stat(orig, &a), 0);
        if (stat(ef->members[i].model_path, &b) != 0) fail_msg("%s does not exist", ef->members[i].model_path);
        assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    }
    assert_true(fabsf(ef->members[1].weight - 0.75f) < 1e-6f && fabsf(ef->members[1].temp - 1.1f) < 1e-6f);
    tutti_ensemble_file_free(ef);
    remove(path);
    rmdir(dir);
}

/* ---- 7: eval refuses what it cannot score ---- */
static void test_eval_refuses(void **state) {
    (void)state;
    const char *models[2] = {M_STORIES, M_TOK361};
    const char *text = "Once upon a time there was a dog. It was happy.";
    tutti_bpb_result r;
    tutti_ensemble *e = make_ens(models, 2, TUTTI_ALIGN_BYTE, TUTTI_RULE_CONTRASTIVE, 0);
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, strlen(text), &r), TUTTI_ERR_UNSUPPORTED);
    assert_non_null(strstr(tutti_last_error(), "contrastive"));
    tutti_ensemble_free(e);
    for (int rule = TUTTI_RULE_PRODUCT; rule <= TUTTI_RULE_GATE; rule++) {
        e = make_ens(models, 2, TUTTI_ALIGN_SPAN, (tutti_fusion_rule)rule, 0);
        assert_int_equal(tutti_ensemble_eval_bpb(e, text, strlen(text), &r), TUTTI_ERR_UNSUPPORTED);
        assert_non_null(strstr(tutti_last_error(), "span"));
        tutti_ensemble_free(e);
    }
    e = make_ens(models, 2, TUTTI_ALIGN_SPAN, TUTTI_RULE_MIX, 0);
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, strlen(text), &r), 0);
    assert_true(isfinite(r.ensemble_bpb));
    tutti_ensemble_free(e);
    /* the CLI: usage error, exit 2 */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "printf 'Once upon a time.' > /tmp/tutti-eval-refuse.txt && %s eval --text "
             "/tmp/tutti-eval-refuse.txt -m %s -m %s --rule contrastive 2>&1",
             TUTTI_CLI, shared_path(M_STORIES), shared_path(M_TOK361));
    int status;
    char *outp = run_cmd(cmd, &status);
    printf("tutti eval --rule contrastive: exit %d: %s", status, outp);
    assert_int_equal(status, 2);
    assert_null(strstr(outp, "bits/byte")); /* no "inf bits/byte" result */
    free(outp);
    remove("/tmp/tutti-eval-refuse.txt");
}

/* ---- 4: max_tokens counts member 1's tokens in every alignment, and the
 * output never ends inside a UTF-8 character ---- */
static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        size_t need = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 9;
        if (need == 9 || i + need >= n + (need ? 0 : 1)) return false;
        for (size_t k = 1; k <= need; k++)
            if (((uint8_t)s[i + k] & 0xC0) != 0x80) return false;
        i += need + 1;
    }
    return true;
}

static void test_max_tokens_and_utf8(void **state) {
    (void)state;
    const char *models[2] = {M_STORIES, M_TOK361};
    tutti_vocab *v = tutti_vocab_load(shared_path(M_STORIES));
    assert_non_null(v);
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 5;
    for (int al = TUTTI_ALIGN_BYTE; al <= TUTTI_ALIGN_SPAN; al++) {
        tutti_ensemble *e = make_ens(models, 2, (tutti_align)al, TUTTI_RULE_MIX, 0);
        tutti_mask m = {.max_tokens = 20};
        sbuf out = {.n = 0};
        tutti_ensemble_stats st;
        assert_int_equal(tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &m, sbuf_cb, &out, &st), 0);
        int32_t ids[512];
        int32_t k = tutti_tokenize(v, out.b, out.n, false, false, ids, 512);
        printf("%s, max_tokens 20: \"%s\": %d bytes, %d tokens of member 1\n", tutti_align_name((tutti_align)al), out.b,
               (int)out.n, k);
        assert_true(k > 10 && k <= 20);
        assert_true(valid_utf8(out.b, out.n));
        tutti_ensemble_free(e);
    }
    const char *same[2] = {M_STORIES, M_STORIES};
    tutti_ensemble *e = make_ens(same, 2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, 0);
    tutti_mask m = {.max_tokens = 20};
    sbuf out = {.n = 0};
    tutti_ensemble_stats st;
    assert_int_equal(tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &m, sbuf_cb, &out, &st), 0);
    assert_true(st.n_units <= 20 && st.n_units > 10);
    tutti_ensemble_free(e);
    /* a byte limit that falls inside "é": the incomplete character is not output */
    const char *allowed[1] = {" caf\xc3\xa9"};
    e = make_ens(models, 2, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, 0);
    tutti_mask mu = {.allowed = allowed, .n_allowed = 1, .max_len = 5};
    out.n = 0, out.b[0] = 0;
    assert_int_equal(tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &mu, sbuf_cb, &out, &st), 0);
    printf("max_len 5 inside \"\\xc3\\xa9\": \"%s\" (%d generated bytes)\n", out.b, st.n_bytes);
    assert_string_equal(out.b, " caf");
    tutti_ensemble_free(e);
    tutti_vocab_free(v);
}

/* ---- the CLI: exit 1 and the member named, for a prompt longer than a
 * context and for NaN logits; -n in tokens ---- */
static void test_cli_limits(void **state) {
    (void)state;
    char prompt[401];
    const char *s = "Once upon a time there was a little girl named Lily who loved to play outside. ";
    for (int i = 0; i < 400; i++) prompt[i] = s[i % strlen(s)];
    prompt[400] = 0;
    char cmd[16384];
    int status;
    snprintf(cmd, sizeof cmd, "%s run -m %s -m %s -p '%s' -t 1 2>&1 >/dev/null", TUTTI_CLI, shared_path(M_TOK361),
             shared_path(M_STORIES), prompt);
    char *err = run_cmd(cmd, &status);
    printf("run, 400-character prompt: exit %d: %s", status, err);
    assert_int_equal(status, 1);
    assert_non_null(strstr(err, "member 1 (babyllama-tok361.gguf)"));
    assert_non_null(strstr(err, "context"));
    free(err);
    const char *aligns[3] = {"token", "byte", "span"};
    for (int a = 0; a < 3; a++) {
        snprintf(cmd, sizeof cmd,
                 "%s run -m %s/ok-base.in -m %s/ok-nan-weights.in --align %s -p the -n 4 -t 1 2>&1 "
                 ">/dev/null",
                 TUTTI_CLI, CORPUS, CORPUS, aligns[a]);
        err = run_cmd(cmd, &status);
        printf("run --align %s, NaN member: exit %d: %s", aligns[a], status, err);
        assert_int_equal(status, 1);
        assert_non_null(strstr(err, "member 2 (ok-nan-weights.in): logits contain NaN"));
        free(err);
    }
}

/* ---- the scheduling calibration is cached (issue 12): a second start with
 * the same members and threads reads the first one's measurement, and the
 * cached numbers decide the schedule; another thread count or a changed
 * model file is another key. */
static tutti_ensemble *make_ens_threads(const char *a, const char *b, int n_threads) {
    tutti_member_desc d[2] = {{a, NAN, NAN}, {b, NAN, NAN}};
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = d;
    p.n_members = 2;
    p.align = TUTTI_ALIGN_BYTE;
    p.n_threads = n_threads;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) printf("ensemble: %s\n", tutti_last_error());
    return e;
}

static void test_schedule_cache(void **state) {
    (void)state;
    char dir[] = "/tmp/tutti-sched-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *old = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    setenv("XDG_CACHE_HOME", dir, 1);
    char *a = strdup(shared_path(M_STORIES)), *b = strdup(shared_path(M_TOK361));
    const char *paths[2] = {a, b};
    uint64_t key, key3;
    assert_int_equal(ens_schedule_cache_key(paths, 2, 1, 2, &key), 0);
    assert_int_equal(ens_schedule_cache_key(paths, 2, 1, 3, &key3), 0);
    assert_true(key != key3);
    double ts = 0, tp = 0;
    char path[4096];
    assert_false(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    /* the first start measures and stores */
    tutti_ensemble *e = make_ens_threads(a, b, 2);
    assert_non_null(e);
    tutti_ensemble_free(e);
    assert_true(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    assert_true(ts > 0 && tp > 0);
    /* the cached numbers decide: in turn faster, then concurrently faster */
    ens_schedule_cache_put(key, 1e-3, 2e-3, 0, path, sizeof path);
    e = make_ens_threads(a, b, 2);
    assert_non_null(e);
    assert_false(e->parallel);
    tutti_ensemble_free(e);
    ens_schedule_cache_put(key, 2e-3, 1e-3, 0, path, sizeof path);
    e = make_ens_threads(a, b, 2);
    assert_non_null(e);
    assert_true(e->parallel);
    tutti_ensemble_free(e);
    /* a measurement taken on a busy machine holds for 10 minutes, then is
     * measured again; a quiet one stays; a line of the earlier three-field
     * format counts as quiet, and other keys' lines are kept on a write */
    const int64_t now = (int64_t)time(NULL);
    ens_schedule_cache_put(key, 1e-3, 2e-3, now - 30, path, sizeof path);
    assert_true(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    assert_true(ts == 1e-3 && tp == 2e-3);
    ens_schedule_cache_put(key, 1e-3, 2e-3, now - 3600, path, sizeof path);
    assert_false(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    ens_schedule_cache_put(key3, 3e-3, 4e-3, 0, path, sizeof path);
    assert_false(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    assert_true(ens_schedule_cache_get(key3, &ts, &tp, path, sizeof path));
    FILE *prev = fopen(path, "a");
    assert_non_null(prev);
    fprintf(prev, "%016llx 5e-3 6e-3\n", (unsigned long long)key);
    fclose(prev);
    assert_true(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    assert_true(ts == 5e-3 && tp == 6e-3);
    ens_schedule_cache_put(key, 2e-3, 1e-3, 0, path, sizeof path);
    assert_true(ens_schedule_cache_get(key3, &ts, &tp, path, sizeof path) && ts == 3e-3);
    /* a changed model file (here: a copy with another mtime) is another key */
    char cp[512];
    snprintf(cp, sizeof cp, "%s/m.gguf", dir);
    FILE *in = fopen(a, "rb"), *out = fopen(cp, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, k, out), k);
    fclose(in), fclose(out);
    const char *cpaths[2] = {cp, b};
    uint64_t kc1, kc2;
    assert_int_equal(ens_schedule_cache_key(cpaths, 2, 1, 2, &kc1), 0);
    struct timespec t[2] = {{1000000000, 0}, {1000000000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, cp, t, 0), 0);
    assert_int_equal(ens_schedule_cache_key(cpaths, 2, 1, 2, &kc2), 0);
    assert_true(kc1 != kc2 && kc1 != key);
    /* a malformed cache file is a miss, not an error */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("zz not a line\n\x01\x02\n", f);
    fclose(f);
    assert_false(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    e = make_ens_threads(a, b, 2);
    assert_non_null(e);
    tutti_ensemble_free(e);
    assert_true(ens_schedule_cache_get(key, &ts, &tp, path, sizeof path));
    remove(path), remove(cp);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/tutti", dir);
    rmdir(sub), rmdir(dir);
    if (old) setenv("XDG_CACHE_HOME", old, 1), free(old);
    else unsetenv("XDG_CACHE_HOME");
    free(a), free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_member_is_an_error),
        cmocka_unit_test(test_context_limits),
        cmocka_unit_test(test_pruning_keeps_a_spelling_hypothesis),
        cmocka_unit_test(test_leaving_is_announced),
        cmocka_unit_test(test_ensemble_file_paths),
        cmocka_unit_test(test_eval_refuses),
        cmocka_unit_test(test_max_tokens_and_utf8),
        cmocka_unit_test(test_cli_limits),
        cmocka_unit_test(test_schedule_cache),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
