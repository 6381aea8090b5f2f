/* A member on another MPI rank: a fusion_member whose model lives there
 * (src/mpi/tutti_mpi.h).  Rank 0 keeps the member's vocabulary (loaded from
 * the same file: tokenizing prompts, byte tries, end-of-generation ids) and
 * sends each request as the new suffix relative to the previous one; the
 * member rank runs it on an ordinary local member, whose session pool
 * reuses the longest common prefix exactly as in one process, so the
 * logits are the same bits.
 *
 * Concurrency: each remote member has its own tag and its own server thread
 * on its rank, and a request blocks only the calling thread of rank 0 (MPI
 * runs with MPI_THREAD_MULTIPLE), so members on different ranks compute at
 * the same time when the ensemble runs its members in parallel. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "member/member.h"
#include "mpi/member_kinds.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"
#include "util/path.h"

#include <pthread.h>

#include "mpi/proto.h"

typedef struct mpi_member {
    fusion_member base;
    tutti_vocab *own_vocab;
    int rank, tag;
    int32_t index;
    int32_t *sent; /* the sequence the member rank holds (its mirror) */
    int32_t n_sent, cap_sent;
    int32_t *req;
    int32_t cap_req;
    float *row;       /* [n_vocab] for logits_view */
    int32_t next_sid; /* byte states: the next id on the member rank */
} mpi_member;

/* One request: op over ids[0..n), answer into out[count]. */
static int remote_call(mpi_member *mm, int32_t op, const int32_t *ids, int32_t n, float *out, size_t count) {
    if (n < 1)
        return tutti_set_error("member %s: no token to condition on (the model has no BOS; give a prompt)",
                               mm->base.name);
    if (count > (size_t)INT32_MAX)
        return tutti_set_error("member %s: %d positions of %d logits are too many for one MPI message; evaluate "
                               "shorter chunks",
                               mm->base.name, n, mm->base.n_vocab);
    int32_t k = 0, lim = mm->n_sent < n ? mm->n_sent : n;
    while (k < lim && mm->sent[k] == ids[k]) k++;
    int32_t len = 3 + n - k;
    if (len > mm->cap_req || n > mm->cap_sent) {
        int32_t nc = (n + 3) * 2;
        int32_t *nr = realloc(mm->req, sizeof(int32_t) * (size_t)nc);
        if (nr) mm->req = nr;
        int32_t *ns = nr ? realloc(mm->sent, sizeof(int32_t) * (size_t)nc) : NULL;
        if (ns) mm->sent = ns;
        if (!nr || !ns) return tutti_set_error("member %s: out of memory", mm->base.name);
        mm->cap_req = mm->cap_sent = nc;
    }
    mm->req[0] = op, mm->req[1] = n, mm->req[2] = k;
    memcpy(mm->req + 3, ids + k, sizeof(int32_t) * (size_t)(n - k));
    double t0 = MPI_Wtime(), deadline = t0 + tmpi_timeout_s();
    MPI_Request rq[2];
    tmpi_reply r;
    /* post the answer's header before sending, so it can land at once */
    if (MPI_Irecv(&r, sizeof r, MPI_BYTE, mm->rank, mm->tag, tmpi_comm, &rq[1]) != MPI_SUCCESS ||
        MPI_Isend(mm->req, len, MPI_INT32_T, mm->rank, mm->tag, tmpi_comm, &rq[0]) != MPI_SUCCESS)
        return tmpi_fail(mm->rank, "posting a request");
    tmpi_inflight(mm->rank, 1);
    int wrc = tmpi_wait(&rq[0], deadline, mm->rank, "sending a request") < 0 ||
              tmpi_wait(&rq[1], deadline, mm->rank, "waiting for logits") < 0;
    tmpi_inflight(mm->rank, -1);
    if (wrc) return TUTTI_ERR;
    /* the member rank now holds ids[0..n) (or nothing after an error) */
    memcpy(mm->sent + k, ids + k, sizeof(int32_t) * (size_t)(n - k));
    mm->n_sent = n;
    int64_t got = (int64_t)sizeof r;
    if (r.status < 0) {
        /* the error text (the member rank's tutti_last_error) */
        mm->n_sent = 0;
        if (r.count < 1 || r.count > (1 << 20)) return tmpi_fail(mm->rank, "a malformed error answer");
        char *msg = malloc((size_t)r.count + 1);
        MPI_Request q;
        if (!msg) return tutti_set_error("member %s: out of memory", mm->base.name);
        if (MPI_Irecv(msg, r.count, MPI_CHAR, mm->rank, mm->tag, tmpi_comm, &q) != MPI_SUCCESS) {
            free(msg);
            return tmpi_fail(mm->rank, "receiving an error message");
        }
        if (tmpi_wait(&q, deadline, mm->rank, "waiting for an error message") < 0) {
            free(msg); /* (a pending receive into it would be a fault anyway: the run ends) */
            return TUTTI_ERR;
        }
        msg[r.count] = 0;
        tutti_set_error("rank %d: %s", mm->rank, msg);
        free(msg);
        return TUTTI_ERR;
    }
    if ((size_t)r.count != count) {
        /* the logits message that follows would be taken for the next
         * answer: the conversation with this rank cannot go on */
        mm->n_sent = 0;
        return tmpi_fail(mm->rank, "an answer of the wrong size");
    }
    MPI_Request q;
    if (MPI_Irecv(out, (int)count, MPI_FLOAT, mm->rank, mm->tag, tmpi_comm, &q) != MPI_SUCCESS ||
        tmpi_wait(&q, deadline, mm->rank, "receiving logits") < 0)
        return TUTTI_ERR;
    got += (int64_t)(sizeof(float) * count);
    mm->base.t_forward_s = r.t_forward_s;
    mm->base.n_forward_tokens = r.n_forward_tokens;
    mm->base.n_forward_calls = r.n_forward_calls;
    tmpi_count((int64_t)sizeof(int32_t) * len, got, MPI_Wtime() - t0);
    return 0;
}

static const float *mpi_logits_view(fusion_member *m, const int32_t *ids, int32_t n) {
    mpi_member *mm = (mpi_member *)m;
    return remote_call(mm, TMPI_OP_LOGITS, ids, n, mm->row, (size_t)m->n_vocab) < 0 ? NULL : mm->row;
}

static int mpi_logits(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    return remote_call((mpi_member *)m, TMPI_OP_LOGITS, ids, n, out, (size_t)m->n_vocab);
}

static int mpi_logits_all(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    return remote_call((mpi_member *)m, TMPI_OP_ALL, ids, n, out, (size_t)n * (size_t)m->n_vocab);
}

static void mpi_free(fusion_member *m) {
    mpi_member *mm = (mpi_member *)m;
    if (!mm) return;
    if (mm->tag >= TMPI_TAG_MEMBER) {
        int32_t req[3] = {TMPI_OP_FREE, 0, 0};
        MPI_Request q;
        if (MPI_Isend(req, 3, MPI_INT32_T, mm->rank, mm->tag, tmpi_comm, &q) == MPI_SUCCESS &&
            tmpi_wait(&q, MPI_Wtime() + tmpi_timeout_s(), mm->rank, "releasing a member") == 0)
            tmpi_unregister(mm->rank, mm->tag);
    }
    tutti_vocab_free(mm->own_vocab);
    free(mm->sent), free(mm->req), free(mm->row);
    free(mm);
}

static const fusion_member_vt mpi_vt = {mpi_logits, mpi_logits_all, mpi_free, mpi_logits_view, NULL, NULL};

/* ---- byte states on the member's rank (BYTE alignment) ----
 *
 * The member rank runs the byte state (bytestate.c, on its local member:
 * the same code on the same logits, so the same doubles) and answers each
 * op with the state's 257 outcomes computed at once (proto.h), instead of
 * sending rank 0 the logits rows of every new hypothesis (3.2 rows of
 * n_vocab floats per byte for the story models).  A commit is sent without
 * waiting: its answer is taken by the next call on the state, so the
 * members' ranks work at the same time while rank 0 commits the byte to
 * each in turn. */

typedef struct mpi_bytes {
    mpi_member *mm;
    int32_t sid;
    bool pending;  /* an answer is on its way (rq, req) */
    bool prepared; /* prepare or next was called since the answer */
    MPI_Request rq[2];
    int32_t req[7];
    int32_t req_len;
    double t_sent;
    int64_t sent;  /* request bytes not yet counted */
    tmpi_breply r; /* the last answer */
    int32_t *path;
    int32_t cap_path;
    bool broken; /* a fault (the rank died or timed out): every later call fails with its message */
    char why[512];
} mpi_bytes;

static int bytes_broken(mpi_bytes *b) { return tutti_set_error("%s", b->why); }
static void bytes_break(mpi_bytes *b) {
    b->broken = true;
    snprintf(b->why, sizeof b->why, "%s", tutti_last_error());
}

static int bytes_fail_answer(mpi_bytes *b, int status) {
    b->mm->base.err_kind = status;
    return tutti_set_error("rank %d: %s", b->mm->rank, b->r.err[0] ? b->r.err : "byte state failed"), status;
}

/* Sends req[0..len) (and extra[0..n_extra)), with the answer's receive
 * posted first (answer) or none. */
static int bytes_send(mpi_bytes *b, const int32_t *extra, int32_t n_extra, bool answer) {
    mpi_member *mm = b->mm;
    if (b->broken) return bytes_broken(b);
    int32_t *msg = b->req, len = b->req_len, *owned = NULL;
    if (n_extra > 0) {
        if (!(owned = malloc(sizeof(int32_t) * (size_t)(len + n_extra))))
            return tutti_set_error("member %s: out of memory", mm->base.name);
        memcpy(owned, b->req, sizeof(int32_t) * (size_t)len);
        memcpy(owned + len, extra, sizeof(int32_t) * (size_t)n_extra);
        msg = owned, len += n_extra;
    }
    b->t_sent = MPI_Wtime();
    int rc = 0;
    if (answer && MPI_Irecv(&b->r, sizeof b->r, MPI_BYTE, mm->rank, mm->tag, tmpi_comm, &b->rq[1]) != MPI_SUCCESS)
        rc = tmpi_fail(mm->rank, "posting a receive");
    if (rc == 0 && MPI_Isend(msg, len, MPI_INT32_T, mm->rank, mm->tag, tmpi_comm, &b->rq[0]) != MPI_SUCCESS)
        rc = tmpi_fail(mm->rank, "posting a request");
    /* the request is small (sent eagerly): wait for it here, so `owned` can go */
    if (rc == 0) rc = tmpi_wait(&b->rq[0], b->t_sent + tmpi_timeout_s(), mm->rank, "sending a byte request");
    free(owned);
    if (rc < 0) {
        bytes_break(b);
        return TUTTI_ERR;
    }
    b->sent += (int64_t)sizeof(int32_t) * len; /* counted with the answer */
    if (!answer) return 0;
    b->pending = true;
    b->prepared = false;
    return 0;
}

/* Takes the answer on its way, if any. */
static int bytes_collect(mpi_bytes *b) {
    if (b->broken) return bytes_broken(b);
    if (!b->pending) return 0;
    mpi_member *mm = b->mm;
    b->pending = false;
    tmpi_inflight(mm->rank, 1);
    int rc = tmpi_wait(&b->rq[1], b->t_sent + tmpi_timeout_s(), mm->rank, "waiting for next-byte outcomes");
    tmpi_inflight(mm->rank, -1);
    if (rc < 0) {
        bytes_break(b);
        return TUTTI_ERR;
    }
    b->r.err[sizeof b->r.err - 1] = 0;
    mm->base.t_forward_s = b->r.t_forward_s;
    mm->base.n_forward_tokens = b->r.n_forward_tokens;
    mm->base.n_forward_calls = b->r.n_forward_calls;
    tmpi_count(b->sent, (int64_t)offsetof(tmpi_breply, err), MPI_Wtime() - b->t_sent);
    b->sent = 0;
    return 0;
}

static int bytes_op(mpi_bytes *b, int32_t op, int32_t a, const int32_t *extra, int32_t n_extra, bool wait) {
    if (bytes_collect(b) < 0) return TUTTI_ERR;
    b->req[0] = op, b->req[1] = b->sid, b->req[2] = a, b->req_len = 3;
    if (bytes_send(b, extra, n_extra, true) < 0) return TUTTI_ERR;
    return wait ? bytes_collect(b) : 0;
}

static void *mb_open(fusion_member *m, const fusion_bytes_params *p) {
    mpi_member *mm = (mpi_member *)m;
    mpi_bytes *b = calloc(1, sizeof *b);
    if (!b) return tutti_set_error("member %s: out of memory", m->name), NULL;
    b->mm = mm;
    b->sid = mm->next_sid++;
    b->req[0] = TMPI_OP_BNEW, b->req[1] = b->sid, b->req[2] = p->max_hyps;
    memcpy(&b->req[3], &p->temp, sizeof p->temp);
    memcpy(&b->req[4], &p->prune, sizeof p->prune);
    b->req[6] = p->lazy; /* the same evaluation as a state here, so the same bits */
    b->req_len = 7;
    if (bytes_send(b, NULL, 0, false) < 0) {
        free(b);
        return NULL;
    }
    return b;
}

static int mb_status(mpi_bytes *b) { return b->r.status < 0 ? bytes_fail_answer(b, b->r.status) : 0; }

static int mb_start(void *c, const char *text, size_t n) {
    mpi_bytes *b = c;
    if (n > (size_t)INT32_MAX - 8) return tutti_set_error("member %s: prompt too long", b->mm->base.name);
    int32_t *t = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!t) return tutti_set_error("member %s: out of memory", b->mm->base.name);
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)text[i];
    int rc = bytes_op(b, TMPI_OP_BSTART, 0, t, (int32_t)n, true);
    free(t);
    return rc < 0 ? rc : mb_status(b);
}

static int mb_start_ids(void *c, const int32_t *ids, int32_t n) {
    mpi_bytes *b = c;
    int rc = bytes_op(b, TMPI_OP_BSTART, 1, ids, n, true);
    return rc < 0 ? rc : mb_status(b);
}

static int32_t mb_need_tokens(void *c) {
    mpi_bytes *b = c;
    if (bytes_collect(b) < 0 || b->r.status < 0) return 0; /* the error shows at prepare (a fault sticks) */
    return b->prepared ? 0 : b->r.need_tokens;
}

static int mb_prepare(void *c) {
    mpi_bytes *b = c;
    if (bytes_collect(b) < 0) return TUTTI_ERR;
    if (b->r.status < 0) return bytes_fail_answer(b, b->r.status);
    if (b->r.status_prep == 1) {
        /* not run there (the context was full): run it for its own error */
        if (bytes_op(b, TMPI_OP_BPREP, 0, NULL, 0, true) < 0) return TUTTI_ERR;
        if (b->r.status < 0) return bytes_fail_answer(b, b->r.status);
    }
    b->prepared = true;
    return b->r.status_prep < 0 ? bytes_fail_answer(b, b->r.status_prep) : 0;
}

/* Deferred (lazy) hypotheses of the state there, after its last answer. */
static int32_t mb_n_deferred(void *c) {
    mpi_bytes *b = c;
    return bytes_collect(b) < 0 ? 0 : b->r.n_deferred;
}

/* fusion_bytes_resolve there; its answer carries the next distribution
 * with the deferred hypotheses' mass. */
static int mb_resolve(void *c) {
    mpi_bytes *b = c;
    if (bytes_collect(b) < 0) return TUTTI_ERR;
    if (bytes_op(b, TMPI_OP_BRESOLVE, 0, NULL, 0, true) < 0) return TUTTI_ERR;
    if (b->r.status < 0) return bytes_fail_answer(b, b->r.status);
    b->prepared = false;
    return 0;
}

static int mb_next(void *c, double *out) {
    mpi_bytes *b = c;
    int rc = mb_prepare(b);
    if (rc < 0) return rc;
    memcpy(out, b->r.dist, sizeof b->r.dist);
    return 0;
}

static int mb_commit(void *c, uint8_t byte) {
    mpi_bytes *b = c;
    if (bytes_collect(b) < 0) return TUTTI_ERR;
    if (b->r.status < 0) return bytes_fail_answer(b, b->r.status);
    return bytes_op(b, TMPI_OP_BCOMMIT, byte, NULL, 0, false);
}

static const int32_t *mb_best_path(void *c, int32_t *n) {
    mpi_bytes *b = c;
    mpi_member *mm = b->mm;
    *n = 0;
    if (bytes_op(b, TMPI_OP_BPATH, 0, NULL, 0, true) < 0 || b->r.count <= 0) return NULL;
    if (b->r.count > b->cap_path) {
        int32_t *np = realloc(b->path, sizeof(int32_t) * (size_t)b->r.count);
        if (!np) return NULL; /* (the ids that follow would be taken for the next answer: a fault) */
        b->path = np, b->cap_path = b->r.count;
    }
    MPI_Request q;
    if (MPI_Irecv(b->path, b->r.count, MPI_INT32_T, mm->rank, mm->tag, tmpi_comm, &q) != MPI_SUCCESS ||
        tmpi_wait(&q, MPI_Wtime() + tmpi_timeout_s(), mm->rank, "receiving a token path") < 0)
        return NULL;
    *n = b->r.count;
    return b->path;
}

static void *mb_clone(void *c) {
    mpi_bytes *b = c;
    mpi_member *mm = b->mm;
    if (bytes_collect(b) < 0) return NULL;
    mpi_bytes *k = calloc(1, sizeof *k);
    if (!k) return tutti_set_error("member %s: out of memory", mm->base.name), NULL;
    k->mm = mm;
    k->sid = mm->next_sid++;
    /* the clone's first answer is the one to BCLONE on the original's sid */
    k->req[0] = TMPI_OP_BCLONE, k->req[1] = b->sid, k->req[2] = k->sid, k->req_len = 3;
    if (bytes_send(k, NULL, 0, true) < 0 || bytes_collect(k) < 0) {
        free(k);
        return NULL;
    }
    if (k->r.status < 0) {
        bytes_fail_answer(k, k->r.status);
        free(k);
        return NULL;
    }
    return k;
}

static int32_t mb_n_hyps(void *c) {
    mpi_bytes *b = c;
    return bytes_collect(b) < 0 ? 0 : b->r.n_hyps;
}

static double mb_pruned(void *c) {
    mpi_bytes *b = c;
    return bytes_collect(b) < 0 ? 0 : b->r.pruned;
}

static void mb_free(void *c) {
    mpi_bytes *b = c;
    if (!b) return;
    if (bytes_collect(b) == 0) {
        b->req[0] = TMPI_OP_BFREE, b->req[1] = b->sid, b->req[2] = 0, b->req_len = 3;
        bytes_send(b, NULL, 0, false);
    }
    free(b->path);
    free(b);
}

static const fusion_bytes_ops mpi_bytes_ops = {.open = mb_open,
                                               .start = mb_start,
                                               .start_ids = mb_start_ids,
                                               .need_tokens = mb_need_tokens,
                                               .best_path = mb_best_path,
                                               .prepare = mb_prepare,
                                               .next = mb_next,
                                               .commit = mb_commit,
                                               .clone = mb_clone,
                                               .n_hyps = mb_n_hyps,
                                               .pruned = mb_pruned,
                                               .free = mb_free,
                                               .n_deferred = mb_n_deferred,
                                               .resolve = mb_resolve};

/* Asks rank to load path; fills mm's shape.  Errors name the rank. */
static int remote_load(mpi_member *mm, const char *path, int32_t n_sessions, int32_t n_ctx, int32_t n_threads) {
    tmpi_load ld = {TMPI_LOAD, n_sessions, n_ctx, n_threads, (int32_t)strlen(path)};
    size_t len = sizeof ld + (size_t)ld.path_len;
    char *buf = malloc(len);
    if (!buf) return tutti_set_error("mpi: out of memory");
    memcpy(buf, &ld, sizeof ld);
    memcpy(buf + sizeof ld, path, (size_t)ld.path_len);
    tmpi_loaded out;
    char msg[1024] = "";
    double deadline = MPI_Wtime() + tmpi_timeout_s();
    MPI_Request q;
    int rc = TUTTI_ERR;
    pthread_mutex_lock(&tmpi_ctrl_mu); /* one control exchange at a time (proto.h) */
    if (MPI_Isend(buf, (int)len, MPI_BYTE, mm->rank, TMPI_TAG_CTRL, tmpi_comm, &q) != MPI_SUCCESS ||
        tmpi_wait(&q, deadline, mm->rank, "sending a load request") < 0)
        goto done;
    if (MPI_Irecv(&out, sizeof out, MPI_BYTE, mm->rank, TMPI_TAG_CTRL_REPLY, tmpi_comm, &q) != MPI_SUCCESS) {
        tmpi_fail(mm->rank, "posting a receive");
        goto done;
    }
    tmpi_inflight(mm->rank, 1);
    int wrc = tmpi_wait(&q, deadline, mm->rank, "loading the model");
    tmpi_inflight(mm->rank, -1);
    if (wrc < 0) goto done;
    if (out.status < 0) {
        if (MPI_Irecv(msg, (int)sizeof msg - 1, MPI_CHAR, mm->rank, TMPI_TAG_CTRL_REPLY, tmpi_comm, &q) ==
                MPI_SUCCESS &&
            tmpi_wait(&q, deadline, mm->rank, "receiving a load error") == 0)
            tutti_set_error("rank %d cannot load %s: %s", mm->rank, path, msg);
        goto done;
    }
    mm->tag = TMPI_TAG_MEMBER + out.handle;
    out.host[sizeof out.host - 1] = 0;
    tmpi_set_pid(mm->rank, out.pid, out.host);
    mm->base.n_vocab = out.n_vocab;
    mm->base.n_ctx = out.n_ctx;
    mm->base.bos = out.bos;
    rc = 0;
done:
    pthread_mutex_unlock(&tmpi_ctrl_mu);
    free(buf);
    return rc;
}

fusion_member *tmpi_member_rank_open(const member_spec *spec) {
    const char *path = spec->path;
    int rank = spec->rank;
    if (tmpi_comm == MPI_COMM_NULL) { /* no mpirun: every member is here */
        member_spec here = *spec;
        here.rank = 0;
        return member_open(&here);
    }
    mpi_member *mm = calloc(1, sizeof *mm);
    if (!mm) return tutti_set_error("member %s: out of memory", path), NULL;
    mm->base.vt = &mpi_vt;
    mm->rank = rank;
    mm->index = spec->index;
    snprintf(mm->base.name, sizeof mm->base.name, "%s", tutti_base_name(path));
    if (remote_load(mm, path, spec->n_sessions, spec->n_ctx, spec->n_threads) < 0) {
        mpi_free(&mm->base);
        return NULL;
    }
    tmpi_register(rank, mm->tag, mm->base.name, spec->index);
    mm->own_vocab = tutti_vocab_load(path);
    mm->row = malloc(sizeof(float) * (size_t)mm->base.n_vocab);
    if (!mm->own_vocab || !mm->row) {
        if (mm->own_vocab) tutti_set_error("member %s: out of memory", path);
        mpi_free(&mm->base);
        return NULL;
    }
    if (tutti_vocab_n_tokens(mm->own_vocab) != mm->base.n_vocab) {
        tutti_set_error("member %s on rank %d: %d logits per position but %d tokens in the vocabulary", path, rank,
                        mm->base.n_vocab, tutti_vocab_n_tokens(mm->own_vocab));
        mpi_free(&mm->base);
        return NULL;
    }
    mm->base.vocab = mm->own_vocab;
    /* BYTE alignment on the member's rank, unless asked for the logits rows
     * (TUTTI_MPI_BYTE_ROWS=1: the earlier protocol, for comparison) */
    const char *rows = getenv("TUTTI_MPI_BYTE_ROWS");
    if (!rows || strcmp(rows, "1") != 0) mm->base.bytes_ops = &mpi_bytes_ops;
    return &mm->base;
}
