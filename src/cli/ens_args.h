/* Ensemble flags shared by `tutti run`, `tutti eval` and `tutti fit`
 * (implemented in cmd_run.c). */
#ifndef TUTTI_CLI_ENS_ARGS_H
#define TUTTI_CLI_ENS_ARGS_H

#include <stddef.h>

#include "tutti.h"

typedef struct ens_args {
    const char *models[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int n_models;
    const char *ens_file;
    const char *weights; /* "0.5,0.3" */
    const char *temps;
    int rule, align;     /* -1 = not given */
    int n_threads, parallel, n_ctx, max_hyps;
    double prune;
    float beta;
    tutti_ensemble_file *file;
    tutti_member_desc desc[TUTTI_ENSEMBLE_MAX_MEMBERS];
} ens_args;

void ens_args_init(ens_args *a);
/* Consumes argv[*i] (and its value) if it is an ensemble flag: returns 1,
 * 0 if not an ensemble flag, -1 on a bad value (message printed). */
int ens_args_take(ens_args *a, int argc, char **argv, int *i);
/* Builds the ensemble (message printed on error). */
tutti_ensemble *ens_args_build(ens_args *a, const char *cmd);
void ens_args_free(ens_args *a);
const char *ens_args_help(void);

int tutti_cmd_run(int argc, char **argv);
int tutti_cmd_eval(int argc, char **argv);
int tutti_cmd_fit(int argc, char **argv);

#endif
