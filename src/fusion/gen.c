/* Generation: the one loop over the alignments' steps (align.h), with the
 * mask, the grammar, step reports, sampling, stop strings and limits in
 * one place, and the run's statistics. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/align.h"
#include "member/remote.h"
#include "util/error.h"

static double member_forward_sum(const tutti_ensemble *e) {
    double s = 0;
    for (int32_t i = 0; i < e->n; i++) s += e->m[i]->t_forward_s;
    return s;
}

int32_t align_unit_weights(fusion_align *a, const float *const *logp, int32_t n, const bool *gone) {
    a->lead = -1;
    if (!fusion_weigher_varies(&a->wg) && !a->wg.select) return -1;
    tutti_ensemble *e = a->e;
    bool out[TUTTI_ENSEMBLE_MAX_MEMBERS];
    for (int32_t i = 0; i < e->n; i++) out[i] = (gone && gone[i]) || fusion_member_has_left(e->m[i]);
    float w[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int32_t lead = fusion_weigher_unit(&a->wg, fusion_weigher_needs_rows(&a->wg) ? logp : NULL, n, out, w);
    if (lead < -1) return TUTTI_ERR;
    if (fusion_weigher_varies(&a->wg)) memcpy(a->w, w, sizeof(float) * (size_t)e->n);
    return a->lead = lead;
}

static int gen_loop(fusion_align *a, const gen_prompt *pr, const tutti_sampler_params *sp) {
    const align_ops *ops = a->ops;
    tutti_ensemble *e = a->e;
    gen_ctx *g = a->g;
    tutti_sampler *smp = NULL;
    if (!ops->choose && !(smp = tutti_sampler_new(sp))) return TUTTI_ERR;
    memcpy(a->w, e->w, sizeof(float) * (size_t)e->n);
    if (fusion_weigher_begin(&a->wg, e, e->w) < 0) {
        tutti_sampler_free(smp);
        return TUTTI_ERR;
    }
    a->lead = -1;
    a->mix_member = -1;
    a->report_row = NULL;
    a->weigher_off = false;
    int rc = ops->start(a, pr, smp) < 0 ? TUTTI_ERR : 0;
    while (rc == 0 && !g->stopped && (g->max_units <= 0 || g->n_units < g->max_units)) {
        if (ops->ctx_full(a)) break;
        if (gr_constraint_done(&g->gc)) break; /* the grammar lets nothing follow */
        const float *row;
        int32_t n;
        int r = ops->step(a, &row, &n);
        if (r != 0) {
            rc = r < 0 ? TUTTI_ERR : 0;
            break;
        }
        /* the mask and the grammar, after the rule, before sampling (which
         * renormalises), on a writable copy of the row */
        bool gr = ops->kind == ALIGN_OUT_BYTES || (ops->kind == ALIGN_OUT_TOKENS && g->gc.m);
        bool bias = ops->kind == ALIGN_OUT_TOKENS && g->mask && g->mask->n_bias > 0;
        if ((a->masked || gr || bias) && row != a->work) {
            memcpy(a->work, row, sizeof(float) * (size_t)n);
            row = a->work;
        }
        if (bias)
            for (int32_t k = 0; k < g->mask->n_bias; k++) a->work[g->mask->bias_ids[k]] += g->mask->bias[k];
        if (a->masked) ops->mask(a, a->work);
        if (gr && (ops->kind == ALIGN_OUT_TOKENS ? gr_constraint_mask_tokens(&g->gc, a->work)
                                                 : gr_constraint_mask_bytes(&g->gc, a->work)) < 0) {
            rc = TUTTI_ERR;
            break;
        }
        const float *q = NULL;
        int32_t d = ops->drafted && !ops->choose ? ops->drafted(a, &q) : -1;
        int32_t x = ops->choose ? ops->choose(a, row, n)
                    : d >= 0    ? tutti_sampler_sample_draft(smp, row, n, d, q)
                                : tutti_sampler_sample(smp, row, n);
        if (x < 0 || (!ops->choose && row[x] == -INFINITY)) {
            rc = tutti_set_error("generation: the mask rules out every %s", ops->unit);
            break;
        }
        if (smp) tutti_sampler_accept(smp, x);
        const char *bytes;
        bool end;
        size_t nb = ops->bytes(a, x, &bytes, &end);
        double mlp[TUTTI_ENSEMBLE_MAX_MEMBERS];
        bool members = e->step_cb && e->step_members && ops->member_lp;
        if (members) ops->member_lp(a, x, mlp);
        /* mixture sampling drew from one member's row: the receiver gets the fused one */
        const float *shown = a->mix_member >= 0 ? a->report_row : row;
        if (ops->report && ens_report_step(e, g, shown, n, x, bytes, nb, members ? mlp : NULL, a->w) < 0) {
            rc = TUTTI_ERR;
            break;
        }
        if (end) break;
        int32_t units = 0;
        a->unit_bytes = 1;
        r = ops->commit(a, x, &units);
        if (r < 0) {
            rc = TUTTI_ERR;
            break;
        }
        if (fusion_weigher_varies(&a->wg) && !a->weigher_off)
            fusion_weigher_observe(&a->wg, a->unit_logp, a->gone, a->unit_bytes);
        g->n_units += units;
        if (a->mix_member >= 0) g->n_mix_sampled += units;
        if (a->lead < 0) g->n_fused += units;
        if (gr_constraint_accept(&g->gc, bytes, nb) < 0 || gen_append(g, bytes, nb) < 0) {
            rc = TUTTI_ERR;
            break;
        }
        if (r == ALIGN_STOP) break;
    }
    tutti_sampler_free(smp);
    fusion_weigher_free(&a->wg);
    return rc;
}

/* logit_bias: token ids of the shared vocabulary (TOKEN alignment) */
static int check_bias(const tutti_ensemble *e, const tutti_mask *mask) {
    if (e->align != TUTTI_ALIGN_TOKEN)
        return tutti_set_error("logit_bias needs token alignment: this ensemble fuses in %s alignment, over %s, "
                               "which have no token ids to bias",
                               tutti_align_name(e->align), e->align == TUTTI_ALIGN_BYTE ? "bytes" : "drafted spans");
    if (!mask->bias_ids || !mask->bias || mask->n_bias < 0) return tutti_set_error("logit_bias: no ids or biases");
    for (int32_t k = 0; k < mask->n_bias; k++) {
        if (mask->bias_ids[k] < 0 || mask->bias_ids[k] >= e->m[0]->n_vocab)
            return tutti_set_error("logit_bias: token id %d is not in the vocabulary (0 to %d)", mask->bias_ids[k],
                                   e->m[0]->n_vocab - 1);
        if (isnan(mask->bias[k]) || mask->bias[k] == INFINITY)
            return tutti_set_error("logit_bias: the bias of token %d is not a finite number", mask->bias_ids[k]);
    }
    return 0;
}

static int ens_generate(tutti_ensemble *e, const gen_prompt *pr, const tutti_sampler_params *sp, const tutti_mask *mask,
                        tutti_text_cb cb, void *user, tutti_ensemble_stats *stats) {
    tutti_sampler_params spd = sp ? *sp : tutti_sampler_default_params();
    gen_ctx g = {.mask = mask, .cb = cb, .user = user, .ctx_full = -1};
    g.max_units = mask && mask->max_len > 0 ? mask->max_len : 0;
    if (mask && mask->max_tokens > 0) {
        if (e->align == TUTTI_ALIGN_TOKEN) {
            if (g.max_units <= 0 || mask->max_tokens < g.max_units) g.max_units = mask->max_tokens;
        } else {
            g.count_vocab = e->m[0]->vocab;
            g.max_tokens = mask->max_tokens;
        }
    }
    for (int32_t i = 0; i < e->n; i++) {
        e->m[i]->t_forward_s = 0;
        e->m[i]->n_forward_tokens = 0;
        e->m[i]->new_generation = true;
        e->m[i]->n_forward_calls = 0;
    }
    if (e->draft) {
        e->draft->t_forward_s = 0;
        e->draft->n_forward_tokens = 0;
        e->draft->new_generation = true;
    }
    e->prompt_marked = false;
    double t0 = ens_now_s(), t_phase = 0;
    int rc;
    if (mask && mask->n_bias > 0 && check_bias(e, mask) < 0) return TUTTI_ERR;
    if (mask && mask->grammar &&
        gr_constraint_init(&g.gc, mask->grammar, e->align == TUTTI_ALIGN_TOKEN ? e->m[0]->vocab : NULL) < 0)
        return TUTTI_ERR;
    float w_given[TUTTI_ENSEMBLE_MAX_MEMBERS]; /* --route: this request's weights from the prompt (route.c) */
    if ((rc = fusion_route_begin(e, pr, w_given)) == 0) {
        fusion_align *a = e->align == TUTTI_ALIGN_TOKEN  ? align_token_new(e, &g, &spd)
                          : e->align == TUTTI_ALIGN_SPAN ? align_span_new(e, &g, &spd)
                                                         : align_byte_new(e, &g);
        if (a) {
            rc = gen_loop(a, pr, &spd);
            t_phase = a->t_phase;
            a->ops->free(a);
        } else {
            rc = TUTTI_ERR;
        }
    }
    fusion_route_end(e, w_given);
    gen_flush(&g);
    gr_constraint_free(&g.gc);
    double t_total = ens_now_s() - t0;
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_units = g.n_units;
        stats->n_bytes = (int32_t)g.n_text;
        stats->t_total_s = t_total;
        stats->t_prompt_s = e->prompt_marked ? e->t_prompt_done - t0 : t_total;
        /* time on the members' critical path: their summed forward time when
         * they run one after the other, the wall time of the forward phases
         * when they run concurrently */
        stats->t_forward_s = (!e->parallel || e->n == 1) ? member_forward_sum(e) : t_phase;
        if (e->draft) { /* the draft runs alone, before the members verify */
            stats->t_draft_s = e->draft->t_forward_s;
            stats->n_draft_tokens = e->draft->n_forward_tokens;
            stats->t_forward_s += stats->t_draft_s;
        }
        stats->n_draft_rounds = g.n_draft_rounds;
        stats->n_drafted = g.n_drafted;
        stats->n_draft_accepted = g.n_draft_accepted;
        stats->n_mix_sampled = g.n_mix_sampled;
        stats->t_fusion_s = t_total - stats->t_forward_s;
        for (int32_t i = 0; i < e->n; i++) {
            stats->t_member_s[i] = e->m[i]->t_forward_s;
            stats->n_member_tokens[i] = e->m[i]->n_forward_tokens;
            stats->n_member_passes[i] = e->m[i]->n_forward_calls;
            stats->member_left[i] = g.dead[i];
            stats->n_prompt_evaluated[i] = e->prompt_marked ? e->prompt_eval[i] : e->m[i]->n_forward_tokens;
            stats->member_left_reason[i] = g.dead[i] ? g.left_why[i] : 0;
        }
        stats->ctx_full_member = g.ctx_full;
        stats->at_limit = g.at_limit || (g.max_units > 0 && g.n_units >= g.max_units);
        stats->n_fused = g.n_fused;
        /* a full context cuts the text as a limit does, whatever the
         * alignment (and an unfinished grammar with it): "length" */
        stats->finish = stats->at_limit || g.ctx_full >= 0 ? TUTTI_FINISH_LENGTH : TUTTI_FINISH_STOP;
    }
    free(g.text);
    free(g.count_ids);
    return rc;
}

int tutti_ensemble_generate(tutti_ensemble *e, const char *prompt, size_t prompt_len, const tutti_sampler_params *sp,
                            const tutti_mask *mask, tutti_text_cb cb, void *user, tutti_ensemble_stats *stats) {
    if (!e) return tutti_set_error("generation: no ensemble");
    if (!prompt) prompt = "", prompt_len = 0;
    gen_prompt pr = {.text = prompt, .len = prompt_len};
    return tutti_primary_code(ens_generate(e, &pr, sp, mask, cb, user, stats));
}

int tutti_ensemble_generate_ids(tutti_ensemble *e, const int32_t *const *prompt_ids, const int32_t *n_prompt_ids,
                                const tutti_sampler_params *sp, const tutti_mask *mask, tutti_text_cb cb, void *user,
                                tutti_ensemble_stats *stats) {
    if (!e) return tutti_set_error("generation: no ensemble");
    if (!prompt_ids || !n_prompt_ids) return tutti_set_error("generation: no token-id prompts");
    for (int32_t i = 0; i < e->n; i++)
        if (!prompt_ids[i] || n_prompt_ids[i] < 1)
            return tutti_set_error("generation: member %d (%s): empty token-id prompt", i + 1, e->path[i]);
    gen_prompt pr = {.ids = prompt_ids, .n_ids = n_prompt_ids};
    return tutti_primary_code(ens_generate(e, &pr, sp, mask, cb, user, stats));
}
