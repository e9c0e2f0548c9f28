/* perf events per region with real software events: a busy region (task-clock close to its
 * duration), first-touched memory (page faults), a sleeping region (context switches),
 * nesting (counts include child regions), worker threads, and the analytic annotations
 * sp_region_add_flops / sp_region_add_bytes. Prints what it did as `INFO` lines.
 * argv[1]: output file; argv[2] (optional): sp_options.perf_events, else the events come
 * from SCOPE_PROFILER_PERF_EVENTS. */
#include <scope_profiler.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile double sink;

static void spin(double seconds) {
    double t0 = now_s(), x = 0.0;
    while (now_s() - t0 < seconds) {
        for (int k = 0; k < 1000; k++) x += k * 0.5;
    }
    sink = x;
}

static int h_work;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        sp_region_start_id(h_work);
        spin(0.02);
        sp_region_stop_id(h_work);
        sp_region_add_flops(h_work, 1000.0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    sp_options o;
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : "perf.h5";
    if (argc > 2) o.perf_events = argv[2];
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup: %s\n", sp_last_error());
        return 1;
    }
    int h_busy = sp_region_register("busy");
    int h_outer = sp_region_register("outer");
    h_work = sp_region_register("work");

    /* A busy region, nested in "outer". */
    sp_region_start_id(h_outer);
    double busy_cpu = 0.0;
    for (int i = 0; i < 2; i++) {
        double c0 = cpu_s();
        sp_region_start_id(h_busy);
        spin(0.1);
        sp_region_add_flops(h_busy, 2.5e8); /* inside the region */
        sp_region_stop_id(h_busy);
        busy_cpu += cpu_s() - c0;
    }
    /* The thread's own CPU time around the busy calls (what task-clock must see). */
    printf("INFO\tbusy_cpu_ns\t%.0f\n", busy_cpu * 1e9);
    spin(0.05);
    sp_region_stop_id(h_outer);
    sp_region_add_bytes(h_busy, 1e9); /* outside the region */

    /* First-touched memory: one write per page of a fresh mapping. */
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = 8192;
    char *mem = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    /* Base pages only: a kernel that backs anonymous memory with larger folios (THP, mTHP)
     * would fault once per folio. */
    madvise(mem, pages * page, MADV_NOHUGEPAGE);
    sp_region_start("touch");
    for (size_t p = 0; p < pages; p++) mem[p * page] = 1;
    sp_region_stop("touch");
    printf("INFO\ttouched_pages\t%zu\n", pages);
    munmap(mem, pages * page);

    /* A sleeping region. */
    for (int i = 0; i < 3; i++) {
        sp_region_start("sleep");
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        sp_region_stop("sleep");
    }

    /* Threads. */
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);

    /* Misuse of the annotations: a bad handle and a NaN are refused. */
    printf("INFO\tbad_handle\t%d\n", sp_region_add_flops(12345, 1.0));
    printf("INFO\tnan\t%d\n", sp_region_add_bytes(h_busy, 0.0 / 0.0));

    int rc = sp_finalize();
    if (rc != SP_OK) {
        fprintf(stderr, "finalize: %d %s\n", rc, sp_last_error());
        return 1;
    }
    printf("DONE\n");
    return 0;
}
