/* Continuous batching (tutti.h "Continuous batching"): an executor thread
 * runs the forward passes of every batched session, one pass per model and
 * step over all the tokens pending then.
 *
 * Requests.  A batched session's eval (one sequence) or eval_multi (several
 * sessions of one model) becomes a request: its segments (session, ids,
 * count, optional all-rows output) are queued in arrival order and the
 * caller waits on its own condition variable until every segment is done.
 * A segment may take several steps: a step gives a model's pass first every
 * short segment whole (at most SHORT tokens left: generated tokens,
 * tokenization hypotheses), then the rest of n_ubatch tokens to long ones in
 * arrival order, cut where the budget ends.  Each chunk runs at the
 * session's n_past, which the executor advances; intermediate chunks skip
 * the output head.
 *
 * Steps.  Joined threads (a server slot during a job) are "working" except
 * while they wait for a request.  A step starts when something is queued
 * and no joined thread is working, or when the oldest request has waited
 * the step budget (the last step's duration, clamped to [0.2 ms,
 * max_wait_ms]): the slots' next tokens then arrive within one step of each
 * other and share it, and a slow slot delays the others by at most that
 * budget.  One executor, one thread pool: passes never overlap, so the
 * models' workspaces (activations, attention scratch, rows) share the pool.
 *
 * Bits.  Each chunk goes through tutti_forward_segments, the code of an
 * unbatched pass, so a session's logits depend on the batch only through
 * the matmul kernels' tiling (tutti.h). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "util/clock.h"
#include "util/error.h"

#define BATCH_MAX_MODELS 64
#define BATCH_MAX_CLIENTS 256
#define BATCH_MAX_SEGS 64 /* segments per pass (rows scratch: that many logits rows) */
#define BATCH_SHORT 16    /* a segment with at most this many tokens left goes in whole */

/* one model's workspace: a session without a KV cache whose activations
 * hold a pass of n_ubatch tokens */
typedef struct batch_ws {
    const tutti_model *model;
    tutti_session *w;
    int32_t n_ctx; /* attention scratch sized for */
    int refs;      /* sessions attached */
    float *rows;   /* [cap_rows][n_vocab], grown as passes need */
    int32_t cap_rows;
} batch_ws;

typedef struct batch_seg {
    tutti_session *s;
    const int32_t *ids;
    int32_t n, done;
    float *out;  /* all rows, or NULL */
    float *embd; /* embeddings: the rows after the output norm, no logits (or NULL) */
} batch_seg;

typedef struct batch_client {
    pthread_t th;
    int depth;
    bool waiting;
} batch_client;

typedef struct batch_req {
    struct batch_req *next;
    batch_ws *ws;
    batch_seg *seg;
    int32_t n_seg, n_left;
    int32_t n_steps;
    bool done;
    double t_post;
    bool joined; /* posted by a joined thread (th), which waits from then on */
    pthread_t th;
    pthread_cond_t cv;
} batch_req;

struct tutti_batch {
    tutti_batch_params p;
    tutti_threadpool *tp;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the executor waits here */
    pthread_t th;
    bool started, quit, in_pass;
    pthread_cond_t pass_cv; /* a pass has ended (attaching waits for it) */
    batch_ws ws[BATCH_MAX_MODELS];
    batch_req *head, *tail;
    batch_client cl[BATCH_MAX_CLIENTS];
    int n_cl, n_working;
    double step_s;   /* the last step's duration */
    double step_end; /* when it ended */
    tutti_batch_stats st;
    /* the plan of one pass (executor only) */
    tutti_fwd_seg plan[BATCH_MAX_SEGS];
    batch_seg *plan_src[BATCH_MAX_SEGS];
    batch_req *plan_req[BATCH_MAX_SEGS];
};

tutti_batch_params tutti_batch_default_params(void) {
    tutti_batch_params p = {.n_threads = 0, .n_ubatch = 512, .max_wait_ms = 50};
    return p;
}

/* ---- clients ---- */

/* A thread's entry.  Entries move (leaving swaps the last one into the
 * gap), so a request names its thread, never an entry: a pointer kept
 * across a leave would update a stale entry and leave the moved thread
 * counted as working while it waits, each step then waiting the whole
 * budget for it. */
static batch_client *find_client_th(tutti_batch *b, pthread_t th) {
    for (int i = 0; i < b->n_cl; i++)
        if (pthread_equal(b->cl[i].th, th)) return &b->cl[i];
    return NULL;
}

static batch_client *find_client(tutti_batch *b) { return find_client_th(b, pthread_self()); }

void tutti_batch_join(tutti_batch *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    batch_client *c = find_client(b);
    if (c) {
        c->depth++;
    } else if (b->n_cl < BATCH_MAX_CLIENTS) { /* beyond: not waited for, still served */
        b->cl[b->n_cl++] = (batch_client){.th = pthread_self(), .depth = 1};
        b->n_working++;
    }
    pthread_mutex_unlock(&b->mu);
}

void tutti_batch_leave(tutti_batch *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    batch_client *c = find_client(b);
    if (c && --c->depth == 0) {
        if (!c->waiting) b->n_working--;
        *c = b->cl[--b->n_cl];
        pthread_cond_signal(&b->cv); /* a step may be waiting for this thread */
    }
    pthread_mutex_unlock(&b->mu);
}

/* ---- the executor ---- */

/* Plans one pass for ws: short segments whole, then chunks of long ones. */
static int32_t plan_pass(tutti_batch *b, batch_ws *ws, int32_t max_k) {
    int32_t k = 0, tok = 0;
    for (int round = 0; round < 2; round++)
        for (batch_req *r = b->head; r; r = r->next) {
            if (r->ws != ws) continue;
            for (int32_t i = 0; i < r->n_seg && k < max_k && tok < b->p.n_ubatch; i++) {
                batch_seg *sg = &r->seg[i];
                int32_t left = sg->n - sg->done;
                bool in = false;
                for (int32_t q = 0; q < k && !in; q++) in = b->plan_src[q] == sg;
                if (left == 0 || in || (round == 0 && (left > BATCH_SHORT || tok + left > b->p.n_ubatch))) continue;
                int32_t take = left < b->p.n_ubatch - tok ? left : b->p.n_ubatch - tok;
                b->plan[k] = (tutti_fwd_seg){
                    .s = sg->s,
                    .ids = sg->ids + sg->done,
                    .n = take,
                    .out = sg->out ? sg->out + (size_t)sg->done * (size_t)ws->model->hp.n_vocab : NULL,
                    .embd = sg->embd ? sg->embd + (size_t)sg->done * (size_t)ws->model->hp.n_embd : NULL,
                    .no_logits = (take < left && !sg->out) || sg->embd};
                b->plan_src[k] = sg, b->plan_req[k] = r;
                k++, tok += take;
            }
        }
    return k;
}

/* After a pass: sessions advance, finished requests wake (b->mu held). */
static void apply_pass(tutti_batch *b, int32_t k) {
    for (int32_t q = 0; q < k; q++) {
        batch_seg *sg = b->plan_src[q];
        batch_req *r = b->plan_req[q];
        sg->s->n_past += b->plan[q].n;
        sg->done += b->plan[q].n;
        b->st.n_tokens += b->plan[q].n;
        if (sg->done < sg->n) continue;
        sg->s->has_logits = !sg->embd;
        if (--r->n_left > 0) continue;
        /* unlink and wake */
        batch_req **pp = &b->head, *prev = NULL;
        while (*pp != r) prev = *pp, pp = &(*pp)->next;
        *pp = r->next;
        if (b->tail == r) b->tail = prev;
        r->done = true;
        batch_client *c = r->joined ? find_client_th(b, r->th) : NULL;
        if (c && c->waiting) c->waiting = false, b->n_working++;
        b->st.n_requests++;
        pthread_cond_signal(&r->cv);
    }
    b->st.n_segments += k;
}

static void run_step(tutti_batch *b) {
    double t0 = tutti_now_s();
    bool any = false;
    for (int m = 0; m < BATCH_MAX_MODELS; m++) {
        batch_ws *ws = &b->ws[m];
        if (!ws->model) continue;
        bool has = false;
        for (batch_req *r = b->head; r && !has; r = r->next) has = r->ws == ws;
        if (!has) continue;
        for (batch_req *r = b->head; r; r = r->next)
            if (r->ws == ws) r->n_steps++;
        int32_t max_k = BATCH_MAX_SEGS;
        if (ws->cap_rows < max_k) { /* rows for the segments that want only their last row */
            float *r = realloc(ws->rows, sizeof(float) * (size_t)max_k * (size_t)ws->model->hp.n_vocab);
            if (r) ws->rows = r, ws->cap_rows = max_k;
            else max_k = ws->cap_rows > 1 ? ws->cap_rows : 1; /* out of memory: smaller passes */
        }
        int32_t k = plan_pass(b, ws, max_k);
        if (k == 0) continue;
        int32_t tok = 0;
        for (int32_t q = 0; q < k; q++) tok += b->plan[q].n;
        b->in_pass = true;
        pthread_mutex_unlock(&b->mu);
        tutti_forward_segments(ws->w, b->plan, k, NULL, ws->rows);
        pthread_mutex_lock(&b->mu);
        b->in_pass = false;
        pthread_cond_broadcast(&b->pass_cv);
        b->st.n_passes++;
        if (tok > b->st.max_tokens) b->st.max_tokens = tok;
        apply_pass(b, k);
        any = true;
    }
    if (any) b->st.n_steps++;
    b->step_end = tutti_now_s();
    b->step_s = b->step_end - t0;
}

static void *executor_main(void *arg) {
    tutti_batch *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->quit) {
        if (!b->head) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        /* the joined threads still working post within the budget, or go */
        double budget = b->step_s < 2e-4 ? 2e-4 : b->step_s, lim = b->p.max_wait_ms * 1e-3;
        if (budget > lim) budget = lim;
        double since = b->head->t_post > b->step_end ? b->head->t_post : b->step_end;
        double deadline = since + budget;
        while (!b->quit && b->n_working > 0 && tutti_now_s() < deadline) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double wait = deadline - tutti_now_s();
            long ns = ts.tv_nsec + (long)(wait * 1e9);
            ts.tv_sec += ns / 1000000000L;
            ts.tv_nsec = ns % 1000000000L;
            pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        }
        if (!b->quit) run_step(b);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

tutti_batch *tutti_batch_new(const tutti_batch_params *params) {
    tutti_batch_params p = params ? *params : tutti_batch_default_params();
    if (p.n_ubatch == 0) p.n_ubatch = 512;
    if (p.max_wait_ms == 0) p.max_wait_ms = 50;
    if (p.n_threads < 0 || p.n_threads > 512 || p.n_ubatch < 1 || p.n_ubatch > 8192 || !(p.max_wait_ms > 0) ||
        p.max_wait_ms > 60000) {
        tutti_set_error("tutti_batch_new: n_threads %d (0..512), n_ubatch %d (1..8192) or max_wait_ms %g (0..60000) "
                        "is out of range",
                        p.n_threads, p.n_ubatch, p.max_wait_ms);
        return NULL;
    }
    p.n_threads = tutti_session_threads(p.n_threads);
    tutti_batch *b = calloc(1, sizeof *b);
    if (!b) return tutti_set_error("tutti_batch_new: out of memory"), NULL;
    b->p = p;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    pthread_cond_init(&b->pass_cv, NULL);
    if (!(b->tp = tutti_threadpool_new(p.n_threads))) goto fail;
    if (pthread_create(&b->th, NULL, executor_main, b) != 0) {
        tutti_set_error("tutti_batch_new: cannot start the executor thread");
        goto fail;
    }
    b->started = true;
    return b;
fail:
    tutti_batch_free(b);
    return NULL;
}

void tutti_batch_free(tutti_batch *b) {
    if (!b) return;
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->quit = true;
        pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->th, NULL);
    }
    for (int m = 0; m < BATCH_MAX_MODELS; m++) { /* left by sessions never freed */
        tutti_session_free(b->ws[m].w);
        free(b->ws[m].rows);
    }
    tutti_threadpool_free(b->tp);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    pthread_cond_destroy(&b->pass_cv);
    free(b);
}

void tutti_batch_get_stats(tutti_batch *b, tutti_batch_stats *out) {
    memset(out, 0, sizeof *out);
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    *out = b->st;
    out->n_joined = b->n_cl;
    out->n_working = b->n_working;
    pthread_mutex_unlock(&b->mu);
}

/* ---- sessions ---- */

/* The workspace of s's model, created or grown to s's context (b->mu
 * held, no pass running). */
static batch_ws *attach_ws(tutti_batch *b, tutti_session *s) {
    batch_ws *ws = NULL, *free_slot = NULL;
    for (int m = 0; m < BATCH_MAX_MODELS && !ws; m++) {
        if (b->ws[m].model == s->model) ws = &b->ws[m];
        else if (!b->ws[m].model && !free_slot) free_slot = &b->ws[m];
    }
    if (ws && ws->n_ctx >= s->n_ctx) return ws;
    if (!ws && !free_slot)
        return tutti_set_error("tutti_session_new_batched: more than %d models", BATCH_MAX_MODELS), NULL;
    /* a new workspace (or a larger one: its attention scratch grows) */
    tutti_session_params sp = {.n_ctx = s->n_ctx, .n_threads = b->p.n_threads};
    tutti_session *w = tutti_session_alloc_own(s->model, &sp, false); /* it holds no timeline: no KV cache */
    if (!w) return NULL;
    if (tutti_session_alloc_work(w, b->p.n_ubatch, s->n_ctx, b->tp, false) < 0) {
        tutti_session_free(w);
        return NULL;
    }
    if (ws) {
        tutti_session_free(ws->w);
    } else {
        ws = free_slot;
        ws->refs = 0, ws->rows = NULL, ws->cap_rows = 0;
    }
    ws->model = s->model, ws->w = w, ws->n_ctx = s->n_ctx;
    return ws;
}

tutti_session *tutti_session_new_batched(const tutti_model *model, const tutti_session_params *params, tutti_batch *b) {
    if (!b) return tutti_set_error("tutti_session_new_batched: batch is NULL"), NULL;
    tutti_session *s = tutti_session_alloc_own(model, params, true);
    if (!s) return NULL;
    pthread_mutex_lock(&b->mu);
    while (b->in_pass) pthread_cond_wait(&b->pass_cv, &b->mu);
    batch_ws *ws = attach_ws(b, s);
    if (ws) ws->refs++;
    pthread_mutex_unlock(&b->mu);
    if (!ws) {
        tutti_session_free(s);
        return NULL;
    }
    s->batch = b;
    s->ws = ws;
    s->tp = b->tp;
    return s;
}

void tutti_batch_detach(tutti_session *s) {
    tutti_batch *b = s->batch;
    batch_ws *ws = s->ws;
    s->batch = NULL;
    s->ws = NULL;
    s->tp = NULL;
    pthread_mutex_lock(&b->mu);
    while (b->in_pass) pthread_cond_wait(&b->pass_cv, &b->mu);
    if (ws && --ws->refs == 0) { /* the model's last session: its workspace goes (the model may be unloaded) */
        tutti_session_free(ws->w);
        free(ws->rows);
        memset(ws, 0, sizeof *ws);
    }
    pthread_mutex_unlock(&b->mu);
}

int tutti_batch_eval(tutti_session *const *ss, const int32_t *const *ids, const int32_t *n, float *const *out,
                     float *const *embd, int32_t n_seq) {
    tutti_batch *b = ss[0]->batch;
    for (int32_t i = 1; i < n_seq; i++)
        if (ss[i]->batch != b || ss[i]->ws != ss[0]->ws)
            return tutti_set_error("tutti_session_eval_multi: sessions of different batches or models");
    batch_seg stack[16];
    batch_seg *seg = n_seq <= 16 ? stack : malloc(sizeof *seg * (size_t)n_seq);
    if (!seg) return tutti_set_error("tutti_session_eval_multi: out of memory");
    for (int32_t i = 0; i < n_seq; i++)
        seg[i] = (batch_seg){ss[i], ids[i], n[i], 0, out ? out[i] : NULL, embd ? embd[i] : NULL};
    batch_req r = {.ws = ss[0]->ws, .seg = seg, .n_seg = n_seq, .n_left = n_seq};
    pthread_cond_init(&r.cv, NULL);
    pthread_mutex_lock(&b->mu);
    r.t_post = tutti_now_s();
    batch_client *cl = find_client(b);
    if (cl && !cl->waiting) cl->waiting = true, b->n_working--;
    r.joined = cl != NULL;
    r.th = pthread_self();
    if (b->tail) b->tail->next = &r;
    else b->head = &r;
    b->tail = &r;
    pthread_cond_signal(&b->cv);
    while (!r.done) pthread_cond_wait(&r.cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    pthread_cond_destroy(&r.cv);
    if (seg != stack) free(seg);
    return r.n_steps;
}
