/* C MPI consumer (scope_profiler_mpi.h): rank r records "mpi c region" r+1 times. */
#include <scope_profiler_mpi.h>

#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sp_options o;
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : NULL;
    o.verbosity = 0;
    int rc = sp_setup_comm(MPI_COMM_WORLD, &o);
    if (rc != SP_OK) fprintf(stderr, "setup: %s\n", sp_last_error());
    for (int i = 0; i <= rank; i++) {
        sp_region_start("mpi c region");
        sp_region_stop("mpi c region");
    }
    if (sp_finalize() != SP_OK) rc = 1;
    MPI_Finalize();
    return rc == SP_OK ? 0 : 1;
}
