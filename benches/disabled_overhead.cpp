/* Cost of annotations when profiling is off, against an empty loop measured in the same process.
 *
 * Run with SCOPE_PROFILER_DISABLE=1 (off at run time: the library is linked and called), or
 * built with -DSP_DISABLE (off at compile time: the header turns the annotations into nothing).
 *
 *   empty loop   the loop alone (a compiler barrier per iteration, as every form below has)
 *   handle pair  sp_region_start_id(h) + sp_region_stop_id(h)
 *   name pair    sp_region_start("...") + sp_region_stop("...") (a string literal)
 *   counted pair sp_region_start_n(name, len) + sp_region_stop_n(...) (what Fortran calls)
 *   macro pair   SP_REGION_START("...") + SP_REGION_STOP("...")
 *   SP_SCOPE     { SP_SCOPE("..."); } (C++: a Scope per pass, registered once per call site)
 *   SP_SCOPE(r)  { SP_SCOPE(region); } over a scope_profiler::Region
 *
 * Rounds alternate between the forms, so frequency changes and other processes hit all alike;
 * the time per pair is the median over rounds, and the least-disturbed round is printed too.
 * Lines "RESULT <key> <ns>" are for scripts.
 * Usage: disabled_overhead [pairs_per_round=2000000] [rounds=15] */
#include <scope_profiler.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

extern "C" {
#include "bench_util.h"
}

#define BARRIER() __asm__ __volatile__("" ::: "memory")

enum { EMPTY, HANDLE, NAME, COUNTED, MACRO, SCOPE, SCOPE_REGION, FORMS };
static const char *const KEYS[FORMS] = {"empty_loop", "handle_pair", "name_pair", "counted_pair", "macro_pair", "sp_scope", "sp_scope_region"};

/* noinline: every form runs in a function of its own, so the compiler treats all alike. */
__attribute__((noinline)) static void run(int form, long n, int32_t h, const scope_profiler::Region &region) {
    static const char counted[] = "bench_counted";
    switch (form) {
    case EMPTY:
        for (long i = 0; i < n; i++) BARRIER();
        break;
    case HANDLE:
        for (long i = 0; i < n; i++) {
            sp_region_start_id(h);
            sp_region_stop_id(h);
            BARRIER();
        }
        break;
    case NAME:
        for (long i = 0; i < n; i++) {
            sp_region_start("bench_name");
            sp_region_stop("bench_name");
            BARRIER();
        }
        break;
    case COUNTED:
        for (long i = 0; i < n; i++) {
            sp_region_start_n(counted, sizeof counted - 1);
            sp_region_stop_n(counted, sizeof counted - 1);
            BARRIER();
        }
        break;
    case MACRO:
        for (long i = 0; i < n; i++) {
            SP_REGION_START("bench_macro");
            SP_REGION_STOP("bench_macro");
            BARRIER();
        }
        break;
    case SCOPE:
        for (long i = 0; i < n; i++) {
            SP_SCOPE("bench_scope");
            BARRIER();
        }
        break;
    case SCOPE_REGION:
        for (long i = 0; i < n; i++) {
            SP_SCOPE(region);
            BARRIER();
        }
        break;
    }
    (void)h;
    (void)region;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    if (rounds > 64) rounds = 64;
    if (rounds < 1) rounds = 1;
    sp_options o;
    sp_options_init(&o);
    o.verbosity = 0;
    o.file_path = "/tmp/sp_bench_disabled.h5";
    int rc = sp_setup(&o);
    if (rc != SP_OK) {
        fprintf(stderr, "setup: %d\n", rc);
        return 1;
    }
#ifdef SP_DISABLE
    const char *how = "compile time (-DSP_DISABLE)";
#else
    const char *e = getenv("SCOPE_PROFILER_DISABLE");
    const char *how = e && *e && strcmp(e, "0") != 0 ? "run time (SCOPE_PROFILER_DISABLE)" : "NOT disabled (recording)";
#endif
    int32_t h = sp_region_register("bench_handle");
    static const scope_profiler::Region region("bench_region");
    double ns[FORMS][64];
    for (int r = 0; r < rounds; r++) {
        for (int f = 0; f < FORMS; f++) {
            double t0 = now_s();
            run(f, n, h, region);
            ns[f][r] = (now_s() - t0) / n * 1e9;
        }
    }
    printf("profiling off at %s; %d rounds of %ld pairs; median (least-disturbed round) per pair\n", how, rounds, n);
    double med[FORMS], least[FORMS];
    for (int f = 0; f < FORMS; f++) {
        med[f] = median(ns[f], rounds);
        least[f] = ns[f][0]; /* sorted by median() */
    }
    for (int f = 0; f < FORMS; f++) {
        printf("%-16s %7.2f ns (%6.2f)   over the empty loop: %+6.2f ns (%+6.2f)\n", KEYS[f], med[f], least[f], med[f] - med[EMPTY],
               least[f] - least[EMPTY]);
    }
    for (int f = 0; f < FORMS; f++) printf("RESULT %s %.3f\nRESULT min_%s %.3f\n", KEYS[f], med[f], KEYS[f], least[f]);
    sp_finalize();
    return 0;
}
