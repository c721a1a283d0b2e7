/* bwprobe.h — a read-bandwidth probe: streaming sums over a buffer larger than the caches, on n threads,
 * so `deltallm bench` can put decode's effective weight bandwidth next to what the machine can read. */
#ifndef DL_CLI_BWPROBE_H
#define DL_CLI_BWPROBE_H

#include <stddef.h>

/* GB/s (1e9 bytes/s) reading `bytes` (rounded to 4 KiB) with n_threads threads, best of `reps` passes;
 * returns 0 if the buffer cannot be allocated. */
double bwprobe_read_gbs(size_t bytes, int n_threads, int reps);

/* The streaming kernel (bwprobe_avx2.c when the CPU has AVX2, else a plain loop). */
unsigned long long bwprobe_sum_avx2(const void *p, size_t bytes);

#endif
