/* OpenMP constructs beyond parallel regions and loops, recorded through the OpenMP tools
 * interface without annotation (clang -fopenmp, libomp): a host `teams` league, nested
 * parallelism, tasks with dependences, taskloop, cancellation, and a program that exits inside
 * a parallel region. The test finds each construct's line by the marker comment on it.
 * Usage: omp_odd_constructs MODE [ROUNDS]; MODE: teams, nested, depend, taskloop, cancel, exit */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile double sink;

__attribute__((noinline)) static void work(int i) {
    double x = 0;
    for (int k = 0; k < 2000 * (i + 1); k++) x += k * 0.5;
    sink += x;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "teams";
    int n = argc > 2 ? atoi(argv[2]) : 3;
    if (!strcmp(mode, "teams")) {
        for (int r = 0; r < n; r++) {
#pragma omp teams num_teams(2) /* TEAMS */
            work(omp_get_team_num());
        }
    } else if (!strcmp(mode, "nested")) {
        omp_set_max_active_levels(2);
        for (int r = 0; r < n; r++) {
#pragma omp parallel num_threads(2) /* OUTER */
            {
#pragma omp parallel num_threads(2) /* INNER */
                work(omp_get_thread_num());
                work(2);
            }
        }
    } else if (!strcmp(mode, "depend")) {
        for (int r = 0; r < n; r++) {
            int a = 0, b = 0;
#pragma omp parallel num_threads(2) /* DEPEND_PARALLEL */
            {
#pragma omp single /* DEPEND_SINGLE */
                {
#pragma omp task depend(out : a) /* TASK_A */
                    {
                        work(1);
                        a = 1;
                    }
#pragma omp task depend(in : a) depend(out : b) /* TASK_B */
                    {
                        work(2);
                        b = a + 1;
                    }
#pragma omp taskwait /* TASKWAIT */
                }
                work(b);
            }
        }
    } else if (!strcmp(mode, "taskloop")) {
        for (int r = 0; r < n; r++) {
#pragma omp parallel num_threads(2) /* TASKLOOP_PARALLEL */
            {
#pragma omp single /* TASKLOOP_SINGLE */
                {
#pragma omp taskloop num_tasks(4) /* TASKLOOP */
                    for (int i = 0; i < 8; i++) work(i);
                }
                work(1);
            }
        }
    } else if (!strcmp(mode, "cancel")) {
        for (int r = 0; r < n; r++) {
#pragma omp parallel num_threads(2) /* CANCEL_PARALLEL */
            {
#pragma omp for schedule(dynamic) /* CANCEL_LOOP */
                for (int i = 0; i < 100; i++) {
                    work(1);
#pragma omp cancel for if (i == 3)
#pragma omp cancellation point for
                }
#pragma omp barrier /* CANCEL_BARRIER */
                work(1);
            }
        }
    } else if (!strcmp(mode, "exit")) {
#pragma omp parallel num_threads(2) /* EXIT_PARALLEL */
        {
#pragma omp barrier /* EXIT_BARRIER */
            if (omp_get_thread_num() == 0) {
                printf("exit inside the parallel region\n");
                fflush(stdout);
                exit(0);
            }
            work(3);
#pragma omp barrier /* EXIT_SECOND_BARRIER */
            work(3);
        }
    } else {
        return 2;
    }
    printf("done %s\n", mode);
    return 0;
}
