/* Regions on every rank of an MPI program, in the orders a real code might use.
 * Usage: mpi_ranks OUTPUT.h5 MODE, MODE one of
 *   normal            sp_finalize, then MPI_Finalize
 *   mpi_first         MPI_Finalize first: the library gathers from inside MPI_Finalize
 *   no_finalize       sp_finalize never called: same
 *   split             profile over MPI_Comm_split(world, rank % 2): one file per colour,
 *                     OUTPUT with ".color<c>" before ".h5"
 *   setup_before_init sp_setup before MPI_Init, sp_finalize before MPI_Finalize
 *   rank1_exits       rank 1 calls exit(3) (an error path) while the others wait in a
 *                     barrier: its profile is written at exit without waiting for them
 * Rank r records: "compute" (r+1)*10 times, "comm/allreduce" 5 times, "rank <r> only" once. */
#include <scope_profiler_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void work(int rank) {
    int32_t h = sp_region_register("compute");
    volatile double x = 0;
    for (int i = 0; i < (rank + 1) * 10; i++) {
        sp_region_start_id(h);
        for (int k = 0; k < 1000; k++) x += k;
        sp_region_stop_id(h);
    }
    for (int i = 0; i < 5; i++) {
        double in = rank, out = 0;
        sp_region_start("comm/allreduce");
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        sp_region_stop("comm/allreduce");
    }
    char name[64];
    snprintf(name, sizeof name, "rank %d only", rank);
    sp_region_start(name);
    sp_region_stop(name);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *mode = argv[2];
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[1];
    int rc;
    if (strcmp(mode, "setup_before_init") == 0) {
        rc = sp_setup(&o);
        MPI_Init(&argc, &argv);
    } else {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
        if (strcmp(mode, "split") == 0) {
            int wr;
            MPI_Comm_rank(MPI_COMM_WORLD, &wr);
            MPI_Comm half;
            MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &half);
            static char path[4096];
            snprintf(path, sizeof path, "%.*s.color%d.h5", (int)(strlen(argv[1]) - 3), argv[1], wr % 2);
            o.file_path = path;
            rc = sp_setup_comm(half, &o);
            MPI_Comm_free(&half);
        } else {
            rc = sp_setup(&o);
        }
    }
    if (rc != SP_OK) {
        fprintf(stderr, "sp_setup: %d %s\n", rc, sp_last_error());
        return 1;
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    work(rank);
    if (strcmp(mode, "mpi_first") == 0) {
        MPI_Finalize();
        rc = sp_finalize(); /* already done inside MPI_Finalize */
        if (rc != SP_ALREADY_FINALIZED) {
            fprintf(stderr, "sp_finalize after MPI_Finalize returned %d\n", rc);
            return 1;
        }
        return 0;
    }
    if (strcmp(mode, "rank1_exits") == 0) {
        if (rank == 1) exit(3);
        MPI_Barrier(MPI_COMM_WORLD); /* never completes: the launcher ends the job */
        return 0;
    }
    if (strcmp(mode, "no_finalize") == 0) {
        MPI_Finalize();
        return 0;
    }
    rc = sp_finalize();
    if (rc != SP_OK) {
        fprintf(stderr, "sp_finalize: %d %s\n", rc, sp_last_error());
        return 1;
    }
    MPI_Finalize();
    return 0;
}
