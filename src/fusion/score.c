/* Scoring a known text (tutti_ensemble_score, tutti.h): the fused
 * distribution at every unit of it, as generation would have drawn it,
 * reported as steps.  The server's echo with logprobs (and so
 * lm-evaluation-harness's loglikelihood requests) reads prompts this way.
 *
 * TOKEN: each member's logits rows over the shared ids in chunks of
 * SCORE_CHUNK positions (logits_from: one forward pass per chunk over what
 * the member does not hold yet), fused per position as a generation step
 * is (ens_fuse_token_row).  BYTE: each member's byte table of the text
 * (fusion_byte_table, from BOS), fused per byte over the 257 outcomes with
 * the UTF-8 rule of generation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ensemble_impl.h"
#include "util/error.h"

#define SCORE_CHUNK 64

typedef struct score_tok {
    float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* [SCORE_CHUNK][n_vocab] per member */
    float *bufs, *fused;
    double *work;
    char piece[512];
} score_tok;

/* Rows from..to-1 of member m: the logits after ids[0..j] for each j. */
static int member_rows(fusion_member *m, const int32_t *ids, int32_t from, int32_t to, float *out) {
    if (m->vt->logits_from) return m->vt->logits_from(m, ids, to, from, out);
    for (int32_t j = from; j < to; j++) /* a member that cannot give several rows: one call each */
        if (m->vt->logits(m, ids, j + 1, out + (size_t)(j - from) * (size_t)m->n_vocab) < 0) return TUTTI_ERR;
    return 0;
}

static int report(tutti_ensemble *e, float *row, int32_t n, int32_t chosen, const char *bytes, size_t nb, int32_t unit,
                  tutti_step_cb cb, void *user) {
    double mx = -INFINITY, z = 0;
    for (int32_t x = 0; x < n; x++) mx = row[x] > mx ? row[x] : mx;
    for (int32_t x = 0; x < n; x++)
        if (row[x] > -INFINITY) z += exp((double)row[x] - mx);
    double lz = mx + log(z);
    for (int32_t x = 0; x < n; x++) row[x] = row[x] > -INFINITY ? (float)((double)row[x] - lz) : -INFINITY;
    tutti_step st = {.align = e->align,
                     .n_outcomes = n,
                     .logprobs = row,
                     .chosen = chosen,
                     .bytes = bytes,
                     .n_bytes = nb,
                     .unit = unit};
    return cb(&st, user) ? 1 : 0;
}

static int score_tokens(tutti_ensemble *e, const int32_t *ids, int32_t n, tutti_step_cb cb, void *user) {
    int32_t V = e->m[0]->n_vocab;
    score_tok s;
    memset(&s, 0, sizeof s);
    s.bufs = malloc(sizeof(float) * (size_t)V * (size_t)(e->n * (SCORE_CHUNK + 1) + 1));
    s.work = malloc(sizeof(double) * (size_t)V);
    int rc = 0;
    if (!s.bufs || !s.work) rc = tutti_set_error("score: out of memory");
    float *logp[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n && s.bufs; i++) {
        s.rows[i] = s.bufs + (size_t)V * SCORE_CHUNK * (size_t)i;
        logp[i] = s.bufs + (size_t)V * (SCORE_CHUNK * (size_t)e->n + (size_t)i);
    }
    if (s.bufs) s.fused = s.bufs + (size_t)V * (size_t)(e->n * (SCORE_CHUNK + 1));
    for (int32_t i = 0; i < e->n; i++) {
        e->m[i]->new_generation = true; /* the slot's cached timelines are free to rewind */
        if (n > e->m[i]->n_ctx && rc == 0)
            rc = tutti_set_error("score: member %s: the text is %d tokens, more than its context (%d)", e->m[i]->name,
                                 n, e->m[i]->n_ctx);
    }
    /* position j's row (after ids[0..j]) scores ids[j + 1] */
    for (int32_t a = 0; rc == 0 && a < n - 1; a += SCORE_CHUNK) {
        int32_t b = a + SCORE_CHUNK < n - 1 ? a + SCORE_CHUNK : n - 1;
        for (int32_t i = 0; i < e->n && rc == 0; i++)
            if (member_rows(e->m[i], ids, a, b, s.rows[i]) < 0) rc = TUTTI_ERR;
        for (int32_t j = a; j < b && rc == 0; j++) {
            const float *lg[TUTTI_ENSEMBLE_MAX_MEMBERS];
            for (int32_t i = 0; i < e->n; i++) lg[i] = s.rows[i] + (size_t)(j - a) * (size_t)V;
            if (ens_fuse_token_row(e, e->w, lg, s.fused, logp, s.work) < 0) {
                rc = TUTTI_ERR;
                break;
            }
            int32_t k = tutti_token_to_piece(e->m[0]->vocab, ids[j + 1], false, s.piece, (int32_t)sizeof s.piece);
            rc = report(e, s.fused, V, ids[j + 1], s.piece, k > 0 ? (size_t)k : 0, j + 1, cb, user);
        }
    }
    free(s.bufs), free(s.work);
    return rc < 0 ? TUTTI_ERR : 0;
}

static int score_bytes(tutti_ensemble *e, const char *text, size_t len, tutti_step_cb cb, void *user) {
    if (len == 0) return 0;
    if (len > ((size_t)1 << 24)) return tutti_set_error("score: the text is longer than 16 MiB");
    float *tab = malloc(sizeof(float) * FUSION_N_BYTE_OUT * len * (size_t)e->n);
    if (!tab) return tutti_set_error("score: out of memory");
    int rc = 0;
    for (int32_t i = 0; i < e->n && rc == 0; i++) {
        e->m[i]->new_generation = true;
        fusion_bytes_params bp = ens_bytes_params(e, i);
        if (fusion_byte_table(e->m[i], e->trie[i], &bp, text, len, tab + (size_t)i * FUSION_N_BYTE_OUT * len) < 0)
            rc = TUTTI_ERR;
    }
    fusion_utf8 u;
    fusion_utf8_init(&u);
    float fused[FUSION_N_BYTE_OUT];
    double work[FUSION_N_BYTE_OUT];
    fusion_rule_params rp = ens_rule_params(e);
    for (size_t k = 0; k < len && rc == 0; k++) {
        const float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < e->n; i++) rows[i] = tab + ((size_t)i * len + k) * FUSION_N_BYTE_OUT;
        if (fusion_combine(&rp, e->n, rows, FUSION_N_BYTE_OUT, fused, work, NULL) < 0) {
            rc = TUTTI_ERR;
            break;
        }
        bool ok[FUSION_N_BYTE_OUT]; /* as generation: only outcomes that keep the text valid UTF-8 */
        fusion_utf8_allowed(&u, ok);
        for (int b = 0; b < FUSION_N_BYTE_OUT; b++)
            if (!ok[b]) fused[b] = -INFINITY;
        uint8_t c = (uint8_t)text[k];
        fusion_utf8_push(&u, c);
        rc = report(e, fused, FUSION_N_BYTE_OUT, c, text + k, 1, (int32_t)k, cb, user);
    }
    free(tab);
    return rc < 0 ? TUTTI_ERR : 0;
}

int tutti_ensemble_score(tutti_ensemble *e, const char *text, size_t len, const int32_t *ids, int32_t n_ids,
                         tutti_step_cb cb, void *user) {
    if (!e || !cb) return tutti_set_error("score: no ensemble or no receiver");
    if (e->align == TUTTI_ALIGN_SPAN) {
        tutti_set_error("score: span alignment selects drafts and has no distribution per unit of a given text");
        return TUTTI_ERR_UNSUPPORTED;
    }
    const tutti_vocab *v = e->m[0]->vocab;
    if (e->align == TUTTI_ALIGN_TOKEN) {
        if (ids) {
            for (int32_t k = 0; k < n_ids; k++)
                if (ids[k] < 0 || ids[k] >= e->m[0]->n_vocab)
                    return tutti_set_error("score: token %d (id %d) is out of range [0, %d)", k, ids[k],
                                           e->m[0]->n_vocab);
            return n_ids > 1 ? score_tokens(e, ids, n_ids, cb, user) : 0;
        }
        int32_t *tok;
        int32_t n = ens_tokenize(v, text, len, &tok);
        if (n < 0) return tutti_error_prefix("score"), TUTTI_ERR;
        int rc = n > 1 ? score_tokens(e, tok, n, cb, user) : 0;
        free(tok);
        return rc;
    }
    if (!ids) return score_bytes(e, text, len, cb, user);
    int32_t k = tutti_detokenize(v, ids, n_ids, NULL, 0);
    if (k == TUTTI_ERR_SIZE) return tutti_set_error("score: token ids out of range");
    size_t need = k < 0 ? (size_t)(-(int64_t)k) : (size_t)k;
    char *t = malloc(need + 1);
    if (!t) return tutti_set_error("score: out of memory");
    k = tutti_detokenize(v, ids, n_ids, t, (int32_t)need + 1);
    int rc = k < 0 ? tutti_set_error("score: token ids out of range") : score_bytes(e, t, (size_t)k, cb, user);
    free(t);
    return rc;
}
