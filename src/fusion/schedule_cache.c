/* The scheduling calibration's result, cached per machine, member files
 * and thread counts, so an ensemble start pays the measurement (a warm-up
 * pass plus three rounds per member and mode: seconds on heavy members)
 * once.
 *
 * File: $XDG_CACHE_HOME/tutti/schedule (else $HOME/.cache/tutti/schedule),
 * one line per key: "<key hex> <t_seq> <t_par>".  The key hashes the host
 * name, the online CPU count, both thread counts and every member's
 * absolute path, size and modification time (a rebuilt or replaced model
 * is measured again).  A missing, unreadable or malformed file is a cache
 * miss; a failed write is ignored (the measurement stands). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fusion/ensemble_impl.h"
#include "util/file.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

int fusion_schedule_cache_key(const char *const *paths, int32_t n, int32_t threads_each, int32_t threads_all,
                              uint64_t *key) {
    uint64_t h = 1469598103934665603ull;
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    h = fnv(h, host, strlen(host) + 1);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t v[3] = {(int32_t)cpus, threads_each, threads_all};
    h = fnv(h, v, sizeof v);
    for (int32_t i = 0; i < n; i++) {
        char abs[PATH_MAX];
        struct stat st;
        if (!realpath(paths[i], abs) || stat(abs, &st) != 0) return -1;
        int64_t meta[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
        h = fnv(h, abs, strlen(abs) + 1);
        h = fnv(h, meta, sizeof meta);
    }
    *key = h;
    return 0;
}

/* The cache file's path into buf; false when neither variable is set. */
static bool cache_path(char *buf, size_t cap, bool make_dir) {
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[PATH_MAX];
    if (x && *x) snprintf(dir, sizeof dir, "%s", x);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache", home);
    else return false;
    if (make_dir) (void)mkdir(dir, 0755);
    int k = snprintf(buf, cap, "%s/tutti", dir);
    if (k < 0 || (size_t)k >= cap) return false;
    if (make_dir) (void)mkdir(buf, 0755);
    k = snprintf(buf, cap, "%s/tutti/schedule", dir);
    return k > 0 && (size_t)k < cap;
}

bool fusion_schedule_cache_get(uint64_t key, double *t_seq, double *t_par, char *path, size_t cap) {
    if (!cache_path(path, cap, false)) return false;
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long long k;
        double s, p;
        if (sscanf(line, "%llx %lf %lf", &k, &s, &p) == 3 && k == key && s > 0 && p > 0 && s < 1e6 && p < 1e6) {
            *t_seq = s, *t_par = p; /* the last entry for a key wins */
            found = true;
        }
    }
    fclose(f);
    return found;
}

typedef struct cache_put {
    const char *path;
    uint64_t key;
    double t_seq, t_par;
} cache_put;

/* The old lines of other keys, then this one. */
static int write_cache(FILE *out, void *ctx) {
    const cache_put *c = ctx;
    FILE *in = fopen(c->path, "r");
    int32_t kept = 0;
    if (in) {
        char line[256];
        while (fgets(line, sizeof line, in) && kept < 1000) {
            unsigned long long k;
            double s, p;
            if (sscanf(line, "%llx %lf %lf", &k, &s, &p) == 3 && k != c->key) {
                fprintf(out, "%016llx %.9g %.9g\n", k, s, p);
                kept++;
            }
        }
        fclose(in);
    }
    fprintf(out, "%016llx %.9g %.9g\n", (unsigned long long)c->key, c->t_seq, c->t_par);
    return 0;
}

void fusion_schedule_cache_put(uint64_t key, double t_seq, double t_par, char *path, size_t cap) {
    if (!cache_path(path, cap, true)) return;
    /* written to a temporary file and renamed (util/file.h), so a
     * concurrent reader sees the old file or the new one; a cache that
     * cannot be written is only slower next time */
    cache_put c = {path, key, t_seq, t_par};
    (void)tutti_write_atomic(path, write_cache, &c);
}
