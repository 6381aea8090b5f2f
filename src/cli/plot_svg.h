/* SVG bar charts for `tutti eval --plot` (plot_svg.c). */
#ifndef TUTTI_CLI_PLOT_SVG_H
#define TUTTI_CLI_PLOT_SVG_H

#include <stdbool.h>

/* Writes path (atomically, cli_output_write): labels[n] (members, then the
 * ensemble; n <= 32), a panel of bits per byte (bpb[n], NULL = none) and
 * one of acc / acc_norm ([n] each, NULL = none).  Non-finite values show as
 * "n/a".  0, or 1 after the message when the file cannot be written. */
int plot_svg_write(const char *path, const char *const *labels, int n, const double *bpb, const double *acc,
                   const double *acc_norm);

#endif
