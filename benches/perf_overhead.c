/* Cost of a region start/stop pair with perf events counted, against baselines measured in
 * the same process:
 *
 *   floor        two bare clock_gettime(CLOCK_MONOTONIC) calls
 *   plain pair   sp_region_start_id + sp_region_stop_id of a run without events (measured in
 *                a second process: run this program once with SCOPE_PROFILER_PERF_EVENTS unset)
 *   read floor   two clock_gettime + two read() of a perf group of the same events opened
 *                here with perf_event_open: what any per-region read() of a group must pay
 *   pair         sp_region_start_id + sp_region_stop_id with $SCOPE_PROFILER_PERF_EVENTS
 *   other pair   the same for a second region, "bench_other": with
 *                SCOPE_PROFILER_PERF_REGIONS=bench it is not chosen and reads no counters
 *                (compare it with the plain pair of the run without events)
 *
 * Rounds alternate; the median over rounds is reported.
 * Usage: perf_overhead [pairs_per_round=200000] [rounds=5] [output.h5] */
#include <scope_profiler.h>

#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "bench_util.h"

/* The software events of the benchmark, opened as one group on this thread. */
static int open_group(int *n_out) {
    static const uint64_t configs[] = {PERF_COUNT_SW_TASK_CLOCK, PERF_COUNT_SW_PAGE_FAULTS, PERF_COUNT_SW_CONTEXT_SWITCHES,
                                       PERF_COUNT_SW_CPU_MIGRATIONS};
    int leader = -1, n = 0;
    for (int i = 0; i < 4; i++) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.type = PERF_TYPE_SOFTWARE;
        a.size = sizeof a;
        a.config = configs[i];
        a.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_ID;
        a.exclude_hv = 1;
        int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, leader, 0);
        if (fd < 0) return -1;
        if (leader < 0) leader = fd;
        n++;
    }
    *n_out = n;
    return leader;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    const char *out = argc > 3 ? argv[3] : "/tmp/sp_bench_perf.h5";
    if (rounds > 64) rounds = 64;
    const char *events = getenv("SCOPE_PROFILER_PERF_EVENTS");
    sp_options o;
    sp_options_init(&o);
    o.file_path = out;
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup failed: %s\n", sp_last_error());
        return 1;
    }
    int nev = 0;
    int leader = open_group(&nev);
    if (leader < 0) {
        perror("perf_event_open");
        return 1;
    }
    uint64_t buf[3 + 2 * 8];
    int32_t h = sp_region_register("bench"), h2 = sp_region_register("bench_other");
    double floor_ns[64], read_ns[64], pair_ns[64], other_ns[64];
    volatile long sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        double t1 = t0 + clock_pairs_s(n, &sink);
        for (long i = 0; i < n; i++) {
            struct timespec a, b;
            sink += read(leader, buf, (3 + 2 * nev) * 8);
            clock_gettime(CLOCK_MONOTONIC, &a);
            clock_gettime(CLOCK_MONOTONIC, &b);
            sink += read(leader, buf, (3 + 2 * nev) * 8);
            sink += b.tv_nsec - a.tv_nsec + (long)buf[3];
        }
        double t2 = now_s();
        for (long i = 0; i < n; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        double t3 = now_s();
        for (long i = 0; i < n; i++) {
            sp_region_start_id(h2);
            sp_region_stop_id(h2);
        }
        double t4 = now_s();
        floor_ns[r] = (t1 - t0) / n * 1e9;
        read_ns[r] = (t2 - t1) / n * 1e9;
        pair_ns[r] = (t3 - t2) / n * 1e9;
        other_ns[r] = (t4 - t3) / n * 1e9;
    }
    double f = median(floor_ns, rounds), rf = median(read_ns, rounds), p = median(pair_ns, rounds), po = median(other_ns, rounds);
    const char *chosen = getenv("SCOPE_PROFILER_PERF_REGIONS");
    int rc = sp_finalize();
    printf("events                %s\n", events ? events : "(none)");
    printf("regions               %s\n", chosen && *chosen ? chosen : "(all)");
    printf("pairs per round       %ld x %d rounds\n", n, rounds);
    printf("floor (2x clock_gettime)            %9.1f ns\n", f);
    printf("read floor (2x clock + 2x group read) %7.1f ns   ratio to floor %.2f\n", rf, rf / f);
    printf("handle pair                          %8.1f ns   ratio to read floor %.3f%s\n", p, p / rf,
           events && *events ? " (target: <= 3000 ns via read())" : " (no events: the plain path)");
    printf("other pair (bench_other)             %8.1f ns   ratio to floor %.3f%s\n", po, po / f,
           chosen && *chosen ? " (not chosen: no counters read)" : "");
    printf("RESULT floor %.3f\nRESULT read_floor %.3f\nRESULT pair %.3f\nRESULT other_pair %.3f\n", f, rf, p, po);
    return rc == SP_OK ? 0 : 1;
}
