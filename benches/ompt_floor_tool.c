/* The floor of an OpenMP tool's cost on this runtime: a tool that registers the callbacks the
 * library registers by default (parallel_begin/end, implicit_task, sync_region,
 * sync_region_wait, work) and does nothing in them, so the runtime takes every path a tool
 * makes it take (its OMPT bookkeeping, the indirect calls) and no more.
 * benches/run_openmp_functions.sh builds it as a shared library and names it in
 * OMP_TOOL_LIBRARIES for its "floor" runs. */
#include <omp-tools.h>
#include <stddef.h>

static void parallel_begin(ompt_data_t *task, const ompt_frame_t *frame, ompt_data_t *parallel, unsigned int requested, int flags, const void *codeptr) {
    (void)task, (void)frame, (void)requested, (void)flags, (void)codeptr;
    /* The library writes the region's data word here; so does the floor. */
    parallel->value = 1;
}
static void parallel_end(ompt_data_t *parallel, ompt_data_t *task, int flags, const void *codeptr) { (void)parallel, (void)task, (void)flags, (void)codeptr; }
static void implicit_task(ompt_scope_endpoint_t endpoint, ompt_data_t *parallel, ompt_data_t *task, unsigned int n, unsigned int index, int flags) {
    (void)endpoint, (void)parallel, (void)task, (void)n, (void)index, (void)flags;
}
static void sync_region(ompt_sync_region_t kind, ompt_scope_endpoint_t endpoint, ompt_data_t *parallel, ompt_data_t *task, const void *codeptr) {
    (void)kind, (void)endpoint, (void)parallel, (void)task, (void)codeptr;
}
static void work(ompt_work_t kind, ompt_scope_endpoint_t endpoint, ompt_data_t *parallel, ompt_data_t *task, uint64_t count, const void *codeptr) {
    (void)kind, (void)endpoint, (void)parallel, (void)task, (void)count, (void)codeptr;
}

static int initialize(ompt_function_lookup_t lookup, int device, ompt_data_t *data) {
    (void)device, (void)data;
    ompt_set_callback_t set = (ompt_set_callback_t)lookup("ompt_set_callback");
    if (!set) return 0;
    set(ompt_callback_parallel_begin, (ompt_callback_t)parallel_begin);
    set(ompt_callback_parallel_end, (ompt_callback_t)parallel_end);
    set(ompt_callback_implicit_task, (ompt_callback_t)implicit_task);
    set(ompt_callback_sync_region, (ompt_callback_t)sync_region);
    set(ompt_callback_sync_region_wait, (ompt_callback_t)sync_region);
    set(ompt_callback_work, (ompt_callback_t)work);
    return 1;
}

static void finalize(ompt_data_t *data) { (void)data; }

ompt_start_tool_result_t *ompt_start_tool(unsigned int version, const char *runtime) {
    (void)version, (void)runtime;
    static ompt_start_tool_result_t result = {initialize, finalize, {0}};
    return &result;
}
