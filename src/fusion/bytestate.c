/* Exact next-byte distribution of one member given the committed bytes.
 *
 * The member's byte view is v = prefix · text (prefix = " " for SPM with
 * add_space_prefix).  A hypothesis h is a token path t_1..t_k whose bytes
 * are a prefix v[0..pos) of v, with its probability P(h) = Π p(t_j | t_<j),
 * and "pending" bytes v[pos..|v|) that the next token must start with (the
 * trie node of those bytes is kept).  The covers of v (token sequences whose
 * last token crosses or reaches the end of v, all earlier tokens inside v)
 * are exactly the hypotheses extended by one token whose bytes start with
 * the pending bytes, so
 *
 *   P(v·b)   ∝ Σ_h P(h) Σ_{t : bytes(t) starts with pending(h)·b} p(t | h)
 *   P(v·END) ∝ Σ_{h : pos = |v|} P(h) Σ_{t EOG} p(t | h)
 *
 * (Phan et al. 2024; ByteSampler, Hayase et al. 2025).  Each inner sum is
 * the mass of one range of the byte-sorted vocabulary (bytetrie.c): a
 * hypothesis keeps its next-token probabilities in trie order plus their
 * cumulative sums per block of PBLK tokens, so a range costs one
 * difference of block sums and at most 2·PBLK additions.
 *
 * Committing byte b moves every hypothesis to the child node b (dropping
 * those without one); tokens that end exactly at the new byte spawn new
 * hypotheses at pos = |v|+1, which need the member's next-token
 * distribution: that forward pass is the only model work, and it happens
 * only when committed bytes complete a token.  Hypotheses whose share of the
 * live mass falls below `prune`, and all but the `max_hyps` heaviest, are
 * dropped (the result is exact when nothing is dropped; fusion_bytes_pruned
 * reports the dropped share).  Zero-length tokens (control tokens) are not
 * text: their mass is left out and the 257 outcomes renormalised.
 *
 * Lazy evaluation (p.lazy, prune > 0).  A hypothesis whose share of the
 * live mass (P(h) times the mass of the tokens that can still continue its
 * pending bytes; all of P(h) for one that needs a pass) is below prune is
 * "deferred": prepare runs no pass for it and fusion_bytes_next leaves it
 * out (its contribution to any outcome is below prune, the pruning
 * tolerance).  The next commit drops it, as pruning would drop what it
 * spawns, unless no evaluated hypothesis ends a token at the committed
 * byte: then it is evaluated (the boundary hypothesis that must be kept,
 * see commit), and so is every deferred one when fusion_bytes_resolve is
 * called (the alignment does when the drawn byte has probability 0 without
 * them).  Such hypotheses are mostly the kept boundary hypotheses of
 * tokens inside the canonical token ("▁t" while "▁time" is being spelled):
 * measured, they caused a forward pass on nearly every committed byte. */
/* FP exception flags are never read here; without trapping math GCC
 * if-converts the clamps in fusion_fast_exp and vectorises the loops over
 * the vocabulary (measured: several times faster on 151,669 tokens). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "util/error.h"

typedef struct hyp {
    int32_t *ids; /* token path (BOS first when the vocabulary uses it) */
    int32_t n_ids;
    int32_t pos;      /* byte offset in the view where the next token starts */
    int32_t node;     /* trie node of the pending bytes view[pos..n_view); -1: stale (see commit) */
    double logp;      /* log P(path), relative (the maximum is kept near 0) */
    double *dist;     /* next-token distribution, NULL = not evaluated: bc[n_blocks+1] (cumulative
                       block sums, double) followed by ps[n_sorted] (float), both unnormalised
                       in trie order; see prepare */
    double inv_total; /* 1 / Σ over the whole vocabulary of the unnormalised probabilities */
    double p_eog;     /* next-token probability of end-of-generation tokens */
    /* A distribution computed ahead (speculation, a window of known text),
     * as dist; it becomes dist only when the rule selects h for evaluation
     * (prepare), so which hypotheses are evaluated never depends on what
     * was computed ahead, and the distributions (and a greedy text) are
     * those of a run that computed nothing ahead.  Otherwise a light
     * hypothesis with a free distribution would count while it is deferred
     * in that run: a difference below the pruning share, but enough to
     * change a near tie, and a drafted run (align_byte.c) computes other
     * things ahead than a plain one. */
    double *pre;
    double pre_inv, pre_eog;
} hyp;

/* A speculative evaluation (lazy mode): the distribution after a live
 * hypothesis's path plus one token that ends inside the guessed
 * continuation, computed in a pass that ran anyway; commit takes it when
 * that hypothesis is spawned. */
typedef struct spec {
    int32_t *ids;
    int32_t n_ids;
    double *dist;
    double inv_total, p_eog;
} spec;

#define SPEC_MAX FUSION_SPEC_MAX /* cached speculative distributions */
#define SPEC_BATCH 4             /* added to one pass at most */

/* Known text ahead (fusion_bytes_expect): the canonical token path of the
 * text, and the distributions after its prefixes P[0..lo), ...,
 * P[0..lo+n_dist) computed in one pass per window.  A hypothesis whose path
 * is one of those prefixes takes its distribution from here.  Without it,
 * a prompt or an eval text costs one pass per token boundary (measured:
 * every canonical boundary of the prompt, one at a time). */
#define AHEAD_MAX 64 /* distributions per window at most */
typedef struct ahead {
    int32_t *ids, n; /* the path P (NULL: none) */
    int32_t lo, n_dist, window;
    double *dist[AHEAD_MAX]; /* NULL once taken */
    double inv_total[AHEAD_MAX], p_eog[AHEAD_MAX];
    float *rows; /* [window][n_vocab] scratch of the last fetch */
} ahead;

/* A hypothesis after a commit, by its effective mass (commit's pruning). */
typedef struct ranked {
    double mass;
    int32_t i;
} ranked;

/* commit's scratch, kept with the state and grown as hypotheses multiply
 * (not allocated per committed byte) */
typedef struct commit_scratch {
    double *eff; /* [cap] effective mass of hypothesis i after the byte, -1 = none */
    ranked *rk;  /* [cap] the hypotheses kept, by mass */
    bool *keep;  /* [cap] */
    int32_t cap;
} commit_scratch;

struct fusion_bytes {
    fusion_member *m;
    const fusion_trie *trie;
    fusion_bytes_params p;
    char *view;
    int32_t n_view, cap_view;
    hyp *h;
    int32_t n_h, cap_h;
    double **spare; /* recycled dist buffers */
    int32_t n_spare, cap_spare;
    float *logits; /* [n_vocab] scratch for members that cannot lend their logits */
    double pruned;
    double shift; /* Σ of what commit took off the log-probabilities (log P(path) = logp + shift) */
    int32_t bos;
    int32_t n_prefix; /* view bytes before the text (the tokenizer's prefix; 0 after a token-id prompt) */
    /* a state kept by the member elsewhere (fusion_member_vt.bytes_ops):
     * every call below goes there */
    const fusion_bytes_ops *ops;
    void *ops_ctx;
    spec sp[SPEC_MAX];
    int32_t n_sp;
    int64_t n_spec_run, n_spec_used; /* statistics */
    ahead ah;
    commit_scratch cs;
};
#define REMOTE(call)                     \
    do {                                 \
        if (s->ops) return s->ops->call; \
    } while (0)

#define PBLK 32 /* tokens per block of the cumulative sums */

static inline int32_t n_blocks(const fusion_trie *t) { return (t->n_sorted + PBLK - 1) / PBLK; }
static inline size_t dist_doubles(const fusion_trie *t) {
    return (size_t)n_blocks(t) + 1 + ((size_t)t->n_sorted + 1) / 2;
}
static inline const float *dist_ps(const fusion_trie *t, const double *dist) {
    return (const float *)(dist + n_blocks(t) + 1);
}

/* Probability of the sorted tokens [lo, hi) under hypothesis h's
 * next-token distribution.  Whole blocks come from the double cumulative
 * sums (exact to ~1e-16 of the total), the ends are summed directly, so a
 * small range keeps its own relative precision (~1e-7). */
static double range_mass(const fusion_trie *t, const hyp *h, int32_t lo, int32_t hi) {
    if (hi <= lo) return 0.0;
    const double *bc = h->dist;
    const float *ps = dist_ps(t, h->dist);
    int32_t b0 = (lo + PBLK - 1) / PBLK, b1 = hi / PBLK; /* whole blocks [b0, b1) */
    double s = 0.0;
    if (b0 >= b1) {
        for (int32_t r = lo; r < hi; r++) s += ps[r];
    } else {
        s = bc[b1] - bc[b0];
        for (int32_t r = lo; r < b0 * PBLK; r++) s += ps[r];
        for (int32_t r = b1 * PBLK; r < hi; r++) s += ps[r];
    }
    return s * h->inv_total;
}

/* Fills dist from raw logits z at temperature 1/inv: ps[r] =
 * exp(z[sorted[r]]·inv - max), block cumulative sums, and returns the sum
 * over the whole vocabulary (tokens outside the table included: the
 * distribution is the model's, not renormalised over text tokens); *eog
 * receives the unnormalised end-of-generation mass.  One max pass over the
 * logits and one gather + exp pass over the table. */
TUTTI_VEC_CLONES
static double dist_fill(const fusion_trie *t, const float *z, float inv, double *dist, double *eog) {
    double *bc = dist;
    float *ps = (float *)(dist + n_blocks(t) + 1);
    const int32_t *sorted = t->sorted;
    int32_t ns = t->n_sorted, nb = n_blocks(t);
    float mx = tutti_vec_max(z, t->n_vocab) * inv; /* inv > 0 */
    if (!(mx > -INFINITY)) mx = 0.0f;              /* every logit -inf: all masses 0 */
    /* gather (scalar) and exp (vectorised) as separate loops, block by
     * block while the block is in L1: together they would not vectorise */
    for (int32_t r0 = 0; r0 < ns; r0 += 1024) {
        int32_t r1 = r0 + 1024 < ns ? r0 + 1024 : ns;
        for (int32_t r = r0; r < r1; r++) ps[r] = z[sorted[r]];
        for (int32_t r = r0; r < r1; r++) ps[r] = tutti_fast_exp(ps[r] * inv - mx);
    }
    double acc = 0.0;
    bc[0] = 0.0;
    for (int32_t b = 0; b < nb; b++) {
        int32_t r0 = b * PBLK;
        float bs = 0.0f;
        if (r0 + PBLK <= ns) {
            float a[16] = {0};
            for (int j = 0; j < PBLK; j += 16)
                for (int k = 0; k < 16; k++) a[k] += ps[r0 + j + k];
            for (int k = 0; k < 16; k++) bs += a[k];
        } else {
            for (int32_t r = r0; r < ns; r++) bs += ps[r];
        }
        acc += bs;
        bc[b + 1] = acc;
    }
    for (int32_t k = 0; k < t->n_unsorted; k++) acc += tutti_fast_exp(z[t->unsorted[k]] * inv - mx);
    double pe = 0.0;
    for (int32_t k = 0; k < t->n_eog; k++) pe += tutti_fast_exp(z[t->eog_ids[k]] * inv - mx);
    *eog = pe;
    return acc;
}

static void put_dist(fusion_bytes *s, double *c) {
    if (!c) return;
    if (s->n_spare == s->cap_spare) {
        int32_t nc = s->cap_spare ? s->cap_spare * 2 : 8;
        double **ns = realloc(s->spare, sizeof(double *) * (size_t)nc);
        if (!ns) {
            free(c);
            return;
        }
        s->spare = ns, s->cap_spare = nc;
    }
    s->spare[s->n_spare++] = c;
}

static double *get_dist(fusion_bytes *s) {
    if (s->n_spare) return s->spare[--s->n_spare];
    return malloc(sizeof(double) * dist_doubles(s->trie));
}

static void hyp_drop(fusion_bytes *s, hyp *h) {
    free(h->ids);
    put_dist(s, h->dist);
    put_dist(s, h->pre);
    memset(h, 0, sizeof *h);
}

static void spec_drop(fusion_bytes *s, int32_t k) {
    free(s->sp[k].ids);
    put_dist(s, s->sp[k].dist);
    s->sp[k] = s->sp[--s->n_sp];
    memset(&s->sp[s->n_sp], 0, sizeof(spec));
}

static void ahead_drop_window(fusion_bytes *s) {
    for (int32_t k = 0; k < s->ah.n_dist; k++) put_dist(s, s->ah.dist[k]), s->ah.dist[k] = NULL;
    s->ah.n_dist = 0;
}

static void ahead_clear(fusion_bytes *s) {
    ahead_drop_window(s);
    free(s->ah.ids);
    s->ah.ids = NULL;
    s->ah.n = 0;
}

static void clear_hyps(fusion_bytes *s) {
    for (int32_t i = 0; i < s->n_h; i++) hyp_drop(s, &s->h[i]);
    s->n_h = 0;
    while (s->n_sp) spec_drop(s, s->n_sp - 1);
    ahead_clear(s);
}

static bool same_path(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    return na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na);
}

/* A hypothesis just spawned takes its speculative distribution, if any
 * (as h->pre: see hyp). */
static void spec_take(fusion_bytes *s, hyp *h) {
    if (h->dist || h->pre) return;
    for (int32_t k = 0; k < s->n_sp; k++)
        if (same_path(s->sp[k].ids, s->sp[k].n_ids, h->ids, h->n_ids)) {
            h->pre = s->sp[k].dist, h->pre_inv = s->sp[k].inv_total, h->pre_eog = s->sp[k].p_eog;
            s->sp[k].dist = NULL;
            spec_drop(s, k);
            s->n_spec_used++;
            return;
        }
}

void fusion_bytes_free(fusion_bytes *s) {
    if (!s) return;
    if (s->ops) {
        s->ops->free(s->ops_ctx);
        free(s);
        return;
    }
    clear_hyps(s);
    free(s->ah.rows);
    for (int32_t i = 0; i < s->n_spare; i++) free(s->spare[i]);
    free(s->spare);
    free(s->h);
    free(s->view);
    free(s->logits);
    free(s->cs.eff), free(s->cs.rk), free(s->cs.keep);
    free(s);
}

fusion_bytes *fusion_bytes_new(fusion_member *m, const fusion_trie *trie, const fusion_bytes_params *p) {
    fusion_bytes *s = calloc(1, sizeof *s);
    if (!s) return tutti_set_error("byte alignment: out of memory"), NULL;
    if (m->bytes_ops) {
        s->ops = m->bytes_ops;
        if (!(s->ops_ctx = s->ops->open(m, p))) free(s), s = NULL;
        return s;
    }
    s->m = m;
    s->trie = trie;
    s->p = *p;
    if (!(s->p.temp > 0)) s->p.temp = 1.0f;
    if (s->p.max_hyps < 1) s->p.max_hyps = 1;
    s->logits = malloc(sizeof(float) * (size_t)m->n_vocab);
    s->cap_view = 256;
    s->view = malloc((size_t)s->cap_view);
    if (!s->logits || !s->view) {
        fusion_bytes_free(s);
        return tutti_set_error("byte alignment: out of memory"), NULL;
    }
    s->bos = m->bos;
    if (trie->n_vocab != m->n_vocab) {
        fusion_bytes_free(s);
        tutti_set_error("member %s: vocabulary has %d tokens but the model gives %d logits", m->name, trie->n_vocab,
                        m->n_vocab);
        return NULL;
    }
    return s;
}

/* Room for one more hypothesis at s->h[s->n_h]. */
static int grow_hyps(fusion_bytes *s) {
    if (s->n_h < s->cap_h) return 0;
    int32_t nc = s->cap_h ? s->cap_h * 2 : 16;
    hyp *nh = realloc(s->h, sizeof(hyp) * (size_t)nc);
    if (!nh) return tutti_set_error("byte alignment: out of memory");
    s->h = nh, s->cap_h = nc;
    return 0;
}

static int push_hyp(fusion_bytes *s, const int32_t *ids, int32_t n_ids, int32_t extra, int32_t pos, int32_t node,
                    double logp) {
    if (grow_hyps(s) < 0) return TUTTI_ERR;
    hyp *h = &s->h[s->n_h];
    memset(h, 0, sizeof *h);
    h->ids = malloc(sizeof(int32_t) * (size_t)(n_ids + 1));
    if (!h->ids) return tutti_set_error("byte alignment: out of memory");
    if (n_ids) memcpy(h->ids, ids, sizeof(int32_t) * (size_t)n_ids);
    h->n_ids = n_ids;
    if (extra >= 0) h->ids[h->n_ids++] = extra;
    h->pos = pos;
    h->node = node;
    h->logp = logp;
    s->n_h++;
    return 0;
}

static int view_push(fusion_bytes *s, uint8_t b) {
    if (s->n_view == s->cap_view) {
        int32_t nc = s->cap_view * 2;
        char *nv = realloc(s->view, (size_t)nc);
        if (!nv) return tutti_set_error("byte alignment: out of memory");
        s->view = nv, s->cap_view = nc;
    }
    s->view[s->n_view++] = (char)b;
    return 0;
}

static int hyp_fill(fusion_bytes *s, hyp *h, const float *z) {
    double *d = get_dist(s);
    if (!d) return tutti_set_error("byte alignment: out of memory");
    double pe, total = dist_fill(s->trie, z, 1.0f / s->p.temp, d, &pe);
    h->dist = d;
    h->inv_total = total > 0 ? 1.0 / total : 0.0;
    h->p_eog = pe * h->inv_total;
    return 0;
}

/* The path of h is P[0..n_ids) (a stale hypothesis never is: its
 * distribution would not be all it needs). */
static bool ahead_match(const fusion_bytes *s, const hyp *h) {
    return s->ah.ids && h->node >= 0 && h->n_ids >= 1 && h->n_ids <= s->ah.n &&
           !memcmp(h->ids, s->ah.ids, sizeof(int32_t) * (size_t)h->n_ids);
}

/* h takes its distribution from the window, if there (as h->pre: see hyp). */
static void ahead_take(fusion_bytes *s, hyp *h) {
    if (h->dist || h->pre || !ahead_match(s, h)) return;
    int32_t k = h->n_ids - s->ah.lo;
    if (k < 0 || k >= s->ah.n_dist || !s->ah.dist[k]) return;
    h->pre = s->ah.dist[k], h->pre_inv = s->ah.inv_total[k], h->pre_eog = s->ah.p_eog[k];
    s->ah.dist[k] = NULL;
}

/* h, selected for evaluation, takes what was computed ahead for it: true
 * if there was something. */
static bool take_pre(fusion_bytes *s, hyp *h) {
    if (!h->pre) ahead_take(s, h);
    if (!h->pre) return false;
    h->dist = h->pre, h->inv_total = h->pre_inv, h->p_eog = h->pre_eog;
    h->pre = NULL;
    return true;
}

/* A new window from h's path on (h matches P, outside the window): the
 * distributions after P[0..L) for L = |h| .. |h| + window - 1 in one call.
 * Fails only as the member's pass fails; no window is no error. */
/* With other[0..n_other) (hypotheses selected for evaluation off the
 * known path), when the member takes both in one call (logits_batch_from):
 * their distributions come in the same pass, as many as it answers (a
 * drafted round's first step may need both: the window and a boundary of
 * another tokenization of the text). */
static int ahead_fetch(fusion_bytes *s, hyp *h, const int32_t *other, int32_t n_other) {
    ahead *a = &s->ah;
    int32_t L = h->n_ids, end = L + a->window - 1 < a->n ? L + a->window - 1 : a->n; /* lengths [L, end] */
    if (s->m->n_ctx > 0 && !fusion_member_fits(s->m, end)) end = s->m->n_ctx;
    if (end < L) return 0;
    ahead_drop_window(s);
    if (n_other > 0 && s->m->logits_batch_from) {
        enum { MAX_ONE = 17 }; /* sequences in the call at most */
        int32_t k = 1, n[MAX_ONE], from[MAX_ONE] = {L - 1};
        const int32_t *ids[MAX_ONE] = {a->ids};
        float *out[MAX_ONE] = {a->rows};
        const float *rows[MAX_ONE];
        n[0] = end;
        for (int32_t j = 0; j < n_other && k < MAX_ONE; j++) ids[k] = s->h[other[j]].ids, n[k++] = s->h[other[j]].n_ids;
        int32_t got = s->m->logits_batch_from(s->m, k, ids, n, from, out, rows);
        if (got < 1) return s->m->err_kind < 0 ? s->m->err_kind : TUTTI_ERR;
        for (int32_t j = 1; j < got; j++)
            if (hyp_fill(s, &s->h[other[j - 1]], rows[j]) < 0) return TUTTI_ERR;
    } else if (s->m->vt->logits_from(s->m, a->ids, end, L - 1, a->rows) < 0) {
        return s->m->err_kind < 0 ? s->m->err_kind : TUTTI_ERR;
    }
    a->lo = L;
    for (int32_t k = 0; k <= end - L; k++) {
        hyp tmp = {0};
        if (hyp_fill(s, &tmp, a->rows + (size_t)k * (size_t)s->m->n_vocab) < 0) return TUTTI_ERR;
        a->dist[k] = tmp.dist, a->inv_total[k] = tmp.inv_total, a->p_eog[k] = tmp.p_eog;
        a->n_dist = k + 1;
    }
    ahead_take(s, h);
    return 0;
}

/* What hypothesis h can still contribute, relative to exp(mx): an
 * evaluated one P(h) times the mass of its tokens that can follow the
 * committed text (and its end), a deferred one all of P(h). */
static double live_weight(const fusion_bytes *s, const hyp *h, double mx) {
    double w = exp(h->logp - mx);
    if (h->dist) {
        const fusion_trie_node *nd = &s->trie->node[h->node];
        w *= range_mass(s->trie, h, nd->lo, nd->hi) + (h->pos == s->n_view ? h->p_eog : 0.0);
    }
    return w;
}

/* The known path is the path of one hypothesis, the anchor, followed by
 * the canonical tokens of the text after its position: the canonical
 * tokenization of the whole text v = prefix · committed · text, from its
 * token boundary at the anchor's position on (v's tokens before it need
 * not be the anchor's: a generation is spelled by whatever tokens its
 * hypotheses took, which is rarely the canonical tokenization of all of
 * it).  The anchor is the heaviest live hypothesis at such a boundary: at
 * the start of a prompt the BOS path, in a generation (a drafted text,
 * align_byte.c) most often the hypothesis the drafted bytes continue. */
int fusion_bytes_expect(fusion_bytes *s, const char *text, size_t n) {
    if (s->ops || !s->m->vt->logits_from || n == 0) return 0;
    ahead_clear(s);
    const fusion_trie *t = s->trie;
    if (s->n_view < s->n_prefix && s->n_view > 0) return 0; /* inside the prefix: not worth it */
    /* v's bytes are the view's shifted by the prefix a token-id prompt's
     * view lacks (n_prefix 0) */
    size_t np = (size_t)t->n_prefix, have = s->n_view > s->n_prefix ? (size_t)(s->n_view - s->n_prefix) : 0;
    int64_t shift = (int64_t)np - s->n_prefix;
    size_t len = have + n;
    if (len > (size_t)INT32_MAX / 4 || s->n_h == 0) return 0;
    char *v = malloc(np + len);
    int32_t cap = (int32_t)len + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t *at = malloc(sizeof(int32_t) * (size_t)(cap + 1)); /* at[c]: v's bytes before canonical token c */
    if (!s->ah.rows) { /* first use: the window's scratch, about 16 MiB of rows at most */
        int32_t w = (int32_t)(((size_t)16 << 20) / (sizeof(float) * (size_t)s->m->n_vocab));
        w = w < 4 ? 4 : w > AHEAD_MAX ? AHEAD_MAX : w;
        if ((s->ah.rows = malloc(sizeof(float) * (size_t)w * (size_t)s->m->n_vocab))) s->ah.window = w;
    }
    bool ok = v && ids && at && s->ah.rows; /* a speed hint: no memory for it is no error */
    int32_t k = 0;
    if (ok) {
        memcpy(v, t->prefix, np);
        memcpy(v + np, s->view + s->n_prefix, have);
        memcpy(v + np + have, text, n);
        k = tutti_tokenize(s->m->vocab, v + np, len, false, false, ids, cap);
        ok = k > 0;
        at[0] = 0;
        for (int32_t i = 0; ok && i < k; i++) {
            int32_t id = ids[i];
            size_t nb = (size_t)(t->off[id + 1] - t->off[id]);
            ok = (size_t)at[i] + nb <= np + len && !memcmp(t->bytes + t->off[id], v + at[i], nb);
            at[i + 1] = at[i] + (int32_t)nb;
        }
        ok = ok && (size_t)at[k] == np + len;
    }
    /* the anchor, and c: its position's canonical token */
    int32_t anchor = -1, c = -1;
    if (ok) {
        double mx = -INFINITY, best = -1;
        for (int32_t i = 0; i < s->n_h; i++)
            if (s->h[i].logp > mx) mx = s->h[i].logp;
        for (int32_t i = 0; i < s->n_h; i++) {
            const hyp *h = &s->h[i];
            if (h->node < 0) continue; /* stale: its distribution is not all it needs */
            /* the canonical token starting at the hypothesis's position, if
             * one does (at[] increases: the first at[j] >= p) */
            int64_t p = h->pos + shift;
            int32_t lo = 0, hi = k;
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (at[mid] < p) lo = mid + 1;
                else hi = mid;
            }
            int32_t j = lo;
            if (j == k || at[j] != p) continue;
            double w = live_weight(s, h, mx);
            if (w > best) best = w, anchor = i, c = j;
        }
        ok = anchor >= 0;
    }
    if (ok) { /* the path: the anchor's, then the canonical tokens from c on */
        const hyp *h = &s->h[anchor];
        int32_t np_ids = h->n_ids + (k - c);
        int32_t *path = malloc(sizeof(int32_t) * (size_t)np_ids);
        if (path) {
            memcpy(path, h->ids, sizeof(int32_t) * (size_t)h->n_ids);
            memcpy(path + h->n_ids, ids + c, sizeof(int32_t) * (size_t)(k - c));
            s->ah.ids = path, s->ah.n = np_ids;
        }
    }
    free(v), free(ids), free(at);
    return 0;
}

/* Every hypothesis without a distribution needs the member's logits after
 * its path.  A member that batches (logits_batch) gets them all at once, so
 * it reads its weights once per committed byte rather than once per
 * hypothesis; the result is the same distribution per hypothesis. */
/* The member learns which timelines the live hypotheses hold (their
 * children extend them), so it reuses the others' sessions first. */
static void hint_live(fusion_bytes *s) {
    if (s->n_h + SPEC_MAX > 256) return;
    const int32_t *ids[256];
    int32_t n[256], k = 0;
    for (int32_t i = 0; i < s->n_h; i++)
        if (s->h[i].dist) ids[k] = s->h[i].ids, n[k] = s->h[i].n_ids, k++;
    for (int32_t j = 0; j < s->n_sp; j++) ids[k] = s->sp[j].ids, n[k] = s->sp[j].n_ids, k++;
    fusion_member_local_keep(s->m, k, ids, n);
}

/* The live mass of the hypotheses relative to the heaviest path (*mx, its
 * log-probability): an evaluated hypothesis counts with the mass of its
 * tokens that can still follow the committed text, a deferred one whole.
 * *best (may be NULL): the heaviest evaluated hypothesis, -1 if none. */
static double live_mass(const fusion_bytes *s, double *mx, int32_t *best) {
    double m = -INFINITY, total = 0, best_w = -1;
    if (best) *best = -1;
    for (int32_t i = 0; i < s->n_h; i++)
        if (s->h[i].logp > m) m = s->h[i].logp;
    for (int32_t i = 0; i < s->n_h; i++) {
        double w = live_weight(s, &s->h[i], m);
        if (s->h[i].dist && best && w > best_w) best_w = w, *best = i;
        total += w;
    }
    *mx = m;
    return total;
}

/* Lazy: which hypotheses without a distribution get one now (need[i]);
 * the others are deferred.  Returns the count to evaluate. */
static int32_t lazy_select(const fusion_bytes *s, bool *need) {
    double mx;
    double total = live_mass(s, &mx, NULL);
    int32_t n = 0, n_eval = 0;
    for (int32_t i = 0; i < s->n_h; i++) {
        const hyp *h = &s->h[i];
        need[i] = false;
        if (h->dist) {
            n_eval++;
            continue;
        }
        need[i] = h->node >= 0 && !(exp(h->logp - mx) < s->p.prune * total); /* stale: expanded before */
        n += need[i];
    }
    if (n == 0 && n_eval == 0) /* nothing evaluated would be left: evaluate all */
        for (int32_t i = 0; i < s->n_h; i++) n += need[i] = !s->h[i].dist && s->h[i].node >= 0;
    return n;
}

/* Speculation (lazy mode), for a pass that runs anyway: the continuation
 * most likely now is the rest of the heaviest evaluated hypothesis's most
 * probable pending token ("ime" while "▁time" is being spelled after "▁t");
 * every evaluated hypothesis h with a token t that ends inside it, whose
 * share P(h) p(t | h) of the live mass reaches prune, will be spawned as
 * [h, t] if the text follows the guess, and would need its own pass then.
 * The SPEC_BATCH heaviest such paths not cached yet join this pass
 * (cand[k] = its parent hypothesis and token); the cache first drops
 * entries whose parent is gone.  Returns the count. */
static int32_t spec_select(fusion_bytes *s, int32_t *cand_h, int32_t *cand_t) {
    const fusion_trie *t = s->trie;
    for (int32_t k = s->n_sp - 1; k >= 0; k--) {
        bool parent = false;
        for (int32_t i = 0; i < s->n_h && !parent; i++)
            parent = s->h[i].dist && same_path(s->h[i].ids, s->h[i].n_ids, s->sp[k].ids, s->sp[k].n_ids - 1);
        if (!parent) spec_drop(s, k);
    }
    if (s->n_sp >= SPEC_MAX) return 0;
    double mx;
    int32_t best;
    double total = live_mass(s, &mx, &best);
    if (best < 0 || !(total > 0)) return 0;
    /* the guess: the rest of best's most probable pending token */
    const hyp *hb = &s->h[best];
    const fusion_trie_node *nb = &t->node[hb->node];
    const float *pb = dist_ps(t, hb->dist);
    int32_t r_best = -1;
    for (int32_t r = nb->lo + nb->n_exact; r < nb->hi; r++)
        if (r_best < 0 || pb[r] > pb[r_best]) r_best = r;
    if (r_best < 0) return 0;
    int32_t tok = t->sorted[r_best], done_b = s->n_view - hb->pos;
    const char *g = t->bytes + t->off[tok] + done_b;
    int32_t n_g = (int32_t)(t->off[tok + 1] - t->off[tok]) - done_b;
    double cw[SPEC_BATCH];
    int32_t n_c = 0, room = SPEC_MAX - s->n_sp < SPEC_BATCH ? SPEC_MAX - s->n_sp : SPEC_BATCH;
    for (int32_t i = 0; i < s->n_h; i++) {
        const hyp *h = &s->h[i];
        if (!h->dist) continue;
        if (s->m->n_ctx > 0 && !fusion_member_fits(s->m, h->n_ids + 1)) continue;
        const float *ps = dist_ps(t, h->dist);
        double w = exp(h->logp - mx) * h->inv_total / total;
        int32_t node = h->node;
        for (int32_t j = 0; j < n_g; j++) {
            node = fusion_trie_child(t, node, (uint8_t)g[j]);
            if (node < 0) break;
            const fusion_trie_node *nd = &t->node[node];
            for (int32_t r = nd->lo; r < nd->lo + nd->n_exact; r++) {
                double share = w * (double)ps[r];
                if (!(share >= s->p.prune)) continue;
                bool have = false; /* already cached */
                for (int32_t k = 0; k < s->n_sp && !have; k++)
                    have = s->sp[k].n_ids == h->n_ids + 1 && s->sp[k].ids[h->n_ids] == t->sorted[r] &&
                           !memcmp(s->sp[k].ids, h->ids, sizeof(int32_t) * (size_t)h->n_ids);
                if (have) continue;
                int32_t at = n_c < room ? n_c++ : -1; /* keep the heaviest `room` */
                if (at < 0) {
                    at = 0;
                    for (int32_t k = 1; k < n_c; k++)
                        if (cw[k] < cw[at]) at = k;
                    if (cw[at] >= share) continue;
                }
                cw[at] = share, cand_h[at] = i, cand_t[at] = t->sorted[r];
            }
        }
    }
    return n_c;
}

static int prepare(fusion_bytes *s, bool force);

int fusion_bytes_prepare(fusion_bytes *s) {
    REMOTE(prepare(s->ops_ctx));
    return prepare(s, false);
}

int fusion_bytes_resolve(fusion_bytes *s) {
    REMOTE(resolve(s->ops_ctx));
    return prepare(s, true);
}

int32_t fusion_bytes_n_deferred(const fusion_bytes *s) {
    REMOTE(n_deferred(s->ops_ctx));
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_h; i++) n += !s->h[i].dist;
    return n;
}

/* Appends h (its ids and dist move to s). */
static int adopt_hyp(fusion_bytes *s, const hyp *h) {
    if (grow_hyps(s) < 0) return TUTTI_ERR;
    s->h[s->n_h++] = *h;
    return 0;
}

/* Expands stale hypothesis i (see commit): its distribution, then its
 * descendants over its pending bytes view[pos..n_view), committed in a
 * byte state of its own without lazy evaluation; they take its place
 * (those at the end of the view still need their pass). */
static int expand_stale(fusion_bytes *s, int32_t i) {
    hyp d = s->h[i];
    s->h[i] = s->h[--s->n_h];
    fusion_bytes_params p = s->p;
    p.lazy = false;
    fusion_bytes *t = fusion_bytes_new(s->m, s->trie, &p);
    int rc = t ? 0 : TUTTI_ERR;
    if (rc == 0) t->n_prefix = s->n_prefix;
    for (int32_t k = 0; rc == 0 && k < d.pos; k++) rc = view_push(t, (uint8_t)s->view[k]);
    if (rc == 0) rc = push_hyp(t, d.ids, d.n_ids, -1, d.pos, 0, 0.0);
    if (rc == 0) rc = fusion_bytes_commit_n(t, s->view + d.pos, (size_t)(s->n_view - d.pos));
    if (rc == FUSION_ERR_SPELL) rc = 0; /* no descendant spells the text: it adds nothing */
    else if (rc == 0)
        for (int32_t k = 0; k < t->n_h && rc == 0; k++) {
            hyp h = t->h[k];
            h.logp += t->shift + d.logp;
            if ((rc = adopt_hyp(s, &h)) == 0) memset(&t->h[k], 0, sizeof(hyp));
        }
    free(d.ids);
    put_dist(s, d.pre);
    fusion_bytes_free(t);
    return rc;
}

/* Stale hypotheses that must be expanded now: all when forced (or not
 * lazy), else those whose share of the live mass reaches prune or that are
 * all there is. */
static int expand_needed(fusion_bytes *s, bool force) {
    for (int32_t i = 0; i < s->n_h; i++) {
        if (s->h[i].dist || s->h[i].node >= 0) continue;
        bool need = force;
        if (!need) {
            double mx;
            int32_t best;
            double total = live_mass(s, &mx, &best);
            need = best < 0 || !(exp(s->h[i].logp - mx) < s->p.prune * total);
        }
        if (!need) continue;
        int rc = expand_stale(s, i);
        if (rc < 0) return rc;
        i = -1; /* the array changed */
    }
    return 0;
}

static int prepare(fusion_bytes *s, bool force) {
    int rc0 = expand_needed(s, force || !(s->p.lazy && s->p.prune > 0));
    if (rc0 < 0) return rc0;
    int32_t n_need = 0;
    for (int32_t i = 0; i < s->n_h; i++) n_need += !s->h[i].dist;
    if (!n_need) return 0;
    bool lazy = s->p.lazy && s->p.prune > 0 && !force;
    bool *sel = NULL;
    if (lazy) {
        if (!(sel = malloc(sizeof(bool) * (size_t)s->n_h))) return tutti_set_error("byte alignment: out of memory");
        n_need = lazy_select(s, sel);
        if (!n_need) {
            free(sel);
            return 0;
        }
    }
#define SELECTED(i) (!s->h[i].dist && (!sel || sel[i]))
    /* the selected ones first take what was computed ahead for them */
    for (int32_t i = 0; i < s->n_h; i++)
        if (SELECTED(i)) n_need -= take_pre(s, &s->h[i]);
    if (!n_need) {
        free(sel);
        return 0;
    }
    if (s->ah.ids) {                    /* on the known path beyond the window: the next window */
        int32_t other[16], n_other = 0; /* and the selected ones off the path, in the same pass */
        for (int32_t i = 0; i < s->n_h && n_other < 16; i++)
            if (SELECTED(i) && !ahead_match(s, &s->h[i])) other[n_other++] = i;
        for (int32_t i = 0; i < s->n_h; i++) {
            if (!SELECTED(i) || !ahead_match(s, &s->h[i])) continue;
            int rc = ahead_fetch(s, &s->h[i], other, n_other);
            n_other = 0; /* answered (or left to the passes below) */
            if (rc < 0) {
                free(sel);
                return rc;
            }
            for (int32_t j = 0; j < s->n_h; j++)
                if (SELECTED(j)) take_pre(s, &s->h[j]);
        }
        n_need = 0;
        for (int32_t i = 0; i < s->n_h; i++) n_need += SELECTED(i);
        if (!n_need) {
            free(sel);
            return 0;
        }
    }
    int32_t cand_h[SPEC_BATCH], cand_t[SPEC_BATCH], n_spec = 0;
    if (s->p.lazy && s->p.prune > 0 && s->m->vt->logits_batch) n_spec = spec_select(s, cand_h, cand_t);
    hint_live(s);
    if ((n_need == 1 && n_spec == 0) || !s->m->vt->logits_batch) {
        int rc1 = 0;
        for (int32_t i = 0; i < s->n_h && rc1 == 0; i++) {
            hyp *h = &s->h[i];
            if (!SELECTED(i)) continue;
            const float *z = fusion_member_logits_view(s->m, h->ids, h->n_ids, s->logits);
            /* the member's kind of failure (context full, non-finite) goes up */
            if (!z) rc1 = s->m->err_kind < 0 ? s->m->err_kind : TUTTI_ERR;
            else if (hyp_fill(s, h, z) < 0) rc1 = TUTTI_ERR;
        }
        free(sel);
        return rc1;
    }
    int32_t n_all = n_need + n_spec;
    int32_t *idx = malloc(sizeof(int32_t) * 2 * (size_t)n_all);
    const int32_t **ids = malloc(sizeof(int32_t *) * (size_t)n_all);
    const float **rows = malloc(sizeof(float *) * (size_t)n_all);
    int32_t *spec_ids[SPEC_BATCH] = {0};
    int rc = 0;
    if (!idx || !ids || !rows) {
        rc = tutti_set_error("byte alignment: out of memory");
        goto out;
    }
    int32_t *n = idx + n_all, k = 0;
    for (int32_t i = 0; i < s->n_h; i++)
        if (SELECTED(i)) idx[k] = i, ids[k] = s->h[i].ids, n[k] = s->h[i].n_ids, k++;
#undef SELECTED
    for (int32_t c = 0; c < n_spec; c++) { /* the speculative paths go last: they never cost a pass of their own */
        const hyp *h = &s->h[cand_h[c]];
        if (!(spec_ids[c] = malloc(sizeof(int32_t) * (size_t)(h->n_ids + 1)))) {
            rc = tutti_set_error("byte alignment: out of memory");
            goto out;
        }
        memcpy(spec_ids[c], h->ids, sizeof(int32_t) * (size_t)h->n_ids);
        spec_ids[c][h->n_ids] = cand_t[c];
        ids[k] = spec_ids[c], n[k] = h->n_ids + 1, k++;
    }
    for (int32_t done = 0; done < n_need;) {
        int32_t got = s->m->vt->logits_batch(s->m, n_all - done, ids + done, n + done, rows + done);
        if (got < 1) {
            rc = s->m->err_kind < 0 ? s->m->err_kind : TUTTI_ERR;
            goto out;
        }
        for (int32_t j = done; j < done + got; j++) {
            if (j < n_need) {
                if (hyp_fill(s, &s->h[idx[j]], rows[j]) < 0) {
                    rc = TUTTI_ERR;
                    goto out;
                }
                continue;
            }
            hyp tmp = {0};
            if (s->n_sp >= SPEC_MAX || hyp_fill(s, &tmp, rows[j]) < 0) continue; /* speculation is optional */
            int32_t c = j - n_need;
            s->sp[s->n_sp++] = (spec){spec_ids[c], n[j], tmp.dist, tmp.inv_total, tmp.p_eog};
            spec_ids[c] = NULL;
            s->n_spec_run++;
        }
        done += got;
    }
out:
    for (int32_t c = 0; c < n_spec; c++) free(spec_ids[c]);
    free(idx), free(ids), free(rows), free(sel);
    return rc;
}

int fusion_bytes_next(fusion_bytes *s, double *out) {
    REMOTE(next(s->ops_ctx, out));
    int prc = fusion_bytes_prepare(s);
    if (prc < 0) return prc;
    const fusion_trie *t = s->trie;
    for (int b = 0; b < FUSION_N_BYTE_OUT; b++) out[b] = 0.0;
    double mx = -INFINITY;
    for (int32_t i = 0; i < s->n_h; i++)
        if (s->h[i].logp > mx) mx = s->h[i].logp;
    for (int32_t i = 0; i < s->n_h; i++) {
        const hyp *h = &s->h[i];
        if (!h->dist) continue; /* deferred (lazy) */
        double w = exp(h->logp - mx);
        const fusion_trie_node *nd = &t->node[h->node];
        for (int32_t c = 0; c < nd->n_child; c++) {
            const fusion_trie_node *ch = &t->node[t->child_node[nd->child0 + c]];
            out[t->child_byte[nd->child0 + c]] += w * range_mass(t, h, ch->lo, ch->hi);
        }
        if (h->pos == s->n_view) out[FUSION_END] += w * h->p_eog;
    }
    double sum = 0.0;
    for (int b = 0; b < FUSION_N_BYTE_OUT; b++) sum += out[b];
    if (!(sum > 0)) {
        tutti_set_error("member %s: no token can continue the text (after %d bytes)", s->m->name,
                        s->n_view - s->n_prefix);
        return FUSION_ERR_SPELL;
    }
    for (int b = 0; b < FUSION_N_BYTE_OUT; b++) out[b] /= sum;
    return 0;
}

static int cmp_ranked(const void *a, const void *b) {
    double x = ((const ranked *)a)->mass, y = ((const ranked *)b)->mass;
    return x > y ? -1 : x < y;
}

/* Lazy: what the evaluated hypotheses can do with byte b (the deferred
 * ones left out): *spawn, some token ends exactly at b with probability > 0
 * (a boundary hypothesis comes without the deferred ones); *cont, some
 * token goes on past b with probability > 0 (the text can continue). */
static void evaluated_at(const fusion_bytes *s, uint8_t b, bool *spawn, bool *cont) {
    const fusion_trie *t = s->trie;
    *spawn = *cont = false;
    for (int32_t i = 0; i < s->n_h && !(*spawn && *cont); i++) {
        const hyp *h = &s->h[i];
        if (!h->dist) continue;
        int32_t c = fusion_trie_child(t, h->node, b);
        if (c < 0) continue;
        const fusion_trie_node *nd = &t->node[c];
        const float *ps = dist_ps(t, h->dist);
        for (int32_t r = nd->lo; r < nd->lo + nd->n_exact && !*spawn; r++) *spawn = ps[r] > 0;
        *cont = *cont || range_mass(t, h, nd->lo + nd->n_exact, nd->hi) > 0;
    }
}

/* Room for n hypotheses in commit's scratch.  0 or TUTTI_ERR. */
static int scratch_reserve(fusion_bytes *s, int32_t n) {
    commit_scratch *cs = &s->cs;
    if (n <= cs->cap) return 0;
    int32_t cap = cs->cap ? cs->cap : 16;
    while (cap < n) cap *= 2;
    double *eff = realloc(cs->eff, sizeof(double) * (size_t)cap);
    if (eff) cs->eff = eff;
    ranked *rk = eff ? realloc(cs->rk, sizeof(ranked) * (size_t)cap) : NULL;
    if (rk) cs->rk = rk;
    bool *keep = rk ? realloc(cs->keep, sizeof(bool) * (size_t)cap) : NULL;
    if (keep) cs->keep = keep;
    if (!keep) return tutti_set_error("byte alignment: out of memory");
    cs->cap = cap;
    return 0;
}

/* Deferred hypotheses, and no evaluated one ends a token at b: the
 * boundary they would give is kept as one stale hypothesis, the heaviest
 * deferred one, unevaluated; its pending bytes grow with each commit (node
 * -1: they may span several tokens).  It stands for all its descendants
 * (their mass is at most its own, below the pruning share), so the member
 * still has a boundary to turn to, and it costs a pass only when expanded:
 * when b itself needs it (no evaluated hypothesis continues with b), on
 * resolve, or when its share grows past prune.  Until then an evaluated
 * spawn drops it, as every deferred hypothesis.  (Evaluating that boundary
 * hypothesis at each byte, as before, cost a pass per byte inside long
 * tokens.)  *stale: its index, or -1.  0 or an error. */
static int choose_stale(fusion_bytes *s, uint8_t b, int32_t *stale) {
    *stale = -1;
    bool spawn = true, cont = true;
    if (fusion_bytes_n_deferred(s) > 0) evaluated_at(s, b, &spawn, &cont);
    if (spawn) return 0;
    if (!cont) return fusion_bytes_resolve(s);
    for (int32_t i = 0; i < s->n_h; i++)
        if (!s->h[i].dist && (*stale < 0 || s->h[i].logp > s->h[*stale].logp)) *stale = i;
    return 0;
}

/* Every hypothesis follows b: one that cannot goes (effective mass -1),
 * tokens ending exactly at b spawn hypotheses at the new position, and
 * each keeps what it can still contribute to future bytes (a new one its
 * whole mass): cs.eff[0..n_h), relative to exp(mx).  *deferred: the mass
 * of the deferred hypotheses dropped here.  0 or TUTTI_ERR. */
static int follow_byte(fusion_bytes *s, uint8_t b, int32_t stale, double mx, double *deferred) {
    const fusion_trie *t = s->trie;
    int32_t n_old = s->n_h, new_pos = s->n_view + 1;
    *deferred = 0.0;
    if (scratch_reserve(s, n_old) < 0) return TUTTI_ERR;
    for (int32_t i = 0; i < n_old; i++) {
        hyp *h = &s->h[i];
        if (!h->dist) { /* deferred (lazy): below prune, and a boundary comes from the others */
            if (i == stale) h->node = -1;
            else *deferred += exp(h->logp - mx);
            s->cs.eff[i] = -1.0;
            continue;
        }
        int32_t c = fusion_trie_child(t, h->node, b);
        if (c < 0) {
            s->cs.eff[i] = -1.0;
            continue;
        }
        const fusion_trie_node *nd = &t->node[c];
        /* tokens ending exactly here spawn hypotheses at the new position */
        const float *ps = dist_ps(t, h->dist);
        for (int32_t r = nd->lo; r < nd->lo + nd->n_exact; r++) {
            double p = (double)ps[r] * h->inv_total;
            if (!(p > 0)) continue;
            if (push_hyp(s, h->ids, h->n_ids, t->sorted[r], new_pos, 0, h->logp + log(p)) < 0) return TUTTI_ERR;
            if (s->n_sp) spec_take(s, &s->h[s->n_h - 1]);
            if (s->ah.n_dist) ahead_take(s, &s->h[s->n_h - 1]);
            h = &s->h[i]; /* push may have moved the array */
            if (scratch_reserve(s, s->n_h) < 0) return TUTTI_ERR;
            s->cs.eff[s->n_h - 1] = exp(h->logp + log(p) - mx);
        }
        double rest = range_mass(t, h, nd->lo + nd->n_exact, nd->hi);
        h->node = c;
        s->cs.eff[i] = rest > 0 ? exp(h->logp - mx) * rest : -1.0;
    }
    return 0;
}

/* Pruning: a relative share below p.prune goes, then the max_hyps
 * heaviest stay, in cs.rk (returns how many); the pruned mass is added to
 * s->pruned.  total: Σ of the positive cs.eff[0..n). */
static int32_t prune_hyps(fusion_bytes *s, int32_t n, double total, double deferred) {
    const double *eff = s->cs.eff;
    ranked *rk = s->cs.rk;
    int32_t n_rk = 0, new_pos = s->n_view;
    s->pruned += deferred / total;
    for (int32_t i = 0; i < n; i++) {
        if (eff[i] > 0 && eff[i] >= s->p.prune * total) rk[n_rk++] = (ranked){eff[i], i};
        else if (eff[i] > 0) s->pruned += eff[i] / total;
    }
    if (n_rk > s->p.max_hyps) {
        qsort(rk, (size_t)n_rk, sizeof *rk, cmp_ranked);
        for (int32_t k = s->p.max_hyps; k < n_rk; k++) s->pruned += rk[k].mass / total;
        n_rk = s->p.max_hyps;
    }
    /* Never prune the last hypothesis that spells the committed bytes
     * exactly (a token boundary at the end of the view).  Mid-token
     * hypotheses can only continue with the bytes of their pending tokens;
     * with every boundary hypothesis gone, the member would give probability
     * 0 to any other next byte (and to end of text) although its tokens can
     * spell it, and leave the generation for a reason that is not true (a
     * boundary whose token is unlikely next to a long token still in
     * progress, e.g. "ti" inside "time", falls below 1e-4 of the mass). */
    bool kept_b = false;
    for (int32_t k = 0; k < n_rk; k++) kept_b |= s->h[rk[k].i].pos == new_pos;
    if (kept_b) return n_rk;
    int32_t best_b = -1;
    for (int32_t i = 0; i < n; i++)
        if (eff[i] > 0 && s->h[i].pos == new_pos && (best_b < 0 || eff[i] > eff[best_b])) best_b = i;
    if (best_b < 0) return n_rk;
    int32_t slot = n_rk;
    if (n_rk >= s->p.max_hyps) { /* take the lightest kept one's place */
        slot = 0;
        for (int32_t k = 1; k < n_rk; k++)
            if (rk[k].mass < rk[slot].mass) slot = k;
        s->pruned += rk[slot].mass / total;
    } else {
        n_rk++;
    }
    rk[slot] = (ranked){eff[best_b], best_b};
    s->pruned -= eff[best_b] / total;
    return n_rk;
}

/* Keeps the n_rk hypotheses of cs.rk (and the stale one), in order, and
 * renormalises their log-probabilities to a maximum of 0. */
static void keep_hyps(fusion_bytes *s, int32_t n_rk, int32_t stale) {
    bool *keep = s->cs.keep;
    memset(keep, 0, sizeof(bool) * (size_t)s->n_h);
    for (int32_t k = 0; k < n_rk; k++) keep[s->cs.rk[k].i] = true;
    if (stale >= 0) keep[stale] = true;
    int32_t w = 0;
    double nmx = -INFINITY;
    for (int32_t i = 0; i < s->n_h; i++) {
        if (!keep[i]) {
            hyp_drop(s, &s->h[i]);
            continue;
        }
        s->h[w++] = s->h[i];
        if (s->h[w - 1].logp > nmx) nmx = s->h[w - 1].logp;
    }
    s->n_h = w;
    for (int32_t i = 0; i < s->n_h; i++) s->h[i].logp -= nmx;
    if (s->n_h) s->shift += nmx;
    if (s->ah.ids) { /* every hypothesis past the known path: its window is of no more use */
        bool past = true;
        for (int32_t i = 0; i < s->n_h && past; i++) past = s->h[i].n_ids > s->ah.n;
        if (past) {
            ahead_clear(s);
            free(s->ah.rows); /* a later fusion_bytes_expect makes it again */
            s->ah.rows = NULL;
        }
    }
}

int fusion_bytes_commit(fusion_bytes *s, uint8_t b) {
    REMOTE(commit(s->ops_ctx, b));
    int rc = fusion_bytes_prepare(s);
    int32_t stale = -1;
    if (rc < 0 || (rc = choose_stale(s, b, &stale)) < 0) return rc;
    double mx = -INFINITY, deferred = 0.0;
    for (int32_t i = 0; i < s->n_h; i++)
        if (s->h[i].logp > mx) mx = s->h[i].logp;
    if (follow_byte(s, b, stale, mx, &deferred) < 0 || view_push(s, b) < 0) return TUTTI_ERR;
    double total = 0.0;
    for (int32_t i = 0; i < s->n_h; i++)
        if (s->cs.eff[i] > 0) total += s->cs.eff[i];
    if (!(total > 0)) {
        tutti_set_error("member %s: the text has probability 0 (byte 0x%02x at offset %d cannot be covered by "
                        "its tokens)",
                        s->m->name, b, s->n_view - 1 - s->n_prefix);
        return FUSION_ERR_SPELL;
    }
    keep_hyps(s, prune_hyps(s, s->n_h, total, deferred), stale);
    return 0;
}

int fusion_bytes_commit_n(fusion_bytes *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int rc = fusion_bytes_commit(s, (uint8_t)bytes[i]);
        if (rc < 0) return rc;
    }
    return 0;
}

int fusion_bytes_start(fusion_bytes *s, const char *text, size_t n) {
    REMOTE(start(s->ops_ctx, text, n));
    clear_hyps(s);
    s->n_view = 0;
    s->pruned = 0.0;
    const fusion_trie *t = s->trie;
    s->n_prefix = t->n_prefix;
    if (s->bos >= 0) {
        if (push_hyp(s, NULL, 0, s->bos, 0, 0, 0.0) < 0) return TUTTI_ERR;
        fusion_bytes_expect(s, text, n); /* the prompt's canonical path in one pass */
        int rc = fusion_bytes_commit_n(s, t->prefix, (size_t)t->n_prefix);
        return rc < 0 ? rc : fusion_bytes_commit_n(s, text, n);
    }
    /* No BOS: the first token has no distribution to come from.  Take the
     * canonical tokenization of all but the text's last token as given. */
    if (n == 0)
        return tutti_set_error("member %s: its vocabulary has no BOS token, so generation needs a non-empty "
                               "prompt",
                               s->m->name);
    int32_t cap = (int32_t)n + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return tutti_set_error("byte alignment: out of memory");
    int32_t k = tutti_tokenize(s->m->vocab, text, n, false, false, ids, cap);
    if (k <= 0) {
        free(ids);
        tutti_set_error("member %s: cannot tokenize the prompt", s->m->name);
        return FUSION_ERR_SPELL;
    }
    int32_t keep = k > 1 ? k - 1 : 1;
    int64_t nb = 0;
    for (int32_t i = 0; i < keep; i++) {
        int32_t id = ids[i];
        for (int64_t j = t->off[id]; j < t->off[id + 1]; j++)
            if (view_push(s, (uint8_t)t->bytes[j]) < 0) {
                free(ids);
                return TUTTI_ERR;
            }
        nb += t->off[id + 1] - t->off[id];
    }
    /* the kept tokens must spell prefix · text[0..) */
    size_t consumed = 0;
    bool ok = nb >= t->n_prefix && memcmp(s->view, t->prefix, (size_t)t->n_prefix) == 0;
    if (ok) {
        consumed = (size_t)(nb - t->n_prefix);
        ok = consumed <= n && memcmp(s->view + t->n_prefix, text, consumed) == 0;
    }
    if (!ok) {
        free(ids);
        tutti_set_error("member %s: the prompt's tokens do not spell the prompt", s->m->name);
        return FUSION_ERR_SPELL;
    }
    int rc = push_hyp(s, ids, keep, -1, s->n_view, 0, 0.0);
    free(ids);
    if (rc < 0) return rc;
    fusion_bytes_expect(s, text + consumed, n - consumed); /* the rest of the prompt's canonical path */
    return fusion_bytes_commit_n(s, text + consumed, n - consumed);
}

int fusion_bytes_start_ids(fusion_bytes *s, const int32_t *ids, int32_t n) {
    REMOTE(start_ids(s->ops_ctx, ids, n));
    clear_hyps(s);
    s->n_view = 0;
    s->pruned = 0.0;
    s->n_prefix = 0; /* the text after a prompt starts right after its last token */
    if (n < 1) return tutti_set_error("member %s: empty token-id prompt", s->m->name);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->m->n_vocab)
            return tutti_set_error("member %s: prompt token %d (id %d) is out of range [0, %d)", s->m->name, i, ids[i],
                                   s->m->n_vocab);
    return push_hyp(s, ids, n, -1, 0, 0, 0.0);
}

int32_t fusion_bytes_need_tokens(const fusion_bytes *s) {
    REMOTE(need_tokens(s->ops_ctx));
    int32_t need = 0;
    for (int32_t i = 0; i < s->n_h; i++)
        if (!s->h[i].dist && s->h[i].n_ids > need) need = s->h[i].n_ids;
    return need;
}

const int32_t *fusion_bytes_best_path(const fusion_bytes *s, int32_t *n) {
    REMOTE(best_path(s->ops_ctx, n));
    const hyp *best = NULL;
    for (int32_t i = 0; i < s->n_h; i++)
        if (s->h[i].pos == s->n_view && (!best || s->h[i].logp > best->logp)) best = &s->h[i];
    *n = best ? best->n_ids : 0;
    return best ? best->ids : NULL;
}

fusion_bytes *fusion_bytes_clone(const fusion_bytes *s) {
    if (s->ops) {
        fusion_bytes *c = calloc(1, sizeof *c);
        if (!c) return tutti_set_error("byte alignment: out of memory"), NULL;
        c->ops = s->ops;
        if (!(c->ops_ctx = s->ops->clone(s->ops_ctx))) free(c), c = NULL;
        return c;
    }
    fusion_bytes *c = fusion_bytes_new(s->m, s->trie, &s->p);
    if (!c) return NULL;
    c->n_prefix = s->n_prefix;
    if (s->n_view > c->cap_view) {
        char *nv = realloc(c->view, (size_t)s->n_view);
        if (!nv) goto oom;
        c->view = nv, c->cap_view = s->n_view;
    }
    memcpy(c->view, s->view, (size_t)s->n_view);
    c->n_view = s->n_view;
    c->pruned = s->pruned;
    c->shift = s->shift;
    for (int32_t i = 0; i < s->n_h; i++) {
        const hyp *h = &s->h[i];
        if (push_hyp(c, h->ids, h->n_ids, -1, h->pos, h->node, h->logp) < 0) goto fail;
        if (h->dist) {
            hyp *d = &c->h[c->n_h - 1];
            d->dist = get_dist(c);
            if (!d->dist) goto oom;
            memcpy(d->dist, h->dist, sizeof(double) * dist_doubles(s->trie));
            d->inv_total = h->inv_total;
            d->p_eog = h->p_eog;
        }
    }
    return c;
oom:
    tutti_set_error("byte alignment: out of memory");
fail:
    fusion_bytes_free(c);
    return NULL;
}

int32_t fusion_bytes_n_hyps(const fusion_bytes *s) { return s->ops ? s->ops->n_hyps(s->ops_ctx) : s->n_h; }
double fusion_bytes_pruned(const fusion_bytes *s) { return s->ops ? s->ops->pruned(s->ops_ctx) : s->pruned; }
