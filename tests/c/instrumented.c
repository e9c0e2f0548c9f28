/* A program built with -finstrument-functions and linked with the library, which never calls
 * sp_*: every instrumented function is recorded. helper() is static here and in
 * instrumented_other.c (one region, "helper"); lib_twice() is in an instrumented shared library.
 * With -DWITH_SETUP the program sets profiling up and finalizes it itself, then calls more
 * functions (not recorded). Usage: instrumented [MID_CALLS] */
#include <stdio.h>
#include <stdlib.h>
#ifdef WITH_SETUP
#include <scope_profiler.h>
#endif

double other_calls_helper(double x, int n);
double lib_twice(double x);

static volatile double sink;

__attribute__((noinline)) static double leaf(double x) { return x * 1.0001 + 1.0; }

__attribute__((noinline)) double mid(double x) {
    for (int i = 0; i < 10; i++) x = leaf(x);
    return x;
}

__attribute__((noinline)) static double helper(double x) { return x + 2.0; }

__attribute__((noinline)) void tiny(void) { sink += 1.0; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
#ifdef WITH_SETUP
    if (sp_setup(NULL) != SP_OK) return 1;
#endif
    double x = 0;
    for (int i = 0; i < n; i++) x = mid(x);
    x = helper(helper(x));
    x = other_calls_helper(x, 3);
    for (int i = 0; i < 7; i++) x = lib_twice(x);
    for (int i = 0; i < 150; i++) tiny();
#ifdef WITH_SETUP
    if (sp_finalize() != SP_OK) return 1;
    /* After finalize: not recorded, and harmless. */
    for (int i = 0; i < 10; i++) x = mid(x);
#endif
    printf("done %.3f\n", x + sink);
    return 0;
}
