/* Nested and recursive regions on two threads of every rank, for the call paths and the
 * finalize summary. Usage: call_paths OUTPUT.h5 (under mpirun or alone).
 * Each thread of rank r runs 3 steps of:
 *   step { solve { spin (r+1) * 400 us; kernel { spin 200 us } }
 *          io { kernel { spin 100 us } }                  (kernel under two parents)
 *          refine^4 { spin 50 us each }                   (direct recursion, depth 4)
 *          a { b { a { spin 50 us } } } }                 (recursion through another region)
 * and rank 1's second thread also runs "only on rank 1" once (a name rank 0 never has).
 * With a second argument R, rank R records nothing at all. With CALL_PATHS_ONE_PATH=1 the
 * threads run `one_path_work` instead. */
#include <scope_profiler_mpi.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int rank = 0;

static void spin_us(long us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static void refine(int depth) {
    sp_region_start("refine");
    spin_us(50);
    if (depth > 1) refine(depth - 1);
    sp_region_stop("refine");
}

/* solve { spin (rank+1) * 400 us; kernel { spin 200 us } } */
static void solve(void) {
    sp_region_start("solve");
    spin_us((rank + 1) * 400L);
    sp_region_start("kernel");
    spin_us(200);
    sp_region_stop("kernel");
    sp_region_stop("solve");
}

/* CALL_PATHS_ONE_PATH=1: every region under one region only (no recursion, no region under
 * two parents), the case whose call paths follow from the regions' statistics. */
static void one_path_work(void) {
    for (int i = 0; i < 3; i++) {
        sp_region_start("step");
        solve();
        sp_region_start("io");
        sp_region_start("write");
        spin_us(100);
        sp_region_stop("write");
        sp_region_stop("io");
        for (int k = 0; k < 4; k++) {
            sp_region_start("refine");
            spin_us(50);
            sp_region_stop("refine");
        }
        sp_region_stop("step");
    }
    sp_region_start("after");
    spin_us(20);
    sp_region_stop("after");
}

static void *work(void *arg) {
    int second = arg != NULL;
    const char *one = getenv("CALL_PATHS_ONE_PATH");
    if (one && one[0] == '1') {
        one_path_work();
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        sp_region_start("step");
        solve();
        sp_region_start("io");
        sp_region_start("kernel");
        spin_us(100);
        sp_region_stop("kernel");
        sp_region_stop("io");
        refine(4);
        sp_region_start("a");
        sp_region_start("b");
        sp_region_start("a");
        spin_us(50);
        sp_region_stop("a");
        sp_region_stop("b");
        sp_region_stop("a");
        sp_region_stop("step");
    }
    if (second && rank == 1) {
        sp_region_start("only on rank 1");
        spin_us(10);
        sp_region_stop("only on rank 1");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    if (sp_setup(&o) != 0) return 3;
    int idle = argc > 2 ? atoi(argv[2]) : -1;
    if (rank != idle) {
        pthread_t t;
        if (pthread_create(&t, NULL, work, (void *)1) != 0) return 4;
        work(NULL);
        pthread_join(t, NULL);
    }
    if (sp_finalize() != 0) return 5;
    MPI_Finalize();
    printf("DONE rank %d\n", rank);
    return 0;
}
