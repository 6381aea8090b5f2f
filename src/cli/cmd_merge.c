/* tutti merge: mergekit's merge methods on GGUF files (src/merge).
 *
 *   tutti merge --config merge.yaml -o OUT.gguf [--type T]
 *   tutti merge -m A -m B --method slerp --t 0.5 -o OUT.gguf
 *
 * All option parsing is in parse_args (one function, the shared flag helpers
 * of args.c) so that it ports to a common parser. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"

#define MAX_MODELS 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: tutti merge --config merge.yaml -o OUT.gguf [--type T] [--seed N] [--name NAME] [-v]\n"
            "       tutti merge -m A.gguf -m B.gguf [-m ...] --method METHOD [--base A.gguf]\n"
            "                   [--weights 0.5,0.5] [--t T] [--density D] [--lambda L] [--epsilon E]\n"
            "                   [--gamma G] [--normalize 0|1] [--rescale 0|1] -o OUT.gguf [--type T]\n"
            "Merges models of one architecture and one vocabulary into one GGUF file, with\n"
            "mergekit's configuration format and methods: linear, slerp, nuslerp, task_arithmetic,\n"
            "ties, dare_linear, dare_ties, della, della_linear, breadcrumbs, breadcrumbs_ties,\n"
            "model_stock, passthrough (see README.md).  Tensors are streamed one at a time.\n"
            "  --type T    F32, F16 (default), BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K\n"
            "  --seed N    seed of the random masks of dare_* and della* (same seed, same file)\n"
            "  --base M    base_model (slerp: the t = 0 end; task vectors are taken from it)\n");
}

typedef struct merge_args {
    const char *config, *out, *method, *base, *weights, *type, *name;
    const char *models[MAX_MODELS];
    int n_models;
    /* global numeric parameters of the command-line form, NAN when not given */
    const char *param_names[8];
    float param_values[8];
    int n_params;
    uint64_t seed;
    bool verbose, help;
} merge_args;

/* Parses argv into a; returns 0, or 2 after printing the usage error. */
static int parse_args(int argc, char **argv, merge_args *a) {
    static const char *const num_flags[] = {"--t", "--density", "--lambda", "--epsilon", "--gamma", "--normalize",
                                            "--rescale", "--scale"};
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        bool ok = true, matched = false;
        if (!strcmp(s, "--config") || !strcmp(s, "-c")) ok = cli_str(argc, argv, &i, &a->config), matched = true;
        else if (!strcmp(s, "-o") || !strcmp(s, "--out")) ok = cli_str(argc, argv, &i, &a->out), matched = true;
        else if (!strcmp(s, "--method")) ok = cli_str(argc, argv, &i, &a->method), matched = true;
        else if (!strcmp(s, "--base")) ok = cli_str(argc, argv, &i, &a->base), matched = true;
        else if (!strcmp(s, "--weights") || !strcmp(s, "-w")) ok = cli_str(argc, argv, &i, &a->weights), matched = true;
        else if (!strcmp(s, "--type")) ok = cli_str(argc, argv, &i, &a->type), matched = true;
        else if (!strcmp(s, "--name")) ok = cli_str(argc, argv, &i, &a->name), matched = true;
        else if (!strcmp(s, "--seed")) ok = cli_u64(argc, argv, &i, &a->seed), matched = true;
        else if (!strcmp(s, "-v") || !strcmp(s, "--verbose")) a->verbose = true, matched = true;
        else if (!strcmp(s, "-h") || !strcmp(s, "--help")) a->help = true, matched = true;
        else if (!strcmp(s, "-m") || !strcmp(s, "--model")) {
            matched = true;
            if (a->n_models == MAX_MODELS) {
                fprintf(stderr, "tutti merge: at most %d models\n", MAX_MODELS);
                return 2;
            }
            ok = cli_str(argc, argv, &i, &a->models[a->n_models]);
            if (ok) a->n_models++;
        } else {
            for (size_t k = 0; k < sizeof num_flags / sizeof *num_flags && !matched; k++) {
                if (strcmp(s, num_flags[k])) continue;
                matched = true;
                for (int j = 0; j < a->n_params; j++)
                    if (!strcmp(a->param_names[j], s + 2)) {
                        fprintf(stderr, "tutti merge: %s given twice\n", s);
                        return 2;
                    }
                a->param_names[a->n_params] = s + 2;
                ok = cli_float(argc, argv, &i, -1e6f, 1e6f, &a->param_values[a->n_params]);
                if (ok) a->n_params++;
            }
        }
        if (!matched) {
            fprintf(stderr, "tutti merge: unknown option '%s' (see tutti merge --help)\n", s);
            return 2;
        }
        if (!ok) return 2;
    }
    if (a->help) return 0;
    if (a->type) {
        static const char *const types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1",
                                            "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"};
        bool known = false;
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) known |= !strcasecmp(a->type, types[k]);
        if (!known) {
            fprintf(stderr, "tutti merge: --type must be one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                            "Q4_K, Q5_K, Q6_K, got '%s' (mixtures like Q4_K_M: llama-quantize)\n", a->type);
            return 2;
        }
    }
    if (!a->out) {
        fprintf(stderr, "tutti merge: need -o OUT.gguf\n");
        return 2;
    }
    if (!a->config == !a->n_models) {
        fprintf(stderr, "tutti merge: need either --config FILE or models (-m A -m B --method M)\n");
        return 2;
    }
    if (a->config && (a->method || a->base || a->weights || a->n_params)) {
        fprintf(stderr, "tutti merge: --method, --base, --weights and parameter flags belong to the -m form; "
                        "with --config the file says them\n");
        return 2;
    }
    if (a->n_models && !a->method) {
        fprintf(stderr, "tutti merge: -m needs --method (linear, slerp, ties, ...)\n");
        return 2;
    }
    return 0;
}

/* The configuration of the -m form; NULL after printing why (*status set). */
static tutti_merge_config *config_from_flags(const merge_args *a, int *status) {
    *status = 2;
    tutti_merge_config *c = tutti_merge_config_new(a->method);
    if (!c) {
        fprintf(stderr, "tutti merge: %s\n", tutti_last_error());
        return NULL;
    }
    double w[MAX_MODELS];
    for (int i = 0; i < MAX_MODELS; i++) w[i] = NAN;
    if (a->weights) {
        const char *p = a->weights;
        int n = 0;
        while (*p) {
            char *end;
            double v = strtod(p, &end);
            if (end == p || (*end && *end != ',') || n == MAX_MODELS || !isfinite(v)) {
                n = -1;
                break;
            }
            w[n++] = v;
            p = *end ? end + 1 : end;
        }
        if (n != a->n_models) {
            fprintf(stderr, "tutti merge: --weights needs %d comma-separated numbers (one per -m), got '%s'\n",
                    a->n_models, a->weights);
            tutti_merge_config_free(c);
            return NULL;
        }
    } else if (!strcmp(a->method, "linear") || !strcmp(a->method, "nuslerp")) {
        for (int i = 0; i < a->n_models; i++) w[i] = 1.0; /* equal weights */
    } else {
        /* task-vector methods: weight 1 for every model but the base */
        bool base_seen = false;
        for (int i = 0; i < a->n_models; i++) {
            bool is_base = !base_seen && a->base && !strcmp(a->base, a->models[i]);
            base_seen |= is_base;
            w[i] = is_base ? NAN : 1.0;
        }
    }
    for (int i = 0; i < a->n_models; i++)
        if (tutti_merge_config_add_model(c, a->models[i], w[i])) goto fail;
    const char *base = a->base;
    if (!base && !strcmp(a->method, "slerp")) base = a->models[0]; /* t = 0 is the first model */
    if (base && tutti_merge_config_set_base(c, base)) goto fail;
    for (int i = 0; i < a->n_params; i++)
        if (tutti_merge_config_set_param(c, a->param_names[i], a->param_values[i])) goto fail;
    return c;
fail:
    fprintf(stderr, "tutti merge: %s\n", tutti_last_error());
    tutti_merge_config_free(c);
    return NULL;
}

int cmd_merge(int argc, char **argv) {
    merge_args a = {0};
    int st = parse_args(argc, argv, &a);
    if (st) return st;
    if (a.help) {
        usage(stdout);
        return 0;
    }
    tutti_merge_config *c = NULL;
    if (a.config) {
        size_t len;
        char *text = cli_read_file(a.config, &len);
        if (!text) return 1;
        c = tutti_merge_config_parse(text, len);
        free(text);
        if (!c) {
            fprintf(stderr, "tutti merge: %s: %s\n", a.config, tutti_last_error());
            return 1;
        }
    } else if (!(c = config_from_flags(&a, &st))) {
        return st;
    }
    tutti_merge_params p = tutti_merge_default_params();
    p.type = a.type;
    p.seed = a.seed;
    p.name = a.name;
    p.verbose = a.verbose;
    double t0 = cli_now();
    int rc = tutti_merge(c, a.out, &p);
    tutti_merge_config_free(c);
    if (rc) {
        fprintf(stderr, "tutti merge: %s\n", tutti_last_error());
        return 1;
    }
    fprintf(stderr, "tutti merge: wrote %s in %.2f s\n", a.out, cli_now() - t0);
    return 0;
}
