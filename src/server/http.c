/* `tutti serve`'s HTTP side (libmicrohttpd, one thread per connection;
 * conn.c accepts): framing checks, CORS, API keys, body limit, routing,
 * responses (JSON or SSE), /health, and the daemon's start and graceful
 * stop on SIGINT/SIGTERM. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/conn.h"
#include "server/format.h"
#include "server/framing.h"
#include "server/native.h"
#include "server/pipeline_srv.h"
#include "server/server.h"
#include "util/buf.h"

typedef struct conn_ctx {
    char *body;
    size_t n, cap;
    bool too_big;
    int framing; /* 400 when the head's framing was refused */
    char framing_err[256];
    srv_job *job;
} conn_ctx;

static void count_request(srv_server *s, int ep, int status) {
    int k = 5;
    for (int i = 0; i < 5; i++)
        if (srv_status_codes[i] == status) k = i;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.requests[ep][k]++;
    pthread_mutex_unlock(&s->metrics.mu);
}

/* Every answer may be read by a page of another origin (as llama-server):
 * the API key, not the browser's origin, is what guards the API. */
static void cors(struct MHD_Response *r) { MHD_add_response_header(r, "Access-Control-Allow-Origin", "*"); }

static enum MHD_Result queue(struct MHD_Connection *c, int status, struct MHD_Response *r, bool close) {
    if (!r) return MHD_NO;
    cors(r);
    if (close) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_body(struct MHD_Connection *c, int status, char *body, const char *type) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(body);
    if (r) MHD_add_response_header(r, "Content-Type", type);
    return queue(c, status, r, false);
}

/* An error answer; close: the connection cannot carry another request
 * (its framing was refused). */
static enum MHD_Result send_error_x(srv_server *s, struct MHD_Connection *c, int ep, int status, bool close,
                                    const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static enum MHD_Result send_error_x(srv_server *s, struct MHD_Connection *c, int ep, int status, bool close,
                                    const char *param, const char *code, const char *fmt, ...) {
    char msg[2048], clean[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* clients never see the models' paths (library messages name them) */
    srv_registry_scrub(&s->reg, msg, clean, sizeof clean);
    count_request(s, ep, status);
    char *body = srv_error_json(status, clean, param, code);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(body);
    if (r) MHD_add_response_header(r, "Content-Type", "application/json");
    return queue(c, status, r, close);
}
#define send_error(s, c, ep, status, param, code, ...) send_error_x(s, c, ep, status, false, param, code, __VA_ARGS__)

/* Authorization: Bearer KEY, the scheme case-insensitive (RFC 9110
 * §11.1); constant time in the keys' lengths. */
static bool key_ok(srv_server *s, struct MHD_Connection *c) {
    if (!s->opts.n_api_keys) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h) return false;
    while (*h == ' ' || *h == '\t') h++;
    if (strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t lh = strlen(h);
    while (lh && (h[lh - 1] == ' ' || h[lh - 1] == '\t')) lh--;
    unsigned ok = 0;
    for (int k = 0; k < s->opts.n_api_keys; k++) {
        const char *key = s->opts.api_keys[k];
        size_t lk = strlen(key);
        unsigned diff = (unsigned)(lk != lh);
        for (size_t i = 0; i < lk; i++) diff |= (unsigned)(key[i] ^ (i < lh ? h[i] : 0));
        ok |= diff == 0;
    }
    return ok;
}

/* ---- waiting for jobs ---- */

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

static int submit(srv_server *s, struct MHD_Connection *c, srv_job *j) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    return j->pipeline ? srv_pipeline_submit(s, j) : srv_submit(s, j);
}

static enum MHD_Result busy(srv_server *s, struct MHD_Connection *c, int ep) {
    return send_error(s, c, ep, 503, NULL, NULL, "%s",
                      s->stopping ? "the server is shutting down"
                                  : "every slot is busy and the queue is full; retry later");
}

/* ---- endpoints ---- */

static enum MHD_Result do_generate(srv_server *s, struct MHD_Connection *c, conn_ctx *cx, int ep) {
    srv_job *j = srv_job_new();
    if (!j) return send_error(s, c, ep, 500, NULL, NULL, "out of memory");
    cx->job = j;
    char err[1024];
    const char *param = NULL, *code = NULL;
    int st = srv_prepare_job(s, j, ep == SRV_EP_CHAT ? SRV_CHAT : SRV_COMPLETION, cx->body ? cx->body : "", cx->n, err,
                             sizeof err, &param, &code);
    if (st) return send_error(s, c, ep, st, param, code, "%s", err);
    if (submit(s, c, j)) return busy(s, c, ep);
    if (j->req.stream) {
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
        return queue(c, 200, resp, false);
    }
    int status = wait_job(j);
    if (status != 200) return send_error(s, c, ep, status, NULL, NULL, "%s", j->error);
    count_request(s, ep, 200);
    return send_body(c, 200, srv_final_json(j), "application/json");
}

/* llama-server's POST /completion: one slot job, answered in one body */
static enum MHD_Result do_native(srv_server *s, struct MHD_Connection *c, conn_ctx *cx) {
    srv_job *j = srv_job_new();
    if (!j) return send_error(s, c, SRV_EP_NATIVE, 500, NULL, NULL, "out of memory");
    cx->job = j;
    j->native = true;
    char err[1024];
    int st = srv_native_parse_completion(&s->reg, cx->body ? cx->body : "", cx->n, j, err, sizeof err);
    if (st) return send_error(s, c, SRV_EP_NATIVE, st, NULL, NULL, "%s", err);
    if (submit(s, c, j)) return busy(s, c, SRV_EP_NATIVE);
    int status = wait_job(j);
    if (status != 200 || !j->nat_out)
        return send_error(s, c, SRV_EP_NATIVE, status != 200 ? status : 500, NULL, NULL, "%s", j->error);
    count_request(s, SRV_EP_NATIVE, 200);
    return send_body(c, 200, strdup(j->nat_out), "application/json");
}

/* POST /v1/embeddings (embed.c): one slot job, answered in one body */
static enum MHD_Result do_embeddings(srv_server *s, struct MHD_Connection *c, conn_ctx *cx) {
    const int ep = SRV_EP_EMBEDDINGS;
    srv_job *j = srv_job_new();
    if (!j) return send_error(s, c, ep, 500, NULL, NULL, "out of memory");
    cx->job = j;
    char err[1024];
    const char *param = NULL;
    int st = srv_embd_prepare(s, j, cx->body ? cx->body : "", cx->n, err, sizeof err, &param);
    if (st) return send_error(s, c, ep, st, param, NULL, "%s", err);
    if (submit(s, c, j)) return busy(s, c, ep);
    int status = wait_job(j);
    if (status != 200) return send_error(s, c, ep, status, NULL, NULL, "%s", j->error);
    char *body = srv_embd_json(j);
    if (!body) return send_error(s, c, ep, 500, NULL, NULL, "out of memory");
    count_request(s, ep, 200);
    return send_body(c, 200, body, "application/json");
}

static enum MHD_Result do_health(srv_server *s, struct MHD_Connection *c) {
    if (!s->ready) return send_error(s, c, SRV_EP_HEALTH, 503, NULL, "loading", "loading models");
    char who[512] = "";
    int r = tutti_mpi_dead_rank(who, sizeof who);
    if (r > 0)
        return send_error(s, c, SRV_EP_HEALTH, 503, NULL, "unavailable",
                          "MPI rank %d (%s) died or stopped answering: the models it holds cannot serve; restart the "
                          "server",
                          r, who);
    count_request(s, SRV_EP_HEALTH, 200);
    return send_body(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
}

/* GET /: the page is public (it holds no data; its API calls need the key
 * like any client's) */
static enum MHD_Result do_web(srv_server *s, struct MHD_Connection *c) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(srv_web_page_len, (void *)srv_web_page, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    /* everything it needs is inline: nothing else may load */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    count_request(s, SRV_EP_WEB, 200);
    return queue(c, 200, r, false);
}

/* CORS preflight: answered before authentication (a browser sends no
 * credentials with it), for any endpoint */
static enum MHD_Result do_preflight(srv_server *s, struct MHD_Connection *c, int ep) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", want && *want ? want : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    count_request(s, ep, 204);
    return queue(c, 204, r, false);
}

static int endpoint(const char *url) {
    static const struct {
        const char *path;
        int ep;
    } routes[] = {{"/health", SRV_EP_HEALTH},
                  {"/v1/models", SRV_EP_MODELS},
                  {"/v1/completions", SRV_EP_COMPLETIONS},
                  {"/v1/chat/completions", SRV_EP_CHAT},
                  {"/metrics", SRV_EP_METRICS},
                  {"/props", SRV_EP_PROPS},
                  {"/tokenize", SRV_EP_TOKENIZE},
                  {"/detokenize", SRV_EP_DETOKENIZE},
                  {"/completion", SRV_EP_NATIVE},
                  {"/completions", SRV_EP_NATIVE},
                  {"/v1/embeddings", SRV_EP_EMBEDDINGS},
                  {"/", SRV_EP_WEB},
                  {"/index.html", SRV_EP_WEB}};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) return routes[i].ep;
    return SRV_EP_OTHER;
}

typedef struct headers {
    srv_header h[64];
    size_t n;
} headers;

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    headers *hs = cls;
    if (hs->n < 64) hs->h[hs->n++] = (srv_header){key, value};
    return MHD_YES;
}

/* The head is in: framing (RFC 9112 §6) and the body's time limit. */
static void head_read(srv_server *s, struct MHD_Connection *c, conn_ctx *cx) {
    srv_conn_head_read(s, c);
    headers hs = {.n = 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_header, &hs);
    cx->framing = srv_framing_check(hs.h, hs.n, cx->framing_err, sizeof cx->framing_err);
}

/* The request once its body is in (or refused). */
static enum MHD_Result route(srv_server *s, struct MHD_Connection *c, conn_ctx *cx, const char *url,
                             const char *method) {
    int ep = endpoint(url);
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) return do_preflight(s, c, ep);
    if (ep == SRV_EP_HEALTH) return get ? do_health(s, c) : send_error(s, c, ep, 405, NULL, NULL, "use GET %s", url);
    if (ep == SRV_EP_WEB) return get ? do_web(s, c) : send_error(s, c, ep, 405, NULL, NULL, "use GET %s", url);
    if (!key_ok(s, c))
        return send_error(s, c, ep, 401, NULL, "invalid_api_key",
                          "missing or wrong API key (send the header 'Authorization: Bearer KEY')");
    if (ep == SRV_EP_OTHER) return send_error(s, c, ep, 404, NULL, NULL, "no such endpoint: %s %s", method, url);
    bool want_post = ep == SRV_EP_COMPLETIONS || ep == SRV_EP_CHAT || ep == SRV_EP_TOKENIZE ||
                     ep == SRV_EP_DETOKENIZE || ep == SRV_EP_NATIVE || ep == SRV_EP_EMBEDDINGS;
    if ((want_post && !post) || (!want_post && !get))
        return send_error(s, c, ep, 405, NULL, NULL, "use %s %s", want_post ? "POST" : "GET", url);
    if (!s->ready) return send_error(s, c, ep, 503, NULL, "loading", "loading models; retry when /health says ok");
    if (s->stopping) return send_error(s, c, ep, 503, NULL, NULL, "the server is shutting down");
    if (ep == SRV_EP_MODELS) {
        count_request(s, ep, 200);
        return send_body(c, 200, srv_models_json(s), "application/json");
    }
    if (ep == SRV_EP_METRICS) {
        count_request(s, ep, 200);
        return send_body(c, 200, srv_metrics_text(s), "text/plain; version=0.0.4");
    }
    if (ep == SRV_EP_PROPS) {
        count_request(s, ep, 200);
        return send_body(c, 200, srv_native_props(s), "application/json");
    }
    if (cx->too_big)
        return send_error(s, c, ep, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
                          s->opts.max_body);
    if (ep == SRV_EP_TOKENIZE || ep == SRV_EP_DETOKENIZE) {
        char err[1024];
        int st = 500;
        char *b = ep == SRV_EP_TOKENIZE
                      ? srv_native_tokenize(&s->reg, cx->body ? cx->body : "", cx->n, &st, err, sizeof err)
                      : srv_native_detokenize(&s->reg, cx->body ? cx->body : "", cx->n, &st, err, sizeof err);
        if (!b) return send_error(s, c, ep, st, NULL, NULL, "%s", err);
        count_request(s, ep, 200);
        return send_body(c, 200, b, "application/json");
    }
    if (ep == SRV_EP_NATIVE) return do_native(s, c, cx);
    if (ep == SRV_EP_EMBEDDINGS) return do_embeddings(s, c, cx);
    return do_generate(s, c, cx, ep);
}

static void take_upload(srv_server *s, conn_ctx *cx, const char *upload, size_t k) {
    if (cx->too_big || cx->n + k > s->opts.max_body) {
        cx->too_big = true;
        return;
    }
    if (tutti_buf_append(&cx->body, &cx->n, &cx->cap, upload, k) < 0) cx->too_big = true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) { /* the head is in, the body (if any) not yet */
        cx = calloc(1, sizeof *cx);
        if (!cx) return MHD_NO;
        *con_cls = cx;
        head_read(s, c, cx);
        /* ambiguous framing: answered now, and the connection closed (its
         * next bytes could be read as another request) */
        if (cx->framing) return send_error_x(s, c, endpoint(url), cx->framing, true, NULL, NULL, "%s", cx->framing_err);
        return MHD_YES;
    }
    if (cx->framing) { /* answered: the body is not read */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        take_upload(s, cx, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    srv_conn_request_read(s, c);
    return route(s, c, cx, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    conn_ctx *cx = *con_cls;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) srv_conn_response_sent(s, c);
    if (!cx) return;
    if (cx->job) {
        srv_job_client_gone(cx->job);
        srv_job_unref(cx->job);
    }
    free(cx->body);
    free(cx);
    *con_cls = NULL;
}

/* ---- the daemon's life ---- */

/* Whether a start-up failure is the user's usage (exit 2): its message
 * carries a library error of that kind (ensemble settings the models do
 * not allow: weights, token alignment over different vocabularies,
 * --adapt/--route with a rule they do not take). */
static bool usage_error(const char *err) {
    return tutti_last_error_kind() == TUTTI_ERR_UNSUPPORTED && strstr(err, tutti_last_error()) != NULL;
}

/* The models are loaded and the slots started after "listening" (/health
 * answers 503 meanwhile); every file was checked before. */
static int serve(srv_server *s, sigset_t *set) {
    char err[2048];
    /* test hook: keeps the server in its loading state a while, so that the
     * tests can see /health answer 503 */
    const char *delay = getenv("TUTTI_SERVE_TEST_LOAD_DELAY_MS");
    if (delay && atoi(delay) > 0) usleep((useconds_t)atoi(delay) * 1000u);
    if (srv_registry_load(&s->reg, err, sizeof err) < 0) {
        fprintf(stderr, "tutti serve: %s\n", err);
        return usage_error(err) ? 2 : 1;
    }
    if (srv_slots_start(s, err, sizeof err) < 0) {
        fprintf(stderr, "tutti serve: %s\n", err);
        return 1;
    }
    s->ready = 1;
    fprintf(stderr, "tutti serve: ready: %d model names, %d slots\n", s->reg.n_specs, s->n_slots);
    int sig = 0;
    sigwait(set, &sig);
    fprintf(stderr, "tutti serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return 0;
}

int server_main(const server_opts *o) {
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->opts = *o;
    pthread_mutex_init(&s->metrics.mu, NULL);
    /* SIGINT/SIGTERM are taken by sigwait: blocked in every thread */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[2048];
    int port = 0, rc = 1;
    struct MHD_Daemon *d = NULL;
    /* every file is read and checked before the server listens */
    int lr = srv_registry_plan(&s->reg, o, err, sizeof err) < 0 ? -1 : srv_conns_listen(s, &port, err, sizeof err);
    if (lr < 0) {
        fprintf(stderr, "tutti serve: %s\n", err);
        rc = lr == -2 || usage_error(err) ? 2 : 1; /* -2: a --host that is no address (usage) */
        goto out;
    }
    /* connections come from conn.c (no listening socket here); the limits
     * there are below this hard one */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                         MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify, s, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)(o->max_conns + 16), MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_read,
                         MHD_OPTION_END);
    if (!d || srv_conns_start(s, d, err, sizeof err) < 0) {
        fprintf(stderr, "tutti serve: %s\n", d ? err : "cannot start the HTTP daemon");
        goto out;
    }
    fprintf(stderr, "tutti serve: listening on http://%s:%d\n", o->host, port);
    rc = serve(s, &set);
out:
    srv_conns_stop(s); /* no new connections */
    srv_slots_stop(s); /* running generations stop within a token; new requests get 503 */
    srv_pipelines_stop(&s->reg);
    if (d) MHD_stop_daemon(d); /* joins the connection threads */
    srv_conns_free(s);
    srv_slots_free(s);
    srv_registry_free(&s->reg);
    pthread_mutex_destroy(&s->metrics.mu);
    free(s);
    return rc;
}
