/* Threads whose first instrumented calls come at the same moment, nothing called before.
 *
 *   functions_first_calls THREADS CALLS
 *
 * Built with -finstrument-functions; main and the thread bodies are not instrumented, so no
 * hook runs before the threads are released together from a barrier: each then calls the
 * instrumented `tick` CALLS times. The first hook of whichever thread comes first sets
 * profiling up while the others call too; every call must be in the file (written at exit). */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINST __attribute__((no_instrument_function))

static volatile long sink;
static pthread_barrier_t go;
static long calls;

__attribute__((noinline)) void tick(void) { sink++; }

NOINST static void *worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&go);
    for (long i = 0; i < calls; i++) tick();
    return NULL;
}

NOINST int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int n = atoi(argv[1]);
    calls = atol(argv[2]);
    if (n < 1 || n > 64 || calls < 1) return 2;
    pthread_barrier_init(&go, NULL, (unsigned)n);
    pthread_t t[64];
    for (int k = 0; k < n; k++) pthread_create(&t[k], NULL, worker, NULL);
    for (int k = 0; k < n; k++) pthread_join(t[k], NULL);
    printf("%d threads x %ld calls\n", n, calls);
    return 0;
}
