#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_error[1024];

int tutti_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
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
    snprintf(g_error, sizeof g_error, "%s: %s", prefix, old);
}

const char *tutti_last_error(void) { return g_error[0] ? g_error : "no error recorded"; }
