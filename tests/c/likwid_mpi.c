/* End-to-end test program for LIKWID support under likwid-mpirun (tests/likwid_e2e.rs):
 * every rank records "halo exchange" 2 calls and "rank compute" 5 calls; rank 0 writes
 * all ranks into one file. */
#include <mpi.h>
#include <stdio.h>
#include "scope_profiler.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sp_options o;
    sp_options_init(&o);
    o.use_likwid = 1;
    o.verbosity = 0;
    if (sp_setup(&o) < 0) { fprintf(stderr, "sp_setup: %s\n", sp_last_error()); MPI_Abort(MPI_COMM_WORLD, 1); }
    double s = 0.0;
    for (int k = 0; k < 2; k++) {
        sp_region_start("halo exchange");
        double v = rank + k, r = 0.0;
        MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        s += r;
        sp_region_stop("halo exchange");
    }
    for (int k = 0; k < 5; k++) {
        sp_region_start("rank compute");
        for (int i = 0; i < 10000; i++) s += i * 1e-6;
        sp_region_stop("rank compute");
    }
    int rc = sp_finalize();
    printf("likwid_mpi rank %d done rc=%d sum=%g\n", rank, rc, s);
    MPI_Finalize();
    return rc < 0 ? 1 : 0;
}
