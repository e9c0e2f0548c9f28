/* The interface between the core library (libscope_profiler.so, which links no MPI) and the
 * MPI plugin (libscope_profiler_mpi_<family>.so, compiled once per MPI ABI family with that
 * family's mpicc). The core finds the plugin at run time and calls MPI only through this
 * table; the mirror of these declarations on the Rust side is src/mpi_comm/plugin.rs.
 *
 * Every function returns MPI_SUCCESS (0) or an MPI error code (the plugin's communicators
 * return errors instead of aborting: MPI_ERRORS_RETURN). Lengths are bytes; the plugin splits
 * transfers above 2^30 bytes itself, the same way on both sides.
 * Internal: not part of the public C API. */
#ifndef SP_MPI_PLUGIN_H
#define SP_MPI_PLUGIN_H
#include <stdint.h>

#define SP_MPI_PLUGIN_VERSION 2

/* Element types and operations of the reductions. SP_MPI_I128 is a two's-complement 128-bit
 * integer stored as two uint64_t (low word first); it takes SP_MPI_SUM only (exact sums of
 * squares, see src/unify.rs). */
enum { SP_MPI_I64 = 0, SP_MPI_U64 = 1, SP_MPI_F64 = 2, SP_MPI_I128 = 3 };
enum { SP_MPI_SUM = 0, SP_MPI_MIN = 1, SP_MPI_MAX = 2 };
/* state() */
enum { SP_MPI_NOT_INITIALIZED = 0, SP_MPI_USABLE = 1, SP_MPI_FINALIZED = 2 };

typedef struct sp_mpi_ops {
    uint32_t struct_size;
    uint32_t version;
    /* "openmpi" or "mpich" (the ABI family this plugin was compiled for). */
    const char *family;
    int (*state)(void);
    int (*world)(int *rank, int *size);
    /* A private duplicate of MPI_COMM_WORLD (from_fortran == 0) or of the communicator whose
     * Fortran handle is fint; errors return instead of aborting on it. */
    int (*comm_dup)(int from_fortran, int32_t fint, void **comm);
    int (*comm_free)(void *comm);
    int (*comm_rank)(void *comm, int *rank);
    int (*comm_size)(void *comm, int *size);
    int (*send)(void *comm, const void *buf, uint64_t len, int dest, int tag);
    int (*recv)(void *comm, void *buf, uint64_t len, int source, int tag);
    int (*barrier)(void *comm);
    int (*bcast)(void *comm, void *buf, uint64_t len, int root);
    int (*allreduce)(void *comm, const void *in, void *out, int count, int type, int op);
    /* Exclusive prefix; rank 0 gets zeros (MPI leaves its result undefined). */
    int (*exscan)(void *comm, const void *in, void *out, int count, int type, int op);
    /* Every rank sends len bytes; the root receives size * len bytes in rank order. */
    int (*gather)(void *comm, const void *in, uint64_t len, void *out, int root);
    /* MPI-IO on an existing file, opened write-only by every rank of comm (collective). */
    int (*file_open)(void *comm, const char *path, void **file);
    /* Collective: every rank calls it once, with its own offset and length (0 is fine). */
    int (*file_write_at_all)(void *file, uint64_t offset, const void *buf, uint64_t len);
    /* Collective: every rank calls it once with its own n pieces (0 is fine): piece i is lens[i]
     * bytes at bufs[i], written at file offset offsets[i]. Offsets ascend and pieces do not
     * overlap; at most 2^30 bytes in all per call. One file view (MPI_File_set_view with an
     * hindexed filetype, left set) and one MPI_File_write_all (from the buffers in place). */
    int (*file_write_pieces_all)(void *file, uint32_t n, const uint64_t *offsets, const uint64_t *lens, const void *const *bufs);
    int (*file_close)(void *file);
    /* Run cb from inside MPI_Finalize, while MPI still works (an attribute of MPI_COMM_SELF,
     * whose delete callback MPI runs first: MPI-3.1 section 8.7.1). */
    int (*at_finalize)(void (*cb)(void));
    /* The message of an MPI error code, NUL-terminated in buf. */
    void (*error_string)(int code, char *buf, int cap);
    /* MPI_Get_library_version, NUL-terminated in buf. */
    void (*library_version)(char *buf, int cap);
    /* The Fortran handle of MPI_COMM_WORLD. */
    int32_t (*world_fint)(void);
} sp_mpi_ops;

/* The plugin's one entry point. */
const sp_mpi_ops *sp_mpi_plugin_ops(void);

#endif
