/* perf events for chosen regions only (SCOPE_PROFILER_PERF_REGIONS, or sp_options.perf_regions
 * from argv[2]): regions "solve", "solve/inner", "io" (chosen by "solve*,io") and "other",
 * "my_io" (not chosen). Prints how many perf event descriptors the process holds before and
 * after the first chosen region ("PERF_FDS <phase> <n>"), and writes "MARK begin" / "MARK end"
 * to stdout (unbuffered) around 1000 starts and stops of regions not chosen, so that a tracer
 * can count the reads between them. argv[1]: output file. */
#include <scope_profiler.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int perf_fds(void) {
    int n = 0;
    char path[512], target[512];
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL) {
        ssize_t len;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        len = readlink(path, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = 0;
        if (strstr(target, "perf_event") != NULL) {
            printf("FD %s\n", e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static void others(int32_t other, int32_t my_io, int n) {
    for (int i = 0; i < n; i++) {
        sp_region_start_id(other);
        sp_region_stop_id(other);
        sp_region_start_id(my_io);
        sp_region_stop_id(my_io);
    }
}

int main(int argc, char **argv) {
    sp_options o;
    sp_options_init(&o);
    o.file_path = argc > 1 ? argv[1] : "perf_regions.h5";
    if (argc > 2) o.perf_regions = argv[2];
    o.verbosity = 0;
    if (sp_setup(&o) != SP_OK) return 1;
    int32_t solve = sp_region_register("solve"), inner = sp_region_register("solve/inner"), io = sp_region_register("io");
    int32_t other = sp_region_register("other"), my_io = sp_region_register("my_io");
    setvbuf(stdout, NULL, _IONBF, 0);
    others(other, my_io, 1000);
    printf("PERF_FDS before %d\n", perf_fds());
    for (int i = 0; i < 100; i++) {
        sp_region_start_id(solve);
        sp_region_start_id(inner);
        sp_region_stop_id(inner);
        sp_region_stop_id(solve);
        sp_region_start("io");
        sp_region_stop("io");
    }
    printf("PERF_FDS after %d\n", perf_fds());
    printf("MARK begin\n");
    others(other, my_io, 1000);
    printf("MARK end\n");
    (void)io;
    return sp_finalize() == SP_OK ? 0 : 1;
}
