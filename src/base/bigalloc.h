/* bigalloc.h — allocations for the large, long-lived buffers (activations, KV cache, recurrent state):
 * 2 MiB aligned and marked for transparent huge pages, which cuts TLB misses on the long scans over them
 * (~12% on the long-sequence delta-net scan, docs/KERNELS.md). Free with free(). */
#ifndef DL_BASE_BIGALLOC_H
#define DL_BASE_BIGALLOC_H

#include <stddef.h>

/* NULL when out of memory. Small sizes get a plain 64-byte aligned allocation. */
void *big_alloc(size_t bytes);

#endif
