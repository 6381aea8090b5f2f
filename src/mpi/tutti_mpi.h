/* The `mpi` layer (internal): an ensemble over MPI ranks.  Its entry points
 * for front ends (tutti_mpi_start/stop, the split flags) are in
 * include/tutti.h, "Runs over MPI ranks".
 *
 *   mpirun -np K tutti run -m A.gguf -m B.gguf ... [--place 0,1,1]
 *
 * Rank 0 runs the command as usual: the generation loop, the fusion rule,
 * the mask and the sampler.  Every other rank is a member server: it loads
 * the models rank 0 places on it and answers "logits after this token
 * sequence" (and "logits of every position" for eval) for them.  On rank 0
 * such a member is one more implementation of the fusion_member vtable
 * (src/mpi/member_rank.c), so the fusion code does not know where a
 * member runs.
 *
 * Placement: --place R1,R2,... gives the rank of each member (0 = in rank
 * 0's own process).  Default under mpirun with K > 1 ranks: round robin
 * over ranks 1..K-1 (member i on rank 1 + i mod (K-1)), so rank 0 only
 * fuses and samples.  Without mpirun (or K = 1) every member is local.
 *
 * Faults: every wait on rank 0 is an MPI_Test poll with a deadline
 * (TUTTI_MPI_TIMEOUT seconds, default 120): a rank that dies or stops
 * answering is reported with its rank and members, and the command fails
 * (exit 1) instead of hanging.  The communicator returns errors
 * (MPI_ERRORS_RETURN); library code never calls MPI_Abort. */
#ifndef TUTTI_MPI_H
#define TUTTI_MPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti.h"

/* Rank that holds member i of n (0 = this process); -1 + error when the
 * placement does not fit the members. */
int tutti_mpi_member_rank(int32_t i, int32_t n);
/* Number of ranks (1 without MPI). */
int tutti_mpi_size(void);
/* ---- one model split by layers (src/mpi/split.c) ----
 *
 *   mpirun -np K tutti generate --split-layers [N0,N1,...] -m M.gguf ...
 *   mpirun -np K tutti run -m A.gguf -m B.gguf --split-layers [--split-member 2] ...
 *
 * Rank r holds a contiguous range of layers: N_r of them when the counts
 * are given, else a split by memory (each rank about the same bytes of
 * weights; rank 0's share counts the embeddings and the output head, which
 * it holds too).  The activations (n_tokens x n_embd floats) go round the
 * ring 0 -> 1 -> ... -> K-1 -> 0 and rank 0 computes the logits: the ring
 * carries n_embd floats per token back instead of n_vocab logits, and a
 * tied head (token_embd) is held once.  A prompt goes in micro-batches
 * (--split-ubatch N; default about 4 per rank, at least 16 tokens), so
 * rank 1 computes micro-batch b while rank 0 computes b + 1.
 *
 * A split model is a "ring": rank 0's part plus, on every other rank, its
 * part and one session per session of rank 0 that uses the ring (slot).
 * tutti generate has one session; an ensemble member (member_split.c) a
 * pool of them, whose batched passes (several sequences in one matmul,
 * byte alignment) and cache-prefix copies go round the ring as they run
 * in one process, so the member's logits are the same bits. */

struct tutti_model;
struct tutti_session;
struct tutti_model_params;
typedef struct tutti_mpi_ring tutti_mpi_ring;

/* Whether member file path is to be split (tutti_mpi_split_members);
 * *counts and *ubatch (may be NULL) receive the split's settings. */
bool tutti_mpi_member_split(const char *path, const char **counts, int32_t *ubatch);
/* Plans path's split over the ranks (printed on stderr) and, unless whole
 * (the model already loaded in this process, borrowed) is given, loads
 * rank 0's part into *part (owned by the caller; *part = NULL with whole).
 * The other ranks load theirs at the first attach.  NULL + error. */
tutti_mpi_ring *tutti_mpi_ring_open(const char *path, const struct tutti_model *whole,
                                    const struct tutti_model_params *params, const char *counts, int32_t ubatch,
                                    struct tutti_model **part);
/* Routes session s's evaluations (tutti_session_eval, and batches of the
 * ring's sessions through tutti_session_eval_multi) through the ring as
 * its session number slot (0 <= slot < 4096, one session per slot).  The
 * first attach has every other rank load its part (sessions there get s's
 * n_ctx and n_threads threads).  s's pipeline is freed with s; the ring
 * outlives its sessions.  Nothing to do on one rank.  0 or TUTTI_ERR. */
int tutti_mpi_ring_attach(tutti_mpi_ring *r, struct tutti_session *s, int32_t slot, int32_t n_threads);
/* Slot dst took the first k cache positions of slot src in this process:
 * the other ranks do the same before their next pass.  0 or TUTTI_ERR. */
int tutti_mpi_ring_copy(tutti_mpi_ring *r, int32_t dst, int32_t src, int32_t k);
/* Releases the other ranks' parts (after the ring's sessions are freed). */
void tutti_mpi_ring_free(tutti_mpi_ring *r);

/* ---- routed experts split over the ranks (src/mpi/experts.c) ----
 *
 *   mpirun -np K tutti generate|logits -m MOE.gguf --split-experts ...
 *
 * Every rank maps the whole file but places (holds) only its part: rank r
 * computes experts
 * [r E / K, (r + 1) E / K) of every MoE layer (E = expert_count; rank 0
 * the first share, and everything else: attention, routing, shared
 * experts, the head).  Per layer, rank 0 sends each other rank the rows
 * routed to its experts (n_embd floats each), computes its own share
 * meanwhile, and takes back their outputs; the weighted sum over each
 * token's experts then runs on rank 0 in rank order, so the logits are the
 * single-process bits.  Traffic: 2 x n_embd x 4 bytes per routed row that
 * leaves rank 0 (plus small headers), nothing for rows of rank 0's
 * experts; prompt batches go the same way, a whole micro-batch per layer
 * and rank. */

/* The same for several sessions of one model (an ensemble member's pool):
 * open plans the split of s's model (loaded from path) and has every
 * other rank load it (with s's thread count) (a dense model, or one rank: nothing is split, join does
 * nothing); join routes session s's MoE layers through it (s holds a
 * reference); close drops the opener's reference (the split goes, and the
 * other ranks free their copy, with the last reference).  The sessions
 * must evaluate one at a time or from different threads: one exchange at
 * a time goes over a split.  open: NULL + error; join: 0 or TUTTI_ERR. */
typedef struct tutti_mpi_experts tutti_mpi_experts;
tutti_mpi_experts *tutti_mpi_experts_open(const struct tutti_session *s, const char *path);
int tutti_mpi_experts_join(tutti_mpi_experts *x, struct tutti_session *s);
void tutti_mpi_experts_close(tutti_mpi_experts *x);

/* Whether members split their experts (tutti_mpi_experts_members in
 * include/tutti.h): 0 no, 1 yes, 2 yes and a model without experts is an
 * error. */
int tutti_mpi_member_experts(void);

#endif
