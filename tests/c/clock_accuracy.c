/* Recorded times against the program's own CLOCK_MONOTONIC readings: every region call is
 * bracketed, b0 = clock_gettime; start; b1 = clock_gettime ... b2; stop; b3, and the brackets
 * are written out so the test can check each recorded start in [b0, b1] and end in [b2, b3].
 * Threads record their own region ("thread<k>"). Region bodies are short spins (packed calls),
 * sleeps of 1-4 ms, and on thread 0 one sleep of 2.2 s (more than 2^32 TSC ticks: an escaped
 * call). Between calls the threads sleep, so a long run costs little CPU.
 * With CLOCK_ACCURACY_PAUSE=<path> set, the program creates <path>.ready after recording and
 * waits for <path>.go before sp_finalize (so a test can change the machine in between).
 * Usage: clock_accuracy OUT.h5 BRACKETS.txt SECONDS THREADS GAP_US */
#include <scope_profiler.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int64_t mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void spin_ns(int64_t ns) {
    int64_t end = mono() + ns;
    while (mono() < end) {
    }
}

typedef struct {
    int id;
    double seconds;
    int64_t gap_ns;
    long n, cap;
    int64_t (*b)[4];
    int failures;
} job;

static void *work(void *arg) {
    job *j = arg;
    char name[32];
    snprintf(name, sizeof name, "thread%d", j->id);
    int32_t h = sp_region_register(name);
    if (h < 0) {
        j->failures++;
        return NULL;
    }
    int64_t stop_at = mono() + (int64_t)(j->seconds * 1e9);
    unsigned x = 12345u + (unsigned)j->id * 7919u;
    while (mono() < stop_at && j->n < j->cap) {
        x = x * 1103515245u + 12345u;
        unsigned kind = (x >> 16) % 100;
        int64_t *b = j->b[j->n];
        b[0] = mono();
        if (sp_region_start_id(h) != SP_OK) j->failures++;
        b[1] = mono();
        if (j->id == 0 && j->n == 20)
            sleep_ns(2200000000LL);
        else if (kind < 60)
            spin_ns((x >> 8) % 5000);
        else
            sleep_ns(1000000 + (x >> 4) % 3000000);
        b[2] = mono();
        if (sp_region_stop_id(h) != SP_OK) j->failures++;
        b[3] = mono();
        j->n++;
        sleep_ns(j->gap_ns);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: clock_accuracy OUT.h5 BRACKETS.txt SECONDS THREADS GAP_US\n");
        return 2;
    }
    double seconds = atof(argv[3]);
    int threads = atoi(argv[4]);
    if (threads < 1 || threads > 16) return 2;
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup failed: %s\n", sp_last_error());
        return 1;
    }
    job jobs[16];
    pthread_t tids[16];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){t, seconds, atol(argv[5]) * 1000LL, 0, (long)(seconds * 1000) + 100, NULL, 0};
        jobs[t].b = malloc(sizeof(int64_t[4]) * (size_t)jobs[t].cap);
        if (!jobs[t].b || pthread_create(&tids[t], NULL, work, &jobs[t]) != 0) return 1;
    }
    int failures = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        failures += jobs[t].failures;
    }
    const char *pause = getenv("CLOCK_ACCURACY_PAUSE");
    if (pause && *pause) {
        char ready[4096], go[4096];
        snprintf(ready, sizeof ready, "%s.ready", pause);
        snprintf(go, sizeof go, "%s.go", pause);
        FILE *r = fopen(ready, "w");
        if (r) fclose(r);
        for (int i = 0; i < 12000 && access(go, F_OK) != 0; i++) sleep_ns(10000000);
    }
    if (sp_finalize() != SP_OK) failures++;
    FILE *f = fopen(argv[2], "w");
    if (!f) return 1;
    for (int t = 0; t < threads; t++)
        for (long i = 0; i < jobs[t].n; i++)
            fprintf(f, "%d\t%lld\t%lld\t%lld\t%lld\n", t, (long long)jobs[t].b[i][0], (long long)jobs[t].b[i][1],
                    (long long)jobs[t].b[i][2], (long long)jobs[t].b[i][3]);
    fclose(f);
    printf("DONE failures=%d\n", failures);
    return failures == 0 ? 0 : 1;
}
