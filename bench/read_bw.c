// Streaming-read memory bandwidth: the ceiling for token generation, which
// reads every weight once per token (issue 29).
//
// How it measures: each of T threads owns a contiguous slice of one buffer
// (default 1 GiB, far larger than the last-level cache, pages touched once
// before timing so no page fault is timed) and sums it with 32-byte loads in
// 4 independent accumulators (the same access pattern as a one-row matmul:
// one forward stream per thread).  A pass is timed from a barrier that
// starts all threads to the moment the last one finishes, so a slow thread
// counts against the result exactly as it does in a matmul.  Reported: bytes
// of the buffer / time of the pass, best and median over R passes, in GB/s
// (10^9 bytes).
//
// usage: read_bw [THREADS=2] [MIB=1024] [PASSES=10]
// build: cc -O2 -mavx2 -pthread bench/read_bw.c -o read_bw   (or ninja read_bw)
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_THREADS = 64 };

typedef struct {
    const uint8_t *base;
    size_t n;
    pthread_barrier_t *start, *stop;
    int passes;
    uint64_t sink;
} worker;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sums n bytes (a multiple of 128) with four independent 256-bit chains so
// the loads, not the adds, set the pace.
static uint64_t read_slice(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, s);
    return out[0] + out[1] + out[2] + out[3];
}

static void *run(void *arg) {
    worker *w = arg;
    for (int r = 0; r < w->passes; r++) {
        pthread_barrier_wait(w->start);
        w->sink += read_slice(w->base, w->n);
        pthread_barrier_wait(w->stop);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const long mib = argc > 2 ? atol(argv[2]) : 1024;
    const int passes = argc > 3 ? atoi(argv[3]) : 10;
    if (threads < 1 || threads > MAX_THREADS || mib < 1 || passes < 1 || passes > 1000) {
        fprintf(stderr, "usage: read_bw [THREADS=2 (1-%d)] [MIB=1024] [PASSES=10 (1-1000)]\n", MAX_THREADS);
        return 2;
    }
    const size_t bytes = (size_t)mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "read_bw: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes); // fault every page in before timing
    pthread_barrier_t start, stop;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&stop, NULL, (unsigned)threads + 1);
    worker w[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    const size_t slice = bytes / (size_t)threads / 128 * 128;
    for (int t = 0; t < threads; t++) {
        w[t] = (worker){buf + (size_t)t * slice, slice, &start, &stop, passes, 0};
        pthread_create(&tid[t], NULL, run, &w[t]);
    }
    double gbs[1000];
    for (int r = 0; r < passes; r++) {
        pthread_barrier_wait(&start);
        const double t0 = now_s();
        pthread_barrier_wait(&stop);
        gbs[r] = (double)slice * threads / (now_s() - t0) / 1e9;
    }
    uint64_t sink = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        sink += w[t].sink;
    }
    qsort(gbs, (size_t)passes, sizeof gbs[0], cmp_double);
    printf("read bandwidth, %d thread(s), %ld MiB, %d passes: best %.1f GB/s, median %.1f GB/s"
           " (checksum %llu)\n",
           threads, mib, passes, gbs[passes - 1], gbs[passes / 2], (unsigned long long)(sink & 0xff));
    free(buf);
    return 0;
}
