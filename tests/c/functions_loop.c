/* A host of instrumented functions that runs until it is killed.
 *
 *   functions_loop SIDE_FILE
 *
 * Built with -finstrument-functions: two threads call the instrumented function `tick` in a
 * tight loop and append "tick<thread> <completed calls>\n" to SIDE_FILE after every batch of
 * 20000 calls, so the test knows what was completed. Nothing else is instrumented; profiling
 * is set up by the first hook, main's call before the threads start (SCOPE_PROFILER_FILE names
 * the profile). */

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINST __attribute__((no_instrument_function))

static int side_fd = -1;
static volatile long sink;

__attribute__((noinline)) void tick(void) { sink++; }

NOINST static void note(long id, long n) {
    char line[64];
    int len = snprintf(line, sizeof line, "tick%ld %ld\n", id, n);
    if (write(side_fd, line, (size_t)len) != len) abort();
}

NOINST static void *worker(void *arg) {
    long id = (long)arg, n = 0;
    for (;;) {
        for (int i = 0; i < 20000; i++) tick();
        n += 20000;
        note(id, n);
    }
    return NULL;
}

NOINST int main(int argc, char **argv) {
    if (argc < 2) return 2;
    side_fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (side_fd < 0) return 3;
    /* The first hook sets profiling up: here, before the threads call (a call of another
     * thread while the first hook sets up is not recorded). */
    tick();
    pthread_t t[2];
    for (long k = 0; k < 2; k++) pthread_create(&t[k], NULL, worker, (void *)k);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    return 0;
}
