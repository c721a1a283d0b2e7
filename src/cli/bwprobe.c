/* bwprobe.c — see bwprobe.h. Each thread reads its own contiguous slice; the time is the slowest thread's. */
#include "cli/bwprobe.h"

#include "kernels/cpu/isa.h"
#include "base/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Slice {
    const unsigned char *p;
    size_t bytes;
    unsigned long long sum;
    pthread_barrier_t *bar;
    double t;
} Slice;

static unsigned long long sum_plain(const void *p, size_t bytes) {
    const unsigned long long *v = p;
    unsigned long long a = 0, b = 0;
    for (size_t i = 0; i < bytes / 8; i += 2) a += v[i], b += v[i + 1];
    return a + b;
}

static void *run(void *arg) {
    Slice *s = arg;
    pthread_barrier_wait(s->bar);
    double t0 = now_s();
    s->sum = isa_supported(ISA_AVX2) ? bwprobe_sum_avx2(s->p, s->bytes) : sum_plain(s->p, s->bytes);
    s->t = now_s() - t0;
    return NULL;
}

double bwprobe_read_gbs(size_t bytes, int n_threads, int reps) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 64) n_threads = 64;
    bytes = bytes / (4096 * (size_t)n_threads) * 4096 * (size_t)n_threads;
    void *buf = NULL;
    if (bytes == 0 || posix_memalign(&buf, 4096, bytes) != 0) return 0;
    memset(buf, 1, bytes);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n_threads);
        Slice sl[64];
        pthread_t th[64];
        const size_t part = bytes / (size_t)n_threads;
        for (int i = 0; i < n_threads; i++) sl[i] = (Slice){(const unsigned char *)buf + (size_t)i * part, part, 0, &bar, 0};
        for (int i = 1; i < n_threads; i++) pthread_create(&th[i], NULL, run, &sl[i]);
        run(&sl[0]);
        double t = sl[0].t;
        for (int i = 1; i < n_threads; i++) {
            pthread_join(th[i], NULL);
            if (sl[i].t > t) t = sl[i].t;
        }
        pthread_barrier_destroy(&bar);
        double gbs = t > 0 ? (double)bytes / t / 1e9 : 0;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}
