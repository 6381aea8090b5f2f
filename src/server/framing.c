/* HTTP/1.1 framing checks (see framing.h). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/framing.h"

/* RFC 9110 §5.6.2 tchar */
static bool tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

/* value without the optional whitespace around it (RFC 9110 §5.5) */
static void trim(const char *v, const char **a, size_t *n) {
    size_t k = strlen(v);
    while (k && (*v == ' ' || *v == '\t')) v++, k--;
    while (k && (v[k - 1] == ' ' || v[k - 1] == '\t')) k--;
    *a = v, *n = k;
}

/* a Content-Length value: comma-separated decimal numbers, all equal (one
 * value in *len); -1 when a member is not digits or they differ */
static int content_length(const char *v, unsigned long long *len, bool *have) {
    const char *p = v;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        const char *d = p;
        unsigned long long x = 0;
        while (*p >= '0' && *p <= '9') {
            if (x > (~0ull - 9) / 10) return -1;
            x = x * 10 + (unsigned)(*p++ - '0');
        }
        if (p == d) return -1;
        if (*have && x != *len) return -1;
        *len = x, *have = true;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) return 0;
        if (*p++ != ',') return -1;
    }
}

int srv_framing_check(const srv_header *h, size_t n, char *err, size_t cap) {
    size_t n_te = 0, n_cl = 0;
    const char *te = NULL;
    unsigned long long len = 0;
    bool have = false;
    for (size_t i = 0; i < n; i++) {
        if (!h[i].name || !h[i].value) continue;
        if (!strcasecmp(h[i].name, "Transfer-Encoding")) {
            n_te++;
            te = h[i].value;
        } else if (!strcasecmp(h[i].name, "Content-Length")) {
            n_cl++;
            if (content_length(h[i].value, &len, &have) < 0)
                return snprintf(err, cap,
                                "conflicting or malformed Content-Length (RFC 9112 section 6.3): give one "
                                "length in decimal digits"),
                       400;
        }
    }
    if (n_te) {
        const char *a;
        size_t k;
        trim(te, &a, &k);
        if (n_te > 1 || k != 7 || strncasecmp(a, "chunked", 7))
            return snprintf(err, cap,
                            "Transfer-Encoding '%.60s' is not supported: only a single 'chunked' coding "
                            "(RFC 9112 section 6.3)",
                            n_te > 1 ? "(several headers)" : te),
                   400;
        if (n_cl)
            return snprintf(err, cap,
                            "both Transfer-Encoding and Content-Length: the body's length would be "
                            "ambiguous (RFC 9112 section 6.3); send one of them"),
                   400;
    }
    return 0;
}

bool srv_request_line_ok(const char *line, size_t n) {
    const unsigned char *s = (const unsigned char *)line;
    size_t i = 0;
    while (i < n && tchar(s[i])) i++;
    if (i == 0 || i >= n || s[i] != ' ') return false;
    size_t t = ++i;
    while (i < n && s[i] > 0x20 && s[i] < 0x7F) i++;
    if (i == t || i >= n || s[i] != ' ') return false;
    i++;
    return n - i == 8 && !memcmp(s + i, "HTTP/", 5) && s[i + 5] >= '0' && s[i + 5] <= '9' && s[i + 6] == '.' &&
           s[i + 7] >= '0' && s[i + 7] <= '9';
}

int srv_first_line(const char *buf, size_t n, size_t max) {
    size_t i = 0;
    /* empty lines before the request line (CRLF, or a bare LF) */
    while (i < n && (buf[i] == '\n' || (buf[i] == '\r' && i + 1 < n && buf[i + 1] == '\n')))
        i += buf[i] == '\r' ? 2 : 1;
    const char *lf = i < n ? memchr(buf + i, '\n', n - i) : NULL;
    if (!lf) {
        /* an incomplete line may already be garbage: a byte no request line holds */
        for (size_t k = i; k < n; k++) {
            unsigned char c = (unsigned char)buf[k];
            if ((c < 0x20 && c != '\r') || c >= 0x7F) return -1;
        }
        return n >= max ? -1 : 0;
    }
    size_t e = (size_t)(lf - buf);
    if (e > i && buf[e - 1] == '\r') e--;
    return srv_request_line_ok(buf + i, e - i) ? 1 : -1;
}
