/* Threads, nesting, recursion and misuse, in whatever layout $SCOPE_PROFILER_LAYOUT (or argv[2],
 * through sp_options.layout) selects; live statistics read while the threads record.
 * Usage: layouts OUTPUT.h5 [LAYOUT]
 * Prints EXPECT<TAB>calls<TAB>name for every region, and STATS<TAB>name<TAB>count<TAB>total
 * <TAB>min<TAB>max<TAB>exclusive from sp_region_get_stats once every thread has joined. */
#include <scope_profiler.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define THREADS 3

static int32_t h_outer, h_inner, h_rec;
static atomic_int bad;
static atomic_int running;

static void spin(int n) {
    volatile int x = 0;
    for (int i = 0; i < n; i++) x += i;
}

static void rec(int depth) {
    bad += sp_region_start_id(h_rec) != SP_OK;
    spin(20);
    if (depth > 0) rec(depth - 1);
    bad += sp_region_stop_id(h_rec) != SP_OK;
}

static int calls_of(int t) { return 1000 + 100 * t; }

static void *work(void *arg) {
    int t = (int)(long)arg;
    for (int i = 0; i < calls_of(t); i++) {
        bad += sp_region_start_id(h_outer) != SP_OK;
        bad += sp_region_start_id(h_inner) != SP_OK;
        spin(50);
        bad += sp_region_stop_id(h_inner) != SP_OK;
        if (i % 10 == 0) rec(2);
        bad += sp_region_stop_id(h_outer) != SP_OK;
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static int print_stats(const char *name, int32_t h) {
    sp_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    int rc = sp_region_get_stats(h, &s);
    if (rc != SP_OK) return 1;
    printf("STATS\t%s\t%lld\t%lld\t%lld\t%lld\t%lld\n", name, (long long)s.count, (long long)s.total_ns, (long long)s.min_ns,
           (long long)s.max_ns, (long long)s.exclusive_ns);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    if (argc > 2) o.layout = argv[2];
    if (sp_setup(&o) != SP_OK) return 1;
    h_outer = sp_region_register("outer");
    h_inner = sp_region_register("inner");
    h_rec = sp_region_register("recursive");

    /* Misuse: a stop that matches nothing, a stop of an outer region (the inner call is
     * dropped), a call left open at finalize. */
    int unmatched = sp_region_stop("never started") == SP_ERR_UNMATCHED_STOP;
    sp_region_start("a");
    sp_region_start("b");
    int innermost = sp_region_stop("a") == SP_ERR_NOT_INNERMOST;
    sp_region_start("left open");

    /* Bad arguments of the live statistics. */
    sp_stats s;
    memset(&s, 0, sizeof s);
    int arg_checks = sp_region_get_stats(h_outer, NULL) == SP_ERR_NULL_ARGUMENT && sp_region_get_stats(h_outer, &s) == SP_ERR_INVALID_ARGUMENT;
    s.struct_size = sizeof s;
    arg_checks = arg_checks && sp_region_get_stats(-1, &s) == SP_ERR_INVALID_HANDLE && sp_region_get_stats(999, &s) == SP_ERR_INVALID_HANDLE;

    pthread_t th[THREADS];
    atomic_store(&running, THREADS);
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, work, (void *)t);
    /* Live reads while the threads record: counts only grow and never pass the final count. */
    long long last = 0;
    int monotonic = 1, reads = 0;
    while (atomic_load(&running) > 0) {
        if (sp_region_get_stats(h_inner, &s) != SP_OK) monotonic = 0;
        if (s.count < last) monotonic = 0;
        last = s.count;
        reads++;
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);

    int total = 0;
    for (int t = 0; t < THREADS; t++) total += calls_of(t);
    int rec_calls = 0;
    for (int t = 0; t < THREADS; t++) rec_calls += 3 * ((calls_of(t) + 9) / 10);
    if (sp_region_get_stats(h_inner, &s) != SP_OK || s.count != total || last > total) monotonic = 0;
    printf("EXPECT\t%d\touter\nEXPECT\t%d\tinner\nEXPECT\t%d\trecursive\nEXPECT\t1\ta\n", total, total, rec_calls);
    int status = print_stats("outer", h_outer) | print_stats("inner", h_inner) | print_stats("recursive", h_rec);
    printf("--- live summary ---\n");
    fflush(stdout);
    status |= sp_print_summary() != SP_OK;
    printf("--- end live summary ---\n");
    printf("checks unmatched=%d innermost=%d args=%d monotonic=%d reads=%d bad=%d\n", unmatched, innermost, arg_checks, monotonic, reads,
           (int)bad);
    fflush(stdout);
    int fin = sp_finalize();
    /* After finalize the statistics are the final ones. */
    status |= print_stats("outer", h_outer);
    return fin == SP_OK && status == 0 && bad == 0 && unmatched && innermost && arg_checks && monotonic ? 0 : 1;
}
