/* The run-time support of the generated MPI-call wrappers (see sp_pmpi.h): finding the core
 * library, the per-thread cache of communicator sizes and world-rank tables, and turning a
 * call's arguments into bytes, peers and requests. Everything here calls MPI through PMPI_
 * only, so nothing of it is recorded as the program's MPI calls. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sp_pmpi.h"

__thread int sp_depth __attribute__((tls_model("initial-exec")));

/* The profiler's own MPI calls (the plugin's operations, mpi/plugin) run between these: every
 * MPI call made inside goes straight to PMPI, unrecorded, whatever the depth was. */
void sp_profiler_enter(void) { sp_depth++; }
void sp_profiler_leave(void) { sp_depth--; }
const sp_mpi_core_api *sp_core_ptr;
static int mpi_usable(void);

/* ------------------------------------------------------------------------------------------
 * The core library */

static pthread_mutex_t core_lock = PTHREAD_MUTEX_INITIALIZER;
static int core_looked; /* under core_lock: 1 once the core was looked for */

typedef const sp_mpi_core_api *(*core_entry)(void);

static void say(const char *what) {
    fprintf(stderr, "[scope_profiler] %s\n", what);
}

/* libscope_profiler.so in the directory of this plugin. */
static void *open_core_next_to_plugin(void) {
    Dl_info info;
    if (!dladdr((void *)open_core_next_to_plugin, &info) || !info.dli_fname) return NULL;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return NULL;
    size_t dir = (size_t)(slash - info.dli_fname);
    char path[4096];
    if (dir + sizeof "/libscope_profiler.so" > sizeof path) return NULL;
    memcpy(path, info.dli_fname, dir);
    memcpy(path + dir, "/libscope_profiler.so", sizeof "/libscope_profiler.so");
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* Set when this plugin shares the process with the other MPI family's library (a plugin of the
 * wrong family preloaded): nothing is recorded then. */
static int wrong_family;

__attribute__((constructor)) static void check_family(void) {
#if defined(OPEN_MPI)
    const char *other = "MPIR_Err_return_comm", *theirs = "MPICH", *want = "mpich";
#else
    const char *other = "ompi_mpi_comm_world", *theirs = "Open MPI", *want = "openmpi";
#endif
    if (dlsym(RTLD_DEFAULT, other)) {
        wrong_family = 1;
        fprintf(stderr,
                "[scope_profiler] the MPI plugin for another MPI family is loaded into a program that uses %s: "
                "its MPI calls may reach the wrong MPI library; use libscope_profiler_mpi_%s.so. MPI calls are not recorded.\n",
                theirs, want);
    }
}

const sp_mpi_core_api *sp_core_slow(void) {
    const sp_mpi_core_api *c = NULL;
    if (wrong_family) return NULL;
    pthread_mutex_lock(&core_lock);
    if (core_looked) {
        c = __atomic_load_n(&sp_core_ptr, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&core_lock);
        return c;
    }
    core_looked = 1;
    void *entry = dlsym(RTLD_DEFAULT, "sp__mpi_core_api");
    if (!entry) {
        void *h = open_core_next_to_plugin();
        if (h) entry = dlsym(h, "sp__mpi_core_api");
        if (!entry) entry = (h = dlopen("libscope_profiler.so", RTLD_NOW | RTLD_LOCAL)) ? dlsym(h, "sp__mpi_core_api") : NULL;
    }
    if (!entry) {
        say("MPI calls are not recorded: libscope_profiler.so was found neither in the program nor next to the MPI plugin");
    } else {
        c = ((core_entry)entry)();
        if (!c || c->version != SP_MPI_CORE_VERSION || c->struct_size < sizeof(sp_mpi_core_api)) {
            say("MPI calls are not recorded: libscope_profiler.so and the MPI plugin are of different versions");
            c = NULL;
        } else if (c->routines(sp_routine_names, sp_routine_count,
#if defined(OPEN_MPI)
                               "openmpi"
#else
                               "mpich"
#endif
                               ) != 0) {
            c = NULL; /* the core said why */
        }
    }
    if (c) __atomic_store_n(&sp_core_ptr, c, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&core_lock);
    return c;
}

int64_t sp_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void sp_after_init(int fortran, int64_t init_ns) {
    int64_t t0 = sp_clock_ns();
    const sp_mpi_core_api *c = sp_core();
    int provided = MPI_THREAD_MULTIPLE, level = 3;
    if (PMPI_Query_thread(&provided) == MPI_SUCCESS) {
        level = provided == MPI_THREAD_SINGLE ? 0 : provided == MPI_THREAD_FUNNELED ? 1 : provided == MPI_THREAD_SERIALIZED ? 2 : 3;
    }
    if (c) {
        c->after_init(fortran, init_ns, level);
        c->spent(SP_SPENT_INIT, sp_clock_ns() - t0, -1);
    }
}

/* MPI_COMM_WORLD's rank, taken before PMPI_Finalize for the line said after it. */
static int finalize_rank = -1;

void sp_before_finalize(void) {
    int64_t t0 = sp_clock_ns();
    const sp_mpi_core_api *c = sp_core();
    if (mpi_usable()) PMPI_Comm_rank(MPI_COMM_WORLD, &finalize_rank);
    if (c) {
        c->before_finalize();
        c->spent(SP_SPENT_FINALIZE, sp_clock_ns() - t0, finalize_rank);
    }
}

void sp_after_finalize(int64_t pmpi_ns) {
    const sp_mpi_core_api *c = sp_core();
    if (c) c->spent(SP_SPENT_PMPI_FINALIZE, pmpi_ns, finalize_rank);
}

void sp_before_abort(int errorcode) {
    const sp_mpi_core_api *c = sp_core();
    if (c) c->before_abort(errorcode);
}

void sp_pcontrol(int level) {
    const sp_mpi_core_api *c = sp_core();
    if (c) c->pcontrol(level);
}

/* ------------------------------------------------------------------------------------------
 * Fortran forwarding */

static void load_fortran_libraries(void) {
    for (const char *const *l = sp_fortran_libraries; *l; l++) dlopen(*l, RTLD_NOW | RTLD_GLOBAL);
}

static void *fortran_lookup(const char *pmpi, const char *own) {
    void *f = pmpi ? dlsym(RTLD_DEFAULT, pmpi) : NULL;
    return f ? f : dlsym(RTLD_NEXT, own);
}

void *sp_fortran_target(void **cache, const char *pmpi, const char *own) {
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (f) return f;
    f = fortran_lookup(pmpi, own);
    if (!f) {
        /* The program's link left the Fortran MPI libraries out (--as-needed: the plugin,
         * linked first, defines every Fortran MPI name the program uses): load them. */
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, load_fortran_libraries);
        f = fortran_lookup(pmpi, own);
    }
    if (f) __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    return f;
}


void sp_fortran_missing(const char *name, void *ierr) {
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL)) {
        fprintf(stderr, "[scope_profiler] the MPI library's %s was not found (is the MPI plugin linked after the MPI libraries?): the call failed with MPI_ERR_OTHER\n", name);
    }
    if (ierr) *(MPI_Fint *)ierr = MPI_ERR_OTHER;
}

int sp_f_in_place(const void *buf) {
    static const char *const names[] = {"mpi_fortran_in_place_", "mpi_fortran_in_place__", "mpi_fortran_in_place",
                                        "MPI_FORTRAN_IN_PLACE", "MPIR_F08_MPI_IN_PLACE", "mpifcmb5_"};
    static const void *addr[sizeof names / sizeof names[0]];
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) addr[i] = dlsym(RTLD_DEFAULT, names[i]);
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    if (!buf) return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (addr[i] && buf == addr[i]) return 1;
    /* MPICH keeps the address of mpif.h's MPI_IN_PLACE in a variable set at Fortran init. */
    static void *const *mpich_f;
    static int looked_f;
    if (!__atomic_load_n(&looked_f, __ATOMIC_ACQUIRE)) {
        mpich_f = (void *const *)dlsym(RTLD_DEFAULT, "MPIR_F_MPI_IN_PLACE");
        __atomic_store_n(&looked_f, 1, __ATOMIC_RELEASE);
    }
    return mpich_f && *mpich_f && buf == *mpich_f;
}

/* ------------------------------------------------------------------------------------------
 * Communicators and windows: size, kind and world ranks, cached per thread */

#define SLOTS 16
/* Up to this size a communicator's world ranks are kept as a table; beyond, translated one
 * at a time. */
#define TABLE_MAX 65536
#define WIN_TAG ((uint64_t)1 << 63)

typedef struct {
    uint64_t key; /* handle value, | WIN_TAG for a window; 0 = empty */
    unsigned gen;
    int size;
    int rank; /* own rank (local group); MPI_UNDEFINED for a window */
    int kind;
    MPI_Group group; /* the (remote) group, for translating; MPI_GROUP_NULL until needed */
    int *world;      /* world rank of each rank of `group`, or NULL */
} slot_t;

typedef struct {
    slot_t slot[SLOTS];
} thread_t;

static __thread thread_t *self __attribute__((tls_model("initial-exec")));
static unsigned generation = 1;
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

static int world_size = -1;
int sp_world_size_known;
static MPI_Group world_group = MPI_GROUP_NULL;
static pthread_mutex_t world_lock = PTHREAD_MUTEX_INITIALIZER;

static int mpi_usable(void) {
    int init = 0, fin = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fin);
    return init && !fin;
}

static void slot_clear(slot_t *s) {
    free(s->world);
    s->world = NULL;
    if (s->group != MPI_GROUP_NULL && mpi_usable()) PMPI_Group_free(&s->group);
    s->group = MPI_GROUP_NULL;
    s->key = 0;
}

static void thread_gone(void *p) {
    thread_t *t = p;
    for (int i = 0; i < SLOTS; i++) slot_clear(&t->slot[i]);
    free(t);
}

static void make_key(void) {
    pthread_key_create(&thread_key, thread_gone);
}

static thread_t *thread_state(void) {
    thread_t *t = self;
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    for (int i = 0; i < SLOTS; i++) t->slot[i].group = MPI_GROUP_NULL;
    pthread_once(&thread_key_once, make_key);
    pthread_setspecific(thread_key, t);
    self = t;
    return t;
}

static int get_world_size(void) {
    int n = __atomic_load_n(&world_size, __ATOMIC_ACQUIRE);
    if (n >= 0) return n;
    if (PMPI_Comm_size(MPI_COMM_WORLD, &n) != MPI_SUCCESS) return 0;
    __atomic_store_n(&world_size, n, __ATOMIC_RELEASE);
    __atomic_store_n(&sp_world_size_known, n, __ATOMIC_RELEASE);
    return n;
}

static MPI_Group get_world_group(void) {
    pthread_mutex_lock(&world_lock);
    if (world_group == MPI_GROUP_NULL && PMPI_Comm_group(MPI_COMM_WORLD, &world_group) != MPI_SUCCESS) world_group = MPI_GROUP_NULL;
    MPI_Group g = world_group;
    pthread_mutex_unlock(&world_lock);
    return g;
}

void sp_comm_forget(void) {
    __atomic_add_fetch(&generation, 1, __ATOMIC_ACQ_REL);
}

#define HANDLE(h) SP_HANDLE(h)

static slot_t *lookup(uint64_t key, MPI_Comm comm, MPI_Win win) {
    thread_t *t = thread_state();
    if (!t) return NULL;
    unsigned gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    slot_t *s = &t->slot[(key ^ (key >> 7) ^ (key >> 17)) % SLOTS];
    if (s->key == key && s->gen == gen) return s;
    slot_clear(s);
    s->gen = gen;
    s->rank = MPI_UNDEFINED;
    if (key & WIN_TAG) {
        if (PMPI_Win_get_group(win, &s->group) != MPI_SUCCESS) return NULL;
        PMPI_Group_size(s->group, &s->size);
        s->kind = SP_COMM_WIN;
    } else {
        int inter = 0;
        PMPI_Comm_test_inter(comm, &inter);
        PMPI_Comm_rank(comm, &s->rank);
        if (inter) {
            PMPI_Comm_remote_size(comm, &s->size);
            s->kind = SP_COMM_INTER;
        } else {
            PMPI_Comm_size(comm, &s->size);
            s->kind = SP_COMM_INTRA;
        }
    }
    s->key = key;
    return s;
}

void sp_comm(sp_mpi_event *e, MPI_Comm comm) {
    if (comm == MPI_COMM_NULL) return;
    e->comm = HANDLE(comm);
    if (comm == MPI_COMM_WORLD) {
        e->comm_kind = SP_COMM_WORLD;
        e->comm_size = get_world_size();
        return;
    }
    slot_t *s = lookup(e->comm, comm, MPI_WIN_NULL);
    if (!s) return;
    e->comm_size = s->size;
    e->comm_kind = comm == MPI_COMM_SELF ? SP_COMM_SELF : s->kind;
}

void sp_win(sp_mpi_event *e, MPI_Win win) {
    if (win == MPI_WIN_NULL) return;
    slot_t *s = lookup(HANDLE(win) | WIN_TAG, MPI_COMM_NULL, win);
    if (!s) return;
    e->comm = HANDLE(win) | WIN_TAG;
    e->comm_size = s->size;
    e->comm_kind = SP_COMM_WIN;
}

/* The slot of the event's communicator or window (the cache holds it: sp_comm came first). */
static slot_t *event_slot(const sp_mpi_event *e) {
    if (!self) return NULL;
    unsigned gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    slot_t *s = &self->slot[(e->comm ^ (e->comm >> 7) ^ (e->comm >> 17)) % SLOTS];
    return s->key == e->comm && s->gen == gen ? s : NULL;
}

/* World rank of rank r of the event's communicator (its remote group if an inter-communicator),
 * or of the event's window's group. */
static int world_rank(sp_mpi_event *e, MPI_Comm comm, int r) {
    if (r == MPI_PROC_NULL) return SP_PEER_NONE;
    if (r == MPI_ANY_SOURCE || r < 0) return SP_PEER_UNKNOWN;
    if (e->comm_kind == SP_COMM_WORLD) return r;
    if (e->comm_kind == SP_COMM_NONE) return SP_PEER_UNKNOWN;
    slot_t *s = event_slot(e);
    if (!s || r >= s->size) return SP_PEER_UNKNOWN;
    if (s->world) return s->world[r];
    MPI_Group wg = get_world_group();
    if (wg == MPI_GROUP_NULL) return SP_PEER_UNKNOWN;
    if (s->group == MPI_GROUP_NULL) {
        int rc = s->kind == SP_COMM_INTER ? PMPI_Comm_remote_group(comm, &s->group) : PMPI_Comm_group(comm, &s->group);
        if (rc != MPI_SUCCESS) {
            s->group = MPI_GROUP_NULL;
            return SP_PEER_UNKNOWN;
        }
    }
    int out = MPI_UNDEFINED;
    if (s->size <= TABLE_MAX && (s->world = malloc(sizeof(int) * 2 * (size_t)s->size))) {
        int *ranks = s->world + s->size;
        for (int i = 0; i < s->size; i++) ranks[i] = i;
        if (PMPI_Group_translate_ranks(s->group, s->size, ranks, wg, s->world) != MPI_SUCCESS) {
            free(s->world);
            s->world = NULL;
            return SP_PEER_UNKNOWN;
        }
        for (int i = 0; i < s->size; i++)
            if (s->world[i] == MPI_UNDEFINED) s->world[i] = SP_PEER_UNKNOWN;
        return s->world[r];
    }
    if (PMPI_Group_translate_ranks(s->group, 1, &r, wg, &out) != MPI_SUCCESS || out == MPI_UNDEFINED) return SP_PEER_UNKNOWN;
    return out;
}

/* The communicator of the event, as a C handle (NULL when it is a window or none). */
static MPI_Comm event_comm(const sp_mpi_event *e) {
    if (e->comm_kind == SP_COMM_WORLD) return MPI_COMM_WORLD;
    if (e->comm_kind == SP_COMM_NONE || e->comm_kind == SP_COMM_WIN) return MPI_COMM_NULL;
#if defined(OPEN_MPI)
    return (MPI_Comm)(uintptr_t)e->comm;
#else
    return (MPI_Comm)(uint32_t)e->comm;
#endif
}

static int peer(sp_mpi_event *e, int r) {
    return world_rank(e, event_comm(e), r);
}

/* ------------------------------------------------------------------------------------------
 * Bytes */

/* The sizes of the predefined datatypes (never freed, so never stale), found by handle in a
 * small open-addressing table filled once after MPI_Init (sp_pmpi.h looks a type up at its
 * home slot inline); any other datatype is asked. */
sp_type_size_t sp_type_sizes[SP_TYPE_SLOTS];
int sp_type_sizes_state; /* 0 not filled, 1 filling, 2 filled */

static void fill_type_sizes(void) {
    const MPI_Datatype predefined[] = {
        MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_BYTE, MPI_SHORT, MPI_UNSIGNED_SHORT, MPI_INT, MPI_UNSIGNED,
        MPI_LONG, MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_UNSIGNED_LONG_LONG, MPI_FLOAT, MPI_DOUBLE, MPI_LONG_DOUBLE,
        MPI_WCHAR, MPI_C_BOOL, MPI_INT8_T, MPI_INT16_T, MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T,
        MPI_UINT32_T, MPI_UINT64_T, MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_AINT, MPI_OFFSET, MPI_COUNT,
        MPI_PACKED, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT, MPI_SHORT_INT,
        MPI_INTEGER, MPI_REAL, MPI_DOUBLE_PRECISION, MPI_COMPLEX, MPI_DOUBLE_COMPLEX, MPI_LOGICAL, MPI_CHARACTER,
        MPI_2REAL, MPI_2DOUBLE_PRECISION, MPI_2INTEGER,
    };
    for (size_t i = 0; i < sizeof predefined / sizeof predefined[0]; i++) {
        MPI_Datatype t = predefined[i];
        MPI_Count size = 0;
        if (t == MPI_DATATYPE_NULL || PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size <= 0) continue;
        uint64_t h = HANDLE(t);
        for (unsigned k = sp_type_slot(h), n = 0; n < SP_TYPE_SLOTS; k = (k + 1) % SP_TYPE_SLOTS, n++) {
            if (sp_type_sizes[k].handle == 0 || sp_type_sizes[k].handle == h) {
                sp_type_sizes[k].handle = h;
                sp_type_sizes[k].size = size;
                break;
            }
        }
    }
}

static MPI_Count type_size(MPI_Datatype type) {
    int state = __atomic_load_n(&sp_type_sizes_state, __ATOMIC_ACQUIRE);
    if (state == 2) {
        uint64_t h = HANDLE(type);
        for (unsigned k = sp_type_slot(h), n = 0; n < SP_TYPE_SLOTS && sp_type_sizes[k].handle; k = (k + 1) % SP_TYPE_SLOTS, n++)
            if (sp_type_sizes[k].handle == h) return sp_type_sizes[k].size;
    } else if (state == 0 && __atomic_compare_exchange_n(&sp_type_sizes_state, &state, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        fill_type_sizes();
        __atomic_store_n(&sp_type_sizes_state, 2, __ATOMIC_RELEASE);
    }
    MPI_Count size = 0;
    if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS) return 0;
    return size;
}

uint64_t sp_bytes(int64_t count, MPI_Datatype type) {
    if (count <= 0 || type == MPI_DATATYPE_NULL) return 0;
    MPI_Count size = type_size(type);
    return size > 0 ? (uint64_t)count * (uint64_t)size : 0;
}

static int64_t element(const void *arr, int wide, int i) {
    return wide ? (int64_t)((const MPI_Count *)arr)[i] : (int64_t)((const int *)arr)[i];
}

static int64_t sum(const void *arr, int wide, int n) {
    int64_t s = 0;
    if (!arr) return 0;
    for (int i = 0; i < n; i++) {
        int64_t v = element(arr, wide, i);
        if (v > 0) s += v;
    }
    return s;
}

static MPI_Datatype type_at(const void *types, int fortran, int i) {
#if defined(OPEN_MPI)
    return fortran ? PMPI_Type_f2c(((const MPI_Fint *)types)[i]) : ((const MPI_Datatype *)types)[i];
#else
    return fortran ? MPI_Type_f2c(((const MPI_Fint *)types)[i]) : ((const MPI_Datatype *)types)[i];
#endif
}

static int in_place(const void *buf, int fortran) {
    return fortran ? sp_f_in_place(buf) : buf == MPI_IN_PLACE;
}

static int is_root(sp_mpi_event *e, int root) {
    if (e->comm_kind == SP_COMM_INTER) return root == MPI_ROOT;
    if (e->comm_kind == SP_COMM_WORLD) {
        int r = -1;
        PMPI_Comm_rank(MPI_COMM_WORLD, &r);
        return r == root;
    }
    slot_t *s = event_slot(e);
    return s && s->rank == root;
}

/* Members of the group the call sends to / receives from (the remote group of an
 * inter-communicator: sp_comm stored its size). */
static int members(sp_mpi_event *e) {
    return e->comm_size > 0 ? e->comm_size : 0;
}

static int own_rank(sp_mpi_event *e) {
    if (e->comm_kind == SP_COMM_WORLD) {
        int r = -1;
        PMPI_Comm_rank(MPI_COMM_WORLD, &r);
        return r;
    }
    slot_t *s = event_slot(e);
    return s ? s->rank : -1;
}

void sp_send_any(sp_mpi_event *e, int64_t count, MPI_Datatype type, int dest) {
    e->flags |= SP_EV_P2P;
    if (dest == MPI_PROC_NULL) return;
    e->sent += sp_bytes_of(count, type);
    e->dest = peer(e, dest);
}

static int status_source(const void *status, int fortran) {
    if (!status) return MPI_ANY_SOURCE;
    if (fortran) {
        if ((const MPI_Fint *)status == MPI_F_STATUS_IGNORE) return MPI_ANY_SOURCE;
#if defined(MPI_F08_STATUS_IGNORE)
        if (status == (const void *)MPI_F08_STATUS_IGNORE) return MPI_ANY_SOURCE;
#endif
#if defined(MPI_F_SOURCE)
        return ((const MPI_Fint *)status)[MPI_F_SOURCE];
#else
        return ((const MPI_Fint *)status)[0]; /* Open MPI: MPI_SOURCE comes first */
#endif
    }
    if (status == MPI_STATUS_IGNORE) return MPI_ANY_SOURCE;
    return ((const MPI_Status *)status)->MPI_SOURCE;
}

void sp_recv_any(sp_mpi_event *e, int64_t count, MPI_Datatype type, int source, const void *status, int fortran) {
    e->flags |= SP_EV_P2P;
    if (source == MPI_PROC_NULL) return;
    e->received += sp_bytes_of(count, type);
    if (source == MPI_ANY_SOURCE) source = status_source(status, fortran);
    e->source = peer(e, source);
}

void sp_mrecv(sp_mpi_event *e, int64_t count, MPI_Datatype type, const void *status, int fortran) {
    e->flags |= SP_EV_P2P;
    e->received += sp_bytes_of(count, type);
    e->source = SP_PEER_UNKNOWN; /* the message's communicator is not known here */
    (void)status;
    (void)fortran;
}

void sp_coll(sp_mpi_event *e) {
    e->flags |= SP_EV_COLL;
}

void sp_bcast(sp_mpi_event *e, int64_t count, MPI_Datatype type, int root) {
    e->flags |= SP_EV_COLL;
    if (e->comm_kind == SP_COMM_INTER && root == MPI_PROC_NULL) return;
    if (is_root(e, root))
        e->sent += sp_bytes_of(count, type);
    else
        e->received += sp_bytes_of(count, type);
}

void sp_reduce(sp_mpi_event *e, int64_t count, MPI_Datatype type, int root) {
    e->flags |= SP_EV_COLL;
    uint64_t b = sp_bytes_of(count, type);
    if (e->comm_kind == SP_COMM_INTER) {
        if (root == MPI_ROOT) e->received += b;
        else if (root != MPI_PROC_NULL) e->sent += b;
        return;
    }
    e->sent += b;
    if (is_root(e, root)) e->received += b;
}

void sp_reduce_scatter(sp_mpi_event *e, const void *recvcounts, int wide, MPI_Datatype type) {
    e->flags |= SP_EV_COLL;
    int n = e->comm_kind == SP_COMM_INTER ? 0 : members(e), me = own_rank(e);
    if (!recvcounts || n <= 0) return;
    e->sent += sp_bytes_of(sum(recvcounts, wide, n), type);
    if (me >= 0 && me < n) e->received += sp_bytes_of(element(recvcounts, wide, me), type);
}

void sp_reduce_scatter_block(sp_mpi_event *e, int64_t recvcount, MPI_Datatype type) {
    e->flags |= SP_EV_COLL;
    uint64_t b = sp_bytes_of(recvcount, type);
    e->sent += b * (uint64_t)members(e);
    e->received += b;
}

void sp_gather(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, int64_t rc, MPI_Datatype rt, int root, int fortran) {
    e->flags |= SP_EV_COLL;
    if (e->comm_kind == SP_COMM_INTER && root == MPI_PROC_NULL) return;
    int r = is_root(e, root);
    if (!(r && in_place(sendbuf, fortran)) && !(e->comm_kind == SP_COMM_INTER && r)) e->sent += sp_bytes_of(sc, st);
    if (r) e->received += sp_bytes_of(rc, rt) * (uint64_t)members(e);
}

void sp_gatherv(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, const void *rcounts, int wide, MPI_Datatype rt, int root, int fortran) {
    e->flags |= SP_EV_COLL;
    if (e->comm_kind == SP_COMM_INTER && root == MPI_PROC_NULL) return;
    int r = is_root(e, root);
    if (!(r && in_place(sendbuf, fortran)) && !(e->comm_kind == SP_COMM_INTER && r)) e->sent += sp_bytes_of(sc, st);
    if (r) e->received += sp_bytes_of(sum(rcounts, wide, members(e)), rt);
}

void sp_scatter(sp_mpi_event *e, int64_t sc, MPI_Datatype st, const void *recvbuf, int64_t rc, MPI_Datatype rt, int root, int fortran) {
    e->flags |= SP_EV_COLL;
    if (e->comm_kind == SP_COMM_INTER && root == MPI_PROC_NULL) return;
    int r = is_root(e, root);
    if (r) e->sent += sp_bytes_of(sc, st) * (uint64_t)members(e);
    if (!(r && in_place(recvbuf, fortran)) && !(e->comm_kind == SP_COMM_INTER && r)) e->received += sp_bytes_of(rc, rt);
}

void sp_scatterv(sp_mpi_event *e, const void *scounts, int wide, MPI_Datatype st, const void *recvbuf, int64_t rc, MPI_Datatype rt, int root, int fortran) {
    e->flags |= SP_EV_COLL;
    if (e->comm_kind == SP_COMM_INTER && root == MPI_PROC_NULL) return;
    int r = is_root(e, root);
    if (r) e->sent += sp_bytes_of(sum(scounts, wide, members(e)), st);
    if (!(r && in_place(recvbuf, fortran)) && !(e->comm_kind == SP_COMM_INTER && r)) e->received += sp_bytes_of(rc, rt);
}

void sp_allgather(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, int64_t rc, MPI_Datatype rt, int fortran) {
    e->flags |= SP_EV_COLL;
    uint64_t rb = sp_bytes_of(rc, rt);
    e->sent += in_place(sendbuf, fortran) ? rb : sp_bytes_of(sc, st);
    e->received += rb * (uint64_t)members(e);
}

void sp_allgatherv(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, const void *rcounts, int wide, MPI_Datatype rt, int fortran) {
    e->flags |= SP_EV_COLL;
    int n = members(e), me = own_rank(e);
    if (in_place(sendbuf, fortran)) {
        if (rcounts && me >= 0 && me < n && e->comm_kind != SP_COMM_INTER) e->sent += sp_bytes_of(element(rcounts, wide, me), rt);
    } else {
        e->sent += sp_bytes_of(sc, st);
    }
    e->received += sp_bytes_of(sum(rcounts, wide, n), rt);
}

void sp_alltoall(sp_mpi_event *e, const void *sendbuf, int64_t sc, MPI_Datatype st, int64_t rc, MPI_Datatype rt, int fortran) {
    e->flags |= SP_EV_COLL;
    uint64_t n = (uint64_t)members(e), rb = sp_bytes_of(rc, rt) * n;
    e->sent += in_place(sendbuf, fortran) ? rb : sp_bytes_of(sc, st) * n;
    e->received += rb;
}

void sp_alltoallv(sp_mpi_event *e, const void *sendbuf, const void *scounts, int wide, MPI_Datatype st, const void *rcounts, MPI_Datatype rt, int fortran) {
    e->flags |= SP_EV_COLL;
    int n = members(e);
    uint64_t rb = sp_bytes_of(sum(rcounts, wide, n), rt);
    e->sent += in_place(sendbuf, fortran) ? rb : sp_bytes_of(sum(scounts, wide, n), st);
    e->received += rb;
}

void sp_alltoallw(sp_mpi_event *e, const void *sendbuf, const void *scounts, int wide, const void *stypes, const void *rcounts, const void *rtypes, int fortran) {
    e->flags |= SP_EV_COLL;
    int n = members(e);
    uint64_t sb = 0, rb = 0;
    for (int i = 0; rcounts && rtypes && i < n; i++) rb += sp_bytes_of(element(rcounts, wide, i), type_at(rtypes, fortran, i));
    if (in_place(sendbuf, fortran))
        sb = rb;
    else
        for (int i = 0; scounts && stypes && i < n; i++) sb += sp_bytes_of(element(scounts, wide, i), type_at(stypes, fortran, i));
    e->sent += sb;
    e->received += rb;
}

/* In- and out-degree of a process topology. */
static void degrees(MPI_Comm comm, int *in, int *out) {
    int topo = MPI_UNDEFINED, rank = 0, weighted = 0;
    *in = *out = 0;
    if (comm == MPI_COMM_NULL || PMPI_Topo_test(comm, &topo) != MPI_SUCCESS) return;
    if (topo == MPI_CART) {
        int nd = 0;
        PMPI_Cartdim_get(comm, &nd);
        *in = *out = 2 * nd;
    } else if (topo == MPI_GRAPH) {
        int n = 0;
        PMPI_Comm_rank(comm, &rank);
        PMPI_Graph_neighbors_count(comm, rank, &n);
        *in = *out = n;
    } else if (topo == MPI_DIST_GRAPH) {
        PMPI_Dist_graph_neighbors_count(comm, in, out, &weighted);
    }
}

void sp_neighbor(sp_mpi_event *e, int64_t sc, const void *scounts, MPI_Datatype st, int64_t rc, const void *rcounts, int wide, MPI_Datatype rt) {
    e->flags |= SP_EV_COLL;
    int in = 0, out = 0;
    degrees(event_comm(e), &in, &out);
    e->sent += scounts ? sp_bytes_of(sum(scounts, wide, out), st) : sp_bytes_of(sc, st) * (uint64_t)out;
    e->received += rcounts ? sp_bytes_of(sum(rcounts, wide, in), rt) : sp_bytes_of(rc, rt) * (uint64_t)in;
}

static int win_peer(sp_mpi_event *e, int target) {
    if (target == MPI_PROC_NULL) return SP_PEER_NONE;
    return world_rank(e, MPI_COMM_NULL, target);
}

void sp_put(sp_mpi_event *e, int64_t count, MPI_Datatype type, int target) {
    e->flags |= SP_EV_RMA;
    if (target == MPI_PROC_NULL) return;
    e->sent += sp_bytes_of(count, type);
    e->dest = win_peer(e, target);
}

void sp_get(sp_mpi_event *e, int64_t count, MPI_Datatype type, int target) {
    e->flags |= SP_EV_RMA;
    if (target == MPI_PROC_NULL) return;
    e->received += sp_bytes_of(count, type);
    e->source = win_peer(e, target);
}

void sp_io(sp_mpi_event *e, int64_t count, MPI_Datatype type, int write) {
    e->flags |= SP_EV_IO;
    if (write)
        e->sent += sp_bytes_of(count, type);
    else
        e->received += sp_bytes_of(count, type);
}

void sp_poll(sp_mpi_event *e, const void *flag) {
    e->flags |= SP_EV_POLL;
    if (flag && !*(const int *)flag) e->flags |= SP_EV_EMPTY;
}

/* ------------------------------------------------------------------------------------------
 * Requests */

uint64_t *sp_req_alloc(int64_t n) {
    return n > (1 << 26) ? NULL : malloc(sizeof(uint64_t) * (size_t)n);
}

void sp_done_index(sp_mpi_event *e, sp_reqbuf *rb, const void *index, int fortran) {
    sp_reqs(e, SP_EV_COMPLETES, rb, 0, 0);
    int i = *(const int *)index;
    if (i == MPI_UNDEFINED) return;
    if (fortran) i -= 1;
    if (i < 0 || i >= rb->n) return;
    sp_reqs(e, SP_EV_COMPLETES, rb, i, 1);
}

/* Handle values are user-space addresses (Open MPI) or 32-bit integers (MPICH): bit 63 is free
 * to mark the completed ones while the others are cleared. */
#define DONE_MARK ((uint64_t)1 << 63)

void sp_done_some(sp_mpi_event *e, sp_reqbuf *rb, const void *outcount, const void *indices, int fortran) {
    sp_reqs(e, SP_EV_COMPLETES, rb, 0, 0);
    int k = *(const int *)outcount;
    if (k == MPI_UNDEFINED || k <= 0 || !indices) return;
    const int *idx = indices;
    /* Keep the completed ones in their places (each index is distinct and < n), clear the rest. */
    for (int j = 0; j < k && j < rb->n; j++) {
        int i = idx[j] - (fortran ? 1 : 0);
        if (i >= 0 && i < rb->n) rb->v[i] |= DONE_MARK;
    }
    for (int i = 0; i < rb->n; i++) rb->v[i] = (rb->v[i] & DONE_MARK) ? rb->v[i] & ~DONE_MARK : 0;
    sp_reqs(e, SP_EV_COMPLETES, rb, 0, rb->n);
}

void sp_test(sp_mpi_event *e, sp_reqbuf *rb, const void *flag) {
    e->flags |= SP_EV_POLL;
    if (!*(const int *)flag) {
        e->flags |= SP_EV_EMPTY;
        return;
    }
    sp_done(e, rb);
}

void sp_test_any(sp_mpi_event *e, sp_reqbuf *rb, const void *index, const void *flag, int fortran) {
    e->flags |= SP_EV_POLL;
    if (!*(const int *)flag) {
        e->flags |= SP_EV_EMPTY;
        return;
    }
    sp_done_index(e, rb, index, fortran);
}

void sp_test_some(sp_mpi_event *e, sp_reqbuf *rb, const void *outcount, const void *indices, int fortran) {
    e->flags |= SP_EV_POLL;
    int k = *(const int *)outcount;
    if (k == 0) {
        e->flags |= SP_EV_EMPTY;
        return;
    }
    sp_done_some(e, rb, outcount, indices, fortran);
}

void sp_started(sp_mpi_event *e, sp_reqbuf *rb) {
    sp_reqs(e, SP_EV_STARTS, rb, 0, rb->n);
}

void sp_freed(sp_mpi_event *e, sp_reqbuf *rb) {
    sp_reqs(e, SP_EV_FREES, rb, 0, rb->n);
}
