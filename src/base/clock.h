/* The one monotonic clock: seconds since an arbitrary fixed point, for timing and deadlines (never for dates:
 * wall-clock time is CLOCK_REALTIME, used where a timestamp is printed or a condvar waits). */
#ifndef DELTALLM_BASE_CLOCK_H
#define DELTALLM_BASE_CLOCK_H

#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
