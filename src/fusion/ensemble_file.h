/* Ensemble-file lines owned by the fusion layer (ctxweights_file.c), for
 * the file reader and writer (tutti_ensemble_file_read / _write). */
#ifndef TUTTI_FUSION_ENSEMBLE_FILE_H
#define TUTTI_FUSION_ENSEMBLE_FILE_H

#include <stdio.h>

#include "tutti.h"

/* One comment-stripped, trimmed line: 1 when it is a `context`,
 * `context-halflife`, `context-coef` or `select` line (parsed into ef;
 * *max_member: the largest member number a context-coef line named), 0 when
 * it is another kind of line, TUTTI_ERR with a message (the caller names
 * the file and line). */
int fusion_file_weights_line(tutti_ensemble_file *ef, const char *line, int32_t *max_member);
/* After the last line: every context-coef names a member of the file. */
int fusion_file_weights_done(const tutti_ensemble_file *ef, int32_t max_member);
/* The lines for e's context weights and selective fusion (if on). */
int fusion_file_weights_write(const tutti_ensemble *e, FILE *out);

#endif
