/* `tutti serve`: the OpenAI-compatible HTTP server (src/server/).  All of
 * its flags are parsed in serve_parse_args, with the same names as
 * `tutti run` for the ensemble. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tutti serve [-m A.gguf ...] [-e ENSEMBLE] [--config FILE] [options]\n"
            "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models,\n"
            "/health, /metrics.  Model names: 'default' (the ensemble of every -m member, or of\n"
            "the -e file), every file alone under its name without .gguf, and the --config\n"
            "file's named ensembles.\n"
            "  -m, --model FILE.gguf   a member (repeat)\n"
            "  -e, --ensemble FILE     members from an ensemble file\n"
            "  -w W1,W2,...            weights of 'default' (one per member)\n"
            "  --temps T1,T2,...       member temperatures of 'default'\n"
            "  --rule R                mix | product | gate | contrastive (default mix)\n"
            "  --align A               auto | token | byte | span (default auto)\n"
            "  --beta X, --prune X, --max-hyps N   as tutti run\n"
            "  --config FILE           JSON: more models, renames, named ensembles (README)\n"
            "  --chat-template FILE    Jinja chat template for every model (overrides theirs)\n"
            "  --host ADDR             address to bind (default 127.0.0.1: loopback only)\n"
            "  --port N                port (default 8080; 0 = any free port, printed on stderr)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' (all but /health)\n"
            "  --parallel N            slots generating at once (default 1)\n"
            "  --queue N               requests waiting for a slot before 503 (default 16)\n"
            "  --max-body N            request body limit in bytes (default 1048576)\n"
            "  -c, --ctx N             context per member and slot in tokens\n"
            "  -t, --threads N         threads per slot (default: cores / slots)\n");
}

static int float_list(const char *flag, const char *s, float *out) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *e;
        errno = 0;
        double v = strtod(p, &e);
        if (e == p || errno || (*e && *e != ',') || !isfinite(v) || n == TUTTI_ENSEMBLE_MAX_MEMBERS) {
            fprintf(stderr, "tutti serve: %s: \"%s\" is not a list of at most %d finite numbers\n", flag, s,
                    TUTTI_ENSEMBLE_MAX_MEMBERS);
            return -1;
        }
        out[n++] = (float)v;
        p = *e ? e + 1 : e;
    }
    return n;
}

/* 0 ok, 1 --help printed, 2 usage error (message printed). */
static int serve_parse_args(int argc, char **argv, server_opts *o) {
    memset(o, 0, sizeof *o);
    o->rule = o->align = -1;
    o->prune = -1;
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 1;
    o->queue = 16;
    o->max_body = 1 << 20;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        int32_t k;
        float f;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!cli_str(argc, argv, &i, &v)) return 2;
            if (o->n_models == TUTTI_ENSEMBLE_MAX_MEMBERS) {
                fprintf(stderr, "tutti serve: at most %d -m\n", TUTTI_ENSEMBLE_MAX_MEMBERS);
                return 2;
            }
            o->models[o->n_models++] = v;
        } else if (!strcmp(a, "-e") || !strcmp(a, "--ensemble")) {
            if (!cli_str(argc, argv, &i, &o->ens_file)) return 2;
        } else if (!strcmp(a, "-w") || !strcmp(a, "--weights")) {
            if (!cli_str(argc, argv, &i, &v) || (o->n_weights = float_list(a, v, o->weights)) < 0) return 2;
        } else if (!strcmp(a, "--temps")) {
            if (!cli_str(argc, argv, &i, &v) || (o->n_temps = float_list(a, v, o->temps)) < 0) return 2;
        } else if (!strcmp(a, "--rule")) {
            if (!cli_str(argc, argv, &i, &v)) return 2;
            if ((o->rule = tutti_rule_parse(v)) < 0) {
                fprintf(stderr, "tutti serve: --rule: \"%s\" is not one of mix, product, gate, contrastive\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--align")) {
            if (!cli_str(argc, argv, &i, &v)) return 2;
            if ((o->align = tutti_align_parse(v)) < 0) {
                fprintf(stderr, "tutti serve: --align: \"%s\" is not one of auto, token, byte, span\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--beta")) {
            if (!cli_float(argc, argv, &i, 1e-6f, 1.0f, &o->beta)) return 2;
        } else if (!strcmp(a, "--prune")) {
            if (!cli_float(argc, argv, &i, 0.0f, 1.0f, &f)) return 2;
            o->prune = f;
        } else if (!strcmp(a, "--max-hyps")) {
            if (!cli_int(argc, argv, &i, 1, 4096, &k)) return 2;
            o->max_hyps = k;
        } else if (!strcmp(a, "--config")) {
            if (!cli_str(argc, argv, &i, &o->config)) return 2;
        } else if (!strcmp(a, "--chat-template")) {
            if (!cli_str(argc, argv, &i, &o->chat_template_file)) return 2;
        } else if (!strcmp(a, "--host")) {
            if (!cli_str(argc, argv, &i, &o->host)) return 2;
        } else if (!strcmp(a, "--port")) {
            if (!cli_int(argc, argv, &i, 0, 65535, &k)) return 2;
            o->port = k;
        } else if (!strcmp(a, "--api-key")) {
            if (!cli_str(argc, argv, &i, &o->api_key)) return 2;
            if (!o->api_key[0]) {
                fprintf(stderr, "tutti serve: --api-key needs a non-empty key\n");
                return 2;
            }
        } else if (!strcmp(a, "--parallel")) {
            if (!cli_int(argc, argv, &i, 1, 256, &k)) return 2;
            o->parallel = k;
        } else if (!strcmp(a, "--queue")) {
            if (!cli_int(argc, argv, &i, 0, 1 << 16, &k)) return 2;
            o->queue = k;
        } else if (!strcmp(a, "--max-body")) {
            if (!cli_int(argc, argv, &i, 64, 1 << 30, &k)) return 2;
            o->max_body = (size_t)k;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (!cli_int(argc, argv, &i, 0, 1 << 20, &k)) return 2;
            o->n_ctx = k;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(argc, argv, &i, 1, CLI_MAX_THREADS, &k)) return 2;
            o->n_threads = k;
        } else {
            fprintf(stderr, "tutti serve: unknown option %s (see tutti serve --help)\n", a);
            return 2;
        }
    }
    if (!o->n_models && !o->ens_file && !o->config) {
        fprintf(stderr, "tutti serve: no models: give -m MODEL.gguf (repeat), -e ENSEMBLE or --config FILE\n");
        return 2;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    server_opts o;
    int r = serve_parse_args(argc, argv, &o);
    if (r) return r == 1 ? 0 : 2;
    return server_main(&o);
}
