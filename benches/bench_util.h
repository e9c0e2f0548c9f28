/* Shared by the C benchmarks: a monotonic clock in seconds, the median of a sample, and the
 * baseline every overhead is compared with (two clock reads). */
#ifndef SP_BENCH_UTIL_H
#define SP_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static inline double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* n pairs of clock_gettime(CLOCK_MONOTONIC) (what a start/stop pair of a profiler that reads
 * the clock twice must at least cost); their differences go to *sink so nothing is optimized
 * away. Returns the seconds taken. */
static inline double clock_pairs_s(long n, volatile long *sink) {
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_MONOTONIC, &b);
        *sink += b.tv_nsec - a.tv_nsec;
    }
    return now_s() - t0;
}

#endif
