/* A host that loads libscope_profiler.so at run time, records many calls on two threads of
 * its own (each enough for the call paths to be worth a thread of their own at finalize) and
 * unloads the library without sp_finalize:
 *   dlclose_threads LIB.so OUT.h5 CALLS
 * Inside dlclose the dynamic loader holds its lock: the profile must be written on this
 * thread alone (a thread started then could never end). Prints "unloaded" when dlclose
 * returned. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*setup_fn)(const void *);
typedef int (*named_fn)(const char *);

static named_fn start, stop;
static long calls;

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < calls; i++) {
        start("thread_work");
        stop("thread_work");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s LIB.so OUT.h5 CALLS\n", argv[0]);
        return 2;
    }
    calls = atol(argv[3]);
    setenv("SCOPE_PROFILER_FILE", argv[2], 1);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    setup_fn setup = (setup_fn)(uintptr_t)dlsym(lib, "sp_setup");
    start = (named_fn)(uintptr_t)dlsym(lib, "sp_region_start");
    stop = (named_fn)(uintptr_t)dlsym(lib, "sp_region_stop");
    if (!setup || !start || !stop || setup(NULL) != 0) {
        fprintf(stderr, "setup failed\n");
        return 2;
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    if (dlclose(lib) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 2;
    }
    printf("unloaded\n");
    return 0;
}
