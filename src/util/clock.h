/* Wall time for statistics and schedules: seconds since an arbitrary epoch
 * (CLOCK_MONOTONIC, so never stepped back by a clock change). */
#ifndef TUTTI_UTIL_CLOCK_H
#define TUTTI_UTIL_CLOCK_H

#include <time.h>

static inline double tutti_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
