/* Fusion layer on real models (../shared/models): the "Done when" lines of
 * the ensemble issue.  Expected values come from independent computations
 * in this file (the public single-model API, brute-force sums over the
 * vocabulary, llama.cpp's published bits per byte), never from the fusion
 * code itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_common.h"
#include "fusion/ensemble_impl.h"
#include "gguf/gguf_write.h"

static const char *M_STORIES = "models/stories260K.gguf";
static const char *M_656K = "models/TinyStories-656K-Q8_0.gguf";
static const char *M_TOK105 = "models/BabyLlama-tok105/babyllama-tok105.gguf";
static const char *M_TOK361 = "models/BabyLlama-tok361/babyllama-tok361.gguf";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static tutti_ensemble *make_ens(const char *const *rel, int n, const float *w, tutti_align align,
                                tutti_fusion_rule rule, double prune) {
    tutti_member_desc d[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int i = 0; i < n; i++) {
        d[i].model_path = rel[i][0] == '/' ? rel[i] : shared_path(rel[i]);
        /* shared_path rotates 8 buffers: copy */
        d[i].model_path = strdup(d[i].model_path);
        d[i].weight = w ? w[i] : NAN;
        d[i].temp = NAN;
    }
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = d;
    p.n_members = n;
    p.align = align;
    p.rule = rule;
    p.n_threads = 1; /* tiny models: one thread each is fastest on a shared 2-core machine */
    if (prune >= 0) p.prune = prune;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) printf("ensemble: %s\n", tutti_last_error());
    for (int i = 0; i < n; i++) free((char *)d[i].model_path);
    return e;
}

/* ---- single-model generation with the public API (the reference) ---- */

static void reference_generate(const char *path, const char *prompt, const tutti_sampler_params *sp, int n_gen,
                               char *out, size_t cap) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(path, &mp);
    assert_non_null(m);
    tutti_session_params ssp = tutti_session_default_params();
    ssp.n_threads = 2;
    tutti_session *s = tutti_session_new(m, &ssp);
    assert_non_null(s);
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t ids[512];
    int32_t n = tutti_tokenize(v, prompt, strlen(prompt), tutti_vocab_add_bos(v), false, ids, 512);
    assert_true(n > 0);
    assert_int_equal(tutti_session_eval(s, ids, n, NULL), 0);
    tutti_sampler *smp = tutti_sampler_new(sp);
    size_t len = 0;
    int32_t V = tutti_model_n_vocab(m);
    for (int k = 0; k < n_gen; k++) {
        int32_t id = tutti_sampler_sample(smp, tutti_session_logits(s), V);
        tutti_sampler_accept(smp, id);
        if (tutti_vocab_is_eog(v, id)) break;
        int32_t pl = tutti_token_to_piece(v, id, false, out + len, (int32_t)(cap - len - 1));
        assert_true(pl >= 0);
        len += (size_t)pl;
        assert_int_equal(tutti_session_eval(s, &id, 1, NULL), 0);
    }
    out[len] = 0;
    tutti_sampler_free(smp);
    tutti_session_free(s);
    tutti_model_free(m);
}

typedef struct sbuf {
    char b[8192];
    size_t n;
} sbuf;

static int sbuf_cb(const char *bytes, size_t n, void *u) {
    sbuf *s = u;
    if (s->n + n < sizeof s->b) memcpy(s->b + s->n, bytes, n), s->n += n;
    s->b[s->n] = 0;
    return 0;
}

static void test_token_one_member_is_generate(void **state) {
    (void)state;
    require_shared();
    const char *prompt = "Once upon a time, there was a";
    tutti_sampler_params sps[2] = {tutti_sampler_default_params(), tutti_sampler_default_params()};
    sps[0].seed = 7;
    sps[1].temp = 0; /* greedy */
    for (int k = 0; k < 2; k++) {
        char want[8192];
        reference_generate(shared_path(M_STORIES), prompt, &sps[k], 48, want, sizeof want);
        tutti_ensemble *e = make_ens(&M_STORIES, 1, NULL, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, -1);
        assert_non_null(e);
        sbuf got = {.n = 0};
        tutti_mask m = {.max_len = 48};
        assert_int_equal(tutti_ensemble_generate(e, prompt, strlen(prompt), &sps[k], &m, sbuf_cb, &got, NULL), 0);
        printf("generate: %s\nensemble: %s\n", want, got.b);
        assert_string_equal(got.b, want);
        tutti_ensemble_free(e);
    }
}

/* (1, 0, 0) over three different models with one vocabulary gives member 1;
 * (0.4, 0.3, 0.3) does not (so the check can fail). */
static void test_token_weights_one_zero(void **state) {
    (void)state;
    require_shared();
    const char *models[3] = {"ref/arch/llama-F32.gguf", "ref/arch/llama-Q8_0.gguf", "ref/arch/qwen3-F16.gguf"};
    const char *prompt = "Once upon a time";
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 3;
    char want[8192];
    reference_generate(shared_path(models[0]), prompt, &sp, 24, want, sizeof want);
    float w1[3] = {1, 0, 0};
    for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_GATE; rule++) {
        tutti_ensemble *e = make_ens(models, 3, w1, TUTTI_ALIGN_AUTO, (tutti_fusion_rule)rule, -1);
        assert_non_null(e);
        assert_int_equal(tutti_ensemble_align(e), TUTTI_ALIGN_TOKEN); /* same vocabulary detected */
        sbuf got = {.n = 0};
        tutti_mask m = {.max_len = 24};
        assert_int_equal(tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &m, sbuf_cb, &got, NULL), 0);
        assert_string_equal(got.b, want);
        tutti_ensemble_free(e);
    }
    float w2[3] = {0.4f, 0.3f, 0.3f};
    tutti_ensemble *e = make_ens(models, 3, w2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, -1);
    assert_non_null(e);
    int32_t ids[2] = {1, 400};
    float a[512], b[512];
    assert_int_equal(fusion_token_fused(e, ids, 2, a), 0);
    float w1f[3] = {1, 0, 0};
    assert_int_equal(tutti_ensemble_set_weights(e, w1f, NULL), 0);
    assert_int_equal(fusion_token_fused(e, ids, 2, b), 0);
    double md = 0;
    for (int i = 0; i < 512; i++) md = fmax(md, fabs(exp(a[i]) - exp(b[i])));
    assert_true(md > 1e-3);
    tutti_ensemble_free(e);
}

/* N copies of one model with any weights: mix and product are that model. */
static void test_copies_give_the_model(void **state) {
    (void)state;
    require_shared();
    const char *models[3] = {M_STORIES, M_STORIES, M_STORIES};
    float w[3] = {0.5f, 0.3f, 0.2f};
    tutti_ensemble *e = make_ens(models, 3, w, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, -1);
    assert_non_null(e);
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path(M_STORIES), &mp);
    tutti_session *s = tutti_session_new(m, NULL);
    const tutti_vocab *v = tutti_model_vocab(m);
    const char *text = "Once upon a time there was a big dog.";
    int32_t ids[128];
    int32_t n = tutti_tokenize(v, text, strlen(text), true, false, ids, 128);
    assert_true(n > 4);
    static float rows[128 * 512];
    assert_int_equal(tutti_session_eval(s, ids, n, rows), 0);
    double worst = 0;
    for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_PRODUCT; rule++) {
        assert_int_equal(tutti_ensemble_set_rule(e, (tutti_fusion_rule)rule), 0);
        for (int32_t k = 1; k <= n; k++) {
            float fused[512];
            assert_int_equal(fusion_token_fused(e, ids, k, fused), 0);
            const float *z = rows + (size_t)(k - 1) * 512;
            double mx = -1e30, sum = 0;
            for (int i = 0; i < 512; i++) mx = fmax(mx, z[i]);
            for (int i = 0; i < 512; i++) sum += exp(z[i] - mx);
            for (int i = 0; i < 512; i++) worst = fmax(worst, fabs(exp(fused[i]) - exp(z[i] - mx) / sum));
        }
    }
    printf("token alignment, 3 copies, mix+product: max |p_fused - p_model| = %.3g\n", worst);
    assert_true(worst < 1e-6);
    tutti_ensemble_free(e);

    /* byte alignment: the fused next-byte distribution of 3 copies equals
     * the member's own next-byte distribution */
    e = make_ens(models, 3, w, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, -1);
    assert_non_null(e);
    fusion_bytes *st[3];
    for (int i = 0; i < 3; i++) {
        fusion_bytes_params bp = ens_bytes_params(e, i);
        st[i] = fusion_bytes_new(e->m[i], e->trie[i], &bp);
        assert_int_equal(fusion_bytes_start(st[i], "", 0), 0);
    }
    worst = 0;
    for (size_t k = 0; k <= strlen(text); k++) {
        double single[257];
        assert_int_equal(fusion_bytes_next(st[0], single), 0);
        for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_PRODUCT; rule++) {
            float fused[257];
            assert_int_equal(tutti_ensemble_set_rule(e, (tutti_fusion_rule)rule), 0);
            assert_int_equal(fusion_bytes_fused(e, st, fused), 0);
            for (int b = 0; b < 257; b++) worst = fmax(worst, fabs(exp(fused[b]) - single[b]));
        }
        if (k < strlen(text))
            for (int i = 0; i < 3; i++) assert_int_equal(fusion_bytes_commit(st[i], (uint8_t)text[k]), 0);
    }
    printf("byte alignment, 3 copies, mix+product: max |p_fused - p_member| = %.3g\n", worst);
    assert_true(worst < 1e-6);
    for (int i = 0; i < 3; i++) fusion_bytes_free(st[i]);
    tutti_session_free(s);
    tutti_model_free(m);
    tutti_ensemble_free(e);
}

/* ---- brute-force next-byte marginal ---- */

typedef struct brute {
    tutti_session *s;
    const tutti_vocab *v;
    int32_t V;
    char **piece;    /* [V] piece bytes (NULL: control / no text) */
    int32_t *plen;
    bool *eog;
    const char *s_bytes;
    int32_t len;
    int32_t path[256];
    float *logits;   /* [depth][V] */
    double *vec;
    int64_t n_forward;
} brute;

/* Adds, for every token sequence that stays inside s and then crosses or
 * reaches its end, its probability to the next byte it implies. */
static void brute_walk(brute *b, int32_t n, int32_t off, double P) {
    const float *z = b->logits + (size_t)(n - 1) * (size_t)b->V;
    double mx = -1e30, sum = 0;
    for (int32_t t = 0; t < b->V; t++) mx = fmax(mx, z[t]);
    for (int32_t t = 0; t < b->V; t++) sum += exp(z[t] - mx);
    int32_t rem = b->len - off;
    for (int32_t t = 0; t < b->V; t++) {
        double pt = P * exp(z[t] - mx) / sum;
        if (b->eog[t]) {
            if (rem == 0) b->vec[256] += pt;
            continue;
        }
        if (!b->piece[t]) continue;
        int32_t lq = b->plen[t];
        if (lq > rem) {
            if (memcmp(b->piece[t], b->s_bytes + off, (size_t)rem) == 0) b->vec[(uint8_t)b->piece[t][rem]] += pt;
        } else if (pt > 1e-12 && memcmp(b->piece[t], b->s_bytes + off, (size_t)lq) == 0) {
            /* deeper: run t after path[0..n) */
            assert_int_equal(tutti_session_rewind(b->s, n), 0);
            b->path[n] = t;
            assert_int_equal(tutti_session_eval(b->s, &t, 1, NULL), 0);
            b->n_forward++;
            memcpy(b->logits + (size_t)n * (size_t)b->V, tutti_session_logits(b->s), sizeof(float) * (size_t)b->V);
            brute_walk(b, n + 1, off + lq, pt);
        }
    }
}

static void check_bruteforce(const char *rel, const char *text) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path(rel), &mp);
    assert_non_null(m);
    brute b = {0};
    b.s = tutti_session_new(m, NULL);
    b.v = tutti_model_vocab(m);
    b.V = tutti_model_n_vocab(m);
    /* the SPM tokenizers here prepend a space to the text */
    assert_string_equal(tutti_vocab_type(b.v), "spm");
    b.piece = calloc((size_t)b.V, sizeof(char *));
    b.plen = calloc((size_t)b.V, sizeof(int32_t));
    b.eog = calloc((size_t)b.V, sizeof(bool));
    b.logits = malloc(sizeof(float) * (size_t)b.V * 256);
    for (int32_t t = 0; t < b.V; t++) {
        b.eog[t] = tutti_vocab_is_eog(b.v, t);
        if (tutti_vocab_is_control(b.v, t)) continue;
        char buf[64];
        int32_t k = tutti_token_to_piece(b.v, t, false, buf, 64);
        if (k <= 0) continue;
        b.piece[t] = malloc((size_t)k);
        memcpy(b.piece[t], buf, (size_t)k);
        b.plen[t] = k;
    }
    /* the fusion side, exact up to a 1e-9 pruning share */
    fusion_member *fm = fusion_member_local_new(shared_path(rel), 16, 0, 2);
    fusion_trie *tr = fusion_trie_build(fm->vocab);
    fusion_bytes_params bp = {.temp = 1.0f, .prune = 1e-9, .max_hyps = 64};
    fusion_bytes *st = fusion_bytes_new(fm, tr, &bp);
    assert_int_equal(fusion_bytes_start(st, "", 0), 0);
    size_t len = strlen(text);
    char *sb = malloc(len + 2);
    sb[0] = ' ';
    memcpy(sb + 1, text, len);
    double worst = 0;
    for (size_t i = 0; i <= len; i++) {
        double vec[257] = {0}, got[257];
        b.vec = vec;
        b.s_bytes = sb;
        b.len = (int32_t)i + 1;
        int32_t bos = tutti_vocab_bos(b.v);
        assert_int_equal(tutti_session_rewind(b.s, 0), 0);
        assert_int_equal(tutti_session_eval(b.s, &bos, 1, NULL), 0);
        memcpy(b.logits, tutti_session_logits(b.s), sizeof(float) * (size_t)b.V);
        b.path[0] = bos;
        brute_walk(&b, 1, 0, 1.0);
        double z = 0;
        for (int k = 0; k < 257; k++) z += vec[k];
        assert_int_equal(fusion_bytes_next(st, got), 0);
        for (int k = 0; k < 257; k++) worst = fmax(worst, fabs(got[k] - vec[k] / z));
        if (i < len) assert_int_equal(fusion_bytes_commit(st, (uint8_t)text[i]), 0);
    }
    printf("%s: %zu prefixes of \"%s\": max |P_byte - P_bruteforce| = %.3g (brute force ran %lld tokens)\n", rel,
           len + 1, text, worst, (long long)b.n_forward);
    assert_true(worst < 1e-5);
    fusion_bytes_free(st);
    fusion_trie_free(tr);
    fm->vt->free(fm);
    for (int32_t t = 0; t < b.V; t++) free(b.piece[t]);
    free(b.piece), free(b.plen), free(b.eog), free(b.logits), free(sb);
    tutti_session_free(b.s);
    tutti_model_free(m);
}

static void test_byte_marginal_bruteforce(void **state) {
    (void)state;
    require_shared();
    check_bruteforce(M_STORIES, "Once upon a time, Lily");
    check_bruteforce(M_TOK105, "Once upon a time, Lily");
}

/* ---- bits per byte ---- */

/* Token-level bits per byte straight from the model's logits: every chunk
 * tokenized with BOS, every later token scored (../shared/oracle/bpb.py). */
static double token_bpb(const char *path, char **chunks, int n_chunks) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(path, &mp);
    assert_non_null(m);
    tutti_session *s = tutti_session_new(m, NULL);
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t V = tutti_model_n_vocab(m);
    double nll = 0;
    int64_t nb = 0;
    float *rows = malloc(sizeof(float) * 512 * (size_t)V);
    for (int c = 0; c < n_chunks; c++) {
        int32_t ids[512];
        int32_t n = tutti_tokenize(v, chunks[c], strlen(chunks[c]), true, false, ids, 512);
        assert_true(n > 1);
        assert_int_equal(tutti_session_rewind(s, 0), 0);
        assert_int_equal(tutti_session_eval(s, ids, n, rows), 0);
        for (int32_t k = 0; k + 1 < n; k++) {
            const float *z = rows + (size_t)k * (size_t)V;
            double mx = -1e30, sum = 0;
            for (int32_t i = 0; i < V; i++) mx = fmax(mx, z[i]);
            for (int32_t i = 0; i < V; i++) sum += exp(z[i] - mx);
            nll -= z[ids[k + 1]] - mx - log(sum);
        }
        nb += (int64_t)strlen(chunks[c]);
    }
    free(rows);
    tutti_session_free(s);
    tutti_model_free(m);
    return nll / log(2.0) / (double)nb;
}

static void test_byte_bpb_matches_token_bpb(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *text = read_file(shared_path("eval/stories-dev.txt"), &len);
    assert_non_null(text);
    char **chunks;
    int nc = fusion_split_chunks(text, len, 200, &chunks);
    assert_int_equal(nc, 20);
    const char *models[2] = {M_STORIES, M_TOK105};
    const double llamacpp[2] = {1.143, 1.218}; /* ../shared/README.md, eval/ */
    for (int k = 0; k < 2; k++) {
        double tb = token_bpb(shared_path(models[k]), chunks, nc);
        tutti_ensemble *e = make_ens(&models[k], 1, NULL, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, -1);
        assert_non_null(e);
        tutti_bpb_result r;
        double t0 = now_s();
        assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &r), 0);
        printf("%s: token level %.4f (llama.cpp %.3f), ensemble eval member %.4f, byte alignment %.4f (%.1f s)\n",
               models[k], tb, llamacpp[k], r.member_bpb[0], r.ensemble_bpb, now_s() - t0);
        assert_true(fabs(tb - llamacpp[k]) < 0.002);
        assert_true(fabs(r.member_bpb[0] - tb) < 1e-4);
        assert_true(fabs(r.ensemble_bpb - tb) < 0.02);
        tutti_ensemble_free(e);
    }
    fusion_free_chunks(chunks, nc);
    free(text);
}

/* Four English story models with four tokenizers, byte alignment: fitted
 * weights beat the best member. */
static void test_ensemble_beats_best_member(void **state) {
    (void)state;
    require_shared();
    size_t len;
    char *text = read_file(shared_path("eval/stories-dev.txt"), &len);
    assert_non_null(text);
    const char *models[4] = {M_STORIES, M_656K, M_TOK105, M_TOK361};
    tutti_ensemble *e = make_ens(models, 4, NULL, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, 1e-4);
    assert_non_null(e);
    tutti_fit_result fr;
    double t0 = now_s();
    assert_int_equal(tutti_ensemble_fit(e, text, len, NULL, 0, &fr), 0);
    double t_fit = now_s() - t0;
    tutti_bpb_result r;
    assert_int_equal(tutti_ensemble_eval_bpb(e, text, len, &r), 0);
    double best = INFINITY;
    for (int i = 0; i < 4; i++) {
        printf("  %-45s token %.4f  byte %.4f  weight %.3f\n", models[i], r.member_bpb[i], r.member_byte_bpb[i],
               (double)fr.weights[i]);
        best = fmin(best, fmin(r.member_bpb[i], r.member_byte_bpb[i]));
    }
    printf("byte/mix: uniform %.4f fitted %.4f (eval %.4f), best member %.4f: %.1f%% below (fit %.1f s)\n",
           fr.uniform_bpb, fr.fitted_bpb, r.ensemble_bpb, best, 100 * (1 - r.ensemble_bpb / best), t_fit);
    assert_true(fabs(r.ensemble_bpb - fr.fitted_bpb) < 1e-4);
    assert_true(r.ensemble_bpb < best);
    assert_true(r.ensemble_bpb < 0.97 * best);
    tutti_ensemble_free(e);
    free(text);
}

/* ---- errors ---- */

static void test_errors(void **state) {
    (void)state;
    require_shared();
    const char *missing[2] = {M_STORIES, "models/no-such-model.gguf"};
    assert_null(make_ens(missing, 2, NULL, TUTTI_ALIGN_AUTO, TUTTI_RULE_MIX, -1));
    assert_non_null(strstr(tutti_last_error(), "no-such-model.gguf"));
    const char *diff[2] = {M_STORIES, "models/aidreams260K/aidreams260K.gguf"};
    assert_null(make_ens(diff, 2, NULL, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, -1));
    assert_non_null(strstr(tutti_last_error(), "different vocabularies"));
    /* same 512-token *size* but other tokens: auto picks byte alignment */
    tutti_ensemble *e = make_ens(diff, 2, NULL, TUTTI_ALIGN_AUTO, TUTTI_RULE_MIX, -1);
    assert_non_null(e);
    assert_int_equal(tutti_ensemble_align(e), TUTTI_ALIGN_BYTE);
    tutti_ensemble_free(e);
    const char *two[2] = {M_STORIES, M_STORIES};
    float neg[2] = {1.0f, -0.5f};
    assert_null(make_ens(two, 2, neg, TUTTI_ALIGN_AUTO, TUTTI_RULE_MIX, -1));
    assert_non_null(strstr(tutti_last_error(), "negative weight"));
    assert_null(make_ens(two, 2, neg, TUTTI_ALIGN_AUTO, TUTTI_RULE_PRODUCT, -1));
    e = make_ens(two, 2, neg, TUTTI_ALIGN_AUTO, TUTTI_RULE_CONTRASTIVE, -1);
    assert_non_null(e);
    tutti_ensemble_free(e);
    float zero[2] = {0, 0};
    assert_null(make_ens(two, 2, zero, TUTTI_ALIGN_AUTO, TUTTI_RULE_MIX, -1));
    tutti_member_desc d = {.model_path = shared_path(M_STORIES), .weight = 1, .temp = -1};
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = &d;
    p.n_members = 1;
    assert_null(tutti_ensemble_new(&p));
    assert_non_null(strstr(tutti_last_error(), "temperature"));
    p.n_members = 0;
    assert_null(tutti_ensemble_new(&p));

    /* the CLI: weights that do not match the member count */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s run -m %s -m %s -w 0.5,0.3,0.2 -p x -n 1 2>&1", TUTTI_CLI,
             shared_path(M_STORIES), shared_path(M_TOK105));
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char out[4096];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    printf("cli: %s", out);
    assert_true(st != 0);
    assert_non_null(strstr(out, "3 weights but the ensemble has 2 members"));
}

/* ---- fusion overhead with a 151,669-token vocabulary ---- */

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 - 0.5);
}

/* A random-weight llama (n_embd 32, 1 layer, tied embeddings) with the
 * qwen3 tokenizer copied from ../shared/models/vocab/ggml-vocab-qwen3.gguf. */
static void write_qwen3_vocab_model(const char *path) {
    gguf_file *vf = gguf_open(shared_path("models/vocab/ggml-vocab-qwen3.gguf"));
    assert_non_null(vf);
    gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_str(w, "general.architecture", "llama"), 0);
    for (int64_t i = 0; i < gguf_n_kv(vf); i++) {
        gguf_str k = gguf_kv_key(vf, i);
        if (k.len > 10 && !memcmp(k.data, "tokenizer.", 10)) assert_int_equal(gguf_writer_copy_kv(w, vf, i), 0);
    }
    int64_t V = (int64_t)gguf_kv_arr_n(vf, gguf_find_key(vf, "tokenizer.ggml.tokens"));
    assert_int_equal(V, 151669);
    const int E = 32, F = 64;
    gguf_writer_add_u32(w, "llama.context_length", 256);
    gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)E);
    gguf_writer_add_u32(w, "llama.block_count", 1);
    gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)F);
    gguf_writer_add_u32(w, "llama.attention.head_count", 2);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", 2);
    gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)(E / 2));
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    float *emb = malloc(sizeof(float) * (size_t)(V * E));
    for (int64_t i = 0; i < V * E; i++) emb[i] = frand();
    static float norm[32], sq[4][32 * 32], up[2][32 * 64], down[64 * 32];
    for (int i = 0; i < E; i++) norm[i] = 1.0f;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < E * E; i++) sq[k][i] = frand() * 0.3f;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < E * F; i++) up[k][i] = frand() * 0.3f;
    for (int i = 0; i < E * F; i++) down[i] = frand() * 0.3f;
    int64_t ne_emb[2] = {E, V}, ne_n[1] = {E}, ne_sq[2] = {E, E}, ne_up[2] = {E, F}, ne_dn[2] = {F, E};
    assert_int_equal(gguf_writer_add_tensor(w, "token_embd.weight", 0, 2, ne_emb, emb), 0);
    gguf_writer_add_tensor(w, "output_norm.weight", 0, 1, ne_n, norm);
    gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 0, 1, ne_n, norm);
    gguf_writer_add_tensor(w, "blk.0.attn_q.weight", 0, 2, ne_sq, sq[0]);
    gguf_writer_add_tensor(w, "blk.0.attn_k.weight", 0, 2, ne_sq, sq[1]);
    gguf_writer_add_tensor(w, "blk.0.attn_v.weight", 0, 2, ne_sq, sq[2]);
    gguf_writer_add_tensor(w, "blk.0.attn_output.weight", 0, 2, ne_sq, sq[3]);
    gguf_writer_add_tensor(w, "blk.0.ffn_norm.weight", 0, 1, ne_n, norm);
    gguf_writer_add_tensor(w, "blk.0.ffn_gate.weight", 0, 2, ne_up, up[0]);
    gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", 0, 2, ne_up, up[1]);
    assert_int_equal(gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", 0, 2, ne_dn, down), 0);
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_close(vf);
    free(emb);
}

static void test_overhead_qwen3_vocab(void **state) {
    (void)state;
    require_shared();
    char path[] = "/tmp/tutti_qwen3v_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_qwen3_vocab_model(path);
    const char *models[2] = {path, path};
    const char *prompt = "Once upon a time";
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 1;
    struct {
        int n;
        tutti_align align;
        tutti_fusion_rule rule;
        int len;
    } cases[] = {{1, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, 32},   {2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, 32},
                 {2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_PRODUCT, 32}, {2, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, 48}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        tutti_ensemble_params p = tutti_ensemble_default_params();
        tutti_member_desc d[2] = {{path, NAN, NAN}, {path, NAN, NAN}};
        (void)models;
        p.members = d;
        p.n_members = cases[k].n;
        p.align = cases[k].align;
        p.rule = cases[k].rule;
        p.parallel = 1; /* sequential: forward time is the sum of the members' */
        p.n_threads = 1;
        tutti_ensemble *e = tutti_ensemble_new(&p);
        if (!e) printf("%s\n", tutti_last_error());
        assert_non_null(e);
        sbuf got = {.n = 0};
        tutti_mask m = {.max_len = cases[k].len};
        tutti_ensemble_stats st;
        assert_int_equal(tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &m, sbuf_cb, &got, &st), 0);
        assert_true(st.n_units > 0);
        printf("151669-token vocabulary, %d member(s), %s/%s: %d %ss, forward %.1f ms, fusion overhead %.3f ms per "
               "%s\n",
               cases[k].n, tutti_align_name(cases[k].align), tutti_rule_name(cases[k].rule), st.n_units,
               cases[k].align == TUTTI_ALIGN_TOKEN ? "token" : "byte", 1e3 * st.t_forward_s,
               1e3 * st.t_fusion_s / st.n_units, cases[k].align == TUTTI_ALIGN_TOKEN ? "token" : "byte");
        tutti_ensemble_free(e);
    }
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_one_member_is_generate),
        cmocka_unit_test(test_token_weights_one_zero),
        cmocka_unit_test(test_copies_give_the_model),
        cmocka_unit_test(test_byte_marginal_bruteforce),
        cmocka_unit_test(test_byte_bpb_matches_token_bpb),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_overhead_qwen3_vocab),
        cmocka_unit_test(test_ensemble_beats_best_member),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
