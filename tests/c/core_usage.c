/* Exercises the core C ABI the way a real code does, plus deliberate misuse.
 * Usage: core_usage OUTPUT.h5
 * Prints "EXPECT\t<calls>\t<name>" for every region it completes, so the test can compare the
 * file against what was really done, and "CHECK ..." lines for status checks that failed. */
#include <scope_profiler.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define EXPECT_STATUS(call, want)                                                   \
    do {                                                                            \
        int got_ = (call);                                                          \
        if (got_ != (want)) {                                                       \
            printf("CHECK FAILED line %d: %s returned %d, want %d (%s)\n", __LINE__, \
                   #call, got_, (want), sp_last_error());                           \
            failures++;                                                             \
        }                                                                           \
    } while (0)

static void expect(long calls, const char *name) { printf("EXPECT\t%ld\t%s\n", calls, name); }

static int recurse(int depth) {
    int sum = 0;
    EXPECT_STATUS(sp_region_start("recurse"), SP_OK);
    if (depth > 0) sum = recurse(depth - 1) + 1;
    EXPECT_STATUS(sp_region_stop("recurse"), SP_OK);
    return sum;
}

#define NTHREADS 4
#define WORKER_CALLS 250

static void *worker(void *arg) {
    (void)arg;
    int32_t h = sp_region_register("worker");
    EXPECT_STATUS(sp_region_start("thread/total"), SP_OK);
    for (int i = 0; i < WORKER_CALLS; i++) {
        EXPECT_STATUS(sp_region_start_id(h), SP_OK);
        EXPECT_STATUS(sp_region_start("worker inner"), SP_OK);
        EXPECT_STATUS(sp_region_stop("worker inner"), SP_OK);
        EXPECT_STATUS(sp_region_stop_id(h), SP_OK);
    }
    EXPECT_STATUS(sp_region_stop("thread/total"), SP_OK);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUTPUT.h5\n", argv[0]);
        return 2;
    }
    /* Misuse before setup: ignored with a status. */
    EXPECT_STATUS(sp_region_start("early"), SP_ERR_NOT_INITIALIZED);
    EXPECT_STATUS(sp_region_register("early"), SP_ERR_NOT_INITIALIZED);
    EXPECT_STATUS(sp_finalize(), SP_ERR_NOT_INITIALIZED);
    EXPECT_STATUS(sp_options_init(NULL), SP_ERR_NULL_ARGUMENT);

    sp_options opts;
    EXPECT_STATUS(sp_options_init(&opts), SP_OK);
    opts.file_path = argv[1];
    opts.language = "C";
    EXPECT_STATUS(sp_setup(&opts), SP_OK);
    EXPECT_STATUS(sp_setup(NULL), SP_ALREADY_SET_UP);

    /* Hot loop through a handle. */
    int32_t solve = sp_region_register("solve");
    if (solve < 0) { printf("CHECK FAILED register solve: %d\n", solve); failures++; }
    EXPECT_STATUS(sp_region_register("solve"), solve);
    for (int i = 0; i < 1000; i++) {
        EXPECT_STATUS(sp_region_start_id(solve), SP_OK);
        EXPECT_STATUS(sp_region_stop_id(solve), SP_OK);
    }
    expect(1000, "solve");

    /* Nesting. */
    for (int i = 0; i < 10; i++) {
        EXPECT_STATUS(sp_region_start("outer"), SP_OK);
        EXPECT_STATUS(sp_region_start("inner"), SP_OK);
        EXPECT_STATUS(sp_region_stop("inner"), SP_OK);
        EXPECT_STATUS(sp_region_stop("outer"), SP_OK);
    }
    expect(10, "outer");
    expect(10, "inner");

    /* Recursion: depth 5 -> 6 nested calls of the same region. */
    recurse(5);
    expect(6, "recurse");

    /* Threads. */
    pthread_t threads[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) pthread_create(&threads[t], NULL, worker, NULL);
    for (int t = 0; t < NTHREADS; t++) pthread_join(threads[t], NULL);
    expect(NTHREADS * WORKER_CALLS, "worker");
    expect(NTHREADS * WORKER_CALLS, "worker inner");
    expect(NTHREADS, "thread/total");

    /* Odd names. */
    char long_name[201];
    memset(long_name, 'L', 200);
    long_name[200] = '\0';
    const char *odd[] = {"a/b", "with space", "\xc3\xb1" "and\xc3\xba \xe2\x9c\x93 \xce\xbb", long_name};
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 3; i++) {
            EXPECT_STATUS(sp_region_start(odd[k]), SP_OK);
            EXPECT_STATUS(sp_region_stop(odd[k]), SP_OK);
        }
        expect(3, odd[k]);
    }

    /* One writable buffer reused for different names: the name cache must see the change. */
    char buf[32];
    for (int i = 0; i < 3; i++) {
        strcpy(buf, "buffer one");
        EXPECT_STATUS(sp_region_start(buf), SP_OK);
        strcpy(buf, "buffer two");
        EXPECT_STATUS(sp_region_start(buf), SP_OK);
        EXPECT_STATUS(sp_region_stop(buf), SP_OK);
        strcpy(buf, "buffer one");
        EXPECT_STATUS(sp_region_stop(buf), SP_OK);
    }
    expect(3, "buffer one");
    expect(3, "buffer two");

    /* Counted names (the Fortran form): only the first 12 bytes count. */
    const char padded[] = "fortran_name    trailing";
    for (int i = 0; i < 2; i++) {
        EXPECT_STATUS(sp_region_start_n(padded, 12), SP_OK);
        EXPECT_STATUS(sp_region_stop_n(padded, 12), SP_OK);
    }
    EXPECT_STATUS(sp_region_register_n(padded, 12) >= 0, 1);
    expect(2, "fortran_name");
    /* The same address with another length is another name. */
    EXPECT_STATUS(sp_region_start_n(padded, 7), SP_OK);
    EXPECT_STATUS(sp_region_stop_n(padded, 7), SP_OK);
    expect(1, "fortran");

    /* Bad arguments: error statuses, nothing recorded. */
    char too_long[2000];
    memset(too_long, 'x', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    EXPECT_STATUS(sp_region_start(NULL), SP_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(sp_region_stop(NULL), SP_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(sp_region_register(NULL), SP_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(sp_region_start(""), SP_ERR_EMPTY_NAME);
    EXPECT_STATUS(sp_region_start("\xff\xfe bad"), SP_ERR_INVALID_UTF8);
    EXPECT_STATUS(sp_region_start(too_long), SP_ERR_NAME_TOO_LONG);
    EXPECT_STATUS(sp_region_start_n(too_long, sizeof too_long - 1), SP_ERR_NAME_TOO_LONG);
    EXPECT_STATUS(sp_region_start_n("a\0b", 3), SP_ERR_INVALID_UTF8);
    EXPECT_STATUS(sp_region_start_n(NULL, 3), SP_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(sp_region_start_id(-1), SP_ERR_INVALID_HANDLE);
    EXPECT_STATUS(sp_region_start_id(99999), SP_ERR_INVALID_HANDLE);
    EXPECT_STATUS(sp_region_stop_id(99999), SP_ERR_INVALID_HANDLE);
    if (strlen(sp_last_error()) == 0) { printf("CHECK FAILED: empty sp_last_error\n"); failures++; }

    /* Unbalanced: a stop without a start changes nothing. */
    EXPECT_STATUS(sp_region_stop("never started"), SP_ERR_UNMATCHED_STOP);
    EXPECT_STATUS(sp_region_stop("solve"), SP_ERR_UNMATCHED_STOP);

    /* A stop of an outer region: it is recorded, the inner open call is dropped. */
    EXPECT_STATUS(sp_region_start("misnested outer"), SP_OK);
    EXPECT_STATUS(sp_region_start("misnested inner"), SP_OK);
    EXPECT_STATUS(sp_region_stop("misnested outer"), SP_ERR_NOT_INNERMOST);
    EXPECT_STATUS(sp_region_stop("misnested inner"), SP_ERR_UNMATCHED_STOP);
    expect(1, "misnested outer");
    expect(0, "misnested inner");

    /* Left open at finalize: reported and counted. */
    EXPECT_STATUS(sp_region_start("left open"), SP_OK);
    EXPECT_STATUS(sp_region_start("left open"), SP_OK);
    expect(0, "left open");

    EXPECT_STATUS(sp_finalize(), SP_OK);
    EXPECT_STATUS(sp_finalize(), SP_ALREADY_FINALIZED);
    EXPECT_STATUS(sp_region_start("late"), SP_ERR_FINALIZED);
    EXPECT_STATUS(sp_region_stop_id(solve), SP_ERR_FINALIZED);
    EXPECT_STATUS(sp_setup(NULL), SP_ERR_FINALIZED);
    if (strcmp(sp_status_string(SP_ERR_UNMATCHED_STOP), "stop of a region that is not open on this thread") != 0) {
        printf("CHECK FAILED: sp_status_string\n");
        failures++;
    }
    printf("DONE failures=%d\n", failures);
    return failures == 0 ? 0 : 1;
}
