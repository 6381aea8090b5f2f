/* One file from the hub into the cache (see hub.h and hub_download_file).
 *
 * The bytes go to dest.incomplete (huggingface_hub's name for a partial
 * blob, so either tool resumes the other's), under an exclusive flock on the
 * lock file: a second process wanting the same blob waits, then finds it
 * done.  An interrupted transfer is resumed with "Range: bytes=N-" (a 200
 * instead of a 206 starts the file over); the file is renamed to dest only
 * once its size and sha256 are those the hub gave, so nothing half-written
 * or corrupted is ever opened as a model.  Redirects (the hub sends the
 * bytes from a CDN) are followed, at most 5, over http(s) only; libcurl does
 * not send the token to another host. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hub/hub.h"
#include "hub/sha256.h"
#include "net/http.h"
#include "util/clock.h"
#include "util/error.h"

#define MAX_ATTEMPTS 3
#define MAX_REDIRECTS 5L

double hub_retry_delay_s = 1.0;

typedef struct xfer {
    const hub_download *d;
    int fd;
    int64_t have;        /* bytes of the partial file when the request was sent */
    int64_t got;         /* written by this request */
    bool ranged;         /* the request asked for bytes have.. */
    bool started;        /* the first body bytes were checked */
    long status;         /* of the latest response in the redirect chain */
    int64_t range_start; /* its Content-Range start, -1 none */
    char linked_sha[65]; /* X-Linked-Etag of any response: the hub's sha256 of an LFS file */
    char err[320];       /* why the transfer was aborted from a callback */
    bool disk_error;     /* ... because of the local file (not worth retrying) */
    double t0, t_shown;
    bool tty;
} xfer;

static void mib(char *buf, size_t cap, double bytes) {
    if (bytes < 1 << 20) snprintf(buf, cap, "%.0f KiB", bytes / 1024);
    else if (bytes < 1024.0 * (1 << 20)) snprintf(buf, cap, "%.1f MiB", bytes / (1 << 20));
    else snprintf(buf, cap, "%.2f GiB", bytes / (1024.0 * (1 << 20)));
}

/* "12.3 MiB / 45.6 MiB (27%), 3.4 MiB/s, 10 s left" */
static void progress_line(const xfer *x, double done, double total, double rate, char *buf, size_t cap) {
    char a[32], b[32], r[32];
    mib(a, sizeof a, done);
    mib(r, sizeof r, rate);
    if (total > 0) {
        mib(b, sizeof b, total);
        double left = rate > 0 ? (total - done) / rate : -1;
        char eta[32] = "";
        if (left >= 0) snprintf(eta, sizeof eta, ", %.0f s left", left);
        snprintf(buf, cap, "%s: %s / %s (%.0f%%), %s/s%s", x->d->label, a, b, 100.0 * done / total, r, eta);
    } else {
        snprintf(buf, cap, "%s: %s, %s/s", x->d->label, a, r);
    }
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)ultotal, (void)ulnow;
    xfer *x = ud;
    if (!x->d->progress || dlnow <= 0) return 0;
    double t = tutti_now_s();
    /* a terminal: the line redrawn 4 times a second; a log: one line every 10 s */
    if (t - x->t_shown < (x->tty ? 0.25 : 10.0)) return 0;
    x->t_shown = t;
    double total = x->d->size > 0 ? (double)x->d->size : dltotal > 0 ? (double)(x->have + dltotal) : 0;
    char line[512];
    progress_line(x, (double)(x->have + dlnow), total, (double)dlnow / (t - x->t0 + 1e-9), line, sizeof line);
    fprintf(stderr, x->tty ? "\rtutti: %s\033[K" : "tutti: %s\n", line);
    return 0;
}

/* Header names are case-insensitive; values lose blanks and quotes. */
static bool header_value(const char *line, size_t n, const char *name, char *out, size_t cap) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':') return false;
    const char *v = line + k + 1, *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t')) v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) e--;
    if (e - v >= 2 && v[0] == 'W' && v[1] == '/') v += 2;
    if (e - v >= 2 && *v == '"' && e[-1] == '"') v++, e--;
    size_t len = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
    memcpy(out, v, len);
    out[len] = 0;
    return true;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t n = sz * nm;
    char v[128];
    if (n > 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after a redirect) */
        const char *sp = memchr(p, ' ', n);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->range_start = -1;
    } else if (header_value(p, n, "content-range", v, sizeof v)) {
        long long a;
        if (sscanf(v, "bytes %lld-", &a) == 1) x->range_start = a;
    } else if (header_value(p, n, "x-linked-etag", v, sizeof v)) {
        if (hub_hex_valid(v, strlen(v), 64) && !x->linked_sha[0]) {
            for (int i = 0; i < 64; i++) x->linked_sha[i] = (char)(v[i] >= 'A' && v[i] <= 'F' ? v[i] + 32 : v[i]);
            x->linked_sha[64] = 0;
        }
    }
    return n;
}

static bool write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

/* The first body bytes decide what they are: the rest of the partial file
 * (206 from its end), the whole file (200: start over) or neither. */
static bool start_body(xfer *x) {
    x->started = true;
    if (x->ranged && x->status == 206) {
        if (x->range_start == x->have) return true;
        snprintf(x->err, sizeof x->err, "the server resumed at byte %lld, not at %lld", (long long)x->range_start,
                 (long long)x->have);
        return false;
    }
    if (x->status == 200) {
        if (x->have > 0 && (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) != 0)) {
            snprintf(x->err, sizeof x->err, "cannot restart the partial file: %s", strerror(errno));
            x->disk_error = true;
            return false;
        }
        x->have = 0;
        return true;
    }
    snprintf(x->err, sizeof x->err, "unexpected HTTP status %ld", x->status);
    return false;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t n = sz * nm;
    if (!x->started && !start_body(x)) return 0;
    if (x->d->size >= 0 && x->have + x->got + (int64_t)n > x->d->size) {
        snprintf(x->err, sizeof x->err, "the server sends more than the %lld bytes the hub's listing gives",
                 (long long)x->d->size);
        return 0;
    }
    if (!write_all(x->fd, p, n)) {
        snprintf(x->err, sizeof x->err, "cannot write %s.incomplete: %s", x->d->dest, strerror(errno));
        x->disk_error = true;
        return 0;
    }
    x->got += (int64_t)n;
    return n;
}

/* One request; returns the libcurl code. */
static CURLcode request(xfer *x) {
    CURL *c = curl_easy_init();
    if (!c) return CURLE_OUT_OF_MEMORY;
    struct curl_slist *hdr = curl_slist_append(NULL, "User-Agent: tutti");
    char auth[600] = "", range[64];
    if (hdr && x->d->token && *x->d->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", x->d->token);
        struct curl_slist *h2 = curl_slist_append(hdr, auth);
        memset(auth, 0, sizeof auth);
        if (h2) hdr = h2;
    }
    curl_easy_setopt(c, CURLOPT_URL, x->d->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (under 1 KiB/s for a minute) is cut and resumed */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (x->ranged) {
        snprintf(range, sizeof range, "%lld-", (long long)x->have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    if (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code) x->status = code;
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    return rc;
}

/* The message for an HTTP error status; fatal ones are not retried. */
static int status_error(const hub_download *d, long status, bool *fatal) {
    *fatal = !(status >= 500 || status == 429 || status == 408);
    if (status == 401)
        return tutti_set_error("%s: the hub refused the download (401 unauthorized): a private or gated repository "
                               "needs a token: set HF_TOKEN (or --hf-token) to one that can read it",
                               d->label);
    if (status == 403)
        return tutti_set_error("%s: the hub refused the download (403 forbidden): the token in HF_TOKEN cannot read "
                               "this repository (a gated model: accept its terms on its page first)",
                               d->label);
    if (status == 404)
        return tutti_set_error("%s: not found on the hub (404): the repository or the file is gone", d->label);
    return tutti_set_error("%s: the hub answered HTTP %ld", d->label, status);
}

/* The finished partial file: its size and digest checked, then renamed. */
static int finish(const hub_download *d, xfer *x, const char *part, bool *retry) {
    struct stat st;
    *retry = false;
    if (fstat(x->fd, &st) != 0) return tutti_set_error("%s: %s", part, strerror(errno));
    if (d->size >= 0 && st.st_size != d->size) {
        *retry = true;
        return tutti_set_error("%s: the transfer ended after %lld of %lld bytes", d->label, (long long)st.st_size,
                               (long long)d->size);
    }
    const char *want = d->sha256 && d->sha256[0] ? d->sha256 : x->linked_sha[0] ? x->linked_sha : NULL;
    if (want) {
        char got[65];
        if (hub_sha256_file(part, got) < 0) return TUTTI_ERR;
        if (strcmp(got, want) != 0) {
            unlink(part); /* corrupted: start from nothing next time */
            *retry = true;
            return tutti_set_error("%s: the downloaded file is corrupted: its sha256 is %s, the hub gives %s "
                                   "(the partial file was removed; run again to download it anew)",
                                   d->label, got, want);
        }
    }
    if (fsync(x->fd) != 0 || rename(part, d->dest) != 0)
        return tutti_set_error("%s: cannot move the download to %s: %s", d->label, d->dest, strerror(errno));
    /* The written pages are cached in small folios, which a model's mapping
     * would map with 4 KiB pages (and the loader then copies the weights,
     * src/model/load.c): drop them, so that the first load reads the file
     * into 2 MiB folios and uses it in place.  Advisory. */
    (void)posix_fadvise(x->fd, 0, 0, POSIX_FADV_DONTNEED);
    return 0;
}

/* Attempts with resume; the lock is held by the caller. */
static int attempts(const hub_download *d, const char *part) {
    double delay = hub_retry_delay_s;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        xfer x = {.d = d, .range_start = -1, .tty = isatty(STDERR_FILENO) != 0};
        x.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (x.fd < 0) return tutti_set_error("%s: cannot create %s: %s", d->label, part, strerror(errno));
        struct stat st;
        x.have = fstat(x.fd, &st) == 0 ? (int64_t)st.st_size : 0;
        if (d->size >= 0 && x.have > d->size) x.have = ftruncate(x.fd, 0) == 0 ? 0 : x.have;
        lseek(x.fd, x.have, SEEK_SET);
        bool retry = true, fatal = false;
        int rc = TUTTI_ERR;
        if (d->size < 0 || x.have < d->size) {
            x.ranged = x.have > 0;
            x.t0 = x.t_shown = tutti_now_s();
            if (d->progress && x.have > 0) {
                char a[32];
                mib(a, sizeof a, (double)x.have);
                fprintf(stderr, "tutti: %s: resuming after %s\n", d->label, a);
            }
            CURLcode cr = request(&x);
            if (d->progress && x.tty) fprintf(stderr, "\r\033[K");
            if (cr == CURLE_HTTP_RETURNED_ERROR && x.status == 416 && x.have > 0) {
                rc = finish(d, &x, part, &retry); /* nothing after byte have: the partial file is whole */
            } else if (cr == CURLE_HTTP_RETURNED_ERROR) {
                rc = status_error(d, x.status, &fatal);
            } else if (cr == CURLE_TOO_MANY_REDIRECTS || cr == CURLE_UNSUPPORTED_PROTOCOL) {
                fatal = true;
                rc = tutti_set_error("%s: %s (at most %ld redirects, over http or https)", d->label,
                                     curl_easy_strerror(cr), MAX_REDIRECTS);
            } else if (cr != CURLE_OK) {
                fatal = x.disk_error; /* the disk, not the network */
                rc = tutti_set_error("%s: the download stopped after %lld bytes: %s", d->label,
                                     (long long)(x.have + x.got), x.err[0] ? x.err : curl_easy_strerror(cr));
            } else {
                rc = finish(d, &x, part, &retry);
            }
        } else {
            rc = finish(d, &x, part, &retry);
        }
        close(x.fd);
        if (rc == 0) return 0;
        if (fatal || !retry || attempt + 1 == MAX_ATTEMPTS) return TUTTI_ERR;
        if (d->progress) fprintf(stderr, "tutti: %s; trying again in %.0f s\n", tutti_last_error(), delay);
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        delay *= 2;
    }
    return TUTTI_ERR;
}

int hub_download_file(const hub_download *d) {
    if (remote_http_init() < 0) return TUTTI_ERR;
    if (hub_mkdirs(d->lock, false) < 0 || hub_mkdirs(d->dest, false) < 0) return TUTTI_ERR;
    int lk = open(d->lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0664);
    if (lk < 0) return tutti_set_error("%s: cannot open the lock file %s: %s", d->label, d->lock, strerror(errno));
    if (flock(lk, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            int e = errno;
            close(lk);
            return tutti_set_error("%s: cannot lock %s: %s (a file system without flock?)", d->label, d->lock,
                                   strerror(e));
        }
        if (d->progress) fprintf(stderr, "tutti: %s: waiting for another process downloading it\n", d->label);
        while (flock(lk, LOCK_EX) != 0 && errno == EINTR) {
        }
    }
    int rc = 0;
    if (access(d->dest, F_OK) != 0) { /* not done meanwhile by the lock's previous holder */
        char part[HUB_PATH_CAP];
        double t0 = tutti_now_s();
        if (d->progress) {
            char a[32] = "size unknown";
            if (d->size >= 0) mib(a, sizeof a, (double)d->size);
            fprintf(stderr, "tutti: downloading %s (%s)\n", d->label, a);
        }
        rc = hub_pathf(part, sizeof part, "%s.incomplete", d->dest);
        if (rc == 0) rc = attempts(d, part);
        if (rc == 0 && d->progress) {
            struct stat st;
            char a[32], r[32];
            double t = tutti_now_s() - t0, n = stat(d->dest, &st) == 0 ? (double)st.st_size : 0;
            mib(a, sizeof a, n);
            mib(r, sizeof r, n / (t + 1e-9));
            fprintf(stderr, "tutti: %s: %s in %.1f s (%s/s)\n", d->label, a, t, r);
        }
    }
    flock(lk, LOCK_UN);
    close(lk); /* the lock file stays: removing it would let a third process lock a new one */
    return rc;
}
