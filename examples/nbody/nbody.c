/* n-body: all-pairs gravity with a leapfrog-style integration step, profiled with
 * scope_profiler.
 *
 *   nbody [bodies] [steps]            (defaults: 2048 bodies, 20 steps)
 *
 * Each step computes the forces twice, with two variants of the inner loop, each its own
 * region, so the profile shows what the divisions cost:
 *   force_div  three divisions by dist^3
 *   force_rcp  one reciprocal, then three multiplications
 * then moves the bodies ("update"). Built with -DUSE_MPI (target nbody_mpi), the bodies
 * are distributed over the ranks in blocks and the positions exchanged with MPI_Allgather
 * after every step ("exchange"); the profile then holds every rank.
 *
 * The force and update regions annotate their FLOPs with sp_region_add_flops, counted per
 * pair of bodies the way the hardware's FLOP events count them (a division and a square
 * root are one FLOP each; no FMA contraction assumed):
 *   force_div  20 per pair: 3 (dx, dy, dz) + 6 (r2 with softening) + 2 (sqrt, r2*sqrt)
 *              + 9 (three times m*d/dist3 and the sum)
 *   force_rcp  18 per pair: 3 + 6 + 3 (sqrt, multiply, m/...) + 6 (three times d*inv and the sum)
 *   update     12 per body: six multiply-adds
 * so `sptool inspect` shows GFLOP/s on any machine (and, with SCOPE_PROFILER_PERF_EVENTS=flops
 * on a CPU with a PMU, the counted FLOPs beside them).
 *
 * Nothing here is LIKWID specific: run it under `likwid-perfctr -m` or
 * `likwid-mpirun -m` with SCOPE_PROFILER_LIKWID=1 to get hardware counters per region. */
#include <scope_profiler.h>

#ifdef USE_MPI
#include <mpi.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Position and mass of one body: what the ranks exchange. */
typedef struct {
    double x, y, z, m;
} body;

static const double softening2 = 1e-6;
static const double dt = 1e-3;

/* Accelerations of bodies [first, first + n) from all `total` bodies: three divisions. */
static void force_div(const body *all, long total, long first, long n, double *acc) {
    for (long i = 0; i < n; i++) {
        const body bi = all[first + i];
        double ax = 0.0, ay = 0.0, az = 0.0;
        for (long j = 0; j < total; j++) {
            const double dx = all[j].x - bi.x, dy = all[j].y - bi.y, dz = all[j].z - bi.z;
            const double r2 = dx * dx + dy * dy + dz * dz + softening2;
            const double dist3 = r2 * sqrt(r2);
            ax += all[j].m * dx / dist3;
            ay += all[j].m * dy / dist3;
            az += all[j].m * dz / dist3;
        }
        acc[3 * i] = ax;
        acc[3 * i + 1] = ay;
        acc[3 * i + 2] = az;
    }
}

/* The same with one reciprocal (times the mass) and three multiplications. */
static void force_rcp(const body *all, long total, long first, long n, double *acc) {
    for (long i = 0; i < n; i++) {
        const body bi = all[first + i];
        double ax = 0.0, ay = 0.0, az = 0.0;
        for (long j = 0; j < total; j++) {
            const double dx = all[j].x - bi.x, dy = all[j].y - bi.y, dz = all[j].z - bi.z;
            const double r2 = dx * dx + dy * dy + dz * dz + softening2;
            const double inv = all[j].m / (r2 * sqrt(r2));
            ax += dx * inv;
            ay += dy * inv;
            az += dz * inv;
        }
        acc[3 * i] = ax;
        acc[3 * i + 1] = ay;
        acc[3 * i + 2] = az;
    }
}

static long parse(const char *arg, long fallback, const char *what) {
    if (arg == NULL) return fallback;
    char *end = NULL;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || v < 1) {
        fprintf(stderr, "nbody: %s must be a positive integer, not '%s'\n", what, arg);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
#ifdef USE_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#endif
    long requested = parse(argc > 1 ? argv[1] : NULL, 2048, "bodies");
    const long steps = parse(argc > 2 ? argv[2] : NULL, 20, "steps");
    /* Equal blocks per rank: round the body count up to a multiple of the ranks. */
    const long local = (requested + size - 1) / size;
    const long total = local * size;
    const long first = local * rank;

    /* Options from the environment (SCOPE_PROFILER_FILE, _LIKWID, _VERBOSE, ...). With MPI
     * initialized, the library profiles over MPI_COMM_WORLD and rank 0 writes one file. */
    int rc = sp_setup(NULL);
    if (rc < 0) fprintf(stderr, "nbody: profiling is off: %s\n", sp_last_error());
    const int32_t h_div = sp_region_register("force_div");
    const int32_t h_rcp = sp_region_register("force_rcp");
    const int32_t h_update = sp_region_register("update");
    const double pairs = (double)local * (double)total;

    body *all = malloc((size_t)total * sizeof *all);
    double *vel = calloc((size_t)(3 * local), sizeof *vel);
    double *acc_div = malloc((size_t)(3 * local) * sizeof *acc_div);
    double *acc = malloc((size_t)(3 * local) * sizeof *acc);
    if (all == NULL || vel == NULL || acc_div == NULL || acc == NULL) {
        fprintf(stderr, "nbody: out of memory\n");
        return 1;
    }
    /* The same start on every rank: quasi-random positions in the unit cube. */
    for (long i = 0; i < total; i++) {
        const double t = (double)i;
        all[i].x = fmod(t * 0.618033988749895, 1.0);
        all[i].y = fmod(t * 0.754877666246693, 1.0);
        all[i].z = fmod(t * 0.569840290998053, 1.0);
        all[i].m = 1.0 / (double)total;
    }

    double max_rel = 0.0;
    for (long s = 0; s < steps; s++) {
        sp_region_start("step");

        sp_region_start("force_div");
        force_div(all, total, first, local, acc_div);
        sp_region_stop("force_div");
        sp_region_add_flops(h_div, 20.0 * pairs);

        sp_region_start("force_rcp");
        force_rcp(all, total, first, local, acc);
        sp_region_stop("force_rcp");
        sp_region_add_flops(h_rcp, 18.0 * pairs);

        for (long k = 0; k < 3 * local; k++) {
            const double d = fabs(acc_div[k] - acc[k]) / (fabs(acc[k]) + 1e-300);
            if (d > max_rel) max_rel = d;
        }

        sp_region_start("update");
        for (long i = 0; i < local; i++) {
            body *b = &all[first + i];
            vel[3 * i] += dt * acc[3 * i];
            vel[3 * i + 1] += dt * acc[3 * i + 1];
            vel[3 * i + 2] += dt * acc[3 * i + 2];
            b->x += dt * vel[3 * i];
            b->y += dt * vel[3 * i + 1];
            b->z += dt * vel[3 * i + 2];
        }
        sp_region_stop("update");
        sp_region_add_flops(h_update, 12.0 * (double)local);

#ifdef USE_MPI
        sp_region_start("exchange");
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, (int)(4 * local), MPI_DOUBLE, MPI_COMM_WORLD);
        sp_region_stop("exchange");
#endif
        sp_region_stop("step");
    }

    /* Momentum of the local bodies, summed: a checksum that must not drift. */
    double p[3] = {0.0, 0.0, 0.0};
    for (long i = 0; i < local; i++) {
        for (int d = 0; d < 3; d++) p[d] += all[first + i].m * vel[3 * i + d];
    }
#ifdef USE_MPI
    MPI_Allreduce(MPI_IN_PLACE, p, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &max_rel, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
    if (rank == 0) {
        printf("nbody: %ld bodies, %ld steps, %d rank(s), %ld pair interactions per variant\n", total, steps, size,
               total * total * steps);
        printf("nbody: total momentum (%.3e, %.3e, %.3e), largest relative difference div/rcp %.1e\n", p[0], p[1],
               p[2], max_rel);
    }

    free(all);
    free(vel);
    free(acc_div);
    free(acc);
    /* Writes the profile and prints the summary table (rank 0). */
    fflush(stdout);
    sp_finalize();
#ifdef USE_MPI
    MPI_Finalize();
#endif
    return 0;
}
