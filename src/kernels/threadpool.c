/* Persistent worker pool.  One job at a time: the caller publishes (fn, arg)
 * and bumps a generation counter; every worker runs its share and the last
 * one to finish tells the caller.  Threads are created once in
 * tutti_threadpool_new, so a token costs a few hand-offs, never thread
 * creations.
 *
 * Hand-offs are hybrid: a worker that has just finished spins (with a CPU
 * pause hint) for about TP_SPIN polls of the generation counter before it
 * sleeps on a condition variable, and the caller spins the same way before
 * sleeping while it waits for the last worker.  A generated token runs ~7
 * matmuls per layer back to back, so workers are usually still spinning
 * when the next one starts and no wake-up system call is paid; between
 * tokens, or when the machine is busy, they sleep and cost nothing.
 *
 * The sleep/wake protocol is Dekker-style on sequentially consistent
 * atomics: a worker announces n_sleeping before it re-checks the
 * generation under the mutex, and the caller bumps the generation before it
 * reads n_sleeping, so one of the two always sees the other (no lost
 * wake-up).  The same holds for caller_waiting / pending at the end. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "quant/vecdot.h"
#include "util/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Polls before sleeping: tens of microseconds. */
#define TP_SPIN 20000

struct tutti_threadpool {
    int n_threads; /* including the caller's thread */
    pthread_t *workers;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers sleep here waiting for a new generation */
    pthread_cond_t done_cv; /* the caller sleeps here waiting for pending == 0 */
    atomic_uint_fast64_t generation;
    atomic_int pending;
    atomic_int n_sleeping;
    atomic_int caller_waiting;
    atomic_bool stop;
    void (*fn)(void *, int, int);
    void *arg;
    float *scratch; /* shared scratch of the caller's job (tutti_threadpool_scratch) */
    size_t scratch_n;
};

typedef struct worker_arg {
    tutti_threadpool *tp;
    int ith;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    tutti_threadpool *tp = wa.tp;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < TP_SPIN && atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop); i++)
            cpu_relax();
        if (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop)) {
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->n_sleeping, 1);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->work_cv, &tp->mu);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = atomic_load(&tp->generation);
        /* fn/arg were written before the generation bump (seq_cst) */
        tp->fn(tp->arg, wa.ith, tp->n_threads);
        if (atomic_fetch_sub(&tp->pending, 1) == 1 && atomic_load(&tp->caller_waiting)) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

tutti_threadpool *tutti_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    /* every session makes a pool: the place to refuse a TUTTI_KERNELS value
     * this CPU cannot run, instead of silently computing with another path */
    if (tutti_simd_init() != TUTTI_OK) return NULL;
    tutti_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) {
        tutti_set_error("thread pool: out of memory");
        return NULL;
    }
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->work_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->caller_waiting, 0);
    atomic_init(&tp->stop, false);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) {
            tutti_threadpool_free(tp);
            tutti_set_error("thread pool: out of memory");
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->tp = tp;
                wa->ith = i;
            }
            if (!wa || pthread_create(&tp->workers[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                tutti_threadpool_free(tp);
                tutti_set_error("thread pool: cannot start worker thread %d of %d", i, n_threads - 1);
                return NULL;
            }
            tp->n_started++;
        }
    }
    return tp;
}

void tutti_threadpool_free(tutti_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_started; i++) pthread_join(tp->workers[i], NULL);
    pthread_cond_destroy(&tp->work_cv);
    pthread_cond_destroy(&tp->done_cv);
    pthread_mutex_destroy(&tp->mu);
    free(tp->workers);
    free(tp->scratch);
    free(tp);
}

float *tutti_threadpool_scratch(tutti_threadpool *tp, size_t n_floats) {
    if (!tp) return NULL;
    if (n_floats > tp->scratch_n) {
        float *p = realloc(tp->scratch, n_floats * sizeof(float));
        if (!p) return NULL;
        tp->scratch = p;
        tp->scratch_n = n_floats;
    }
    return tp->scratch;
}

int tutti_threadpool_n_threads(const tutti_threadpool *tp) { return tp ? tp->n_threads : 1; }

void tutti_threadpool_run(tutti_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store(&tp->pending, tp->n_threads - 1);
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->work_cv);
        pthread_mutex_unlock(&tp->mu);
    }

    fn(arg, 0, tp->n_threads);

    for (int i = 0; i < TP_SPIN && atomic_load(&tp->pending) > 0; i++) cpu_relax();
    if (atomic_load(&tp->pending) > 0) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->caller_waiting, 1);
        while (atomic_load(&tp->pending) > 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
        atomic_store(&tp->caller_waiting, 0);
        pthread_mutex_unlock(&tp->mu);
    }
}
