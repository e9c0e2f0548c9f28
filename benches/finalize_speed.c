/* Finalize at disk speed: N calls on 2 threads (nested regions), then sp_finalize, timed, and
 * a plain write() of as many bytes as the file has, to the same directory, in the same run.
 * Usage: finalize_speed CALLS DIR [REGIONS]   (layout from $SCOPE_PROFILER_LAYOUT; default regions)
 * With REGIONS, each thread's calls go to REGIONS regions one after another (flat start/stop
 * pairs, CALLS/2/REGIONS a region and thread) instead of the two nested ones: a profile of many
 * moderate regions.
 * With FINALIZE_SPEED_HOST_MIB=M, the program first touches M MiB of memory of its own on small
 * pages (a simulation's arrays: what finalize pays per GiB of the host's memory).
 * Prints the file size per call, the finalize time, the plain-write time, their ratio, and the
 * resident memory growth while recording and at the peak of finalize. */
#include <scope_profiler.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long calls_per_thread;

static double median3(const double *v) {
    double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}
static int32_t h_outer, h_inner;

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of the whole process: on a loaded machine the wall time of both measurements
 * includes waiting for a CPU; the CPU time is the work done. */
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

/* VmRSS or VmHWM in KiB. */
static long vm(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) v = atol(line + strlen(key) + 1);
    if (f) fclose(f);
    return v;
}

static int n_flat;
static int32_t *h_flat;

static void *work(void *arg) {
    (void)arg;
    if (n_flat > 0) {
        long each = calls_per_thread / n_flat;
        for (int r = 0; r < n_flat; r++)
            for (long i = 0; i < each; i++) {
                sp_region_start_id(h_flat[r]);
                sp_region_stop_id(h_flat[r]);
            }
        return NULL;
    }
    /* outer contains one inner: two calls per iteration. */
    for (long i = 0; i < calls_per_thread / 2; i++) {
        sp_region_start_id(h_outer);
        sp_region_start_id(h_inner);
        sp_region_stop_id(h_inner);
        sp_region_stop_id(h_outer);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    char path[4096], plain[4096];
    snprintf(path, sizeof path, "%s/sp_finalize_speed.h5", dir);
    snprintf(plain, sizeof plain, "%s/sp_finalize_speed.plain", dir);
    unlink(path);
    sp_options o;
    sp_options_init(&o);
    o.file_path = path;
    o.verbosity = getenv("SCOPE_PROFILER_VERBOSE") ? -1 : 0;
    if (sp_setup(&o) != SP_OK) return 1;
    h_outer = sp_region_register("outer");
    h_inner = sp_region_register("inner");
    calls_per_thread = n / 2;
    n_flat = argc > 3 ? atoi(argv[3]) : 0;
    if (n_flat > 0) {
        h_flat = malloc(sizeof *h_flat * n_flat);
        for (int r = 0; r < n_flat; r++) {
            char name[32];
            snprintf(name, sizeof name, "flat%d", r);
            h_flat[r] = sp_region_register(name);
        }
    }
    const char *host_mib = getenv("FINALIZE_SPEED_HOST_MIB");
    if (host_mib && atol(host_mib) > 0) {
        size_t bytes = (size_t)atol(host_mib) << 20;
        char *arrays = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (arrays == MAP_FAILED) return 1;
        madvise(arrays, bytes, MADV_NOHUGEPAGE);
        memset(arrays, 1, bytes);
        printf("host arrays: %s MiB touched on small pages\n", host_mib);
    }
    long rss0 = vm("VmRSS:");
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    long rss1 = vm("VmRSS:");
    long calls = n_flat > 0 ? 2 * (calls_per_thread / n_flat) * n_flat : 2 * (calls_per_thread / 2) * 2;

    /* Each timed phase starts with no dirty pages of the other (writeback throttling). */
    sync();
    double t0 = now(), c0 = cpu();
    int rc = sp_finalize();
    double t_fin = now() - t0, c_fin = cpu() - c0;
    long hwm = vm("VmHWM:");
    struct stat st;
    if (rc != SP_OK || stat(path, &st) != 0) return 1;
    long bytes = st.st_size;

    /* The baseline: the same number of bytes, from memory already touched, with write(), to a
     * fresh file in the same directory; three times, the median kept. */
    char *buf = malloc(bytes > 0 ? bytes : 1);
    memset(buf, 1, bytes);
    double tw[3], cw[3];
    for (int k = 0; k < 3; k++) {
        unlink(plain);
        sync();
        t0 = now();
        c0 = cpu();
        int fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        long done = 0;
        while (done < bytes) {
            ssize_t w = write(fd, buf + done, bytes - done > (1 << 26) ? (1 << 26) : bytes - done);
            if (w <= 0) return 1;
            done += w;
        }
        close(fd);
        tw[k] = now() - t0;
        cw[k] = cpu() - c0;
    }
    unlink(plain);
    free(buf);
    double t_plain = median3(tw), c_plain = median3(cw);

    const char *layout = getenv("SCOPE_PROFILER_LAYOUT");
    if (n_flat > 0) printf("%d regions of %ld calls a thread, 2 threads\n", n_flat, calls_per_thread / n_flat);
    printf("layout %-9s calls %ld  file %.1f MB  %.2f bytes/call\n", layout ? layout : "regions", calls, bytes / 1e6, (double)bytes / calls);
    printf("  sp_finalize %.3f s   plain write %.3f s   ratio %.2f (target <= 1.5 in the regions layout)\n", t_fin, t_plain,
           t_fin / t_plain);
    printf("  CPU time: sp_finalize %.3f s   plain write %.3f s   ratio %.2f\n", c_fin, c_plain, c_fin / c_plain);
    printf("  RSS growth recording %.2f MiB, peak (VmHWM) over start %.2f MiB\n", (rss1 - rss0) / 1024.0, (hwm - rss0) / 1024.0);
    if (!getenv("SP_KEEP")) unlink(path);
    return 0;
}
