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

int tutti_cmd_fit(int argc, char **argv) {
    ens_args a;
    ens_args_init(&a);
    const char *text_path = NULL, *grid_s = "0.8,0.9,1,1.1,1.25", *out_path = NULL;
    for (int i = 0; i < argc; i++) {
        int r = ens_args_take(&a, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            printf("usage: tutti fit --text FILE -m A.gguf [-m ...] [options]\n"
                   "Fits weights and temperatures minimising the ensemble's bits per byte on FILE and\n"
                   "prints them as an ensemble file (use it with -e).\n%s"
                   "  --text FILE           training text (chunks of <= 200 bytes, each from BOS)\n"
                   "  --temp-grid LIST      candidate member temperatures (default 0.8,0.9,1,1.1,1.25;\n"
                   "                        \"1\" fits weights only)\n"
                   "  -o FILE               write the ensemble file there instead of stdout\n",
                   ens_args_help());
            return 0;
        } else if (!strcmp(o, "--text") || !strcmp(o, "--temp-grid") || !strcmp(o, "-o")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tutti fit: %s needs a value\n", o);
                return 1;
            }
            const char *v = argv[++i];
            if (!strcmp(o, "-o")) out_path = v;
            else if (!strcmp(o, "--text")) text_path = v;
            else grid_s = v;
        } else {
            fprintf(stderr, "tutti fit: unknown option %s (see tutti fit --help)\n", o);
            return 2;
        }
    }
    if (!text_path) {
        fprintf(stderr, "tutti fit: give the training text with --text FILE\n");
        return 1;
    }
    float grid[32];
    int n_grid = 0;
    for (const char *p = grid_s; *p;) {
        char *e;
        errno = 0;
        double v = strtod(p, &e);
        if (e == p || errno || (*e && *e != ',') || !(v > 0) || n_grid == 32) {
            fprintf(stderr, "tutti fit: --temp-grid: \"%s\" is not a list of up to 32 positive numbers\n", grid_s);
            return 1;
        }
        grid[n_grid++] = (float)v;
        p = *e ? e + 1 : e;
    }
    size_t len;
    char *text = cli_read_file(text_path, &len);
    if (!text) return 1;
    tutti_ensemble *e = ens_args_build(&a, "fit");
    int rc = 1;
    if (e) {
        tutti_fit_result fr;
        int frc = tutti_ensemble_fit(e, text, len, grid, n_grid, &fr);
        if (frc < 0) {
            fprintf(stderr, "tutti fit: %s\n", tutti_last_error());
            if (frc == TUTTI_ERR_UNSUPPORTED) rc = 2;
        } else {
            fprintf(stderr, "fit (%s, %s) on %s: uniform weights %.4f bits/byte, fitted %.4f bits/byte\n",
                    tutti_rule_name(tutti_ensemble_rule(e)), tutti_align_name(tutti_ensemble_align(e)), text_path,
                    fr.uniform_bpb, fr.fitted_bpb);
            FILE *out = out_path ? fopen(out_path, "w") : stdout;
            if (!out) {
                fprintf(stderr, "tutti fit: cannot write %s: %s\n", out_path, strerror(errno));
            } else {
                fprintf(out, "# fitted by tutti fit on %s: %.4f bits/byte (uniform weights: %.4f)\n", text_path,
                        fr.fitted_bpb, fr.uniform_bpb);
                rc = tutti_ensemble_file_write(e, out) < 0 ? 1 : 0;
                if (out != stdout) fclose(out);
                if (rc) fprintf(stderr, "tutti fit: %s\n", tutti_last_error());
            }
        }
        tutti_ensemble_free(e);
    }
    ens_args_free(&a);
    free(text);
    return rc;
}
