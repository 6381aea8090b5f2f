/* The Hugging Face hub cache on disk (layout in hub.h), as llama.cpp's
 * common/hf-cache.cpp and huggingface_hub keep it, so the three share one
 * cache. */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hub/hub.h"
#include "util/error.h"

int hub_pathf(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap) return tutti_set_error("hub: a cache path is too long (%.200s...)", out);
    return 0;
}

int hub_cache_root(char *out, size_t cap) {
    /* llama.cpp's order: its own variable, the hub's, then the defaults */
    static const struct {
        const char *var, *sub;
    } vars[] = {{"LLAMA_CACHE", ""},
                {"HF_HUB_CACHE", ""},
                {"HUGGINGFACE_HUB_CACHE", ""},
                {"HF_HOME", "/hub"},
                {"XDG_CACHE_HOME", "/huggingface/hub"},
                {"HOME", "/.cache/huggingface/hub"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].var);
        if (v && *v) {
            if ((size_t)snprintf(out, cap, "%s%s", v, vars[i].sub) >= cap)
                return tutti_set_error("hub: $%s is too long for a cache folder", vars[i].var);
            return 0;
        }
    }
    const struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_dir && *pw->pw_dir && (size_t)snprintf(out, cap, "%s/.cache/huggingface/hub", pw->pw_dir) < cap)
        return 0;
    return tutti_set_error("hub: no cache folder: set LLAMA_CACHE (or HF_HOME) to one");
}

int hub_repo_dir(const char *root, const char *repo, char *out, size_t cap) {
    size_t o = (size_t)snprintf(out, cap, "%s/models--", root);
    for (const char *p = repo; *p && o + 3 < cap; p++) {
        if (*p == '/') out[o++] = '-', out[o++] = '-';
        else out[o++] = *p;
    }
    if (o + 3 >= cap) return tutti_set_error("hub: cache path too long for %s", repo);
    out[o] = 0;
    return 0;
}

bool hub_repo_from_dir(const char *name, char *repo, size_t cap) {
    if (strncmp(name, "models--", 8) != 0) return false;
    const char *s = name + 8, *sep = strstr(s, "--");
    if (!sep || strstr(sep + 2, "--")) return false; /* a "--" inside a name would be ambiguous */
    if ((size_t)snprintf(repo, cap, "%.*s/%s", (int)(sep - s), s, sep + 2) >= cap) return false;
    return hub_repo_valid(repo, strlen(repo));
}

int hub_mkdirs(const char *path, bool last_too) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return tutti_set_error("hub: path too long: %s", path);
    size_t n = strlen(p);
    if (!last_too) {
        while (n > 0 && p[n - 1] != '/') n--;
        p[n] = 0;
    }
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (p[0] && mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            return tutti_set_error("hub: cannot create the folder %s: %s", p, strerror(e));
        }
        p[i] = c;
        if (!c) break;
    }
    return 0;
}

static int read_commit(const char *path, char commit[41]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char buf[64] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
    if (!hub_hex_valid(buf, n, 40)) return -1;
    memcpy(commit, buf, 40);
    commit[40] = 0;
    return 0;
}

int hub_cache_ref(const char *repo_dir, char commit[41]) {
    char p[HUB_PATH_CAP];
    if (hub_pathf(p, sizeof p, "%s/refs/main", repo_dir) < 0) return TUTTI_ERR;
    if (read_commit(p, commit) == 0) return 0;
    if (hub_pathf(p, sizeof p, "%s/refs", repo_dir) < 0) return TUTTI_ERR;
    DIR *d = opendir(p);
    struct dirent *de;
    int rc = -1;
    while (d && rc < 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char q[HUB_PATH_CAP];
        if (hub_pathf(q, sizeof q, "%s/%s", p, de->d_name) == 0) rc = read_commit(q, commit);
    }
    if (d) closedir(d);
    return rc;
}

/* Writes data to path through a temporary file renamed into place. */
static int write_atomic(const char *path, const char *data) {
    char tmp[HUB_PATH_CAP];
    if (hub_pathf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) < 0) return TUTTI_ERR;
    FILE *f = fopen(tmp, "wb");
    if (!f) return tutti_set_error("hub: cannot write %s: %s", tmp, strerror(errno));
    bool ok = fputs(data, f) >= 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return tutti_set_error("hub: cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

int hub_cache_write_ref(const char *repo_dir, const char *commit) {
    char p[HUB_PATH_CAP];
    if (hub_pathf(p, sizeof p, "%s/refs/main", repo_dir) < 0 || hub_mkdirs(p, false) < 0) return TUTTI_ERR;
    return write_atomic(p, commit);
}

/* Appends the files under dir/rel (depth-limited, symlinks followed only to
 * read the size of what they name). */
static int walk(const char *dir, const char *rel, int depth, hub_listing *out) {
    char here[HUB_PATH_CAP];
    if (hub_pathf(here, sizeof here, "%s%s%s", dir, rel[0] ? "/" : "", rel) < 0) return 0;
    DIR *d = opendir(here);
    if (!d) return 0;
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char r[HUB_MAX_PATH + 2], full[HUB_PATH_CAP];
        int rl = snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        if (rl < 0 || rl > HUB_MAX_PATH || !hub_path_valid(r, strlen(r))) continue;
        if (hub_pathf(full, sizeof full, "%s/%s", dir, r) < 0) continue;
        struct stat lst, st;
        if (lstat(full, &lst) != 0) continue;
        if (S_ISDIR(lst.st_mode)) {
            if (depth < HUB_MAX_DEPTH) rc = walk(dir, r, depth + 1, out);
        } else if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            rc = hub_listing_add(out, r, (int64_t)st.st_size, NULL, NULL);
        }
    }
    closedir(d);
    return rc;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const hub_file *)a)->path, ((const hub_file *)b)->path);
}

int hub_cache_listing(const char *repo_dir, const char *commit, hub_listing *out) {
    memset(out, 0, sizeof *out);
    char snap[HUB_PATH_CAP];
    if (hub_pathf(snap, sizeof snap, "%s/snapshots/%s", repo_dir, commit) < 0) return TUTTI_ERR;
    int rc = walk(snap, "", 1, out);
    if (rc < 0) hub_listing_free(out);
    /* in path order, as the hub lists a tree (not the order of the folder) */
    else if (out->n > 1) qsort(out->files, (size_t)out->n, sizeof *out->files, by_path);
    return rc;
}

int hub_cache_link(const char *repo_dir, const char *commit, const char *path, const char *oid) {
    char link[HUB_PATH_CAP], target[HUB_PATH_CAP], tmp[HUB_PATH_CAP], blob[HUB_PATH_CAP];
    if (hub_pathf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, path) < 0 ||
        hub_pathf(blob, sizeof blob, "%s/blobs/%s", repo_dir, oid) < 0 ||
        hub_pathf(tmp, sizeof tmp, "%s.tmp.%d", link, (int)getpid()) < 0 || hub_mkdirs(link, false) < 0)
        return TUTTI_ERR;
    /* from snapshots/{commit}/{dirs of path}/ up to the repository folder */
    size_t o = 0;
    for (int up = 2; up > 0; up--) o += (size_t)snprintf(target + o, sizeof target - o, "../");
    for (const char *p = path; *p; p++)
        if (*p == '/') o += (size_t)snprintf(target + o, sizeof target - o, "../");
    if (hub_pathf(target + o, sizeof target - o, "blobs/%s", oid) < 0) return TUTTI_ERR;
    unlink(tmp);
    if (symlink(target, tmp) == 0) {
        if (rename(tmp, link) == 0) return 0;
        unlink(tmp);
    }
    /* no symlinks here (some file systems): the blob moves into the snapshot */
    if (rename(blob, link) == 0) return 0;
    return tutti_set_error("hub: cannot place %s in the cache (%s): %s", path, link, strerror(errno));
}

void hub_cache_touch(const char *snapshot_path) {
    /* the link's own time: the blob may be shared with other snapshots */
    (void)utimensat(AT_FDCWD, snapshot_path, NULL, AT_SYMLINK_NOFOLLOW);
}
