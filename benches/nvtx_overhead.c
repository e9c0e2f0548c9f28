/* Time per NVTX push/pop pair (nvtxRangePushA / nvtxRangePop, and the Ex form in a domain
 * with a registered string) and, in the same binary, per by-name region pair of our own
 * (sp_region_start/stop), the baseline the NVTX injection is held to. benches/run_adapters.sh
 * runs it with and without NVTX_INJECTION64_PATH, in alternation.
 * Usage: nvtx_overhead [PAIRS_PER_REP] [REPS]; prints RESULT lines (medians, ns per pair). */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "scope_profiler.h"

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    sp_setup(NULL);
    nvtxDomainHandle_t dom = nvtxDomainCreateA("bench_domain");
    nvtxEventAttributes_t ex;
    memset(&ex, 0, sizeof ex);
    ex.version = NVTX_VERSION;
    ex.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    ex.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    ex.message.registered = nvtxDomainRegisterStringA(dom, "bench_registered");
    double *a = malloc(reps * sizeof *a), *b = malloc(reps * sizeof *b), *c = malloc(reps * sizeof *c);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (long i = 0; i < n; i++) {
            nvtxRangePushA("bench_nvtx");
            nvtxRangePop();
        }
        double t1 = now_s();
        for (long i = 0; i < n; i++) {
            nvtxDomainRangePushEx(dom, &ex);
            nvtxDomainRangePop(dom);
        }
        double t2 = now_s();
        for (long i = 0; i < n; i++) {
            sp_region_start("bench_name");
            sp_region_stop("bench_name");
        }
        double t3 = now_s();
        a[r] = (t1 - t0) / n * 1e9;
        b[r] = (t2 - t1) / n * 1e9;
        c[r] = (t3 - t2) / n * 1e9;
    }
    printf("RESULT nvtx_pair_ns %.2f\n", median(a, reps));
    printf("RESULT nvtx_ex_pair_ns %.2f\n", median(b, reps));
    printf("RESULT name_pair_ns %.2f\n", median(c, reps));
    sp_finalize();
    return 0;
}
