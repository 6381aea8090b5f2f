#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_error[1024];
static _Thread_local int g_kind = TUTTI_ERR;

/* Every message goes through here: no credentials of a URL in any of them. */
static int set(int kind, const char *fmt, va_list ap) {
    char raw[sizeof g_error];
    vsnprintf(raw, sizeof raw, fmt, ap);
    tutti_redact_urls(raw, g_error, sizeof g_error);
    g_kind = kind;
    return TUTTI_ERR;
}

int tutti_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set(TUTTI_ERR, fmt, ap);
    va_end(ap);
    return TUTTI_ERR;
}

int tutti_set_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set(TUTTI_ERR_UNSUPPORTED, fmt, ap);
    va_end(ap);
    return TUTTI_ERR;
}

void tutti_error_prefix(const char *fmt, ...) {
    char prefix[512], old[sizeof g_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_error, sizeof old);
    /* Truncation is fine here: the message stays NUL-terminated. */
    size_t n = strlen(prefix);
    if (n > sizeof g_error - 3) n = sizeof g_error - 3;
    memcpy(g_error, prefix, n);
    memcpy(g_error + n, ": ", 2);
    size_t m = strlen(old);
    if (m > sizeof g_error - n - 3) m = sizeof g_error - n - 3;
    memcpy(g_error + n + 2, old, m);
    g_error[n + 2 + m] = 0;
    memcpy(old, g_error, sizeof old);
    tutti_redact_urls(old, g_error, sizeof g_error);
}

const char *tutti_last_error(void) { return g_error[0] ? g_error : "no error recorded"; }
int tutti_last_error_kind(void) { return g_kind; }
