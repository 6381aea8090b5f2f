/* SPAN alignment (Cool-Fusion, ACL 2025; SweetSpan, arXiv 2409.18583).
 *
 * Each round every member drafts a continuation with its own tokenizer and
 * sampler up to the next word end (the byte before a space or newline that
 * follows a word: SPM, BPE and character tokenizers all have a token
 * boundary there in canonical tokenizations), or end of text.  Every member
 * then scores every draft through its own tokenizer, exactly: the draft's
 * log-probability given the committed text is the sum of the member's
 * next-byte log-probabilities (bytestate.c), which marginalises over all
 * tokenizations.  The draft with the best fused log-likelihood per byte
 * wins: PRODUCT/GATE/CONTRASTIVE use Σ w_i log P_i / Σ w_i, MIX uses
 * log Σ w_i P_i / Σ w_i.  Cost: N drafts × N scorings per span.  Each round
 * is one step of the generation loop (align.h): its outcomes are the drafts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/align.h"
#include "member/remote.h"
#include "util/error.h"

#define SPAN_MAX_BYTES 64
#define SPAN_MAX_TOKENS 32

typedef struct draft {
    char bytes[SPAN_MAX_BYTES + 64];
    int32_t n;
    bool end; /* the member ended the text after these bytes */
} draft;

typedef struct span_ctx {
    fusion_align base;
    tutti_sampler_params sp;                 /* each member's drafting sampler: seed + its index */
    float score[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* this round's drafts' fused log-likelihood per byte */
    int32_t best;
    fusion_bytes *st[TUTTI_ENSEMBLE_MAX_MEMBERS];
    fusion_bytes *cl[TUTTI_ENSEMBLE_MAX_MEMBERS][TUTTI_ENSEMBLE_MAX_MEMBERS]; /* [member][draft] */
    tutti_sampler *smp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    draft d[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t n_d;
    double ll[TUTTI_ENSEMBLE_MAX_MEMBERS][TUTTI_ENSEMBLE_MAX_MEMBERS]; /* [member][draft] */
    bool full[TUTTI_ENSEMBLE_MAX_MEMBERS][TUTTI_ENSEMBLE_MAX_MEMBERS]; /* scoring would overflow the member's context */
    bool ctx_hit[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* the member's draft stopped at its context's end */
    bool masked;                              /* allowed / forbidden strings: drafts obey them token by token */
    bool dead[TUTTI_ENSEMBLE_MAX_MEMBERS];    /* left the generation: its tokens cannot spell the text */
    token_mask tm[TUTTI_ENSEMBLE_MAX_MEMBERS];
    gr_constraint gc[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* mask->grammar over each member's vocabulary */
    const gen_prompt *pr;
    bool want_rows; /* context weights: each member's next-byte row at the span's start */
    float row0[TUTTI_ENSEMBLE_MAX_MEMBERS][FUSION_N_BYTE_OUT];
} span_ctx;

static int job_start(tutti_ensemble *e, int32_t i, void *arg) {
    span_ctx *c = arg;
    int rc = ens_bytes_start(e, c->st[i], c->pr, i);
    if (rc == FUSION_ERR_CTX)
        return tutti_set_error("member %s: the prompt needs more than its context of %d tokens; raise -c or "
                               "shorten the prompt",
                               e->m[i]->name, e->m[i]->n_ctx);
    return rc < 0 ? TUTTI_ERR : 0;
}

static bool is_space(char ch) { return ch == ' ' || ch == '\n'; }

/* The token sequence member i drafts from.  Text prompt: the canonical
 * tokenization of prompt + committed text (BOS as the vocabulary asks).
 * Token-id prompt: the heaviest tokenization hypothesis of the byte state
 * that spells exactly the committed text (the prompt ids come first); if
 * pruning left none, the prompt ids followed by the tokenization of the
 * committed text (for a tokenizer that puts a prefix such as SPM's " " in
 * front of any text, the text's own leading space stands for it; text
 * without one then gets an extra leading space in the drafting context
 * only, scoring stays exact).  Returns the count, -1 on error; *ids is
 * malloc'd with room for SPAN_MAX_TOKENS more. */
static int32_t draft_context(tutti_ensemble *e, span_ctx *c, int32_t i, int32_t **ids_out) {
    fusion_member *m = e->m[i];
    const gen_ctx *g = c->base.g;
    const gen_prompt *pr = c->pr;
    *ids_out = NULL;
    if (pr->ids) {
        int32_t nb;
        const int32_t *best = fusion_bytes_best_path(c->st[i], &nb);
        int32_t cap = (best ? nb : pr->n_ids[i] + (int32_t)g->n_text + 8) + SPAN_MAX_TOKENS;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
        if (!ids) return tutti_set_error("span: out of memory");
        *ids_out = ids;
        if (best) {
            memcpy(ids, best, sizeof(int32_t) * (size_t)nb);
            return nb;
        }
        int32_t n = pr->n_ids[i];
        memcpy(ids, pr->ids[i], sizeof(int32_t) * (size_t)n);
        const fusion_trie *t = e->trie[i];
        size_t skip =
            t->n_prefix > 0 && g->n_text >= (size_t)t->n_prefix && !memcmp(g->text, t->prefix, (size_t)t->n_prefix)
                ? (size_t)t->n_prefix
                : 0;
        if (g->n_text > skip) {
            int32_t k = tutti_tokenize(m->vocab, g->text + skip, g->n_text - skip, false, false, ids + n,
                                       cap - n - SPAN_MAX_TOKENS);
            if (k < 0) return tutti_set_error("member %s: cannot tokenize the text so far", m->name);
            n += k;
        }
        return n;
    }
    size_t tl = pr->len + g->n_text;
    char *text = malloc(tl + 1);
    int32_t cap = (int32_t)tl + 8 + SPAN_MAX_TOKENS;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    *ids_out = ids;
    if (!text || !ids) {
        free(text);
        return tutti_set_error("span: out of memory");
    }
    memcpy(text, pr->text, pr->len);
    if (g->n_text) memcpy(text + pr->len, g->text, g->n_text);
    int32_t n = tutti_tokenize(m->vocab, text, tl, tutti_vocab_add_bos(m->vocab), false, ids, cap - SPAN_MAX_TOKENS);
    free(text);
    if (n <= 0)
        return tutti_set_error("member %s: cannot tokenize the text so far%s", m->name,
                               n == 0 ? " (no BOS and an empty prompt)" : "");
    return n;
}

static int job_draft(tutti_ensemble *e, int32_t i, void *arg) {
    span_ctx *c = arg;
    fusion_member *m = e->m[i];
    float *logits = malloc(sizeof(float) * (size_t)m->n_vocab);
    float *lp = malloc(sizeof(float) * (size_t)m->n_vocab);
    int32_t *ids = NULL;
    int rc = TUTTI_ERR;
    draft *d = &c->d[i];
    d->n = 0, d->end = false;
    c->ctx_hit[i] = false;
    if (c->dead[i]) {
        free(logits), free(lp);
        return 0;
    }
    /* with a mask, each draft token must keep committed text + draft so far
     * allowed (the mask over this member's vocabulary) */
    gen_ctx dg = {.mask = c->base.g->mask};
    if (c->masked) {
        dg.cap_text = c->base.g->n_text + SPAN_MAX_BYTES + 512;
        dg.text = malloc(dg.cap_text);
        if (dg.text && c->base.g->n_text) memcpy(dg.text, c->base.g->text, c->base.g->n_text);
    }
    if (!logits || !lp || (c->masked && !dg.text)) {
        tutti_set_error("span: out of memory");
        goto done;
    }
    int32_t n = draft_context(e, c, i, &ids);
    if (n < 0) goto done;
    /* drafts follow the grammar token by token from the committed text's state */
    int32_t gs0 = c->gc[i].m ? tutti_grammar_matcher_state(c->gc[i].m) : 0;
    bool word = false;
    c->ctx_hit[i] = false;
    for (int32_t k = 0; k < SPAN_MAX_TOKENS; k++) {
        if (!fusion_member_fits(m, n)) { /* no logits after more tokens than the context holds */
            c->ctx_hit[i] = true;
            break;
        }
        const float *z = fusion_member_logits_view(m, ids, n, logits);
        if (!z) goto done;
        fusion_log_softmax(z, m->n_vocab, e->temp[i], lp);
        if (c->masked) {
            memcpy(dg.text + c->base.g->n_text, d->bytes, (size_t)d->n);
            dg.n_text = c->base.g->n_text + (size_t)d->n;
            token_mask_apply(&c->tm[i], &dg, lp);
            bool any = false;
            for (int32_t t = 0; t < m->n_vocab && !any; t++) any = lp[t] > -INFINITY;
            if (!any) break; /* the mask ends this draft here */
        }
        if (c->gc[i].m) {
            int32_t na = tutti_grammar_matcher_mask(c->gc[i].m, c->gc[i].v, lp);
            if (na < 0) goto restore;
            if (na == 0) break;
        }
        int32_t id = tutti_sampler_sample(c->smp[i], lp, m->n_vocab);
        if (id < 0) goto done;
        tutti_sampler_accept(c->smp[i], id);
        if (tutti_vocab_is_eog(m->vocab, id)) {
            d->end = true;
            break;
        }
        ids[n++] = id;
        char piece[256];
        int32_t pl = tutti_token_to_piece(m->vocab, id, false, piece, sizeof piece);
        if (pl < 0) pl = 0;
        if (c->gc[i].m && tutti_grammar_matcher_accept(c->gc[i].m, piece, (size_t)pl) < 0) goto restore;
        bool cut = false;
        for (int32_t b = 0; b < pl; b++) {
            if (is_space(piece[b]) && word) {
                cut = true; /* word end: the draft stops before this space */
                break;
            }
            if (!is_space(piece[b])) word = true;
            if (d->n < SPAN_MAX_BYTES) d->bytes[d->n++] = piece[b];
        }
        if (cut || d->n >= SPAN_MAX_BYTES) break;
    }
    rc = 0;
restore:
    if (c->gc[i].m) tutti_grammar_matcher_set_state(c->gc[i].m, gs0);
done:
    free(ids), free(logits), free(lp), free(dg.text);
    return rc;
}

/* Member i scores every draft from a copy of its committed state.  A
 * draft whose scoring would need more tokens than the member's context
 * holds is marked full (not scored). */
static int job_score(tutti_ensemble *e, int32_t i, void *arg) {
    span_ctx *c = arg;
    double p[FUSION_N_BYTE_OUT];
    if (c->want_rows) { /* the features' row, computed once: the copies below start from it */
        if (!c->dead[i] && fusion_bytes_next(c->st[i], p) < 0) return TUTTI_ERR;
        for (int b = 0; b < FUSION_N_BYTE_OUT; b++)
            c->row0[i][b] = !c->dead[i] && p[b] > 0 ? (float)log(p[b]) : -INFINITY;
    }
    for (int32_t k = 0; k < c->n_d; k++) {
        c->full[i][k] = false;
        if (c->dead[i]) {
            c->ll[i][k] = -INFINITY;
            continue;
        }
        fusion_bytes *s = fusion_bytes_clone(c->st[i]);
        if (!s) return TUTTI_ERR;
        c->cl[i][k] = s;
        c->full[i][k] = false;
        double ll = 0;
        const draft *d = &c->d[k];
        for (int32_t b = 0; b <= d->n; b++) {
            if (b == d->n && !d->end) break;
            if (!fusion_member_fits(e->m[i], fusion_bytes_need_tokens(s))) {
                c->full[i][k] = true;
                ll = -INFINITY;
                break;
            }
            if (fusion_bytes_next(s, p) < 0) return TUTTI_ERR;
            int out = b < d->n ? (uint8_t)d->bytes[b] : FUSION_END;
            if (!(p[out] > 0)) {
                ll = -INFINITY;
                break;
            }
            ll += log(p[out]);
            if (b < d->n && fusion_bytes_commit(s, (uint8_t)d->bytes[b]) < 0) return TUTTI_ERR;
        }
        c->ll[i][k] = ll;
    }
    return 0;
}

/* Frees the scoring copies; member i's state becomes its copy that scored
 * draft `keep` (unless it left the generation). */
static void free_clones(tutti_ensemble *e, span_ctx *c, int32_t keep) {
    for (int32_t i = 0; i < e->n; i++)
        for (int32_t k = 0; k < TUTTI_ENSEMBLE_MAX_MEMBERS; k++) {
            if (k == keep && c->cl[i][k] && !c->dead[i]) {
                fusion_bytes_free(c->st[i]);
                c->st[i] = c->cl[i][k];
            } else {
                fusion_bytes_free(c->cl[i][k]);
            }
            c->cl[i][k] = NULL;
        }
}

static int span_start(fusion_align *a, const gen_prompt *pr, tutti_sampler *smp) {
    (void)smp;
    span_ctx *c = (span_ctx *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    c->pr = pr;
    for (int32_t i = 0; i < e->n; i++) {
        fusion_bytes_params bp = ens_bytes_params(e, i);
        c->st[i] = fusion_bytes_new(e->m[i], e->trie[i], &bp);
        tutti_sampler_params p = c->sp;
        p.seed = c->sp.seed + (uint64_t)i;
        c->smp[i] = tutti_sampler_new(&p);
        if (!c->st[i] || !c->smp[i]) return TUTTI_ERR;
    }
    c->masked = token_mask_needed(g->mask);
    if (c->masked)
        for (int32_t i = 0; i < e->n; i++)
            if (token_mask_init(&c->tm[i], e->trie[i], g->mask) < 0) return TUTTI_ERR;
    if (g->gc.m)
        for (int32_t i = 0; i < e->n; i++)
            if (gr_constraint_init(&c->gc[i], g->mask->grammar, e->m[i]->vocab) < 0) return TUTTI_ERR;
    double t0 = ens_now_s();
    if (ens_run_members(e, job_start, c) < 0) return TUTTI_ERR;
    a->t_phase += ens_now_s() - t0;
    return 0;
}

/* A full context is a clean stop (as in TOKEN and BYTE alignment): when a
 * member cannot evaluate the committed text, when every member's draft
 * stops at its context's end (step), or when no draft can be scored within
 * every member's context (step). */
static bool span_ctx_full(fusion_align *a) {
    span_ctx *c = (span_ctx *)a;
    int32_t full_m = ens_bytes_ctx_full(a->e, c->st);
    if (full_m < 0) return false;
    ens_note_ctx_full(a->e, a->g, full_m);
    return true;
}

/* One round: every member drafts, the distinct drafts the mask allows are
 * scored by every member; *row[n_d] the drafts' fused log-likelihoods per
 * byte (-inf: would overflow a context), the best one in c->best. */
static int span_step(fusion_align *a, const float **row, int32_t *n_row) {
    span_ctx *c = (span_ctx *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    double t0 = ens_now_s();
    if (ens_run_members(e, job_draft, c) < 0) return TUTTI_ERR;
    a->t_phase += ens_now_s() - t0;
    ens_prompt_done(e);
    /* distinct drafts that the mask allows, cut to the length limit */
    draft all[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t n_all = 0;
    for (int32_t i = 0; i < e->n; i++) {
        if (fusion_member_has_left(e->m[i])) { /* its server failed (on_fail=leave): no draft, weight 0 */
            c->base.w[i] = 0;
            continue;
        }
        draft d = c->d[i];
        if (g->max_units > 0 && d.n > g->max_units - g->n_units) d.n = g->max_units - g->n_units, d.end = false;
        if (g->gc.m) { /* cut at the first byte the grammar rejects; end only where it is complete */
            int32_t s0 = tutti_grammar_matcher_state(g->gc.m);
            size_t k = tutti_grammar_matcher_accept_prefix(g->gc.m, d.bytes, (size_t)d.n);
            if (k < (size_t)d.n) d.n = (int32_t)k, d.end = false;
            if (d.end && !tutti_grammar_matcher_is_complete(g->gc.m)) d.end = false;
            tutti_grammar_matcher_set_state(g->gc.m, s0);
        }
        if (d.n == 0 && !d.end) continue;
        if (!gen_text_ok(g, d.bytes, (size_t)d.n, d.end)) continue;
        bool dup = false;
        for (int32_t k = 0; k < n_all && !dup; k++)
            dup = all[k].n == d.n && all[k].end == d.end && !memcmp(all[k].bytes, d.bytes, (size_t)d.n);
        if (!dup) all[n_all++] = d;
    }
    if (n_all == 0) {
        bool any_end = false, any_full = false;
        for (int32_t i = 0; i < e->n; i++) any_end |= c->d[i].end, any_full |= c->ctx_hit[i];
        if (any_full) {
            for (int32_t i = 0; i < e->n; i++)
                if (c->ctx_hit[i]) {
                    ens_note_ctx_full(e, g, i);
                    break;
                }
            return ALIGN_STOP;
        }
        if (!any_end && !(g->mask && (g->mask->n_allowed || g->mask->n_forbidden || g->mask->grammar)))
            return tutti_set_error("span: no member produced a draft");
        if (!any_end) return tutti_set_error("span: the mask rules out every draft");
        return ALIGN_STOP;
    }
    memcpy(c->d, all, sizeof(draft) * (size_t)n_all);
    c->n_d = n_all;
    c->want_rows = fusion_weigher_needs_rows(&a->wg);
    t0 = ens_now_s();
    if (ens_run_members(e, job_score, c) < 0) {
        free_clones(e, c, -1);
        return TUTTI_ERR;
    }
    a->t_phase += ens_now_s() - t0;
    for (int32_t i = 0; i < e->n; i++)
        if (fusion_member_has_left(e->m[i])) c->base.w[i] = 0;
    const float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) rows[i] = c->row0[i];
    if (align_unit_weights(a, rows, FUSION_N_BYTE_OUT, c->dead) < -1) { /* this span's weights */
        free_clones(e, c, -1);
        return TUTTI_ERR;
    }
    int32_t best = -1;
    double best_s = -INFINITY, wsum = 0;
    for (int32_t i = 0; i < e->n; i++) wsum += c->base.w[i];
    if (wsum == 0) wsum = 1;
    for (int32_t k = 0; k < n_all; k++) {
        bool full = false;
        c->score[k] = -INFINITY;
        for (int32_t i = 0; i < e->n; i++) full |= c->full[i][k];
        if (full) continue;
        double s;
        if (e->rule == TUTTI_RULE_MIX) {
            double mx = -INFINITY, acc = 0;
            for (int32_t i = 0; i < e->n; i++)
                if (c->base.w[i] > 0 && c->ll[i][k] > mx) mx = c->ll[i][k];
            for (int32_t i = 0; i < e->n; i++)
                if (c->base.w[i] > 0 && mx > -INFINITY) acc += c->base.w[i] / wsum * exp(c->ll[i][k] - mx);
            s = mx > -INFINITY ? mx + log(acc) : -INFINITY;
        } else {
            s = 0;
            for (int32_t i = 0; i < e->n; i++)
                if (c->base.w[i] != 0) s += c->base.w[i] / wsum * c->ll[i][k];
        }
        s /= (double)(all[k].n + (all[k].end ? 1 : 0));
        c->score[k] = (float)s;
        if (best < 0 || s > best_s) best = k, best_s = s;
    }
    if (best < 0) { /* every draft would overflow some member's context */
        for (int32_t i = 0; i < e->n && g->ctx_full < 0; i++)
            if (c->full[i][0]) ens_note_ctx_full(e, g, i);
        free_clones(e, c, -1);
        return ALIGN_STOP;
    }
    c->best = best;
    *row = c->score;
    *n_row = n_all;
    return 0;
}

/* The draft with the best fused log-likelihood per byte (the first of equals). */
static int32_t span_choose(fusion_align *a, const float *row, int32_t n) {
    (void)row, (void)n;
    return ((span_ctx *)a)->best;
}

static size_t span_bytes(fusion_align *a, int32_t k, const char **bytes, bool *end) {
    span_ctx *c = (span_ctx *)a;
    *bytes = c->d[k].bytes;
    *end = false; /* a draft that ends the text is committed first (span_commit) */
    return (size_t)c->d[k].n;
}

static int span_commit(fusion_align *a, int32_t best, int32_t *units) {
    span_ctx *c = (span_ctx *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    /* a member that gives the chosen text probability 0 cannot follow it
     * (its copy stopped at the impossible byte): as in BYTE alignment it
     * leaves the generation, the others' weights renormalised */
    bool live = false;
    for (int32_t i = 0; i < e->n; i++) {
        if (!c->dead[i] && c->ll[i][best] == -INFINITY) {
            ens_note_left(e, g, c->cl[i][best], i, -2);
            c->dead[i] = true, c->base.w[i] = 0;
        }
        live |= !c->dead[i] && c->base.w[i] != 0;
    }
    if (!live) {
        free_clones(e, c, -1);
        return tutti_set_error("span: no member can spell the chosen text");
    }
    /* weights that follow the text: each member's probability of the span */
    for (int32_t i = 0; i < e->n; i++) a->unit_logp[i] = c->ll[i][best];
    a->gone = c->dead;
    a->unit_bytes = c->d[best].n > 0 ? c->d[best].n : 1; /* LOSS is per byte */
    free_clones(e, c, best);
    const draft *d = &c->d[best];
    *units = d->n;
    for (int32_t i = 0; i < e->n; i++)
        if (gr_constraint_accept(&c->gc[i], d->bytes, (size_t)d->n) < 0) return TUTTI_ERR;
    return d->end ? ALIGN_STOP : 0;
}

static void span_free(fusion_align *a) {
    span_ctx *c = (span_ctx *)a;
    tutti_ensemble *e = a->e;
    free_clones(e, c, -1);
    for (int32_t i = 0; i < e->n; i++) {
        fusion_bytes_free(c->st[i]);
        tutti_sampler_free(c->smp[i]);
        token_mask_free(&c->tm[i]);
        gr_constraint_free(&c->gc[i]);
    }
    free(c);
}

static const align_ops span_ops = {
    .kind = ALIGN_OUT_SPANS,
    .unit = "draft",
    .report = false,
    .start = span_start,
    .ctx_full = span_ctx_full,
    .step = span_step,
    .choose = span_choose,
    .bytes = span_bytes,
    .commit = span_commit,
    .free = span_free,
};

fusion_align *align_span_new(tutti_ensemble *e, gen_ctx *g, const tutti_sampler_params *sp) {
    span_ctx *c = calloc(1, sizeof *c);
    if (!c) return tutti_set_error("span: out of memory"), NULL;
    c->base = (fusion_align){.ops = &span_ops, .e = e, .g = g};
    c->sp = *sp;
    return &c->base;
}
