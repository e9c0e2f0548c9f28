/* Time added per MPI call by the MPI plugin (benches/run_mpi_calls.sh). Two ranks; in one
 * process, rounds alternate between the PMPI_ entry points (what the program costs without
 * the library: the wrappers are not involved) and the MPI_ ones (through the wrappers, which
 * record), so both are measured under the same conditions in the same run:
 *   - MPI_Comm_rank: a local call (no communication): the wrappers' cost alone;
 *   - an 8-byte MPI_Allreduce;
 *   - MPI_Irecv + MPI_Isend + 2 x MPI_Wait with the other rank (4 MPI calls).
 * Each round times a block of each variant back to back (the order alternating), and the
 * difference of the two is the round's added time: the median of those paired differences is
 * what the library adds (slow drifts of a shared machine cancel within a round). Rank 0
 * prints, per operation, the median time of each variant, the median paired difference per
 * MPI call, and the spread of the differences (their 25th and 75th percentiles).
 * Usage: mpi_calls [iterations per block] [rounds]
 *
 * For counting instructions (valgrind --tool=callgrind, benches/run_mpi_calls.sh --callgrind):
 * mpi_calls ITERATIONS 1 OPERATION VARIANT runs one operation (rank, allreduce, exchange) of
 * one variant (plain, wrapped) ITERATIONS times after a warm-up of 100, on 1 rank (the exchange
 * then goes to itself) or 2; the difference of two such runs of different lengths is the
 * count per iteration, whatever MPI_Init and MPI_Finalize cost. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"

typedef int (*comm_rank_fn)(MPI_Comm, int *);
typedef int (*allreduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
typedef int (*irecv_fn)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
typedef int (*isend_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
typedef int (*wait_fn)(MPI_Request *, MPI_Status *);

struct api {
    comm_rank_fn comm_rank;
    allreduce_fn allreduce;
    irecv_fn irecv;
    isend_fn isend;
    wait_fn wait;
};

static const struct api PLAIN = {PMPI_Comm_rank, PMPI_Allreduce, PMPI_Irecv, PMPI_Isend, PMPI_Wait};
static const struct api WRAPPED = {MPI_Comm_rank, MPI_Allreduce, MPI_Irecv, MPI_Isend, MPI_Wait};

__attribute__((noinline)) static double comm_rank(const struct api *a, long n) {
    int r = 0;
    long sum = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        a->comm_rank(MPI_COMM_WORLD, &r);
        sum += r;
    }
    double t = now_s() - t0;
    if (sum < 0) printf("%ld\n", sum);
    return t;
}

__attribute__((noinline)) static double allreduce(const struct api *a, long n) {
    double x = 1.0, y = 0.0;
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (long i = 0; i < n; i++) a->allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return now_s() - t0;
}

__attribute__((noinline)) static double exchange(const struct api *a, long n, int peer) {
    double out = 1.0, in = 0.0;
    MPI_Request r[2];
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        a->irecv(&in, 1, MPI_DOUBLE, peer, 5, MPI_COMM_WORLD, &r[0]);
        a->isend(&out, 1, MPI_DOUBLE, peer, 5, MPI_COMM_WORLD, &r[1]);
        a->wait(&r[0], MPI_STATUS_IGNORE);
        a->wait(&r[1], MPI_STATUS_IGNORE);
    }
    return now_s() - t0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    long n = argc > 1 ? atol(argv[1]) : 20000;
    int rounds = argc > 2 ? atoi(argv[2]) : 41;
    if (argc > 4 && size <= 2 && n > 0) {
        /* One operation of one variant (instruction counts). */
        const struct api *a = strcmp(argv[4], "wrapped") == 0 ? &WRAPPED : &PLAIN;
        int peer = size == 1 ? 0 : 1 - rank;
        for (int pass = 0; pass < 2; pass++) {
            long k = pass == 0 ? 100 : n;
            if (strcmp(argv[3], "rank") == 0) comm_rank(a, k);
            else if (strcmp(argv[3], "allreduce") == 0) allreduce(a, k);
            else if (strcmp(argv[3], "exchange") == 0) exchange(a, k, peer);
            else MPI_Abort(MPI_COMM_WORLD, 2);
        }
        MPI_Finalize();
        return 0;
    }
    if (size != 2 || n <= 0 || rounds <= 0) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 mpi_calls [iterations per round] [rounds]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *names[3] = {"MPI_Comm_rank (local)", "MPI_Allreduce 8 B", "Irecv+Isend+2 Wait"};
    const int calls[3] = {1, 1, 4};
    double *t[3][2];
    for (int k = 0; k < 3; k++)
        for (int v = 0; v < 2; v++) t[k][v] = calloc((size_t)rounds, sizeof(double));
    /* Warm-up (connections, first-use registrations). */
    allreduce(&WRAPPED, 1000);
    exchange(&WRAPPED, 1000, 1 - rank);
    for (int i = 0; i < rounds; i++) {
        for (int v = 0; v < 2; v++) {
            /* Alternate which variant goes first. */
            const struct api *a = (v ^ (i & 1)) ? &WRAPPED : &PLAIN;
            int slot = a == &WRAPPED;
            t[0][slot][i] = comm_rank(a, n) / n;
            t[1][slot][i] = allreduce(a, n) / n;
            t[2][slot][i] = exchange(a, n, 1 - rank) / n;
        }
    }
    if (rank == 0) {
        printf("%-24s %12s %14s %8s %16s %22s\n", "operation", "plain [ns]", "wrapped [ns]", "ratio", "added/call [ns]", "(25th..75th pct)");
        double *d = calloc((size_t)rounds, sizeof(double));
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < rounds; i++) d[i] = (t[k][1][i] - t[k][0][i]) * 1e9 / calls[k];
            double added = median(d, rounds); /* sorts d */
            double p = median(t[k][0], rounds) * 1e9, w = median(t[k][1], rounds) * 1e9;
            printf("%-24s %12.1f %14.1f %8.3f %16.1f %10.1f..%-10.1f\n", names[k], p, w, w / p, added, d[rounds / 4], d[(3 * rounds) / 4]);
        }
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
