/* FNV-1a, 64 bits (Fowler, Noll, Vo): the hash of file identities, cache
 * keys and vocabulary entries.  Not for anything an adversary picks to
 * collide. */
#ifndef TUTTI_UTIL_HASH_H
#define TUTTI_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TUTTI_FNV_OFFSET 0xcbf29ce484222325ull
#define TUTTI_FNV_PRIME 0x100000001b3ull

/* h folded with the bytes p[0..n); start from TUTTI_FNV_OFFSET. */
static inline uint64_t tutti_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * TUTTI_FNV_PRIME;
    return h;
}

#endif
