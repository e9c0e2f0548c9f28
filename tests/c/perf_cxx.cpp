// The annotations from C++: Region::add_flops / add_bytes, inside and outside a Scope.
// Usage: perf_cxx <output file>
#include <scope_profiler.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc < 2 || scope_profiler::setup(argv[1], -1, 0) != SP_OK) return 1;
    static const scope_profiler::Region kernel("kernel");
    int failures = 0;
    for (int i = 0; i < 5; ++i) {
        scope_profiler::Scope s(kernel);
        if (kernel.add_flops(1e6) != SP_OK) ++failures;
    }
    if (kernel.add_bytes(8e6) != SP_OK) ++failures;
    if (kernel.add_flops(-1.0) != SP_ERR_INVALID_ARGUMENT) ++failures;
    if (scope_profiler::finalize() != SP_OK) ++failures;
    std::printf("DONE failures=%d\n", failures);
    return 0;
}
