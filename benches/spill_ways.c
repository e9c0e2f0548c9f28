/* Where the flight recorder's call words could go, and what each way costs per call.
 *
 *   spill_ways WAY CALLS DIR
 *
 * One recording thread stores CALLS calls exactly as CallLog::push does: two rdtsc reads, one
 * 8-byte word per call into chunks of 512 words (4 KiB) doubling to 131072 words (1 MiB),
 * a new chunk on the cold path when one is full. WAY is where the chunks live:
 *
 *   none          the two rdtsc reads and the packing alone, no store (the floor)
 *   heap          calloc'ed chunks, kept (the memory sink: the baseline)
 *   map           MAP_SHARED mapping of a file in DIR, posix_fallocate'd per chunk, unmapped
 *                 when full (today's flight recorder)
 *   map_populate  map, plus MADV_POPULATE_WRITE of each new chunk on the cold path
 *   memfd         map, on a memfd (tmpfs, no backing file system; survives no kill by itself)
 *   prefault      map, with a helper thread that allocates, maps and populates the next
 *                 chunks ahead of the writer (the writer takes a ready one)
 *   pwrite        recycled heap chunks; a full chunk is pwrite'n to the file by the writer
 *   copybehind    recycled heap chunks; a helper thread copies new words (of the current chunk
 *                 too) to the file with pwrite every 10 ms, and zeroes full chunks for reuse
 *
 * DIR is the spill directory (the output's file system, or /dev/shm for tmpfs). Prints the
 * recording thread's CPU time per call, the whole process's (helper threads included) and
 * the wall time, and, for the ways that persist, how much of the run a SIGKILL could lose.
 * benches/run_spill_ways.sh runs every way alternately and prints ratios to `heap`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define FIRST 512
#define MAXW 131072
#define HDR 4

static const char *way;
static int fd = -1;
static off_t file_end = 4096;

static double cpu(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- helper-thread ways ---------------------------------------------------------------- */

#define RING 4
typedef struct {
    uint64_t *base;
    size_t words;
    off_t off;
} chunk_t;

/* prefault: a ring of ready chunks filled by the helper. */
static chunk_t ready[RING];
static _Atomic int ready_head = 0, ready_tail = 0;
static _Atomic int stop_helper = 0;
static size_t next_words = FIRST;

static chunk_t map_new(size_t words, int populate) {
    chunk_t c = {0, words, file_end};
    if (posix_fallocate(fd, file_end, (off_t)(words * 8)) != 0) abort();
    c.base = mmap(NULL, words * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, file_end);
    if (c.base == MAP_FAILED) abort();
    if (populate) madvise(c.base, words * 8, MADV_POPULATE_WRITE);
    file_end += (off_t)(words * 8);
    return c;
}

static void *prefault_main(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_helper)) {
        int t = atomic_load(&ready_tail);
        if (t - atomic_load(&ready_head) < RING) {
            ready[t % RING] = map_new(next_words, 1);
            if (next_words < MAXW) next_words *= 2;
            atomic_store(&ready_tail, t + 1);
        } else {
            struct timespec w = {0, 100000};
            nanosleep(&w, NULL);
        }
    }
    return NULL;
}

/* copybehind: the current chunk is published; full ones are queued; the helper copies. */
typedef struct {
    uint64_t *base;
    size_t words;
    off_t off;
    size_t copied; /* data words already in the file */
} live_t;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static live_t current;
static live_t full_q[64];
static int full_n = 0;
static uint64_t *pool[8];
static size_t pool_words[8];
static int pool_n = 0;
static double helper_cpu = 0;
static double max_lag_s = 0;

/* Copy the stored words of `c` (up to the first zero word) that are not in the file yet. */
static void copy_new(live_t *c) {
    size_t end = c->copied;
    _Atomic uint64_t *w = (_Atomic uint64_t *)c->base;
    while (HDR + end < c->words && atomic_load_explicit(&w[HDR + end], memory_order_relaxed) != 0) end++;
    if (end > c->copied) {
        if (pwrite(fd, c->base + HDR + c->copied, (end - c->copied) * 8, c->off + (off_t)((HDR + c->copied) * 8)) < 0) abort();
        c->copied = end;
    }
}

static void *copybehind_main(void *arg) {
    (void)arg;
    for (;;) {
        int last = atomic_load(&stop_helper);
        double t0 = cpu(CLOCK_MONOTONIC);
        pthread_mutex_lock(&lock);
        for (int i = 0; i < full_n; i++) {
            copy_new(&full_q[i]);
            /* Zeroed for reuse: a recycled chunk must read as empty. */
            memset(full_q[i].base, 0, full_q[i].words * 8);
            if (pool_n < 8) {
                pool[pool_n] = full_q[i].base;
                pool_words[pool_n++] = full_q[i].words;
            } else {
                free(full_q[i].base);
            }
        }
        full_n = 0;
        if (current.base) copy_new(&current);
        pthread_mutex_unlock(&lock);
        double lag = cpu(CLOCK_MONOTONIC) - t0 + 0.010;
        if (lag > max_lag_s) max_lag_s = lag;
        if (last) break;
        struct timespec w = {0, 10000000};
        nanosleep(&w, NULL);
    }
    helper_cpu = cpu(CLOCK_THREAD_CPUTIME_ID);
    return NULL;
}

/* ---- the writer ------------------------------------------------------------------------ */

static uint64_t *data;
static size_t len, cap;
static size_t words_now;
static uint64_t *cur_base;
static int cur_mapped;

static void new_chunk(void) {
    size_t words = words_now ? (words_now < MAXW ? words_now * 2 : MAXW) : FIRST;
    if (cur_base && cur_mapped) munmap(cur_base, words_now * 8);
    uint64_t *base = NULL;
    cur_mapped = 0;
    if (!strcmp(way, "heap")) {
        base = calloc(words, 8);
    } else if (!strcmp(way, "map") || !strcmp(way, "memfd") || !strcmp(way, "map_populate")) {
        base = map_new(words, !strcmp(way, "map_populate")).base;
        cur_mapped = 1;
    } else if (!strcmp(way, "prefault")) {
        while (atomic_load(&ready_head) == atomic_load(&ready_tail)) {
            /* The helper fell behind: wait (counted in the writer's wall time, not CPU). */
            struct timespec w = {0, 10000};
            nanosleep(&w, NULL);
        }
        int h = atomic_load(&ready_head);
        base = ready[h % RING].base;
        words = ready[h % RING].words;
        atomic_store(&ready_head, h + 1);
        cur_mapped = 1;
    } else if (!strcmp(way, "pwrite")) {
        if (cur_base) {
            if (pwrite(fd, cur_base, words_now * 8, file_end) < 0) abort();
            file_end += (off_t)(words_now * 8);
            if (words == words_now) {
                memset(cur_base, 0, words * 8);
                base = cur_base;
            } else {
                free(cur_base);
            }
        }
        if (!base) base = calloc(words, 8);
    } else if (!strcmp(way, "copybehind")) {
        pthread_mutex_lock(&lock);
        if (current.base) {
            if (full_n == 64) abort();
            full_q[full_n++] = current;
        }
        for (int i = 0; i < pool_n; i++) {
            if (pool_words[i] == words) {
                base = pool[i];
                pool[i] = pool[--pool_n];
                pool_words[i] = pool_words[pool_n];
                break;
            }
        }
        if (!base) base = calloc(words, 8);
        if (posix_fallocate(fd, file_end, (off_t)(words * 8)) != 0) abort();
        current = (live_t){base, words, file_end, 0};
        file_end += (off_t)(words * 8);
        pthread_mutex_unlock(&lock);
    }
    base[0] = 0x4B435053u | 1;
    cur_base = base;
    words_now = words;
    data = base + HDR;
    len = 0;
    cap = words - HDR;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: spill_ways WAY CALLS DIR\n");
        return 2;
    }
    way = argv[1];
    long n = atol(argv[2]);
    char path[4096];
    snprintf(path, sizeof path, "%s/spill_ways.%d", argv[3], (int)getpid());
    if (!strcmp(way, "memfd")) {
        fd = memfd_create("spill", 0);
    } else if (strcmp(way, "heap") != 0 && strcmp(way, "none") != 0) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        unlink(path);
    }
    if (strcmp(way, "heap") != 0 && strcmp(way, "none") != 0 && fd < 0) {
        perror(path);
        return 1;
    }
    pthread_t helper;
    int have_helper = 0;
    if (!strcmp(way, "prefault")) have_helper = !pthread_create(&helper, NULL, prefault_main, NULL);
    if (!strcmp(way, "copybehind")) have_helper = !pthread_create(&helper, NULL, copybehind_main, NULL);
    if (!strcmp(way, "prefault")) {
        while (atomic_load(&ready_tail) == 0) usleep(100);
    }
    double p0 = cpu(CLOCK_PROCESS_CPUTIME_ID), w0 = cpu(CLOCK_MONOTONIC), t0 = cpu(CLOCK_THREAD_CPUTIME_ID);
    int64_t prev = 0;
    volatile uint64_t sink = 0;
    for (long i = 0; i < n; i++) {
        int64_t a = (int64_t)__rdtsc();
        int64_t b = (int64_t)__rdtsc();
        int64_t gap = a - prev;
        prev = a;
        uint64_t dur = (uint64_t)(b - a);
        if (way[0] == 'n') {
            sink += ((uint64_t)gap << 32) | (dur + 1);
            continue;
        }
        if (len + 3 > cap) new_chunk();
        if (gap == (int32_t)gap && dur < 0xFFFFFFFEu && len < cap) {
            data[len++] = ((uint64_t)gap << 32) | (dur + 1);
        } else {
            data[len + 1] = (uint64_t)a;
            data[len + 2] = (uint64_t)b;
            atomic_thread_fence(memory_order_release);
            data[len] = 0xFFFFFFFFu;
            len += 3;
        }
    }
    double t1 = cpu(CLOCK_THREAD_CPUTIME_ID), w1 = cpu(CLOCK_MONOTONIC);
    if (have_helper) {
        atomic_store(&stop_helper, 1);
        pthread_join(helper, NULL);
    }
    double p1 = cpu(CLOCK_PROCESS_CPUTIME_ID);
    printf("RESULT %s thread_ns %.3f process_ns %.3f wall_ns %.3f helper_ns %.3f lag_ms %.1f\n", way, (t1 - t0) / n * 1e9,
           (p1 - p0) / n * 1e9, (w1 - w0) / n * 1e9, helper_cpu / n * 1e9, max_lag_s * 1e3);
    return 0;
}
