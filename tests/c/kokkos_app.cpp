// A Kokkos program (Serial backend, Debian's Kokkos) run under the library as its Kokkos tool:
// kernels of every kind (labelled, unlabelled, Kokkos's own), nested profile regions, a
// profile section started many times, deep copies, allocations, a fence, an event, with
// regions of the program's own (sp_*) in between (built with -DWITH_SP), under MPI with
// -DWITH_MPI. `kokkos_app N` runs the loop N times.
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#ifdef WITH_SP
#include "scope_profiler.h"
#define SP_START(n) sp_region_start(n)
#define SP_STOP(n) sp_region_stop(n)
#else
#define SP_START(n) ((void)0)
#define SP_STOP(n) ((void)0)
#endif
#ifdef WITH_MPI
#include <mpi.h>
#endif

int main(int argc, char **argv) {
#ifdef WITH_MPI
  MPI_Init(&argc, &argv);
#endif
  int n = argc > 1 ? std::atoi(argv[1]) : 3;
  Kokkos::initialize(argc, argv);
  {
    Kokkos::View<double *> a("kk_a", 1000), b("kk_b", 1000);
    Kokkos::View<double *, Kokkos::HostSpace> h("kk_h", 1000);
    uint32_t sec = 0;
    Kokkos::Profiling::createProfileSection("kk_section", &sec);
    double total = 0;
    for (int i = 0; i < n; i++) {
      Kokkos::Profiling::pushRegion("kk_outer");
      SP_START("sp_mine");
      Kokkos::parallel_for("kk_fill", 1000, KOKKOS_LAMBDA(int j) { a(j) = j; });
      Kokkos::Profiling::pushRegion("kk_inner");
      double s = 0;
      Kokkos::parallel_reduce("kk_sum", 1000, KOKKOS_LAMBDA(int j, double &l) { l += a(j); }, s);
      Kokkos::parallel_scan("kk_scan", 1000, KOKKOS_LAMBDA(int j, double &u, bool fin) {
        u += a(j);
        if (fin) b(j) = u;
      });
      total += s;
#ifdef WITH_MPI
      double all = 0;
      MPI_Allreduce(&s, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      total += all;
#endif
      Kokkos::Profiling::popRegion();
      SP_STOP("sp_mine");
      Kokkos::Profiling::startSection(sec);
      Kokkos::deep_copy(h, b);
      Kokkos::Profiling::stopSection(sec);
      Kokkos::fence();
      Kokkos::Profiling::popRegion();
    }
    Kokkos::Profiling::destroyProfileSection(sec);
    Kokkos::parallel_for(10, KOKKOS_LAMBDA(int) {});
    Kokkos::Profiling::markEvent("kk_event");
    std::printf("total %g last %g\n", total, h(999));
  }
  Kokkos::finalize();
#ifdef WITH_MPI
  MPI_Finalize();
#endif
  return 0;
}
