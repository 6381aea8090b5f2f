/* The drafting flags of `tutti generate` and `tutti run` (cli.h,
 * CLI_DRAFT_OPTS): the draft model given by file or by hub name, handed to
 * the library's generation loop (tutti_ensemble_set_draft), and the line
 * of the run summary that says how well it drafted. */
#include <stdio.h>

#include "cli/cli.h"

const char *const cli_spec_types[] = {"none", "draft-simple", "ngram-simple", NULL};

void cli_draft_init(cli_draft *d) {
    tutti_draft_params p = tutti_draft_default_params();
    *d = (cli_draft){.model = NULL,
                     .n_max = p.n_max,
                     .n_min = p.n_min,
                     .p_min = p.p_min,
                     .n_threads = 0,
                     .ngram_n = 12,
                     .ngram_m = 48}; /* llama.cpp 0.7.0's ngram-simple sizes */
}

int cli_draft_check(cli_draft *d) {
    bool given = cli_given("--draft-max") || cli_given("--draft-min") || cli_given("--draft-p-min") ||
                 cli_given("--threads-draft");
    bool ngram = cli_given("--spec-ngram-simple-size-n") || cli_given("--spec-ngram-simple-size-m");
    if (d->spec_type == 2) { /* prompt lookup: no model */
        if (d->model) return cli_usage_error("--spec-type ngram-simple drafts without a model: drop -md/-hfd");
        if (cli_given("--draft-max") || cli_given("--draft-p-min") || cli_given("--threads-draft"))
            return cli_usage_error("--draft-max, --draft-p-min and -td are a draft model's; ngram-simple drafts "
                                   "--spec-ngram-simple-size-m tokens at most");
        if (d->n_min > d->ngram_m)
            return cli_usage_error("--draft-min %d exceeds --spec-ngram-simple-size-m %d", d->n_min, d->ngram_m);
        return CLI_RUN;
    }
    if (ngram) return cli_usage_error("--spec-ngram-simple-size-n/-m need --spec-type ngram-simple");
    if (d->spec_type == 1 && !d->model) return cli_usage_error("--spec-type draft-simple needs -md FILE or -hfd");
    if (d->spec_type == 0 && cli_given("--spec-type") && d->model)
        return cli_usage_error("--spec-type none and a draft model: drop one of them");
    if (!d->model && given)
        return cli_usage_error("--draft-max, --draft-min, --draft-p-min and -td need a draft model (-md FILE or "
                               "-hfd REPO[:QUANT]) or --spec-type ngram-simple");
    if (d->n_min > d->n_max) return cli_usage_error("--draft-min %d exceeds --draft-max %d", d->n_min, d->n_max);
    return cli_resolve_model(&d->model);
}

tutti_draft_params cli_draft_params(const cli_draft *d) {
    tutti_draft_params p = {0};
    if (!d->model && d->spec_type != 2) return p;
    p = (tutti_draft_params){
        .model_path = d->model, .n_max = d->n_max, .n_min = d->n_min, .p_min = d->p_min, .n_threads = d->n_threads};
    if (d->spec_type == 2) p.lookup_n = d->ngram_n, p.n_max = d->ngram_m;
    return p;
}

int cli_draft_apply(tutti_ensemble *e, const cli_draft *d) {
    tutti_draft_params p = cli_draft_params(d);
    if (!p.model_path && p.lookup_n <= 0) return CLI_RUN; /* no draft */
    if (tutti_ensemble_set_draft(e, &p) < 0) return cli_error("%s", tutti_last_error());
    return CLI_RUN;
}

void cli_draft_report(const char *cmd, const cli_draft *d, const tutti_ensemble_stats *st, const char *unit) {
    if (!d->model && d->spec_type != 2) return;
    double acc = st->n_drafted ? (double)st->n_draft_accepted / (double)st->n_drafted : 0.0;
    double len = st->n_draft_rounds ? (double)st->n_drafted / st->n_draft_rounds : 0.0;
    char what[1200];
    if (d->model) snprintf(what, sizeof what, "%s", d->model);
    else snprintf(what, sizeof what, "ngram-simple (n %d)", d->ngram_n);
    cli_info("tutti %s: draft %s: %d rounds, %lld %ss drafted (%.2f per round), %lld accepted (%.1f%%); "
             "draft forward %lld tokens in %.3f s\n",
             cmd, what, st->n_draft_rounds, (long long)st->n_drafted, unit, len, (long long)st->n_draft_accepted,
             100.0 * acc, (long long)st->n_draft_tokens, st->t_draft_s);
}
