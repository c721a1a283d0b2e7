/* alloc_guard.h — the allocation guard of the tests: while armed, every malloc, calloc, realloc and aligned
 * allocation in the process (any thread) is counted, so a test can check that a forward pass or a decode
 * step allocates nothing after warm-up. Plain builds interpose the allocator (forwarding to glibc's);
 * sanitizer builds use the sanitizer's allocation hooks. */
#ifndef DL_TESTS_ALLOC_GUARD_H
#define DL_TESTS_ALLOC_GUARD_H

#include <stdbool.h>

void alloc_guard_arm(void);
/* Stops counting; returns the allocations made while armed. */
long alloc_guard_disarm(void);
/* Whether the guard can see allocations in this build (false would make its tests vacuous: they fail). */
bool alloc_guard_works(void);

#endif
