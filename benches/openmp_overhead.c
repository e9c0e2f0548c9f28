/* Time per OpenMP construct, EPCC syncbench style: an empty parallel region, and a barrier
 * inside one parallel region, on the threads OMP_NUM_THREADS gives (2 in the runs of
 * benches/run_openmp_functions.sh). The script runs this one binary with the OpenMP tool on
 * and off (OMP_TOOL_LIBRARIES naming the library, SCOPE_PROFILER_OPENMP=1 or 0) in
 * alternation and compares.
 * Usage: openmp_overhead [REGIONS_PER_REP] [REPS]; prints RESULT lines (median ns). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* ns per read of the TSC (the clock the library reads per callback), 0 where there is none. */
static double tsc_read_ns(void) {
#if defined(__x86_64__)
    volatile unsigned long long s = 0;
    double t0 = now_s();
    for (int i = 0; i < 1000000; i++) s += __rdtsc();
    return (now_s() - t0) * 1e3;
#else
    return 0;
#endif
}

int main(int argc, char **argv) {
    int inner = argc > 1 ? atoi(argv[1]) : 20000;
    int reps = argc > 2 ? atoi(argv[2]) : 9;
    double *par = malloc(reps * sizeof *par), *bar = malloc(reps * sizeof *bar);
    /* Warm up the thread pool. */
#pragma omp parallel
    {
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < inner; i++) {
#pragma omp parallel
            {
                /* Empty, but not removable by the compiler. */
                __asm__ volatile("" ::: "memory");
            }
        }
        double t1 = now_s();
#pragma omp parallel
        {
            for (int i = 0; i < inner; i++) {
#pragma omp barrier
            }
        }
        double t2 = now_s();
        par[r] = (t1 - t0) / inner * 1e9;
        bar[r] = (t2 - t1) / inner * 1e9;
    }
    printf("threads %d\n", omp_get_max_threads());
    printf("RESULT parallel_ns %.1f\n", median(par, reps));
    printf("RESULT barrier_ns %.1f\n", median(bar, reps));
    printf("RESULT rdtsc_ns %.1f\n", tsc_read_ns());
    free(par);
    free(bar);
    return 0;
}
