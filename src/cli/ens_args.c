/* The ensemble flags shared by `tutti run`, `eval`, `fit` (ens_args.h):
 * one flag table, the checks of what they give, and the ensemble they
 * build. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "tutti.h"

/* the rules, then "auto" (fit only: ens_args.rule_auto) */
#define ENS_RULE_AUTO 4
static const char *g_rules[6], *g_aligns[5];

const char ens_file_help[] = ENS_FILE_HELP;

void ens_args_init(ens_args *a) {
    memset(a, 0, sizeof *a);
    a->status = 1;
    a->rule = a->align = -1;
    a->prune = -1;
    a->adapt_alpha = -1;
    a->route_tau = -1;
    a->select = -1;
    a->select = -1;
    a->n_ctx = CLI_CTX_UNSET;
    for (int k = 0; k < 4; k++) {
        g_rules[k] = tutti_rule_name((tutti_fusion_rule)k);
        g_aligns[k] = tutti_align_name((tutti_align)k);
    }
    g_rules[ENS_RULE_AUTO] = "auto";
    const cli_opt t[] = {
        CLI_SECTION("ensemble"),
        CLI_STRS("-m,--model", "FILE", &a->models, "a member's GGUF file (repeat: one -m per member)"),
        CLI_HF_OPTS(&a->models, CLI_T_STRS, 0),
        CLI_STR("-e,--ensemble", "FILE", &a->ens_file, "members from an ensemble file (format below)", "none"),
        CLI_FLOATS("-w,--weights", "W1,W2,...", &a->weights, -1e30, 1e30, "member weights, one per member", "uniform"),
        CLI_FLOATS("--temps", "T1,T2,...", &a->temps, -FLT_MAX, FLT_MAX,
                   "member temperatures tau_i in [1e-6, 1e6], one per member", "1"),
        CLI_CHOICE("--rule", "RULE", &a->rule, g_rules,
                   "mix | product | gate | contrastive (fit: also auto, the best on held-out text)",
                   "the ensemble file's, else mix"),
        CLI_CHOICE("--align", "ALIGN", &a->align, g_aligns,
                   "auto | token | byte | span (auto: token if the vocabularies\nare identical, else byte)",
                   "the ensemble file's, else auto"),
        CLI_THREADS_OPT(&a->n_threads),
        CLI_INT("--parallel", "N", &a->parallel, 0, 2, "0 default, 1 members one after the other, 2 concurrently",
                NULL),
        CLI_CTX_OPT(&a->n_ctx, " per member"),
        CLI_DOUBLE("--prune", "X", &a->prune, 0, 0.999999, "byte alignment: hypothesis pruning share, 0 = exact",
                   "1e-4"),
        CLI_INT("--max-hyps", "N", &a->max_hyps, 1, 4096, "byte alignment: hypotheses per member", "8"),
        CLI_FLOAT("--beta", "X", &a->beta, 1e-6, 1, "contrastive plausibility cut", "0.1"),
        ENS_WEIGHT_OPTS(&a->adapt, &a->adapt_alpha, &a->route, &a->route_tau, &a->select, &a->no_context),
        CLI_SECTION("members over MPI ranks (mpirun -np K tutti CMD ...)"),
        CLI_SPLIT_OPTS(&a->split_counts, &a->split_ub, "members"),
        ENS_SPLIT_MEMBER_OPT(&a->split_member, "members"),
        CLI_SPLIT_EXPERTS_OPT(&a->split_experts),
        CLI_END,
    };
    _Static_assert(sizeof t <= sizeof a->opts, "ens_args.opts is too small for the table");
    memcpy(a->opts, t, sizeof t);
}

int ens_split_members(const char *list, const char *const *members, int n, const char **paths, int32_t *n_paths) {
    *n_paths = 0;
    if (!list) return CLI_RUN;
    for (const char *p = list;;) {
        char *e;
        long i = strtol(p, &e, 10);
        if (e == p || (*e && *e != ',') || i < 1 || i > n)
            return cli_usage_error("--split-member %s: expected comma-separated member numbers in [1, %d]", list, n);
        if (!strncmp(members[i - 1], "http://", 7) || !strncmp(members[i - 1], "https://", 8))
            return cli_usage_error("--split-member %ld: member %ld (%s) is a remote member, which cannot be split", i,
                                   i, members[i - 1]);
        if (*n_paths < TUTTI_ENSEMBLE_MAX_MEMBERS) paths[(*n_paths)++] = members[i - 1];
        if (!*e) break;
        p = e + 1;
    }
    return CLI_RUN;
}

void ens_args_free(ens_args *a) { tutti_ensemble_file_free(a->file); }

int ens_check_flags(const cli_floats *temps, bool adapt_given, double alpha, bool route_given, double tau,
                    bool select_given, double select) {
    for (int i = 0; i < temps->n; i++)
        if (tutti_check_temp(i + 1, temps->v[i]) < 0) return cli_usage_error("--temps: %s", tutti_last_error());
    if (adapt_given && tutti_check_adapt(alpha) < 0) return cli_usage_error("--adapt-alpha: %s", tutti_last_error());
    if (route_given && tutti_check_route(tau) < 0) return cli_usage_error("--route-tau: %s", tutti_last_error());
    if (select_given && (select < 0 || tutti_check_select(select) < 0))
        return cli_usage_error("--select: %s", select < 0 ? "the threshold must be >= 0 nats" : tutti_last_error());
    return CLI_RUN;
}

/* The settings as the ensemble will get them (file, -m, then the flags),
 * through the library's validator, so that a bad value is a usage error
 * with the message an ensemble file or the server gives. */
static int ens_check_settings(const ens_args *a, int n) {
    int r = ens_check_flags(&a->temps, cli_given("--adapt-alpha"), a->adapt_alpha, cli_given("--route-tau"),
                            a->route_tau, cli_given("--select"), a->select);
    if (r != CLI_RUN) return r;
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int k = 0;
    for (int i = 0; a->file && i < a->file->n_members && k < n; i++) w[k++] = a->file->members[i].weight;
    while (k < n) w[k++] = NAN;
    for (int i = 0; i < a->weights.n && i < n; i++) w[i] = a->weights.v[i];
    int rule = a->rule >= 0 && a->rule != ENS_RULE_AUTO ? a->rule
               : a->file && a->file->rule >= 0          ? a->file->rule
                                                        : TUTTI_RULE_MIX;
    if (tutti_check_weights(w, n, (tutti_fusion_rule)rule) < 0)
        return cli_usage_error("%s%s", a->weights.n ? "-w: " : "", tutti_last_error());
    return CLI_RUN;
}

int ens_args_check(ens_args *a) {
    if (a->rule == ENS_RULE_AUTO && !a->rule_auto)
        return cli_usage_error("--rule auto is for tutti fit (it writes the rule it chose into the ensemble file)");
    int n = a->models.n;
    if (a->ens_file) {
        if (!(a->file = tutti_ensemble_file_read(a->ens_file))) return cli_error("%s", tutti_last_error());
        n += a->file->n_members;
    }
    if (n == 0)
        return cli_usage_error(
            "no members: give -m MODEL.gguf or -hf REPO[:QUANT] (one per member) or -e ENSEMBLE_FILE");
    int r = cli_resolve_models(&a->models);
    for (int i = 0; r == CLI_RUN && a->file && i < a->file->n_members; i++)
        r = cli_resolve_owned((char **)&a->file->members[i].model_path);
    if (r != CLI_RUN) return r;
    if (n > TUTTI_ENSEMBLE_MAX_MEMBERS) return cli_usage_error("%d members; at most %d", n, TUTTI_ENSEMBLE_MAX_MEMBERS);
    if (a->weights.n && a->weights.n != n)
        return cli_usage_error("-w gives %d weight%s but the ensemble has %d member%s", a->weights.n,
                               a->weights.n == 1 ? "" : "s", n, n == 1 ? "" : "s");
    if (a->temps.n && a->temps.n != n)
        return cli_usage_error("--temps gives %d temperature%s but the ensemble has %d member%s", a->temps.n,
                               a->temps.n == 1 ? "" : "s", n, n == 1 ? "" : "s");
    r = ens_check_settings(a, n);
    if (r != CLI_RUN) return r;
    /* members split by layers over the MPI ranks (member_split.c) */
    r = cli_split_check(a->split_counts, a->split_ub);
    if (r != CLI_RUN) return r;
    if (a->split_member && !a->split_counts) return cli_usage_error("--split-member needs --split-layers");
    if ((r = cli_split_experts_check(a->split_experts, a->split_counts, false)) != CLI_RUN) return r;
    if (a->split_counts) {
        const char *members[TUTTI_ENSEMBLE_MAX_MEMBERS], *paths[TUTTI_ENSEMBLE_MAX_MEMBERS];
        int m = 0;
        for (int i = 0; a->file && i < a->file->n_members; i++) members[m++] = a->file->members[i].model_path;
        for (int i = 0; i < a->models.n; i++) members[m++] = a->models.v[i];
        int32_t n_paths = 0;
        if ((r = ens_split_members(a->split_member, members, m, paths, &n_paths)) != CLI_RUN) return r;
        if (tutti_mpi_split_members(a->split_counts, a->split_ub, paths, n_paths) < 0)
            return cli_usage_error("%s", tutti_last_error());
    }
    return CLI_RUN;
}

tutti_ensemble *ens_args_build(ens_args *a, const char *cmd) {
    int n = 0;
    int rule = a->rule == ENS_RULE_AUTO ? -1 : a->rule, align = a->align; /* auto: fit chooses */
    (void)cmd;     /* messages carry the command's name (cli_cmd) */
    if (a->file) { /* read by ens_args_check */
        for (int i = 0; i < a->file->n_members && n < TUTTI_ENSEMBLE_MAX_MEMBERS; i++)
            a->desc[n++] = a->file->members[i];
        if (rule < 0) rule = a->file->rule;
        if (align < 0) align = a->file->align;
    }
    for (int i = 0; i < a->models.n && n < TUTTI_ENSEMBLE_MAX_MEMBERS; i++)
        a->desc[n++] = (tutti_member_desc){.model_path = a->models.v[i], .weight = NAN, .temp = NAN};
    /* counts checked by ens_args_check */
    for (int i = 0; i < a->weights.n && i < n; i++) a->desc[i].weight = a->weights.v[i];
    for (int i = 0; i < a->temps.n && i < n; i++) a->desc[i].temp = a->temps.v[i];
    int32_t n_ctx = a->n_ctx;
    if (n_ctx == 0) { /* -c 0: the smallest trained context, so that no member runs past its own */
        for (int i = 0; i < n; i++) {
            int32_t t = cli_ctx_train_of_file(a->desc[i].model_path);
            if (t > 0 && (n_ctx == 0 || t < n_ctx)) n_ctx = t;
        }
        if (n_ctx > CLI_MAX_CTX) n_ctx = CLI_MAX_CTX;
    } else if (n_ctx == CLI_CTX_UNSET) {
        n_ctx = 0; /* each member: min(trained, 4096) */
    }
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = a->desc;
    p.n_members = n;
    if (rule >= 0) p.rule = (tutti_fusion_rule)rule;
    if (align >= 0) p.align = (tutti_align)align;
    p.n_threads = a->n_threads;
    p.parallel = a->parallel;
    p.verbose = !cli_quiet; /* the scheduling choice on stderr */
    p.n_ctx = n_ctx;
    if (a->max_hyps > 0) p.max_hyps = a->max_hyps;
    if (a->prune >= 0) p.prune = a->prune;
    if (a->beta > 0) p.beta = a->beta;
    p.ctx_shift = a->ctx_shift;
    p.n_keep = a->n_keep;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) {
        a->status = cli_library_error();
        return NULL;
    }
    double alpha = a->adapt_alpha >= 0 ? a->adapt_alpha : a->file && a->file->adapt >= 0 ? a->file->adapt : -1;
    double tau = a->route_tau > 0 ? a->route_tau : a->file && a->file->route > 0 ? a->file->route : -1;
    if (((a->adapt || alpha >= 0) && tutti_ensemble_set_adapt(e, alpha >= 0 ? alpha : 0.01) < 0) ||
        ((a->route || tau > 0) && tutti_ensemble_set_route(e, tau > 0 ? tau : 0.25) < 0)) {
        a->status = cli_library_error();
        tutti_ensemble_free(e);
        return NULL;
    }
    /* the file's context weights (its members' coefficients; -m members get 0) and selective fusion */
    double sel = a->select >= 0 ? a->select : a->file ? a->file->select : -1;
    if ((a->file && !a->no_context && tutti_ensemble_set_context(e, &a->file->context) < 0) ||
        (sel >= 0 && tutti_ensemble_set_select(e, sel) < 0)) {
        cli_error("%s", tutti_last_error());
        tutti_ensemble_free(e);
        return NULL;
    }
    if (a->n_ctx > 0)
        for (int i = 0; i < tutti_ensemble_n_members(e); i++) {
            char label[600];
            snprintf(label, sizeof label, "member %d (%s)", i + 1, tutti_ensemble_member_path(e, i));
            cli_ctx_for(tutti_ensemble_member_model(e, i), a->n_ctx, label);
        }
    return e;
}
