/* The "pipelines" value of a config file -> pl_set (server/pipeline.h).
 *
 * Untrusted input (fuzzed: fuzz/fuzz_pipeline.c): every field is checked for
 * its type and range, names are short identifiers, templates are bounded,
 * and every failure is a message naming the pipeline, the step and the
 * field.  Templates are parsed once here into segments, so that running a
 * step only concatenates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/fail.h"
#include "server/pipeline.h"

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

/* names of the request's own texts, and the moa's {drafts}: never a step's */
static bool reserved(const char *s, size_t n) {
    return (n == 5 && !memcmp(s, "input", 5)) || (n == 8 && !memcmp(s, "messages", 8)) ||
           (n == 6 && !memcmp(s, "drafts", 6));
}

static bool step_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= PL_MAX_NAME || reserved(s, n)) return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i])) return false;
    return true;
}

static void step_init(pl_step *s) {
    memset(s, 0, sizeof *s);
    s->max_tokens = -1;
    s->temperature = s->top_p = s->min_p = s->repeat_penalty = NAN;
    s->top_k = INT32_MIN;
    s->seed = -1;
}

static void step_free(pl_step *s) {
    free(s->name);
    free(s->model);
    free(s->prompt);
    free(s->segs);
    for (int k = 0; k < s->n_stop; k++) free(s->stop[k]);
    free(s->grammar);
    free(s->json_schema);
}

void pl_set_free(pl_set *set) {
    for (int i = 0; i < set->n; i++) {
        pl_pipeline *p = &set->items[i];
        for (int k = 0; k < p->n_steps; k++) step_free(&p->steps[k]);
        free(p->steps);
        free(p->name);
    }
    free(set->items);
    memset(set, 0, sizeof *set);
}

const pl_pipeline *pl_set_find(const pl_set *set, const char *name) {
    for (int i = 0; set && i < set->n; i++)
        if (!strcmp(set->items[i].name, name)) return &set->items[i];
    return NULL;
}

/* ---- fields ---- */

/* A number field in [lo, hi] (integral when integral): 1 read, 0 absent
 * (or null), -1 wrong (message in err). */
static int get_num(const cJSON *o, const char *key, double lo, double hi, bool integral, double *v, const char *where,
                   char *err, size_t cap) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return 0;
    double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    if (!isfinite(d) || d < lo || d > hi || (integral && d != floor(d)))
        return srv_fail(err, cap, "%s: '%s' must be %s in [%g, %g]", where, key, integral ? "an integer" : "a number",
                        lo, hi);
    *v = d;
    return 1;
}

static int get_str(const cJSON *o, const char *key, char **out, size_t max, const char *where, char *err, size_t cap) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsString(x) || strlen(x->valuestring) > max)
        return srv_fail(err, cap, "%s: '%s' must be a string of at most %zu bytes", where, key, max);
    free(*out);
    if (!(*out = strdup(x->valuestring))) return srv_fail(err, cap, "out of memory");
    return 1;
}

static int get_stop(const cJSON *o, pl_step *s, const char *where, char *err, size_t cap) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!x || cJSON_IsNull(x)) return 0;
    const cJSON *one = cJSON_IsString(x) ? x : NULL, *it;
    if (!one && (!cJSON_IsArray(x) || cJSON_GetArraySize(x) > PL_MAX_STOP))
        return srv_fail(err, cap, "%s: 'stop' must be a string or an array of at most %d strings", where, PL_MAX_STOP);
    for (int k = 0; k < s->n_stop; k++) free(s->stop[k]);
    s->n_stop = 0;
    for (it = one ? one : x->child; it; it = one ? NULL : it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) > 1024)
            return srv_fail(err, cap, "%s: 'stop' strings must be non-empty, at most 1024 bytes", where);
        if (!(s->stop[s->n_stop] = strdup(it->valuestring))) return srv_fail(err, cap, "out of memory");
        s->n_stop++;
    }
    return 0;
}

/* The sampling and limit fields (steps, and a moa's for all of its steps). */
static int get_sampling(const cJSON *o, pl_step *s, const char *where, char *err, size_t cap) {
    double v = 0;
    int r;
    if ((r = get_num(o, "max_tokens", 0, 1 << 24, true, &v, where, err, cap)) < 0) return -1;
    if (r) s->max_tokens = (int32_t)v;
    if ((r = get_num(o, "temperature", 0, 100, false, &v, where, err, cap)) < 0) return -1;
    if (r) s->temperature = (float)v;
    if ((r = get_num(o, "top_k", 0, 1 << 24, true, &v, where, err, cap)) < 0) return -1;
    if (r) s->top_k = (int32_t)v;
    if ((r = get_num(o, "top_p", 0, 1, false, &v, where, err, cap)) < 0) return -1;
    if (r) s->top_p = (float)v;
    if ((r = get_num(o, "min_p", 0, 1, false, &v, where, err, cap)) < 0) return -1;
    if (r) s->min_p = (float)v;
    if ((r = get_num(o, "repeat_penalty", 0.01, 100, false, &v, where, err, cap)) < 0) return -1;
    if (r) s->repeat_penalty = (float)v;
    /* seeds up to 2^53: every one a JSON number holds exactly */
    if ((r = get_num(o, "seed", 0, 9007199254740992.0, true, &v, where, err, cap)) < 0) return -1;
    if (r) s->seed = (int64_t)v;
    if ((r = get_num(o, "timeout", 0.001, 86400, false, &v, where, err, cap)) < 0) return -1;
    if (r) s->timeout_s = v;
    const cJSON *ie = cJSON_GetObjectItemCaseSensitive(o, "ignore_eos");
    if (ie && !cJSON_IsNull(ie) && !cJSON_IsBool(ie))
        return srv_fail(err, cap, "%s: 'ignore_eos' must be true or false", where);
    s->ignore_eos = cJSON_IsTrue(ie);
    return get_stop(o, s, where, err, cap);
}

/* "grammar", "json_schema" or "json": compiled once to check them. */
static int get_constraint(const cJSON *o, pl_step *s, const char *where, char *err, size_t cap) {
    int n = 0;
    if (get_str(o, "grammar", &s->grammar, 1 << 20, where, err, cap) < 0) return -1;
    n += s->grammar != NULL;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(o, "json_schema");
    if (js && !cJSON_IsNull(js)) {
        if (!cJSON_IsObject(js)) return srv_fail(err, cap, "%s: 'json_schema' must be an object", where);
        if (!(s->json_schema = cJSON_PrintUnformatted(js))) return srv_fail(err, cap, "out of memory");
        n++;
    }
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "json");
    if (j && !cJSON_IsNull(j) && !cJSON_IsBool(j)) return srv_fail(err, cap, "%s: 'json' must be true or false", where);
    s->json = cJSON_IsTrue(j);
    n += s->json;
    if (n > 1) return srv_fail(err, cap, "%s: give one of 'grammar', 'json_schema' and 'json'", where);
    tutti_grammar *g = s->grammar       ? tutti_grammar_parse(s->grammar, strlen(s->grammar))
                       : s->json_schema ? tutti_grammar_from_json_schema(s->json_schema, strlen(s->json_schema))
                                        : NULL;
    if ((s->grammar || s->json_schema) && !g)
        return srv_fail(err, cap, "%s: '%s': %s", where, s->grammar ? "grammar" : "json_schema", tutti_last_error());
    tutti_grammar_free(g);
    return 0;
}

/* ---- templates and the graph ---- */

static int find_step(const pl_pipeline *p, const char *s, size_t n) {
    for (int k = 0; k < p->n_steps; k++)
        if (strlen(p->steps[k].name) == n && !memcmp(p->steps[k].name, s, n)) return k;
    return -1;
}

static int add_seg(pl_step *s, int kind, const char *text, size_t len, int step) {
    if (kind == PL_SEG_TEXT && s->n_segs && s->segs[s->n_segs - 1].kind == PL_SEG_TEXT &&
        s->segs[s->n_segs - 1].text + s->segs[s->n_segs - 1].len == text) {
        s->segs[s->n_segs - 1].len += len; /* contiguous literal text */
        return 0;
    }
    pl_seg *g = realloc(s->segs, sizeof *g * (size_t)(s->n_segs + 1));
    if (!g) return -1;
    s->segs = g;
    s->segs[s->n_segs++] = (pl_seg){.kind = kind, .text = text, .len = len, .step = step};
    return 0;
}

static void step_names(const pl_pipeline *p, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int k = 0; k < p->n_steps && o + 1 < cap; k++) {
        int w = snprintf(out + o, cap - o, "%s%s", k ? ", " : "", p->steps[k].name);
        if (w < 0 || (size_t)w >= cap - o) break;
        o += (size_t)w;
    }
}

/* {NAME} is a reference when NAME is made of name characters; {{ and }}
 * are literal braces; any other brace is literal text (JSON in a prompt
 * needs no escaping unless it looks like a reference). */
static int parse_template(const pl_pipeline *p, pl_step *s, char *err, size_t cap) {
    const char *t = s->prompt;
    for (size_t i = 0; t[i];) {
        if ((t[i] == '{' && t[i + 1] == '{') || (t[i] == '}' && t[i + 1] == '}')) {
            if (add_seg(s, PL_SEG_TEXT, t + i, 1, 0) < 0) return srv_fail(err, cap, "out of memory");
            i += 2;
            continue;
        }
        size_t k = i + 1;
        while (t[i] == '{' && name_char(t[k])) k++;
        if (t[i] != '{' || k == i + 1 || t[k] != '}') {
            if (add_seg(s, PL_SEG_TEXT, t + i, 1, 0) < 0) return srv_fail(err, cap, "out of memory");
            i++;
            continue;
        }
        const char *nm = t + i + 1;
        size_t n = k - i - 1;
        int kind = n == 5 && !memcmp(nm, "input", 5)      ? PL_SEG_INPUT
                   : n == 8 && !memcmp(nm, "messages", 8) ? PL_SEG_MESSAGES
                                                          : PL_SEG_STEP;
        int ref = kind == PL_SEG_STEP ? find_step(p, nm, n) : 0;
        if (ref < 0) {
            char names[1024];
            step_names(p, names, sizeof names);
            return srv_fail(err, cap,
                            "pipeline '%s': step '%s': the prompt refers to {%.*s}, which is no step of this pipeline "
                            "(its steps: %s) nor {input} or {messages}",
                            p->name, s->name, (int)(n > 64 ? 64 : n), nm, names);
        }
        if (add_seg(s, kind, NULL, 0, ref) < 0) return srv_fail(err, cap, "out of memory");
        if (kind == PL_SEG_STEP) s->deps |= (uint64_t)1 << ref;
        i = k + 1;
    }
    return 0;
}

/* Depth-first search for a cycle through the references; the first one
 * found is named step by step. */
static int dfs(const pl_pipeline *p, int v, char *color, int *path, int depth, char *err, size_t cap) {
    color[v] = 1;
    path[depth] = v;
    for (int w = 0; w < p->n_steps; w++) {
        if (!(p->steps[v].deps >> w & 1)) continue;
        if (color[w] == 1) {
            size_t o = (size_t)snprintf(err, cap, "pipeline '%s': the steps' references form a cycle: ", p->name);
            int from = depth;
            while (from > 0 && path[from] != w) from--;
            /* the path runs along "v refers to w": print it as who needs whom */
            for (int k = from; k <= depth && o < cap; k++)
                o += (size_t)snprintf(err + o, cap - o, "'%s' needs ", p->steps[path[k]].name);
            if (o < cap) snprintf(err + o, cap - o, "'%s'", p->steps[w].name);
            return -1;
        }
        if (!color[w] && dfs(p, w, color, path, depth + 1, err, cap) < 0) return -1;
    }
    color[v] = 2;
    return 0;
}

static int check_graph(const pl_pipeline *p, char *err, size_t cap) {
    char color[PL_MAX_STEPS] = {0};
    int path[PL_MAX_STEPS];
    for (int v = 0; v < p->n_steps; v++)
        if (!color[v] && dfs(p, v, color, path, 0, err, cap) < 0) return -1;
    return 0;
}

/* ---- steps and pipelines ---- */

static pl_step *new_step(pl_pipeline *p, const char *name, const char *model, char *err, size_t cap) {
    if (p->n_steps == PL_MAX_STEPS)
        return srv_fail(err, cap, "pipeline '%s': more than %d steps", p->name, PL_MAX_STEPS), NULL;
    if (!step_name_ok(name))
        return srv_fail(
                   err, cap,
                   "pipeline '%s': step name '%.64s' must be 1 to %d of A-Z a-z 0-9 _ . - and not input, messages or "
                   "drafts",
                   p->name, name, PL_MAX_NAME - 1),
               NULL;
    if (find_step(p, name, strlen(name)) >= 0)
        return srv_fail(err, cap, "pipeline '%s': two steps are named '%s'", p->name, name), NULL;
    pl_step *s = &p->steps[p->n_steps];
    step_init(s);
    if (!(s->name = strdup(name)) || !(s->model = strdup(model))) {
        step_free(s);
        return srv_fail(err, cap, "out of memory"), NULL;
    }
    p->n_steps++;
    return s;
}

static int step_model(const cJSON *o, const char *key, const char *where, pl_has_model_fn has_model, void *user,
                      const char **out, char *err, size_t cap) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(m) || !m->valuestring[0] || strlen(m->valuestring) > 255)
        return srv_fail(err, cap, "%s: '%s' must be a model's name", where, key);
    if (has_model && !has_model(user, m->valuestring))
        return srv_fail(err, cap,
                        "%s: model '%.255s' is not a served model (a loaded model's name, 'default', or a config "
                        "ensemble's name)",
                        where, m->valuestring);
    *out = m->valuestring;
    return 0;
}

static int explicit_steps(pl_pipeline *p, const cJSON *item, pl_has_model_fn has_model, void *user, char *err,
                          size_t cap) {
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(item, "steps"), *it;
    if (!cJSON_IsArray(steps) || !steps->child)
        return srv_fail(err, cap, "pipeline '%s': 'steps' must be a non-empty array (or give 'moa')", p->name);
    int k = 0;
    cJSON_ArrayForEach(it, steps) {
        char where[256];
        snprintf(where, sizeof where, "pipeline '%s': steps[%d]", p->name, k++);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        const char *model;
        if (!cJSON_IsObject(it) || !cJSON_IsString(nm))
            return srv_fail(err, cap, "%s: a step is an object with a string 'name'", where);
        snprintf(where, sizeof where, "pipeline '%s': step '%.64s'", p->name, nm->valuestring);
        if (step_model(it, "model", where, has_model, user, &model, err, cap) < 0) return -1;
        pl_step *s = new_step(p, nm->valuestring, model, err, cap);
        if (!s || get_str(it, "prompt", &s->prompt, PL_MAX_TEMPLATE, where, err, cap) < 0 ||
            get_sampling(it, s, where, err, cap) < 0 || get_constraint(it, s, where, err, cap) < 0)
            return -1;
    }
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(item, "output");
    p->output = p->n_steps - 1;
    if (out && !cJSON_IsNull(out)) {
        p->output = cJSON_IsString(out) ? find_step(p, out->valuestring, strlen(out->valuestring)) : -1;
        if (p->output < 0) return srv_fail(err, cap, "pipeline '%s': 'output' must name one of its steps", p->name);
    }
    return 0;
}

/* the moa's sampling fields, copied into each of its steps */
static int copy_sampling(pl_step *s, const pl_step *base, char *err, size_t cap) {
    s->max_tokens = base->max_tokens, s->temperature = base->temperature, s->top_k = base->top_k;
    s->top_p = base->top_p, s->min_p = base->min_p, s->repeat_penalty = base->repeat_penalty;
    s->timeout_s = base->timeout_s;
    s->ignore_eos = base->ignore_eos;
    s->seed = base->seed;
    for (int k = 0; k < base->n_stop; k++) {
        if (!(s->stop[k] = strdup(base->stop[k]))) return srv_fail(err, cap, "out of memory");
        s->n_stop = k + 1;
    }
    return 0;
}

/* aggregate-and-synthesize prompt: {drafts} replaced by the numbered
 * references to the layer's steps */
static char *moa_prompt(const char *tmpl, const pl_pipeline *p, int first, int n) {
    char drafts[PL_MAX_STEPS * (PL_MAX_NAME + 16)]; /* n <= PL_MAX_STEPS items of at most PL_MAX_NAME + 8 bytes */
    size_t nd = 0, count = 0;
    for (int k = 0; k < n; k++)
        nd += (size_t)snprintf(drafts + nd, sizeof drafts - nd, "%s%d. {%s}", k ? "\n" : "", k + 1,
                               p->steps[first + k].name);
    for (const char *t = strstr(tmpl, "{drafts}"); t; t = strstr(t + 8, "{drafts}")) count++;
    char *out = malloc(strlen(tmpl) + count * nd + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (const char *t = tmpl; *t;) {
        if (!strncmp(t, "{drafts}", 8)) {
            memcpy(out + o, drafts, nd);
            o += nd, t += 8;
        } else {
            out[o++] = *t++;
        }
    }
    out[o] = 0;
    return out;
}

static const char moa_default_aggregate[] =
    "Below are several draft answers to the request that follows them. Some may be wrong or incomplete. "
    "Write one answer of your own that keeps what is right in them and corrects what is not.\n\n"
    "Drafts:\n{drafts}\n\nRequest:\n{input}\n\nAnswer:\n";

static int moa_steps(pl_pipeline *p, const cJSON *moa, pl_has_model_fn has_model, void *user, char *err, size_t cap) {
    char where[256];
    snprintf(where, sizeof where, "pipeline '%s': moa", p->name);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(moa, "proposers"), *it;
    const char *agg;
    double layers = 1;
    if (!cJSON_IsObject(moa) || !cJSON_IsArray(props) || !props->child)
        return srv_fail(err, cap, "%s: needs 'proposers', a non-empty array of model names, and 'aggregator'", where);
    int n_prop = cJSON_GetArraySize(props);
    if (step_model(moa, "aggregator", where, has_model, user, &agg, err, cap) < 0 ||
        get_num(moa, "layers", 1, 16, true, &layers, where, err, cap) < 0)
        return -1;
    if ((double)n_prop * layers + 1 > PL_MAX_STEPS)
        return srv_fail(err, cap, "%s: %d proposers x %d layers + 1 aggregator is more than %d steps", where, n_prop,
                        (int)layers, PL_MAX_STEPS);
    pl_step base;
    step_init(&base);
    char *prompt = NULL, *aggp = NULL;
    int rc = get_sampling(moa, &base, where, err, cap);
    if (rc == 0) rc = get_str(moa, "prompt", &prompt, PL_MAX_TEMPLATE, where, err, cap);
    if (rc >= 0) rc = get_str(moa, "aggregator_prompt", &aggp, PL_MAX_TEMPLATE, where, err, cap);
    for (int l = 0; rc >= 0 && l < (int)layers; l++) {
        int k = 0, first = p->n_steps;
        cJSON_ArrayForEach(it, props) {
            char name[PL_MAX_NAME], w2[300];
            snprintf(name, sizeof name, "l%d.p%d", l + 1, ++k);
            snprintf(w2, sizeof w2, "%s: proposers[%d]", where, k - 1);
            const char *model = cJSON_IsString(it) ? it->valuestring : NULL;
            if (!model || (has_model && !has_model(user, model))) {
                rc = srv_fail(err, cap, "%s: '%.255s' is not a served model's name", w2,
                              model ? model : "(not a string)");
                break;
            }
            pl_step *s = new_step(p, name, model, err, cap);
            if (!s || copy_sampling(s, &base, err, cap) < 0) {
                rc = -1;
                break;
            }
            if (base.seed >= 0) s->seed = base.seed + p->n_steps - 1;
            s->prompt = l == 0 ? strdup(prompt ? prompt : "{input}")
                               : moa_prompt(aggp ? aggp : moa_default_aggregate, p, first - n_prop, n_prop);
            if (!s->prompt) rc = srv_fail(err, cap, "out of memory");
        }
    }
    pl_step *s = rc < 0 ? NULL : new_step(p, "aggregator", agg, err, cap);
    if (s && (rc = copy_sampling(s, &base, err, cap)) == 0) {
        if (base.seed >= 0) s->seed = base.seed + p->n_steps - 1;
        if (!(s->prompt = moa_prompt(aggp ? aggp : moa_default_aggregate, p, p->n_steps - 1 - n_prop, n_prop)))
            rc = srv_fail(err, cap, "out of memory");
    } else if (!s) {
        rc = -1;
    }
    p->output = p->n_steps - 1;
    free(prompt);
    free(aggp);
    step_free(&base);
    return rc < 0 ? -1 : 0;
}

static int parse_one(pl_set *set, const cJSON *item, int idx, pl_has_model_fn has_model, pl_has_model_fn taken,
                     void *user, char *err, size_t cap) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(item, "name");
    if (!cJSON_IsObject(item) || !cJSON_IsString(nm) || !nm->valuestring[0] || strlen(nm->valuestring) > 255)
        return srv_fail(err, cap, "pipelines[%d]: a pipeline is an object with a 'name' (1 to 255 bytes)", idx);
    if (pl_set_find(set, nm->valuestring) || (taken && taken(user, nm->valuestring)))
        return srv_fail(err, cap, "pipelines[%d]: the name '%s' is taken (by a model or another pipeline)", idx,
                        nm->valuestring);
    pl_pipeline *p = &set->items[set->n];
    memset(p, 0, sizeof *p);
    if (!(p->name = strdup(nm->valuestring)) || !(p->steps = calloc(PL_MAX_STEPS, sizeof *p->steps))) {
        free(p->name);
        free(p->steps);
        return srv_fail(err, cap, "out of memory");
    }
    set->n++; /* owned by the set from here: freed with it on any error */
    const cJSON *moa = cJSON_GetObjectItemCaseSensitive(item, "moa");
    if (moa && cJSON_GetObjectItemCaseSensitive(item, "steps"))
        return srv_fail(err, cap, "pipeline '%s': give 'steps' or 'moa', not both", p->name);
    p->moa = moa != NULL;
    if ((moa ? moa_steps(p, moa, has_model, user, err, cap) : explicit_steps(p, item, has_model, user, err, cap)) < 0)
        return -1;
    for (int k = 0; k < p->n_steps; k++) {
        pl_step *s = &p->steps[k];
        if (!s->prompt && !(s->prompt = strdup("{input}"))) return srv_fail(err, cap, "out of memory");
        if (parse_template(p, s, err, cap) < 0) return -1;
    }
    return check_graph(p, err, cap);
}

int pl_set_parse(pl_set *set, const cJSON *pipelines, pl_has_model_fn has_model, pl_has_model_fn taken, void *user,
                 char *err, size_t cap) {
    memset(set, 0, sizeof *set);
    if (!pipelines || cJSON_IsNull(pipelines)) return 0;
    if (!cJSON_IsArray(pipelines) || cJSON_GetArraySize(pipelines) > 256)
        return srv_fail(err, cap, "'pipelines' must be an array of at most 256 pipelines");
    int n = cJSON_GetArraySize(pipelines), k = 0;
    if (n == 0) return 0;
    if (!(set->items = calloc((size_t)n, sizeof *set->items))) return srv_fail(err, cap, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, pipelines) {
        if (parse_one(set, it, k++, has_model, taken, user, err, cap) < 0) return -1;
    }
    return 0;
}
