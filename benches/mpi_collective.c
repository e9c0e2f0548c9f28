/* Finalize over MPI against a raw collective write of the same bytes by the same ranks, in the
 * same run. Every rank records CALLS calls (4 regions, one thread); sp_finalize is timed after a
 * barrier (the slowest rank's time). Then each rank writes its share of as many bytes as the
 * profile file has with one MPI_File_write_at_all into a fresh file in DIR (open, write, close;
 * the median of 3), timed the same way. Layout and path from the environment
 * (SCOPE_PROFILER_LAYOUT, SCOPE_PROFILER_COLLECTIVE); run by benches/run_mpi_collective.sh.
 * Open MPI and MPICH load their MPI-IO components at a process's first MPI_File_open (Open MPI:
 * its io, fs, fcoll, fbtl and sharedfp frameworks, a few ms of CPU per process), so whichever of
 * the two is timed first would pay for it: with BENCH_MPIIO_WARM=1 every rank first opens and
 * closes a scratch file collectively, as a code that writes its own checkpoints with MPI-IO has
 * done before it finalizes, and rank 0 prints that first open's time ("mpiio-first-open S").
 * Without it (the default) sp_finalize pays the first open and the raw writes after it do not.
 * BENCH_RAW_COLUMNS=1 writes the raw bytes in the columnar file's shape (each rank's calls in
 * three columns far apart, through a file view) instead of one contiguous share per rank.
 * Usage: mpi_collective CALLS DIR LABEL
 * Prints on rank 0: LABEL ranks calls/rank file-bytes finalize-s raw-s ratio status */
#define _POSIX_C_SOURCE 200809L
#include <scope_profiler_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static double raw_write(const char *path, long long total, int rank, int size) {
    long long share = total / size, offset = share * rank;
    if (rank == size - 1) share = total - offset;
    char *buf = malloc(share > 0 ? (size_t)share : 1);
    memset(buf, rank & 0xff, share > 0 ? (size_t)share : 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (getenv("BENCH_RAW_COLUMNS") && atoi(getenv("BENCH_RAW_COLUMNS"))) {
        /* In the columnar file's shape: three columns of 8, 8 and 1 bytes a call, each rank's
         * piece of each at its place, in one MPI_File_write_all through a file view. */
        long long calls = total / 17, mine = share / 17, first = (total / size / 17) * rank;
        int len[3] = {(int)(mine * 8), (int)(mine * 8), (int)mine};
        MPI_Aint at[3] = {first * 8, calls * 8 + first * 8, calls * 16 + first};
        MPI_Datatype view;
        MPI_Type_create_hindexed(3, len, at, MPI_BYTE, &view);
        MPI_Type_commit(&view);
        MPI_File_set_view(fh, 0, MPI_BYTE, view, "native", MPI_INFO_NULL);
        MPI_File_write_all(fh, buf, (int)(mine * 17), MPI_BYTE, MPI_STATUS_IGNORE);
        MPI_Type_free(&view);
    } else
    /* Shares above 2 GiB do not occur here (at most a few hundred MB per rank). */
    MPI_File_write_at_all(fh, offset, buf, (int)share, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    double t = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) unlink(path);
    free(buf);
    return tmax;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long n = argc > 1 ? atol(argv[1]) : 200000;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    const char *label = argc > 3 ? argv[3] : "-";
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char out[4096], raw[4096];
    snprintf(out, sizeof out, "%s/bench_profile.h5", dir);
    snprintf(raw, sizeof raw, "%s/bench_raw.bin", dir);
    if (getenv("BENCH_MPIIO_WARM") && atoi(getenv("BENCH_MPIIO_WARM"))) {
        char scratch[4096];
        snprintf(scratch, sizeof scratch, "%s/bench_warm.bin", dir);
        MPI_Barrier(MPI_COMM_WORLD);
        double w0 = MPI_Wtime(), w, wmax;
        MPI_File fh;
        MPI_File_open(MPI_COMM_WORLD, scratch, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
        MPI_File_close(&fh);
        w = MPI_Wtime() - w0;
        MPI_Allreduce(&w, &wmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            unlink(scratch);
            printf("mpiio-first-open %.4f\n", wmax);
        }
    }
    sp_options o;
    sp_options_init(&o);
    o.file_path = out;
    o.verbosity = getenv("BENCH_VERBOSE") ? atoi(getenv("BENCH_VERBOSE")) : 0;
    sp_setup(&o);
    int32_t h[4] = {sp_region_register("a"), sp_region_register("b"), sp_region_register("c"), sp_region_register("d")};
    for (long i = 0; i < n; i++) {
        sp_region_start_id(h[i % 4]);
        sp_region_stop_id(h[i % 4]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), c0 = cpu_s();
    long f0 = minor_faults();
    int rc = sp_finalize();
    double t = MPI_Wtime() - t0, tmax, c = cpu_s() - c0, csum;
    long faults = minor_faults() - f0, fsum;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&c, &csum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&faults, &fsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long long bytes = 0;
    if (rank == 0) {
        struct stat st;
        if (stat(out, &st) == 0) bytes = st.st_size;
        unlink(out);
    }
    MPI_Bcast(&bytes, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    double r[3];
    for (int i = 0; i < 3; i++) r[i] = raw_write(raw, bytes, rank, size);
    qsort(r, 3, sizeof r[0], cmp);
    if (rank == 0) {
        printf("%s %d %ld %lld %.4f %.4f %.2f %d\n", label, size, n, bytes, tmax, r[1], tmax / r[1], rc);
        if (getenv("BENCH_CPU")) printf("cpu %s: finalize CPU time summed over the ranks %.4f s, page faults %.0f per rank\n", label, csum, (double)fsum / size);
    }
    MPI_Finalize();
    return rc == SP_OK ? 0 : 1;
}
