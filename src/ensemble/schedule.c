/* The schedule of an ensemble's forward passes: members one after the other
 * with every thread each, or concurrently with a share each, whichever
 * the calibration below measures faster on this machine.
 *
 * Its result is cached per machine, member files and thread counts, so an
 * ensemble start pays the measurement (a warm-up pass plus three rounds per
 * member and mode: seconds on heavy members) once.
 *
 * File: $XDG_CACHE_HOME/tutti/schedule (else $HOME/.cache/tutti/schedule),
 * one line per key: "<key hex> <t_seq> <t_par> <busy_at>".  busy_at is 0
 * for a measurement on a machine no busier than its CPUs (load average at
 * most the CPU count), else the time (Unix seconds) of a measurement taken
 * while other programs competed for the CPUs: such a one describes that
 * moment, not the machine, and is used for BUSY_TTL_S only (a three-field
 * line of an earlier version counts as quiet).  The key hashes the host
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
#include <time.h>
#include <unistd.h>

#include <math.h>
#include <pthread.h>

#include "ensemble/ensemble.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/hash.h"

/* how long a measurement taken on a busy machine is reused */
#define BUSY_TTL_S 600

/* ---- the cache ---- */

int ens_schedule_cache_key(const char *const *paths, int32_t n, int32_t threads_each, int32_t threads_all,
                           uint64_t *key) {
    uint64_t h = 1469598103934665603ull;
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    h = tutti_fnv1a(h, host, strlen(host) + 1);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t v[3] = {(int32_t)cpus, threads_each, threads_all};
    h = tutti_fnv1a(h, v, sizeof v);
    for (int32_t i = 0; i < n; i++) {
        char abs[PATH_MAX];
        struct stat st;
        if (!realpath(paths[i], abs) || stat(abs, &st) != 0) return -1;
        int64_t meta[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
        h = tutti_fnv1a(h, abs, strlen(abs) + 1);
        h = tutti_fnv1a(h, meta, sizeof meta);
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

bool ens_schedule_cache_get(uint64_t key, double *t_seq, double *t_par, char *path, size_t cap) {
    if (!cache_path(path, cap, false)) return false;
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    bool found = false;
    const long long now = (long long)time(NULL);
    while (fgets(line, sizeof line, f)) {
        unsigned long long k;
        double s, p;
        long long busy_at = 0;
        int nf = sscanf(line, "%llx %lf %lf %lld", &k, &s, &p, &busy_at);
        bool fresh = busy_at == 0 || (busy_at <= now + 60 && now - busy_at <= BUSY_TTL_S);
        if (nf >= 3 && k == key && s > 0 && p > 0 && s < 1e6 && p < 1e6 && fresh) {
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
    int64_t busy_at;
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
            long long busy_at = 0;
            if (sscanf(line, "%llx %lf %lf %lld", &k, &s, &p, &busy_at) >= 3 && k != c->key) {
                fprintf(out, "%016llx %.9g %.9g %lld\n", k, s, p, busy_at);
                kept++;
            }
        }
        fclose(in);
    }
    fprintf(out, "%016llx %.9g %.9g %lld\n", (unsigned long long)c->key, c->t_seq, c->t_par, (long long)c->busy_at);
    return 0;
}

void ens_schedule_cache_put(uint64_t key, double t_seq, double t_par, int64_t busy_at, char *path, size_t cap) {
    if (!cache_path(path, cap, true)) return;
    /* written to a temporary file and renamed (util/file.h), so a
     * concurrent reader sees the old file or the new one; a cache that
     * cannot be written is only slower next time */
    cache_put c = {path, key, t_seq, t_par, busy_at};
    (void)tutti_write_atomic(path, write_cache, &c);
}

int64_t ens_schedule_busy_at(void) {
    double load = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(&load, 1) != 1 || cpus < 1) return 0; /* unknown: as quiet, as before */
    return load > (double)cpus ? (int64_t)time(NULL) : 0;
}

/* ---- the calibration ---- */

typedef struct calib_job {
    tutti_session *s;
    int32_t tok, reps;
    int rc;
} calib_job;

/* reps one-token steps at position 0: the weights are read once per step,
 * as in generation (attention over a short context is negligible). */
static int calib_steps(tutti_session *s, int32_t tok, int32_t reps) {
    for (int32_t r = 0; r < reps; r++)
        if (tutti_session_rewind(s, 0) < 0 || tutti_session_eval(s, &tok, 1, NULL) < 0) return TUTTI_ERR;
    return 0;
}

static void *calib_main(void *arg) {
    calib_job *j = arg;
    j->rc = calib_steps(j->s, j->tok, j->reps);
    return NULL;
}

int ens_members_calibrate(fusion_member *const *m, int32_t n, int32_t n_threads_each, int32_t n_threads_all,
                          double *t_seq, double *t_par) {
    if (n < 1 || n > 64) return tutti_set_error("calibration: %d members", n);
    tutti_session *seq[64] = {0}, *par[64] = {0};
    calib_job job[64];
    pthread_t th[64];
    int rc = TUTTI_ERR;
    double warm = 0;
    for (int32_t i = 0; i < n; i++) {
        tutti_model *model = fusion_member_local_model(m[i]);
        if (!model) {
            tutti_set_error("calibration: member %s is not local", m[i]->name);
            goto out;
        }
        tutti_session_params sp = tutti_session_default_params();
        sp.n_ctx = 8;
        sp.n_threads = n_threads_all;
        seq[i] = tutti_session_new(model, &sp);
        sp.n_threads = n_threads_each;
        par[i] = tutti_session_new(model, &sp);
        if (!seq[i] || !par[i]) goto out;
        int32_t tok = m[i]->bos >= 0 ? m[i]->bos : 0;
        /* warm-up: page in the weights (and time a step for the rep count) */
        double t0 = tutti_now_s();
        if (calib_steps(seq[i], tok, 1) < 0 || calib_steps(par[i], tok, 1) < 0) goto out;
        warm += tutti_now_s() - t0;
    }
    /* three rounds that alternate the two modes (so a drift in the machine's
     * load hits both), about 30 ms of steps per mode and round, at least one;
     * the fastest round of each mode counts */
    int32_t reps = warm > 0 ? (int32_t)(0.03 / warm) : 32;
    reps = reps < 1 ? 1 : reps > 32 ? 32 : reps;
    *t_seq = *t_par = INFINITY;
    for (int round = 0; round < 3; round++) {
        double t0 = tutti_now_s();
        for (int32_t i = 0; i < n; i++)
            if (calib_steps(seq[i], m[i]->bos >= 0 ? m[i]->bos : 0, reps) < 0) goto out;
        double ts = (tutti_now_s() - t0) / reps;
        if (ts < *t_seq) *t_seq = ts;
        t0 = tutti_now_s();
        int32_t started = 0;
        for (int32_t i = 0; i < n; i++) {
            job[i] = (calib_job){par[i], m[i]->bos >= 0 ? m[i]->bos : 0, reps, 0};
            if (pthread_create(&th[i], NULL, calib_main, &job[i]) != 0) break;
            started++;
        }
        for (int32_t i = 0; i < started; i++) pthread_join(th[i], NULL);
        double tp = (tutti_now_s() - t0) / reps;
        if (tp < *t_par) *t_par = tp;
        if (started < n) {
            tutti_set_error("calibration: cannot start threads");
            goto out;
        }
        for (int32_t i = 0; i < n; i++)
            if (job[i].rc < 0) goto out;
    }
    rc = 0;
    for (int32_t i = 0; i < n; i++)
        if (job[i].rc < 0) rc = TUTTI_ERR;
out:
    for (int32_t i = 0; i < n; i++) {
        tutti_session_free(seq[i]);
        tutti_session_free(par[i]);
    }
    return rc;
}
