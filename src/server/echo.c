/* /v1/completions with "echo": true (server.h, srv_echo_prompt): the
 * prompt comes back in front of the completion, and with "logprobs" its
 * tokens' log-probabilities under the served model or ensemble
 * (tutti_ensemble_score): OpenAI's legacy shape, the first token's logprob
 * and top_logprobs null (nothing to condition it on).  This is what
 * lm-evaluation-harness's loglikelihood requests read (max_tokens 0 or 1,
 * token-id prompts: one entry per given id).
 *
 * Token alignment: one entry per prompt token of member 1's vocabulary
 * (BOS too, with empty text), each token's text its piece, the
 * tokenizer's space prefix (SentencePiece) taken off the front so that
 * the entries spell the prompt as its tokens detokenize.  Byte alignment:
 * one entry per character, as generation's logprobs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

typedef struct echo_ctx {
    srv_job *j;
    srv_lp *lp;
    bool oom;
} echo_ctx;

static int echo_step(const tutti_step *st, void *user) {
    echo_ctx *x = user;
    if (srv_lp_step(x->lp, st, x->j->lp_vocab, x->j->req.logprobs, true) < 0) {
        x->oom = true;
        return 1;
    }
    return 0;
}

/* ids[0..n) as text (control tokens give nothing), malloc'd; NULL on error */
static char *detok(const tutti_vocab *v, const int32_t *ids, int32_t n, size_t *len) {
    int32_t k = tutti_detokenize(v, ids, n, NULL, 0);
    if (k == TUTTI_ERR_SIZE) return NULL;
    size_t need = k < 0 ? (size_t)(-(int64_t)k) : (size_t)k;
    char *t = malloc(need + 1);
    if (!t || (k = tutti_detokenize(v, ids, n, t, (int32_t)need + 1)) < 0) {
        free(t);
        return NULL;
    }
    t[k] = 0;
    *len = (size_t)k;
    return t;
}

/* The prompt's entries: the first token unscored, then the scored rest. */
static int score_prompt(srv_job *j, tutti_ensemble *e, int c, const int32_t *ids, int32_t n, const char *text,
                        size_t len, char *err, size_t cap) {
    srv_lp *lp = &j->lp[c];
    echo_ctx x = {j, lp, false};
    tutti_align al = tutti_ensemble_align(e);
    if (al == TUTTI_ALIGN_TOKEN) {
        char piece[512];
        int32_t k = tutti_token_to_piece(j->lp_vocab, ids[0], false, piece, (int32_t)sizeof piece);
        if (srv_lp_unscored(lp, piece, k > 0 ? (size_t)k : 0) < 0) return snprintf(err, cap, "out of memory"), -1;
    }
    int rc = al == TUTTI_ALIGN_TOKEN ? tutti_ensemble_score(e, NULL, 0, ids, n, echo_step, &x)
                                     : tutti_ensemble_score(e, text, len, NULL, 0, echo_step, &x);
    if (rc < 0 || x.oom) return snprintf(err, cap, "echo: %s", x.oom ? "out of memory" : tutti_last_error()), -1;
    /* SentencePiece's space prefix: the pieces spell one space more than
     * the text the tokens stand for */
    size_t want = 0;
    char *t = al == TUTTI_ALIGN_TOKEN ? detok(j->lp_vocab, ids, n, &want) : NULL;
    if (t && lp->n_raw > want && !memcmp(lp->raw + (lp->n_raw - want), t, want))
        srv_lp_trim_front(lp, lp->n_raw - want);
    free(t);
    return 0;
}

/* Byte alignment, token-id prompt: the characters' entries regrouped into
 * one per given token (its logprob the sum of its characters': the
 * ensemble's probability of the token's text after the text before it;
 * the first token unscored), so that a client counting tokens (lm-eval's
 * ctxlen) finds them where it sent them.  A character split between two
 * tokens counts for the token where it starts.  Alternatives: the token
 * itself only (the byte level has no distribution over whole tokens). */
static int regroup_by_tokens(srv_lp *lp, const tutti_vocab *v, const int32_t *ids, int32_t n) {
    srv_lp out;
    memset(&out, 0, sizeof out);
    size_t prev = 0, ci = 0;
    int rc = 0;
    for (int32_t k = 0; k < n && rc == 0; k++) {
        size_t end = 0;
        char *t = detok(v, ids, k + 1, &end);
        if (!t || end < prev || end > lp->n_raw) rc = -1, end = prev; /* not a prefix: leave the characters */
        free(t);
        if (rc) break;
        double l = 0;
        for (; ci < lp->n && lp->e[ci].start < end; ci++) l += lp->e[ci].lp;
        if (k == 0) rc = srv_lp_unscored(&out, lp->raw + prev, end - prev);
        else rc = srv_lp_whole(&out, lp->raw + prev, end - prev, l);
        prev = end;
    }
    if (rc || prev != lp->n_raw) {
        srv_lp_free(&out);
        return rc ? -1 : 0;
    }
    srv_lp_free(lp);
    *lp = out;
    return 0;
}

int srv_echo_prompt(srv_job *j, tutti_ensemble *e, int c, int p, char *err, size_t cap) {
    const srv_prompt *pr = &j->req.prompts[p];
    const tutti_vocab *v = j->lp_vocab;
    int32_t n = 0, *own = NULL;
    const int32_t *ids = j->ids[p][0];
    if (ids) {
        n = j->n_ids[p][0];
    } else if (j->req.logprobs >= 0 && tutti_ensemble_align(e) == TUTTI_ALIGN_TOKEN) {
        if (!(ids = own = server_tokenize(v, pr->text, pr->len, tutti_vocab_add_bos(v), false, &n)))
            return snprintf(err, cap, "echo: cannot tokenize the prompt"), -1;
    }
    size_t len = pr->len;
    char *text = ids && !pr->text ? detok(v, ids, n, &len) : NULL;
    const char *shown = pr->text ? pr->text : text;
    if (!shown) {
        free(own);
        return snprintf(err, cap, "echo: cannot detokenize the prompt"), -1;
    }
    int rc = 0;
    if (j->req.logprobs < 0) {
        srv_job_emit(j, shown, len); /* the text only */
    } else if ((rc = score_prompt(j, e, c, ids, n, shown, len, err, cap)) == 0) {
        if (ids && tutti_ensemble_align(e) != TUTTI_ALIGN_TOKEN && regroup_by_tokens(&j->lp[c], v, ids, n) < 0)
            rc = -1, snprintf(err, cap, "out of memory");
        /* the entries' bytes are the echoed text (token alignment: the
         * tokens' pieces; byte alignment: the text itself) */
        srv_lp *lp = &j->lp[c];
        char *raw = malloc(lp->n_raw + 1);
        if (!raw) rc = -1, snprintf(err, cap, "out of memory");
        else {
            memcpy(raw, lp->raw, lp->n_raw);
            srv_job_emit(j, raw, lp->n_raw);
            free(raw);
        }
    }
    free(text);
    free(own);
    return rc;
}
