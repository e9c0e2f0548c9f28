/* With SCOPE_PROFILER_DISABLE=1 every call is a cheap no-op that returns SP_OK. */
#include <scope_profiler.h>

#include <stdio.h>

int main(void) {
    int bad = 0;
    bad += sp_setup(NULL) != SP_OK;
    bad += sp_is_disabled() != 1;
    int32_t h = sp_region_register("x");
    bad += h < 0;
    bad += sp_region_start_id(h) != SP_OK;
    bad += sp_region_stop_id(h) != SP_OK;
    bad += sp_region_start("y") != SP_OK;
    bad += sp_region_stop("y") != SP_OK;
    bad += sp_region_stop("never started") != SP_OK;
    bad += sp_finalize() != SP_OK;
    printf("bad=%d\n", bad);
    return bad;
}
