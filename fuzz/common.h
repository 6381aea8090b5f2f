/* Helpers every harness shares (static: the harnesses are linked together
 * into test_fuzz_regress, each is also its own libFuzzer binary). */
#ifndef TUTTI_FUZZ_COMMON_H
#define TUTTI_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Path of rel (e.g. "models/stories260K.gguf") in the shared data: the
 * repository's copy of a models/ file (the four quick-start models), else
 * $TUTTI_SHARED_DIR, else the TUTTI_SHARED_DIR of the test build, else
 * ../shared beside the source tree (this file is <root>/fuzz/common.h). */
static inline void fuzz_shared_path(const char *rel, char *out, size_t cap) {
    const char *f = __FILE__, *slash = strrchr(f, '/');
    int n = slash ? (int)(slash - f) : 1;
    if (!strncmp(rel, "models/", 7)) {
        snprintf(out, cap, "%.*s/../%s", n, slash ? f : ".", rel);
        FILE *probe = fopen(out, "rb");
        if (probe) {
            fclose(probe);
            return;
        }
    }
    const char *dir = getenv("TUTTI_SHARED_DIR");
#ifdef TUTTI_SHARED_DIR
    if (!dir) dir = TUTTI_SHARED_DIR;
#endif
    if (dir) {
        snprintf(out, cap, "%s/%s", dir, rel);
        return;
    }
    snprintf(out, cap, "%.*s/../../shared/%s", n, slash ? f : ".", rel);
}

/* Independent UTF-8 check (RFC 3629 table; a NUL byte fails too): the
 * oracle the harnesses hold the outputs of our own code against. */
static inline int fuzz_valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        unsigned lo = 0x80, hi = 0xBF;
        size_t k;
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) k = 2, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) k = 2;
        else if (c == 0xED) k = 2, hi = 0x9F;
        else if (c >= 0xEE && c <= 0xEF) k = 2;
        else if (c == 0xF0) k = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        else if (c == 0xF4) k = 3, hi = 0x8F;
        else return 0;
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if (d < (j == 1 ? lo : 0x80) || d > (j == 1 ? hi : 0xBF)) return 0;
        }
        i += k + 1;
    }
    return 1;
}

#endif
