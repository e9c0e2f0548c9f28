/* Time per NVTX push/pop pair (nvtxRangePushA / nvtxRangePop, and the Ex form in a domain
 * with a registered string), per start/end range (nvtxRangeStartA / nvtxRangeEnd) and per
 * mark and, in the same binary, per by-name region pair of our own (sp_region_start/stop), the
 * baseline the NVTX injection is held to. benches/run_adapters.sh runs it with and without
 * NVTX_INJECTION64_PATH, in alternation.
 * Usage: nvtx_overhead [PAIRS_PER_REP] [REPS] [CASE]; prints RESULT lines (medians, ns per
 * pair). CASE (all, push, ex, range, mark, name) runs one case only (for callgrind: a run with
 * N pairs minus a run with none is what N pairs cost). */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "scope_profiler.h"

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    const char *only = argc > 3 ? argv[3] : "all";
    int all = strcmp(only, "all") == 0;
    if (reps < 1) reps = 1;
    sp_setup(NULL);
    nvtxDomainHandle_t dom = nvtxDomainCreateA("bench_domain");
    nvtxEventAttributes_t ex;
    memset(&ex, 0, sizeof ex);
    ex.version = NVTX_VERSION;
    ex.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    ex.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    ex.message.registered = nvtxDomainRegisterStringA(dom, "bench_registered");
    double *v[5];
    for (int k = 0; k < 5; k++) v[k] = calloc(reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (all || !strcmp(only, "push"))
            for (long i = 0; i < n; i++) {
                nvtxRangePushA("bench_nvtx");
                nvtxRangePop();
            }
        double t1 = now_s();
        if (all || !strcmp(only, "ex"))
            for (long i = 0; i < n; i++) {
                nvtxDomainRangePushEx(dom, &ex);
                nvtxDomainRangePop(dom);
            }
        double t2 = now_s();
        if (all || !strcmp(only, "name"))
            for (long i = 0; i < n; i++) {
                sp_region_start("bench_name");
                sp_region_stop("bench_name");
            }
        double t3 = now_s();
        if (all || !strcmp(only, "range"))
            for (long i = 0; i < n; i++) nvtxRangeEnd(nvtxRangeStartA("bench_range"));
        double t4 = now_s();
        if (all || !strcmp(only, "mark"))
            for (long i = 0; i < n; i++) nvtxMarkA("bench_mark");
        double t5 = now_s();
        double t[6] = {t0, t1, t2, t3, t4, t5};
        for (int k = 0; k < 5; k++) v[k][r] = n > 0 ? (t[k + 1] - t[k]) / n * 1e9 : 0;
    }
    printf("RESULT nvtx_pair_ns %.2f\n", median(v[0], reps));
    printf("RESULT nvtx_ex_pair_ns %.2f\n", median(v[1], reps));
    printf("RESULT name_pair_ns %.2f\n", median(v[2], reps));
    printf("RESULT nvtx_range_ns %.2f\n", median(v[3], reps));
    printf("RESULT nvtx_mark_ns %.2f\n", median(v[4], reps));
    sp_finalize();
    return 0;
}
