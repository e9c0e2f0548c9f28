/* Time per call of a tiny function, built with -finstrument-functions and linked with the
 * library (and once without the flag, for context). benches/run_functions_overhead.sh (and the
 * function part of benches/run_openmp_functions.sh) runs the instrumented binary with the
 * functions off (SCOPE_PROFILER_FUNCTIONS=0, the baseline), every call recorded
 * (SCOPE_PROFILER_THROTTLE=off), the default throttling (the function is throttled after
 * 100,000 calls) and a filter excluding it, in alternation.
 * Usage: functions_overhead [CALLS_PER_REP] [REPS]; prints RESULT call_ns (median over the
 * repetitions) and RESULT tsc_pair_ns (two back-to-back rdtsc, timed the same way in the same
 * process: what any timed call costs at least on this machine). */
#include <stdio.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "bench_util.h"

static volatile long sink;

__attribute__((noinline)) long tiny(long x) { return x * 3 + 1; }

/* Not instrumented, so that it measures the clock alone. */
__attribute__((noinline, no_instrument_function)) static double tsc_pairs_ns(long n) {
#if defined(__x86_64__)
    double t0 = now_s();
    long acc = 0;
    for (long i = 0; i < n; i++) {
        unsigned long long a = __rdtsc();
        unsigned long long b = __rdtsc();
        acc += (long)(b - a);
    }
    sink += acc;
    return (now_s() - t0) / n * 1e9;
#else
    (void)n;
    return 0.0;
#endif
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (n <= 0 || reps <= 0) return 2;
    double *t = malloc(reps * sizeof *t);
    double *c = malloc(reps * sizeof *c);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        long acc = 0;
        for (long i = 0; i < n; i++) acc += tiny(i);
        sink += acc;
        t[r] = (now_s() - t0) / n * 1e9;
        c[r] = tsc_pairs_ns(n < 1000000 ? n : 1000000);
    }
    printf("RESULT call_ns %.2f\n", median(t, reps));
    printf("RESULT tsc_pair_ns %.2f\n", median(c, reps));
    free(t);
    free(c);
    return 0;
}
