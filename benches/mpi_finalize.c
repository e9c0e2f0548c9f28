/* Finalize over MPI: time of the collective sp_finalize and rank 0's memory, for N calls per
 * rank (4 regions). Run under mpirun with several rank counts (benches/run_mpi_finalize.sh). */
#include <scope_profiler_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long status_kb(const char *key) {
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) v = atol(line + strlen(key) + 1);
    fclose(f);
    return v;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long n = argc > 1 ? atol(argv[1]) : 100000;
    const char *out = argc > 2 ? argv[2] : "/tmp/sp_bench_mpi.h5";
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sp_options o;
    sp_options_init(&o);
    o.file_path = out;
    o.verbosity = 0;
    sp_setup(&o);
    int32_t h[4] = {sp_region_register("a"), sp_region_register("b"), sp_region_register("c"), sp_region_register("d")};
    for (long i = 0; i < n; i++) {
        sp_region_start_id(h[i % 4]);
        sp_region_stop_id(h[i % 4]);
    }
    long rss_before = status_kb("VmRSS:");
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = sp_finalize();
    double t = MPI_Wtime() - t0;
    long hwm = status_kb("VmHWM:");
    double tmax;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("ranks %3d  calls/rank %ld  finalize %.3f s  rank0 RSS before %ld KiB  peak %ld KiB  (+%ld KiB)  status %d\n",
               size, n, tmax, rss_before, hwm, hwm - rss_before, rc);
    MPI_Finalize();
    return rc == SP_OK ? 0 : 1;
}
