/* Running a pipeline (server/pipeline.h): a step starts, in a thread of its own,
 * as soon as every step its prompt refers to is done, so independent steps
 * (a moa layer's proposers) generate at the same time.  Each step opens its
 * own ensemble through the backend and frees it when done.  The first step
 * to fail stops the others (their text callbacks return non-zero at their
 * next piece) and its message, naming it, is the run's error. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/pipeline.h"
#include "util/buf.h"
#include "util/clock.h"

enum { ST_WAITING, ST_RUNNING, ST_DONE, ST_FAILED };

typedef struct run_ctx run_ctx;

typedef struct step_job {
    run_ctx *rc;
    int k;
    pthread_t th;
    char *buf;
    size_t n, cap;
    double t0, deadline;
    bool timed_out, oom;
    bool joinable; /* its thread started */
    char err[1024];
} step_job;

struct run_ctx {
    const pl_pipeline *p;
    const pl_backend *b;
    const pl_run_opts *o;
    pl_result *r;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state[PL_MAX_STEPS];
    volatile int stop; /* a step failed or the output's receiver said stop */
    bool receiver_stopped;
    double t_start;
    step_job jobs[PL_MAX_STEPS];
};

char *pl_expand(const pl_step *s, const pl_run_opts *o, const pl_result *r, size_t *n) {
    size_t len = 0;
    for (int i = 0; i < s->n_segs; i++) {
        const pl_seg *g = &s->segs[i];
        len += g->kind == PL_SEG_TEXT       ? g->len
               : g->kind == PL_SEG_INPUT    ? o->input_len
               : g->kind == PL_SEG_MESSAGES ? o->messages_len
                                            : r->n_text[g->step];
    }
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (int i = 0; i < s->n_segs; i++) {
        const pl_seg *g = &s->segs[i];
        const char *src = g->kind == PL_SEG_TEXT       ? g->text
                          : g->kind == PL_SEG_INPUT    ? o->input
                          : g->kind == PL_SEG_MESSAGES ? o->messages
                                                       : r->text[g->step];
        size_t m = g->kind == PL_SEG_TEXT       ? g->len
                   : g->kind == PL_SEG_INPUT    ? o->input_len
                   : g->kind == PL_SEG_MESSAGES ? o->messages_len
                                                : r->n_text[g->step];
        if (m) memcpy(out + k, src, m);
        k += m;
    }
    out[k] = 0;
    *n = k;
    return out;
}

/* Each piece of a step's text: kept (later steps read it), forwarded when
 * the step is the output, and the moment to stop (another step failed, the
 * client left, the step's time is up). */
static int piece_cb(const char *bytes, size_t n, void *user) {
    step_job *sj = user;
    run_ctx *rc = sj->rc;
    if (rc->stop || (rc->o->should_stop && rc->o->should_stop(rc->o->user))) return 1;
    if (sj->deadline > 0 && tutti_now_s() > sj->deadline) {
        sj->timed_out = true;
        return 1;
    }
    if (tutti_buf_append(&sj->buf, &sj->n, &sj->cap, bytes, n) < 0) {
        sj->oom = true;
        return 1;
    }
    if (sj->k == rc->p->output && rc->o->on_output && rc->o->on_output(bytes, n, rc->o->user)) {
        rc->receiver_stopped = true;
        rc->stop = 1;
        return 1;
    }
    return 0;
}

static tutti_sampler_params step_sampler(const pl_step *s, const pl_run_opts *o, int k) {
    tutti_sampler_params sp = o->sp;
    if (!isnan(s->temperature)) sp.temp = s->temperature;
    if (s->top_k != INT32_MIN) sp.top_k = s->top_k;
    if (!isnan(s->top_p)) sp.top_p = s->top_p;
    if (!isnan(s->min_p)) sp.min_p = s->min_p;
    if (!isnan(s->repeat_penalty)) sp.repeat_penalty = s->repeat_penalty;
    sp.seed = s->seed >= 0 ? (uint64_t)s->seed : o->sp.seed + (uint64_t)k;
    return sp;
}

static tutti_grammar *step_grammar(const pl_step *s) {
    if (s->grammar) return tutti_grammar_parse(s->grammar, strlen(s->grammar));
    if (s->json_schema) return tutti_grammar_from_json_schema(s->json_schema, strlen(s->json_schema));
    return s->json ? tutti_grammar_json() : NULL;
}

/* The step's generation; 0, or -1 with sj->err set. */
static int generate_step(step_job *sj, const pl_step *s, const char *prompt, size_t plen, pl_step_usage *u) {
    run_ctx *rc = sj->rc;
    tutti_ensemble *e = rc->b->open(rc->b->user, s->model, sj->err, sizeof sj->err);
    if (!e) return -1;
    tutti_grammar *g = step_grammar(s);
    int ret = 0;
    if ((s->grammar || s->json_schema || s->json) && !g) {
        snprintf(sj->err, sizeof sj->err, "its grammar: %s", tutti_last_error());
        ret = -1;
    }
    int32_t max = s->max_tokens >= 0 ? s->max_tokens : rc->o->max_tokens > 0 ? rc->o->max_tokens : 256;
    tutti_sampler_params sp = step_sampler(s, rc->o, sj->k);
    tutti_mask m = {.stop = (const char *const *)s->stop,
                    .n_stop = s->n_stop,
                    .max_tokens = max,
                    .grammar = g,
                    .ignore_eos = s->ignore_eos};
    tutti_ensemble_stats st;
    memset(&st, 0, sizeof st);
    u->unit = tutti_ensemble_align(e) == TUTTI_ALIGN_TOKEN ? "token" : "byte";
    if (ret == 0 && max > 0 && tutti_ensemble_generate(e, prompt, plen, &sp, &m, piece_cb, sj, &st) < 0) {
        snprintf(sj->err, sizeof sj->err, "%s", tutti_last_error());
        ret = -1;
    }
    if (ret == 0 && sj->timed_out)
        snprintf(sj->err, sizeof sj->err, "timed out after %g s (its 'timeout')", s->timeout_s), ret = -1;
    else if (ret == 0 && sj->oom) snprintf(sj->err, sizeof sj->err, "out of memory"), ret = -1;
    u->prompt_tokens = (int32_t)st.n_prompt_evaluated[0];
    u->completion_units = st.n_units;
    u->finish = max == 0 ? TUTTI_FINISH_LENGTH : st.finish;
    tutti_grammar_free(g);
    tutti_ensemble_free(e);
    return ret;
}

static void *step_main(void *arg) {
    step_job *sj = arg;
    run_ctx *rc = sj->rc;
    const pl_step *s = &rc->p->steps[sj->k];
    pl_step_usage u = {.unit = "token"};
    size_t plen = 0;
    char *prompt = pl_expand(s, rc->o, rc->r, &plen); /* the steps it refers to are done */
    int ret =
        prompt ? generate_step(sj, s, prompt, plen, &u) : (snprintf(sj->err, sizeof sj->err, "out of memory"), -1);
    free(prompt);
    pthread_mutex_lock(&rc->mu);
    u.ran = true;
    u.start_s = sj->t0 - rc->t_start;
    u.end_s = tutti_now_s() - rc->t_start;
    rc->r->usage[sj->k] = u;
    if (!sj->buf) sj->buf = calloc(1, 1);
    rc->r->text[sj->k] = sj->buf, rc->r->n_text[sj->k] = sj->n;
    sj->buf = NULL;
    if (ret == 0 && !rc->r->text[sj->k]) ret = -1, snprintf(sj->err, sizeof sj->err, "out of memory");
    rc->state[sj->k] = ret == 0 ? ST_DONE : ST_FAILED;
    if (ret < 0 && rc->r->failed < 0) {
        rc->r->failed = sj->k;
        rc->r->timed_out = sj->timed_out;
    }
    if (ret < 0) rc->stop = 1;
    pthread_cond_broadcast(&rc->cv);
    pthread_mutex_unlock(&rc->mu);
    return NULL;
}

/* Starts every waiting step whose references are done (rc->mu held);
 * returns how many run now. */
static int start_ready(run_ctx *rc) {
    int running = 0;
    for (int k = 0; k < rc->p->n_steps; k++) {
        const pl_step *s = &rc->p->steps[k];
        bool ready =
            rc->state[k] == ST_WAITING && !rc->stop && !(rc->o->should_stop && rc->o->should_stop(rc->o->user));
        for (int d = 0; ready && d < rc->p->n_steps; d++)
            if ((s->deps >> d & 1) && rc->state[d] != ST_DONE) ready = false;
        if (ready) {
            step_job *sj = &rc->jobs[k];
            sj->rc = rc, sj->k = k;
            sj->t0 = tutti_now_s();
            sj->deadline = s->timeout_s > 0 ? sj->t0 + s->timeout_s : 0;
            rc->state[k] = ST_RUNNING;
            if (pthread_create(&sj->th, NULL, step_main, sj) != 0) {
                rc->state[k] = ST_FAILED;
                snprintf(sj->err, sizeof sj->err, "cannot start its thread");
                if (rc->r->failed < 0) rc->r->failed = k;
                rc->stop = 1;
                continue;
            }
            sj->joinable = true;
        }
        running += rc->state[k] == ST_RUNNING;
    }
    return running;
}

int pl_run(const pl_pipeline *p, const pl_backend *b, const pl_run_opts *o, pl_result *r, char *err, size_t cap) {
    memset(r, 0, sizeof *r);
    r->failed = -1;
    run_ctx *rc = calloc(1, sizeof *rc);
    if (!rc) return snprintf(err, cap, "out of memory"), -1;
    rc->p = p, rc->b = b, rc->o = o, rc->r = r;
    pthread_mutex_init(&rc->mu, NULL);
    pthread_cond_init(&rc->cv, NULL);
    rc->t_start = tutti_now_s();
    pthread_mutex_lock(&rc->mu);
    for (;;) {
        int running = start_ready(rc);
        if (running == 0) break; /* all done, or a failure and nothing left running */
        pthread_cond_wait(&rc->cv, &rc->mu);
    }
    pthread_mutex_unlock(&rc->mu);
    for (int k = 0; k < p->n_steps; k++)
        if (rc->jobs[k].joinable) pthread_join(rc->jobs[k].th, NULL);
    r->wall_s = tutti_now_s() - rc->t_start;
    for (int k = 0; k < p->n_steps; k++)
        if (r->usage[k].ran) r->sum_s += r->usage[k].end_s - r->usage[k].start_s;
    int ret = 0;
    if (r->failed >= 0) {
        const pl_step *s = &p->steps[r->failed];
        snprintf(err, cap, "pipeline '%s': step '%s' (model '%s'): %s", p->name, s->name, s->model,
                 rc->jobs[r->failed].err);
        ret = -1;
    } else if (rc->receiver_stopped || (o->should_stop && o->should_stop(o->user))) {
        snprintf(err, cap, "pipeline '%s': stopped", p->name);
        ret = -1;
    }
    for (int k = 0; k < p->n_steps; k++) free(rc->jobs[k].buf);
    pthread_mutex_destroy(&rc->mu);
    pthread_cond_destroy(&rc->cv);
    free(rc);
    return ret;
}

void pl_result_free(pl_result *r) {
    for (int k = 0; k < PL_MAX_STEPS; k++) free(r->text[k]);
    memset(r, 0, sizeof *r);
    r->failed = -1;
}
