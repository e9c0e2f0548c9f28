/* OpenMP threads recording regions: every thread of a parallel region records its own calls.
 * Usage: openmp_regions OUTPUT.h5 (run with OMP_NUM_THREADS set). */
#include <scope_profiler.h>

#include <omp.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    if (sp_setup(&o) != SP_OK) return 1;
    int32_t h = sp_region_register("omp body");
    int bad = 0;
    sp_region_start("parallel");
#pragma omp parallel reduction(+ : bad)
    {
        for (int i = 0; i < 100; i++) {
            bad += sp_region_start_id(h) != SP_OK;
            bad += sp_region_start("omp inner") != SP_OK;
            bad += sp_region_stop("omp inner") != SP_OK;
            bad += sp_region_stop_id(h) != SP_OK;
        }
    }
    sp_region_stop("parallel");
    printf("threads=%d bad=%d\n", omp_get_max_threads(), bad);
    return sp_finalize() == SP_OK && bad == 0 ? 0 : 1;
}
