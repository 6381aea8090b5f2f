/* TOKEN alignment: members with one vocabulary fuse their next-token
 * distributions id by id; every member's sequence is its prompt followed
 * by the shared generated tokens (align.h for the step interface). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/align.h"
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
 * generated tokens.  A text prompt is tokenized once (the vocabularies are
 * equal); token-id prompts are copied per member. */
static int token_prompts(tutti_ensemble *e, const gen_prompt *pr, int32_t max_gen, int32_t **ids, int32_t *n,
                         int32_t *cap) {
    for (int32_t i = 0; i < e->n; i++) {
        int32_t np = pr->ids ? pr->n_ids[i] : (int32_t)pr->len + 2;
        cap[i] = np + 1 + (max_gen > 0 ? max_gen : e->m[i]->n_ctx);
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
                                   "(%d tokens)", i + 1, e->path[i], n[i], e->m[i]->n_ctx);
    }
    return 0;
}

typedef struct token_align {
    fusion_align base;
    int32_t V;
    int32_t *ids[TUTTI_ENSEMBLE_MAX_MEMBERS], n[TUTTI_ENSEMBLE_MAX_MEMBERS], cap[TUTTI_ENSEMBLE_MAX_MEMBERS];
    token_mask tm;
    float *bufs;  /* scratch[n], logp[n], fused */
    double *work;
    char *piece;
    /* logits: each member's row, usually its session's own (no copy);
     * logp: per-member log-probabilities, or scratch for the fusion */
    const float *logits[TUTTI_ENSEMBLE_MAX_MEMBERS];
    float *scratch[TUTTI_ENSEMBLE_MAX_MEMBERS], *logp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t pass;
} token_align;

static int token_start(fusion_align *a, const gen_prompt *pr, tutti_sampler *smp) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    if (token_prompts(e, pr, g->max_units, t->ids, t->n, t->cap) < 0) return TUTTI_ERR;
    /* as tutti generate: the prompt (member 1's) counts for the repetition penalty */
    for (int32_t k = 0; k < t->n[0]; k++) tutti_sampler_accept(smp, t->ids[0][k]);
    t->pass = a->ad.on ? -1 : passthrough_member(e);
    a->masked = token_mask_needed(g->mask);
    if (a->masked) {
        /* the piece table of the (shared) vocabulary, built once per ensemble */
        if (!e->trie[0] && !(e->trie[0] = fusion_trie_build(e->m[0]->vocab))) return TUTTI_ERR;
        if (token_mask_init(&t->tm, e->trie[0], g->mask) < 0) return TUTTI_ERR;
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

static int token_step_row(fusion_align *a, const float **row, int32_t *n_out) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t V = t->V;
    float *fused = a->work;
    token_step st = {(const int32_t *const *)t->ids, t->n, t->scratch, t->logits};
    double t0 = ens_now_s();
    if (ens_run_members(e, job_token_logits, &st) < 0) return TUTTI_ERR;
    a->t_phase += ens_now_s() - t0;
    ens_prompt_done(e);
    for (int32_t i = 0; i < e->n; i++) /* a remote member that lost its server: weight 0 */
        if (fusion_member_has_left(e->m[i])) a->w[i] = 0;
    *n_out = V;
    if (t->pass >= 0) {
        *row = t->logits[t->pass];
        return 0;
    }
    if (ens_fuse_token_row(e, a->w, t->logits, fused, t->logp, t->work) < 0) return TUTTI_ERR;
    *row = fused;
    return 0;
}

int ens_fuse_token_row(const tutti_ensemble *e, const float *w, const float *const *logits, float *fused,
                       float *const *logp, double *work) {
    int32_t V = e->m[0]->n_vocab;
    fusion_rule_params rp = ens_rule_params(e);
    rp.weights = w;
    if (e->rule == TUTTI_RULE_MIX || e->rule == TUTTI_RULE_PRODUCT) /* logp[0] spans all n_members rows */
        return fusion_combine_logits(&rp, e->temp, e->n, logits, V, fused, logp[0]);
    const float *lp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) {
        if (e->w[i] != 0) fusion_log_softmax(logits[i], V, e->temp[i], logp[i]);
        lp[i] = e->w[i] != 0 ? logp[i] : logits[i]; /* weight 0: unused */
    }
    return fusion_combine(&rp, e->n, lp, V, fused, work, NULL);
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

static int token_commit(fusion_align *a, int32_t id, int32_t *units) {
    token_align *t = (token_align *)a;
    tutti_ensemble *e = a->e;
    int32_t V = t->V;
    if (a->ad.on) /* each member's log-probability of the drawn token at its temperature */
        for (int32_t i = 0; i < e->n; i++) {
            const float *z = t->logits[i];
            double tau = e->temp[i] > 0 ? e->temp[i] : 1.0, mx = -INFINITY, s = 0;
            for (int32_t x = 0; x < V; x++) mx = z[x] > mx ? z[x] : mx;
            for (int32_t x = 0; x < V; x++) s += exp(((double)z[x] - mx) / tau);
            a->unit_logp[i] = ((double)z[id] - mx) / tau - log(s);
        }
    for (int32_t i = 0; i < e->n; i++) t->ids[i][t->n[i]++] = id;
    *units = 1;
    return 0;
}

static void token_free(fusion_align *a) {
    token_align *t = (token_align *)a;
    for (int32_t i = 0; i < a->e->n; i++) free(t->ids[i]);
    token_mask_free(&t->tm);
    free(t->bufs), free(t->work), free(t->piece);
    free(t);
}

static const align_ops token_ops = {
    .kind = ALIGN_OUT_TOKENS,
    .unit = "token",
    .report = true,
    .start = token_start,
    .ctx_full = token_ctx_full,
    .step = token_step_row,
    .mask = token_mask_row,
    .bytes = token_bytes,
    .commit = token_commit,
    .free = token_free,
};

fusion_align *align_token_new(tutti_ensemble *e, gen_ctx *g) {
    token_align *t = calloc(1, sizeof *t);
    if (!t) return tutti_set_error("generation: out of memory"), NULL;
    t->base = (fusion_align){.ops = &token_ops, .e = e, .g = g};
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
