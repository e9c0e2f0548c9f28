/* Every annotation of the C API, built twice by tests/disabled_build.rs: with -DSP_DISABLE
 * (compiled out: no library linked) and normally (run with SCOPE_PROFILER_DISABLE=1). Both
 * must return the same: what a switched-off profiler returns. Prints "DONE bad=N". */
#include <scope_profiler.h>

#include <stdio.h>
#include <string.h>

static int check(int ok, const char *what) {
    if (!ok) printf("FAIL %s\n", what);
    return !ok;
}

int main(void) {
    int bad = 0, i;
    sp_options o;
    sp_stats st;
    const char *unused_name = "only in a macro";
    bad += check(sp_options_init(&o) == SP_OK, "options_init");
    bad += check(o.struct_size == sizeof o && o.use_likwid == -1 && o.verbosity == -1 && o.file_path == NULL, "options defaults");
    bad += check(sp_setup(&o) == SP_OK, "setup");
    bad += check(sp_is_disabled() == 1, "is_disabled");
    bad += check(sp_region_register("a") == 0, "register");
    bad += check(sp_region_register_n("a", 1) == 0, "register_n");
    bad += check(sp_region_register_at("b", __FILE__, __LINE__) == 0, "register_at");
    bad += check(sp_region_register_at_n("b", 1, __FILE__, strlen(__FILE__), __LINE__) == 0, "register_at_n");
    for (i = 0; i < 3; i++) {
        bad += check(sp_region_start_id(0) == SP_OK, "start_id");
        bad += check(sp_region_add_flops(0, 2.0) == SP_OK, "add_flops");
        bad += check(sp_region_add_bytes(0, 8.0) == SP_OK, "add_bytes");
        bad += check(sp_region_stop_id(0) == SP_OK, "stop_id");
        bad += check(sp_region_start("c") == SP_OK, "start");
        bad += check(sp_region_stop("c") == SP_OK, "stop");
        bad += check(sp_region_start_n("d", 1) == SP_OK, "start_n");
        bad += check(sp_region_stop_n("d", 1) == SP_OK, "stop_n");
        SP_REGION_START("e");
        SP_REGION_STOP("e");
        SP_REGION_START(unused_name);
        SP_REGION_STOP(unused_name);
    }
    bad += check(sp_region_stop("never started") == SP_OK, "unmatched stop");
    memset(&st, 0xff, sizeof st);
    st.struct_size = sizeof st;
    bad += check(sp_region_get_stats(0, &st) == SP_OK, "get_stats");
    bad += check(st.count == 0 && st.total_ns == 0 && st.min_ns == 0 && st.max_ns == 0 && st.exclusive_ns == 0, "stats are zeros");
    bad += check(sp_print_summary() == SP_OK, "print_summary");
    bad += check(sp_set_metadata("problem_size", "128") == SP_OK, "set_metadata");
    bad += check(strcmp(sp_last_error(), "") == 0, "last_error");
    bad += check(sp_finalize() == SP_OK, "finalize");
    printf("DONE bad=%d\n", bad);
    return bad != 0;
}
