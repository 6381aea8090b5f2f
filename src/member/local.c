/* Local member: a tutti_model plus a small pool of sessions.
 *
 * The byte alignment asks for logits after many related token sequences
 * (tokenization hypotheses that share long prefixes).  Each request goes to
 * the session whose history shares the longest prefix with it; that session
 * is rewound to the shared prefix and only the new suffix is run.  In TOKEN
 * alignment the pool has one session and every request extends the last one
 * by one token, which is exactly incremental decoding. */
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "member/member.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fastmath.h"

typedef struct local_session {
    tutti_session *s;
    int32_t *hist; /* [cap_hist] the session's timeline (tokens in the KV cache, and with a
                      context shift those it dropped) */
    int32_t n_hist, cap_hist;
    uint64_t last_use;
    bool live; /* holds a sequence of the last keep() hint */
} local_session;

typedef struct local_member {
    fusion_member base;
    tutti_model *model;
    bool owns_model;     /* false: borrowed (fusion_member_local_new_shared) */
    local_session *pool; /* [n_pool], sessions created on first use */
    int32_t n_pool;
    int32_t n_ctx;
    tutti_session_params sp;
    uint64_t clock;
    bool hinted;               /* keep() was called: sessions' live flags are current */
    fusion_local_sessions ops; /* where sessions come from (open NULL: tutti_session_new) */
    tutti_batch *batch;        /* non-NULL: sessions of this batch (borrowed) */
} local_member;

/* Room for n tokens of timeline in ls->hist (a context shift lets a
 * timeline grow past n_ctx). */
static int hist_fit(local_member *lm, local_session *ls, int32_t n) {
    if (n <= ls->cap_hist) return 0;
    int32_t cap = n > 2 * ls->cap_hist ? n : 2 * ls->cap_hist;
    int32_t *h = realloc(ls->hist, sizeof(int32_t) * (size_t)cap);
    if (!h) return tutti_set_error("member %s: out of memory", lm->base.name);
    ls->hist = h, ls->cap_hist = cap;
    return 0;
}

/* The longest prefix of session ls usable for a sequence sharing k tokens
 * with its timeline: k, unless a context shift since then dropped rows
 * that state needs (then nothing: the sequence runs from its start). */
static int32_t usable_prefix(const local_session *ls, int32_t k) {
    return ls->s && k < tutti_session_rewind_floor(ls->s) ? 0 : k;
}

static int ensure_session(local_member *lm, int32_t i) {
    local_session *ls = &lm->pool[i];
    if (ls->s) return 0;
    /* the pool's sessions run one at a time: one thread pool and one set
     * of activations for all (tutti_session_new_sharing) */
    tutti_session *with = NULL;
    for (int32_t j = 0; j < lm->n_pool && !with && !lm->ops.open; j++) with = lm->pool[j].s;
    ls->s = lm->ops.open ? lm->ops.open(lm->ops.ctx, i, lm->model, &lm->sp)
            : lm->batch  ? tutti_session_new_batched(lm->model, &lm->sp, lm->batch)
                         : tutti_session_new_sharing(lm->model, &lm->sp, with);
    if (!ls->s) {
        tutti_error_prefix("member %s", lm->base.name);
        return TUTTI_ERR;
    }
    if (!lm->n_ctx) lm->n_ctx = lm->base.n_ctx = tutti_session_n_ctx(ls->s);
    ls->n_hist = 0;
    return hist_fit(lm, ls, lm->n_ctx);
}

/* The error for a NaN or +inf logit x of token id at position pos. */
static int nonfinite_error(fusion_member *m, float x, int32_t pos, int32_t id) {
    m->err_kind = FUSION_ERR_NONFINITE;
    return tutti_set_error("member %s: logits contain %s at position %d (token id %d): NaN or infinite logits "
                           "mean broken weights or an overflow",
                           m->name, isnan(x) ? "NaN" : "+inf", pos, id);
}

/* Runs ids[k..n) on session i after rewinding it to k. */
static int run_suffix(local_member *lm, int32_t i, const int32_t *ids, int32_t k, int32_t n, float *all) {
    local_session *ls = &lm->pool[i];
    lm->base.err_kind = TUTTI_ERR;
    if (n > lm->n_ctx && !lm->base.ctx_shift) {
        lm->base.err_kind = FUSION_ERR_CTX;
        return tutti_set_error("member %s: context full (%d tokens needed, n_ctx %d)", lm->base.name, n, lm->n_ctx);
    }
    int32_t kept = k;
    if (ls->n_hist > k && (kept = tutti_session_rewind_tokens(ls->s, k)) < 0) return TUTTI_ERR;
    ls->n_hist = kept;
    if (hist_fit(lm, ls, n) < 0) return TUTTI_ERR;
    double t0 = tutti_now_s();
    /* a context shift dropped rows of that state: the tokens before k again, without rows */
    int rc = kept < k ? tutti_session_eval(ls->s, ids + kept, k - kept, NULL) : 0;
    if (rc == 0) rc = tutti_session_eval(ls->s, ids + k, n - k, all);
    lm->base.t_forward_s += tutti_now_s() - t0;
    if (rc < 0) {
        tutti_error_prefix("member %s", lm->base.name);
        return TUTTI_ERR;
    }
    lm->base.n_forward_tokens += n - kept;
    lm->base.n_forward_calls++;
    memcpy(ls->hist + kept, ids + kept, sizeof(int32_t) * (size_t)(n - kept));
    ls->n_hist = n;
    ls->last_use = ++lm->clock;
    ls->live = true; /* a new hypothesis: live until the next hint says otherwise */
    /* NaN or +inf logits (broken weights, an overflow) are an error here,
     * where they come from, as in tutti generate: every alignment, eval and
     * fit would otherwise turn them into silent garbage or an innocent-looking
     * "cannot spell the text".  One vectorised pass per new row. */
    int32_t V = lm->base.n_vocab;
    for (int32_t r = all ? 0 : n - k - 1; r < n - k; r++) {
        const float *row = all ? all + (size_t)r * (size_t)V : tutti_session_logits(ls->s);
        int32_t bad = tutti_first_nonfinite(row, V);
        if (bad >= 0) {
            /* the cache holds positions computed from broken values: forget them */
            tutti_session_rewind(ls->s, 0);
            ls->n_hist = 0;
            return nonfinite_error(&lm->base, row[bad], k + r, bad);
        }
    }
    return 0;
}

/* Session to answer ids[0..n) on: exactly cached (*k = n, then its logits
 * are current), or the cheapest to rewind and extend among those not
 * taken[] (NULL: none taken); -1 when every session is taken.
 *
 * Cost of session i: the tokens to run, plus a price per cached token
 * thrown away by the rewind.  Sessions used recently most likely hold the
 * timeline of a live tokenization hypothesis that will be extended again,
 * so rewinding them costs 32 per token; the least recently used quarter of
 * the pool is probably stale and costs 4.  An unused session costs n.  (A
 * flat price of 4 made two hypotheses that diverge a few tokens back take
 * turns on one session, each replaying its suffix on every byte: about 11
 * tokens per forward pass on stories260K, against 1 now.)
 *
 * With a keep() hint (bytestate.c names its live hypotheses before every
 * batch) the guess is replaced by knowledge: a session holding a live
 * hypothesis costs 32 per token thrown away, any other session nothing,
 * since nothing will extend it (without it, a stale session's timeline was
 * protected as if live and requests were replayed on cold sessions: 3.7
 * tokens per pass on stories260K). */
static int32_t pick_session(const local_member *lm, const int32_t *ids, int32_t n, const bool *taken, int32_t *k_out,
                            int32_t *src_out) {
    int32_t n_cold = lm->n_pool / 4 > 1 ? lm->n_pool / 4 : 1;
    int32_t best = -1, best_k = 0;
    int64_t best_cost = INT64_MAX;
    /* the longest cached prefix of ids in any session (taken ones too: a
     * batch writes only past their own prefixes, after the copies), at most
     * n - 1 tokens: the last one runs to give the logits */
    int32_t src = -1, k_src = 0;
    for (int32_t i = 0; i < lm->n_pool; i++) {
        const local_session *ls = &lm->pool[i];
        if (!ls->s) continue;
        int32_t lim = ls->n_hist < n ? ls->n_hist : n, k = 0;
        while (k < lim && ls->hist[k] == ids[k]) k++;
        if (k == n && ls->n_hist == n && !(taken && taken[i])) {
            *k_out = n, *src_out = -1;
            return i;
        }
        if (k > n - 1) k = n - 1;
        k = usable_prefix(ls, k);
        if (k > k_src) src = i, k_src = k;
    }
    for (int32_t i = 0; i < lm->n_pool; i++) {
        const local_session *ls = &lm->pool[i];
        if (taken && taken[i]) continue;
        int32_t k = 0;
        int64_t cost;
        if (!ls->s) {
            cost = n - k_src;
        } else {
            int32_t lim = ls->n_hist < n ? ls->n_hist : n;
            while (k < lim && ls->hist[k] == ids[k]) k++;
            if (k > n - 1) k = n - 1;
            k = usable_prefix(ls, k);
            int32_t older = 0; /* sessions (unused ones included) used less recently than this one */
            for (int32_t j = 0; j < lm->n_pool; j++) older += !lm->pool[j].s || lm->pool[j].last_use < ls->last_use;
            int64_t price = lm->base.new_generation ? 0 : lm->hinted ? (ls->live ? 32 : 0) : older < n_cold ? 4 : 32;
            cost = (int64_t)(n - k_src) + price * (int64_t)(ls->n_hist - k);
        }
        if (cost < best_cost ||
            (cost == best_cost && ls->s && best >= 0 && lm->pool[best].s && ls->last_use < lm->pool[best].last_use)) {
            best = i, best_k = k, best_cost = cost;
        }
    }
    /* the chosen session starts from the longest prefix: copied when
     * another session holds more of it than its own history */
    *src_out = best >= 0 && src >= 0 && src != best && k_src > best_k ? src : -1;
    *k_out = *src_out >= 0 ? k_src : best_k;
    return best;
}

/* Session dst takes the first k positions of session src's KV cache and
 * history (same model and context size): the cache rows of positions < k
 * are all the state a position >= k depends on, so running the rest on dst
 * gives what running the whole sequence would, without running the prefix
 * again (siblings of a hypothesis each need its timeline, and only one can
 * extend the session that holds it). */
static int copy_prefix(local_member *lm, int32_t dst, int32_t src, int32_t k) {
    if (ensure_session(lm, dst) < 0 || hist_fit(lm, &lm->pool[dst], k) < 0) return TUTTI_ERR;
    tutti_session_copy_tokens(lm->pool[dst].s, lm->pool[src].s, k);
    /* the sessions' state elsewhere (a split model's other layers) follows */
    if (lm->ops.copy && lm->ops.copy(lm->ops.ctx, dst, src, k) < 0) {
        lm->pool[dst].n_hist = 0;
        tutti_error_prefix("member %s", lm->base.name);
        return TUTTI_ERR;
    }
    memcpy(lm->pool[dst].hist, lm->pool[src].hist, sizeof(int32_t) * (size_t)k);
    lm->pool[dst].n_hist = k;
    return 0;
}

/* Session i holds exactly ids[0..n). */
static bool holds(const local_session *ls, const int32_t *ids, int32_t n) {
    return ls->s && ls->n_hist == n && memcmp(ls->hist, ids, sizeof(int32_t) * (size_t)n) == 0;
}

static const float *local_logits_view(fusion_member *m, const int32_t *ids, int32_t n) {
    local_member *lm = (local_member *)m;
    if (n < 1) {
        tutti_set_error("member %s: no token to condition on (the model has no BOS; give a prompt)", m->name);
        return NULL;
    }
    int32_t k = 0, src = -1, best = pick_session(lm, ids, n, NULL, &k, &src);
    m->new_generation = false;
    if (k == n) {
        /* exactly this sequence is cached: its last logits are current */
        lm->pool[best].last_use = ++lm->clock;
        return tutti_session_logits(lm->pool[best].s);
    }
    if (src >= 0 && copy_prefix(lm, best, src, k) < 0) return NULL;
    if (ensure_session(lm, best) < 0 || run_suffix(lm, best, ids, k, n, NULL) < 0) return NULL;
    return tutti_session_logits(lm->pool[best].s);
}

/* Sequences answered by their own session each: the ones already cached
 * first (their sessions are kept out of the assignment), then one session
 * per sequence in order, rewound to the longest shared prefix; all the
 * suffixes then run as one batch (tutti_session_eval_multi). */
static int local_logits_from(fusion_member *m, const int32_t *ids, int32_t n, int32_t from, float *out);

/* Rows of sequence i are wanted (logits_batch_from). */
#define WANTS_ROWS(i) (out && out[i])

static int32_t local_logits_batch_from(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n,
                                       const int32_t *from, float *const *out, const float **rows) {
    local_member *lm = (local_member *)m;
    lm->base.err_kind = TUTTI_ERR;
    if (n_seq < 1) return tutti_set_error("member %s: empty batch", m->name);
    if (out && !from) return tutti_set_error("member %s: rows asked for without their start", m->name);
    if (n_seq == 1 && WANTS_ROWS(0)) {
        if (local_logits_from(m, ids[0], n[0], from[0], out[0]) < 0) return TUTTI_ERR;
        rows[0] = out[0] + (size_t)(n[0] - from[0] - 1) * (size_t)m->n_vocab;
        return 1;
    }
    if (n_seq == 1) {
        rows[0] = local_logits_view(m, ids[0], n[0]);
        return rows[0] ? 1 : TUTTI_ERR;
    }
    bool taken_stack[64];
    int32_t pick_stack[64], k_stack[64];
    bool *taken = lm->n_pool <= 64 ? taken_stack : calloc((size_t)lm->n_pool, sizeof(bool));
    int32_t *pick = n_seq <= 64 ? pick_stack : malloc(sizeof(int32_t) * (size_t)n_seq * 2);
    int32_t *kk = n_seq <= 64 ? k_stack : pick ? pick + n_seq : NULL;
    tutti_session **ss = malloc(sizeof(tutti_session *) * (size_t)n_seq);
    const int32_t **sid = malloc(sizeof(int32_t *) * (size_t)n_seq);
    int32_t *sn = malloc(sizeof(int32_t) * (size_t)n_seq);
    /* rows: into out[i] when the run starts at from[i], else through scratch */
    float **so = calloc((size_t)n_seq, sizeof(float *)), **scr = calloc((size_t)n_seq, sizeof(float *));
    int32_t done = TUTTI_ERR;
    if (!taken || !pick || !kk || !ss || !sid || !sn || !so || !scr) {
        tutti_set_error("member %s: out of memory", m->name);
        goto out;
    }
    if (taken == taken_stack) memset(taken, 0, sizeof taken_stack);
    for (int32_t i = 0; i < n_seq; i++) {
        if (n[i] < 1) {
            tutti_set_error("member %s: no token to condition on (the model has no BOS; give a prompt)", m->name);
            goto out;
        }
        if (n[i] > lm->n_ctx && !lm->base.ctx_shift) {
            lm->base.err_kind = FUSION_ERR_CTX;
            tutti_set_error("member %s: context full (%d tokens needed, n_ctx %d)", m->name, n[i], lm->n_ctx);
            goto out;
        }
        if (WANTS_ROWS(i) && (from[i] < 0 || from[i] >= n[i])) {
            tutti_set_error("member %s: no rows asked for", m->name);
            goto out;
        }
        pick[i] = -1;
        for (int32_t j = 0; j < lm->n_pool && pick[i] < 0 && !WANTS_ROWS(i); j++)
            if (!taken[j] && holds(&lm->pool[j], ids[i], n[i])) pick[i] = j, kk[i] = n[i], taken[j] = true;
    }
    int32_t n_run = 0, answered = 0;
    for (; answered < n_seq; answered++) {
        int32_t i = answered;
        if (pick[i] < 0) {
            int32_t src = -1;
            pick[i] = pick_session(lm, ids[i], n[i], taken, &kk[i], &src);
            if (pick[i] < 0) break; /* every session is taken: the rest next call */
            taken[pick[i]] = true;
            if (ensure_session(lm, pick[i]) < 0) goto out;
            if (src >= 0 && copy_prefix(lm, pick[i], src, kk[i]) < 0) goto out;
            if (WANTS_ROWS(i) && kk[i] > from[i]) kk[i] = from[i]; /* the rows before it are not kept */
        }
        local_session *ls = &lm->pool[pick[i]];
        ls->last_use = ++lm->clock;
        if (kk[i] == n[i]) continue;
        if (ls->n_hist > kk[i] && (kk[i] = tutti_session_rewind_tokens(ls->s, kk[i])) < 0) goto out;
        ls->n_hist = kk[i];
        if (hist_fit(lm, ls, n[i]) < 0) goto out;
        ss[n_run] = ls->s, sid[n_run] = ids[i] + kk[i], sn[n_run] = n[i] - kk[i];
        if (WANTS_ROWS(i)) {
            if (kk[i] < from[i] && !(scr[i] = malloc(sizeof(float) * (size_t)(n[i] - kk[i]) * (size_t)m->n_vocab))) {
                tutti_set_error("member %s: out of memory", m->name);
                goto out;
            }
            so[n_run] = scr[i] ? scr[i] : out[i];
        }
        n_run++;
    }
    if (n_run) {
        double t0 = tutti_now_s();
        int rc = tutti_session_eval_multi_rows(ss, sid, sn, so, n_run);
        lm->base.t_forward_s += tutti_now_s() - t0;
        if (rc < 0) {
            /* whatever ran is not in hist: back to the prefixes hist holds */
            for (int32_t i = 0; i < answered; i++) {
                local_session *ls = &lm->pool[pick[i]];
                if (kk[i] < n[i] && tutti_session_n_tokens(ls->s) > kk[i]) {
                    int32_t kept = tutti_session_rewind_tokens(ls->s, kk[i]);
                    ls->n_hist = kept > 0 ? kept : 0;
                }
            }
            tutti_error_prefix("member %s", m->name);
            goto out;
        }
        lm->base.n_forward_calls += rc;
    }
    m->new_generation = false;
    for (int32_t i = 0; i < answered; i++) {
        local_session *ls = &lm->pool[pick[i]];
        if (kk[i] < n[i]) {
            memcpy(ls->hist + kk[i], ids[i] + kk[i], sizeof(int32_t) * (size_t)(n[i] - kk[i]));
            ls->n_hist = n[i];
            ls->live = true;
            lm->base.n_forward_tokens += n[i] - kk[i];
        }
        rows[i] = tutti_session_logits(ls->s);
        int32_t bad = -1, V = m->n_vocab;
        if (WANTS_ROWS(i)) { /* the rows from from[i] on (from scratch when the run began earlier) */
            size_t nr = (size_t)(n[i] - from[i]);
            if (scr[i]) memcpy(out[i], scr[i] + (size_t)(from[i] - kk[i]) * (size_t)V, sizeof(float) * nr * (size_t)V);
            for (size_t r = 0; r + 1 < nr && bad < 0; r++) bad = tutti_first_nonfinite(out[i] + r * (size_t)V, V);
        }
        /* NaN or +inf logits are an error where they come from (as run_suffix) */
        if (bad < 0) bad = tutti_first_nonfinite(rows[i], m->n_vocab);
        if (bad >= 0) {
            for (int32_t j = 0; j < answered; j++) { /* forget positions computed from broken values */
                tutti_session_rewind(lm->pool[pick[j]].s, 0);
                lm->pool[pick[j]].n_hist = 0;
            }
            nonfinite_error(m, rows[i][bad], n[i] - 1, bad);
            goto out;
        }
    }
    done = answered;
out:
    if (taken != taken_stack) free(taken);
    if (pick != pick_stack) free(pick);
    free(ss), free(sid), free(sn), free(so);
    for (int32_t i = 0; scr && i < n_seq; i++) free(scr[i]);
    free(scr);
    return done;
}
#undef WANTS_ROWS

static int32_t local_logits_batch(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n,
                                  const float **rows) {
    return local_logits_batch_from(m, n_seq, ids, n, NULL, NULL, rows);
}

void fusion_member_local_keep(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n) {
    if (m && m->keep) m->keep(m, n_seq, ids, n);
}

static void local_keep(fusion_member *m, int32_t n_seq, const int32_t *const *ids, const int32_t *n) {
    local_member *lm = (local_member *)m;
    for (int32_t j = 0; j < lm->n_pool; j++) {
        local_session *ls = &lm->pool[j];
        ls->live = false;
        for (int32_t i = 0; i < n_seq && !ls->live; i++) ls->live = holds(ls, ids[i], n[i]);
    }
    lm->hinted = true;
}

static int local_logits(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    const float *z = local_logits_view(m, ids, n);
    if (!z) return TUTTI_ERR;
    memcpy(out, z, sizeof(float) * (size_t)m->n_vocab);
    return 0;
}

static int local_logits_all(fusion_member *m, const int32_t *ids, int32_t n, float *out) {
    local_member *lm = (local_member *)m;
    /* the least recently used session, so hypothesis caches stay warm */
    int32_t best = 0;
    for (int32_t i = 1; i < lm->n_pool; i++)
        if (!lm->pool[i].s || (lm->pool[best].s && lm->pool[i].last_use < lm->pool[best].last_use)) best = i;
    if (ensure_session(lm, best) < 0) return TUTTI_ERR;
    return run_suffix(lm, best, ids, 0, n, out);
}

/* Rows from `from` on of the timeline ids[0..n): the session holding the
 * longest prefix runs only the rest, from `from` at the latest (the rows
 * before its end are not kept, so they are computed again).  The prefix
 * before `from` that no session holds costs a pass of its own. */
static int local_logits_from(fusion_member *m, const int32_t *ids, int32_t n, int32_t from, float *out) {
    local_member *lm = (local_member *)m;
    lm->base.err_kind = TUTTI_ERR;
    if (from < 0 || from >= n) return tutti_set_error("member %s: no rows asked for", m->name);
    int32_t k = 0, src = -1, best = pick_session(lm, ids, n, NULL, &k, &src);
    if (best < 0) return tutti_set_error("member %s: no session", m->name);
    if (k > from) k = from;
    if (ensure_session(lm, best) < 0) return TUTTI_ERR;
    if (src >= 0 && k > 0 && copy_prefix(lm, best, src, k) < 0) return TUTTI_ERR;
    if (k < from && run_suffix(lm, best, ids, k, from, NULL) < 0) return TUTTI_ERR;
    m->new_generation = false;
    return run_suffix(lm, best, ids, from, n, out);
}

/* The sessions are made again with the shift on (a member turns it on
 * before its first request, so nothing cached is lost). */
static int local_set_ctx_shift(fusion_member *m, int32_t n_keep) {
    local_member *lm = (local_member *)m;
    lm->sp.ctx_shift = true;
    lm->sp.n_keep = (m->bos >= 0 ? 1 : 0) + (n_keep > 0 ? n_keep : 0);
    for (int32_t i = 0; i < lm->n_pool; i++) {
        tutti_session_free(lm->pool[i].s);
        lm->pool[i].s = NULL;
        lm->pool[i].n_hist = 0;
    }
    if (ensure_session(lm, 0) < 0) return TUTTI_ERR;
    m->ctx_shift = true;
    return 0;
}

static void local_free(fusion_member *m) {
    local_member *lm = (local_member *)m;
    if (!lm) return;
    for (int32_t i = 0; i < lm->n_pool; i++) {
        tutti_session_free(lm->pool[i].s);
        free(lm->pool[i].hist);
    }
    free(lm->pool);
    if (lm->ops.release) lm->ops.release(lm->ops.ctx); /* after the sessions, which hold what ctx shares */
    if (lm->owns_model) tutti_model_free(lm->model);
    free(lm);
}

static const fusion_member_vt local_vt = {local_logits,      local_logits_all,   local_free,
                                          local_logits_view, local_logits_batch, local_logits_from};

static fusion_member *local_new(const char *path, const tutti_model *model, int32_t n_sessions, int32_t n_ctx,
                                int32_t n_threads, const fusion_local_sessions *ops);

fusion_member *fusion_member_local_new(const char *path, int32_t n_sessions, int32_t n_ctx, int32_t n_threads) {
    return local_new(path, NULL, n_sessions, n_ctx, n_threads, NULL);
}

fusion_member *fusion_member_local_new_shared(const char *path, const tutti_model *model, int32_t n_sessions,
                                              int32_t n_ctx, int32_t n_threads) {
    return local_new(path, model, n_sessions, n_ctx, n_threads, NULL);
}

fusion_member *fusion_member_local_new_sessions(const char *path, const tutti_model *model, int32_t n_sessions,
                                                int32_t n_ctx, int32_t n_threads, const fusion_local_sessions *ops) {
    if (!ops || !ops->open) return tutti_set_error("member %s: no session source", path), NULL;
    return local_new(path, model, n_sessions, n_ctx, n_threads, ops);
}

static fusion_member *local_new(const char *path, const tutti_model *model, int32_t n_sessions, int32_t n_ctx,
                                int32_t n_threads, const fusion_local_sessions *ops) {
    uint64_t h = 0;
    const bool hashed = fusion_vocab_hash_file(path, &h) == 0;
    local_member *lm = hashed ? calloc(1, sizeof *lm) : NULL;
    if (!lm) {
        if (ops && ops->release) ops->release(ops->ctx);
        if (hashed) tutti_set_error("member %s: out of memory", path);
        return NULL;
    }
    if (ops) lm->ops = *ops; /* from here on local_free releases ops.ctx */
    lm->base.vt = &local_vt;
    lm->base.keep = local_keep;
    lm->base.logits_batch_from = local_logits_batch_from;
    if (!ops || ops->can_shift)
        lm->base.set_ctx_shift = local_set_ctx_shift; /* a split model's sessions cannot shift */
    const char *slash = strrchr(path, '/');
    snprintf(lm->base.name, sizeof lm->base.name, "%s", slash ? slash + 1 : path);
    lm->base.vocab_hash = h;
    tutti_model_params mp = tutti_model_default_params();
    /* a shared model is only read (the sessions hold all mutable state) */
    lm->owns_model = model == NULL;
    lm->model = model          ? (tutti_model *)(uintptr_t)model
                : lm->ops.load ? lm->ops.load(path, &mp)
                               : tutti_model_load(path, &mp);
    if (!lm->model) {
        if (lm->ops.release) lm->ops.release(lm->ops.ctx);
        free(lm);
        return NULL;
    }
    lm->base.vocab = tutti_model_vocab(lm->model);
    lm->base.n_vocab = tutti_model_n_vocab(lm->model);
    lm->base.bos = lm->base.vocab && tutti_vocab_add_bos(lm->base.vocab) ? tutti_vocab_bos(lm->base.vocab) : -1;
    if (!lm->base.vocab) {
        local_free(&lm->base);
        tutti_set_error("model %s: has no usable tokenizer", path);
        return NULL;
    }
    lm->sp = tutti_session_default_params();
    lm->sp.n_ctx = n_ctx;
    lm->sp.n_threads = n_threads;
    lm->n_pool = n_sessions < 1 ? 1 : n_sessions;
    lm->pool = calloc((size_t)lm->n_pool, sizeof(local_session));
    if (!lm->pool || ensure_session(lm, 0) < 0) {
        if (!lm->pool) tutti_set_error("member %s: out of memory", path);
        local_free(&lm->base);
        return NULL;
    }
    return &lm->base;
}

tutti_model *fusion_member_local_model(fusion_member *m) {
    return m && m->vt == &local_vt ? ((local_member *)m)->model : NULL;
}

/* sessions are recreated on first use with the new settings */
static int renew_sessions(local_member *lm) {
    for (int32_t i = 0; i < lm->n_pool; i++) {
        tutti_session_free(lm->pool[i].s);
        free(lm->pool[i].hist);
        lm->pool[i] = (local_session){0};
    }
    return ensure_session(lm, 0);
}

int fusion_member_local_set_threads(fusion_member *m, int32_t n_threads) {
    if (!fusion_member_local_model(m)) return tutti_set_error("member %s: not local", m->name);
    local_member *lm = (local_member *)m;
    if (lm->sp.n_threads == n_threads) return 0;
    lm->sp.n_threads = n_threads;
    return renew_sessions(lm);
}

int fusion_member_local_set_batch(fusion_member *m, tutti_batch *batch) {
    if (!fusion_member_local_model(m)) return tutti_set_error("member %s: not local", m->name);
    local_member *lm = (local_member *)m;
    if (lm->batch == batch || lm->ops.open) return 0; /* sessions from elsewhere (a split model) run their own */
    lm->batch = batch;
    return renew_sessions(lm);
}
