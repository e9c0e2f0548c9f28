/* A hybrid MPI + OpenMP program with no annotation: OpenMP regions on every rank, through the
 * OpenMP tools interface, and MPI calls through the MPI plugin. Usage: omp_hybrid [ROUNDS] */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rounds = argc > 1 ? atoi(argv[1]) : 4;
    double local = 0, total = 0;
    for (int r = 0; r < rounds; r++) {
#pragma omp parallel num_threads(2) reduction(+ : local) /* PARALLEL */
        {
            local += omp_get_thread_num() + rank;
#pragma omp barrier /* BARRIER */
            local += 1;
        }
        MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    if (rank == 0) printf("total %.1f\n", total);
    MPI_Finalize();
    return 0;
}
