// A C++ program built with -finstrument-functions and linked with the library: its regions
// carry demangled names. Usage: instrumented_cxx
#include <cstdio>

namespace solver {
struct Grid {
    double value = 0;
    __attribute__((noinline)) void step(int k) { value += k * 0.5; }
};

template <typename T>
__attribute__((noinline)) T twice(T x) {
    return x + x;
}
}  // namespace solver

int main() {
    solver::Grid g;
    for (int i = 0; i < 12; i++) g.step(i);
    double d = 1;
    for (int i = 0; i < 5; i++) d = solver::twice(d);
    int k = solver::twice(3);
    std::printf("done %.1f %.1f %d\n", g.value, d, k);
    return 0;
}
