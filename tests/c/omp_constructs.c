/* OpenMP constructs, recorded through the OpenMP tools interface without annotation: built with
 * clang -fopenmp (libomp), or with gcc -fopenmp and run on libomp. The test finds each construct's
 * line by the marker comment on it. With -DWITH_REGIONS the program sets profiling up itself and
 * opens regions of its own around and inside the parallel regions.
 * Usage: omp_constructs [PARALLEL_REGIONS] [TASKS_PER_REGION] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef WITH_REGIONS
#include <scope_profiler.h>
#endif

static volatile double sink;

__attribute__((noinline)) static void work(int i) {
    double x = 0;
    for (int k = 0; k < 200 * (i + 1); k++) x += k * 0.5;
    sink += x;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    int tasks = argc > 2 ? atoi(argv[2]) : 0;
#ifdef WITH_REGIONS
    if (sp_setup(NULL) != SP_OK) return 1;
    sp_region_start("outer");
#endif
    for (int r = 0; r < n; r++) {
#pragma omp parallel num_threads(2) /* PARALLEL */
        {
#ifdef WITH_REGIONS
            sp_region_start("inner");
#endif
            work(omp_get_thread_num());
#pragma omp barrier /* BARRIER_A */
            work(1 - omp_get_thread_num());
            work(2);
            work(3);
#pragma omp barrier /* BARRIER_B */
            work(4);
            work(5);
#pragma omp for schedule(dynamic) /* LOOP */
            for (int i = 0; i < 8; i++) work(i);
            work(6);
            work(7);
#pragma omp single /* SINGLE */
            {
                for (int t = 0; t < tasks; t++) {
#pragma omp task /* TASK */
                    work(t);
                }
            }
#ifdef WITH_REGIONS
            sp_region_stop("inner");
#endif
        }
    }
#ifdef WITH_REGIONS
    sp_region_stop("outer");
    if (sp_finalize() != SP_OK) return 1;
#endif
    printf("done %d\n", n);
    return 0;
}
