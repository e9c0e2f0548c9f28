/* A host that records calls until it is killed (or until it has made --calls calls).
 *
 *   flight_loop OUT.h5 SIDE_FILE THREADS MODE [CALLS]
 *
 * THREADS worker threads (pthreads) record region "work" in a tight loop; one more thread
 * records region "slow" once every 10 ms. Each thread appends "<name> <completed calls>\n" to
 * SIDE_FILE (O_APPEND, fsync) after every batch, so the test knows a lower bound of what was
 * completed before the kill. MODE: plain | host_handler (own SIGTERM handler that writes
 * "HOST_HANDLER_RAN" to SIDE_FILE and _exits 42) | ignore_term (SIGTERM ignored before
 * sp_setup) | segv (dereferences NULL after CALLS worker calls) | fork (the main thread records
 * 1000 calls of "main", forks a child that records 100000 and exits; the parent's fill counts
 * must be its own) | fork_finalize (a child forked while the workers record calls
 * sp_finalize after the parent has written its profile, then exits) | host_exit_after (a
 * SIGTERM handler installed after sp_setup calls exit(43)) | host_flag (a SIGTERM handler set
 * before sp_setup asks the workers to stop; the program then finalizes and exits 0) |
 * finalize_signal (notes "FINALIZING" just before sp_finalize, then waits to be killed). With
 * CALLS > 0 the workers stop after CALLS calls each and the program finalizes normally.
 * FLIGHT_LOOP_BATCH (default 20000) calls make a batch; FLIGHT_LOOP_PACE_US (default 0)
 * microseconds of sleep follow each batch; FLIGHT_LOOP_VERBOSITY (default 0) is the library's verbosity;
 * FLIGHT_LOOP_TWO_PATHS=1 puts each batch inside "even batch" or "odd batch" in turn, so that
 * "work" has two call paths (swept from the calls at finalize). Built with -DWITH_MPI (mpicc) it is an MPI
 * program: MPI_Init before sp_setup, MPI_Finalize at the end. */

#include <scope_profiler.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#ifdef WITH_MPI
#include <mpi.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

static int side_fd = -1;
static long calls_per_worker = 0;
static volatile int stop_slow = 0;
static const char *mode = "plain";
static long batch = 20000;
static long pace_us = 0;
static volatile sig_atomic_t stop_workers = 0;

static void note(const char *name, long n) {
    char line[128];
    int len = snprintf(line, sizeof line, "%s %ld\n", name, n);
    if (write(side_fd, line, (size_t)len) != len) abort();
    fsync(side_fd);
}

static void *worker(void *arg) {
    long id = (long)arg;
    char name[32];
    snprintf(name, sizeof name, "work%ld", id);
    int32_t h = sp_region_register("work");
    const char *two = getenv("FLIGHT_LOOP_TWO_PATHS");
    int two_paths = two && two[0] == '1';
    long n = 0;
    for (;;) {
        const char *outer = (n / batch) % 2 ? "odd batch" : "even batch";
        if (two_paths) sp_region_start(outer);
        for (long i = 0; i < batch; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        if (two_paths) sp_region_stop(outer);
        n += batch;
        note(name, n);
        if (stop_workers) return NULL;
        if (pace_us > 0) {
            struct timespec p = {pace_us / 1000000, (pace_us % 1000000) * 1000};
            nanosleep(&p, NULL);
        }
        if (strcmp(mode, "segv") == 0 && n >= calls_per_worker) {
            volatile int *p = NULL;
            *p = 1;
        }
        if (calls_per_worker > 0 && n >= calls_per_worker) return NULL;
    }
}

static void *slow(void *arg) {
    (void)arg;
    long n = 0;
    struct timespec ten = {0, 10000000};
    while (!stop_slow) {
        sp_region_start("slow");
        sp_region_stop("slow");
        n++;
        note("slow", n);
        nanosleep(&ten, NULL);
    }
    return NULL;
}

static void host_term(int sig) {
    (void)sig;
    const char msg[] = "HOST_HANDLER_RAN\n";
    if (write(side_fd, msg, sizeof msg - 1) < 0) _exit(99);
    _exit(42);
}

static void host_exit_after(int sig) {
    (void)sig;
    const char msg[] = "HOST_AFTER_RAN\n";
    if (write(side_fd, msg, sizeof msg - 1) < 0) _exit(99);
    exit(43);
}

static void host_flag(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    char msg[64];
    int len = snprintf(msg, sizeof msg, "HOST_FLAG_RAN %d %d\n", sig, info ? (int)info->si_pid : -1);
    if (write(side_fd, msg, (size_t)len) < 0) _exit(99);
    stop_workers = 1;
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    /* Start from the default signal actions, as a program started from a terminal does: a
     * background job of a non-interactive shell (a CI script) inherits SIGINT and SIGQUIT
     * ignored, and the library rightly leaves an ignored signal alone. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int defaults[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM};
    for (unsigned i = 0; i < sizeof defaults / sizeof *defaults; i++) signal(defaults[i], SIG_DFL);
    /* Never run away: a test that fails to stop this program must not fill the disk with
     * spill data. SIGALRM's default action ends the process after 90 s. */
    alarm(90);
#ifdef WITH_MPI
    MPI_Init(&argc, &argv);
#endif
    if (getenv("FLIGHT_LOOP_BATCH")) batch = atol(getenv("FLIGHT_LOOP_BATCH"));
    if (getenv("FLIGHT_LOOP_PACE_US")) pace_us = atol(getenv("FLIGHT_LOOP_PACE_US"));
    /* Under mpirun each rank reports to its own side file, SIDE_FILE.r<rank>. */
    char side_path[4096];
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    snprintf(side_path, sizeof side_path, rank ? "%s.r%s" : "%s", argv[2], rank ? rank : "");
    side_fd = open(side_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int threads = atoi(argv[3]);
    mode = argv[4];
    if (argc > 5) calls_per_worker = atol(argv[5]);
    if (strcmp(mode, "host_handler") == 0) signal(SIGTERM, host_term);
    if (strcmp(mode, "ignore_term") == 0) signal(SIGTERM, SIG_IGN);
    if (strcmp(mode, "host_flag") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = host_flag;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
    }
    struct sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    o.verbosity = getenv("FLIGHT_LOOP_VERBOSITY") ? atoi(getenv("FLIGHT_LOOP_VERBOSITY")) : 0;
    if (sp_setup(&o) != 0) return 3;
    if (strcmp(mode, "host_exit_after") == 0) signal(SIGTERM, host_exit_after);
    int to_child[2] = {-1, -1};
    pid_t forked = -1;
    if (strcmp(mode, "fork") == 0) {
        /* A forked child records too: it must not touch the parent's calls. */
        for (int i = 0; i < 1000; i++) { sp_region_start("main"); sp_region_stop("main"); }
        pid_t child = fork();
        if (child == 0) {
            for (int i = 0; i < 100000; i++) { sp_region_start("main"); sp_region_stop("main"); }
            exit(0);
        }
        waitpid(child, NULL, 0);
    }
    const char ready[] = "READY\n";
    if (write(side_fd, ready, sizeof ready - 1) < 0) return 4;
    pthread_t s;
    pthread_create(&s, NULL, slow, NULL);
#ifdef _OPENMP
    /* Built with -fopenmp: the workers are an OpenMP team instead of pthreads. */
#pragma omp parallel num_threads(threads)
    worker((void *)(long)omp_get_thread_num());
#else
    pthread_t t[64];
    for (long i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    if (strcmp(mode, "fork_finalize") == 0) {
        /* Forked while the workers record: the child holds a copy of the parent's buffers. */
        struct timespec w = {0, 50000000};
        nanosleep(&w, NULL);
        if (pipe(to_child) != 0) return 6;
        forked = fork();
        if (forked == 0) {
            for (int i = 0; i < 1000; i++) { sp_region_start("main"); sp_region_stop("main"); }
            char go;
            if (read(to_child[0], &go, 1) != 1) _exit(7);
            int rc = sp_finalize();
            char msg[64];
            int len = snprintf(msg, sizeof msg, "CHILD_FINALIZE %d\n", rc);
            if (write(side_fd, msg, (size_t)len) < 0) _exit(8);
            exit(0);
        }
    }
    for (long i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
#endif
    stop_slow = 1;
    pthread_join(s, NULL);
    const char finalizing[] = "FINALIZING\n";
    if (write(side_fd, finalizing, sizeof finalizing - 1) < 0) return 5;
    int rc = sp_finalize();
    char done[64];
    int dlen = snprintf(done, sizeof done, "DONE %d\n", rc);
    if (write(side_fd, done, (size_t)dlen) < 0) return 5;
    if (forked > 0) {
        /* The parent's profile is written: now the child finalizes and exits. */
        if (write(to_child[1], "g", 1) != 1) return 6;
        int status = 0;
        waitpid(forked, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 9;
    }
    if (strcmp(mode, "finalize_signal") == 0) {
        /* The signal may come after the write: it must still end the process. */
        struct timespec w = {30, 0};
        nanosleep(&w, NULL);
        return 10;
    }
#ifdef WITH_MPI
    MPI_Finalize();
#endif
    /* A job's time limit arriving after the profile was written. */
    if (strcmp(mode, "term_after_finalize") == 0) raise(SIGTERM);
    return 0;
}
