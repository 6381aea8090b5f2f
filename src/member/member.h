/* The `member` layer (internal): one model of an ensemble behind one
 * interface, whatever runs it.
 *
 *   fusion_member   the interface (a vtable): a vocabulary and "logits after
 *                   this token sequence".  Implementations: local.c (a
 *                   tutti_model and a pool of sessions reused by longest
 *                   common prefix), remote.c (a model server over HTTP), and
 *                   in src/mpi/ a member on another MPI rank (member_rank.c)
 *                   and one split by layers over the ranks (member_split.c).
 *   member_open     the one factory (open.c): a spec -- GGUF path or URL,
 *                   the MPI rank that holds it, a split by layers -- in, a
 *                   member out.
 *   vocabulary      identity of a member's tokenizer (vocab_id.c): two
 *                   members fuse per token id only when it is equal.
 *
 * Layering: cli/server -> ensemble -> mpi -> fusion -> member -> model.  The
 * fusion code sees only this interface, so a new kind of member is a new
 * implementation of it, never a branch in the fusion code.  The kinds of an
 * upper layer (MPI) reach the factory by registering (member_register_kind). */
#ifndef TUTTI_MEMBER_H
#define TUTTI_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"
#include "util/error.h"

typedef struct fusion_member fusion_member;

typedef struct fusion_member_vt {
    /* Logits after ids[0..n) (n >= 1; the sequence starts with BOS when the
     * member uses one), written to out[n_vocab].  Members keep whatever
     * state lets them answer a sequence that extends or shares a prefix with
     * an earlier one cheaply. */
    int (*logits)(fusion_member *m, const int32_t *ids, int32_t n, float *out);
    /* Logits of every position of ids[0..n): out[n][n_vocab] (teacher
     * forcing for evaluation). */
    int (*logits_all)(fusion_member *m, const int32_t *ids, int32_t n, float *out);
    void (*free)(fusion_member *m);
    /* As logits, without a copy: the member's own logits row [n_vocab], valid
     * until the next call on m; NULL + error on failure.  Optional (NULL):
     * use fusion_member_logits_view. */
    const float *(*logits_view)(fusion_member *m, const int32_t *ids, int32_t n);
    /* Logits after each of several sequences ids[i][0..n[i]) (distinct), in
     * as few forward passes as the member can (a local member batches them
     * through one matmul per weight: the weights are read once, not once
     * per sequence).  Answers the first k <= n_seq sequences (k >= 1) and
     * returns k: rows[i] (i < k) is the member's own logits row [n_vocab],
     * all valid together until the next call on m.  TUTTI_ERR on failure.
     * Optional (NULL): one logits_view call per sequence. */
    int32_t (*logits_batch)(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n,
                            const float **rows);
    /* Logits after each of ids[0..j] for j in [from, n) (0 <= from < n):
     * out[n - from][n_vocab], logits_all's rows from row `from` on, in one
     * forward pass over what the member does not hold already (a local
     * member keeps each timeline's KV cache).  Optional (NULL): byte
     * alignment then reads known text one pass per token boundary. */
    int (*logits_from)(fusion_member *m, const int32_t *ids, int32_t n, int32_t from, float *out);
} fusion_member_vt;

/* The calls of a byte state kept where the member's model is (fusion.h,
 * fusion_bytes_ops): opaque here. */
struct fusion_bytes_ops;

struct fusion_member {
    const fusion_member_vt *vt;
    const tutti_vocab *vocab; /* tokenizer (owned by the implementation) */
    int32_t n_vocab;          /* logits per position */
    int32_t n_ctx;            /* longest token sequence it can condition on */
    int32_t bos;              /* token every sequence starts with, -1 if the vocabulary adds none */
    char name[256];           /* for messages, after "member ": the file name; in an ensemble
                                 "2 (b.gguf)" (its 1-based index and file name) */
    int err_kind;             /* FUSION_ERR_* of the last failed call (TUTTI_ERR otherwise) */
    uint64_t vocab_hash;      /* vocabulary identity (tokens, merges, scores, types, model) */
    /* statistics, accumulated by the implementation */
    double t_forward_s;       /* wall time inside forward passes */
    int64_t n_forward_tokens; /* tokens run through the model */
    int64_t n_forward_calls;  /* forward-pass batches */
    /* set at the start of each generation: what the member cached beyond
     * the new prompt's common prefix belongs to a finished generation, so
     * the next request may rewind any cached sequence for free (a server
     * slot's next prompt then reuses its longest common prefix) */
    bool new_generation;
    /* Byte states kept where the model is (a member on another MPI rank,
     * src/mpi/member_rank.c): fusion_bytes_new then makes a state whose
     * calls go to these, so the member's rank runs the alignment and sends
     * only the 257 outcomes.  NULL (every other member): the byte state runs
     * here on the member's logits. */
    const struct fusion_bytes_ops *bytes_ops;
    /* Optional method (outside the vtable so that every implementation's
     * table stays as it is): the hint of fusion_member_local_keep, set by
     * members that reuse sessions by prefix (local and split); NULL:
     * ignored. */
    void (*keep)(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n);
    /* Sequences may be longer than n_ctx (the window): the member slides
     * it as llama.cpp's context shift does, and its logits after ids[0..n)
     * are those of one session fed the tokens one at a time with
     * tutti_session_params.ctx_shift.  Set by set_ctx_shift. */
    bool ctx_shift;
    /* Optional method (local members; NULL for the others: remote, MPI and
     * split members keep their hard limit): turns the context shift on,
     * keeping BOS and the n_keep tokens after it.  0 or TUTTI_ERR. */
    int (*set_ctx_shift)(fusion_member *m, int32_t n_keep);
    /* Optional method (local members; NULL for the others): logits_batch,
     * where a sequence i with out[i] non-NULL also gives logits_from's rows
     * from from[i] on, out[i][n[i] - from[i]][n_vocab] -- a window of known
     * text and other hypotheses' last rows in one pass (byte alignment's
     * drafting, bytestate.c).  out, from: NULL or [n_seq].  Returns the
     * sequences answered (the first k >= 1) or TUTTI_ERR. */
    int32_t (*logits_batch_from)(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n,
                                 const int32_t *from, float *const *out, const float **rows);
};

/* Whether member m can give logits after n tokens: within its context, or
 * any length when it shifts its context. */
static inline bool fusion_member_fits(const fusion_member *m, int64_t n) { return m->ctx_shift || n <= m->n_ctx; }

/* Logits after ids[0..n) without a copy when the member can give its own
 * row (vt->logits_view), else written to scratch[n_vocab].  NULL + error. */
static inline const float *fusion_member_logits_view(fusion_member *m, const int32_t *ids, int32_t n, float *scratch) {
    if (m->vt->logits_view) return m->vt->logits_view(m, ids, n);
    return m->vt->logits(m, ids, n, scratch) < 0 ? NULL : scratch;
}

/* ------------------------------------------------------------------------ */
/* The factory (open.c) */

/* Where a member comes from: -m, an ensemble file's line, an MPI rank's
 * load request. */
typedef struct member_spec {
    const char *path;          /* GGUF file, or a remote member's URL spec (member/remote.h) */
    const tutti_model *shared; /* path's model already loaded in this process (borrowed), or NULL */
    int32_t n_sessions;        /* sessions of a local member (hypotheses in flight) */
    int32_t n_ctx;             /* tokens per session, 0 = the model's default */
    int32_t n_threads;         /* threads per session */
    /* placement (src/mpi/): the MPI rank that holds the member (0 = this
     * process), or split by layers over every rank (split_counts non-NULL,
     * "" = by memory; split_ubatch 0 = auto) */
    int32_t rank;
    int32_t index; /* the member's 0-based index in its ensemble (the rank's records) */
    const char *split_counts;
    int32_t split_ubatch;
    /* here, with its routed experts split over every rank (--split-experts;
     * strict: a model without experts is an error) */
    bool split_experts, split_experts_strict;
} member_spec;

/* The member spec describes: split over the ranks (by layers, or its
 * experts), on another rank, remote (a URL), or local.  NULL + error (a missing or malformed file, a server
 * that cannot be reached, a placement this process cannot make). */
fusion_member *member_open(const member_spec *spec);

/* Kinds that live above this layer (src/mpi/) and register at start. */
typedef enum member_kind { MEMBER_KIND_RANK, MEMBER_KIND_SPLIT, MEMBER_KIND_EXPERTS, MEMBER_N_KINDS } member_kind;
typedef fusion_member *(*member_open_fn)(const member_spec *spec);
void member_register_kind(member_kind kind, member_open_fn open);

/* ------------------------------------------------------------------------ */
/* Local members (local.c) */

/* Local member: loads path.  n_sessions >= 1 sessions of n_ctx tokens with
 * n_threads threads each.  NULL + error on a missing or malformed file. */
fusion_member *fusion_member_local_new(const char *path, int32_t n_sessions, int32_t n_ctx, int32_t n_threads);
/* As fusion_member_local_new with a model already loaded from path
 * (borrowed, read-only, must outlive the member): only the sessions are new. */
fusion_member *fusion_member_local_new_shared(const char *path, const tutti_model *model, int32_t n_sessions,
                                              int32_t n_ctx, int32_t n_threads);
/* A local member whose sessions come from open() (NULL + error), for
 * members whose model is not wholly in this process (src/mpi/member_split.c):
 * the session pool, its scheduling and its batches are the local
 * member's, so the forward passes have the same shapes and the logits
 * the same bits.  copy (may be NULL) is told after the pool copied the
 * first k cache positions of session slot src into slot dst. */
typedef struct fusion_local_sessions {
    void *ctx;
    tutti_session *(*open)(void *ctx, int32_t slot, const tutti_model *model, const tutti_session_params *sp);
    int (*copy)(void *ctx, int32_t dst, int32_t src, int32_t k);
    /* may be NULL: called once, after the member freed its sessions (or
     * when fusion_member_local_new_sessions fails) */
    void (*release)(void *ctx);
    bool can_shift; /* the sessions may shift their context (a split by layers cannot) */
    /* may be NULL (tutti_model_load): loads the member's model when none is
     * shared (a split by experts places only rank 0's experts) */
    tutti_model *(*load)(const char *path, const tutti_model_params *mp);
} fusion_local_sessions;
/* As fusion_member_local_new_shared over model (borrowed; NULL: loaded
 * from path and owned), sessions from ops (copied).  The member is the
 * plain local kind in every other way. */
fusion_member *fusion_member_local_new_sessions(const char *path, const tutti_model *model, int32_t n_sessions,
                                                int32_t n_ctx, int32_t n_threads, const fusion_local_sessions *ops);
/* The model of a local member (NULL for other kinds). */
tutti_model *fusion_member_local_model(fusion_member *m);
/* Hint to a member (m->keep: local and split members; no-op for other
 * kinds): the sequences ids[i][0..n[i]) are the live tokenization
 * hypotheses, whose continuations will be asked for next; it keeps the
 * sessions holding them and reuses the others first. */
void fusion_member_local_keep(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n);
/* Recreates a local member's sessions with n_threads threads each (its
 * cached timelines are lost). */
int fusion_member_local_set_threads(fusion_member *m, int32_t n_threads);
/* Recreates a local member's sessions as sessions of batch (borrowed;
 * tutti_session_new_batched), its cached timelines lost. */
int fusion_member_local_set_batch(fusion_member *m, tutti_batch *batch);

/* ------------------------------------------------------------------------ */
/* Vocabulary identity (vocab_id.c) */

/* Hash of the tokenizer metadata of a GGUF file (tokenizer.ggml.model, .pre,
 * .tokens, .merges, .scores, .token_type, bos/eos ids).  Two members fuse
 * per token id only when their hashes are equal. */
int fusion_vocab_hash_file(const char *path, uint64_t *out);
/* Vocabulary identity of any member spec: fusion_vocab_hash_file of the
 * file, or for a remote member of its vocab=PATH once the server's
 * tokenizer agrees with it (a server that cannot be checked gets a hash of
 * its own, so it is never token-aligned with anything). */
int fusion_member_vocab_hash(const char *path, uint64_t *out);

#endif
