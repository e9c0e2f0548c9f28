/* An instrumented shared library used by tests/c/instrumented.c. */
double lib_twice(double x) { return 2.0 * x - x * 0.5; }
