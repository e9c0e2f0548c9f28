/* A gcc -fopenmp MPI program with the OpenMP patterns of LULESH 2.0 (EvalEOSForElems): a
 * parallel region of `omp for nowait firstprivate(...)` and `omp for firstprivate(...)` loops
 * with a static schedule, conditional nowait loops after the barrier, and a `parallel for`
 * with a reduction. GCC ends the outlined body with a tail call of GOMP_barrier on the path
 * of a thread whose share of the first loop is empty, so libomp reports that barrier with a
 * return address inside itself. Each rank runs loops of its own sizes (some smaller than the
 * team: threads with no iterations). The test finds each construct's line by its marker.
 * Usage: omp_tail_barrier [STEPS]; prints "rank R sizes ..." lines with the sizes it ran. */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define CAP 256

__attribute__((noinline)) static double step(int n, double *a, double *b, double *c, double lo, double hi) {
#pragma omp parallel /* PARALLEL */
    {
#pragma omp for nowait firstprivate(n)
        for (int i = 0; i < n; ++i) {
            a[i] = b[i] * 0.5;
            c[i] = b[i] + 1.0;
        }
#pragma omp for firstprivate(n)
        for (int i = 0; i < n; ++i) {
            b[i] = a[i] + c[i] * 0.25; /* LOOP_BARRIER */
        }
        if (lo != 0.0) {
#pragma omp for nowait firstprivate(n, lo)
            for (int i = 0; i < n; ++i)
                if (b[i] < lo) b[i] = lo;
        }
        if (hi != 0.0) {
#pragma omp for nowait firstprivate(n, hi)
            for (int i = 0; i < n; ++i)
                if (b[i] > hi) b[i] = hi;
        }
    }
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) firstprivate(n) /* PARALLEL_FOR */
    for (int i = 0; i < n; ++i) sum += b[i];
    return sum;
}

int main(int argc, char **argv) {
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int steps = argc > 1 ? atoi(argv[1]) : 12;
    static double a[CAP], b[CAP], c[CAP];
    for (int i = 0; i < CAP; i++) b[i] = i;
    /* Sizes 0 (no thread has work), 1 (one thread of two has none), 2 and more. */
    static const int sizes[] = {0, 1, 2, 7, 1, 64, 0, 3};
    double total = 0.0, all = 0.0;
    printf("rank %d sizes", rank);
    for (int s = 0; s < steps; s++) {
        int n = sizes[(s + rank) % 8];
        printf(" %d", n);
        total += step(n, a, b, c, s % 2 ? 0.0 : -1e9, s % 3 ? 0.0 : 1e9);
        MPI_Allreduce(&total, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    printf("\n");
    MPI_Finalize();
    return 0;
}
