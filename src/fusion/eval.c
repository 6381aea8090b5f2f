/* Evaluation in bits per byte and fitting of weights and temperatures.
 *
 * Teacher forcing: in BYTE alignment a member's conditional distribution of
 * every byte of the text given the true prefix does not depend on the other
 * members, so each member's [n_bytes][257] table is computed once per
 * temperature; every weight setting is then scored from the tables alone.
 * TOKEN alignment does the same with [n_tokens][n_vocab] tables, SPAN with
 * one log-probability per member and word-level span. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ctxweights.h"
#include "fusion/eval_impl.h"
#include "fusion/fit_ctx.h"
#include "util/error.h"

/* ---- chunks (../shared/oracle/bpb.py) ---- */

static bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void fusion_free_chunks(char **chunks, int n) {
    if (!chunks) return;
    for (int i = 0; i < n; i++) free(chunks[i]);
    free(chunks);
}

static int push_chunk(char ***out, int *n, int *cap, const char *s, size_t len) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        char **no = realloc(*out, sizeof(char *) * (size_t)nc);
        if (!no) return -1;
        *out = no, *cap = nc;
    }
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, s, len);
    c[len] = 0;
    (*out)[(*n)++] = c;
    return 0;
}

int fusion_split_chunks(const char *text, size_t len, int max_bytes, char ***out) {
    *out = NULL;
    int n = 0, cap = 0;
    char *cur = malloc(len + 2);
    if (!cur) return tutti_set_error("chunks: out of memory");
    size_t p = 0;
    while (p <= len) {
        /* paragraph = up to the next "\n\n" */
        size_t q = p;
        while (q < len && !(text[q] == '\n' && q + 1 < len && text[q + 1] == '\n')) q++;
        size_t a = p, b = q;
        while (a < b && py_space(text[a])) a++;
        while (b > a && py_space(text[b - 1])) b--;
        /* sentences: split at a space preceded by . ! ? or " */
        size_t n_cur = 0;
        bool have = false; /* cur is non-empty (Python truthiness) */
        size_t s0 = a;
        for (size_t k = a; k <= b; k++) {
            bool cut = k == b || (text[k] == ' ' && k > a && strchr(".!?\"", text[k - 1]) != NULL);
            if (!cut) continue;
            size_t sl = k - s0;
            size_t cand = have ? n_cur + 1 + sl : sl;
            if ((int64_t)cand > max_bytes && have) {
                if (push_chunk(out, &n, &cap, cur, n_cur) < 0) goto oom;
                memcpy(cur, text + s0, sl);
                n_cur = sl;
            } else {
                if (have) cur[n_cur++] = ' ';
                memcpy(cur + n_cur, text + s0, sl);
                n_cur += sl;
            }
            have = n_cur > 0;
            s0 = k + 1;
        }
        if (have && push_chunk(out, &n, &cap, cur, n_cur) < 0) goto oom;
        if (q >= len) break;
        p = q + 2;
    }
    free(cur);
    return n;
oom:
    free(cur);
    fusion_free_chunks(*out, n);
    *out = NULL;
    return tutti_set_error("chunks: out of memory");
}

/* ---- per-member scores ---- */

/* ens_tokenize with this file's prefix on its error */
static int tokenize_alloc(const tutti_vocab *v, const char *text, size_t len, int32_t **ids) {
    int32_t n = ens_tokenize(v, text, len, ids);
    if (n < 0) tutti_error_prefix("eval");
    return n;
}

int fusion_token_nll(fusion_member *m, const char *text, size_t len, float temp, double *nll) {
    int32_t *ids = NULL;
    int32_t n = tokenize_alloc(m->vocab, text, len, &ids);
    if (n < 0) return TUTTI_ERR;
    *nll = 0;
    if (n < 2) {
        free(ids);
        return 0;
    }
    if (n > m->n_ctx) {
        /* the member cannot condition on the whole text: no score (NAN) */
        free(ids);
        *nll = NAN;
        return 0;
    }
    float *rows = malloc(sizeof(float) * (size_t)n * (size_t)m->n_vocab);
    float *lp = malloc(sizeof(float) * (size_t)m->n_vocab);
    int rc = TUTTI_ERR;
    if (!rows || !lp) {
        tutti_set_error("eval: out of memory");
        goto done;
    }
    if (m->vt->logits_all(m, ids, n, rows) < 0) goto done;
    double s = 0;
    for (int32_t j = 0; j + 1 < n; j++) {
        fusion_log_softmax(rows + (size_t)j * (size_t)m->n_vocab, m->n_vocab, temp, lp);
        s -= lp[ids[j + 1]];
    }
    *nll = s;
    rc = 0;
done:
    free(ids), free(rows), free(lp);
    return rc;
}

/* Rows of text[0..len) from byte state st on (see fusion_byte_table). */
static int byte_rows(fusion_member *m, fusion_bytes *st, const char *text, size_t len, float *out) {
    int rc = 0;
    double d[FUSION_N_BYTE_OUT];
    for (size_t i = 0; rc == 0 && i < len; i++) {
        /* A member whose context cannot hold the text so far, or whose
         * tokens cannot spell it (a character vocabulary without this
         * character), has no distribution from here to the end of the
         * chunk: its rows are -inf there.  The rules give such a member no
         * say (mix: no mass, product: "rules out everything"), and weights
         * that follow the text drop it until the text returns to what it
         * can write. */
        bool gone = fusion_bytes_need_tokens(st) > m->n_ctx;
        if (!gone) {
            if ((rc = fusion_bytes_next(st, d)) < 0) break;
            float *row = out + i * FUSION_N_BYTE_OUT;
            for (int b = 0; b < FUSION_N_BYTE_OUT; b++) row[b] = d[b] > 0 ? (float)log(d[b]) : -INFINITY;
        }
        if (gone || !(d[(uint8_t)text[i]] > 0)) {
            for (size_t k = gone ? i : i + 1; k < len; k++)
                for (int b = 0; b < FUSION_N_BYTE_OUT; b++) out[k * FUSION_N_BYTE_OUT + b] = -INFINITY;
            break;
        }
        if (i + 1 < len) rc = fusion_bytes_commit(st, (uint8_t)text[i]);
    }
    return rc;
}

int fusion_byte_table(fusion_member *m, const fusion_trie *trie, const fusion_bytes_params *bp, const char *text,
                      size_t len, float *out) {
    fusion_bytes *st = fusion_bytes_new(m, trie, bp);
    if (!st) return TUTTI_ERR;
    int rc = fusion_bytes_start(st, "", 0);
    if (rc == 0) rc = fusion_bytes_expect(st, text, len); /* the text is known: its canonical path in few passes */
    if (rc == 0) rc = byte_rows(m, st, text, len, out);
    fusion_bytes_free(st);
    return rc;
}

/* Rows of fusion_byte_table for several continuations of one prefix: the
 * byte state after prefix[0..plen) is built once, then cloned for each
 * continuation cont[c] (rows only for the continuation's bytes, written one
 * continuation after the other to out).  Equal to the rows of
 * fusion_byte_table(prefix + cont[c]) at the continuation's offsets: the
 * byte state after the same bytes is the same.  A member gone in the prefix
 * (context full, cannot spell it) gets -inf rows everywhere. */
static int byte_table_branches(fusion_member *m, const fusion_trie *trie, const fusion_bytes_params *bp,
                               const char *prefix, size_t plen, const char *const *cont, int n_cont, float *out,
                               double *plp, bool *pgone, float *prow) {
    size_t total = 0;
    for (int c = 0; c < n_cont; c++) total += strlen(cont[c]);
    fusion_bytes *st = fusion_bytes_new(m, trie, bp);
    if (!st) return TUTTI_ERR;
    int rc = fusion_bytes_start(st, "", 0);
    if (rc == 0) rc = fusion_bytes_expect(st, prefix, plen);
    double d[FUSION_N_BYTE_OUT];
    bool gone = false;
    /* plp[i], pgone[i]: the log-probability of the prefix's byte i and
     * whether the member has no distribution there (as unit_logp reads the
     * rows of fusion_byte_table: the byte it cannot follow still counts,
     * with probability 0; from the next byte on it is gone) */
    for (size_t i = 0; i < plen; i++) plp[i] = -INFINITY, pgone[i] = true;
    for (size_t k = 0; prow && k < plen * FUSION_N_BYTE_OUT; k++) prow[k] = -INFINITY;
    for (size_t i = 0; rc == 0 && i < plen && !gone; i++) {
        if ((gone = fusion_bytes_need_tokens(st) > m->n_ctx)) break;
        if ((rc = fusion_bytes_next(st, d)) < 0) break;
        pgone[i] = false;
        for (int b = 0; prow && b < FUSION_N_BYTE_OUT; b++)
            prow[i * FUSION_N_BYTE_OUT + b] = d[b] > 0 ? (float)log(d[b]) : -INFINITY;
        plp[i] = d[(uint8_t)prefix[i]] > 0 ? log(d[(uint8_t)prefix[i]]) : -INFINITY;
        if ((gone = !(d[(uint8_t)prefix[i]] > 0))) break;
        rc = fusion_bytes_commit(st, (uint8_t)prefix[i]);
    }
    size_t r = 0;
    for (int c = 0; rc == 0 && c < n_cont; c++) {
        size_t len = strlen(cont[c]);
        if (gone) {
            for (size_t k = 0; k < len * FUSION_N_BYTE_OUT; k++) out[r * FUSION_N_BYTE_OUT + k] = -INFINITY;
        } else {
            fusion_bytes *b = fusion_bytes_clone(st);
            if (!b) {
                rc = TUTTI_ERR;
                break;
            }
            rc = byte_rows(m, b, cont[c], len, out + r * FUSION_N_BYTE_OUT);
            fusion_bytes_free(b);
        }
        r += len;
    }
    fusion_bytes_free(st);
    (void)total;
    return rc;
}

/* ---- tables for a whole text ---- */

/* Score tables of one member over all chunks: rows × width log-probs. */
typedef struct table_job {
    char **chunks;
    int n_chunks;
    const float *temps; /* [n_members] temperature to use */
    int width;
    float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* outputs */
    int64_t n_rows;
} table_job;

static int job_byte_tables(tutti_ensemble *e, int32_t i, void *arg) {
    table_job *j = arg;
    fusion_bytes_params bp = ens_bytes_params(e, i);
    bp.temp = j->temps[i];
    int64_t r = 0;
    for (int c = 0; c < j->n_chunks; c++) {
        size_t len = strlen(j->chunks[c]);
        if (fusion_byte_table(e->m[i], e->trie[i], &bp, j->chunks[c], len, j->rows[i] + r * FUSION_N_BYTE_OUT) < 0) {
            tutti_error_prefix("chunk %d", c + 1); /* the message names the member */
            return TUTTI_ERR;
        }
        r += (int64_t)len;
    }
    return 0;
}

/* TOKEN alignment: rows = every scored position (the shared tokenization). */
static int job_token_tables(tutti_ensemble *e, int32_t i, void *arg) {
    table_job *j = arg;
    fusion_member *m = e->m[i];
    int32_t V = m->n_vocab;
    int64_t r = 0;
    for (int c = 0; c < j->n_chunks; c++) {
        int32_t *ids = NULL;
        int32_t n = tokenize_alloc(m->vocab, j->chunks[c], strlen(j->chunks[c]), &ids);
        if (n < 0) return TUTTI_ERR;
        if (n >= 2) {
            float *rows = malloc(sizeof(float) * (size_t)n * (size_t)V);
            if (!rows) {
                free(ids);
                return tutti_set_error("eval: out of memory");
            }
            int rc = m->vt->logits_all(m, ids, n, rows);
            if (rc == 0)
                for (int32_t k = 0; k + 1 < n; k++, r++)
                    fusion_log_softmax(rows + (size_t)k * (size_t)V, V, j->temps[i],
                                       j->rows[i] + (size_t)r * (size_t)V);
            free(rows);
            if (rc < 0) {
                free(ids);
                return TUTTI_ERR;
            }
        }
        free(ids);
    }
    return 0;
}

void fusion_text_data_free(text_data *d) {
    fusion_free_chunks(d->chunks, d->n_chunks);
    free(d->y);
    free(d->chunk_start);
    free(d->span_start);
}

int fusion_text_data_init(tutti_ensemble *e, const char *text, size_t len, int max_chunk, text_data *d) {
    memset(d, 0, sizeof *d);
    if (max_chunk > 0) {
        d->n_chunks = fusion_split_chunks(text, len, max_chunk, &d->chunks);
    } else if (len > 0) {
        d->chunks = malloc(sizeof(char *));
        if (d->chunks) d->chunks[0] = malloc(len + 1);
        if (!d->chunks || !d->chunks[0])
            return free(d->chunks), d->chunks = NULL, tutti_set_error("eval: out of memory");
        memcpy(d->chunks[0], text, len);
        d->chunks[0][len] = 0;
        if (strlen(d->chunks[0]) != len) return tutti_set_error("eval: the text holds a NUL byte");
        d->n_chunks = 1;
    }
    if (d->n_chunks < 0) return TUTTI_ERR;
    if (d->n_chunks == 0) return tutti_set_error("eval: the text has no chunks to score (empty?)");
    for (int c = 0; c < d->n_chunks; c++) d->n_bytes += (int64_t)strlen(d->chunks[c]);
    if (!(d->chunk_start = malloc(sizeof(int64_t) * (size_t)(d->n_chunks + 1))))
        return tutti_set_error("eval: out of memory");
    if (e->align == TUTTI_ALIGN_TOKEN) {
        d->width = e->m[0]->n_vocab;
        for (int c = 0; c < d->n_chunks; c++) {
            d->chunk_start[c] = d->n_rows;
            int32_t *ids = NULL;
            int32_t n = tokenize_alloc(e->m[0]->vocab, d->chunks[c], strlen(d->chunks[c]), &ids);
            if (n < 0) return TUTTI_ERR;
            int32_t *ny = realloc(d->y, sizeof(int32_t) * (size_t)(d->n_rows + n + 1));
            if (!ny) {
                free(ids);
                return tutti_set_error("eval: out of memory");
            }
            d->y = ny;
            for (int32_t k = 1; k < n; k++) d->y[d->n_rows++] = ids[k];
            free(ids);
        }
        d->chunk_start[d->n_chunks] = d->n_rows;
        return 0;
    }
    d->width = FUSION_N_BYTE_OUT;
    d->n_rows = d->n_bytes;
    d->y = malloc(sizeof(int32_t) * (size_t)(d->n_rows + 1));
    d->span_start = malloc(sizeof(int64_t) * (size_t)(d->n_rows + 2));
    if (!d->y || !d->span_start) return tutti_set_error("eval: out of memory");
    int64_t r = 0;
    for (int c = 0; c < d->n_chunks; c++) {
        const char *s = d->chunks[c];
        size_t l = strlen(s);
        d->chunk_start[c] = r;
        bool word = false; /* the current span has a non-space byte */
        for (size_t k = 0; k < l; k++, r++) {
            bool sp = s[k] == ' ' || s[k] == '\n';
            /* a span ends at a word end: just before a space that follows
             * a word (every tokenizer here has a boundary there) */
            if (k == 0 || (sp && word)) {
                d->span_start[d->n_spans++] = r;
                word = false;
            }
            if (!sp) word = true;
            d->y[r] = (uint8_t)s[k];
        }
    }
    d->span_start[d->n_spans] = r;
    d->chunk_start[d->n_chunks] = r;
    return 0;
}

int fusion_compute_tables(tutti_ensemble *e, text_data *d, const float *temps, float **rows) {
    table_job j = {.chunks = d->chunks, .n_chunks = d->n_chunks, .temps = temps, .width = d->width};
    for (int32_t i = 0; i < e->n; i++) {
        rows[i] = malloc(sizeof(float) * (size_t)d->n_rows * (size_t)d->width + 1);
        if (!rows[i]) return tutti_set_error("eval: out of memory (%lld x %d table)", (long long)d->n_rows, d->width);
        j.rows[i] = rows[i];
    }
    return ens_run_members(e, e->align == TUTTI_ALIGN_TOKEN ? job_token_tables : job_byte_tables, &j);
}

void fusion_span_logp(const text_data *d, const float *rows, double *sp) {
    for (int64_t s = 0; s < d->n_spans; s++) {
        double a = 0;
        for (int64_t r = d->span_start[s]; r < d->span_start[s + 1]; r++) a += rows[r * d->width + d->y[r]];
        sp[s] = a;
    }
}

/* true when a member has no distribution at this row (every outcome -inf:
 * BYTE/SPAN tables of a member whose context is full or whose tokens cannot
 * spell the text, fusion_byte_table); token rows always have one. */
bool fusion_row_gone(const float *row, int width) {
    if (width != FUSION_N_BYTE_OUT) return false;
    for (int b = 0; b < width; b++)
        if (row[b] > -INFINITY) return false;
    return true;
}

/* Per-unit log-probabilities of the true outcome, lp[i * n_units + u], and
 * whether member i is gone there, gone[i * n_units + u] (malloc'd). */
static int unit_logp(const tutti_ensemble *e, const text_data *d, float *const *rows, double **lp, bool **gone,
                     int64_t *n_units) {
    bool span = e->align == TUTTI_ALIGN_SPAN;
    int64_t nu = span ? d->n_spans : d->n_rows;
    *n_units = nu;
    *lp = malloc(sizeof(double) * (size_t)(nu ? nu : 1) * (size_t)e->n);
    *gone = malloc(sizeof(bool) * (size_t)(nu ? nu : 1) * (size_t)e->n);
    if (!*lp || !*gone) {
        free(*lp), free(*gone);
        return tutti_set_error("eval: out of memory");
    }
    for (int32_t i = 0; i < e->n; i++) {
        if (span) fusion_span_logp(d, rows[i], *lp + (size_t)i * (size_t)nu);
        for (int64_t k = 0; k < nu; k++) {
            int64_t r = span ? d->span_start[k] : k;
            if (!span) (*lp)[i * nu + k] = rows[i][k * d->width + d->y[k]];
            (*gone)[i * nu + k] = fusion_row_gone(rows[i] + r * d->width, d->width);
        }
    }
    return 0;
}

/* The mixture with weights that follow the text (adapt.c). */
static double adapt_nll(const tutti_ensemble *e, double alpha, const float *w0, const double *lp, const bool *gone,
                        int64_t n_units) {
    double prior[TUTTI_ENSEMBLE_MAX_MEMBERS], lw[TUTTI_ENSEMBLE_MAX_MEMBERS], l[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool g[TUTTI_ENSEMBLE_MAX_MEMBERS];
    fusion_adapt_prior(e, w0, prior);
    fusion_adapt_start(e, prior, lw);
    double nll = 0;
    for (int64_t u = 0; u < n_units; u++) {
        for (int32_t i = 0; i < e->n; i++) l[i] = lp[i * n_units + u], g[i] = gone[i * n_units + u];
        nll -= fusion_adapt_update(e, alpha, prior, lw, l, g);
    }
    return nll;
}

int fusion_weighed_nll(tutti_ensemble *e, const text_data *d, float *const *rows, const float *w, double *nll,
                       double *fused, fusion_weigher *cont, fusion_unit_hook hook, void *user) {
    bool span = e->align == TUTTI_ALIGN_SPAN;
    if (e->adapt_on && e->rule != TUTTI_RULE_MIX && !span)
        return tutti_set_error("adapt: weights that follow the text need the mix rule, not %s",
                               tutti_rule_name(e->rule));
    fusion_weigher own, *s = cont ? cont : &own;
    if (!cont && fusion_weigher_begin(s, e, w) < 0) return TUTTI_ERR;
    int W = d->width;
    int64_t nu = text_data_units(e, d);
    double *sp = span ? malloc(sizeof(double) * (size_t)(nu ? nu : 1) * (size_t)e->n) : NULL;
    float *out = malloc(sizeof(float) * (size_t)W);
    double *work = malloc(sizeof(double) * (size_t)W);
    int rc = 0;
    if ((span && !sp) || !out || !work) rc = tutti_set_error("eval: out of memory");
    for (int32_t i = 0; span && rc == 0 && i < e->n; i++) fusion_span_logp(d, rows[i], sp + (size_t)i * (size_t)nu);
    int c = 0;
    *nll = 0;
    for (int64_t u = 0; rc == 0 && u < nu; u++) {
        int64_t r0 = text_data_unit_row(e, d, u);
        if (d->chunk_start && c < d->n_chunks && r0 == d->chunk_start[c]) {
            if (u > 0) fusion_weigher_stream(s); /* a chunk from BOS */
            c++;
        }
        const float *ru[TUTTI_ENSEMBLE_MAX_MEMBERS];
        bool gone[TUTTI_ENSEMBLE_MAX_MEMBERS];
        double lp[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < e->n; i++) {
            ru[i] = rows[i] + (size_t)r0 * (size_t)W;
            gone[i] = fusion_row_gone(ru[i], W);
            lp[i] = gone[i] ? -INFINITY : span ? sp[(size_t)i * (size_t)nu + (size_t)u] : ru[i][d->y[r0]];
        }
        float wu[TUTTI_ENSEMBLE_MAX_MEMBERS];
        int32_t lead = fusion_weigher_unit(s, ru, W, gone, wu);
        if (lead < -1) {
            rc = TUTTI_ERR;
            break;
        }
        double ll = 0;
        bool mixture = span || e->rule == TUTTI_RULE_MIX;
        if (lead >= 0) {
            ll = lp[lead];
        } else if (!mixture) {
            fusion_rule_params rp = {.rule = e->rule, .weights = wu, .beta = e->beta};
            if ((rc = fusion_combine(&rp, e->n, ru, W, out, work, NULL)) < 0) break;
            ll = out[d->y[r0]];
        }
        if (hook) hook(user, u, c - 1, s, lp, gone);
        double bytes = span ? (double)(d->span_start[u + 1] - d->span_start[u]) : 1;
        double m = fusion_weigher_observe(s, lp, gone, bytes);
        *nll -= lead < 0 && mixture ? m : ll;
    }
    if (fused) *fused = s->n_units > 0 ? (double)s->n_fused / (double)s->n_units : 1;
    free(sp), free(out), free(work);
    if (!cont) fusion_weigher_free(s);
    return rc;
}

int fusion_ensemble_nll(tutti_ensemble *e, const text_data *d, float *const *rows, const float *w, double *nll) {
    return fusion_ensemble_nll_fused(e, d, rows, w, nll, NULL);
}

/* Ensemble negative log-likelihood (nats) from the tables with weights w. */
int fusion_ensemble_nll_fused(tutti_ensemble *e, const text_data *d, float *const *rows, const float *w, double *nll,
                              double *fused) {
    if (fused) *fused = 1;
    if (e->ctx.n_features > 0 || e->select >= 0) return fusion_weighed_nll(e, d, rows, w, nll, fused, NULL, NULL, NULL);
    *nll = 0;
    if (e->adapt_on) {
        if (e->rule != TUTTI_RULE_MIX && e->align != TUTTI_ALIGN_SPAN)
            return tutti_set_error("adapt: weights that follow the text need the mix rule, not %s",
                                   tutti_rule_name(e->rule));
        double *lp;
        bool *gone;
        int64_t nu;
        if (unit_logp(e, d, rows, &lp, &gone, &nu) < 0) return TUTTI_ERR;
        *nll = adapt_nll(e, e->adapt_alpha, w, lp, gone, nu);
        free(lp), free(gone);
        return 0;
    }
    if (e->align == TUTTI_ALIGN_SPAN) {
        double ws = 0;
        for (int32_t i = 0; i < e->n; i++) ws += w[i];
        if (!(ws > 0)) return tutti_set_error("span: weights must sum to a positive number");
        double *sp = malloc(sizeof(double) * (size_t)d->n_spans * (size_t)e->n + 1);
        if (!sp) return tutti_set_error("eval: out of memory");
        for (int32_t i = 0; i < e->n; i++) fusion_span_logp(d, rows[i], sp + (size_t)i * (size_t)d->n_spans);
        for (int64_t s = 0; s < d->n_spans; s++) {
            double mx = -INFINITY, acc = 0, wa = 0;
            const int64_t r0 = d->span_start[s];
            for (int32_t i = 0; i < e->n; i++) {
                if (!(w[i] > 0) || fusion_row_gone(rows[i] + r0 * d->width, d->width)) continue;
                wa += w[i];
                if (sp[i * d->n_spans + s] > mx) mx = sp[i * d->n_spans + s];
            }
            for (int32_t i = 0; i < e->n; i++)
                if (w[i] > 0 && !fusion_row_gone(rows[i] + r0 * d->width, d->width))
                    acc += w[i] / wa * exp(sp[i * d->n_spans + s] - mx);
            *nll -= mx + log(acc);
        }
        free(sp);
        return 0;
    }
    float *out = malloc(sizeof(float) * (size_t)d->width);
    double *work = malloc(sizeof(double) * (size_t)d->width);
    if (!out || !work) {
        free(out), free(work);
        return tutti_set_error("eval: out of memory");
    }
    fusion_rule_params rp = {.rule = e->rule, .weights = w, .beta = e->beta};
    const float *r[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int rc = 0;
    float wr[TUTTI_ENSEMBLE_MAX_MEMBERS];
    rp.weights = wr;
    for (int64_t k = 0; k < d->n_rows; k++) {
        /* a member gone at this row has weight 0 there (the others renormalised) */
        for (int32_t i = 0; i < e->n; i++) {
            r[i] = rows[i] + (size_t)k * (size_t)d->width;
            wr[i] = fusion_row_gone(r[i], d->width) ? 0.0f : w[i];
        }
        if ((rc = fusion_combine(&rp, e->n, r, d->width, out, work, NULL)) < 0) break;
        *nll -= out[d->y[k]];
    }
    free(out), free(work);
    return rc;
}

int tutti_ensemble_eval_bpb(tutti_ensemble *e, const char *text, size_t len, tutti_bpb_result *out) {
    if (!e || !text || !out) return tutti_set_error("eval: missing argument");
    memset(out, 0, sizeof *out);
    if (e->rule == TUTTI_RULE_CONTRASTIVE) {
        tutti_set_error("the contrastive rule has no likelihood to score (the true text can fall outside "
                        "its plausibility set: infinitely many bits); use mix, product or gate");
        return TUTTI_ERR_UNSUPPORTED;
    }
    if (e->align == TUTTI_ALIGN_SPAN && e->rule != TUTTI_RULE_MIX) {
        tutti_set_error("span alignment scores only the span-level mixture (the mix rule); span generation "
                        "with the %s rule ranks drafts but defines no probability to score",
                        tutti_rule_name(e->rule));
        return TUTTI_ERR_UNSUPPORTED;
    }
    text_data d;
    float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    int rc = fusion_text_data_init(e, text, len, 200, &d);
    if (rc < 0) goto done;
    out->n_members = e->n;
    out->n_chunks = d.n_chunks;
    out->n_bytes = d.n_bytes;
    double ln2n = log(2.0) * (double)d.n_bytes;
    for (int32_t i = 0; i < e->n; i++) {
        double s = 0, c;
        for (int k = 0; k < d.n_chunks; k++) {
            if ((rc = fusion_token_nll(e->m[i], d.chunks[k], strlen(d.chunks[k]), 1.0f, &c)) < 0) {
                if (e->m[i]->err_kind != FUSION_ERR_NONFINITE) tutti_error_prefix("member %d (%s)", i + 1, e->path[i]);
                goto done;
            }
            s += c;
        }
        out->member_bpb[i] = s / ln2n;
        out->member_byte_bpb[i] = NAN;
    }
    if ((rc = fusion_compute_tables(e, &d, e->temp, rows)) < 0) goto done;
    if (e->align != TUTTI_ALIGN_TOKEN)
        for (int32_t i = 0; i < e->n; i++) {
            double s = 0;
            for (int64_t r = 0; r < d.n_rows; r++) s -= rows[i][r * d.width + d.y[r]];
            out->member_byte_bpb[i] = s / ln2n;
        }
    double nll;
    if ((rc = fusion_ensemble_nll_fused(e, &d, rows, e->w, &nll, &out->fused_share)) < 0) goto done;
    out->ensemble_bpb = nll / ln2n;
done:
    for (int32_t i = 0; i < e->n; i++) free(rows[i]);
    fusion_text_data_free(&d);
    return tutti_primary_code(rc); /* no internal kind escapes (util/error.h) */
}

int fusion_text_nll(tutti_ensemble *e, const char *text, size_t len, double *member_nll, double *ens_nll) {
    for (int32_t i = 0; i < e->n; i++) {
        if (fusion_token_nll(e->m[i], text, len, 1.0f, &member_nll[i]) < 0) {
            tutti_error_prefix("member %d (%s)", i + 1, e->path[i]);
            return TUTTI_ERR;
        }
    }
    *ens_nll = 0;
    if (len == 0) return 0;
    text_data d;
    float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    int rc = fusion_text_data_init(e, text, len, 0, &d);
    if (rc == 0 && d.n_rows > 0 && (rc = fusion_compute_tables(e, &d, e->temp, rows)) == 0)
        rc = fusion_ensemble_nll(e, &d, rows, e->w, ens_nll);
    for (int32_t i = 0; i < e->n; i++) free(rows[i]);
    fusion_text_data_free(&d);
    return rc;
}

typedef struct branch_job {
    const char *prefix;
    const char *const *cont;
    int n_cont;
    float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double *plp[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* [strlen(prefix)] per member */
    bool *pgone[TUTTI_ENSEMBLE_MAX_MEMBERS];
    float *prow[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* the prefix's rows (context weights), or NULL */
} branch_job;

static int job_branches(tutti_ensemble *e, int32_t i, void *arg) {
    branch_job *j = arg;
    fusion_bytes_params bp = ens_bytes_params(e, i);
    if (byte_table_branches(e->m[i], e->trie[i], &bp, j->prefix, strlen(j->prefix), j->cont, j->n_cont, j->rows[i],
                            j->plp[i], j->pgone[i], j->prow[i]) < 0) {
        tutti_error_prefix("member %d (%s)", i + 1, e->path[i]);
        return TUTTI_ERR;
    }
    return 0;
}

/* fusion_branches_nll through the weigher: fed with the prefix's rows,
 * then copied for every continuation.  y: scratch for max(prefix,
 * continuation) bytes. */
static int weighed_branches(tutti_ensemble *e, const char *prefix, const char *const *cont, int n_cont,
                            const branch_job *j, int32_t *y, double *nll) {
    fusion_weigher s;
    if (fusion_weigher_begin(&s, e, e->w) < 0) return TUTTI_ERR;
    size_t plen = strlen(prefix);
    for (size_t k = 0; k < plen; k++) y[k] = (uint8_t)prefix[k];
    double pnll;
    text_data dp = {.n_rows = (int64_t)plen, .y = y, .width = FUSION_N_BYTE_OUT};
    int rc = plen ? fusion_weighed_nll(e, &dp, (float *const *)j->prow, e->w, &pnll, NULL, &s, NULL, NULL) : 0;
    size_t r = 0;
    for (int c = 0; c < n_cont && rc == 0; c++) {
        size_t len = strlen(cont[c]);
        for (size_t k = 0; k < len; k++) y[k] = (uint8_t)cont[c][k];
        float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < e->n; i++) rows[i] = j->rows[i] + r * FUSION_N_BYTE_OUT;
        fusion_weigher sc = s; /* the state after the prefix; scratch of its own */
        sc.scratch = NULL, sc.cap = 0;
        text_data d = {.n_rows = (int64_t)len, .y = y, .width = FUSION_N_BYTE_OUT};
        rc = fusion_weighed_nll(e, &d, rows, e->w, &nll[c], NULL, &sc, NULL, NULL);
        fusion_weigher_free(&sc);
        r += len;
    }
    fusion_weigher_free(&s);
    return rc;
}

int fusion_branches_nll(tutti_ensemble *e, const char *prefix, const char *const *cont, int n_cont, double *nll) {
    if (e->align != TUTTI_ALIGN_BYTE) return tutti_set_error("eval: continuations are scored in byte alignment only");
    size_t total = 0;
    for (int c = 0; c < n_cont; c++) total += strlen(cont[c]);
    size_t plen = strlen(prefix);
    branch_job j = {.prefix = prefix, .cont = cont, .n_cont = n_cont};
    int rc = 0;
    for (int32_t i = 0; i < e->n && rc == 0; i++) {
        j.rows[i] = malloc(sizeof(float) * (total ? total : 1) * FUSION_N_BYTE_OUT);
        j.plp[i] = malloc(sizeof(double) * (plen ? plen : 1));
        j.pgone[i] = malloc(sizeof(bool) * (plen ? plen : 1));
        if (!j.rows[i] || !j.plp[i] || !j.pgone[i]) rc = tutti_set_error("eval: out of memory");
    }
    bool weighed = e->ctx.n_features > 0 || e->select >= 0;
    for (int32_t i = 0; weighed && i < e->n && rc == 0; i++)
        if (!(j.prow[i] = malloc(sizeof(float) * (plen ? plen : 1) * FUSION_N_BYTE_OUT)))
            rc = tutti_set_error("eval: out of memory");
    int32_t *y = malloc(sizeof(int32_t) * (total > plen ? total : plen ? plen : 1));
    if (!y && rc == 0) rc = tutti_set_error("eval: out of memory");
    if (rc == 0) rc = ens_run_members(e, job_branches, &j);
    if (rc == 0 && weighed) {
        rc = weighed_branches(e, prefix, cont, n_cont, &j, y, nll);
        n_cont = 0; /* scored */
    }
    /* weights that follow the text: the posterior after the prefix is the
     * prior of every continuation (alpha 0: the exact mixture of whole
     * sequences, log Σ w_i p_i(prefix + cont) - log Σ w_i p_i(prefix)) */
    double prior[TUTTI_ENSEMBLE_MAX_MEMBERS], wp[TUTTI_ENSEMBLE_MAX_MEMBERS] /* log-weights */,
        l[TUTTI_ENSEMBLE_MAX_MEMBERS];
    bool g[TUTTI_ENSEMBLE_MAX_MEMBERS];
    if (rc == 0 && e->adapt_on) {
        fusion_adapt_prior(e, e->w, prior);
        fusion_adapt_start(e, prior, wp);
        for (size_t k = 0; k < plen; k++) {
            for (int32_t i = 0; i < e->n; i++) l[i] = j.plp[i][k], g[i] = j.pgone[i][k];
            fusion_adapt_update(e, e->adapt_alpha, prior, wp, l, g);
        }
    }
    size_t r = 0;
    for (int c = 0; c < n_cont && rc == 0; c++) {
        size_t len = strlen(cont[c]);
        for (size_t k = 0; k < len; k++) y[r + k] = (uint8_t)cont[c][k];
        float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < e->n; i++) rows[i] = j.rows[i] + r * FUSION_N_BYTE_OUT;
        if (e->adapt_on) {
            double w[TUTTI_ENSEMBLE_MAX_MEMBERS];
            memcpy(w, wp, sizeof(double) * (size_t)e->n);
            nll[c] = 0;
            for (size_t k = 0; k < len; k++) {
                for (int32_t i = 0; i < e->n; i++) {
                    const float *row = rows[i] + k * FUSION_N_BYTE_OUT;
                    l[i] = row[y[r + k]], g[i] = fusion_row_gone(row, FUSION_N_BYTE_OUT);
                }
                nll[c] -= fusion_adapt_update(e, e->adapt_alpha, prior, w, l, g);
            }
        } else {
            text_data d = {.n_rows = (int64_t)len, .y = y + r, .width = FUSION_N_BYTE_OUT};
            rc = fusion_ensemble_nll(e, &d, rows, e->w, &nll[c]);
        }
        r += len;
    }
    for (int32_t i = 0; i < e->n; i++) free(j.rows[i]), free(j.plp[i]), free(j.pgone[i]), free(j.prow[i]);
    free(y);
    return rc;
}

/* ---- fitting ---- */

/* Objective and gradient wrt w (normalised weights) for mix / product
 * (nats, summed over rows).  For mix only the true outcome matters. */
static double objective(const tutti_ensemble *e, const text_data *d, float *const *rows, const double *sp,
                        const double *w, double *g) {
    int32_t n = e->n;
    for (int32_t i = 0; i < n; i++) g[i] = 0;
    double L = 0;
    bool span = e->align == TUTTI_ALIGN_SPAN;
    if (span || e->rule == TUTTI_RULE_MIX) {
        int64_t nr = span ? d->n_spans : d->n_rows;
        for (int64_t k = 0; k < nr; k++) {
            /* the mixture over the members present at this unit, renormalised:
             * L = -log Σ_A w_i p_i + log Σ_A w_i */
            double p[TUTTI_ENSEMBLE_MAX_MEMBERS], mx = -INFINITY, wa = 0;
            bool present[TUTTI_ENSEMBLE_MAX_MEMBERS];
            int64_t r0 = span ? d->span_start[k] : k;
            for (int32_t i = 0; i < n; i++) {
                present[i] = !fusion_row_gone(rows[i] + r0 * d->width, d->width);
                p[i] = span ? sp[i * nr + k] : rows[i][k * d->width + d->y[k]];
                if (!present[i]) continue;
                wa += w[i];
                if (p[i] > mx) mx = p[i];
            }
            if (!(wa > 0) || mx == -INFINITY) continue; /* no member can score it: no weight changes that */
            double q = 0;
            for (int32_t i = 0; i < n; i++) q += present[i] ? w[i] * (p[i] = exp(p[i] - mx)) : 0;
            L -= mx + log(q) - log(wa);
            for (int32_t i = 0; i < n; i++)
                if (present[i]) g[i] -= p[i] / q - 1 / wa;
        }
        return L;
    }
    /* product: s(x) = Σ w_i l_i(x); L = -Σ [s(y) - lse s] */
    int W = d->width;
    double *s = malloc(sizeof(double) * (size_t)W), gu[TUTTI_ENSEMBLE_MAX_MEMBERS];
    if (!s) return INFINITY;
    for (int64_t k = 0; k < d->n_rows; k++) {
        const float *r[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < n; i++) r[i] = rows[i] + (size_t)k * (size_t)W;
        L -= fusion_pool_unit(n, r, w, W, d->y[k], s, gu);
        for (int32_t i = 0; i < n; i++) g[i] -= gu[i];
    }
    free(s);
    return L;
}

static double pool_clamp(float l) { return l < FUSION_POOL_CLAMP ? FUSION_POOL_CLAMP : (double)l; }

/* Σ_x p[x] max(l[x], clamp) with four partial sums (a loop the compiler
 * vectorises; the fits run it n_members times per unit per step) */
static double pool_dot(const double *p, const float *l, int W) {
    double a[4] = {0, 0, 0, 0};
    int x = 0;
    for (; x + 4 <= W; x += 4)
        for (int k = 0; k < 4; k++) a[k] += p[x + k] * pool_clamp(l[x + k]);
    for (; x < W; x++) a[0] += p[x] * pool_clamp(l[x]);
    return (a[0] + a[1]) + (a[2] + a[3]);
}

double fusion_pool_unit(int32_t n, const float *const *rows, const double *c, int W, int32_t y, double *s, double *g) {
    for (int x = 0; x < W; x++) s[x] = 0;
    double sy = 0;
    for (int32_t i = 0; i < n; i++) { /* member by member: each pass over the row is one plain loop */
        if (!rows[i]) continue;
        const float *r = rows[i];
        double ci = c[i];
        for (int x = 0; x < W; x++) s[x] += ci * pool_clamp(r[x]);
        sy += ci * pool_clamp(r[y]);
    }
    double mx = -INFINITY, z = 0;
    for (int x = 0; x < W; x++) mx = s[x] > mx ? s[x] : mx;
    for (int x = 0; x < W; x++) z += (s[x] = exp(s[x] - mx)); /* libm: the loss stays smooth for the gradient */
    for (int32_t i = 0; g && i < n; i++)
        if (rows[i]) g[i] = pool_clamp(rows[i][y]) - pool_dot(s, rows[i], W) / z;
    return sy - mx - log(z);
}

/* Adam on softmax-parameterised weights; theta is updated in place. */
static double fit_weights(const tutti_ensemble *e, const text_data *d, float *const *rows, const double *sp,
                          double *theta, int iters) {
    int32_t n = e->n;
    double m1[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0}, m2[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    double w[TUTTI_ENSEMBLE_MAX_MEMBERS], g[TUTTI_ENSEMBLE_MAX_MEMBERS], best = INFINITY;
    double best_theta[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int64_t nr = e->align == TUTTI_ALIGN_SPAN ? d->n_spans : d->n_rows;
    for (int it = 0; it <= iters; it++) {
        double mx = -INFINITY, z = 0;
        for (int32_t i = 0; i < n; i++)
            if (theta[i] > mx) mx = theta[i];
        for (int32_t i = 0; i < n; i++) z += (w[i] = exp(theta[i] - mx));
        for (int32_t i = 0; i < n; i++) w[i] /= z;
        double L = objective(e, d, rows, sp, w, g) / (double)nr;
        if (L < best) {
            best = L;
            memcpy(best_theta, theta, sizeof(double) * (size_t)n);
        }
        if (it == iters) break;
        double gw = 0;
        for (int32_t i = 0; i < n; i++) gw += w[i] * g[i];
        for (int32_t i = 0; i < n; i++) {
            double gt = w[i] * (g[i] - gw) / (double)nr;
            m1[i] = 0.9 * m1[i] + 0.1 * gt;
            m2[i] = 0.999 * m2[i] + 0.001 * gt * gt;
            double mh = m1[i] / (1 - pow(0.9, it + 1)), vh = m2[i] / (1 - pow(0.999, it + 1));
            theta[i] -= 0.1 * mh / (sqrt(vh) + 1e-8);
        }
    }
    memcpy(theta, best_theta, sizeof(double) * (size_t)n);
    return best * (double)nr;
}

/* Static weights and temperatures on the tables tab[t * n + i] (member i at
 * grid temperature t): coordinate descent over each member's temperature,
 * the weights refit by Adam for every candidate.  cur[i]: the chosen
 * tables; wf, tf the fitted weights and temperatures; *uniform_nll: uniform
 * weights at the grid value closest to 1.  keep: weights below 1e-4 stay
 * above 0 (adapt: the prior is the only way back for a member, and a prior
 * of 0 would drop it for good), else they are set to 0. */
static int fit_static(tutti_ensemble *e, const text_data *d, float **tab, const float *temps, int32_t n_temps,
                      float **cur, float *wf, float *tf, double *uniform_nll, bool keep) {
    int32_t n = e->n;
    bool span = e->align == TUTTI_ALIGN_SPAN;
    int64_t nsp = span ? d->n_spans : 0;
    double *sp = malloc(sizeof(double) * (size_t)(nsp ? nsp : 1) * (size_t)n);
    if (!sp) return tutti_set_error("fit: out of memory");
    int32_t t1 = 0;
    for (int32_t t = 1; t < n_temps; t++)
        if (fabsf(temps[t] - 1.0f) < fabsf(temps[t1] - 1.0f)) t1 = t;
    float wu[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t choice[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < n; i++)
        wu[i] = 1.0f / (float)n, choice[i] = t1, cur[i] = tab[(size_t)t1 * (size_t)n + (size_t)i];
    int rc = fusion_ensemble_nll(e, d, cur, wu, uniform_nll);
    if (rc < 0) {
        free(sp);
        return rc;
    }
    double theta[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    if (span)
        for (int32_t i = 0; i < n; i++) fusion_span_logp(d, cur[i], sp + (size_t)i * (size_t)nsp);
    double best = fit_weights(e, d, cur, sp, theta, 300);
    for (int round = 0; round < 2 && n_temps > 1; round++)
        for (int32_t i = 0; i < n; i++)
            for (int32_t t = 0; t < n_temps; t++) {
                if (t == choice[i]) continue;
                cur[i] = tab[(size_t)t * (size_t)n + (size_t)i];
                if (span) fusion_span_logp(d, cur[i], sp + (size_t)i * (size_t)nsp);
                double th[TUTTI_ENSEMBLE_MAX_MEMBERS];
                memcpy(th, theta, sizeof th);
                double L = fit_weights(e, d, cur, sp, th, 120);
                if (L < best) {
                    best = L, choice[i] = t;
                    memcpy(theta, th, sizeof th);
                } else {
                    cur[i] = tab[(size_t)choice[i] * (size_t)n + (size_t)i];
                    if (span) fusion_span_logp(d, cur[i], sp + (size_t)i * (size_t)nsp);
                }
            }
    fit_weights(e, d, cur, sp, theta, 300);
    free(sp);
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < n; i++)
        if (theta[i] > mx) mx = theta[i];
    for (int32_t i = 0; i < n; i++) z += exp(theta[i] - mx);
    for (int32_t i = 0; i < n; i++) {
        wf[i] = (float)(exp(theta[i] - mx) / z);
        /* weights that no longer matter are set to exactly 0 */
        if (wf[i] < 1e-4f) wf[i] = keep ? fmaxf(wf[i], 1e-30f) : 0;
        tf[i] = temps[choice[i]];
    }
    return 0;
}

/* The fixed-share alpha on a log grid, the ensemble's weights as the prior
 * (adapt on): *nll the best figure. */
static int fit_alpha(tutti_ensemble *e, const text_data *d, float *const *cur, double *nll, double *alpha) {
    static const double grid[] = {0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1};
    *alpha = -1;
    for (size_t g = 0; g < sizeof grid / sizeof grid[0]; g++) {
        double L;
        e->adapt_alpha = grid[g];
        if (fusion_ensemble_nll(e, d, cur, e->w, &L) < 0) return TUTTI_ERR;
        if (*alpha < 0 || L < *nll) *nll = L, *alpha = grid[g];
    }
    e->adapt_alpha = *alpha;
    return 0;
}

int tutti_ensemble_fit(tutti_ensemble *e, const char *text, size_t len, const float *temps, int32_t n_temps,
                       tutti_fit_result *out) {
    tutti_fit_params p = {.temps = temps, .n_temps = n_temps};
    return tutti_ensemble_fit_with(e, text, len, &p, out);
}

int tutti_ensemble_fit_with(tutti_ensemble *e, const char *text, size_t len, const tutti_fit_params *p,
                            tutti_fit_result *out) {
    if (!e || !text) return tutti_set_error("fit: missing argument");
    static const tutti_fit_params none = {0};
    if (!p) p = &none;
    if (e->rule == TUTTI_RULE_CONTRASTIVE) {
        tutti_set_error("fit: the contrastive rule has no likelihood to fit weights on; use mix or product");
        return TUTTI_ERR_UNSUPPORTED;
    }
    if (e->rule == TUTTI_RULE_GATE && e->align != TUTTI_ALIGN_SPAN) {
        tutti_set_error("fit: the gate rule has no weights to fit; use mix or product");
        return TUTTI_ERR_UNSUPPORTED;
    }
    if (p->n_context < 0 || p->n_context > TUTTI_N_FEATURES)
        return tutti_set_error("fit: %d context features", p->n_context);
    if (p->select_share > 1) return tutti_set_error("fit: the share of units to fuse must be in (0, 1]");
    if (p->select_share > 0 && e->align == TUTTI_ALIGN_SPAN)
        return tutti_set_error("fit: selective fusion needs token or byte alignment");
    static const float one = 1.0f;
    const float *temps = p->temps;
    int32_t n_temps = p->n_temps;
    if (!temps || n_temps <= 0) temps = &one, n_temps = 1;
    for (int32_t t = 0; t < n_temps; t++)
        if (!(temps[t] > 0)) return tutti_set_error("fit: temperature grid value %g is not > 0", (double)temps[t]);
    /* weights and temperatures are fitted statically, then the context
     * weights, the adapt alpha and the selective-fusion threshold */
    bool adapt = e->adapt_on;
    e->adapt_on = false;
    memset(&e->ctx, 0, sizeof e->ctx);
    e->select = -1;
    text_data d;
    int rc = fusion_text_data_init(e, text, len, 200, &d);
    int32_t n = e->n;
    float **tab = calloc((size_t)n_temps * (size_t)n + 1, sizeof(float *)); /* tables[t][i] */
    if (rc == 0 && !tab) rc = tutti_set_error("fit: out of memory");
    for (int32_t t = 0; rc == 0 && t < n_temps; t++) {
        float tt[TUTTI_ENSEMBLE_MAX_MEMBERS];
        for (int32_t i = 0; i < n; i++) tt[i] = temps[t];
        rc = fusion_compute_tables(e, &d, tt, tab + (size_t)t * (size_t)n);
    }
    double ln2n = log(2.0) * (double)d.n_bytes;
    tutti_fusion_rule saved_rule = e->rule;
    if (e->align == TUTTI_ALIGN_SPAN) e->rule = TUTTI_RULE_MIX; /* the span mixture is what eval scores */
    float *cur[TUTTI_ENSEMBLE_MAX_MEMBERS], wf[TUTTI_ENSEMBLE_MAX_MEMBERS], tf[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double uniform_nll = NAN, static_nll = NAN, ctx_nll = NAN, heldout = NAN, nll = NAN, alpha = -1, thr = -1,
           fused = 1;
    if (rc == 0) rc = fit_static(e, &d, tab, temps, n_temps, cur, wf, tf, &uniform_nll, adapt);
    if (rc == 0) rc = tutti_ensemble_set_weights(e, wf, tf);
    /* the reported figures go through the same code path as eval */
    if (rc == 0) rc = fusion_ensemble_nll(e, &d, cur, e->w, &static_nll);
    nll = static_nll;
    if (rc == 0 && p->n_context > 0 && (rc = fusion_fit_context(e, &d, cur, p->context, p->n_context, &heldout)) == 0)
        rc = fusion_ensemble_nll(e, &d, cur, e->w, &ctx_nll), nll = ctx_nll;
    if (rc == 0 && adapt) {
        e->adapt_on = true;
        rc = fit_alpha(e, &d, cur, &nll, &alpha);
    }
    if (rc == 0 && p->select_share > 0 && (rc = fusion_select_threshold(e, &d, cur, p->select_share, &thr)) == 0 &&
        (rc = tutti_ensemble_set_select(e, thr)) == 0)
        rc = fusion_ensemble_nll_fused(e, &d, cur, e->w, &nll, &fused);
    e->rule = saved_rule;
    e->adapt_on = adapt;
    if (rc == 0 && out) {
        memset(out, 0, sizeof *out);
        out->uniform_bpb = uniform_nll / ln2n;
        out->fitted_bpb = nll / ln2n;
        out->static_bpb = static_nll / ln2n;
        out->context_bpb = ctx_nll / ln2n;
        out->heldout_bpb = heldout;
        out->adapt_alpha = alpha;
        out->select_threshold = thr;
        out->fused_share = fused;
        out->acc = out->acc_norm = NAN;
        memcpy(out->weights, e->w, sizeof(float) * (size_t)n);
        memcpy(out->temps, e->temp, sizeof(float) * (size_t)n);
    }
    if (tab)
        for (int32_t k = 0; k < n_temps * n; k++) free(tab[k]);
    free(tab);
    fusion_text_data_free(&d);
    return tutti_primary_code(rc);
}
