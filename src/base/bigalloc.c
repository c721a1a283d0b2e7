/* bigalloc.c — see bigalloc.h. */
#include "base/bigalloc.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *big_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes < HUGE_PAGE) return posix_memalign(&p, 64, bytes ? bytes : 64) == 0 ? p : NULL;
    const size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, rounded) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE); /* a hint: ignored where THP is off */
#endif
    return p;
}
