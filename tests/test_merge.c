/* Tests of `tutti merge` (src/merge).
 *
 * Correctness: every method, on the random-weight models of ../shared/ref/arch
 * (llama, qwen2, gemma2; F16 and Q8_0 files), against tests/merge_ref.py, an
 * independent numpy implementation run with /usr/bin/python3.  The second and
 * third "models" of each merge are deterministic perturbations of the arch
 * file written at test time in the file's own tensor types.  Quantized outputs
 * against llama-quantize --pure on the float32 merge: the sha256 (its first 16 hex digits) of every
 * tensor's bytes, committed in tests/data/merge_quant.sha256 by
 * tests/merge_oracle.sh.  Properties: SLERP endpoints and the colinear
 * fallback, TIES/DARE at density 1 = task arithmetic, a model merged with
 * itself = itself, DARE's kept fraction, same seed = same file; refusals
 * (vocabularies, architectures, shapes, missing tensors); the YAML front end
 * (block style = flow style, malformed input refused). */
#include "test_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "merge_common.h"
#include "quant/quant.h"
#include "tutti.h"

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef enum { V_PERTURB, V_SCALE2, V_DROP, V_SHRINK } variant_kind;

/* Writes a copy of src (all metadata) whose tensors are changed by kind, each
 * re-encoded in its own type: PERTURB adds uniform noise of 0.6 x the
 * tensor's RMS (seeded), SCALE2 doubles every weight (exact in F16/Q8_0),
 * DROP leaves out tensor `drop`, SHRINK keeps the first half of its rows. */
static void make_variant(const char *src, const char *dst, variant_kind kind, uint64_t seed, const char *drop) {
    gguf_file *f = gguf_open(src);
    assert_non_null(f);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) assert_int_equal(gguf_writer_copy_kv(w, f, i), 0);
    int64_t nt = gguf_n_tensors(f);
    void **bufs = calloc((size_t)nt, sizeof *bufs);
    uint64_t s = seed * 0x1234567ull + 1;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[80];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        if (kind == V_DROP && !strcmp(name, drop)) continue;
        int64_t n = 1, ne[GGUF_MAX_DIMS];
        for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d], ne[d] = t->ne[d];
        float *x = malloc(sizeof(float) * (size_t)n);
        assert_true(tutti_dequantize_row(t->type, t->data, x, n));
        if (kind == V_SHRINK && !strcmp(name, drop)) {
            ne[1] /= 2;
            n /= 2;
        }
        double rms = 0;
        for (int64_t j = 0; j < n; j++) rms += (double)x[j] * x[j];
        rms = sqrt(rms / (double)n);
        for (int64_t j = 0; j < n; j++) {
            if (kind == V_SCALE2) x[j] *= 2;
            else if (kind == V_PERTURB)
                x[j] += (float)(0.6 * rms * ((double)(splitmix(&s) >> 11) / 4503599627370496.0 - 1.0));
        }
        bufs[i] = malloc(t->size);
        for (int64_t r = 0; r < n / t->ne[0]; r++)
            assert_true(tutti_quantize_row_ref(
                t->type, x + r * t->ne[0], (char *)bufs[i] + (size_t)r * tutti_row_size(t->type, t->ne[0]), t->ne[0]));
        free(x);
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne, bufs[i]), 0);
    }
    assert_int_equal(gguf_writer_write(w, dst), 0);
    for (int64_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    gguf_writer_free(w);
    gguf_close(f);
}

/* ---- float32 tensors of a file ---- */

static float *tensor_f32(const char *path, const char *name, int64_t *n_out) {
    gguf_file *f = gguf_open(path);
    assert_non_null(f);
    const gguf_tensor_info *t = gguf_find_tensor(f, name);
    assert_non_null(t);
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_true(tutti_dequantize_row(t->type, t->data, x, n));
    gguf_close(f);
    *n_out = n;
    return x;
}

/* Every tensor of a equals the same-named one of b (dequantized) exactly. */
static void assert_same_values(const char *a, const char *b) {
    gguf_file *f = gguf_open(a);
    assert_non_null(f);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor_info *t = gguf_tensor(f, i);
        char name[80];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        int64_t na, nb;
        float *x = tensor_f32(a, name, &na), *y = tensor_f32(b, name, &nb);
        assert_int_equal(na, nb);
        for (int64_t j = 0; j < na; j++)
            if (x[j] != y[j])
                fail_msg("%s vs %s: tensor %s element %lld: %g != %g", a, b, name, (long long)j, x[j], y[j]);
        free(x), free(y);
    }
    gguf_close(f);
}

static char *file_bytes(const char *path, size_t *len) {
    char *d = read_file(path, len);
    assert_non_null(d);
    return d;
}

/* ------------------------------------------------------------------------ */
/* Every method against the numpy reference */

static const char *const k_archs[] = {"llama", "qwen2", "gemma2"};
static const char *const k_types[] = {"F16", "Q8_0"};

/* JSON (= YAML flow style) configurations over A (base), B, C; %1$s..%3$s. */
static const char *const k_configs[][2] = {
    {"linear",
     "{\"merge_method\":\"linear\",\"models\":[{\"model\":\"%1$s\",\"parameters\":{\"weight\":0.3}},"
     "{\"model\":\"%2$s\",\"parameters\":{\"weight\":[0.2,0.9]}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5}}]}"},
    {"linear_nonorm",
     "{\"merge_method\":\"linear\",\"parameters\":{\"normalize\":false},\"models\":[{\"model\":\"%1$s\","
     "\"parameters\":{\"weight\":0.6}},{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.3}}]}"},
    {"slerp",
     "{\"merge_method\":\"slerp\",\"base_model\":\"%1$s\",\"models\":[{\"model\":\"%1$s\"},{\"model\":\"%2$s\"}],"
     "\"parameters\":{\"t\":[{\"filter\":\"self_attn\",\"value\":[0,0.5,0.3,0.7,1]},{\"filter\":\"mlp\","
     "\"value\":[1,0.5,0.7,0.3,0]},{\"value\":0.4}]}}"},
    {"nuslerp",
     "{\"merge_method\":\"nuslerp\",\"base_model\":\"%1$s\",\"parameters\":{\"nuslerp_flatten\":false},"
     "\"models\":[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.7}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.4}}]}"},
    {"nuslerp_rows",
     "{\"merge_method\":\"nuslerp\",\"parameters\":{\"nuslerp_flatten\":false,\"nuslerp_row_wise\":true},"
     "\"models\":[{\"model\":\"%2$s\",\"parameters\":{\"weight\":1}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":2}}]}"},
    {"task_arithmetic",
     "{\"merge_method\":\"task_arithmetic\",\"base_model\":\"%1$s\",\"parameters\":{\"lambda\":0.8},"
     "\"models\":[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.7}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.4}}]}"},
    {"ties",
     "{\"merge_method\":\"ties\",\"base_model\":\"%1$s\",\"models\":[{\"model\":\"%1$s\"},{\"model\":\"%2$s\","
     "\"parameters\":{\"weight\":0.7,\"density\":0.5}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5,\"density\":[0.3,0.8]}}]}"},
    {"dare_ties",
     "{\"merge_method\":\"dare_ties\",\"base_model\":\"%1$s\",\"parameters\":{\"density\":0.6},\"models\":"
     "[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.7}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5}}]}"},
    {"dare_linear",
     "{\"merge_method\":\"dare_linear\",\"base_model\":\"%1$s\",\"models\":[{\"model\":\"%2$s\",\"parameters\":"
     "{\"weight\":0.7,\"density\":0.4}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5,\"density\":0.7}}]}"},
    {"della",
     "{\"merge_method\":\"della\",\"base_model\":\"%1$s\",\"parameters\":{\"epsilon\":0.1,\"lambda\":1.1},\"models\":"
     "[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.7,\"density\":0.5}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5,\"density\":0.4}}]}"},
    {"della_linear",
     "{\"merge_method\":\"della_linear\",\"base_model\":\"%1$s\",\"parameters\":{\"density\":0.5},\"models\":"
     "[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.6}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.6}}]}"},
    {"breadcrumbs",
     "{\"merge_method\":\"breadcrumbs\",\"base_model\":\"%1$s\",\"parameters\":{\"density\":0.8,\"gamma\":0.05},"
     "\"models\":[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.7}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5}}]}"},
    {"breadcrumbs_ties",
     "{\"merge_method\":\"breadcrumbs_ties\",\"base_model\":\"%1$s\",\"parameters\":{\"density\":0.7},"
     "\"models\":[{\"model\":\"%2$s\",\"parameters\":{\"weight\":0.7}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.5}}]}"},
    {"model_stock",
     "{\"merge_method\":\"model_stock\",\"base_model\":\"%1$s\",\"models\":[{\"model\":\"%2$s\"},{\"model\":\"%3$s\"}]}"},
    {"model_stock_fw",
     "{\"merge_method\":\"model_stock\",\"base_model\":\"%1$s\",\"parameters\":{\"filter_wise\":true},"
     "\"models\":[{\"model\":\"%2$s\"},{\"model\":\"%3$s\"}]}"},
    {"sce", "{\"merge_method\":\"sce\",\"base_model\":\"%1$s\",\"parameters\":{\"select_topk\":[0.3,1]},"
            "\"models\":[{\"model\":\"%2$s\"},{\"model\":\"%3$s\"}]}"},
    {"karcher",
     "{\"merge_method\":\"karcher\",\"models\":[{\"model\":\"%1$s\"},{\"model\":\"%2$s\"},{\"model\":\"%3$s\"}]}"},
    {"karcher_2", "{\"merge_method\":\"karcher\",\"base_model\":\"%1$s\",\"parameters\":{\"max_iter\":2,\"tol\":1e-7},"
                  "\"models\":[{\"model\":\"%2$s\"},{\"model\":\"%3$s\"}]}"},
    {"multislerp", "{\"merge_method\":\"multislerp\",\"base_model\":\"%1$s\",\"models\":[{\"model\":\"%2$s\","
                   "\"parameters\":{\"weight\":0.7}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":[0.2,0.9]}}]}"},
    {"multislerp_3", "{\"merge_method\":\"multislerp\",\"parameters\":{\"normalize_weights\":false},\"models\":"
                     "[{\"model\":\"%1$s\",\"parameters\":{\"weight\":0.5}},{\"model\":\"%2$s\",\"parameters\":"
                     "{\"weight\":0.3}},{\"model\":\"%3$s\",\"parameters\":{\"weight\":0.4}}]}"},
    {"nearswap", "{\"merge_method\":\"nearswap\",\"base_model\":\"%1$s\",\"parameters\":{\"t\":[0.004,0.03]},"
                 "\"models\":[{\"model\":\"%2$s\"}]}"},
    {"arcee_fusion", "{\"merge_method\":\"arcee_fusion\",\"base_model\":\"%1$s\",\"models\":[{\"model\":\"%3$s\"}]}"},
    {"passthrough",
     "{\"merge_method\":\"passthrough\",\"slices\":[{\"sources\":[{\"model\":\"%2$s\",\"layer_range\":[0,2]}]},"
     "{\"sources\":[{\"model\":\"%3$s\",\"layer_range\":[1,2]}],\"parameters\":{\"scale\":[{\"filter\":\"o_proj\","
     "\"value\":0.5}]}},{\"sources\":[{\"model\":\"%1$s\",\"layer_range\":[0,1]}]}]}"},
};

#define N_CONFIGS (sizeof k_configs / sizeof k_configs[0])

static void run_reference_checks(const char *a, const char *b, const char *c, const char *tag) {
    char checks[16384] = "";
    size_t o = 0;
    for (size_t k = 0; k < N_CONFIGS; k++) {
        char cfg[2048], cfg_path[512], out_path[512], args[2048];
        snprintf(cfg, sizeof cfg, k_configs[k][1], a, b, c);
        snprintf(cfg_path, sizeof cfg_path, "%s", tmp(k_configs[k][0]));
        strcat(cfg_path, "-");
        strcat(cfg_path, tag);
        strcat(cfg_path, ".json");
        snprintf(out_path, sizeof out_path, "%s.gguf", cfg_path);
        write_text(cfg_path, cfg);
        snprintf(args, sizeof args, "--config %s -o %s --type F32 --seed 11", cfg_path, out_path);
        merge_ok(args);
        o += (size_t)snprintf(checks + o, sizeof checks - o, " %s %s 11", cfg_path, out_path);
    }
    reference_run(tag, "merge_ref.py check%s", checks);
}

static void test_methods_vs_numpy(void **state) {
    (void)state;
    require_shared();
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 2; j++) {
            char rel[128], tag[64], b[96], c[96];
            snprintf(rel, sizeof rel, "ref/arch/%s-%s.gguf", k_archs[i], k_types[j]);
            snprintf(tag, sizeof tag, "%s-%s", k_archs[i], k_types[j]);
            snprintf(b, sizeof b, "%s-B.gguf", tag);
            snprintf(c, sizeof c, "%s-C.gguf", tag);
            const char *a = shared_path(rel);
            char bp[512], cp[512];
            snprintf(bp, sizeof bp, "%s", tmp(b));
            snprintf(cp, sizeof cp, "%s", tmp(c));
            make_variant(a, bp, V_PERTURB, 1, NULL);
            make_variant(a, cp, V_PERTURB, 2, NULL);
            run_reference_checks(a, bp, cp, tag);
        }
}

/* A tied-output model (no output.weight) merged with an untied one: its
 * token embedding stands in for the output (checked by the reference). */
static void test_tied_untied(void **state) {
    (void)state;
    require_shared();
    char cfg[1024], args[1024];
    snprintf(cfg, sizeof cfg,
             "{\"merge_method\":\"linear\",\"models\":[{\"model\":\"%s\",\"parameters\":{\"weight\":0.3}},"
             "{\"model\":\"%s\",\"parameters\":{\"weight\":0.7}}]}",
             shared_path("ref/arch/llama-F16.gguf"), shared_path("ref/arch/llama-tied-F16.gguf"));
    write_text(tmp("tied.json"), cfg);
    snprintf(args, sizeof args, "--config %s -o %s --type F32", tmp("tied.json"), tmp("tied.gguf"));
    merge_ok(args);
    gguf_file *f = gguf_open(tmp("tied.gguf"));
    assert_non_null(f);
    assert_non_null(gguf_find_tensor(f, "output.weight"));
    gguf_close(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/merge_ref.py check %s %s 0 2>&1", TUTTI_SOURCE_DIR,
             tmp("tied.json"), tmp("tied.gguf"));
    int st;
    char *out = run_cmd(cmd, &st);
    if (st) fprintf(stderr, "%s", out);
    free(out);
    assert_int_equal(st, 0);
    /* both tied: the output stays tied */
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s --type F32",
             shared_path("ref/arch/llama-tied-F16.gguf"), shared_path("ref/arch/llama-tied-F16.gguf"),
             tmp("tied2.gguf"));
    merge_ok(args);
    f = gguf_open(tmp("tied2.gguf"));
    assert_non_null(f);
    assert_null(gguf_find_tensor(f, "output.weight"));
    gguf_close(f);
}

/* ------------------------------------------------------------------------ */
/* Quantized outputs = llama-quantize --pure on the float32 merge */

static const char *const k_quant_types[] = {"F16",  "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                            "Q5_1", "Q4_K", "Q5_K", "Q6_K", "MXFP4"};

/* The float32 merges that tests/merge_oracle.sh quantizes with llama-quantize:
 * slerp of llama-F16 and its perturbation, ties of qwen2-Q8_0 and two
 * perturbations, and a stories260K merge (ne0 = 64: Q4_K falls back to Q5_0). */
static void quant_cases(void) {
    static bool done;
    if (done) return;
    done = true;
    const char *la = shared_path("ref/arch/llama-F16.gguf"), *qa = shared_path("ref/arch/qwen2-Q8_0.gguf");
    char lb[512], qb[512], qc[512], args[4096];
    snprintf(lb, sizeof lb, "%s", tmp("q-llama-B.gguf"));
    snprintf(qb, sizeof qb, "%s", tmp("q-qwen2-B.gguf"));
    snprintf(qc, sizeof qc, "%s", tmp("q-qwen2-C.gguf"));
    make_variant(la, lb, V_PERTURB, 1, NULL);
    make_variant(qa, qb, V_PERTURB, 1, NULL);
    make_variant(qa, qc, V_PERTURB, 2, NULL);
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0.35 -o %s --type F32", la, lb,
             tmp("q-slerp.f32.gguf"));
    merge_ok(args);
    snprintf(args, sizeof args, "-m %s -m %s --base %s --method ties --density 0.6 -o %s --type F32", qb, qc, qa,
             tmp("q-ties.f32.gguf"));
    merge_ok(args);
    snprintf(args, sizeof args, "-m %s -m %s --base %s --method task_arithmetic -o %s --type F32",
             shared_path("models/stories260K-ft/stories260K-dreams.gguf"),
             shared_path("models/stories260K-ft/stories260K-poems.gguf"), shared_path("models/stories260K.gguf"),
             tmp("q-stories.f32.gguf"));
    merge_ok(args);
}

/* The F32 merges for tests/merge_oracle.sh: TUTTI_MERGE_ORACLE_DIR=DIR
 * makes this test copy them there (and pass). */
static void test_quantized_vs_llama_quantize(void **state) {
    (void)state;
    require_shared();
    quant_cases();
    const char *cases[] = {"q-slerp", "q-ties", "q-stories"};
    const char *odir = getenv("TUTTI_MERGE_ORACLE_DIR");
    if (odir) {
        for (int c = 0; c < 3; c++) {
            char cmd[2048];
            snprintf(cmd, sizeof cmd, "cp %s/%s.f32.gguf %s/", merge_dir(), cases[c], odir);
            assert_int_equal(system(cmd), 0);
        }
        return;
    }
    size_t len;
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/merge_quant.sha256", TUTTI_SOURCE_DIR);
    char *want = read_file(path, &len);
    assert_non_null(want);
    int n_checked = 0;
    for (int c = 0; c < 3; c++)
        for (size_t q = 0; q < sizeof k_quant_types / sizeof *k_quant_types; q++) {
            char args[2048], out[512], cmd[2048];
            snprintf(out, sizeof out, "%s", tmp(cases[c]));
            strcat(out, ".");
            strcat(out, k_quant_types[q]);
            strcat(out, ".gguf");
            /* the merge of quant_cases, quantized on the way */
            if (c == 0)
                snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0.35 -o %s --type %s",
                         shared_path("ref/arch/llama-F16.gguf"), tmp("q-llama-B.gguf"), out, k_quant_types[q]);
            else if (c == 1)
                snprintf(args, sizeof args, "-m %s -m %s --base %s --method ties --density 0.6 -o %s --type %s",
                         tmp("q-qwen2-B.gguf"), tmp("q-qwen2-C.gguf"), shared_path("ref/arch/qwen2-Q8_0.gguf"), out,
                         k_quant_types[q]);
            else
                snprintf(args, sizeof args, "-m %s -m %s --base %s --method task_arithmetic -o %s --type %s",
                         shared_path("models/stories260K-ft/stories260K-dreams.gguf"),
                         shared_path("models/stories260K-ft/stories260K-poems.gguf"),
                         shared_path("models/stories260K.gguf"), out, k_quant_types[q]);
            merge_ok(args);
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/merge_ref.py hash %s", TUTTI_SOURCE_DIR, out);
            int st;
            char *hashes = run_cmd(cmd, &st);
            assert_int_equal(st, 0);
            /* every "tensor sha" line must appear in the oracle file as "case type tensor sha" */
            char *save = NULL;
            for (char *line = strtok_r(hashes, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                /* the oracle file keeps each sha256's first 16 hex digits */
                const char *sp = strrchr(line, ' ');
                const int name_len = sp ? (int)(sp - line) : (int)strlen(line);
                char key[400];
                snprintf(key, sizeof key, "%s %s %.*s %.16s\n", cases[c], k_quant_types[q], name_len, line,
                         sp ? sp + 1 : "");
                if (!strstr(want, key))
                    fail_msg("%s %s: tensor bytes differ from llama-quantize's: %s", cases[c], k_quant_types[q], line);
                n_checked++;
            }
            free(hashes);
        }
    free(want);
    printf("quantized tensors equal to llama-quantize's: %d\n", n_checked);
    assert_true(n_checked > 300);
}

/* ------------------------------------------------------------------------ */
/* Properties */

static void test_slerp_endpoints_colinear(void **state) {
    (void)state;
    require_shared();
    const char *a = shared_path("ref/arch/llama-Q8_0.gguf");
    char b[512], b2[512], args[2048];
    snprintf(b, sizeof b, "%s", tmp("sl-B.gguf"));
    snprintf(b2, sizeof b2, "%s", tmp("sl-2A.gguf"));
    make_variant(a, b, V_PERTURB, 3, NULL);
    make_variant(a, b2, V_SCALE2, 0, NULL);
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0 -o %s --type F32", a, b, tmp("sl0.gguf"));
    merge_ok(args);
    assert_same_values(tmp("sl0.gguf"), a);
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 1 -o %s --type F32", a, b, tmp("sl1.gguf"));
    merge_ok(args);
    assert_same_values(tmp("sl1.gguf"), b);
    /* 2A is colinear with A: lerp, 0.7 a + 0.3 (2a) = 1.3 a */
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0.3 -o %s --type F32", a, b2, tmp("slc.gguf"));
    merge_ok(args);
    int64_t n, m;
    float *x = tensor_f32(a, "blk.1.ffn_up.weight", &n), *y = tensor_f32(tmp("slc.gguf"), "blk.1.ffn_up.weight", &m);
    assert_int_equal(n, m);
    for (int64_t j = 0; j < n; j++) assert_true(fabs(y[j] - 1.3 * x[j]) <= 1e-6 * fabs(1.3 * x[j]) + 1e-30);
    free(x), free(y);
    /* and the non-colinear merge is not a lerp (the angle matters) */
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0.5 -o %s --type F32", a, b, tmp("slm.gguf"));
    merge_ok(args);
    float *p = tensor_f32(a, "blk.1.ffn_up.weight", &n), *q = tensor_f32(b, "blk.1.ffn_up.weight", &n),
          *r = tensor_f32(tmp("slm.gguf"), "blk.1.ffn_up.weight", &n);
    double dmax = 0;
    for (int64_t j = 0; j < n; j++) dmax = fmax(dmax, fabs(r[j] - 0.5 * (p[j] + q[j])));
    assert_true(dmax > 1e-4);
    free(p), free(q), free(r);
}

static void test_density_one_is_task_arithmetic(void **state) {
    (void)state;
    require_shared();
    const char *a = shared_path("ref/arch/qwen2-F16.gguf");
    char b[512], c[512], args[2048];
    snprintf(b, sizeof b, "%s", tmp("d1-B.gguf"));
    snprintf(c, sizeof c, "%s", tmp("d1-C.gguf"));
    make_variant(a, b, V_PERTURB, 4, NULL);
    make_variant(a, c, V_PERTURB, 5, NULL);
    snprintf(args, sizeof args, "-m %s --base %s --method task_arithmetic -o %s --type F32", b, a, tmp("ta1.gguf"));
    merge_ok(args);
    snprintf(args, sizeof args, "-m %s --base %s --method ties --density 1 -o %s --type F32", b, a, tmp("ties1.gguf"));
    merge_ok(args);
    assert_same_values(tmp("ties1.gguf"), tmp("ta1.gguf"));
    snprintf(args, sizeof args, "-m %s --base %s --method dare_ties --density 1 -o %s --type F32", b, a,
             tmp("dt1.gguf"));
    merge_ok(args);
    assert_same_values(tmp("dt1.gguf"), tmp("ta1.gguf"));
    snprintf(args, sizeof args, "-m %s -m %s --base %s --method task_arithmetic --weights 0.6,0.3 -o %s --type F32", b,
             c, a, tmp("ta2.gguf"));
    merge_ok(args);
    snprintf(args, sizeof args,
             "-m %s -m %s --base %s --method dare_linear --density 1 --weights 0.6,0.3 -o %s --type F32", b, c, a,
             tmp("dl2.gguf"));
    merge_ok(args);
    assert_same_values(tmp("dl2.gguf"), tmp("ta2.gguf"));
    /* and density < 1 does change it */
    snprintf(args, sizeof args,
             "-m %s -m %s --base %s --method dare_linear --density 0.5 --weights 0.6,0.3 -o %s --type F32", b, c, a,
             tmp("dl5.gguf"));
    merge_ok(args);
    assert_false(same_file(tmp("dl5.gguf"), tmp("dl2.gguf")));
}

static void test_merged_with_itself(void **state) {
    (void)state;
    require_shared();
    const char *a = shared_path("ref/arch/gemma2-F16.gguf");
    const char *methods[] = {"linear",
                             "slerp --t 0.4",
                             "nuslerp",
                             "task_arithmetic --base X",
                             "ties --base X --density 0.5",
                             "model_stock --base X"};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        char m[256], args[2048];
        snprintf(m, sizeof m, "%s", methods[i]);
        char *x = strstr(m, " X");
        char extra[600] = "";
        if (x) {
            *x = 0;
            snprintf(extra, sizeof extra, " %s", a);
        }
        const char *third = strstr(methods[i], "model_stock") ? a : NULL;
        snprintf(args, sizeof args, "-m %s -m %s%s%s --method %s%s -o %s --type F16", a, a, third ? " -m " : "",
                 third ? third : "", m, extra, tmp("self.gguf"));
        merge_ok(args);
        assert_same_values(tmp("self.gguf"), a);
        /* F16 in, F16 out: the very same tensor bytes */
        gguf_file *f = gguf_open(a), *g = gguf_open(tmp("self.gguf"));
        assert_non_null(g);
        for (int64_t k = 0; k < gguf_n_tensors(f); k++) {
            const gguf_tensor_info *t = gguf_tensor(f, k);
            char name[80];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
            const gguf_tensor_info *u = gguf_find_tensor(g, name);
            assert_non_null(u);
            assert_int_equal(t->type, u->type);
            assert_memory_equal(t->data, u->data, t->size);
        }
        gguf_close(f);
        gguf_close(g);
    }
}

/* A two-tensor "model" of shape 1024 x 1024 for mask statistics. */
static void write_big(const char *path, float v, uint64_t seed) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "toy");
    gguf_writer_add_u32(w, "toy.block_count", 1);
    int64_t ne[2] = {1024, 1024};
    float *x = malloc(sizeof(float) * 1024 * 1024);
    uint64_t s = seed;
    for (int64_t j = 0; j < 1024 * 1024; j++) x[j] = seed ? v + (float)((splitmix(&s) >> 40) + 1) * 1e-7f : v;
    gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", TUTTI_TYPE_F32, 2, ne, x);
    assert_int_equal(gguf_writer_write(w, path), 0);
    free(x);
    gguf_writer_free(w);
}

static void test_dare_kept_fraction_and_seed(void **state) {
    (void)state;
    write_big(tmp("big-base.gguf"), 0.0f, 0);
    write_big(tmp("big-ft.gguf"), 0.0f, 9);
    const double dens[] = {0.1, 0.3, 0.9};
    for (int k = 0; k < 3; k++) {
        char args[2048];
        snprintf(args, sizeof args,
                 "-m %s --base %s --method dare_linear --density %g --rescale 0 --seed 7 -o %s --type F32",
                 tmp("big-ft.gguf"), tmp("big-base.gguf"), dens[k], tmp("big-dare.gguf"));
        merge_ok(args);
        int64_t n;
        float *y = tensor_f32(tmp("big-dare.gguf"), "blk.0.ffn_up.weight", &n);
        int64_t kept = 0;
        for (int64_t j = 0; j < n; j++) kept += y[j] != 0;
        double frac = (double)kept / (double)n;
        printf("dare density %.2f: kept %.5f\n", dens[k], frac);
        assert_true(fabs(frac - dens[k]) <= 0.01 * dens[k]);
        free(y);
    }
    /* same seed, same file; another seed, another mask */
    char args[2048];
    for (int s = 0; s < 3; s++) {
        snprintf(args, sizeof args, "-m %s --base %s --method dare_ties --density 0.5 --seed %d -o %s --type F32",
                 tmp("big-ft.gguf"), tmp("big-base.gguf"), s == 2 ? 8 : 7,
                 tmp(s == 0   ? "seed-a.gguf"
                     : s == 1 ? "seed-b.gguf"
                              : "seed-c.gguf"));
        merge_ok(args);
    }
    assert_true(same_file(tmp("seed-a.gguf"), tmp("seed-b.gguf")));
    assert_false(same_file(tmp("seed-a.gguf"), tmp("seed-c.gguf")));
}

/* ------------------------------------------------------------------------ */
/* Refusals and the front end */

static void test_refusals(void **state) {
    (void)state;
    require_shared();
    char args[2048];
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s",
             shared_path("models/BabyLlama-tok105/babyllama-tok105.gguf"),
             shared_path("models/BabyLlama-tok361/babyllama-tok361.gguf"), tmp("x.gguf"));
    expect_refusal(args, 1, "different vocabularies");
    assert_int_equal(access(tmp("x.gguf"), F_OK), -1);
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s", shared_path("ref/arch/llama-F16.gguf"),
             shared_path("ref/arch/qwen2-F16.gguf"), tmp("x.gguf"));
    expect_refusal(args, 1, "different architectures");
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s", shared_path("models/stories260K.gguf"),
             shared_path("ref/arch/llama-F16.gguf"), tmp("x.gguf"));
    expect_refusal(args, 1, "same number of layers");
    make_variant(shared_path("ref/arch/llama-F16.gguf"), tmp("shrink.gguf"), V_SHRINK, 0, "blk.1.ffn_up.weight");
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s", shared_path("ref/arch/llama-F16.gguf"),
             tmp("shrink.gguf"), tmp("x.gguf"));
    expect_refusal(args, 1, "different shapes");
    make_variant(shared_path("ref/arch/llama-F16.gguf"), tmp("drop.gguf"), V_DROP, 0, "blk.1.ffn_gate.weight");
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s", shared_path("ref/arch/llama-F16.gguf"),
             tmp("drop.gguf"), tmp("x.gguf"));
    expect_refusal(args, 1, "missing tensor");
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s", tmp("drop.gguf"),
             shared_path("ref/arch/llama-F16.gguf"), tmp("x.gguf"));
    expect_refusal(args, 1, "missing tensor");
    const char *m = shared_path("models/stories260K.gguf");
    snprintf(args, sizeof args, "-m %s -m %s --method frobnicate -o %s", m, m, tmp("x.gguf"));
    expect_refusal(args, 2, "unknown merge_method");
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0.5 --type Q4_K_M -o %s", m, m, tmp("x.gguf"));
    expect_refusal(args, 2, "--type");
    /* i-quants need an importance matrix: refused as output types, saying so */
    snprintf(args, sizeof args, "-m %s -m %s --method slerp --t 0.5 --type IQ2_XXS -o %s", m, m, tmp("x.gguf"));
    expect_refusal(args, 2, "importance matrix");
    const char *yaml = "merge_method: linear\nmodels:\n  - model: a.gguf\n";
    tutti_merge_config *qc = tutti_merge_config_parse(yaml, strlen(yaml));
    assert_non_null(qc);
    tutti_merge_params qp = tutti_merge_default_params();
    qp.type = "iq3_s";
    assert_int_not_equal(tutti_merge(qc, tmp("x.gguf"), &qp), TUTTI_OK);
    assert_non_null(strstr(tutti_last_error(), "importance matrix"));
    tutti_merge_config_free(qc);
    snprintf(args, sizeof args, "-m %s -m %s --method slerp -o %s", m, m, tmp("x.gguf"));
    expect_refusal(args, 1, "parameter t missing");
    snprintf(args, sizeof args, "-m %s --method slerp --t 0.5", m);
    expect_refusal(args, 2, "need -o");
    snprintf(args, sizeof args, "-m %s -m %s --method ties -o %s", m, m, tmp("x.gguf"));
    expect_refusal(args, 1, "needs base_model");
    snprintf(args, sizeof args, "--config %s -o %s", tmp("nonexistent.yaml"), tmp("x.gguf"));
    expect_refusal(args, 1, "cannot open");
    snprintf(args, sizeof args, "-m %s -m %s --method linear --bogus -o %s", m, m, tmp("x.gguf"));
    expect_refusal(args, 2, "unknown option");
    /* malformed configurations: each refused with the line */
    static const char *const bad[][2] = {
        {"merge_method: slerp\nmodels: [\n", "YAML error"},
        {"merge_method: nope\nmodels:\n  - model: a\n", "unknown merge_method"},
        {"models:\n  - model: a\n", "merge_method missing"},
        {"merge_method: linear\n", "exactly one of"},
        {"merge_method: linear\nmodels:\n  - model: a\n    parameters:\n      wieght: 1\n",
         "line 5: unknown parameter"},
        {"merge_method: linear\nmodels:\n  - model: a\nfrobs: 1\n", "unknown key 'frobs'"},
        {"merge_method: linear\nmodels:\n  - model: a\n    parameters:\n      weight: [1, {filter: x, value: 1}]\n",
         "mixes"},
        {"merge_method: passthrough\nslices:\n  - sources:\n      - model: a\n        layer_range: [3, 1]\n", "empty"},
        {"merge_method: linear\nparameters: &a\n  weight: *a\nmodels:\n  - model: a\n", "line"},
        {"merge_method: linear\ndtype: float64\nmodels:\n  - model: a\n", "dtype"},
        {"- 1\n- 2\n", "must be a mapping"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tutti_merge_config *c = tutti_merge_config_parse(bad[i][0], strlen(bad[i][0]));
        if (c || !strstr(tutti_last_error(), bad[i][1]))
            fail_msg("config %zu: %s (want '%s')", i, c ? "accepted" : tutti_last_error(), bad[i][1]);
    }
}

/* True when the scratch folder holds a file whose name contains needle (a temporary left behind). */
static bool dir_has(const char *needle) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -a %s", merge_dir());
    int st;
    char *out = run_cmd(cmd, &st);
    bool found = out && strstr(out, needle);
    free(out);
    return found;
}

/* Item 1 of issue 21: the output compared with the inputs as files (device
 * and inode), every output written to a temporary file renamed into place,
 * never a truncated or half-written file. */
static void test_output_never_destroys(void **state) {
    (void)state;
    require_shared();
    char args[2048], cmd[2048];
    /* s.gguf copied, reached as ./s, /abs/s, a symlink and a hard link */
    snprintf(cmd, sizeof cmd,
             "cd %s && cp %s s.gguf && cp %s d.gguf && ln -sf s.gguf link.gguf && ln -f s.gguf hard.gguf", merge_dir(),
             shared_path("models/stories260K.gguf"), shared_path("models/stories260K-ft/stories260K-dreams.gguf"));
    int st;
    free(run_cmd(cmd, &st));
    assert_int_equal(st, 0);
    const char *outs[] = {"./s.gguf", "", "link.gguf", "hard.gguf"};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s merge -m s.gguf -m d.gguf --method linear -o %s%s 2>&1", merge_dir(),
                 TUTTI_CLI, outs[i][0] ? outs[i] : merge_dir(), outs[i][0] ? "" : "/s.gguf");
        char *err = run_cmd(cmd, &st);
        if (st != 1 || !strstr(err, "the same file")) fail_msg("%s: status %d: %s", cmd, st, err);
        free(err);
        assert_true(same_file(tmp("s.gguf"), shared_path("models/stories260K.gguf")));
    }
    /* a merge that fails half-way (della's epsilon is checked per tensor,
     * while the file is being written) leaves an existing output as it was
     * and no temporary behind */
    write_text(tmp("old.gguf"), "the previous output\n");
    snprintf(args, sizeof args, "-m %s -m %s --method della --base %s --density 0.9 --epsilon 0.2 -o %s", tmp("s.gguf"),
             tmp("d.gguf"), tmp("s.gguf"), tmp("old.gguf"));
    expect_refusal(args, 1, "epsilon");
    size_t len;
    char *old = file_bytes(tmp("old.gguf"), &len);
    assert_string_equal(old, "the previous output\n");
    free(old);
    assert_false(dir_has(".tmp-"));
    /* a file that another process has mapped (a loaded model) is replaced,
     * not rewritten in place: the mapping keeps the old bytes */
    snprintf(cmd, sizeof cmd, "cp %s %s", shared_path("models/stories260K.gguf"), tmp("mapped.gguf"));
    free(run_cmd(cmd, &st));
    gguf_file *f = gguf_open(tmp("mapped.gguf"));
    assert_non_null(f);
    const gguf_tensor_info *t = gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    void *before = malloc((size_t)t->size);
    memcpy(before, t->data, (size_t)t->size);
    snprintf(args, sizeof args, "-m %s -m %s --method linear -w 1,3 --type Q8_0 -o %s", tmp("s.gguf"), tmp("d.gguf"),
             tmp("mapped.gguf"));
    merge_ok(args);
    assert_memory_equal(before, t->data, (size_t)t->size);
    free(before);
    gguf_close(f);
    /* -o - streams the same bytes to stdout and creates no file named "-" */
    const char *to[] = {"file.gguf", "- > stdout.gguf"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s merge -m s.gguf -m d.gguf --method linear --quiet -o %s", merge_dir(),
                 TUTTI_CLI, to[k]);
        free(run_cmd(cmd, &st));
        assert_int_equal(st, 0);
    }
    assert_true(same_file(tmp("file.gguf"), tmp("stdout.gguf")));
    assert_int_equal(access(tmp("-"), F_OK), -1);
    /* an output that cannot be written is refused before the merge runs */
    snprintf(args, sizeof args, "-m %s -m %s --method linear -o %s/no/such/dir/x.gguf", tmp("s.gguf"), tmp("d.gguf"),
             merge_dir());
    expect_refusal(args, 1, "does not exist");
}

/* Item 12 of issue 21: parameter ranges as mergekit defines them, YAML's
 * non-finite floats, and llama-quantize's fallback types said on stderr. */
static void test_parameter_ranges_and_fallbacks(void **state) {
    (void)state;
    require_shared();
    const char *s = shared_path("models/stories260K.gguf"),
               *d = shared_path("models/stories260K-ft/stories260K-dreams.gguf");
    char args[2048];
    /* the -m form: out-of-range flags are usage errors */
    static const char *const bad_flags[][2] = {
        {"--method ties --density 1.5", "--density"},   {"--method ties --density -0.2", "--density"},
        {"--method breadcrumbs --gamma 2", "--gamma"},  {"--method slerp --t 1.5", "--t"},
        {"--method della --epsilon -0.1", "--epsilon"},
    };
    for (size_t i = 0; i < sizeof bad_flags / sizeof *bad_flags; i++) {
        snprintf(args, sizeof args, "-m %s -m %s --base %s %s -o %s", s, d, s, bad_flags[i][0], tmp("x.gguf"));
        expect_refusal(args, 2, bad_flags[i][1]);
    }
    /* the same in a configuration, at every level, in gradients and
     * conditions; YAML's .nan / .inf / -.inf are floats, refused as such */
    static const char *const bad_values[][2] = {
        {"density: 1.5", "outside [0, 1]"},
        {"density: -0.2", "outside [0, 1]"},
        {"density: [0.5, 1.2]", "outside [0, 1]"},
        {"density: [{filter: mlp, value: 2}, {value: 0.5}]", "outside [0, 1]"},
        {"gamma: 1.01", "outside [0, 1]"},
        {"epsilon: -0.1", "outside [0, 1]"},
        {"density: .nan", "finite"},
        {"density: .NaN", "finite"},
        {"weight: .inf", "finite"},
        {"weight: -.Inf", "finite"},
        {"density: 1e999", "finite"},
        {"density: abc", "a number is needed"},
    };
    for (size_t i = 0; i < sizeof bad_values / sizeof *bad_values; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "merge_method: ties\nbase_model: %s\nmodels:\n  - model: %s\n  - model: %s\n    parameters:\n"
                 "      weight: 1\n      %s\n",
                 s, s, d, bad_values[i][0]);
        /* weight given twice is its own error: drop the default one (the
         * value is then on line 7) */
        bool is_weight = !strncmp(bad_values[i][0], "weight", 6);
        if (is_weight) {
            char *w = strstr(yaml, "      weight: 1\n");
            memmove(w, w + 16, strlen(w + 16) + 1);
        }
        tutti_merge_config *c = tutti_merge_config_parse(yaml, strlen(yaml));
        if (c || !strstr(tutti_last_error(), bad_values[i][1]) ||
            !strstr(tutti_last_error(), is_weight ? "line 7" : "line 8"))
            fail_msg("%s: %s (want '%s' at its line)", bad_values[i][0], c ? "accepted" : tutti_last_error(),
                     bad_values[i][1]);
    }
    /* the library's own setter refuses them too */
    tutti_merge_config *c = tutti_merge_config_new("ties");
    assert_non_null(c);
    assert_int_equal(tutti_merge_config_set_param(c, "density", 1.5), TUTTI_ERR);
    assert_int_equal(tutti_merge_config_set_param(c, "density", NAN), TUTTI_ERR);
    assert_int_equal(tutti_merge_config_set_param(c, "density", 0.5), 0);
    tutti_merge_config_free(c);
    /* --type Q4_K on stories260K: rows of 64 and 172 values do not fill
     * 256-value blocks.  llama-quantize --pure on this file says "37 of 48
     * tensor(s) required fallback quantization", 32 falling back to q5_0
     * and 5 to f16 (tests/data/merge_fallback.txt, from tests/merge_oracle.sh) */
    size_t len;
    char *ref = read_file(TUTTI_SOURCE_DIR "/tests/data/merge_fallback.txt", &len);
    assert_non_null(ref);
    int n_fb = 0, n_all = 0, n_q5 = 0, n_f16 = 0;
    assert_int_equal(sscanf(ref, "stories260K Q4_K %d %d q5_0=%d f16=%d", &n_fb, &n_all, &n_q5, &n_f16), 4);
    free(ref);
    char *err;
    snprintf(args, sizeof args, "-m %s -m %s --method linear --type Q4_K -o %s", s, d, tmp("q4k.gguf"));
    assert_int_equal(merge_cli(args, &err), 0);
    char want[3][96];
    snprintf(want[0], sizeof want[0], "%d of %d tensors", n_fb, n_all);
    snprintf(want[1], sizeof want[1], "%d as q5_0", n_q5);
    snprintf(want[2], sizeof want[2], "%d as f16", n_f16);
    for (int k = 0; k < 3; k++)
        if (!strstr(err, want[k]) || !strstr(err, "warning")) fail_msg("want '%s' in: %s", want[k], err);
    free(err);
}

/* The block-style YAML a person writes = its flow-style (JSON) form, and the
 * merge record lands in the output's metadata. */
static void test_yaml_block_style(void **state) {
    (void)state;
    require_shared();
    const char *a = shared_path("models/stories260K.gguf"),
               *b = shared_path("models/stories260K-ft/stories260K-dreams.gguf");
    char yaml[2048], json[2048], args[2048];
    snprintf(yaml, sizeof yaml,
             "# a comment\nslices:\n  - sources:\n      - model: %s\n        layer_range: [0, 5]\n"
             "      - model: \"%s\"\n        layer_range: [0, 5]\nmerge_method: slerp\nbase_model: %s\n"
             "parameters:\n  t:\n    - filter: self_attn\n      value: [0, 0.5, 0.3, 0.7, 1]\n"
             "    - filter: mlp\n      value: [1, 0.5, 0.7, 0.3, 0]\n    - value: 0.5\ndtype: float32\n",
             a, b, a);
    snprintf(
        json, sizeof json,
        "{\"slices\":[{\"sources\":[{\"model\":\"%s\",\"layer_range\":[0,5]},{\"model\":\"%s\",\"layer_range\":[0,5]}]}],"
        "\"merge_method\":\"slerp\",\"base_model\":\"%s\",\"parameters\":{\"t\":[{\"filter\":\"self_attn\",\"value\":"
        "[0,0.5,0.3,0.7,1]},{\"filter\":\"mlp\",\"value\":[1,0.5,0.7,0.3,0]},{\"value\":0.5}]}}",
        a, b, a);
    write_text(tmp("block.yaml"), yaml);
    write_text(tmp("flow.json"), json);
    snprintf(args, sizeof args, "--config %s -o %s --name test-merge", tmp("block.yaml"), tmp("block.gguf"));
    merge_ok(args);
    snprintf(args, sizeof args, "--config %s -o %s --type F32", tmp("flow.json"), tmp("flow.gguf"));
    merge_ok(args);
    assert_same_values(tmp("block.gguf"), tmp("flow.gguf"));
    gguf_file *f = gguf_open(tmp("block.gguf"));
    assert_non_null(f);
    gguf_str s;
    assert_true(gguf_get_str(f, "general.name", &s));
    assert_true(gguf_str_eq(s, "test-merge"));
    assert_true(gguf_get_str(f, "tutti.merge.method", &s));
    assert_true(gguf_str_eq(s, "slerp"));
    assert_true(gguf_get_str(f, "tutti.merge.config", &s));
    assert_true(s.len == strlen(yaml) && !memcmp(s.data, yaml, s.len));
    /* dtype float32 made every tensor F32 */
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) assert_int_equal(gguf_tensor(f, i)->type, TUTTI_TYPE_F32);
    gguf_close(f);
    /* the reference agrees on the flow form (filters over Hugging Face names) */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/merge_ref.py check %s %s 0 2>&1", TUTTI_SOURCE_DIR,
             tmp("flow.json"), tmp("flow.gguf"));
    int st;
    char *out = run_cmd(cmd, &st);
    if (st) fprintf(stderr, "%s", out);
    free(out);
    assert_int_equal(st, 0);
}

/* passthrough: layer count rewritten, and the engine runs the result. */
static void test_passthrough_runs(void **state) {
    (void)state;
    require_shared();
    const char *a = shared_path("models/stories260K.gguf"),
               *b = shared_path("models/stories260K-ft/stories260K-poems.gguf");
    char yaml[1024], args[2048];
    snprintf(yaml, sizeof yaml,
             "merge_method: passthrough\nslices:\n  - sources:\n    - {model: %s, layer_range: [0, 4]}\n"
             "  - sources:\n    - {model: %s, layer_range: [2, 5]}\n",
             a, b);
    write_text(tmp("pt.yaml"), yaml);
    snprintf(args, sizeof args, "--config %s -o %s --type Q8_0", tmp("pt.yaml"), tmp("pt.gguf"));
    merge_ok(args);
    gguf_file *f = gguf_open(tmp("pt.gguf"));
    assert_non_null(f);
    uint32_t n;
    assert_true(gguf_get_u32(f, "llama.block_count", &n));
    assert_int_equal(n, 7);
    assert_non_null(gguf_find_tensor(f, "blk.6.ffn_up.weight"));
    gguf_close(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 8 2>/dev/null", TUTTI_CLI, tmp("pt.gguf"));
    int st;
    char *out = run_cmd(cmd, &st);
    assert_int_equal(st, 0);
    assert_true(strlen(out) > 0);
    free(out);
}

static int setup(void **state) {
    (void)state;
    return merge_dir_make("/tmp/tutti-merge-test-XXXXXX");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        shared_unit_test(test_methods_vs_numpy),
        shared_unit_test(test_tied_untied),
        shared_unit_test(test_quantized_vs_llama_quantize),
        shared_unit_test(test_slerp_endpoints_colinear),
        shared_unit_test(test_density_one_is_task_arithmetic),
        shared_unit_test(test_merged_with_itself),
        cmocka_unit_test(test_dare_kept_fraction_and_seed),
        shared_unit_test(test_refusals),
        shared_unit_test(test_output_never_destroys),
        shared_unit_test(test_parameter_ranges_and_fallbacks),
        shared_unit_test(test_yaml_block_style),
        shared_unit_test(test_passthrough_runs),
    };
    /* TUTTI_TEST_FILTER=test_refusals runs one test (cmocka's pattern) */
    if (getenv("TUTTI_TEST_FILTER")) cmocka_set_test_filter(getenv("TUTTI_TEST_FILTER"));
    test_select_part();
    return cmocka_run_group_tests(tests, setup, merge_dir_remove);
}
