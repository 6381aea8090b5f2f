/* Persistent worker pool.  One job at a time; threads are created once in
 * tutti_threadpool_new, so a token costs a few hand-offs, never thread
 * creations.
 *
 * One 64-bit atomic word `state` publishes jobs: bits 32..63 hold the job's
 * generation, bit 31 says the job is STATIC (every thread runs its share
 * ith of nth), bit 30 that a DYNAMIC job is CLOSED, bits 0..29 count the
 * workers currently inside a DYNAMIC job.
 *
 *   static  (tutti_threadpool_run): every worker must run fn(arg, ith, nth);
 *           the caller waits for `pending` to reach 0.
 *   dynamic (tutti_threadpool_run_dynamic): fn claims its own work items
 *           from a shared counter, so any subset of threads can finish the
 *           job.  A worker joins by a CAS that checks the generation and the
 *           CLOSED bit; when the caller is done with its own part it sets
 *           CLOSED and waits only for the workers that joined.  A worker
 *           that the OS scheduled late (the machine is shared) then skips
 *           the job instead of stalling the caller for a time slice: this
 *           is what keeps generation fast when other processes compete for
 *           the cores.
 *
 * Hand-offs are hybrid: a waiting thread spins (with a CPU pause hint) for
 * about TP_SPIN polls before it sleeps on a condition variable.  A token
 * runs ~8 jobs per layer back to back, so workers are usually still
 * spinning when the next one arrives and no system call is paid; between
 * tokens they sleep and cost nothing.  Sleep/wake is Dekker-style on
 * sequentially consistent atomics: a worker announces n_sleeping before it
 * re-checks the state under the mutex, and the caller publishes the state
 * before it reads n_sleeping, so one of the two always sees the other (no
 * lost wake-up); the same holds for caller_waiting at the end of a job. */
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

#define ST_STATIC (1ull << 31)
#define ST_CLOSED (1ull << 30)
#define ST_COUNT ((1ull << 30) - 1)
#define ST_GEN(v) ((v) >> 32)

struct tutti_threadpool {
    int n_threads; /* including the caller's thread */
    pthread_t *workers;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers sleep here waiting for a new generation */
    pthread_cond_t done_cv; /* the caller sleeps here waiting for the end of a job */
    atomic_uint_fast64_t state;
    atomic_int pending; /* static jobs: workers not yet done */
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

static void signal_caller(tutti_threadpool *tp) {
    if (!atomic_load(&tp->caller_waiting)) return;
    pthread_mutex_lock(&tp->mu);
    pthread_cond_signal(&tp->done_cv);
    pthread_mutex_unlock(&tp->mu);
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    tutti_threadpool *tp = wa.tp;
    uint64_t seen = 0; /* last generation handled */
    for (;;) {
        for (int i = 0; i < TP_SPIN && ST_GEN(atomic_load(&tp->state)) == seen && !atomic_load(&tp->stop); i++)
            cpu_relax();
        if (ST_GEN(atomic_load(&tp->state)) == seen && !atomic_load(&tp->stop)) {
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->n_sleeping, 1);
            while (ST_GEN(atomic_load(&tp->state)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->work_cv, &tp->mu);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        uint64_t v = atomic_load(&tp->state);
        seen = ST_GEN(v);
        if (v & ST_STATIC) {
            /* the caller waits for us: fn/arg stay valid */
            tp->fn(tp->arg, wa.ith, tp->n_threads);
            if (atomic_fetch_sub(&tp->pending, 1) == 1) signal_caller(tp);
            continue;
        }
        /* dynamic: join unless the job is closed or already replaced */
        bool joined = false;
        while (ST_GEN(v) == seen && !(v & ST_CLOSED)) {
            if (atomic_compare_exchange_weak(&tp->state, &v, v + 1)) {
                joined = true;
                break;
            }
        }
        if (!joined) continue; /* a newer generation, if any, is seen at the top */
        tp->fn(tp->arg, wa.ith, tp->n_threads);
        const uint64_t before = atomic_fetch_sub(&tp->state, 1);
        if ((before & ST_COUNT) == 1 && (before & ST_CLOSED)) signal_caller(tp);
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
    atomic_init(&tp->state, 0);
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

/* Publishes a job (fn/arg first, then the state word) and wakes sleepers. */
static void publish(tutti_threadpool *tp, void (*fn)(void *, int, int), void *arg, uint64_t flags) {
    tp->fn = fn;
    tp->arg = arg;
    const uint64_t gen = ST_GEN(atomic_load(&tp->state)) + 1;
    atomic_store(&tp->state, (gen << 32) | flags);
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->work_cv);
        pthread_mutex_unlock(&tp->mu);
    }
}

/* Spins, then sleeps, until done(tp) holds. */
static void wait_for(tutti_threadpool *tp, bool (*done)(tutti_threadpool *)) {
    for (int i = 0; i < TP_SPIN && !done(tp); i++) cpu_relax();
    if (done(tp)) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->caller_waiting, 1);
    while (!done(tp)) pthread_cond_wait(&tp->done_cv, &tp->mu);
    atomic_store(&tp->caller_waiting, 0);
    pthread_mutex_unlock(&tp->mu);
}

static bool static_done(tutti_threadpool *tp) { return atomic_load(&tp->pending) == 0; }
static bool dynamic_done(tutti_threadpool *tp) { return (atomic_load(&tp->state) & ST_COUNT) == 0; }

void tutti_threadpool_run(tutti_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    atomic_store(&tp->pending, tp->n_threads - 1);
    publish(tp, fn, arg, ST_STATIC);
    fn(arg, 0, tp->n_threads);
    wait_for(tp, static_done);
}

void tutti_threadpool_run_dynamic(tutti_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    publish(tp, fn, arg, 0);
    fn(arg, 0, tp->n_threads);
    atomic_fetch_or(&tp->state, ST_CLOSED); /* no late joiners from here on */
    wait_for(tp, dynamic_done);
}
