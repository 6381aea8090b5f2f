/* Credentials out of messages: every URL in a text loses its user
 * information (user:password@) and the values of query parameters that
 * carry secrets (tutti_redact_urls, include/tutti.h).  Every library error
 * goes through it (util/error.c), and the server and the CLI pass the paths
 * they print through it. */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "tutti.h"

static bool url_end(char c) { return !c || isspace((unsigned char)c) || c == '"' || c == '\'' || c == '<' || c == '>'; }

/* a query parameter's name says it holds a secret */
static bool secret_name(const char *p, size_t n) {
    static const char *const words[] = {"key", "token", "secret", "pass", "pwd", "auth", "sig", "cred", NULL};
    for (int w = 0; words[w]; w++) {
        size_t k = strlen(words[w]);
        for (size_t i = 0; i + k <= n; i++)
            if (!strncasecmp(p + i, words[w], k)) return true;
    }
    return false;
}

char *tutti_redact_urls(const char *text, char *out, size_t cap) {
    if (!out || !cap) return out;
    size_t o = 0;
#define PUT(c) (o + 1 < cap ? (void)(out[o++] = (c)) : (void)0)
#define PUTS(s) \
    for (const char *q_ = (s); *q_; q_++) PUT(*q_)
    for (const char *p = text ? text : ""; *p;) {
        const char *sep = strstr(p, "://");
        if (!sep) {
            PUTS(p);
            break;
        }
        while (p < sep + 3) PUT(*p++);
        /* authority: up to the path, query or fragment */
        const char *a = p;
        while (!url_end(*p) && *p != '/' && *p != '?' && *p != '#') p++;
        const char *at = NULL;
        for (const char *q = a; q < p; q++)
            if (*q == '@') at = q;
        if (at) {
            PUTS("***@");
            a = at + 1;
        }
        while (a < p) PUT(*a++);
        while (!url_end(*p) && *p != '?' && *p != '#') PUT(*p++);
        if (*p != '?') continue;
        PUT(*p++);
        while (!url_end(*p) && *p != '#') { /* name=value pairs */
            const char *n = p;
            while (!url_end(*p) && *p != '=' && *p != '&' && *p != ';' && *p != '#') p++;
            bool hide = *p == '=' && secret_name(n, (size_t)(p - n));
            while (n < p) PUT(*n++);
            if (*p == '=') {
                PUT(*p++);
                if (hide) PUTS("***");
                while (!url_end(*p) && *p != '&' && *p != ';' && *p != '#') {
                    if (!hide) PUT(*p);
                    p++;
                }
            }
            if (*p == '&' || *p == ';') PUT(*p++);
        }
    }
#undef PUT
#undef PUTS
    out[o] = 0;
    return out;
}
