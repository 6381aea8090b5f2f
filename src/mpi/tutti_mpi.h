/* The `mpi` layer (internal): an ensemble over MPI ranks.
 *
 *   mpirun -np K tutti run -m A.gguf -m B.gguf ... [--place 0,1,1]
 *
 * Rank 0 runs the command as usual: the generation loop, the fusion rule,
 * the mask and the sampler.  Every other rank is a member server: it loads
 * the models rank 0 places on it and answers "logits after this token
 * sequence" (and "logits of every position" for eval) for them.  On rank 0
 * such a member is one more implementation of the fusion_member vtable
 * (src/fusion/member_mpi.c), so the fusion code does not know where a
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

#include <stdint.h>

/* Called first by main(): removes --place LIST from argv, initialises MPI
 * (MPI_THREAD_MULTIPLE) when the process was started by mpirun.  Returns -1
 * on rank 0 or without MPI (go on with the command); otherwise the exit
 * status for main to return (a member rank that served until rank 0
 * finished, or 2 for bad usage). */
int tutti_mpi_start(int *argc, char **argv);
/* Called by main() with the command's exit status on rank 0: releases the
 * member ranks and finalises MPI (skipped after a fault: a dead peer would
 * hang MPI_Finalize).  Returns the status to exit with. */
int tutti_mpi_stop(int rc);

/* Rank that holds member i of n (0 = this process); -1 + error when the
 * placement does not fit the members. */
int tutti_mpi_member_rank(int32_t i, int32_t n);
/* Number of ranks (1 without MPI). */
int tutti_mpi_size(void);

/* ---- one model split by layers (src/mpi/split.c) ----
 *
 *   mpirun -np K tutti generate --split-layers [N0,N1,...] -m M.gguf ...
 *
 * Rank r holds a contiguous range of layers: N_r of them when the counts
 * are given, else a split by memory (each rank about the same bytes of
 * weights; rank 0's share counts the embeddings and the output head, which
 * it holds too).  The activations (n_tokens x n_embd floats) go round the
 * ring 0 -> 1 -> ... -> K-1 -> 0 and rank 0 computes the logits: the ring
 * carries n_embd floats per token back instead of n_vocab logits, and a
 * tied head (token_embd) is held once.  A prompt goes in micro-batches
 * (--split-ubatch N; default about 4 per rank, at least 16 tokens), so
 * rank 1 computes micro-batch b while rank 0 computes b + 1. */

struct tutti_model;
struct tutti_session;
struct tutti_model_params;
/* Removes --split-layers [N0,N1,...] (the counts are optional) and
 * --split-ubatch N from a command's options argv[0..argc).  1 when
 * --split-layers was given (*counts = the list or NULL), 0 when not, -1
 * with a message on stderr for bad usage (exit 2). */
int tutti_mpi_split_args(int *argc, char **argv, const char **counts, int32_t *ubatch);
/* Plans the split of path over the ranks (counts or by memory; printed on
 * stderr) and loads rank 0's part.  NULL with the error set. */
struct tutti_model *tutti_mpi_split_load(const char *path, const struct tutti_model_params *params,
                                         const char *counts);
/* Loads the other ranks' parts with s's context size and n_threads each,
 * then routes s's evaluations through the ring (s owns the pipeline; freed
 * with s).  A rank that cannot load its part is an error naming it.  Does
 * nothing on one rank.  0 or TUTTI_ERR. */
int tutti_mpi_split_attach(struct tutti_session *s, int32_t n_threads, int32_t ubatch);

#endif
