/* The server's error text for a request, a config file or a model spec:
 * fmt into err[cap] and -1, so that a parser writes
 * `return srv_fail(err, cap, "...")`.  Header-only (static inline), shared
 * by the parsers that the fuzz harnesses also drive (pipeline_config.c). */
#ifndef TUTTI_SERVER_FAIL_H
#define TUTTI_SERVER_FAIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int srv_fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int srv_fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

#endif
