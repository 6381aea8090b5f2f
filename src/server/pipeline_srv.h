/* Pipelines served by `tutti serve` (server/pipeline.h through the registry):
 * the --config file's "pipelines" become model names of their own, answered
 * on /v1/completions and /v1/chat/completions like any model.  A pipeline's
 * request runs in a thread of its own (not in a slot: its steps build their
 * own ensembles over the registry's loaded models and run concurrently);
 * at most --parallel pipelines run at once, beyond that 503. */
#ifndef TUTTI_SERVER_PIPELINE_SRV_H
#define TUTTI_SERVER_PIPELINE_SRV_H

#include <stddef.h>

struct cJSON;
struct srv_registry;
struct srv_server;
struct srv_job;
struct pl_pipeline;

/* Reads config_path's "pipelines" (NULL: none) once every other model name
 * is known; 0, or -1 with the message in err. */
int srv_pipelines_plan(struct srv_registry *reg, const char *config_path, char *err, size_t cap);
const struct pl_pipeline *srv_pipeline_find(const struct srv_registry *reg, const char *name);
const struct pl_pipeline *srv_pipeline_first(const struct srv_registry *reg); /* NULL: none */
/* The request parsed into j names a pipeline: checks what a pipeline can
 * answer and prepares the job (0, or an HTTP status with err and *param).
 * -1: j's model is no pipeline (nothing done). */
int srv_pipeline_prepare(struct srv_server *s, struct srv_job *j, char *err, size_t cap, const char **param,
                         const char **code);
/* Starts j's run (takes a reference); 0, or 503 (too many at once, or stopping). */
int srv_pipeline_submit(struct srv_server *s, struct srv_job *j);
/* Stops every running pipeline and waits for their threads. */
void srv_pipelines_stop(struct srv_registry *reg);
void srv_pipelines_free(struct srv_registry *reg);
/* Appends each pipeline's /v1/models entry to the array data. */
void srv_pipelines_models_json(const struct srv_registry *reg, struct cJSON *data);

/* For the server and `tutti run -e FILE` (cli/cmd_run_pipeline.c): a step's
 * model as a new ensemble over the registry's loaded models, the
 * pl_backend.open of a backend whose user is a srv_pipe_models. */
typedef struct srv_pipe_models {
    const struct srv_registry *reg;
    int n_threads; /* per step's ensemble */
} srv_pipe_models;
struct tutti_ensemble *srv_pipeline_open_model(void *models, const char *model, char *err, size_t cap);

#endif
