// The C++ helpers (Session, Region, Scope, SP_SCOPE, stats), built twice by
// tests/disabled_build.rs: with -DSP_DISABLE (compiled out: no library linked) and normally
// (run with SCOPE_PROFILER_DISABLE=1). Prints "DONE bad=N".
#include <scope_profiler.hpp>

#include <cstdio>
#include <string>

static int work(int n) {
    static const scope_profiler::Region kernel("kernel");
    int sum = 0;
    for (int i = 0; i < n; ++i) {
        SP_SCOPE(kernel);
        SP_SCOPE("literal");
        sum += i;
    }
    const std::string built = "built " + std::to_string(n);
    SP_SCOPE(built);
    const char *pointer = "pointer";
    SP_SCOPE(pointer);
    scope_profiler::Scope explicit_scope(kernel);
    explicit_scope.stop();
    return sum;
}

int main() {
    int bad = 0;
    {
        scope_profiler::Session session("compiled_out_cxx.h5");
        if (session.status() != SP_OK) ++bad, std::printf("FAIL session %d\n", session.status());
        if (work(100) != 4950) ++bad;
        static const scope_profiler::Region r("stats");
        int status = -1;
        sp_stats s = scope_profiler::stats(r, &status);
        if (status != SP_OK || s.count != 0) ++bad, std::printf("FAIL stats %d\n", status);
        if (r.add_flops(1.0) != SP_OK || r.add_bytes(1.0) != SP_OK) ++bad, std::printf("FAIL add\n");
        if (scope_profiler::print_summary() != SP_OK) ++bad;
        if (scope_profiler::set_metadata("problem_size", 128) != SP_OK) ++bad;
        if (!scope_profiler::last_error().empty()) ++bad;
    }
    std::printf("DONE bad=%d\n", bad);
    return bad != 0;
}
