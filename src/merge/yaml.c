/* mergekit YAML configurations through libyaml's document API.
 *
 * The text is untrusted: nesting is bounded (an alias can make a cycle in
 * libyaml's node graph: `&a [*a]`), so is the number of nodes visited
 * (aliases can make exponential trees), and every unknown key, wrong node
 * kind or out-of-range number is an error naming its line. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "merge/merge.h"
#include "util/error.h"

enum { MAX_DEPTH = 16, MAX_VISITS = 200000, MAX_LIST = 4096 };

typedef struct ctx {
    yaml_document_t doc;
    long visits;
} ctx;

static yaml_node_t *node(ctx *c, int i) { return yaml_document_get_node(&c->doc, i); }
static int line(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

static int err(const yaml_node_t *n, const char *what) {
    return tutti_set_error("merge config: line %d: %s", n ? line(n) : 0, what);
}

static bool visit(ctx *c) { return ++c->visits <= MAX_VISITS; }

static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool plain(const yaml_node_t *n) { return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

/* A plain scalar as a number (YAML 1.1/1.2 floats and ints): 1 a finite
 * number, -1 a number that is not finite (YAML's .inf, -.inf, .nan in any
 * of their spellings, or a decimal beyond double's range), 0 not a number. */
static int as_number(const yaml_node_t *n, double *v) {
    if (!plain(n)) return 0;
    const char *s = scalar(n);
    if (!*s) return 0;
    static const char *const nonfinite[] = {".inf",  ".Inf",  ".INF",  "+.inf", "+.Inf", "+.INF",
                                            "-.inf", "-.Inf", "-.INF", ".nan",  ".NaN",  ".NAN"};
    for (size_t i = 0; i < sizeof nonfinite / sizeof *nonfinite; i++)
        if (!strcmp(s, nonfinite[i])) {
            *v = i >= 9 ? NAN : s[0] == '-' ? -INFINITY : INFINITY;
            return -1;
        }
    /* strtod reads hex, inf and nan too: YAML numbers are decimal */
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789+-.eE", *p)) return 0;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end || end == s) return 0;
    *v = x; /* an overflow reads as +-inf (ERANGE), an underflow as a tiny finite value */
    return isfinite(x) ? 1 : -1;
}

static bool as_bool(const yaml_node_t *n, bool *b) {
    if (!plain(n)) return false;
    const char *s = scalar(n);
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return *b = true, true;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return *b = false, true;
    return false;
}

static bool is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE || !plain(n)) return false;
    const char *s = scalar(n);
    return !*s || !strcmp(s, "null") || !strcmp(s, "~") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int dup_str(const yaml_node_t *n, const char *what, char **out) {
    const char *s = scalar(n);
    if (!s) {
        char m[96];
        snprintf(m, sizeof m, "%s must be a string", what);
        return err(n, m);
    }
    if (strlen(s) != n->data.scalar.length) return err(n, "string contains a NUL byte");
    char *d = strdup(s);
    if (!d) return tutti_set_error("merge config: out of memory");
    free(*out);
    *out = d;
    return 0;
}

static int parse_setting(ctx *c, yaml_node_t *n, int depth, merge_setting **out);

static int parse_cond(ctx *c, yaml_node_t *n, int depth, merge_cond *cond) {
    if (n->type != YAML_MAPPING_NODE) return err(n, "a condition must be a mapping {filter, value}");
    bool have_value = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        if (!visit(c)) return err(n, "configuration too large");
        yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
        const char *ks = scalar(k);
        if (!ks || !v) return err(n, "condition keys must be strings");
        if (!strcmp(ks, "filter")) {
            if (is_null(v)) continue;
            if (dup_str(v, "filter", &cond->filter)) return TUTTI_ERR;
        } else if (!strcmp(ks, "value")) {
            if (cond->value) return err(k, "value given twice");
            if (parse_setting(c, v, depth + 1, &cond->value)) return TUTTI_ERR;
            have_value = true;
        } else {
            return err(k, "unknown key in a condition (filter, value)");
        }
    }
    if (!have_value) return err(n, "condition without value");
    return 0;
}

static int parse_setting(ctx *c, yaml_node_t *n, int depth, merge_setting **out) {
    if (depth > MAX_DEPTH || !visit(c)) return err(n, "parameter nested too deeply or too large");
    merge_setting *s = calloc(1, sizeof *s);
    if (!s) return tutti_set_error("merge config: out of memory");
    *out = s;
    if (n->type == YAML_SCALAR_NODE) {
        bool b;
        if (as_bool(n, &b)) {
            s->kind = MSET_NUM;
            s->num = b;
            s->is_bool = true;
        } else if (as_number(n, &s->num)) { /* a non-finite one is refused by merge_setting_check */
            s->kind = MSET_NUM;
        } else {
            s->kind = MSET_STR;
            if (dup_str(n, "parameter", &s->str)) return TUTTI_ERR;
        }
        return 0;
    }
    if (n->type == YAML_MAPPING_NODE) { /* one condition */
        s->kind = MSET_COND;
        s->conds = calloc(1, sizeof *s->conds);
        if (!s->conds) return tutti_set_error("merge config: out of memory");
        s->n = 1;
        return parse_cond(c, n, depth, &s->conds[0]);
    }
    if (n->type != YAML_SEQUENCE_NODE) return err(n, "bad parameter value");
    long len = n->data.sequence.items.top - n->data.sequence.items.start;
    if (len == 0) return err(n, "empty parameter list");
    if (len > MAX_LIST) return err(n, "parameter list too long");
    int n_scalar = 0, n_map = 0, n_num = 0;
    for (long i = 0; i < len; i++) {
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]);
        if (!e) return err(n, "bad list element");
        double v;
        bool b;
        if (e->type == YAML_SCALAR_NODE) {
            n_scalar++;
            if (as_number(e, &v) != 0 && !as_bool(e, &b)) n_num++;
        } else if (e->type == YAML_MAPPING_NODE) {
            n_map++;
        }
    }
    if (n_map == len) {
        s->kind = MSET_COND;
        s->conds = calloc((size_t)len, sizeof *s->conds);
        if (!s->conds) return tutti_set_error("merge config: out of memory");
        s->n = (int)len;
        for (long i = 0; i < len; i++)
            if (parse_cond(c, node(c, n->data.sequence.items.start[i]), depth + 1, &s->conds[i])) return TUTTI_ERR;
        return 0;
    }
    if (n_scalar != len) return err(n, "a parameter list mixes conditions and values");
    s->n = (int)len;
    s->nums = calloc((size_t)len, sizeof *s->nums);
    if (!s->nums) return tutti_set_error("merge config: out of memory");
    if (n_num == len) {
        s->kind = MSET_GRAD;
        for (long i = 0; i < len; i++) as_number(node(c, n->data.sequence.items.start[i]), &s->nums[i]);
        return 0;
    }
    s->kind = MSET_SEL;
    s->strs = calloc((size_t)len, sizeof *s->strs);
    if (!s->strs) return tutti_set_error("merge config: out of memory");
    for (long i = 0; i < len; i++) {
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]);
        bool b;
        if (as_bool(e, &b)) s->nums[i] = b;
        else if (as_number(e, &s->nums[i]) != 0) {
        } else if (dup_str(e, "parameter", &s->strs[i])) return TUTTI_ERR;
    }
    return 0;
}

static int parse_params(ctx *c, yaml_node_t *n, merge_params *out) {
    if (is_null(n)) return 0;
    if (n->type != YAML_MAPPING_NODE) return err(n, "parameters must be a mapping");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        if (!visit(c)) return err(n, "configuration too large");
        yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
        const char *ks = scalar(k);
        if (!ks || !v) return err(n, "parameter names must be strings");
        int kind = merge_param_kind(ks);
        if (!kind) {
            char m[160];
            snprintf(m, sizeof m,
                     "unknown parameter '%.60s' (t, weight, density, lambda, epsilon, gamma, "
                     "scale, normalize, rescale, ...)",
                     ks);
            return err(k, m);
        }
        for (int i = 0; i < out->n; i++)
            if (!strcmp(out->p[i].name, ks)) return err(k, "parameter given twice");
        merge_param *np = realloc(out->p, sizeof *np * (size_t)(out->n + 1));
        if (!np) return tutti_set_error("merge config: out of memory");
        out->p = np;
        merge_param *mp = &out->p[out->n];
        mp->set = NULL;
        mp->name = strdup(ks);
        if (!mp->name) return tutti_set_error("merge config: out of memory");
        out->n++;
        if (parse_setting(c, v, 0, &mp->set)) return TUTTI_ERR;
        /* numbers where numbers belong, finite and in mergekit's range */
        if (merge_setting_check(ks, mp->set) < 0) {
            tutti_error_prefix("merge config: line %d", line(k));
            return TUTTI_ERR;
        }
    }
    return 0;
}

static int parse_int(yaml_node_t *n, int *out) {
    double v;
    if (!n || n->type != YAML_SCALAR_NODE || as_number(n, &v) != 1 || v != floor(v) || v < 0 || v > 1e6)
        return err(n, "layer_range needs two non-negative integers");
    *out = (int)v;
    return 0;
}

static int parse_source(ctx *c, yaml_node_t *n, bool slice, merge_source *s) {
    s->hi = -1;
    if (n->type == YAML_SCALAR_NODE && !slice) /* `- model_path` shorthand */
        return dup_str(n, "model", &s->model);
    if (n->type != YAML_MAPPING_NODE) return err(n, slice ? "a source must be a mapping" : "a model must be a mapping");
    bool have_range = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        if (!visit(c)) return err(n, "configuration too large");
        yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
        const char *ks = scalar(k);
        if (!ks || !v) return err(n, "keys must be strings");
        if (!strcmp(ks, "model")) {
            if (dup_str(v, "model", &s->model)) return TUTTI_ERR;
        } else if (!strcmp(ks, "parameters")) {
            if (parse_params(c, v, &s->params)) return TUTTI_ERR;
        } else if (!strcmp(ks, "layer_range") && slice) {
            if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start != 2)
                return err(v, "layer_range must be [first, end)");
            if (parse_int(node(c, v->data.sequence.items.start[0]), &s->lo) ||
                parse_int(node(c, v->data.sequence.items.start[1]), &s->hi))
                return TUTTI_ERR;
            if (s->hi <= s->lo) return err(v, "layer_range [first, end) is empty");
            have_range = true;
        } else {
            return err(k, slice ? "unknown key in a source (model, layer_range, parameters)"
                                : "unknown key in a model (model, parameters)");
        }
    }
    if (!s->model) return err(n, "model missing");
    if (slice && !have_range) return err(n, "layer_range missing");
    return 0;
}

static int parse_sources(ctx *c, yaml_node_t *n, bool slice, merge_source **out, int *n_out) {
    if (n->type != YAML_SEQUENCE_NODE) return err(n, slice ? "sources must be a list" : "models must be a list");
    long len = n->data.sequence.items.top - n->data.sequence.items.start;
    if (len == 0 || len > 64) return err(n, "need 1 to 64 models");
    *out = calloc((size_t)len, sizeof **out);
    if (!*out) return tutti_set_error("merge config: out of memory");
    for (long i = 0; i < len; i++) {
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]);
        if (!e) return err(n, "bad list element");
        (*n_out)++;
        if (parse_source(c, e, slice, &(*out)[i])) return TUTTI_ERR;
    }
    return 0;
}

static int parse_slices(ctx *c, yaml_node_t *n, tutti_merge_config *cfg) {
    if (n->type != YAML_SEQUENCE_NODE) return err(n, "slices must be a list");
    long len = n->data.sequence.items.top - n->data.sequence.items.start;
    if (len == 0 || len > 4096) return err(n, "need 1 to 4096 slices");
    cfg->slices = calloc((size_t)len, sizeof *cfg->slices);
    if (!cfg->slices) return tutti_set_error("merge config: out of memory");
    for (long i = 0; i < len; i++) {
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]);
        if (!e || e->type != YAML_MAPPING_NODE) return err(e ? e : n, "a slice must be a mapping");
        merge_slice *s = &cfg->slices[cfg->n_slices++];
        for (yaml_node_pair_t *p = e->data.mapping.pairs.start; p < e->data.mapping.pairs.top; p++) {
            if (!visit(c)) return err(n, "configuration too large");
            yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
            const char *ks = scalar(k);
            if (!ks || !v) return err(e, "keys must be strings");
            if (!strcmp(ks, "sources")) {
                if (s->src) return err(k, "sources given twice");
                if (parse_sources(c, v, true, &s->src, &s->n_src)) return TUTTI_ERR;
            } else if (!strcmp(ks, "base_model")) {
                if (dup_str(v, "base_model", &s->base_model)) return TUTTI_ERR;
            } else if (!strcmp(ks, "parameters")) {
                if (parse_params(c, v, &s->params)) return TUTTI_ERR;
            } else {
                return err(k, "unknown key in a slice (sources, base_model, parameters)");
            }
        }
        if (!s->src) return err(e, "slice without sources");
    }
    return 0;
}

static int parse_root(ctx *c, tutti_merge_config *cfg) {
    yaml_node_t *root = yaml_document_get_root_node(&c->doc);
    if (!root) return tutti_set_error("merge config: empty document");
    if (root->type != YAML_MAPPING_NODE) return err(root, "the configuration must be a mapping");
    bool have_method = false;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        if (!visit(c)) return err(root, "configuration too large");
        yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
        const char *ks = scalar(k);
        if (!ks || !v) return err(root, "keys must be strings");
        if (!strcmp(ks, "merge_method")) {
            const char *m = scalar(v);
            int mi = m ? merge_method_from_name(m) : -1;
            if (mi < 0)
                return tutti_set_error("merge config: line %d: unknown merge_method '%.60s' (%s)", line(v),
                                       m ? m : "(not a string)", merge_method_list());
            cfg->method = (merge_method)mi;
            have_method = true;
        } else if (!strcmp(ks, "base_model")) {
            if (!is_null(v) && dup_str(v, "base_model", &cfg->base_model)) return TUTTI_ERR;
        } else if (!strcmp(ks, "dtype") || !strcmp(ks, "out_dtype")) {
            char **dst = ks[0] == 'd' ? &cfg->dtype : &cfg->out_dtype;
            if (is_null(v)) continue;
            if (dup_str(v, ks, dst)) return TUTTI_ERR;
            if (merge_dtype_type(*dst) < 0) return err(v, "dtype must be float32, float16 or bfloat16");
        } else if (!strcmp(ks, "parameters")) {
            if (parse_params(c, v, &cfg->params)) return TUTTI_ERR;
        } else if (!strcmp(ks, "models")) {
            if (cfg->models) return err(k, "models given twice");
            if (parse_sources(c, v, false, &cfg->models, &cfg->n_models)) return TUTTI_ERR;
        } else if (!strcmp(ks, "slices")) {
            if (cfg->slices) return err(k, "slices given twice");
            if (parse_slices(c, v, cfg)) return TUTTI_ERR;
        } else if (!strcmp(ks, "tokenizer_source")) {
            const char *s = scalar(v);
            if (!is_null(v) && !(s && !strcmp(s, "base")))
                return err(v, "tokenizer_source: only 'base' is supported (models must share one vocabulary)");
        } else if (!strcmp(ks, "chat_template")) {
            /* the base model's template is kept (metadata are the base's) */
        } else {
            char m[160];
            snprintf(m, sizeof m,
                     "unknown key '%.60s' (merge_method, base_model, models, slices, parameters, "
                     "dtype, out_dtype)",
                     ks);
            return err(k, m);
        }
    }
    if (!have_method) return err(root, "merge_method missing");
    if (!cfg->models == !cfg->slices) return err(root, "exactly one of 'models' or 'slices' must be present");
    return 0;
}

/* ---- mergekit-moe configurations (mergekit/moe/config.py) ---- */

static int parse_strings(ctx *c, yaml_node_t *n, const char *what, char ***out, int *n_out) {
    if (is_null(n)) return 0;
    if (*out) return err(n, "prompts given twice");
    if (n->type != YAML_SEQUENCE_NODE) return err(n, "prompts must be a list of strings");
    long len = n->data.sequence.items.top - n->data.sequence.items.start;
    if (len > MAX_LIST) return err(n, "too many prompts");
    *out = calloc((size_t)(len ? len : 1), sizeof **out);
    if (!*out) return tutti_set_error("merge config: out of memory");
    for (long i = 0; i < len; i++) {
        if (!visit(c)) return err(n, "configuration too large");
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]);
        if (!e) return err(n, "bad list element");
        if (dup_str(e, what, &(*out)[i])) return TUTTI_ERR;
        (*n_out)++;
    }
    return 0;
}

static int parse_scale(yaml_node_t *v, const char *what, double *out) {
    double x;
    if (v->type != YAML_SCALAR_NODE || !(as_number(v, &x) > 0) || x < 0 || x > 1e6) {
        char m[96];
        snprintf(m, sizeof m, "%s must be a finite number >= 0", what);
        return err(v, m);
    }
    *out = x;
    return 0;
}

static int parse_expert(ctx *c, yaml_node_t *n, merge_expert *e) {
    e->noise_scale = e->residual_scale = NAN;
    if (n->type != YAML_MAPPING_NODE)
        return err(n, "an expert must be a mapping (source_model, positive_prompts, ...)");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        if (!visit(c)) return err(n, "configuration too large");
        yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
        const char *ks = scalar(k);
        if (!ks || !v) return err(n, "keys must be strings");
        int rc;
        if (!strcmp(ks, "source_model")) rc = dup_str(v, "source_model", &e->source_model);
        else if (!strcmp(ks, "positive_prompts")) rc = parse_strings(c, v, "a prompt", &e->pos, &e->n_pos);
        else if (!strcmp(ks, "negative_prompts")) rc = parse_strings(c, v, "a prompt", &e->neg, &e->n_neg);
        else if (!strcmp(ks, "noise_scale")) rc = is_null(v) ? 0 : parse_scale(v, "noise_scale", &e->noise_scale);
        else if (!strcmp(ks, "residual_scale"))
            rc = is_null(v) ? 0 : parse_scale(v, "residual_scale", &e->residual_scale);
        else
            return err(k, "unknown key in an expert (source_model, positive_prompts, negative_prompts, noise_scale, "
                          "residual_scale)");
        if (rc) return TUTTI_ERR;
    }
    if (!e->source_model) return err(n, "expert without source_model");
    return 0;
}

static int parse_experts(ctx *c, yaml_node_t *n, merge_moe *moe) {
    if (n->type != YAML_SEQUENCE_NODE) return err(n, "experts must be a list");
    long len = n->data.sequence.items.top - n->data.sequence.items.start;
    if (len < 1 || len > 64) return err(n, "need 1 to 64 experts");
    moe->experts = calloc((size_t)len, sizeof *moe->experts);
    if (!moe->experts) return tutti_set_error("merge config: out of memory");
    for (long i = 0; i < len; i++) {
        yaml_node_t *e = node(c, n->data.sequence.items.start[i]);
        if (!e) return err(n, "bad list element");
        moe->n_experts++;
        if (parse_expert(c, e, &moe->experts[i])) return TUTTI_ERR;
    }
    return 0;
}

static bool same_prompts(const merge_expert *a, const merge_expert *b) {
    if (a->n_pos != b->n_pos || a->n_neg != b->n_neg) return false;
    for (int i = 0; i < a->n_pos; i++)
        if (strcmp(a->pos[i], b->pos[i])) return false;
    for (int i = 0; i < a->n_neg; i++)
        if (strcmp(a->neg[i], b->neg[i])) return false;
    return true;
}

/* mergekit's is_bad_config, as errors. */
static int check_moe(yaml_node_t *root, const tutti_merge_config *cfg) {
    const merge_moe *m = cfg->moe;
    if (!cfg->base_model) return err(root, "base_model missing");
    if (!m->experts) return err(root, "experts missing");
    if (m->n_experts < m->experts_per_token) return err(root, "experts_per_token is larger than the number of experts");
    bool same_src = m->n_experts > 1, same_p = m->n_experts > 1;
    for (int i = 1; i < m->n_experts; i++) {
        same_src &= !strcmp(m->experts[i].source_model, m->experts[0].source_model);
        same_p &= same_prompts(&m->experts[i], &m->experts[0]);
    }
    if (same_src)
        return err(root, "every expert has the same source_model: the mixture would compute what one model does, "
                         "at more cost");
    if (m->gate_mode == MG_RANDOM || m->gate_mode == MG_UNIFORM_RANDOM) return 0;
    for (int i = 0; i < m->n_experts; i++)
        if (!m->experts[i].n_pos) {
            char msg[120];
            snprintf(msg, sizeof msg, "expert %d has no positive_prompts (gate_mode %s routes by them)", i + 1,
                     m->gate_mode == MG_CHEAP_EMBED ? "cheap_embed" : "hidden");
            return err(root, msg);
        }
    if (same_p)
        return err(root, "every expert has the same prompts: the router could not tell them apart (give each "
                         "expert prompts of what it should receive)");
    return 0;
}

static int parse_moe_root(ctx *c, yaml_node_t *root, tutti_merge_config *cfg) {
    merge_moe *m = cfg->moe = calloc(1, sizeof *cfg->moe);
    if (!m) return tutti_set_error("merge config: out of memory");
    m->experts_per_token = 2;
    m->gate_mode = MG_HIDDEN;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        if (!visit(c)) return err(root, "configuration too large");
        yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
        const char *ks = scalar(k);
        if (!ks || !v) return err(root, "keys must be strings");
        if (!strcmp(ks, "base_model")) {
            if (dup_str(v, "base_model", &cfg->base_model)) return TUTTI_ERR;
        } else if (!strcmp(ks, "experts")) {
            if (m->experts) return err(k, "experts given twice");
            if (parse_experts(c, v, m)) return TUTTI_ERR;
        } else if (!strcmp(ks, "gate_mode")) {
            static const char *const modes[] = {"hidden", "hidden_avg",     "cheap_embed",
                                                "random", "uniform_random", "hidden_last"};
            const char *g = scalar(v);
            int i = 0;
            while (g && i < 6 && strcmp(g, modes[i])) i++;
            if (!g || i == 6)
                return err(v,
                           "gate_mode must be hidden, hidden_avg, hidden_last, cheap_embed, random or uniform_random");
            m->gate_mode = i == 5 ? MG_HIDDEN : (merge_gate_mode)i;
        } else if (!strcmp(ks, "dtype")) {
            if (is_null(v)) continue;
            if (dup_str(v, "dtype", &cfg->dtype)) return TUTTI_ERR;
            if (merge_dtype_type(cfg->dtype) < 0) return err(v, "dtype must be float32, float16 or bfloat16");
        } else if (!strcmp(ks, "experts_per_token")) {
            double x;
            if (v->type != YAML_SCALAR_NODE || !(as_number(v, &x) > 0) || x != floor(x) || x < 1 || x > 64)
                return err(v, "experts_per_token must be an integer from 1 to 64");
            m->experts_per_token = (int)x;
        } else if (!strcmp(ks, "architecture")) {
            const char *a = scalar(v);
            if (!is_null(v) && !(a && !strcasecmp(a, "mixtral")))
                return err(v, "architecture: tutti writes the Mixtral layout only (llama with experts)");
        } else if (!strcmp(ks, "shared_experts")) {
            if (!is_null(v)) return err(v, "shared_experts: the Mixtral layout has none");
        } else {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "unknown key '%.60s' in a mergekit-moe configuration (base_model, experts, "
                     "gate_mode, dtype, experts_per_token)",
                     ks);
            return err(k, msg);
        }
    }
    return check_moe(root, cfg);
}

/* A mapping with an `experts` key is a mergekit-moe configuration. */
static bool is_moe(ctx *c, yaml_node_t *root) {
    if (!root || root->type != YAML_MAPPING_NODE) return false;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        const char *ks = scalar(node(c, p->key));
        if (ks && !strcmp(ks, "experts")) return true;
    }
    return false;
}

tutti_merge_config *tutti_merge_config_parse(const char *text, size_t len) {
    if (!text) {
        tutti_set_error("merge config: NULL text");
        return NULL;
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        tutti_set_error("merge config: out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    ctx c = {0};
    if (!yaml_parser_load(&parser, &c.doc)) {
        tutti_set_error("merge config: YAML error at line %d, column %d: %s", (int)parser.problem_mark.line + 1,
                        (int)parser.problem_mark.column + 1, parser.problem ? parser.problem : "malformed");
        yaml_parser_delete(&parser);
        return NULL;
    }
    tutti_merge_config *cfg = calloc(1, sizeof *cfg);
    yaml_node_t *root = yaml_document_get_root_node(&c.doc);
    int rc = !cfg               ? tutti_set_error("merge config: out of memory")
             : is_moe(&c, root) ? parse_moe_root(&c, root, cfg)
                                : parse_root(&c, cfg);
    if (rc == 0) {
        /* a single document only: a second one is most likely a mistake */
        yaml_document_t next;
        if (yaml_parser_load(&parser, &next)) {
            if (yaml_document_get_root_node(&next)) rc = tutti_set_error("merge config: more than one YAML document");
            yaml_document_delete(&next);
        }
    }
    if (rc == 0) {
        cfg->text = malloc(len + 1);
        if (!cfg->text) rc = tutti_set_error("merge config: out of memory");
        else {
            memcpy(cfg->text, text, len);
            cfg->text[len] = 0;
        }
    }
    yaml_document_delete(&c.doc);
    yaml_parser_delete(&parser);
    if (rc) {
        tutti_merge_config_free(cfg);
        return NULL;
    }
    return cfg;
}
