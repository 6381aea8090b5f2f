/* The router of a mergekit-moe merge: its initial rows, one gate vector per
 * expert and layer (mergekit/moe/router.py, get_gate_params).
 *
 *   hidden, hidden_last  for each prompt, BOS + prompt through the base
 *                 model; the hidden state entering each layer (the residual
 *                 stream before the layer's attention norm: Hugging Face's
 *                 hidden_states[l], l < n_layer) at the last token; averaged
 *                 over the expert's prompts
 *   hidden_avg    the same, each prompt's states averaged over its tokens
 *   cheap_embed   the sum of the token embeddings of every prompt's tokens
 *                 (BOS included), normalized; the same vector for every layer
 *   random        N(0, 1) per element, uniform_random U(-1/sqrt(n_embd),
 *                 1/sqrt(n_embd)) (torch.nn.Linear's initialisation); not
 *                 normalized, as mergekit's
 * For the prompt modes, an expert's negative_prompts' vector is subtracted
 * from its positive prompts' one, and each layer's vector is then scaled to
 * unit length (norm clamped at 1e-8).
 *
 * Where tutti differs from mergekit by construction: the base model runs in
 * float32 (mergekit loads it in bfloat16), each prompt alone (mergekit pads a
 * batch on the left, which gives the same states up to rounding: rotary
 * positions are relative and the padding is masked; for hidden_avg mergekit
 * also averages over the padding, tutti over the prompt's own tokens), the
 * prompts are plain text (no special-token parsing), and the random modes
 * draw from tutti's counter-based generator (merge_rng_uniform; Box-Muller
 * for the normal), keyed by the seed: torch's generator cannot be
 * reproduced. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge/cmaes.h"
#include "merge/merge.h"
#include "model/model.h"
#include "util/error.h"

typedef struct gate_ctx {
    const merge_moe *moe;
    tutti_model *model;
    tutti_session *s;
    int n_layer;
    int64_t n_embd;
    int32_t *ids;
    int32_t cap_ids;
    double *acc; /* [n_layer][n_embd] */
} gate_ctx;

static int tokenize(gate_ctx *g, const char *prompt, int32_t *n_out) {
    const tutti_vocab *v = tutti_model_vocab(g->model);
    bool bos = tutti_vocab_bos(v) >= 0;
    size_t len = strlen(prompt);
    int32_t n = tutti_tokenize(v, prompt, len, bos, false, g->ids, g->cap_ids);
    if (n == TUTTI_ERR_SIZE) return tutti_set_error("cannot tokenize the prompt '%.60s'", prompt);
    if (n < 0 || n > g->cap_ids)
        return tutti_set_error("the prompt '%.60s...' is longer than %d tokens (the base model's batch)", prompt,
                               g->cap_ids);
    if (n < 1) return tutti_set_error("the prompt '%.60s' has no tokens", prompt);
    *n_out = n;
    return 0;
}

/* Adds one prompt's per-layer states (last token, or the mean over its
 * tokens) to out[n_layer][n_embd]. */
static int prompt_states(gate_ctx *g, const char *prompt, bool average, double *out) {
    int32_t n;
    if (tokenize(g, prompt, &n)) return TUTTI_ERR;
    tutti_fwd_seg seg = {.s = g->s, .ids = g->ids, .n = n};
    g->s->n_past = 0;
    for (int il = 0; il < g->n_layer; il++) {
        /* s->x: the input of layer il (the embeddings, then layer il - 1's output) */
        if (il == 0) tutti_forward_range(g->s, &seg, 1, 0, 0, TUTTI_FWD_EMBED, NULL, NULL);
        else tutti_forward_range(g->s, &seg, 1, il - 1, il, 0, NULL, NULL);
        const float *x = g->s->x;
        for (int64_t i = 0; i < g->n_embd; i++) {
            double v = 0;
            if (average) {
                for (int32_t t = 0; t < n; t++) v += x[(int64_t)t * g->n_embd + i];
                v /= n;
            } else {
                v = x[(int64_t)(n - 1) * g->n_embd + i];
            }
            out[(int64_t)il * g->n_embd + i] += v;
        }
    }
    return 0;
}

/* The summed token embeddings of a prompt, added to out[n_embd]. */
static int prompt_embedding(gate_ctx *g, const char *prompt, double *out) {
    int32_t n;
    if (tokenize(g, prompt, &n)) return TUTTI_ERR;
    const tutti_weight *e = &g->model->token_embd;
    float *row = malloc(sizeof(float) * (size_t)g->n_embd);
    if (!row) return tutti_set_error("moe: out of memory");
    for (int32_t t = 0; t < n; t++) {
        tutti_get_row(e->type, e->data, g->n_embd, g->ids[t], row);
        for (int64_t i = 0; i < g->n_embd; i++) out[i] += row[i];
    }
    free(row);
    return 0;
}

static void normalize_rows(double *v, int rows, int64_t n) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += v[r * n + i] * v[r * n + i];
        s = fmax(sqrt(s), 1e-8);
        for (int64_t i = 0; i < n; i++) v[r * n + i] /= s;
    }
}

/* mergekit's _do_it over a list of prompts into out[n_layer][n_embd]:
 * hidden modes the mean over the prompts, cheap_embed the normalized sum
 * repeated on every layer. */
static int prompts_vector(gate_ctx *g, char *const *prompts, int n_prompts, double *out) {
    size_t n = (size_t)g->n_layer * (size_t)g->n_embd;
    memset(out, 0, sizeof(double) * n);
    if (g->moe->gate_mode == MG_CHEAP_EMBED) {
        for (int i = 0; i < n_prompts; i++)
            if (prompt_embedding(g, prompts[i], out)) return TUTTI_ERR;
        normalize_rows(out, 1, g->n_embd);
        for (int l = 1; l < g->n_layer; l++)
            memcpy(out + (size_t)l * (size_t)g->n_embd, out, sizeof(double) * (size_t)g->n_embd);
        return 0;
    }
    for (int i = 0; i < n_prompts; i++)
        if (prompt_states(g, prompts[i], g->moe->gate_mode == MG_HIDDEN_AVG, out)) return TUTTI_ERR;
    for (size_t k = 0; k < n; k++) out[k] /= n_prompts;
    return 0;
}

static void random_gates(const merge_moe *m, int n_layer, int64_t n_embd, uint64_t seed, float *gate) {
    uint64_t key = merge_rng_key("moe.gate", seed, 0);
    int64_t total = (int64_t)n_layer * m->n_experts * n_embd;
    double scale = 1 / sqrt((double)n_embd);
    for (int64_t i = 0; i < total; i++) {
        if (m->gate_mode == MG_UNIFORM_RANDOM) {
            gate[i] = (float)((merge_rng_uniform(key, i) * 2 - 1) * scale);
        } else { /* Box-Muller from two counter-based uniforms */
            double u1 = 1 - merge_rng_uniform(key, 2 * i), u2 = merge_rng_uniform(key, 2 * i + 1);
            gate[i] = (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
        }
    }
}

/* mergekit's warn_degenerate_gates: layers whose gate matrix [n_experts x
 * n_embd] has condition number above 5 (from the eigenvalues of G G^T). */
static void warn_degenerate(const float *gate, int n_layer, int n_exp, int64_t n_embd) {
    if (n_exp < 2) return;
    size_t ee = (size_t)n_exp * (size_t)n_exp;
    double *gg = malloc(sizeof(double) * (2 * ee + (size_t)n_exp));
    if (!gg) return;
    double *vec = gg + ee, *w = vec + ee;
    char layers[256] = "";
    int o = 0, n_bad = 0;
    for (int l = 0; l < n_layer; l++) {
        const float *G = gate + (int64_t)l * n_exp * n_embd;
        for (int a = 0; a < n_exp; a++)
            for (int b = 0; b < n_exp; b++) {
                double s = 0;
                for (int64_t i = 0; i < n_embd; i++) s += (double)G[a * n_embd + i] * G[b * n_embd + i];
                gg[a * n_exp + b] = s;
            }
        cmaes_eigen_sym(n_exp, gg, w, vec);
        double lo = INFINITY, hi = 0;
        for (int k = 0; k < n_exp; k++) lo = fmin(lo, w[k]), hi = fmax(hi, w[k]);
        if (!(lo > 0) || sqrt(hi / lo) > 5) { /* singular values are the square roots */
            n_bad++;
            if (o < (int)sizeof layers - 8)
                o += snprintf(layers + o, sizeof layers - (size_t)o, "%s%d", o ? ", " : "", l);
        }
    }
    free(gg);
    if (n_bad)
        fprintf(stderr,
                "tutti merge: warning: layer%s %s of the router %s nearly dependent gate vectors (condition "
                "number above 5): the experts' prompts may be too similar, and some experts will be chosen rarely\n",
                n_bad > 1 ? "s" : "", n_bad == n_layer ? "(all)" : layers, n_bad > 1 ? "have" : "has");
}

int merge_moe_gates(const merge_moe *m, const char *base_path, int n_layer, int64_t n_embd, uint64_t seed,
                    float *gate) {
    if (m->gate_mode == MG_RANDOM || m->gate_mode == MG_UNIFORM_RANDOM) {
        random_gates(m, n_layer, n_embd, seed, gate);
        return 0;
    }
    gate_ctx g = {.moe = m, .n_layer = n_layer, .n_embd = n_embd};
    tutti_model_params mp = tutti_model_default_params();
    g.model = tutti_model_load(base_path, &mp);
    if (!g.model) return TUTTI_ERR;
    int rc = 0;
    if (g.model->hp.n_layer != n_layer || g.model->hp.n_embd != n_embd)
        rc = tutti_set_error("moe: %s: the model's shape differs from its tensors'", base_path);
    tutti_session_params sp = tutti_session_default_params();
    if (rc == 0 && !(g.s = tutti_session_new(g.model, &sp))) rc = TUTTI_ERR;
    size_t n = (size_t)n_layer * (size_t)n_embd;
    double *pos = malloc(sizeof(double) * n), *neg = malloc(sizeof(double) * n);
    if (rc == 0) {
        g.cap_ids = g.s->n_ubatch;
        g.ids = malloc(sizeof(int32_t) * (size_t)g.cap_ids);
        if (!g.ids || !pos || !neg) rc = tutti_set_error("moe: out of memory");
    }
    for (int e = 0; rc == 0 && e < m->n_experts; e++) {
        const merge_expert *x = &m->experts[e];
        rc = prompts_vector(&g, x->pos, x->n_pos, pos);
        if (rc == 0 && x->n_neg) {
            rc = prompts_vector(&g, x->neg, x->n_neg, neg);
            for (size_t k = 0; rc == 0 && k < n; k++) pos[k] -= neg[k];
        }
        if (rc) {
            tutti_error_prefix("moe: the router of expert %d (%s)", e + 1, x->source_model);
            break;
        }
        normalize_rows(pos, n_layer, n_embd);
        for (int l = 0; l < n_layer; l++)
            for (int64_t i = 0; i < n_embd; i++)
                gate[((int64_t)l * m->n_experts + e) * n_embd + i] = (float)pos[(int64_t)l * n_embd + i];
    }
    if (rc == 0) warn_degenerate(gate, n_layer, m->n_experts, n_embd);
    free(pos), free(neg), free(g.ids);
    tutti_session_free(g.s);
    tutti_model_free(g.model);
    return rc;
}
