/* Ensemble flags shared by `tutti run`, `tutti eval` and `tutti fit`
 * (implemented in ens_args.c): one flag table, included in each command's
 * own table with CLI_INCLUDE(a.opts). */
#ifndef TUTTI_CLI_ENS_ARGS_H
#define TUTTI_CLI_ENS_ARGS_H

#include <stddef.h>

#include "cli/opts.h"
#include "tutti.h"

typedef struct ens_args {
    cli_strs models;      /* -m, one per member */
    const char *ens_file; /* -e/--ensemble */
    cli_floats weights, temps;
    int rule, align; /* -1 = not given; rule 4 = auto (fit, when rule_auto) */
    bool rule_auto;  /* the command takes --rule auto (set before cli_parse) */
    int32_t n_threads, parallel, n_ctx, max_hyps;
    double prune;
    float beta;
    bool adapt;               /* --adapt */
    double adapt_alpha;       /* --adapt-alpha (-1 = not given) */
    bool route;               /* --route */
    double route_tau;         /* --route-tau (-1 = not given) */
    double select;            /* --select (-1 = not given) */
    bool no_context;          /* --no-context */
    const char *split_counts; /* --split-layers: NULL = off, "" = by memory */
    int32_t split_ub;         /* --split-ubatch (0 = auto) */
    const char *split_member; /* --split-member I,J,... (NULL = every member) */
    bool split_experts;       /* --split-experts */
    bool ctx_shift;           /* run's --context-shift (eval and fit: off) */
    int32_t n_keep;           /* run's --keep */
    int status;               /* exit status after ens_args_build failed: 2 for flags the models do not
                                allow (weights, --align token, --adapt/--route with the rule), else 1 */
    cli_opt opts[34];         /* the flag table, pointing into this struct */
    tutti_ensemble_file *file;
    tutti_member_desc desc[TUTTI_ENSEMBLE_MAX_MEMBERS];
} ens_args;

/* --adapt, --adapt-alpha, --route, --route-tau, --select, --no-context: the
 * weight-following flags, one definition for run/eval/fit (ens_args) and
 * serve. */
#define ENS_WEIGHT_OPTS(adapt, adapt_alpha, route, route_tau, select, no_context)                             \
    CLI_FLAG("--adapt", adapt,                                                                                \
             "mix: weights follow the text (posterior over members with fixed share;\n"                       \
             "the given or fitted weights are the prior; fit fits ALPHA)"),                                   \
        CLI_DOUBLE("--adapt-alpha", "ALPHA", adapt_alpha, -1e300, 1e300,                                      \
                   "fixed-share alpha of --adapt in [0, 1]: 0 = Bayes, 1 = static weights (implies --adapt)", \
                   "the ensemble file's, else 0.01"),                                                         \
        CLI_FLAG("--route", route,                                                                            \
                 "mix, product: weights set once per request from each member's perplexity\n"                 \
                 "on the prompt (PackLLM): w_i ~ w0_i exp(-nats per byte_i / TAU)"),                          \
        CLI_DOUBLE("--route-tau", "TAU", route_tau, -1e300, 1e300,                                            \
                   "temperature of --route in [1e-6, 1e6] nats per byte (implies --route; 1/bytes of the\n"   \
                   "prompt would be the Bayes posterior)",                                                    \
                   "the ensemble file's, else 0.25"),                                                         \
        CLI_DOUBLE("--select", "D", select, -1e300, 1e300,                                                    \
                   "token, byte: fuse only units where the members disagree by >= D nats in\n"                \
                   "[0, 100] (Jensen-Shannon); elsewhere the largest-weight member alone",                    \
                   "the ensemble file's, else off"),                                                          \
        CLI_FLAG("--no-context", no_context, "ignore the ensemble file's context weights (static weights)")

/* Checks --temps, --adapt-alpha, --route-tau and --select (when given) with
 * the library's validator of ensemble settings (tutti.h), so that they are
 * refused with the message an ensemble file or the server gives.  CLI_RUN,
 * or 2 after the message. */
int ens_check_flags(const cli_floats *temps, bool adapt_given, double alpha, bool route_given, double tau,
                    bool select_given, double select);

/* --split-member I,J,... (1-based, into members[0..n)): every index in
 * range, no remote member.  Fills paths[] (*n_paths; NULL list: 0 = every
 * member).  CLI_RUN, or 2 after the message. */
int ens_split_members(const char *list, const char *const *members, int n, const char **paths, int32_t *n_paths);
#define ENS_SPLIT_MEMBER_OPT(dest, what)                                                   \
    CLI_STR("--split-member", "I,J,...", (dest),                                           \
            "with --split-layers: the " what " to split (1-based); each occupies every\n"  \
            "rank, the others go round robin over ranks 1..K-1 (--place cannot be given)", \
            "every member")

/* Defaults and the flag table (a must not move afterwards). */
void ens_args_init(ens_args *a);
/* After cli_parse: reads the ensemble file and checks the member count and
 * the -w/--temps counts.  CLI_RUN, or the exit status after a message (2
 * for inconsistent flags, 1 for an unreadable ensemble file). */
int ens_args_check(ens_args *a);
/* Builds the ensemble (message printed on error; a->status says the exit
 * status). */
tutti_ensemble *ens_args_build(ens_args *a, const char *cmd);
void ens_args_free(ens_args *a);
/* The ensemble file format (the reader is tutti_ensemble_file_read in
 * src/fusion/eval.c), for --help. */
#define ENS_FILE_HELP                                                                                \
    "Ensemble file (-e FILE; `tutti fit` writes one):\n"                                             \
    "  one member per line: MODEL [WEIGHT [TEMP]]  (WEIGHT a finite number, default uniform;\n"      \
    "                       TEMP > 0, default 1), fields separated by spaces or tabs\n"              \
    "  rule NAME            mix | product | gate | contrastive (--rule overrides it)\n"              \
    "  align NAME           auto | token | byte | span (--align overrides it)\n"                     \
    "  adapt ALPHA          mix weights follow the text, fixed-share ALPHA in [0,1] (fit --adapt)\n" \
    "  route TAU            weights from the prompt's perplexities, TAU > 0 nats/byte (--route)\n"   \
    "  select D             fuse only where the members disagree by >= D nats (--select)\n"          \
    "  context F1 F2 ...    context weights over features entropy, top, loss, agree (fit\n"          \
    "                       --context): w_i(t) ~ WEIGHT_i exp(sum_k b_ik f_ik(t))\n"                 \
    "  context-halflife H   half-life of the loss feature in units (default 16)\n"                   \
    "  context-coef I B...  member I's coefficients b_ik, one per context feature\n"                 \
    "  # ...                a comment: '#' at the start of a line or after a blank, to the\n"        \
    "                       end of the line (also inside quotes); blank lines are skipped\n"         \
    "  URL#MODEL;vocab=PATH a remote member (docs/remote-members.md; PATH relative to\n"             \
    "                       the file's folder)\n"                                                    \
    "  \"a b/c.gguf\" 0.5     double quotes keep spaces in a path (no escapes inside)\n"             \
    "A relative MODEL path is relative to the ensemble file's folder. At most 16 members.\n"         \
    "Members given with -m come after the file's; -w and --temps give values for all of them.\n"
extern const char ens_file_help[];

int tutti_cmd_run(int argc, char **argv);
int tutti_cmd_eval(int argc, char **argv);
int tutti_cmd_fit(int argc, char **argv);

#endif
