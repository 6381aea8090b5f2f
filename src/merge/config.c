/* Merge configuration and parameter lookup — mergekit's config.py semantics:
 * a setting is a scalar, a gradient (list of numbers interpolated at t), a
 * list of strings picked by t, or a list of {filter, value} conditions whose
 * first match (filter a substring of the tensor name, or absent / "*")
 * applies; lookup goes source -> slice -> global and skips settings that do
 * not apply. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge/merge.h"
#include "quant/quant.h"
#include "util/error.h"

static const char *const k_methods[MM_COUNT] = {
    "linear",  "slerp",        "nuslerp",     "task_arithmetic",  "ties",        "dare_ties",   "dare_linear",
    "della",   "della_linear", "breadcrumbs", "breadcrumbs_ties", "model_stock", "passthrough", "sce",
    "karcher", "multislerp",   "nearswap",    "arcee_fusion",
};

const char *merge_method_name(merge_method m) { return (unsigned)m < MM_COUNT ? k_methods[m] : "?"; }

const char *merge_method_list(void) {
    static char list[512];
    if (!list[0])
        for (int i = 0, o = 0; i < MM_COUNT; i++)
            o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", i ? ", " : "", k_methods[i]);
    return list;
}

int merge_method_from_name(const char *s) {
    for (int i = 0; i < MM_COUNT; i++)
        if (!strcmp(s, k_methods[i])) return i;
    return -1;
}

bool merge_setting_eval(const merge_setting *s, const char *hf, const char *gguf, double t, double *num,
                        const char **str) {
    *str = NULL;
    switch (s->kind) {
    case MSET_NUM: *num = s->num; return true;
    case MSET_STR: *str = s->str; return true;
    case MSET_GRAD: {
        /* mergekit: scaled = t (n - 1), i0 = int(scaled), lerp to i0 + 1 */
        double scaled = t * (s->n - 1);
        int i0 = (int)scaled;
        if (i0 > s->n - 1) i0 = s->n - 1;
        if (i0 < 0) i0 = 0;
        int i1 = i0 + 1 < s->n ? i0 + 1 : s->n - 1;
        double frac = scaled - i0;
        *num = (1 - frac) * s->nums[i0] + frac * s->nums[i1];
        return true;
    }
    case MSET_SEL: {
        int i = (int)(t * (s->n - 1));
        if (i < 0) i = 0;
        if (i > s->n - 1) i = s->n - 1;
        if (s->strs[i]) *str = s->strs[i];
        else *num = s->nums[i];
        return true;
    }
    case MSET_COND:
        for (int i = 0; i < s->n; i++) {
            const char *f = s->conds[i].filter;
            if (!f || !strcmp(f, "*") || (hf && strstr(hf, f)) || (gguf && strstr(gguf, f)))
                return merge_setting_eval(s->conds[i].value, hf, gguf, t, num, str);
        }
        return false;
    }
    return false;
}

void merge_setting_free(merge_setting *s) {
    if (!s) return;
    free(s->str);
    free(s->nums);
    if (s->strs)
        for (int i = 0; i < s->n; i++) free(s->strs[i]);
    free(s->strs);
    if (s->conds)
        for (int i = 0; i < s->n; i++) {
            free(s->conds[i].filter);
            merge_setting_free(s->conds[i].value);
        }
    free(s->conds);
    free(s);
}

void merge_params_free(merge_params *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->p[i].name);
        merge_setting_free(p->p[i].set);
    }
    free(p->p);
    p->p = NULL;
    p->n = 0;
}

int merge_params_set_num(merge_params *p, const char *name, double v, bool is_bool) {
    merge_setting *s = calloc(1, sizeof *s);
    if (!s) return tutti_set_error("merge: out of memory");
    s->kind = MSET_NUM;
    s->num = v;
    s->is_bool = is_bool;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->p[i].name, name)) {
            merge_setting_free(p->p[i].set);
            p->p[i].set = s;
            return 0;
        }
    merge_param *np = realloc(p->p, sizeof *np * (size_t)(p->n + 1));
    char *nm = strdup(name);
    if (!np || !nm) {
        free(np == p->p ? NULL : np);
        free(nm);
        merge_setting_free(s);
        return tutti_set_error("merge: out of memory");
    }
    p->p = np;
    p->p[p->n++] = (merge_param){nm, s};
    return 0;
}

static int find_param(const merge_params *p, const char *name) {
    if (!p) return -1;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->p[i].name, name)) return i;
    return -1;
}

bool merge_lookup(const merge_params *source, const merge_params *slice, const merge_params *global, const char *name,
                  const char *hf, const char *gguf, double t, double *out, bool *err) {
    const merge_params *levels[3] = {source, slice, global};
    for (int l = 0; l < 3; l++) {
        int i = find_param(levels[l], name);
        if (i < 0) continue;
        double v = 0;
        const char *str = NULL;
        if (!merge_setting_eval(levels[l]->p[i].set, hf, gguf, t, &v, &str)) continue;
        if (str) {
            tutti_set_error("merge: parameter %s of tensor %s is the string '%s', a number is needed", name, gguf, str);
            *err = true;
            return false;
        }
        *out = v;
        return true;
    }
    return false;
}

/* ---- public construction API ---- */

tutti_merge_config *tutti_merge_config_new(const char *method) {
    int m = method ? merge_method_from_name(method) : -1;
    if (m < 0) {
        tutti_set_error("merge: unknown merge_method '%s' (%s)", method ? method : "(null)", merge_method_list());
        return NULL;
    }
    tutti_merge_config *c = calloc(1, sizeof *c);
    if (!c) {
        tutti_set_error("merge: out of memory");
        return NULL;
    }
    c->method = (merge_method)m;
    return c;
}

int tutti_merge_config_add_model(tutti_merge_config *c, const char *path, double weight) {
    if (!c || !path) return tutti_set_error("merge: NULL configuration or path");
    if (c->n_slices) return tutti_set_error("merge: a configuration has either models or slices");
    merge_source *m = realloc(c->models, sizeof *m * (size_t)(c->n_models + 1));
    if (!m) return tutti_set_error("merge: out of memory");
    c->models = m;
    merge_source *s = &m[c->n_models];
    memset(s, 0, sizeof *s);
    s->hi = -1;
    if (!isnan(weight) && !isfinite(weight)) return tutti_set_error("merge: the weight of %s must be finite", path);
    s->model = strdup(path);
    if (!s->model) return tutti_set_error("merge: out of memory");
    c->n_models++;
    if (!isnan(weight)) return merge_params_set_num(&s->params, "weight", weight, false);
    return 0;
}

int tutti_merge_config_set_base(tutti_merge_config *c, const char *path) {
    if (!c || !path) return tutti_set_error("merge: NULL configuration or path");
    char *b = strdup(path);
    if (!b) return tutti_set_error("merge: out of memory");
    free(c->base_model);
    c->base_model = b;
    return 0;
}

static const char *const k_bool_params[] = {"normalize",   "rescale",   "nuslerp_flatten",  "nuslerp_row_wise",
                                            "filter_wise", "int8_mask", "normalize_weights"};
static const char *const k_num_params[] = {"t",     "weight",      "density",  "lambda", "epsilon", "gamma",
                                           "scale", "select_topk", "max_iter", "tol",    "eps"};

int merge_param_kind(const char *name) {
    for (size_t i = 0; i < sizeof k_num_params / sizeof *k_num_params; i++)
        if (!strcmp(name, k_num_params[i])) return 1;
    for (size_t i = 0; i < sizeof k_bool_params / sizeof *k_bool_params; i++)
        if (!strcmp(name, k_bool_params[i])) return 2;
    return 0;
}

/* mergekit's ranges (its sparsify.py and merge-method guide): density and
 * gamma are fractions of the task vector (kept; the largest dropped), t is
 * slerp's interpolation factor (0 the base model, 1 the other), epsilon the
 * half-width of DELLA's keep probabilities (della also needs density ±
 * epsilon inside (0, 1), checked with the density of each tensor); weight,
 * lambda and scale are any finite factor (negative weights subtract). */
static const struct {
    const char *name;
    double lo, hi;
    const char *what;
} k_ranges[] = {
    {"density", 0, 1, "the fraction of the task vector kept"},
    {"gamma", 0, 1, "the fraction of the largest task-vector values dropped"},
    {"t", 0, 1, "the interpolation factor: 0 the base model, 1 the other"},
    {"epsilon", 0, 1, "the half-width of della's keep probabilities"},
};

int merge_param_check(const char *name, double v) {
    if (!isfinite(v))
        return tutti_set_error("parameter %s is %s: a finite number is needed", name,
                               isnan(v) ? "not a number (.nan)"
                               : v > 0  ? "infinite (.inf)"
                                        : "infinite (-.inf)");
    for (size_t i = 0; i < sizeof k_ranges / sizeof *k_ranges; i++)
        if (!strcmp(name, k_ranges[i].name) && !(v >= k_ranges[i].lo && v <= k_ranges[i].hi))
            return tutti_set_error("parameter %s is %g, outside [%g, %g] (%s)", name, v, k_ranges[i].lo, k_ranges[i].hi,
                                   k_ranges[i].what);
    return 0;
}

/* Every number a setting can evaluate to: a gradient interpolates between
 * its entries, so checking them covers every t. */
int merge_setting_check(const char *name, const merge_setting *s) {
    if (!s) return 0;
    int kind = merge_param_kind(name);
    switch (s->kind) {
    case MSET_NUM: return s->is_bool || kind != 1 ? 0 : merge_param_check(name, s->num);
    case MSET_STR:
        return kind == 1 ? tutti_set_error("parameter %s is the string '%s': a number is needed", name, s->str) : 0;
    case MSET_GRAD:
    case MSET_SEL:
        for (int i = 0; i < s->n; i++) {
            if (s->strs && s->strs[i]) {
                if (kind == 1)
                    return tutti_set_error("parameter %s lists the string '%s': numbers are needed", name, s->strs[i]);
                continue;
            }
            if (kind == 1 && merge_param_check(name, s->nums[i]) < 0) return TUTTI_ERR;
        }
        return 0;
    case MSET_COND:
        for (int i = 0; i < s->n; i++)
            if (merge_setting_check(name, s->conds[i].value) < 0) return TUTTI_ERR;
        return 0;
    }
    return 0;
}

static int check_params(const merge_params *p, const char *where) {
    for (int i = 0; i < p->n; i++)
        if (merge_setting_check(p->p[i].name, p->p[i].set) < 0) {
            tutti_error_prefix("merge: %s", where);
            return TUTTI_ERR;
        }
    return 0;
}

int merge_config_check(const tutti_merge_config *c) {
    char where[160];
    if (check_params(&c->params, "parameters")) return TUTTI_ERR;
    for (int i = 0; i < c->n_models; i++) {
        snprintf(where, sizeof where, "model %d (%.100s)", i + 1, c->models[i].model);
        if (check_params(&c->models[i].params, where)) return TUTTI_ERR;
    }
    for (int k = 0; k < c->n_slices; k++) {
        snprintf(where, sizeof where, "slice %d", k + 1);
        if (check_params(&c->slices[k].params, where)) return TUTTI_ERR;
        for (int j = 0; j < c->slices[k].n_src; j++) {
            snprintf(where, sizeof where, "slice %d, source %d (%.100s)", k + 1, j + 1, c->slices[k].src[j].model);
            if (check_params(&c->slices[k].src[j].params, where)) return TUTTI_ERR;
        }
    }
    return 0;
}

int tutti_merge_config_set_param(tutti_merge_config *c, const char *name, double value) {
    if (!c || !name) return tutti_set_error("merge: NULL configuration or name");
    int k = merge_param_kind(name);
    if (!k)
        return tutti_set_error("merge: unknown parameter '%s' (t, weight, density, lambda, epsilon, gamma, "
                               "scale, normalize, rescale, nuslerp_flatten, nuslerp_row_wise, filter_wise)",
                               name);
    if (k == 1 && merge_param_check(name, value) < 0) {
        tutti_error_prefix("merge");
        return TUTTI_ERR;
    }
    if (!isfinite(value)) return tutti_set_error("merge: parameter %s must be finite", name);
    return merge_params_set_num(&c->params, name, k == 2 ? (value != 0) : value, k == 2);
}

int merge_dtype_type(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "float32") || !strcmp(s, "fp32")) return TUTTI_TYPE_F32;
    if (!strcmp(s, "float16") || !strcmp(s, "fp16") || !strcmp(s, "half")) return TUTTI_TYPE_F16;
    if (!strcmp(s, "bfloat16") || !strcmp(s, "bf16")) return TUTTI_TYPE_BF16;
    return -1;
}

int merge_config_out_type(const tutti_merge_config *c) {
    if (!c) return -1;
    int t = merge_dtype_type(c->out_dtype);
    return t >= 0 ? t : merge_dtype_type(c->dtype);
}

static void free_strs(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void tutti_merge_config_free(tutti_merge_config *c) {
    if (!c) return;
    if (c->moe) {
        for (int i = 0; i < c->moe->n_experts; i++) {
            merge_expert *e = &c->moe->experts[i];
            free(e->source_model);
            free_strs(e->pos, e->n_pos);
            free_strs(e->neg, e->n_neg);
        }
        free(c->moe->experts);
        free(c->moe);
    }
    free(c->base_model);
    free(c->dtype);
    free(c->out_dtype);
    merge_params_free(&c->params);
    for (int i = 0; i < c->n_models; i++) {
        free(c->models[i].model);
        merge_params_free(&c->models[i].params);
    }
    free(c->models);
    for (int i = 0; i < c->n_slices; i++) {
        merge_slice *s = &c->slices[i];
        for (int j = 0; j < s->n_src; j++) {
            free(s->src[j].model);
            merge_params_free(&s->src[j].params);
        }
        free(s->src);
        free(s->base_model);
        merge_params_free(&s->params);
    }
    free(c->slices);
    free(c->text);
    free(c);
}
