/* Source locations from C: SP_REGION_START/STOP (a static handle per call site),
 * sp_region_register_at directly, a region registered from two places (the first location
 * is kept, one warning), and argument checks. Prints "AT<TAB>name<TAB>line" for each
 * location it expects in the file, "EXPECT<TAB>calls<TAB>name" per region and
 * "DONE failures=N". Usage: source_locations <output file> */
#include <scope_profiler.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void check(int ok, const char *what) {
    if (!ok) {
        ++failures;
        printf("FAIL %s: %s\n", what, sp_last_error());
    }
}

static volatile double sink = 0.0;

static void kernel(int i) {
    SP_REGION_START("kernel"); int kernel_line = __LINE__;
    sink = sink + i;
    SP_REGION_STOP("kernel");
    if (i == 0) printf("AT\tkernel\t%d\n", kernel_line);
}

int main(int argc, char **argv) {
    sp_options o;
    int32_t h, h2;
    int i, solve_line, twice_line;
    if (argc < 2) return 2;
    sp_options_init(&o);
    o.file_path = argv[1];
    o.verbosity = 0;
    /* Before sp_setup: refused, and the macro tries again later. */
    check(sp_region_register_at("early", __FILE__, __LINE__) == SP_ERR_NOT_INITIALIZED, "register_at before setup");
    check(sp_setup(&o) == SP_OK, "setup");

    for (i = 0; i < 100; ++i) kernel(i);
    printf("EXPECT\t100\tkernel\n");

    solve_line = __LINE__ + 1;
    h = sp_region_register_at("solve", __FILE__, solve_line);
    check(h >= 0, "register_at");
    printf("AT\tsolve\t%d\n", solve_line);
    for (i = 0; i < 3; ++i) {
        check(sp_region_start_id(h) == SP_OK, "start_id");
        check(sp_region_stop_id(h) == SP_OK, "stop_id");
    }
    printf("EXPECT\t3\tsolve\n");

    /* A second place: same handle, the first location kept, one warning (not two). */
    h2 = sp_region_register_at("solve", "elsewhere.c", 7);
    check(h2 == h, "same handle from another place");
    check(sp_region_register_at("solve", "elsewhere.c", 8) == h, "same handle from a third place");
    /* Registered without a location first: the first location given later is kept. */
    check(sp_region_start("plain first") == SP_OK && sp_region_stop("plain first") == SP_OK, "plain");
    twice_line = __LINE__ + 1;
    check(sp_region_register_at("plain first", __FILE__, twice_line) >= 0, "location after plain use");
    printf("AT\tplain first\t%d\n", twice_line);
    printf("EXPECT\t1\tplain first\n");
    /* No location: NULL file. */
    check(sp_region_register_at("no location", NULL, 0) >= 0, "NULL file");
    check(sp_region_start("no location") == SP_OK && sp_region_stop("no location") == SP_OK, "no location calls");
    printf("EXPECT\t1\tno location\n");

    /* Line 0: the file is known, the line is not. */
    check(sp_region_register_at("file only", __FILE__, 0) >= 0, "line 0");
    check(sp_region_start("file only") == SP_OK && sp_region_stop("file only") == SP_OK, "file only calls");
    printf("AT\tfile only\t0\n");
    printf("EXPECT\t1\tfile only\n");

    /* Argument checks. */
    check(sp_region_register_at(NULL, __FILE__, 1) == SP_ERR_NULL_ARGUMENT, "NULL name");
    check(sp_region_register_at("", __FILE__, 1) == SP_ERR_EMPTY_NAME, "empty name");
    check(sp_region_register_at("bad line", __FILE__, -3) == SP_ERR_INVALID_ARGUMENT, "negative line");
    check(strstr(sp_last_error(), "-3") != NULL, "error names the line");
    check(sp_region_register_at_n("counted", 7, "counted.f90", 11, 42) >= 0, "counted");
    check(sp_region_start("counted") == SP_OK && sp_region_stop("counted") == SP_OK, "counted calls");
    printf("AT\tcounted\t42\n");
    printf("EXPECT\t1\tcounted\n");
    check(sp_region_register_at_n("x", 1, "f", 5000, 1) == SP_ERR_INVALID_ARGUMENT, "file too long");

    check(sp_finalize() == SP_OK, "finalize");
    printf("DONE failures=%d\n", failures);
    return failures != 0;
}
