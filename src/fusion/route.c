/* Routing: weights set once per request from each member's perplexity on
 * the prompt (PackLLM-sim; Mavromatis, Karypis and Karypis 2024, "Pack of
 * LLMs: Model Fusion at Test-Time via Perplexity Optimization",
 * arXiv:2404.11531).  PackLLM's importance of member k is
 *
 *   lambda_k = softmax_k(-log PPL_k(prompt) / tau)
 *
 * with log PPL the mean negative log-likelihood per token over one shared
 * tokenization.  The members here tokenize differently, so the mean is per
 * UTF-8 byte of the prompt instead (a member's own tokens would favour
 * members with short tokens), each member scoring its own canonical
 * tokenization from BOS (as eval and ../shared/oracle/bpb.py do), at its
 * temperature.  The given (or fitted) weights act as a prior:
 *
 *   w_i ∝ w0_i exp(-nll_i / (n_bytes tau))
 *
 * which is PackLLM for uniform w0, and, at tau = 1 / n_bytes, the Bayesian
 * posterior over members after the prompt (what --adapt with alpha 0 ends
 * the prompt with): PackLLM is that posterior tempered so that it does not
 * sharpen with the prompt's length.  A member that cannot score the prompt
 * (longer than its context) gets weight 0.  The cost: one forward pass
 * over the prompt per member before the generation starts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/ensemble_impl.h"
#include "member/remote.h"
#include "util/error.h"

int tutti_ensemble_set_route(tutti_ensemble *e, double tau) {
    if (!e) return tutti_set_error("route: missing ensemble");
    if (tau < 0) {
        e->route_tau = -1;
        return 0;
    }
    if (tutti_check_route(tau) < 0) return TUTTI_ERR;
    if (e->rule != TUTTI_RULE_MIX && e->rule != TUTTI_RULE_PRODUCT)
        return tutti_set_usage_error("route: weights from the prompt need the mix or product rule, not %s",
                                     tutti_rule_name(e->rule));
    e->route_tau = tau;
    return 0;
}

double tutti_ensemble_route(const tutti_ensemble *e) { return e && e->route_tau > 0 ? e->route_tau : -1; }

/* Rows of logits held at once: beyond this the prompt is scored one
 * position at a time on the member's cached session (memory stays at one
 * row; a long prompt with a large vocabulary would need gigabytes). */
#define ROUTE_MAX_FLOATS ((size_t)1 << 25)

/* -Σ log p(ids[k+1] | ids[0..k]) at temperature temp (nats). */
static int ids_nll(fusion_member *m, const int32_t *ids, int32_t n, float temp, double *nll) {
    *nll = 0;
    if (n < 2) return 0;
    if (n > m->n_ctx) {
        *nll = NAN; /* cannot condition on the whole prompt */
        return 0;
    }
    size_t V = (size_t)m->n_vocab;
    bool all = (size_t)n * V <= ROUTE_MAX_FLOATS;
    float *rows = malloc(sizeof(float) * (all ? (size_t)n : 1) * V);
    float *lp = malloc(sizeof(float) * V);
    int rc = 0;
    if (!rows || !lp) rc = tutti_set_error("route: out of memory");
    if (rc == 0 && all) rc = m->vt->logits_all(m, ids, n, rows);
    double s = 0;
    for (int32_t k = 0; rc == 0 && k + 1 < n; k++) {
        const float *row = rows + (all ? (size_t)k * V : 0);
        if (!all && m->vt->logits(m, ids, k + 1, rows) < 0) rc = TUTTI_ERR;
        if (rc < 0) break;
        fusion_log_softmax(row, m->n_vocab, temp, lp);
        s -= lp[ids[k + 1]];
    }
    free(rows), free(lp);
    *nll = s;
    return rc;
}

typedef struct route_job {
    const gen_prompt *pr;
    double nll[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double n_bytes[TUTTI_ENSEMBLE_MAX_MEMBERS];
} route_job;

static int job_route(tutti_ensemble *e, int32_t i, void *arg) {
    route_job *j = arg;
    fusion_member *m = e->m[i];
    const gen_prompt *pr = j->pr;
    int32_t *ids = NULL, n;
    if (pr->ids) {
        ids = (int32_t *)pr->ids[i], n = pr->n_ids[i];
        int32_t nb = tutti_detokenize(m->vocab, ids, n, NULL, 0);
        if (nb == TUTTI_ERR_SIZE) return tutti_set_error("route: member %s: token id out of range", m->name);
        j->n_bytes[i] = nb < 0 ? -(double)nb : 0; /* the size needed (0 bytes: nothing to score) */
    } else {
        j->n_bytes[i] = (double)pr->len;
        if ((n = ens_tokenize(m->vocab, pr->text, pr->len, &ids)) < 0)
            return tutti_error_prefix("route: member %s", m->name), TUTTI_ERR;
    }
    int rc = ids_nll(m, ids, n, e->temp[i], &j->nll[i]);
    if (!pr->ids) free(ids);
    if (rc < 0) tutti_error_prefix("route: member %s", m->name);
    return rc;
}

/* Weights from the members' negative log-likelihoods (see the top). */
static int route_from_nll(const tutti_ensemble *e, double tau, const float *w0, const double *nll,
                          const double *n_bytes, float *w, double *nll_per_byte) {
    double prior[TUTTI_ENSEMBLE_MAX_MEMBERS], a[TUTTI_ENSEMBLE_MAX_MEMBERS], mx = -INFINITY;
    fusion_adapt_prior(e, w0, prior);
    for (int32_t i = 0; i < e->n; i++) {
        double l = n_bytes[i] > 0 ? nll[i] / n_bytes[i] : 0; /* no bytes: no evidence */
        if (nll_per_byte) nll_per_byte[i] = l;
        a[i] = prior[i] > 0 && isfinite(l) ? log(prior[i]) - l / tau : -INFINITY;
        if (a[i] > mx) mx = a[i];
    }
    if (mx == -INFINITY) return tutti_set_error("route: no member with weight > 0 can score the prompt");
    double z = 0;
    for (int32_t i = 0; i < e->n; i++) z += exp(a[i] - mx);
    for (int32_t i = 0; i < e->n; i++) w[i] = (float)(exp(a[i] - mx) / z);
    return 0;
}

static int route_prompt(tutti_ensemble *e, const gen_prompt *pr, double tau, float *w, double *nll_per_byte) {
    route_job j;
    memset(&j, 0, sizeof j);
    j.pr = pr;
    if (ens_run_members(e, job_route, &j) < 0) return TUTTI_ERR;
    return route_from_nll(e, tau, e->w, j.nll, j.n_bytes, w, nll_per_byte);
}

int tutti_ensemble_route_weights(tutti_ensemble *e, const char *prompt, size_t len, double tau, float *weights,
                                 double *nll_per_byte) {
    if (!e || (!prompt && len) || !weights) return tutti_set_error("route: missing argument");
    if (!(tau > 0) || !isfinite(tau))
        return tutti_set_usage_error("route: the temperature tau must be a finite number > 0 (nats per byte), got %g",
                                     tau);
    if (memchr(prompt ? prompt : "", 0, len)) return tutti_set_error("route: the prompt holds a NUL byte");
    gen_prompt pr = {.text = prompt ? prompt : "", .len = len};
    return tutti_primary_code(route_prompt(e, &pr, tau, weights, nll_per_byte));
}

int fusion_route_begin(tutti_ensemble *e, const gen_prompt *pr, float *w_given) {
    memcpy(w_given, e->w, sizeof(float) * (size_t)e->n);
    if (e->route_tau <= 0) return 0;
    if (e->rule != TUTTI_RULE_MIX && e->rule != TUTTI_RULE_PRODUCT)
        return tutti_set_usage_error("route: weights from the prompt need the mix or product rule, not %s",
                                     tutti_rule_name(e->rule));
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    double lb[TUTTI_ENSEMBLE_MAX_MEMBERS];
    if (route_prompt(e, pr, e->route_tau, w, lb) < 0) return TUTTI_ERR;
    memcpy(e->w, w, sizeof(float) * (size_t)e->n);
    if (e->notice) {
        char msg[1024];
        int k = snprintf(msg, sizeof msg, "route (tau %g nats/byte): weights", e->route_tau);
        for (int32_t i = 0; i < e->n && k > 0 && (size_t)k < sizeof msg; i++)
            k += snprintf(msg + k, sizeof msg - (size_t)k, "%s %.4g (%.4g nats/byte)", i ? "," : "", (double)w[i],
                          lb[i]);
        e->notice(msg, e->notice_user);
    }
    return 0;
}

void fusion_route_end(tutti_ensemble *e, const float *w_given) {
    if (e->route_tau <= 0) return;
    memcpy(e->w, w_given, sizeof(float) * (size_t)e->n);
    for (int32_t i = 0; i < e->n; i++) /* a member that left for good stays out (ens_drop_left) */
        if (fusion_member_has_left(e->m[i])) e->w[i] = 0;
}
