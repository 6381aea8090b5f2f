/* One model split by layers over MPI ranks (see tutti_mpi.h): the plan,
 * rank 0's pipeline (a tutti_pipe behind tutti_session_eval) and the
 * member ranks' part servers.  Compiled only with MPI.
 *
 * Bit-identity: every rank runs tutti_forward_range, the code of the
 * single-process pass, on its layers; the activations travel as raw
 * floats; and every row's arithmetic in the pass is independent of the
 * other rows of its micro-batch (matmul, norms, rope and attention work
 * per token over the cache), so micro-batches of any size give the same
 * bits as one pass (tests/test_mpi.sh compares the logits). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "mpi/proto.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"

#define SPLIT_MAX_RANKS 64
#define SPLIT_UB_ALIGN 4 /* tokens per matmul tile (quant/vecdot.h) */
#define SPLIT_UB_MIN 8   /* fewest tokens for the K-quant panel kernels */

/* ---- resident memory (for the report: each rank holds only its part) ---- */

static void rss_mib(double *now, double *peak) {
    *now = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long kb;
        if (sscanf(line, "VmRSS: %ld", &kb) == 1) *now = (double)kb / 1024;
        if (sscanf(line, "VmHWM: %ld", &kb) == 1) *peak = (double)kb / 1024;
    }
    fclose(f);
}

static const char *base_name(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* ---- arguments ---- */

static bool is_counts(const char *s) {
    if (!*s) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == ',')) return false;
    return true;
}

int tutti_mpi_split_args(int *argc, char **argv, const char **counts, int32_t *ubatch) {
    int found = 0, j = 0;
    *counts = NULL;
    *ubatch = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], "--split-layers") || !strncmp(argv[i], "--split-layers=", 15)) {
            found = 1;
            const char *v = argv[i][14] == '=' ? argv[i] + 15 : (i + 1 < *argc && is_counts(argv[i + 1]) ? argv[++i] : NULL);
            if (v && !is_counts(v)) {
                fprintf(stderr, "tutti: --split-layers=%s: expected comma-separated layer counts, one per rank\n", v);
                return -1;
            }
            *counts = v;
            continue;
        }
        if (!strcmp(argv[i], "--split-ubatch")) {
            char *e = NULL;
            long v = i + 1 < *argc ? strtol(argv[i + 1], &e, 10) : 0;
            if (i + 1 >= *argc || *e || v < SPLIT_UB_MIN || v > 512 || v % SPLIT_UB_ALIGN) {
                fprintf(stderr, "tutti: --split-ubatch needs a multiple of %d tokens in [%d, 512] (the matmul "
                                "kernels' tiles: other sizes would change the sums' order)\n",
                        SPLIT_UB_ALIGN, SPLIT_UB_MIN);
                return -1;
            }
            *ubatch = (int32_t)v;
            i++;
            continue;
        }
        argv[j++] = argv[i];
    }
    if (*ubatch && !found) {
        fprintf(stderr, "tutti: --split-ubatch needs --split-layers\n");
        return -1;
    }
    *argc = j;
    argv[j] = NULL;
    return found;
}

/* ---- the plan (rank 0) ---- */

static struct {
    int32_t k;                  /* ranks */
    int32_t il0[SPLIT_MAX_RANKS], il1[SPLIT_MAX_RANKS];
    char path[4096];
    bool planned;
} g_plan;

/* Bytes of weights per layer (tensors "blk.N.*") and of the rest (the
 * embeddings, the head and the small global tensors, held by rank 0). */
static int layer_bytes(const tutti_model *m, uint64_t *bytes, uint64_t *rest) {
    *rest = 0;
    memset(bytes, 0, sizeof *bytes * (size_t)m->hp.n_layer);
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor_info *t = gguf_tensor(m->gguf, i);
        int il = -1, off = 0;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 127 ? t->name.len : 127), t->name.data);
        if (sscanf(name, "blk.%d.%n", &il, &off) == 1 && off > 0 && il >= 0 && il < m->hp.n_layer)
            bytes[il] += t->size;
        else
            *rest += t->size;
    }
    return TUTTI_OK;
}

static int plan(const tutti_model *m, const char *counts, int32_t k) {
    const int32_t n_layer = m->hp.n_layer;
    uint64_t *b = calloc((size_t)n_layer, sizeof *b), rest = 0;
    if (!b) return tutti_set_error("--split-layers: out of memory");
    layer_bytes(m, b, &rest);
    if (counts) {
        int32_t n = 0, sum = 0;
        for (const char *p = counts; *p;) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p || n == k || v > n_layer) {
                free(b);
                return tutti_set_error("--split-layers %s: expected %d layer counts (one per rank) summing to the "
                                       "model's %d layers",
                                       counts, k, n_layer);
            }
            g_plan.il0[n] = sum;
            sum += (int32_t)v;
            g_plan.il1[n++] = sum;
            p = *e ? e + 1 : e;
        }
        if (n != k || sum != n_layer) {
            free(b);
            return tutti_set_error("--split-layers %s: %d counts summing to %d; expected %d counts (one per rank) "
                                   "summing to the model's %d layers",
                                   counts, n, sum, k, n_layer);
        }
    } else {
        /* by memory: rank r ends its range where the running total of
         * weight bytes (rank 0's share starting with the rest) passes
         * (r + 1) / k of all, by at least half the next layer; every rank
         * after 0 keeps at least one layer while there are enough */
        uint64_t total = rest, cum = rest;
        for (int32_t il = 0; il < n_layer; il++) total += b[il];
        int32_t il = 0;
        for (int32_t r = 0; r < k; r++) {
            g_plan.il0[r] = il;
            const int32_t keep = n_layer >= k ? k - 1 - r : 0; /* layers left for the ranks after r */
            const double target = (double)total * (double)(r + 1) / (double)k;
            while (il < n_layer - keep && (r == k - 1 || (double)cum + (double)b[il] / 2 <= target ||
                                            (r > 0 && il == g_plan.il0[r] && n_layer >= k)))
                cum += b[il++];
            g_plan.il1[r] = il;
        }
    }
    char line[2048];
    size_t o = (size_t)snprintf(line, sizeof line, "tutti: mpi: %s split over %d ranks:", base_name(m->path), k);
    for (int32_t r = 0; r < k && o < sizeof line; r++) {
        uint64_t by = r == 0 ? rest : 0;
        for (int32_t il = g_plan.il0[r]; il < g_plan.il1[r]; il++) by += b[il];
        char what[64];
        if (g_plan.il1[r] > g_plan.il0[r])
            snprintf(what, sizeof what, "layers %d-%d", g_plan.il0[r], g_plan.il1[r] - 1);
        else
            snprintf(what, sizeof what, "no layers");
        o += (size_t)snprintf(line + o, sizeof line - o, "%s rank %d %s%s (%.1f MiB)", r ? "," : "", r, what,
                              r == 0 ? " + embeddings and head" : "", (double)by / (1 << 20));
    }
    fprintf(stderr, "%s\n", line);
    free(b);
    g_plan.k = k;
    g_plan.planned = true;
    return TUTTI_OK;
}

tutti_model *tutti_mpi_split_load(const char *path, const tutti_model_params *params, const char *counts) {
    const int32_t k = tutti_mpi_size();
    if (k > SPLIT_MAX_RANKS) {
        tutti_set_error("--split-layers: at most %d ranks", SPLIT_MAX_RANKS);
        return NULL;
    }
    if (strlen(path) >= sizeof g_plan.path) {
        tutti_set_error("--split-layers: model path too long");
        return NULL;
    }
    snprintf(g_plan.path, sizeof g_plan.path, "%s", path);
    /* the plan needs the shapes only: bind without placing any weight */
    tutti_model_params mp = tutti_model_default_params();
    mp.use_mmap = true;
    tutti_model *whole = tutti_model_load(path, &mp);
    if (!whole) return NULL;
    int rc = plan(whole, counts, k);
    tutti_model_free(whole);
    if (rc < 0) return NULL;
    return tutti_model_load_part(path, params, g_plan.il0[0], g_plan.il1[0], true);
}

/* ---- rank 0: the pipeline ---- */

typedef struct split_pipe {
    tutti_pipe base;
    int32_t k, ubatch, il1;   /* ranks, micro-batch (0 = auto), end of rank 0's layers */
    char *sbuf, *rbuf;        /* [n_ub][slot] messages out and back */
    MPI_Request *sreq, *rreq;
    int32_t *off, *len;       /* [n_ub] first token and tokens of each micro-batch */
    size_t slot, cap_ub, cap_bytes;
    int64_t n_tok, n_ub, bytes; /* tokens, micro-batches, bytes over all hops */
    double t_eval;
    bool dead;                      /* a fault: nothing more goes out */
    bool loaded[SPLIT_MAX_RANKS];   /* the ranks serving their part (to be released) */
} split_pipe;

static split_pipe *g_pipe; /* the live pipeline (tutti_mpi_stop frees it on error paths) */

static int pipe_grow(split_pipe *p, size_t n_ub) {
    if (n_ub <= p->cap_ub) return TUTTI_OK;
    n_ub = n_ub * 2;
    int32_t *off = realloc(p->off, sizeof *off * n_ub);
    if (off) p->off = off;
    int32_t *len = off ? realloc(p->len, sizeof *len * n_ub) : NULL;
    if (len) p->len = len;
    if (!len) return tutti_set_error("--split-layers: out of memory for %zu micro-batches", n_ub);
    MPI_Request *sq = realloc(p->sreq, sizeof *sq * n_ub);
    if (sq) p->sreq = sq;
    MPI_Request *rq = sq ? realloc(p->rreq, sizeof *rq * n_ub) : NULL;
    if (rq) p->rreq = rq;
    if (!rq) return tutti_set_error("--split-layers: out of memory for %zu micro-batches", n_ub);
    p->cap_ub = n_ub;
    return TUTTI_OK;
}

/* Message buffers for n_ub slots of `slot` bytes, each way. */
static int pipe_bufs(split_pipe *p, size_t slot, size_t n_ub) {
    p->slot = slot;
    if (slot * n_ub <= p->cap_bytes) return TUTTI_OK;
    char *s = realloc(p->sbuf, slot * n_ub);
    if (s) p->sbuf = s;
    char *r = s ? realloc(p->rbuf, slot * n_ub) : NULL;
    if (r) p->rbuf = r;
    if (!r) return tutti_set_error("--split-layers: out of memory for %zu micro-batches", n_ub);
    p->cap_bytes = slot * n_ub;
    return TUTTI_OK;
}

static int pipe_eval(tutti_pipe *pp, tutti_session *s, const int32_t *ids, int32_t n, float *logits) {
    split_pipe *p = (split_pipe *)pp;
    if (p->dead) return tutti_set_error("--split-layers: the pipeline is broken by an earlier fault");
    const tutti_model *m = s->model;
    const int64_t n_embd = m->hp.n_embd, n_vocab = m->hp.n_vocab;
    const double t0 = MPI_Wtime();
    /* auto: about 4 micro-batches per rank (the pipeline is full for all
     * but k - 1 of them), at least 16 tokens each (smaller ones waste the
     * matmul's weight reads) */
    int32_t ub = p->ubatch;
    if (!ub) {
        ub = (n + 4 * p->k - 1) / (4 * p->k);
        if (ub < 16) ub = 16;
        ub = (ub + SPLIT_UB_ALIGN - 1) / SPLIT_UB_ALIGN * SPLIT_UB_ALIGN;
    }
    /* The micro-batches must give the single-process pass's bits, and the
     * matmul kernels' arithmetic per token depends on the call's shape in
     * two ways (src/quant/simd_x86_kernels.inc): tokens go in tiles of 4
     * from the first token of a call (a token in the tail is summed in
     * another order), and K-quant weights take the panel kernels only for
     * calls of 8 tokens or more.  So each of the session's own micro-batches
     * (n_ubatch tokens, as tutti_session_eval cuts them) is cut into pieces
     * of ub tokens (a multiple of 4, at least 8), and a tail of fewer than 8
     * joins the piece before it; one of fewer than 8 stays whole.
     * Measured: 5-token pieces differ on Q4_K_M and F32, and 8-token pieces
     * with a 1-token tail on Q4_K_M. */
    int32_t n_ub = 0;
    for (int32_t done = 0; done < n;) {
        const int32_t c = n - done < s->n_ubatch ? n - done : s->n_ubatch;
        for (int32_t o = 0; o < c;) {
            int32_t len = c - o <= ub || c - o - ub < SPLIT_UB_MIN ? c - o : ub;
            if (pipe_grow(p, (size_t)n_ub + 1) < 0) return TUTTI_ERR;
            p->off[n_ub] = done + o, p->len[n_ub++] = len;
            o += len;
        }
        done += c;
    }
    int32_t max_len = 0;
    for (int32_t b = 0; b < n_ub; b++) max_len = p->len[b] > max_len ? p->len[b] : max_len;
    if (pipe_bufs(p, sizeof(tmpi_act) + sizeof(float) * (size_t)max_len * (size_t)n_embd, (size_t)n_ub) < 0)
        return TUTTI_ERR;
    const int32_t last = p->k - 1;
    const int32_t pos = s->n_past;
    /* every answer's receive is posted first: rank k-1 never waits for a match */
    for (int32_t b = 0; b < n_ub; b++)
        if (MPI_Irecv(p->rbuf + (size_t)b * p->slot, (int)p->slot, MPI_BYTE, last, TMPI_TAG_SPLIT, tmpi_comm,
                      &p->rreq[b]) != MPI_SUCCESS) {
            p->dead = true;
            return tmpi_fail(last, "posting a receive");
        }
    int rc = TUTTI_OK;
    for (int32_t b = 0; b < n_ub && rc == TUTTI_OK; b++) {
        const int32_t done = p->off[b], chunk = p->len[b];
        const tutti_fwd_seg seg = {s, ids + done, chunk};
        tutti_forward_range(s, &seg, 1, 0, p->il1, TUTTI_FWD_EMBED, NULL, NULL);
        /* micro-batch b-1 must be out before b goes (rank 1 takes them in order) */
        if (b > 0) rc = tmpi_wait(&p->sreq[b - 1], MPI_Wtime() + tmpi_timeout_s(), 1, "sending activations");
        if (rc < 0) break;
        char *msg = p->sbuf + (size_t)b * p->slot;
        const tmpi_act h = {TMPI_ACT, s->n_past, chunk, 0};
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, s->x, sizeof(float) * (size_t)chunk * (size_t)n_embd);
        const int len = (int)(sizeof h + sizeof(float) * (size_t)chunk * (size_t)n_embd);
        if (MPI_Isend(msg, len, MPI_BYTE, 1, TMPI_TAG_SPLIT, tmpi_comm, &p->sreq[b]) != MPI_SUCCESS) {
            rc = tmpi_fail(1, "sending activations");
            break;
        }
        p->bytes += (int64_t)len * p->k; /* the same size on every hop */
        s->n_past += chunk;
    }
    if (rc == TUTTI_OK)
        rc = tmpi_wait(&p->sreq[n_ub - 1], MPI_Wtime() + tmpi_timeout_s(), 1, "sending activations");
    for (int32_t b = 0; b < n_ub && rc == TUTTI_OK; b++) {
        const int32_t done = p->off[b], chunk = p->len[b];
        rc = tmpi_wait(&p->rreq[b], MPI_Wtime() + tmpi_timeout_s(), last, "computing layers");
        if (rc < 0) break;
        const char *msg = p->rbuf + (size_t)b * p->slot;
        tmpi_act h;
        memcpy(&h, msg, sizeof h);
        if (h.op == TMPI_ACT_ERR) {
            rc = tutti_set_error("mpi: rank %d (%s split part): %.*s", h.from, base_name(m->path),
                                 h.n > 0 && (size_t)h.n < p->slot - sizeof h ? h.n : 0, msg + sizeof h);
            break;
        }
        if (h.op != TMPI_ACT || h.n != chunk || h.pos0 != pos + done) {
            rc = tutti_set_error("mpi: rank %d: activations of micro-batch %d came back malformed", last, b);
            break;
        }
        /* the head: every row when the caller wants them, else the last row of the last micro-batch */
        if (!logits && b < n_ub - 1) continue;
        memcpy(s->x, msg + sizeof h, sizeof(float) * (size_t)chunk * (size_t)n_embd);
        const tutti_fwd_seg seg = {s, ids + done, chunk};
        tutti_forward_range(s, &seg, 1, m->hp.n_layer, m->hp.n_layer, TUTTI_FWD_HEAD,
                            logits ? logits + (int64_t)done * n_vocab : NULL, NULL);
    }
    if (rc < 0) {
        p->dead = true; /* requests may still be out: the run ends (tmpi_wait recorded the fault) */
        s->n_past = pos;
        return TUTTI_ERR;
    }
    s->n_past = pos + n;
    s->has_logits = true;
    p->n_tok += n;
    p->n_ub += n_ub;
    p->t_eval += MPI_Wtime() - t0;
    return TUTTI_OK;
}

static void pipe_free(tutti_pipe *pp) {
    split_pipe *p = (split_pipe *)pp;
    /* to every rank that serves a part, straight from rank 0 (no answer is
     * in flight between evaluations, and a rank that could not load has no
     * part to stop) */
    for (int32_t r = 1; r < p->k && !p->dead; r++) {
        const tmpi_act h = {TMPI_ACT_FREE, 0, 0, 0};
        MPI_Request rq;
        if (p->loaded[r] && MPI_Isend(&h, sizeof h, MPI_BYTE, r, TMPI_TAG_SPLIT, tmpi_comm, &rq) == MPI_SUCCESS &&
            tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, "releasing the split") < 0)
            break;
    }
    for (int32_t r = 1; r < p->k; r++) tmpi_unregister(r, TMPI_TAG_SPLIT);
    if (p->n_tok > 0) {
        double rss, peak;
        rss_mib(&rss, &peak);
        fprintf(stderr,
                "tutti: mpi: split: %lld tokens in %lld micro-batches, %.1f bytes per token over the ring (%d hops), "
                "%.3f s in the pipeline; rank 0 RSS %.1f MiB (peak %.1f MiB)\n",
                (long long)p->n_tok, (long long)p->n_ub, (double)p->bytes / (double)p->n_tok, p->k, p->t_eval, rss,
                peak);
    }
    free(p->sbuf);
    free(p->rbuf);
    free(p->sreq);
    free(p->rreq);
    free(p->off);
    free(p->len);
    if (g_pipe == p) g_pipe = NULL;
    free(p);
}

void tmpi_split_release(void) {
    /* the session owning the pipeline was not freed: release the ranks */
    if (g_pipe) pipe_free(&g_pipe->base);
}

int tutti_mpi_split_attach(tutti_session *s, int32_t n_threads, int32_t ubatch) {
    if (!g_plan.planned) return tutti_set_error("--split-layers: no split planned");
    const int32_t k = g_plan.k;
    if (k == 1) return TUTTI_OK; /* one rank: the whole model here, nothing to pass on */
    if (g_pipe) return tutti_set_error("--split-layers: one split session at a time");
    const size_t plen = strlen(g_plan.path);
    split_pipe *p = calloc(1, sizeof *p);
    char *msg = malloc(sizeof(tmpi_split) + plen);
    if (!p || !msg) {
        free(p);
        free(msg);
        return tutti_set_error("--split-layers: out of memory");
    }
    p->base.eval = pipe_eval;
    p->base.free = pipe_free;
    p->k = k;
    p->ubatch = ubatch;
    p->il1 = g_plan.il1[0];
    g_pipe = p;
    s->pipe = &p->base; /* from here on the session's free releases the ranks */
    /* every rank loads at once; the answers are taken in rank order */
    int rc = TUTTI_OK;
    for (int32_t r = 1; r < k && rc == TUTTI_OK; r++) {
        tmpi_split h = {TMPI_SPLIT, g_plan.il0[r], g_plan.il1[r], s->n_ctx, n_threads, (int32_t)plen};
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, g_plan.path, plen);
        char name[64];
        snprintf(name, sizeof name, "layers %d-%d of %s", g_plan.il0[r], g_plan.il1[r] - 1, base_name(g_plan.path));
        tmpi_register(r, TMPI_TAG_SPLIT, name, -1);
        MPI_Request rq;
        if (MPI_Isend(msg, (int)(sizeof h + plen), MPI_BYTE, r, TMPI_TAG_CTRL, tmpi_comm, &rq) != MPI_SUCCESS)
            rc = tmpi_fail(r, "sending the split");
        else
            rc = tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, "sending the split");
    }
    free(msg);
    int rc_load = TUTTI_OK;
    char first_err[1200] = "";
    for (int32_t r = 1; r < k && rc == TUTTI_OK; r++) {
        tmpi_loaded out;
        MPI_Request rq;
        MPI_Irecv(&out, sizeof out, MPI_BYTE, r, TMPI_TAG_CTRL_REPLY, tmpi_comm, &rq);
        if ((rc = tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, "loading its layers")) < 0) break;
        out.host[sizeof out.host - 1] = 0;
        tmpi_set_pid(r, out.pid, out.host);
        if (out.status == 0) {
            p->loaded[r] = true;
            continue;
        }
        char err[1024] = "";
        int len = out.err_len > 0 && out.err_len < (int)sizeof err ? out.err_len : (int)sizeof err - 1;
        MPI_Irecv(err, len, MPI_CHAR, r, TMPI_TAG_CTRL_REPLY, tmpi_comm, &rq);
        if ((rc = tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, "loading its layers")) < 0) break;
        err[sizeof err - 1] = 0;
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "mpi: rank %d cannot load layers %d-%d of %s: %s", r,
                     g_plan.il0[r], g_plan.il1[r] - 1, g_plan.path, err);
        rc_load = TUTTI_ERR;
    }
    if (rc < 0) {
        p->dead = true; /* a fault (tmpi_wait said which rank) */
        return TUTTI_ERR;
    }
    if (rc_load < 0) return tutti_set_error("%s", first_err);
    return TUTTI_OK;
}

/* ---- member ranks: the part servers ---- */

typedef struct split_srv {
    tutti_model *m;
    tutti_session *s;
    int32_t il0, il1;
    pthread_t th;
} split_srv;

static split_srv *g_srv[8];
static int g_n_srv;

static void *srv_main(void *arg) {
    split_srv *q = arg;
    tutti_session *s = q->s;
    const int rank = tmpi_rank(), k = tutti_mpi_size(), next = (rank + 1) % k;
    const int64_t n_embd = q->m->hp.n_embd;
    const size_t cap = sizeof(tmpi_act) + sizeof(float) * (size_t)s->n_ubatch * (size_t)n_embd;
    char *buf = malloc(cap + 1024);
    int64_t n_tok = 0;
    for (;;) {
        MPI_Message msg;
        MPI_Status st;
        int cnt = 0;
        /* activations from the previous rank, FREE from rank 0 */
        if (tmpi_probe_idle(MPI_ANY_SOURCE, TMPI_TAG_SPLIT, &msg, &st) != MPI_SUCCESS) break;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        if (!buf || (size_t)cnt > cap) { /* too large to hold: drop it, answer with an error */
            char *tmp = malloc((size_t)cnt);
            MPI_Mrecv(tmp, cnt, MPI_BYTE, &msg, &st);
            free(tmp);
            if (!buf) break;
            cnt = 0;
        } else if (MPI_Mrecv(buf, cnt, MPI_BYTE, &msg, &st) != MPI_SUCCESS)
            break;
        tmpi_act h = {TMPI_ACT_FREE, 0, 0, 0};
        if (cnt >= (int)sizeof h) memcpy(&h, buf, sizeof h);
        else if (cnt > 0) h.op = TMPI_ACT_FREE;
        else h.op = -1; /* dropped */
        if (h.op == TMPI_ACT_FREE) break;
        const char *err = NULL;
        if (h.op == TMPI_ACT_ERR) { /* someone before us failed: pass it on */
            MPI_Send(buf, cnt, MPI_BYTE, next, TMPI_TAG_SPLIT, tmpi_comm);
            continue;
        }
        if (h.op != TMPI_ACT || h.n < 1 || h.n > s->n_ubatch || h.pos0 < 0 || h.pos0 > s->n_ctx - h.n ||
            (size_t)cnt != sizeof h + sizeof(float) * (size_t)h.n * (size_t)n_embd)
            err = "malformed activations";
        if (!err) {
            tmpi_test_fault();
            memcpy(s->x, buf + sizeof h, sizeof(float) * (size_t)h.n * (size_t)n_embd);
            s->n_past = h.pos0;
            const tutti_fwd_seg seg = {s, NULL, h.n};
            tutti_forward_range(s, &seg, 1, q->il0, q->il1, 0, NULL, NULL);
            memcpy(buf + sizeof h, s->x, sizeof(float) * (size_t)h.n * (size_t)n_embd);
            n_tok += h.n;
            MPI_Send(buf, cnt, MPI_BYTE, next, TMPI_TAG_SPLIT, tmpi_comm);
        } else {
            const tmpi_act e = {TMPI_ACT_ERR, h.pos0, (int32_t)strlen(err) + 1, rank};
            memcpy(buf, &e, sizeof e);
            memcpy(buf + sizeof e, err, (size_t)e.n);
            MPI_Send(buf, (int)(sizeof e + (size_t)e.n), MPI_BYTE, next, TMPI_TAG_SPLIT, tmpi_comm);
        }
    }
    free(buf);
    double rss, peak;
    rss_mib(&rss, &peak);
    fprintf(stderr, "tutti: mpi: split: rank %d computed layers %d-%d of %s for %lld tokens; RSS %.1f MiB (peak %.1f MiB)\n",
            rank, q->il0, q->il1 - 1, base_name(q->m->path), (long long)n_tok, rss, peak);
    return NULL;
}

int tmpi_split_serve(const char *buf, int cnt, char *ebuf, size_t cap) {
    tmpi_split h;
    if (cnt < (int)sizeof h) return snprintf(ebuf, cap, "mpi: malformed split request"), -1;
    memcpy(&h, buf, sizeof h);
    if (h.path_len < 1 || (int)sizeof h + h.path_len != cnt || g_n_srv == 8)
        return snprintf(ebuf, cap, "mpi: malformed split request"), -1;
    char *path = malloc((size_t)h.path_len + 1);
    split_srv *q = calloc(1, sizeof *q);
    if (!path || !q) {
        free(path);
        free(q);
        return snprintf(ebuf, cap, "mpi: out of memory"), -1;
    }
    memcpy(path, buf + sizeof h, (size_t)h.path_len);
    path[h.path_len] = 0;
    q->il0 = h.il0, q->il1 = h.il1;
    /* fault injection for tests/test_mpi.sh: TUTTI_MPI_TEST_FAULT=splitload@R
     * makes rank R fail to load its part (as a file it cannot read would) */
    const char *f = getenv("TUTTI_MPI_TEST_FAULT");
    if (f && !strncmp(f, "splitload@", 10) && atoi(f + 10) == tmpi_rank()) {
        snprintf(ebuf, cap, "%s: injected load failure (TUTTI_MPI_TEST_FAULT)", path);
        free(q);
        free(path);
        return -1;
    }
    tutti_session_params sp = tutti_session_default_params();
    sp.n_ctx = h.n_ctx;
    sp.n_threads = h.n_threads;
    if (!(q->m = tutti_model_load_part(path, NULL, h.il0, h.il1, false)) || !(q->s = tutti_session_new(q->m, &sp)) ||
        pthread_create(&q->th, NULL, srv_main, q) != 0) {
        snprintf(ebuf, cap, "%s", q->m && q->s ? "cannot start a thread" : tutti_last_error());
        tutti_session_free(q->s);
        tutti_model_free(q->m);
        free(q);
        free(path);
        return -1;
    }
    free(path);
    g_srv[g_n_srv++] = q;
    return 0;
}

void tmpi_split_join(void) {
    for (int i = 0; i < g_n_srv; i++) {
        pthread_join(g_srv[i]->th, NULL);
        tutti_session_free(g_srv[i]->s);
        tutti_model_free(g_srv[i]->m);
        free(g_srv[i]);
    }
    g_n_srv = 0;
}
