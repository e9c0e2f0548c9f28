/* The smallest real use: setup with defaults, a region three times, finalize. Also compiled
 * as C++ (the header must work from both). With -DSKIP_FINALIZE it forgets sp_finalize. */
#include <scope_profiler.h>

#include <stdio.h>
#ifdef CHDIR_AFTER_SETUP
#include <unistd.h>
#endif

int main(void) {
    if (sp_setup(NULL) != SP_OK) {
        fprintf(stderr, "setup: %s\n", sp_last_error());
        return 1;
    }
    if (sp_is_disabled() != 0) {
        fprintf(stderr, "sp_is_disabled says off in a profiled run\n");
        return 1;
    }
#ifdef CHDIR_AFTER_SETUP
    /* Codes often move into a run directory: the default file stays where setup was. */
    if (chdir("/") != 0) return 1;
#endif
    volatile double x = 0.0;
    for (int i = 0; i < 3; i++) {
        sp_region_start("step");
        for (int k = 0; k < 100000; k++) x = x + k * 0.5;
        sp_region_stop("step");
    }
#ifndef SKIP_FINALIZE
    int rc = sp_finalize();
    if (rc != SP_OK) {
        fprintf(stderr, "finalize: %d %s\n", rc, sp_last_error());
        return 1;
    }
#endif
    return 0;
}
