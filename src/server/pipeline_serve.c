/* Pipelines as served model names (pipeline_srv.h): the registry's part
 * (reading them, finding them, opening a step's model), the request's part
 * (what a pipeline answers, its input texts) and the run's thread, which
 * writes the job's output as a slot would: the output step's text streamed
 * (SSE chunks) or kept for the final body, usage with every step's counts
 * under usage.tutti.steps. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server/pipeline.h"
#include "server/format.h"
#include "server/pipeline_srv.h"
#include "server/server.h"
#include "util/buf.h"

typedef struct srv_pipes {
    pl_set set;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running; /* threads alive (shutdown waits for them) */
    int active;  /* requests not answered yet (admission: at most --parallel) */
    int stopping;
} srv_pipes;

/* ---- the registry's part ---- */

static bool served(void *reg, const char *name) { return srv_registry_find(reg, name) != NULL; }

static cJSON *read_json(const char *path, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, cap, "--config %s: cannot open it", path), NULL;
    size_t c = 16u << 20, n = 0;
    char *b = malloc(c + 1);
    if (b) n = fread(b, 1, c, f);
    fclose(f);
    cJSON *root = b ? cJSON_ParseWithLength(b, n) : NULL;
    free(b);
    if (!root) snprintf(err, cap, "--config %s: not JSON (or larger than 16 MiB)", path);
    return root;
}

int srv_pipelines_plan(srv_registry *reg, const char *config_path, char *err, size_t cap) {
    if (!config_path) return 0;
    cJSON *root = read_json(config_path, err, cap);
    if (!root) return -1;
    const cJSON *pipes = cJSON_GetObjectItemCaseSensitive(root, "pipelines");
    int rc = 0;
    if (pipes) {
        srv_pipes *pp = calloc(1, sizeof *pp);
        if (!pp) {
            snprintf(err, cap, "out of memory");
            rc = -1;
        } else {
            pthread_mutex_init(&pp->mu, NULL);
            pthread_cond_init(&pp->cv, NULL);
            reg->pipelines = pp;
            char m[2048];
            if (pl_set_parse(&pp->set, pipes, served, served, reg, m, sizeof m) < 0)
                rc = -1, snprintf(err, cap, "--config %s: %s", config_path, m);
        }
    }
    cJSON_Delete(root);
    return rc;
}

const pl_pipeline *srv_pipeline_find(const srv_registry *reg, const char *name) {
    return reg->pipelines ? pl_set_find(&reg->pipelines->set, name) : NULL;
}

const pl_pipeline *srv_pipeline_first(const srv_registry *reg) {
    return reg->pipelines && reg->pipelines->set.n > 0 ? &reg->pipelines->set.items[0] : NULL;
}

void srv_pipelines_stop(srv_registry *reg) {
    srv_pipes *pp = reg->pipelines;
    if (!pp) return;
    pthread_mutex_lock(&pp->mu);
    __atomic_store_n(&pp->stopping, 1, __ATOMIC_RELAXED);
    while (pp->running > 0) pthread_cond_wait(&pp->cv, &pp->mu);
    pthread_mutex_unlock(&pp->mu);
}

void srv_pipelines_free(srv_registry *reg) {
    srv_pipes *pp = reg->pipelines;
    if (!pp) return;
    srv_pipelines_stop(reg);
    pl_set_free(&pp->set);
    pthread_mutex_destroy(&pp->mu);
    pthread_cond_destroy(&pp->cv);
    free(pp);
    reg->pipelines = NULL;
}

void srv_pipelines_models_json(const srv_registry *reg, cJSON *data) {
    for (int i = 0; reg->pipelines && i < reg->pipelines->set.n; i++) {
        const pl_pipeline *p = &reg->pipelines->set.items[i];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(data, m);
        cJSON_AddStringToObject(m, "id", p->name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "tutti");
        cJSON *t = cJSON_AddObjectToObject(cJSON_AddObjectToObject(m, "tutti"), "pipeline");
        cJSON *st = cJSON_AddArrayToObject(t, "steps");
        for (int k = 0; k < p->n_steps; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", p->steps[k].name);
            cJSON_AddStringToObject(o, "model", p->steps[k].model);
            cJSON_AddItemToArray(st, o);
        }
        cJSON_AddStringToObject(t, "output", p->steps[p->output].name);
    }
}

tutti_ensemble *srv_pipeline_open_model(void *models, const char *model, char *err, size_t cap) {
    const srv_pipe_models *pm = models;
    const srv_spec *sp = srv_registry_find(pm->reg, model);
    if (!sp) return snprintf(err, cap, "model '%s' is not served", model), NULL;
    tutti_member_desc desc[TUTTI_ENSEMBLE_MAX_MEMBERS];
    const tutti_model *ms[TUTTI_ENSEMBLE_MAX_MEMBERS];
    tutti_ensemble_params p;
    srv_spec_params(pm->reg, sp, pm->n_threads > 0 ? pm->n_threads : 1, desc, ms, &p);
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (e && srv_spec_apply(sp, e) < 0) {
        tutti_ensemble_free(e);
        e = NULL;
    }
    if (!e) {
        char m[1024];
        srv_registry_scrub(pm->reg, tutti_last_error(), m, sizeof m); /* clients never see the models' paths */
        snprintf(err, cap, "%s", m);
    }
    return e;
}

/* ---- the request's part ---- */

static uint64_t g_ids;

int srv_pipeline_prepare(srv_server *s, srv_job *j, char *err, size_t cap, const char **param, const char **code) {
    const srv_request *r = &j->req;
    const char *name = r->model && r->model[0] ? r->model : "default";
    const pl_pipeline *p = r->ens.present ? NULL : srv_pipeline_find(&s->reg, name);
    if (!p) return -1;
    j->pipeline = p;
    snprintf(j->model_name, sizeof j->model_name, "%s", name);
    const char *what = r->n != 1          ? "n"
                       : r->logprobs >= 0 ? "logprobs"
                       : r->n_bias > 0    ? "logit_bias"
                       : r->grammar       ? r->grammar_field
                       : r->n_stop > 0    ? "stop"
                                          : NULL;
    if (what) {
        *param = what;
        return snprintf(err, cap,
                        "model '%s' is a pipeline: '%s' is not available for it (give sampling, grammars "
                        "and stop strings in its steps)",
                        name, what),
               400;
    }
    if (r->kind == SRV_COMPLETION && (r->n_prompts != 1 || !r->prompts[0].text)) {
        *param = "prompt", *code = NULL;
        return snprintf(err, cap, "model '%s' is a pipeline: give one text prompt", name), 400;
    }
    j->n_prompts = 1;
    if (!r->seed_set)
        j->req.sp.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ __atomic_add_fetch(&g_ids, 1, __ATOMIC_RELAXED);
    snprintf(j->id, sizeof j->id, "%s-pl%llx%04llx", r->kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL),
             (unsigned long long)(__atomic_add_fetch(&g_ids, 1, __ATOMIC_RELAXED) & 0xffff));
    j->created = (long)time(NULL);
    return 0;
}

/* {input}: the prompt, or the last user message; {messages}: every message
 * as a "role: content" line */
static char *request_texts(const srv_request *r, char **messages, size_t *n_messages, size_t *n_input) {
    size_t n = 0;
    for (int k = 0; k < r->n_msgs; k++)
        n += strlen(r->msgs[k].role) + 3 + (r->msgs[k].content ? strlen(r->msgs[k].content) : 0);
    const char *input = r->kind == SRV_COMPLETION ? r->prompts[0].text : "";
    for (int k = 0; k < r->n_msgs; k++)
        if (!strcmp(r->msgs[k].role, "user") && r->msgs[k].content) input = r->msgs[k].content;
    *n_input = r->kind == SRV_COMPLETION ? r->prompts[0].len : strlen(input);
    char *m = malloc(r->kind == SRV_COMPLETION ? *n_input + 7 : n + 1);
    if (!m) return NULL;
    size_t o = 0;
    if (r->kind == SRV_COMPLETION) {
        memcpy(m, "user: ", 6);
        memcpy(m + 6, input, *n_input);
        o = 6 + *n_input;
    }
    for (int k = 0; k < r->n_msgs; k++)
        o += (size_t)sprintf(m + o, "%s%s: %s", k ? "\n" : "", r->msgs[k].role,
                             r->msgs[k].content ? r->msgs[k].content : "");
    m[o] = 0;
    *messages = m, *n_messages = o;
    return (char *)input;
}

/* ---- the run ---- */

typedef struct pipe_run {
    srv_server *s;
    srv_job *j;
    pthread_t th;
} pipe_run;

static int stop_cb(void *user) {
    pipe_run *pr = user;
    pthread_mutex_lock(&pr->j->mu);
    int stop = pr->j->cancelled || __atomic_load_n(&pr->s->reg.pipelines->stopping, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pr->j->mu);
    return stop;
}

static int output_cb(const char *bytes, size_t n, void *user) {
    pipe_run *pr = user;
    srv_job *j = pr->j;
    pthread_mutex_lock(&j->mu);
    int stop = j->cancelled;
    if (!stop && j->req.stream) {
        srv_sse_event(j, srv_chunk_json(j, 0, bytes, n, NULL, !j->role_sent, 0));
        j->role_sent = true;
    } else if (!stop) {
        stop = tutti_buf_append(&j->text[0], &j->n_text[0], &j->cap_text[0], bytes, n) < 0;
    }
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static cJSON *steps_usage(const pl_pipeline *p, const pl_result *r) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < p->n_steps; k++) {
        const pl_step_usage *u = &r->usage[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(a, o);
        cJSON_AddStringToObject(o, "step", p->steps[k].name);
        cJSON_AddStringToObject(o, "model", p->steps[k].model);
        cJSON_AddBoolToObject(o, "ran", u->ran);
        cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens);
        cJSON_AddNumberToObject(o, "completion_tokens", u->completion_units);
        cJSON_AddStringToObject(o, "unit", u->unit ? u->unit : "token");
        cJSON_AddNumberToObject(o, "start_seconds", u->start_s);
        cJSON_AddNumberToObject(o, "end_seconds", u->end_s);
        cJSON_AddStringToObject(o, "finish_reason", u->finish == TUTTI_FINISH_LENGTH ? "length" : "stop");
    }
    return a;
}

/* the job's end, as a slot ends one: the last chunks of a stream, or the
 * status and message of a failure */
static void finish(srv_job *j, const pl_pipeline *p, const pl_result *r, int rc, const char *msg) {
    pthread_mutex_lock(&j->mu);
    const pl_step_usage *out = &r->usage[p->output];
    j->finish[0] = out->finish == TUTTI_FINISH_LENGTH ? "length" : "stop";
    j->unit = out->unit ? out->unit : "token";
    j->t_gen_s = r->wall_s;
    for (int k = 0; k < p->n_steps; k++)
        j->n_prompt += r->usage[k].prompt_tokens, j->n_units += r->usage[k].completion_units;
    cJSON *su = steps_usage(p, r);
    j->pipe_steps = cJSON_PrintUnformatted(su);
    cJSON_Delete(su);
    if (rc < 0) {
        j->status = r->timed_out ? 504 : r->failed >= 0 ? 500 : 503;
        snprintf(j->error, sizeof j->error, "%s", msg);
    }
    if (j->req.stream) {
        if (rc < 0) srv_sse_event(j, srv_error_json(j->status, msg, NULL, NULL));
        else {
            if (!j->role_sent && j->req.kind == SRV_CHAT) srv_sse_event(j, srv_chunk_json(j, 0, "", 0, NULL, true, 0));
            srv_sse_event(j, srv_chunk_json(j, 0, NULL, 0, j->finish[0], false, 0));
            if (j->req.include_usage) srv_sse_event(j, srv_usage_chunk_json(j));
        }
        char *done = strdup("[DONE]");
        srv_sse_event(j, done);
    }
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void *pipe_main(void *arg) {
    pipe_run *pr = arg;
    srv_server *s = pr->s;
    srv_job *j = pr->j;
    const pl_pipeline *p = j->pipeline;
    srv_pipe_models pm = {.reg = &s->reg, .n_threads = s->opts.n_threads};
    pl_backend b = {.open = srv_pipeline_open_model, .user = &pm};
    pl_run_opts o = {.sp = j->req.sp,
                     .max_tokens = j->req.max_tokens > 0 ? (int32_t)j->req.max_tokens : 0,
                     .on_output = output_cb,
                     .should_stop = stop_cb,
                     .user = pr};
    char *messages = NULL, err[2048] = "out of memory";
    o.input = request_texts(&j->req, &messages, &o.messages_len, &o.input_len);
    o.messages = messages;
    pl_result r;
    memset(&r, 0, sizeof r);
    r.failed = -1;
    int rc = o.input ? pl_run(p, &b, &o, &r, err, sizeof err) : -1;
    srv_pipes *pp = s->reg.pipelines;
    pthread_mutex_lock(&pp->mu);
    pp->active--; /* before the answer: a client's next request finds the room free */
    pthread_mutex_unlock(&pp->mu);
    finish(j, p, &r, rc, err);
    pl_result_free(&r);
    free(messages);
    srv_job_unref(j);
    pthread_mutex_lock(&pp->mu);
    pp->running--;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
    free(pr);
    return NULL;
}

int srv_pipeline_submit(srv_server *s, srv_job *j) {
    srv_pipes *pp = s->reg.pipelines;
    pipe_run *pr = calloc(1, sizeof *pr);
    if (!pr) return 503;
    pr->s = s, pr->j = j;
    pthread_mutex_lock(&pp->mu);
    int limit = s->opts.parallel > 0 ? s->opts.parallel : 1;
    if (pp->stopping || pp->active >= limit) {
        pthread_mutex_unlock(&pp->mu);
        free(pr);
        return 503;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    pp->running++, pp->active++;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int ok = pthread_create(&pr->th, &at, pipe_main, pr) == 0;
    pthread_attr_destroy(&at);
    if (!ok) {
        pp->running--, pp->active--;
        pthread_mutex_lock(&j->mu);
        j->refs--;
        pthread_mutex_unlock(&j->mu);
        free(pr);
    }
    pthread_mutex_unlock(&pp->mu);
    return ok ? 0 : 503;
}

/* ---- tutti run -e FILE ---- */

static int write_out(const char *b, size_t n, void *u) {
    (void)u;
    fwrite(b, 1, n, stdout);
    fflush(stdout);
    return 0;
}

static void print_steps(const pl_pipeline *p, const pl_result *r) {
    for (int k = 0; k < p->n_steps; k++) {
        const pl_step_usage *u = &r->usage[k];
        if (!u->ran) {
            fprintf(stderr, "  step %-16s model %-20s did not run\n", p->steps[k].name, p->steps[k].model);
            continue;
        }
        fprintf(stderr, "  step %-16s model %-20s %5d prompt tokens, %5d %ss, from %.3f s to %.3f s (%.3f s)%s\n",
                p->steps[k].name, p->steps[k].model, u->prompt_tokens, u->completion_units, u->unit, u->start_s,
                u->end_s, u->end_s - u->start_s, k == p->output ? " [output]" : "");
    }
    fprintf(stderr, "pipeline '%s': %d steps in %.3f s of wall time; the steps' times add up to %.3f s\n", p->name,
            p->n_steps, r->wall_s, r->sum_s);
}

int server_run_pipeline(const server_opts *o, const char *prompt, size_t n, const tutti_sampler_params *sp,
                        int32_t max_tokens, bool quiet, int (*should_stop)(void *), char *err, size_t cap) {
    srv_registry reg;
    int rc = srv_registry_plan(&reg, o, err, cap) < 0 || srv_registry_load(&reg, err, cap) < 0 ? -1 : 0;
    const pl_pipeline *p = rc ? NULL : srv_pipeline_first(&reg);
    char *messages = p ? malloc(n + 7) : NULL;
    if (rc == 0 && !p) snprintf(err, cap, "the config has no pipelines"), rc = -1;
    else if (rc == 0 && !messages) snprintf(err, cap, "out of memory"), rc = -1;
    if (rc == 0) {
        memcpy(messages, "user: ", 6), memcpy(messages + 6, prompt, n), messages[n + 6] = 0;
        srv_pipe_models pm = {.reg = &reg, .n_threads = o->n_threads};
        pl_backend b = {.open = srv_pipeline_open_model, .user = &pm};
        pl_run_opts ro = {.input = prompt,
                          .input_len = n,
                          .messages = messages,
                          .messages_len = n + 6,
                          .sp = *sp,
                          .max_tokens = max_tokens,
                          .on_output = write_out,
                          .should_stop = should_stop};
        pl_result r;
        rc = pl_run(p, &b, &ro, &r, err, cap);
        fflush(stdout);
        if (!quiet) fprintf(stderr, "\n"), print_steps(p, &r);
        pl_result_free(&r);
    }
    free(messages);
    srv_registry_free(&reg);
    return rc;
}
