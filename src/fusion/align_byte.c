/* BYTE alignment: every member's exact next-byte distribution
 * (bytestate.c: the mass of its tokenization hypotheses, prefix by prefix)
 * fused over the 257 byte outcomes; members with any vocabularies (align.h
 * for the step interface).
 *
 * Drafting (tutti_ensemble_set_draft): a round starts when no drafted byte
 * is pending; the draft model (any tokenizer) continues the text so far
 * and proposes the bytes of its tokens (fusion_draft_propose_bytes).
 * Every member is told the drafted bytes (fusion_bytes_expect), so the
 * distributions along its canonical tokenization of the text with them
 * are computed in one forward pass (logits_from, which extends the
 * session that holds the text's tokens); its hypotheses then take them as
 * the drafted bytes are committed, instead of a pass per token boundary.
 * The steps themselves are unchanged: each drafted byte is verified by
 * the fused row of that step, exactly as without a draft (ops->drafted
 * gives the drafted byte with a one-hot q: greedy accepts it when it is
 * the argmax, sampling with probability p(b), else draws from p without
 * b), and the round ends at the first byte that differs.  Nothing runs
 * beyond the accepted bytes: the hypotheses follow committed bytes only,
 * the window's rows past them are dropped with the next round's (or never
 * taken), and a member's session rewinds past the rejected tokens when
 * the next request diverges.  Since what a member evaluates does not
 * depend on what was computed ahead (bytestate.c, hyp.pre), the greedy
 * text is the plain run's, byte for byte. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/align.h"
#include "fusion/draft.h"
#include "member/remote.h"
#include "util/error.h"

typedef struct byte_job {
    fusion_bytes **st;
    const gen_prompt *pr;
    bool *dead; /* members that left the generation (NULL: none may leave) */
    /* a round's drafted bytes, told to every member before its pass (NULL: none) */
    const char *expect;
    int32_t n_expect;
} byte_job;

int ens_bytes_start(const tutti_ensemble *e, fusion_bytes *st, const gen_prompt *pr, int32_t i) {
    int rc = pr->ids ? fusion_bytes_start_ids(st, pr->ids[i], pr->n_ids[i]) : fusion_bytes_start(st, pr->text, pr->len);
    /* a member that shifts its context still takes the prompt whole, as
     * llama.cpp does: only generated tokens push the oldest out */
    int32_t np = 0;
    if (rc == 0 && e->m[i]->ctx_shift && (fusion_bytes_best_path(st, &np), np > e->m[i]->n_ctx)) rc = FUSION_ERR_CTX;
    return rc;
}

int32_t ens_bytes_ctx_full(const tutti_ensemble *e, fusion_bytes *const *st) {
    for (int32_t i = 0; i < e->n; i++)
        if (!fusion_member_fits(e->m[i], fusion_bytes_need_tokens(st[i]))) return i;
    return -1;
}

/* A member whose tokens cannot spell the prompt (a character vocabulary
 * without "€", say) leaves the generation at once instead of failing it;
 * any other failure (context full, NaN logits) is an error.  The prompt
 * filling a context is the caller's to fix: named in the message. */
static int job_bytes_start(tutti_ensemble *e, int32_t i, void *arg) {
    byte_job *j = arg;
    int rc = ens_bytes_start(e, j->st[i], j->pr, i);
    if (rc == FUSION_ERR_SPELL && j->dead) {
        j->dead[i] = true;
        return 0;
    }
    if (rc == FUSION_ERR_CTX)
        return tutti_set_error("member %s: the prompt needs more than its context of %d tokens; raise -c or "
                               "shorten the prompt",
                               e->m[i]->name, e->m[i]->n_ctx);
    return rc < 0 ? TUTTI_ERR : 0;
}

static int job_bytes_prepare(tutti_ensemble *e, int32_t i, void *arg) {
    (void)e;
    byte_job *j = arg;
    if (j->dead && j->dead[i]) return 0;
    if (j->expect && fusion_bytes_expect(j->st[i], j->expect, (size_t)j->n_expect) < 0) return TUTTI_ERR;
    return fusion_bytes_prepare(j->st[i]);
}

/* Next-byte log-probabilities of every member (-inf rows for members that
 * left the generation), then their fusion under weights w. */
static int bytes_rows(tutti_ensemble *e, fusion_bytes **st, const bool *dead, float (*lp)[FUSION_N_BYTE_OUT]) {
    double d[FUSION_N_BYTE_OUT];
    for (int32_t i = 0; i < e->n; i++) {
        if (dead && dead[i]) {
            for (int b = 0; b < FUSION_N_BYTE_OUT; b++) lp[i][b] = -INFINITY;
            continue;
        }
        if (fusion_bytes_next(st[i], d) < 0) return TUTTI_ERR;
        for (int b = 0; b < FUSION_N_BYTE_OUT; b++) lp[i][b] = d[b] > 0 ? (float)log(d[b]) : -INFINITY;
    }
    return 0;
}

static int bytes_combine(const tutti_ensemble *e, const float *w, float (*lp)[FUSION_N_BYTE_OUT], float *out) {
    const float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double work[FUSION_N_BYTE_OUT];
    for (int32_t i = 0; i < e->n; i++) rows[i] = lp[i];
    fusion_rule_params rp = {.rule = e->rule, .weights = w, .beta = e->beta};
    return fusion_combine(&rp, e->n, rows, FUSION_N_BYTE_OUT, out, work, NULL);
}

int fusion_bytes_fused(tutti_ensemble *e, fusion_bytes **st, float *out) {
    float lp[TUTTI_ENSEMBLE_MAX_MEMBERS][FUSION_N_BYTE_OUT];
    if (bytes_rows(e, st, NULL, lp) < 0) return TUTTI_ERR;
    return bytes_combine(e, e->w, lp, out);
}

typedef struct byte_align {
    fusion_align base;
    fusion_bytes *st[TUTTI_ENSEMBLE_MAX_MEMBERS];
    byte_job j;
    fusion_utf8 u;
    char c; /* the drawn byte */
    float fused[FUSION_N_BYTE_OUT], lp[TUTTI_ENSEMBLE_MAX_MEMBERS][FUSION_N_BYTE_OUT];
    /* drafting (see the top): the draft; the text it conditions on (the
     * prompt, member 1's for token-id prompts, and the committed bytes);
     * this round's drafted bytes round[0..n_round), at: the next one to
     * verify; q: the one-hot proposal; k_next: the next round's length in
     * the draft's tokens, adapted as in TOKEN alignment (two more after a
     * round accepted whole, one fewer after a rejection: it depends only on
     * decided rounds, so the output does not) */
    fusion_draft *dr;
    char *text;
    size_t n_text, cap_text;
    const char *round;
    int32_t n_round, at, k_next;
    float q[FUSION_N_BYTE_OUT];
} byte_align;

/* Appends bytes to the draft's text.  0 or TUTTI_ERR. */
static int text_push(byte_align *s, const char *b, size_t n) {
    if (s->n_text + n > s->cap_text) {
        size_t cap = s->cap_text ? s->cap_text : 256;
        while (cap < s->n_text + n) cap *= 2;
        char *t = realloc(s->text, cap);
        if (!t) return tutti_set_error("generation: out of memory for the draft's text");
        s->text = t, s->cap_text = cap;
    }
    memcpy(s->text + s->n_text, b, n);
    s->n_text += n;
    return 0;
}

static int byte_start(fusion_align *a, const gen_prompt *pr, tutti_sampler *smp) {
    byte_align *s = (byte_align *)a;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    for (int32_t i = 0; i < e->n; i++) {
        fusion_bytes_params bp = ens_bytes_params(e, i);
        bp.lazy = true; /* hypotheses below the pruning share get a pass only when needed */
        s->st[i] = fusion_bytes_new(e->m[i], e->trie[i], &bp);
        if (!s->st[i]) return TUTTI_ERR;
    }
    /* A member that gives the drawn byte probability 0 (its tokens cannot
     * spell the text, e.g. a character vocabulary without that character,
     * possible under mix) has no conditional distribution any more: it
     * leaves this generation (weight 0, the others renormalised). */
    bool *dead = g->dead;
    bool dead0[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    s->j = (byte_job){.st = s->st, .pr = pr, .dead = dead0};
    double t0 = ens_now_s();
    if (ens_run_members(e, job_bytes_start, &s->j) < 0) return TUTTI_ERR;
    a->t_phase += ens_now_s() - t0;
    int32_t n_alive = 0;
    for (int32_t i = 0; i < e->n; i++) {
        if (dead0[i]) ens_note_left(e, g, NULL, i, -1);
        if (dead[i]) a->w[i] = 0;
        else n_alive++;
    }
    s->j.dead = dead;
    if (n_alive == 0)
        return tutti_set_error("byte alignment: no member's tokens can spell the prompt (every member has "
                               "probability 0 for it)");
    fusion_utf8_init(&s->u);
    if (!pr->ids) {
        for (size_t k = 0; k < pr->len; k++) {
            fusion_utf8_push(&s->u, (uint8_t)pr->text[k]);
            tutti_sampler_accept(smp, (uint8_t)pr->text[k]);
        }
        if (s->dr && text_push(s, pr->text, pr->len) < 0) return TUTTI_ERR;
    } else {
        /* token-id prompts: member 1's prompt text (control tokens render
         * as nothing) counts for the repetition penalty; the continuation
         * starts a new UTF-8 character */
        char piece[256];
        for (int32_t k = 0; k < pr->n_ids[0]; k++) {
            int32_t pl = tutti_token_to_piece(e->m[0]->vocab, pr->ids[0][k], false, piece, sizeof piece);
            for (int32_t b = 0; b < pl; b++) tutti_sampler_accept(smp, (uint8_t)piece[b]);
            if (s->dr && pl > 0 && text_push(s, piece, (size_t)pl) < 0) return TUTTI_ERR;
        }
    }
    return 0;
}

/* Context full is a clean stop, as in TOKEN alignment: the text so far
 * needs a tokenization hypothesis longer than a member's context, so that
 * member has no next-byte distribution. */
static bool byte_ctx_full(fusion_align *a) {
    byte_align *s = (byte_align *)a;
    int32_t full = ens_bytes_ctx_full(a->e, s->st);
    if (full < 0) return false;
    ens_note_ctx_full(a->e, a->g, full);
    return true;
}

/* A round: the draft's bytes (none past the byte limit), which every
 * member is told before this step's pass.  No round when the draft has
 * nothing confident to say. */
static int draft_round(byte_align *s) {
    gen_ctx *g = s->base.g;
    s->n_round = s->at = 0;
    const char *b;
    int32_t nb = fusion_draft_propose_bytes(s->dr, s->text, s->n_text, s->k_next, &b);
    if (nb <= 0) return nb;
    if (g->max_units > 0 && nb > g->max_units - g->n_units) nb = g->max_units - g->n_units;
    if (nb <= 0) return 0;
    s->round = b, s->n_round = nb;
    s->j.expect = b, s->j.n_expect = nb;
    g->n_draft_rounds++;
    g->n_drafted += nb;
    return 0;
}

static int byte_step(fusion_align *a, const float **row, int32_t *n) {
    byte_align *s = (byte_align *)a;
    tutti_ensemble *e = a->e;
    if (s->dr && s->at >= s->n_round && draft_round(s) < 0) return TUTTI_ERR;
    double t0 = ens_now_s();
    int rc = ens_run_members(e, job_bytes_prepare, &s->j);
    s->j.expect = NULL; /* told once per round */
    if (rc < 0) return TUTTI_ERR;
    a->t_phase += ens_now_s() - t0;
    ens_prompt_done(e);
    for (int32_t i = 0; i < e->n; i++)
        if (fusion_member_has_left(e->m[i])) a->w[i] = 0;
    if (bytes_rows(e, s->st, s->j.dead, s->lp) < 0) return TUTTI_ERR;
    const float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) rows[i] = s->lp[i];
    int32_t lead = align_unit_weights(a, rows, FUSION_N_BYTE_OUT, s->j.dead);
    if (lead < -1) return TUTTI_ERR;
    if (lead >= 0) /* the members agree: the lead member's distribution */
        memcpy(s->fused, s->lp[lead], sizeof s->fused);
    else if (bytes_combine(e, a->w, s->lp, s->fused) < 0) return TUTTI_ERR;
    *row = s->fused;
    *n = FUSION_N_BYTE_OUT;
    return 0;
}

/* UTF-8 validity and the allowed / forbidden strings, byte by byte */
static void byte_mask(fusion_align *a, float *fused) {
    byte_align *s = (byte_align *)a;
    gen_ctx *g = a->g;
    bool allowed[FUSION_N_BYTE_OUT];
    fusion_utf8_allowed(&s->u, allowed);
    for (int b = 0; b < FUSION_N_BYTE_OUT; b++) {
        if (!allowed[b]) fused[b] = -INFINITY;
        else if (g->mask && fused[b] > -INFINITY) {
            char c = (char)b;
            if (!gen_text_ok(g, &c, b == FUSION_END ? 0 : 1, b == FUSION_END)) fused[b] = -INFINITY;
        }
    }
}

static size_t byte_bytes(fusion_align *a, int32_t b, const char **bytes, bool *end) {
    byte_align *s = (byte_align *)a;
    s->c = (char)b;
    *end = b == FUSION_END;
    *bytes = &s->c;
    return *end ? 0 : 1;
}

static int byte_commit(fusion_align *a, int32_t b, int32_t *units) {
    byte_align *s = (byte_align *)a;
    tutti_ensemble *e = a->e;
    bool *dead = a->g->dead;
    for (int32_t i = 0; i < e->n; i++) {
        if (dead[i]) continue;
        if (s->lp[i][b] == -INFINITY && fusion_bytes_n_deferred(s->st[i]) > 0) {
            /* the byte may come from a deferred hypothesis: with them all */
            double d[FUSION_N_BYTE_OUT];
            if (fusion_bytes_resolve(s->st[i]) < 0 || fusion_bytes_next(s->st[i], d) < 0) return TUTTI_ERR;
            if (d[b] > 0) s->lp[i][b] = (float)log(d[b]);
        }
        if (s->lp[i][b] == -INFINITY) {
            ens_note_left(e, a->g, s->st[i], i, b);
            a->w[i] = 0;
            continue;
        }
        if (fusion_bytes_commit(s->st[i], (uint8_t)b) < 0) return TUTTI_ERR;
    }
    /* weights that follow the text: the members' probabilities of byte b */
    for (int32_t i = 0; i < e->n; i++) a->unit_logp[i] = dead[i] ? -INFINITY : s->lp[i][b];
    a->gone = dead;
    fusion_utf8_push(&s->u, (uint8_t)b);
    *units = 1;
    if (s->dr) {
        char c = (char)b;
        if (text_push(s, &c, 1) < 0) return TUTTI_ERR;
    }
    if (s->at < s->n_round) { /* the round goes on while the drafted bytes are drawn */
        int32_t n_max = s->dr->p.n_max;
        if ((uint8_t)s->round[s->at] == b) {
            a->g->n_draft_accepted++;
            if (++s->at == s->n_round) s->k_next += 2; /* all accepted */
        } else {
            s->at = s->n_round; /* rejected: the round ends */
            s->k_next--;
        }
        s->k_next = s->k_next < 1 ? 1 : s->k_next > n_max ? n_max : s->k_next;
    }
    return 0;
}

/* each member's byte marginal of b (a member that left: -inf) */
static void byte_member_lp(fusion_align *a, int32_t b, double *out) {
    byte_align *s = (byte_align *)a;
    for (int32_t i = 0; i < a->e->n; i++) out[i] = a->g->dead[i] ? -INFINITY : s->lp[i][b];
}

/* The drafted byte this step verifies, with its one-hot q, or -1. */
static int32_t byte_drafted(fusion_align *a, const float **q) {
    byte_align *s = (byte_align *)a;
    if (s->at >= s->n_round) return -1;
    int32_t b = (uint8_t)s->round[s->at];
    memset(s->q, 0, sizeof s->q);
    s->q[b] = 1.0f;
    *q = s->q;
    return b;
}

static void byte_free(fusion_align *a) {
    byte_align *s = (byte_align *)a;
    for (int32_t i = 0; i < a->e->n; i++) fusion_bytes_free(s->st[i]);
    fusion_draft_free(s->dr);
    free(s->text);
    free(s);
}

static const align_ops byte_ops = {
    .kind = ALIGN_OUT_BYTES,
    .unit = "byte",
    .report = true,
    .member_lp = byte_member_lp,
    .start = byte_start,
    .ctx_full = byte_ctx_full,
    .step = byte_step,
    .mask = byte_mask,
    .drafted = byte_drafted,
    .bytes = byte_bytes,
    .commit = byte_commit,
    .free = byte_free,
};

fusion_align *align_byte_new(tutti_ensemble *e, gen_ctx *g) {
    byte_align *s = calloc(1, sizeof *s);
    if (!s) return tutti_set_error("generation: out of memory"), NULL;
    s->base = (fusion_align){.ops = &byte_ops, .e = e, .g = g, .masked = true};
    s->base.work = s->fused;
    if (e->draft) {
        if (!(s->dr = fusion_draft_new_bytes(e))) {
            byte_free(&s->base);
            return NULL;
        }
        s->k_next = s->dr->p.n_max;
    }
    return &s->base;
}
