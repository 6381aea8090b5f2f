/* `tutti fit`: weights and temperatures (and optionally context weights,
 * the adapt alpha, a selective-fusion threshold, or the rule itself) that
 * minimise the ensemble's bits per byte on a text, or that maximise its
 * multiple-choice accuracy on items, printed as a ready-to-use ensemble file.
 *
 *   tutti fit --text FILE -m A.gguf [-m ...] [--rule mix|product|auto] [--align ...]
 *             [--temp-grid 0.8,0.9,1,1.1,1.25] [--context [LIST]] [--adapt]
 *             [--select-share S] [-o ENSEMBLE_FILE]
 *   tutti fit --choices FILE.jsonl -m ... [--choices-static] [-o ENSEMBLE_FILE]
 *
 * Weights: Adam on softmax-parameterised weights over the members' cached
 * per-byte (or per-token, per-span) conditionals; temperatures: coordinate
 * descent over the grid; context weights: Adam with held-out early stopping
 * (fit_ctx.c); --rule auto: every rule fitted on two thirds of the chunks,
 * the best on the rest kept (fit_auto.c).  The ensemble file goes to stdout
 * (or -o); figures to stderr and as comments into the file. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "tutti.h"

/* Lines for the file's head (what was fitted, the candidates of auto),
 * also printed on stderr. */
typedef struct notes {
    char text[8192];
    size_t n;
} notes;

static void note(const char *line, void *user) {
    notes *nt = user;
    cli_info("tutti fit: %s\n", line);
    int k = snprintf(nt->text + nt->n, sizeof nt->text - nt->n, "# %s\n", line);
    if (k > 0 && nt->n + (size_t)k < sizeof nt->text) nt->n += (size_t)k;
}

static void notef(notes *nt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notef(notes *nt, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    note(line, nt);
}

/* --context LIST: comma-separated features, "" or "all" = all four. */
static int parse_features(const char *list, tutti_fit_params *p) {
    p->n_context = 0;
    if (!list[0] || !strcmp(list, "all")) {
        for (int32_t f = 0; f < TUTTI_N_FEATURES; f++) p->context[p->n_context++] = f;
        return CLI_RUN;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        int f = tutti_feature_parse(w);
        if (f < 0) return cli_usage_error("--context: unknown feature \"%s\" (entropy, top, loss, agree or all)", w);
        for (int32_t k = 0; k < p->n_context; k++)
            if (p->context[k] == f) return cli_usage_error("--context: %s named twice", w);
        p->context[p->n_context++] = f;
    }
    return CLI_RUN;
}

/* The figures of a bits-per-byte fit, as notes. */
static void note_fit(notes *nt, tutti_ensemble *e, const char *what, const tutti_fit_result *fr) {
    notef(nt, "fit (%s, %s) on %s: uniform weights %.4f bits/byte, fitted static %.4f",
          tutti_rule_name(tutti_ensemble_rule(e)), tutti_align_name(tutti_ensemble_align(e)), what, fr->uniform_bpb,
          fr->static_bpb);
    if (!isnan(fr->context_bpb))
        notef(nt, "context weights: %.4f bits/byte (held-out quarter %.4f)", fr->context_bpb, fr->heldout_bpb);
    if (fr->adapt_alpha >= 0)
        notef(nt, "weights that follow the text (adapt), fixed-share alpha %g: %.4f bits/byte", fr->adapt_alpha,
              fr->fitted_bpb);
    if (fr->select_threshold >= 0)
        notef(nt, "selective fusion: threshold %.4g nats fuses %.1f %% of the units: %.4f bits/byte",
              fr->select_threshold, 100 * fr->fused_share, fr->fitted_bpb);
}

/* What goes into the ensemble file: the head line, the notes, the file. */
typedef struct fit_out {
    const tutti_ensemble *e;
    const char *head;
    const notes *nt;
} fit_out;

static int write_fit(FILE *out, void *ctx) {
    const fit_out *f = ctx;
    fputs(f->head, out);
    fwrite(f->nt->text, 1, f->nt->n, out);
    return tutti_ensemble_file_write(f->e, out) < 0 ? TUTTI_ERR : 0;
}

int tutti_cmd_fit(int argc, char **argv) {
    ens_args a;
    ens_args_init(&a);
    a.rule_auto = true;
    const char *text_path = NULL, *out_path = NULL, *choices_path = NULL, *context = NULL;
    bool choices_static = false;
    double select_share = -1;
    cli_floats grid_f = {.n = 0};
    const cli_opt opts[] = {
        CLI_STR("--text,-f,--file", "FILE", &text_path, "training text (chunks of <= 200 bytes, each from BOS)",
                "none"),
        CLI_STR("--choices", "FILE.jsonl", &choices_path,
                "fit for multiple-choice accuracy instead (acc_norm's LL per byte, as eval --choices\n"
                "scores the items)",
                "none"),
        CLI_FLAG("--choices-static", &choices_static,
                 "with --choices and mix: fit the static per-unit mixture, not the posterior after the context"),
        CLI_FLOATS("--temp-grid", "LIST", &grid_f, 1e-3, 1e3, "candidate member temperatures (\"1\" fits weights only)",
                   "0.8,0.9,1,1.1,1.25"),
        {"--context", "[LIST]", CLI_T_STR, 0, 0, &context,
         "mix, product: also fit context weights over these features (comma-separated:\n"
         "entropy, top, loss, agree; no list or \"all\": all four), early-stopped on a\n"
         "held-out quarter of the chunks",
         "off", NULL, CLI_OPTVAL},
        CLI_DOUBLE("--select-share", "S", &select_share, 1e-6, 1,
                   "token, byte: set the selective-fusion threshold that fuses this share of\n"
                   "the text's units (measured on it) and report the figure",
                   "off"),
        CLI_STR("-o,--out", "FILE", &out_path, "write the ensemble file there instead of stdout (- = stdout)",
                "stdout"),
        CLI_INCLUDE(a.opts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "fit",
        .usage = "(--text FILE | --choices FILE.jsonl) (-m A.gguf [-m ...] | -e ENSEMBLE_FILE) [options]",
        .description = "Fits weights and temperatures minimising the ensemble's bits per byte on FILE (or the\n"
                       "choice loss of --choices items) and prints them as an ensemble file (use it with -e).\n"
                       "--rule auto tries every rule the alignment can score on two thirds of the text's\n"
                       "chunks and keeps the best on the last third. Figures and progress (when it takes\n"
                       "longer than a second) go to stderr and into the file as comments.",
        .opts = opts,
        .epilog = ens_file_help,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (!text_path == !choices_path)
        return cli_usage_error("give the training text with --text FILE, or choice items with --choices FILE.jsonl");
    bool auto_rule = a.rule == 4;
    tutti_fit_params fp = {0};
    if (context && (pr = parse_features(context, &fp)) != CLI_RUN) return pr;
    if (choices_path && (context || select_share > 0 || auto_rule))
        return cli_usage_error(
            "--choices fits weights (and temperatures) only: drop --context, --select-share and --rule auto");
    if (choices_static && !choices_path) return cli_usage_error("--choices-static goes with --choices");
    if ((pr = cli_output_check("-o", out_path, CLI_OUT_TEXT)) != CLI_RUN) return pr; /* before the fit, not after */
    float grid[CLI_MAX_FLOATS] = {0.8f, 0.9f, 1.0f, 1.1f, 1.25f};
    int n_grid = 5;
    if (grid_f.n) {
        memcpy(grid, grid_f.v, sizeof(float) * (size_t)grid_f.n);
        n_grid = grid_f.n;
    }
    fp.temps = grid, fp.n_temps = n_grid;
    fp.select_share = select_share;
    if ((pr = ens_args_check(&a)) != CLI_RUN) {
        ens_args_free(&a);
        return pr;
    }
    size_t len = 0;
    char *text = NULL;
    cli_choice_file cf = {0};
    tutti_ensemble *e = NULL;
    int rc = 1;
    if (text_path && !(text = cli_read_file(text_path, &len))) goto done;
    if (choices_path && cli_choice_file_read(choices_path, &cf)) goto done;
    if (!(e = ens_args_build(&a, "fit"))) {
        rc = a.status;
        goto done;
    }
    notes nt = {.n = 0};
    fp.report = note, fp.user = &nt;
    tutti_fit_result fr;
    char what[128];
    snprintf(what, sizeof what, "fitting on %s with %d members", text_path ? text_path : choices_path,
             (int)tutti_ensemble_n_members(e));
    cli_progress_start(what);
    int fit_rc;
    double adapt = tutti_ensemble_adapt(e);
    if (choices_path) {
        /* as eval --choices scores mix by default: the posterior after the context */
        if (tutti_ensemble_rule(e) == TUTTI_RULE_MIX && !choices_static && adapt < 0) tutti_ensemble_set_adapt(e, 0);
        fit_rc = tutti_ensemble_fit_choices(e, cf.items, cf.n, &fp, &fr);
        tutti_ensemble_set_adapt(e, adapt);
    } else {
        fit_rc = auto_rule ? tutti_ensemble_fit_auto(e, text, len, &fp, &fr)
                           : tutti_ensemble_fit_with(e, text, len, &fp, &fr);
    }
    cli_progress_stop();
    if (fit_rc < 0) {
        if (fit_rc == TUTTI_ERR_UNSUPPORTED) rc = 2;
        fprintf(stderr, "tutti fit: %s\n", tutti_last_error());
        goto done;
    }
    if (choices_path)
        notef(&nt,
              "fit (%s, %s) for multiple choice on %s (%d items): acc %.4f acc_norm %.4f, choice loss %.4f nats/item",
              tutti_rule_name(tutti_ensemble_rule(e)), tutti_align_name(tutti_ensemble_align(e)), choices_path, cf.n,
              fr.acc, fr.acc_norm, fr.choice_loss);
    else note_fit(&nt, e, text_path, &fr);
    char head[4608];
    if (auto_rule)
        snprintf(head, sizeof head, "# fitted by tutti fit --rule auto on %s: chose %s\n", text_path, fr.chosen);
    else if (choices_path) snprintf(head, sizeof head, "# fitted by tutti fit --choices %s\n", choices_path);
    else
        snprintf(head, sizeof head, "# fitted by tutti fit on %s: %.4f bits/byte (uniform weights: %.4f)\n", text_path,
                 fr.fitted_bpb, fr.uniform_bpb);
    fit_out fo = {e, head, &nt};
    rc = cli_output_write(out_path ? out_path : "-", write_fit, &fo);
done:
    tutti_ensemble_free(e);
    cli_choice_file_free(&cf);
    ens_args_free(&a);
    free(text);
    return rc;
}
