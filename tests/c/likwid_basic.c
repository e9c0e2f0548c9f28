/* End-to-end test program for LIKWID support (tests/likwid_e2e.rs): one thread, regions
 * with plain, spaced, slashed and non-ASCII names, known call counts.
 * Output file from $SCOPE_PROFILER_FILE; LIKWID switched on through sp_options. */
#include <stdio.h>
#include <stdlib.h>
#include "scope_profiler.h"

static double a[4096], b[4096];

static double dot(int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

int main(void) {
    sp_options o;
    sp_options_init(&o);
    o.use_likwid = 1;
    o.verbosity = 0;
    if (sp_setup(&o) < 0) { fprintf(stderr, "sp_setup: %s\n", sp_last_error()); return 1; }

    sp_region_start("init");
    for (int i = 0; i < 4096; i++) { a[i] = i * 0.5; b[i] = 1.0 / (i + 1); }
    sp_region_stop("init");

    double s = 0.0;
    int32_t dot_h = sp_region_register("compute dot");
    for (int k = 0; k < 10; k++) {
        sp_region_start_id(dot_h);
        s += dot(4096);
        sp_region_stop_id(dot_h);
    }
    for (int k = 0; k < 5; k++) {
        sp_region_start("solver/inner");
        s += dot(1024);
        sp_region_stop("solver/inner");
    }
    for (int k = 0; k < 3; k++) {
        sp_region_start("\xc3\xbcnic\xc3\xb6" "de"); /* "ünicöde" */
        s += dot(16);
        sp_region_stop("\xc3\xbcnic\xc3\xb6" "de");
    }
    int rc = sp_finalize();
    printf("likwid_basic done rc=%d sum=%g\n", rc, s);
    return rc < 0 ? 1 : 0;
}
