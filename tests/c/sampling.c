/* Sampling: regions that spend their CPU time on known source lines, on two threads. Each
 * hot function is written on one line, marked `HOT:<region>`, so every sample inside it
 * maps to that line; tests/sampling.rs finds the lines from these markers.
 *
 *   sampling FILE MODE
 *
 * MODE:
 *   threads   regions alpha (main thread), beta (a second thread started after sp_setup),
 *             outer with inner nested in it, and work outside every region; sampling from
 *             the environment (SCOPE_PROFILER_SAMPLE_HZ). After the second thread ends, the
 *             perf event descriptors and POSIX timers left are printed (INFO lines).
 *   api       sp_start_sampling / sp_stop_sampling mid-run: regions before (not sampled),
 *             during (sampled, on both threads; the second thread joined before sampling
 *             started), after (not sampled); a rate change while sampling; bad rates.
 *   sigprof   threads, with the program's own SIGPROF handler and setitimer(ITIMER_PROF).
 *   chain     threads, with the program's own handler on SIGRTMIN+4 (which the sampler would
 *             otherwise take first): the program raises it and counts its deliveries.
 *   seccomp   threads, with perf_event_open refused by a seccomp filter (EACCES), as under
 *             kernel.perf_event_paranoid = 3: the sampler falls back to per-thread timers.
 *   fork      threads, after a child process forked while sampling ran has recorded a
 *             region and exited (exit(), so its threads' exit hooks run): the parent's
 *             sampling goes on.
 *   takeover  threads, after the program (once sampling runs) puts its own handler on every
 *             real-time signal, as some runtimes do: it counts what reaches it (host_taken).
 *   block     threads, with every signal blocked in every thread after sp_setup (as
 *             some runtimes' worker threads do); unblocked again after sp_finalize.
 *   memset    region `fill`: glibc's memset on a 256 KiB buffer, over and over (libc has no
 *             line table of its own: its names come from its split debug file, if installed);
 *             then region `calls`, holding only regions `tiny` started and stopped at once.
 *   many      $SAMPLING_TEST_THREADS threads (default 40) start, each records region `many`
 *             for a tenth of the CPU seconds, and end; then the events and timers left.
 *   none      threads without sampling.
 * Built with -DUSE_MPI: every rank runs `threads` (MPI_Init first, sp_finalize gathers).
 *
 * CPU seconds per region: $SAMPLING_TEST_SECONDS (default 0.5). */
#include <scope_profiler.h>

#ifdef USE_MPI
#include <mpi.h>
#endif

#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;
static double seconds = 0.5;

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One line each: every instruction of these functions belongs to the marked line. */
__attribute__((noinline)) static double hot_alpha(long n) { double x = 1.0; for (long i = 0; i < n; i++) x = x * 1.0000001 + 1e-9; return x; } /* HOT:alpha */
__attribute__((noinline)) static double hot_beta(long n) { double x = 2.0; for (long i = 0; i < n; i++) x = x * 0.9999999 + 2e-9; return x; } /* HOT:beta */
__attribute__((noinline)) static double hot_outer(long n) { double x = 3.0; for (long i = 0; i < n; i++) x = x * 1.0000002 - 1e-9; return x; } /* HOT:outer */
__attribute__((noinline)) static double hot_inner(long n) { double x = 4.0; for (long i = 0; i < n; i++) x = x * 0.9999998 + 3e-9; return x; } /* HOT:inner */
__attribute__((noinline)) static double hot_outside(long n) { double x = 5.0; for (long i = 0; i < n; i++) x = x * 1.0000003 - 2e-9; return x; } /* HOT:outside */
__attribute__((noinline)) static double hot_during(long n) { double x = 6.0; for (long i = 0; i < n; i++) x = x * 0.9999997 + 4e-9; return x; } /* HOT:during */
__attribute__((noinline)) static double hot_w_during(long n) { double x = 7.0; for (long i = 0; i < n; i++) x = x * 1.0000004 - 3e-9; return x; } /* HOT:w_during */
__attribute__((noinline)) static double hot_many(long n) { double x = 9.0; for (long i = 0; i < n; i++) x = x * 1.0000005 - 4e-9; return x; } /* HOT:many */
__attribute__((noinline)) static double hot_quiet(long n) { double x = 8.0; for (long i = 0; i < n; i++) x = x * 0.9999996 + 5e-9; return x; } /* HOT:quiet */

/* Spend `s` seconds of this thread's CPU time in `f`. */
static void burn(double (*f)(long), double s) {
    double t0 = cpu_s();
    while (cpu_s() - t0 < s) sink += f(100000);
}

static void region(const char *name, double (*f)(long), double s) {
    sp_region_start(name);
    burn(f, s);
    sp_region_stop(name);
}

/* Descriptors that are perf events, and POSIX timers, of this process now. */
static void print_sources(const char *when) {
    int perf = 0, timers = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            if (strstr(target, "perf_event")) perf++;
        }
    }
    if (d) closedir(d);
    FILE *t = fopen("/proc/self/timers", "r");
    char line[256];
    while (t && fgets(line, sizeof line, t))
        if (strncmp(line, "ID:", 3) == 0) timers++;
    if (t) fclose(t);
    printf("INFO\tperf_fds_%s\t%d\nINFO\ttimers_%s\t%d\n", when, perf, when, timers);
}

static void *beta_thread(void *arg) {
    (void)arg;
    region("beta", hot_beta, seconds);
    return NULL;
}

static void threads_workload(void) {
    pthread_t t;
    pthread_create(&t, NULL, beta_thread, NULL);
    region("alpha", hot_alpha, seconds);
    sp_region_start("outer");
    burn(hot_outer, seconds);
    region("inner", hot_inner, seconds);
    sp_region_stop("outer");
    burn(hot_outside, seconds);
    pthread_join(t, NULL);
    print_sources("after_join");
}

static void *many_thread(void *arg) {
    (void)arg;
    region("many", hot_many, seconds / 10);
    return NULL;
}

static void many_workload(void) {
    int n = getenv("SAMPLING_TEST_THREADS") ? atoi(getenv("SAMPLING_TEST_THREADS")) : 40;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, many_thread, NULL);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
    print_sources("after_join");
}

/* api mode: the second thread records before sampling starts, then during. */
static pthread_barrier_t phase;

static void *api_thread(void *arg) {
    (void)arg;
    region("w_before", hot_quiet, seconds / 2);
    pthread_barrier_wait(&phase); /* main starts sampling */
    pthread_barrier_wait(&phase);
    region("w_during", hot_w_during, seconds);
    pthread_barrier_wait(&phase); /* main stops sampling */
    pthread_barrier_wait(&phase);
    region("w_after", hot_quiet, seconds / 2);
    return NULL;
}

static int api_workload(void) {
    int bad = 0;
    pthread_t t;
    pthread_barrier_init(&phase, NULL, 2);
    pthread_create(&t, NULL, api_thread, NULL);
    region("before", hot_quiet, seconds / 2);
    pthread_barrier_wait(&phase);
    int rc0 = sp_start_sampling(0), rc1 = sp_start_sampling(20000);
    if (rc0 != SP_ERR_INVALID_ARGUMENT || rc1 != SP_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "bad rates: %d %d\n", rc0, rc1);
        bad = 1;
    }
    int rc = sp_start_sampling(2000);
    if (rc == SP_OK) rc = sp_start_sampling(1000); /* a new rate */
    if (rc != SP_OK) {
        fprintf(stderr, "sp_start_sampling: %d %s\n", rc, sp_last_error());
        bad = 1;
    }
    pthread_barrier_wait(&phase);
    region("during", hot_during, seconds);
    pthread_barrier_wait(&phase);
    if (sp_stop_sampling() != SP_OK || sp_stop_sampling() != SP_OK) {
        fprintf(stderr, "sp_stop_sampling: %s\n", sp_last_error());
        bad = 1;
    }
    print_sources("stopped");
    pthread_barrier_wait(&phase);
    region("after", hot_quiet, seconds / 2);
    pthread_join(t, NULL);
    return bad;
}

static volatile sig_atomic_t host_sigprof, host_rt, host_taken;

static void on_taken(int sig) {
    (void)sig;
    host_taken++;
}

static void on_sigprof(int sig) {
    (void)sig;
    host_sigprof++;
}

static void on_rt(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    if (info->si_code == SI_TKILL || info->si_code == SI_USER) host_rt++;
}

static int refuse_perf_event_open(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* The host's own handler: `plain` (SA_RESTART) or `info` (SA_SIGINFO), nothing blocked. */
static struct sigaction handler_action(void (*plain)(int), void (*info)(int, siginfo_t *, void *)) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    if (info) {
        a.sa_sigaction = info;
        a.sa_flags = SA_SIGINFO;
    } else {
        a.sa_handler = plain;
        a.sa_flags = SA_RESTART;
    }
    sigemptyset(&a.sa_mask);
    return a;
}

int main(int argc, char **argv) {
#ifdef USE_MPI
    MPI_Init(&argc, &argv);
#endif
    const char *file = argc > 1 ? argv[1] : "sampling.h5";
    const char *mode = argc > 2 ? argv[2] : "threads";
    if (getenv("SAMPLING_TEST_SECONDS")) seconds = atof(getenv("SAMPLING_TEST_SECONDS"));
    int bad = 0;

    if (strcmp(mode, "seccomp") == 0 && refuse_perf_event_open() != 0) {
        perror("seccomp");
        return 2;
    }
    if (strcmp(mode, "chain") == 0) {
        struct sigaction a = handler_action(NULL, on_rt);
        sigaction(SIGRTMIN + 4, &a, NULL);
    }
    if (strcmp(mode, "sigprof") == 0) {
        struct sigaction a = handler_action(on_sigprof, NULL);
        sigaction(SIGPROF, &a, NULL);
        struct itimerval it = {{0, 5000}, {0, 5000}};
        setitimer(ITIMER_PROF, &it, NULL);
    }

    sp_options o;
    sp_options_init(&o);
    o.file_path = file;
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "sp_setup: %s\n", sp_last_error());
        return 1;
    }
    print_sources("setup");
    if (strcmp(mode, "fork") == 0) {
        pid_t child = fork();
        if (child == 0) {
            region("child", hot_quiet, 0.1);
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("INFO\tchild_status\t%d\n", status);
    }
    if (strcmp(mode, "takeover") == 0) {
        struct sigaction a = handler_action(on_taken, NULL);
        for (int s = SIGRTMIN; s <= SIGRTMAX; s++) sigaction(s, &a, NULL);
    }
    sigset_t all, before;
    sigfillset(&all);
    if (strcmp(mode, "block") == 0) pthread_sigmask(SIG_BLOCK, &all, &before);
    if (strcmp(mode, "memset") == 0) {
        static char buf[256 << 10];
        sp_region_start("fill");
        double t0 = cpu_s();
        int k = 0;
        while (cpu_s() - t0 < seconds) {
            memset(buf, k++ & 0xff, sizeof buf);
            __asm__ volatile("" : : "r"(buf) : "memory");
        }
        sp_region_stop("fill");
        sink += buf[12345];
        /* Then the library's own code: regions too short to hold anything but its calls. */
        sp_region_start("calls");
        t0 = cpu_s();
        while (cpu_s() - t0 < seconds)
            for (int i = 0; i < 1000; i++) {
                sp_region_start("tiny");
                sp_region_stop("tiny");
            }
        sp_region_stop("calls");
    } else if (strcmp(mode, "api") == 0) {
        bad |= api_workload();
    } else if (strcmp(mode, "many") == 0) {
        many_workload();
    } else {
        threads_workload();
    }
    if (strcmp(mode, "chain") == 0) {
        for (int i = 0; i < 3; i++) raise(SIGRTMIN + 4);
        printf("INFO\thost_rt\t%d\n", (int)host_rt);
    }
    if (strcmp(mode, "sigprof") == 0) {
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
        printf("INFO\thost_sigprof\t%d\n", (int)host_sigprof);
    }
    if (strcmp(mode, "none") == 0 && sp_stop_sampling() != SP_OK) bad = 1;
    int rc = sp_finalize();
    if (rc != SP_OK) {
        fprintf(stderr, "sp_finalize: %d %s\n", rc, sp_last_error());
        bad = 1;
    }
    print_sources("finalized");
    if (strcmp(mode, "takeover") == 0) printf("INFO\thost_taken\t%d\n", (int)host_taken);
    if (strcmp(mode, "block") == 0) pthread_sigmask(SIG_SETMASK, &before, NULL); /* what was pending arrives now */
    printf("INFO\tsink\t%g\n", sink > 0 ? 1.0 : 0.0);
#ifdef USE_MPI
    MPI_Finalize();
#endif
    printf("DONE\n");
    return bad;
}
