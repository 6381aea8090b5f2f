/* One model split by layers over MPI ranks (see tutti_mpi.h): the plan,
 * the ring (rank 0's side: sessions whose evaluations pass through the
 * other ranks, behind tutti_session_eval and tutti_session_eval_multi) and
 * the member ranks' part servers.  Compiled only with MPI.
 *
 * Bit-identity: every rank runs tutti_forward_range, the code of the
 * single-process pass, on its layers; the activations travel as raw
 * floats; and every row's arithmetic in the pass is independent of the
 * other rows of its micro-batch (matmul, norms, rope and attention work
 * per token over the cache), so micro-batches of any size give the same
 * bits as one pass (tests/test_mpi.sh compares the logits), as long as the
 * matmul kernels see calls of the same shape (pipe_eval's cut).  A batch
 * of several sessions' segments (tutti_session_eval_multi: byte alignment
 * asks for the continuations of several tokenization hypotheses at once)
 * goes round as one piece, so every rank's matmuls run over the same rows
 * as the single-process pass's one forward_segments call. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "mpi/proto.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"
#include "util/path.h"

#define SPLIT_MAX_RANKS 64
#define SPLIT_UB_ALIGN 4     /* tokens per matmul tile (quant/vecdot.h) */
#define SPLIT_UB_MIN 8       /* fewest tokens for the K-quant panel kernels */
#define SPLIT_MAX_SLOTS 4096 /* sessions per ring */
#define SPLIT_MAX_COPY 4096  /* cache-prefix copies carried by one pass */

/* ---- arguments ---- */

static bool is_counts(const char *s) {
    if (!*s) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == ',')) return false;
    return true;
}

int tutti_mpi_split_check(const char *counts, int32_t ubatch) {
    if (!counts) return ubatch ? tutti_set_error("--split-ubatch needs --split-layers") : TUTTI_OK;
    if (*counts && !is_counts(counts))
        return tutti_set_error("--split-layers %s: expected comma-separated layer counts, one per rank", counts);
    if (ubatch && (ubatch < SPLIT_UB_MIN || ubatch > 512 || ubatch % SPLIT_UB_ALIGN))
        return tutti_set_error("--split-ubatch needs a multiple of %d tokens in [%d, 512] (the matmul kernels' "
                               "tiles: other sizes would change the sums' order)",
                               SPLIT_UB_ALIGN, SPLIT_UB_MIN);
    return TUTTI_OK;
}

/* ---- the ring (rank 0) ---- */

struct tutti_mpi_ring {
    int32_t k, tag, ubatch, n_ctx; /* ranks, tag, micro-batch (0 = auto), the sessions' context */
    int32_t il0[SPLIT_MAX_RANKS], il1[SPLIT_MAX_RANKS];
    int32_t n_layer;
    int64_t n_embd, n_vocab;
    char *path;
    bool started;                 /* the other ranks were asked to load their parts */
    bool dead;                    /* a fault: nothing more goes out */
    bool broken;                  /* an error answer: no more passes (the parts are still released) */
    bool loaded[SPLIT_MAX_RANKS]; /* the ranks serving their part (to be released) */
    /* one pass: piece b (a micro-batch) is seg[pseg[b] .. pseg[b+1]) */
    tutti_fwd_seg *seg;
    int32_t *pos0, *pseg;
    size_t cap_seg, cap_piece;
    char *sbuf, *rbuf; /* [n_piece][slot] messages out and back */
    MPI_Request *sreq, *rreq;
    size_t slot, cap_bytes;
    tmpi_copy *copy; /* copies done here since the last pass, for the other ranks */
    int32_t n_copy, cap_copy;
    int64_t n_tok, n_pass, n_piece, bytes; /* tokens, passes, micro-batches, bytes over all hops */
    double t_eval;
    tutti_mpi_ring *next; /* the live rings */
};

/* a session's pipeline: its slot on a ring */
typedef struct split_pipe {
    tutti_pipe base;
    tutti_mpi_ring *ring;
    int32_t sid;
    bool owns_ring; /* tutti generate: the ring goes with its one session */
} split_pipe;

static pthread_mutex_t g_rings_mu = PTHREAD_MUTEX_INITIALIZER;
static tutti_mpi_ring *g_rings; /* tutti_mpi_stop releases what a failed command left */
static int32_t g_ring_seq;      /* rings opened (their tags are never reused: a late FREE cannot hit a new ring) */

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
        if (sscanf(name, "blk.%d.%n", &il, &off) == 1 && off > 0 && il >= 0 && il < m->hp.n_layer) bytes[il] += t->size;
        else *rest += t->size;
    }
    return TUTTI_OK;
}

static int plan(tutti_mpi_ring *g, const tutti_model *m, const char *counts, int32_t k) {
    const int32_t n_layer = m->hp.n_layer;
    uint64_t *b = calloc((size_t)n_layer, sizeof *b), rest = 0;
    if (!b) return tutti_set_error("--split-layers: out of memory");
    layer_bytes(m, b, &rest);
    if (counts && *counts) {
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
            g->il0[n] = sum;
            sum += (int32_t)v;
            g->il1[n++] = sum;
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
            g->il0[r] = il;
            const int32_t keep = n_layer >= k ? k - 1 - r : 0; /* layers left for the ranks after r */
            const double target = (double)total * (double)(r + 1) / (double)k;
            while (il < n_layer - keep && (r == k - 1 || (double)cum + (double)b[il] / 2 <= target ||
                                           (r > 0 && il == g->il0[r] && n_layer >= k)))
                cum += b[il++];
            g->il1[r] = il;
        }
    }
    char line[2048];
    size_t o = (size_t)snprintf(line, sizeof line, "tutti: mpi: %s split over %d ranks:", tutti_base_name(m->path), k);
    for (int32_t r = 0; r < k && o < sizeof line; r++) {
        uint64_t by = r == 0 ? rest : 0;
        for (int32_t il = g->il0[r]; il < g->il1[r]; il++) by += b[il];
        char what[64];
        if (g->il1[r] > g->il0[r]) snprintf(what, sizeof what, "layers %d-%d", g->il0[r], g->il1[r] - 1);
        else snprintf(what, sizeof what, "no layers");
        o += (size_t)snprintf(line + o, sizeof line - o, "%s rank %d %s%s (%.1f MiB)", r ? "," : "", r, what,
                              r == 0 ? " + embeddings and head" : "", (double)by / (1 << 20));
    }
    fprintf(stderr, "%s\n", line);
    free(b);
    g->k = k;
    g->n_layer = n_layer;
    g->n_embd = m->hp.n_embd;
    g->n_vocab = m->hp.n_vocab;
    return TUTTI_OK;
}

static void ring_unlink(tutti_mpi_ring *r) {
    pthread_mutex_lock(&g_rings_mu);
    for (tutti_mpi_ring **p = &g_rings; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&g_rings_mu);
}

void tutti_mpi_ring_free(tutti_mpi_ring *r) {
    if (!r) return;
    ring_unlink(r);
    /* to every rank that serves a part, straight from rank 0 (no answer is
     * in flight between evaluations, and a rank that could not load has no
     * part to stop) */
    for (int32_t q = 1; q < r->k && !r->dead; q++) {
        const tmpi_act h = {TMPI_ACT_FREE, 0, 0, 0, 0};
        MPI_Request rq;
        if (r->loaded[q] && MPI_Isend(&h, sizeof h, MPI_BYTE, q, r->tag, tmpi_comm, &rq) == MPI_SUCCESS &&
            tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), q, "releasing the split") < 0)
            break;
    }
    for (int32_t q = 1; q < r->k && r->started; q++) tmpi_unregister(q, r->tag);
    if (r->n_tok > 0) {
        double rss, peak;
        tmpi_rss_mib(&rss, &peak);
        fprintf(stderr,
                "tutti: mpi: split: %lld tokens in %lld micro-batches (%lld passes), %.1f bytes per token over the "
                "ring (%d hops), %.3f s in the pipeline of %s; rank 0 RSS %.1f MiB (peak %.1f MiB)\n",
                (long long)r->n_tok, (long long)r->n_piece, (long long)r->n_pass, (double)r->bytes / (double)r->n_tok,
                r->k, r->t_eval, tutti_base_name(r->path), rss, peak);
    }
    free(r->seg);
    free(r->pos0);
    free(r->pseg);
    free(r->sbuf);
    free(r->rbuf);
    free(r->sreq);
    free(r->rreq);
    free(r->copy);
    free(r->path);
    free(r);
}

void tmpi_split_release(void) {
    /* rings whose owner was not freed (error paths): release the ranks */
    for (;;) {
        pthread_mutex_lock(&g_rings_mu);
        tutti_mpi_ring *r = g_rings;
        pthread_mutex_unlock(&g_rings_mu);
        if (!r) break;
        tutti_mpi_ring_free(r);
    }
}

tutti_mpi_ring *tutti_mpi_ring_open(const char *path, const tutti_model *whole, const tutti_model_params *params,
                                    const char *counts, int32_t ubatch, tutti_model **part) {
    if (part) *part = NULL;
    const int32_t k = tutti_mpi_size();
    if (k > SPLIT_MAX_RANKS) return tutti_set_error("--split-layers: at most %d ranks", SPLIT_MAX_RANKS), NULL;
    if (tutti_mpi_split_check(counts ? counts : "", ubatch) < 0) return NULL;
    tutti_mpi_ring *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return tutti_set_error("--split-layers: out of memory"), NULL;
    }
    r->ubatch = ubatch;
    /* the plan needs the shapes only: bind without placing any weight */
    tutti_model *shape = NULL;
    if (!whole) {
        tutti_model_params mp = tutti_model_default_params();
        mp.use_mmap = true;
        if (!(shape = tutti_model_load(path, &mp))) goto fail;
    }
    int rc = plan(r, whole ? whole : shape, counts, k);
    tutti_model_free(shape);
    if (rc < 0) goto fail;
    if (!whole && !(*part = tutti_model_load_part(path, params, r->il0[0], r->il1[0], true))) goto fail;
    if (k > 1) {
        pthread_mutex_lock(&g_rings_mu);
        const bool full = g_ring_seq >= TMPI_MAX_RINGS;
        if (!full) {
            r->tag = TMPI_TAG_SPLIT0 + g_ring_seq++;
            r->next = g_rings, g_rings = r;
        }
        pthread_mutex_unlock(&g_rings_mu);
        if (full) {
            tutti_set_error("--split-layers: more than %d split models in one run", TMPI_MAX_RINGS);
            goto fail;
        }
    }
    return r;
fail:
    if (part) tutti_model_free(*part), *part = NULL;
    free(r->path);
    free(r);
    return NULL;
}

int tmpi_take_loaded(int r, const char *what, bool *loaded, char *err, size_t cap) {
    tmpi_loaded out;
    MPI_Request rq;
    *loaded = false;
    err[0] = 0;
    MPI_Irecv(&out, sizeof out, MPI_BYTE, r, TMPI_TAG_CTRL_REPLY, tmpi_comm, &rq);
    if (tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, what) < 0) return TUTTI_ERR;
    out.host[sizeof out.host - 1] = 0;
    tmpi_set_pid(r, out.pid, out.host);
    if (out.status == 0) return *loaded = true, TUTTI_OK;
    const int len = out.err_len > 0 && out.err_len < (int)cap ? out.err_len : (int)cap - 1;
    MPI_Irecv(err, len, MPI_CHAR, r, TMPI_TAG_CTRL_REPLY, tmpi_comm, &rq);
    if (tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, what) < 0) return TUTTI_ERR;
    err[cap - 1] = 0;
    return TUTTI_OK;
}

/* Every other rank loads its part (at once; the answers are taken in rank
 * order).  One control exchange at a time (tmpi_ctrl_mu). */
static int start_parts(tutti_mpi_ring *g, int32_t n_threads) {
    const size_t plen = strlen(g->path);
    char *msg = malloc(sizeof(tmpi_split) + plen);
    if (!msg) return tutti_set_error("--split-layers: out of memory");
    pthread_mutex_lock(&tmpi_ctrl_mu);
    int rc = TUTTI_OK;
    for (int32_t r = 1; r < g->k && rc == TUTTI_OK; r++) {
        tmpi_split h = {TMPI_SPLIT, g->il0[r], g->il1[r], g->n_ctx, n_threads, (int32_t)plen, g->tag};
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, g->path, plen);
        char name[64];
        snprintf(name, sizeof name, "layers %d-%d of %s", g->il0[r], g->il1[r] - 1, tutti_base_name(g->path));
        tmpi_register(r, g->tag, name, -1);
        rc = tmpi_send_wait(r, TMPI_TAG_CTRL, msg, sizeof h + plen, "sending the split");
    }
    free(msg);
    int rc_load = TUTTI_OK;
    char first_err[1200] = "";
    for (int32_t r = 1; r < g->k && rc == TUTTI_OK; r++) {
        char err[1024];
        if ((rc = tmpi_take_loaded(r, "loading its layers", &g->loaded[r], err, sizeof err)) < 0) break;
        if (g->loaded[r]) continue;
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "mpi: rank %d cannot load layers %d-%d of %s: %s", r, g->il0[r],
                     g->il1[r] - 1, g->path, err);
        rc_load = TUTTI_ERR;
    }
    pthread_mutex_unlock(&tmpi_ctrl_mu);
    if (rc < 0) {
        g->dead = true; /* a fault (tmpi_wait said which rank) */
        return TUTTI_ERR;
    }
    if (rc_load < 0) {
        g->broken = true; /* the ranks that did load are released here */
        for (int32_t r = 1; r < g->k; r++)
            if (g->loaded[r]) {
                const tmpi_act h = {TMPI_ACT_FREE, 0, 0, 0, 0};
                MPI_Request rq;
                if (MPI_Isend(&h, sizeof h, MPI_BYTE, r, g->tag, tmpi_comm, &rq) == MPI_SUCCESS)
                    tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), r, "releasing the split");
                g->loaded[r] = false;
            }
        return tutti_set_error("%s", first_err);
    }
    return TUTTI_OK;
}

/* Room for n_seg segments in n_piece pieces. */
static int ring_room(tutti_mpi_ring *r, size_t n_seg, size_t n_piece) {
    if (n_seg > r->cap_seg) {
        const size_t nc = n_seg * 2;
        tutti_fwd_seg *sg = realloc(r->seg, sizeof *sg * nc);
        if (sg) r->seg = sg;
        int32_t *p0 = sg ? realloc(r->pos0, sizeof *p0 * nc) : NULL;
        if (p0) r->pos0 = p0;
        if (!p0) return tutti_set_error("--split-layers: out of memory for %zu segments", n_seg);
        r->cap_seg = nc;
    }
    if (n_piece + 1 > r->cap_piece) {
        const size_t nc = (n_piece + 1) * 2;
        int32_t *ps = realloc(r->pseg, sizeof *ps * nc);
        if (ps) r->pseg = ps;
        MPI_Request *sq = ps ? realloc(r->sreq, sizeof *sq * nc) : NULL;
        if (sq) r->sreq = sq;
        MPI_Request *rq = sq ? realloc(r->rreq, sizeof *rq * nc) : NULL;
        if (rq) r->rreq = rq;
        if (!rq) return tutti_set_error("--split-layers: out of memory for %zu micro-batches", n_piece);
        r->cap_piece = nc;
    }
    return TUTTI_OK;
}

/* Message buffers for n_piece slots of `slot` bytes, each way. */
static int ring_bufs(tutti_mpi_ring *r, size_t slot, size_t n_piece) {
    r->slot = slot;
    if (slot * n_piece <= r->cap_bytes) return TUTTI_OK;
    char *s = realloc(r->sbuf, slot * n_piece);
    if (s) r->sbuf = s;
    char *q = s ? realloc(r->rbuf, slot * n_piece) : NULL;
    if (q) r->rbuf = q;
    if (!q) return tutti_set_error("--split-layers: out of memory for %zu micro-batches", n_piece);
    r->cap_bytes = slot * n_piece;
    return TUTTI_OK;
}

/* One pass round the ring: piece b (b < n_piece) is the segments
 * r->seg[pseg[b] .. pseg[b+1]) at positions r->pos0[..] (each session's
 * n_past is set to its segment's position before rank 0's layers run).
 * s: the session whose activations and threads rank 0 uses.  The head
 * runs on every piece when out (all rows, in order) or rows (several
 * segments: the last row of each, tutti_forward_range) asks for it, else
 * on the last piece only (its last row into its session's logits).  The
 * copies made here since the last pass go with the first piece. */
static int ring_pass(tutti_mpi_ring *r, tutti_session *s, int32_t n_piece, float *out, float *rows) {
    const int64_t n_embd = r->n_embd, n_vocab = r->n_vocab;
    const double t0 = MPI_Wtime();
    int32_t max_tok = 0, max_seg = 0, n_tok = 0;
    for (int32_t b = 0; b < n_piece; b++) {
        int32_t t = 0;
        for (int32_t j = r->pseg[b]; j < r->pseg[b + 1]; j++) t += r->seg[j].n;
        max_tok = t > max_tok ? t : max_tok;
        max_seg = r->pseg[b + 1] - r->pseg[b] > max_seg ? r->pseg[b + 1] - r->pseg[b] : max_seg;
        n_tok += t;
    }
    const size_t slot = sizeof(tmpi_act) + sizeof(tmpi_copy) * (size_t)r->n_copy + sizeof(tmpi_seg) * (size_t)max_seg +
                        sizeof(float) * (size_t)max_tok * (size_t)n_embd;
    if (ring_bufs(r, slot, (size_t)n_piece) < 0) return TUTTI_ERR;
    const int32_t last = r->k - 1;
    /* every answer's receive is posted first: rank k-1 never waits for a match */
    for (int32_t b = 0; b < n_piece; b++)
        if (MPI_Irecv(r->rbuf + (size_t)b * slot, (int)slot, MPI_BYTE, last, r->tag, tmpi_comm, &r->rreq[b]) !=
            MPI_SUCCESS) {
            r->dead = true;
            return tmpi_fail(last, "posting a receive");
        }
    int rc = TUTTI_OK;
    const int32_t n_copy0 = r->n_copy;
    for (int32_t b = 0; b < n_piece && rc == TUTTI_OK; b++) {
        const int32_t j0 = r->pseg[b], ns = r->pseg[b + 1] - j0;
        int32_t t = 0;
        for (int32_t j = j0; j < j0 + ns; j++) {
            r->seg[j].s->n_past = r->pos0[j];
            t += r->seg[j].n;
        }
        tutti_forward_range(s, r->seg + j0, ns, 0, r->il1[0], TUTTI_FWD_EMBED, NULL, NULL);
        /* micro-batch b-1 must be out before b goes (rank 1 takes them in order) */
        if (b > 0) rc = tmpi_wait(&r->sreq[b - 1], MPI_Wtime() + tmpi_timeout_s(), 1, "sending activations");
        if (rc < 0) break;
        char *msg = r->sbuf + (size_t)b * slot;
        const int32_t n_copy = b == 0 ? r->n_copy : 0;
        const tmpi_act h = {TMPI_ACT, t, 0, ns, n_copy};
        size_t o = 0;
        memcpy(msg, &h, sizeof h), o += sizeof h;
        if (n_copy > 0)
            memcpy(msg + o, r->copy, sizeof(tmpi_copy) * (size_t)n_copy), o += sizeof(tmpi_copy) * (size_t)n_copy;
        for (int32_t j = j0; j < j0 + ns; j++) {
            const tmpi_seg sg = {((split_pipe *)r->seg[j].s->pipe)->sid, r->pos0[j], r->seg[j].n};
            memcpy(msg + o, &sg, sizeof sg), o += sizeof sg;
        }
        memcpy(msg + o, s->x, sizeof(float) * (size_t)t * (size_t)n_embd);
        const int len = (int)(o + sizeof(float) * (size_t)t * (size_t)n_embd);
        if (MPI_Isend(msg, len, MPI_BYTE, 1, r->tag, tmpi_comm, &r->sreq[b]) != MPI_SUCCESS) {
            rc = tmpi_fail(1, "sending activations");
            break;
        }
        r->bytes += (int64_t)len * r->k; /* the same size on every hop */
    }
    if (rc == TUTTI_OK) {
        rc = tmpi_wait(&r->sreq[n_piece - 1], MPI_Wtime() + tmpi_timeout_s(), 1, "sending activations");
        r->n_copy = 0; /* the other ranks have them now */
    }
    /* every micro-batch's answer is taken, also after one came back with an
     * error (each rank answers every message it gets): no receive is left
     * posted into the buffers; only a fault (a rank gone) stops the wait */
    const bool sent = rc == TUTTI_OK;
    bool fault = !sent;
    for (int32_t b = 0, row = 0; b < n_piece && sent; b++) {
        const int32_t j0 = r->pseg[b], ns = r->pseg[b + 1] - j0;
        int32_t t = 0;
        for (int32_t j = j0; j < j0 + ns; j++) t += r->seg[j].n;
        if (tmpi_wait(&r->rreq[b], MPI_Wtime() + tmpi_timeout_s(), last, "computing layers") < 0) {
            rc = TUTTI_ERR;
            fault = true;
            break;
        }
        if (rc < 0) continue; /* an earlier micro-batch failed */
        const char *msg = r->rbuf + (size_t)b * slot;
        tmpi_act h;
        memcpy(&h, msg, sizeof h);
        if (h.op == TMPI_ACT_ERR) {
            rc = tutti_set_error("mpi: rank %d (%s split part): %.*s", h.from, tutti_base_name(r->path),
                                 h.n > 0 && (size_t)h.n < slot - sizeof h ? h.n : 0, msg + sizeof h);
            continue;
        }
        /* the answer repeats the header, copies and segments sent */
        const size_t hl = sizeof h + sizeof(tmpi_copy) * (size_t)(b == 0 ? n_copy0 : 0) + sizeof(tmpi_seg) * (size_t)ns;
        if (memcmp(msg, r->sbuf + (size_t)b * slot, hl) != 0) {
            rc = tutti_set_error("mpi: rank %d: activations of micro-batch %d came back malformed", last, b);
            continue;
        }
        /* the head: every row when the caller wants them, else the last row of the last micro-batch */
        if (out || rows || b == n_piece - 1) {
            memcpy(s->x, msg + hl, sizeof(float) * (size_t)t * (size_t)n_embd);
            tutti_forward_range(s, r->seg + j0, ns, r->n_layer, r->n_layer, TUTTI_FWD_HEAD,
                                out ? out + (int64_t)row * n_vocab : NULL, rows);
        }
        row += t;
    }
    if (rc < 0) {
        /* after a fault requests may still be out (tmpi_wait recorded it: the
         * run ends, and nothing more goes out); after an error answer every
         * micro-batch came back, but the ranks' caches may hold part of the
         * pass: no more passes, the parts are released as usual */
        if (fault) r->dead = true;
        r->broken = true;
        return TUTTI_ERR;
    }
    r->n_tok += n_tok;
    r->n_piece += n_piece;
    r->n_pass++;
    r->t_eval += MPI_Wtime() - t0;
    return TUTTI_OK;
}

/* tutti_session_eval of one session: the prompt goes in micro-batches so
 * that the ranks work at the same time. */
static int pipe_eval(tutti_pipe *pp, tutti_session *s, const int32_t *ids, int32_t n, float *logits) {
    split_pipe *p = (split_pipe *)pp;
    tutti_mpi_ring *r = p->ring;
    if (r->dead || r->broken) return tutti_set_error("--split-layers: the pipeline is broken by an earlier error");
    /* auto: about 4 micro-batches per rank (the pipeline is full for all
     * but k - 1 of them), at least 16 tokens each (smaller ones waste the
     * matmul's weight reads) */
    int32_t ub = r->ubatch;
    if (!ub) {
        ub = (n + 4 * r->k - 1) / (4 * r->k);
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
    const int32_t pos = s->n_past;
    int32_t n_piece = 0;
    for (int32_t done = 0; done < n;) {
        const int32_t c = n - done < s->n_ubatch ? n - done : s->n_ubatch;
        for (int32_t o = 0; o < c;) {
            int32_t len = c - o <= ub || c - o - ub < SPLIT_UB_MIN ? c - o : ub;
            if (ring_room(r, (size_t)n_piece + 1, (size_t)n_piece + 1) < 0) return TUTTI_ERR;
            r->seg[n_piece] = (tutti_fwd_seg){.s = s, .ids = ids + done + o, .n = len};
            r->pos0[n_piece] = pos + done + o;
            r->pseg[n_piece] = n_piece;
            n_piece++;
            o += len;
        }
        done += c;
    }
    r->pseg[n_piece] = n_piece;
    if (ring_pass(r, s, n_piece, logits, NULL) < 0) {
        s->n_past = pos;
        return TUTTI_ERR;
    }
    s->n_past = pos + n;
    s->has_logits = true;
    return TUTTI_OK;
}

/* A batch of tutti_session_eval_multi: one piece, every segment of it. */
static int pipe_segments(tutti_pipe *pp, tutti_session *s, const tutti_fwd_seg *seg, int32_t n_seg, float *rows) {
    tutti_mpi_ring *r = ((split_pipe *)pp)->ring;
    if (r->dead || r->broken) return tutti_set_error("--split-layers: the pipeline is broken by an earlier error");
    if (n_seg < 1) return tutti_set_error("--split-layers: empty batch");
    if (ring_room(r, (size_t)n_seg, 1) < 0) return TUTTI_ERR;
    for (int32_t j = 0; j < n_seg; j++) {
        const tutti_pipe *q = seg[j].s->pipe;
        if (!q || q->eval != pipe_eval || ((const split_pipe *)q)->ring != r)
            return tutti_set_error("--split-layers: a batch mixes sessions of different split models");
        r->seg[j] = seg[j];
        r->pos0[j] = seg[j].s->n_past;
    }
    r->pseg[0] = 0, r->pseg[1] = n_seg;
    return ring_pass(r, s, 1, NULL, n_seg > 1 ? rows : NULL);
}

static void pipe_free(tutti_pipe *pp) {
    split_pipe *p = (split_pipe *)pp;
    if (p->owns_ring) tutti_mpi_ring_free(p->ring);
    free(p);
}

int tutti_mpi_ring_attach(tutti_mpi_ring *r, tutti_session *s, int32_t slot, int32_t n_threads) {
    if (!r || !s) return tutti_set_error("--split-layers: no ring or session");
    if (r->k == 1) return TUTTI_OK; /* one rank: the whole model here, nothing to pass on */
    if (r->dead || r->broken) return tutti_set_error("--split-layers: the pipeline is broken by an earlier error");
    if (slot < 0 || slot >= SPLIT_MAX_SLOTS)
        return tutti_set_error("--split-layers: session %d of a split model (at most %d)", slot, SPLIT_MAX_SLOTS);
    if (s->pipe) return tutti_set_error("--split-layers: the session already has a pipeline");
    if (r->started && s->n_ctx != r->n_ctx)
        return tutti_set_error("--split-layers: the sessions of a split model share one context size (%d, not %d)",
                               r->n_ctx, s->n_ctx);
    split_pipe *p = calloc(1, sizeof *p);
    if (!p) return tutti_set_error("--split-layers: out of memory");
    p->base.eval = pipe_eval;
    p->base.eval_segments = pipe_segments;
    p->base.free = pipe_free;
    p->ring = r;
    p->sid = slot;
    s->pipe = &p->base; /* from here on the session's free releases the pipeline */
    if (r->started) return TUTTI_OK;
    r->started = true;
    r->n_ctx = s->n_ctx;
    return start_parts(r, n_threads);
}

int tutti_mpi_ring_copy(tutti_mpi_ring *r, int32_t dst, int32_t src, int32_t k) {
    if (!r || r->k == 1) return TUTTI_OK;
    if (dst < 0 || src < 0 || dst >= SPLIT_MAX_SLOTS || src >= SPLIT_MAX_SLOTS || dst == src || k < 0 || k > r->n_ctx)
        return tutti_set_error("--split-layers: bad cache copy %d <- %d (%d positions)", dst, src, k);
    if (r->n_copy == SPLIT_MAX_COPY)
        return tutti_set_error("--split-layers: more than %d cache copies between two passes", SPLIT_MAX_COPY);
    if (r->n_copy == r->cap_copy) {
        int32_t nc = r->cap_copy ? r->cap_copy * 2 : 16;
        tmpi_copy *c = realloc(r->copy, sizeof *c * (size_t)nc);
        if (!c) return tutti_set_error("--split-layers: out of memory");
        r->copy = c, r->cap_copy = nc;
    }
    r->copy[r->n_copy++] = (tmpi_copy){dst, src, k};
    return TUTTI_OK;
}

/* ---- tutti generate / logits: one session ---- */

static tutti_mpi_ring *g_gen; /* planned by tutti_mpi_split_load, until attached */

tutti_model *tutti_mpi_split_load(const char *path, const tutti_model_params *params, const char *counts) {
    tutti_model *part = NULL;
    tutti_mpi_ring *r = tutti_mpi_ring_open(path, NULL, params, counts, 0, &part);
    if (!r) return NULL;
    tutti_mpi_ring_free(g_gen);
    g_gen = r;
    return part;
}

int tutti_mpi_split_attach(tutti_session *s, int32_t n_threads, int32_t ubatch) {
    tutti_mpi_ring *r = g_gen;
    if (!r) return tutti_set_error("--split-layers: no split planned");
    g_gen = NULL;
    r->ubatch = ubatch;
    int rc = tutti_mpi_ring_attach(r, s, 0, n_threads);
    if (s && s->pipe && s->pipe->free == pipe_free)
        ((split_pipe *)s->pipe)->owns_ring = true; /* freed with the session */
    else tutti_mpi_ring_free(r);
    return rc;
}

/* ---- member ranks: the part servers ---- */

typedef struct split_srv {
    tutti_model *m;
    tutti_session **ss; /* [cap_ss] by slot, made on first use */
    int32_t cap_ss;
    tutti_session_params sp;
    int32_t il0, il1, tag;
    pthread_t th;
} split_srv;

/* the server threads of this rank's split parts and expert splits, with
 * their objects (freed after the join) */
static struct {
    pthread_t th;
    void *obj;
} * g_srv;
static int g_n_srv, g_cap_srv;

bool tmpi_serving_room(void) {
    if (g_n_srv < g_cap_srv) return true;
    const int nc = g_cap_srv ? g_cap_srv * 2 : 8;
    void *n = realloc(g_srv, sizeof *g_srv * (size_t)nc);
    if (!n) return false;
    g_srv = n, g_cap_srv = nc;
    return true;
}

void tmpi_serving_add(pthread_t th, void *obj) {
    g_srv[g_n_srv].th = th;
    g_srv[g_n_srv++].obj = obj;
}

void *tmpi_serving_new(const char *buf, size_t hdr, int32_t path_len, size_t obj, char **path, char *ebuf, size_t cap) {
    void *q = tmpi_serving_room() ? calloc(1, obj) : NULL;
    *path = q ? malloc((size_t)path_len + 1) : NULL;
    if (!*path) {
        free(q);
        snprintf(ebuf, cap, "mpi: out of memory");
        return NULL;
    }
    memcpy(*path, buf + hdr, (size_t)path_len);
    (*path)[path_len] = 0;
    return q;
}

void tmpi_serving_join(void) {
    for (int i = 0; i < g_n_srv; i++) {
        pthread_join(g_srv[i].th, NULL);
        free(g_srv[i].obj);
    }
    free(g_srv);
    g_srv = NULL;
    g_n_srv = g_cap_srv = 0;
}

static tutti_session *srv_session(split_srv *q, int32_t sid) {
    if (sid >= q->cap_ss) {
        int32_t nc = sid * 2 + 8 < SPLIT_MAX_SLOTS ? sid * 2 + 8 : SPLIT_MAX_SLOTS;
        tutti_session **n = realloc(q->ss, sizeof *n * (size_t)nc);
        if (!n) return tutti_set_error("out of memory"), NULL;
        memset(n + q->cap_ss, 0, sizeof *n * (size_t)(nc - q->cap_ss));
        q->ss = n, q->cap_ss = nc;
    }
    if (!q->ss[sid]) q->ss[sid] = tutti_session_new(q->m, &q->sp);
    return q->ss[sid];
}

/* The first k cache positions of session src to session dst, for this
 * rank's layers (as member/local.c's copy_prefix does for all of them). */
static const char *srv_copy(split_srv *q, const tmpi_copy *c) {
    tutti_session *d = srv_session(q, c->dst), *s = d ? srv_session(q, c->src) : NULL;
    if (!s) return tutti_last_error();
    tutti_cache_copy_rows(d, s, q->il0, q->il1, c->k);
    return NULL;
}

/* Checks an ACT of cnt bytes: NULL, or what is wrong. */
static const char *srv_check(const split_srv *q, const char *buf, int cnt, int32_t ub, const tmpi_act *h,
                             uint8_t *seen) {
    const int64_t n_embd = q->m->hp.n_embd;
    if (h->op != TMPI_ACT || h->n < 1 || h->n > ub || h->n_seg < 1 || h->n_seg > h->n || h->n_copy < 0 ||
        h->n_copy > SPLIT_MAX_COPY ||
        (size_t)cnt != sizeof *h + sizeof(tmpi_copy) * (size_t)h->n_copy + sizeof(tmpi_seg) * (size_t)h->n_seg +
                           sizeof(float) * (size_t)h->n * (size_t)n_embd)
        return "malformed activations";
    const char *p = buf + sizeof *h;
    for (int32_t i = 0; i < h->n_copy; i++, p += sizeof(tmpi_copy)) {
        tmpi_copy c;
        memcpy(&c, p, sizeof c);
        if (c.dst < 0 || c.src < 0 || c.dst >= SPLIT_MAX_SLOTS || c.src >= SPLIT_MAX_SLOTS || c.dst == c.src ||
            c.k < 0 || c.k > q->sp.n_ctx)
            return "malformed cache copy";
    }
    int64_t sum = 0;
    memset(seen, 0, SPLIT_MAX_SLOTS);
    for (int32_t j = 0; j < h->n_seg; j++, p += sizeof(tmpi_seg)) {
        tmpi_seg sg;
        memcpy(&sg, p, sizeof sg);
        if (sg.sid < 0 || sg.sid >= SPLIT_MAX_SLOTS || seen[sg.sid] || sg.n < 1 || sg.pos0 < 0 ||
            sg.pos0 > q->sp.n_ctx - sg.n)
            return "malformed segment";
        seen[sg.sid] = 1;
        sum += sg.n;
    }
    return sum == h->n ? NULL : "malformed segments";
}

static void *srv_main(void *arg) {
    split_srv *q = arg;
    const int rank = tmpi_rank(), k = tutti_mpi_size(), next = (rank + 1) % k;
    const int64_t n_embd = q->m->hp.n_embd;
    const int32_t ub = q->ss[0]->n_ubatch; /* every session's (one n_ctx) */
    const size_t cap = sizeof(tmpi_act) + sizeof(tmpi_copy) * SPLIT_MAX_COPY + sizeof(tmpi_seg) * (size_t)ub +
                       sizeof(float) * (size_t)ub * (size_t)n_embd;
    char *buf = malloc(cap);
    tutti_fwd_seg *fseg = malloc(sizeof *fseg * (size_t)ub);
    uint8_t *seen = malloc(SPLIT_MAX_SLOTS);
    int64_t n_tok = 0;
    long n_act = 0;
    for (;;) {
        MPI_Message msg;
        MPI_Status st;
        int cnt = 0;
        /* activations from the previous rank, FREE from rank 0 */
        if (tmpi_probe_idle(MPI_ANY_SOURCE, q->tag, &msg, &st) != MPI_SUCCESS) break;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        if (!buf || !fseg || !seen || cnt < 0 || (size_t)cnt > cap) { /* cannot hold it: drop it, answer an error */
            char *tmp = malloc(cnt > 0 ? (size_t)cnt : 1);
            MPI_Mrecv(tmp, cnt, MPI_BYTE, &msg, &st);
            free(tmp);
            if (!buf || !fseg || !seen) break;
            cnt = 0;
        } else if (MPI_Mrecv(buf, cnt, MPI_BYTE, &msg, &st) != MPI_SUCCESS) break;
        tmpi_act h = {-1, 0, 0, 0, 0}; /* dropped or short: malformed */
        if (cnt >= (int)sizeof h) memcpy(&h, buf, sizeof h);
        if (h.op == TMPI_ACT_FREE) break;
        if (h.op == TMPI_ACT_ERR) { /* someone before us failed: pass it on */
            MPI_Send(buf, cnt, MPI_BYTE, next, q->tag, tmpi_comm);
            continue;
        }
        const char *err = srv_check(q, buf, cnt, ub, &h, seen);
        const char *p = buf + sizeof h;
        for (int32_t i = 0; i < h.n_copy && !err; i++, p += sizeof(tmpi_copy)) {
            tmpi_copy c;
            memcpy(&c, p, sizeof c);
            err = srv_copy(q, &c);
        }
        tutti_session *s0 = NULL;
        for (int32_t j = 0; j < h.n_seg && !err; j++, p += sizeof(tmpi_seg)) {
            tmpi_seg sg;
            memcpy(&sg, p, sizeof sg);
            tutti_session *s = srv_session(q, sg.sid);
            if (!s) {
                err = tutti_last_error();
                break;
            }
            s->n_past = sg.pos0;
            fseg[j] = (tutti_fwd_seg){.s = s, .n = sg.n};
            if (!s0) s0 = s;
        }
        /* fault injection for tests/test_mpi.sh: TUTTI_MPI_TEST_FAULT=spliterr:N@R
         * makes rank R answer its N-th activations with an error */
        const char *f = getenv("TUTTI_MPI_TEST_FAULT");
        n_act++;
        if (!err && f && !strncmp(f, "spliterr:", 9) && strchr(f, '@') && atol(f + 9) == n_act &&
            atoi(strchr(f, '@') + 1) == rank)
            err = "injected error (TUTTI_MPI_TEST_FAULT)";
        if (!err) {
            tmpi_test_fault();
            char *x = buf + (p - buf);
            memcpy(s0->x, x, sizeof(float) * (size_t)h.n * (size_t)n_embd);
            tutti_forward_range(s0, fseg, h.n_seg, q->il0, q->il1, 0, NULL, NULL);
            memcpy(x, s0->x, sizeof(float) * (size_t)h.n * (size_t)n_embd);
            n_tok += h.n;
            MPI_Send(buf, cnt, MPI_BYTE, next, q->tag, tmpi_comm);
        } else {
            char text[600];
            snprintf(text, sizeof text, "%s", err);
            const tmpi_act e = {TMPI_ACT_ERR, (int32_t)strlen(text) + 1, rank, 0, 0};
            char out[sizeof e + sizeof text];
            memcpy(out, &e, sizeof e);
            memcpy(out + sizeof e, text, (size_t)e.n);
            MPI_Send(out, (int)(sizeof e + (size_t)e.n), MPI_BYTE, next, q->tag, tmpi_comm);
        }
    }
    free(buf);
    free(fseg);
    free(seen);
    double rss, peak;
    tmpi_rss_mib(&rss, &peak);
    int32_t n_ss = 0;
    for (int32_t i = 0; i < q->cap_ss; i++) n_ss += q->ss[i] != NULL;
    fprintf(stderr,
            "tutti: mpi: split: rank %d computed layers %d-%d of %s for %lld tokens (%d sessions); RSS %.1f MiB "
            "(peak %.1f MiB)\n",
            rank, q->il0, q->il1 - 1, tutti_base_name(q->m->path), (long long)n_tok, n_ss, rss, peak);
    /* the part's memory goes now (a server frees split members it evicts) */
    for (int32_t i = 0; i < q->cap_ss; i++) tutti_session_free(q->ss[i]);
    free(q->ss);
    q->ss = NULL;
    tutti_model_free(q->m);
    q->m = NULL;
    return NULL;
}

int tmpi_split_serve(const char *buf, int cnt, char *ebuf, size_t cap) {
    tmpi_split h;
    if (cnt < (int)sizeof h) return snprintf(ebuf, cap, "mpi: malformed split request"), -1;
    memcpy(&h, buf, sizeof h);
    if (h.path_len < 1 || (int)sizeof h + h.path_len != cnt || h.tag < TMPI_TAG_SPLIT0 ||
        h.tag >= TMPI_TAG_SPLIT0 + TMPI_MAX_RINGS || h.il0 < 0 || h.il1 < h.il0)
        return snprintf(ebuf, cap, "mpi: malformed split request"), -1;
    char *path;
    split_srv *q = tmpi_serving_new(buf, sizeof h, h.path_len, sizeof *q, &path, ebuf, cap);
    if (!q) return -1;
    q->il0 = h.il0, q->il1 = h.il1, q->tag = h.tag;
    /* fault injection for tests/test_mpi.sh: TUTTI_MPI_TEST_FAULT=splitload@R
     * makes rank R fail to load its part (as a file it cannot read would) */
    const char *f = getenv("TUTTI_MPI_TEST_FAULT");
    if (f && !strncmp(f, "splitload@", 10) && atoi(f + 10) == tmpi_rank()) {
        snprintf(ebuf, cap, "%s: injected load failure (TUTTI_MPI_TEST_FAULT)", path);
        free(q);
        free(path);
        return -1;
    }
    q->sp = tutti_session_default_params();
    q->sp.n_ctx = h.n_ctx;
    q->sp.n_threads = h.n_threads;
    /* slot 0 at once: a context too large for this rank's memory is a load error */
    if (!(q->m = tutti_model_load_part(path, NULL, h.il0, h.il1, false)) || !srv_session(q, 0) ||
        pthread_create(&q->th, NULL, srv_main, q) != 0) {
        snprintf(ebuf, cap, "%s", q->m && q->ss && q->ss[0] ? "cannot start a thread" : tutti_last_error());
        if (q->ss) tutti_session_free(q->ss[0]);
        free(q->ss);
        tutti_model_free(q->m);
        free(q);
        free(path);
        return -1;
    }
    free(path);
    tmpi_serving_add(q->th, q);
    return 0;
}
