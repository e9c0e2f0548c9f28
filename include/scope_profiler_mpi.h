/* scope_profiler with MPI: helpers that take an MPI_Comm directly.
 *
 * The library uses the MPI the program initialized (it never calls MPI_Init). By default it
 * profiles over MPI_COMM_WORLD; these helpers pass another communicator, which the library
 * duplicates once at setup. sp_setup and sp_finalize are collective over that communicator.
 * Hand-written (not generated): include it instead of, or after, scope_profiler.h. */
#ifndef SCOPE_PROFILER_MPI_H
#define SCOPE_PROFILER_MPI_H

#include <mpi.h>

#include "scope_profiler.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Make `options` profile over `comm` (stored as its Fortran handle, MPI_Comm_c2f). */
static inline void sp_options_set_comm(sp_options *options, MPI_Comm comm) {
    options->comm = (int32_t)MPI_Comm_c2f(comm);
    options->has_comm = 1;
}

/** sp_setup over `comm`, with `options` (or defaults when NULL). Collective over `comm`. */
static inline int sp_setup_comm(MPI_Comm comm, const sp_options *options) {
    sp_options o;
    if (options != NULL) {
        o = *options;
    } else {
        sp_options_init(&o);
    }
    sp_options_set_comm(&o, comm);
    return sp_setup(&o);
}

#ifdef __cplusplus
}
#endif

#endif /* SCOPE_PROFILER_MPI_H */
