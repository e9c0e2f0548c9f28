/* An MPI program that never calls sp_*: its MPI calls are recorded by the MPI plugin alone
 * (linked with -lscope_profiler_mpi, or preloaded). It prints, per rank, what it did:
 *   EXPECT <rank> <routine> <calls> <bytes sent> <bytes received> <empty polls>
 * (calls of the routine summed over threads and communicators; -1: not checked),
 *   COMPLETE <rank> <completing routine> <origin routine> <requests> <bytes>
 * Modes (argv[1]): "all" (point-to-point, collectives, nonblocking, polls, MPI_Pcontrol),
 * "threads" (MPI_THREAD_MULTIPLE, two threads calling MPI at once), "abort" (rank 1 calls
 * MPI_Abort halfway); built with -DWITH_REGIONS the same calls run inside the program's own
 * regions (linked with libscope_profiler too). Each rank writes its lines to its own file,
 * expect.<rank> in the working directory (the launcher may interleave the ranks' stdout). */
#include <mpi.h>
#include "mpi_init_mode.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef WITH_REGIONS
#include <scope_profiler.h>
#define REGION_START(n) sp_region_start(n)
#define REGION_STOP(n) sp_region_stop(n)
#else
#define REGION_START(n) ((void)0)
#define REGION_STOP(n) ((void)0)
#endif

static int rank, size;
static FILE *out;
/* Bytes this rank sent to and received from each world rank (point-to-point). */
static long peer_sent[64], peer_recv[64];
#define SENT(to, n) (peer_sent[(to)] += (n))
#define RECV(from, n) (peer_recv[(from)] += (n))

static void expect(const char *routine, long calls, long sent, long recv, long polls) {
    fprintf(out, "EXPECT\t%d\t%s\t%ld\t%ld\t%ld\t%ld\n", rank, routine, calls, sent, recv, polls);
}

static void complete(const char *routine, const char *origin, long n, long bytes) {
    fprintf(out, "COMPLETE\t%d\t%s\t%s\t%ld\t%ld\n", rank, routine, origin, n, bytes);
}

/* Point-to-point in a ring: 3 blocking messages of 100 ints each way, MPI_Sendrecv of 7
 * doubles, nonblocking exchange of 10 ints completed by MPI_Waitall, one MPI_Isend completed
 * by MPI_Wait, and a message to MPI_PROC_NULL (no bytes, no peer). */
static void p2p(void) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int buf[100], in[100];
    memset(buf, 0, sizeof buf);
    for (int i = 0; i < 3; i++) {
        if (rank % 2 == 0) {
            MPI_Send(buf, 100, MPI_INT, right, 1, MPI_COMM_WORLD);
            MPI_Recv(in, 100, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            /* MPI_ANY_SOURCE: the peer comes from the status. */
            MPI_Status st;
            MPI_Recv(in, 100, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st);
            MPI_Send(buf, 100, MPI_INT, right, 1, MPI_COMM_WORLD);
        }
        SENT(right, 400);
        RECV(left, 400);
    }
    expect("MPI_Send", 3, 3 * 400, 0, 0);
    expect("MPI_Recv", 3, 0, 3 * 400, 0);
    double d[7] = {0}, e[7];
    MPI_Sendrecv(d, 7, MPI_DOUBLE, right, 2, e, 7, MPI_DOUBLE, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    SENT(right, 56);
    RECV(left, 56);
    expect("MPI_Sendrecv", 1, 56, 56, 0);
    MPI_Send(buf, 100, MPI_INT, MPI_PROC_NULL, 3, MPI_COMM_WORLD);
    MPI_Request r[2];
    MPI_Status sts[2];
    MPI_Irecv(in, 10, MPI_INT, left, 4, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(buf, 10, MPI_INT, right, 4, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, sts);
    MPI_Request one;
    MPI_Isend(buf, 5, MPI_INT, right, 5, MPI_COMM_WORLD, &one);
    MPI_Recv(in, 5, MPI_INT, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&one, MPI_STATUS_IGNORE);
    SENT(right, 40 + 20);
    RECV(left, 40 + 20);
    /* Send: 3 x 400 + one to MPI_PROC_NULL (no bytes); Recv: 3 x 400 + 20. */
    expect("MPI_Send", 4, 3 * 400, 0, 0);
    expect("MPI_Recv", 4, 0, 3 * 400 + 20, 0);
    expect("MPI_Irecv", 1, 0, 40, 0);
    expect("MPI_Isend", 2, 40 + 20, 0, 0);
    expect("MPI_Waitall", 1, 0, 0, 0);
    expect("MPI_Wait", 1, 0, 0, 0);
    complete("MPI_Wait", "MPI_Isend", 1, 20);
    /* Persistent requests: their traffic is counted when they are started. */
    MPI_Request pr[2];
    MPI_Recv_init(in, 8, MPI_INT, left, 6, MPI_COMM_WORLD, &pr[0]);
    MPI_Send_init(buf, 8, MPI_INT, right, 6, MPI_COMM_WORLD, &pr[1]);
    for (int i = 0; i < 3; i++) {
        MPI_Startall(2, pr);
        MPI_Waitall(2, pr, sts);
    }
    MPI_Request_free(&pr[0]);
    MPI_Request_free(&pr[1]);
    SENT(right, 3 * 32);
    RECV(left, 3 * 32);
    expect("MPI_Recv_init", 1, 0, 0, 0);
    expect("MPI_Send_init", 1, 0, 0, 0);
    expect("MPI_Startall", 3, 3 * 32, 3 * 32, 0);
    expect("MPI_Request_free", 2, 0, 0, 0);
    expect("MPI_Waitall", 4, 0, 0, 0);
    complete("MPI_Waitall", "MPI_Irecv", 1, 40);
    complete("MPI_Waitall", "MPI_Isend", 1, 40);
    complete("MPI_Waitall", "MPI_Recv_init", 3, 3 * 32);
    complete("MPI_Waitall", "MPI_Send_init", 3, 3 * 32);
    /* MPI_Waitany, one request at a time. */
    MPI_Irecv(in, 3, MPI_INT, left, 7, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(buf, 3, MPI_INT, right, 7, MPI_COMM_WORLD, &r[1]);
    for (int i = 0; i < 2; i++) {
        int index;
        MPI_Waitany(2, r, &index, MPI_STATUS_IGNORE);
    }
    SENT(right, 12);
    RECV(left, 12);
    expect("MPI_Irecv", 2, 0, 40 + 12, 0);
    expect("MPI_Isend", 3, 40 + 20 + 12, 0, 0);
    expect("MPI_Waitany", 2, 0, 0, 0);
    complete("MPI_Waitany", "MPI_Irecv", 1, 12);
    complete("MPI_Waitany", "MPI_Isend", 1, 12);
}

/* Collectives on MPI_COMM_WORLD. */
static void collectives(void) {
    double x = rank, y;
    for (int i = 0; i < 5; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    expect("MPI_Allreduce", 5, 40, 40, 0);
    char b[256] = {0};
    MPI_Bcast(b, 256, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(b, 64, MPI_CHAR, size - 1, MPI_COMM_WORLD);
    expect("MPI_Bcast", 2, (rank == 0 ? 256 : 0) + (rank == size - 1 ? 64 : 0), (rank == 0 ? 0 : 256) + (rank == size - 1 ? 0 : 64), 0);
    for (int i = 0; i < 3; i++) MPI_Barrier(MPI_COMM_WORLD);
    expect("MPI_Barrier", 3, 0, 0, 0);
    int mine[4] = {rank, rank, rank, rank}, *all = malloc(sizeof(int) * 4 * (size_t)size);
    MPI_Gather(mine, 4, MPI_INT, all, 4, MPI_INT, 0, MPI_COMM_WORLD);
    expect("MPI_Gather", 1, 16, rank == 0 ? 16L * size : 0, 0);
    int *sb = calloc((size_t)size * 2, sizeof(int)), *rb = calloc((size_t)size * 2, sizeof(int));
    MPI_Alltoall(sb, 2, MPI_INT, rb, 2, MPI_INT, MPI_COMM_WORLD);
    expect("MPI_Alltoall", 1, 8L * size, 8L * size, 0);
    /* In place: the root's contribution is already in its buffer. */
    if (rank == 0)
        MPI_Reduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    else
        MPI_Reduce(&x, NULL, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    expect("MPI_Reduce", 1, 8, rank == 0 ? 8 : 0, 0);
    /* A split communicator: two halves. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    int hs;
    MPI_Comm_size(half, &hs);
    for (int i = 0; i < 2; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, half);
    expect("MPI_Allreduce", 7, 56, 56, 0);
    MPI_Comm_free(&half);
    expect("MPI_Comm_split", 1, 0, 0, 0);
    expect("MPI_Comm_free", 1, 0, 0, 0);
    free(all);
    free(sb);
    free(rb);
}

/* Polls: rank 0 waits for a message from rank 1 with MPI_Test and MPI_Iprobe loops; the empty
 * ones are counted, not stored; MPI_Pcontrol(0) hides calls. */
static void polls(void) {
    long tests = 0, probes = 0;
    int v = 0;
    if (rank == 0) {
        MPI_Request r;
        int flag = 0;
        MPI_Irecv(&v, 1, MPI_INT, 1, 9, MPI_COMM_WORLD, &r);
        MPI_Barrier(MPI_COMM_WORLD); /* rank 1 sends after the barrier */
        while (!flag) {
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
            if (!flag) tests++;
        }
        flag = 0;
        while (!flag) {
            MPI_Iprobe(1, 10, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            if (!flag) probes++;
        }
        MPI_Recv(&v, 1, MPI_INT, 1, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        RECV(1, 8);
        expect("MPI_Test", 1, 0, 0, tests);
        expect("MPI_Iprobe", 1, 0, 0, probes);
        expect("MPI_Irecv", 3, 0, 40 + 12 + 4, 0);
        expect("MPI_Recv", 5, 0, 3 * 400 + 20 + 4, 0);
        complete("MPI_Test", "MPI_Irecv", 1, 4);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        usleep(20000);
        MPI_Send(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
        usleep(20000);
        MPI_Send(&v, 1, MPI_INT, 0, 10, MPI_COMM_WORLD);
        SENT(0, 8);
        expect("MPI_Send", 6, 3 * 400 + 8, 0, 0);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    expect("MPI_Barrier", 4, 0, 0, 0);
    MPI_Pcontrol(0);
    for (int i = 0; i < 10; i++) MPI_Barrier(MPI_COMM_WORLD); /* not recorded */
    MPI_Pcontrol(1);
    MPI_Barrier(MPI_COMM_WORLD);
    expect("MPI_Barrier", 5, 0, 0, 0);
}

struct job {
    MPI_Comm comm;
    int calls;
    MPI_Request *wait; /* a request the main thread created, completed here */
};

static void *worker(void *arg) {
    struct job *j = arg;
    double x = 1, y;
    for (int i = 0; i < j->calls; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, j->comm);
    if (j->wait) MPI_Wait(j->wait, MPI_STATUS_IGNORE);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    init_mpi_for(mode, &argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char name[64];
    snprintf(name, sizeof name, "expect.%d", rank);
    if (!(out = fopen(name, "w"))) {
        perror(name);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    if (!strcmp(mode, "threads")) {
        /* Two threads, each on its own duplicate of MPI_COMM_WORLD, 50 and 30 allreduces; the
         * second also completes a receive the main thread started (from this rank itself). */
        double v = 1, w = 0;
        MPI_Request req;
        MPI_Irecv(&w, 1, MPI_DOUBLE, rank, 8, MPI_COMM_WORLD, &req);
        MPI_Send(&v, 1, MPI_DOUBLE, rank, 8, MPI_COMM_WORLD);
        struct job jobs[2] = {{MPI_COMM_NULL, 50, NULL}, {MPI_COMM_NULL, 30, &req}};
        MPI_Comm_dup(MPI_COMM_WORLD, &jobs[0].comm);
        MPI_Comm_dup(MPI_COMM_WORLD, &jobs[1].comm);
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &jobs[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        expect("MPI_Allreduce", 80, 640, 640, 0);
        expect("MPI_Comm_dup", 2, 0, 0, 0);
        expect("MPI_Wait", 1, 0, 0, 0);
        complete("MPI_Wait", "MPI_Irecv", 1, 8);
        peer_sent[rank] += 8;
        peer_recv[rank] += 8;
        MPI_Comm_free(&jobs[0].comm);
        MPI_Comm_free(&jobs[1].comm);
        expect("MPI_Comm_free", 2, 0, 0, 0);
    } else {
        REGION_START("exchange");
        p2p();
        REGION_STOP("exchange");
        REGION_START("reduce");
        collectives();
        REGION_STOP("reduce");
        if (!strcmp(mode, "abort")) {
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 1) {
                fflush(out);
                MPI_Abort(MPI_COMM_WORLD, 7);
            }
            sleep(30); /* killed by the abort */
        }
        polls();
    }
    expect("MPI_Comm_rank", 1, 0, 0, 0);
    expect("MPI_Comm_size", !strcmp(mode, "threads") ? 1 : 2, 0, 0, 0);
    for (int p = 0; p < size && p < 64; p++)
        if (peer_sent[p] || peer_recv[p]) fprintf(out, "PEER\t%d\t%d\t%ld\t%ld\n", rank, p, peer_sent[p], peer_recv[p]);
    fclose(out);
    MPI_Finalize();
    return 0;
}
