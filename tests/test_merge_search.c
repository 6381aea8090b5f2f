/* Tests of the evolutionary merge (tutti merge --search, src/merge/search.c)
 * and of its optimizer (src/merge/cmaes.c).
 *
 * CMA-ES: the Jacobi eigen-decomposition reconstructs random symmetric
 * matrices; on the rotated 10-D ellipsoid (condition 1e6) and 4-D
 * Rosenbrock it reaches 1e-10 within the evaluations the CMA-ES literature
 * reports for these functions (about 6,000 and 2,000; Hansen and Ostermeier
 * 2001; a version without the rank-mu update needs about 8,000 on the
 * ellipsoid and fails the bound); one seed gives one sequence of candidates.
 *
 * The search, on stories260K and its two fine-tunes with a tiny budget: the
 * YAML it writes reproduces its GGUF byte for byte through tutti merge
 * --config; the same seed gives the same YAML and GGUF, another seed another
 * YAML; the score it reports is what tutti eval measures on the file; the
 * file equals tests/merge_ref.py's numpy merge of the YAML (slices with
 * per-source weights and densities); choice accuracy as the score; the
 * refusals. */
#include "test_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "merge/cmaes.h"
#include "merge_common.h"
#include "tutti.h"

/* ---- CMA-ES ---- */

static uint64_t g_rng = 12345;
static double urand(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static void test_eigen(void **state) {
    (void)state;
    for (int n = 1; n <= 12; n++) {
        double a[144], w[12], v[144];
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) a[i * n + j] = a[j * n + i] = urand() * 2 - 1;
        cmaes_eigen_sym(n, a, w, v);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double r = 0, o = 0; /* V diag(w) V^T = A, V^T V = I */
                for (int k = 0; k < n; k++) r += v[i * n + k] * w[k] * v[j * n + k], o += v[k * n + i] * v[k * n + j];
                assert_true(fabs(r - a[i * n + j]) < 1e-10);
                assert_true(fabs(o - (i == j)) < 1e-10);
            }
    }
}

static double g_rot[100];
static int g_n;

static double ellipsoid(const double *x) {
    double f = 0;
    for (int i = 0; i < g_n; i++) {
        double y = 0;
        for (int j = 0; j < g_n; j++) y += g_rot[i * g_n + j] * x[j];
        f += pow(1e6, (double)i / (g_n - 1)) * y * y;
    }
    return f;
}

static double rosenbrock(const double *x) {
    double f = 0;
    for (int i = 0; i + 1 < g_n; i++) f += 100 * pow(x[i] * x[i] - x[i + 1], 2) + pow(1 - x[i], 2);
    return f;
}

/* Evaluations until f < 1e-10 (or max_evals). */
static int minimize(double (*fn)(const double *), int n, double x0v, uint64_t seed, int max_evals) {
    double x0[10], f[64];
    for (int i = 0; i < n; i++) x0[i] = x0v;
    cmaes *c = cmaes_new(n, x0, 0.5, 0, seed);
    assert_non_null(c);
    int lambda = cmaes_lambda(c), evals = 0;
    double best = INFINITY;
    while (evals < max_evals && best >= 1e-10) {
        cmaes_ask(c);
        for (int k = 0; k < lambda; k++) best = fmin(best, f[k] = fn(cmaes_candidate(c, k)));
        evals += lambda;
        cmaes_tell(c, f);
    }
    cmaes_free(c);
    return evals;
}

static void test_cmaes_converges(void **state) {
    (void)state;
    g_n = 10;
    /* a random rotation (Gram-Schmidt of a random matrix) */
    for (int i = 0; i < 100; i++) g_rot[i] = urand() - 0.5;
    for (int i = 0; i < g_n; i++) {
        for (int k = 0; k < i; k++) {
            double d = 0;
            for (int j = 0; j < g_n; j++) d += g_rot[i * g_n + j] * g_rot[k * g_n + j];
            for (int j = 0; j < g_n; j++) g_rot[i * g_n + j] -= d * g_rot[k * g_n + j];
        }
        double s = 0;
        for (int j = 0; j < g_n; j++) s += g_rot[i * g_n + j] * g_rot[i * g_n + j];
        for (int j = 0; j < g_n; j++) g_rot[i * g_n + j] /= sqrt(s);
    }
    double mean = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        int e = minimize(ellipsoid, 10, 1.0, seed, 20000);
        printf("rotated ellipsoid n=10, seed %llu: %d evaluations\n", (unsigned long long)seed, e);
        mean += e / 3.0;
    }
    assert_true(mean < 7000);
    g_n = 4;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        int e = minimize(rosenbrock, 4, 0.0, seed, 20000);
        printf("rosenbrock n=4, seed %llu: %d evaluations\n", (unsigned long long)seed, e);
        assert_true(e < 3000);
    }
}

static void test_cmaes_deterministic(void **state) {
    (void)state;
    double x0[3] = {0.5, 0.5, 0.5}, f[16];
    cmaes *a = cmaes_new(3, x0, 0.2, 0, 7), *b = cmaes_new(3, x0, 0.2, 0, 7), *c = cmaes_new(3, x0, 0.2, 0, 8);
    bool differ = false;
    for (int gen = 0; gen < 5; gen++) {
        cmaes_ask(a), cmaes_ask(b), cmaes_ask(c);
        for (int k = 0; k < cmaes_lambda(a); k++) {
            assert_memory_equal(cmaes_candidate(a, k), cmaes_candidate(b, k), 3 * sizeof(double));
            differ |= memcmp(cmaes_candidate(a, k), cmaes_candidate(c, k), 3 * sizeof(double)) != 0;
            const double *x = cmaes_candidate(a, k);
            f[k] = x[0] * x[0] + 2 * x[1] * x[1] + 3 * x[2] * x[2];
        }
        cmaes_tell(a, f), cmaes_tell(b, f), cmaes_tell(c, f);
    }
    assert_true(differ);
    cmaes_free(a), cmaes_free(b), cmaes_free(c);
}

/* ---- the search through the CLI ---- */

/* The first n paragraphs of mixed-dev.txt (a story, a dream, a poem), written to path. */
static void dev_text(const char *path, int n) {
    size_t len;
    char *t = read_file(shared_path("eval/mixed-dev.txt"), &len);
    assert_non_null(t);
    char *p = t;
    for (int i = 0; i < n && p; i++) {
        p = strstr(p, "\n\n");
        if (p) p += 2;
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fwrite(t, 1, p ? (size_t)(p - t) : len, f);
    fclose(f);
    free(t);
}

/* The number after `key` in text (NAN when absent). */
static double number_after(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (size_t i = 0; text[i]; i++)
        if (!strncmp(text + i, key, kl)) return atof(text + i + kl);
    return NAN;
}

/* The number after key in what `tutti eval ARGS` prints (it must exit 0). */
static double eval_number(const char *args, const char *key) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s eval %s", TUTTI_CLI, args);
    int st;
    char *out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    double v = number_after(out, key);
    free(out);
    return v;
}

static void reference_check(const char *yaml, const char *gguf) {
    reference_run(NULL, "merge_ref.py check %s %s 0", yaml, gguf);
}

static const char *models_args(void) {
    static char buf[2048];
    snprintf(buf, sizeof buf, "--base %s -m %s -m %s", shared_path("models/stories260K.gguf"),
             shared_path("models/stories260K-ft/stories260K-dreams.gguf"),
             shared_path("models/stories260K-ft/stories260K-poems.gguf"));
    return buf;
}

static void test_search_reproduces(void **state) {
    (void)state;
    require_shared();
    dev_text(tmp("dev.txt"), 3);
    char args[4096];
    snprintf(args, sizeof args, "--search --text %s %s --evals 7 --seed 3 --type F32 -o %s --yaml %s", tmp("dev.txt"),
             models_args(), tmp("s1.gguf"), tmp("s1.yaml"));
    char *err = merge_ok_stderr(args);
    double start = number_after(err, "start (every gene 0.5): ");
    free(err);
    /* the YAML alone gives the same file */
    snprintf(args, sizeof args, "--config %s -o %s", tmp("s1.yaml"), tmp("r1.gguf"));
    merge_ok(args);
    assert_true(same_file(tmp("s1.gguf"), tmp("r1.gguf")));
    /* one seed, one result */
    snprintf(args, sizeof args, "--search --text %s %s --evals 7 --seed 3 --type F32 -o %s --yaml %s", tmp("dev.txt"),
             models_args(), tmp("s2.gguf"), tmp("s2.yaml"));
    merge_ok(args);
    assert_true(same_file(tmp("s1.yaml"), tmp("s2.yaml")));
    assert_true(same_file(tmp("s1.gguf"), tmp("s2.gguf")));
    /* the reported score is the file's, as tutti eval measures it, and no worse than the start */
    size_t len;
    char *yaml = read_file(tmp("s1.yaml"), &len);
    assert_non_null(yaml);
    double best = number_after(yaml, "# best: ");
    free(yaml);
    snprintf(args, sizeof args, "--text %s -m %s 2>&1", tmp("dev.txt"), tmp("s1.gguf"));
    double measured = eval_number(args, "s1.gguf: ");
    printf("search: start %.4f, best %.4f, tutti eval of the file %.4f bits/byte\n", start, best, measured);
    assert_true(fabs(best - measured) < 6e-5);
    assert_true(best <= start);
    /* the merge the YAML describes, by the numpy reference */
    reference_check(tmp("s1.yaml"), tmp("s1.gguf"));
}

/* ties over two layer groups: per-source weight and density in each slice,
 * checked by the reference; another seed, another configuration. */
static void test_search_groups(void **state) {
    (void)state;
    require_shared();
    dev_text(tmp("dev2.txt"), 2);
    char args[4096];
    snprintf(args, sizeof args,
             "--search --text %s %s --method ties --layer-groups 2 --evals 5 --seed 1 --type F32 -o %s --yaml %s",
             tmp("dev2.txt"), models_args(), tmp("g1.gguf"), tmp("g1.yaml"));
    merge_ok(args);
    size_t len;
    char *y = read_file(tmp("g1.yaml"), &len);
    assert_non_null(y);
    assert_non_null(strstr(y, "layer_range: [0, 2]"));
    assert_non_null(strstr(y, "layer_range: [2, 5]"));
    assert_non_null(strstr(y, "density: "));
    free(y);
    reference_check(tmp("g1.yaml"), tmp("g1.gguf"));
    snprintf(args, sizeof args,
             "--search --text %s %s --method ties --layer-groups 2 --evals 5 --seed 2 --type F32 -o %s --yaml %s",
             tmp("dev2.txt"), models_args(), tmp("g2.gguf"), tmp("g2.yaml"));
    merge_ok(args);
    assert_false(same_file(tmp("g1.yaml"), tmp("g2.yaml")));
}

/* Paragraph k (1-based) of mixed-dev.txt, written to path. */
static void dev_paragraph(const char *path, int k) {
    size_t len;
    char *t = read_file(shared_path("eval/mixed-dev.txt"), &len);
    assert_non_null(t);
    char *p = t;
    for (int i = 1; i < k; i++) {
        p = strstr(p, "\n\n");
        assert_non_null(p);
        p += 2;
    }
    char *e = strstr(p, "\n\n");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fwrite(p, 1, e ? (size_t)(e + 2 - p) : strlen(p), f);
    fclose(f);
    free(t);
}

/* tutti eval's bits per byte of model on text. */
static double eval_bpb(const char *text, const char *model) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s eval --text %s -m %s --json 2>/dev/null", TUTTI_CLI, text, model);
    int st;
    char *out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    double v = number_after(out, "\"bits_per_byte\":");
    free(out);
    assert_true(isfinite(v));
    return v;
}

/* Several texts (a story, a dream and a poem paragraph, each a task): the
 * score is the mean (or max) over the texts of the file's bits per byte
 * divided by the start point's, as tutti eval measures both files (the
 * start point: the search with one evaluation; max-best: the lowest of the
 * input models' bits per byte on each text); the YAML reproduces the
 * file and one seed gives one result with several texts too. */
static void test_search_texts(void **state) {
    (void)state;
    require_shared();
    char *txt[3] = {strdup(tmp("p1.txt")), strdup(tmp("p2.txt")),
                    strdup(tmp("p3.txt"))}; /* tmp() rotates its buffers */
    for (int i = 0; i < 3; i++) dev_paragraph(txt[i], i + 1);
    char texts[2048], args[8192];
    snprintf(texts, sizeof texts, "--text %s --text %s --text %s", txt[0], txt[1], txt[2]);
    snprintf(args, sizeof args, "--search %s %s --evals 1 --type F32 -o %s --yaml %s", texts, models_args(),
             tmp("t0.gguf"), tmp("t0.yaml"));
    merge_ok(args);
    /* max-best's reference: the lowest of the three input models on each text */
    const char *inputs[3] = {shared_path("models/stories260K.gguf"),
                             shared_path("models/stories260K-ft/stories260K-dreams.gguf"),
                             shared_path("models/stories260K-ft/stories260K-poems.gguf")};
    double ref[3];
    for (int i = 0; i < 3; i++) {
        ref[i] = INFINITY;
        for (int k = 0; k < 3; k++) ref[i] = fmin(ref[i], eval_bpb(txt[i], inputs[k]));
    }
    for (int obj = 0; obj < 3; obj++) {
        const char *o = obj == 2 ? "max-best" : obj ? "max" : "mean";
        snprintf(args, sizeof args, "--search %s --objective %s %s --evals 8 --seed 2 --type F32 -o %s --yaml %s",
                 texts, o, models_args(), tmp("t1.gguf"), tmp("t1.yaml"));
        merge_ok(args);
        size_t len;
        char *y = read_file(tmp("t1.yaml"), &len);
        assert_non_null(y);
        double reported = number_after(y, "# best: "), sum = 0, max = 0;
        for (int i = 0; i < 3; i++) {
            double b = eval_bpb(txt[i], tmp("t1.gguf")), b0 = eval_bpb(txt[i], tmp("t0.gguf"));
            char key[32];
            snprintf(key, sizeof key, "# text %d: ", i + 1);
            const char *line = strstr(y, key);
            assert_non_null(line);
            double yb = number_after(line, key), yb0 = number_after(line, "(start ");
            if (obj == 2) {
                double yr = number_after(line, "best input ");
                printf("%s: text %d: best input %.6f (YAML %.6f)\n", o, i + 1, ref[i], yr);
                assert_true(fabs(yr - ref[i]) < 2e-6);
                b0 = ref[i]; /* the ratio's denominator */
            }
            printf("%s: text %d: %.6f bits/byte (YAML %.6f), start %.6f (YAML %.6f)\n", o, i + 1, b, yb, b0, yb0);
            assert_true(fabs(yb - b) < 2e-6);
            if (obj < 2) assert_true(fabs(yb0 - b0) < 2e-6);
            sum += b / b0;
            max = fmax(max, b / b0);
        }
        double want = obj ? max : sum / 3;
        printf("%s: reported %.6f, from tutti eval %.6f\n", o, reported, want);
        assert_true(fabs(reported - want) < 2e-6);
        if (obj < 2) assert_true(reported <= 1 + 1e-12);
        free(y);
        /* the YAML alone gives the same file; the same seed, the same YAML */
        snprintf(args, sizeof args, "--config %s -o %s", tmp("t1.yaml"), tmp("t1r.gguf"));
        merge_ok(args);
        assert_true(same_file(tmp("t1.gguf"), tmp("t1r.gguf")));
        snprintf(args, sizeof args, "--search %s --objective %s %s --evals 8 --seed 2 --type F32 -o %s --yaml %s",
                 texts, o, models_args(), tmp("t2.gguf"), tmp("t2.yaml"));
        merge_ok(args);
        assert_true(same_file(tmp("t1.yaml"), tmp("t2.yaml")));
        assert_true(same_file(tmp("t1.gguf"), tmp("t2.gguf")));
    }
    for (int i = 0; i < 3; i++) free(txt[i]);
}

static void test_search_choices(void **state) {
    (void)state;
    require_shared();
    /* the first 8 cloze items */
    size_t len;
    char *t = read_file(shared_path("eval/cloze-dev.jsonl"), &len);
    assert_non_null(t);
    char *p = t;
    for (int i = 0; i < 8 && p; i++) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
    FILE *f = fopen(tmp("cloze8.jsonl"), "w");
    fwrite(t, 1, p ? (size_t)(p - t) : len, f);
    fclose(f);
    free(t);
    char args[4096];
    snprintf(args, sizeof args, "--search --choices %s %s --method linear --evals 3 -o %s --yaml %s",
             tmp("cloze8.jsonl"), models_args(), tmp("c.gguf"), tmp("c.yaml"));
    merge_ok(args);
    char *y = read_file(tmp("c.yaml"), &len);
    double acc = number_after(y, "# best: ");
    assert_non_null(strstr(y, "accuracy"));
    /* linear weights the base model too */
    assert_non_null(strstr(y, "stories260K.gguf\"\n        layer_range: [0, 5]\n        parameters: {weight: "));
    free(y);
    snprintf(args, sizeof args, "--choices %s -m %s --json 2>/dev/null", tmp("cloze8.jsonl"), tmp("c.gguf"));
    double measured = eval_number(args, "\"acc\":");
    printf("search by accuracy: %.4f, tutti eval: %.4f\n", acc, measured);
    assert_true(fabs(acc - measured) < 1e-4);
}

static void test_search_refusals(void **state) {
    (void)state;
    require_shared();
    dev_text(tmp("dev1.txt"), 1);
    char args[8192], base[3072];
    snprintf(base, sizeof base, "%s -o %s --yaml %s", models_args(), tmp("x.gguf"), tmp("x.yaml"));
    snprintf(args, sizeof args, "--search %s", base);
    expect_refusal(args, 2, "one score");
    snprintf(args, sizeof args, "--search --text %s --choices %s %s", tmp("dev1.txt"), tmp("dev1.txt"), base);
    expect_refusal(args, 2, "one score");
    snprintf(args, sizeof args, "--search --text %s %s --type Q8_0", tmp("dev1.txt"), base);
    expect_refusal(args, 2, "F32, F16 or BF16");
    snprintf(args, sizeof args, "--search --text %s %s --weights 1,1", tmp("dev1.txt"), base);
    expect_refusal(args, 2, "chooses the weights");
    snprintf(args, sizeof args, "--search --text %s %s --method karcher", tmp("dev1.txt"), base);
    expect_refusal(args, 1, "no per-model or per-layer parameters");
    snprintf(args, sizeof args, "--search --text %s %s --layer-groups 6", tmp("dev1.txt"), base);
    expect_refusal(args, 1, "6 layer groups for 5 layers");
    snprintf(args, sizeof args, "--search --text %s -m %s -o %s --yaml %s", tmp("dev1.txt"),
             shared_path("models/stories260K.gguf"), tmp("x.gguf"), tmp("x.yaml"));
    expect_refusal(args, 1, "needs a base model");
    snprintf(args, sizeof args, "--search --text %s %s -o %s", tmp("dev1.txt"), models_args(), tmp("x.gguf"));
    expect_refusal(args, 2, "--yaml");
    snprintf(args, sizeof args, "--text %s %s --method linear", tmp("dev1.txt"), base);
    expect_refusal(args, 2, "belong to --search");
    snprintf(args, sizeof args, "--search --text %s --objective max %s", tmp("dev1.txt"), base);
    expect_refusal(args, 2, "two or more");
    snprintf(args, sizeof args, "--search --text %s --text %s --objective worst %s", tmp("dev1.txt"), tmp("dev1.txt"),
             base);
    expect_refusal(args, 2, "--objective");
    assert_int_equal(access(tmp("x.gguf"), F_OK), -1);
}

static int setup(void **state) {
    (void)state;
    return merge_dir_make("/tmp/tutti-merge-search-XXXXXX");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eigen),
        cmocka_unit_test(test_cmaes_converges),
        cmocka_unit_test(test_cmaes_deterministic),
        cmocka_unit_test(test_search_reproduces),
        cmocka_unit_test(test_search_groups),
        cmocka_unit_test(test_search_texts),
        cmocka_unit_test(test_search_choices),
        cmocka_unit_test(test_search_refusals),
    };
    if (getenv("TUTTI_TEST_FILTER")) cmocka_set_test_filter(getenv("TUTTI_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, merge_dir_remove);
}
