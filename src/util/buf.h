/* The growing byte buffer every layer appends text to (JSON answers,
 * metrics, generated text, schemas, YAML): data[0..*n) followed by a NUL, its
 * capacity at least doubling, so appending k bytes costs O(k) amortised.
 * Header-only (static inline), so the front ends (src/server) use the same
 * helper without linking anything of the library's. */
#ifndef TUTTI_UTIL_BUF_H
#define TUTTI_UTIL_BUF_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for need bytes at *data (capacity *cap; *data may be NULL).  0, or
 * -1 when out of memory (the buffer is left as it was). */
static inline int tutti_buf_reserve(char **data, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    char *p = realloc(*data, c);
    if (!p) return -1;
    *data = p, *cap = c;
    return 0;
}

/* Appends s[0..len) at *data + *n and a NUL after it.  0, or -1 when out
 * of memory (nothing appended). */
static inline int tutti_buf_append(char **data, size_t *n, size_t *cap, const void *s, size_t len) {
    if (tutti_buf_reserve(data, cap, *n + len + 1) < 0) return -1;
    if (len) memcpy(*data + *n, s, len);
    *n += len;
    (*data)[*n] = 0;
    return 0;
}

/* Appends the text fmt makes at *data + *n and a NUL after it (formatted
 * once when it fits in the capacity there is).  0, or -1 when out of memory
 * or the format fails (nothing appended). */
static inline int tutti_buf_vappendf(char **data, size_t *n, size_t *cap, const char *fmt, va_list ap) {
    va_list aq;
    va_copy(aq, ap);
    const size_t room = *data ? *cap - *n : 0;
    const int k = vsnprintf(*data ? *data + *n : NULL, room, fmt, aq);
    va_end(aq);
    if (k >= 0 && (size_t)k < room) return *n += (size_t)k, 0;
    if (k >= 0 && tutti_buf_reserve(data, cap, *n + (size_t)k + 1) == 0) {
        vsnprintf(*data + *n, (size_t)k + 1, fmt, ap);
        *n += (size_t)k;
        return 0;
    }
    if (room) (*data)[*n] = 0; /* nothing appended, not even a truncated start */
    return -1;
}

#endif
