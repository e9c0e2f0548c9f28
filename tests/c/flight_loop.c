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
 * 1000 calls of "main", forks a child that records 100000 and exits; the parent's fill counts must be its own). With CALLS > 0 the workers stop
 * after CALLS calls each and the program finalizes normally. */
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
#ifdef _OPENMP
#include <omp.h>
#endif

static int side_fd = -1;
static long calls_per_worker = 0;
static volatile int stop_slow = 0;
static const char *mode = "plain";

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
    long n = 0;
    for (;;) {
        for (int i = 0; i < 20000; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
        }
        n += 20000;
        note(name, n);
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
    struct sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    o.verbosity = 0;
    if (sp_setup(&o) != 0) return 3;
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
    for (long i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
#endif
    stop_slow = 1;
    pthread_join(s, NULL);
    sp_finalize();
    const char done[] = "DONE\n";
    if (write(side_fd, done, sizeof done - 1) < 0) return 5;
    /* A job's time limit arriving after the profile was written. */
    if (strcmp(mode, "term_after_finalize") == 0) raise(SIGTERM);
    return 0;
}
