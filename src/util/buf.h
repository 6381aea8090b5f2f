/* The growing byte buffer every layer appends text to (JSON answers,
 * metrics, generated text, schemas): data[0..*n) followed by a NUL, its
 * capacity at least doubling, so appending k bytes costs O(k) amortised.
 * Header-only (static inline), so the front ends (src/server) use the same
 * helper without linking anything of the library's. */
#ifndef TUTTI_UTIL_BUF_H
#define TUTTI_UTIL_BUF_H

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

#endif
