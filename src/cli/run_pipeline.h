/* `tutti run -e FILE` with a pipeline config (cmd_run_pipeline.c). */
#ifndef TUTTI_CLI_RUN_PIPELINE_H
#define TUTTI_CLI_RUN_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/cli.h"
#include "cli/ens_args.h"

/* true when path is JSON (its first non-blank byte is '{'): a config with
 * pipelines rather than an ensemble file. */
bool cli_is_pipeline_file(const char *path);
/* Runs the config's first pipeline on the prompt (-p/-f): -m models are
 * 'default', the sampling flags and -n (max_tokens) apply to every step
 * that does not set its own, -s SEED is the base seed (step k without a
 * seed of its own draws with SEED + k).  Returns the exit status. */
int cli_run_pipeline(ens_args *a, const cli_sampling *cs, const char *prompt, const char *prompt_file, bool escape,
                     int32_t n_gen);

#endif
