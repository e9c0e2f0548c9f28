// Sampling from C++: scope_profiler::start_sampling, a region whose loop runs on one marked
// line, stop_sampling, then a region that must get no sample (tests/sampling.rs).
#include <scope_profiler.hpp>

#include <cstdio>
#include <ctime>

static volatile double sink;

static double cpu() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static double spin(long n) { double x = 1.0; for (long i = 0; i < n; i++) x = x * 1.0000001 + 1e-9; return x; } // HOT:cxx

static void burn(double seconds) {
    double t0 = cpu();
    while (cpu() - t0 < seconds) sink = sink + spin(100000);
}

int main(int argc, char** argv) {
    scope_profiler::Session session(argc > 1 ? argv[1] : "cxx.h5");
    if (session.status() != SP_OK) return 1;
    if (scope_profiler::start_sampling(1000) != SP_OK) {
        std::fprintf(stderr, "start_sampling: %s\n", sp_last_error());
        return 1;
    }
    {
        SP_SCOPE("kernel");
        burn(0.5);
    }
    if (scope_profiler::stop_sampling() != SP_OK) return 1;
    {
        SP_SCOPE("unsampled");
        burn(0.2);
    }
    if (session.finalize() != SP_OK) return 1;
    std::printf("DONE\n");
    return 0;
}
