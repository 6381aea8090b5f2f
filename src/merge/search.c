/* tutti_merge_search: the evolutionary merge (mergekit-evolve; Akiba et al.
 * 2024, arXiv:2403.13187) — CMA-ES (cmaes.c) over a merge method's
 * parameters per model and per layer group, every candidate merged in memory
 * and scored by tutti's own evaluation.
 *
 * Genome.  The layers are cut into layer_groups contiguous groups (group g
 * = layers [g L / G, (g + 1) L / G)); a candidate is a mergekit
 * configuration of one slice per group, each source with its own
 * parameters (the method's per-model genes: weight and density) and the
 * slice with the method's global genes (slerp's t, sce's select_topk,
 * nearswap's t).  The token embedding follows the first group's values and
 * the final norm and output the last group's (mergekit's rule for slices).
 * Genes live in [0, 1] for CMA-ES (start 0.5, step 0.2, reflected at the
 * bounds), map linearly onto each parameter's range and are rounded to 4
 * decimals: the YAML text holds the exact numbers that were scored.
 *
 * Scoring.  The candidate's YAML is parsed and merged exactly as `tutti
 * merge --config` would (merge_to_buffer: the GGUF image, in memory), the
 * image becomes a model (tutti_model_load_buffer), and that model is a
 * one-member ensemble scored by tutti_ensemble_eval_bpb (bits per byte,
 * 200-byte sentence chunks from BOS) or tutti_ensemble_eval_choices
 * (accuracy; its fitness 1 - acc minus 1e-4 tanh(mean margin of the label's
 * log-likelihood over the best other choice), so that CMA-ES sees a slope on
 * accuracy's plateaus while accuracy decides).  With several texts (tasks:
 * the domains of a mixed text, say) the fitness is the mean, or the max, of
 * each text's bits per byte over the start point's (text_fitness).  No file
 * is written.
 *
 * The first evaluation is the start point (every gene 0.5), so the result is
 * never worse than it; then generations of lambda candidates until the
 * budget is spent (a last, partial generation is scored but not told). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/gguf.h"
#include "merge/cmaes.h"
#include "merge/merge.h"
#include "model/model.h"
#include "util/buf.h"
#include "util/error.h"

#define MAX_MODELS 16
#define MAX_GROUPS 64
#define MAX_TEXTS 16

/* A parameter the search sets: per model (source) or per slice. */
typedef struct gene_def {
    const char *name;
    double lo, hi;
} gene_def;

typedef struct method_genes {
    merge_method m;
    gene_def src[2];    /* per model (name NULL: none) */
    gene_def slice;     /* per slice */
    bool base_weighted; /* the base model gets the per-model genes too (linear) */
} method_genes;

static const method_genes k_genes[] = {
    {MM_LINEAR, {{"weight", 0, 1}}, {0}, true},
    {MM_NUSLERP, {{"weight", 0, 1}}, {0}, false},
    {MM_MULTISLERP, {{"weight", 0, 1}}, {0}, false},
    {MM_TASK_ARITHMETIC, {{"weight", 0, 1}}, {0}, false},
    {MM_TIES, {{"weight", 0, 1}, {"density", 0, 1}}, {0}, false},
    {MM_DARE_TIES, {{"weight", 0, 1}, {"density", 0, 1}}, {0}, false},
    {MM_DARE_LINEAR, {{"weight", 0, 1}, {"density", 0, 1}}, {0}, false},
    {MM_BREADCRUMBS, {{"weight", 0, 1}, {"density", 0, 1}}, {0}, false},
    {MM_BREADCRUMBS_TIES, {{"weight", 0, 1}, {"density", 0, 1}}, {0}, false},
    /* della: density +- epsilon (0.15) must stay inside (0, 1) */
    {MM_DELLA, {{"weight", 0, 1}, {"density", 0.2, 0.8}}, {0}, false},
    {MM_DELLA_LINEAR, {{"weight", 0, 1}, {"density", 0.2, 0.8}}, {0}, false},
    {MM_SLERP, {{0}}, {"t", 0, 1}, false},
    {MM_SCE, {{0}}, {"select_topk", 0, 1}, false},
    {MM_NEARSWAP, {{0}}, {"t", 0, 0.1}, false},
};

typedef struct search {
    const tutti_merge_search_params *p;
    const method_genes *g;
    merge_method method;
    int n_layers, n_groups;
    int n_src; /* sources per slice: the models (+ the base) */
    const char *src[MAX_MODELS + 1];
    bool src_genes[MAX_MODELS + 1];
    int n_src_genes, per_group, n_dims;
    const char *vocab_path; /* a file with the merged model's vocabulary (the metadata source) */
    const char *dtype;
    int64_t n_evals;
    /* the texts (one, or several tasks), the start point's bits per byte on
     * each (set by the first evaluation), the last candidate's and the best's */
    int n_texts;
    const char *texts[MAX_TEXTS];
    size_t lens[MAX_TEXTS];
    bool have_start;
    double bpb0[MAX_TEXTS], bpb[MAX_TEXTS], best_bpb[MAX_TEXTS];
    /* the *_BEST objectives: the lowest bits per byte of the input models on each text */
    double ref[MAX_TEXTS];
    char buf[1024];
} search;

/* ---- the candidate's configuration ---- */

static int append(char **s, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char **s, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = tutti_buf_vappendf(s, len, cap, fmt, ap);
    va_end(ap);
    return rc < 0 ? tutti_set_error("merge search: out of memory") : 0;
}

/* A YAML double-quoted scalar of a path (\ and " escaped; control bytes
 * refused before the search starts). */
static int append_path(char **s, size_t *len, size_t *cap, const char *path) {
    if (append(s, len, cap, "\"")) return TUTTI_ERR;
    for (const char *c = path; *c; c++)
        if (append(s, len, cap, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c)) return TUTTI_ERR;
    return append(s, len, cap, "\"");
}

/* Gene x (any real) -> [0, 1] by reflection at the bounds. */
static double reflect01(double x) {
    double y = fmod(fabs(x), 2.0);
    return y > 1 ? 2 - y : y;
}

static double gene_value(const gene_def *d, double x) {
    double v = d->lo + (d->hi - d->lo) * reflect01(x);
    return round(v * 1e4) / 1e4;
}

/* The YAML of genome x (NULL-terminated, malloc'd), or NULL. */
static char *candidate_yaml(const search *s, const double *x) {
    char *y = NULL;
    size_t len = 0, cap = 0;
    int rc = append(&y, &len, &cap, "merge_method: %s\n", merge_method_name(s->method));
    if (rc == 0 && s->p->base) {
        rc = append(&y, &len, &cap, "base_model: ");
        if (rc == 0) rc = append_path(&y, &len, &cap, s->p->base);
        if (rc == 0) rc = append(&y, &len, &cap, "\n");
    }
    if (rc == 0) rc = append(&y, &len, &cap, "out_dtype: %s\nslices:\n", s->dtype);
    for (int g = 0; rc == 0 && g < s->n_groups; g++) {
        int lo = g * s->n_layers / s->n_groups, hi = (g + 1) * s->n_layers / s->n_groups;
        const double *xg = x + (size_t)g * (size_t)s->per_group;
        rc = append(&y, &len, &cap, "  - sources:\n");
        for (int i = 0, k = 0; rc == 0 && i < s->n_src; i++) {
            rc = append(&y, &len, &cap, "      - model: ");
            if (rc == 0) rc = append_path(&y, &len, &cap, s->src[i]);
            if (rc == 0) rc = append(&y, &len, &cap, "\n        layer_range: [%d, %d]\n", lo, hi);
            if (rc || !s->src_genes[i]) continue;
            rc = append(&y, &len, &cap, "        parameters: {");
            for (int j = 0; rc == 0 && j < s->n_src_genes; j++, k++)
                rc = append(&y, &len, &cap, "%s%s: %.4f", j ? ", " : "", s->g->src[j].name,
                            gene_value(&s->g->src[j], xg[k]));
            if (rc == 0) rc = append(&y, &len, &cap, "}\n");
        }
        if (rc == 0 && s->g->slice.name)
            rc = append(&y, &len, &cap, "    parameters: {%s: %.4f}\n", s->g->slice.name,
                        gene_value(&s->g->slice, xg[s->per_group - 1]));
    }
    if (rc) {
        free(y);
        return NULL;
    }
    return y;
}

/* ---- scoring ---- */

/* The fitness of the bits per byte in s->bpb.  One text: its bits per
 * byte.  Several: each text's ratio to the start point's bits per byte on
 * it (the first evaluation is the start point, ratio 1), averaged or the
 * largest, so that a short text with a high bits per byte (the poems of
 * mixed-dev.txt) counts as much as a long one: the whole text's bits per
 * byte weighs each part by its share of the bits. */
static double text_fitness(search *s) {
    if (s->n_texts == 1) return s->bpb[0];
    if (!s->have_start) memcpy(s->bpb0, s->bpb, sizeof(double) * (size_t)s->n_texts), s->have_start = true;
    bool vs_best = s->p->objective == TUTTI_SEARCH_MEAN_BEST || s->p->objective == TUTTI_SEARCH_MAX_BEST;
    double sum = 0, max = 0;
    for (int i = 0; i < s->n_texts; i++) {
        double r = s->bpb[i] / (vs_best ? s->ref[i] : s->bpb0[i]);
        sum += r;
        max = fmax(max, r);
    }
    return s->p->objective == TUTTI_SEARCH_MAX_RATIO || s->p->objective == TUTTI_SEARCH_MAX_BEST ? max
                                                                                                 : sum / s->n_texts;
}

/* Fitness of a one-member ensemble over model (lower is better); *shown is
 * what the progress lines report (bits per byte, or accuracy). */
static int score_model(search *s, const tutti_model *model, double *fit, double *shown) {
    tutti_member_desc md = {.model_path = s->vocab_path, .weight = NAN, .temp = NAN};
    tutti_ensemble_params ep = tutti_ensemble_default_params();
    ep.members = &md;
    ep.n_members = 1;
    ep.align = TUTTI_ALIGN_TOKEN;
    ep.n_threads = s->p->n_threads;
    const tutti_model *models[1] = {model};
    ep.models = models;
    tutti_ensemble *e = tutti_ensemble_new(&ep);
    if (!e) return TUTTI_ERR;
    int rc = 0;
    if (s->n_texts) {
        for (int i = 0; rc == 0 && i < s->n_texts; i++) {
            tutti_bpb_result r;
            rc = tutti_ensemble_eval_bpb(e, s->texts[i], s->lens[i], &r);
            s->bpb[i] = r.member_bpb[0];
            if (rc == 0 && !(isfinite(r.member_bpb[0]) && r.member_bpb[0] > 0))
                rc =
                    tutti_set_error("merge search: text %d cannot be scored (a chunk longer than the context?)", i + 1);
        }
        if (rc == 0) *fit = *shown = text_fitness(s);
    } else {
        tutti_choices_result r;
        size_t n_ll = (size_t)s->p->n_items * TUTTI_MAX_CHOICES * 2;
        double *ll = malloc(sizeof(double) * n_ll);
        rc = ll ? tutti_ensemble_eval_choices(e, s->p->items, s->p->n_items, &r, ll, NULL, NULL)
                : tutti_set_error("merge search: out of memory");
        if (rc == 0) {
            double margin = 0;
            for (int32_t i = 0; i < s->p->n_items; i++) {
                const tutti_choice_item *it = &s->p->items[i];
                double best_other = -INFINITY, lab = ll[((size_t)i * TUTTI_MAX_CHOICES + (size_t)it->label) * 2];
                for (int32_t c = 0; c < it->n_choices; c++)
                    if (c != it->label)
                        best_other = fmax(best_other, ll[((size_t)i * TUTTI_MAX_CHOICES + (size_t)c) * 2]);
                margin += lab - best_other;
            }
            *shown = r.member_acc[0];
            *fit = 1 - r.member_acc[0] - 1e-4 * tanh(margin / s->p->n_items);
        }
        free(ll);
    }
    tutti_ensemble_free(e);
    return rc;
}

/* s->ref: each text's lowest bits per byte over the input models (each
 * loaded from its file and scored as a candidate is), for the *_BEST
 * objectives; it also sets the start point's place-holder so that these
 * evaluations are not taken for the start point. */
static int score_inputs(search *s) {
    for (int i = 0; i < s->n_texts; i++) s->ref[i] = INFINITY;
    bool had = s->have_start;
    s->have_start = true; /* text_fitness: bpb0 not yet known; the value is unused */
    int rc = 0;
    for (int k = 0; rc == 0 && k < s->n_src; k++) {
        tutti_model_params prm = tutti_model_default_params();
        tutti_model *m = tutti_model_load(s->src[k], &prm);
        double fit, shown;
        rc = m ? score_model(s, m, &fit, &shown) : TUTTI_ERR;
        for (int i = 0; rc == 0 && i < s->n_texts; i++) s->ref[i] = fmin(s->ref[i], s->bpb[i]);
        tutti_model_free(m);
    }
    s->have_start = had;
    return rc;
}

static int score_yaml(search *s, const char *yaml, double *fit, double *shown) {
    tutti_merge_config *c = tutti_merge_config_parse(yaml, strlen(yaml));
    if (!c) return TUTTI_ERR;
    tutti_merge_params mp = tutti_merge_default_params();
    void *img = NULL;
    size_t size = 0;
    int rc = merge_to_buffer(c, &mp, &img, &size);
    tutti_merge_config_free(c);
    tutti_model *m = NULL;
    if (rc == 0) {
        tutti_model_params prm = tutti_model_default_params();
        m = tutti_model_load_buffer(img, size, "(merge candidate)", &prm);
        if (!m) rc = TUTTI_ERR;
    }
    if (rc == 0) rc = score_model(s, m, fit, shown);
    tutti_model_free(m);
    free(img);
    s->n_evals++;
    return rc;
}

/* ---- setup ---- */

static int block_count(const char *path, int *n) {
    gguf_file *f = gguf_open(path);
    if (!f) return TUTTI_ERR;
    gguf_str a;
    int64_t v = 0;
    char key[96];
    int rc = 0;
    if (!gguf_get_str(f, "general.architecture", &a))
        rc = tutti_set_error("merge search: %s: no general.architecture", path);
    if (rc == 0) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)(a.len < 60 ? a.len : 60), a.data);
        if (!gguf_get_i64(f, key, &v) || v < 1 || v > 100000)
            rc = tutti_set_error("merge search: %s: no valid %s", path, key);
    }
    gguf_close(f);
    *n = (int)v;
    return rc;
}

static int setup(search *s, const tutti_merge_search_params *p) {
    memset(s, 0, sizeof *s);
    s->p = p;
    int m = merge_method_from_name(p->method ? p->method : "task_arithmetic");
    if (m < 0) return tutti_set_error("merge search: unknown method '%s' (%s)", p->method, merge_method_list());
    s->method = (merge_method)m;
    for (size_t i = 0; i < sizeof k_genes / sizeof *k_genes; i++)
        if (k_genes[i].m == s->method) s->g = &k_genes[i];
    if (!s->g)
        return tutti_set_error("merge search: %s has no per-model or per-layer parameters to search (searchable: "
                               "linear, nuslerp, multislerp, task_arithmetic, ties, dare_ties, dare_linear, "
                               "breadcrumbs, breadcrumbs_ties, della, della_linear, slerp, sce, nearswap)",
                               merge_method_name(s->method));
    if (p->n_models < 1 || p->n_models > MAX_MODELS || !p->models)
        return tutti_set_error("merge search: 1 to %d models (-m) are needed", MAX_MODELS);
    bool needs_base = s->method != MM_LINEAR && s->method != MM_NUSLERP && s->method != MM_MULTISLERP;
    if (needs_base && !p->base)
        return tutti_set_error("merge search: %s needs a base model (--base)", merge_method_name(s->method));
    int n_scores = (p->text != NULL) + (p->n_texts > 0) + (p->items != NULL);
    if (n_scores != 1)
        return tutti_set_error("merge search: give exactly one of a text, several texts (bits per byte) or choice "
                               "items (accuracy)");
    if (p->text) s->texts[0] = p->text, s->lens[0] = p->text_len, s->n_texts = 1;
    if (p->n_texts > 0) {
        if (p->n_texts < 2 || p->n_texts > MAX_TEXTS || !p->texts || !p->text_lens)
            return tutti_set_error("merge search: 2 to %d texts (or one text)", MAX_TEXTS);
        for (int i = 0; i < p->n_texts; i++) {
            if (!p->texts[i]) return tutti_set_error("merge search: text %d is NULL", i + 1);
            s->texts[i] = p->texts[i], s->lens[i] = p->text_lens[i];
        }
        s->n_texts = p->n_texts;
    }
    if (p->objective < TUTTI_SEARCH_MEAN_RATIO || p->objective > TUTTI_SEARCH_MAX_BEST)
        return tutti_set_error("merge search: unknown objective %d", (int)p->objective);
    if (p->items && p->n_items < 1) return tutti_set_error("merge search: no choice items");
    const char *type = p->type ? p->type : "F16";
    s->dtype = !strcasecmp(type, "F32")    ? "float32"
               : !strcasecmp(type, "F16")  ? "float16"
               : !strcasecmp(type, "BF16") ? "bfloat16"
                                           : NULL;
    if (!s->dtype)
        return tutti_set_error("merge search: the output type is F32, F16 or BF16 (the YAML's out_dtype); quantize "
                               "the result with tutti merge --config OUT.yaml --type %s",
                               type);
    if (p->base) s->src[s->n_src++] = p->base;
    for (int i = 0; i < p->n_models; i++) {
        if (p->base && !strcmp(p->models[i], p->base))
            return tutti_set_error("merge search: %s is both --base and -m", p->base);
        s->src[s->n_src++] = p->models[i];
    }
    for (int i = 0; i < s->n_src; i++) {
        for (const char *c = s->src[i]; *c; c++)
            if ((unsigned char)*c < 0x20) return tutti_set_error("merge search: model path with a control character");
        s->src_genes[i] = (p->base && i == 0) ? s->g->base_weighted : true;
    }
    s->vocab_path = s->src[0];
    for (int j = 0; j < 2; j++) s->n_src_genes += s->g->src[j].name != NULL;
    int n_gene_src = 0;
    for (int i = 0; i < s->n_src; i++) n_gene_src += s->src_genes[i];
    s->per_group = s->n_src_genes * n_gene_src + (s->g->slice.name ? 1 : 0);
    if (block_count(s->src[0], &s->n_layers)) return TUTTI_ERR;
    s->n_groups = p->layer_groups > 0 ? p->layer_groups : 1;
    if (s->n_groups > s->n_layers || s->n_groups > MAX_GROUPS)
        return tutti_set_error("merge search: %d layer groups for %d layers (at most one group per layer, %d in all)",
                               s->n_groups, s->n_layers, MAX_GROUPS);
    s->n_dims = s->per_group * s->n_groups;
    return 0;
}

/* " 1.2345 2.3456 ..." of v[n_texts] into s->buf. */
static void texts_line(search *s, const double *v) {
    size_t len = 0;
    s->buf[0] = 0;
    for (int i = 0; i < s->n_texts && len < sizeof s->buf - 16; i++)
        len += (size_t)snprintf(s->buf + len, sizeof s->buf - len, " %.4f", v[i]);
}

static void progress(const search *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const search *s, const char *fmt, ...) {
    if (!s->p->progress) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->p->progress(line, s->p->progress_user);
}

tutti_merge_search_params tutti_merge_search_default_params(void) {
    return (tutti_merge_search_params){.method = "task_arithmetic", .layer_groups = 1, .evals = 100};
}

char *tutti_merge_search(const tutti_merge_search_params *p, double *best_score) {
    search s;
    if (!p) return tutti_set_error("merge search: NULL parameters"), NULL;
    if (setup(&s, p)) return NULL;
    int budget = p->evals > 0 ? p->evals : 100;
    double *x0 = malloc(sizeof(double) * (size_t)s.n_dims), *fit = NULL, *shown = NULL;
    cmaes *es = NULL;
    char *best = NULL;
    double best_fit = INFINITY, best_shown = NAN;
    static const char *const units[] = {"mean ratio to the start's bits/byte", "max ratio to the start's bits/byte",
                                        "mean ratio to the best input's bits/byte",
                                        "max ratio to the best input's bits/byte"};
    const char *unit = s.n_texts == 1 ? "bits/byte" : s.n_texts ? units[p->objective] : "accuracy";
    bool vs_best = s.n_texts > 1 && (p->objective == TUTTI_SEARCH_MEAN_BEST || p->objective == TUTTI_SEARCH_MAX_BEST);
    int rc = x0 ? 0 : tutti_set_error("merge search: out of memory");
    for (int i = 0; rc == 0 && i < s.n_dims; i++) x0[i] = 0.5;
    if (rc == 0) {
        es = cmaes_new(s.n_dims, x0, 0.2, 0, p->seed);
        fit = malloc(sizeof(double) * (size_t)(es ? cmaes_lambda(es) : 1));
        shown = malloc(sizeof(double) * (size_t)(es ? cmaes_lambda(es) : 1));
        if (!es || !fit || !shown) rc = tutti_set_error("merge search: out of memory");
    }
    if (rc == 0 && vs_best) {
        rc = score_inputs(&s);
        texts_line(&s, s.ref);
        if (rc == 0) progress(&s, "search: the best input model's bits/byte per text:%s", s.buf);
        if (rc == 0 && p->ref_bpb) memcpy(p->ref_bpb, s.ref, sizeof(double) * (size_t)s.n_texts);
    }
    if (rc == 0) {
        progress(&s, "search: %s, %d genes (%d layer group%s), %d evaluations, %d candidates a generation, seed %llu",
                 merge_method_name(s.method), s.n_dims, s.n_groups, s.n_groups > 1 ? "s" : "", budget, cmaes_lambda(es),
                 (unsigned long long)p->seed);
        best = candidate_yaml(&s, x0);
        rc = best ? score_yaml(&s, best, &best_fit, &best_shown) : TUTTI_ERR;
        memcpy(s.best_bpb, s.bpb, sizeof s.bpb);
        if (rc == 0 && s.n_texts > 1) {
            texts_line(&s, s.bpb0);
            progress(&s, "search: start (every gene 0.5): %.4f %s; bits/byte per text:%s", best_shown, unit, s.buf);
        } else if (rc == 0) {
            progress(&s, "search: start (every gene 0.5): %.4f %s", best_shown, unit);
        }
    }
    for (int gen = 1; rc == 0 && s.n_evals < budget; gen++) {
        cmaes_ask(es);
        int lambda = cmaes_lambda(es), k = 0;
        double gen_best = INFINITY, gen_shown = NAN;
        for (; rc == 0 && k < lambda && s.n_evals < budget; k++) {
            char *y = candidate_yaml(&s, cmaes_candidate(es, k));
            rc = y ? score_yaml(&s, y, &fit[k], &shown[k]) : TUTTI_ERR;
            if (rc == 0 && fit[k] < gen_best) gen_best = fit[k], gen_shown = shown[k];
            if (rc == 0 && fit[k] < best_fit) {
                free(best);
                best = y, y = NULL;
                best_fit = fit[k], best_shown = shown[k];
                memcpy(s.best_bpb, s.bpb, sizeof s.bpb);
            }
            free(y);
        }
        if (rc) break;
        if (k == lambda) cmaes_tell(es, fit);
        s.buf[0] = 0;
        if (s.n_texts > 1) texts_line(&s, s.best_bpb);
        progress(&s, "search: generation %d, %lld/%d evaluations: best %.4f %s (this generation %.4f), sigma %.3f%s%s",
                 gen, (long long)s.n_evals, budget, best_shown, unit, gen_shown, cmaes_sigma(es),
                 s.n_texts > 1 ? "; best's bits/byte per text:" : "", s.buf);
    }
    if (rc == 0 && p->best_bpb && p->n_texts) memcpy(p->best_bpb, s.best_bpb, sizeof(double) * (size_t)p->n_texts);
    if (rc == 0 && p->start_bpb && p->n_texts) memcpy(p->start_bpb, s.bpb0, sizeof(double) * (size_t)p->n_texts);
    cmaes_free(es);
    free(x0), free(fit), free(shown);
    if (rc) {
        tutti_error_prefix("merge search (evaluation %lld)", (long long)s.n_evals);
        free(best);
        return NULL;
    }
    if (best_score) *best_score = best_shown;
    return best;
}
