/* `tutti run -e FILE` where FILE is a JSON config with "pipelines" (the
 * same file `tutti serve --config` reads: "models", "ensembles",
 * "pipelines"): runs the file's first pipeline on the prompt through the
 * server's registry and pipeline runner (server_run_pipeline), so that a
 * step's model name means what it means to the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "cli/run_pipeline.h"
#include "server/server.h"

bool cli_is_pipeline_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false; /* the ensemble file reader says why */
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {
    }
    fclose(f);
    return c == '{'; /* an ensemble file's first line is a path, a comment or a keyword */
}

static int interrupted(void *u) {
    (void)u;
    return cli_interrupted();
}

/* flags that mean something for one ensemble only: a pipeline's steps say
 * it themselves */
static int refuse_flags(void) {
    static const char *const per_step[] = {
        "--chat",        "--system", "--stop",      "--allow",        "--forbid", "--grammar",        "--grammar-file",
        "--json-schema", "--json",   "-w",          "--temps",        "--rule",   "--align",          "--adapt",
        "--adapt-alpha", "--route",  "--route-tau", "--split-layers", "--keep",   "--verbose-prompt", "--ignore-eos"};
    for (size_t k = 0; k < sizeof per_step / sizeof *per_step; k++)
        if (cli_given(per_step[k]))
            return cli_usage_error("%s does not apply to a pipeline file (-e): give it in the step of the config's "
                                   "pipeline (docs/pipelines.md)",
                                   per_step[k]);
    return CLI_RUN;
}

int cli_run_pipeline(ens_args *a, const cli_sampling *cs, const char *prompt, const char *prompt_file, bool escape,
                     int32_t n_gen) {
    int rc = refuse_flags();
    if (rc != CLI_RUN || (rc = cli_resolve_models(&a->models)) != CLI_RUN) return rc;
    server_opts o;
    memset(&o, 0, sizeof o);
    for (int i = 0; i < a->models.n && i < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) o.models[o.n_models++] = a->models.v[i];
    o.config = a->ens_file;
    o.rule = o.align = -1;
    o.prune = o.adapt_alpha = o.select = -1; /* -1: not given */
    o.n_ctx = a->n_ctx == CLI_CTX_UNSET ? -1 : a->n_ctx;
    o.n_threads = a->n_threads;
    size_t plen = 0;
    char *text = cli_prompt_text(prompt, prompt_file, escape, &plen);
    if (!text) return 1;
    tutti_sampler_params sp = cs->sp;
    sp.seed = cli_seed_resolve(cs->sp.seed);
    char err[2048];
    cli_catch_sigint();
    rc = server_run_pipeline(&o, text, plen, &sp, n_gen, cli_quiet, interrupted, err, sizeof err);
    free(text);
    if (rc < 0 && !cli_interrupted()) return cli_error("%s", err);
    return cli_interrupted() ? CLI_EXIT_INTERRUPTED : 0;
}
