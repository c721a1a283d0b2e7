/* pool.c — see pool.h. Workers spin briefly on a generation counter (decode steps come back-to-back and
 * a futex wake costs more than a short spin), then sleep on a condition variable. */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPIN_ITERS 20000

typedef struct Worker {
    struct Pool *pool;
    int id;
    pthread_t th;
} Worker;

struct Pool {
    int n;
    Worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_uint gen;
    atomic_int pending;
    atomic_bool stop;
    /* the current job */
    PoolFn fn;
    void *ctx;
    int64_t n_items, grain;
    atomic_llong next;
};

static void run_chunks(Pool *p, int thread) {
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&p->next, p->grain, memory_order_relaxed);
        if (b >= p->n_items) break;
        int64_t e = b + p->grain < p->n_items ? b + p->grain : p->n_items;
        p->fn(p->ctx, b, e, thread);
    }
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    Pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_start, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_chunks(p, w->id);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

Pool *pool_create(int n_threads, Err *err) {
    if (n_threads < 1 || n_threads > 1024) return err_set(err, "thread count %d out of range [1, 1024]", n_threads), NULL;
    Pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, "out of memory"), NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return err_set(err, "out of memory"), NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (Worker){p, i, 0};
        if (pthread_create(&p->workers[i].th, NULL, worker_main, &p->workers[i]) != 0) {
            p->n = i; /* destroy joins only the started ones */
            pool_destroy(p);
            return err_set(err, "cannot start thread %d", i), NULL;
        }
    }
    return p;
}

void pool_destroy(Pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->workers[i].th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->workers);
    free(p);
}

int pool_size(const Pool *p) { return p ? p->n : 1; }

void pool_for(Pool *p, int64_t n, int64_t grain, PoolFn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        if (++spins < SPIN_ITERS) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

int pool_default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
