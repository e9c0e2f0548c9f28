/* End-to-end test program for LIKWID support (tests/likwid_e2e.rs): two threads (the main
 * thread and one pthread, like an OpenMP team) that record concurrently on their own CPUs,
 * plus a serial region on the main thread before the team starts. One measuring thread per
 * CPU is what LIKWID supports (5.5 keeps one result per CPU and thread slot).
 * Expected: "serial" 1 call on the main thread; "parallel work" 4 calls and
 * "worker loop" 3 calls on each of the two threads.
 * With the argument "shared": two pthreads do the work and the main thread waits, so under
 * likwid-perfctr -C 0,1 one worker shares CPU 0 with the main thread. */
#include <string.h>
#include <pthread.h>
#include <stdio.h>
#include "scope_profiler.h"

#define NTHREADS 2
static pthread_barrier_t barrier;
static volatile double sink;

static void *worker(void *arg) {
    (void)arg;
    int32_t h = sp_region_register("parallel work");
    pthread_barrier_wait(&barrier);
    for (int k = 0; k < 4; k++) {
        sp_region_start_id(h);
        double s = 0.0;
        for (int i = 0; i < 100000; i++) s += i * 1e-3;
        sink = s;
        sp_region_stop_id(h);
    }
    for (int k = 0; k < 3; k++) {
        sp_region_start("worker loop");
        sink = k;
        sp_region_stop("worker loop");
    }
    pthread_barrier_wait(&barrier);
    return NULL;
}

int main(int argc, char **argv) {
    int shared = argc > 1 && strcmp(argv[1], "shared") == 0;
    int spawned = shared ? NTHREADS : NTHREADS - 1;
    sp_options o;
    sp_options_init(&o);
    o.use_likwid = 1;
    o.verbosity = 0;
    if (sp_setup(&o) < 0) { fprintf(stderr, "sp_setup: %s\n", sp_last_error()); return 1; }
    sp_region_start("serial");
    sink = 1.0;
    sp_region_stop("serial");

    pthread_t t[NTHREADS];
    pthread_barrier_init(&barrier, NULL, NTHREADS);
    for (int i = 0; i < spawned; i++) pthread_create(&t[i], NULL, worker, NULL);
    if (!shared) worker(NULL);
    for (int i = 0; i < spawned; i++) pthread_join(t[i], NULL);
    int rc = sp_finalize();
    printf("likwid_threads done rc=%d\n", rc);
    return rc < 0 ? 1 : 0;
}
