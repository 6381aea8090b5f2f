/* For harnesses whose parser may call into code ASan does not see (libc's
 * strtod, Debian's cJSON): the input is copied to the end of a page that is
 * followed by an inaccessible one, so that reading even one byte past its
 * end faults there too.  The buffer is made once and holds no state between
 * inputs; inputs over GUARDED_MAX get NULL (skip them). */
#ifndef TUTTI_FUZZ_GUARDED_H
#define TUTTI_FUZZ_GUARDED_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARDED_MAX (1u << 20)

static const char *guarded_copy(const uint8_t *data, size_t n) {
    static char *end;
    if (n > GUARDED_MAX) return NULL;
    if (!end) {
        size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (GUARDED_MAX + pg - 1) / pg * pg;
        char *m = mmap(NULL, len + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || mprotect(m + len, pg, PROT_NONE) != 0) __builtin_trap();
        end = m + len;
    }
    char *p = end - n;
    if (n) memcpy(p, data, n);
    return p;
}

#endif
