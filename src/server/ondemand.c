/* Models on demand (`tutti serve --models-dir DIR`): every GGUF under DIR
 * is served by its file name, its model loaded at the first request that
 * names it (alone, in a named ensemble or an inline one) and unloaded, least
 * recently used first, once more than --models-max are loaded or their
 * files pass --models-memory.
 *
 * Reference counts make unloading safe: a job holds its members' files from
 * the moment its model is resolved until the job is freed (active), and a
 * slot holds every file its cached ensembles and sessions are built on.  Only
 * a file no job holds is chosen for unloading; it is then marked doomed and
 * freed when its last holder lets go: the slots drop their ensembles over a
 * doomed file between jobs (srv_registry_doomed), so a running request or
 * an ensemble never has its weights freed under it.  While more models than
 * the limit answer requests at once the limit is exceeded until they end
 * (waiting instead could deadlock a slot on its own ensemble's members). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/server.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct paths {
    char **v;
    int n, cap;
} paths;

/* every *.gguf under dir (hidden entries skipped), depth-limited so that a
 * link loop ends */
static int collect(const char *dir, int depth, paths *out, char *err, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return snprintf(err, cap, "--models-dir %s: %s", dir, strerror(errno)), -1;
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        size_t l = strlen(de->d_name);
        char *p = malloc(strlen(dir) + l + 2);
        if (!p) {
            rc = -1, (void)snprintf(err, cap, "out of memory");
            break;
        }
        sprintf(p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && depth < 8) {
            rc = collect(p, depth + 1, out, err, cap);
            free(p);
        } else if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && l > 5 && !strcmp(de->d_name + l - 5, ".gguf")) {
            if (out->n == out->cap) {
                int nc = out->cap ? out->cap * 2 : 16;
                char **nv = realloc(out->v, sizeof *nv * (size_t)nc);
                if (!nv) {
                    free(p);
                    rc = -1, (void)snprintf(err, cap, "out of memory");
                    break;
                }
                out->v = nv, out->cap = nc;
            }
            out->v[out->n++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
    return rc;
}

/* a GGUF metadata number, or dflt */
static double meta_number(const tutti_gguf *g, const char *key, double dflt) {
    tutti_gguf_value v;
    int64_t i = tutti_gguf_find(g, key);
    if (i < 0 || tutti_gguf_get(g, i, -1, &v) < 0 || v.kind != TUTTI_GGUF_NUMBER) return dflt;
    return v.number;
}

/* what /v1/models and the context checks need before the model is loaded:
 * its vocabulary's size and trained context, from the file's metadata */
static int read_meta(const srv_registry *reg, srv_file *f, char *err, size_t cap) {
    tutti_gguf *g = tutti_gguf_open(f->path);
    if (!g) return snprintf(err, cap, "%s", tutti_last_error()), -1;
    tutti_gguf_value v;
    int64_t i = tutti_gguf_find(g, "tokenizer.ggml.tokens");
    f->n_vocab_meta = i >= 0 && tutti_gguf_get(g, i, -1, &v) == 0 && v.kind == TUTTI_GGUF_ARRAY ? (int32_t)v.n : 0;
    char key[256] = "";
    i = tutti_gguf_find(g, "general.architecture");
    if (i >= 0 && tutti_gguf_get(g, i, -1, &v) == 0 && v.kind == TUTTI_GGUF_STRING && v.len < 200)
        snprintf(key, sizeof key, "%.*s.context_length", (int)v.len, v.str);
    double tr = key[0] ? meta_number(g, key, 0) : 0;
    tutti_gguf_close(g);
    /* as srv_registry_load_file: -c N, -c 0 (the trained context), else min(trained, 4096) */
    f->n_ctx = reg->n_ctx_opt > 0              ? reg->n_ctx_opt
               : reg->n_ctx_opt == 0 && tr > 0 ? (tr < (1 << 22) ? (int32_t)tr : (1 << 22))
                                               : (tr > 0 && tr < 4096 ? (int32_t)tr : 4096);
    return 0;
}

int srv_registry_scan_dir(srv_registry *reg, const char *dir, char *err, size_t cap) {
    paths ps = {0};
    int rc = collect(dir, 0, &ps, err, cap);
    if (rc == 0 && ps.n == 0) rc = -1, (void)snprintf(err, cap, "--models-dir %s: no .gguf files in it", dir);
    if (rc == 0) qsort(ps.v, (size_t)ps.n, sizeof *ps.v, cmp_str);
    for (int k = 0; rc == 0 && k < ps.n; k++) {
        int before = reg->n_files;
        if (before == SRV_MAX_FILES) {
            rc = -1, (void)snprintf(err, cap, "--models-dir %s: more than %d models", dir, SRV_MAX_FILES);
            break;
        }
        int fi = srv_registry_add_file_named(reg, ps.v[k], NULL, err, cap);
        if (fi < 0) rc = -1;
        else if (fi < before) continue; /* also given by -m, -e or --config: loaded at start */
        else {
            srv_file *f = &reg->files[fi];
            struct stat st;
            f->lazy = true;
            f->bytes = stat(f->path, &st) == 0 ? (int64_t)st.st_size : 0;
            rc = read_meta(reg, f, err, cap);
        }
    }
    for (int k = 0; k < ps.n; k++) free(ps.v[k]);
    free(ps.v);
    return rc;
}

static void unload(srv_file *f) {
    fprintf(stderr, "tutti serve: unloading %s\n", f->name);
    tutti_model_free(f->model);
    f->model = NULL;
    f->vocab = NULL;
    f->doomed = false;
}

/* Beyond the limits: the least recently used loaded on-demand file that no
 * job holds is doomed (freed now when nothing else holds it). reg->mu held. */
static void evict(srv_registry *reg) {
    for (;;) {
        int n = 0, lru = -1;
        int64_t bytes = 0;
        for (int i = 0; i < reg->n_files; i++) {
            const srv_file *f = &reg->files[i];
            if (!f->lazy || !f->model || f->doomed) continue;
            n++, bytes += f->bytes;
            if (f->active == 0 && (lru < 0 || f->last_use < reg->files[lru].last_use)) lru = i;
        }
        bool over = (reg->models_max > 0 && n > reg->models_max) || (reg->models_mem > 0 && bytes > reg->models_mem);
        if (!over || lru < 0) return;
        srv_file *f = &reg->files[lru];
        if (f->refs == 0) unload(f);
        else f->doomed = true, reg->sweep_gen++;
    }
}

static void release_locked(srv_registry *reg, const int *files, int n, bool active) {
    for (int k = 0; k < n; k++) {
        srv_file *f = &reg->files[files[k]];
        f->refs--;
        if (active) f->active--;
        if (f->doomed && f->refs == 0) unload(f);
    }
}

int srv_registry_acquire(srv_registry *reg, const int *files, int n, bool active, char *err, size_t cap) {
    pthread_mutex_lock(&reg->mu);
    int k = 0, rc = 0;
    for (; k < n; k++) {
        srv_file *f = &reg->files[files[k]];
        while (f->loading) pthread_cond_wait(&reg->cv, &reg->mu);
        if (f->lazy && !f->model) {
            /* loaded outside the lock into a copy: others read f meanwhile */
            f->loading = true;
            srv_file tmp = *f;
            pthread_mutex_unlock(&reg->mu);
            fprintf(stderr, "tutti serve: loading %s (on demand)\n", f->name);
            char e[1024];
            rc = srv_registry_load_file(reg, &tmp, e, sizeof e);
            pthread_mutex_lock(&reg->mu);
            f->loading = false;
            pthread_cond_broadcast(&reg->cv);
            if (rc < 0) {
                srv_registry_scrub(reg, e, err, cap);
                break;
            }
            f->model = tmp.model, f->vocab = tmp.vocab, f->n_ctx = tmp.n_ctx;
            f->n_loads++;
        }
        f->refs++;
        if (active) f->active++;
        f->doomed = false; /* wanted again: kept */
        f->last_use = ++reg->clock;
    }
    if (rc < 0) release_locked(reg, files, k, active);
    evict(reg);
    pthread_mutex_unlock(&reg->mu);
    return rc;
}

void srv_registry_release(srv_registry *reg, const int *files, int n, bool active) {
    if (n <= 0) return;
    pthread_mutex_lock(&reg->mu);
    release_locked(reg, files, n, active);
    evict(reg); /* a file a job held may be over the limit now */
    pthread_mutex_unlock(&reg->mu);
}

bool srv_registry_loaded(srv_registry *reg, int i) {
    pthread_mutex_lock(&reg->mu);
    bool l = reg->files[i].model || reg->files[i].remote;
    pthread_mutex_unlock(&reg->mu);
    return l;
}

bool srv_registry_doomed(srv_registry *reg, int i) {
    pthread_mutex_lock(&reg->mu);
    bool d = reg->files[i].doomed;
    pthread_mutex_unlock(&reg->mu);
    return d;
}

int srv_job_hold(srv_registry *reg, srv_job *j, const int *files, int n, char *err, size_t cap) {
    if (j->held_reg || n > TUTTI_ENSEMBLE_MAX_MEMBERS) return snprintf(err, cap, "internal: job held twice"), -1;
    if (srv_registry_acquire(reg, files, n, true, err, cap) < 0) return -1;
    memcpy(j->held, files, sizeof(int) * (size_t)n);
    j->n_held = n;
    j->held_reg = reg;
    return 0;
}
