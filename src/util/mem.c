/* See mem.h. */
#include "util/mem.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <fcntl.h>
#include <sys/ioctl.h>
#endif

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

#ifdef __linux__
/* PAGEMAP_SCAN (Linux 6.7, <linux/fs.h>; spelled out for older headers). */
typedef struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
} pm_scan_arg;
typedef struct page_region {
    uint64_t start, end, categories;
} page_region;
#define PM_SCAN _IOWR('f', 16, pm_scan_arg)
#define PM_PRESENT ((uint64_t)1 << 3)
#define PM_HUGE ((uint64_t)1 << 6)
#define CHUNK ((uintptr_t)2 << 20)

/* Marks in small[] the CHUNK-sized chunks of [lo, hi) (CHUNK-aligned) that
 * hold resident pages not mapped by a 2 MiB entry; -1 when the kernel has
 * no PAGEMAP_SCAN. */
static int scan_small(int pm, uintptr_t lo, uintptr_t hi, unsigned char *small) {
    page_region vec[64];
    for (uintptr_t at = lo; at < hi;) {
        pm_scan_arg a = {.size = sizeof a,
                         .start = at,
                         .end = hi,
                         .vec = (uint64_t)(uintptr_t)vec,
                         .vec_len = 64,
                         .category_inverted = PM_HUGE,
                         .category_mask = PM_PRESENT | PM_HUGE,
                         .return_mask = PM_PRESENT | PM_HUGE};
        const int n = ioctl(pm, PM_SCAN, &a);
        if (n < 0) return -1;
        for (int i = 0; i < n; i++)
            for (uintptr_t c = (vec[i].start - lo) / CHUNK; c <= (vec[i].end - 1 - lo) / CHUNK; c++) small[c] = 1;
        if (a.walk_end <= at) return -1; /* no progress: give up rather than loop */
        at = a.walk_end;
    }
    return 0;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

size_t tutti_mem_reread_small(const void *map, size_t size, int fd) {
    const uintptr_t lo = (uintptr_t)map, hi = lo + size / CHUNK * CHUNK;
    if (lo % CHUNK || hi <= lo) return 0;
    const size_t n = (hi - lo) / CHUNK;
    unsigned char *small = calloc(n, 1);
    const int pm = small ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
    size_t done = 0;
    if (pm < 0 || scan_small(pm, lo, hi, small) != 0) goto out;
    const size_t probe = 16; /* chunks: the first 32 MiB re-read decide whether to go on */
    size_t tried = 0;        /* chunks re-read */
    const double t0 = seconds();
    for (size_t c = 0; c < n;) {
        if (!small[c]) {
            c++;
            continue;
        }
        /* a run of small chunks, at most 64 MiB (readahead streams within
         * it), the first runs ending at the probe's end */
        const size_t cap = tried < probe ? probe - tried : 32;
        size_t e = c + 1;
        while (e < n && small[e] && e - c < cap) e++;
        void *at = (void *)(lo + c * CHUNK);
        const size_t len = (e - c) * CHUNK;
        /* this mapping's entries first: the page cache keeps pages a process maps */
        if (madvise(at, len, MADV_DONTNEED) != 0) break;
        (void)posix_fadvise(fd, (off_t)(c * CHUNK), (off_t)len, POSIX_FADV_DONTNEED); /* advisory */
        tutti_mem_populate(at, len);
        const bool probed = tried < probe && tried + (e - c) >= probe;
        tried += e - c, done += len;
        if (probed) {
            const double rate = (double)done / (seconds() - t0 + 1e-9);
            unsigned char *again = calloc(e, 1);
            size_t bad = 0;
            if (!again || scan_small(pm, lo, lo + e * CHUNK, again) != 0) bad = tried;
            else
                for (size_t k = 0; k < e; k++) bad += small[k] && again[k];
            free(again);
            if (2 * bad > tried || rate < 0.5e9) break;
        }
        c = e;
    }
out:
    if (pm >= 0) close(pm);
    free(small);
    return done;
}
#else
size_t tutti_mem_reread_small(const void *map, size_t size, int fd) {
    (void)map, (void)size, (void)fd;
    return 0;
}
#endif
