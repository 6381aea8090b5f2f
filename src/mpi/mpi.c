/* MPI start-up, placement, the member-rank server and shutdown (see
 * tutti_mpi.h).  Compiled only when CMake finds MPI (TUTTI_HAVE_MPI). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fusion/fusion.h"
#include "member/member.h"
#include "mpi/member_kinds.h"
#include "mpi/proto.h"
#include "mpi/tutti_mpi.h"
#include "util/error.h"

MPI_Comm tmpi_comm = MPI_COMM_NULL;
pthread_mutex_t tmpi_ctrl_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_rank, g_size = 1;
static int g_place[TUTTI_ENSEMBLE_MAX_MEMBERS], g_n_place = -1;
static double g_timeout = 120;
static volatile int g_fault;
/* per member rank: requests waiting for it, a fault seen, and the text the
 * SIGTERM handler writes (precomputed: a handler may only call write) */
#define TMPI_MAX_RANKS 64
static volatile sig_atomic_t g_inflight[TMPI_MAX_RANKS], g_dead[TMPI_MAX_RANKS];
static char g_killmsg[TMPI_MAX_RANKS][640];
static pid_t g_pid[TMPI_MAX_RANKS]; /* member ranks on this host, 0 if unknown or elsewhere */

void tmpi_set_pid(int rank, int32_t pid, const char *host) {
    char me[64] = "";
    gethostname(me, sizeof me - 1);
    if (rank > 0 && rank < TMPI_MAX_RANKS) g_pid[rank] = strncmp(me, host, sizeof me) == 0 ? (pid_t)pid : 0;
}

/* ---- rank 0: live remote members, traffic ---- */

typedef struct reg_entry {
    int rank, tag;
    int32_t index;
    char name[64];
} reg_entry;
static reg_entry g_reg[256];
static int g_n_reg;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_sent, g_recv, g_n_req;
static double g_rtt;
/* ranks with a request in flight now, and the most at once: members on
 * different ranks computing concurrently show as more than one (test_mpi.sh
 * checks this instead of wall-clock times, which a loaded machine skews) */
static int g_busy, g_busy_max;

static void update_killmsg(int rank);

void tmpi_register(int rank, int tag, const char *name, int32_t index) {
    pthread_mutex_lock(&g_mu);
    if (g_n_reg < (int)(sizeof g_reg / sizeof *g_reg)) {
        reg_entry *r = &g_reg[g_n_reg++];
        r->rank = rank, r->tag = tag, r->index = index;
        snprintf(r->name, sizeof r->name, "%s", name);
    }
    pthread_mutex_unlock(&g_mu);
    update_killmsg(rank);
}

void tmpi_inflight(int rank, int delta) {
    if (rank <= 0 || rank >= TMPI_MAX_RANKS) return;
    int now = __atomic_add_fetch(&g_inflight[rank], delta, __ATOMIC_SEQ_CST);
    if ((delta > 0 && now == delta) || (delta < 0 && now == 0)) { /* the rank became busy or idle */
        pthread_mutex_lock(&g_mu);
        g_busy += delta > 0 ? 1 : -1;
        if (g_busy > g_busy_max) g_busy_max = g_busy;
        pthread_mutex_unlock(&g_mu);
    }
}

void tmpi_unregister(int rank, int tag) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n_reg; i++)
        if (g_reg[i].rank == rank && g_reg[i].tag == tag) {
            g_reg[i] = g_reg[--g_n_reg];
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

void tmpi_members_on(int rank, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n_reg && o + 1 < cap; i++)
        if (g_reg[i].rank == rank) {
            int k =
                g_reg[i].index < 0 /* a part of a model split by layers: its name says which */
                    ? snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", g_reg[i].name)
                    : snprintf(buf + o, cap - o, "%smember %d (%s)", o ? ", " : "", g_reg[i].index + 1, g_reg[i].name);
            if (k < 0) break;
            o += (size_t)k;
        }
    pthread_mutex_unlock(&g_mu);
    if (o >= cap) o = cap - 1;
    if (!o) snprintf(buf, cap, "no member");
}

void tmpi_count(int64_t sent, int64_t recv, double rtt_s) {
    pthread_mutex_lock(&g_mu);
    g_sent += sent, g_recv += recv, g_n_req++, g_rtt += rtt_s;
    pthread_mutex_unlock(&g_mu);
}

static void update_killmsg(int rank) {
    if (rank <= 0 || rank >= TMPI_MAX_RANKS) return;
    char who[512];
    tmpi_members_on(rank, who, sizeof who);
    snprintf(g_killmsg[rank], sizeof g_killmsg[rank],
             "tutti: mpi: the launcher ended the job: rank %d (%s) died or stopped answering\n", rank, who);
}

/* mpirun ends every rank (SIGTERM, then SIGKILL) when one dies: say which
 * rank rank 0 was waiting for, then leave with status 1. */
static void on_sigterm(int sig) {
    (void)sig;
    int any = 0;
    /* ranks on this host whose process is gone (kill(pid, 0) is
     * async-signal-safe), else the ranks rank 0 was waiting for */
    for (int r = 1; r < TMPI_MAX_RANKS && r < g_size; r++)
        if (g_pid[r] > 0 && kill(g_pid[r], 0) < 0 && errno == ESRCH && g_killmsg[r][0]) {
            ssize_t w = write(2, g_killmsg[r], strlen(g_killmsg[r]));
            (void)w;
            any = 1;
        }
    for (int r = 1; r < TMPI_MAX_RANKS && r < g_size && !any; r++)
        if (g_inflight[r] > 0 && g_killmsg[r][0]) {
            ssize_t w = write(2, g_killmsg[r], strlen(g_killmsg[r]));
            (void)w;
            any = 1;
        }
    if (!any) {
        static const char m[] = "tutti: mpi: the launcher ended the job (a rank died or was killed)\n";
        ssize_t w = write(2, m, sizeof m - 1);
        (void)w;
    }
    _exit(1);
}

double tmpi_timeout_s(void) { return g_timeout; }

int tmpi_wait(MPI_Request *req, double deadline, int rank, const char *what) {
    int flag = 0;
    for (long spins = 0;; spins++) {
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char es[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, es, &len);
            char who[512];
            tmpi_members_on(rank, who, sizeof who);
            g_fault = 1;
            if (rank > 0 && rank < TMPI_MAX_RANKS) g_dead[rank] = 1;
            return tutti_set_error("mpi: rank %d (%s): %s failed: %s", rank, who, what, es);
        }
        if (flag) return 0;
        /* spin first (a row arrives within tens of microseconds on one
         * host), then sleep briefly so an idle wait does not eat a core */
        if (spins > 2000) {
            if (MPI_Wtime() > deadline) {
                char who[512];
                tmpi_members_on(rank, who, sizeof who);
                g_fault = 1;
                if (rank > 0 && rank < TMPI_MAX_RANKS) g_dead[rank] = 1;
                return tutti_set_error("mpi: rank %d (%s) did not answer within %g s (%s): the rank died or "
                                       "hangs (TUTTI_MPI_TIMEOUT sets the limit)",
                                       rank, who, g_timeout, what);
            }
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

int tmpi_fail(int rank, const char *what) {
    char who[512];
    tmpi_members_on(rank, who, sizeof who);
    g_fault = 1;
    if (rank > 0 && rank < TMPI_MAX_RANKS) g_dead[rank] = 1;
    return tutti_set_error("mpi: rank %d (%s): %s failed", rank, who, what);
}

int tmpi_send_wait(int rank, int tag, const void *msg, size_t len, const char *what) {
    MPI_Request rq;
    if (MPI_Isend(msg, (int)len, MPI_BYTE, rank, tag, tmpi_comm, &rq) != MPI_SUCCESS) return tmpi_fail(rank, what);
    return tmpi_wait(&rq, MPI_Wtime() + tmpi_timeout_s(), rank, what);
}

/* ---- placement ---- */

int tutti_mpi_size(void) { return g_size; }

int tutti_mpi_dead_rank(char *members, size_t cap) {
    if (tmpi_comm == MPI_COMM_NULL || g_rank != 0) return 0;
    for (int r = 1; r < g_size && r < TMPI_MAX_RANKS; r++)
        if (g_dead[r] || (g_pid[r] > 0 && kill(g_pid[r], 0) < 0 && errno == ESRCH)) {
            if (members && cap) tmpi_members_on(r, members, cap);
            return r;
        }
    return 0;
}

/* --split-experts for ensemble members: every member in rank 0's process
 * (0 off, 1 on, 2 on and a model without experts is an error) */
static int g_member_experts;

int tutti_mpi_experts_members(bool on, bool strict) {
    if (on && g_n_place >= 0)
        return tutti_set_error("--place and --split-experts exclude each other: every member stays on rank 0 and "
                               "spreads its experts over all ranks");
    g_member_experts = on ? strict ? 2 : 1 : 0;
    return TUTTI_OK;
}

int tutti_mpi_member_experts(void) { return g_member_experts; }

int tutti_mpi_member_rank(int32_t i, int32_t n) {
    if (g_member_experts) return 0;
    if (g_n_place >= 0) {
        if (g_n_place != n)
            return tutti_set_error("--place lists %d ranks for %d members (one rank per member)", g_n_place, n);
        return g_place[i];
    }
    if (g_size <= 1) return 0;
    return 1 + i % (g_size - 1);
}

/* The member kinds of this layer, for member/member.h's factory: a member
 * on another rank (member_rank.c), split over the ranks (member_split.c),
 * here with its experts over the ranks (member_experts.c). */
static void register_kinds(void) {
    member_register_kind(MEMBER_KIND_RANK, tmpi_member_rank_open);
    member_register_kind(MEMBER_KIND_SPLIT, tmpi_member_split_open);
    member_register_kind(MEMBER_KIND_EXPERTS, tmpi_member_experts_open);
}

/* ---- members split by layers (split.c has the rest) ---- */

static struct {
    bool on;
    char counts[512];
    int32_t ubatch;
    char *paths[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t n_paths; /* 0 = every member */
} g_split;

int tutti_mpi_split_members(const char *counts, int32_t ubatch, const char *const *paths, int32_t n_paths) {
    if (tutti_mpi_split_check(counts ? counts : "", ubatch) < 0) return TUTTI_ERR;
    if (g_n_place >= 0)
        return tutti_set_error("--place and --split-layers exclude each other: a split member occupies every rank "
                               "(its layers spread over them), and the other members are placed round robin over "
                               "ranks 1..K-1");
    if (n_paths < 0 || n_paths > TUTTI_ENSEMBLE_MAX_MEMBERS || (counts && strlen(counts) >= sizeof g_split.counts))
        return tutti_set_error("--split-layers: too many members or counts");
    for (int32_t i = 0; i < g_split.n_paths; i++) free(g_split.paths[i]);
    g_split.n_paths = 0;
    for (int32_t i = 0; i < n_paths; i++)
        if (!(g_split.paths[g_split.n_paths++] = strdup(paths[i]))) return tutti_set_error("out of memory");
    snprintf(g_split.counts, sizeof g_split.counts, "%s", counts ? counts : "");
    g_split.ubatch = ubatch;
    g_split.on = true;
    register_kinds();
    return TUTTI_OK;
}

bool tutti_mpi_member_split(const char *path, const char **counts, int32_t *ubatch) {
    if (!g_split.on || !path) return false;
    bool hit = g_split.n_paths == 0;
    for (int32_t i = 0; i < g_split.n_paths && !hit; i++) hit = !strcmp(g_split.paths[i], path);
    if (hit && counts) *counts = g_split.counts[0] ? g_split.counts : NULL;
    if (hit && ubatch) *ubatch = g_split.ubatch;
    return hit;
}

static int parse_place(const char *s) {
    g_n_place = 0;
    const char *p = s;
    while (*p) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || (*e && *e != ',') || v < 0 || v >= g_size) {
            fprintf(stderr, "tutti: --place \"%s\": expected comma-separated ranks in [0, %d) (%d ranks run)\n", s,
                    g_size, g_size);
            return -1;
        }
        if (g_n_place == TUTTI_ENSEMBLE_MAX_MEMBERS) {
            fprintf(stderr, "tutti: --place: more than %d members\n", TUTTI_ENSEMBLE_MAX_MEMBERS);
            return -1;
        }
        g_place[g_n_place++] = (int)v;
        p = *e ? e + 1 : e;
    }
    if (!g_n_place) {
        fprintf(stderr, "tutti: --place: empty list\n");
        return -1;
    }
    return 0;
}

/* ---- member ranks ---- */

typedef struct srv_member {
    fusion_member *m;
    int tag;
    pthread_t th;
    int32_t *mirror, n_mirror, cap_mirror;
    bool done;
    /* byte states kept here for rank 0 (BYTE alignment), by sid */
    fusion_bytes **bst;
    int32_t cap_bst;
    fusion_trie *trie; /* the member's byte trie, built at the first state */
} srv_member;

/* ---- byte states (proto.h: TMPI_OP_B*) ---- */

static fusion_bytes **bst_slot(srv_member *s, int32_t sid) {
    if (sid < 0 || sid >= (1 << 20)) return NULL;
    if (sid >= s->cap_bst) {
        int32_t nc = sid * 2 + 16;
        fusion_bytes **nb = realloc(s->bst, sizeof *nb * (size_t)nc);
        if (!nb) return NULL;
        memset(nb + s->cap_bst, 0, sizeof *nb * (size_t)(nc - s->cap_bst));
        s->bst = nb, s->cap_bst = nc;
    }
    return &s->bst[sid];
}

/* The answer to a byte op of status rc on state st: the state's
 * need_tokens, and prepare + next run at once when the context holds them
 * (what rank 0 asks for next in every alignment loop). */
static void bytes_answer(srv_member *s, fusion_bytes *st, int rc, int32_t count) {
    tmpi_breply r;
    memset(&r, 0, sizeof r);
    r.status = rc;
    r.count = count;
    if (rc < 0) snprintf(r.err, sizeof r.err, "%s", tutti_last_error());
    if (rc >= 0 && st) {
        r.need_tokens = fusion_bytes_need_tokens(st);
        if (r.need_tokens > s->m->n_ctx) r.status_prep = 1;
        else if ((r.status_prep = fusion_bytes_next(st, r.dist)) < 0)
            snprintf(r.err, sizeof r.err, "%s", tutti_last_error());
        r.n_hyps = fusion_bytes_n_hyps(st);
        r.n_deferred = fusion_bytes_n_deferred(st);
        r.pruned = fusion_bytes_pruned(st);
    }
    r.t_forward_s = s->m->t_forward_s;
    r.n_forward_tokens = s->m->n_forward_tokens;
    r.n_forward_calls = s->m->n_forward_calls;
    const size_t len = offsetof(tmpi_breply, err) + (r.err[0] ? strlen(r.err) + 1 : 0);
    MPI_Send(&r, (int)len, MPI_BYTE, 0, s->tag, tmpi_comm);
}

static void srv_bytes(srv_member *s, const int32_t *buf, int cnt) {
    const int32_t op = buf[0], sid = buf[1], a = buf[2];
    fusion_bytes **slot = bst_slot(s, sid);
    fusion_bytes *st = slot ? *slot : NULL;
    tmpi_test_fault();
    if (op == TMPI_OP_BFREE) {
        if (slot) fusion_bytes_free(*slot), *slot = NULL;
        return;
    }
    if (op == TMPI_OP_BNEW) { /* no answer: a failure shows at the state's first op */
        if (!slot || st || cnt < 6) return;
        fusion_bytes_params bp = {.max_hyps = a};
        memcpy(&bp.temp, buf + 3, sizeof bp.temp);
        memcpy(&bp.prune, buf + 4, sizeof bp.prune);
        bp.lazy = cnt >= 7 && buf[6] != 0;
        if (!s->trie) s->trie = fusion_trie_build(s->m->vocab); /* thread-safe: members build at once */
        if (s->trie) *slot = fusion_bytes_new(s->m, s->trie, &bp);
        return;
    }
    if (!st) {
        bytes_answer(s, NULL, tutti_set_error("mpi: member rank has no byte state %d (out of memory?)", sid), 0);
        return;
    }
    if (op == TMPI_OP_BPATH) {
        int32_t n = 0;
        const int32_t *ids = fusion_bytes_best_path(st, &n);
        if (!ids) n = 0;
        /* the state's answer (as after any op), then the ids (the next
         * op cannot move them: this thread runs it after the send) */
        bytes_answer(s, st, 0, n);
        if (n > 0) MPI_Send(ids, n, MPI_INT32_T, 0, s->tag, tmpi_comm);
        return;
    }
    int rc;
    switch (op) {
    case TMPI_OP_BSTART:
        if (a == 1) {
            rc = fusion_bytes_start_ids(st, buf + 3, cnt - 3);
        } else {
            char *text = malloc((size_t)cnt);
            if (!text) {
                rc = tutti_set_error("mpi: member rank out of memory");
                break;
            }
            for (int i = 3; i < cnt; i++) text[i - 3] = (char)buf[i];
            rc = fusion_bytes_start(st, text, (size_t)(cnt - 3));
            free(text);
        }
        break;
    case TMPI_OP_BCOMMIT: rc = fusion_bytes_commit(st, (uint8_t)a); break;
    case TMPI_OP_BPREP: rc = fusion_bytes_prepare(st); break;
    case TMPI_OP_BRESOLVE: rc = fusion_bytes_resolve(st); break;
    case TMPI_OP_BCLONE: {
        fusion_bytes **cs = bst_slot(s, a);
        fusion_bytes *c = cs && !*cs ? fusion_bytes_clone(st) : NULL;
        if (!c) {
            bytes_answer(s, NULL, cs ? TUTTI_ERR : tutti_set_error("mpi: bad byte state id %d", a), 0);
            return;
        }
        *cs = c;
        bytes_answer(s, c, 0, 0);
        return;
    }
    default: rc = tutti_set_error("mpi: malformed byte request");
    }
    bytes_answer(s, st, rc, 0);
}

static void srv_reply_err(srv_member *s, const char *msg) {
    tmpi_reply r = {.status = -1, .count = (int32_t)strlen(msg) + 1};
    s->n_mirror = 0;
    MPI_Send(&r, sizeof r, MPI_BYTE, 0, s->tag, tmpi_comm);
    MPI_Send(msg, r.count, MPI_CHAR, 0, s->tag, tmpi_comm);
}

/* Fault injection for the tests (tests/test_mpi.sh): TUTTI_MPI_TEST_FAULT=
 * "kill:N@R" makes member rank R kill itself with SIGKILL (as kill -9
 * would) on its N-th request, "hang:N@R" makes it stop answering there,
 * "delay:MS" slows every answer of every member rank by MS milliseconds. */
int tmpi_rank(void) { return g_rank; }

void tmpi_rss_mib(double *now, double *peak) {
    *now = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long kb;
        if (sscanf(line, "VmRSS: %ld", &kb) == 1) *now = (double)kb / 1024;
        if (sscanf(line, "VmHWM: %ld", &kb) == 1) *peak = (double)kb / 1024;
    }
    fclose(f);
}

void tmpi_test_fault(void) {
    static long n_req;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const char *f = getenv("TUTTI_MPI_TEST_FAULT");
    if (!f) return;
    if (!strncmp(f, "delay:", 6)) { /* every answer takes MS more milliseconds */
        struct timespec ts = {atol(f + 6) / 1000, (atol(f + 6) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        return;
    }
    pthread_mutex_lock(&mu);
    long n = ++n_req;
    pthread_mutex_unlock(&mu);
    const char *colon = strchr(f, ':'), *at = strchr(f, '@');
    if (!colon || !at || atol(colon + 1) != n || atol(at + 1) != g_rank) return;
    if (!strncmp(f, "kill:", 5)) raise(SIGKILL);
    if (!strncmp(f, "hang:", 5))
        for (;;) pause();
}

/* MPI_Mprobe that does not hold a core while idle: a blocking probe spins
 * inside the library, and with several ranks per host (or more ranks than
 * cores) the spinning ranks slow down the one computing.  Spin a little
 * (an answer to the previous reply comes within microseconds), then sleep
 * 20 us between probes. */
int tmpi_probe_idle(int src, int tag, MPI_Message *msg, MPI_Status *st) {
    for (long spins = 0;; spins++) {
        int flag = 0;
        int rc = MPI_Improbe(src, tag, tmpi_comm, &flag, msg, st);
        if (rc != MPI_SUCCESS) return rc;
        if (flag) return MPI_SUCCESS;
        if (spins > 2000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

static void *srv_member_main(void *arg) {
    srv_member *s = arg;
    int32_t *buf = NULL;
    int cap = 0;
    float *all = NULL;
    size_t cap_all = 0;
    for (;;) {
        MPI_Message msg;
        MPI_Status st;
        int cnt = 0;
        if (tmpi_probe_idle(0, s->tag, &msg, &st) != MPI_SUCCESS) break;
        MPI_Get_count(&st, MPI_INT32_T, &cnt);
        if (cnt > cap) {
            int32_t *nb = realloc(buf, sizeof(int32_t) * (size_t)cnt);
            if (!nb) break;
            buf = nb, cap = cnt;
        }
        if (MPI_Mrecv(buf, cnt, MPI_INT32_T, &msg, &st) != MPI_SUCCESS) break;
        if (cnt < 3 || buf[0] == TMPI_OP_FREE) break;
        if (buf[0] >= TMPI_OP_BNEW && buf[0] <= TMPI_OP_BRESOLVE) {
            srv_bytes(s, buf, cnt);
            continue;
        }
        int32_t op = buf[0], n = buf[1], k = buf[2];
        if (k < 0 || k > s->n_mirror || n < k || n - k != cnt - 3 || (op != TMPI_OP_LOGITS && op != TMPI_OP_ALL)) {
            srv_reply_err(s, "mpi: malformed request");
            continue;
        }
        if (n > s->cap_mirror) {
            int32_t nc = n * 2;
            int32_t *nm = realloc(s->mirror, sizeof(int32_t) * (size_t)nc);
            if (!nm) {
                srv_reply_err(s, "mpi: member rank out of memory");
                continue;
            }
            s->mirror = nm, s->cap_mirror = nc;
        }
        tmpi_test_fault();
        memcpy(s->mirror + k, buf + 3, sizeof(int32_t) * (size_t)(n - k));
        s->n_mirror = n;
        fusion_member *m = s->m;
        const float *row = NULL;
        size_t count = 0;
        if (op == TMPI_OP_LOGITS) {
            row = m->vt->logits_view ? m->vt->logits_view(m, s->mirror, n) : NULL;
            count = (size_t)m->n_vocab;
        } else {
            count = (size_t)n * (size_t)m->n_vocab;
            if (count > (size_t)INT32_MAX) {
                srv_reply_err(s, "mpi: too many logits for one message");
                continue;
            }
            if (count > cap_all) {
                float *na = realloc(all, sizeof(float) * count);
                if (!na) {
                    srv_reply_err(s, "mpi: member rank out of memory");
                    continue;
                }
                all = na, cap_all = count;
            }
            row = m->vt->logits_all(m, s->mirror, n, all) < 0 ? NULL : all;
        }
        if (!row) {
            srv_reply_err(s, tutti_last_error());
            continue;
        }
        tmpi_reply r = {.status = 0,
                        .count = (int32_t)count,
                        .t_forward_s = m->t_forward_s,
                        .n_forward_tokens = m->n_forward_tokens,
                        .n_forward_calls = m->n_forward_calls};
        MPI_Send(&r, sizeof r, MPI_BYTE, 0, s->tag, tmpi_comm);
        MPI_Send(row, (int)count, MPI_FLOAT, 0, s->tag, tmpi_comm);
    }
    free(buf);
    free(all);
    for (int32_t i = 0; i < s->cap_bst; i++) fusion_bytes_free(s->bst[i]);
    free(s->bst);
    fusion_trie_free(s->trie);
    s->done = true;
    return NULL;
}

/* 0 after a normal QUIT, 1 when rank 0 saw a fault (leave without
 * MPI_Finalize: it would wait for the dead rank). */
static int serve(void) {
    int quit_fault = 0;
    srv_member *mem[256] = {0};
    int n_mem = 0;
    char *buf = NULL;
    int cap = 0;
    for (;;) {
        MPI_Message msg;
        MPI_Status st;
        int cnt = 0;
        if (tmpi_probe_idle(0, TMPI_TAG_CTRL, &msg, &st) != MPI_SUCCESS) break;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        if (cnt + 1 > cap) {
            char *nb = realloc(buf, (size_t)cnt + 1);
            if (!nb) break;
            buf = nb, cap = cnt + 1;
        }
        if (MPI_Mrecv(buf, cnt, MPI_BYTE, &msg, &st) != MPI_SUCCESS) break;
        int32_t op = 0;
        if (cnt >= (int)sizeof op) memcpy(&op, buf, sizeof op);
        if (op == TMPI_SPLIT ||
            op == TMPI_EXPERTS) { /* a part of a split model (split.c), or its experts (experts.c) */
            char ebuf[1024] = "";
            tmpi_loaded out = {0};
            if ((op == TMPI_SPLIT ? tmpi_split_serve : tmpi_experts_serve)(buf, cnt, ebuf, sizeof ebuf) < 0) {
                out.status = -1;
                out.err_len = (int32_t)strlen(ebuf) + 1;
            }
            out.pid = (int32_t)getpid();
            gethostname(out.host, sizeof out.host - 1);
            MPI_Send(&out, sizeof out, MPI_BYTE, 0, TMPI_TAG_CTRL_REPLY, tmpi_comm);
            if (out.status < 0) MPI_Send(ebuf, out.err_len, MPI_CHAR, 0, TMPI_TAG_CTRL_REPLY, tmpi_comm);
            continue;
        }
        if (op != TMPI_LOAD || cnt < (int)sizeof(tmpi_load)) { /* QUIT (or garbage): stop serving */
            int32_t q[2] = {0, 0};
            if (cnt >= (int)sizeof q) memcpy(q, buf, sizeof q);
            quit_fault = q[1] != 0;
            break;
        }
        tmpi_load ld;
        memcpy(&ld, buf, sizeof ld);
        tmpi_loaded out = {0};
        const char *err = NULL;
        if (ld.path_len < 1 || (int)sizeof ld + ld.path_len != cnt || n_mem == 256) {
            err = "mpi: malformed load request";
        } else {
            char *path = buf + sizeof ld;
            path[ld.path_len] = 0;
            srv_member *s = calloc(1, sizeof *s);
            member_spec spec = {
                .path = path, .n_sessions = ld.n_sessions, .n_ctx = ld.n_ctx, .n_threads = ld.n_threads};
            fusion_member *m = s ? member_open(&spec) : NULL;
            if (!m) {
                if (!s) tutti_set_error("mpi: out of memory");
                free(s);
                err = tutti_last_error();
            } else {
                s->m = m;
                s->tag = TMPI_TAG_MEMBER + n_mem;
                if (pthread_create(&s->th, NULL, srv_member_main, s) != 0) {
                    m->vt->free(m);
                    free(s);
                    err = "mpi: cannot start a member thread";
                } else {
                    out.handle = n_mem;
                    out.n_vocab = m->n_vocab, out.n_ctx = m->n_ctx, out.bos = m->bos;
                    out.pid = (int32_t)getpid();
                    gethostname(out.host, sizeof out.host - 1);
                    mem[n_mem++] = s;
                }
            }
        }
        /* the error text is copied before anything else can overwrite it */
        char ebuf[1024] = "";
        if (err) {
            snprintf(ebuf, sizeof ebuf, "%s", err);
            out.status = -1;
            out.err_len = (int32_t)strlen(ebuf) + 1;
        }
        MPI_Send(&out, sizeof out, MPI_BYTE, 0, TMPI_TAG_CTRL_REPLY, tmpi_comm);
        if (err) MPI_Send(ebuf, out.err_len, MPI_CHAR, 0, TMPI_TAG_CTRL_REPLY, tmpi_comm);
    }
    if (quit_fault) return 1;
    tmpi_serving_join();
    /* rank 0 sent FREE to every member it still held before QUIT */
    for (int i = 0; i < n_mem; i++) {
        pthread_join(mem[i]->th, NULL);
        mem[i]->m->vt->free(mem[i]->m);
        free(mem[i]->mirror);
        free(mem[i]);
    }
    free(buf);
    return 0;
}

/* ---- start / stop ---- */

static bool launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("MPI_LOCALNRANKS");
}

int tutti_mpi_start(int *argc, char **argv) {
    const char *place = NULL;
    int j = 1;
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--place")) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "tutti: --place needs a value (comma-separated ranks, one per member)\n");
                return 2;
            }
            place = argv[++i];
            continue;
        }
        argv[j++] = argv[i];
    }
    *argc = j;
    argv[j] = NULL;
    const char *to = getenv("TUTTI_MPI_TIMEOUT");
    if (to && *to) {
        char *e;
        double v = strtod(to, &e);
        if (*e || !(v > 0)) {
            fprintf(stderr, "tutti: TUTTI_MPI_TIMEOUT=%s: expected a positive number of seconds\n", to);
            return 2;
        }
        g_timeout = v;
    }
    if (launched_by_mpirun()) {
        int provided = 0;
        if (MPI_Init_thread(argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "tutti: mpi: MPI_Init_thread failed\n");
            return 1;
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_dup(MPI_COMM_WORLD, &tmpi_comm);
        MPI_Comm_set_errhandler(tmpi_comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(tmpi_comm, &g_rank);
        MPI_Comm_size(tmpi_comm, &g_size);
        if (provided < MPI_THREAD_MULTIPLE) {
            /* members on different ranks run on rank 0's worker threads at
             * the same time: without MPI_THREAD_MULTIPLE only one rank works */
            if (g_rank == 0)
                fprintf(stderr, "tutti: mpi: this MPI library gives no MPI_THREAD_MULTIPLE; run with "
                                "--parallel 1 (members one after the other)\n");
        }
        if (g_rank != 0) {
            if (serve() != 0) {
                fflush(NULL);
                _exit(1); /* member threads may still wait on rank 0 */
            }
            MPI_Comm_free(&tmpi_comm);
            MPI_Finalize();
            return 0;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigaction(SIGTERM, &sa, NULL);
    }
    if (place && parse_place(place) < 0) {
        tutti_mpi_stop(0);
        return 2;
    }
    register_kinds();
    return -1;
}

int tutti_mpi_stop(int rc) {
    for (int32_t i = 0; i < g_split.n_paths; i++) free(g_split.paths[i]);
    g_split.n_paths = 0;
    if (tmpi_comm == MPI_COMM_NULL || g_rank != 0) return rc;
    if (g_n_req > 0)
        fprintf(stderr,
                "tutti: mpi: %lld requests, %.1f bytes sent and %.1f received per request, mean round trip "
                "%.1f us, at most %d ranks busy at once\n",
                (long long)g_n_req, (double)g_sent / (double)g_n_req, (double)g_recv / (double)g_n_req,
                1e6 * g_rtt / (double)g_n_req, g_busy_max);
    if (g_fault) {
        /* A peer is dead or stuck: MPI_Finalize could wait for it forever.
         * Tell the healthy ranks to leave too (without finalising), then
         * leave; mpirun ends whatever remains. */
        for (int r = 1; r < g_size; r++) {
            if (r < TMPI_MAX_RANKS && g_dead[r]) continue;
            int32_t q[2] = {TMPI_QUIT, 1};
            MPI_Request rq;
            if (MPI_Isend(q, sizeof q, MPI_BYTE, r, TMPI_TAG_CTRL, tmpi_comm, &rq) == MPI_SUCCESS)
                tmpi_wait(&rq, MPI_Wtime() + 2, r, "releasing the rank");
        }
        return rc ? rc : 1;
    }
    /* members the command did not free (error paths): release them */
    tmpi_split_release();
    tmpi_experts_release();
    for (int i = 0; i < g_n_reg; i++) {
        int32_t req[3] = {TMPI_OP_FREE, 0, 0};
        MPI_Send(req, 3, MPI_INT32_T, g_reg[i].rank, g_reg[i].tag, tmpi_comm);
    }
    for (int r = 1; r < g_size; r++) {
        int32_t q[2] = {TMPI_QUIT, 0};
        MPI_Send(q, sizeof q, MPI_BYTE, r, TMPI_TAG_CTRL, tmpi_comm);
    }
    MPI_Comm_free(&tmpi_comm);
    MPI_Finalize();
    return rc;
}
