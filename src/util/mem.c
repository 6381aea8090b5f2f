/* See mem.h. */
#include "util/mem.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

void tutti_mem_populate(const void *addr, size_t len) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (uintptr_t)addr / page * page, hi = (uintptr_t)addr + len;
    if (hi <= lo) return;
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) == 0) return;
    volatile unsigned char sink = 0; /* older kernel: one read per page */
    for (uintptr_t p = lo; p < hi; p += page) sink ^= *(const volatile unsigned char *)p;
    (void)sink;
}

/* "Name:   123 kB" -> 123 when line starts with name. */
static int field_kb(const char *line, const char *name, unsigned long long *kb) {
    const size_t n = strlen(name);
    return strncmp(line, name, n) == 0 && sscanf(line + n, " %llu", kb) == 1;
}

double tutti_mem_huge_share(const void *addr, uintptr_t range[2]) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, found = 0;
    unsigned long long rss = 0, huge = 0, kb;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, ' ')) {
            if (found) break; /* past the mapping's own fields */
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            found = in;
            if (in && range) range[0] = (uintptr_t)lo, range[1] = (uintptr_t)hi;
            continue;
        }
        if (!in) continue;
        if (field_kb(line, "Rss:", &kb)) rss = kb;
        else if (field_kb(line, "FilePmdMapped:", &kb) || field_kb(line, "AnonHugePages:", &kb)) huge += kb;
    }
    fclose(f);
    return found && rss ? (double)huge / (double)rss : -1;
}
