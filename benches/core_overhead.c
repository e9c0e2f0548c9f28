/* Cost of a region start/stop pair against its floor, in one process.
 *
 *   rdtsc pair  two bare rdtsc reads (x86-64; the floor of the TSC clock, SCOPE_PROFILER_CLOCK
 *               auto/tsc); also, as context, two rdtscp and two lfence;rdtsc (ordered reads)
 *   floor       two bare clock_gettime(CLOCK_MONOTONIC) calls (what any timer must pay)
 *   handle pair sp_region_start_id + sp_region_stop_id
 *   name pair   sp_region_start("...") + sp_region_stop("...")
 *   record floor two clock_gettime calls plus an 8-byte store into fresh memory: what any
 *               profiler that keeps every call pays at least (the library packs a call
 *               into 8 bytes; first touch of a new page costs microseconds on a VM)
 *
 * Rounds alternate between the three so frequency changes and noise hit all alike; the
 * reported time per pair is the median over rounds. Also reports resident memory per
 * recorded call and the time of sp_finalize for all recorded calls (written to a file).
 * With CORE_OVERHEAD_ROUNDS set, each round's handle pair, rdtsc pair and page faults go to
 * stderr (which round is the worst, and whether it took the faults).
 * Usage: core_overhead [calls_per_round=1000000] [rounds=5] [output.h5] */
#include <scope_profiler.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/resource.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#include "bench_util.h"
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

static long rss_bytes(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

/* Smallest over rounds (call after median, which sorts): the round least disturbed by other
 * processes on a shared machine. */
static double least(const double *v) { return v[0]; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    const char *out = argc > 3 ? argv[3] : "/tmp/sp_bench_core.h5";
    if (rounds > 64) rounds = 64;
    sp_options o;
    sp_options_init(&o);
    o.file_path = out;
    o.verbosity = getenv("SCOPE_PROFILER_VERBOSE") ? -1 : 0;
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup failed: %s\n", sp_last_error());
        return 1;
    }
    int32_t h = sp_region_register("bench_handle");
    double floor_ns[64], handle_ns[64], name_ns[64], record_ns[64], tsc_ns[64], tscp_ns[64], lfence_ns[64];
    volatile long sink = 0;
    long rss0 = rss_bytes();
    long faults = 0; /* minor page faults during the handle-pair loops */
    for (int r = 0; r < rounds; r++) {
        double u0 = now_s();
#if HAVE_TSC
        for (long i = 0; i < n; i++) {
            uint64_t a = __rdtsc();
            uint64_t b = __rdtsc();
            sink += (long)(b - a);
        }
#endif
        double u1 = now_s();
#if HAVE_TSC
        for (long i = 0; i < n; i++) {
            unsigned aux;
            uint64_t a = __rdtscp(&aux);
            uint64_t b = __rdtscp(&aux);
            sink += (long)(b - a);
        }
#endif
        double u2 = now_s();
#if HAVE_TSC
        for (long i = 0; i < n; i++) {
            _mm_lfence();
            uint64_t a = __rdtsc();
            _mm_lfence();
            uint64_t b = __rdtsc();
            sink += (long)(b - a);
        }
#endif
        double u3 = now_s();
        tsc_ns[r] = (u1 - u0) / n * 1e9;
        tscp_ns[r] = (u2 - u1) / n * 1e9;
        lfence_ns[r] = (u3 - u2) / n * 1e9;
        double t0 = now_s();
        double t1 = t0 + clock_pairs_s(n, &sink);
        struct rusage ru0, ru1;
        getrusage(RUSAGE_THREAD, &ru0);
        t1 = now_s();
        for (long i = 0; i < n; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        double t2 = now_s();
        getrusage(RUSAGE_THREAD, &ru1);
        faults += ru1.ru_minflt - ru0.ru_minflt;
        if (getenv("CORE_OVERHEAD_ROUNDS"))
            fprintf(stderr, "round %d: handle pair %.2f ns, rdtsc pair %.2f ns, %ld page faults\n", r, (now_s() - t1) / n * 1e9,
                    (u1 - u0) / n * 1e9, (long)(ru1.ru_minflt - ru0.ru_minflt));
        for (long i = 0; i < n; i++) {
            sp_region_start("bench_name");
            sp_region_stop("bench_name");
        }
        double t3 = now_s();
        int64_t *fresh = malloc((size_t)n * sizeof *fresh);
        double t4 = now_s();
        for (long i = 0; i < n; i++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            clock_gettime(CLOCK_MONOTONIC, &b);
            fresh[i] = (int64_t)(b.tv_nsec - a.tv_nsec);
        }
        double t5 = now_s();
        sink += fresh[n / 2];
        free(fresh);
        record_ns[r] = (t5 - t4) / n * 1e9;
        floor_ns[r] = (t1 - t0) / n * 1e9;
        handle_ns[r] = (t2 - t1) / n * 1e9;
        name_ns[r] = (t3 - t2) / n * 1e9;
    }
    long rss1 = rss_bytes();
    long calls = 2L * n * rounds;
    double f = median(floor_ns, rounds), hp = median(handle_ns, rounds), np = median(name_ns, rounds);
    double rf = median(record_ns, rounds);
    double tp = median(tsc_ns, rounds), tpp = median(tscp_ns, rounds), tlf = median(lfence_ns, rounds);
    double mf = least(floor_ns), mh = least(handle_ns), mn = least(name_ns), mt = least(tsc_ns);
    double worst = 0; /* the worst round's handle pair over that round's rdtsc pair */
    for (int r = 0; r < rounds; r++)
        if (tsc_ns[r] > 0 && handle_ns[r] / tsc_ns[r] > worst) worst = handle_ns[r] / tsc_ns[r];
    const char *mode = getenv("SCOPE_PROFILER_CLOCK");
    double t_fin0 = now_s();
    int rc = sp_finalize();
    double t_fin = now_s() - t_fin0;
    printf("clock setting         %s\n", mode && *mode ? mode : "auto (default)");
    printf("calls recorded        %ld (%ld per kind x %d rounds)\n", calls, n, rounds);
    if (HAVE_TSC) {
        printf("rdtsc pair            %8.2f ns   (least-disturbed round %.2f)\n", tp, mt);
        printf("rdtscp pair           %8.2f ns   (least %.2f; context: ordered reads)\n", tpp, least(tscp_ns));
        printf("lfence;rdtsc pair     %8.2f ns   (least %.2f; context: ordered reads, as anchors use)\n", tlf, least(lfence_ns));
        printf("handle pair / rdtsc pair %6.3f (target <= 1.5 with the TSC clock); on top of the two reads %.2f ns\n", hp / tp, hp - tp);
        printf("worst round: handle pair / rdtsc pair %6.3f; page faults per million handle-pair calls %.1f\n", worst, faults * 1e6 / (2.0 * n * rounds));
        printf("RESULT worst_handle_over_rdtsc %.3f\nRESULT faults_per_million_calls %.1f\n", worst, faults * 1e6 / (2.0 * n * rounds));
        printf("name pair / rdtsc pair   %6.3f (target <= 1.8 with the TSC clock); on top of the two reads %.2f ns\n", np / tp, np - tp);
    }
    printf("floor (2x clock_gettime) %8.2f ns\n", f);
    printf("handle pair           %8.2f ns   ratio %.3f (target <= 1.15)\n", hp, hp / f);
    printf("name pair             %8.2f ns   ratio %.3f (target <= 1.50)\n", np, np / f);
    printf("record floor          %8.2f ns   ratio %.3f (2x clock_gettime + 8 fresh bytes; context)\n", rf, rf / f);
    printf("RESULT rdtsc_pair %.3f\nRESULT clock_gettime_pair %.3f\nRESULT handle_pair %.3f\nRESULT name_pair %.3f\n",
           HAVE_TSC ? tp : 0.0, f, hp, np);
    printf("RESULT min_rdtsc_pair %.3f\nRESULT min_clock_gettime_pair %.3f\nRESULT min_handle_pair %.3f\nRESULT min_name_pair %.3f\n",
           HAVE_TSC ? mt : 0.0, mf, mh, mn);
    printf("memory per call       %8.2f bytes (resident growth / calls, target 16)\n", (double)(rss1 - rss0) / calls);
    printf("finalize              %8.3f s for %ld calls (status %d, target < 2 s for 10M)\n", t_fin, calls, rc);
    return rc == SP_OK ? 0 : 1;
}
