/* A nested-region MPI program whose region costs are known, for the analysis exports (Hatchet,
 * Thicket, Extra-P, OTF2). Usage: mpirun -np P analysis_series (the file is named by
 * SCOPE_PROFILER_FILE; the MPI plugin sets the profiler up at MPI_Init).
 * Every rank runs
 *   main { 2P x solve { compute { sleep 3 ms }  exchange { sleep 1 ms; MPI_Allreduce } } }
 * so compute is called 2P times and costs 6P ms per rank (linear in the rank count P), and
 * exchange 2P ms plus the reductions. Sleeps, not spins: the times stay near these on a loaded
 * machine.
 * A second thread of every rank runs background { sleep 2 ms } three times. compute is timed with
 * SP_REGION_START/STOP (so its source line is known: COMPUTE_LINE below).
 * Metadata of its own: problem_size = 1000 * P (every rank), seed = the rank (differs per
 * rank), and on rank 0 the refusals of bad keys and values, printed as `STATUS what code`. */
#include <scope_profiler.h>
#include <mpi.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us) {
    struct timespec t = {us / 1000000L, (us % 1000000L) * 1000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void *background(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        sp_region_start("background");
        sleep_us(2000);
        sp_region_stop("background");
    }
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t helper;
    int rank = 0, size = 1;
    char buf[64];
    printf("STATUS before_setup %d\n", sp_set_metadata("early", "1"));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    snprintf(buf, sizeof buf, "%d", 1000 * size);
    sp_set_metadata("problem_size", buf);
    snprintf(buf, sizeof buf, "%d", rank);
    sp_set_metadata("seed", buf);
    if (rank == 0) {
        char long_key[80], long_value[5000];
        memset(long_key, 'k', sizeof long_key - 1);
        long_key[sizeof long_key - 1] = '\0';
        memset(long_value, 'v', sizeof long_value - 1);
        long_value[sizeof long_value - 1] = '\0';
        printf("STATUS empty %d\n", sp_set_metadata("", "x"));
        printf("STATUS slash %d\n", sp_set_metadata("a/b", "x"));
        printf("STATUS utf8 %d\n", sp_set_metadata("bad\xff", "x"));
        printf("STATUS long_key %d\n", sp_set_metadata(long_key, "x"));
        printf("STATUS long_value %d\n", sp_set_metadata("big", long_value));
        printf("STATUS null %d\n", sp_set_metadata("k", NULL));
        printf("STATUS ok %d\n", sp_set_metadata("code_version", "v1.10"));
        int too_many = 0;
        for (int i = 0; i < 70; i++) {
            snprintf(buf, sizeof buf, "extra_%d", i);
            int rc = sp_set_metadata(buf, "1");
            if (rc != SP_OK && too_many == 0) too_many = rc;
        }
        printf("STATUS too_many %d\n", too_many);
    }
    printf("COMPUTE_LINE %d\n", __LINE__ + 5);
    sp_region_start("main");
    pthread_create(&helper, NULL, background, NULL);
    for (int i = 0; i < 2 * size; i++) {
        sp_region_start("solve");
        SP_REGION_START("compute");
        sleep_us(3000);
        SP_REGION_STOP("compute");
        sp_region_start("exchange");
        sleep_us(1000);
        double x = rank, y = 0;
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        sp_region_stop("exchange");
        sp_region_stop("solve");
    }
    pthread_join(helper, NULL);
    sp_region_stop("main");
    MPI_Finalize();
    printf("STATUS after_finalize %d\n", sp_set_metadata("late", "1"));
    return 0;
}
