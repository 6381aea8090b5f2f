/* Persistent worker pool.  One job at a time: the caller publishes (fn, arg)
 * and bumps a generation counter under the mutex; every worker wakes, runs
 * its share, and the last one to finish signals the caller.  Threads are
 * created once in tutti_threadpool_new, so a token costs a few wake-ups, not
 * thread creations.  (A spinning barrier would be cheaper per job; the speed
 * work can swap it in behind the same three calls.) */
#include <pthread.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "util/error.h"

struct tutti_threadpool {
    int n_threads; /* including the caller's thread */
    pthread_t *workers;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers wait here for a new generation */
    pthread_cond_t done_cv; /* the caller waits here for pending == 0 */
    uint64_t generation;
    int pending;
    bool stop;
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
        pthread_mutex_lock(&tp->mu);
        while (!tp->stop && tp->generation == seen) pthread_cond_wait(&tp->work_cv, &tp->mu);
        if (tp->stop) {
            pthread_mutex_unlock(&tp->mu);
            return NULL;
        }
        seen = tp->generation;
        void (*fn)(void *, int, int) = tp->fn;
        void *arg = tp->arg;
        pthread_mutex_unlock(&tp->mu);

        fn(arg, wa.ith, tp->n_threads);

        pthread_mutex_lock(&tp->mu);
        if (--tp->pending == 0) pthread_cond_signal(&tp->done_cv);
        pthread_mutex_unlock(&tp->mu);
    }
}

tutti_threadpool *tutti_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    tutti_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) {
        tutti_set_error("thread pool: out of memory");
        return NULL;
    }
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->work_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
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
    tp->stop = true;
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
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->arg = arg;
    tp->pending = tp->n_threads - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);

    fn(arg, 0, tp->n_threads);

    pthread_mutex_lock(&tp->mu);
    while (tp->pending > 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
