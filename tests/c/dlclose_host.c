/* A host that loads libscope_profiler.so at run time (a plugin system would), records calls
 * on two threads of its own and on its main thread, and unloads it again without sp_finalize:
 *   dlclose_host LIB.so OUT.h5 [term|-] [THREAD_CALLS [MAIN_CALLS]]
 * (20,000 calls on each thread and 300,000 on the main thread unless given). Inside dlclose
 * the dynamic loader holds its lock: the profile must be written on this thread alone (a
 * thread started then could never end). After dlclose the host goes on: it prints
 * "unloaded", and with "term" it sends itself SIGTERM (the flight recorder's handlers must be
 * gone with the library, or the host would crash). */
#include <dlfcn.h>
#include <stdint.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*setup_fn)(const void *);
typedef int (*named_fn)(const char *);

static named_fn start, stop;
static long thread_calls = 20000;

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < thread_calls; i++) {
        start("thread_work");
        stop("thread_work");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB.so OUT.h5 [term|-] [THREAD_CALLS [MAIN_CALLS]]\n", argv[0]);
        return 2;
    }
    int term = argc > 3 && !strcmp(argv[3], "term");
    if (argc > 4) thread_calls = atol(argv[4]);
    long main_calls = argc > 5 ? atol(argv[5]) : 300000;
    setenv("SCOPE_PROFILER_FILE", argv[2], 1);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    setup_fn setup = (setup_fn)(uintptr_t)dlsym(lib, "sp_setup");
    start = (named_fn)(uintptr_t)dlsym(lib, "sp_region_start");
    stop = (named_fn)(uintptr_t)dlsym(lib, "sp_region_stop");
    if (!setup || !start || !stop) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 2;
    }
    if (setup(NULL) != 0) {
        fprintf(stderr, "sp_setup failed\n");
        return 2;
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (long i = 0; i < main_calls; i++) {
        start("main_work");
        stop("main_work");
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    if (dlclose(lib) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 2;
    }
    printf("unloaded\n");
    fflush(stdout);
    if (term) {
        raise(SIGTERM);
        usleep(200000);
        printf("survived SIGTERM\n");
    }
    return 0;
}
