/* sp_region_start_padded / sp_region_stop_padded (what the Fortran module calls): trailing
 * blanks are not part of a name, the same buffer may hold another name later, and the limits
 * apply to the trimmed name. Prints EXPECT lines and "DONE failures=N". */
#include <scope_profiler.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define EXPECT_STATUS(call, want)                                                          \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != (want)) {                                                               \
            printf("FAIL line %d: %s returned %d, want %d\n", __LINE__, #call, rc_, want); \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

int main(int argc, char **argv) {
    sp_options o;
    char buf[64];
    char *wide = malloc(4096);
    int i;
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : "padded.h5";
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) return 1;
    /* A literal without padding, the same name padded in a buffer, and the counted form. */
    for (i = 0; i < 3; i++) {
        EXPECT_STATUS(sp_region_start_padded("solve", 5), SP_OK);
        EXPECT_STATUS(sp_region_stop_padded("solve", 5), SP_OK);
        memset(buf, ' ', sizeof buf);
        memcpy(buf, "solve", 5);
        EXPECT_STATUS(sp_region_start_padded(buf, sizeof buf), SP_OK);
        EXPECT_STATUS(sp_region_stop_padded(buf, sizeof buf), SP_OK);
        EXPECT_STATUS(sp_region_start_n("solve", 5), SP_OK);
        EXPECT_STATUS(sp_region_stop_padded("solve   ", 8), SP_OK);
    }
    printf("EXPECT\t9\tsolve\n");
    /* The same buffer (same address) with another name, longer and shorter: never a stale hit. */
    memset(buf, ' ', sizeof buf);
    memcpy(buf, "solve x", 7);
    EXPECT_STATUS(sp_region_start_padded(buf, sizeof buf), SP_OK);
    EXPECT_STATUS(sp_region_stop_padded(buf, sizeof buf), SP_OK);
    printf("EXPECT\t1\tsolve x\n");
    memset(buf, ' ', sizeof buf);
    memcpy(buf, "sol", 3);
    EXPECT_STATUS(sp_region_start_padded(buf, sizeof buf), SP_OK);
    EXPECT_STATUS(sp_region_stop_padded(buf, sizeof buf), SP_OK);
    printf("EXPECT\t1\tsol\n");
    /* Inner blanks are part of the name. */
    EXPECT_STATUS(sp_region_start_padded("a b  ", 5), SP_OK);
    EXPECT_STATUS(sp_region_stop_padded("a b", 3), SP_OK);
    printf("EXPECT\t1\ta b\n");
    /* A long buffer with a short name is fine; a blank one is an empty name. */
    memset(wide, ' ', 4096);
    memcpy(wide, "wide", 4);
    EXPECT_STATUS(sp_region_start_padded(wide, 4096), SP_OK);
    EXPECT_STATUS(sp_region_stop_padded(wide, 4096), SP_OK);
    printf("EXPECT\t1\twide\n");
    memset(wide, ' ', 4096);
    EXPECT_STATUS(sp_region_start_padded(wide, 4096), SP_ERR_EMPTY_NAME);
    EXPECT_STATUS(sp_region_start_padded(wide, 0), SP_ERR_EMPTY_NAME);
    /* Too long once trimmed; NULL. */
    memset(wide, 'x', 2000);
    EXPECT_STATUS(sp_region_start_padded(wide, 4096), SP_ERR_NAME_TOO_LONG);
    EXPECT_STATUS(sp_region_start_padded(NULL, 3), SP_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(sp_region_stop_padded(NULL, 3), SP_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(sp_region_stop_padded("never", 5), SP_ERR_UNMATCHED_STOP);
    free(wide);
    EXPECT_STATUS(sp_finalize(), SP_OK);
    printf("DONE failures=%d\n", failures);
    return failures != 0;
}
