/* Routed experts split over MPI ranks (see tutti_mpi.h, --split-experts):
 * rank 0's side (a tutti_moe_remote behind the session's MoE layers) and
 * the other ranks' expert servers.  Compiled only with MPI.
 *
 * The second way of DwarfStar's distributed-inference notes beside the
 * layer split: every rank maps the whole file (placing only its own
 * experts, rank 0 also the rest: tutti_model_load_experts), and each MoE layer's
 * routed experts are computed by the rank that owns them (rank r: experts
 * [r E / K, (r + 1) E / K)).  Rank 0 routes, sends every other rank the
 * rows routed to its experts (n_embd floats each), computes its own share
 * meanwhile, and takes the other ranks' outputs back into its buffer, so
 * the weighted sum over each token's experts runs on rank 0 in rank order
 * over the same values as in one process.  A product's bits depend on its
 * own expert's rows only (tutti_moe_experts), so the logits are the
 * single-process bits (tests/test_mpi.sh compares them).
 *
 * Per layer with rows for rank r, rank 0 -> r on the split's tag: a
 * tmpi_xreq, the row counts of r's experts (int32) and the rows (float);
 * r -> 0 on the same tag: a tmpi_xrep and the output rows, or the error
 * text (status < 0).  FREE (a tmpi_xreq alone) ends the server. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "mpi/proto.h"
#include "mpi/tutti_mpi.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/path.h"

#define XP_MAX_RANKS 64
#define XP_MAX_ROWS (1 << 20) /* rows of one request (a micro-batch x top-k) */
#define XP_ERR_CAP 600

/* the experts of rank r of k: [r E / k, (r + 1) E / k) */
static void share(int32_t n_expert, int32_t k, int32_t r, int32_t *e0, int32_t *e1) {
    *e0 = (int32_t)((int64_t)n_expert * r / k);
    *e1 = (int32_t)((int64_t)n_expert * (r + 1) / k);
}

/* ---- rank 0 ---- */
struct tutti_mpi_experts;
static int xp_post(struct tutti_mpi_experts *x, int32_t il, const int32_t *offs, const float *xe);

struct tutti_mpi_experts {
    int32_t refs;       /* the opener's and one per session (xp_session) */
    pthread_mutex_t mu; /* held from a layer's send to its recv: one exchange at a time on the tag */
    int32_t k, tag, n_expert, n_used, e0, e1; /* ranks; [e0, e1): rank 0's experts */
    int64_t n_embd;
    char *path;
    bool dead;                  /* a fault: nothing more goes out */
    bool loaded[XP_MAX_RANKS];  /* ranks serving experts (to be released) */
    bool pending[XP_MAX_RANKS]; /* a request of this layer out */
    char *sbuf[XP_MAX_RANKS], *rbuf[XP_MAX_RANKS];
    size_t scap[XP_MAX_RANKS], rcap[XP_MAX_RANKS];
    MPI_Request sreq[XP_MAX_RANKS], rreq[XP_MAX_RANKS];
    int64_t n_rows, n_rows_out, bytes; /* routed rows, rows sent out, bytes both ways */
    double t_wait;
    struct tutti_mpi_experts *next;
};
typedef struct tutti_mpi_experts xp_split;

/* a session's view of the split (the session owns it) */
typedef struct xp_session {
    tutti_moe_remote base;
    xp_split *g;
} xp_session;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static xp_split *g_live; /* tutti_mpi_stop releases what a failed command left */
static int32_t g_seq;

/* Sends the layer's rows of every other rank's experts; on success the
 * split stays locked until xp_recv. */
static int xp_send(tutti_moe_remote *rm, int32_t il, const int32_t *offs, const float *xe) {
    xp_split *x = ((xp_session *)rm)->g;
    pthread_mutex_lock(&x->mu);
    const int rc = xp_post(x, il, offs, xe);
    if (rc < 0) pthread_mutex_unlock(&x->mu);
    return rc;
}

static int xp_post(xp_split *x, int32_t il, const int32_t *offs, const float *xe) {
    if (x->dead) return tutti_set_error("--split-experts: a rank failed earlier");
    x->n_rows += offs[x->n_expert];
    for (int32_t r = 1; r < x->k; r++) {
        int32_t e0, e1;
        share(x->n_expert, x->k, r, &e0, &e1);
        const int32_t n = offs[e1] - offs[e0];
        x->pending[r] = false;
        if (n == 0) continue; /* no rows for its experts: no exchange */
        const size_t head = sizeof(tmpi_xreq) + sizeof(int32_t) * (size_t)(e1 - e0);
        const size_t len = head + sizeof(float) * (size_t)n * (size_t)x->n_embd;
        const size_t rlen = sizeof(tmpi_xrep) + sizeof(float) * (size_t)n * (size_t)x->n_embd + XP_ERR_CAP;
        if (tutti_buf_reserve(&x->sbuf[r], &x->scap[r], len) < 0 ||
            tutti_buf_reserve(&x->rbuf[r], &x->rcap[r], rlen) < 0) {
            x->dead = true; /* requests of this layer are out: a fault ends the run (tutti_mpi_stop) */
            return tmpi_fail(r, "out of memory for its expert rows");
        }
        const tmpi_xreq h = {TMPI_XP_RUN, il, n};
        memcpy(x->sbuf[r], &h, sizeof h);
        for (int32_t e = e0; e < e1; e++) {
            const int32_t c = offs[e + 1] - offs[e];
            memcpy(x->sbuf[r] + sizeof h + sizeof c * (size_t)(e - e0), &c, sizeof c);
        }
        memcpy(x->sbuf[r] + head, xe + (int64_t)offs[e0] * x->n_embd, len - head);
        if (MPI_Irecv(x->rbuf[r], (int)rlen, MPI_BYTE, r, x->tag, tmpi_comm, &x->rreq[r]) != MPI_SUCCESS ||
            MPI_Isend(x->sbuf[r], (int)len, MPI_BYTE, r, x->tag, tmpi_comm, &x->sreq[r]) != MPI_SUCCESS) {
            x->dead = true;
            return tmpi_fail(r, "sending expert rows");
        }
        x->pending[r] = true;
        x->n_rows_out += n;
        x->bytes += (int64_t)(len + sizeof(tmpi_xrep) + sizeof(float) * (size_t)n * (size_t)x->n_embd);
    }
    return TUTTI_OK;
}

/* Takes every rank's answer to the layer's rows (all of them, also after
 * an error answer), then unlocks the split. */
static int xp_recv(tutti_moe_remote *rm, int32_t il, const int32_t *offs, float *slots) {
    xp_split *x = ((xp_session *)rm)->g;
    (void)il;
    const double t0 = MPI_Wtime();
    int rc = TUTTI_OK;
    for (int32_t r = 1; r < x->k; r++) {
        if (!x->pending[r] || x->dead) continue; /* after an error answer the others' are still taken */
        x->pending[r] = false;
        int32_t e0, e1;
        share(x->n_expert, x->k, r, &e0, &e1);
        const int32_t n = offs[e1] - offs[e0];
        const double dl = MPI_Wtime() + tmpi_timeout_s();
        if (tmpi_wait(&x->sreq[r], dl, r, "sending expert rows") < 0 ||
            tmpi_wait(&x->rreq[r], dl, r, "computing its experts") < 0) {
            x->dead = true;
            rc = TUTTI_ERR;
            break;
        }
        tmpi_xrep h;
        memcpy(&h, x->rbuf[r], sizeof h);
        if (h.status < 0) {
            char text[XP_ERR_CAP];
            snprintf(text, sizeof text, "%.*s", XP_ERR_CAP - 1, x->rbuf[r] + sizeof h);
            rc = tutti_set_error("mpi: rank %d (experts %d-%d of %s): %s", r, e0, e1 - 1, tutti_base_name(x->path),
                                 text);
            continue;
        }
        if (h.n_rows != n) {
            rc = tutti_set_error("mpi: rank %d (experts %d-%d of %s): %d rows back for %d", r, e0, e1 - 1,
                                 tutti_base_name(x->path), h.n_rows, n);
            continue;
        }
        memcpy(slots + (int64_t)offs[e0] * x->n_embd, x->rbuf[r] + sizeof h,
               sizeof(float) * (size_t)n * (size_t)x->n_embd);
    }
    x->t_wait += MPI_Wtime() - t0;
    pthread_mutex_unlock(&x->mu);
    return rc;
}

static void xp_unlink(xp_split *x) {
    pthread_mutex_lock(&g_mu);
    for (xp_split **p = &g_live; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

static void xp_group_free(xp_split *x) {
    xp_unlink(x);
    for (int32_t r = 1; r < x->k && !x->dead; r++) {
        const tmpi_xreq h = {TMPI_XP_FREE, 0, 0};
        MPI_Request rq;
        if (x->loaded[r] && MPI_Isend(&h, sizeof h, MPI_BYTE, r, x->tag, tmpi_comm, &rq) == MPI_SUCCESS &&
            tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, "releasing the experts") < 0)
            break;
    }
    for (int32_t r = 1; r < x->k; r++) tmpi_unregister(r, x->tag);
    double rss, peak;
    tmpi_rss_mib(&rss, &peak);
    if (x->n_rows > 0) /* a token of an MoE layer has n_used routed rows */
        fprintf(stderr,
                "tutti: mpi: experts: %lld tokens x MoE layers of %s, %.1f%% of their routed rows computed on ranks "
                "1-%d; %.1f bytes per token and layer over MPI, %.3f s waiting for the other ranks; rank 0 "
                "resident %.0f MiB (peak %.0f)\n",
                (long long)(x->n_rows / x->n_used), tutti_base_name(x->path),
                100.0 * (double)x->n_rows_out / (double)x->n_rows, x->k - 1,
                (double)x->bytes * x->n_used / (double)x->n_rows, x->t_wait, rss, peak);
    for (int32_t r = 0; r < x->k; r++) free(x->sbuf[r]), free(x->rbuf[r]);
    pthread_mutex_destroy(&x->mu);
    free(x->path);
    free(x);
}

void tutti_mpi_experts_close(tutti_mpi_experts *x) {
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    const bool last = --x->refs == 0;
    pthread_mutex_unlock(&x->mu);
    if (last) xp_group_free(x);
}

static void xp_session_free(tutti_moe_remote *rm) {
    xp_session *xs = (xp_session *)rm;
    tutti_mpi_experts_close(xs->g);
    free(xs);
}

void tmpi_experts_release(void) {
    for (;;) {
        pthread_mutex_lock(&g_mu);
        xp_split *x = g_live;
        pthread_mutex_unlock(&g_mu);
        if (!x) break;
        xp_group_free(x); /* whatever still refers to it is not used again */
    }
}

/* Every other rank loads the model and starts serving its experts (the
 * answers are taken in rank order).  One control exchange at a time. */
static int start_servers(xp_split *x, int32_t n_threads) {
    const size_t plen = strlen(x->path);
    char *msg = malloc(sizeof(tmpi_experts) + plen);
    if (!msg) return tutti_set_error("--split-experts: out of memory");
    pthread_mutex_lock(&tmpi_ctrl_mu);
    int rc = TUTTI_OK;
    for (int32_t r = 1; r < x->k && rc == TUTTI_OK; r++) {
        tmpi_experts h = {TMPI_EXPERTS, 0, 0, n_threads, (int32_t)plen, x->tag};
        share(x->n_expert, x->k, r, &h.e0, &h.e1);
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, x->path, plen);
        char name[96];
        snprintf(name, sizeof name, "experts %d-%d of %s", h.e0, h.e1 - 1, tutti_base_name(x->path));
        tmpi_register(r, x->tag, name, -1);
        rc = tmpi_send_wait(r, TMPI_TAG_CTRL, msg, sizeof h + plen, "sending the expert split");
    }
    free(msg);
    char first_err[1200] = "";
    for (int32_t r = 1; r < x->k && rc == TUTTI_OK; r++) {
        char err[1024];
        if ((rc = tmpi_take_loaded(r, "loading the model", &x->loaded[r], err, sizeof err)) < 0) break;
        if (!x->loaded[r] && !first_err[0])
            snprintf(first_err, sizeof first_err, "mpi: rank %d cannot load %s: %s", r, x->path, err);
    }
    pthread_mutex_unlock(&tmpi_ctrl_mu);
    if (rc < 0) {
        x->dead = true;
        return TUTTI_ERR;
    }
    return first_err[0] ? tutti_set_error("%s", first_err) : TUTTI_OK;
}

tutti_mpi_experts *tutti_mpi_experts_open(const tutti_session *s, const char *path) {
    const tutti_model *m = s->model;
    const int32_t n_threads = tutti_threadpool_n_threads(s->tp);
    const int32_t n_expert = m->hp.n_expert;
    const int32_t k = n_expert > 0 ? tutti_mpi_size() : 1; /* a dense model: nothing to split */
    if (k > XP_MAX_RANKS) return tutti_set_error("--split-experts: at most %d ranks", XP_MAX_RANKS), NULL;
    if (k > n_expert && n_expert > 0)
        return tutti_set_error("--split-experts: %d ranks for the %d experts of %s (at most one rank per expert)", k,
                               n_expert, tutti_base_name(path)),
               NULL;
    xp_split *x = calloc(1, sizeof *x);
    if (!x || !(x->path = strdup(path))) {
        free(x);
        return tutti_set_error("--split-experts: out of memory"), NULL;
    }
    pthread_mutex_init(&x->mu, NULL);
    x->refs = 1;
    x->k = k;
    x->n_expert = n_expert;
    x->n_used = m->hp.n_expert_used;
    x->n_embd = m->hp.n_embd;
    share(n_expert, k, 0, &x->e0, &x->e1);
    if (k == 1) return x;
    pthread_mutex_lock(&g_mu);
    const bool full = g_seq >= TMPI_MAX_XSPLITS;
    if (!full) x->tag = TMPI_TAG_EXPERTS0 + g_seq++, x->next = g_live, g_live = x;
    pthread_mutex_unlock(&g_mu);
    if (full) {
        tutti_set_error("--split-experts: more than %d expert splits in one run", TMPI_MAX_XSPLITS);
        pthread_mutex_destroy(&x->mu);
        free(x->path);
        free(x);
        return NULL;
    }
    char line[1024];
    size_t o =
        (size_t)snprintf(line, sizeof line, "tutti: mpi: %s experts split over %d ranks:", tutti_base_name(path), k);
    for (int32_t r = 0; r < k && o < sizeof line; r++) {
        int32_t e0, e1;
        share(n_expert, k, r, &e0, &e1);
        o += (size_t)snprintf(line + o, sizeof line - o, "%s rank %d experts %d-%d", r ? "," : "", r, e0, e1 - 1);
    }
    fprintf(stderr, "%s (of each of %d MoE layers)\n", line, m->hp.n_layer - m->hp.n_layer_dense_lead);
    if (start_servers(x, n_threads) < 0) {
        xp_group_free(x);
        return NULL;
    }
    return x;
}

int tutti_mpi_experts_join(tutti_mpi_experts *x, tutti_session *s) {
    if (!x || !s) return tutti_set_error("--split-experts: no split or session");
    if (x->k == 1) return TUTTI_OK; /* one rank or a dense model: every expert here */
    if (s->model->hp.n_expert != x->n_expert || s->model->hp.n_embd != x->n_embd)
        return tutti_set_error("--split-experts: the session's model is not the split's");
    if (s->moe_remote || s->pipe) return tutti_set_error("--split-experts: the session is split already");
    xp_session *xs = calloc(1, sizeof *xs);
    if (!xs) return tutti_set_error("--split-experts: out of memory");
    xs->base.e0 = x->e0, xs->base.e1 = x->e1;
    xs->base.send = xp_send;
    xs->base.recv = xp_recv;
    xs->base.free = xp_session_free;
    xs->g = x;
    pthread_mutex_lock(&x->mu);
    x->refs++;
    pthread_mutex_unlock(&x->mu);
    s->moe_remote = &xs->base; /* freed with the session */
    return TUTTI_OK;
}

tutti_model *tutti_mpi_experts_load(const char *path, const tutti_model_params *params) {
    /* rank 0 runs everything but the other ranks' experts, which stay
     * mapped and untouched (still correct if a pass computed them here) */
    return tutti_model_load_experts(path, params, 0, tutti_mpi_size(), false);
}

int tutti_mpi_experts_attach(tutti_session *s, const char *path) {
    if (s->model->hp.n_expert < 1)
        return tutti_set_error("--split-experts: %s has no routed experts", tutti_base_name(path));
    tutti_mpi_experts *x = tutti_mpi_experts_open(s, path);
    if (!x) return TUTTI_ERR;
    const int rc = tutti_mpi_experts_join(x, s);
    tutti_mpi_experts_close(x); /* the session's reference keeps it */
    return rc;
}

/* ---- the other ranks: expert servers ---- */

typedef struct xp_srv {
    tutti_model *m;
    tutti_threadpool *tp;
    int32_t e0, e1, tag;
    pthread_t th;
} xp_srv;

/* Checks a RUN request of cnt bytes and builds offs [n_expert + 1] for its
 * rows; NULL, or what is wrong. */
static const char *srv_check(const xp_srv *q, const char *buf, int cnt, const tmpi_xreq *h, int32_t *offs) {
    const tutti_hparams *hp = &q->m->hp;
    const int32_t ne = q->e1 - q->e0;
    if (h->il < 0 || h->il >= hp->n_layer || !q->m->layers[h->il].ffn_gate_inp.data || h->n_rows < 1 ||
        h->n_rows > XP_MAX_ROWS ||
        (size_t)cnt !=
            sizeof *h + sizeof(int32_t) * (size_t)ne + sizeof(float) * (size_t)h->n_rows * (size_t)hp->n_embd)
        return "malformed expert request";
    int64_t sum = 0;
    for (int32_t e = 0; e <= hp->n_expert; e++) {
        offs[e] = (int32_t)sum;
        if (e < q->e0 || e >= q->e1) continue;
        int32_t c;
        memcpy(&c, buf + sizeof *h + sizeof c * (size_t)(e - q->e0), sizeof c);
        if (c < 0 || c > h->n_rows) return "malformed expert request";
        sum += c;
    }
    return sum == h->n_rows ? NULL : "malformed expert request (row counts)";
}

static void *srv_main(void *arg) {
    xp_srv *q = arg;
    const tutti_hparams *hp = &q->m->hp;
    const int64_t n_embd = hp->n_embd, nf = hp->n_ff_exp;
    int32_t *offs = malloc(sizeof *offs * (size_t)(hp->n_expert + 1));
    tutti_mm *mm = malloc(sizeof *mm * 2 * (size_t)hp->n_expert);
    char *buf = NULL, *out = NULL;
    float *ge = NULL, *ue = NULL;
    size_t cap = 0, cap_out = 0, cap_rows = 0;
    int64_t n_rows = 0;
    for (;;) {
        MPI_Message msg;
        MPI_Status st;
        int cnt = 0;
        if (tmpi_probe_idle(0, q->tag, &msg, &st) != MPI_SUCCESS) break;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        const bool room = cnt >= 0 && offs && mm && tutti_buf_reserve(&buf, &cap, cnt > 0 ? (size_t)cnt : 1) == 0;
        if (!room) { /* cannot hold it: take it anyway and answer an error */
            char *tmp = malloc(cnt > 0 ? (size_t)cnt : 1);
            if (!tmp) break;
            MPI_Mrecv(tmp, cnt, MPI_BYTE, &msg, &st);
            free(tmp);
            cnt = 0;
        } else if (MPI_Mrecv(buf, cnt, MPI_BYTE, &msg, &st) != MPI_SUCCESS) break;
        tmpi_xreq h = {-1, 0, 0};
        if (cnt >= (int)sizeof h) memcpy(&h, buf, sizeof h);
        if (h.op == TMPI_XP_FREE) break;
        const char *err = h.op == TMPI_XP_RUN ? srv_check(q, buf, cnt, &h, offs) : "malformed expert request";
        if (!room) err = "out of memory for an expert request";
        const size_t n = err ? 0 : (size_t)h.n_rows;
        if (!err &&
            (tutti_buf_reserve(&out, &cap_out, sizeof(tmpi_xrep) + sizeof(float) * n * (size_t)n_embd) < 0 ||
             !tutti_threadpool_scratch(q->tp, n * (size_t)(n_embd > nf ? n_embd : nf) + 16 * (size_t)hp->n_expert)))
            err = "out of memory for an expert request";
        if (!err && n > cap_rows) {
            float *g = realloc(ge, sizeof(float) * n * (size_t)nf),
                  *u = g ? realloc(ue, sizeof(float) * n * (size_t)nf) : NULL;
            if (g) ge = g;
            if (u) ue = u, cap_rows = n;
            else err = "out of memory for an expert request";
        }
        tmpi_test_fault(); /* TUTTI_MPI_TEST_FAULT=kill:N@R / hang:N@R for tests/test_mpi.sh */
        if (err) {
            tmpi_xrep e = {-1, 0};
            char text[sizeof e + XP_ERR_CAP];
            memcpy(text, &e, sizeof e);
            snprintf(text + sizeof e, XP_ERR_CAP, "%s", err);
            MPI_Send(text, (int)(sizeof e + strlen(text + sizeof e) + 1), MPI_BYTE, 0, q->tag, tmpi_comm);
            continue;
        }
        const float *xe = (const float *)(const void *)(buf + sizeof h + sizeof(int32_t) * (size_t)(q->e1 - q->e0));
        float *slots = (float *)(void *)(out + sizeof(tmpi_xrep));
        /* offs count from row 0 of this request: its experts' rows only */
        tutti_moe_experts(q->tp, q->m, &q->m->layers[h.il], offs, q->e0, q->e1, xe, ge, ue, slots, mm);
        const tmpi_xrep ok = {0, h.n_rows};
        memcpy(out, &ok, sizeof ok);
        MPI_Send(out, (int)(sizeof ok + sizeof(float) * n * (size_t)n_embd), MPI_BYTE, 0, q->tag, tmpi_comm);
        n_rows += h.n_rows;
    }
    double rss, peak;
    tmpi_rss_mib(&rss, &peak);
    fprintf(stderr,
            "tutti: mpi: experts: rank %d computed experts %d-%d of %s for %lld routed rows; resident %.0f MiB "
            "(peak %.0f)\n",
            tmpi_rank(), q->e0, q->e1 - 1, tutti_base_name(q->m->path), (long long)n_rows, rss, peak);
    free(offs), free(mm), free(buf), free(out), free(ge), free(ue);
    tutti_threadpool_free(q->tp);
    q->tp = NULL;
    tutti_model_free(q->m);
    q->m = NULL;
    return NULL;
}

int tmpi_experts_serve(const char *buf, int cnt, char *ebuf, size_t cap) {
    tmpi_experts h;
    if (cnt < (int)sizeof h) return snprintf(ebuf, cap, "mpi: malformed expert split"), -1;
    memcpy(&h, buf, sizeof h);
    if (h.path_len < 1 || (int)sizeof h + h.path_len != cnt || h.tag < TMPI_TAG_EXPERTS0 ||
        h.tag >= TMPI_TAG_EXPERTS0 + TMPI_MAX_XSPLITS || h.e0 < 0 || h.e1 <= h.e0 || h.n_threads < 1 ||
        h.n_threads > 1024)
        return snprintf(ebuf, cap, "mpi: malformed expert split"), -1;
    char *path;
    xp_srv *q = tmpi_serving_new(buf, sizeof h, h.path_len, sizeof *q, &path, ebuf, cap);
    if (!q) return -1;
    q->e0 = h.e0, q->e1 = h.e1, q->tag = h.tag;
    const char *f = getenv("TUTTI_MPI_TEST_FAULT"); /* xpload@R: rank R cannot load (tests/test_mpi.sh) */
    const char *err = f && !strncmp(f, "xpload@", 7) && atoi(f + 7) == tmpi_rank() ? "injected load failure" : NULL;
    /* only this rank's experts are placed: the rest of the file stays mapped
     * and untouched (neither read nor resident) */
    if (!err && !(q->m = tutti_model_load_experts(path, NULL, tmpi_rank(), tutti_mpi_size(), true)))
        err = tutti_last_error();
    if (!err && (q->m->hp.n_expert < h.e1 || q->m->part_e0 != h.e0 || q->m->part_e1 != h.e1))
        err = "the file has fewer experts than the split asks for";
    if (!err && !(q->tp = tutti_threadpool_new(h.n_threads))) err = tutti_last_error();
    if (!err && pthread_create(&q->th, NULL, srv_main, q) != 0) err = "cannot start a thread";
    if (err) {
        snprintf(ebuf, cap, "%s", err);
        tutti_threadpool_free(q->tp);
        tutti_model_free(q->m);
        free(q);
        free(path);
        return -1;
    }
    free(path);
    tmpi_serving_add(q->th, q);
    return 0;
}
