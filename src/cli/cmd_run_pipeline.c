/* `tutti run -e FILE` where FILE is a JSON config with "pipelines" (the
 * same file `tutti serve --config` reads: "models", "ensembles",
 * "pipelines"): runs the file's first pipeline on the prompt.  The output
 * step's text goes to stdout as it is generated; every step's counts and
 * times, and the run's wall time against the sum of the steps' times, go to
 * stderr.  The models and ensembles are the server's registry
 * (src/server/registry.c), so a step's model name means what it means to
 * the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "cli/run_pipeline.h"
#include "pipeline/pipeline.h"
#include "server/pipeline_srv.h"
#include "server/server.h"

bool cli_is_pipeline_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false; /* the ensemble file reader says why */
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
    fclose(f);
    return c == '{'; /* an ensemble file's first line is a path, a comment or a keyword */
}

static int write_out(const char *b, size_t n, void *u) {
    (void)u;
    fwrite(b, 1, n, stdout);
    fflush(stdout);
    return 0;
}

static int interrupted(void *u) {
    (void)u;
    return cli_interrupted();
}

/* flags that mean something for one ensemble only: a pipeline's steps say
 * it themselves */
static int refuse_flags(void) {
    static const char *const per_step[] = {"--chat", "--system", "--stop", "--allow", "--forbid", "--grammar",
                                           "--grammar-file", "--json-schema", "--json", "-w", "--temps", "--rule",
                                           "--align", "--adapt", "--adapt-alpha", "--route", "--route-tau",
                                           "--split-layers", "--keep", "--verbose-prompt", "--ignore-eos"};
    for (size_t k = 0; k < sizeof per_step / sizeof *per_step; k++)
        if (cli_given(per_step[k]))
            return cli_usage_error("%s does not apply to a pipeline file (-e): give it in the step of the config's "
                                   "pipeline (README \"Pipelines and mixture-of-agents\")", per_step[k]);
    return CLI_RUN;
}

static void print_steps(const pl_pipeline *p, const pl_result *r) {
    for (int k = 0; k < p->n_steps; k++) {
        const pl_step_usage *u = &r->usage[k];
        if (!u->ran) {
            cli_info("  step %-16s model %-20s did not run\n", p->steps[k].name, p->steps[k].model);
            continue;
        }
        cli_info("  step %-16s model %-20s %5d prompt tokens, %5d %ss, from %.3f s to %.3f s (%.3f s)%s\n",
                 p->steps[k].name, p->steps[k].model, u->prompt_tokens, u->completion_units, u->unit, u->start_s,
                 u->end_s, u->end_s - u->start_s, k == p->output ? " [output]" : "");
    }
    cli_info("pipeline '%s': %d steps in %.3f s of wall time; the steps' times add up to %.3f s\n", p->name,
             p->n_steps, r->wall_s, r->sum_s);
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
    o.prune = o.adapt_alpha = -1;
    o.n_ctx = a->n_ctx == CLI_CTX_UNSET ? -1 : a->n_ctx;
    size_t plen = 0;
    char *text = cli_prompt_text(prompt, prompt_file, escape, &plen);
    if (!text) return 1;
    srv_registry reg;
    char err[2048];
    int st = srv_registry_plan(&reg, &o, err, sizeof err) < 0 ? 1 : srv_registry_load(&reg, err, sizeof err) < 0 ? 1 : 0;
    const pl_pipeline *p = st ? NULL : srv_pipeline_first(&reg);
    if (st || !p) {
        free(text);
        srv_registry_free(&reg);
        return cli_error("-e %s: %s", a->ens_file, st ? err : "the config has no pipelines");
    }
    char *messages = malloc(plen + 7);
    if (messages) memcpy(messages, "user: ", 6), memcpy(messages + 6, text, plen), messages[plen + 6] = 0;
    srv_pipe_models pm = {.reg = &reg, .n_threads = a->n_threads};
    pl_backend b = {.open = srv_pipeline_open_model, .user = &pm};
    pl_run_opts ro = {.input = text, .input_len = plen, .messages = messages, .messages_len = plen + 6, .sp = cs->sp,
                      .max_tokens = n_gen, .on_output = write_out, .should_stop = interrupted};
    ro.sp.seed = cli_seed_resolve(cs->sp.seed);
    pl_result r;
    cli_catch_sigint();
    rc = messages ? pl_run(p, &b, &ro, &r, err, sizeof err) : (snprintf(err, sizeof err, "out of memory"), -1);
    fflush(stdout);
    if (messages) {
        cli_info("\n");
        print_steps(p, &r);
        pl_result_free(&r);
    }
    if (rc < 0 && !cli_interrupted()) cli_error("%s", err);
    free(messages);
    free(text);
    srv_registry_free(&reg);
    return cli_interrupted() ? CLI_EXIT_INTERRUPTED : rc < 0 ? 1 : 0;
}
