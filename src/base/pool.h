/* pool.h — a persistent thread pool with range functions. The caller participates as thread 0.
 *
 *   pool_for(pool, n, grain, fn, ctx) calls fn(ctx, begin, end, thread) over [0, n) in chunks of `grain`
 *   items handed out dynamically, on all threads, and returns when every chunk is done.
 *
 * Work functions must write disjoint outputs (no cross-thread reductions), so results never depend on the
 * thread count or on which thread took which chunk. A NULL pool runs everything on the caller. */
#ifndef DL_BASE_POOL_H
#define DL_BASE_POOL_H

#include <stdint.h>

#include "base/err.h"

typedef struct Pool Pool;
typedef void (*PoolFn)(void *ctx, int64_t begin, int64_t end, int thread);

/* n_threads counts the caller; 1 starts no thread. */
Pool *pool_create(int n_threads, Err *err);
void pool_destroy(Pool *p);
int pool_size(const Pool *p); /* 1 for NULL */
void pool_for(Pool *p, int64_t n, int64_t grain, PoolFn fn, void *ctx);
/* Number of CPUs this process may run on. */
int pool_default_threads(void);

#endif
