/* `tutti bench`: prompt-processing and generation speed, measured the way
 * llama.cpp's llama-bench measures them, so the two can be put side by side
 * on the same GGUF file and thread count (bench/run.sh does that).
 *
 *   pp N  one batch of N random token ids (BOS first) from an empty KV
 *         cache; tokens/s = N / wall time of the eval.
 *   tg N  N single-token evals from an empty cache (each token fed back);
 *         tokens/s = N / total wall time.
 * Each test runs once as a warm-up, then -r times; the mean and standard
 * deviation of tokens/s are printed (llama-bench does the same).  The
 * session has n_ctx = pp + tg, like llama-bench's context.
 *
 * With --fused and several -m, it also times a fused generation of the
 * members (--align, default token: same vocabulary; MIX rule, greedy, up to
 * tg units; it may stop earlier at end of text) and compares its wall time
 * with the sum over members of their single-model greedy generation times
 * for the same prompt and the same number of tokens as the fused run
 * produced (byte/span alignment: as many tokens as each member ran in the
 * fused run), all after a warm-up, means of the repetitions.
 *
 * Peak RSS is the process's maximum resident set (getrusage), mapped weight
 * pages included, as for llama-bench when it mmaps the file. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "tutti.h"
#include "util/clock.h"
#include "util/path.h"

int tutti_cmd_bench(int argc, char **argv);

#define BENCH_MAX_MODELS 8

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

static uint64_t g_seed = 88172645463325252ULL;
static int32_t rand_id(int32_t n_vocab) {
    g_seed ^= g_seed << 13;
    g_seed ^= g_seed >> 7;
    g_seed ^= g_seed << 17;
    return (int32_t)(g_seed % (uint64_t)n_vocab);
}

typedef struct stat_acc {
    double v[64];
    int n;
} stat_acc;

static void stat_mean_sd(const stat_acc *s, double *mean, double *sd) {
    double m = 0, q = 0;
    for (int i = 0; i < s->n; i++) m += s->v[i];
    m /= s->n > 0 ? s->n : 1;
    for (int i = 0; i < s->n; i++) q += (s->v[i] - m) * (s->v[i] - m);
    *mean = m;
    *sd = s->n > 1 ? sqrt(q / (s->n - 1)) : 0;
}

/* One pp run: tokens/s, or < 0 on error. */
static double run_pp(tutti_session *s, const tutti_model *m, int n_pp, int32_t *ids) {
    const tutti_vocab *v = tutti_model_vocab(m);
    const int32_t n_vocab = tutti_model_n_vocab(m);
    for (int i = 0; i < n_pp; i++) ids[i] = rand_id(n_vocab);
    if (tutti_vocab_bos(v) >= 0) ids[0] = tutti_vocab_bos(v);
    if (tutti_session_rewind(s, 0) != TUTTI_OK) return -1;
    const double t0 = tutti_now_s();
    if (tutti_session_eval(s, ids, n_pp, NULL) != TUTTI_OK) return -1;
    return n_pp / (tutti_now_s() - t0);
}

static double run_tg(tutti_session *s, const tutti_model *m, int n_tg) {
    const tutti_vocab *v = tutti_model_vocab(m);
    const int32_t n_vocab = tutti_model_n_vocab(m);
    int32_t id = tutti_vocab_bos(v) >= 0 ? tutti_vocab_bos(v) : rand_id(n_vocab);
    if (tutti_session_rewind(s, 0) != TUTTI_OK) return -1;
    const double t0 = tutti_now_s();
    for (int i = 0; i < n_tg; i++) {
        if (tutti_session_eval(s, &id, 1, NULL) != TUTTI_OK) return -1;
        id = rand_id(n_vocab);
    }
    return n_tg / (tutti_now_s() - t0);
}

/* Greedy single-model generation of n tokens after a prompt (the single-
 * model counterpart of the fused run); returns wall seconds or < 0.  With
 * total, n_gen counts the prompt's tokens too (byte/span alignment: the
 * tokens the member ran in the fused run). */
static double run_single_gen(const tutti_model *m, int n_threads, const char *prompt, int n_gen, bool total) {
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = n_threads;
    sp.n_ctx = 512 + n_gen;
    tutti_session *s = tutti_session_new(m, &sp);
    if (!s) return -1;
    const tutti_vocab *v = tutti_model_vocab(m);
    int32_t ids[512];
    const int32_t n = tutti_tokenize(v, prompt, strlen(prompt), tutti_vocab_add_bos(v), false, ids, 512);
    double t = -1;
    if (total) n_gen = n_gen - n > 1 ? n_gen - n : 1;
    if (n > 0 && n + n_gen <= sp.n_ctx) {
        const double t0 = tutti_now_s();
        int ok = tutti_session_eval(s, ids, n, NULL) == TUTTI_OK;
        const int32_t n_vocab = tutti_model_n_vocab(m);
        for (int i = 0; ok && i < n_gen; i++) {
            const float *lg = tutti_session_logits(s);
            int32_t best = 0;
            for (int32_t j = 1; j < n_vocab; j++)
                if (lg[j] > lg[best]) best = j;
            ok = tutti_session_eval(s, &best, 1, NULL) == TUTTI_OK;
        }
        if (ok) t = tutti_now_s() - t0;
    }
    tutti_session_free(s);
    return t;
}

static double round3(double x) { return isfinite(x) ? round(x * 1e3) / 1e3 : x; }

/* One JSON object per line (cJSON escapes every string). */
static void print_json(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* The settings of one bench run. */
typedef struct bench_cfg {
    int32_t n_threads, n_pp, n_tg, reps, parallel;
    int align;
    bool json;
    const char *kpath; /* kernel path in use */
} bench_cfg;

/* The fused run's figures: its length is the length of the single-model
 * runs that follow. */
typedef struct fused_result {
    int units;
    int64_t member_tokens[BENCH_MAX_MODELS];
    double mean, sd, fwd, fusion;
} fused_result;

static const char *const fuse_prompt = "Once upon a time";

/* Fused generation of the members (MIX, greedy, up to n_tg units), a
 * warm-up then reps runs.  0, or 1 after the message. */
static int bench_fused(const bench_cfg *cfg, const char *const *paths, int n_models, fused_result *out) {
    tutti_member_desc md[BENCH_MAX_MODELS];
    for (int mi = 0; mi < n_models; mi++)
        md[mi] = (tutti_member_desc){.model_path = paths[mi], .weight = NAN, .temp = NAN};
    tutti_ensemble_params ep = tutti_ensemble_default_params();
    ep.members = md;
    ep.n_members = n_models;
    ep.rule = TUTTI_RULE_MIX;
    ep.align = (tutti_align)cfg->align;
    ep.n_threads = cfg->n_threads;
    ep.n_ctx = 512 + cfg->n_tg;
    ep.parallel = cfg->parallel;
    tutti_ensemble *ens = tutti_ensemble_new(&ep);
    if (!ens) return cli_library_error();
    tutti_sampler_params smp = tutti_sampler_default_params();
    smp.temp = 0;
    tutti_mask mask = {0};
    mask.max_len = cfg->n_tg;
    stat_acc st = {.n = 0};
    tutti_ensemble_stats es = {0};
    for (int r = -1; r < cfg->reps; r++) {
        if (tutti_ensemble_generate(ens, fuse_prompt, strlen(fuse_prompt), &smp, &mask, NULL, NULL, &es) != TUTTI_OK) {
            cli_error("fused generation: %s", tutti_last_error());
            tutti_ensemble_free(ens);
            return 1;
        }
        if (r >= 0) {
            st.v[st.n++] = es.t_total_s;
            out->fwd += es.t_forward_s / cfg->reps;
            out->fusion += es.t_fusion_s / cfg->reps;
        }
    }
    tutti_ensemble_free(ens);
    out->units = es.n_units > 0 ? es.n_units : 1;
    for (int mi = 0; mi < n_models; mi++) out->member_tokens[mi] = es.n_member_tokens[mi];
    stat_mean_sd(&st, &out->mean, &out->sd);
    return 0;
}

/* One line (table row or JSON object) of a pp or tg test. */
static void print_test(const bench_cfg *cfg, const char *path, int test, int n, const stat_acc *st) {
    double mean, sd;
    stat_mean_sd(st, &mean, &sd);
    if (cfg->json) {
        char test_name[32];
        snprintf(test_name, sizeof test_name, "%s%d", test == 0 ? "pp" : "tg", n);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", tutti_base_name(path));
        cJSON_AddStringToObject(o, "kernels", cfg->kpath);
        cJSON_AddNumberToObject(o, "threads", cfg->n_threads);
        cJSON_AddStringToObject(o, "test", test_name);
        cJSON_AddNumberToObject(o, "tps", round3(mean));
        cJSON_AddNumberToObject(o, "tps_sd", round3(sd));
        cJSON *sa = cJSON_AddArrayToObject(o, "samples");
        for (int k = 0; k < st->n; k++) cJSON_AddItemToArray(sa, cJSON_CreateNumber(round3(st->v[k])));
        cJSON_AddNumberToObject(o, "peak_rss_mib", round3(peak_rss_mib()));
        print_json(o);
    } else
        printf("| %s | %s | %d | %s%d | %.2f ± %.2f | %.1f |\n", tutti_base_name(path), cfg->kpath, cfg->n_threads,
               test == 0 ? "pp" : "tg", n, mean, sd, peak_rss_mib());
    fflush(stdout);
}

/* The pp and tg tests of one loaded model.  0, or 1 after the message. */
static int bench_model(const bench_cfg *cfg, const char *path, const tutti_model *m) {
    tutti_session_params sp = tutti_session_default_params();
    sp.n_threads = cfg->n_threads;
    sp.n_ctx = cfg->n_pp + cfg->n_tg > 0 ? cfg->n_pp + cfg->n_tg : 16;
    tutti_session *s = tutti_session_new(m, &sp);
    if (!s) return cli_error("%s: %s", path, tutti_last_error());
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(cfg->n_pp > 0 ? cfg->n_pp : 1));
    int rc = ids ? 0 : cli_error("out of memory");
    for (int test = 0; test < 2 && rc == 0; test++) {
        const int n = test == 0 ? cfg->n_pp : cfg->n_tg;
        if (n == 0) continue;
        stat_acc st = {.n = 0};
        for (int r = -1; r < cfg->reps && rc == 0; r++) { /* r = -1: warm-up */
            const double tps = test == 0 ? run_pp(s, m, n, ids) : run_tg(s, m, n);
            if (tps < 0) rc = cli_error("%s: %s", path, tutti_last_error());
            else if (r >= 0) st.v[st.n++] = tps;
        }
        if (rc == 0) print_test(cfg, path, test, n, &st);
    }
    free(ids);
    tutti_session_free(s);
    return rc;
}

/* Mean seconds of m's single-model greedy generation as long as the fused
 * run (its tokens, or in byte/span alignment the tokens m ran there), after
 * a warm-up; < 0 after the message. */
static double bench_single(const bench_cfg *cfg, const char *path, const tutti_model *m, const fused_result *f,
                           int mi) {
    double sum = 0;
    for (int r = -1; r < cfg->reps; r++) {
        const double t = cfg->align == TUTTI_ALIGN_TOKEN
                             ? run_single_gen(m, cfg->n_threads, fuse_prompt, f->units, false)
                             : run_single_gen(m, cfg->n_threads, fuse_prompt, (int)f->member_tokens[mi], true);
        if (t < 0) return cli_error("%s: %s", path, tutti_last_error()), -1;
        if (r >= 0) sum += t;
    }
    return sum / cfg->reps;
}

static void print_fused(const bench_cfg *cfg, int n_models, const fused_result *f, double sum_single) {
    const char *align = tutti_align_name((tutti_align)cfg->align);
    if (cfg->json) {
        char test_name[32];
        snprintf(test_name, sizeof test_name, "fused-tg%d", cfg->n_tg);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "test", test_name);
        cJSON_AddNumberToObject(o, "members", n_models);
        cJSON_AddStringToObject(o, "align", align);
        cJSON_AddNumberToObject(o, "threads", cfg->n_threads);
        cJSON_AddNumberToObject(o, "parallel", cfg->parallel);
        cJSON_AddNumberToObject(o, "fused_s", f->mean);
        cJSON_AddNumberToObject(o, "fused_sd", f->sd);
        cJSON_AddNumberToObject(o, "fused_forward_s", f->fwd);
        cJSON_AddNumberToObject(o, "fused_fusion_s", f->fusion);
        cJSON_AddNumberToObject(o, "sum_single_s", sum_single);
        cJSON_AddNumberToObject(o, "ratio", round3(f->mean / sum_single));
        cJSON_AddNumberToObject(o, "units", f->units);
        cJSON_AddNumberToObject(o, "peak_rss_mib", round3(peak_rss_mib()));
        print_json(o);
    } else
        printf("\n%s-aligned fused generation, %d members, %d %ss (prompt \"%s\"), %d threads, parallel=%d:\n"
               "  fused %.3f ± %.3f s (forward passes %.3f s, fusion/sampling %.3f s), sum of the members'\n"
               "  single-model runs of the same length %.3f s, ratio %.3f\n",
               align, n_models, f->units, cfg->align == TUTTI_ALIGN_TOKEN ? "token" : "byte", fuse_prompt,
               cfg->n_threads, cfg->parallel, f->mean, f->sd, f->fwd, f->fusion, sum_single, f->mean / sum_single);
}

int tutti_cmd_bench(int argc, char **argv) {
    cli_strs models = {.n = 0};
    bench_cfg cfg = {.n_threads = 2, .n_pp = 512, .n_tg = 128, .reps = 3, .align = TUTTI_ALIGN_TOKEN};
    bool fused = false;
    static const char *aligns[5];
    for (int k = 0; k < 4; k++) aligns[k] = tutti_align_name((tutti_align)k);
    const cli_opt opts[] = {
        CLI_STRS("-m,--model", "FILE", &models, "a GGUF model (repeat to bench several; up to 8)"),
        CLI_HF_OPTS(&models, CLI_T_STRS, 0),
        CLI_INT("-t,--threads", "N", &cfg.n_threads, 1, CLI_MAX_THREADS, "worker threads", NULL),
        CLI_INT("-p,--n-prompt", "N", &cfg.n_pp, 0, 65536, "prompt-processing test: one batch of N tokens, 0 = skip",
                NULL),
        CLI_INT("-n,--n-gen", "N", &cfg.n_tg, 0, 65536, "generation test: N single-token evals, 0 = skip", NULL),
        CLI_INT("-r,--repetitions", "N", &cfg.reps, 1, 64, "repetitions after one warm-up", NULL),
        CLI_FLAG("--fused", &fused,
                 "also time fused generation of all -m members against the sum\n"
                 "of their single-model generation times"),
        CLI_CHOICE("--align", "ALIGN", &cfg.align, aligns, "--fused: auto | token | byte | span", NULL),
        CLI_INT("--parallel", "N", &cfg.parallel, 0, 2, "--fused: 0 default, 1 members in turn, 2 concurrently", NULL),
        CLI_FLAG("--json", &cfg.json, "one JSON object per line instead of a table"),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "bench",
        .usage = "-m MODEL.gguf [-m MODEL2.gguf ...] [options]",
        .description = "Prompt-processing and generation speed (tokens/s) and peak RSS, measured as llama-bench\n"
                       "does (same flag names: -p, -n, -r, -t).",
        .opts = opts,
        .epilog = "TUTTI_KERNELS=scalar|avx2|avx512|neon forces a kernel path.",
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (models.n == 0) return cli_usage_error("need -m MODEL or -hf REPO[:QUANT] (see tutti bench --help)");
    if (models.n > BENCH_MAX_MODELS) return cli_usage_error("at most %d models", BENCH_MAX_MODELS);
    if (fused && models.n < 2) return cli_usage_error("--fused needs at least two -m members");
    if ((pr = cli_resolve_models(&models)) != CLI_RUN) return pr;
    int n_models = models.n;
    const char *const *model_paths = models.v;
    tutti_system_info sys;
    if (tutti_system_info_get(&sys) != TUTTI_OK) return cli_error("%s", tutti_last_error());
    cfg.kpath = sys.kernels;
    if (!cfg.json) printf("| model | kernels | threads | test | t/s | peak RSS MiB |\n|---|---|---:|---|---:|---:|\n");
    /* fused generation first: its length (it may stop at an end-of-text
     * token) is the length of the single-model runs below */
    fused_result fr = {0};
    int frc = fused && n_models >= 2 && cfg.n_tg > 0 ? bench_fused(&cfg, model_paths, n_models, &fr) : 0;
    if (frc != 0) return frc; /* 2: flags the models do not allow */
    /* every model stays loaded to the end (peak RSS counts them all, as it did) */
    tutti_model *loaded[BENCH_MAX_MODELS] = {0};
    int rc = 0;
    double sum_single = 0;
    for (int mi = 0; mi < n_models && rc == 0; mi++) {
        tutti_model_params mp = tutti_model_default_params();
        if (!(loaded[mi] = tutti_model_load(model_paths[mi], &mp))) {
            rc = cli_error("%s", tutti_last_error());
            break;
        }
        rc = bench_model(&cfg, model_paths[mi], loaded[mi]);
        if (rc == 0 && fr.units > 0) { /* same prompt, same number of tokens as the fused run */
            double t = bench_single(&cfg, model_paths[mi], loaded[mi], &fr, mi);
            if (t < 0) rc = 1;
            else sum_single += t;
        }
    }
    for (int mi = 0; mi < n_models; mi++) tutti_model_free(loaded[mi]);
    if (rc == 0 && fr.units > 0) print_fused(&cfg, n_models, &fr, sum_single);
    return rc;
}
