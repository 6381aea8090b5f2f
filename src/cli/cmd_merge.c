/* tutti merge: mergekit's merge methods on GGUF files (src/merge).
 *
 *   tutti merge --config merge.yaml -o OUT.gguf [--type T]
 *   tutti merge -m A -m B --method slerp --t 0.5 -o OUT.gguf
 *   tutti merge --search --text DEV.txt [--text DEV2.txt ... [--objective mean|max]] --base BASE
 *               -m A -m B [--method M] [--layer-groups N] [--evals N] [--seed S] -o OUT.gguf --yaml OUT.yaml
 *
 * Flags through the shared parser (opts.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/opts.h"

#define MAX_MODELS 64

/* Output types --type accepts (the project's quantizers), then the
 * i-quants it names only to refuse them (N_WRITABLE: the first of those). */
static const char *const g_types[] = {"F32",   "F16",   "BF16",    "Q8_0",  "Q4_0",  "Q4_1",   "Q5_0",    "Q5_1",
                                      "Q4_K",  "Q5_K",  "Q6_K",    "MXFP4", "IQ1_S", "IQ1_M",  "IQ2_XXS", "IQ2_XS",
                                      "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ3_M", "IQ4_NL", "IQ4_XS",  NULL};
#define N_WRITABLE 12
/* Numeric merge parameters of the command-line form (mergekit's names). */
static const char *const g_params[] = {"t",         "density", "lambda", "epsilon",    "gamma",
                                       "normalize", "rescale", "scale",  "select_topk"};
#define N_PARAMS (int)(sizeof g_params / sizeof g_params[0])
/* --objective over several --text files (TUTTI_SEARCH_MEAN_RATIO, _MAX_RATIO) */
static const char *const g_objectives[] = {"mean", "max", "mean-best", "max-best", NULL};
#define MAX_TEXTS 16

typedef struct merge_args {
    const char *config, *out, *method, *base, *name;
    int type; /* index in g_types, -1 = F16 (default) */
    cli_strs models;
    cli_floats weights;
    /* global numeric parameters of the command-line form: the given ones */
    const char *param_names[N_PARAMS];
    float param_values[N_PARAMS];
    int n_params;
    uint64_t seed;
    bool verbose;
    /* --search */
    bool search;
    cli_strs texts;
    const char *choices, *yaml;
    int objective; /* index in g_objectives, -1 = not given (mean) */
    int32_t layer_groups, evals, n_threads;
} merge_args;

/* The flags of --search, after parsing. */
static int check_search_args(const merge_args *a) {
    if (a->config) return cli_usage_error("--search builds its own configuration: drop --config");
    if (!a->models.n) return cli_usage_error("--search needs the models to merge (-m A -m B, --base BASE)");
    if (!a->out || !a->yaml) return cli_usage_error("--search needs -o OUT.gguf and --yaml OUT.yaml");
    if (!a->texts.n == !a->choices)
        return cli_usage_error("--search needs one score: --text FILE (repeatable) or --choices FILE.jsonl");
    if (a->texts.n > MAX_TEXTS) return cli_usage_error("--text: at most %d files", MAX_TEXTS);
    if (a->objective >= 0 && a->texts.n < 2)
        return cli_usage_error("--objective weighs several --text files against each other: give two or more");
    if (a->weights.n || a->n_params)
        return cli_usage_error("--search chooses the weights and parameters: drop --weights and the parameter flags");
    if (a->name) return cli_usage_error("--name: not with --search (the YAML alone must reproduce the file)");
    if (a->type >= 0 && a->type > 2)
        return cli_usage_error("--type %s: --search writes F32, F16 or BF16 (the YAML's out_dtype); quantize the "
                               "result with tutti merge --config OUT.yaml --type %s",
                               g_types[a->type], g_types[a->type]);
    if (!strcmp(a->out, a->yaml)) return cli_usage_error("-o and --yaml name the same file");
    return CLI_RUN;
}

/* Parses argv into a with the shared parser; CLI_RUN, or the exit status
 * (0 after --help, 2 after a usage error). */
static int parse_args(int argc, char **argv, merge_args *a) {
    double pv[N_PARAMS];
    for (int k = 0; k < N_PARAMS; k++) pv[k] = NAN;
    a->type = -1;
    a->objective = -1;
    const cli_opt opts[] = {
        CLI_SECTION("configuration file"),
        CLI_STR("--config", "FILE", &a->config, "mergekit YAML configuration (merge_method, models/slices, ...)",
                "none"),
        CLI_STR("-o,--out", "FILE", &a->out,
                "the merged GGUF file (written whole or not at all: a temporary file\n"
                "renamed into place; - = stdout, streamed)",
                "none"),
        CLI_CHOICE("--type", "TYPE", &a->type, g_types,
                   "tensor type of the output: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,\n"
                   "Q5_K, Q6_K, MXFP4 (mixtures like Q4_K_M, and the i-quants IQ1_S..IQ4_XS, which need\n"
                   "an importance matrix: llama-quantize)",
                   "F16"),
        CLI_SEED("--seed", &a->seed,
                 "seed of the random masks of dare_* and della* (same seed, same file);\n"
                 "with --search: of the search (the masks then use seed 0)"),
        CLI_STR("--name", "NAME", &a->name, "general.name of the output", "the base model's"),
        CLI_FLAG("-v,--verbose", &a->verbose, "one line per tensor on stderr"),
        CLI_SECTION("command-line form (instead of --config)"),
        CLI_STRS("-m,--model", "FILE", &a->models, "a model to merge (repeat)"),
        CLI_HF_OPTS(&a->models, CLI_T_STRS, 0),
        CLI_STR("--method", "METHOD", &a->method,
                "linear, slerp, nuslerp, task_arithmetic, ties, dare_linear, dare_ties, della,\n"
                "della_linear, breadcrumbs, breadcrumbs_ties, model_stock, passthrough, sce, karcher,\n"
                "multislerp, nearswap, arcee_fusion",
                "none"),
        CLI_STR("--base", "FILE", &a->base, "base_model (slerp: the t = 0 end; task vectors are taken from it)",
                "slerp: the first -m; others: none"),
        CLI_FLOATS("-w,--weights", "W1,W2,...", &a->weights, -1e6, 1e6, "weight of each -m model",
                   "linear/nuslerp: equal; task vectors: 1"),
        /* mergekit's ranges (merge_param_check in src/merge/config.c checks the same for --config) */
        CLI_DOUBLE("--t", "T", &pv[0], 0, 1,
                   "slerp interpolation t in [0, 1] (0 = --base, 1 = the other);\n"
                   "nearswap's sameness threshold",
                   "none"),
        CLI_DOUBLE("--density", "D", &pv[1], 0, 1, "ties/dare/della/breadcrumbs kept fraction in [0, 1]", "none"),
        CLI_DOUBLE("--lambda", "L", &pv[2], -1e6, 1e6, "task-vector scale", "none"),
        CLI_DOUBLE("--epsilon", "E", &pv[3], 0, 1,
                   "della's half-width of keep probabilities (density +- E inside (0, 1))", "none"),
        CLI_DOUBLE("--gamma", "G", &pv[4], 0, 1, "breadcrumbs' fraction of the largest values cut, in [0, 1]", "none"),
        CLI_DOUBLE("--normalize", "0|1", &pv[5], 0, 1, "divide by the sum of the weights", "per method"),
        CLI_DOUBLE("--rescale", "0|1", &pv[6], 0, 1, "dare: restore the task vector's L1 norm", "per method"),
        CLI_DOUBLE("--scale", "S", &pv[7], -1e6, 1e6, "passthrough scale", "none"),
        CLI_DOUBLE("--select-topk", "F", &pv[8], 0, 1, "sce: fraction of the elements kept (largest variance)", "1"),
        CLI_SECTION("evolutionary search of the merge (with -m, --base, --method; docs/merge-study.md)"),
        CLI_FLAG("--search", &a->search,
                 "CMA-ES over the method's weights (and densities, t, select_topk) per model and\n"
                 "layer group, each candidate merged in memory and scored; writes the best as -o\n"
                 "and its mergekit configuration as --yaml (tutti merge --config gives the same file)"),
        CLI_STRS("--text", "FILE", &a->texts,
                 "score: bits per byte of the candidate on this text (lower is better); repeat for\n"
                 "several tasks (2 to 16, e.g. a mixed text's domains), scored by --objective"),
        CLI_CHOICE("--objective", "OBJ", &a->objective, g_objectives,
                   "with several --text: each text's bits per byte divided by the start point's\n"
                   "(every gene 0.5) on it, then the mean of these ratios (mean), or their max (max,\n"
                   "the worst text); mean-best, max-best: divided by the lowest bits per byte of the\n"
                   "input models (--base, -m) on that text instead",
                   "mean"),
        CLI_STR("--choices", "FILE.jsonl", &a->choices,
                "score: multiple-choice accuracy on these items (as tutti eval --choices)", "none"),
        CLI_INT("--layer-groups", "N", &a->layer_groups, 1, 64, "contiguous layer groups with their own parameters",
                "1"),
        CLI_INT("--evals", "N", &a->evals, 1, 1000000, "candidates scored (the start point, every gene 0.5, included)",
                "100"),
        CLI_STR("--yaml", "FILE", &a->yaml, "the best candidate's mergekit configuration", "none"),
        CLI_THREADS_OPT(&a->n_threads),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "merge",
        .usage = "(--config merge.yaml | -m A.gguf -m B.gguf [-m ...] --method METHOD) -o OUT.gguf [options]",
        .description = "Merges models of one architecture and one vocabulary into one GGUF file, with\n"
                       "mergekit's configuration format and methods (see docs/merge-study.md). Tensors\n"
                       "are streamed one at a time, any input type, output through tutti's quantizers.",
        .opts = opts,
    };
    int r = cli_parse(&spec, argc, argv);
    if (r != CLI_RUN) return r;
    for (int k = 0; k < N_PARAMS; k++)
        if (!isnan(pv[k])) a->param_names[a->n_params] = g_params[k], a->param_values[a->n_params++] = (float)pv[k];
    if (a->search) return check_search_args(a);
    if (a->texts.n || a->choices || a->yaml || a->layer_groups || a->evals || a->objective >= 0)
        return cli_usage_error("--text, --objective, --choices, --yaml, --layer-groups and --evals belong to --search");
    if (a->type >= N_WRITABLE)
        return cli_usage_error("--type %s: i-quants are fitted with an importance matrix, which a merge does not "
                               "have; merge to F16, then run llama-imatrix and llama-quantize --imatrix",
                               g_types[a->type]);
    if (!a->out) return cli_usage_error("need -o OUT.gguf");
    if ((r = cli_output_check("-o", a->out, CLI_OUT_BINARY)) != CLI_RUN) return r;
    if (!a->config == !a->models.n)
        return cli_usage_error("need either --config FILE or models (-m A -m B --method M)");
    if (a->config && (a->method || a->base || a->weights.n || a->n_params))
        return cli_usage_error("--method, --base, --weights and parameter flags belong to the -m form; "
                               "with --config the file says them");
    if (a->models.n && !a->method) return cli_usage_error("-m needs --method (linear, slerp, ties, ...)");
    if (a->weights.n && a->weights.n != a->models.n)
        return cli_usage_error("--weights needs %d comma-separated numbers (one per -m), got %d", a->models.n,
                               a->weights.n);
    /* -hf models, and hf:// in --base (a --config file's are resolved by the library) */
    if ((r = cli_resolve_models(&a->models)) != CLI_RUN) return r;
    return cli_resolve_model(&a->base);
}

/* The configuration of the -m form; NULL after printing why (*status set). */
static tutti_merge_config *config_from_flags(const merge_args *a, int *status) {
    *status = 2;
    tutti_merge_config *c = tutti_merge_config_new(a->method);
    if (!c) {
        cli_error("%s", tutti_last_error());
        return NULL;
    }
    double w[MAX_MODELS];
    for (int i = 0; i < MAX_MODELS; i++) w[i] = NAN;
    if (a->weights.n) {
        for (int i = 0; i < a->weights.n; i++) w[i] = a->weights.v[i];
    } else if (!strcmp(a->method, "linear") || !strcmp(a->method, "nuslerp")) {
        for (int i = 0; i < a->models.n; i++) w[i] = 1.0; /* equal weights */
    } else {
        /* task-vector methods: weight 1 for every model but the base */
        bool base_seen = false;
        for (int i = 0; i < a->models.n; i++) {
            bool is_base = !base_seen && a->base && !strcmp(a->base, a->models.v[i]);
            base_seen |= is_base;
            w[i] = is_base ? NAN : 1.0;
        }
    }
    for (int i = 0; i < a->models.n; i++)
        if (tutti_merge_config_add_model(c, a->models.v[i], w[i])) goto fail;
    const char *base = a->base;
    if (!base && !strcmp(a->method, "slerp")) base = a->models.v[0]; /* t = 0 is the first model */
    if (base && tutti_merge_config_set_base(c, base)) goto fail;
    for (int i = 0; i < a->n_params; i++)
        if (tutti_merge_config_set_param(c, a->param_names[i], a->param_values[i])) goto fail;
    return c;
fail:
    cli_error("%s", tutti_last_error());
    tutti_merge_config_free(c);
    return NULL;
}

/* Fallback types and other news from the merge, as warnings. */
static void notice_cb(const char *msg, void *user) {
    (void)user;
    cli_warn("%s", msg);
}

static void search_progress(const char *line, void *user) {
    (void)user;
    cli_info("%s\n", line);
}

/* Writes text to path; 0, or 1 after printing why. */
static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return cli_error("cannot write %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len;
    if (fclose(f) != 0) ok = false;
    if (!ok) return cli_error("cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* Appends to buf[cap] at *len (truncating); a path's control bytes become
 * '?' so that a name cannot end the YAML comment line it is written on. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, const char *path, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, path);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0) *len += (size_t)k < cap - *len ? (size_t)k : cap - *len - 1;
    for (const char *c = path; c && *c && *len + 1 < cap; c++) buf[(*len)++] = (unsigned char)*c < 0x20 ? '?' : *c;
    buf[*len < cap ? *len : cap - 1] = 0;
}

/* The YAML's comment lines: how it was searched and the scores. */
static char *search_header(const merge_args *a, const tutti_merge_search_params *sp, double score, const double *best,
                           const double *start, const double *ref) {
    bool vs_best = a->objective >= 2;
    size_t cap = 1024, len = 0;
    for (int i = 0; i < a->texts.n; i++) cap += strlen(a->texts.v[i]) + 96;
    if (a->choices) cap += strlen(a->choices);
    char *h = malloc(cap);
    if (!h) return NULL;
    h[0] = 0;
    put(h, cap, &len,
        "# tutti merge --search: CMA-ES over %s's parameters, %d layer group%s, %d evaluations, seed %llu\n", NULL,
        sp->method, sp->layer_groups, sp->layer_groups > 1 ? "s" : "", sp->evals, (unsigned long long)sp->seed);
    if (a->texts.n > 1) {
        put(h, cap, &len, "# best: %.6f, the %s over %d texts of bits per byte / the %s\n", NULL, score,
            a->objective % 2 ? "max" : "mean", a->texts.n,
            vs_best ? "best input model's" : "start point's (every gene 0.5)");
        for (int i = 0; i < a->texts.n; i++) {
            put(h, cap, &len, "# text %d: %.6f bits per byte (start %.6f", NULL, i + 1, best[i], start[i]);
            if (vs_best) put(h, cap, &len, ", best input %.6f", NULL, ref[i]);
            put(h, cap, &len, ") on ", a->texts.v[i]);
            put(h, cap, &len, "\n", NULL);
        }
    } else {
        put(h, cap, &len, "# best: %.4f %s on ", a->texts.n ? a->texts.v[0] : a->choices, score,
            a->texts.n ? "bits per byte" : "accuracy");
        put(h, cap, &len, "\n", NULL);
    }
    return h;
}

/* --search: the best configuration found, as --yaml, and its merge, as -o,
 * made from the very text written (so --config --yaml gives the same bytes). */
static int run_search(const merge_args *a) {
    size_t lens[MAX_TEXTS] = {0};
    char *texts[MAX_TEXTS] = {0}, *body = NULL, *yaml = NULL, *head = NULL;
    double best[MAX_TEXTS], start[MAX_TEXTS], ref[MAX_TEXTS];
    cli_choice_file cf = {0};
    tutti_merge_config *c = NULL;
    int rc = 1;
    for (int i = 0; i < a->texts.n; i++)
        if (!(texts[i] = cli_read_file(a->texts.v[i], &lens[i]))) goto done;
    if (a->choices && cli_choice_file_read(a->choices, &cf)) goto done;
    tutti_merge_search_params sp = tutti_merge_search_default_params();
    if (a->method) sp.method = a->method;
    sp.base = a->base;
    sp.models = a->models.v;
    sp.n_models = a->models.n;
    if (a->layer_groups) sp.layer_groups = a->layer_groups;
    if (a->evals) sp.evals = a->evals;
    sp.seed = a->seed;
    if (a->texts.n == 1) {
        sp.text = texts[0];
        sp.text_len = lens[0];
    } else if (a->texts.n > 1) {
        sp.texts = (const char *const *)texts;
        sp.text_lens = lens;
        sp.n_texts = a->texts.n;
        sp.objective = a->objective > 0 ? a->objective : TUTTI_SEARCH_MEAN_RATIO; /* g_objectives' order */
        sp.best_bpb = best;
        sp.start_bpb = start;
        sp.ref_bpb = ref;
    }
    sp.items = cf.n ? cf.items : NULL;
    sp.n_items = cf.n;
    sp.type = a->type >= 0 ? g_types[a->type] : "F16";
    sp.n_threads = a->n_threads;
    sp.progress = search_progress;
    double t0 = cli_now(), score = NAN;
    body = tutti_merge_search(&sp, &score);
    if (!body) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    head = search_header(a, &sp, score, best, start, ref);
    yaml = head ? malloc(strlen(head) + strlen(body) + 1) : NULL;
    if (!yaml) {
        cli_error("out of memory");
        goto done;
    }
    strcat(strcpy(yaml, head), body);
    if (write_text(a->yaml, yaml)) goto done;
    if (!(c = tutti_merge_config_parse(yaml, strlen(yaml)))) {
        cli_error("%s: %s", a->yaml, tutti_last_error());
        goto done;
    }
    tutti_merge_params p = tutti_merge_default_params();
    p.verbose = a->verbose;
    p.notice = notice_cb;
    if (tutti_merge(c, a->out, &p)) {
        cli_error("%s", tutti_last_error());
        goto done;
    }
    cli_info("tutti merge: best %.4f %s; wrote %s and %s in %.1f s\n", score,
             a->texts.n > 1 ? (a->objective % 2 ? "max ratio" : "mean ratio")
             : a->texts.n   ? "bits per byte"
                            : "accuracy",
             a->yaml, a->out, cli_now() - t0);
    rc = 0;
done:
    tutti_merge_config_free(c);
    cli_choice_file_free(&cf);
    for (int i = 0; i < a->texts.n; i++) free(texts[i]);
    free(body), free(yaml), free(head);
    return rc;
}

int cmd_merge(int argc, char **argv) {
    merge_args a = {0};
    int st = parse_args(argc, argv, &a);
    if (st != CLI_RUN) return st;
    if (a.search) return run_search(&a);
    tutti_merge_config *c = NULL;
    if (a.config) {
        size_t len;
        char *text = cli_read_file(a.config, &len);
        if (!text) return 1;
        c = tutti_merge_config_parse(text, len);
        free(text);
        if (!c) {
            cli_error("%s: %s", a.config, tutti_last_error());
            return 1;
        }
    } else if (!(c = config_from_flags(&a, &st))) {
        return st;
    }
    tutti_merge_params p = tutti_merge_default_params();
    p.type = a.type >= 0 ? g_types[a.type] : NULL;
    p.seed = a.seed;
    p.name = a.name;
    p.verbose = a.verbose;
    p.notice = notice_cb;
    double t0 = cli_now();
    bool to_stdout = !strcmp(a.out, "-");
    int rc = to_stdout ? tutti_merge_stream(c, stdout, &p) : tutti_merge(c, a.out, &p);
    if (to_stdout && fflush(stdout) != 0 && rc == 0) rc = tutti_set_error("cannot write to stdout");
    tutti_merge_config_free(c);
    if (rc) {
        cli_error("%s", tutti_last_error());
        return 1;
    }
    cli_info("tutti merge: wrote %s in %.2f s\n", to_stdout ? "stdout" : a.out, cli_now() - t0);
    return 0;
}
