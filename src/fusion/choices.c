/* Multiple-choice accuracy (lm-evaluation-harness's multiple_choice task
 * type): LL(choice) = LL(context + choice) - LL(context), every text scored
 * from BOS, the answer the highest LL (acc) or the highest LL per byte of the
 * choice (acc_norm, normalised by UTF-8 bytes as ../shared/eval/README
 * defines it).  LL(context) is computed once per item.
 *
 * The ensemble's LL follows its settings: static weights per unit; with
 * adapt the weights follow the item's text from BOS (alpha 0: the exact
 * sequence mixture, LL = log Σ w_i p_i(context + choice) - log Σ w_i
 * p_i(context), i.e. the choice scored with the posterior over members
 * after the context, which lets the member that models this context best
 * speak); with route the weights are set from the context's perplexities
 * (route.c) and static over the choice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ensemble_impl.h"
#include "util/error.h"

/* Index of the largest value (lowest index on ties), or -1 if all are NaN. */
static int32_t argmax(const double *v, int32_t n) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

int tutti_ensemble_eval_choices(tutti_ensemble *e, const tutti_choice_item *items, int32_t n_items,
                                tutti_choices_result *out, double *ll,
                                void (*progress)(int32_t done, int32_t total, void *user), void *user) {
    if (!e || !out || (n_items > 0 && !items)) return tutti_set_error("choices: missing argument");
    if (n_items <= 0) return tutti_set_error("choices: no items to score");
    memset(out, 0, sizeof *out);
    const int32_t K = e->n + 1; /* members, then the ensemble */
    for (int32_t it = 0; it < n_items; it++) {
        const tutti_choice_item *q = &items[it];
        if (!q->context || !q->choices || q->n_choices < 2 || q->n_choices > TUTTI_MAX_CHOICES)
            return tutti_set_error("choices: item %d needs a context and 2 to %d choices", it + 1, TUTTI_MAX_CHOICES);
        if (q->label < 0 || q->label >= q->n_choices)
            return tutti_set_error("choices: item %d: label %d is not in [0, %d)", it + 1, q->label, q->n_choices);
        for (int32_t c = 0; c < q->n_choices; c++)
            if (!q->choices[c] || !q->choices[c][0])
                return tutti_set_error("choices: item %d: choice %d is empty", it + 1, c + 1);
    }
    if (e->adapt_on && e->route_tau > 0)
        return tutti_set_error("choices: route and adapt both set the weights from the context; use one of them");
    /* BYTE alignment scores the choices from the context's byte states (built
     * once per item); TOKEN and SPAN score context + choice and the context
     * as whole texts (their units may straddle the boundary). */
    const bool branches = e->align == TUTTI_ALIGN_BYTE;
    int rc = 0;
    size_t lctx = 0;
    char *buf = NULL;
    float w_given[TUTTI_ENSEMBLE_MAX_MEMBERS];
    memcpy(w_given, e->w, sizeof(float) * (size_t)e->n);
    for (int32_t it = 0; it < n_items && rc == 0; it++) {
        const tutti_choice_item *q = &items[it];
        double ctx_m[TUTTI_ENSEMBLE_MAX_MEMBERS], ctx_e;
        lctx = strlen(q->context);
        /* route: this item's weights from the context (the prompt) */
        if (e->route_tau > 0) {
            memcpy(e->w, w_given, sizeof(float) * (size_t)e->n);
            float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
            if ((rc = tutti_ensemble_route_weights(e, q->context, lctx, e->route_tau, w, NULL)) < 0) break;
            memcpy(e->w, w, sizeof(float) * (size_t)e->n);
        }
        double br[TUTTI_MAX_CHOICES];
        if (branches) {
            if ((rc = fusion_branches_nll(e, q->context, q->choices, q->n_choices, br)) < 0) break;
            for (int32_t i = 0; i < e->n && rc == 0; i++) {
                if (fusion_token_nll(e->m[i], q->context, lctx, 1.0f, &ctx_m[i]) < 0) {
                    tutti_error_prefix("member %d (%s)", i + 1, e->path[i]);
                    rc = TUTTI_ERR;
                }
            }
            ctx_e = 0;
        } else {
            rc = fusion_text_nll(e, q->context, lctx, ctx_m, &ctx_e);
        }
        if (rc < 0) break;
        double v[TUTTI_MAX_CHOICES][TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
        double vn[TUTTI_MAX_CHOICES][TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
        for (int32_t c = 0; c < q->n_choices && rc == 0; c++) {
            size_t lc = strlen(q->choices[c]);
            char *nb = realloc(buf, lctx + lc + 1);
            if (!nb) {
                rc = tutti_set_error("choices: out of memory");
                break;
            }
            buf = nb;
            memcpy(buf, q->context, lctx);
            memcpy(buf + lctx, q->choices[c], lc + 1);
            double m[TUTTI_ENSEMBLE_MAX_MEMBERS], en = br[c];
            if (branches) {
                for (int32_t i = 0; i < e->n && rc == 0; i++)
                    if (fusion_token_nll(e->m[i], buf, lctx + lc, 1.0f, &m[i]) < 0) {
                        tutti_error_prefix("member %d (%s)", i + 1, e->path[i]);
                        rc = TUTTI_ERR;
                    }
            } else {
                rc = fusion_text_nll(e, buf, lctx + lc, m, &en);
            }
            if (rc < 0) break;
            for (int32_t k = 0; k < K; k++) {
                double x = k < e->n ? ctx_m[k] - m[k] : ctx_e - en; /* LL = -(nll(full) - nll(ctx)) */
                v[c][k] = x;
                vn[c][k] = x / (double)lc;
                if (ll) ll[((size_t)it * TUTTI_MAX_CHOICES + (size_t)c) * (size_t)K + (size_t)k] = x;
            }
        }
        if (rc < 0) {
            tutti_error_prefix("choices: item %d", it + 1);
            break;
        }
        for (int32_t k = 0; k < K; k++) {
            double col[TUTTI_MAX_CHOICES], coln[TUTTI_MAX_CHOICES];
            for (int32_t c = 0; c < q->n_choices; c++) col[c] = v[c][k], coln[c] = vn[c][k];
            double hit = argmax(col, q->n_choices) == q->label, hitn = argmax(coln, q->n_choices) == q->label;
            if (k < e->n) {
                out->member_acc[k] += hit;
                out->member_acc_norm[k] += hitn;
            } else {
                out->ensemble_acc += hit;
                out->ensemble_acc_norm += hitn;
            }
        }
        if (progress) progress(it + 1, n_items, user);
    }
    free(buf);
    memcpy(e->w, w_given, sizeof(float) * (size_t)e->n);
    if (rc < 0) return tutti_primary_code(rc);
    out->n_members = e->n;
    out->n_items = n_items;
    for (int32_t k = 0; k < e->n; k++) {
        out->member_acc[k] /= n_items;
        out->member_acc_norm[k] /= n_items;
    }
    out->ensemble_acc /= n_items;
    out->ensemble_acc_norm /= n_items;
    return 0;
}
