/* MPI_Init for the MPI-call test programs (mpi_calls.c, mpi_hostile.c): mode "threads" asks
 * for MPI_THREAD_MULTIPLE and ends the job (status 3) when the library does not provide it. */
#ifndef SP_TEST_MPI_INIT_MODE_H
#define SP_TEST_MPI_INIT_MODE_H
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static void init_mpi_for(const char *mode, int *argc, char ***argv) {
    if (!strcmp(mode, "threads")) {
        int provided;
        MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    } else {
        MPI_Init(argc, argv);
    }
}
#endif
