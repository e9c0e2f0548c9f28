/* Cost of the source-location macros against the handle pair they stand for, in one process.
 *
 *   floor        two bare clock_gettime(CLOCK_MONOTONIC) calls
 *   handle pair  sp_region_start_id(h) + sp_region_stop_id(h), h from sp_region_register
 *   macro pair   SP_REGION_START("...") + SP_REGION_STOP("...") (static handle per call site)
 *
 * Rounds alternate between the three; the reported time per pair is the median over rounds.
 * Usage: macro_overhead [calls_per_round=1000000] [rounds=5] [output.h5] */
#include <scope_profiler.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bench_util.h"

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    const char *out = argc > 3 ? argv[3] : "/tmp/sp_bench_macro.h5";
    double floor_ns[64], handle_ns[64], macro_ns[64];
    volatile long sink = 0;
    sp_options o;
    int32_t h;
    int r;
    long i;
    if (rounds > 64) rounds = 64;
    sp_options_init(&o);
    o.file_path = out;
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) return 1;
    h = sp_region_register("bench_handle");
    for (r = 0; r < rounds; r++) {
        double t0 = now_s(), t1, t2, t3;
        t1 = t0 + clock_pairs_s(n, &sink);
        for (i = 0; i < n; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        t2 = now_s();
        for (i = 0; i < n; i++) {
            SP_REGION_START("bench_macro");
            SP_REGION_STOP("bench_macro");
        }
        t3 = now_s();
        floor_ns[r] = (t1 - t0) / n * 1e9;
        handle_ns[r] = (t2 - t1) / n * 1e9;
        macro_ns[r] = (t3 - t2) / n * 1e9;
    }
    {
        double f = median(floor_ns, rounds), hp = median(handle_ns, rounds), mp = median(macro_ns, rounds);
        printf("floor (2x clock_gettime) %8.2f ns\n", f);
        printf("handle pair           %8.2f ns   ratio to floor %.3f\n", hp, hp / f);
        printf("macro pair            %8.2f ns   ratio to floor %.3f, to handle pair %.3f\n", mp, mp / f, mp / hp);
    }
    return sp_finalize() == SP_OK ? 0 : 1;
}
