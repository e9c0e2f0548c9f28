/* A malloc-heavy host, to show that profiling leaves its allocator's behaviour alone.
 *
 * Every step allocates an array, writes it and frees it, as simulation codes do with their
 * temporaries (LULESH frees arrays of 0.7 and 5.8 MB every step): here one array per step,
 * growing by 8 KiB a step from 600 KiB, as in an adaptive code. glibc maps each such array and
 * unmaps it when freed, as long as no block larger than it was freed before (its dynamic mmap
 * threshold follows the largest mapped block the process freed). A library that frees a
 * larger block of its own changes that: the host's arrays then come from the heap instead.
 *
 * Phases: 40 steps before sp_setup, 40 steps while recording (200,000 calls of 4 regions per
 * step, so call logs grow to their largest chunks), sp_finalize, 40 steps after it (a host that
 * keeps running after writing its profile). "plain" runs the same steps without the library.
 * For each phase it prints "PHASE <name> <arrays mapped>/<steps>" (whether glibc mapped an
 * array: mallinfo2's count of mapped blocks while it is held).
 * Built with -DWITH_MPI, each rank of an MPI job does the same between MPI_Init and
 * MPI_Finalize (the schema-3 layouts are then written collectively, every rank staging its
 * encoded calls).
 * Usage: host_allocator <file> plain|profile */
#include <scope_profiler.h>
#ifdef WITH_MPI
#include <mpi.h>
#endif

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t step_size(int step) { return 600 * 1024 + (size_t)step * 8192; }

/* One step: allocate, write, free; returns whether glibc mapped the array. */
static int step(int i, volatile double *sink) {
    size_t n = step_size(i);
    size_t before = mallinfo2().hblks;
    double *a = malloc(n);
    int mapped;
    if (a == NULL) return -1;
    mapped = mallinfo2().hblks > before;
    memset(a, 1, n);
    *sink += a[n / sizeof(double) / 2];
    free(a);
    return mapped;
}

static void phase(const char *name, int from, int to, int record, const int32_t *h, volatile double *sink) {
    int mapped = 0;
    for (int i = from; i < to; i++) {
        if (record)
            for (int k = 0; k < 200000; k++) {
                sp_region_start_id(h[k % 4]);
                sp_region_stop_id(h[k % 4]);
            }
        mapped += step(i, sink);
    }
    printf("PHASE %s %d/%d\n", name, mapped, to - from);
}

int main(int argc, char **argv) {
#ifdef WITH_MPI
    MPI_Init(&argc, &argv);
#endif
    int profile = argc > 2 && strcmp(argv[2], "profile") == 0;
    volatile double sink = 0;
    int32_t h[4] = {0, 0, 0, 0};
    phase("before", 0, 40, 0, h, &sink);
    if (profile) {
        sp_options o;
        sp_options_init(&o);
        o.file_path = argc > 1 ? argv[1] : "host_allocator.h5";
        o.verbosity = 0;
        if (sp_setup(&o) != SP_OK) return 1;
        h[0] = sp_region_register("a");
        h[1] = sp_region_register("b");
        h[2] = sp_region_register("c");
        h[3] = sp_region_register("d");
    }
    phase("recording", 40, 80, profile, h, &sink);
    if (profile && sp_finalize() != SP_OK) return 1;
    phase("after", 80, 120, 0, h, &sink);
#ifdef WITH_MPI
    MPI_Finalize();
#endif
    return 0;
}
