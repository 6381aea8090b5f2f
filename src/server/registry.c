/* Served models: every loaded file alone (under its file name without
 * .gguf), "default" (the command line's ensemble), and the config file's
 * named ensembles.
 *
 * Config file (--config FILE, JSON):
 *   {
 *     "models":    [ {"path": "a.gguf", "name": "small"} ],
 *     "ensembles": [ {"name": "fused", "members": ["small", "b"],
 *                     "weights": [0.7, 0.3], "temperatures": [1, 1.2],
 *                     "rule": "product", "align": "byte"} ]
 *   }
 * "models" loads more files or renames command-line ones (same file: the
 * entry's name replaces the file name; a file named twice by entries keeps
 * both names); relative paths are relative to the config file's folder.  A
 * path may be a remote member's URL (docs/remote-members.md).  Ensemble
 * members are served names of single models; weights, temperatures, rule
 * and align are optional (defaults as `tutti run`) and go through the
 * library's validator.  Without -m/-e, "default" is the first config
 * ensemble (or the first model).
 *
 * Two phases: srv_registry_plan reads every file that names models (config,
 * ensemble file, chat template) and checks that every model file opens as
 * GGUF, before the server listens; srv_registry_load then loads them. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "server/fail.h"
#include "server/pipeline_srv.h"
#include "server/server.h"

bool srv_is_url(const char *path) { return !strncmp(path, "http://", 7) || !strncmp(path, "https://", 8); }

/* A file's served name: its file name without .gguf; a remote member's
 * MODEL (after '#'), else its host and port. */
static char *file_stem(const char *path) {
    const char *b, *e;
    if (srv_is_url(path)) {
        const char *h = strchr(path, '#');
        if (h && h[1] && h[1] != ';' && !strchr(h + 1, '=')) b = h + 1, e = strchr(b, ';');
        else {
            b = strstr(path, "://") + 3;
            const char *at = strchr(b, '@'), *sl = strpbrk(b, "/#?");
            if (at && (!sl || at < sl)) b = at + 1; /* never a user name or password */
            e = strpbrk(b, "/#?;");
        }
        if (!e) e = b + strlen(b);
    } else {
        b = strrchr(path, '/');
        b = b ? b + 1 : path;
        e = b + strlen(b);
        if (e - b > 5 && !strcmp(e - 5, ".gguf")) e -= 5;
    }
    size_t n = (size_t)(e - b);
    char *s = malloc(n + 1);
    if (s) memcpy(s, b, n), s[n] = 0;
    return s;
}

static bool same_file(const char *a, const char *b) {
    if (srv_is_url(a) || srv_is_url(b)) return !strcmp(a, b);
    struct stat sa, sb;
    if (stat(a, &sa) < 0 || stat(b, &sb) < 0) return !strcmp(a, b);
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static bool file_has_name(const srv_file *f, const char *name) {
    if (!strcmp(f->name, name)) return true;
    for (int k = 0; k < f->n_aliases; k++)
        if (!strcmp(f->aliases[k], name)) return true;
    return false;
}

int srv_registry_file_index(const srv_registry *reg, const char *name) {
    for (int i = 0; i < reg->n_files; i++)
        if (file_has_name(&reg->files[i], name)) return i;
    return -1;
}

static bool name_taken(const srv_registry *reg, const char *name) {
    if (srv_registry_file_index(reg, name) >= 0) return true;
    for (int i = 0; i < reg->n_specs; i++)
        if (!strcmp(reg->specs[i].name, name)) return true;
    return false;
}

/* A local model file opens and starts with GGUF's magic (the full check is
 * the load's). */
static int check_gguf(const char *path, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return srv_fail(err, cap, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    char magic[4] = {0};
    bool dir = fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode);
    size_t n = dir ? 0 : fread(magic, 1, 4, f);
    fclose(f);
    if (dir) return srv_fail(err, cap, "%s is a directory, not a GGUF file", path);
    if (n != 4 || memcmp(magic, "GGUF", 4)) return srv_fail(err, cap, "%s is not a GGUF file", path);
    return 0;
}

static int add_local_file(srv_registry *reg, const char *path, const char *name, char *err, size_t cap);

/* Adds (or finds) a file, a model spec "hf://..." by its cached file (named
 * after it); returns its index or -1. */
#define add_file srv_registry_add_file_named
int srv_registry_add_file_named(srv_registry *reg, const char *path, const char *name, char *err, size_t cap) {
    char *local = tutti_hub_resolve(path);
    if (!local) return srv_fail(err, cap, "%s", tutti_last_error());
    int i = add_local_file(reg, local, name, err, cap);
    free(local);
    return i;
}

/* Adds (or finds) a file by identity; name: the name a config entry gives
 * (NULL: the file's own).  Returns its index or -1. */
static int add_local_file(srv_registry *reg, const char *path, const char *name, char *err, size_t cap) {
    for (int i = 0; i < reg->n_files; i++) {
        srv_file *f = &reg->files[i];
        if (!same_file(f->path, path)) continue;
        if (!name || file_has_name(f, name)) return i;
        if (name_taken(reg, name)) return srv_fail(err, cap, "model name '%s' is used twice", name);
        if (!f->named) { /* a command-line file renamed by the config */
            free(f->name);
            f->name = strdup(name);
            f->named = true;
            return f->name ? i : srv_fail(err, cap, "out of memory");
        }
        /* named twice: both names serve it */
        char **a = realloc(f->aliases, sizeof *a * (size_t)(f->n_aliases + 1));
        if (!a) return srv_fail(err, cap, "out of memory");
        f->aliases = a;
        if (!(a[f->n_aliases] = strdup(name))) return srv_fail(err, cap, "out of memory");
        f->n_aliases++;
        return i;
    }
    if (reg->n_files == SRV_MAX_FILES) return srv_fail(err, cap, "at most %d model files", SRV_MAX_FILES);
    if (!srv_is_url(path) && check_gguf(path, err, cap) < 0) return -1;
    srv_file *f = realloc(reg->files, sizeof *f * (size_t)(reg->n_files + 1));
    if (!f) return srv_fail(err, cap, "out of memory");
    reg->files = f;
    srv_file *nf = &f[reg->n_files];
    memset(nf, 0, sizeof *nf);
    char *stem = name ? strdup(name) : file_stem(path);
    if (!stem) return srv_fail(err, cap, "out of memory");
    /* two files with the same stem: the later ones get -2, -3, ... */
    for (int k = 2; name_taken(reg, stem); k++) {
        if (name) {
            free(stem);
            return srv_fail(err, cap, "model name '%s' is used twice", name);
        }
        char *base = file_stem(path), buf[512];
        snprintf(buf, sizeof buf, "%s-%d", base ? base : "model", k);
        free(base);
        free(stem);
        stem = strdup(buf);
        if (!stem) return srv_fail(err, cap, "out of memory");
    }
    nf->path = strdup(path);
    nf->name = stem;
    nf->named = name != NULL;
    if (!nf->path) return free(stem), srv_fail(err, cap, "out of memory");
    return reg->n_files++;
}

static srv_spec *add_spec(srv_registry *reg, const char *name, char *err, size_t cap) {
    if (name_taken(reg, name)) return srv_fail(err, cap, "model name '%s' is used twice", name), NULL;
    srv_spec *s = realloc(reg->specs, sizeof *s * (size_t)(reg->n_specs + 1));
    if (!s) return srv_fail(err, cap, "out of memory"), NULL;
    reg->specs = s;
    srv_spec *n = &s[reg->n_specs++];
    memset(n, 0, sizeof *n);
    n->name = strdup(name);
    n->rule = TUTTI_RULE_MIX;
    n->align = TUTTI_ALIGN_AUTO;
    for (int i = 0; i < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) n->w[i] = n->t[i] = NAN;
    return n;
}

void srv_spec_make_key(srv_spec *s) {
    size_t o = 0;
    /* one member always fuses per token; more are resolved at start-up */
    s->align_used = s->n == 1 ? TUTTI_ALIGN_TOKEN : s->align != TUTTI_ALIGN_AUTO ? s->align : -1;
    /* the context weights by a hash of their bytes (FNV-1a: the coefficients would not fit) */
    uint64_t h = 1469598103934665603ull;
    const unsigned char *cb = (const unsigned char *)&s->ctx;
    for (size_t k = 0; s->ctx.n_features > 0 && k < sizeof s->ctx; k++) h = (h ^ cb[k]) * 1099511628211ull;
    o += (size_t)snprintf(s->key + o, sizeof s->key - o, "r%d a%d ad%d:%a ro%a cw%d:%llx se%d:%a", s->rule, s->align,
                          s->adapt, s->adapt_alpha, s->route, s->ctx.n_features, (unsigned long long)h, s->select,
                          s->select ? s->select_thresh : 0.0);
    for (int i = 0; i < s->n && o < sizeof s->key; i++)
        o += (size_t)snprintf(s->key + o, sizeof s->key - o, " %d:%a:%a", s->file[i], (double)s->w[i], (double)s->t[i]);
}

/* A spec's weights and temperatures through the library's validator. */
int srv_spec_check(const srv_spec *s) {
    for (int i = 0; i < s->n; i++)
        if (tutti_check_temp(i + 1, s->t[i]) < 0) return TUTTI_ERR;
    if (tutti_check_context(&s->ctx, s->n) < 0 || (s->select && tutti_check_select(s->select_thresh) < 0))
        return TUTTI_ERR;
    return tutti_check_weights(s->w, s->n, (tutti_fusion_rule)s->rule);
}

static int float_array(const cJSON *a, int n, float *out) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return -1;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || fabs(it->valuedouble) > 3e38) return -1;
        out[k++] = (float)it->valuedouble;
    }
    return 0;
}

static cJSON *read_config(const char *path, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return srv_fail(err, cap, "--config: cannot open %s: %s", path, strerror(errno)), NULL;
    char *buf = NULL;
    size_t n = 0, c = 0;
    for (;;) {
        if (n + 4096 > c) {
            char *b = realloc(buf, c = (c + 4096) * 2);
            if (!b) break;
            buf = b;
        }
        size_t r = fread(buf + n, 1, c - n, f);
        n += r;
        if (!r) break;
    }
    fclose(f);
    if (!buf) return srv_fail(err, cap, "--config: out of memory"), NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, n, &end, false);
    size_t pos = end && end >= buf && end <= buf + n ? (size_t)(end - buf) : 0;
    free(buf);
    if (!root) return srv_fail(err, cap, "--config %s: malformed JSON at byte %zu", path, pos), NULL;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    const cJSON *ens = cJSON_GetObjectItemCaseSensitive(root, "ensembles");
    if (!cJSON_IsObject(root) || (models && !cJSON_IsArray(models)) || (ens && !cJSON_IsArray(ens))) {
        cJSON_Delete(root);
        return srv_fail(err, cap, "--config %s: must be an object with optional arrays 'models' and 'ensembles'", path),
               NULL;
    }
    return root;
}

static int config_models(srv_registry *reg, const cJSON *models, const char *path, char *err, size_t cap) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, models) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "path");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsString(p) || (nm && !cJSON_IsString(nm)) || (nm && !nm->valuestring[0]))
            return srv_fail(err, cap, "--config %s: models[%d] needs a string 'path' and an optional non-empty 'name'",
                            path, k);
        char full[PATH_MAX * 2];
        if (p->valuestring[0] == '/' || srv_is_url(p->valuestring) || tutti_is_hub_spec(p->valuestring))
            snprintf(full, sizeof full, "%s", p->valuestring);
        else snprintf(full, sizeof full, "%s/%s", d, p->valuestring);
        if (add_file(reg, full, nm ? nm->valuestring : NULL, err, cap) < 0) return -1;
        k++;
    }
    return 0;
}

static int config_ensemble(srv_registry *reg, const cJSON *it, int k, const char *path, char *err, size_t cap) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(it, "members");
    if (!cJSON_IsString(nm) || !nm->valuestring[0] || !cJSON_IsArray(mem) || cJSON_GetArraySize(mem) < 1 ||
        cJSON_GetArraySize(mem) > TUTTI_ENSEMBLE_MAX_MEMBERS)
        return srv_fail(err, cap, "--config %s: ensembles[%d] needs a 'name' and 'members' (1 to %d model names)", path,
                        k, TUTTI_ENSEMBLE_MAX_MEMBERS);
    const char *name = nm->valuestring;
    srv_spec *s = add_spec(reg, name, err, cap);
    if (!s) return -1;
    const cJSON *m;
    cJSON_ArrayForEach(m, mem) {
        int fi = cJSON_IsString(m) ? srv_registry_file_index(reg, m->valuestring) : -1;
        if (fi < 0)
            return srv_fail(err, cap, "--config %s: ensemble '%s': member %s is not a loaded model's name", path, name,
                            cJSON_IsString(m) ? m->valuestring : "(not a string)");
        s->file[s->n++] = fi;
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(it, "weights");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "temperatures");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "rule");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(it, "align");
    if ((w && float_array(w, s->n, s->w) < 0) || (t && float_array(t, s->n, s->t) < 0))
        return srv_fail(err, cap,
                        "--config %s: ensemble '%s': weights and temperatures need one finite number per member", path,
                        name);
    if ((r && (!cJSON_IsString(r) || (s->rule = tutti_rule_parse(r->valuestring)) < 0)) ||
        (a && (!cJSON_IsString(a) || (s->align = tutti_align_parse(a->valuestring)) < 0)))
        return srv_fail(err, cap, "--config %s: ensemble '%s': unknown rule or align", path, name);
    if (srv_spec_check(s) < 0)
        return srv_fail(err, cap, "--config %s: ensemble '%s': %s", path, name, tutti_last_error());
    srv_spec_make_key(s);
    return 0;
}

static int load_config(srv_registry *reg, const char *path, char *err, size_t cap, int *first_spec) {
    cJSON *root = read_config(path, err, cap);
    if (!root) return -1;
    int rc = config_models(reg, cJSON_GetObjectItemCaseSensitive(root, "models"), path, err, cap);
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "ensembles")) {
        if (rc < 0) break;
        if (*first_spec < 0) *first_spec = reg->n_specs;
        rc = config_ensemble(reg, it, k++, path, err, cap);
    }
    cJSON_Delete(root);
    return rc;
}

static char *read_template(const char *path, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return srv_fail(err, cap, "--chat-template: cannot open %s: %s", path, strerror(errno)), NULL;
    size_t c = 1 << 20;
    char *t = malloc(c + 1);
    size_t n = t ? fread(t, 1, c, f) : 0;
    bool more = t && fgetc(f) != EOF;
    fclose(f);
    if (!t || more) {
        free(t);
        return srv_fail(err, cap, "--chat-template %s: larger than 1 MiB", path), NULL;
    }
    t[n] = 0;
    return t;
}

/* 'default': the command line's ensemble, -e members first, then -m (as
 * tutti run); settings: the flag's value, else the ensemble file's, else the
 * default */
static int command_line_spec(srv_registry *reg, const server_opts *o, char *err, size_t cap) {
    int members[TUTTI_ENSEMBLE_MAX_MEMBERS], n_mem = 0;
    float fw[TUTTI_ENSEMBLE_MAX_MEMBERS], ft[TUTTI_ENSEMBLE_MAX_MEMBERS];
    int rule = o->rule, align = o->align;
    double adapt = o->adapt_alpha >= 0 ? o->adapt_alpha : -1, route = o->route_tau > 0 ? o->route_tau : -1;
    double select = o->select;
    tutti_context_weights ctx;
    memset(&ctx, 0, sizeof ctx);
    if (o->ens_file) {
        tutti_ensemble_file *ef = tutti_ensemble_file_read(o->ens_file);
        if (!ef) return srv_fail(err, cap, "-e %s: %s", o->ens_file, tutti_last_error());
        for (int i = 0; i < ef->n_members && n_mem < TUTTI_ENSEMBLE_MAX_MEMBERS; i++) {
            int fi = add_file(reg, ef->members[i].model_path, NULL, err, cap);
            if (fi < 0) {
                tutti_ensemble_file_free(ef);
                return -1;
            }
            fw[n_mem] = ef->members[i].weight, ft[n_mem] = ef->members[i].temp;
            members[n_mem++] = fi;
        }
        if (rule < 0) rule = ef->rule;
        if (align < 0) align = ef->align;
        if (adapt < 0) adapt = ef->adapt;
        if (route <= 0) route = ef->route;
        if (select < 0) select = ef->select;
        if (!o->no_context) ctx = ef->context;
        tutti_ensemble_file_free(ef);
    }
    for (int i = 0; i < o->n_models; i++) {
        if (n_mem == TUTTI_ENSEMBLE_MAX_MEMBERS)
            return srv_fail(err, cap, "at most %d members", TUTTI_ENSEMBLE_MAX_MEMBERS);
        int fi = add_file(reg, o->models[i], NULL, err, cap);
        if (fi < 0) return -1;
        fw[n_mem] = ft[n_mem] = NAN;
        members[n_mem++] = fi;
    }
    if (o->adapt && adapt < 0) adapt = 0.01;
    if (o->route && route <= 0) route = 0.25;
    if ((adapt >= 0 || route > 0 || select >= 0) && n_mem == 0)
        return srv_fail(err, cap, "--adapt, --route and --select apply to 'default': give its members with -m or -e");
    if (o->n_weights && o->n_weights != n_mem)
        return srv_fail(err, cap, "-w gives %d weights for %d members", o->n_weights, n_mem);
    if (o->n_temps && o->n_temps != n_mem)
        return srv_fail(err, cap, "--temps gives %d temperatures for %d members", o->n_temps, n_mem);
    if (n_mem == 0) return 0;
    srv_spec *s = add_spec(reg, "default", err, cap); /* reserved before the config's names */
    if (!s) return -1;
    s->n = n_mem;
    for (int i = 0; i < n_mem; i++) {
        s->file[i] = members[i];
        s->w[i] = o->n_weights ? o->weights[i] : fw[i];
        s->t[i] = o->n_temps ? o->temps[i] : ft[i];
    }
    if (rule >= 0) s->rule = rule;
    if (align >= 0) s->align = align;
    s->adapt = adapt >= 0;
    s->adapt_alpha = adapt;
    s->route = route > 0 ? route : 0;
    s->ctx = ctx;
    s->select = select >= 0;
    s->select_thresh = select;
    if (srv_spec_check(s) < 0) return srv_fail(err, cap, "'default': %s", tutti_last_error());
    srv_spec_make_key(s);
    return 1;
}

/* every file alone, under each of its names */
static int single_specs(srv_registry *reg, char *err, size_t cap) {
    for (int i = 0; i < reg->n_files; i++)
        for (int k = -1; k < reg->files[i].n_aliases; k++) {
            srv_spec *s = realloc(reg->specs, sizeof *s * (size_t)(reg->n_specs + 1));
            if (!s) return srv_fail(err, cap, "out of memory");
            reg->specs = s;
            s = &reg->specs[reg->n_specs++];
            memset(s, 0, sizeof *s);
            s->name = strdup(k < 0 ? reg->files[i].name : reg->files[i].aliases[k]);
            s->n = 1, s->file[0] = i, s->rule = TUTTI_RULE_MIX, s->align = TUTTI_ALIGN_AUTO;
            s->w[0] = s->t[0] = NAN;
            srv_spec_make_key(s);
        }
    return 0;
}

/* A remote member's context: -c when given, else 4096 (the member itself
 * never sends more than the server holds). */
int srv_registry_load_file(const srv_registry *reg, srv_file *f, char *err, size_t cap) {
    if (srv_is_url(f->path)) {
        /* a one-member ensemble: connects, checks the vocabulary against
         * the server, and holds the member's tokenizer */
        tutti_member_desc d = {.model_path = f->path, .weight = NAN, .temp = NAN};
        tutti_ensemble_params p = tutti_ensemble_default_params();
        p.members = &d, p.n_members = 1, p.n_threads = 1;
        p.n_ctx = reg->n_ctx_opt > 0 ? reg->n_ctx_opt : 0;
        if (!(f->remote = tutti_ensemble_new(&p))) return srv_fail(err, cap, "%s", tutti_last_error());
        f->vocab = tutti_ensemble_member_vocab(f->remote, 0);
        f->n_ctx = reg->n_ctx_opt > 0 ? reg->n_ctx_opt : 4096;
        return 0;
    }
    tutti_model_params mp = tutti_model_default_params();
    f->model = tutti_model_load(f->path, &mp);
    if (!f->model) return srv_fail(err, cap, "%s: %s", f->path, tutti_last_error());
    f->vocab = tutti_model_vocab(f->model);
    int32_t tr = tutti_model_n_ctx_train(f->model);
    /* -c N, -c 0 (the trained context), or by default min(trained, 4096) */
    f->n_ctx = reg->n_ctx_opt > 0              ? reg->n_ctx_opt
               : reg->n_ctx_opt == 0 && tr > 0 ? (tr < (1 << 22) ? tr : (1 << 22))
                                               : (tr > 0 && tr < 4096 ? tr : 4096);
    return 0;
}

int srv_registry_plan(srv_registry *reg, const server_opts *o, char *err, size_t cap) {
    memset(reg, 0, sizeof *reg);
    pthread_mutex_init(&reg->mu, NULL);
    pthread_cond_init(&reg->cv, NULL);
    reg->mu_init = true;
    reg->n_ctx_opt = o->n_ctx;
    reg->beta = o->beta;
    reg->prune = o->prune;
    reg->max_hyps = o->max_hyps;
    if (o->chat_template_file && !(reg->chat_template = read_template(o->chat_template_file, err, cap))) return -1;
    int has_default = command_line_spec(reg, o, err, cap);
    if (has_default < 0) return -1;
    /* before the config, whose ensembles may name them */
    if (o->models_dir && srv_registry_scan_dir(reg, o->models_dir, err, cap) < 0) return -1;
    reg->models_max = o->models_max;
    reg->models_mem = o->models_mem_mib * (1 << 20);
    int first_spec = -1;
    if (o->config && load_config(reg, o->config, err, cap, &first_spec) < 0) return -1;
    if (reg->n_files == 0)
        return srv_fail(err, cap, "no models: give -m MODEL.gguf, -e ENSEMBLE, --config FILE or --models-dir DIR");
    if (!has_default) {
        srv_spec d;
        if (first_spec >= 0) d = reg->specs[first_spec];
        else {
            memset(&d, 0, sizeof d);
            d.n = 1, d.file[0] = 0, d.rule = TUTTI_RULE_MIX, d.align = TUTTI_ALIGN_AUTO, d.w[0] = d.t[0] = NAN;
        }
        srv_spec *s = add_spec(reg, "default", err, cap);
        if (!s) return -1;
        char *nm = s->name;
        *s = d;
        s->name = nm;
        srv_spec_make_key(s);
    }
    if (single_specs(reg, err, cap) < 0 || srv_pipelines_plan(reg, o->config, err, cap) < 0) return -1;
    /* remote members are reached now (a wrong URL or vocabulary is an
     * error before listening, as a missing file is) */
    for (int i = 0; i < reg->n_files; i++)
        if (srv_is_url(reg->files[i].path) && srv_registry_load_file(reg, &reg->files[i], err, cap) < 0) return -1;
    return 0;
}

int srv_registry_load(srv_registry *reg, char *err, size_t cap) {
    for (int i = 0; i < reg->n_files; i++) {
        if (reg->files[i].remote || reg->files[i].lazy) continue; /* connected by the plan; loaded on demand */
        char shown[1024];
        tutti_redact_urls(reg->files[i].path, shown, sizeof shown);
        fprintf(stderr, "tutti serve: loading %s\n", shown);
        if (srv_registry_load_file(reg, &reg->files[i], err, cap) < 0) return -1;
    }
    /* named ensembles are checked now (vocabularies vs alignment, weights),
     * not at their first request */
    for (int i = 0; i < reg->n_specs; i++) {
        srv_spec *sp = &reg->specs[i];
        bool lazy = false;
        for (int k = 0; k < sp->n; k++) lazy |= reg->files[sp->file[k]].lazy;
        if (sp->n < 2 || lazy) continue; /* over models on demand: checked at the first request */
        tutti_member_desc desc[TUTTI_ENSEMBLE_MAX_MEMBERS];
        const tutti_model *models[TUTTI_ENSEMBLE_MAX_MEMBERS];
        tutti_ensemble_params p;
        srv_spec_params(reg, sp, 1, desc, models, &p);
        tutti_ensemble *e = tutti_ensemble_new(&p);
        if (e && srv_spec_apply(sp, e) < 0) {
            tutti_ensemble_free(e);
            e = NULL;
        }
        if (!e) return srv_fail(err, cap, "model '%s': %s", sp->name, tutti_last_error());
        sp->align_used = tutti_ensemble_align(e);
        tutti_ensemble_free(e);
    }
    return 0;
}

void srv_registry_free(srv_registry *reg) {
    srv_pipelines_free(reg);
    if (reg->mu_init) pthread_mutex_destroy(&reg->mu), pthread_cond_destroy(&reg->cv);
    for (int i = 0; i < reg->n_files; i++) {
        srv_file *f = &reg->files[i];
        tutti_model_free(f->model);
        tutti_ensemble_free(f->remote);
        free(f->path);
        free(f->name);
        for (int k = 0; k < f->n_aliases; k++) free(f->aliases[k]);
        free(f->aliases);
        free(f->nat_frag);
        free(f->nat_off);
    }
    for (int i = 0; i < reg->n_specs; i++) free(reg->specs[i].name);
    free(reg->files);
    free(reg->specs);
    free(reg->chat_template);
    memset(reg, 0, sizeof *reg);
}

const srv_spec *srv_registry_find(const srv_registry *reg, const char *name) {
    for (int i = 0; i < reg->n_specs; i++)
        if (!strcmp(reg->specs[i].name, name)) return &reg->specs[i];
    return NULL;
}

/* Messages for clients: every file's path (or URL) becomes its served
 * name, so that no error body shows where the server keeps its models. */
void srv_registry_scrub(const srv_registry *reg, const char *msg, char *out, size_t cap) {
    size_t o = 0;
    if (!cap) return;
    for (const char *p = msg; *p && o + 1 < cap;) {
        int best = -1;
        size_t bl = 0;
        for (int i = 0; i < reg->n_files; i++) {
            size_t l = strlen(reg->files[i].path);
            if (l > bl && !strncmp(p, reg->files[i].path, l)) best = i, bl = l;
        }
        if (best >= 0) {
            int k = snprintf(out + o, cap - o, "'%s'", reg->files[best].name);
            o = k < 0 ? o : o + (size_t)k < cap ? o + (size_t)k : cap - 1;
            p += bl;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = 0;
}

int srv_spec_apply(const srv_spec *s, tutti_ensemble *e) {
    if (s->adapt && tutti_ensemble_set_adapt(e, s->adapt_alpha) < 0) return TUTTI_ERR;
    if (s->route > 0 && tutti_ensemble_set_route(e, s->route) < 0) return TUTTI_ERR;
    if (s->ctx.n_features > 0 && tutti_ensemble_set_context(e, &s->ctx) < 0) return TUTTI_ERR;
    if (s->select && tutti_ensemble_set_select(e, s->select_thresh) < 0) return TUTTI_ERR;
    return 0;
}

void srv_spec_params(const srv_registry *reg, const srv_spec *s, int n_threads, tutti_member_desc *desc,
                     const tutti_model **models, tutti_ensemble_params *p) {
    *p = tutti_ensemble_default_params();
    for (int i = 0; i < s->n; i++) {
        const srv_file *f = &reg->files[s->file[i]];
        desc[i] = (tutti_member_desc){.model_path = f->path, .weight = s->w[i], .temp = s->t[i]};
        models[i] = f->model; /* NULL for a remote member: the ensemble connects it */
    }
    p->members = desc;
    p->n_members = s->n;
    p->models = models;
    p->rule = (tutti_fusion_rule)s->rule;
    p->align = (tutti_align)s->align;
    if (reg->beta > 0) p->beta = reg->beta;
    if (reg->prune >= 0) p->prune = reg->prune;
    if (reg->max_hyps > 0) p->max_hyps = reg->max_hyps;
    p->n_ctx = reg->n_ctx_opt > 0 ? reg->n_ctx_opt : 0;
    if (reg->n_ctx_opt == 0) /* -c 0: the smallest trained context of the members */
        for (int k = 0; k < s->n; k++)
            if (p->n_ctx == 0 || reg->files[s->file[k]].n_ctx < p->n_ctx) p->n_ctx = reg->files[s->file[k]].n_ctx;
    p->n_threads = n_threads;
}
