/* Fusion layer on real models (../shared/models): the "Done when" lines of
 * the ensemble issue.  Expected values come from independent computations
 * in this file (the public single-model API, brute-force sums over the
 * vocabulary, llama.cpp's published bits per byte), never from the fusion
 * code itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* Fused output never ends inside a UTF-8 character (an incomplete last
 * character is not output), where tutti generate prints every byte: the
 * reference drops an incomplete trailing sequence (a lead byte followed by
 * fewer continuation bytes than it announces). */
static void drop_incomplete_utf8(char *s) {
    size_t n = strlen(s);
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > k) s[n - k] = 0;
        return;
    }
}

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
    drop_incomplete_utf8(out);
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
    char **piece; /* [V] piece bytes (NULL: control / no text) */
    int32_t *plen;
    bool *eog;
    const char *s_bytes;
    int32_t len;
    int32_t path[256];
    float *logits; /* [depth][V] */
    double *vec;
    int64_t n_forward;
    double cut; /* paths below this probability are not followed deeper (speed) */
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
        } else if (pt > b->cut && memcmp(b->piece[t], b->s_bytes + off, (size_t)lq) == 0) {
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

/* prompt_ids == NULL: from BOS with the tokenizer's space prefix (SPM);
 * else after the prompt ids, the text's bytes following the last prompt
 * token directly (tutti_ensemble_generate_ids). */
static void check_bruteforce_after(const char *rel, const int32_t *prompt_ids, int32_t n_prompt, const char *text) {
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load((rel[0] == '/' ? rel : shared_path(rel)), &mp);
    assert_non_null(m);
    brute b = {0};
    /* a random-weight model spreads its mass over many tokenizations, each
     * tiny: follow them all */
    b.cut = prompt_ids ? 0.0 : 1e-12;
    b.s = tutti_session_new(m, NULL);
    b.v = tutti_model_vocab(m);
    b.V = tutti_model_n_vocab(m);
    /* the SPM tokenizers here prepend a space to a text prompt */
    assert_string_equal(tutti_vocab_type(b.v), "spm");
    const char *pre = prompt_ids ? "" : " ";
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
    fusion_member *fm = fusion_member_local_new((rel[0] == '/' ? rel : shared_path(rel)), 16, 0, 2);
    fusion_trie *tr = fusion_trie_build(fm->vocab);
    fusion_bytes_params bp = {.temp = 1.0f, .prune = 1e-9, .max_hyps = 1024};
    fusion_bytes *st = fusion_bytes_new(fm, tr, &bp);
    if (prompt_ids) assert_int_equal(fusion_bytes_start_ids(st, prompt_ids, n_prompt), 0);
    else assert_int_equal(fusion_bytes_start(st, "", 0), 0);
    size_t len = strlen(text), lp = strlen(pre);
    char *sb = malloc(len + 2);
    memcpy(sb, pre, lp);
    memcpy(sb + lp, text, len);
    int32_t bos = tutti_vocab_bos(b.v);
    if (!prompt_ids) prompt_ids = &bos, n_prompt = 1;
    assert_true(n_prompt < 128);
    double worst = 0;
    for (size_t i = 0; i <= len; i++) {
        double vec[257] = {0}, got[257];
        b.vec = vec;
        b.s_bytes = sb;
        b.len = (int32_t)(i + lp);
        assert_int_equal(tutti_session_rewind(b.s, 0), 0);
        assert_int_equal(tutti_session_eval(b.s, prompt_ids, n_prompt, NULL), 0);
        /* brute_walk keeps logits rows per depth: the prompt's last row at depth n_prompt - 1 */
        memcpy(b.logits + (size_t)(n_prompt - 1) * (size_t)b.V, tutti_session_logits(b.s), sizeof(float) * (size_t)b.V);
        memcpy(b.path, prompt_ids, sizeof(int32_t) * (size_t)n_prompt);
        brute_walk(&b, n_prompt, 0, 1.0);
        double z = 0;
        for (int k = 0; k < 257; k++) z += vec[k];
        assert_int_equal(fusion_bytes_next(st, got), 0);
        for (int k = 0; k < 257; k++) worst = fmax(worst, fabs(got[k] - vec[k] / z));
        if (i < len) assert_int_equal(fusion_bytes_commit(st, (uint8_t)text[i]), 0);
    }
    printf("%s%s: %zu prefixes of \"%s\": max |P_byte - P_bruteforce| = %.3g (brute force ran %lld tokens)\n", rel,
           lp ? "" : " after a token-id prompt", len + 1, text, worst, (long long)b.n_forward);
    assert_true(worst < 1e-6);
    fusion_bytes_free(st);
    fusion_trie_free(tr);
    fm->vt->free(fm);
    for (int32_t t = 0; t < b.V; t++) free(b.piece[t]);
    free(b.piece), free(b.plen), free(b.eog), free(b.logits), free(sb);
    tutti_session_free(b.s);
    tutti_model_free(m);
}

static void check_bruteforce(const char *rel, const char *text) { check_bruteforce_after(rel, NULL, 0, text); }

static void test_byte_marginal_bruteforce(void **state) {
    (void)state;
    check_bruteforce(M_STORIES, "Once upon a time, Lily");
    check_bruteforce(M_TOK105, "Once upon a time, Lily");
}

/* ---- chat: per-member token-id prompts (tutti run --chat) ---- */

/* Copy of a GGUF with tokenizer.chat_template = tmpl; eos_scale != 1
 * multiplies the output-matrix row of the EOS token (F32 output.weight), so
 * that the model ends its turn after a few tokens. */
static void write_chat_copy(const char *src, const char *tmpl, float eos_scale, const char *path) {
    gguf_file *f = gguf_open(src);
    assert_non_null(f);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        if (gguf_str_eq(k, "general.alignment") || gguf_str_eq(k, "tokenizer.chat_template")) continue;
        assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
    }
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.chat_template", tmpl), 0);
    uint32_t eos = 0;
    assert_true(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &eos));
    float *scaled = NULL;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        const void *data = t->data;
        if (eos_scale != 1.0f && !strcmp(name, "output.weight")) {
            assert_int_equal(t->type, 0); /* F32 */
            size_t ne = (size_t)(t->ne[0] * t->ne[1]);
            scaled = malloc(sizeof(float) * ne);
            memcpy(scaled, t->data, sizeof(float) * ne);
            for (int64_t k = 0; k < t->ne[0]; k++) scaled[(size_t)eos * (size_t)t->ne[0] + (size_t)k] *= eos_scale;
            data = scaled;
        }
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data), 0);
    }
    assert_true(eos_scale == 1.0f || scaled != NULL);
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_close(f);
    free(scaled);
}

typedef struct chat_files {
    char dir[64];
    char phi3[128];  /* phi3 test model (<|user|>, <|end|>, <|assistant|> are control tokens), phi-3 template */
    char llama[128]; /* llama test model (stories260K vocabulary), phi-3 template, EOS row x4 */
    char plain[128]; /* stories260K: no template */
} chat_files;

static void chat_files_make(chat_files *c) {
    snprintf(c->dir, sizeof c->dir, "/tmp/tutti_fchatXXXXXX");
    assert_non_null(mkdtemp(c->dir));
    snprintf(c->phi3, sizeof c->phi3, "%s/phi3-chat.gguf", c->dir);
    snprintf(c->llama, sizeof c->llama, "%s/llama-chat-eos.gguf", c->dir);
    snprintf(c->plain, sizeof c->plain, "%s", shared_path(M_STORIES));
    char *tmpl = read_file(shared_path("ref/chat/phi-3.jinja"), NULL);
    assert_non_null(tmpl);
    write_chat_copy(shared_path("ref/arch/phi3-F16.gguf"), tmpl, 1.0f, c->phi3);
    write_chat_copy(shared_path("ref/arch/llama-F32.gguf"), tmpl, 4.0f, c->llama);
    free(tmpl);
}

static void chat_files_remove(chat_files *c) {
    unlink(c->phi3);
    unlink(c->llama);
    rmdir(c->dir);
}

/* "generated N tokens" from tutti generate's stderr */
static int generated_count(const char *err) {
    const char *p = strstr(err, "generated ");
    assert_non_null(p);
    return atoi(p + 10);
}

/* `tutti run --chat` with one member (token alignment, and two copies of
 * it) prints exactly what `tutti generate --chat` prints: the same
 * rendering, the same tokens, the same stop at end of turn and at a full
 * context. */
static void test_chat_run_is_generate_chat(void **state) {
    (void)state;
    require_shared();
    chat_files c;
    chat_files_make(&c);
    const char *models[2] = {c.phi3, c.llama};
    /* the last case fills the context a few tokens after the prompt (and
     * stops there: no context shift) */
    const char *opts[2][4] = {{"--temp 0 -n 40", "--seed 7 -n 40", "--seed 3 --repeat-penalty 1.3 -n 40",
                               "--temp 0 -n 64 --no-context-shift -c 12"},
                              {"--temp 0 -n 40", "--seed 7 -n 40", "--seed 3 --repeat-penalty 1.3 -n 40",
                               "--temp 0 -n 64 --no-context-shift -c 39"}};
    char cmd[4096];
    int st;
    int n_stopped = 0;
    for (int mi = 0; mi < 2; mi++)
        for (int kk = 0; kk < 4; kk++) {
            const char *const *o = opts[mi];
            int k = kk;
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s --chat -p 'hi there' --system 'Be brief.' %s -t 1 2>%s/gen.err", TUTTI_CLI,
                     models[mi], o[k], c.dir);
            char *want = run_cmd(cmd, &st);
            assert_int_equal(st, 0);
            drop_incomplete_utf8(want);
            char errp[256];
            snprintf(errp, sizeof errp, "%s/gen.err", c.dir);
            char *err = read_file(errp, NULL);
            int n_gen = generated_count(err);
            int n_max = atoi(strstr(o[k], "-n ") + 3);
            bool ctx = strstr(o[k], "-c ") != NULL;
            if (ctx) {
                /* context full: generate stops after n_ctx - prompt + 1 tokens */
                const char *pt = strstr(err, "prompt ");
                assert_non_null(pt);
                int n_prompt = atoi(pt + 7);
                assert_int_equal(n_gen, atoi(strstr(o[k], "-c ") + 3) - n_prompt + 1);
            } else {
                n_stopped += n_gen < n_max;
            }
            free(err);
            for (int copies = 1; copies <= 2; copies++) {
                if (copies == 2 && !strstr(o[k], "--temp 0")) continue; /* rounding: greedy only */
                snprintf(cmd, sizeof cmd,
                         "%s run -m %s%s%s --chat -p 'hi there' --system 'Be brief.' %s -t 1 2>&1 >%s/run.out",
                         TUTTI_CLI, models[mi], copies == 2 ? " -m " : "", copies == 2 ? models[mi] : "", o[k], c.dir);
                char *rerr = run_cmd(cmd, &st);
                if (st != 0) printf("%s\n", rerr);
                assert_int_equal(st, 0);
                snprintf(errp, sizeof errp, "%s/run.out", c.dir);
                size_t rn;
                char *got = read_file(errp, &rn);
                (void)rn;
                printf("%s x%d %s: %d tokens%s\n", mi ? "llama" : "phi3", copies, o[k], n_gen,
                       ctx             ? " (context full)"
                       : n_gen < n_max ? " (end of turn)"
                                       : "");
                assert_memory_equal(got, want, strlen(want) + 1);
                char tok[64];
                snprintf(tok, sizeof tok, "token alignment, rule mix: %d tokens", n_gen);
                assert_non_null(strstr(rerr, tok));
                free(got);
                free(rerr);
            }
            free(want);
        }
    /* the EOS-heavy model ended its turn before -n (the check above covers
     * the stop, not only the text) */
    assert_true(n_stopped >= 2);
    chat_files_remove(&c);
}

/* Two members with different vocabularies (byte alignment): each member's
 * prompt is its own rendering, the same ids `tutti generate --chat` uses
 * for that model; errors name the member. */
static void test_chat_run_byte_members(void **state) {
    (void)state;
    require_shared();
    chat_files c;
    chat_files_make(&c);
    char cmd[4096];
    int st;
    const char *models[2] = {c.llama, c.phi3};
    char *want_ids[2];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s --chat -p 'hi <|end|> there' -n 1 --temp 0 -t 1 --verbose-prompt 2>&1 >/dev/null",
                 TUTTI_CLI, models[i]);
        char *err = run_cmd(cmd, &st);
        assert_int_equal(st, 0);
        char *l = strstr(err, "prompt ids:");
        assert_non_null(l);
        *strchr(l, '\n') = 0;
        want_ids[i] = strdup(l + 11);
        free(err);
    }
    for (int al = 0; al < 2; al++) {
        snprintf(
            cmd, sizeof cmd,
            "%s run -m %s -m %s --align %s --chat -p 'hi <|end|> there' -n 48 --seed 5 -t 2 --verbose-prompt 2>&1 >%s/run.out",
            TUTTI_CLI, models[0], models[1], al ? "span" : "byte", c.dir);
        char *err = run_cmd(cmd, &st);
        printf("%s", err);
        assert_int_equal(st, 0);
        for (int i = 0; i < 2; i++) {
            char line[64];
            snprintf(line, sizeof line, "member %d prompt ids:", i + 1);
            char *l = strstr(err, line);
            assert_non_null(l);
            l += strlen(line);
            assert_memory_equal(l, want_ids[i], strlen(want_ids[i]));
            assert_true(l[strlen(want_ids[i])] == '\n');
        }
        free(err);
    }
    free(want_ids[0]);
    free(want_ids[1]);
    /* a member without a template */
    snprintf(cmd, sizeof cmd, "%s run -m %s -m %s --chat -p hi -n 4 2>&1 >/dev/null", TUTTI_CLI, c.phi3, c.plain);
    char *err = run_cmd(cmd, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(err, "member 2"));
    assert_non_null(strstr(err, "chat_template"));
    free(err);
    snprintf(cmd, sizeof cmd, "%s run -m %s --system x -p hi -n 4 2>&1 >/dev/null", TUTTI_CLI, c.phi3);
    err = run_cmd(cmd, &st);
    assert_int_equal(st, 2);
    free(err);
    chat_files_remove(&c);
}

/* The library side: per-member prompts reach their members (weights 0/1
 * give exactly the chosen member on its own prompt), and after a token-id
 * prompt the byte marginals (end of turn included) are the brute-force sums
 * over the member's tokenizations. */
static void test_chat_prompt_ids(void **state) {
    (void)state;
    require_shared();
    chat_files c;
    chat_files_make(&c);
    const char *models[2] = {"ref/arch/llama-F32.gguf", "ref/arch/llama-Q8_0.gguf"};
    const char *prompts[2] = {"Once upon a time", "The cat sat"};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 11;
    int32_t ids[2][64], n[2];
    tutti_vocab *v = tutti_vocab_load(shared_path(models[0]));
    assert_non_null(v);
    for (int i = 0; i < 2; i++) {
        n[i] = tutti_tokenize(v, prompts[i], strlen(prompts[i]), true, false, ids[i], 64);
        assert_true(n[i] > 1);
    }
    const int32_t *pid[2] = {ids[0], ids[1]};
    for (int pick = 0; pick < 2; pick++) {
        char want[8192];
        reference_generate(shared_path(models[pick]), prompts[pick], &sp, 24, want, sizeof want);
        float w[2] = {pick == 0 ? 1.0f : 0.0f, pick == 1 ? 1.0f : 0.0f};
        tutti_ensemble *e = make_ens(models, 2, w, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, -1);
        assert_non_null(e);
        sbuf got = {.n = 0};
        tutti_mask m = {.max_len = 24};
        assert_int_equal(tutti_ensemble_generate_ids(e, pid, n, &sp, &m, sbuf_cb, &got, NULL), 0);
        printf("member %d on its own prompt: %s\n", pick + 1, got.b);
        assert_string_equal(got.b, want);
        /* bad prompts: a clear error */
        int32_t bad_n[2] = {n[0], 0};
        assert_int_equal(tutti_ensemble_generate_ids(e, pid, bad_n, &sp, &m, sbuf_cb, &got, NULL), TUTTI_ERR);
        assert_non_null(strstr(tutti_last_error(), "member 2"));
        int32_t bad[1] = {512};
        const int32_t *bid[2] = {ids[0], bad};
        int32_t bn[2] = {n[0], 1};
        assert_int_equal(tutti_ensemble_generate_ids(e, bid, bn, &sp, &m, sbuf_cb, &got, NULL), TUTTI_ERR);
        assert_non_null(strstr(tutti_last_error(), "out of range"));
        tutti_ensemble_free(e);
    }
    tutti_vocab_free(v);

    /* byte marginals after a chat rendering (phi-3 template, rendered and
     * tokenized with the public API) of the EOS-heavy model */
    char *tmpl = read_file(shared_path("ref/chat/phi-3.jinja"), NULL);
    tutti_chat_message msg = {"user", "hi there"};
    char *text = tutti_chat_render(tmpl, &msg, 1, true, "<s>", "</s>");
    assert_non_null(text);
    v = tutti_vocab_load(c.llama);
    int32_t cid[128];
    int32_t nc = tutti_tokenize(v, text, strlen(text), false, true, cid, 128);
    assert_true(nc > 4 && cid[0] == tutti_vocab_bos(v));
    check_bruteforce_after(c.llama, cid, nc, "Lily ran");
    tutti_vocab_free(v);
    free(text);
    free(tmpl);
    chat_files_remove(&c);
}

/* A full context ends byte and span generation cleanly (as token alignment
 * and tutti generate do): the text is what a large context gives, cut. */
static void test_context_full_is_clean_stop(void **state) {
    (void)state;
    const char *models[2] = {M_STORIES, M_TOK361}; /* tok361: one token per character */
    const char *prompt = "Once upon a time";
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    for (int al = 0; al < 2; al++) {
        sbuf out[2];
        for (int k = 0; k < 2; k++) {
            tutti_member_desc d[2];
            for (int i = 0; i < 2; i++) d[i] = (tutti_member_desc){strdup(shared_path(models[i])), NAN, NAN};
            tutti_ensemble_params p = tutti_ensemble_default_params();
            p.members = d;
            p.n_members = 2;
            p.align = al ? TUTTI_ALIGN_SPAN : TUTTI_ALIGN_BYTE;
            p.n_threads = 1;
            p.n_ctx = k == 0 ? 24 : 0; /* 17 prompt tokens for tok361 */
            tutti_ensemble *e = tutti_ensemble_new(&p);
            for (int i = 0; i < 2; i++) free((char *)d[i].model_path);
            assert_non_null(e);
            out[k].n = 0;
            out[k].b[0] = 0;
            tutti_mask m = {.max_len = 40};
            int rc = tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &m, sbuf_cb, &out[k], NULL);
            if (rc < 0) printf("%s\n", tutti_last_error());
            assert_int_equal(rc, 0);
            tutti_ensemble_free(e);
        }
        printf("%s, n_ctx 24: \"%s\"; default context: \"%s\"\n", al ? "span" : "byte", out[0].b, out[1].b);
        assert_true(out[0].n > 0 && out[0].n < out[1].n);
        assert_memory_equal(out[0].b, out[1].b, out[0].n);
    }
}

/* ---- masks over a token vocabulary ---- */

/* Is text·piece allowed by the mask (the definition, written out)? */
static bool mask_def(const tutti_mask *m, const char *text, const char *piece, size_t lp, bool eog) {
    size_t lt = strlen(text);
    if (m->n_allowed > 0) {
        bool ok = false;
        for (int k = 0; k < m->n_allowed && !ok; k++) {
            const char *a = m->allowed[k];
            size_t la = strlen(a);
            if (la < lt + lp || strncmp(a, text, lt) || memcmp(a + lt, piece, lp)) continue;
            ok = eog ? la == lt : lp > 0; /* a token without bytes cannot progress */
        }
        if (!ok) return false;
    }
    char buf[512];
    memcpy(buf, text, lt);
    memcpy(buf + lt, piece, lp);
    for (int k = 0; k < m->n_forbidden; k++) {
        size_t lf = strlen(m->forbidden[k]);
        for (size_t end = lt + 1; end <= lt + lp; end++) /* occurrences ending in the piece */
            if (end >= lf && !memcmp(buf + end - lf, m->forbidden[k], lf)) return false;
    }
    return true;
}

/* token_mask_apply rules out exactly the tokens the definition does, on
 * stories260K's and Qwen3's vocabularies. */
static void test_token_mask_definition(void **state) {
    (void)state;
    require_shared();
    const char *vocabs[2] = {M_STORIES, "models/vocab/ggml-vocab-qwen3.gguf"};
    const char *allowed[3] = {"Once upon a time", "Once there", "On"};
    const char *forbidden[3] = {"the", "e t", " a"};
    const char *texts[] = {"", "On", "Once", "Once ", "Once upon a ti", "Once upon a time", "xx th", "a the"};
    for (int vi = 0; vi < 2; vi++) {
        tutti_vocab *v = tutti_vocab_load(shared_path(vocabs[vi]));
        assert_non_null(v);
        fusion_trie *t = fusion_trie_build(v);
        assert_non_null(t);
        int32_t V = tutti_vocab_n_tokens(v);
        float *dist = malloc(sizeof(float) * (size_t)V);
        char piece[256];
        int64_t n_checked = 0, n_out = 0;
        for (int mi = 0; mi < 3; mi++) {
            tutti_mask m = {0};
            if (mi != 1) m.allowed = allowed, m.n_allowed = 3;
            if (mi != 0) m.forbidden = forbidden, m.n_forbidden = 3;
            token_mask tm;
            assert_int_equal(token_mask_init(&tm, t, &m), 0);
            for (size_t ti = 0; ti < sizeof texts / sizeof *texts; ti++) {
                gen_ctx g = {.mask = &m};
                assert_int_equal(gen_append(&g, texts[ti], strlen(texts[ti])), 0);
                for (int32_t id = 0; id < V; id++) dist[id] = 0.0f;
                token_mask_apply(&tm, &g, dist);
                for (int32_t id = 0; id < V; id++) {
                    bool eog = tutti_vocab_is_eog(v, id);
                    int32_t lp = eog ? 0 : tutti_token_to_piece(v, id, false, piece, sizeof piece);
                    assert_true(lp >= 0);
                    bool want = mask_def(&m, texts[ti], piece, (size_t)lp, eog);
                    if (want != (dist[id] == 0.0f))
                        printf("%s mask %d text \"%s\": token %d \"%.*s\": want %d\n", vocabs[vi], mi, texts[ti], id,
                               lp, piece, want);
                    assert_true(want == (dist[id] == 0.0f));
                    n_out += !want;
                }
                n_checked += V;
                free(g.text);
            }
            token_mask_free(&tm);
        }
        printf("%s: %lld token decisions as defined (%lld ruled out)\n", vocabs[vi], (long long)n_checked,
               (long long)n_out);
        free(dist);
        fusion_trie_free(t);
        tutti_vocab_free(v);
    }
}

/* Masks in generation (every alignment): the output stays a prefix of an
 * allowed string, never contains a forbidden one. */
static void test_generate_masks(void **state) {
    (void)state;
    const char *models[2] = {M_STORIES, M_TOK361};
    const char *allowed[2] = {", there was a big dog.", ", a cat sat."};
    const char *forbidden[2] = {" the", "girl"};
    const char *prompt = "Once upon a time";
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 9;
    for (int al = TUTTI_ALIGN_TOKEN; al <= TUTTI_ALIGN_SPAN; al++)
        for (int mi = 0; mi < 2; mi++) {
            tutti_ensemble *e =
                make_ens(models, al == TUTTI_ALIGN_TOKEN ? 1 : 2, NULL, (tutti_align)al, TUTTI_RULE_MIX, -1);
            assert_non_null(e);
            tutti_mask m = {.max_len = 60};
            if (mi == 0) m.allowed = allowed, m.n_allowed = 2;
            else m.forbidden = forbidden, m.n_forbidden = 2;
            sbuf got = {.n = 0};
            got.b[0] = 0;
            int rc = tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &m, sbuf_cb, &got, NULL);
            if (rc < 0) printf("%s\n", tutti_last_error());
            printf("%s, %s: \"%s\"\n", tutti_align_name((tutti_align)al), mi ? "forbidden" : "allowed", got.b);
            assert_int_equal(rc, 0);
            if (mi == 0) assert_true(!strncmp(got.b, allowed[0], got.n) || !strncmp(got.b, allowed[1], got.n));
            else assert_true(got.n > 10 && !strstr(got.b, forbidden[0]) && !strstr(got.b, forbidden[1]));
            tutti_ensemble_free(e);
        }
}

/* A member whose tokens cannot spell a byte the others draw (possible under
 * mix) leaves the generation instead of failing it: BabyLlama-tok105 has
 * no '#', forced here through an allowed string. */
static void test_member_that_cannot_spell_leaves(void **state) {
    (void)state;
    tutti_vocab *v = tutti_vocab_load(shared_path(M_TOK105));
    assert_non_null(v);
    char piece[64];
    for (int32_t id = 0; id < tutti_vocab_n_tokens(v); id++) {
        int32_t k = tutti_token_to_piece(v, id, false, piece, sizeof piece);
        assert_true(k >= 0 && !memchr(piece, '#', (size_t)k)); /* the premise */
    }
    tutti_vocab_free(v);
    const char *models[2] = {M_STORIES, M_TOK105};
    const char *allowed[1] = {" there was a #1 dog."};
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 2;
    for (int al = TUTTI_ALIGN_BYTE; al <= TUTTI_ALIGN_SPAN; al++) {
        tutti_ensemble *e = make_ens(models, 2, NULL, (tutti_align)al, TUTTI_RULE_MIX, -1);
        assert_non_null(e);
        tutti_mask m = {.allowed = allowed, .n_allowed = 1, .max_len = 60};
        sbuf got = {.n = 0};
        int rc = tutti_ensemble_generate(e, "Once upon a time", 16, &sp, &m, sbuf_cb, &got, NULL);
        if (rc < 0) printf("%s\n", tutti_last_error());
        assert_int_equal(rc, 0);
        assert_string_equal(got.b, allowed[0]);
        tutti_ensemble_free(e);
    }
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
    snprintf(cmd, sizeof cmd, "%s run -m %s -m %s -w 0.5,0.3,0.2 -p x -n 1 2>&1", TUTTI_CLI, shared_path(M_STORIES),
             shared_path(M_TOK105));
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

/* Next-byte distribution after ids (then after one more byte b0 when
 * b0 >= 0) straight from the definition: every token's probability from the
 * public single-model API, added to the first byte of its piece (END for
 * end-of-generation tokens), control tokens left out, normalised. */
static void byte_reference(tutti_model *m, const int32_t *ids, int32_t n, int b0, double *out) {
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t V = tutti_model_n_vocab(m);
    tutti_session *s = tutti_session_new(m, NULL);
    assert_non_null(s);
    double *p = malloc(sizeof(double) * (size_t)V), *q = malloc(sizeof(double) * (size_t)V);
    char piece[256], piece2[256];
    for (int b = 0; b < 257; b++) out[b] = 0;
    assert_int_equal(tutti_session_eval(s, ids, n, NULL), 0);
    const float *z = tutti_session_logits(s);
    double mx = -INFINITY, sum = 0;
    for (int32_t t = 0; t < V; t++) mx = fmax(mx, z[t]);
    for (int32_t t = 0; t < V; t++) sum += p[t] = exp(z[t] - mx);
    for (int32_t t = 0; t < V; t++) p[t] /= sum;
    for (int32_t t = 0; t < V; t++) {
        if (tutti_vocab_is_eog(v, t)) {
            if (b0 < 0) out[256] += p[t];
            continue;
        }
        int32_t k = tutti_token_to_piece(v, t, false, piece, sizeof piece);
        if (k <= 0) continue;
        if (b0 < 0) {
            out[(uint8_t)piece[0]] += p[t];
        } else if ((uint8_t)piece[0] == b0 && k > 1) {
            out[(uint8_t)piece[1]] += p[t];
        } else if ((uint8_t)piece[0] == b0 && k == 1) {
            /* the token is exactly b0: the next token starts the next byte */
            int32_t ids2[64];
            memcpy(ids2, ids, sizeof(int32_t) * (size_t)n);
            ids2[n] = t;
            assert_int_equal(tutti_session_rewind(s, n), 0);
            assert_int_equal(tutti_session_eval(s, &t, 1, NULL), 0);
            const float *z2 = tutti_session_logits(s);
            double mx2 = -INFINITY, sum2 = 0;
            for (int32_t u = 0; u < V; u++) mx2 = fmax(mx2, z2[u]);
            for (int32_t u = 0; u < V; u++) sum2 += q[u] = exp(z2[u] - mx2);
            for (int32_t u = 0; u < V; u++) {
                if (tutti_vocab_is_eog(v, u)) {
                    out[256] += p[t] * q[u] / sum2;
                    continue;
                }
                int32_t k2 = tutti_token_to_piece(v, u, false, piece2, sizeof piece2);
                if (k2 > 0) out[(uint8_t)piece2[0]] += p[t] * q[u] / sum2;
            }
        }
    }
    double tot = 0;
    for (int b = 0; b < 257; b++) tot += out[b];
    for (int b = 0; b < 257; b++) out[b] /= tot;
    free(p), free(q);
    tutti_session_free(s);
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
    } cases[] = {{1, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, 32},
                 {2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, 32},
                 {2, TUTTI_ALIGN_TOKEN, TUTTI_RULE_PRODUCT, 32},
                 {2, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, 48}};
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

    /* the byte marginals on this vocabulary (ranges over many blocks of the
     * sorted table) against the definition, exact (no pruning): the first
     * byte after a token-id prompt, then the byte after its likeliest byte */
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(path, &mp);
    assert_non_null(m);
    fusion_member *fm = fusion_member_local_new(path, 4, 0, 1);
    fusion_trie *tr = fusion_trie_build(fm->vocab);
    fusion_bytes_params bp = {.temp = 1.0f, .prune = 0, .max_hyps = 64};
    fusion_bytes *bs = fusion_bytes_new(fm, tr, &bp);
    int32_t ids[8];
    int32_t n = tutti_tokenize(tutti_model_vocab(m), prompt, strlen(prompt), false, false, ids, 8);
    assert_true(n > 1);
    assert_int_equal(fusion_bytes_start_ids(bs, ids, n), 0);
    double got[257], want[257], worst = 0;
    byte_reference(m, ids, n, -1, want);
    assert_int_equal(fusion_bytes_next(bs, got), 0);
    int b0 = 0;
    for (int b = 0; b < 257; b++) {
        worst = fmax(worst, fabs(got[b] - want[b]));
        if (b < 256 && want[b] > want[b0]) b0 = b;
    }
    assert_int_equal(fusion_bytes_commit(bs, (uint8_t)b0), 0);
    byte_reference(m, ids, n, b0, want);
    assert_int_equal(fusion_bytes_next(bs, got), 0);
    for (int b = 0; b < 257; b++) worst = fmax(worst, fabs(got[b] - want[b]));
    printf("151669-token vocabulary: next-byte distributions (after the prompt and after 0x%02x) vs the "
           "definition: max |diff| = %.3g\n",
           b0, worst);
    assert_true(worst < 1e-6);
    fusion_bytes_free(bs);
    fusion_trie_free(tr);
    fm->vt->free(fm);
    tutti_model_free(m);
    remove(path);
}

/* ---- batched hypotheses (issue 12) ---- */

/* The member's batched call (all hypotheses that need logits at one byte in
 * one forward pass) gives the same next-byte distributions as one pass per
 * hypothesis, exactly (prune 0), in fewer forward passes. */
static void check_batch_is_single(const char *rel, const char *text) {
    fusion_member *a = fusion_member_local_new(shared_path(rel), 16, 0, 1);
    fusion_member *b = fusion_member_local_new(shared_path(rel), 16, 0, 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(a->vt->logits_batch);
    fusion_member_vt single = *b->vt;
    single.logits_batch = NULL; /* one logits_view call per hypothesis */
    b->vt = &single;
    fusion_trie *tr = fusion_trie_build(a->vocab);
    fusion_bytes_params bp = {.temp = 1.0f, .prune = 0, .max_hyps = 100000};
    fusion_bytes *sa = fusion_bytes_new(a, tr, &bp), *sb = fusion_bytes_new(b, tr, &bp);
    assert_int_equal(fusion_bytes_start(sa, "", 0), 0);
    assert_int_equal(fusion_bytes_start(sb, "", 0), 0);
    double worst = 0;
    int32_t most = 0;
    for (size_t i = 0; i <= strlen(text); i++) {
        double pa[257], pb[257];
        assert_int_equal(fusion_bytes_next(sa, pa), 0);
        assert_int_equal(fusion_bytes_next(sb, pb), 0);
        for (int k = 0; k < 257; k++) worst = fmax(worst, fabs(pa[k] - pb[k]));
        assert_int_equal(fusion_bytes_n_hyps(sa), fusion_bytes_n_hyps(sb));
        if (fusion_bytes_n_hyps(sa) > most) most = fusion_bytes_n_hyps(sa);
        if (text[i]) {
            assert_int_equal(fusion_bytes_commit(sa, (uint8_t)text[i]), 0);
            assert_int_equal(fusion_bytes_commit(sb, (uint8_t)text[i]), 0);
        }
    }
    printf("%s: \"%s\" (up to %d hypotheses): batched %lld passes / %lld tokens, one per hypothesis %lld / %lld; "
           "max |diff| = %.3g\n",
           rel, text, most, (long long)a->n_forward_calls, (long long)a->n_forward_tokens,
           (long long)b->n_forward_calls, (long long)b->n_forward_tokens, worst);
    assert_true(worst <= 1e-9);
    assert_true(most > 1);
    assert_true(a->n_forward_calls < b->n_forward_calls);
    fusion_bytes_free(sa);
    fusion_bytes_free(sb);
    fusion_trie_free(tr);
    a->vt->free(a);
    b->vt->free(b);
}

static void test_byte_batch_is_single(void **state) {
    (void)state;
    /* prune 0 keeps every tokenization: their number grows exponentially
     * with the text, so a short one */
    check_batch_is_single(M_STORIES, "Once upon a");
    check_batch_is_single(M_656K, "Once upon a"); /* Q8_0 weights: the quantised batched kernels */
}

/* ---- step receiver (logprobs): the reported rows against the members' own
 * logits, computed here through sessions ---- */

typedef struct step_log {
    int n;
    int32_t chosen[64];
    float row[64][512]; /* first 512 outcomes of each step */
    int32_t n_out;
    char text[1024];
    size_t n_text;
    double sum_p; /* sum of exp(logprobs) of the last step */
} step_log;

static int step_rec(const tutti_step *st, void *u) {
    step_log *l = u;
    assert_int_equal(st->unit, l->n);
    if (l->n < 64) {
        l->chosen[l->n] = st->chosen;
        for (int32_t x = 0; x < 512 && x < st->n_outcomes; x++) l->row[l->n][x] = st->logprobs[x];
    }
    l->n_out = st->n_outcomes;
    double z = 0;
    for (int32_t x = 0; x < st->n_outcomes; x++) z += exp((double)st->logprobs[x]);
    l->sum_p = z;
    assert_true(fabs(z - 1) < 1e-4);
    assert_true(st->logprobs[st->chosen] > -INFINITY);
    if (l->n_text + st->n_bytes < sizeof l->text) memcpy(l->text + l->n_text, st->bytes, st->n_bytes);
    l->n_text += st->n_bytes;
    l->text[l->n_text < sizeof l->text ? l->n_text : sizeof l->text - 1] = 0;
    l->n++;
    return 0;
}

static void softmax_row(tutti_session *s, int32_t V, double *p) {
    const float *z = tutti_session_logits(s);
    double mx = -INFINITY, sum = 0;
    for (int32_t t = 0; t < V; t++) mx = fmax(mx, z[t]);
    for (int32_t t = 0; t < V; t++) sum += p[t] = exp(z[t] - mx);
    for (int32_t t = 0; t < V; t++) p[t] /= sum;
}

static void test_step_logprobs_token(void **state) {
    (void)state;
    require_shared();
    const char *models[2] = {"ref/arch/llama-F32.gguf", "ref/arch/qwen3-F16.gguf"};
    const float w[2] = {0.7f, 0.3f};
    const char *prompt = "Once upon a time";
    tutti_ensemble *e = make_ens(models, 2, w, TUTTI_ALIGN_TOKEN, TUTTI_RULE_MIX, -1);
    assert_non_null(e);
    step_log *l = calloc(1, sizeof *l);
    tutti_ensemble_set_step_cb(e, step_rec, l);
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.temp = 0;
    sbuf got = {.n = 0};
    tutti_mask m = {.max_len = 12};
    assert_int_equal(tutti_ensemble_generate(e, prompt, strlen(prompt), &sp, &m, sbuf_cb, &got, NULL), 0);
    assert_true(l->n >= 1);
    assert_string_equal(l->text, got.b);
    /* reference: each model's softmax after the prompt and the chosen ids */
    tutti_model *md[2];
    tutti_session *ss[2];
    int32_t V = 0;
    for (int i = 0; i < 2; i++) {
        tutti_model_params mp = tutti_model_default_params();
        md[i] = tutti_model_load(shared_path(models[i]), &mp);
        assert_non_null(md[i]);
        ss[i] = tutti_session_new(md[i], NULL);
        assert_non_null(ss[i]);
        V = tutti_model_n_vocab(md[i]);
    }
    assert_int_equal(l->n_out, V);
    const tutti_vocab *v = tutti_model_vocab(md[0]);
    int32_t ids[64];
    int32_t n = tutti_tokenize(v, prompt, strlen(prompt), tutti_vocab_add_bos(v), false, ids, 64);
    assert_true(n > 0);
    double *p0 = malloc(sizeof(double) * (size_t)V), *p1 = malloc(sizeof(double) * (size_t)V);
    for (int i = 0; i < 2; i++) assert_int_equal(tutti_session_eval(ss[i], ids, n, NULL), 0);
    double worst = 0;
    for (int k = 0; k < l->n && k < 64; k++) {
        softmax_row(ss[0], V, p0);
        softmax_row(ss[1], V, p1);
        int32_t best = 0;
        for (int32_t t = 0; t < V; t++) {
            double q = w[0] * p0[t] + w[1] * p1[t];
            if (q > w[0] * p0[best] + w[1] * p1[best]) best = t;
            if (t < 512) worst = fmax(worst, fabs(exp((double)l->row[k][t]) - q));
        }
        assert_int_equal(l->chosen[k], best); /* greedy draws the mode of the reported row */
        for (int i = 0; i < 2; i++) assert_int_equal(tutti_session_eval(ss[i], &l->chosen[k], 1, NULL), 0);
    }
    printf("token mix: %d steps, max |p - (0.7 p1 + 0.3 p2)| = %.3g\n", l->n, worst);
    assert_true(worst < 1e-5);
    for (int i = 0; i < 2; i++) tutti_session_free(ss[i]), tutti_model_free(md[i]);
    free(p0), free(p1), free(l);
    tutti_ensemble_free(e);
}

/* BYTE alignment after token ids: the first step's row is the exact
 * next-byte marginal of the model (byte_reference, by enumeration), less
 * the bytes that cannot start a UTF-8 character, renormalised. */
static void test_step_logprobs_byte(void **state) {
    (void)state;
    tutti_ensemble *e = make_ens(&M_STORIES, 1, NULL, TUTTI_ALIGN_BYTE, TUTTI_RULE_MIX, 0);
    assert_non_null(e);
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path(M_STORIES), &mp);
    assert_non_null(m);
    const tutti_vocab *v = tutti_model_vocab(m);
    const char *prompt = "Once upon a time, there was a little";
    int32_t ids[64];
    int32_t n = tutti_tokenize(v, prompt, strlen(prompt), tutti_vocab_add_bos(v), false, ids, 64);
    assert_true(n > 0);
    double ref[257];
    byte_reference(m, ids, n, -1, ref);
    step_log *l = calloc(1, sizeof *l);
    tutti_ensemble_set_step_cb(e, step_rec, l);
    tutti_sampler_params sp = tutti_sampler_default_params();
    sp.seed = 11;
    sbuf got = {.n = 0};
    tutti_mask mk = {.max_len = 24};
    const int32_t *pid[1] = {ids};
    assert_int_equal(tutti_ensemble_generate_ids(e, pid, &n, &sp, &mk, sbuf_cb, &got, NULL), 0);
    assert_int_equal(l->n_out, 257);
    assert_true(l->n >= 1);
    assert_true(strncmp(l->text, got.b, got.n) == 0); /* the text is the steps' bytes (less a held-back tail) */
    double z = 0;
    for (int b = 0; b < 257; b++) {
        bool starts = b == 256 || b < 0x80 || (b >= 0xC2 && b <= 0xF4);
        if (!starts) assert_true(l->row[0][b] == -INFINITY);
        else z += ref[b];
    }
    double worst = 0;
    for (int b = 0; b < 257; b++) {
        bool starts = b == 256 || b < 0x80 || (b >= 0xC2 && b <= 0xF4);
        if (starts) worst = fmax(worst, fabs(exp((double)l->row[0][b]) - ref[b] / z));
    }
    printf("byte: %d steps, max |p - marginal| = %.3g\n", l->n, worst);
    assert_true(worst < 1e-5);
    free(l);
    tutti_model_free(m);
    tutti_ensemble_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_one_member_is_generate),
        shared_unit_test(test_token_weights_one_zero),
        cmocka_unit_test(test_copies_give_the_model),
        cmocka_unit_test(test_byte_marginal_bruteforce),
        shared_unit_test(test_chat_run_is_generate_chat),
        shared_unit_test(test_chat_run_byte_members),
        shared_unit_test(test_chat_prompt_ids),
        cmocka_unit_test(test_context_full_is_clean_stop),
        shared_unit_test(test_token_mask_definition),
        cmocka_unit_test(test_generate_masks),
        cmocka_unit_test(test_member_that_cannot_spell_leaves),
        cmocka_unit_test(test_byte_bpb_matches_token_bpb),
        shared_unit_test(test_errors),
        shared_unit_test(test_overhead_qwen3_vocab),
        cmocka_unit_test(test_ensemble_beats_best_member),
        cmocka_unit_test(test_byte_batch_is_single),
        shared_unit_test(test_step_logprobs_token),
        cmocka_unit_test(test_step_logprobs_byte),
    };
    /* TUTTI_TEST_FILTER=name runs the matching tests only (while working on one) */
    if (getenv("TUTTI_TEST_FILTER")) cmocka_set_test_filter(getenv("TUTTI_TEST_FILTER"));
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
