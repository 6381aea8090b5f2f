/* Wire protocol between rank 0 and the member ranks (internal to
 * src/mpi/mpi.c and src/fusion/member_mpi.c; only with MPI).
 *
 * Control (rank 0 -> member rank, tag TMPI_TAG_CTRL, MPI_BYTE):
 *   LOAD: tmpi_load header + path bytes; answer on TMPI_TAG_CTRL_REPLY: a
 *         tmpi_loaded, followed (status < 0) by the error text.
 *   QUIT: int32 {TMPI_QUIT, fault}; the rank finalises and exits (fault:
 *         exits without MPI_Finalize, a peer is dead).
 * Member requests (tag TMPI_TAG_MEMBER + handle, MPI_INT32_T):
 *   [op, n, k, ids[k..n)]: the sequence is the first k ids of the previous
 *   request's sequence followed by the ids sent (both ends keep a mirror of
 *   the last sequence, so a generation step sends one new token id, not the
 *   whole history).  Answer on the same tag: a tmpi_reply, then the logits
 *   (MPI_FLOAT, n_vocab for LOGITS, n * n_vocab for ALL) or the error text
 *   (MPI_CHAR) when status < 0; both mirrors are then empty again. */
#ifndef TUTTI_MPI_PROTO_H
#define TUTTI_MPI_PROTO_H

#include <mpi.h>
#include <stdint.h>

enum { TMPI_TAG_CTRL = 1, TMPI_TAG_CTRL_REPLY = 2, TMPI_TAG_MEMBER = 16 };
enum { TMPI_LOAD = 1, TMPI_QUIT = 2 };
enum { TMPI_OP_LOGITS = 1, TMPI_OP_ALL = 2, TMPI_OP_FREE = 3 };

typedef struct tmpi_load {
    int32_t op; /* TMPI_LOAD */
    int32_t n_sessions, n_ctx, n_threads;
    int32_t path_len;
} tmpi_load;

typedef struct tmpi_loaded {
    int32_t status; /* 0, or < 0 and the error text follows */
    int32_t handle, n_vocab, n_ctx, bos, err_len;
    int32_t pid;    /* the member rank's process and host, for fault reports */
    char host[64];
} tmpi_loaded;

typedef struct tmpi_reply {
    int32_t status;  /* 0, or < 0 and the error text follows */
    int32_t count;   /* floats (or error chars) in the next message */
    double t_forward_s;
    int64_t n_forward_tokens, n_forward_calls;
} tmpi_reply;

/* The communicator (a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN),
 * MPI_COMM_NULL when MPI is not running. */
extern MPI_Comm tmpi_comm;
/* Seconds rank 0 waits for any one answer (TUTTI_MPI_TIMEOUT). */
double tmpi_timeout_s(void);
/* Waits for *req until done or deadline (MPI_Wtime seconds), polling with
 * MPI_Test.  0, or TUTTI_ERR with the error set ("rank R: what: ...") and
 * the fault recorded (tutti_mpi_stop then skips MPI_Finalize). */
int tmpi_wait(MPI_Request *req, double deadline, int rank, const char *what);
/* Records a fault with rank and its members in the error; TUTTI_ERR. */
int tmpi_fail(int rank, const char *what);
/* Rank 0's table of live remote members (for the fault message and so that
 * tutti_mpi_stop can release them). */
void tmpi_register(int rank, int tag, const char *name, int32_t index);
/* The process of rank (from its load answer): when it is on this host,
 * rank 0 can tell that it is gone. */
void tmpi_set_pid(int rank, int32_t pid, const char *host);
void tmpi_unregister(int rank, int tag);
/* "member 2 (B.gguf), member 3 (C.gguf)" for the members on rank. */
void tmpi_members_on(int rank, char *buf, size_t cap);
/* Requests waiting for rank (+1 before a wait, -1 after). */
void tmpi_inflight(int rank, int delta);
/* Traffic counters (rank 0). */
void tmpi_count(int64_t sent, int64_t recv, double rtt_s);

#endif
