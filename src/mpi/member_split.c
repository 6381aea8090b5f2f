/* Split member: a fusion_member whose model is split by layers over the
 * MPI ranks (src/mpi/tutti_mpi.h, src/mpi/split.c).
 *
 *   mpirun -np K tutti run -m A.gguf -m B.gguf --split-layers [N0,N1,...] --split-member 2
 *
 * Rank 0 holds the first layers, the embeddings and the head; ranks
 * 1..K-1 hold the other layers, each a contiguous range, and pass the
 * activations on round the ring.
 *
 * The member's logits must be the single-process member's bits, and those
 * depend on the shapes of the forward passes: which tokens share a matmul
 * call (the kernels sum a tile of 4 rows and a tail in different orders;
 * K-quants take other kernels from 8 rows on).  So inside, this member is
 * a local member (member/local.c: the same session pool, prefix reuse,
 * copies between sessions, batches of several sequences and keep() hints,
 * hence the same passes in the same order) whose sessions are attached to
 * the ring: each pass runs rank 0's layers here, the other layers on their
 * ranks (one session there per session here) and the head here, and each
 * prefix copy between two sessions of the pool is repeated on every rank
 * before its next pass.  Outside, it is a kind of its own: the ensemble
 * sees a member that is not local (no scheduling calibration, no thread
 * changes), as a member on another rank. */
#include <stdlib.h>
#include <string.h>

#include "member/member.h"
#include "mpi/member_kinds.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"

typedef struct split_member {
    fusion_member base;
    fusion_member *in;    /* the local member over rank 0's part */
    tutti_mpi_ring *ring; /* the other ranks' parts */
    tutti_model *part;    /* rank 0's part (owned); NULL when the whole model is shared */
} split_member;

/* The inner member answers under the outer one's name and generation flag,
 * and its statistics and error kind are the outer one's. */
static fusion_member *enter(fusion_member *m) {
    split_member *sm = (split_member *)m;
    if (strcmp(sm->in->name, m->name) != 0) snprintf(sm->in->name, sizeof sm->in->name, "%s", m->name);
    sm->in->new_generation = m->new_generation;
    return sm->in;
}

static void leave(fusion_member *m) {
    const fusion_member *in = ((split_member *)m)->in;
    m->err_kind = in->err_kind;
    m->new_generation = in->new_generation;
    m->t_forward_s = in->t_forward_s;
    m->n_forward_tokens = in->n_forward_tokens;
    m->n_forward_calls = in->n_forward_calls;
}

static int split_logits(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    fusion_member *in = enter(m);
    int rc = in->vt->logits(in, ids, n, out);
    leave(m);
    return rc;
}

static int split_logits_all(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    fusion_member *in = enter(m);
    int rc = in->vt->logits_all(in, ids, n, out);
    leave(m);
    return rc;
}

static const float *split_logits_view(fusion_member *m, const int32_t *ids, int32_t n) {
    fusion_member *in = enter(m);
    const float *row = in->vt->logits_view(in, ids, n);
    leave(m);
    return row;
}

static int32_t split_logits_batch(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n,
                                  const float **rows) {
    fusion_member *in = enter(m);
    int32_t k = in->vt->logits_batch(in, n_seq, ids, n, rows);
    leave(m);
    return k;
}

static int split_logits_from(fusion_member *m, const int32_t *ids, int32_t n, int32_t from, float *out) {
    fusion_member *in = enter(m);
    int rc = in->vt->logits_from(in, ids, n, from, out);
    leave(m);
    return rc;
}

static void split_keep(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n) {
    fusion_member_local_keep(enter(m), n_seq, ids, n);
    leave(m);
}

static void split_free(fusion_member *m) {
    split_member *sm = (split_member *)m;
    if (!sm) return;
    if (sm->in) sm->in->vt->free(sm->in); /* its sessions first: they hold the ring */
    tutti_mpi_ring_free(sm->ring);
    tutti_model_free(sm->part);
    free(sm);
}

static const fusion_member_vt split_vt = {split_logits,      split_logits_all,   split_free,
                                          split_logits_view, split_logits_batch, split_logits_from};

/* the pool's sessions: each on the ring as its slot */
static tutti_session *split_open(void *ctx, int32_t slot, const tutti_model *model, const tutti_session_params *sp) {
    split_member *sm = ctx;
    tutti_session *s = tutti_session_new(model, sp);
    if (s && tutti_mpi_ring_attach(sm->ring, s, slot, sp->n_threads) < 0) {
        tutti_session_free(s);
        return NULL;
    }
    return s;
}

static int split_copy(void *ctx, int32_t dst, int32_t src, int32_t k) {
    return tutti_mpi_ring_copy(((split_member *)ctx)->ring, dst, src, k);
}

fusion_member *tmpi_member_split_open(const member_spec *spec) {
    const char *path = spec->path, *counts = spec->split_counts && *spec->split_counts ? spec->split_counts : NULL;
    const tutti_model *shared = spec->shared;
    split_member *sm = calloc(1, sizeof *sm);
    if (!sm) return tutti_set_error("member %s: out of memory", path), NULL;
    sm->base.vt = &split_vt;
    sm->base.keep = split_keep;
    /* the plan, rank 0's part (unless the whole model is here already); the
     * other ranks load theirs when the first session is attached */
    sm->ring = tutti_mpi_ring_open(path, shared, NULL, counts, spec->split_ubatch, shared ? NULL : &sm->part);
    const fusion_local_sessions ops = {sm, split_open, split_copy, NULL, false, NULL};
    if (!sm->ring || !(sm->in = fusion_member_local_new_sessions(path, shared ? shared : sm->part, spec->n_sessions,
                                                                 spec->n_ctx, spec->n_threads, &ops))) {
        split_free(&sm->base);
        return NULL;
    }
    const fusion_member *in = sm->in;
    sm->base.vocab = in->vocab;
    sm->base.n_vocab = in->n_vocab;
    sm->base.n_ctx = in->n_ctx;
    sm->base.bos = in->bos;
    sm->base.vocab_hash = in->vocab_hash;
    snprintf(sm->base.name, sizeof sm->base.name, "%s", in->name);
    return &sm->base;
}
