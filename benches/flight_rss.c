/* Peak resident memory (VmHWM, including sp_finalize) of N calls on one thread.
 * flight_rss N OUT.h5: prints "calls N", "hwm_growth_mib X". Run with and without
 * SCOPE_PROFILER_SPILL=1 (benches/run_flight.sh). */
#include <scope_profiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) v = atol(line + strlen(key));
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    struct sp_options o;
    sp_options_init(&o);
    o.file_path = argc > 2 ? argv[2] : "/tmp/sp_flight_rss.h5";
    o.verbosity = 0;
    sp_setup(&o);
    int32_t h = sp_region_register("loop");
    sp_region_start_id(h);
    sp_region_stop_id(h);
    long base = status_kib("VmHWM:");
    for (long i = 1; i < n; i++) {
        sp_region_start_id(h);
        sp_region_stop_id(h);
    }
    long recorded = status_kib("VmHWM:");
    int rc = sp_finalize();
    long peak = status_kib("VmHWM:");
    printf("calls %ld\nstatus %d\nrecording_growth_mib %.1f\nhwm_growth_mib %.1f\n", n, rc, (recorded - base) / 1024.0, (peak - base) / 1024.0);
    return rc;
}
