#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_error[1024];

int tutti_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char raw[sizeof g_error];
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    tutti_redact_urls(raw, g_error, sizeof g_error); /* no credentials in any message */
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
