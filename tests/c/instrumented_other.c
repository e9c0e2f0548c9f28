/* The second file of tests/c/instrumented.c: a static helper() of the same name. */
__attribute__((noinline)) static double helper(double x) { return x + 3.0; }

double other_calls_helper(double x, int n) {
    for (int i = 0; i < n; i++) x = helper(x);
    return x;
}
