/* test_pool.c — base/pool.c: every item of a pool_for runs exactly once, in chunks that start at multiples of
 * the grain and hold at most grain items, for 2 to 5 threads, over many back-to-back jobs (the spinning
 * workers' path) and after pauses long enough for the workers to sleep (the condition variables' path). */
#include "test.h"

#include "base/pool.h"
#include "test_rand.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_N 3000

typedef struct PoolCheck {
    atomic_int hits[MAX_N];
    atomic_int bad_chunks, bad_thread;
    int64_t grain;
    int n_threads;
} PoolCheck;

static void mark(void *ctx, int64_t b, int64_t e, int thread) {
    PoolCheck *c = ctx;
    if (b % c->grain != 0 || e - b > c->grain || e <= b) atomic_fetch_add(&c->bad_chunks, 1);
    if (thread < 0 || thread >= c->n_threads) atomic_fetch_add(&c->bad_thread, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

TEST(pool, every_item_once) {
    static PoolCheck c;
    for (int nt = 2; nt <= 5; nt++) {
        Err err = {0};
        Pool *p = pool_create(nt, &err);
        CHECK_MSG(p != NULL, "pool_create(%d): %s", nt, err.msg);
        if (!p) continue;
        CHECK(pool_size(p) == nt);
        int wrong = 0;
        for (int r = 0; r < 400 && !wrong; r++) {
            const int n = 1 + (int)(trand_u32() % MAX_N), g = 1 + (int)(trand_u32() % 40);
            for (int i = 0; i < n; i++) atomic_store(&c.hits[i], 0);
            c.grain = g, c.n_threads = nt;
            pool_for(p, n, g, mark, &c);
            for (int i = 0; i < n && !wrong; i++)
                if (atomic_load(&c.hits[i]) != 1) {
                    CHECK_MSG(0, "%d threads, n=%d grain=%d: item %d ran %d times", nt, n, g, i, atomic_load(&c.hits[i]));
                    wrong = 1;
                }
            if (r % 100 == 99) usleep(30000); /* the workers give up spinning (~0.4 ms) and sleep */
        }
        CHECK_MSG(atomic_load(&c.bad_chunks) == 0, "%d threads: %d chunks off the grain", nt, atomic_load(&c.bad_chunks));
        CHECK_MSG(atomic_load(&c.bad_thread) == 0, "%d threads: thread index out of range", nt);
        pool_destroy(p);
    }
}
