/* The interface between the MPI-call wrappers (this plugin) and the core library: a table of
 * functions the core exports under one internal symbol, `sp__mpi_core_api`, found at first use
 * (dlsym(RTLD_DEFAULT) when the program is linked with the core, else dlopen of
 * libscope_profiler.so next to this plugin). The mirror on the Rust side is src/adapters/mpi_calls.rs.
 * Internal: not part of the public C API (include/scope_profiler.h).
 *
 * One MPI call = one `sp_mpi_event` on the calling thread's stack: the wrapper reads the
 * core's clock as the gate says (no call into the core at the start), calls the PMPI routine,
 * fills in what the call moved, and end() takes the end time and records everything (with
 * SCOPE_PROFILER_MPI=calls also a region named after the routine, recorded as it ends). Only
 * the outermost MPI call of a thread gets here (the wrappers keep a per-thread depth), so an
 * MPI call made inside another one is never counted twice.
 *
 * Requests are known by handle value AND by the address of the program's variable holding
 * the handle (its slot): MPI gives one handle value to every request that completed at once
 * (Open MPI's ompi_request_empty, MPICH's built-in completed requests), so the value alone
 * does not say which request a completion completed. */
#ifndef SP_MPI_CORE_H
#define SP_MPI_CORE_H
#include <stdint.h>

#define SP_MPI_CORE_VERSION 3

/* sp_mpi_event.flags */
enum {
    SP_EV_POLL = 1u << 0,       /* a polling call (MPI_Test*, MPI_Iprobe, ...) */
    SP_EV_EMPTY = 1u << 1,      /* ... that found nothing: counted, not kept as a call */
    SP_EV_P2P = 1u << 2,        /* point-to-point: dest/source go into the peer table */
    SP_EV_COLL = 1u << 3,       /* a collective */
    SP_EV_PERSISTENT = 1u << 4, /* the request created is persistent (counted at MPI_Start) */
    SP_EV_COMPLETES = 1u << 5,  /* reqs: the requests this call completed */
    SP_EV_STARTS = 1u << 6,     /* reqs: the persistent requests this call started */
    SP_EV_FREES = 1u << 7,      /* reqs: the requests this call freed */
    SP_EV_FAILED = 1u << 8,     /* the MPI routine returned an error */
    SP_EV_RMA = 1u << 9,        /* one-sided: dest/source are targets of a window */
    SP_EV_IO = 1u << 10,        /* MPI-IO: sent = bytes written, received = bytes read */
    SP_EV_REQUEST = 1u << 11,   /* request, request_slot: the request this call created */
};

/* sp_mpi_event.comm_kind */
enum { SP_COMM_NONE = 0, SP_COMM_WORLD = 1, SP_COMM_SELF = 2, SP_COMM_INTRA = 3, SP_COMM_INTER = 4, SP_COMM_WIN = 5 };

/* No peer, and a peer not known (MPI_ANY_SOURCE, MPI_PROC_NULL). */
#define SP_PEER_NONE (-1)
#define SP_PEER_UNKNOWN (-2)

/* The head (routine .. site) is the core's `Event` (src/mpi_stats.rs), read in place; the
 * wrapper writes all of it but `end` (the core's), and the request fields only as the flags
 * say (the core reads them only then). */
typedef struct sp_mpi_event {
    uint32_t routine;   /* index into the routine names given to routines() */
    uint32_t flags;     /* SP_EV_* */
    int64_t start;      /* the core's clock (as the gate says) at the start */
    int64_t end;        /* written by the core's end() */
    uint64_t comm;      /* the communicator's (or window's) handle value; 0 = none */
    int32_t comm_size;  /* its size (remote size for an inter-communicator); 0 = unknown */
    int32_t comm_kind;  /* SP_COMM_* */
    int32_t dest;       /* world rank the bytes were sent to, or SP_PEER_* */
    int32_t source;     /* world rank the bytes came from, or SP_PEER_* */
    uint64_t sent;      /* bytes (count x type size) */
    uint64_t received;
    uint64_t site;      /* the caller's return address */
    /* With SP_EV_REQUEST: */
    uint64_t request;   /* the request this call created (handle value), 0 = none */
    /* With SP_EV_COMPLETES, _STARTS or _FREES (zeros in reqs are skipped): */
    const uint64_t *reqs;
    uint32_t nreqs;
    uint32_t stride;    /* bytes between the program's handles of reqs[i] and reqs[i + 1] */
    /* With SP_EV_REQUEST: the address `request` was written to (the program's variable). */
    uint64_t request_slot;
    /* With SP_EV_COMPLETES, _STARTS or _FREES: the address of the program's handle of reqs[0];
     * 0 = not known. */
    uint64_t reqs_at;
} sp_mpi_event;

/* The layout src/adapters/mpi_calls.rs asserts too. */
_Static_assert(sizeof(sp_mpi_event) == 112 && __builtin_offsetof(sp_mpi_event, end) == 16 && __builtin_offsetof(sp_mpi_event, site) == 64 &&
                   __builtin_offsetof(sp_mpi_event, request) == 72 && __builtin_offsetof(sp_mpi_event, request_slot) == 96,
               "sp_mpi_event: the layout the core reads");

typedef struct sp_mpi_core_api {
    uint32_t struct_size;
    uint32_t version;
    /* The routines the wrappers know, index = routine id, names as the MPI standard spells
     * them ("MPI_Allreduce"). Called once before any call is recorded; 0 = accepted. */
    int (*routines)(const char *const *names, uint32_t n, const char *family);
    /* A call ended (it started with the gate open): record it. */
    void (*end)(sp_mpi_event *e);
    /* After PMPI_Init/PMPI_Init_thread succeeded: set the profiler up if the program did
     * not (the environment decides, as for sp_setup(NULL)). init_ns: how long MPI_Init took;
     * thread_level: what MPI provided, 0 single, 1 funneled, 2 serialized, 3 multiple. */
    void (*after_init)(int fortran, int64_t init_ns, int thread_level);
    /* Before PMPI_Finalize: write the profile (collectively) if it was not written yet. */
    void (*before_finalize)(void);
    /* Before PMPI_Abort: this rank writes what it has to its own file. */
    void (*before_abort)(int errorcode);
    /* MPI_Pcontrol(level): 0 stops recording MPI calls, any other level resumes it. */
    void (*pcontrol)(int level);
    /* What a wrapper does at the start of a call (read atomically, it changes at setup,
     * finalize and MPI_Pcontrol): 0 nothing (not recording), 1 read CLOCK_MONOTONIC into
     * start, 2 read the TSC into start (the core's clock: it reads the end the same way). */
    const uint8_t *gate;
    /* Time spent because of the profiler, as the wrappers measured it: SP_SPENT_INIT inside
     * MPI_Init after PMPI_Init (loading the core, setting up), SP_SPENT_FINALIZE inside
     * MPI_Finalize before PMPI_Finalize (writing the profile), SP_SPENT_PMPI_FINALIZE the time
     * of PMPI_Finalize itself, after it returned (the core then reports, at verbosity 2).
     * rank: MPI_COMM_WORLD's rank of the process (-1: not known). */
    void (*spent)(int what, int64_t ns, int rank);
} sp_mpi_core_api;

enum { SP_SPENT_INIT = 0, SP_SPENT_FINALIZE = 1, SP_SPENT_PMPI_FINALIZE = 2 };

enum { SP_GATE_CLOSED = 0, SP_GATE_MONOTONIC = 1, SP_GATE_TSC = 2 };

#endif
