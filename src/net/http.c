/* HTTP client for remote members: libcurl easy interface, one handle per
 * member so connections are reused (keep-alive), total timeout per request. */
#include "net/http.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "util/error.h"

#define MAX_RESPONSE (64u << 20)

struct remote_http {
    CURL *curl;
    struct curl_slist *hdr;
    char *base;
    char *url; /* scratch: base + path */
    size_t url_cap;
    char *buf; /* response body */
    size_t n, cap;
    int overflow;
    long timeout_ms;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc = CURLE_OK;
/* curl_global_init is not thread-safe and must run once per process. */
static void global_init(void) { g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
    remote_http *h = ud;
    size_t k = sz * nm;
    if (h->n + k + 1 > MAX_RESPONSE) {
        h->overflow = 1;
        return 0; /* aborts the transfer */
    }
    if (h->n + k + 1 > h->cap) {
        size_t c = h->cap ? h->cap : 4096;
        while (c < h->n + k + 1) c *= 2;
        char *nb = realloc(h->buf, c);
        if (!nb) return 0;
        h->buf = nb, h->cap = c;
    }
    memcpy(h->buf + h->n, p, k);
    h->n += k;
    h->buf[h->n] = 0;
    return k;
}

const char *remote_http_base(const remote_http *h) { return h->base; }

int remote_http_init(void) {
    pthread_once(&g_once, global_init);
    if (g_init_rc != CURLE_OK)
        return tutti_set_error("remote: libcurl initialisation failed: %s", curl_easy_strerror(g_init_rc));
    return 0;
}

remote_http *remote_http_new(const char *base, long timeout_ms, const char *api_key) {
    if (remote_http_init() < 0) return NULL;
    remote_http *h = calloc(1, sizeof *h);
    if (!h) return tutti_set_error("remote: out of memory"), NULL;
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/') bl--; /* "http://h:1/" + "/completion" */
    h->base = malloc(bl + 1);
    h->curl = curl_easy_init();
    if (!h->base || !h->curl) {
        remote_http_free(h);
        tutti_set_error("remote: cannot create an HTTP handle for %s", base);
        return NULL;
    }
    memcpy(h->base, base, bl);
    h->base[bl] = 0;
    h->timeout_ms = timeout_ms;
    h->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    /* no "Expect: 100-continue" round trip on larger bodies */
    if (h->hdr) h->hdr = curl_slist_append(h->hdr, "Expect:");
    if (h->hdr && api_key && *api_key) {
        size_t kl = strlen(api_key);
        char *line = malloc(kl + 32);
        if (line) {
            snprintf(line, kl + 32, "Authorization: Bearer %s", api_key);
            struct curl_slist *nh = curl_slist_append(h->hdr, line);
            memset(line, 0, kl + 32);
            free(line);
            if (!nh) curl_slist_free_all(h->hdr);
            h->hdr = nh;
        } else {
            curl_slist_free_all(h->hdr);
            h->hdr = NULL;
        }
    }
    if (!h->hdr) {
        remote_http_free(h);
        tutti_set_error("remote: out of memory");
        return NULL;
    }
    CURL *c = h->curl;
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    /* signals are not safe with several threads; timeouts still work */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* small requests, one per step: do not wait to coalesce packets */
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    /* only http(s), no redirects to elsewhere (the key must not travel) */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    return h;
}

void remote_http_free(remote_http *h) {
    if (!h) return;
    if (h->curl) curl_easy_cleanup(h->curl);
    curl_slist_free_all(h->hdr); /* holds the key: libcurl copies it, the list is ours */
    free(h->base), free(h->url), free(h->buf);
    free(h);
}

int remote_http_request(remote_http *h, const char *path, const char *body, const char **resp, size_t *n) {
    size_t need = strlen(h->base) + strlen(path) + 1;
    if (need > h->url_cap) {
        char *u = realloc(h->url, need);
        if (!u) return tutti_set_error("remote %s: out of memory", h->base);
        h->url = u, h->url_cap = need;
    }
    snprintf(h->url, need, "%s%s", h->base, path);
    h->n = 0;
    h->overflow = 0;
    if (h->buf) h->buf[0] = 0;
    CURL *c = h->curl;
    curl_easy_setopt(c, CURLOPT_URL, h->url);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    CURLcode rc = curl_easy_perform(c);
    if (h->overflow) return tutti_set_error("%s: response larger than %u MiB", h->url, MAX_RESPONSE >> 20);
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return tutti_set_error("%s: no answer within %ld ms (timeout)", h->url, h->timeout_ms);
    if (rc != CURLE_OK) return tutti_set_error("%s: %s", h->url, curl_easy_strerror(rc));
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (!h->buf) {
        h->buf = malloc(1);
        if (!h->buf) return tutti_set_error("remote %s: out of memory", h->base);
        h->buf[0] = 0, h->cap = 1;
    }
    *resp = h->buf;
    *n = h->n;
    return (int)status;
}
