/* Fitting for multiple-choice accuracy (tutti_ensemble_fit_choices, `tutti
 * fit --choices`).
 *
 * acc_norm picks the choice with the highest LL per byte; the fitted loss
 * is its smooth version, the log-loss of the label under a softmax over the
 * choices of LL_c / bytes_c / s (the scale s fitted too), summed over items.
 * LL_c = ll(context + choice_c) - ll(context), each text scored from BOS
 * through the alignment's tables (eval_impl.h), as eval --choices scores
 * it:
 *   posterior (MIX with adapt alpha 0, eval's default for mix):
 *     ll(T) = log Σ_i w_i exp(S_i(T)), S_i the member's log-probability of T
 *   static MIX:      ll(T) = Σ_units log Σ_i w_i p_i(y) / Σ_i w_i (members present)
 *   static PRODUCT:  ll(T) = Σ_units log softmax(Σ_i w_i log p_i)(y), w normalised over the present
 * Weights are a softmax of free parameters (Adam); in posterior scoring the
 * members' temperatures come from the grid too (coordinate descent; each
 * grid value's tables computed once), static scoring keeps the ensemble's
 * temperatures (its per-unit tables would be held for every grid value). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/eval_impl.h"
#include "util/error.h"

typedef struct cf_text {
    text_data d;
    float *rows[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* static: tables at the ensemble's temperatures */
    double *seq;                             /* [n_temps][n] member log-probabilities of the text */
} cf_text;

typedef struct cf {
    tutti_ensemble *e;
    int32_t n, n_temps, n_items;
    bool posterior;
    const tutti_choice_item *items;
    cf_text *texts;                           /* per item: the context, then each context + choice */
    int32_t *first;                           /* [n_items] index of the item's context text */
    int32_t tsel[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* the grid value of each member's temperature */
} cf;

/* ll(T) and dll/dw_i (w normalised over the members with weight > 0). */
static double text_ll(const cf *c, const cf_text *t, const double *w, double *g) {
    int32_t n = c->n;
    for (int32_t i = 0; i < n; i++) g[i] = 0;
    if (c->posterior) {
        double mx = -INFINITY, s = 0;
        for (int32_t i = 0; i < n; i++) {
            double v = t->seq[(size_t)c->tsel[i] * (size_t)n + (size_t)i];
            if (w[i] > 0 && v > mx) mx = v;
        }
        if (mx == -INFINITY) return -INFINITY;
        for (int32_t i = 0; i < n; i++)
            if (w[i] > 0) s += w[i] * exp(t->seq[(size_t)c->tsel[i] * (size_t)n + (size_t)i] - mx);
        for (int32_t i = 0; i < n; i++)
            if (w[i] > 0) g[i] = exp(t->seq[(size_t)c->tsel[i] * (size_t)n + (size_t)i] - mx) / s;
        return mx + log(s);
    }
    const text_data *d = &t->d;
    int W = d->width;
    double ll = 0;
    for (int64_t r = 0; r < d->n_rows; r++) {
        const float *row[TUTTI_ENSEMBLE_MAX_MEMBERS];
        double wp = 0;
        for (int32_t i = 0; i < n; i++) {
            row[i] = w[i] > 0 && !fusion_row_gone(t->rows[i] + (size_t)r * (size_t)W, W)
                         ? t->rows[i] + (size_t)r * (size_t)W
                         : NULL;
            if (row[i]) wp += w[i];
        }
        if (!(wp > 0)) continue;
        int32_t y = d->y[r];
        if (c->e->rule == TUTTI_RULE_MIX) {
            double mx = -INFINITY, q = 0;
            for (int32_t i = 0; i < n; i++)
                if (row[i] && row[i][y] > mx) mx = row[i][y];
            if (mx == -INFINITY) return -INFINITY;
            for (int32_t i = 0; i < n; i++) q += row[i] ? w[i] * exp(row[i][y] - mx) : 0;
            ll += mx + log(q) - log(wp);
            for (int32_t i = 0; i < n; i++)
                if (row[i]) g[i] += exp(row[i][y] - mx) / q - 1 / wp;
            continue;
        }
        /* product over the present members, weights renormalised: with
         * w~ = w / wp, d ll / d w_i = (d ll / d w~_i - Σ_j w~_j d ll / d w~_j) / wp */
        double sx[FUSION_N_BYTE_OUT], *s = W <= FUSION_N_BYTE_OUT ? sx : malloc(sizeof(double) * (size_t)W);
        if (!s) return NAN;
        double c[TUTTI_ENSEMBLE_MAX_MEMBERS], gt[TUTTI_ENSEMBLE_MAX_MEMBERS], gbar = 0;
        for (int32_t i = 0; i < n; i++) c[i] = row[i] ? w[i] / wp : 0;
        ll += fusion_pool_unit(n, row, c, W, y, s, gt);
        for (int32_t i = 0; i < n; i++) gbar += row[i] ? c[i] * gt[i] : 0;
        for (int32_t i = 0; i < n; i++)
            if (row[i]) g[i] += (gt[i] - gbar) / wp;
        if (s != sx) free(s);
    }
    return ll;
}

/* The loss (nats, summed over items) at theta = (weight logits [n], log
 * scale) and its gradient (may be NULL). */
static double cf_objective(const cf *c, const double *theta, double *grad) {
    int32_t n = c->n;
    double w[TUTTI_ENSEMBLE_MAX_MEMBERS], mx = -INFINITY, z = 0, gw[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
    for (int32_t i = 0; i < n; i++)
        if (c->e->w[i] > 0 && theta[i] > mx) mx = theta[i];
    for (int32_t i = 0; i < n; i++) z += (w[i] = c->e->w[i] > 0 ? exp(theta[i] - mx) : 0);
    for (int32_t i = 0; i < n; i++) w[i] /= z;
    double tau = exp(theta[n]), L = 0, gtau = 0;
    for (int32_t it = 0; it < c->n_items; it++) {
        const tutti_choice_item *q = &c->items[it];
        const cf_text *t = &c->texts[c->first[it]];
        double g0[TUTTI_ENSEMBLE_MAX_MEMBERS], gc[TUTTI_MAX_CHOICES][TUTTI_ENSEMBLE_MAX_MEMBERS];
        double l0 = text_ll(c, t, w, g0), sc[TUTTI_MAX_CHOICES] = {0}, smx = -INFINITY;
        int32_t nc = q->n_choices;
        for (int32_t k = 0; k < nc; k++) {
            double lk = text_ll(c, t + 1 + k, w, gc[k]);
            sc[k] = (lk - l0) / (double)strlen(q->choices[k]);
            if (!isfinite(sc[k])) sc[k] = -1e30; /* no member can write this choice */
            smx = sc[k] / tau > smx ? sc[k] / tau : smx;
        }
        double zz = 0, p[TUTTI_MAX_CHOICES];
        for (int32_t k = 0; k < nc; k++) zz += (p[k] = exp(sc[k] / tau - smx));
        L -= sc[q->label] / tau - smx - log(zz);
        for (int32_t k = 0; k < nc; k++) {
            double dl = (p[k] / zz - (k == q->label)) / tau; /* d L / d sc_k */
            if (sc[k] <= -1e30) continue;
            gtau -= dl * sc[k]; /* d sc_k/tau / d log tau = -sc_k/tau */
            for (int32_t i = 0; i < n; i++) gw[i] += dl * (gc[k][i] - g0[i]) / (double)strlen(q->choices[k]);
        }
    }
    if (grad) {
        double gb = 0;
        for (int32_t i = 0; i < n; i++) gb += w[i] * gw[i];
        for (int32_t i = 0; i < n; i++) grad[i] = w[i] * (gw[i] - gb);
        grad[n] = gtau;
    }
    return L;
}

/* Adam on theta (in place) for iters steps; returns the lowest loss seen
 * and leaves theta there. */
static double cf_descend(const cf *c, double *theta, int iters) {
    int32_t dim = c->n + 1;
    double g[TUTTI_ENSEMBLE_MAX_MEMBERS + 1],
        m1[TUTTI_ENSEMBLE_MAX_MEMBERS + 1] = {0}, m2[TUTTI_ENSEMBLE_MAX_MEMBERS + 1] = {0},
                                        bt[TUTTI_ENSEMBLE_MAX_MEMBERS + 1], best = INFINITY;
    for (int it = 0; it <= iters; it++) {
        double L = cf_objective(c, theta, g);
        if (L < best) best = L, memcpy(bt, theta, sizeof(double) * (size_t)dim);
        if (it == iters) break;
        for (int32_t j = 0; j < dim; j++) {
            double gt = g[j] / c->n_items;
            m1[j] = 0.9 * m1[j] + 0.1 * gt;
            m2[j] = 0.999 * m2[j] + 0.001 * gt * gt;
            theta[j] -= 0.05 * (m1[j] / (1 - pow(0.9, it + 1))) / (sqrt(m2[j] / (1 - pow(0.999, it + 1))) + 1e-8);
        }
    }
    memcpy(theta, bt, sizeof(double) * (size_t)dim);
    return best;
}

static void cf_free(cf *c, int32_t n_texts) {
    for (int32_t k = 0; c->texts && k < n_texts; k++) {
        fusion_text_data_free(&c->texts[k].d);
        for (int32_t i = 0; i < c->n; i++) free(c->texts[k].rows[i]);
        free(c->texts[k].seq);
    }
    free(c->texts), free(c->first);
}

/* Text k of the items: the context of an item, or its context + a choice. */
static int cf_text_build(cf *c, cf_text *t, const char *ctx, const char *choice, const float *temps) {
    size_t lc = strlen(ctx), lx = choice ? strlen(choice) : 0;
    char *buf = malloc(lc + lx + 1);
    if (!buf) return tutti_set_error("fit: out of memory");
    memcpy(buf, ctx, lc);
    if (choice) memcpy(buf + lc, choice, lx);
    buf[lc + lx] = 0;
    int rc = fusion_text_data_init(c->e, buf, lc + lx, 0, &t->d);
    free(buf);
    t->seq = calloc((size_t)c->n_temps * (size_t)c->n, sizeof(double));
    if (rc == 0 && !t->seq) rc = tutti_set_error("fit: out of memory");
    for (int32_t g = 0; rc == 0 && g < c->n_temps; g++) {
        float tt[TUTTI_ENSEMBLE_MAX_MEMBERS], *rows[TUTTI_ENSEMBLE_MAX_MEMBERS] = {0};
        for (int32_t i = 0; i < c->n; i++) tt[i] = c->posterior ? temps[g] : c->e->temp[i];
        if ((rc = fusion_compute_tables(c->e, &t->d, tt, rows)) == 0)
            for (int32_t i = 0; i < c->n; i++) {
                double s = 0;
                for (int64_t r = 0; r < t->d.n_rows; r++)
                    s += rows[i][(size_t)r * (size_t)t->d.width + (size_t)t->d.y[r]];
                t->seq[(size_t)g * (size_t)c->n + (size_t)i] = s;
            }
        for (int32_t i = 0; i < c->n; i++) {
            if (rc == 0 && !c->posterior) t->rows[i] = rows[i];
            else free(rows[i]);
        }
    }
    return rc;
}

int tutti_ensemble_fit_choices(tutti_ensemble *e, const tutti_choice_item *items, int32_t n_items,
                               const tutti_fit_params *p, tutti_fit_result *out) {
    if (!e || (!items && n_items)) return tutti_set_error("fit: missing argument");
    if (n_items <= 0) return tutti_set_error("fit: no choice items");
    static const tutti_fit_params none = {0};
    if (!p) p = &none;
    if (e->route_tau > 0 || e->ctx.n_features > 0)
        return tutti_set_error("fit --choices fits static weights: turn off %s",
                               e->route_tau > 0 ? "route" : "the context weights");
    bool posterior = e->rule == TUTTI_RULE_MIX && e->adapt_on;
    if ((e->adapt_on && e->adapt_alpha != 0) || (e->rule != TUTTI_RULE_MIX && e->rule != TUTTI_RULE_PRODUCT)) {
        tutti_set_error("fit --choices: mix (the posterior after the context, or static weights) or product (static), "
                        "not %s%s",
                        tutti_rule_name(e->rule), e->adapt_on ? " with adapt > 0" : "");
        return TUTTI_ERR_UNSUPPORTED;
    }
    if (!posterior && e->align == TUTTI_ALIGN_SPAN) {
        tutti_set_error("fit --choices in span alignment scores the posterior after the context (mix)");
        return TUTTI_ERR_UNSUPPORTED;
    }
    for (int32_t it = 0; it < n_items; it++) {
        const tutti_choice_item *q = &items[it];
        if (!q->context || !q->choices || q->n_choices < 2 || q->n_choices > TUTTI_MAX_CHOICES || q->label < 0 ||
            q->label >= q->n_choices)
            return tutti_set_error("fit: choice item %d needs a context, 2 to %d choices and a label among them",
                                   it + 1, TUTTI_MAX_CHOICES);
        for (int32_t k = 0; k < q->n_choices; k++)
            if (!q->choices[k] || !q->choices[k][0])
                return tutti_set_error("fit: choice item %d: choice %d is empty", it + 1, k + 1);
    }
    static const float one = 1.0f;
    const float *temps = posterior && p->temps && p->n_temps > 0 ? p->temps : &one;
    cf c = {.e = e,
            .n = e->n,
            .n_temps = posterior && p->temps && p->n_temps > 0 ? p->n_temps : 1,
            .n_items = n_items,
            .posterior = posterior,
            .items = items};
    int32_t n_texts = 0;
    for (int32_t it = 0; it < n_items; it++) n_texts += 1 + items[it].n_choices;
    c.texts = calloc((size_t)n_texts, sizeof(cf_text));
    c.first = malloc(sizeof(int32_t) * (size_t)n_items);
    int rc = c.texts && c.first ? 0 : tutti_set_error("fit: out of memory");
    for (int32_t it = 0, k = 0; rc == 0 && it < n_items; it++) {
        c.first[it] = k;
        rc = cf_text_build(&c, &c.texts[k++], items[it].context, NULL, temps);
        for (int32_t ch = 0; rc == 0 && ch < items[it].n_choices; ch++)
            rc = cf_text_build(&c, &c.texts[k++], items[it].context, items[it].choices[ch], temps);
        if (rc < 0) tutti_error_prefix("fit: choice item %d", it + 1);
    }
    int32_t t1 = 0;
    for (int32_t g = 1; g < c.n_temps; g++)
        if (fabsf(temps[g] - 1.0f) < fabsf(temps[t1] - 1.0f)) t1 = g;
    for (int32_t i = 0; i < c.n; i++) c.tsel[i] = posterior ? t1 : 0;
    double theta[TUTTI_ENSEMBLE_MAX_MEMBERS + 1], wsum = 0;
    for (int32_t i = 0; i < c.n; i++) wsum += e->w[i] > 0 ? e->w[i] : 0;
    for (int32_t i = 0; i < c.n; i++) theta[i] = e->w[i] > 0 ? log(e->w[i] / wsum) : 0;
    theta[c.n] = log(0.1); /* LL per byte differs between choices by tenths of a nat */
    double best = rc == 0 ? cf_descend(&c, theta, 300) : INFINITY;
    for (int round = 0; rc == 0 && round < 2 && c.n_temps > 1; round++)
        for (int32_t i = 0; i < c.n; i++)
            for (int32_t g = 0; g < c.n_temps; g++) {
                int32_t keep = c.tsel[i];
                if (g == keep) continue;
                c.tsel[i] = g;
                double th[TUTTI_ENSEMBLE_MAX_MEMBERS + 1];
                memcpy(th, theta, sizeof th);
                double L = cf_descend(&c, th, 120);
                if (L < best) best = L, memcpy(theta, th, sizeof th);
                else c.tsel[i] = keep;
            }
    if (rc == 0) best = cf_descend(&c, theta, 300);
    float wf[TUTTI_ENSEMBLE_MAX_MEMBERS], tf[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < c.n; i++)
        if (e->w[i] > 0 && theta[i] > mx) mx = theta[i];
    for (int32_t i = 0; i < c.n; i++) z += e->w[i] > 0 ? exp(theta[i] - mx) : 0;
    for (int32_t i = 0; i < c.n; i++) {
        wf[i] = e->w[i] > 0 ? (float)(exp(theta[i] - mx) / z) : 0.0f;
        tf[i] = posterior ? temps[c.tsel[i]] : e->temp[i];
    }
    cf_free(&c, n_texts);
    if (rc == 0) rc = tutti_ensemble_set_weights(e, wf, tf);
    tutti_choices_result cr;
    if (rc == 0) rc = tutti_ensemble_eval_choices(e, items, n_items, &cr, NULL, NULL, NULL);
    if (rc == 0 && out) {
        memset(out, 0, sizeof *out);
        out->uniform_bpb = out->static_bpb = out->context_bpb = out->heldout_bpb = out->fitted_bpb = NAN;
        out->choice_loss = best / n_items;
        out->adapt_alpha = e->adapt_on ? e->adapt_alpha : -1;
        out->select_threshold = -1;
        out->fused_share = 1;
        out->acc = cr.ensemble_acc;
        out->acc_norm = cr.ensemble_acc_norm;
        memcpy(out->weights, wf, sizeof(float) * (size_t)c.n);
        memcpy(out->temps, tf, sizeof(float) * (size_t)c.n);
    }
    return tutti_primary_code(rc); /* no internal kind escapes (util/error.h) */
}
