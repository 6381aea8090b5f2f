/* The cache as a list of model files, and removing entries from it
 * (tutti_hub_list, tutti_hub_remove: `tutti models`). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/hub.h"
#include "tutti.h"
#include "util/error.h"

typedef struct entries {
    tutti_hub_entry *v;
    int32_t n, cap;
} entries;

static int push(entries *e, const tutti_hub_entry *x) {
    if (e->n == e->cap) {
        int32_t c = e->cap ? 2 * e->cap : 16;
        tutti_hub_entry *nv = realloc(e->v, sizeof *nv * (size_t)c);
        if (!nv) return tutti_set_error("hub: out of memory");
        e->v = nv, e->cap = c;
    }
    e->v[e->n++] = *x;
    return 0;
}

/* The files of one snapshot of a cached repository. */
static int list_snapshot(const char *repo_dir, const char *repo, const char *commit, bool current, entries *e) {
    hub_listing l;
    if (hub_cache_listing(repo_dir, commit, &l) < 0) return TUTTI_ERR;
    int rc = 0;
    for (int i = 0; rc == 0 && i < l.n; i++) {
        tutti_hub_entry x;
        memset(&x, 0, sizeof x);
        hub_split s;
        snprintf(x.repo, sizeof x.repo, "%s", repo);
        snprintf(x.file, sizeof x.file, "%s", l.files[i].path);
        snprintf(x.commit, sizeof x.commit, "%s", commit);
        if (hub_split_info(x.file, &s)) snprintf(x.tag, sizeof x.tag, "%s", s.tag);
        if (hub_pathf(x.path, sizeof x.path, "%s/snapshots/%s/%s", repo_dir, commit, x.file) < 0) continue;
        struct stat st;
        x.size = l.files[i].size;
        x.last_use = lstat(x.path, &st) == 0 ? (int64_t)st.st_mtime : 0;
        x.current = current;
        rc = push(e, &x);
    }
    hub_listing_free(&l);
    return rc;
}

static int list_repo(const char *root, const char *name, entries *e) {
    char repo[HUB_MAX_REPO + 1], repo_dir[HUB_PATH_CAP], snaps[HUB_PATH_CAP], ref[41] = "";
    if (!hub_repo_from_dir(name, repo, sizeof repo)) return 0; /* not a model repository of the hub's layout */
    if (hub_pathf(repo_dir, sizeof repo_dir, "%s/%s", root, name) < 0 ||
        hub_pathf(snaps, sizeof snaps, "%s/snapshots", repo_dir) < 0)
        return 0;
    (void)hub_cache_ref(repo_dir, ref);
    DIR *d = opendir(snaps);
    struct dirent *de;
    int rc = 0;
    while (d && rc == 0 && (de = readdir(d)))
        if (hub_hex_valid(de->d_name, strlen(de->d_name), 40))
            rc = list_snapshot(repo_dir, repo, de->d_name, !strcmp(de->d_name, ref), e);
    if (d) closedir(d);
    return rc;
}

static int by_repo_file(const void *a, const void *b) {
    const tutti_hub_entry *x = a, *y = b;
    int c = strcmp(x->repo, y->repo);
    if (!c) c = strcmp(x->file, y->file);
    if (!c) c = (int)y->current - (int)x->current;
    return c ? c : strcmp(x->commit, y->commit);
}

int tutti_hub_list(tutti_hub_entry **out, int32_t *n) {
    *out = NULL, *n = 0;
    char root[HUB_PATH_CAP];
    if (hub_cache_dir_in_force(root, sizeof root) < 0) return TUTTI_ERR;
    entries e = {0};
    DIR *d = opendir(root);
    struct dirent *de;
    int rc = 0;
    while (d && rc == 0 && (de = readdir(d))) rc = list_repo(root, de->d_name, &e);
    if (d) closedir(d);
    if (rc < 0) {
        free(e.v);
        return rc;
    }
    if (e.n > 1) qsort(e.v, (size_t)e.n, sizeof *e.v, by_repo_file);
    *out = e.v, *n = e.n;
    return 0;
}

/* ---- removal ---- */

/* rm -r of a cache folder: never follows a link (a snapshot's links are
 * removed, not what they point to); depth-limited. */
static int rm_tree_at(const char *path, int depth) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode) && depth < 64) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char p[HUB_PATH_CAP];
            if (hub_pathf(p, sizeof p, "%s/%s", path, de->d_name) < 0 || rm_tree_at(p, depth + 1) < 0) {
                closedir(d);
                return TUTTI_ERR;
            }
        }
        if (d) closedir(d);
        if (rmdir(path) != 0 && errno != ENOENT)
            return tutti_set_error("hub: cannot remove %s: %s", path, strerror(errno));
        return 0;
    }
    if (unlink(path) != 0 && errno != ENOENT)
        return tutti_set_error("hub: cannot remove %s: %s", path, strerror(errno));
    return 0;
}

static int rm_tree(const char *path) { return rm_tree_at(path, 0); }

/* What `what` names of an entry: 1 yes, 0 no. */
typedef struct target {
    hub_spec spec; /* REPO[:TAG] */
    bool by_file;  /* a FILE: spec.file (the whole text when no repository is in it) */
    const char *text;
} target;

static bool matches(const target *t, const tutti_hub_entry *x) {
    if (t->by_file) {
        const char *base = strrchr(x->file, '/');
        base = base ? base + 1 : x->file;
        if (t->spec.repo[0] && strcmp(t->spec.repo, x->repo)) return false;
        const char *f = t->spec.repo[0] ? t->spec.file : t->text;
        return !strcmp(f, x->file) || !strcmp(f, base);
    }
    if (strcmp(t->spec.repo, x->repo)) return false;
    return !t->spec.tag[0] || !strcasecmp(t->spec.tag, x->tag);
}

/* Another part of the same split model as x (same snapshot and prefix). */
static bool same_split(const tutti_hub_entry *x, const tutti_hub_entry *y) {
    hub_split a, b;
    if (strcmp(x->repo, y->repo) || strcmp(x->commit, y->commit) || !hub_split_info(x->file, &a) ||
        !hub_split_info(y->file, &b) || a.count <= 1 || a.count != b.count || a.prefix_len != b.prefix_len)
        return false;
    return !strncmp(x->file, y->file, a.prefix_len);
}

/* Unlinks the entries marked in rm[] and then each blob they pointed to that
 * no remaining entry of the repository points to. */
static int remove_marked(const tutti_hub_entry *v, int32_t n, const bool *rm, const char *root) {
    for (int32_t i = 0; i < n; i++) {
        if (!rm[i]) continue;
        char target[HUB_PATH_CAP], blob[HUB_PATH_CAP * 2];
        ssize_t k = readlink(v[i].path, target, sizeof target - 1);
        if (unlink(v[i].path) != 0 && errno != ENOENT)
            return tutti_set_error("hub: cannot remove %s: %s", v[i].path, strerror(errno));
        if (k <= 0) continue;
        target[k] = 0;
        const char *b = strstr(target, "blobs/");
        if (!b || strchr(b + 6, '/') || !hub_hex_valid(b + 6, strlen(b + 6), strlen(b + 6))) continue;
        bool used = false;
        for (int32_t j = 0; j < n && !used; j++) {
            char t2[HUB_PATH_CAP];
            ssize_t k2 = rm[j] || strcmp(v[j].repo, v[i].repo) ? -1 : readlink(v[j].path, t2, sizeof t2 - 1);
            if (k2 > 0) t2[k2] = 0;
            used = k2 > 0 && strstr(t2, b) && !strcmp(strstr(t2, b), b);
        }
        char repo_dir[HUB_PATH_CAP];
        if (!used && hub_repo_dir(root, v[i].repo, repo_dir, sizeof repo_dir) == 0 &&
            hub_pathf(blob, sizeof blob, "%s/%s", repo_dir, b) == 0)
            unlink(blob);
    }
    return 0;
}

int tutti_hub_remove(const char *what, int32_t *n_removed) {
    *n_removed = 0;
    if (!what || !*what) return tutti_set_error("models rm: nothing named");
    target t = {.text = what};
    size_t wl = strlen(what);
    bool gguf = wl > 5 && !strcmp(what + wl - 5, ".gguf");
    if (hub_spec_parse(what, &t.spec) == 0 && !(gguf && !t.spec.file[0])) {
        t.by_file = t.spec.file[0] != 0;
    } else if (gguf && hub_path_valid(what, wl)) {
        memset(&t.spec, 0, sizeof t.spec);
        t.by_file = true;
    } else {
        return tutti_set_error("models rm: '%s' is neither USER/MODEL[:QUANT] nor a .gguf file of the cache", what);
    }
    char root[HUB_PATH_CAP];
    if (hub_cache_dir_in_force(root, sizeof root) < 0) return TUTTI_ERR;
    tutti_hub_entry *v;
    int32_t n;
    if (tutti_hub_list(&v, &n) < 0) return TUTTI_ERR;
    bool *rm = calloc((size_t)n + 1, 1);
    if (!rm) {
        free(v);
        return tutti_set_error("hub: out of memory");
    }
    for (int32_t i = 0; i < n; i++)
        if (matches(&t, &v[i]))
            for (int32_t j = 0; j < n; j++) rm[j] = rm[j] || j == i || same_split(&v[i], &v[j]);
    for (int32_t i = 0; i < n; i++) *n_removed += rm[i];
    int rc = 0;
    if (!t.by_file && !t.spec.tag[0]) {
        /* a whole repository: its folder and its locks */
        char dir[HUB_PATH_CAP], locks[HUB_PATH_CAP];
        if (hub_repo_dir(root, t.spec.repo, dir, sizeof dir) == 0 && access(dir, F_OK) == 0) {
            if (*n_removed == 0) *n_removed = 1; /* a folder with nothing usable in it still goes */
            rc = rm_tree(dir);
            if (rc == 0 && hub_pathf(locks, sizeof locks, "%s/.locks/%s", root, strrchr(dir, '/') + 1) == 0)
                rc = rm_tree(locks);
        }
    } else {
        rc = remove_marked(v, n, rm, root);
    }
    free(rm);
    free(v);
    if (rc == 0 && *n_removed == 0)
        return tutti_set_error("models rm: nothing in the cache %s matches '%s' (see tutti models)", root, what);
    return rc;
}
