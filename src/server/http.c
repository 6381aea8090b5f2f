/* `tutti serve`'s HTTP side (libmicrohttpd, one thread per connection):
 * routing, API key, body limit, request -> job, responses (JSON or SSE),
 * /health, /v1/models, /metrics, and the daemon's start and graceful stop
 * on SIGINT/SIGTERM. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server/format.h"
#include "server/native.h"
#include "server/server.h"

/* /props, /tokenize, /detokenize and /completion are llama-server's own
 * (native.c), for remote members */
enum { EP_HEALTH, EP_MODELS, EP_COMPLETIONS, EP_CHAT, EP_METRICS, EP_PROPS, EP_TOKENIZE, EP_DETOKENIZE, EP_NATIVE,
       EP_OTHER, N_EP };
static const char *const ep_names[N_EP] = {"/health", "/v1/models", "/v1/completions", "/v1/chat/completions",
                                           "/metrics", "/props", "/tokenize", "/detokenize", "/completion", "other"};
static const int status_codes[6] = {200, 400, 401, 404, 503, 0}; /* 0: any other */

typedef struct conn_ctx {
    char *body;
    size_t n, cap;
    bool too_big;
    srv_job *job;
} conn_ctx;

static void count_request(srv_server *s, int ep, int status) {
    int k = 5;
    for (int i = 0; i < 5; i++)
        if (status_codes[i] == status) k = i;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.requests[ep][k]++;
    pthread_mutex_unlock(&s->metrics.mu);
}

static enum MHD_Result send_body(struct MHD_Connection *c, int status, char *body, const char *type) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *c, int ep, int status, const char *param,
                                  const char *code, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    count_request(s, ep, status);
    return send_body(c, status, srv_error_json(status, msg, param, code), "application/json");
}

static bool key_ok(srv_server *s, struct MHD_Connection *c) {
    if (!s->opts.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    /* constant time in the key's length */
    size_t lk = strlen(s->opts.api_key), lh = strlen(h);
    unsigned diff = (unsigned)(lk != lh);
    for (size_t i = 0; i < lk; i++) diff |= (unsigned)(s->opts.api_key[i] ^ (i < lh ? h[i] : 0));
    return diff == 0;
}

/* ---- GET endpoints ---- */

static enum MHD_Result do_models(srv_server *s, struct MHD_Connection *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < s->reg.n_specs; i++) {
        const srv_spec *sp = &s->reg.specs[i];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(data, m);
        cJSON_AddStringToObject(m, "id", sp->name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "tutti");
        cJSON *t = cJSON_AddObjectToObject(m, "tutti");
        cJSON *mem = cJSON_AddArrayToObject(t, "members");
        for (int k = 0; k < sp->n; k++) cJSON_AddItemToArray(mem, cJSON_CreateString(s->reg.files[sp->file[k]].name));
        cJSON_AddStringToObject(t, "rule", tutti_rule_name((tutti_fusion_rule)sp->rule));
        cJSON_AddStringToObject(t, "align", tutti_align_name((tutti_align)(sp->align_used >= 0 ? sp->align_used : sp->align)));
        int32_t ctx = INT32_MAX;
        for (int k = 0; k < sp->n; k++)
            if (s->reg.files[sp->file[k]].n_ctx < ctx) ctx = s->reg.files[sp->file[k]].n_ctx;
        cJSON_AddNumberToObject(t, "n_ctx", ctx);
        if (sp->n == 1) { /* llama-server's model metadata (remote members check n_vocab) */
            cJSON *meta = cJSON_AddObjectToObject(m, "meta");
            cJSON_AddNumberToObject(meta, "n_vocab", tutti_model_n_vocab(s->reg.files[sp->file[0]].model));
            cJSON_AddNumberToObject(meta, "n_ctx", ctx);
        }
    }
    char *b = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    count_request(s, EP_MODELS, 200);
    return send_body(c, 200, b, "application/json");
}

static void prom(char **b, size_t *n, size_t *cap, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k >= sizeof line) k = sizeof line - 1;
    if (*n + (size_t)k + 1 > *cap) {
        size_t nc = (*cap + (size_t)k + 1) * 2;
        char *nb = realloc(*b, nc);
        if (!nb) return;
        *b = nb, *cap = nc;
    }
    memcpy(*b + *n, line, (size_t)k + 1);
    *n += (size_t)k;
}

static enum MHD_Result do_metrics(srv_server *s, struct MHD_Connection *c) {
    count_request(s, EP_METRICS, 200);
    int q = srv_queue_len(s), busy = srv_slots_busy(s);
    srv_metrics m;
    pthread_mutex_lock(&s->metrics.mu);
    memcpy(&m, &s->metrics, sizeof m);
    pthread_mutex_unlock(&s->metrics.mu);
    char *b = NULL;
    size_t n = 0, cap = 0;
    prom(&b, &n, &cap, "# HELP tutti_requests_total HTTP requests by endpoint and status code\n"
                       "# TYPE tutti_requests_total counter\n");
    for (int e = 0; e < N_EP; e++)
        for (int k = 0; k < 6; k++)
            if (m.requests[e][k]) {
                if (status_codes[k]) prom(&b, &n, &cap, "tutti_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n", ep_names[e], status_codes[k], (long long)m.requests[e][k]);
                else prom(&b, &n, &cap, "tutti_requests_total{endpoint=\"%s\",code=\"other\"} %lld\n", ep_names[e], (long long)m.requests[e][k]);
            }
    prom(&b, &n, &cap, "# HELP tutti_generated_tokens_total generated units (tokens in token alignment, bytes in byte and span alignment)\n"
                       "# TYPE tutti_generated_tokens_total counter\ntutti_generated_tokens_total %lld\n", (long long)m.gen_units);
    prom(&b, &n, &cap, "# HELP tutti_generation_seconds_total wall time of generations (prompt included)\n"
                       "# TYPE tutti_generation_seconds_total counter\ntutti_generation_seconds_total %.6f\n", m.gen_seconds);
    prom(&b, &n, &cap, "# HELP tutti_tokens_per_second generated units per second of generation, over all requests and of the last one\n"
                       "# TYPE tutti_tokens_per_second gauge\ntutti_tokens_per_second{scope=\"all\"} %.3f\n"
                       "tutti_tokens_per_second{scope=\"last\"} %.3f\n", m.gen_seconds > 0 ? m.gen_units / m.gen_seconds : 0.0, m.last_tokens_per_s);
    prom(&b, &n, &cap, "# HELP tutti_prompt_tokens_total prompt tokens of all members\n# TYPE tutti_prompt_tokens_total counter\n"
                       "tutti_prompt_tokens_total %lld\n", (long long)m.prompt_tokens);
    prom(&b, &n, &cap, "# HELP tutti_prompt_tokens_evaluated_total prompt tokens run through a forward pass\n"
                       "# TYPE tutti_prompt_tokens_evaluated_total counter\ntutti_prompt_tokens_evaluated_total %lld\n", (long long)m.prompt_evaluated);
    prom(&b, &n, &cap, "# HELP tutti_prompt_tokens_reused_total prompt tokens taken from a slot's KV cache\n"
                       "# TYPE tutti_prompt_tokens_reused_total counter\ntutti_prompt_tokens_reused_total %lld\n", (long long)m.prompt_reused);
    prom(&b, &n, &cap, "# HELP tutti_requests_cancelled_total generations stopped because the client went away\n"
                       "# TYPE tutti_requests_cancelled_total counter\ntutti_requests_cancelled_total %lld\n", (long long)m.cancelled);
    prom(&b, &n, &cap, "# HELP tutti_queue_length requests waiting for a slot\n# TYPE tutti_queue_length gauge\ntutti_queue_length %d\n", q);
    prom(&b, &n, &cap, "# HELP tutti_slots_busy slots generating\n# TYPE tutti_slots_busy gauge\ntutti_slots_busy %d\n"
                       "# HELP tutti_slots slots (--parallel)\n# TYPE tutti_slots gauge\ntutti_slots %d\n", busy, s->n_slots);
    prom(&b, &n, &cap, "# HELP tutti_member_forward_seconds_total forward-pass time per model file\n"
                       "# TYPE tutti_member_forward_seconds_total counter\n");
    for (int i = 0; i < s->reg.n_files && i < 64; i++)
        prom(&b, &n, &cap, "tutti_member_forward_seconds_total{model=\"%s\"} %.6f\n", s->reg.files[i].name, m.member_forward_s[i]);
    prom(&b, &n, &cap, "# HELP tutti_member_forward_tokens_total tokens run through each model file\n"
                       "# TYPE tutti_member_forward_tokens_total counter\n");
    for (int i = 0; i < s->reg.n_files && i < 64; i++)
        prom(&b, &n, &cap, "tutti_member_forward_tokens_total{model=\"%s\"} %lld\n", s->reg.files[i].name, (long long)m.member_tokens[i]);
    return send_body(c, 200, b, "text/plain; version=0.0.4");
}

/* ---- generation ---- */

static bool client_gone_fd(int fd) {
    if (fd < 0) return true;
    char ch;
    ssize_t r = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void wait_a_bit(srv_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* SSE body: what the worker has produced; waits (this connection's own
 * thread) for more, watching for the client leaving. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->sent == j->n_out && !j->done) {
        if (!j->cancelled && j->fd >= 0 && client_gone_fd(j->fd)) j->cancelled = true;
        wait_a_bit(j);
    }
    ssize_t r;
    if (j->sent == j->n_out) {
        r = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        size_t k = j->n_out - j->sent;
        if (k > max) k = max;
        memcpy(buf, j->out + j->sent, k);
        j->sent += k;
        r = (ssize_t)k;
    }
    pthread_mutex_unlock(&j->mu);
    return r;
}

static void sse_free(void *cls) { srv_job_unref(cls); }

static uint64_t g_counter;

/* Waits for a non-streamed job to finish, cancelling it when its client
 * hangs up meanwhile; returns its HTTP status. */
static int wait_job(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (!j->cancelled && j->fd >= 0 && client_gone_fd(j->fd)) j->cancelled = true;
        wait_a_bit(j);
    }
    int status = j->status;
    pthread_mutex_unlock(&j->mu);
    return status;
}

static enum MHD_Result do_generate(srv_server *s, struct MHD_Connection *c, conn_ctx *cx, int ep) {
    srv_kind kind = ep == EP_CHAT ? SRV_CHAT : SRV_COMPLETION;
    srv_job *j = srv_job_new();
    if (!j) return send_error(s, c, ep, 500, NULL, NULL, "out of memory");
    cx->job = j;
    char err[1024];
    const char *param = NULL;
    int st = srv_request_parse(cx->body ? cx->body : "", cx->n, kind, &j->req, err, sizeof err, &param);
    if (st) return send_error(s, c, ep, st, param, NULL, "%s", err);
    srv_request *r = &j->req;
    /* the model: a served name, or an ensemble described under "tutti" */
    const char *name = r->model && r->model[0] ? r->model : "default";
    snprintf(j->model_name, sizeof j->model_name, "%s", name);
    if (r->ens.present) {
        srv_spec *sp = &j->spec;
        memset(sp, 0, sizeof *sp);
        sp->n = r->ens.n_members;
        for (int i = 0; i < sp->n; i++) {
            int fi = srv_registry_file_index(&s->reg, r->ens.members[i]);
            if (fi < 0)
                return send_error(s, c, ep, 404, "tutti", "model_not_found",
                                  "tutti.members: '%s' is not a loaded model (see /v1/models)", r->ens.members[i]);
            sp->file[i] = fi;
            sp->w[i] = r->ens.has_weights ? r->ens.weights[i] : NAN;
            sp->t[i] = r->ens.has_temps ? r->ens.temps[i] : NAN;
        }
        sp->rule = r->ens.rule >= 0 ? r->ens.rule : TUTTI_RULE_MIX;
        sp->align = r->ens.align >= 0 ? r->ens.align : TUTTI_ALIGN_AUTO;
        srv_spec_make_key(sp);
    } else {
        const srv_spec *sp = srv_registry_find(&s->reg, name);
        if (!sp)
            return send_error(s, c, ep, 404, "model", "model_not_found",
                              "the model '%s' does not exist (see /v1/models)", name);
        j->spec = *sp;
    }
    if (r->logprobs >= 0 && (j->spec.align == TUTTI_ALIGN_SPAN || j->spec.align_used == TUTTI_ALIGN_SPAN))
        return send_error(s, c, ep, 400, "logprobs", NULL,
                          "logprobs need token or byte alignment: model '%s' fuses in span alignment, whose steps "
                          "have no per-token distribution", name);
    /* every member's prompt: its own chat rendering, or the text it will
     * tokenize itself (counted here to check the context) */
    int32_t room = INT32_MAX;
    for (int i = 0; i < j->spec.n; i++) {
        const srv_file *f = &s->reg.files[j->spec.file[i]];
        const tutti_vocab *v = tutti_model_vocab(f->model);
        if (kind == SRV_CHAT) {
            tutti_chat_message msgs[256];
            if (r->n_msgs > 256) return send_error(s, c, ep, 400, "messages", NULL, "at most 256 messages");
            for (int k = 0; k < r->n_msgs; k++) msgs[k] = (tutti_chat_message){r->msgs[k].role, r->msgs[k].content};
            j->ids[i] = server_chat_tokens(f->model, s->reg.chat_template, msgs, (size_t)r->n_msgs, &j->n_ids[i], err,
                                           sizeof err);
            if (!j->ids[i])
                return send_error(s, c, ep, 400, "messages", NULL, "model %s: %s", f->name, err);
        } else {
            int32_t n = 0, *ids = server_tokenize(v, r->prompt, r->prompt_len, tutti_vocab_add_bos(v), false, &n);
            if (!ids) return send_error(s, c, ep, 400, "prompt", NULL, "model %s: cannot tokenize the prompt", f->name);
            free(ids);
            j->n_ids[i] = n;
        }
        if (j->n_ids[i] >= f->n_ctx)
            return send_error(s, c, ep, 400, kind == SRV_CHAT ? "messages" : "prompt", "context_length_exceeded",
                              "the prompt is %d tokens for model %s, whose context holds %d (start the server with "
                              "a larger -c)", j->n_ids[i], f->name, f->n_ctx);
        if (f->n_ctx - j->n_ids[i] < room) room = f->n_ctx - j->n_ids[i];
    }
    j->n_prompt = j->n_ids[0];
    /* max_tokens counts tokens of member 1's tokenizer in every alignment
     * (as tutti run -n); capped at what the context holds */
    int64_t cap = room;
    int64_t want = r->max_tokens >= 0 ? r->max_tokens : kind == SRV_COMPLETION ? 16 : cap;
    j->max_units = (int32_t)(want < cap ? want : cap);
    if (!r->seed_set) r->sp.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ __atomic_add_fetch(&g_counter, 1, __ATOMIC_RELAXED);
    uint64_t idn = __atomic_add_fetch(&g_counter, 1, __ATOMIC_RELAXED);
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)time(NULL),
             (unsigned long long)(idn & 0xffff));
    j->created = (long)time(NULL);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    st = srv_submit(s, j);
    if (st)
        return send_error(s, c, ep, 503, NULL, NULL,
                          s->stopping ? "the server is shutting down"
                                      : "every slot is busy and the queue is full (--parallel %d, --queue %d); retry later",
                          s->n_slots, s->q_cap);
    if (r->stream) {
        pthread_mutex_lock(&j->mu);
        j->refs++; /* the response's */
        pthread_mutex_unlock(&j->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_reader, j, sse_free);
        if (!resp) {
            srv_job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        count_request(s, ep, 200);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    int status = wait_job(j);
    if (status != 200) return send_error(s, c, ep, status, NULL, NULL, "%s", j->error);
    count_request(s, ep, 200);
    return send_body(c, 200, srv_final_json(j), "application/json");
}

/* llama-server's POST /completion: one slot job, answered in one body */
static enum MHD_Result do_native(srv_server *s, struct MHD_Connection *c, conn_ctx *cx) {
    srv_job *j = srv_job_new();
    if (!j) return send_error(s, c, EP_NATIVE, 500, NULL, NULL, "out of memory");
    cx->job = j;
    j->native = true;
    char err[1024];
    int st = srv_native_parse_completion(&s->reg, cx->body ? cx->body : "", cx->n, j, err, sizeof err);
    if (st) return send_error(s, c, EP_NATIVE, st, NULL, NULL, "%s", err);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    if (srv_submit(s, j))
        return send_error(s, c, EP_NATIVE, 503, NULL, NULL, "every slot is busy and the queue is full; retry later");
    int status = wait_job(j);
    if (status != 200 || !j->nat_out)
        return send_error(s, c, EP_NATIVE, status != 200 ? status : 500, NULL, NULL, "%s", j->error);
    count_request(s, EP_NATIVE, 200);
    return send_body(c, 200, strdup(j->nat_out), "application/json");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        cx = calloc(1, sizeof *cx);
        if (!cx) return MHD_NO;
        *con_cls = cx;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t k = *upload_size;
        *upload_size = 0;
        if (cx->too_big || cx->n + k > s->opts.max_body) {
            cx->too_big = true;
            return MHD_YES;
        }
        if (cx->n + k + 1 > cx->cap) {
            size_t nc = (cx->n + k + 1) * 2;
            if (nc > s->opts.max_body + 1) nc = s->opts.max_body + 1;
            char *b = realloc(cx->body, nc);
            if (!b) {
                cx->too_big = true;
                return MHD_YES;
            }
            cx->body = b, cx->cap = nc;
        }
        memcpy(cx->body + cx->n, upload, k);
        cx->n += k;
        cx->body[cx->n] = 0;
        return MHD_YES;
    }
    int ep = !strcmp(url, "/health")                 ? EP_HEALTH
             : !strcmp(url, "/v1/models")            ? EP_MODELS
             : !strcmp(url, "/v1/completions")       ? EP_COMPLETIONS
             : !strcmp(url, "/v1/chat/completions")  ? EP_CHAT
             : !strcmp(url, "/metrics")              ? EP_METRICS
             : !strcmp(url, "/props")                ? EP_PROPS
             : !strcmp(url, "/tokenize")             ? EP_TOKENIZE
             : !strcmp(url, "/detokenize")           ? EP_DETOKENIZE
             : !strcmp(url, "/completion") || !strcmp(url, "/completions") ? EP_NATIVE
                                                     : EP_OTHER;
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (ep == EP_HEALTH) {
        if (!get) return send_error(s, c, ep, 405, NULL, NULL, "use GET %s", url);
        if (!s->ready) return send_error(s, c, ep, 503, NULL, "loading", "loading models");
        count_request(s, ep, 200);
        return send_body(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    }
    if (!key_ok(s, c))
        return send_error(s, c, ep, 401, NULL, "invalid_api_key",
                          "missing or wrong API key (send the header 'Authorization: Bearer KEY')");
    if (ep == EP_OTHER) return send_error(s, c, ep, 404, NULL, NULL, "no such endpoint: %s %s", method, url);
    bool want_post = ep == EP_COMPLETIONS || ep == EP_CHAT || ep == EP_TOKENIZE || ep == EP_DETOKENIZE || ep == EP_NATIVE;
    if ((want_post && !post) || (!want_post && !get))
        return send_error(s, c, ep, 405, NULL, NULL, "use %s %s", want_post ? "POST" : "GET", url);
    if (!s->ready) return send_error(s, c, ep, 503, NULL, "loading", "loading models; retry when /health says ok");
    if (s->stopping) return send_error(s, c, ep, 503, NULL, NULL, "the server is shutting down");
    if (ep == EP_MODELS) return do_models(s, c);
    if (ep == EP_METRICS) return do_metrics(s, c);
    if (ep == EP_PROPS) {
        count_request(s, ep, 200);
        return send_body(c, 200, srv_native_props(s), "application/json");
    }
    if (cx->too_big)
        return send_error(s, c, ep, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
                          s->opts.max_body);
    if (ep == EP_TOKENIZE || ep == EP_DETOKENIZE) {
        char err[1024];
        int st = 500;
        char *b = ep == EP_TOKENIZE ? srv_native_tokenize(&s->reg, cx->body ? cx->body : "", cx->n, &st, err, sizeof err)
                                    : srv_native_detokenize(&s->reg, cx->body ? cx->body : "", cx->n, &st, err, sizeof err);
        if (!b) return send_error(s, c, ep, st, NULL, NULL, "%s", err);
        count_request(s, ep, 200);
        return send_body(c, 200, b, "application/json");
    }
    if (ep == EP_NATIVE) return do_native(s, c, cx);
    return do_generate(s, c, cx, ep);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn_ctx *cx = *con_cls;
    if (!cx) return;
    if (cx->job) {
        srv_job_client_gone(cx->job);
        srv_job_unref(cx->job);
    }
    free(cx->body);
    free(cx);
    *con_cls = NULL;
}

/* Exposed for tests of the limits: the daemon's bound port. */
int server_main(const server_opts *o) {
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->opts = *o;
    pthread_mutex_init(&s->metrics.mu, NULL);
    /* SIGINT/SIGTERM are taken by sigwait below: blocked in every thread */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, o->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, o->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "tutti serve: --host %s is not an IPv4 or IPv6 address\n", o->host);
        free(s);
        return 2;
    }
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, sa,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
                                            (unsigned)(o->parallel + o->queue + 64), MHD_OPTION_CONNECTION_TIMEOUT,
                                            (unsigned)600, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tutti serve: cannot listen on %s:%d: %s\n", o->host, o->port, strerror(errno));
        free(s);
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "tutti serve: listening on http://%s:%d\n", o->host, di ? di->port : o->port);
    char err[2048];
    int rc = 0;
    /* test hook: keeps the server in its loading state a while, so that the
     * tests can see /health answer 503 */
    const char *delay = getenv("TUTTI_SERVE_TEST_LOAD_DELAY_MS");
    if (delay && atoi(delay) > 0) usleep((useconds_t)atoi(delay) * 1000u);
    if (srv_registry_load(&s->reg, o, err, sizeof err) < 0) {
        fprintf(stderr, "tutti serve: %s\n", err);
        rc = 1;
        goto out;
    }
    /* named ensembles are checked now (vocabularies vs alignment, weights),
     * not at their first request */
    for (int i = 0; i < s->reg.n_specs; i++) {
        srv_spec *sp = &s->reg.specs[i];
        if (sp->n < 2) continue;
        tutti_member_desc desc[TUTTI_ENSEMBLE_MAX_MEMBERS];
        const tutti_model *models[TUTTI_ENSEMBLE_MAX_MEMBERS];
        tutti_ensemble_params p;
        srv_spec_params(&s->reg, sp, 1, desc, models, &p);
        tutti_ensemble *e = tutti_ensemble_new(&p);
        if (e && srv_spec_apply(sp, e) < 0) {
            tutti_ensemble_free(e);
            e = NULL;
        }
        if (!e) {
            /* weights, --align token, --adapt/--route that the models do not allow: bad usage */
            rc = tutti_last_error_kind() == TUTTI_ERR_UNSUPPORTED ? 2 : 1;
            fprintf(stderr, "tutti serve: model '%s': %s\n", sp->name, tutti_last_error());
            goto out;
        }
        s->reg.specs[i].align_used = tutti_ensemble_align(e);
        tutti_ensemble_free(e);
    }
    if (srv_slots_start(s, err, sizeof err) < 0) {
        fprintf(stderr, "tutti serve: %s\n", err);
        rc = 1;
        goto out;
    }
    s->ready = 1;
    fprintf(stderr, "tutti serve: ready: %d model names, %d slots\n", s->reg.n_specs, s->n_slots);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "tutti serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
out:
    srv_slots_stop(s);      /* running generations stop within a token; new requests get 503 */
    MHD_stop_daemon(d);     /* joins the connection threads */
    srv_slots_free(s);
    srv_registry_free(&s->reg);
    pthread_mutex_destroy(&s->metrics.mu);
    free(s);
    return rc;
}
