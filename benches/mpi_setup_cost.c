/* What the MPI plugin adds inside MPI_Init and MPI_Finalize, measured from outside: a program
 * that never calls sp_* times its own MPI_Init and MPI_Finalize (CLOCK_MONOTONIC around each
 * call) and makes a few MPI calls between them; benches/run_mpi_setup_cost.sh runs it with and
 * without the plugin preloaded, alternating, and compares. Rank 0 prints one line:
 *   init_s <seconds> finalize_s <seconds> */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    double t0 = now_s();
    MPI_Init(&argc, &argv);
    double t1 = now_s();
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double x = 1, y = 0;
    for (int i = 0; i < 1000; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = now_s();
    MPI_Finalize();
    double t3 = now_s();
    if (rank == 0) printf("init_s %.4f finalize_s %.4f\n", t1 - t0, t3 - t2);
    return 0;
}
