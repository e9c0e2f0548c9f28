/* A small run for the sptool tests: "solve" (5 calls sleeping SOLVE_US microseconds each),
 * "setup" (one short call), a region with a 300-character name (2 calls), "worker" (3 calls
 * on a second thread) and, when EXTRA is 1, "only in base" (1 call). The summary table is
 * printed (default verbosity). Usage: sptool_workload FILE SOLVE_US EXTRA */
#include <scope_profiler.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us) {
    struct timespec t;
    t.tv_sec = us / 1000000;
    t.tv_nsec = (us % 1000000) * 1000;
    nanosleep(&t, NULL);
}

static void *worker(void *arg) {
    int i;
    (void)arg;
    for (i = 0; i < 3; ++i) {
        sp_region_start("worker");
        sleep_us(100);
        sp_region_stop("worker");
    }
    return NULL;
}

int main(int argc, char **argv) {
    static char long_name[301];
    sp_options o;
    pthread_t thread;
    long solve_us;
    int i;
    if (argc < 4) return 2;
    solve_us = atol(argv[2]);
    memset(long_name, 'L', 296);
    memcpy(long_name + 296, "_end", 5);
    sp_options_init(&o);
    o.file_path = argv[1];
    if (sp_setup(&o) != SP_OK) return 1;
    sp_region_start("setup");
    sleep_us(50);
    sp_region_stop("setup");
    for (i = 0; i < 5; ++i) {
        sp_region_start("solve");
        sleep_us(solve_us);
        sp_region_stop("solve");
    }
    for (i = 0; i < 2; ++i) {
        sp_region_start(long_name);
        sleep_us(10);
        sp_region_stop(long_name);
    }
    if (atoi(argv[3]) == 1) {
        sp_region_start("only in base");
        sp_region_stop("only in base");
    }
    if (pthread_create(&thread, NULL, worker, NULL) != 0) return 1;
    pthread_join(thread, NULL);
    return sp_finalize() == SP_OK ? 0 : 1;
}
