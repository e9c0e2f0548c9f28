/* The MPI wrappers against what real programs do that is easy to get wrong (2 ranks, never
 * calls sp_*): requests that share one handle value (every request that completed at once:
 * Open MPI's ompi_request_empty, MPICH's built-in completed request), completed by Waitall,
 * Waitany, Waitsome, Testall, Testsome, freed, or copied to another variable first;
 * persistent requests and freed active ones; MPI_IN_PLACE, MPI_BOTTOM, MPI_STATUS(ES)_IGNORE,
 * MPI_PROC_NULL; an inter-communicator; thousands of communicators alive at once and handles
 * reused after MPI_Comm_free; and (mode "threads") MPI_THREAD_MULTIPLE with threads that
 * complete each other's shared-handle requests. Each rank writes what it did to expect.<rank>,
 * in the format of tests/c/mpi_calls.c (EXPECT, COMPLETE, PEER lines; totals so far).
 * Usage: mpirun -np 2 mpi_hostile [all|threads] [requests per burst] */
#include <mpi.h>
#include "mpi_init_mode.h"
/* MPICH declares the status arrays with a size gcc then holds MPI_STATUSES_IGNORE to. */
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, other;
static FILE *out;
static long peer_sent[2], peer_recv[2];
static long burst = 1000;

/* Running totals per routine, printed at the end. */
#define MAXR 64
static struct {
    const char *name;
    long calls, sent, recv, polls;
} tot[MAXR];
static struct {
    const char *routine, *origin;
    long n, bytes;
} comp[MAXR];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void add(const char *routine, long calls, long sent, long recv, long polls) {
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < MAXR && tot[i].name && strcmp(tot[i].name, routine)) i++;
    if (i == MAXR) abort();
    tot[i].name = routine;
    tot[i].calls += calls;
    tot[i].sent += sent;
    tot[i].recv += recv;
    tot[i].polls += polls;
    pthread_mutex_unlock(&lock);
}

static void completed(const char *routine, const char *origin, long n, long bytes) {
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < MAXR && comp[i].routine && (strcmp(comp[i].routine, routine) || strcmp(comp[i].origin, origin))) i++;
    if (i == MAXR) abort();
    comp[i].routine = routine;
    comp[i].origin = origin;
    comp[i].n += n;
    comp[i].bytes += bytes;
    pthread_mutex_unlock(&lock);
}

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "rank %d: FAIL %s\n", rank, what);
        MPI_Abort(MPI_COMM_WORLD, 5);
    }
}

/* Requests to self and to the other rank, small enough to complete at once (so that MPI
 * gives many of them one handle), completed by one MPI_Waitall with MPI_STATUSES_IGNORE. */
static void shared_waitall(MPI_Comm comm) {
    long n = burst;
    MPI_Request *r = malloc(sizeof(MPI_Request) * (size_t)(4 * n));
    int *sb = calloc((size_t)n, sizeof(int)), *rb = calloc((size_t)(2 * n), sizeof(int));
    int crank;
    MPI_Comm_rank(comm, &crank);
    for (long i = 0; i < n; i++) {
        MPI_Isend(&sb[i], 1, MPI_INT, crank, 100, comm, &r[i]);
        MPI_Isend(&sb[i], 1, MPI_INT, 1 - crank, 101, comm, &r[n + i]);
    }
    for (long i = 0; i < n; i++) {
        MPI_Irecv(&rb[i], 1, MPI_INT, crank, 100, comm, &r[2 * n + i]);
        MPI_Irecv(&rb[n + i], 1, MPI_INT, 1 - crank, 101, comm, &r[3 * n + i]);
    }
    MPI_Waitall((int)(4 * n), r, MPI_STATUSES_IGNORE);
    add("MPI_Comm_rank", 1, 0, 0, 0);
    add("MPI_Isend", 2 * n, 8 * n, 0, 0);
    add("MPI_Irecv", 2 * n, 0, 8 * n, 0);
    add("MPI_Waitall", 1, 0, 0, 0);
    completed("MPI_Waitall", "MPI_Isend", 2 * n, 8 * n);
    completed("MPI_Waitall", "MPI_Irecv", 2 * n, 8 * n);
    free(r);
    free(sb);
    free(rb);
}

/* Shared handles completed one at a time (Waitany, Waitsome, Testall, Testsome, Wait), with
 * the handles copied to another array first, and freed. */
static void shared_other_completions(void) {
    enum { K = 40 };
    MPI_Request q[2 * K], tmp;
    int sb[K][K], rb[K][K];
    memset(sb, 0, sizeof sb);
    long bytes = 0;
    /* Waitany: sizes 1..K ints to self, copied through a temporary. */
    for (int i = 0; i < K; i++) {
        MPI_Isend(sb[i], i + 1, MPI_INT, rank, 200 + i, MPI_COMM_WORLD, &tmp);
        q[i] = tmp;
        bytes += 4 * (i + 1);
    }
    for (int i = K - 1; i >= 0; i--) {
        MPI_Irecv(rb[i], i + 1, MPI_INT, rank, 200 + i, MPI_COMM_WORLD, &tmp);
        q[K + i] = tmp;
    }
    for (int i = 0; i < 2 * K; i++) {
        int index;
        MPI_Waitany(2 * K, q, &index, MPI_STATUS_IGNORE);
        check(index != MPI_UNDEFINED, "Waitany found a request");
    }
    peer_sent[rank] += bytes;
    peer_recv[rank] += bytes;
    add("MPI_Isend", K, bytes, 0, 0);
    add("MPI_Irecv", K, 0, bytes, 0);
    add("MPI_Waitany", 2 * K, 0, 0, 0);
    completed("MPI_Waitany", "MPI_Isend", K, bytes);
    completed("MPI_Waitany", "MPI_Irecv", K, bytes);
    /* Waitsome over requests to MPI_PROC_NULL (complete at once, no bytes, no peer). */
    for (int i = 0; i < K; i++) MPI_Isend(sb[0], 3, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &q[i]);
    for (int i = 0; i < K; i++) MPI_Irecv(rb[0], 3, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &q[K + i]);
    long calls = 0;
    for (;;) {
        int outcount, idx[2 * K];
        MPI_Waitsome(2 * K, q, &outcount, idx, MPI_STATUSES_IGNORE);
        calls++;
        if (outcount == MPI_UNDEFINED) break;
    }
    add("MPI_Isend", K, 0, 0, 0);
    add("MPI_Irecv", K, 0, 0, 0);
    add("MPI_Waitsome", calls, 0, 0, 0);
    completed("MPI_Waitsome", "MPI_Isend", K, 0);
    completed("MPI_Waitsome", "MPI_Irecv", K, 0);
    /* Testall and Testsome to self. */
    MPI_Isend(sb[1], 2, MPI_INT, rank, 300, MPI_COMM_WORLD, &q[0]);
    MPI_Irecv(rb[1], 2, MPI_INT, rank, 300, MPI_COMM_WORLD, &q[1]);
    long empty = 0;
    int flag = 0;
    while (!flag) {
        MPI_Testall(2, q, &flag, MPI_STATUSES_IGNORE);
        if (!flag) empty++;
    }
    add("MPI_Testall", 1, 0, 0, empty);
    completed("MPI_Testall", "MPI_Isend", 1, 8);
    completed("MPI_Testall", "MPI_Irecv", 1, 8);
    MPI_Isend(sb[1], 5, MPI_INT, rank, 301, MPI_COMM_WORLD, &q[0]);
    MPI_Irecv(rb[1], 5, MPI_INT, rank, 301, MPI_COMM_WORLD, &q[1]);
    long done = 0, tcalls = 0;
    empty = 0;
    while (done < 2) {
        int outcount, idx[2];
        MPI_Testsome(2, q, &outcount, idx, MPI_STATUSES_IGNORE);
        if (outcount == 0) empty++;
        else tcalls++;
        if (outcount > 0) done += outcount;
    }
    add("MPI_Testsome", tcalls, 0, 0, empty);
    completed("MPI_Testsome", "MPI_Isend", 1, 20);
    completed("MPI_Testsome", "MPI_Irecv", 1, 20);
    peer_sent[rank] += 8 + 20;
    peer_recv[rank] += 8 + 20;
    add("MPI_Isend", 2, 28, 0, 0);
    add("MPI_Irecv", 2, 0, 28, 0);
    /* A freed shared-handle request is gone; the next one with the same handle is waited. */
    MPI_Isend(sb[0], 7, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &q[0]);
    MPI_Request_free(&q[0]);
    MPI_Isend(sb[0], 9, MPI_INT, rank, 302, MPI_COMM_WORLD, &q[0]);
    MPI_Recv(rb[0], 9, MPI_INT, rank, 302, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&q[0], MPI_STATUS_IGNORE);
    peer_sent[rank] += 36;
    peer_recv[rank] += 36;
    add("MPI_Isend", 2, 36, 0, 0);
    add("MPI_Request_free", 1, 0, 0, 0);
    add("MPI_Recv", 1, 0, 36, 0);
    add("MPI_Wait", 1, 0, 0, 0);
    completed("MPI_Wait", "MPI_Isend", 1, 36);
}

/* Persistent requests to the other rank, and a freed active nonpersistent request whose
 * handle the next request may reuse. */
static void persistent_and_freed(void) {
    int sb[8] = {0}, rb[8];
    MPI_Request pr[2], r;
    MPI_Send_init(sb, 8, MPI_INT, other, 400, MPI_COMM_WORLD, &pr[0]);
    MPI_Recv_init(rb, 8, MPI_INT, other, 400, MPI_COMM_WORLD, &pr[1]);
    for (int i = 0; i < 4; i++) {
        MPI_Start(&pr[1]);
        MPI_Start(&pr[0]);
        MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&pr[0]);
    MPI_Request_free(&pr[1]);
    add("MPI_Send_init", 1, 0, 0, 0);
    add("MPI_Recv_init", 1, 0, 0, 0);
    add("MPI_Start", 8, 4 * 32, 4 * 32, 0);
    add("MPI_Waitall", 4, 0, 0, 0);
    add("MPI_Request_free", 2, 0, 0, 0);
    completed("MPI_Waitall", "MPI_Send_init", 4, 4 * 32);
    completed("MPI_Waitall", "MPI_Recv_init", 4, 4 * 32);
    peer_sent[other] += 4 * 32;
    peer_recv[other] += 4 * 32;
    /* Freed while active: the message still arrives. */
    MPI_Isend(sb, 6, MPI_INT, other, 401, MPI_COMM_WORLD, &r);
    MPI_Request_free(&r);
    MPI_Recv(rb, 6, MPI_INT, other, 401, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Isend(sb, 2, MPI_INT, other, 402, MPI_COMM_WORLD, &r);
    MPI_Recv(rb, 2, MPI_INT, other, 402, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    peer_sent[other] += 24 + 8;
    peer_recv[other] += 24 + 8;
    add("MPI_Isend", 2, 32, 0, 0);
    add("MPI_Request_free", 1, 0, 0, 0);
    add("MPI_Recv", 2, 0, 32, 0);
    add("MPI_Wait", 1, 0, 0, 0);
    completed("MPI_Wait", "MPI_Isend", 1, 8);
}

/* MPI_IN_PLACE in every collective that has it; MPI_BOTTOM with absolute addresses;
 * MPI_PROC_NULL and MPI_ANY_SOURCE with MPI_STATUS_IGNORE. */
static void buffers(void) {
    double x[2] = {1, 2};
    MPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    add("MPI_Allreduce", 1, 16, 16, 0);
    int g[8] = {0};
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 3, MPI_INT, MPI_COMM_WORLD);
    add("MPI_Allgather", 1, 12, 12L * size, 0);
    MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 2, MPI_INT, MPI_COMM_WORLD);
    add("MPI_Alltoall", 1, 8L * size, 8L * size, 0);
    if (rank == 0)
        MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, 4, MPI_INT, 0, MPI_COMM_WORLD);
    else
        MPI_Gather(g, 4, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD);
    add("MPI_Gather", 1, rank == 0 ? 0 : 16, rank == 0 ? 16L * size : 0, 0);
    if (rank == 0)
        MPI_Scatter(g, 4, MPI_INT, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD);
    else
        MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, g, 4, MPI_INT, 0, MPI_COMM_WORLD);
    add("MPI_Scatter", 1, rank == 0 ? 16L * size : 0, rank == 0 ? 0 : 16, 0);
    MPI_Reduce_scatter_block(MPI_IN_PLACE, g, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    add("MPI_Reduce_scatter_block", 1, 8L * size, 8, 0);
    MPI_Scan(MPI_IN_PLACE, x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    add("MPI_Scan", 1, 8, 8, 0);
    /* MPI_BOTTOM: datatypes with absolute addresses. */
    int a[5] = {1, 2, 3, 4, 5}, b[5];
    MPI_Aint at_a, at_b;
    MPI_Get_address(a, &at_a);
    MPI_Get_address(b, &at_b);
    int five = 5;
    MPI_Datatype int_t = MPI_INT, ta, tb;
    MPI_Type_create_struct(1, &five, &at_a, &int_t, &ta);
    MPI_Type_create_struct(1, &five, &at_b, &int_t, &tb);
    MPI_Type_commit(&ta);
    MPI_Type_commit(&tb);
    MPI_Sendrecv(MPI_BOTTOM, 1, ta, other, 500, MPI_BOTTOM, 1, tb, other, 500, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(b[4] == 5, "MPI_BOTTOM receive");
    MPI_Bcast(MPI_BOTTOM, 1, rank == 0 ? ta : tb, 0, MPI_COMM_WORLD);
    MPI_Type_free(&ta);
    MPI_Type_free(&tb);
    add("MPI_Sendrecv", 1, 20, 20, 0);
    add("MPI_Bcast", 1, rank == 0 ? 20 : 0, rank == 0 ? 0 : 20, 0);
    peer_sent[other] += 20;
    peer_recv[other] += 20;
    /* MPI_PROC_NULL: calls, no bytes, no peer. */
    MPI_Send(a, 5, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
    MPI_Recv(b, 5, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(a, 5, MPI_INT, MPI_PROC_NULL, 0, b, 5, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    add("MPI_Send", 1, 0, 0, 0);
    add("MPI_Recv", 1, 0, 0, 0);
    add("MPI_Sendrecv", 1, 0, 0, 0);
    /* MPI_ANY_SOURCE with MPI_STATUS_IGNORE: the bytes count, the peer is not known. */
    MPI_Send(a, 3, MPI_INT, other, 501, MPI_COMM_WORLD);
    MPI_Recv(b, 3, MPI_INT, MPI_ANY_SOURCE, 501, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    peer_sent[other] += 12;
    add("MPI_Send", 1, 12, 0, 0);
    add("MPI_Recv", 1, 0, 12, 0);
}

/* An inter-communicator between the two ranks (each its own group). */
static void intercommunicator(void) {
    MPI_Comm local, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, other, 600, &inter);
    int v[4] = {0}, w[4];
    if (rank == 0) {
        MPI_Send(v, 4, MPI_INT, 0, 601, inter);
        MPI_Recv(w, 4, MPI_INT, 0, 602, inter, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(w, 4, MPI_INT, 0, 601, inter, MPI_STATUS_IGNORE);
        MPI_Send(v, 4, MPI_INT, 0, 602, inter);
    }
    peer_sent[other] += 16;
    peer_recv[other] += 16;
    MPI_Allreduce(v, w, 1, MPI_INT, MPI_SUM, inter);
    /* Rank 0's group is the root's (MPI_ROOT); rank 1's receives from its remote rank 0. */
    MPI_Bcast(v, 4, MPI_INT, rank == 0 ? MPI_ROOT : 0, inter);
    MPI_Comm merged;
    MPI_Intercomm_merge(inter, rank, &merged);
    MPI_Comm_free(&merged);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
    add("MPI_Comm_split", 1, 0, 0, 0);
    add("MPI_Intercomm_create", 1, 0, 0, 0);
    add("MPI_Send", 1, 16, 0, 0);
    add("MPI_Recv", 1, 0, 16, 0);
    add("MPI_Allreduce", 1, 4, 4, 0);
    add("MPI_Bcast", 1, rank == 0 ? 16 : 0, rank == 0 ? 0 : 16, 0);
    add("MPI_Intercomm_merge", 1, 0, 0, 0);
    add("MPI_Comm_free", 3, 0, 0, 0);
}

/* Thousands of communicators alive at once, then handles reused after MPI_Comm_free. */
static void many_communicators(void) {
    enum { C = 2000, REUSE = 300 };
    MPI_Comm *c = malloc(sizeof(MPI_Comm) * C);
    int one = 1, sum;
    for (int i = 0; i < C; i++) MPI_Comm_dup(MPI_COMM_WORLD, &c[i]);
    for (int i = 0; i < C; i++) {
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c[i]);
        check(sum == size, "allreduce over a duplicate");
    }
    for (int i = 0; i < C; i++) MPI_Comm_free(&c[i]);
    for (int i = 0; i < REUSE; i++) {
        MPI_Comm d;
        /* Alternating sizes under perhaps the same handle: a split into singletons, a dup. */
        if (i % 2)
            MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &d);
        else
            MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, d);
        check(sum == (i % 2 ? 1 : size), "allreduce over a reused handle");
        MPI_Comm_free(&d);
    }
    free(c);
    add("MPI_Comm_dup", C + REUSE / 2, 0, 0, 0);
    add("MPI_Comm_split", REUSE / 2, 0, 0, 0);
    add("MPI_Allreduce", C + REUSE, 4L * (C + REUSE), 4L * (C + REUSE), 0);
    add("MPI_Comm_free", C + REUSE, 0, 0, 0);
}

struct job {
    MPI_Comm comm;
    MPI_Request *others; /* requests another thread created, completed here */
    int nothers;
};

static void *worker(void *arg) {
    struct job *j = arg;
    shared_waitall(j->comm);
    if (j->others) MPI_Waitall(j->nothers, j->others, MPI_STATUSES_IGNORE);
    return NULL;
}

static void threads(void) {
    /* The main thread creates shared-handle requests to self that a worker completes. */
    enum { M = 100 };
    MPI_Request r[2 * M];
    int sb[M] = {0}, rb[M];
    for (int i = 0; i < M; i++) MPI_Isend(&sb[i], 1, MPI_INT, rank, 700, MPI_COMM_WORLD, &r[i]);
    for (int i = 0; i < M; i++) MPI_Irecv(&rb[i], 1, MPI_INT, rank, 700, MPI_COMM_WORLD, &r[M + i]);
    struct job jobs[2] = {{MPI_COMM_NULL, NULL, 0}, {MPI_COMM_NULL, r, 2 * M}};
    MPI_Comm_dup(MPI_COMM_WORLD, &jobs[0].comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &jobs[1].comm);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    MPI_Comm_free(&jobs[0].comm);
    MPI_Comm_free(&jobs[1].comm);
    /* shared_waitall counted its own calls (twice, one per thread); the main thread's: */
    add("MPI_Isend", M, 4 * M, 0, 0);
    add("MPI_Irecv", M, 0, 4 * M, 0);
    add("MPI_Waitall", 1, 0, 0, 0);
    add("MPI_Comm_dup", 2, 0, 0, 0);
    add("MPI_Comm_free", 2, 0, 0, 0);
    completed("MPI_Waitall", "MPI_Isend", M, 4 * M);
    completed("MPI_Waitall", "MPI_Irecv", M, 4 * M);
    /* Each thread's burst: n to self and n to the other rank, each way. */
    peer_sent[rank] += 4 * M + 2 * 4 * burst;
    peer_recv[rank] += 4 * M + 2 * 4 * burst;
    peer_sent[other] += 2 * 4 * burst;
    peer_recv[other] += 2 * 4 * burst;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    if (argc > 2) burst = atol(argv[2]);
    init_mpi_for(mode, &argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    add("MPI_Comm_rank", 1, 0, 0, 0);
    add("MPI_Comm_size", 1, 0, 0, 0);
    if (size != 2 || burst <= 0) {
        fprintf(stderr, "usage: mpirun -np 2 mpi_hostile [all|threads] [requests per burst]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    other = 1 - rank;
    char name[64];
    snprintf(name, sizeof name, "expect.%d", rank);
    if (!(out = fopen(name, "w"))) {
        perror(name);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    if (!strcmp(mode, "threads")) {
        threads();
    } else {
        shared_waitall(MPI_COMM_WORLD);
        peer_sent[rank] += 4 * burst;
        peer_recv[rank] += 4 * burst;
        peer_sent[other] += 4 * burst;
        peer_recv[other] += 4 * burst;
        shared_other_completions();
        persistent_and_freed();
        buffers();
        intercommunicator();
        many_communicators();
    }
    for (int i = 0; i < MAXR && tot[i].name; i++)
        fprintf(out, "EXPECT\t%d\t%s\t%ld\t%ld\t%ld\t%ld\n", rank, tot[i].name, tot[i].calls, tot[i].sent, tot[i].recv, tot[i].polls);
    for (int i = 0; i < MAXR && comp[i].routine; i++)
        fprintf(out, "COMPLETE\t%d\t%s\t%s\t%ld\t%ld\n", rank, comp[i].routine, comp[i].origin, comp[i].n, comp[i].bytes);
    for (int p = 0; p < 2; p++)
        if (peer_sent[p] || peer_recv[p]) fprintf(out, "PEER\t%d\t%d\t%ld\t%ld\n", rank, p, peer_sent[p], peer_recv[p]);
    fclose(out);
    MPI_Finalize();
    return 0;
}
