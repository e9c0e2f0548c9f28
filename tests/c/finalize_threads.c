/* A large run (two threads, nested regions, enough calls for finalize's threaded merge and
 * write), then sp_finalize. With argv[2] = "nothreads" the process first lowers RLIMIT_NPROC
 * to 1, so that no thread can be created inside sp_finalize (run it as an unprivileged user:
 * root is exempt from the limit); it checks that thread creation really fails.
 * Usage: finalize_threads OUTPUT.h5 [nothreads]
 * Prints EXPECT<TAB>calls<TAB>name for both regions. */
#include <scope_profiler.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define CALLS_PER_THREAD 300000

static int32_t h_outer, h_inner;

static void *work(void *arg) {
    (void)arg;
    for (long i = 0; i < CALLS_PER_THREAD; i++) {
        sp_region_start_id(h_outer);
        sp_region_start_id(h_inner);
        sp_region_stop_id(h_inner);
        sp_region_stop_id(h_outer);
    }
    return NULL;
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    if (sp_setup(&o) != SP_OK) return 1;
    h_outer = sp_region_register("outer");
    h_inner = sp_region_register("inner");
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    if (argc > 2 && strcmp(argv[2], "nothreads") == 0) {
        struct rlimit one = {1, 1};
        if (setrlimit(RLIMIT_NPROC, &one) != 0) return 3;
        pthread_t x;
        if (pthread_create(&x, NULL, nothing, NULL) == 0) {
            fprintf(stderr, "a thread could still be created (running as root?)\n");
            return 4;
        }
    }
    if (sp_finalize() != SP_OK) return 5;
    printf("EXPECT\t%d\touter\nEXPECT\t%d\tinner\n", 2 * CALLS_PER_THREAD, 2 * CALLS_PER_THREAD);
    return 0;
}
