/* Wire protocol between rank 0 and the member ranks (internal to
 * src/mpi/mpi.c and src/mpi/member_rank.c; only with MPI).
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
 * A model split by layers (src/mpi/split.c), one "ring" per split model
 * (a tutti generate session, or an ensemble member's pool of sessions),
 * each with its own tag TMPI_TAG_SPLIT0 + ring number (never reused):
 *   SPLIT (control): tmpi_split header + path bytes; the rank loads layers
 *         [il0, il1) and answers a tmpi_loaded as for LOAD.
 *   Activations (the ring's tag, MPI_BYTE, around the ring 0 -> 1 -> ...
 *   -> K-1 -> 0): a tmpi_act, n_copy tmpi_copy (cache prefixes to copy
 *   between the ring's sessions first, as rank 0 did), n_seg tmpi_seg (the
 *   sessions, positions and tokens of one batch) and the n x n_embd
 *   floats (ACT); or the error text (ERR: passed on to rank 0 unchanged);
 *   FREE (from rank 0 to every rank, between evaluations): the rank frees
 *   the part and stops serving it.  Every rank answers each ACT or ERR with
 *   exactly one message to the next rank (the ACT with its activations
 *   replaced), so rank 0 gets one answer per micro-batch whatever happened
 *   on the way.
 *
 * Routed experts split over the ranks (src/mpi/experts.c), one tag per
 * split session TMPI_TAG_EXPERTS0 + number (never reused):
 *   EXPERTS (control): tmpi_experts header + path bytes; the rank loads the
 *         whole model and serves experts [e0, e1) of every MoE layer;
 *         answered by a tmpi_loaded as for LOAD.
 *   RUN (rank 0 -> rank, the split's tag, MPI_BYTE): a tmpi_xreq, the row
 *         counts of the rank's experts (int32 each) and the n_rows x n_embd
 *         floats routed to them, grouped by expert; answered on the same tag
 *         by a tmpi_xrep and the n_rows output rows, or status < 0 and the
 *         error text.  FREE: the header alone; the rank stops serving. */
#ifndef TUTTI_MPI_PROTO_H
#define TUTTI_MPI_PROTO_H

#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* member tags: TMPI_TAG_MEMBER + handle (< 256 per rank); ring tags from
 * TMPI_TAG_SPLIT0 (MPI guarantees tags up to 32767) */
enum { TMPI_TAG_CTRL = 1, TMPI_TAG_CTRL_REPLY = 2, TMPI_TAG_MEMBER = 16, TMPI_TAG_SPLIT0 = 1024 };
enum { TMPI_MAX_RINGS = 30000 };
enum { TMPI_TAG_EXPERTS0 = TMPI_TAG_SPLIT0 + TMPI_MAX_RINGS, TMPI_MAX_XSPLITS = 1000 };
enum { TMPI_LOAD = 1, TMPI_QUIT = 2, TMPI_SPLIT = 3, TMPI_EXPERTS = 4 };
enum { TMPI_XP_RUN = 1, TMPI_XP_FREE = 2 };

typedef struct tmpi_experts {
    int32_t op; /* TMPI_EXPERTS */
    int32_t e0, e1, n_threads;
    int32_t path_len;
    int32_t tag; /* the split's tag */
} tmpi_experts;
typedef struct tmpi_xreq {
    int32_t op; /* TMPI_XP_RUN, TMPI_XP_FREE */
    int32_t il; /* the layer */
    int32_t n_rows;
} tmpi_xreq;
typedef struct tmpi_xrep {
    int32_t status; /* 0, or < 0 and the error text follows */
    int32_t n_rows;
} tmpi_xrep;
enum { TMPI_ACT = 1, TMPI_ACT_ERR = 2, TMPI_ACT_FREE = 3 };

typedef struct tmpi_split {
    int32_t op; /* TMPI_SPLIT */
    int32_t il0, il1, n_ctx, n_threads;
    int32_t path_len;
    int32_t tag; /* the ring's tag */
} tmpi_split;

typedef struct tmpi_act {
    int32_t op;     /* TMPI_ACT, TMPI_ACT_ERR, TMPI_ACT_FREE */
    int32_t n;      /* tokens (rows of n_embd floats); ERR: bytes of text */
    int32_t from;   /* ERR: the rank that failed */
    int32_t n_seg;  /* ACT: tmpi_seg entries (>= 1) */
    int32_t n_copy; /* ACT: tmpi_copy entries before them */
} tmpi_act;
/* session sid takes the first k cache positions of session src */
typedef struct tmpi_copy {
    int32_t dst, src, k;
} tmpi_copy;
/* n tokens of session sid at positions pos0.. (sids of one ACT distinct) */
typedef struct tmpi_seg {
    int32_t sid, pos0, n;
} tmpi_seg;
enum { TMPI_OP_LOGITS = 1, TMPI_OP_ALL = 2, TMPI_OP_FREE = 3 };
/* Byte states on the member rank (BYTE alignment, fusion_bytes_ops):
 * requests [op, sid, a, payload...] on the member's tag (MPI_INT32_T):
 *   BNEW  a = max_hyps, payload: temp, prune as float32/float64 bits (3 int32); no answer
 *   BSTART a = 0: text bytes follow (one per int32), 1: token ids follow
 *   BCOMMIT a = the byte;  BPREP: run prepare (after a context-full answer)
 *   BCLONE a = the new state's sid;  BPATH: the best path;  BFREE: no answer
 *   BRESOLVE: fusion_bytes_resolve (lazy states: evaluate the deferred hypotheses)
 *   BNEW's payload ends with the lazy flag (1 int32)
 * Each answer (but BPATH's) is one tmpi_breply (MPI_BYTE, err only as long
 * as its text): the op's status, then the state's need_tokens before
 * prepare and, when the member's context holds them, prepare + next run at
 * once (the 257 outcomes), so a generated byte costs one small request and
 * one 2 KB answer.  BPATH: a tmpi_breply with count ids, then the ids. */
enum {
    TMPI_OP_BNEW = 10,
    TMPI_OP_BSTART = 11,
    TMPI_OP_BCOMMIT = 12,
    TMPI_OP_BPREP = 13,
    TMPI_OP_BCLONE = 14,
    TMPI_OP_BPATH = 15,
    TMPI_OP_BFREE = 16,
    TMPI_OP_BRESOLVE = 17
};

typedef struct tmpi_breply {
    int32_t status;      /* the op's own status (0, TUTTI_ERR or a FUSION_ERR_*) */
    int32_t status_prep; /* prepare + next after it: 0, < 0 (failed), 1 = not run (need_tokens > n_ctx) */
    int32_t need_tokens; /* fusion_bytes_need_tokens after the op, before prepare */
    int32_t n_hyps, count;
    int32_t n_deferred; /* fusion_bytes_n_deferred after the op */
    double pruned;
    double t_forward_s;
    int64_t n_forward_tokens, n_forward_calls;
    double dist[257]; /* when status_prep == 0 */
    char err[512];    /* the error text when a status is < 0 */
} tmpi_breply;

typedef struct tmpi_load {
    int32_t op; /* TMPI_LOAD */
    int32_t n_sessions, n_ctx, n_threads;
    int32_t path_len;
} tmpi_load;

typedef struct tmpi_loaded {
    int32_t status; /* 0, or < 0 and the error text follows */
    int32_t handle, n_vocab, n_ctx, bos, err_len;
    int32_t pid; /* the member rank's process and host, for fault reports */
    char host[64];
} tmpi_loaded;

typedef struct tmpi_reply {
    int32_t status; /* 0, or < 0 and the error text follows */
    int32_t count;  /* floats (or error chars) in the next message */
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
/* Sends len bytes of msg to rank on tag and waits for the send (what: for
 * the fault's report); TUTTI_OK, or TUTTI_ERR with the fault recorded. */
int tmpi_send_wait(int rank, int tag, const void *msg, size_t len, const char *what);
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
/* This process's resident memory now and at its peak, in MiB (for the
 * reports: each rank holds only its part; 0 where /proc is not there). */
void tmpi_rss_mib(double *now, double *peak);
/* MPI_Improbe from src until a message with tag comes, without holding a
 * core while idle. */
int tmpi_probe_idle(int src, int tag, MPI_Message *msg, MPI_Status *st);
/* The TUTTI_MPI_TEST_FAULT injection (mpi.c) at one request of a rank. */
void tmpi_test_fault(void);
/* Member-rank side of a layer split (split.c): loads the part a SPLIT
 * control message asks for and starts serving it; 0, or -1 with the error
 * text in ebuf. */
int tmpi_split_serve(const char *buf, int cnt, char *ebuf, size_t cap);
/* Member-rank side: room for one more server thread (of a split part or
 * an expert split), its registration, and the wait for every one of them
 * to see FREE (their objects are freed then). */
bool tmpi_serving_room(void);
void tmpi_serving_add(pthread_t th, void *obj);
void tmpi_serving_join(void);
/* Member-rank side of a SPLIT or EXPERTS control message whose header of
 * hdr bytes is followed by path_len bytes of a model's path (the caller
 * checked the lengths): room for one more server (tmpi_serving_room), its
 * object (obj bytes, zeroed) and the path, NUL-terminated in *path (the
 * caller frees both).  The object, or NULL with the error text in ebuf. */
void *tmpi_serving_new(const char *buf, size_t hdr, int32_t path_len, size_t obj, char **path, char *ebuf, size_t cap);
/* Rank 0: rank r's answer to a SPLIT or EXPERTS control message (what:
 * for a fault report): *loaded, or its error text in err[cap].  TUTTI_ERR
 * on a fault (tmpi_wait's error set). */
int tmpi_take_loaded(int r, const char *what, bool *loaded, char *err, size_t cap);
/* Rank 0: held around every control exchange (LOAD, SPLIT), which share
 * the control tags: threads building members at once must not take each
 * other's answers. */
extern pthread_mutex_t tmpi_ctrl_mu;
/* Rank 0: sends FREE to the split parts still held (error paths). */
void tmpi_split_release(void);
/* Member-rank side of an expert split (experts.c): loads the model an
 * EXPERTS control message names and starts serving its experts; 0, or -1
 * with the error text in ebuf. */
int tmpi_experts_serve(const char *buf, int cnt, char *ebuf, size_t cap);
/* Rank 0: sends FREE to the expert servers still held (error paths). */
void tmpi_experts_release(void);
/* Traffic counters (rank 0). */
void tmpi_count(int64_t sent, int64_t recv, double rtt_s);

#endif
