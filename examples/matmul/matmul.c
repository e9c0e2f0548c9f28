/* matmul: a compute-bound triple loop and a memory-bound streaming update, each its own
 * region, profiled with scope_profiler.
 *
 *   matmul [N] [stream_len] [sweeps]       (defaults: N=800, 4194304 doubles, 10 sweeps)
 *
 * "matmul": c[i][j] += a[i][k] * b[k][j] for N x N matrices (loop order i, k, j so the
 *           inner loop runs along rows); 2*N^3 floating-point operations. The program
 *           prints the FLOP rate it computes from them and the region's time, to compare
 *           with LIKWID's "DP [MFLOP/s]" from `likwid-perfctr -g FLOPS_DP -m`.
 * "stream": x[i] = y[i] + s * z[i] over stream_len doubles per sweep (24 bytes of memory
 *           traffic and 2 flops per element), one call per sweep.
 * Built with -DUSE_MPI (target matmul_mpi) the rows of c and the stream arrays are split
 * over the ranks; each rank prints its own rate and rank 0 the aggregate.
 * Both regions annotate their work with sp_region_add_flops / sp_region_add_bytes (matmul:
 * 2*N^3 FLOPs and the compulsory traffic 8*(3*N^2 + N^2) bytes: a, b and c read once, c
 * written once; stream: 2 FLOPs and 24 bytes per element), so `sptool inspect` shows GFLOP/s,
 * GB/s and FLOP/byte on any machine; with SCOPE_PROFILER_PERF_EVENTS=flops on a CPU with a PMU
 * it also shows the counted FLOPs and the analytic/counted ratio.
 * Nothing here is LIKWID specific: set SCOPE_PROFILER_LIKWID=1 under likwid-perfctr -m. */
#define _POSIX_C_SOURCE 200809L
#include <scope_profiler.h>

#ifdef USE_MPI
#include <mpi.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long parse(const char *arg, long fallback, const char *what) {
    if (arg == NULL) return fallback;
    char *end = NULL;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || v < 1) {
        fprintf(stderr, "matmul: %s must be a positive integer, not '%s'\n", what, arg);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1, status = 0;
#ifdef USE_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#endif
    const long n = parse(argc > 1 ? argv[1] : NULL, 800, "N");
    const long stream_len = parse(argc > 2 ? argv[2] : NULL, 4194304, "stream_len");
    const long sweeps = parse(argc > 3 ? argv[3] : NULL, 10, "sweeps");
    /* My rows [r0, r1) of c (and a); all of b. */
    const long r0 = n * rank / size, r1 = n * (rank + 1) / size, rows = r1 - r0;
    const long s0 = stream_len * rank / size, len = stream_len * (rank + 1) / size - s0;

    int rc = sp_setup(NULL); /* options from the environment; MPI_COMM_WORLD under MPI */
    if (rc < 0) fprintf(stderr, "matmul: profiling is off: %s\n", sp_last_error());
    /* Handles: the form for hot loops (no string work per call). */
    const int32_t matmul_region = sp_region_register("matmul");
    const int32_t stream_region = sp_region_register("stream");

    double *a = malloc((size_t)(rows * n + 1) * sizeof *a);
    double *b = malloc((size_t)(n * n) * sizeof *b);
    double *c = calloc((size_t)(rows * n + 1), sizeof *c);
    double *x = malloc((size_t)(len + 1) * sizeof *x);
    double *y = malloc((size_t)(len + 1) * sizeof *y);
    double *z = malloc((size_t)(len + 1) * sizeof *z);
    if (!a || !b || !c || !x || !y || !z) {
        fprintf(stderr, "matmul: out of memory\n");
        return 1;
    }
    for (long i = 0; i < rows; i++)
        for (long k = 0; k < n; k++) a[i * n + k] = 0.25 * (double)((r0 + i + 2 * k) % 7) - 0.5;
    for (long k = 0; k < n; k++)
        for (long j = 0; j < n; j++) b[k * n + j] = 0.5 * (double)((3 * k + j) % 5) - 0.75;
    for (long i = 0; i < len; i++) {
        x[i] = 0.0;
        y[i] = 1.0;
        z[i] = (double)(i % 3);
    }

#ifdef USE_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
    /* The clock read once before it is timed: its first call resolves the symbol (microseconds),
     * which would land inside the region and outside the program's own timing. */
    (void)now();
    sp_region_start_id(matmul_region);
    const double t0 = now();
    for (long i = 0; i < rows; i++) {
        double *ci = &c[i * n];
        for (long k = 0; k < n; k++) {
            const double aik = a[i * n + k];
            const double *bk = &b[k * n];
            for (long j = 0; j < n; j++) ci[j] += aik * bk[j];
        }
    }
    const double t_matmul = now() - t0;
    sp_region_stop_id(matmul_region);
    /* This rank's share: 2 FLOPs (multiply, add) per (i, k, j). */
    sp_region_add_flops(matmul_region, 2.0 * (double)rows * (double)n * (double)n);
    sp_region_add_bytes(matmul_region, 8.0 * (3.0 * (double)rows * (double)n + (double)n * (double)n));

    double t_stream = 0.0;
    for (long s = 0; s < sweeps; s++) {
        const double scale = 0.5 + (double)s;
        sp_region_start_id(stream_region);
        const double t1 = now();
        for (long i = 0; i < len; i++) x[i] = y[i] + scale * z[i];
        t_stream += now() - t1;
        sp_region_stop_id(stream_region);
        sp_region_add_flops(stream_region, 2.0 * (double)len);
        sp_region_add_bytes(stream_region, 24.0 * (double)len);
    }

    /* Checksums of c and x, and what the sum of c must be:
     * sum_ij c_ij = sum_k (sum_i a_ik) (sum_j b_kj). */
    double sums[3] = {0.0, 0.0, 0.0};
    for (long i = 0; i < rows * n; i++) sums[0] += c[i];
    for (long i = 0; i < len; i++) sums[1] += x[i];
    for (long k = 0; k < n; k++) {
        double col = 0.0, row = 0.0;
        for (long i = 0; i < rows; i++) col += a[i * n + k];
        for (long j = 0; j < n; j++) row += b[k * n + j];
        sums[2] += col * row;
    }
    /* Every rank's two times, on rank 0. */
    double mine[2] = {t_matmul, t_stream};
    double *times = malloc(2 * (size_t)size * sizeof *times);
    if (times == NULL) return 1;
#ifdef USE_MPI
    MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Gather(mine, 2, MPI_DOUBLE, times, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
#else
    times[0] = mine[0];
    times[1] = mine[1];
#endif
    if (rank == 0) {
        printf("matmul: N=%ld, %d rank(s), checksum %.6e (expected %.6e); stream: %ld doubles x %ld sweeps, "
               "checksum %.6e\n", n, size, sums[0], sums[2], stream_len, sweeps, sums[1]);
        if (fabs(sums[0] - sums[2]) > 1e-9 * (fabs(sums[2]) + 1.0)) {
            fprintf(stderr, "matmul: wrong result\n");
            status = 1;
        }
        double slowest = 0.0;
        for (int r = 0; r < size; r++) {
            const double f = 2.0 * (double)(n * (r + 1) / size - n * r / size) * (double)n * (double)n;
            const double bytes = 24.0 * (double)(stream_len * (r + 1) / size - stream_len * r / size) * (double)sweeps;
            if (times[2 * r] > slowest) slowest = times[2 * r];
            printf("rank %d: matmul %.0f flop in %.6f s = %.1f MFLOP/s; stream %.2f GB/s\n", r, f, times[2 * r],
                   f / times[2 * r] * 1e-6, bytes / times[2 * r + 1] * 1e-9);
        }
        const double total = 2.0 * (double)n * (double)n * (double)n;
        printf("total: 2*N^3 = %.0f flop, slowest rank %.6f s = %.1f MFLOP/s\n", total, slowest, total / slowest * 1e-6);
    }
    free(times);

    free(a);
    free(b);
    free(c);
    free(x);
    free(y);
    free(z);
    fflush(stdout);
    sp_finalize();
#ifdef USE_MPI
    MPI_Finalize();
#endif
    return status;
}
