/* tutti_hub_resolve: a model spec to a file of the cache (steps in hub.h),
 * and the process-wide settings. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/hub.h"
#include "hub/sha256.h"
#include "net/http.h"
#include "tutti.h"
#include "util/error.h"

#define MAX_PARTS 256
#define API_TIMEOUT_MS 30000

/* ---- settings ---- */

typedef struct memo {
    char *spec, *path;
    struct memo *next;
} memo;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *endpoint, *token, *cache_dir;
    bool offline, progress, set;
    memo *done; /* specs resolved in this process (reachable until the next configure) */
} g;

typedef struct cfg {
    char endpoint[1024];
    char token[512]; /* "" = none */
    char root[4096];
    bool offline, progress;
} cfg;

tutti_hub_params tutti_hub_default_params(void) {
    return (tutti_hub_params){.endpoint = NULL, .token = NULL, .cache_dir = NULL, .offline = false, .progress = true};
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int tutti_hub_configure(const tutti_hub_params *p) {
    tutti_hub_params d = tutti_hub_default_params();
    if (!p) p = &d;
    pthread_mutex_lock(&g_mu);
    free(g.endpoint), free(g.token), free(g.cache_dir);
    g.endpoint = dup_or_null(p->endpoint), g.token = dup_or_null(p->token), g.cache_dir = dup_or_null(p->cache_dir);
    g.offline = p->offline, g.progress = p->progress, g.set = true;
    for (memo *m = g.done, *nx; m; m = nx) {
        nx = m->next;
        free(m->spec), free(m->path), free(m);
    }
    g.done = NULL;
    bool oom = (p->endpoint && !g.endpoint) || (p->token && !g.token) || (p->cache_dir && !g.cache_dir);
    pthread_mutex_unlock(&g_mu);
    return oom ? tutti_set_error("hub: out of memory") : 0;
}

bool tutti_is_hub_spec(const char *s) { return s && !strncmp(s, HUB_PREFIX, strlen(HUB_PREFIX)); }

int tutti_hub_spec_check(const char *s) {
    hub_spec sp;
    return hub_spec_parse(s, &sp) < 0 ? TUTTI_ERR : 0;
}

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

/* A token goes into a header: printable ASCII without blanks only. */
static bool token_valid(const char *t) {
    size_t n = strlen(t);
    if (n == 0 || n > 500) return false;
    for (size_t i = 0; i < n; i++)
        if (t[i] <= ' ' || t[i] >= 0x7f) return false;
    return true;
}

/* The cache folder in force (under g_mu). */
static int root_locked(char *out, size_t cap) {
    if (g.cache_dir && *g.cache_dir) return hub_pathf(out, cap, "%s", g.cache_dir);
    return hub_cache_root(out, cap);
}

/* The settings in force (under g_mu). */
static int effective(cfg *c) {
    memset(c, 0, sizeof *c);
    const char *ep = g.endpoint;
    if (!ep || !*ep) ep = getenv("MODEL_ENDPOINT");
    if (!ep || !*ep) ep = getenv("HF_ENDPOINT");
    if (!ep || !*ep) ep = "https://huggingface.co/";
    if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))
        return tutti_set_error("hub: the endpoint %.200s is not an http:// or https:// URL (HF_ENDPOINT)", ep);
    size_t n = strlen(ep);
    if (n + 2 > sizeof c->endpoint) return tutti_set_error("hub: the endpoint URL is too long");
    snprintf(c->endpoint, sizeof c->endpoint, "%s%s", ep, ep[n - 1] == '/' ? "" : "/");
    const char *tok = g.token ? g.token : getenv("HF_TOKEN");
    if (tok && *tok) {
        if (token_valid(tok)) snprintf(c->token, sizeof c->token, "%s", tok);
        else
            fprintf(stderr, "tutti: warning: the Hugging Face token is not one (blanks or control characters, "
                            "or over 500 bytes): it is not sent\n");
    }
    c->offline = g.offline || env_on("LLAMA_OFFLINE") || env_on("HF_HUB_OFFLINE");
    c->progress = g.set ? g.progress : true;
    return root_locked(c->root, sizeof c->root);
}

int tutti_hub_cache_dir(char *buf, size_t cap) { return hub_cache_dir_in_force(buf, cap); }

int hub_cache_dir_in_force(char *out, size_t cap) {
    pthread_mutex_lock(&g_mu);
    int rc = root_locked(out, cap);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* ---- the hub's API ---- */

/* GET endpoint + path; the body (malloc'd) and the status, or -1 when the
 * hub could not be reached at all (*unreachable). */
static int api_get(const cfg *c, const char *path, char **body, size_t *n, long *status) {
    char base[1024];
    snprintf(base, sizeof base, "%.*s", (int)strlen(c->endpoint) - 1, c->endpoint);
    remote_http *h = remote_http_new(base, API_TIMEOUT_MS, c->token[0] ? c->token : NULL);
    if (!h) return TUTTI_ERR;
    const char *resp;
    int st = remote_http_request(h, path, NULL, &resp, n);
    if (st >= 0) {
        *body = malloc(*n + 1);
        if (*body) memcpy(*body, resp, *n + 1);
        *status = st;
    }
    remote_http_free(h);
    if (st >= 0 && !*body) return tutti_set_error("hub: out of memory");
    return st < 0 ? TUTTI_ERR : 0;
}

/* The hub's own words from an error answer ({"error": "..."}), printable only. */
static void hub_words(const char *body, char *out, size_t cap) {
    out[0] = 0;
    const char *e = body ? strstr(body, "\"error\"") : NULL;
    if (!e || !(e = strchr(e + 7, '"'))) return;
    size_t o = 0;
    for (e++; *e && *e != '"' && o + 1 < cap && o < 160; e++)
        if ((unsigned char)*e >= 0x20 && *e != '\\') out[o++] = *e;
    out[o] = 0;
}

static int api_error(const cfg *c, const char *repo, long status, const char *body) {
    char words[200], said[220] = "";
    hub_words(body, words, sizeof words);
    if (words[0]) snprintf(said, sizeof said, " (\"%s\")", words);
    if (status == 401)
        return tutti_set_error("%s: the hub answered 401 unauthorized%s. The repository is private or gated, or does "
                               "not exist: for a private or gated one, set HF_TOKEN (or --hf-token) to a token that "
                               "can read it",
                               repo, said);
    if (status == 403)
        return tutti_set_error("%s: the hub answered 403 forbidden%s. The token cannot read this repository (a gated "
                               "model: accept its terms on its page first)",
                               repo, said);
    if (status == 404)
        return tutti_set_error("%s: no such repository on %s (404%s). Check the name: USER/MODEL as on the hub", repo,
                               c->endpoint, said);
    return tutti_set_error("%s: the hub answered HTTP %ld%s", repo, status, said);
}

/* The commit of main and its files.  *reached: false when the hub could not
 * be reached (or failed with 5xx), i.e. the network is the problem. */
static int online_listing(const cfg *c, const hub_spec *sp, char commit[41], hub_listing *l, bool *reached) {
    char path[1200], *body = NULL;
    size_t n = 0;
    long status = 0;
    *reached = false;
    snprintf(path, sizeof path, "/api/models/%s/refs", sp->repo);
    if (api_get(c, path, &body, &n, &status) < 0) return TUTTI_ERR;
    *reached = status < 500;
    int rc = status == 200 ? hub_refs_parse(body, n, commit) : api_error(c, sp->repo, status, body);
    free(body), body = NULL;
    if (rc < 0) return rc;
    snprintf(path, sizeof path, "/api/models/%s/tree/%s?recursive=true", sp->repo, commit);
    if (api_get(c, path, &body, &n, &status) < 0) {
        *reached = false;
        return TUTTI_ERR;
    }
    *reached = status < 500;
    rc = status == 200 ? hub_tree_parse(body, n, l) : api_error(c, sp->repo, status, body);
    free(body);
    if (rc == 0 && l->n_rejected)
        fprintf(stderr,
                "tutti: warning: %s: %d entries of the hub's file listing were ignored (malformed, or a path "
                "that cannot be a file in the repository)\n",
                sp->repo, l->n_rejected);
    return rc;
}

/* ---- fetching ---- */

/* percent-encodes every byte of a path but the unreserved ones and '/' */
static void url_path(const char *p, char *out, size_t cap) {
    static const char hx[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *p && o + 4 < cap; p++) {
        unsigned char ch = (unsigned char)*p;
        bool keep =
            (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || strchr("-._~/", ch);
        if (keep) out[o++] = (char)ch;
        else out[o++] = '%', out[o++] = hx[ch >> 4], out[o++] = hx[ch & 15];
    }
    out[o] = 0;
}

static int fetch_one(const cfg *c, const hub_spec *sp, const char *repo_dir, const char *commit, const hub_file *f) {
    char snap[HUB_PATH_CAP], blob[HUB_PATH_CAP], lock[HUB_PATH_CAP], url[HUB_PATH_CAP], enc[3 * HUB_MAX_PATH + 4],
        label[HUB_MAX_REPO + HUB_MAX_PATH + 4];
    if (hub_pathf(snap, sizeof snap, "%s/snapshots/%s/%s", repo_dir, commit, f->path) < 0) return TUTTI_ERR;
    struct stat st;
    if (stat(snap, &st) == 0 && S_ISREG(st.st_mode)) return 0; /* already here */
    const char *repo_name = strrchr(repo_dir, '/') + 1;
    char oid[65];
    if (f->oid[0]) {
        snprintf(oid, sizeof oid, "%s", f->oid);
    } else { /* no oid given: a name of the blob's own, from the path */
        hub_sha256 h;
        hub_sha256_init(&h);
        hub_sha256_update(&h, commit, strlen(commit));
        hub_sha256_update(&h, f->path, strlen(f->path));
        hub_sha256_hex(&h, oid);
    }
    url_path(f->path, enc, sizeof enc);
    if (hub_pathf(blob, sizeof blob, "%s/blobs/%s", repo_dir, oid) < 0 ||
        hub_pathf(lock, sizeof lock, "%s/.locks/%s/%s.lock", c->root, repo_name, oid) < 0 ||
        hub_pathf(url, sizeof url, "%s%s/resolve/%s/%s", c->endpoint, sp->repo, commit, enc) < 0 ||
        hub_pathf(label, sizeof label, "%s/%s", sp->repo, f->path) < 0)
        return TUTTI_ERR;
    if (stat(blob, &st) != 0) {
        hub_download d = {.url = url,
                          .token = c->token[0] ? c->token : NULL,
                          .dest = blob,
                          .lock = lock,
                          .sha256 = f->sha256,
                          .size = f->size,
                          .label = label,
                          .progress = c->progress};
        if (hub_download_file(&d) < 0) return TUTTI_ERR;
    }
    return hub_cache_link(repo_dir, commit, f->path, oid);
}

/* The selected files present in the cache's snapshot (offline). */
static int cached_files(const hub_spec *sp, const char *repo_dir, const char *commit, const hub_listing *l,
                        const int *sel, int n) {
    for (int i = 0; i < n; i++) {
        char snap[HUB_PATH_CAP];
        struct stat st;
        if (hub_pathf(snap, sizeof snap, "%s/snapshots/%s/%s", repo_dir, commit, l->files[sel[i]].path) < 0)
            return TUTTI_ERR;
        if (stat(snap, &st) != 0)
            return tutti_set_error("%s: %s is not in the cache (%s)", sp->repo, l->files[sel[i]].path, snap);
    }
    return 0;
}

/* The cache's snapshot of the repository, for offline use; -1 (error set,
 * naming why) when there is none. */
static int cache_state(const cfg *c, const hub_spec *sp, const char *repo_dir, char commit[41], hub_listing *l) {
    if (hub_cache_ref(repo_dir, commit) < 0 || hub_cache_listing(repo_dir, commit, l) < 0 || l->n == 0) {
        hub_listing_free(l);
        return tutti_set_error("%s is not in the cache (%s)", sp->repo, c->root);
    }
    return 0;
}

static char *resolve_locked(const cfg *c, const char *spec) {
    hub_spec sp;
    char repo_dir[HUB_PATH_CAP], commit[41] = "";
    hub_listing l = {0};
    if (hub_spec_parse(spec, &sp) < 0 || hub_repo_dir(c->root, sp.repo, repo_dir, sizeof repo_dir) < 0) return NULL;
    bool online = !c->offline, reached = false;
    if (online && online_listing(c, &sp, commit, &l, &reached) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", tutti_last_error());
        hub_listing_free(&l);
        if (cache_state(c, &sp, repo_dir, commit, &l) < 0) {
            if (!reached)
                tutti_set_error("%s (the hub cannot be reached, and %s is not in the cache %s to work offline)", why,
                                sp.repo, c->root);
            else tutti_set_error("%s", why);
            return NULL;
        }
        fprintf(stderr, "tutti: warning: %s; using the cached copy (commit %.12s, offline)\n", why, commit);
        online = false;
    } else if (!online && cache_state(c, &sp, repo_dir, commit, &l) < 0) {
        tutti_set_error("%s is not in the cache %s, and offline (--offline, LLAMA_OFFLINE) nothing is downloaded: "
                        "run once online to fetch it",
                        sp.repo, c->root);
        return NULL;
    }
    int sel[MAX_PARTS], n_sel = 0;
    char *out = NULL;
    if (hub_select(&l, &sp, sel, MAX_PARTS, &n_sel) == 0) {
        int rc = 0;
        if (online) rc = hub_cache_write_ref(repo_dir, commit);
        for (int i = 0; rc == 0 && i < n_sel; i++)
            rc = online ? fetch_one(c, &sp, repo_dir, commit, &l.files[sel[i]]) : 0;
        if (rc == 0 && !online) rc = cached_files(&sp, repo_dir, commit, &l, sel, n_sel);
        char path[HUB_PATH_CAP];
        for (int i = n_sel - 1; rc == 0 && i >= 0; i--) { /* ends with sel[0]'s path */
            rc = hub_pathf(path, sizeof path, "%s/snapshots/%s/%s", repo_dir, commit, l.files[sel[i]].path);
            if (rc == 0) hub_cache_touch(path);
        }
        if (rc == 0 && !(out = strdup(path))) tutti_set_error("hub: out of memory");
    }
    hub_listing_free(&l);
    return out;
}

char *tutti_hub_resolve(const char *spec) {
    if (!spec) return tutti_set_error("tutti_hub_resolve: spec is NULL"), NULL;
    if (!tutti_is_hub_spec(spec)) {
        char *p = strdup(spec);
        if (!p) tutti_set_error("hub: out of memory");
        return p;
    }
    pthread_mutex_lock(&g_mu);
    char *out = NULL;
    for (memo *m = g.done; m && !out; m = m->next)
        if (!strcmp(m->spec, spec) && !(out = strdup(m->path))) tutti_set_error("hub: out of memory");
    cfg c;
    if (!out && effective(&c) == 0 && (out = resolve_locked(&c, spec))) {
        memo *m = calloc(1, sizeof *m);
        if (m && (m->spec = strdup(spec)) && (m->path = strdup(out))) {
            m->next = g.done;
            g.done = m;
        } else if (m) {
            free(m->spec), free(m);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return out;
}
