/* What the ranks of one run can differ in, for the write of one file by every rank: small
 * enough to run 64 ranks oversubscribed on 2 cores.
 * Usage: mpi_collective OUTPUT.h5 CALLS [uniform]
 * "uniform": every rank records "solve" CALLS times and "io/write" once, nothing else (the
 * same regions everywhere, no counters). Otherwise rank r records:
 *   - nothing at all when r % 4 == 3 (and P > 1): no region, no call;
 *   - otherwise regions registered in an order and of a set that depend on r: even ranks
 *     "solve", "io/write", "even/set é" (this one with a source location); odd ranks
 *     "io/write", "odd set" (with a source location, a longer file name), "solve";
 *   - "solve" CALLS * (r % 5 + 1) times, "io/write" r + 1 times, the set region twice;
 *   - r % 3 worker threads (besides the main one), each "worker" CALLS times;
 *   - FLOP annotations on "solve" when r % 4 == 1; the perf event task-clock per region when
 *     r % 4 == 2 (the software event every Linux has);
 *   - "left open" started and never stopped on rank 1; "rank <r> only" once when r < 3.
 * The test computes the expected counts from the same rules. */
#include <scope_profiler_mpi.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long calls;

static void *worker(void *arg) {
    (void)arg;
    int32_t h = sp_region_register("worker");
    volatile double x = 0;
    for (long i = 0; i < calls; i++) {
        sp_region_start_id(h);
        x += (double)i;
        sp_region_stop_id(h);
    }
    return NULL;
}

static void repeat(int32_t h, long n) {
    volatile double x = 0;
    for (long i = 0; i < n; i++) {
        sp_region_start_id(h);
        for (int k = 0; k < 20; k++) x += k;
        sp_region_stop_id(h);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    calls = atol(argv[2]);
    int uniform = argc > 3 && strcmp(argv[3], "uniform") == 0;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    if (rank % 4 == 2 && !uniform) o.perf_events = "task-clock";
    int rc = sp_setup(&o);
    if (rc != SP_OK) {
        fprintf(stderr, "sp_setup: %d %s\n", rc, sp_last_error());
        return 1;
    }
    if (uniform) {
        repeat(sp_region_register("solve"), calls);
        repeat(sp_region_register("io/write"), 1);
    } else if (!(rank % 4 == 3 && size > 1)) {
        int32_t solve, io, set;
        if (rank % 2 == 0) {
            solve = sp_region_register("solve");
            io = sp_region_register("io/write");
            set = sp_region_register_at("even/set \xc3\xa9", "src/even.c", 10 + rank);
        } else {
            io = sp_region_register("io/write");
            set = sp_region_register_at("odd set", "src/a/much/longer/path/to/odd.c", 20 + rank);
            solve = sp_region_register("solve");
        }
        int workers = rank % 3;
        pthread_t t[2];
        for (int i = 0; i < workers; i++) pthread_create(&t[i], NULL, worker, NULL);
        repeat(solve, calls * (rank % 5 + 1));
        if (rank % 4 == 1) sp_region_add_flops(solve, 1e6 * (rank + 1));
        repeat(io, rank + 1);
        repeat(set, 2);
        for (int i = 0; i < workers; i++) pthread_join(t[i], NULL);
        if (rank == 1) sp_region_start("left open");
        if (rank < 3) {
            char name[32];
            snprintf(name, sizeof name, "rank %d only", rank);
            sp_region_start(name);
            sp_region_stop(name);
        }
    }
    rc = sp_finalize();
    if (rc != SP_OK) fprintf(stderr, "rank %d: sp_finalize: %d %s\n", rank, rc, sp_last_error());
    MPI_Finalize();
    return rc == SP_OK ? 0 : 3;
}
