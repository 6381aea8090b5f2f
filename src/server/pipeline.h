/* Pipelines and mixture-of-agents: several generations composed into one
 * named model (docs/pipelines.md).
 *
 * A pipeline is a set of steps; each step generates text with one served
 * model (a single model, a fused ensemble, a remote member: whatever the
 * front end's backend opens by name) from a prompt template that refers to
 * the request ({input}, {messages}) and to other steps' outputs ({STEP}).
 * The references form a directed graph, checked acyclic when the config is
 * read; steps whose inputs are all done run concurrently, each in a thread
 * of its own with its own ensemble (the models' weights are shared
 * read-only, as the server's slots share them).  One step is the output:
 * its text is the pipeline's answer and is the one that streams.
 *
 * The `moa` shorthand is Mixture-of-Agents (Wang et al. 2024,
 * "Mixture-of-Agents Enhances Large Language Model Capabilities",
 * arXiv:2406.04692): `layers` layers of proposers, each of layer l > 1
 * seeing the drafts of layer l - 1 through the aggregate-and-synthesize
 * prompt, then one aggregator over the last layer's drafts.  It expands
 * into ordinary steps when read.
 *
 * pipeline_config.c reads the JSON (untrusted: fuzzed by fuzz/fuzz_pipeline.c) and
 * uses no model; pipeline_run.c runs a pipeline through a backend (pl_backend). */
#ifndef TUTTI_PIPELINE_H
#define TUTTI_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

struct cJSON;

#define PL_MAX_STEPS 64           /* steps of one pipeline (a moa's expanded steps included) */
#define PL_MAX_STOP 8             /* stop strings of one step */
#define PL_MAX_NAME 64            /* bytes of a step's name */
#define PL_MAX_TEMPLATE (1 << 16) /* bytes of one prompt template */

/* One piece of a parsed template: literal text, or a reference. */
enum { PL_SEG_TEXT, PL_SEG_INPUT, PL_SEG_MESSAGES, PL_SEG_STEP };
typedef struct pl_seg {
    int kind;
    const char *text; /* PL_SEG_TEXT: into the step's prompt (not NUL-terminated) */
    size_t len;
    int step; /* PL_SEG_STEP: index of the step referred to */
} pl_seg;

typedef struct pl_step {
    char *name;   /* [A-Za-z0-9_.-]{1,63}; not "input" or "messages" */
    char *model;  /* a model name of the front end (checked by pl_has_model_fn) */
    char *prompt; /* the template as written; {{ and }} are literal braces */
    pl_seg *segs;
    int n_segs;
    uint64_t deps; /* bit k: the prompt refers to step k */
    /* sampling: NAN / -1 / INT32_MIN: the run's value (pl_run_opts.sp) */
    int32_t max_tokens; /* -1: the run's max_tokens */
    float temperature, top_p, min_p, repeat_penalty;
    int32_t top_k;
    int64_t seed;     /* -1: the run's seed + the step's index */
    double timeout_s; /* > 0: the step fails after this many seconds; 0: none */
    bool ignore_eos;  /* the text never ends by itself (tutti_mask.ignore_eos) */
    char *stop[PL_MAX_STOP];
    int n_stop;
    /* the output's constraint: GBNF text, a JSON schema (printed), or any
     * JSON ("json": true); at most one; compiled per run, checked when read */
    char *grammar;
    char *json_schema;
    bool json;
} pl_step;

typedef struct pl_pipeline {
    char *name;
    pl_step *steps;
    int n_steps;
    int output; /* the step whose text is the answer */
    bool moa;   /* written as the moa shorthand */
} pl_pipeline;

typedef struct pl_set {
    pl_pipeline *items;
    int n;
} pl_set;

/* Whether `name` is a model the front end can open (true) for a step. */
typedef bool (*pl_has_model_fn)(void *user, const char *name);

/* Reads the JSON array `pipelines` (the config's "pipelines" value; NULL or
 * absent: none) into set, which the caller frees with pl_set_free even after
 * an error.  Each item is either
 *   {"name": N, "steps": [STEP, ...], "output": STEP_NAME}   ("output": the last step by default)
 *   {"name": N, "moa": {"proposers": [MODEL, ...], "aggregator": MODEL,
 *                       "layers": 1, "prompt": T, "aggregator_prompt": T,
 *                       and any sampling field of a step}}
 * STEP: {"name", "model", "prompt" (template, "{input}" by default),
 * "max_tokens", "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
 * "seed", "timeout" (seconds), "ignore_eos", "stop" (string or array), "grammar" (GBNF),
 * "json_schema" (object), "json" (bool)}.  In a moa's aggregator_prompt,
 * {drafts} stands for the numbered drafts of the layer before.  Errors
 * (0, or -1 with err naming the pipeline, the step and the field): a missing
 * or mistyped field, a value out of range, an unknown model (has_model), a
 * reference to no step, a cycle (its steps named), a duplicate name, a
 * pipeline name for which taken(user, name) is true (a model of the same
 * name), a grammar or schema that does not compile. */
int pl_set_parse(pl_set *set, const struct cJSON *pipelines, pl_has_model_fn has_model, pl_has_model_fn taken,
                 void *user, char *err, size_t cap);
void pl_set_free(pl_set *set);
const pl_pipeline *pl_set_find(const pl_set *set, const char *name);

/* ---- running (pipeline_run.c) ---- */

/* Opens a new ensemble for a step's model (the caller frees it), or returns
 * NULL with a message in err.  Called from the step threads at once. */
typedef struct pl_backend {
    tutti_ensemble *(*open)(void *user, const char *model, char *err, size_t cap);
    void *user;
} pl_backend;

typedef struct pl_run_opts {
    const char *input; /* {input}: the prompt, or the last user message */
    size_t input_len;
    const char *messages; /* {messages}: the conversation as "role: content" lines */
    size_t messages_len;
    tutti_sampler_params sp; /* what steps do not set (seed: step k draws with seed + k) */
    int32_t max_tokens;      /* steps without max_tokens; <= 0: 256 */
    /* the output step's text as it is generated (NULL: none); non-zero
     * return: stop the run */
    tutti_text_cb on_output;
    /* asked at every piece of every step (NULL: never): non-zero stops the
     * run (the client left, the server stops) */
    int (*should_stop)(void *user);
    void *user; /* of both */
} pl_run_opts;

typedef struct pl_step_usage {
    int32_t prompt_tokens;    /* member 1's prompt tokens */
    int32_t completion_units; /* tokens (token alignment) or bytes */
    const char *unit;         /* "token" or "byte" */
    double start_s, end_s;    /* from the run's start */
    tutti_finish finish;
    bool ran;
} pl_step_usage;

typedef struct pl_result {
    char *text[PL_MAX_STEPS]; /* each step's output (malloc'd, NUL-terminated) */
    size_t n_text[PL_MAX_STEPS];
    pl_step_usage usage[PL_MAX_STEPS];
    double wall_s;  /* the whole run */
    double sum_s;   /* the steps' own times added up */
    int failed;     /* the step that failed, -1 if none */
    bool timed_out; /* it failed by its timeout */
} pl_result;

/* Runs p.  0, or -1 with err naming the failing step ("pipeline 'P': step
 * 'S' (model 'M'): ...") and r->failed set; every other step is stopped and
 * joined before it returns.  r is filled either way; free with
 * pl_result_free. */
int pl_run(const pl_pipeline *p, const pl_backend *b, const pl_run_opts *o, pl_result *r, char *err, size_t cap);
void pl_result_free(pl_result *r);

/* The step's prompt with every reference replaced (malloc'd; *n its
 * length), from r's texts of the steps it refers to. */
char *pl_expand(const pl_step *s, const pl_run_opts *o, const pl_result *r, size_t *n);

#endif
