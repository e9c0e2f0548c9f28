// C++ MPI + OpenMP consumer, as LULESH is: rank r, every thread of the OpenMP team records
// "omp cxx region" r+1 times (SP_SCOPE), over MPI_COMM_WORLD, to argv[1].
#include <scope_profiler_mpi.h>
#include <scope_profiler.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sp_options o = scope_profiler::options();
    o.file_path = argc > 1 ? argv[1] : nullptr;
    o.verbosity = 0;
    int rc = sp_setup_comm(MPI_COMM_WORLD, &o);
    if (rc != SP_OK) std::fprintf(stderr, "setup: %s\n", sp_last_error());
#pragma omp parallel
    {
        for (int i = 0; i <= rank; ++i) {
            SP_SCOPE("omp cxx region");
        }
    }
    if (sp_finalize() != SP_OK) rc = 1;
    MPI_Finalize();
    return rc == SP_OK ? 0 : 1;
}
