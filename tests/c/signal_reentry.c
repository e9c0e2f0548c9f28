/* Calls into the library from a signal handler that may interrupt the library.
 *
 *   signal_reentry OUT.h5 SECONDS
 *
 * The main thread records in a loop, by name (from a buffer whose contents change, so the
 * name caches miss, allocate and register new names under the registry lock), by handle, and
 * with a misuse now and then (an unmatched stop: the error path, which formats a message).
 * A timer (SIGALRM every 50 us) interrupts it anywhere; the handler calls the library by name
 * and by handle, registers a name and asks for statistics. A call that interrupted the library
 * on the same thread must be refused (SP_ERR_REENTRANT), never crash or deadlock. At the end
 * the program prints what was recorded as EXPECT lines and how the handler's calls went. */
#include <scope_profiler.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile sig_atomic_t handler_ok = 0, handler_refused = 0, handler_other = 0, handler_runs = 0;
static volatile sig_atomic_t handle_ok = 0, register_refused = 0;
static int32_t handler_handle = -1;

static void on_alarm(int sig) {
    (void)sig;
    handler_runs++;
    int rc = sp_region_start("in handler");
    if (rc == SP_OK) {
        if (sp_region_stop("in handler") == SP_OK) handler_ok++;
        else handler_other++;
    } else if (rc == SP_ERR_REENTRANT) {
        handler_refused++;
    } else {
        handler_other++;
    }
    rc = sp_region_start_id(handler_handle);
    if (rc == SP_OK) {
        if (sp_region_stop_id(handler_handle) == SP_OK) handle_ok++;
        else handler_other++;
    } else if (rc != SP_ERR_REENTRANT) {
        handler_other++;
    }
    if (handler_runs % 64 == 0) {
        int32_t h = sp_region_register("registered in handler");
        if (h == SP_ERR_REENTRANT) register_refused++;
        else if (h < 0) handler_other++;
        sp_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        rc = sp_region_get_stats(handler_handle, &st);
        if (rc != SP_OK && rc != SP_ERR_REENTRANT) handler_other++;
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) return 3;
    handler_handle = sp_region_register("handler handle");
    int32_t h = sp_region_register("main handle");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, NULL);
    double end = now() + atof(argv[2]);
    long named_ok = 0, handle_pairs = 0, misuse = 0, refused_main = 0;
    char name[64];
    long i = 0;
    while (now() < end) {
        for (int k = 0; k < 1000; k++, i++) {
            /* 300 names through one buffer: the per-thread caches miss on most calls. */
            snprintf(name, sizeof name, "name %ld", i % 300);
            int a = sp_region_start(name);
            int b = a == SP_OK ? sp_region_stop(name) : a;
            if (a == SP_OK && b == SP_OK) named_ok++;
            else refused_main++;
            if (sp_region_start_id(h) == SP_OK && sp_region_stop_id(h) == SP_OK) handle_pairs++;
            else refused_main++;
            if (i % 97 == 0 && sp_region_stop("never started") == SP_ERR_UNMATCHED_STOP) misuse++;
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);
    int rc = sp_finalize();
    printf("EXPECT\t%ld\tmain handle\n", handle_pairs);
    printf("EXPECT\t%ld\tin handler\n", (long)handler_ok);
    printf("EXPECT\t%ld\thandler handle\n", (long)handle_ok);
    printf("NAMED %ld\n", named_ok);
    printf("HANDLER runs=%ld ok=%ld refused=%ld other=%ld register_refused=%ld\n", (long)handler_runs, (long)handler_ok,
           (long)handler_refused, (long)handler_other, (long)register_refused);
    printf("MAIN refused=%ld misuse=%ld finalize=%d\n", refused_main, misuse, rc);
    return rc == SP_OK ? 0 : 1;
}
