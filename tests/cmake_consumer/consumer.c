/* C consumer: setup to argv[1], "c region" 3 times, finalize. */
#include <scope_profiler.h>

#include <stdio.h>

int main(int argc, char **argv) {
    sp_options o;
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : NULL;
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup: %s\n", sp_last_error());
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        sp_region_start("c region");
        sp_region_stop("c region");
    }
    return sp_finalize() == SP_OK ? 0 : 1;
}
