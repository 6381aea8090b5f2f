/* TOKEN alignment: members with one vocabulary fuse their next-token
 * distributions id by id; every member's sequence is its prompt followed
 * by the shared generated tokens (align.h for the step interface). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/align.h"
#include "fusion/draft.h"
#include "fusion/mixsample.h"
#include "member/remote.h"
#include "util/error.h"

typedef struct token_step {
    const int32_t *const *ids; /* [n_members] each member's sequence */
    const int32_t *n;          /* [n_members] */
    float **scratch;           /* [n_members][n_vocab], for members that cannot lend their logits */
    const float **logits;      /* [n_members] out: each member's logits row (its own, or scratch) */
} token_step;

static int job_token_logits(tutti_ensemble *e, int32_t i, void *arg) {
    token_step *st = arg;
    st->logits[i] = fusion_member_logits_view(e->m[i], st->ids[i], st->n[i], st->scratch[i]);
    return st->logits[i] ? 0 : TUTTI_ERR;
}

/* The one member whose distribution is used unchanged, or -1: a single
 * active member at temperature 1 under mix/product/gate gives its raw
 * logits to the sampler, exactly what single-model generation does. */
static int32_t passthrough_member(const tutti_ensemble *e) {
    if (e->rule == TUTTI_RULE_CONTRASTIVE) return -1;
    int32_t k = -1;
    for (int32_t i = 0; i < e->n; i++)
        if (e->w[i] != 0) {
            if (k >= 0) return -1;
            k = i;
        }
    return k >= 0 && e->temp[k] == 1.0f ? k : -1;
}

/* Every member's token sequence: its prompt followed by the shared
 * generated tokens (and room for `extra` drafted ones).  A text prompt is
 * tokenized once (the vocabularies are equal); token-id prompts are copied
 * per member. */
static int token_prompts(tutti_ensemble *e, const gen_prompt *pr, int32_t max_gen, int32_t extra, int32_t **ids,
                         int32_t *n, int32_t *cap) {
    for (int32_t i = 0; i < e->n; i++) {
        int32_t np = pr->ids ? pr->n_ids[i] : (int32_t)pr->len + 2;
        cap[i] = np + 1 + (max_gen > 0 ? max_gen : e->m[i]->n_ctx) + extra;
        ids[i] = malloc(sizeof(int32_t) * (size_t)cap[i]);
        if (!ids[i]) return tutti_set_error("generation: out of memory");
        if (pr->ids) {
            if (np < 1) return tutti_set_error("generation: member %d: empty token-id prompt", i + 1);
            for (int32_t k = 0; k < np; k++)
                if (pr->ids[i][k] < 0 || pr->ids[i][k] >= e->m[i]->n_vocab)
                    return tutti_set_error("generation: member %d: prompt token %d (id %d) is out of range [0, %d)",
                                           i + 1, k, pr->ids[i][k], e->m[i]->n_vocab);
            memcpy(ids[i], pr->ids[i], sizeof(int32_t) * (size_t)np);
            n[i] = np;
        } else if (i > 0) {
            memcpy(ids[i], ids[0], sizeof(int32_t) * (size_t)n[0]);
            n[i] = n[0];
        } else {
            const tutti_vocab *vocab = e->m[0]->vocab;
            n[0] = tutti_tokenize(vocab, pr->text, pr->len, tutti_vocab_add_bos(vocab), false, ids[0], cap[0]);
            if (n[0] < 0) return tutti_set_error("generation: prompt tokenization failed");
            if (n[0] == 0)
                return tutti_set_error("generation: the vocabulary has no BOS token, so the prompt must not be empty");
        }
        if (n[i] > e->m[i]->n_ctx)
            return tutti_set_error("generation: member %d (%s): the prompt is %d tokens, longer than its context "
                                   "(%d tokens)",
                                   i + 1, e->path[i], n[i], e->m[i]->n_ctx);
    }
    return 0;
}

typedef struct token_align {
    fusion_align base;
    int32_t V;
    int32_t *ids[TUTTI_ENSEMBLE_MAX_MEMBERS], n[TUTTI_ENSEMBLE_MAX_MEMBERS], cap[TUTTI_ENSEMBLE_MAX_MEMBERS];
    token_mask tm;
    float *bufs; /* scratch[n], logp[n], fused */
    double *work;
    char *piece;
    /* logits: each member's row, usually its session's own (no copy);
     * logp: per-member log-probabilities, or scratch for the fusion */
    const float *logits[TUTTI_ENSEMBLE_MAX_MEMBERS];
    float *scratch[TUTTI_ENSEMBLE_MAX_MEMBERS], *logp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t pass;
    /* drafting (fusion/draft.h): the draft, each member's rows of the
     * current round (ahead: [n_members][n_max + 1][V]), the round's rows
     * (0: no round) and the row of this step */
    fusion_draft *dr;
    float *ahead;
    int32_t n_ahead, at;
    /* the next round's draft length (1..n_max), adapted to the acceptance
     * as Hugging Face's "heuristic" schedule: two more after a round whose
     * drafted tokens were all accepted, one fewer after a rejection.  It
     * depends only on rounds already decided, so the output stays exactly
     * the plain run's (greedy) or distributed as it (sampled). */
    int32_t k_next;
    /* mixture sampling (mixsample.h): on for this generation, the writer
     * chain, the loop's sampler (borrowed) and the generation's settings */
    bool mixs;
    mix_chain chain;
    tutti_sampler *smp;
    tutti_sampler_params sp;
} token_align;

/* Member i's row r of the current round. */
static float *ahead_row(const token_align *t, int32_t i, int32_t r) {
    return t->ahead + ((size_t)i * (size_t)(t->dr->p.n_max + 1) + (size_t)r) * (size_t)t->V;
}

/* Member i scores the round: the rows after its sequence and after each
 * drafted token (which follow it in t->ids[i]), in one forward pass when
 * the member can (logits_from; its KV cache is rewound past a rejected
 * draft when the next round's sequence diverges), else one call per row. */
static int job_token_verify(tutti_ensemble *e, int32_t i, void *arg) {
    token_align *t = arg;
    fusion_member *m = e->m[i];
    int32_t n = t->n[i], k = t->n_ahead;
    if (m->vt->logits_from) return m->vt->logits_from(m, t->ids[i], n + k - 1, n - 1, ahead_row(t, i, 0));
    for (int32_t r = 0; r < k; r++) {
        float *out = ahead_row(t, i, r);
        const float *z = fusion_member_logits_view(m, t->ids[i], n + r, out);
        if (!z) return TUTTI_ERR;
        if (z != out) memcpy(out, z, sizeof(float) * (size_t)t->V);
    }
    return 0;
}

/* A round: the draft proposes up to n_max tokens (fewer when the context,
 * the buffers or the unit limit leave less room: the row past the last
 * drafted token must still be wanted), and every member verifies them.
 * No round (n_ahead 0) when the draft was not confident. */
static int draft_round(fusion_align *a) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    int32_t k = t->k_next;
    if (g->max_units > 0 && g->max_units - g->n_units - 1 < k) k = g->max_units - g->n_units - 1;
    for (int32_t i = 0; i < e->n; i++) {
        /* a round never makes a member shift its context (the rows past a
         * shift could not be rewound): drafting pauses once the context is
         * full and the member shifts */
        int32_t room = e->m[i]->n_ctx - t->n[i] - (e->m[i]->ctx_shift ? 1 : 0);
        if (t->cap[i] - t->n[i] - 1 < room) room = t->cap[i] - t->n[i] - 1;
        if (room < k) k = room;
    }
    if (k < 1) return 0;
    int32_t nd = fusion_draft_propose(t->dr, t->ids[0], t->n[0], k);
    if (nd <= 0) return nd;
    for (int32_t i = 1; i < e->n; i++) memcpy(t->ids[i] + t->n[i], t->dr->tok, sizeof(int32_t) * (size_t)nd);
    t->n_ahead = nd + 1;
    t->at = 0;
    double t1 = ens_now_s();
    if (ens_run_members(e, job_token_verify, t) < 0) {
        t->n_ahead = 0;
        return TUTTI_ERR;
    }
    a->t_phase += ens_now_s() - t1;
    g->n_draft_rounds++;
    g->n_drafted += nd;
    return 0;
}

static int token_start(fusion_align *a, const gen_prompt *pr, tutti_sampler *smp) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    if (token_prompts(e, pr, g->max_units, t->dr ? t->dr->p.n_max + 1 : 0, t->ids, t->n, t->cap) < 0) return TUTTI_ERR;
    /* as tutti generate: the prompt (member 1's) counts for the repetition penalty */
    for (int32_t k = 0; k < t->n[0]; k++) tutti_sampler_accept(smp, t->ids[0][k]);
    t->pass = fusion_weigher_varies(&a->wg) || a->wg.select ? -1 : passthrough_member(e);
    a->masked = token_mask_needed(g->mask);
    if (a->masked) {
        /* the piece table of the (shared) vocabulary, built once per ensemble */
        if (!e->trie[0] && !(e->trie[0] = fusion_trie_build(e->m[0]->vocab))) return TUTTI_ERR;
        if (token_mask_init(&t->tm, e->trie[0], g->mask) < 0) return TUTTI_ERR;
    }
    /* mixture sampling where it is exact; a single member passed through
     * needs no choice */
    t->mixs = false;
    if (e->mix_sample && t->pass < 0) {
        const char *why = mix_sample_inexact(e, &t->sp, g->mask, g->gc.m != NULL, t->dr != NULL);
        if (why) {
            ens_note_mix_fallback(e, why);
        } else {
            if (mix_chain_start(&t->chain, e, a->w) < 0) return TUTTI_ERR;
            t->mixs = true;
            t->smp = smp;
            a->weigher_off = !e->step_cb; /* no report shows the weights: the chain replaces them */
        }
    }
    /* a grammar no token can start is an error before any forward pass */
    if (g->gc.m) {
        memset(a->work, 0, sizeof(float) * (size_t)t->V);
        if (gr_constraint_mask_tokens(&g->gc, a->work) < 0) return TUTTI_ERR;
    }
    return 0;
}

/* Context full is a clean stop, as in tutti generate: the logits after n
 * tokens need n positions, so a member at n_ctx + 1 tokens (or at its
 * buffer's end) has nothing more to say. */
static bool token_ctx_full(fusion_align *a) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t full = -1;
    for (int32_t i = 0; i < e->n && full < 0; i++)
        if (!fusion_member_fits(e->m[i], t->n[i]) || t->n[i] >= t->cap[i]) full = i;
    if (full < 0) return false;
    /* without a limit the buffers hold a context's worth of generated
     * tokens, also for members that shift: that end is a full context too */
    if (!fusion_member_fits(e->m[full], t->n[full]) || a->g->max_units <= 0) ens_note_ctx_full(e, a->g, full);
    return true;
}

/* The fused row of the members' logits under weights w (ens_fuse_token_row);
 * have_logp: logp holds every member's log-probabilities already. */
static int fuse_row(const tutti_ensemble *e, const float *w, const float *const *logits, float *fused,
                    float *const *logp, double *work, bool have_logp) {
    int32_t V = e->m[0]->n_vocab;
    fusion_rule_params rp = ens_rule_params(e);
    rp.weights = w;
    if ((e->rule == TUTTI_RULE_MIX || e->rule == TUTTI_RULE_PRODUCT) && !have_logp)
        /* logp[0] spans all n_members rows: the scratch it needs */
        return fusion_combine_logits(&rp, e->temp, e->n, logits, V, fused, logp[0]);
    const float *lp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) {
        if (w[i] != 0 && !have_logp) fusion_log_softmax(logits[i], V, e->temp[i], logp[i]);
        lp[i] = w[i] != 0 || have_logp ? logp[i] : logits[i]; /* weight 0: unused */
    }
    return fusion_combine(&rp, e->n, lp, V, fused, work, NULL);
}

/* The fused row of this step from the rows in t->logits (every member's):
 * the weights of the step (a->w), then the rule, or the lead member's row
 * (selective fusion). */
static int token_fuse(fusion_align *a, const float **row) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t V = t->V;
    /* context weights and selective fusion read every member's distribution */
    bool rows = fusion_weigher_needs_rows(&a->wg);
    for (int32_t i = 0; rows && i < e->n; i++) fusion_log_softmax(t->logits[i], V, e->temp[i], t->logp[i]);
    int32_t lead = align_unit_weights(a, (const float *const *)t->logp, V, NULL);
    if (lead < -1) return TUTTI_ERR;
    if (lead >= 0) { /* the members agree: the lead member's distribution */
        *row = t->logp[lead];
        return 0;
    }
    if (fuse_row(e, a->w, t->logits, a->work, t->logp, t->work, rows) < 0) return TUTTI_ERR;
    *row = a->work;
    return 0;
}

/* A mixture-sampled step (mixsample.h): the writer chain picks member z,
 * whose own distribution (at its temperature) is the row the sampler
 * draws from.  Only z runs (the tokens it missed since it last ran go
 * through in that one pass), unless a step receiver wants the fused row:
 * then every member runs, as in the ordinary step. */
static int token_step_mix(fusion_align *a, const float **row, int32_t *n_out) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t V = t->V;
    int32_t z = mix_chain_next(&t->chain, t->smp);
    if (z < 0) return TUTTI_ERR;
    double t0 = ens_now_s();
    if (e->step_cb) {
        token_step st = {(const int32_t *const *)t->ids, t->n, t->scratch, t->logits};
        if (ens_run_members(e, job_token_logits, &st) < 0) return TUTTI_ERR;
    } else if (!(t->logits[z] = fusion_member_logits_view(e->m[z], t->ids[z], t->n[z], t->scratch[z]))) {
        return TUTTI_ERR;
    }
    a->t_phase += ens_now_s() - t0;
    ens_prompt_done(e);
    a->report_row = NULL;
    if (e->step_cb && token_fuse(a, &a->report_row) < 0) return TUTTI_ERR;
    /* after the fusion, which uses the logp rows as scratch */
    const float *r = t->logits[z];
    if (e->temp[z] != 1.0f) {
        fusion_log_softmax(r, V, e->temp[z], t->logp[z]);
        r = t->logp[z];
    }
    a->mix_member = z;
    *row = r;
    *n_out = V;
    return 0;
}

static int token_step_row(fusion_align *a, const float **row, int32_t *n_out) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t V = t->V;
    a->mix_member = -1;
    if (t->mixs) return token_step_mix(a, row, n_out);
    if (t->at >= t->n_ahead) { /* the round is over: a new one (not on the first step: the prompt's) */
        t->n_ahead = t->at = 0;
        if (t->dr && a->g->n_units > 0 && draft_round(a) < 0) return TUTTI_ERR;
    }
    if (t->n_ahead > 0) {
        for (int32_t i = 0; i < e->n; i++) t->logits[i] = ahead_row(t, i, t->at);
    } else {
        token_step st = {(const int32_t *const *)t->ids, t->n, t->scratch, t->logits};
        double t0 = ens_now_s();
        if (ens_run_members(e, job_token_logits, &st) < 0) return TUTTI_ERR;
        a->t_phase += ens_now_s() - t0;
        ens_prompt_done(e);
    }
    for (int32_t i = 0; i < e->n; i++) /* a remote member that lost its server: weight 0 */
        if (fusion_member_has_left(e->m[i])) a->w[i] = 0;
    *n_out = V;
    if (t->pass >= 0) {
        *row = t->logits[t->pass];
        return 0;
    }
    return token_fuse(a, row);
}

/* The drafted token of this step: every row of the round but the last. */
static int32_t token_drafted(fusion_align *a, const float **q) {
    token_align *t = (token_align *)a;
    if (t->at + 1 >= t->n_ahead) return -1;
    *q = t->dr->q + (size_t)t->at * (size_t)t->V;
    return t->dr->tok[t->at];
}

int ens_fuse_token_row(const tutti_ensemble *e, const float *w, const float *const *logits, float *fused,
                       float *const *logp, double *work) {
    return fuse_row(e, w, logits, fused, logp, work, false);
}

static void token_mask_row(fusion_align *a, float *row) {
    token_align *t = (token_align *)a;
    token_mask_apply(&t->tm, a->g, row);
}

/* end of text or end of turn: every vocabulary is the same, so one
 * end-of-generation token ends every member's turn */
static size_t token_bytes(fusion_align *a, int32_t id, const char **bytes, bool *end) {
    token_align *t = (token_align *)a;
    const tutti_vocab *vocab = a->e->m[0]->vocab;
    *end = tutti_vocab_is_eog(vocab, id);
    int32_t k = *end ? 0 : tutti_token_to_piece(vocab, id, false, t->piece, 4096);
    if (k < 0) k = 0;
    *bytes = t->piece;
    return (size_t)k;
}

/* each member's log-probability of token id at its temperature */
static void token_member_lp(fusion_align *a, int32_t id, double *out) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t V = t->V;
    for (int32_t i = 0; i < e->n; i++) {
        const float *z = t->logits[i];
        if (!z || fusion_member_has_left(e->m[i])) {
            out[i] = -INFINITY;
            continue;
        }
        double tau = e->temp[i] > 0 ? e->temp[i] : 1.0, mx = -INFINITY, s = 0;
        for (int32_t x = 0; x < V; x++) mx = z[x] > mx ? z[x] : mx;
        for (int32_t x = 0; x < V; x++) s += exp(((double)z[x] - mx) / tau);
        out[i] = ((double)z[id] - mx) / tau - log(s);
    }
}

static int token_commit(fusion_align *a, int32_t id, int32_t *units) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    /* (mixture sampling without reports: only one member's row is current,
     * and nothing follows the weights) */
    if (fusion_weigher_needs_logp(&a->wg) && !a->weigher_off) token_member_lp(a, id, a->unit_logp);
    for (int32_t i = 0; i < e->n; i++) t->ids[i][t->n[i]++] = id;
    *units = 1;
    if (t->n_ahead > 0) { /* the round goes on while the draft's tokens are drawn */
        if (t->at + 1 < t->n_ahead && id == t->dr->tok[t->at]) {
            t->at++;
            a->g->n_draft_accepted++;
        } else { /* the round ends: on its bonus row (all accepted) or at a rejection */
            int32_t n_max = t->dr->p.n_max;
            t->k_next = t->at + 1 == t->n_ahead ? t->k_next + 2 : t->k_next - 1;
            t->k_next = t->k_next < 1 ? 1 : t->k_next > n_max ? n_max : t->k_next;
            t->n_ahead = t->at = 0;
        }
    }
    return 0;
}

static void token_free(fusion_align *a) {
    token_align *t = (token_align *)a;
    for (int32_t i = 0; i < a->e->n; i++) free(t->ids[i]);
    token_mask_free(&t->tm);
    fusion_draft_free(t->dr);
    free(t->ahead);
    free(t->bufs), free(t->work), free(t->piece);
    free(t);
}

static const align_ops token_ops = {
    .kind = ALIGN_OUT_TOKENS,
    .unit = "token",
    .report = true,
    .member_lp = token_member_lp,
    .start = token_start,
    .ctx_full = token_ctx_full,
    .step = token_step_row,
    .mask = token_mask_row,
    .drafted = token_drafted,
    .bytes = token_bytes,
    .commit = token_commit,
    .free = token_free,
};

fusion_align *align_token_new(tutti_ensemble *e, gen_ctx *g, const tutti_sampler_params *sp) {
    token_align *t = calloc(1, sizeof *t);
    if (!t) return tutti_set_error("generation: out of memory"), NULL;
    t->base = (fusion_align){.ops = &token_ops, .e = e, .g = g};
    t->sp = *sp;
    int32_t V = t->V = e->m[0]->n_vocab;
    t->bufs = malloc(sizeof(float) * (size_t)V * (size_t)(e->n * 2 + 1));
    t->work = malloc(sizeof(double) * (size_t)V);
    t->piece = malloc(4096);
    if (!t->bufs || !t->work || !t->piece) {
        token_free(&t->base);
        return tutti_set_error("generation: out of memory"), NULL;
    }
    for (int32_t i = 0; i < e->n; i++) {
        t->scratch[i] = t->bufs + (size_t)V * (size_t)i;
        t->logp[i] = t->bufs + (size_t)V * (size_t)(e->n + i);
    }
    t->base.work = t->bufs + (size_t)V * (size_t)(2 * e->n);
    if (e->draft || e->draft_p.lookup_n > 0) {
        if (!(t->dr = fusion_draft_new(e, sp))) {
            token_free(&t->base);
            return NULL;
        }
        t->k_next = t->dr->p.n_max;
        t->ahead = malloc(sizeof(float) * (size_t)e->n * (size_t)(t->dr->p.n_max + 1) * (size_t)V);
        if (!t->ahead) {
            token_free(&t->base);
            return tutti_set_error("generation: out of memory for the draft's rows"), NULL;
        }
    }
    return &t->base;
}

int fusion_token_fused(tutti_ensemble *e, const int32_t *ids, int32_t n, float *out) {
    int32_t V = e->m[0]->n_vocab;
    float *bufs = malloc(sizeof(float) * (size_t)V * (size_t)(e->n * 2));
    double *work = malloc(sizeof(double) * (size_t)V);
    if (!bufs || !work) {
        free(bufs), free(work);
        return tutti_set_error("fusion: out of memory");
    }
    float *scratch[TUTTI_ENSEMBLE_MAX_MEMBERS], *logp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    const float *logits[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) {
        scratch[i] = bufs + (size_t)V * (size_t)i;
        logp[i] = bufs + (size_t)V * (size_t)(e->n + i);
    }
    const int32_t *seq[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t ns[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) seq[i] = ids, ns[i] = n;
    token_step st = {seq, ns, scratch, logits};
    int rc = ens_run_members(e, job_token_logits, &st);
    if (rc == 0) {
        for (int32_t i = 0; i < e->n; i++) fusion_log_softmax(logits[i], V, e->temp[i], logp[i]);
        fusion_rule_params rp = ens_rule_params(e);
        rc = fusion_combine(&rp, e->n, (const float *const *)logp, V, out, work, NULL);
    }
    free(bufs), free(work);
    return rc;
}
