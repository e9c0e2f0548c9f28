/* Calls whose durations lie near the edges of the log2 histogram's buckets, on both sides:
 * 0.75 ... 1.9 times 2^k ns for k = 15, 18, 20 (33 us, 262 us, 1 ms), each busy-waited on
 * CLOCK_MONOTONIC inside the region. For every call it prints "CALL <lo> <hi>": the region's
 * true duration lies in [lo, hi] ns (lo: from just after the start returned to the last clock
 * read before the stop; hi: from before the start to after the stop).
 * Usage: hist_edges <file> */
#include <scope_profiler.h>

#include <stdio.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    static const double fractions[] = {0.75, 0.9, 0.97, 0.985, 1.015, 1.03, 1.1, 1.3, 1.45, 1.6, 1.9};
    static const int powers[] = {15, 18, 20};
    const int repeats = 10;
    sp_options o;
    int32_t h;
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : "hist_edges.h5";
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup: %s\n", sp_last_error());
        return 1;
    }
    h = sp_region_register("edges");
    for (int r = 0; r < repeats; r++) {
        for (size_t p = 0; p < sizeof powers / sizeof powers[0]; p++) {
            for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
                long long target = (long long)(fractions[f] * (double)(1LL << powers[p]));
                long long before = now_ns();
                sp_region_start_id(h);
                long long in = now_ns(), t;
                do {
                    t = now_ns();
                } while (t - in < target);
                sp_region_stop_id(h);
                long long after = now_ns();
                printf("CALL %lld %lld\n", t - in, after - before);
            }
        }
    }
    return sp_finalize() == SP_OK ? 0 : 1;
}
