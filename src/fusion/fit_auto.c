/* `tutti fit --rule auto` (tutti_ensemble_fit_auto): the rule chosen on
 * held-out text.  Which rule helps depends on the members: the product
 * sharpens members that agree and are each a little unsure (story models
 * of one domain), the mixture hedges between members that know different
 * things (specialists of several domains), adapt and context weights move
 * the weight to the member that knows the current text.  A fit on the
 * whole text would favour the candidate with the most parameters, so each
 * is fitted on two chunks of every three and scored on the third. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ensemble_impl.h"
#include "util/error.h"

typedef struct candidate {
    tutti_fusion_rule rule;
    bool adapt, context;
    const char *name;
} candidate;

static const candidate candidates[] = {
    {TUTTI_RULE_MIX, false, false, "mix"},
    {TUTTI_RULE_MIX, true, false, "mix + adapt"},
    {TUTTI_RULE_PRODUCT, false, false, "product"},
    {TUTTI_RULE_GATE, false, false, "gate"},
    {TUTTI_RULE_MIX, false, true, "mix + context"},
    {TUTTI_RULE_MIX, true, true, "mix + context + adapt"},
    {TUTTI_RULE_PRODUCT, false, true, "product + context"},
};
#define N_CANDIDATES ((int)(sizeof candidates / sizeof candidates[0]))

/* The chunks c with (c % 3 == 2) == held, joined by blank lines (each is
 * its own paragraph, so eval splits them back into the same chunks). */
static char *join_chunks(char **chunks, int n, bool held, size_t *len) {
    size_t total = 1;
    for (int c = 0; c < n; c++) total += strlen(chunks[c]) + 2;
    char *s = malloc(total);
    if (!s) return NULL;
    size_t k = 0;
    for (int c = 0; c < n; c++) {
        if ((c % 3 == 2) != held) continue;
        if (k) s[k++] = '\n', s[k++] = '\n';
        size_t l = strlen(chunks[c]);
        memcpy(s + k, chunks[c], l);
        k += l;
    }
    s[k] = 0;
    *len = k;
    return s;
}

static void report(const tutti_fit_params *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(const tutti_fit_params *p, const char *fmt, ...) {
    if (!p->report) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->report(line, p->user);
}

/* Sets candidate k on the ensemble with the starting weights w0, t0 and
 * fits it on text with p's grid (and context features). */
static int fit_candidate(tutti_ensemble *e, int k, const float *w0, const float *t0, const char *text, size_t len,
                         const tutti_fit_params *p, double select_share, tutti_fit_result *r) {
    const candidate *c = &candidates[k];
    memset(&e->ctx, 0, sizeof e->ctx);
    e->select = -1;
    e->adapt_on = false;
    if (tutti_ensemble_set_rule(e, c->rule) < 0 || tutti_ensemble_set_weights(e, w0, t0) < 0) return TUTTI_ERR;
    if (c->adapt && tutti_ensemble_set_adapt(e, 0.01) < 0) return TUTTI_ERR;
    if (c->rule == TUTTI_RULE_GATE) return 0; /* no weights to fit: the members as given */
    tutti_fit_params q = *p;
    q.n_context = 0;
    q.select_share = select_share;
    if (c->context) {
        q.n_context = p->n_context;
        memcpy(q.context, p->context, sizeof q.context);
        if (q.n_context == 0)
            for (int32_t f = 0; f < TUTTI_N_FEATURES; f++) q.context[q.n_context++] = f;
    }
    return tutti_ensemble_fit_with(e, text, len, &q, r);
}

/* Whether the alignment scores candidate k: SPAN scores only the span
 * mixture. */
static bool scorable(const tutti_ensemble *e, int k) {
    return e->align != TUTTI_ALIGN_SPAN || candidates[k].rule == TUTTI_RULE_MIX;
}

int tutti_ensemble_fit_auto(tutti_ensemble *e, const char *text, size_t len, const tutti_fit_params *p,
                            tutti_fit_result *out) {
    if (!e || !text) return tutti_set_error("fit: missing argument");
    static const tutti_fit_params none = {0};
    if (!p) p = &none;
    char **chunks = NULL;
    int nc = fusion_split_chunks(text, len, 200, &chunks);
    if (nc < 0) return TUTTI_ERR;
    if (nc < 3) {
        fusion_free_chunks(chunks, nc);
        return tutti_set_error("fit --rule auto: the text has %d chunk%s; it needs 3 or more (two of every three "
                               "fit each candidate, the third scores it)",
                               nc, nc == 1 ? "" : "s");
    }
    size_t lf, lh;
    char *fit_text = join_chunks(chunks, nc, false, &lf), *held_text = join_chunks(chunks, nc, true, &lh);
    fusion_free_chunks(chunks, nc);
    float w0[TUTTI_ENSEMBLE_MAX_MEMBERS], t0[TUTTI_ENSEMBLE_MAX_MEMBERS];
    memcpy(w0, e->w, sizeof(float) * (size_t)e->n);
    memcpy(t0, e->temp, sizeof(float) * (size_t)e->n);
    for (int32_t i = 0; i < e->n; i++) /* a contrastive ensemble's negative weights: start uniform */
        if (w0[i] < 0 || e->rule == TUTTI_RULE_CONTRASTIVE) w0[i] = 1.0f / (float)e->n;
    int rc = fit_text && held_text ? 0 : tutti_set_error("fit: out of memory");
    int best = -1;
    double best_bpb = INFINITY;
    for (int k = 0; rc == 0 && k < N_CANDIDATES; k++) {
        if (!scorable(e, k)) continue;
        tutti_fit_result r;
        tutti_bpb_result b;
        if ((rc = fit_candidate(e, k, w0, t0, fit_text, lf, p, 0, &r)) < 0 ||
            (rc = tutti_ensemble_eval_bpb(e, held_text, lh, &b)) < 0) {
            tutti_error_prefix("fit --rule auto: candidate %s", candidates[k].name);
            break;
        }
        report(p, "candidate %-22s held-out %.4f bits/byte", candidates[k].name, b.ensemble_bpb);
        if (b.ensemble_bpb < best_bpb) best_bpb = b.ensemble_bpb, best = k;
    }
    free(fit_text), free(held_text);
    if (rc == 0 && best < 0) rc = tutti_set_error("fit --rule auto: no candidate could be scored");
    if (rc < 0) return tutti_primary_code(rc);
    /* the winner, fitted again on the whole text */
    tutti_fit_result r;
    memset(&r, 0, sizeof r);
    if ((rc = fit_candidate(e, best, w0, t0, text, len, p, p->select_share, &r)) < 0) return tutti_primary_code(rc);
    if (candidates[best].rule == TUTTI_RULE_GATE) {
        tutti_bpb_result b;
        if ((rc = tutti_ensemble_eval_bpb(e, text, len, &b)) < 0) return tutti_primary_code(rc);
        r.uniform_bpb = r.static_bpb = r.fitted_bpb = b.ensemble_bpb;
        r.context_bpb = r.heldout_bpb = r.acc = r.acc_norm = NAN;
        r.adapt_alpha = r.select_threshold = -1;
        r.fused_share = 1;
        memcpy(r.weights, e->w, sizeof(float) * (size_t)e->n);
        memcpy(r.temps, e->temp, sizeof(float) * (size_t)e->n);
    }
    snprintf(r.chosen, sizeof r.chosen, "%s", candidates[best].name);
    report(p, "chose %s (held-out %.4f bits/byte), fitted again on the whole text: %.4f bits/byte",
           candidates[best].name, best_bpb, r.fitted_bpb);
    if (out) *out = r;
    return 0;
}
