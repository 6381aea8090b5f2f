/* `tutti serve`: the OpenAI-compatible HTTP server (src/server/).  All of
 * its flags go through the shared parser (opts.h), with the same names as
 * `tutti run` for the ensemble (--parallel counts slots, as in llama-server). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "cli/opts.h"
#include "server/server.h"

static const char *g_rules[5], *g_aligns[5];
/* /v1/embeddings' poolings, in llama.cpp's numbering from 1 (TUTTI_POOL_MEAN) */
static const char *const g_pools[] = {"mean", "cls", "last", NULL};

/* The API keys: --api-key KEY, else the lines of --api-key-file FILE (one
 * key per line; blank lines and '#' comments skipped), else the environment
 * variable TUTTI_API_KEY (as llama-server's LLAMA_API_KEY), so that a key
 * need not show in `ps`.  CLI_RUN or the exit status. */
#define MAX_KEYS 64
static char *g_keys[MAX_KEYS];

static int add_key(server_opts *o, const char *k, size_t n, const char *from) {
    while (n && (*k == ' ' || *k == '\t')) k++, n--;
    while (n && (k[n - 1] == ' ' || k[n - 1] == '\t' || k[n - 1] == '\r' || k[n - 1] == '\n')) n--;
    if (!n || *k == '#') return CLI_RUN;
    if (o->n_api_keys == MAX_KEYS) return cli_usage_error("%s: at most %d API keys", from, MAX_KEYS);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] < 0x21 || k[i] == 0x7f)
            return cli_usage_error("%s: an API key holds a space or a control character", from);
    if (!(g_keys[o->n_api_keys] = strndup(k, n))) return cli_error("out of memory");
    o->api_keys = g_keys;
    o->n_api_keys++;
    return CLI_RUN;
}

static int api_keys(server_opts *o, const char *key, const char *file) {
    if (key && file) return cli_usage_error("give --api-key or --api-key-file, not both");
    if (key)
        return *key ? add_key(o, key, strlen(key), "--api-key") : cli_usage_error("--api-key needs a non-empty key");
    if (file) {
        size_t n;
        char *t = cli_read_file(file, &n);
        if (!t) return 1;
        int r = CLI_RUN;
        for (char *l = t; r == CLI_RUN && l < t + n;) {
            char *e = memchr(l, '\n', (size_t)(t + n - l));
            size_t k = e ? (size_t)(e - l) : (size_t)(t + n - l);
            r = add_key(o, l, k, "--api-key-file");
            l += k + 1;
        }
        free(t);
        if (r == CLI_RUN && !o->n_api_keys) r = cli_usage_error("--api-key-file %s holds no key", file);
        return r;
    }
    const char *env = getenv("TUTTI_API_KEY");
    return env && *env ? add_key(o, env, strlen(env), "TUTTI_API_KEY") : CLI_RUN;
}

/* Parses argv into o with the shared parser (opts.h): CLI_RUN, or the exit
 * status (0 after --help/--version, 2 after a usage error). */
/* The defaults --help states (-1: not given). */
static void serve_opts_defaults(server_opts *o) {
    memset(o, 0, sizeof *o);
    o->rule = o->align = -1;
    o->prune = -1;
    o->adapt_alpha = o->route_tau = -1;
    o->select = -1;
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 1;
    o->cont_batching = true;
    o->n_ubatch = 512;
    o->pooling = -1;
    o->queue = 16;
    o->timeout_read = 5;
    o->timeout_head = 10;
    o->timeout_body = 60;
    o->max_conns = -1;
    o->max_conns_per_ip = 32;
    o->models_max = 4;
    o->n_ctx = CLI_CTX_UNSET;
}

static int serve_parse_args(int argc, char **argv, server_opts *o) {
    serve_opts_defaults(o);
    int32_t models_mem = 0;
    const char *api_key = NULL, *api_key_file = NULL;
    int32_t max_body = 1 << 20;
    for (int k = 0; k < 4; k++) {
        g_rules[k] = tutti_rule_name((tutti_fusion_rule)k);
        g_aligns[k] = tutti_align_name((tutti_align)k);
    }
    cli_strs models = {.n = 0};
    const char *split_counts = NULL, *split_member = NULL; /* --split-layers: NULL = off, "" = by memory */
    int32_t split_ub = 0;
    bool split_experts = false; /* --split-experts */
    cli_floats weights = {.n = 0}, temps = {.n = 0};
    cli_draft draft;
    cli_draft_init(&draft);
    const cli_opt opts[] = {
        CLI_SECTION("models"),
        CLI_STRS("-m,--model", "FILE", &models, "a member of 'default', also served alone (repeat)"),
        CLI_HF_OPTS(&models, CLI_T_STRS, 0),
        CLI_STR("-e,--ensemble", "FILE", &o->ens_file, "members of 'default' from an ensemble file", "none"),
        CLI_STR("--config", "FILE", &o->config, "JSON: more models, renames, named ensembles (docs/server.md)", "none"),
        CLI_STR("--models-dir", "DIR", &o->models_dir,
                "serve every .gguf under DIR by its file name, loaded at its first request", "none"),
        CLI_INT(
            "--models-max", "N", &o->models_max, 0, SRV_MAX_FILES,
            "--models-dir: models loaded at once; beyond, the least recently used\nidle one is unloaded (0 = no limit)",
            "4"),
        CLI_INT("--models-memory", "MIB", &models_mem, 0, 1 << 30,
                "--models-dir: MiB of loaded models' files; beyond, unload as --models-max\n(0 = no limit)", "0"),
        CLI_STR("--chat-template", "FILE", &o->chat_template_file,
                "Jinja chat template for every model (overrides theirs)", "the models' own"),
        CLI_FLOATS("-w,--weights", "W1,W2,...", &weights, -1e30, 1e30, "weights of 'default', one per member",
                   "uniform"),
        CLI_FLOATS("--temps", "T1,T2,...", &temps, -3e38, 3e38, "member temperatures of 'default', in [1e-6, 1e6]",
                   "1"),
        CLI_CHOICE("--rule", "RULE", &o->rule, g_rules, "mix | product | gate | contrastive", "mix"),
        CLI_CHOICE("--align", "ALIGN", &o->align, g_aligns, "auto | token | byte | span", "auto"),
        CLI_FLOAT("--beta", "X", &o->beta, 1e-6, 1, "contrastive plausibility cut", "0.1"),
        CLI_DOUBLE("--prune", "X", &o->prune, 0, 0.999999, "byte alignment: hypothesis pruning share", "1e-4"),
        CLI_INT("--max-hyps", "N", &o->max_hyps, 1, 4096, "byte alignment: hypotheses per member", "8"),
        ENS_WEIGHT_OPTS(&o->adapt, &o->adapt_alpha, &o->route, &o->route_tau, &o->select, &o->no_context),
        CLI_SECTION("server"),
        CLI_STR("--host", "ADDR", &o->host, "address to bind (loopback unless told otherwise)", NULL),
        CLI_INT("--port", "N", &o->port, 0, 65535, "TCP port; 0 = any free port (printed on stderr)", NULL),
        CLI_STR("--api-key", "KEY", &api_key,
                "require 'Authorization: Bearer KEY' (all but /health and CORS "
                "preflights)",
                "$TUTTI_API_KEY, else none"),
        CLI_STR("--api-key-file", "FILE", &api_key_file, "the API keys, one per line (not shown by ps)", "none"),
        CLI_INT("--parallel,-np", "N", &o->parallel, 1, 256, "slots generating at once (as llama-server)", NULL),
        CLI_INT("--queue", "N", &o->queue, 0, 1 << 16, "requests waiting for a slot before 503", NULL),
        CLI_INT("--max-body", "BYTES", &max_body, 64, 1 << 30, "request body limit", NULL),
        CLI_SECTION("connections (beyond the limits: 503; late requests: closed)"),
        CLI_INT("-to,--timeout", "S", &o->timeout_read, 1, 86400,
                "seconds a connection may stay silent between two reads or writes\n(also the keep-alive idle limit)",
                NULL),
        CLI_INT("--timeout-head", "S", &o->timeout_head, 1, 86400,
                "seconds for a request's head (request line and headers) from the\nconnection's start or the previous "
                "response",
                NULL),
        CLI_INT("--timeout-body", "S", &o->timeout_body, 1, 86400, "seconds for a request's body after its head", NULL),
        CLI_INT("--max-connections", "N", &o->max_conns, 1, 1 << 16, "connections at once", "parallel + queue + 64"),
        CLI_INT("--max-connections-per-ip", "N", &o->max_conns_per_ip, 0, 1 << 16,
                "connections at once from one client address (0 = no limit)", NULL),
        CLI_CTX_OPT(&o->n_ctx, " per member and slot"),
        CLI_INT("-t,--threads", "N", &o->n_threads, 1, CLI_MAX_THREADS,
                "threads of the forward passes (without continuous batching: per slot)",
                "cores (without: cores / slots)"),
        CLI_SECTION("continuous batching (README \"Continuous batching\")"),
        CLI_FLAG("-cb,--cont-batching", &o->cont_batching,
                 "one forward pass per model and step for every slot's pending tokens"),
        CLI_FLAG_OFF("-nocb,--no-cont-batching", &o->cont_batching, "each slot runs its own forward passes"),
        CLI_INT("-ub,--ubatch-size", "N", &o->n_ubatch, 1, 8192,
                "tokens per forward pass: a long prompt goes in chunks of this size", "512"),
        CLI_SECTION("embeddings (POST /v1/embeddings)"),
        CLI_CHOICE("--pooling", "TYPE", &o->pooling, g_pools, "mean | cls | last: one vector from the positions' ones",
                   "the GGUF's pooling_type, else mean"),
        CLI_SECTION("drafting (speculative decoding: every token-aligned model with the draft's vocabulary)"),
        CLI_DRAFT_OPTS(&draft),
        CLI_SECTION("models over MPI ranks (mpirun -np K tutti serve ...)"),
        CLI_SPLIT_OPTS(&split_counts, &split_ub, "members"),
        ENS_SPLIT_MEMBER_OPT(&split_member, "-m models"),
        CLI_SPLIT_EXPERTS_OPT(&split_experts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "serve",
        .usage = "(-m A.gguf | -hf REPO[:QUANT] [...] | -e ENSEMBLE | --config FILE | --models-dir DIR) [options]",
        .description =
            "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/embeddings,\n/v1/models, "
            "/health, /metrics. Model names: 'default' (the ensemble of every -m member, or of\n"
            "the -e file), every file alone under its name without .gguf, and the --config\n"
            "file's named ensembles. A -m may be a remote member's URL (docs/remote-members.md).\n"
            "The API key may also come from the environment variable TUTTI_API_KEY.\n"
            "SIGINT/SIGTERM stop it gracefully.",
        .opts = opts,
    };
    int r = cli_parse(&spec, argc, argv);
    if (r != CLI_RUN) return r;
    if (models.n > TUTTI_ENSEMBLE_MAX_MEMBERS) return cli_usage_error("at most %d -m", TUTTI_ENSEMBLE_MAX_MEMBERS);
    if ((r = cli_resolve_models(&models)) != CLI_RUN) return r;
    for (int i = 0; i < models.n; i++) o->models[o->n_models++] = models.v[i];
    if (weights.n > TUTTI_ENSEMBLE_MAX_MEMBERS || temps.n > TUTTI_ENSEMBLE_MAX_MEMBERS)
        return cli_usage_error("-w and --temps take at most %d values", TUTTI_ENSEMBLE_MAX_MEMBERS);
    memcpy(o->weights, weights.v, sizeof(float) * (size_t)weights.n);
    o->n_weights = weights.n;
    memcpy(o->temps, temps.v, sizeof(float) * (size_t)temps.n);
    o->n_temps = temps.n;
    o->max_body = (size_t)max_body;
    if (o->pooling >= 0) o->pooling += TUTTI_POOL_MEAN;
    if (o->max_conns < 0) o->max_conns = o->parallel + o->queue + 64;
    if ((r = api_keys(o, api_key, api_key_file)) != CLI_RUN) return r;
    if ((r = cli_draft_check(&draft)) != CLI_RUN) return r;
    o->draft = cli_draft_params(&draft);
    if ((r = ens_check_flags(&temps, cli_given("--adapt-alpha"), o->adapt_alpha, cli_given("--route-tau"), o->route_tau,
                             cli_given("--select"), o->select)) != CLI_RUN)
        return r;
    o->models_mem_mib = models_mem;
    if (!o->models_dir && (cli_given("--models-max") || cli_given("--models-memory")))
        return cli_usage_error("--models-max and --models-memory need --models-dir");
    if (!o->n_models && !o->ens_file && !o->config && !o->models_dir)
        return cli_usage_error(
            "no models: give -m MODEL.gguf (repeat), -e ENSEMBLE, --config FILE or --models-dir DIR");
    /* models split by layers over the MPI ranks: every ensemble member of
     * those files (the -m ones given by --split-member, else all) */
    if ((r = cli_split_check(split_counts, split_ub)) != CLI_RUN) return r;
    if (split_member && !split_counts) return cli_usage_error("--split-member needs --split-layers");
    if ((r = cli_split_experts_check(split_experts, split_counts, false)) != CLI_RUN) return r;
    if (split_counts) {
        const char *paths[TUTTI_ENSEMBLE_MAX_MEMBERS];
        int32_t n_paths = 0;
        if (split_member && !o->n_models) return cli_usage_error("--split-member numbers the -m models; give -m");
        if ((r = ens_split_members(split_member, o->models, o->n_models, paths, &n_paths)) != CLI_RUN) return r;
        if (tutti_mpi_split_members(split_counts, split_ub, paths, n_paths) < 0)
            return cli_usage_error("%s", tutti_last_error());
    }
    return CLI_RUN;
}

int cmd_serve(int argc, char **argv) {
    server_opts o;
    int r = serve_parse_args(argc, argv, &o);
    if (r != CLI_RUN) return r;
    return server_main(&o);
}
