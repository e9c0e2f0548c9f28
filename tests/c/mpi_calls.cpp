// A C++ MPI program that never calls sp_*: containers, RAII and the MPI C API, recorded by
// the MPI plugin alone. Writes what each rank did to expect.<rank>, like mpi_calls.c:
//   EXPECT <rank> <routine> <calls> <bytes sent> <bytes received> <empty polls>
// The MPI-2 C++ bindings (removed from the standard) are not used.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

namespace {
int rank = 0, size = 1;
std::FILE *out = nullptr;

void expect(const char *routine, long calls, long sent, long recv) {
    std::fprintf(out, "EXPECT\t%d\t%s\t%ld\t%ld\t%ld\t0\n", rank, routine, calls, sent, recv);
}

// A communicator that frees itself.
struct Comm {
    MPI_Comm c = MPI_COMM_NULL;
    explicit Comm(MPI_Comm parent) { MPI_Comm_dup(parent, &c); }
    ~Comm() { MPI_Comm_free(&c); }
    Comm(const Comm &) = delete;
    Comm &operator=(const Comm &) = delete;
};
}  // namespace

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const std::string name = "expect." + std::to_string(rank);
    out = std::fopen(name.c_str(), "w");
    if (!out) MPI_Abort(MPI_COMM_WORLD, 4);
    {
        Comm comm(MPI_COMM_WORLD);
        std::vector<double> v(16, rank), sum(16);
        for (int i = 0; i < 4; i++) MPI_Allreduce(v.data(), sum.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, comm.c);
        expect("MPI_Allreduce", 4, 4 * 128, 4 * 128);
        std::vector<int> counts(static_cast<size_t>(size), 3), displs(static_cast<size_t>(size));
        std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
        std::vector<int> mine(3, rank), all(static_cast<size_t>(3 * size));
        MPI_Allgatherv(mine.data(), 3, MPI_INT, all.data(), counts.data(), displs.data(), MPI_INT, comm.c);
        expect("MPI_Allgatherv", 1, 12, 12L * size);
        std::vector<long> block(size_t(2 * size), 1), part(2);
        MPI_Reduce_scatter_block(block.data(), part.data(), 2, MPI_LONG, MPI_SUM, comm.c);
        expect("MPI_Reduce_scatter_block", 1, 16L * size, 16);
        MPI_Request r;
        MPI_Ibarrier(comm.c, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        expect("MPI_Ibarrier", 1, 0, 0);
        expect("MPI_Wait", 1, 0, 0);
        std::fprintf(out, "COMPLETE\t%d\tMPI_Wait\tMPI_Ibarrier\t1\t0\n", rank);
    }
    expect("MPI_Comm_dup", 1, 0, 0);
    expect("MPI_Comm_free", 1, 0, 0);
    std::fclose(out);
    MPI_Finalize();
    return 0;
}
