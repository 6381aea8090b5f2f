/* `tutti fit`: weights and temperatures that minimise the ensemble's bits
 * per byte on a text, printed as a ready-to-use ensemble file.
 *
 *   tutti fit --text FILE -m A.gguf [-m ...] [--rule mix|product] [--align ...]
 *             [--temp-grid 0.8,0.9,1,1.1,1.25] [-o ENSEMBLE_FILE]
 *
 * Weights: Adam on softmax-parameterised weights over the members' cached
 * per-byte (or per-token, per-span) conditionals; temperatures: coordinate
 * descent over the grid (each member's conditionals recomputed per grid
 * value).  The ensemble file goes to stdout (or -o); figures to stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ens_args.h"
#include "tutti.h"

typedef struct fit_out {
    const tutti_ensemble *e;
    const char *text_path;
    const tutti_fit_result *fr;
} fit_out;

static int write_fit(FILE *out, void *ctx) {
    const fit_out *f = ctx;
    fprintf(out, "# fitted by tutti fit on %s: %.4f bits/byte (uniform weights: %.4f)\n", f->text_path,
            f->fr->fitted_bpb, f->fr->uniform_bpb);
    return tutti_ensemble_file_write(f->e, out) < 0 ? TUTTI_ERR : 0;
}

int tutti_cmd_fit(int argc, char **argv) {
    ens_args a;
    ens_args_init(&a);
    const char *text_path = NULL, *out_path = NULL;
    cli_floats grid_f = {.n = 0};
    const cli_opt opts[] = {
        CLI_STR("--text,-f,--file", "FILE", &text_path, "training text (chunks of <= 200 bytes, each from BOS)", "none"),
        CLI_FLOATS("--temp-grid", "LIST", &grid_f, 1e-3, 1e3,
                   "candidate member temperatures (\"1\" fits weights only)", "0.8,0.9,1,1.1,1.25"),
        CLI_STR("-o,--out", "FILE", &out_path, "write the ensemble file there instead of stdout (- = stdout)", "stdout"),
        CLI_INCLUDE(a.opts),
        CLI_END,
    };
    const cli_spec spec = {
        .name = "fit",
        .usage = "--text FILE (-m A.gguf [-m ...] | -e ENSEMBLE_FILE) [options]",
        .description = "Fits weights and temperatures minimising the ensemble's bits per byte on FILE and\n"
                       "prints them as an ensemble file (use it with -e). Figures and progress (when it\n"
                       "takes longer than a second) go to stderr.",
        .opts = opts,
        .epilog = ens_file_help,
    };
    int pr = cli_parse(&spec, argc, argv);
    if (pr != CLI_RUN) return pr;
    if (!text_path) return cli_usage_error("give the training text with --text FILE");
    if ((pr = cli_output_check("-o", out_path, CLI_OUT_TEXT)) != CLI_RUN) return pr; /* before the fit, not after */
    float grid[CLI_MAX_FLOATS] = {0.8f, 0.9f, 1.0f, 1.1f, 1.25f};
    int n_grid = 5;
    if (grid_f.n) {
        memcpy(grid, grid_f.v, sizeof(float) * (size_t)grid_f.n);
        n_grid = grid_f.n;
    }
    if ((pr = ens_args_check(&a)) != CLI_RUN) {
        ens_args_free(&a);
        return pr;
    }
    size_t len;
    char *text = cli_read_file(text_path, &len);
    if (!text) {
        ens_args_free(&a);
        return 1;
    }
    tutti_ensemble *e = ens_args_build(&a, "fit");
    int rc = e ? 1 : a.status;
    if (e) {
        tutti_fit_result fr;
        char what[96];
        snprintf(what, sizeof what, "fitting on %zu bytes with %d members", len, (int)tutti_ensemble_n_members(e));
        cli_progress_start(what);
        int fit_rc = tutti_ensemble_fit(e, text, len, grid, n_grid, &fr);
        cli_progress_stop();
        if (fit_rc < 0) {
            if (fit_rc == TUTTI_ERR_UNSUPPORTED) rc = 2;
            fprintf(stderr, "tutti fit: %s\n", tutti_last_error());
        } else {
            fprintf(stderr, "fit (%s, %s) on %s: uniform weights %.4f bits/byte, fitted %.4f bits/byte\n",
                    tutti_rule_name(tutti_ensemble_rule(e)), tutti_align_name(tutti_ensemble_align(e)), text_path,
                    fr.uniform_bpb, fr.static_bpb);
            if (fr.adapt_alpha >= 0)
                fprintf(stderr, "fit: weights that follow the text (--adapt), fixed-share alpha %g: %.4f bits/byte\n",
                        fr.adapt_alpha, fr.fitted_bpb);
            fit_out fo = {e, text_path, &fr};
            rc = cli_output_write(out_path ? out_path : "-", write_fit, &fo);
        }
        tutti_ensemble_free(e);
    }
    ens_args_free(&a);
    free(text);
    return rc;
}
