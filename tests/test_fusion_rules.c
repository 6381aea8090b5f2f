/* Fusion layer, pure parts: rules on synthetic distributions, the exact
 * next-byte marginal of a synthetic member against a brute-force sum over
 * all tokenizations, UTF-8 mask, bpb.py chunking, ensemble files.
 * No model needed (except the chunk test, which reads ../shared). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"
#include "fusion/fusion.h"

/* ---- rules ---- */

static void log_normalise(const double *p, int n, float *out) {
    double s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    for (int i = 0; i < n; i++) out[i] = (float)log(p[i] / s);
}

static void test_rules_copies(void **state) {
    (void)state;
    enum { N = 300 };
    float a[N], out[N];
    double work[N], raw[N];
    for (int i = 0; i < N; i++) raw[i] = exp(sin(i * 0.37) * 4.0);
    log_normalise(raw, N, a);
    const float *rows[3] = {a, a, a};
    float w[3] = {0.5f, 0.3f, 0.2f};
    for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_PRODUCT; rule++) {
        fusion_rule_params p = {.rule = rule, .weights = w, .beta = 0.1f};
        assert_int_equal(fusion_combine(&p, 3, rows, N, out, work, NULL), 0);
        double md = 0;
        for (int i = 0; i < N; i++) md = fmax(md, fabs(exp(out[i]) - exp(a[i])));
        assert_true(md < 1e-6);
    }
    /* (1, 0, 0) gives member 1 bit for bit, whatever the others are */
    float b[N], c[N];
    for (int i = 0; i < N; i++) raw[i] = 1.0 + i % 7;
    log_normalise(raw, N, b);
    for (int i = 0; i < N; i++) raw[i] = 1.0 + i % 3;
    log_normalise(raw, N, c);
    const float *rows2[3] = {a, b, c};
    float w1[3] = {1, 0, 0};
    for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_GATE; rule++) {
        fusion_rule_params p = {.rule = rule, .weights = w1};
        assert_int_equal(fusion_combine(&p, 3, rows2, N, out, work, NULL), 0);
        assert_memory_equal(out, a, sizeof a);
    }
}

static void test_rules_formulas(void **state) {
    (void)state;
    /* the vectorisable exp/log against libm */
    double we = 0, wl = 0;
    for (double x = -86.0; x <= 0.0; x += 0.001) we = fmax(we, fabs(fusion_fast_exp((float)x) / exp((float)x) - 1));
    for (double x = 1e-30; x < 1e30; x *= 1.01) wl = fmax(wl, fabs(fusion_fast_log((float)x) - log((float)x)));
    assert_true(we < 5e-7);
    assert_true(wl < 5e-6); /* absolute, |log x| up to 69 */
    assert_true(fusion_fast_exp(-INFINITY) == 0.0f && fusion_fast_log(0.0f) == -INFINITY);
    /* two members over 4 outcomes, expected values written out by hand */
    double p1[4] = {0.5, 0.25, 0.125, 0.125}, p2[4] = {0.1, 0.2, 0.3, 0.4};
    float l1[4], l2[4], out[4];
    double work[4];
    log_normalise(p1, 4, l1);
    log_normalise(p2, 4, l2);
    const float *rows[2] = {l1, l2};
    float w[2] = {3, 1}; /* normalised to 0.75 / 0.25 */
    fusion_rule_params p = {.rule = TUTTI_RULE_MIX, .weights = w};
    assert_int_equal(fusion_combine(&p, 2, rows, 4, out, work, NULL), 0);
    double mix[4] = {0.75 * 0.5 + 0.25 * 0.1, 0.75 * 0.25 + 0.25 * 0.2, 0.75 * 0.125 + 0.25 * 0.3,
                     0.75 * 0.125 + 0.25 * 0.4};
    for (int i = 0; i < 4; i++) assert_true(fabs(exp(out[i]) - mix[i]) < 1e-6);
    p.rule = TUTTI_RULE_PRODUCT;
    assert_int_equal(fusion_combine(&p, 2, rows, 4, out, work, NULL), 0);
    double prod[4], z = 0;
    for (int i = 0; i < 4; i++) z += prod[i] = pow(p1[i], 0.75) * pow(p2[i], 0.25);
    for (int i = 0; i < 4; i++) assert_true(fabs(exp(out[i]) - prod[i] / z) < 1e-6);
    /* gate: member 1 (entropy 1.21 nats) beats member 2 (1.28 nats) */
    p.rule = TUTTI_RULE_GATE;
    int32_t chosen = -1;
    assert_int_equal(fusion_combine(&p, 2, rows, 4, out, work, &chosen), 0);
    assert_int_equal(chosen, 0);
    /* contrastive: expert p1, amateur p2 with weight -0.5, beta 0.3 keeps
     * outcomes with p1 >= 0.15: {0, 1} */
    float wc[2] = {1.0f, -0.5f};
    fusion_rule_params pc = {.rule = TUTTI_RULE_CONTRASTIVE, .weights = wc, .beta = 0.3f};
    assert_int_equal(fusion_combine(&pc, 2, rows, 4, out, work, NULL), 0);
    double s0 = 0.5 / sqrt(0.1), s1 = 0.25 / sqrt(0.2);
    assert_true(fabs(exp(out[0]) - s0 / (s0 + s1)) < 1e-6);
    assert_true(fabs(exp(out[1]) - s1 / (s0 + s1)) < 1e-6);
    assert_true(out[2] == -INFINITY && out[3] == -INFINITY);
}

/* fusion_combine_logits (the token-alignment fast path) and
 * fusion_log_softmax against the definitions in double precision, on
 * vocabulary sizes around the vector and block widths and on Qwen3's
 * 151,669, with temperatures, a zero weight and masked (-inf) logits. */
static void test_rules_from_logits(void **state) {
    (void)state;
    const int32_t sizes[] = {1, 5, 16, 17, 1023, 1024, 1025, 4099, 151669};
    uint64_t r = 12345;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int32_t n = sizes[si];
        float *z = malloc(sizeof(float) * (size_t)n * 3), *out = malloc(sizeof(float) * (size_t)n);
        float *scratch = malloc(sizeof(float) * (size_t)n * 3);
        double *ref = malloc(sizeof(double) * (size_t)n), *lp = malloc(sizeof(double) * (size_t)n * 3);
        for (int32_t k = 0; k < 3 * n; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            z[k] = (float)((double)(r >> 11) / 9007199254740992.0 * 24.0 - 12.0);
        }
        /* member 2 rules out some outcomes (in every block), member 1 its last one */
        for (int32_t k = 3; k < n; k += 7) z[n + k] = -INFINITY;
        if (n > 4) z[n - 1] = -INFINITY;
        const float *rows[3] = {z, z + n, z + 2 * (size_t)n};
        float temps[3] = {0.7f, 1.0f, 1.6f};
        for (int wi = 0; wi < 2; wi++) {
            float w[3] = {0.5f, 0.3f, wi ? 0.0f : 0.2f};
            /* per-member log-softmax in double */
            for (int i = 0; i < 3; i++) {
                double mx = -INFINITY, sum = 0;
                for (int32_t x = 0; x < n; x++) mx = fmax(mx, (double)rows[i][x] / temps[i]);
                for (int32_t x = 0; x < n; x++) sum += exp((double)rows[i][x] / temps[i] - mx);
                for (int32_t x = 0; x < n; x++) lp[(size_t)i * n + x] = (double)rows[i][x] / temps[i] - mx - log(sum);
            }
            double ws = w[0] + w[1] + w[2];
            for (int rule = TUTTI_RULE_MIX; rule <= TUTTI_RULE_PRODUCT; rule++) {
                double z0 = 0;
                for (int32_t x = 0; x < n; x++) {
                    double v = 0;
                    for (int i = 0; i < 3; i++) {
                        if (w[i] == 0) continue;
                        v += rule == TUTTI_RULE_MIX ? w[i] / ws * exp(lp[(size_t)i * n + x])
                                                    : w[i] / ws * lp[(size_t)i * n + x];
                    }
                    ref[x] = rule == TUTTI_RULE_MIX ? v : exp(v);
                    z0 += ref[x];
                }
                fusion_rule_params p = {.rule = rule, .weights = w};
                assert_int_equal(fusion_combine_logits(&p, temps, 3, rows, n, out, scratch), 0);
                double worst = 0, total = 0;
                for (int32_t x = 0; x < n; x++) {
                    double q = ref[x] / z0, got = exp((double)out[x]);
                    total += got;
                    if (q == 0) assert_true(out[x] == -INFINITY);
                    else worst = fmax(worst, fabs(got - q) / q);
                }
                if (n == 151669 || worst > 2e-5 || fabs(total - 1) >= 1e-5)
                    printf("n=%d %s w3=%g: max relative error %.3g, total %.9f\n", n, rule ? "product" : "mix",
                           (double)w[2], worst, total);
                assert_true(worst < 2e-5);
                assert_true(fabs(total - 1) < 1e-5);
            }
        }
        /* log-softmax at temperature 0.7 */
        fusion_log_softmax(z, n, 0.7f, out);
        double worst = 0;
        for (int32_t x = 0; x < n; x++) {
            double mx = -INFINITY, sum = 0;
            if (x == 0) {
                for (int32_t y = 0; y < n; y++) mx = fmax(mx, z[y] / 0.7);
                for (int32_t y = 0; y < n; y++) sum += exp(z[y] / 0.7 - mx);
                ref[0] = mx + log(sum);
            }
            if (z[x] == -INFINITY) assert_true(out[x] == -INFINITY);
            else worst = fmax(worst, fabs((double)out[x] - ((double)z[x] / (double)0.7f - ref[0])));
        }
        assert_true(worst < 1e-5);
        free(z), free(out), free(scratch), free(ref), free(lp);
    }
    /* every outcome ruled out: an error, not -inf everywhere */
    float allmasked[3] = {-INFINITY, -INFINITY, -INFINITY}, o[3], sc[6], w1[2] = {1, 1}, t1[2] = {1, 1};
    const float *rm[2] = {allmasked, allmasked};
    fusion_rule_params pm = {.rule = TUTTI_RULE_MIX, .weights = w1};
    assert_int_equal(fusion_combine_logits(&pm, t1, 2, rm, 3, o, sc), TUTTI_ERR);
    pm.rule = TUTTI_RULE_PRODUCT;
    assert_int_equal(fusion_combine_logits(&pm, t1, 2, rm, 3, o, sc), TUTTI_ERR);
}

/* ---- synthetic member ---- */

/* pieces of a toy vocabulary: 0 = BOS (no text), 1 = EOS, then text tokens,
 * with overlapping pieces so that many tokenizations cover a text */
static const char *toy_pieces[] = {"",  "",   "a",  "b",    "ab",   "ba",       "abb",
                                   " ", " a", "bb", "\xc3", "\xa9", "\xc3\xa9", "b a"};
#define TOY_V 14

static void toy_logits_fn(const int32_t *ids, int32_t n, float *out) {
    int32_t last = ids[n - 1], prev = n > 1 ? ids[n - 2] : 0;
    for (int t = 0; t < TOY_V; t++)
        out[t] = (float)(2.0 * sin(1.7 * t + 0.9 * last + 0.31 * prev + 0.13 * n * t) + (t == 1 ? -1.0 : 0.0));
    out[0] = -30; /* BOS is never predicted (but may be, with tiny mass) */
}

static int toy_logits(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    (void)m;
    toy_logits_fn(ids, n, out);
    return 0;
}
static int toy_logits_all(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    (void)m;
    for (int32_t k = 1; k <= n; k++) toy_logits_fn(ids, k, out + (size_t)(k - 1) * TOY_V);
    return 0;
}
static void toy_free(fusion_member *m) { (void)m; }
static const fusion_member_vt toy_vt = {toy_logits, toy_logits_all, toy_free,
                                        NULL,       NULL,           NULL}; /* no logits_view: copies; no batch */

static fusion_trie *toy_trie(void) {
    char bytes[64];
    int64_t off[TOY_V + 1];
    bool eog[TOY_V] = {0};
    eog[1] = true;
    int64_t k = 0;
    for (int i = 0; i < TOY_V; i++) {
        off[i] = k;
        size_t l = strlen(toy_pieces[i]);
        memcpy(bytes + k, toy_pieces[i], l);
        k += (int64_t)l;
    }
    off[TOY_V] = k;
    return fusion_trie_build_pieces(TOY_V, bytes, off, eog, "", 0);
}

/* Brute force: walk every token sequence whose bytes stay inside s and add
 * the probability of each next byte directly from the definition. */
static void brute(const char *s, int32_t len, int32_t *path, int32_t n, int32_t off, double P, double *vec) {
    float z[TOY_V];
    toy_logits_fn(path, n, z);
    double mx = -1e30, sum = 0, p[TOY_V];
    for (int t = 0; t < TOY_V; t++) mx = fmax(mx, z[t]);
    for (int t = 0; t < TOY_V; t++) sum += p[t] = exp(z[t] - mx);
    for (int t = 0; t < TOY_V; t++) {
        double pt = P * p[t] / sum;
        if (t == 1) {
            if (off == len) vec[256] += pt;
            continue;
        }
        const char *q = toy_pieces[t];
        int32_t lq = (int32_t)strlen(q), rem = len - off;
        if (lq == 0) continue;
        if (lq > rem) {
            if (memcmp(q, s + off, (size_t)rem) == 0) vec[(uint8_t)q[rem]] += pt;
        } else if (memcmp(q, s + off, (size_t)lq) == 0 && pt > 1e-300) {
            path[n] = t;
            brute(s, len, path, n + 1, off + lq, pt, vec);
        }
    }
}

static void test_byte_marginal_bruteforce(void **state) {
    (void)state;
    fusion_member m = {.vt = &toy_vt, .n_vocab = TOY_V, .n_ctx = 1000, .bos = 0};
    snprintf(m.name, sizeof m.name, "toy");
    fusion_trie *t = toy_trie();
    assert_non_null(t);
    fusion_bytes_params bp = {.temp = 1.0f, .prune = 0.0, .max_hyps = 100000};
    fusion_bytes *st = fusion_bytes_new(&m, t, &bp);
    assert_non_null(st);
    const char *text = "abba ab\xc3\xa9"
                       "bab";
    int32_t len = (int32_t)strlen(text);
    assert_int_equal(fusion_bytes_start(st, "", 0), 0);
    double worst = 0;
    for (int32_t i = 0; i <= len; i++) {
        double got[257], want[257] = {0};
        assert_int_equal(fusion_bytes_next(st, got), 0);
        int32_t path[64] = {0};
        brute(text, i, path, 1, 0, 1.0, want);
        double z = 0;
        for (int b = 0; b < 257; b++) z += want[b];
        for (int b = 0; b < 257; b++) worst = fmax(worst, fabs(got[b] - want[b] / z));
        if (i < len) assert_int_equal(fusion_bytes_commit(st, (uint8_t)text[i]), 0);
    }
    printf("toy vocabulary: max |P_trie - P_bruteforce| over %d prefixes = %.3g (hyps live %d)\n", len + 1, worst,
           fusion_bytes_n_hyps(st));
    assert_true(worst < 1e-6); /* float log-softmax rounding */
    assert_true(fusion_bytes_pruned(st) == 0.0);
    /* a byte no token can produce is an error, not a crash */
    assert_int_equal(fusion_bytes_commit(st, 'z'), FUSION_ERR_SPELL);
    fusion_bytes_free(st);
    fusion_trie_free(t);
}

static void test_utf8_mask(void **state) {
    (void)state;
    fusion_utf8 u;
    bool ok[257];
    fusion_utf8_init(&u);
    fusion_utf8_allowed(&u, ok);
    assert_true(ok['a'] && ok[256] && ok[0xC3] && !ok[0x80] && !ok[0xC0] && !ok[0xF5]);
    fusion_utf8_push(&u, 0xE0); /* E0 needs A0..BF next */
    fusion_utf8_allowed(&u, ok);
    assert_true(!ok[0x9F] && ok[0xA0] && ok[0xBF] && !ok['a'] && !ok[256]);
    fusion_utf8_push(&u, 0xA0);
    fusion_utf8_allowed(&u, ok);
    assert_true(ok[0x80] && !ok[256]);
    fusion_utf8_push(&u, 0x80);
    fusion_utf8_allowed(&u, ok);
    assert_true(ok['a'] && ok[256]);
    fusion_utf8_push(&u, 0xF4); /* F4 needs 80..8F */
    fusion_utf8_allowed(&u, ok);
    assert_true(ok[0x8F] && !ok[0x90]);
}

static void test_chunks(void **state) {
    (void)state;
    size_t len;
    char *text = read_file(shared_path("eval/stories-dev.txt"), &len);
    assert_non_null(text);
    char **ch;
    int n = fusion_split_chunks(text, len, 200, &ch);
    /* ../shared/oracle/bpb.py on the same file: "20 chunks, 2770 bytes",
     * first chunk 194 bytes, second 116 */
    assert_int_equal(n, 20);
    size_t tot = 0;
    for (int i = 0; i < n; i++) tot += strlen(ch[i]);
    assert_int_equal(tot, 2770);
    assert_int_equal(strlen(ch[0]), 194);
    assert_int_equal(strlen(ch[1]), 116);
    fusion_free_chunks(ch, n);
    free(text);
}

static void test_ensemble_file(void **state) {
    (void)state;
    char path[] = "/tmp/tutti_ens_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# two members\nrule product\nalign byte\n/m/a.gguf 0.7 1.1\n\"/m/b c.gguf\" 0.3\n/m/d.gguf\n");
    fclose(f);
    tutti_ensemble_file *ef = tutti_ensemble_file_read(path);
    assert_non_null(ef);
    assert_int_equal(ef->n_members, 3);
    assert_int_equal(ef->rule, TUTTI_RULE_PRODUCT);
    assert_int_equal(ef->align, TUTTI_ALIGN_BYTE);
    assert_string_equal(ef->members[1].model_path, "/m/b c.gguf");
    assert_true(ef->members[0].weight == 0.7f && ef->members[0].temp == 1.1f);
    assert_true(isnan(ef->members[2].weight) && isnan(ef->members[1].temp));
    tutti_ensemble_file_free(ef);
    f = fopen(path, "w");
    fprintf(f, "/m/a.gguf 0.5 x\n");
    fclose(f);
    assert_null(tutti_ensemble_file_read(path));
    assert_non_null(strstr(tutti_last_error(), "line 1"));
    f = fopen(path, "w");
    fprintf(f, "rule blend\n");
    fclose(f);
    assert_null(tutti_ensemble_file_read(path));
    assert_non_null(strstr(tutti_last_error(), "rule"));
    remove(path);
    assert_null(tutti_ensemble_file_read("/nonexistent/ens.txt"));
}

/* ---- tries built on several threads at once (server slots, MPI ranks) ---- */

#include <pthread.h>

typedef struct trie_job {
    uint32_t seed;
    int bad;
} trie_job;

static void *trie_worker(void *arg) {
    trie_job *j = arg;
    enum { NV = 3000 };
    char *bytes = malloc(NV * 8);
    int64_t *off = malloc(sizeof(int64_t) * (NV + 1));
    for (int it = 0; it < 20; it++) {
        uint32_t r = j->seed + (uint32_t)it * 2654435761u;
        off[0] = 0;
        for (int i = 0; i < NV; i++) { /* 1-6 random bytes per piece, of a different alphabet per thread */
            r = r * 1103515245u + 12345u;
            int len = 1 + (int)((r >> 16) % 6);
            for (int k = 0; k < len; k++) {
                r = r * 1103515245u + 12345u;
                bytes[off[i] + k] = (char)('a' + (j->seed % 4) * 6 + (int)((r >> 16) % 6));
            }
            off[i + 1] = off[i] + len;
        }
        fusion_trie *t = fusion_trie_build_pieces(NV, bytes, off, NULL, NULL, 0);
        if (!t) {
            j->bad++;
            continue;
        }
        for (int32_t k = 1; k < t->n_sorted; k++) { /* ascending by bytes (shorter first on ties) */
            int32_t a = t->sorted[k - 1], b = t->sorted[k];
            int64_t la = off[a + 1] - off[a], lb = off[b + 1] - off[b];
            int c = memcmp(bytes + off[a], bytes + off[b], (size_t)(la < lb ? la : lb));
            if (c > 0 || (c == 0 && la > lb)) {
                j->bad++;
                break;
            }
        }
        fusion_trie_free(t);
    }
    free(bytes), free(off);
    return NULL;
}

static void test_trie_build_threads(void **state) {
    (void)state;
    pthread_t th[4];
    trie_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (trie_job){.seed = (uint32_t)i + 1, .bad = 0};
        assert_int_equal(pthread_create(&th[i], NULL, trie_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].bad, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_copies),
        cmocka_unit_test(test_rules_formulas),
        cmocka_unit_test(test_rules_from_logits),
        cmocka_unit_test(test_trie_build_threads),
        cmocka_unit_test(test_byte_marginal_bruteforce),
        cmocka_unit_test(test_utf8_mask),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_ensemble_file),
    };
    test_select_part();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
