/* Fuzz harness of the merge configuration front end (src/merge/yaml.c,
 * config.c); see fuzz/README.md for the pattern.
 *
 * Input: YAML text (untrusted: a configuration downloaded with a model).
 * Promises checked (trap when broken): parsing returns a configuration or
 * NULL with a non-empty "merge config: ..." message; every parameter of a
 * parsed configuration evaluates, for a few tensor names and gradient
 * positions, to a finite number, a string, or "does not apply", and a
 * numeric one (density, t, ...) to a number in mergekit's range.  Alias
 * cycles and exponential alias trees must be refused quickly (timeouts are
 * findings), and crashes, leaks and undefined behaviour are the others. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "merge/merge.h"
#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static void eval_all(const merge_params *p) {
    static const char *const names[][2] = {
        {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
        {"model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"},
        {"lm_head.weight", "output.weight"},
    };
    static const double ts[] = {0, 0.25, 0.5, 1};
    for (int i = 0; i < p->n; i++)
        for (size_t k = 0; k < 3; k++)
            for (size_t j = 0; j < 4; j++) {
                double v = NAN;
                const char *s = NULL;
                if (!merge_setting_eval(p->p[i].set, names[k][0], names[k][1], ts[j], &v, &s)) continue;
                CHECK(s || isfinite(v));
                /* a numeric parameter is a number in mergekit's range (merge_param_check) */
                if (merge_param_kind(p->p[i].name) == 1) CHECK(!s && merge_param_check(p->p[i].name, v) == 0);
            }
}

int tutti_fuzz_merge_yaml_one(const uint8_t *data, size_t size) {
    tutti_merge_config *c = tutti_merge_config_parse((const char *)data, size);
    if (!c) {
        const char *e = tutti_last_error();
        CHECK(e && strncmp(e, "merge config: ", 14) == 0 && e[14] != 0);
        return 0;
    }
    if (c->moe) { /* a mergekit-moe configuration: what moe.c relies on */
        const merge_moe *m = c->moe;
        CHECK(c->base_model && m->n_experts >= 1 && m->experts_per_token >= 1 && m->experts_per_token <= m->n_experts);
        for (int i = 0; i < m->n_experts; i++) {
            const merge_expert *x = &m->experts[i];
            CHECK(x->source_model && x->n_pos >= 0 && x->n_neg >= 0);
            CHECK(m->gate_mode == MG_RANDOM || m->gate_mode == MG_UNIFORM_RANDOM || x->n_pos > 0);
            for (int k = 0; k < x->n_pos; k++) CHECK(x->pos[k]);
            for (int k = 0; k < x->n_neg; k++) CHECK(x->neg[k]);
            CHECK(isnan(x->noise_scale) || (x->noise_scale >= 0 && isfinite(x->noise_scale)));
            CHECK(isnan(x->residual_scale) || (x->residual_scale >= 0 && isfinite(x->residual_scale)));
        }
        tutti_merge_config_free(c);
        return 0;
    }
    CHECK((c->n_models > 0) != (c->n_slices > 0));
    eval_all(&c->params);
    for (int i = 0; i < c->n_models; i++) eval_all(&c->models[i].params);
    for (int i = 0; i < c->n_slices; i++) {
        eval_all(&c->slices[i].params);
        for (int j = 0; j < c->slices[i].n_src; j++) {
            CHECK(c->slices[i].src[j].hi > c->slices[i].src[j].lo);
            eval_all(&c->slices[i].src[j].params);
        }
    }
    tutti_merge_config_free(c);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_merge_yaml_one(data, size);
    return 0;
}
#endif
