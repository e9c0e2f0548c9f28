/* What the generated MPI-call wrappers use (mpi/codegen/ writes them at build time, once per MPI
 * family, from that family's mpi.h and the symbols its libraries export): the outermost-call
 * guard, the way to the core library, and the helpers that turn a call's arguments into bytes,
 * peers (as world ranks) and requests. Implemented in pmpi_runtime.c. Internal. */
#ifndef SP_PMPI_H
#define SP_PMPI_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include "sp_mpi_core.h"

#define SP_EXPORT __attribute__((visibility("default")))
/* The wrappers' helpers are inlined whatever the compiler's budget for the (large) file of
 * wrappers says: it stops inlining them on its own as the helpers grow. */
#define SP_INLINE static inline __attribute__((always_inline))
#define SP_SITE ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/* MPI calls of this thread currently inside a wrapper (0 or 1; more only for the init and
 * finalize wrappers). Initial-exec TLS: one load, and small enough for the static TLS
 * surplus when the core dlopens this plugin. */
extern __thread int sp_depth __attribute__((tls_model("initial-exec")));

/* The core's table, or NULL while it was not looked for yet (sp_core_slow looks). */
extern const sp_mpi_core_api *sp_core_ptr;
const sp_mpi_core_api *sp_core_slow(void);

SP_INLINE const sp_mpi_core_api *sp_core(void) {
    const sp_mpi_core_api *c = __atomic_load_n(&sp_core_ptr, __ATOMIC_ACQUIRE);
    return c ? c : sp_core_slow();
}

/* The core's clock, read here when only the start time is needed (the core reads the end). */
SP_INLINE int64_t sp_start_time(uint8_t gate) {
#if defined(__x86_64__)
    if (gate == SP_GATE_TSC) return (int64_t)__rdtsc();
#endif
    (void)gate;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Start recording the outermost MPI call of this thread; 0: call the PMPI routine plainly. */
SP_INLINE int sp_enter(sp_mpi_event *e, uint32_t routine, uint64_t site) {
    if (sp_depth) return 0;
    const sp_mpi_core_api *c = sp_core();
    if (!c) return 0;
    uint8_t gate = __atomic_load_n(c->gate, __ATOMIC_ACQUIRE);
    if (gate == SP_GATE_CLOSED) return 0;
    e->routine = routine;
    e->flags = 0;
    e->comm = 0;
    e->comm_size = 0;
    e->comm_kind = SP_COMM_NONE;
    e->dest = SP_PEER_NONE;
    e->source = SP_PEER_NONE;
    e->sent = 0;
    e->received = 0;
    e->site = site;
    /* (The request fields are written with the flags that say so: sp_mpi_core.h.) */
    sp_depth = 1;
    /* The last thing before the PMPI call: our own work stays outside the call's time. */
    e->start = sp_start_time(gate);
    return 1;
}

SP_INLINE void sp_leave(sp_mpi_event *e) {
    sp_core_ptr->end(e);
    sp_depth = 0;
}

/* Fortran handles, integers (use mpi, mpif.h) or structures holding one (use mpi_f08), passed
 * by reference; converted to C handles to count bytes and find peers. */
#define SP_FINT(p) ((int64_t)(*(const MPI_Fint *)(p)))
#define SP_FCOUNT(p) ((int64_t)(*(const MPI_Count *)(p)))
#define SP_FAINT(p) ((int64_t)(*(const MPI_Aint *)(p)))
#if defined(OPEN_MPI)
#define SP_TYPE_F2C(p) PMPI_Type_f2c(*(const MPI_Fint *)(p))
#define SP_COMM_F2C(p) PMPI_Comm_f2c(*(const MPI_Fint *)(p))
#define SP_WIN_F2C(p) PMPI_Win_f2c(*(const MPI_Fint *)(p))
#define SP_REQ_F2C(v) PMPI_Request_f2c(v)
#else
#define SP_TYPE_F2C(p) MPI_Type_f2c(*(const MPI_Fint *)(p))
#define SP_COMM_F2C(p) MPI_Comm_f2c(*(const MPI_Fint *)(p))
#define SP_WIN_F2C(p) MPI_Win_f2c(*(const MPI_Fint *)(p))
#define SP_REQ_F2C(v) MPI_Request_f2c(v)
#endif
/* A Fortran error code says success (an absent optional ierror of mpi_f08 is NULL). */
#define SP_F_OK(ierr) (!(ierr) || *(const MPI_Fint *)(ierr) == MPI_SUCCESS)

/* The Fortran routine a wrapper forwards to: the PMPI name when the MPI library exports one,
 * else the next definition of the wrapper's own name (RTLD_NEXT). Looked up once. */
void *sp_fortran_target(void **cache, const char *pmpi, const char *own);
/* A Fortran routine that cannot be found: say so once and return MPI_ERR_OTHER in ierror. */
void sp_fortran_missing(const char *name, void *ierr);

/* The communicator (or window) of a call: handle, size and kind (cached per thread). */
void sp_comm(sp_mpi_event *e, MPI_Comm comm);
/* MPI_COMM_WORLD's size once known (0 before). */
extern int sp_world_size_known;
SP_INLINE void sp_comm_of(sp_mpi_event *e, MPI_Comm comm) {
    int n = __atomic_load_n(&sp_world_size_known, __ATOMIC_RELAXED);
    if (comm == MPI_COMM_WORLD && n > 0) {
#if defined(OPEN_MPI)
        e->comm = (uint64_t)(uintptr_t)comm;
#else
        e->comm = (uint64_t)(uint32_t)comm;
#endif
        e->comm_kind = SP_COMM_WORLD;
        e->comm_size = n;
    } else {
        sp_comm(e, comm);
    }
}
void sp_win(sp_mpi_event *e, MPI_Win win);
/* Is a Fortran buffer argument MPI_IN_PLACE? */
int sp_f_in_place(const void *buf);

/* A handle as a number (Open MPI's are pointers, MPICH's integers). */
#if defined(OPEN_MPI)
#define SP_HANDLE(h) ((uint64_t)(uintptr_t)(h))
#else
#define SP_HANDLE(h) ((uint64_t)(uint32_t)(h))
#endif

/* count x the datatype's size; 0 for a non-positive count or a null datatype. */
uint64_t sp_bytes(int64_t count, MPI_Datatype type);

/* The predefined datatypes' sizes by handle (pmpi_runtime.c): an open-addressing table, filled
 * once (state 2) at the first look-up after MPI_Init. */
typedef struct {
    uint64_t handle;
    MPI_Count size;
} sp_type_size_t;
#define SP_TYPE_SLOTS 256
extern sp_type_size_t sp_type_sizes[SP_TYPE_SLOTS] __attribute__((visibility("hidden")));
extern int sp_type_sizes_state __attribute__((visibility("hidden")));
SP_INLINE unsigned sp_type_slot(uint64_t h) {
    return (unsigned)((h * 0x9E3779B97F4A7C15ull) >> 56) % SP_TYPE_SLOTS;
}

/* sp_bytes, with a predefined type at its home slot of the table found inline (no call, no
 * probing); anything else (a derived type, a collision, the table not filled yet) the full way. */
SP_INLINE uint64_t sp_bytes_of(int64_t count, MPI_Datatype type) {
    uint64_t h = SP_HANDLE(type);
    const sp_type_size_t *s = &sp_type_sizes[sp_type_slot(h)];
    if (__atomic_load_n(&sp_type_sizes_state, __ATOMIC_ACQUIRE) == 2 && s->handle == h && h != 0)
        return count > 0 ? (uint64_t)count * (uint64_t)s->size : 0;
    return sp_bytes(count, type);
}

/* Traffic. Counts are values; count arrays are pointers with wide = 1 for MPI_Count elements;
 * `fortran` says how to read arrays of handles, statuses and MPI_IN_PLACE. */
void sp_send_any(sp_mpi_event *e, int64_t count, MPI_Datatype type, int dest);
void sp_recv_any(sp_mpi_event *e, int64_t count, MPI_Datatype type, int source, const void *status, int fortran);
/* A message to or from a rank of MPI_COMM_WORLD is counted inline (the rank is the peer's world
 * rank); anything else (another communicator, MPI_PROC_NULL, MPI_ANY_SOURCE) the full way. */
SP_INLINE void sp_send(sp_mpi_event *e, int64_t count, MPI_Datatype type, int dest) {
    if (e->comm_kind != SP_COMM_WORLD || dest < 0) {
        sp_send_any(e, count, type, dest);
        return;
    }
    e->flags |= SP_EV_P2P;
    e->sent += sp_bytes_of(count, type);
    e->dest = dest;
}
SP_INLINE void sp_recv(sp_mpi_event *e, int64_t count, MPI_Datatype type, int source, const void *status, int fortran) {
    if (e->comm_kind != SP_COMM_WORLD || source < 0) {
        sp_recv_any(e, count, type, source, status, fortran);
        return;
    }
    e->flags |= SP_EV_P2P;
    e->received += sp_bytes_of(count, type);
    e->source = source;
}
void sp_mrecv(sp_mpi_event *e, int64_t count, MPI_Datatype type, const void *status, int fortran);
void sp_coll(sp_mpi_event *e);
void sp_bcast(sp_mpi_event *e, int64_t count, MPI_Datatype type, int root);
void sp_reduce(sp_mpi_event *e, int64_t count, MPI_Datatype type, int root);
SP_INLINE void sp_allreduce(sp_mpi_event *e, int64_t count, MPI_Datatype type) {
    e->flags |= SP_EV_COLL;
    uint64_t b = sp_bytes_of(count, type);
    e->sent += b;
    e->received += b;
}
void sp_reduce_scatter(sp_mpi_event *e, const void *recvcounts, int wide, MPI_Datatype type);
void sp_reduce_scatter_block(sp_mpi_event *e, int64_t recvcount, MPI_Datatype type);
void sp_gather(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, int64_t rc, MPI_Datatype rt, int root, int fortran);
void sp_gatherv(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, const void *rcounts, int wide, MPI_Datatype rt, int root, int fortran);
void sp_scatter(sp_mpi_event *e, int64_t sc, MPI_Datatype st, const void *recvbuf, int64_t rc, MPI_Datatype rt, int root, int fortran);
void sp_scatterv(sp_mpi_event *e, const void *scounts, int wide, MPI_Datatype st, const void *recvbuf, int64_t rc, MPI_Datatype rt, int root, int fortran);
void sp_allgather(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, int64_t rc, MPI_Datatype rt, int fortran);
void sp_allgatherv(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, const void *rcounts, int wide, MPI_Datatype rt, int fortran);
void sp_alltoall(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, int64_t rc, MPI_Datatype rt, int fortran);
void sp_alltoallv(sp_mpi_event *e, const void *sendbuf, const void *scounts, int wide, MPI_Datatype st, const void *rcounts, MPI_Datatype rt, int fortran);
void sp_alltoallw(sp_mpi_event *e, const void *sendbuf, const void *scounts, int wide, const void *stypes, const void *rcounts, const void *rtypes, int fortran);
void sp_neighbor(sp_mpi_event *e, int64_t sc, const void *scounts, MPI_Datatype st, int64_t rc, const void *rcounts, int wide, MPI_Datatype rt);
void sp_put(sp_mpi_event *e, int64_t count, MPI_Datatype type, int target);
void sp_get(sp_mpi_event *e, int64_t count, MPI_Datatype type, int target);
void sp_io(sp_mpi_event *e, int64_t count, MPI_Datatype type, int write);
/* A polling call: `flag` (int or LOGICAL) false means it found nothing. */
void sp_poll(sp_mpi_event *e, const void *flag);

/* Requests. */
typedef struct sp_reqbuf {
    uint64_t local[8];
    uint64_t *v;
    int n;
    unsigned stride;  /* sizeof the program's handles (MPI_Request or MPI_Fint) */
    const void *at;   /* the program's array of them */
} sp_reqbuf;
/* A request handle as the core knows it (0: MPI_REQUEST_NULL). */
SP_INLINE uint64_t sp_req_value(MPI_Request r) {
    return r == MPI_REQUEST_NULL ? 0 : SP_HANDLE(r);
}
SP_INLINE uint64_t sp_freq_value(MPI_Fint f) {
    return sp_req_value(SP_REQ_F2C(f));
}
/* Room for n handles beyond rb->local (n > 8): malloc'd, or NULL when n is absurd or none is left. */
uint64_t *sp_req_alloc(int64_t n);
/* Copy n request handles (C MPI_Request[] or Fortran integers) before the call frees them,
 * and where they are (a request is known by its handle value and its slot: sp_mpi_core.h).
 * Inline (the wrappers' `fortran` and often `n` are constants); more than 8 in a buffer of
 * their own. */
SP_INLINE void sp_req_save(sp_reqbuf *rb, int64_t n, const void *reqs, int fortran) {
    rb->n = 0;
    rb->v = rb->local;
    rb->at = reqs;
    rb->stride = fortran ? (unsigned)sizeof(MPI_Fint) : (unsigned)sizeof(MPI_Request);
    if (n <= 0 || !reqs) return;
    if (n > (int64_t)(sizeof rb->local / sizeof rb->local[0]) && !(rb->v = sp_req_alloc(n))) {
        rb->v = rb->local;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        rb->v[i] = fortran ? sp_freq_value(((const MPI_Fint *)reqs)[i]) : sp_req_value(((const MPI_Request *)reqs)[i]);
    rb->n = (int)n;
}
SP_INLINE void sp_req_release(sp_reqbuf *rb) {
    if (rb->v != rb->local) free(rb->v);
    rb->v = rb->local;
    rb->n = 0;
}
/* The request a call created (a pointer to the C or Fortran handle). */
SP_INLINE void sp_request_out(sp_mpi_event *e, const void *req, int fortran, int persistent) {
    if (!req) return;
    e->request = fortran ? sp_freq_value(*(const MPI_Fint *)req) : sp_req_value(*(const MPI_Request *)req);
    e->request_slot = (uint64_t)(uintptr_t)req;
    e->flags |= SP_EV_REQUEST | (persistent ? SP_EV_PERSISTENT : 0u);
}
/* The requests from position `first` of the saved ones, with where the program keeps them,
 * under `flag` (the core reads them only with SP_EV_COMPLETES, _STARTS or _FREES, which are
 * set only here, always with them). */
SP_INLINE void sp_reqs(sp_mpi_event *e, unsigned flag, sp_reqbuf *rb, int first, int n) {
    e->flags |= flag;
    e->reqs = rb->v + first;
    e->nreqs = (uint32_t)n;
    e->stride = rb->stride;
    e->reqs_at = rb->at ? (uint64_t)(uintptr_t)rb->at + (uint64_t)first * rb->stride : 0;
}
/* Completions: all saved ones; the one at *index; the *outcount at indices (Fortran: 1-based). */
SP_INLINE void sp_done(sp_mpi_event *e, sp_reqbuf *rb) {
    sp_reqs(e, SP_EV_COMPLETES, rb, 0, rb->n);
}
void sp_done_index(sp_mpi_event *e, sp_reqbuf *rb, const void *index, int fortran);
void sp_done_some(sp_mpi_event *e, sp_reqbuf *rb, const void *outcount, const void *indices, int fortran);
void sp_test(sp_mpi_event *e, sp_reqbuf *rb, const void *flag);
void sp_test_any(sp_mpi_event *e, sp_reqbuf *rb, const void *index, const void *flag, int fortran);
void sp_test_some(sp_mpi_event *e, sp_reqbuf *rb, const void *outcount, const void *indices, int fortran);
void sp_started(sp_mpi_event *e, sp_reqbuf *rb);
void sp_freed(sp_mpi_event *e, sp_reqbuf *rb);
/* A communicator or window is about to be freed: cached sizes and rank tables go stale. */
void sp_comm_forget(void);

/* The init, finalize and abort wrappers. */
int64_t sp_clock_ns(void);
void sp_after_init(int fortran, int64_t init_ns);
void sp_before_finalize(void);
/* After PMPI_Finalize returned, which took pmpi_ns. */
void sp_after_finalize(int64_t pmpi_ns);
void sp_before_abort(int errorcode);
void sp_pcontrol(int level);

/* Routine names, and the family's Fortran MPI libraries (NULL-terminated), generated. */
extern const char *const sp_routine_names[];
extern const uint32_t sp_routine_count;
extern const char *const sp_fortran_libraries[];

#endif
