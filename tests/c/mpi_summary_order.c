/* Every rank records 40 regions, or <regions> (rank r: 200 (r + 1) calls each), then
 * sp_finalize: with SCOPE_PROFILER_VERBOSE=2 every rank prints its finalize notes and rank 0
 * the summary table (a line per region). Usage: mpi_summary_order <file> [<regions>] */
#include <mpi.h>
#include <scope_profiler.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank;
    char name[64];
    sp_options o;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : "order.h5";
    if (sp_setup(&o) != SP_OK) return 1;
    int regions = argc > 2 ? atoi(argv[2]) : 40;
    for (int r = 0; r < regions; r++) {
        snprintf(name, sizeof name, "region %02d of the summary table", r);
        for (int i = 0; i < 200 * (rank + 1); i++) {
            sp_region_start(name);
            sp_region_stop(name);
        }
    }
    if (sp_finalize() != SP_OK) return 1;
    MPI_Finalize();
    return 0;
}
