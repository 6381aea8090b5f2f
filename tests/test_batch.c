/* Continuous batching (src/model/batch.c): sessions of several threads
 * share forward passes and get the logits of unbatched sessions bit for
 * bit (weight types whose kernels are batch-invariant: the F32 and Q8_0
 * story models), the prompt's rows match llama.cpp's, a long prompt goes in
 * chunks that hold another thread's next token back by at most one chunk,
 * and the threads' tokens share passes (passes per token). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"
#include "tutti.h"

#define N_GEN 24
#define MAX_TOK 256

typedef struct seq {
    int32_t ids[MAX_TOK + N_GEN];
    int32_t n_prompt;
} seq;

/* the prompt ids of ../shared/ref/models/MODEL.pN.jsonl (one "token" per line) */
static void read_prompt(const char *model, int p, seq *s) {
    char rel[256];
    snprintf(rel, sizeof rel, "ref/models/%s.p%d.jsonl", model, p);
    size_t len;
    char *js = read_file(shared_path(rel), &len);
    assert_non_null(js);
    s->n_prompt = 0;
    for (char *q = js; (q = strstr(q, "\"token\":")) && s->n_prompt < MAX_TOK; q += 8)
        s->ids[s->n_prompt++] = (int32_t)strtol(q + 8, NULL, 10);
    free(js);
    assert_true(s->n_prompt > 2);
}

static int32_t argmax(const float *z, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (z[i] > z[b]) b = i;
    return b;
}

/* one timeline: the prompt, then N_GEN greedy tokens; rows[N_GEN + 1][V]
 * the logits after the prompt and after each token */
typedef struct job {
    tutti_batch *b;
    const tutti_model *m;
    seq *s;
    float *rows;
    int32_t gen[N_GEN];
    int rc;
    int32_t max_steps; /* the most steps one generated token waited (batched only) */
} job;

static void *run_job(void *arg) {
    job *j = arg;
    int32_t V = tutti_model_n_vocab(j->m);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 512, sp.n_threads = 1;
    tutti_session *s = j->b ? tutti_session_new_batched(j->m, &sp, j->b) : tutti_session_new(j->m, &sp);
    j->rc = -1;
    if (!s) return NULL;
    if (j->b) tutti_batch_join(j->b);
    if (tutti_session_eval(s, j->s->ids, j->s->n_prompt, NULL) == 0) {
        j->rc = 0;
        for (int k = 0; k <= N_GEN && j->rc == 0; k++) {
            const float *z = tutti_session_logits(s);
            memcpy(j->rows + (size_t)k * (size_t)V, z, sizeof(float) * (size_t)V);
            if (k == N_GEN) break;
            int32_t t = argmax(z, V);
            j->gen[k] = t;
            tutti_batch_stats a, b;
            tutti_batch_get_stats(j->b, &a);
            j->rc = tutti_session_eval(s, &t, 1, NULL);
            tutti_batch_get_stats(j->b, &b);
            if (j->b && b.n_steps - a.n_steps > j->max_steps) j->max_steps = (int32_t)(b.n_steps - a.n_steps);
        }
    }
    if (j->b) tutti_batch_leave(j->b);
    tutti_session_free(s);
    return NULL;
}

/* 4 threads with the 4 reference prompts, batched, against each alone */
static void concurrent_bitexact(const char *file, const char *name) {
    require_shared();
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path(file), &mp);
    assert_non_null(m);
    int32_t V = tutti_model_n_vocab(m);
    seq sq[4];
    job solo[4], bat[4];
    tutti_batch_params bp = tutti_batch_default_params();
    bp.n_threads = 2;
    tutti_batch *b = tutti_batch_new(&bp);
    assert_non_null(b);
    for (int t = 0; t < 4; t++) {
        read_prompt(name, t + 1, &sq[t]);
        solo[t] = (job){.m = m, .s = &sq[t], .rows = malloc(sizeof(float) * (size_t)V * (N_GEN + 1))};
        bat[t] = (job){.b = b, .m = m, .s = &sq[t], .rows = malloc(sizeof(float) * (size_t)V * (N_GEN + 1))};
        run_job(&solo[t]);
        assert_int_equal(solo[t].rc, 0);
    }
    pthread_t th[4];
    for (int t = 0; t < 4; t++) assert_int_equal(pthread_create(&th[t], NULL, run_job, &bat[t]), 0);
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 4; t++) {
        assert_int_equal(bat[t].rc, 0);
        assert_memory_equal(bat[t].gen, solo[t].gen, sizeof solo[t].gen);
        assert_memory_equal(bat[t].rows, solo[t].rows, sizeof(float) * (size_t)V * (N_GEN + 1));
    }
    /* the prompt's last row is llama.cpp's (the unbatched path's tolerance) */
    for (int t = 0; t < 4; t++) {
        char rel[256];
        snprintf(rel, sizeof rel, "ref/models/%s.p%d.logits.f32", name, t + 1);
        size_t len;
        float *ref = (float *)read_file(shared_path(rel), &len);
        assert_non_null(ref);
        assert_int_equal(len, sizeof(float) * (size_t)V * (size_t)sq[t].n_prompt);
        double d = max_logsoftmax_diff(bat[t].rows, ref + (size_t)V * (size_t)(sq[t].n_prompt - 1), 1, V);
        assert_true(d < 0.02);
        free(ref);
    }
    tutti_batch_stats st;
    tutti_batch_get_stats(b, &st);
    /* 4 prompts + 4 x 24 tokens: one timeline alone would take 100 passes;
     * sharing them, 25 to 51 measured (how many threads reach a step in
     * time depends on the machine's scheduling, so only "shared at all" is
     * asserted: tests never assert timings) */
    print_message("%s: %lld passes for %lld segments (%lld steps, %lld tokens, max %d per pass)\n", name,
                  (long long)st.n_passes, (long long)st.n_segments, (long long)st.n_steps, (long long)st.n_tokens,
                  st.max_tokens);
    assert_int_equal(st.n_segments, 4 * (N_GEN + 1));
    assert_true(st.n_passes < st.n_segments);
    assert_int_equal(st.n_joined, 0);
    for (int t = 0; t < 4; t++) free(solo[t].rows), free(bat[t].rows);
    tutti_batch_free(b);
    tutti_model_free(m);
}

static void test_concurrent_f32(void **st) {
    (void)st;
    concurrent_bitexact("models/stories260K.gguf", "stories260K");
}

static void test_concurrent_q8_0(void **st) {
    (void)st;
    concurrent_bitexact("models/TinyStories-656K-Q8_0.gguf", "TinyStories-656K-Q8_0");
}

/* a 200-token prompt in 16-token chunks while another thread generates:
 * that thread's tokens wait at most one step beyond their own (the one in
 * flight), and the long prompt's rows are the unbatched ones */
typedef struct long_job {
    tutti_batch *b;
    const tutti_model *m;
    int32_t *ids;
    int32_t n;
    float *out;
    int rc;
} long_job;

static void *run_long(void *arg) {
    long_job *j = arg;
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 512, sp.n_threads = 1;
    tutti_session *s = j->b ? tutti_session_new_batched(j->m, &sp, j->b) : tutti_session_new(j->m, &sp);
    j->rc = -1;
    if (!s) return NULL;
    if (j->b) tutti_batch_join(j->b);
    j->rc = tutti_session_eval(s, j->ids, j->n, j->out);
    if (j->b) tutti_batch_leave(j->b);
    tutti_session_free(s);
    return NULL;
}

static void test_long_prompt_chunks(void **st) {
    (void)st;
    require_shared();
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path("models/stories260K.gguf"), &mp);
    assert_non_null(m);
    int32_t V = tutti_model_n_vocab(m);
    tutti_batch_params bp = tutti_batch_default_params();
    bp.n_threads = 1, bp.n_ubatch = 16;
    tutti_batch *b = tutti_batch_new(&bp);
    assert_non_null(b);
    int32_t ids[200];
    for (int i = 0; i < 200; i++) ids[i] = i == 0 ? 1 : 3 + (i * 37) % 500;
    float *a = malloc(sizeof(float) * 200 * (size_t)V), *c = malloc(sizeof(float) * 200 * (size_t)V);
    long_job solo = {.m = m, .ids = ids, .n = 200, .out = a}, bat = {.b = b, .m = m, .ids = ids, .n = 200, .out = c};
    run_long(&solo);
    assert_int_equal(solo.rc, 0);
    seq sq;
    read_prompt("stories260K", 1, &sq);
    job gen = {.b = b, .m = m, .s = &sq, .rows = malloc(sizeof(float) * (size_t)V * (N_GEN + 1))};
    job ref = {.m = m, .s = &sq, .rows = malloc(sizeof(float) * (size_t)V * (N_GEN + 1))};
    run_job(&ref);
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, run_long, &bat), 0);
    assert_int_equal(pthread_create(&t2, NULL, run_job, &gen), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(bat.rc, 0);
    assert_int_equal(gen.rc, 0);
    assert_memory_equal(a, c, sizeof(float) * 200 * (size_t)V);
    assert_memory_equal(gen.rows, ref.rows, sizeof(float) * (size_t)V * (N_GEN + 1));
    tutti_batch_stats s;
    tutti_batch_get_stats(b, &s);
    print_message("long prompt: %lld passes, %lld steps, largest %d tokens; a generated token waited <= %d steps\n",
                  (long long)s.n_passes, (long long)s.n_steps, s.max_tokens, gen.max_steps);
    assert_true(s.max_tokens <= 16);
    assert_true(gen.max_steps <= 2);
    free(a), free(c), free(gen.rows), free(ref.rows);
    tutti_batch_free(b);
    tutti_model_free(m);
}

/* thread B of test_leave_moves_entry: a long prompt (one token per pass),
 * then one more token, joined throughout */
static void *run_b(void *arg) {
    long_job *j = arg;
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 512, sp.n_threads = 1;
    tutti_session *s = tutti_session_new_batched(j->m, &sp, j->b);
    j->rc = -1;
    if (!s) return NULL;
    tutti_batch_join(j->b);
    j->rc = tutti_session_eval(s, j->ids, j->n, NULL);
    if (j->rc >= 0) j->rc = tutti_session_eval(s, j->ids, 1, NULL);
    tutti_batch_leave(j->b);
    tutti_session_free(s);
    return NULL;
}

/* A joined thread (A, this one) leaving while a later one (B) waits on its
 * request moves B's entry; B's request ending must still count B as
 * working again, and its next one as waiting: once both have left no
 * thread counts as working (a phantom would make every later step wait its
 * whole budget).  A leaves while B's request is pending: B posts 300 passes
 * of work, A leaves as soon as B waits (retried if B was done first). */
static void test_leave_moves_entry(void **st) {
    (void)st;
    require_shared();
    tutti_model *m = tutti_model_load(shared_path("models/stories260K.gguf"), NULL);
    assert_non_null(m);
    tutti_batch_params bp = tutti_batch_default_params();
    bp.n_threads = 1, bp.n_ubatch = 1;
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = i == 0 ? 1 : 3 + (i * 37) % 500;
    bool overlapped = false;
    for (int attempt = 0; attempt < 5 && !overlapped; attempt++) {
        tutti_batch *b = tutti_batch_new(&bp);
        assert_non_null(b);
        tutti_batch_join(b); /* A: entry 0 */
        long_job j = {.b = b, .m = m, .ids = ids, .n = 300};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, run_b, &j), 0);
        tutti_batch_stats s;
        for (;;) { /* B joined (entry 1) and waiting on its request */
            tutti_batch_get_stats(b, &s);
            if ((s.n_joined == 2 && s.n_working == 1) || s.n_requests > 0) break;
            sched_yield();
        }
        tutti_batch_leave(b); /* B's entry moves to 0 */
        overlapped = s.n_requests == 0;
        tutti_batch_get_stats(b, &s);
        overlapped &= s.n_requests == 0;
        pthread_join(t, NULL);
        assert_true(j.rc >= 0);
        tutti_batch_get_stats(b, &s);
        assert_int_equal(s.n_joined, 0);
        assert_int_equal(s.n_working, 0);
        assert_int_equal(s.n_requests, 2);
        tutti_batch_free(b);
    }
    assert_true(overlapped);
    tutti_model_free(m);
}

static void test_errors(void **st) {
    (void)st;
    require_shared();
    tutti_batch_params bp = tutti_batch_default_params();
    bp.n_ubatch = -1;
    assert_null(tutti_batch_new(&bp));
    assert_non_null(strstr(tutti_last_error(), "n_ubatch"));
    assert_null(tutti_session_new_batched(NULL, NULL, NULL));
    tutti_batch *b = tutti_batch_new(NULL);
    assert_non_null(b);
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path("models/stories260K.gguf"), &mp);
    tutti_session_params sp = {.n_ctx = 8};
    tutti_session *s = tutti_session_new_batched(m, &sp, b);
    assert_non_null(s);
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_int_equal(tutti_session_eval(s, ids, 9, NULL), TUTTI_ERR); /* beyond n_ctx: refused before the batch */
    int32_t bad = 100000;
    assert_int_equal(tutti_session_eval(s, &bad, 1, NULL), TUTTI_ERR);
    assert_int_equal(tutti_session_eval(s, ids, 8, NULL), 0);
    assert_int_equal(tutti_session_n_past(s), 8);
    tutti_session_free(s);
    tutti_batch_join(b); /* joined and left again, nothing posted */
    tutti_batch_leave(b);
    tutti_batch_free(b);
    tutti_model_free(m);
}

/* A batched session with llama.cpp's context shift (n_ctx 32, 100 tokens):
 * the logits of an unbatched session
 * with the same shift, bit for bit (F32: batch-invariant kernels); the
 * shift's key rotation runs on a scratch row of its own (a batched session
 * has no activations). */
static void test_ctx_shift_batched(void **st) {
    (void)st;
    require_shared();
    tutti_model_params mp = tutti_model_default_params();
    tutti_model *m = tutti_model_load(shared_path("models/stories260K.gguf"), &mp);
    assert_non_null(m);
    tutti_batch *b = tutti_batch_new(NULL);
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = 32, sp.ctx_shift = true, sp.n_keep = 1, sp.n_threads = 1;
    tutti_session *sb = tutti_session_new_batched(m, &sp, b), *su = tutti_session_new(m, &sp);
    assert_true(sb && su);
    const int32_t V = tutti_model_n_vocab(m);
    for (int32_t t = 0; t < 100; t++) {
        int32_t id = t == 0 ? 1 : 2 + (t * 37) % (V - 2);
        assert_int_equal(tutti_session_eval(sb, &id, 1, NULL), 0);
        assert_int_equal(tutti_session_eval(su, &id, 1, NULL), 0);
        if (memcmp(tutti_session_logits(sb), tutti_session_logits(su), sizeof(float) * (size_t)V))
            fail_msg("token %d: the batched session's logits differ after a shift", t);
    }
    assert_true(tutti_session_n_tokens(sb) == 100 && tutti_session_n_past(sb) < 32);
    tutti_session_free(sb), tutti_session_free(su);
    tutti_batch_free(b);
    tutti_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_f32),
        cmocka_unit_test(test_concurrent_q8_0),
        cmocka_unit_test(test_long_prompt_chunks),
        cmocka_unit_test(test_leave_moves_entry),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_ctx_shift_batched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
