/* tutti merge: mergekit's merge methods on GGUF files (src/merge).
 *
 *   tutti merge --config merge.yaml -o OUT.gguf [--type T]
 *   tutti merge -m A -m B --method slerp --t 0.5 -o OUT.gguf
 *
 * Flags through the shared parser (opts.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/opts.h"

#define MAX_MODELS 64

/* Output types --type accepts (the project's quantizers), then the
 * i-quants it names only to refuse them (N_WRITABLE: the first of those). */
static const char *const g_types[] = {"F32",  "F16",     "BF16",   "Q8_0",    "Q4_0",   "Q4_1",  "Q5_0",
                                      "Q5_1", "Q4_K",    "Q5_K",   "Q6_K",    "MXFP4",  "IQ1_S", "IQ1_M",
                                      "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ3_M",
                                      "IQ4_NL", "IQ4_XS", NULL};
#define N_WRITABLE 12
/* Numeric merge parameters of the command-line form (mergekit's names). */
static const char *const g_params[] = {"t", "density", "lambda", "epsilon", "gamma", "normalize", "rescale", "scale"};
#define N_PARAMS (int)(sizeof g_params / sizeof g_params[0])

typedef struct merge_args {
    const char *config, *out, *method, *base, *name;
    int type;          /* index in g_types, -1 = F16 (default) */
    cli_strs models;
    cli_floats weights;
    /* global numeric parameters of the command-line form: the given ones */
    const char *param_names[N_PARAMS];
    float param_values[N_PARAMS];
    int n_params;
    uint64_t seed;
    bool verbose;
} merge_args;

/* Parses argv into a with the shared parser; CLI_RUN, or the exit status
 * (0 after --help, 2 after a usage error). */
static int parse_args(int argc, char **argv, merge_args *a) {
    double pv[N_PARAMS];
    for (int k = 0; k < N_PARAMS; k++) pv[k] = NAN;
    a->type = -1;
    const cli_opt opts[] = {
        CLI_SECTION("configuration file"),
        CLI_STR("--config", "FILE", &a->config, "mergekit YAML configuration (merge_method, models/slices, ...)",
                "none"),
        CLI_STR("-o,--out", "FILE", &a->out, "the merged GGUF file (written whole or not at all: a temporary file\n"
                                             "renamed into place; - = stdout, streamed)", "none"),
        CLI_CHOICE("--type", "TYPE", &a->type, g_types,
                   "tensor type of the output: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,\n"
                   "Q5_K, Q6_K, MXFP4 (mixtures like Q4_K_M, and the i-quants IQ1_S..IQ4_XS, which need\n"
                   "an importance matrix: llama-quantize)",
                   "F16"),
        CLI_SEED("--seed", &a->seed, "seed of the random masks of dare_* and della* (same seed, same file)"),
        CLI_STR("--name", "NAME", &a->name, "general.name of the output", "the base model's"),
        CLI_FLAG("-v,--verbose", &a->verbose, "one line per tensor on stderr"),
        CLI_SECTION("command-line form (instead of --config)"),
        CLI_STRS("-m,--model", "FILE", &a->models, "a model to merge (repeat)"),
        CLI_HF_OPTS(&a->models, CLI_T_STRS, 0),
        CLI_STR("--method", "METHOD", &a->method,
                "linear, slerp, nuslerp, task_arithmetic, ties, dare_linear, dare_ties, della,\n"
                "della_linear, breadcrumbs, breadcrumbs_ties, model_stock, passthrough",
                "none"),
        CLI_STR("--base", "FILE", &a->base, "base_model (slerp: the t = 0 end; task vectors are taken from it)",
                "slerp: the first -m; others: none"),
        CLI_FLOATS("-w,--weights", "W1,W2,...", &a->weights, -1e6, 1e6, "weight of each -m model",
                   "linear/nuslerp: equal; task vectors: 1"),
        /* mergekit's ranges (merge_param_check in src/merge/config.c checks the same for --config) */
        CLI_DOUBLE("--t", "T", &pv[0], 0, 1, "slerp interpolation t in [0, 1] (0 = --base, 1 = the other)", "none"),
        CLI_DOUBLE("--density", "D", &pv[1], 0, 1, "ties/dare/della/breadcrumbs kept fraction in [0, 1]", "none"),
        CLI_DOUBLE("--lambda", "L", &pv[2], -1e6, 1e6, "task-vector scale", "none"),
        CLI_DOUBLE("--epsilon", "E", &pv[3], 0, 1,
                   "della's half-width of keep probabilities (density +- E inside (0, 1))", "none"),
        CLI_DOUBLE("--gamma", "G", &pv[4], 0, 1, "breadcrumbs' fraction of the largest values cut, in [0, 1]", "none"),
        CLI_DOUBLE("--normalize", "0|1", &pv[5], 0, 1, "divide by the sum of the weights", "per method"),
        CLI_DOUBLE("--rescale", "0|1", &pv[6], 0, 1, "dare: restore the task vector's L1 norm", "per method"),
        CLI_DOUBLE("--scale", "S", &pv[7], -1e6, 1e6, "passthrough scale", "none"),
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

int cmd_merge(int argc, char **argv) {
    merge_args a = {0};
    int st = parse_args(argc, argv, &a);
    if (st != CLI_RUN) return st;
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
