/* The MPI plugin's backend: the operations the core library needs, over the host's MPI.
 * Compiled once per MPI ABI family with that family's mpicc (mpi/build.rs). Every call goes to
 * the PMPI_ entry points, so the plugin's own traffic is never recorded as the program's MPI
 * calls, and runs on private duplicates of the host's communicators with MPI_ERRORS_RETURN. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "sp_mpi_plugin.h"

#if defined(OPEN_MPI)
#define SP_FAMILY "openmpi"
#else
#define SP_FAMILY "mpich"
#endif

/* Transfers are split into pieces of at most this many bytes (MPI counts are int). */
#define PIECE ((uint64_t)1 << 30)

typedef struct { MPI_Comm comm; } sp_comm;
typedef struct { MPI_File fh; MPI_Comm comm; } sp_file;

static int state(void) {
    int init = 0, fin = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fin);
    if (fin) return SP_MPI_FINALIZED;
    return init ? SP_MPI_USABLE : SP_MPI_NOT_INITIALIZED;
}

static int world(int *rank, int *size) {
    int rc = PMPI_Comm_rank(MPI_COMM_WORLD, rank);
    if (rc != MPI_SUCCESS) return rc;
    return PMPI_Comm_size(MPI_COMM_WORLD, size);
}

static int comm_dup(int from_fortran, int32_t fint, void **out) {
    MPI_Comm base = from_fortran ? PMPI_Comm_f2c((MPI_Fint)fint) : MPI_COMM_WORLD;
    *out = NULL;
    if (base == MPI_COMM_NULL) return MPI_ERR_COMM;
    sp_comm *c = malloc(sizeof *c);
    if (!c) return MPI_ERR_NO_MEM;
    int rc = PMPI_Comm_dup(base, &c->comm);
    if (rc != MPI_SUCCESS) {
        free(c);
        return rc;
    }
    PMPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    *out = c;
    return MPI_SUCCESS;
}

static int comm_free(void *comm) {
    sp_comm *c = comm;
    if (!c) return MPI_SUCCESS;
    int rc = PMPI_Comm_free(&c->comm);
    free(c);
    return rc;
}

static int comm_rank(void *comm, int *rank) { return PMPI_Comm_rank(((sp_comm *)comm)->comm, rank); }
static int comm_size(void *comm, int *size) { return PMPI_Comm_size(((sp_comm *)comm)->comm, size); }

static int p2p_send(void *comm, const void *buf, uint64_t len, int dest, int tag) {
    const char *p = buf;
    do {
        int n = (int)(len < PIECE ? len : PIECE);
        int rc = PMPI_Send(p, n, MPI_BYTE, dest, tag, ((sp_comm *)comm)->comm);
        if (rc != MPI_SUCCESS) return rc;
        p += n;
        len -= (uint64_t)n;
    } while (len > 0);
    return MPI_SUCCESS;
}

static int p2p_recv(void *comm, void *buf, uint64_t len, int source, int tag) {
    char *p = buf;
    do {
        int n = (int)(len < PIECE ? len : PIECE);
        int rc = PMPI_Recv(p, n, MPI_BYTE, source, tag, ((sp_comm *)comm)->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        p += n;
        len -= (uint64_t)n;
    } while (len > 0);
    return MPI_SUCCESS;
}

static int barrier(void *comm) { return PMPI_Barrier(((sp_comm *)comm)->comm); }

static int bcast(void *comm, void *buf, uint64_t len, int root) {
    char *p = buf;
    do {
        int n = (int)(len < PIECE ? len : PIECE);
        int rc = PMPI_Bcast(p, n, MPI_BYTE, root, ((sp_comm *)comm)->comm);
        if (rc != MPI_SUCCESS) return rc;
        p += n;
        len -= (uint64_t)n;
    } while (len > 0);
    return MPI_SUCCESS;
}

/* The exact sum of two's-complement 128-bit integers (two uint64_t, low word first). */
static void sum_i128(void *in, void *inout, int *len, MPI_Datatype *type) {
    const uint64_t *a = in;
    uint64_t *b = inout;
    (void)type;
    for (int i = 0; i < *len; i++) {
        uint64_t lo = a[2 * i] + b[2 * i];
        b[2 * i + 1] += a[2 * i + 1] + (lo < a[2 * i]);
        b[2 * i] = lo;
    }
}

/* Made on first use (every rank reaches its first 128-bit reduction at the same point), kept
 * until MPI_Finalize frees them. */
static MPI_Datatype i128_type = MPI_DATATYPE_NULL;
static MPI_Op i128_sum = MPI_OP_NULL;

static int i128_setup(void) {
    if (i128_sum != MPI_OP_NULL) return MPI_SUCCESS;
    int rc = PMPI_Type_contiguous(2, MPI_UINT64_T, &i128_type);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&i128_type);
    if (rc == MPI_SUCCESS) rc = PMPI_Op_create(sum_i128, 1, &i128_sum);
    return rc;
}

static int types(int type, int op, MPI_Datatype *t, MPI_Op *o, size_t *width) {
    if (type == SP_MPI_I128) {
        if (op != SP_MPI_SUM) return MPI_ERR_OP;
        int rc = i128_setup();
        if (rc != MPI_SUCCESS) return rc;
        *t = i128_type;
        *o = i128_sum;
        *width = 16;
        return MPI_SUCCESS;
    }
    switch (type) {
    case SP_MPI_I64: *t = MPI_INT64_T; break;
    case SP_MPI_U64: *t = MPI_UINT64_T; break;
    case SP_MPI_F64: *t = MPI_DOUBLE; break;
    default: return MPI_ERR_TYPE;
    }
    switch (op) {
    case SP_MPI_SUM: *o = MPI_SUM; break;
    case SP_MPI_MIN: *o = MPI_MIN; break;
    case SP_MPI_MAX: *o = MPI_MAX; break;
    default: return MPI_ERR_OP;
    }
    *width = 8;
    return MPI_SUCCESS;
}

static int allreduce(void *comm, const void *in, void *out, int count, int type, int op) {
    MPI_Datatype t;
    MPI_Op o;
    size_t w;
    int rc = types(type, op, &t, &o, &w);
    if (rc != MPI_SUCCESS) return rc;
    return PMPI_Allreduce(in, out, count, t, o, ((sp_comm *)comm)->comm);
}

static int exscan(void *comm, const void *in, void *out, int count, int type, int op) {
    MPI_Datatype t;
    MPI_Op o;
    size_t w;
    int rank, rc = types(type, op, &t, &o, &w);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Exscan(in, out, count, t, o, ((sp_comm *)comm)->comm);
    if (rc != MPI_SUCCESS) return rc;
    PMPI_Comm_rank(((sp_comm *)comm)->comm, &rank);
    if (rank == 0) memset(out, 0, (size_t)count * w);
    return MPI_SUCCESS;
}

static int gather(void *comm, const void *in, uint64_t len, void *out, int root) {
    if (len > (uint64_t)PIECE) return MPI_ERR_COUNT;
    return PMPI_Gather(in, (int)len, MPI_BYTE, out, (int)len, MPI_BYTE, root, ((sp_comm *)comm)->comm);
}

static int file_open(void *comm, const char *path, void **out) {
    *out = NULL;
    sp_file *f = malloc(sizeof *f);
    if (!f) return MPI_ERR_NO_MEM;
    f->comm = ((sp_comm *)comm)->comm;
    int rc = PMPI_File_open(f->comm, (char *)path, MPI_MODE_WRONLY, MPI_INFO_NULL, &f->fh);
    if (rc != MPI_SUCCESS) {
        free(f);
        return rc;
    }
    PMPI_File_set_errhandler(f->fh, MPI_ERRORS_RETURN);
    *out = f;
    return MPI_SUCCESS;
}

/* Every rank takes part in the same number of collective writes: the largest number of pieces
 * any rank needs (ranks with less to write take part with nothing). */
static int file_write_at_all(void *file, uint64_t offset, const void *buf, uint64_t len) {
    sp_file *f = file;
    uint64_t mine = (len + PIECE - 1) / PIECE, rounds = 0;
    int rc = PMPI_Allreduce(&mine, &rounds, 1, MPI_UINT64_T, MPI_MAX, f->comm);
    if (rc != MPI_SUCCESS) return rc;
    /* Offsets are bytes from the file's start, whatever view file_write_pieces_all left. */
    rc = PMPI_File_set_view(f->fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
    if (rc != MPI_SUCCESS) return rc;
    const char *p = buf;
    int failed = MPI_SUCCESS;
    for (uint64_t i = 0; i < rounds; i++) {
        int n = (int)(len < PIECE ? len : PIECE);
        rc = PMPI_File_write_at_all(f->fh, (MPI_Offset)offset, n ? p : NULL, n, MPI_BYTE, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS && failed == MPI_SUCCESS) failed = rc;
        p += n;
        offset += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return failed;
}

/* One collective transfer of a rank's pieces (see sp_mpi_plugin.h): a file view made of the
 * pieces (an hindexed filetype over bytes, left set; file_write_at_all sets the plain byte view
 * again) and one MPI_File_write_all from the pieces' own buffers (an hindexed memory type of
 * their addresses: nothing is copied together first). A rank whose pieces are unusable (out
 * of order, too large, no memory) still takes part, with nothing, and gets the error: every
 * rank makes the same collective calls. */
static int file_write_pieces_all(void *file, uint32_t n, const uint64_t *offsets, const uint64_t *lens, const void *const *bufs) {
    sp_file *f = file;
    uint64_t total = 0;
    int blocks = 0, bad = MPI_SUCCESS;
    for (uint32_t i = 0; i < n; i++) {
        total += lens[i];
        if (lens[i] > 0) blocks++;
        if (i > 0 && offsets[i] < offsets[i - 1] + lens[i - 1]) bad = MPI_ERR_ARG;
    }
    if (total > PIECE) bad = MPI_ERR_COUNT;
    int *lengths = NULL;
    MPI_Aint *places = NULL, *addresses = NULL;
    MPI_Datatype view = MPI_BYTE, memory = MPI_BYTE;
    if (bad == MPI_SUCCESS && blocks > 0) {
        lengths = malloc((size_t)blocks * sizeof *lengths);
        places = malloc((size_t)blocks * sizeof *places);
        addresses = malloc((size_t)blocks * sizeof *addresses);
        if (!lengths || !places || !addresses) bad = MPI_ERR_NO_MEM;
    }
    if (bad == MPI_SUCCESS && blocks > 0) {
        int k = 0;
        for (uint32_t i = 0; i < n && bad == MPI_SUCCESS; i++) {
            if (lens[i] == 0) continue;
            lengths[k] = (int)lens[i];
            places[k] = (MPI_Aint)offsets[i];
            bad = PMPI_Get_address(bufs[i], &addresses[k]);
            k++;
        }
        if (bad == MPI_SUCCESS) bad = PMPI_Type_create_hindexed(blocks, lengths, places, MPI_BYTE, &view);
        if (bad == MPI_SUCCESS) {
            bad = PMPI_Type_commit(&view);
            if (bad != MPI_SUCCESS) PMPI_Type_free(&view);
        }
        if (bad != MPI_SUCCESS) view = MPI_BYTE;
        if (bad == MPI_SUCCESS) bad = PMPI_Type_create_hindexed(blocks, lengths, addresses, MPI_BYTE, &memory);
        if (bad == MPI_SUCCESS) {
            bad = PMPI_Type_commit(&memory);
            if (bad != MPI_SUCCESS) PMPI_Type_free(&memory);
        }
        if (bad != MPI_SUCCESS) memory = MPI_BYTE;
    }
    free(lengths);
    free(places);
    free(addresses);
    int writing = bad == MPI_SUCCESS && blocks > 0;
    int rc = PMPI_File_set_view(f->fh, 0, MPI_BYTE, writing ? view : MPI_BYTE, "native", MPI_INFO_NULL);
    if (bad == MPI_SUCCESS) bad = rc;
    writing = writing && rc == MPI_SUCCESS;
    rc = PMPI_File_write_all(f->fh, writing ? MPI_BOTTOM : NULL, writing ? 1 : 0, writing ? memory : MPI_BYTE, MPI_STATUS_IGNORE);
    if (bad == MPI_SUCCESS) bad = rc;
    if (view != MPI_BYTE) PMPI_Type_free(&view);
    if (memory != MPI_BYTE) PMPI_Type_free(&memory);
    return bad;
}

static int file_close(void *file) {
    sp_file *f = file;
    if (!f) return MPI_SUCCESS;
    int rc = PMPI_File_close(&f->fh);
    free(f);
    return rc;
}

static void (*finalize_cb)(void);

static int delete_fn(MPI_Comm comm, int key, void *val, void *extra) {
    (void)comm; (void)key; (void)val; (void)extra;
    if (finalize_cb) finalize_cb();
    return MPI_SUCCESS;
}

static int at_finalize(void (*cb)(void)) {
    static int key = MPI_KEYVAL_INVALID;
    finalize_cb = cb;
    if (key != MPI_KEYVAL_INVALID) return MPI_SUCCESS;
    int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &key, NULL);
    if (rc != MPI_SUCCESS) return rc;
    return PMPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
}

static void error_string(int code, char *buf, int cap) {
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (cap <= 0) return;
    if (PMPI_Error_string(code, msg, &n) != MPI_SUCCESS) n = 0;
    if (n >= cap) n = cap - 1;
    memcpy(buf, msg, (size_t)n);
    buf[n] = 0;
}

static void library_version(char *buf, int cap) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    if (cap <= 0) return;
    if (PMPI_Get_library_version(v, &n) != MPI_SUCCESS) n = 0;
    if (n >= cap) n = cap - 1;
    memcpy(buf, v, (size_t)n);
    buf[n] = 0;
}

static int32_t world_fint(void) { return (int32_t)PMPI_Comm_c2f(MPI_COMM_WORLD); }

static const sp_mpi_ops OPS = {
    .struct_size = sizeof(sp_mpi_ops),
    .version = SP_MPI_PLUGIN_VERSION,
    .family = SP_FAMILY,
    .state = state,
    .world = world,
    .comm_dup = comm_dup,
    .comm_free = comm_free,
    .comm_rank = comm_rank,
    .comm_size = comm_size,
    .send = p2p_send,
    .recv = p2p_recv,
    .barrier = barrier,
    .bcast = bcast,
    .allreduce = allreduce,
    .exscan = exscan,
    .gather = gather,
    .file_open = file_open,
    .file_write_at_all = file_write_at_all,
    .file_write_pieces_all = file_write_pieces_all,
    .file_close = file_close,
    .at_finalize = at_finalize,
    .error_string = error_string,
    .library_version = library_version,
    .world_fint = world_fint,
};

__attribute__((visibility("default"))) const sp_mpi_ops *sp_mpi_plugin_ops(void) { return &OPS; }
