/* `tutti eval --plot FILE.svg`: each member's and the ensemble's bits per
 * byte and multiple-choice accuracy as bar charts side by side, in plain
 * SVG (no library: a few rectangles and labels; every label XML-escaped). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/plot_svg.h"

#include "cli/cli.h"

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

/* One panel: n bars groups (labels[i]), k series (values[i * k + j]) at
 * x0..x0+w; non-finite values are drawn as "n/a". */
static void panel(FILE *f, double x0, double w, const char *title, const char *const *labels, int n, const double *v,
                  int k, const char *const *series, bool lower_better) {
    static const char *colors[] = {"#4477aa", "#ee6677", "#228833"};
    const double top = 50, h = 260, bottom = top + h;
    double mx = 0;
    for (int i = 0; i < n * k; i++)
        if (isfinite(v[i]) && v[i] > mx) mx = v[i];
    if (!(mx > 0)) mx = 1;
    mx *= 1.1;
    fprintf(f, "<text x=\"%.1f\" y=\"30\" font-size=\"15\" font-weight=\"bold\">", x0);
    xml_text(f, title);
    fprintf(f, " (%s is better)</text>\n", lower_better ? "lower" : "higher");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x0, bottom, x0 + w, bottom);
    for (int t = 0; t <= 4; t++) { /* grid lines with values */
        double y = bottom - h * t / 4.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y, x0 + w, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.3g</text>\n", x0 - 4, y + 3,
                mx * t / 4.0);
    }
    double gw = w / n, bw = gw * 0.8 / k;
    for (int i = 0; i < n; i++) {
        double gx = x0 + i * gw + gw * 0.1;
        for (int j = 0; j < k; j++) {
            double val = v[i * k + j], x = gx + j * bw;
            if (!isfinite(val)) {
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">n/a</text>\n",
                        x + bw / 2, bottom - 4);
                continue;
            }
            double bh = h * val / mx;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x, bottom - bh,
                    bw * 0.95, bh, colors[j % 3]);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%.3f</text>\n", x + bw / 2,
                    bottom - bh - 3, val);
        }
        fprintf(f, "<text font-size=\"11\" text-anchor=\"end\" transform=\"translate(%.1f,%.1f) rotate(-35)\">",
                gx + gw * 0.4, bottom + 14);
        xml_text(f, labels[i]);
        fprintf(f, "</text>\n");
    }
    for (int j = 0; j < k && series; j++) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>", x0 + w - 110, 38.0 + 14 * j,
                colors[j % 3]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x0 + w - 95, 47.0 + 14 * j);
        xml_text(f, series[j]);
        fprintf(f, "</text>\n");
    }
}

typedef struct plot_job {
    const char *const *labels;
    int n;
    const double *bpb, *acc, *acc_norm;
} plot_job;

static int write_plot(FILE *f, void *ctx) {
    const plot_job *j = ctx;
    const int n = j->n;
    int panels = (j->bpb != NULL) + (j->acc != NULL);
    double pw = 60.0 * n + 120, W = panels * (pw + 80) + 40;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"480\" "
            "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W);
    double x = 70;
    if (j->bpb) {
        const char *ser[] = {"bits per byte"};
        panel(f, x, pw, "bits per byte", j->labels, n, j->bpb, 1, ser, true);
        x += pw + 80;
    }
    if (j->acc) {
        double v[2 * 32];
        for (int i = 0; i < n && i < 32; i++) v[2 * i] = j->acc[i], v[2 * i + 1] = j->acc_norm[i];
        const char *ser[] = {"acc", "acc_norm"};
        panel(f, x, pw, "multiple-choice accuracy", j->labels, n, v, 2, ser, false);
    }
    fprintf(f, "</svg>\n");
    return 0;
}

int plot_svg_write(const char *path, const char *const *labels, int n, const double *bpb, const double *acc,
                   const double *acc_norm) {
    plot_job j = {labels, n, bpb, acc, acc_norm};
    return cli_output_write(path, write_plot, &j);
}
