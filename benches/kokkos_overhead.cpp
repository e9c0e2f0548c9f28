// Time per launch of an empty Kokkos kernel (parallel_for of one iteration, Serial backend,
// Debian's Kokkos 3.4) and, in the same binary, per by-name region pair of our own
// (sp_region_start/stop), the baseline the Kokkos tool is held to. benches/run_adapters.sh runs
// it with and without KOKKOS_PROFILE_LIBRARY, in alternation.
// Usage: kokkos_overhead [LAUNCHES_PER_REP] [REPS]; prints RESULT lines (medians, ns).
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" {
#include "bench_util.h"
#include "scope_profiler.h"
}

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 200000;
  int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  sp_setup(NULL);
  Kokkos::initialize(argc, argv);
  {
    std::vector<double> k(reps), p(reps);
    for (int r = 0; r < reps; r++) {
      double t0 = now_s();
      for (long i = 0; i < n; i++) Kokkos::parallel_for("bench_empty", 1, KOKKOS_LAMBDA(int) {});
      double t1 = now_s();
      for (long i = 0; i < n; i++) {
        sp_region_start("bench_name");
        sp_region_stop("bench_name");
      }
      double t2 = now_s();
      k[r] = (t1 - t0) / n * 1e9;
      p[r] = (t2 - t1) / n * 1e9;
    }
    std::printf("RESULT kernel_ns %.2f\n", median(k.data(), reps));
    std::printf("RESULT name_pair_ns %.2f\n", median(p.data(), reps));
  }
  Kokkos::finalize();
  sp_finalize();
  return 0;
}
