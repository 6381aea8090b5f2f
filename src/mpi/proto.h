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
 *   (MPI_CHAR) when status < 0; both mirrors are then empty again.
 *
 * A model split by layers (src/mpi/split.c):
 *   SPLIT (control): tmpi_split header + path bytes; the rank loads layers
 *         [il0, il1) and answers a tmpi_loaded as for LOAD.
 *   Activations (tag TMPI_TAG_SPLIT, MPI_BYTE, around the ring 0 -> 1 ->
 *   ... -> K-1 -> 0): a tmpi_act then n x n_embd floats (ACT), or the
 *   error text (ERR: passed on to rank 0 unchanged); FREE (from rank 0 to
 *   every rank, between evaluations): the rank stops serving.  Every rank
 *   answers each ACT or ERR with exactly one message to the next rank, so
 *   rank 0 gets one answer per micro-batch whatever happened on the way. */
#ifndef TUTTI_MPI_PROTO_H
#define TUTTI_MPI_PROTO_H

#include <mpi.h>
#include <stdint.h>

enum { TMPI_TAG_CTRL = 1, TMPI_TAG_CTRL_REPLY = 2, TMPI_TAG_SPLIT = 8, TMPI_TAG_MEMBER = 16 };
enum { TMPI_LOAD = 1, TMPI_QUIT = 2, TMPI_SPLIT = 3 };
enum { TMPI_ACT = 1, TMPI_ACT_ERR = 2, TMPI_ACT_FREE = 3 };

typedef struct tmpi_split {
    int32_t op; /* TMPI_SPLIT */
    int32_t il0, il1, n_ctx, n_threads;
    int32_t path_len;
} tmpi_split;

typedef struct tmpi_act {
    int32_t op;     /* TMPI_ACT, TMPI_ACT_ERR, TMPI_ACT_FREE */
    int32_t pos0;   /* position of the first token */
    int32_t n;      /* tokens (rows of n_embd floats); ERR: bytes of text */
    int32_t from;   /* ERR: the rank that failed */
} tmpi_act;
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
/* This process's rank. */
int tmpi_rank(void);
/* MPI_Improbe from src until a message with tag comes, without holding a
 * core while idle. */
int tmpi_probe_idle(int src, int tag, MPI_Message *msg, MPI_Status *st);
/* The TUTTI_MPI_TEST_FAULT injection (mpi.c) at one request of a rank. */
void tmpi_test_fault(void);
/* Member-rank side of a layer split (split.c): loads the part a SPLIT
 * control message asks for and starts serving it; 0, or -1 with the error
 * text in ebuf. */
int tmpi_split_serve(const char *buf, int cnt, char *ebuf, size_t cap);
/* Waits for this rank's split parts to see FREE, and frees them. */
void tmpi_split_join(void);
/* Rank 0: sends FREE to the split parts still held (error paths). */
void tmpi_split_release(void);
/* Traffic counters (rank 0). */
void tmpi_count(int64_t sent, int64_t recv, double rtt_s);

#endif
