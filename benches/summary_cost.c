/* The summary at finalize over MPI: every rank records REGIONS regions nested under 10
 * parents (2 * REGIONS call paths), some only on odd ranks, CALLS calls each, then the
 * collective sp_finalize is timed (max over ranks, after a barrier). Run by
 * benches/run_summary_cost.sh with SCOPE_PROFILER_SUMMARY=off, flat and tree alternately.
 * Usage: summary_cost REGIONS CALLS OUTPUT.h5 */
#include <scope_profiler_mpi.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int regions = argc > 1 ? atoi(argv[1]) : 1000;
    long calls = argc > 2 ? atol(argv[2]) : 10;
    const char *out = argc > 3 ? argv[3] : "/tmp/sp_summary_cost.h5";
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sp_options o;
    sp_options_init(&o);
    o.file_path = out;
    sp_setup(&o);
    char name[64];
    int32_t parent[10];
    for (int p = 0; p < 10; p++) {
        snprintf(name, sizeof name, "phase %d", p);
        parent[p] = sp_region_register(name);
    }
    for (int r = 0; r < regions; r++) {
        /* A tenth of the regions only on odd ranks: names rank 0 does not have. */
        if (r % 10 == 9 && rank % 2 == 0) continue;
        snprintf(name, sizeof name, "kernel %d", r);
        int32_t h = sp_region_register(name);
        for (int twice = 0; twice < 2; twice++) {
            int32_t p = parent[(r + twice * 5) % 10];
            for (long i = 0; i < calls; i++) {
                sp_region_start_id(p);
                sp_region_start_id(h);
                sp_region_stop_id(h);
                sp_region_stop_id(p);
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = sp_finalize();
    double t = MPI_Wtime() - t0;
    double tmax;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) fprintf(stderr, "ranks %d  regions %d  finalize %.4f s  status %d\n", size, regions, tmax, rc);
    MPI_Finalize();
    return rc == SP_OK ? 0 : 1;
}
