/* Teacher-forced scoring tables (internal), shared by eval.c (bits per
 * byte, fitting weights and temperatures) and the fits built on it:
 * context weights (fit_ctx.c), the rule search (fit_auto.c) and fitting
 * for multiple-choice accuracy (fit_choices.c). */
#ifndef TUTTI_FUSION_EVAL_IMPL_H
#define TUTTI_FUSION_EVAL_IMPL_H

#include "fusion/ensemble_impl.h"

/* A text split into chunks, each scored from BOS, and its scored units. */
typedef struct text_data {
    char **chunks;
    int n_chunks;
    int64_t n_bytes;
    int64_t n_rows;       /* bytes (BYTE/SPAN) or scored tokens (TOKEN) */
    int32_t *y;           /* [n_rows] true outcome */
    int width;            /* 257 or n_vocab */
    int64_t *chunk_start; /* [n_chunks+1] first row of each chunk (a new stream from BOS) */
    /* SPAN: row ranges of the spans */
    int64_t n_spans;
    int64_t *span_start; /* [n_spans+1] */
} text_data;

/* max_chunk > 0: the text split into sentence-aligned chunks of at most
 * that many bytes (bits per byte); 0: the whole text is one chunk (choice
 * scoring, where context + choice is one text scored from BOS). */
int fusion_text_data_init(tutti_ensemble *e, const char *text, size_t len, int max_chunk, text_data *d);
void fusion_text_data_free(text_data *d);
/* Every member's table of log-probabilities at temperatures temps[n]:
 * rows[i] = malloc'd [n_rows][width] (caller frees).  -inf rows: the member
 * has no distribution there (fusion_row_gone). */
int fusion_compute_tables(tutti_ensemble *e, text_data *d, const float *temps, float **rows);
/* Span log-probabilities of one member: sp[s] = Σ over the span's bytes. */
void fusion_span_logp(const text_data *d, const float *rows, double *sp);
/* true when a member has no distribution at this row (BYTE/SPAN). */
bool fusion_row_gone(const float *row, int width);
/* The ensemble's negative log-likelihood (nats) of the text from the tables
 * with given weights w, under e's rule, alignment, adapt, context weights
 * and selective fusion; *fused (may be NULL): the share of units fused. */
int fusion_ensemble_nll(tutti_ensemble *e, const text_data *d, float *const *rows, const float *w, double *nll);
int fusion_ensemble_nll_fused(tutti_ensemble *e, const text_data *d, float *const *rows, const float *w, double *nll,
                              double *fused);
/* The weigher's path of fusion_ensemble_nll (ctxweights.h): context
 * weights and selective fusion, with adapt's fixed share when it is on; the
 * units of the text one stream, LOSS starting again at each chunk (a chunk
 * of d->chunk_start; none: one stream).  cont: a weigher already begun (and
 * fed, e.g. with a choice's context) to continue from, else one begun here
 * with the weights w.  hook (may be NULL) sees every unit u of chunk c after
 * its weights, before the weigher observes lp (the members' log-probability
 * of the true unit) and gone. */
struct fusion_weigher;
typedef void (*fusion_unit_hook)(void *user, int64_t u, int chunk, const struct fusion_weigher *s, const double *lp,
                                 const bool *gone);
int fusion_weighed_nll(tutti_ensemble *e, const text_data *d, float *const *rows, const float *w, double *nll,
                       double *fused, struct fusion_weigher *cont, fusion_unit_hook hook, void *user);
/* One unit of the log-linear pool (PRODUCT) as the fits differentiate it:
 * s(x) = Σ_i c_i max(l_i(x), FUSION_POOL_CLAMP) over the members with a row
 * (rows[i] != NULL, [W] log-probabilities); returns log softmax(s)(y) and,
 * when g is not NULL, g[i] = d/dc_i = l_i(y) - E_softmax(s)[l_i].  s: W
 * doubles of scratch.  The clamp stands for an outcome a member rules out
 * (its log-probability -inf would make every gradient infinite). */
#define FUSION_POOL_CLAMP (-1e4f)
double fusion_pool_unit(int32_t n, const float *const *rows, const double *c, int W, int32_t y, double *s, double *g);
/* The unit's row index of unit u (SPAN: its first byte) and the units. */
static inline int64_t text_data_units(const tutti_ensemble *e, const text_data *d) {
    return e->align == TUTTI_ALIGN_SPAN ? d->n_spans : d->n_rows;
}
static inline int64_t text_data_unit_row(const tutti_ensemble *e, const text_data *d, int64_t u) {
    return e->align == TUTTI_ALIGN_SPAN ? d->span_start[u] : u;
}

#endif
