/* The drafting flags of `tutti generate` and `tutti run` (cli.h,
 * CLI_DRAFT_OPTS): the draft model given by file or by hub name, handed to
 * the library's generation loop (tutti_ensemble_set_draft), and the line
 * of the run summary that says how well it drafted. */
#include <stdio.h>

#include "cli/cli.h"

void cli_draft_init(cli_draft *d) {
    tutti_draft_params p = tutti_draft_default_params();
    *d = (cli_draft){.model = NULL, .n_max = p.n_max, .n_min = p.n_min, .p_min = p.p_min, .n_threads = 0};
}

int cli_draft_check(cli_draft *d) {
    bool given = cli_given("--draft-max") || cli_given("--draft-min") || cli_given("--draft-p-min") ||
                 cli_given("--threads-draft");
    if (!d->model && given)
        return cli_usage_error("--draft-max, --draft-min, --draft-p-min and -td need a draft model (-md FILE or "
                               "-hfd REPO[:QUANT])");
    if (d->n_min > d->n_max) return cli_usage_error("--draft-min %d exceeds --draft-max %d", d->n_min, d->n_max);
    return cli_resolve_model(&d->model);
}

int cli_draft_apply(tutti_ensemble *e, const cli_draft *d) {
    if (!d->model) return CLI_RUN;
    tutti_draft_params p = {
        .model_path = d->model, .n_max = d->n_max, .n_min = d->n_min, .p_min = d->p_min, .n_threads = d->n_threads};
    if (tutti_ensemble_set_draft(e, &p) < 0) return cli_error("%s", tutti_last_error());
    return CLI_RUN;
}

void cli_draft_report(const char *cmd, const cli_draft *d, const tutti_ensemble_stats *st) {
    if (!d->model) return;
    double acc = st->n_drafted ? (double)st->n_draft_accepted / (double)st->n_drafted : 0.0;
    double len = st->n_draft_rounds ? (double)st->n_drafted / st->n_draft_rounds : 0.0;
    cli_info("tutti %s: draft %s: %d rounds, %lld tokens drafted (%.2f per round), %lld accepted (%.1f%%); "
             "draft forward %lld tokens in %.3f s\n",
             cmd, d->model, st->n_draft_rounds, (long long)st->n_drafted, len, (long long)st->n_draft_accepted,
             100.0 * acc, (long long)st->n_draft_tokens, st->t_draft_s);
}
