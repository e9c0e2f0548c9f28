/* Calls a host may make with hostile values, and prints what each returned.
 *
 *   hostile_api flops OUT.h5
 *       FLOP and byte counts that are, or add up to, infinity or NaN; two threads whose
 *       totals are each finite but whose sum is not. Prints "<call> <status>" per call.
 *   hostile_api merge OUT.h5 INPUT...
 *       sp_merge_rank_files on the inputs (which may be damaged), from a host with a second
 *       thread running; prints "merge <status> <sp_last_error>" and then "host alive". */
#include <scope_profiler.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t h_split;
static volatile int spinning = 1;

static void *add_huge(void *arg) {
    (void)arg;
    int rc = sp_region_add_flops(h_split, 1e308);
    printf("thread_add_flops %d\n", rc);
    return NULL;
}

static void *spin(void *arg) {
    (void)arg;
    volatile double x = 0;
    while (spinning) x += 1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: hostile_api flops OUT.h5 | merge OUT.h5 INPUT...\n");
        return 2;
    }
    if (strcmp(argv[1], "merge") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, spin, NULL);
        int rc = sp_merge_rank_files(argv[2], (const char *const *)(argv + 3), (size_t)(argc - 3));
        printf("merge %d %s\n", rc, rc == SP_OK ? "" : sp_last_error());
        spinning = 0;
        pthread_join(t, NULL);
        printf("host alive\n");
        fflush(stdout);
        return 0;
    }
    sp_options o;
    sp_options_init(&o);
    o.file_path = argv[2];
    if (sp_setup(&o) != SP_OK) {
        fprintf(stderr, "setup: %s\n", sp_last_error());
        return 1;
    }
    int32_t h = sp_region_register("busy");
    h_split = sp_region_register("split");
    sp_region_start_id(h);
    sp_region_stop_id(h);
    printf("add_flops_1e308 %d\n", sp_region_add_flops(h, 1e308));
    printf("add_flops_1e308_again %d\n", sp_region_add_flops(h, 1e308));
    printf("add_flops_inf %d\n", sp_region_add_flops(h, INFINITY));
    printf("add_flops_nan %d\n", sp_region_add_flops(h, NAN));
    printf("add_flops_negative %d\n", sp_region_add_flops(h, -1.0));
    printf("add_bytes_1e308 %d\n", sp_region_add_bytes(h, 1e308));
    printf("add_bytes_1e308_again %d\n", sp_region_add_bytes(h, 1e308));
    printf("add_bytes_max_plus_max %d\n", sp_region_add_bytes(h, 1.7e308));
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, add_huge, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    int rc = sp_finalize();
    printf("finalize %d\n", rc);
    return rc == SP_OK ? 0 : 1;
}
