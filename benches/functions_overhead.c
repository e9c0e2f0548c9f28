/* Time per call of a tiny function, built with -finstrument-functions and linked with the
 * library (and once without the flag, for context). benches/run_openmp_functions.sh runs the
 * instrumented binary with the functions off (SCOPE_PROFILER_FUNCTIONS=0), every call recorded
 * (SCOPE_PROFILER_THROTTLE=off), the default throttling (the function is throttled after
 * 100,000 calls) and a filter excluding it, in alternation.
 * Usage: functions_overhead [CALLS_PER_REP] [REPS]; prints RESULT call_ns (median). */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

static volatile long sink;

__attribute__((noinline)) long tiny(long x) { return x * 3 + 1; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    double *t = malloc(reps * sizeof *t);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        long acc = 0;
        for (long i = 0; i < n; i++) acc += tiny(i);
        sink += acc;
        t[r] = (now_s() - t0) / n * 1e9;
    }
    printf("RESULT call_ns %.2f\n", median(t, reps));
    free(t);
    return 0;
}
