/* Benchmark (benches/likwid_overhead.sh runs it under likwid-perfctr -m with fake MSRs):
 *  1. the cost of one region start/stop pair through scope_profiler with LIKWID on,
 *     against bare likwid_markerStartRegion/StopRegion in the same run;
 *  2. the wall time of sp_finalize (which does markerClose and the read-back).
 * Prints "RESULT key value" lines. Usage: likwid_overhead PAIRS BLOCKS */
#include <likwid.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "scope_profiler.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 2000;
    int blocks = argc > 2 ? atoi(argv[2]) : 21;
    sp_options o;
    sp_options_init(&o);
    o.verbosity = 0; /* use_likwid from $SCOPE_PROFILER_LIKWID */
    double t0 = now();
    if (sp_setup(&o) < 0) { fprintf(stderr, "sp_setup: %s\n", sp_last_error()); return 1; }
    printf("RESULT setup_s %.6f\n", now() - t0);

    int32_t h = sp_region_register("ours");
    likwid_markerRegisterRegion("bare");
    /* warm up both paths (first calls register regions on this CPU) */
    for (int i = 0; i < 100; i++) {
        sp_region_start_id(h); sp_region_stop_id(h);
        likwid_markerStartRegion("bare"); likwid_markerStopRegion("bare");
    }
    double *bare = malloc(sizeof(double) * blocks), *ours = malloc(sizeof(double) * blocks);
    /* Interleaved blocks, so drift and noise hit both sides alike. */
    for (int b = 0; b < blocks; b++) {
        double s = now();
        for (int i = 0; i < pairs; i++) {
            likwid_markerStartRegion("bare");
            likwid_markerStopRegion("bare");
        }
        bare[b] = (now() - s) / pairs;
        s = now();
        for (int i = 0; i < pairs; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        ours[b] = (now() - s) / pairs;
    }
    double ratio[1024];
    for (int b = 0; b < blocks && b < 1024; b++) ratio[b] = ours[b] / bare[b];
    qsort(bare, blocks, sizeof(double), cmp);
    qsort(ours, blocks, sizeof(double), cmp);
    qsort(ratio, blocks, sizeof(double), cmp);
    printf("RESULT bare_pair_ns %.1f\n", bare[blocks / 2] * 1e9);
    printf("RESULT ours_pair_ns %.1f\n", ours[blocks / 2] * 1e9);
    printf("RESULT extra_percent %.2f\n", (ratio[blocks / 2] - 1.0) * 100.0);
    printf("RESULT extra_percent_p10 %.2f\n", (ratio[blocks / 10] - 1.0) * 100.0);
    printf("RESULT extra_percent_p90 %.2f\n", (ratio[blocks * 9 / 10] - 1.0) * 100.0);

    double f0 = now();
    int rc = sp_finalize();
    printf("RESULT finalize_s %.6f\n", now() - f0);
    free(bare);
    free(ours);
    return rc < 0 ? 1 : 0;
}
