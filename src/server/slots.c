/* Slots, the bounded queue and generation jobs of `tutti serve`.
 *
 * Each of the --parallel slots is one worker thread with its own ensembles
 * (one per served model name it has run, built on the registry's loaded
 * models, so weights are shared read-only and the sessions are the slot's).
 * An ensemble keeps its members' KV caches between requests and reuses the
 * longest common prefix of token ids (fusion/member_local.c), so a chat
 * growing by one turn evaluates only the new turn; a new job goes to the
 * idle slot whose cache for that model shares the longest prompt prefix.
 * Jobs beyond the slots wait in a ring of --queue entries; beyond that 503.
 *
 * Cancellation: the text callback runs once per committed piece of text
 * (a token, or a UTF-8 character in byte alignment); it checks the job's
 * flag and whether the client's socket has been closed, and stops the
 * generation, which frees the slot. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/format.h"
#include "server/native.h"
#include "server/tools.h"
#include "server/server.h"
#include "util/buf.h"
#include "util/clock.h"

#define SLOT_CACHE 8

typedef struct cache_ent {
    char key[1024];
    tutti_ensemble *e;
    uint64_t last_use;
    char *last; /* member 1's last prompt (text, or ids as bytes) for slot choice */
    size_t n_last;
    int files[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* the registry files e is built on (held: ondemand.c) */
    int n_files;
} cache_ent;

/* a session per loaded file for llama-server's /completion (native.c),
 * with the ids it holds, so that a remote member's next step evaluates only
 * its new token */
typedef struct nat_sess {
    tutti_session *sess;
    int32_t *ids;
    int32_t n, cap;
} nat_sess;

struct srv_slot {
    srv_server *s;
    nat_sess nat[SRV_MAX_FILES];
    int id;
    pthread_t th;
    bool started;
    cache_ent cache[SLOT_CACHE];
    uint64_t clock;
    srv_job *job;   /* assigned, not yet finished */
    int sweep_seen; /* the registry's sweep_gen last swept for */
};

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->fd = -1;
    j->status = 200;
    j->unit = "token";
    j->tool_fmt = -1;
    return j;
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r > 0) return;
    if (j->held_reg) srv_registry_release(j->held_reg, j->held, j->n_held, true);
    srv_request_free(&j->req);
    for (int p = 0; p < SRV_MAX_N; p++)
        for (int i = 0; i < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) free(j->ids[p][i]);
    for (int i = 0; i < SRV_MAX_N; i++) free(j->text[i]), srv_lp_free(&j->lp[i]);
    free(j->out);
    free(j->nat_ids);
    free(j->nat_out);
    free(j->pipe_steps);
    srv_embd_free(&j->embd);
    for (int i = 0; i < SRV_MAX_N; i++) free(j->tool_calls[i]), free(j->tool_content[i]);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_client_gone(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->fd = -1;
    if (!j->done) j->cancelled = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* true when the peer has closed its side (call with j->mu held). */
static bool peer_closed(srv_job *j) {
    if (j->fd < 0) return j->cancelled;
    char c;
    ssize_t r = recv(j->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int append(char **buf, size_t *n, size_t *cap, const char *s, size_t k) {
    return tutti_buf_append(buf, n, cap, s, k);
}

void srv_sse_event(srv_job *j, char *json) {
    if (!json) return;
    append(&j->out, &j->n_out, &j->cap_out, "data: ", 6);
    append(&j->out, &j->n_out, &j->cap_out, json, strlen(json));
    append(&j->out, &j->n_out, &j->cap_out, "\n\n", 2);
    free(json);
    pthread_cond_broadcast(&j->cv);
}

/* test hook (TUTTI_SERVE_TEST_PIECE_DELAY_MS): the tiny test models finish
 * a generation faster than a test can disconnect in the middle of it */
static int g_piece_delay_ms;
/* test hook (TUTTI_SERVE_TEST_START_TOGETHER=N): jobs start in groups,
 * each slot waiting until N slots hold a job or 300 ms passed without a
 * new one, so that a test's concurrent requests overlap even though the
 * tiny models answer faster than curl processes start */
static int g_start_together, g_n_ready;
static uint64_t g_release;
static double g_last_arrival;

static void start_together(srv_server *s) {
    if (g_start_together <= 0) return;
    pthread_mutex_lock(&s->qmu);
    g_n_ready++;
    g_last_arrival = tutti_now_s();
    uint64_t gen = g_release;
    while (g_release == gen) {
        if (g_n_ready >= g_start_together || tutti_now_s() - g_last_arrival > 0.3) {
            g_release++, g_n_ready = 0;
            pthread_cond_broadcast(&s->qcv);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->qcv, &s->qmu, &ts);
    }
    pthread_mutex_unlock(&s->qmu);
}

/* entries are collected: for logprobs, or the members' shares */
static bool lp_on(const srv_job *j) { return j->req.logprobs >= 0 || j->req.shares; }

/* Returned text of the current choice: an SSE chunk (with the logprobs
 * entries it completes) or the choice's text (j->mu held). */
static void emit_locked(srv_job *j, const char *bytes, size_t n) {
    int c = j->choice;
    j->lp[c].emitted += n;
    if (j->tool_fmt >= 0 && !j->tool_plain[c]) {
        /* tools: held until the answer is seen to be text (streamed from
         * then on) or a call (read back at the end) */
        append(&j->text[c], &j->n_text[c], &j->cap_text[c], bytes, n);
        if (!j->req.stream || !srv_tools_is_text(j->tool_fmt, j->text[c], j->n_text[c])) return;
        j->tool_plain[c] = true;
        bytes = j->text[c], n = j->n_text[c];
        j->n_text[c] = 0;
    }
    if (j->req.stream) {
        size_t to = lp_on(j) ? srv_lp_ready(&j->lp[c], j->lp[c].emitted, false) : 0;
        srv_sse_event(j, srv_chunk_json(j, c, bytes, n, NULL, !j->role_sent, to));
        j->role_sent = true;
    } else {
        append(&j->text[c], &j->n_text[c], &j->cap_text[c], bytes, n);
    }
}

/* The end of a choice's text under tools (j->mu held): its calls (1) or
 * its text answer (0) into the job, and streamed; -1: out of memory. */
static int tools_close(srv_job *j, int c) {
    int k = srv_tools_answer(j->text[c] ? j->text[c] : "", j->n_text[c], j->tool_fmt, &j->req.tools, &j->tool_calls[c],
                             &j->tool_content[c]);
    if (k < 0 || !j->req.stream) return k;
    j->n_text[c] = 0;
    if (k > 0) srv_sse_event(j, srv_tool_chunk_json(j, c, !j->role_sent));
    else if (j->tool_content[c] && j->tool_content[c][0])
        srv_sse_event(j, srv_chunk_json(j, c, j->tool_content[c], strlen(j->tool_content[c]), NULL, !j->role_sent, 0));
    else return 0;
    j->role_sent = true;
    return k;
}

static int text_cb(const char *bytes, size_t n, void *user) {
    srv_job *j = user;
    if (g_piece_delay_ms > 0) usleep((useconds_t)g_piece_delay_ms * 1000u);
    pthread_mutex_lock(&j->mu);
    if (j->cancelled || peer_closed(j)) {
        j->cancelled = true;
        pthread_mutex_unlock(&j->mu);
        return 1;
    }
    emit_locked(j, bytes, n);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

void srv_job_emit(srv_job *j, const char *bytes, size_t n) {
    pthread_mutex_lock(&j->mu);
    emit_locked(j, bytes, n);
    pthread_mutex_unlock(&j->mu);
}

/* The fused distribution of each step, for logprobs (worker thread only;
 * the connection reads the entries once the job is done). */
static int step_cb(const tutti_step *st, void *user) {
    srv_job *j = user;
    if (srv_lp_step(&j->lp[j->choice], st, j->lp_vocab, j->req.logprobs >= 0 ? j->req.logprobs : 0, false) < 0) {
        j->lp_oom = true;
        return 1;
    }
    return 0;
}

static void finish_job(srv_job *j, int status, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (status != 200) {
        j->status = status;
        snprintf(j->error, sizeof j->error, "%s", msg);
        if (j->req.stream) {
            /* headers are out already: the error goes in the stream */
            srv_sse_event(j, srv_error_json(status, msg, NULL, NULL));
        }
    }
    if (j->req.stream) {
        if (status == 200 && j->req.include_usage) srv_sse_event(j, srv_usage_chunk_json(j));
        append(&j->out, &j->n_out, &j->cap_out, "data: [DONE]\n\n", 14);
    }
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* member 1's (first) prompt as bytes, to compare prefixes */
static void job_prompt_bytes(const srv_job *j, const char **p, size_t *n) {
    if (j->native) *p = (const char *)j->nat_ids, *n = sizeof(int32_t) * (size_t)j->n_nat_ids;
    else if (j->embd.on) *p = "", *n = 0;
    else if (j->ids[0][0]) *p = (const char *)j->ids[0][0], *n = sizeof(int32_t) * (size_t)j->n_ids[0][0];
    else *p = j->req.prompts[0].text, *n = j->req.prompts[0].len;
}

static size_t common_prefix(const char *a, size_t na, const char *b, size_t nb) {
    size_t k = 0, m = na < nb ? na : nb;
    while (k < m && a[k] == b[k]) k++;
    return k;
}

static int slot_threads(const srv_server *s) {
    int nt = s->opts.n_threads > 0 ? s->opts.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN) / s->n_slots;
    return nt > 0 ? nt : 1;
}

/* frees a cache entry's ensemble and lets go of its files */
static void cache_drop(srv_server *s, cache_ent *c) {
    tutti_ensemble_free(c->e);
    c->e = NULL;
    c->key[0] = 0;
    srv_registry_release(&s->reg, c->files, c->n_files, false);
    c->n_files = 0;
}

static void nat_drop(srv_server *s, nat_sess *ns, int k) {
    if (!ns->sess) return;
    tutti_session_free(ns->sess);
    ns->sess = NULL;
    ns->n = 0;
    srv_registry_release(&s->reg, &k, 1, false);
}

/* Between jobs: drops the ensembles and sessions built on models to be
 * unloaded (ondemand.c), the entries taken out under qmu (srv_submit reads
 * idle slots' caches) and freed outside it.  Called with qmu held. */
static void slot_sweep(srv_slot *sl) {
    srv_server *s = sl->s;
    int gen = s->reg.sweep_gen;
    if (gen == sl->sweep_seen) return;
    sl->sweep_seen = gen;
    cache_ent drop[SLOT_CACHE];
    int nd = 0;
    bool nat[SRV_MAX_FILES] = {0};
    for (int i = 0; i < SLOT_CACHE; i++) {
        bool doomed = false;
        for (int k = 0; sl->cache[i].e && k < sl->cache[i].n_files; k++)
            doomed |= srv_registry_doomed(&s->reg, sl->cache[i].files[k]);
        if (!doomed) continue;
        drop[nd++] = sl->cache[i];
        free(sl->cache[i].last);
        memset(&sl->cache[i], 0, sizeof sl->cache[i]);
    }
    for (int k = 0; k < s->reg.n_files && k < SRV_MAX_FILES; k++)
        nat[k] = sl->nat[k].sess && srv_registry_doomed(&s->reg, k);
    pthread_mutex_unlock(&s->qmu);
    for (int i = 0; i < nd; i++) drop[i].last = NULL, cache_drop(s, &drop[i]);
    for (int k = 0; k < SRV_MAX_FILES; k++)
        if (nat[k]) nat_drop(s, &sl->nat[k], k);
    pthread_mutex_lock(&s->qmu);
}

/* -md: the draft of a new ensemble where the library takes it (token or
 * byte alignment); another model (span alignment) goes on without one,
 * as said on stderr (the draft serves the models it can). */
static void slot_draft(const srv_server *s, tutti_ensemble *e, const char *name) {
    const tutti_draft_params *d = &s->opts.draft;
    if (!e || (!d->model_path && d->lookup_n <= 0)) return;
    if (tutti_ensemble_set_draft(e, d) < 0)
        fprintf(stderr, "tutti serve: model '%s' generates without the draft: %s\n", name, tutti_last_error());
}

static tutti_ensemble *slot_ensemble(srv_slot *sl, srv_job *j, char *err, size_t cap) {
    srv_server *s = sl->s;
    cache_ent *c = NULL, *lru = &sl->cache[0];
    for (int i = 0; i < SLOT_CACHE; i++) {
        if (sl->cache[i].e && !strcmp(sl->cache[i].key, j->spec.key)) c = &sl->cache[i];
        if (!sl->cache[i].e || (lru->e && sl->cache[i].last_use < lru->last_use)) lru = &sl->cache[i];
    }
    if (!c) {
        c = lru;
        cache_drop(s, c);
        /* held while the entry lives (the job holds them already: loaded) */
        if (srv_registry_acquire(&s->reg, j->spec.file, j->spec.n, false, err, cap) < 0) return NULL;
        memcpy(c->files, j->spec.file, sizeof(int) * (size_t)j->spec.n);
        c->n_files = j->spec.n;
        tutti_member_desc desc[TUTTI_ENSEMBLE_MAX_MEMBERS];
        const tutti_model *models[TUTTI_ENSEMBLE_MAX_MEMBERS];
        tutti_ensemble_params p;
        srv_spec_params(&s->reg, &j->spec, slot_threads(s), desc, models, &p);
        p.batch = s->batch;
        c->e = tutti_ensemble_new(&p);
        if (c->e && srv_spec_apply(&j->spec, c->e) < 0) {
            tutti_ensemble_free(c->e);
            c->e = NULL;
        }
        slot_draft(s, c->e, j->model_name);
        if (!c->e) {
            snprintf(err, cap, "model '%s': %s", j->model_name, tutti_last_error());
            cache_drop(s, c);
            return NULL;
        }
        snprintf(c->key, sizeof c->key, "%s", j->spec.key);
    }
    c->last_use = ++sl->clock;
    const char *p;
    size_t n;
    job_prompt_bytes(j, &p, &n);
    char *cp = malloc(n ? n : 1);
    if (cp) {
        memcpy(cp, p, n);
        free(c->last);
        c->last = cp, c->n_last = n;
    }
    return c->e;
}

/* the slot's session of loaded file k (made at its first use), NULL with
 * the library's message */
static nat_sess *nat_session(srv_slot *sl, int k) {
    srv_server *s = sl->s;
    const srv_file *f = &s->reg.files[k];
    nat_sess *ns = &sl->nat[k];
    if (!ns->sess) {
        /* held while the session lives (the job holds it already: loaded) */
        char e[256];
        if (srv_registry_acquire(&s->reg, &k, 1, false, e, sizeof e) < 0) return NULL;
        tutti_session_params p = tutti_session_default_params();
        p.n_ctx = f->n_ctx, p.n_threads = slot_threads(s);
        ns->sess = s->batch ? tutti_session_new_batched(f->model, &p, s->batch) : tutti_session_new(f->model, &p);
        if (!ns->sess) srv_registry_release(&s->reg, &k, 1, false);
    }
    return ns->sess ? ns : NULL;
}

/* true when the job's client has left (then the job is cancelled) */
static bool job_gone(void *arg) {
    srv_job *j = arg;
    pthread_mutex_lock(&j->mu);
    if (!j->cancelled && peer_closed(j)) j->cancelled = true;
    bool gone = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return gone;
}

/* POST /v1/embeddings on the slot's session of the model (its cache is
 * cleared: the prefix it held for /completion is gone) */
static void run_embd(srv_slot *sl, srv_job *j) {
    srv_server *s = sl->s;
    const int k = j->embd.file;
    nat_sess *ns = k >= 0 && k < SRV_MAX_FILES ? nat_session(sl, k) : NULL;
    if (!ns) {
        finish_job(j, 500, k >= 0 && k < SRV_MAX_FILES ? tutti_last_error() : "too many loaded models");
        return;
    }
    ns->n = 0;
    double t0 = tutti_now_s();
    char err[1024];
    int rc = srv_embd_run(&j->embd, ns->sess, s->reg.files[k].model, job_gone, j, err, sizeof err);
    srv_metrics *mt = &s->metrics;
    pthread_mutex_lock(&mt->mu);
    mt->prompt_tokens += j->embd.n_tokens;
    mt->prompt_evaluated += j->embd.n_tokens;
    mt->member_forward_s[k] += tutti_now_s() - t0;
    mt->member_tokens[k] += j->embd.n_tokens;
    pthread_mutex_unlock(&mt->mu);
    finish_job(j, rc < 0 ? 500 : 200, err);
}

/* llama-server's POST /completion: the next token's distribution after
 * the prompt ids, reusing the longest common prefix the slot's session for
 * that file holds */
static void run_native(srv_slot *sl, srv_job *j) {
    srv_server *s = sl->s;
    if (j->nat_file < 0 || j->nat_file >= SRV_MAX_FILES) {
        finish_job(j, 400, "too many loaded models for /completion");
        return;
    }
    srv_file *f = &s->reg.files[j->nat_file];
    double t0 = tutti_now_s();
    nat_sess *ns = nat_session(sl, j->nat_file);
    if (!ns) {
        finish_job(j, 500, tutti_last_error());
        return;
    }
    int32_t n = j->n_nat_ids, k = 0;
    while (k < n && k < ns->n && ns->ids[k] == j->nat_ids[k]) k++;
    if (k == n) k = n - 1; /* the last position's logits are computed again */
    if (ns->cap < n) {
        int32_t *ni = realloc(ns->ids, sizeof(int32_t) * (size_t)n);
        if (!ni) {
            finish_job(j, 500, "out of memory");
            return;
        }
        ns->ids = ni, ns->cap = n;
    }
    if (tutti_session_rewind(ns->sess, k) < 0) k = 0, tutti_session_rewind(ns->sess, 0);
    ns->n = k;
    if (tutti_session_eval(ns->sess, j->nat_ids + k, n - k, NULL) < 0) {
        tutti_session_rewind(ns->sess, 0);
        ns->n = 0;
        char e[1024];
        snprintf(e, sizeof e, "forward pass failed: %s", tutti_last_error());
        finish_job(j, 500, e);
        return;
    }
    memcpy(ns->ids + k, j->nat_ids + k, sizeof(int32_t) * (size_t)(n - k));
    ns->n = n;
    double t1 = tutti_now_s();
    j->nat_out =
        srv_native_completion_json(f, tutti_session_logits(ns->sess), j->n_probs, j->n_predict, n, n - k, t1 - t0);
    srv_metrics *mt = &s->metrics;
    pthread_mutex_lock(&mt->mu);
    mt->prompt_tokens += n;
    mt->prompt_evaluated += n - k;
    mt->prompt_reused += k;
    mt->member_forward_s[j->nat_file] += t1 - t0;
    mt->member_tokens[j->nat_file] += n - k;
    pthread_mutex_unlock(&mt->mu);
    finish_job(j, j->nat_out ? 200 : 500, "out of memory");
}

static void run_job(srv_slot *sl, srv_job *j) {
    srv_server *s = sl->s;
    char err[1024];
    pthread_mutex_lock(&j->mu);
    bool gone = j->cancelled || peer_closed(j);
    if (gone) j->cancelled = true;
    pthread_mutex_unlock(&j->mu);
    if (gone) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.cancelled++;
        pthread_mutex_unlock(&s->metrics.mu);
        finish_job(j, 200, NULL);
        return;
    }
    if (j->native) {
        run_native(sl, j);
        return;
    }
    if (j->embd.on) {
        run_embd(sl, j);
        return;
    }
    tutti_ensemble *e = slot_ensemble(sl, j, err, sizeof err);
    if (!e) {
        finish_job(j, 400, err);
        return;
    }
    if (j->max_units <= 0 && !j->req.echo) { /* max_tokens 0: nothing to generate */
        for (int c = 0; c < j->n_prompts * j->req.n; c++) j->finish[c] = "length";
        finish_job(j, 200, NULL);
        return;
    }
    tutti_align al = tutti_ensemble_align(e);
    j->unit = al == TUTTI_ALIGN_TOKEN ? "token" : "byte";
    /* per-token features, in the alignment resolved now (AUTO) */
    if (j->req.logprobs >= 0 && al == TUTTI_ALIGN_SPAN) {
        finish_job(j, 400,
                   "logprobs need token or byte alignment (this ensemble fuses spans, whose steps have no "
                   "per-token distribution)");
        return;
    }
    if (j->req.n_bias > 0 && al != TUTTI_ALIGN_TOKEN) {
        snprintf(err, sizeof err,
                 "logit_bias needs token alignment: this ensemble fuses in %s alignment (its members' "
                 "vocabularies differ), over %s, which have no token ids to bias",
                 tutti_align_name(al), al == TUTTI_ALIGN_BYTE ? "bytes" : "drafted spans");
        finish_job(j, 400, err);
        return;
    }
    /* the slot's ensemble is reused: set (or clear) the receiver per job */
    j->lp_vocab = s->reg.files[j->spec.file[0]].vocab;
    tutti_ensemble_set_step_cb(e, lp_on(j) ? step_cb : NULL, j);
    tutti_ensemble_set_step_members(e, j->req.shares);
    tutti_mask m = {.stop = (const char *const *)j->req.stop,
                    .n_stop = j->req.n_stop,
                    .max_tokens = j->max_units,
                    .grammar = j->req.grammar,
                    .bias_ids = j->req.bias_ids,
                    .bias = j->req.bias,
                    .n_bias = j->req.n_bias};
    int rc = 0;
    int n_choices = j->n_prompts * j->req.n;
    for (int c = 0; c < n_choices && rc == 0; c++) {
        int p = c / j->req.n; /* a batch: choice c answers prompt c / n */
        pthread_mutex_lock(&j->mu);
        j->choice = c;
        j->role_sent = false;
        bool cancelled = j->cancelled;
        pthread_mutex_unlock(&j->mu);
        if (cancelled) break;
        tutti_sampler_params sp = j->req.sp;
        sp.seed += (uint64_t)(c % j->req.n); /* choice k of a prompt draws with seed + k */
        tutti_ensemble_stats st;
        memset(&st, 0, sizeof st);
        if (j->req.echo && (rc = srv_echo_prompt(j, e, c, p, err, sizeof err)) < 0) break;
        if (j->max_units <= 0) { /* echo with max_tokens 0: the prompt only */
            j->finish[c] = "length";
            if (j->req.stream) {
                pthread_mutex_lock(&j->mu);
                size_t to = lp_on(j) ? srv_lp_ready(&j->lp[c], j->lp[c].emitted, true) : 0;
                srv_sse_event(j, srv_chunk_json(j, c, NULL, 0, "length", !j->role_sent, to));
                pthread_mutex_unlock(&j->mu);
            }
            continue;
        }
        if (j->ids[p][0])
            rc = tutti_ensemble_generate_ids(e, (const int32_t *const *)j->ids[p], j->n_ids[p], &sp, &m, text_cb, j,
                                             &st);
        else rc = tutti_ensemble_generate(e, j->req.prompts[p].text, j->req.prompts[p].len, &sp, &m, text_cb, j, &st);
        if (rc < 0) snprintf(err, sizeof err, "generation failed: %s", tutti_last_error());
        if (rc == 0 && j->lp_oom) rc = -1, snprintf(err, sizeof err, "logprobs: out of memory");
        const char *finish = st.finish == TUTTI_FINISH_LENGTH ? "length" : "stop";
        pthread_mutex_lock(&j->mu);
        if (rc == 0 && j->tool_fmt >= 0 && !j->tool_plain[c]) {
            int k = tools_close(j, c);
            if (k > 0) finish = "tool_calls";
            if (k < 0) rc = -1, snprintf(err, sizeof err, "tool calls: out of memory");
        }
        j->finish[c] = finish;
        j->n_units += st.n_units;
        j->t_gen_s += st.t_total_s;
        if (c == 0)
            for (int i = 0; i < j->spec.n; i++) j->prompt_eval[i] = st.n_prompt_evaluated[i];
        cancelled = j->cancelled;
        if (rc == 0 && !cancelled && j->req.stream) {
            if (!j->role_sent && j->req.kind == SRV_CHAT)
                srv_sse_event(j, srv_chunk_json(j, c, "", 0, NULL, true, j->lp[c].sent));
            /* the final chunk: entries of a token cut by a stop string */
            size_t to = lp_on(j) ? srv_lp_ready(&j->lp[c], j->lp[c].emitted, true) : 0;
            srv_sse_event(j, srv_chunk_json(j, c, NULL, 0, finish, false, to));
        }
        pthread_mutex_unlock(&j->mu);
        /* metrics */
        srv_metrics *mt = &s->metrics;
        pthread_mutex_lock(&mt->mu);
        mt->gen_units += st.n_units;
        mt->gen_seconds += st.t_total_s;
        if (st.t_total_s > 0 && st.n_units > 0) mt->last_tokens_per_s = st.n_units / st.t_total_s;
        for (int i = 0; i < j->spec.n; i++) {
            int f = j->spec.file[i];
            mt->member_forward_s[f] += st.t_member_s[i];
            mt->member_tokens[f] += st.n_member_tokens[i];
            int32_t np = j->n_ids[p][i];
            mt->prompt_tokens += np;
            int64_t ev = st.n_prompt_evaluated[i] < np ? st.n_prompt_evaluated[i] : np;
            mt->prompt_evaluated += ev;
            mt->prompt_reused += np - ev;
        }
        mt->draft_rounds += st.n_draft_rounds;
        mt->drafted += st.n_drafted;
        mt->draft_accepted += st.n_draft_accepted;
        if (cancelled) mt->cancelled++;
        pthread_mutex_unlock(&mt->mu);
    }
    finish_job(j, rc < 0 ? 500 : 200, err);
}

static void *slot_main(void *arg) {
    srv_slot *sl = arg;
    srv_server *s = sl->s;
    pthread_mutex_lock(&s->qmu);
    for (;;) {
        for (;;) {
            slot_sweep(sl);
            if (sl->job || s->stopping || s->q_len > 0) break;
            /* timed: a model doomed after the sweep is dropped within a second */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->qcv, &s->qmu, &ts);
        }
        if (!sl->job && s->q_len > 0) {
            sl->job = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_len--;
        }
        if (!sl->job) break; /* stopping */
        srv_job *j = sl->job;
        pthread_mutex_unlock(&s->qmu);
        start_together(s);
        tutti_batch_join(s->batch); /* a step waits for this slot's tokens while it runs a job */
        run_job(sl, j);
        tutti_batch_leave(s->batch);
        srv_job_unref(j);
        pthread_mutex_lock(&s->qmu);
        sl->job = NULL;
        s->busy--;
    }
    pthread_mutex_unlock(&s->qmu);
    return NULL;
}

int srv_slots_start(srv_server *s, char *err, size_t cap) {
    const char *d = getenv("TUTTI_SERVE_TEST_PIECE_DELAY_MS");
    g_piece_delay_ms = d ? atoi(d) : 0;
    const char *tg = getenv("TUTTI_SERVE_TEST_START_TOGETHER");
    g_start_together = tg ? atoi(tg) : 0;
    if (s->opts.cont_batching) {
        tutti_batch_params bp = tutti_batch_default_params();
        bp.n_threads = s->opts.n_threads > 0 ? s->opts.n_threads : 0;
        bp.n_ubatch = s->opts.n_ubatch > 0 ? s->opts.n_ubatch : 512;
        if (!(s->batch = tutti_batch_new(&bp))) return snprintf(err, cap, "%s", tutti_last_error()), -1;
    }
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    s->n_slots = s->opts.parallel;
    s->q_cap = s->opts.queue > 0 ? s->opts.queue : 0; /* 0: no waiting, 503 when every slot is busy */
    s->queue = calloc((size_t)(s->q_cap > 0 ? s->q_cap : 1), sizeof *s->queue);
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    if (!s->queue || !s->slots) return snprintf(err, cap, "out of memory"), -1;
    for (int i = 0; i < s->n_slots; i++) {
        s->slots[i].s = s;
        s->slots[i].id = i;
        if (pthread_create(&s->slots[i].th, NULL, slot_main, &s->slots[i]) != 0)
            return snprintf(err, cap, "cannot start slot threads"), -1;
        s->slots[i].started = true;
    }
    return 0;
}

void srv_slots_stop(srv_server *s) {
    if (!s->slots) {
        tutti_batch_free(s->batch);
        s->batch = NULL;
        return;
    }
    pthread_mutex_lock(&s->qmu);
    s->stopping = 1;
    while (s->q_len > 0) {
        srv_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        finish_job(j, 503, "the server is shutting down");
        srv_job_unref(j);
    }
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].job) {
            srv_job *j = s->slots[i].job;
            pthread_mutex_lock(&j->mu);
            j->cancelled = true;
            pthread_mutex_unlock(&j->mu);
        }
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->started) pthread_join(sl->th, NULL);
        sl->started = false;
        for (int k = 0; k < SLOT_CACHE; k++) {
            cache_drop(s, &sl->cache[k]);
            free(sl->cache[k].last);
        }
        for (int k = 0; k < SRV_MAX_FILES; k++) {
            nat_drop(s, &sl->nat[k], k);
            free(sl->nat[k].ids);
        }
    }
    tutti_batch_free(s->batch); /* after every slot's sessions */
    s->batch = NULL;
}

void srv_slots_free(srv_server *s) {
    if (!s->slots) return;
    free(s->slots);
    free(s->queue);
    s->slots = NULL;
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
}

int srv_submit(srv_server *s, srv_job *j) {
    pthread_mutex_lock(&s->qmu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->qmu);
        return 503;
    }
    /* the idle slot whose cache for this model shares the longest prefix */
    const char *p;
    size_t n;
    job_prompt_bytes(j, &p, &n);
    srv_slot *best = NULL;
    size_t best_k = 0;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->job) continue;
        size_t k = 0;
        bool has = false;
        if (j->native && j->nat_file >= 0 && j->nat_file < SRV_MAX_FILES) { /* the session holding the longest prefix */
            const nat_sess *ns = &sl->nat[j->nat_file];
            while ((int32_t)k < ns->n && (int32_t)k < j->n_nat_ids && ns->ids[k] == j->nat_ids[k]) k++;
            k += ns->sess != NULL;
        }
        for (int c = 0; c < SLOT_CACHE && !j->native; c++)
            if (sl->cache[c].e && !strcmp(sl->cache[c].key, j->spec.key)) {
                has = true;
                k = common_prefix(sl->cache[c].last, sl->cache[c].n_last, p, n) + 1;
            }
        (void)has;
        if (!best || k > best_k) best = sl, best_k = k;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    if (best) {
        best->job = j;
        s->busy++;
    } else if (s->q_len < s->q_cap) {
        s->queue[(s->q_head + s->q_len) % s->q_cap] = j;
        s->q_len++;
        s->busy++; /* counted from queueing: busy - running = waiting */
    } else {
        pthread_mutex_unlock(&s->qmu);
        pthread_mutex_lock(&j->mu);
        j->refs--;
        pthread_mutex_unlock(&j->mu);
        return 503;
    }
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    return 0;
}

int srv_queue_len(srv_server *s) {
    pthread_mutex_lock(&s->qmu);
    int n = s->q_len;
    pthread_mutex_unlock(&s->qmu);
    return n;
}

int srv_slots_busy(srv_server *s) {
    pthread_mutex_lock(&s->qmu);
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) n += s->slots[i].job != NULL;
    pthread_mutex_unlock(&s->qmu);
    return n;
}
