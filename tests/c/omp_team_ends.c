/* A worker whose part of a parallel region the runtime reports late: after the region, the
 * primary thread naps, then runs more one-thread parallel regions than a ring of teams has
 * slots (the worker is not given work in them), naps again, and only the next two-thread
 * region reports the worker's end. The worker's part must end with its team (the primary
 * thread's end of the same run), not with anything that came after. */
#include <omp.h>
#include <stdlib.h>
#include <time.h>

static void nap_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, 0);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    volatile long sink = 0;
    for (int r = 0; r < rounds; r++) {
#pragma omp parallel num_threads(2) /* WIDE */
        { sink += omp_get_thread_num(); }
        nap_ms(20);
        for (int k = 0; k < 300; k++) {
#pragma omp parallel num_threads(1) /* NARROW */
            { sink += k; }
        }
        nap_ms(20);
    }
    return (int)(sink & 0);
}
