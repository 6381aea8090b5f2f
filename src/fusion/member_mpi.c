/* Remote member: a fusion_member whose model lives on another MPI rank
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
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "fusion/member_remote.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"

#ifndef TUTTI_HAVE_MPI

fusion_member *fusion_member_placed_new(int32_t index, int32_t n_members, const char *path, const tutti_model *shared,
                                        int32_t n_sessions, int32_t n_ctx, int32_t n_threads) {
    (void)index, (void)n_members;
    return fusion_member_open(path, shared, n_sessions, n_ctx, n_threads);
}

#else

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
    float *row; /* [n_vocab] for logits_view */
} mpi_member;

/* One request: op over ids[0..n), answer into out[count]. */
static int remote_call(mpi_member *mm, int32_t op, const int32_t *ids, int32_t n, float *out, size_t count) {
    if (n < 1)
        return tutti_set_error("member %s: no token to condition on (the model has no BOS; give a prompt)",
                               mm->base.name);
    if (count > (size_t)INT32_MAX)
        return tutti_set_error("member %s: %d positions of %d logits are too many for one MPI message; evaluate "
                               "shorter chunks", mm->base.name, n, mm->base.n_vocab);
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

static const fusion_member_vt mpi_vt = {mpi_logits, mpi_logits_all, mpi_free, mpi_logits_view, NULL};

static pthread_mutex_t g_ctrl = PTHREAD_MUTEX_INITIALIZER;

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
    pthread_mutex_lock(&g_ctrl);
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
    pthread_mutex_unlock(&g_ctrl);
    free(buf);
    return rc;
}

fusion_member *fusion_member_placed_new(int32_t index, int32_t n_members, const char *path, const tutti_model *shared,
                                        int32_t n_sessions, int32_t n_ctx, int32_t n_threads) {
    int rank = tutti_mpi_member_rank(index, n_members);
    if (rank < 0) return NULL;
    if (rank == 0 || tmpi_comm == MPI_COMM_NULL) return fusion_member_open(path, shared, n_sessions, n_ctx, n_threads);
    mpi_member *mm = calloc(1, sizeof *mm);
    if (!mm) return tutti_set_error("member %s: out of memory", path), NULL;
    mm->base.vt = &mpi_vt;
    mm->rank = rank;
    mm->index = index;
    const char *slash = strrchr(path, '/');
    snprintf(mm->base.name, sizeof mm->base.name, "%s", slash ? slash + 1 : path);
    if (remote_load(mm, path, n_sessions, n_ctx, n_threads) < 0) {
        mpi_free(&mm->base);
        return NULL;
    }
    tmpi_register(rank, mm->tag, mm->base.name, index);
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
    return &mm->base;
}

#endif
