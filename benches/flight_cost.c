/* The flight recorder's cost in the library itself: CALLS handle pairs on one thread, in
 * ROUNDS rounds, timed in the recording thread's CPU time (steadier than wall time on a shared
 * machine) and in the whole process's (helper threads and page-cache work included).
 * The sink is chosen by the environment (SCOPE_PROFILER_SPILL, SCOPE_PROFILER_SPILL_DIR);
 * benches/run_flight_cost.sh runs the configurations alternately.
 * Usage: flight_cost [CALLS=10000000] [ROUNDS=3] [OUT.h5] */
#include <scope_profiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    sp_options o;
    sp_options_init(&o);
    o.file_path = argc > 3 ? argv[3] : "/tmp/sp_flight_cost.h5";
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) return 1;
    int32_t h = sp_region_register("pair");
    double best_t = 1e9, sum_t = 0, sum_p = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = cpu(CLOCK_THREAD_CPUTIME_ID), p0 = cpu(CLOCK_PROCESS_CPUTIME_ID);
        for (long i = 0; i < n; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        double t = (cpu(CLOCK_THREAD_CPUTIME_ID) - t0) / n * 1e9, p = (cpu(CLOCK_PROCESS_CPUTIME_ID) - p0) / n * 1e9;
        if (t < best_t) best_t = t;
        sum_t += t;
        sum_p += p;
    }
    printf("RESULT thread_ns %.3f process_ns %.3f best_thread_ns %.3f\n", sum_t / rounds, sum_p / rounds, best_t);
    return sp_finalize() == SP_OK ? 0 : 1;
}
