// The C++ header end to end: SP_SCOPE on every exit path (end of scope, return, break,
// continue, exceptions through one and two frames), several scopes in one block and on
// one line, Region handles (function-local static and global, registered lazily),
// names built at run time, Scope::stop and Session. Prints "EXPECT<TAB>calls<TAB>name"
// per region and "DONE failures=N"; tests/cxx_api.rs checks the file against them.
// Usage: cxx_scope <output file>
#include <scope_profiler.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
    if (!ok) {
        ++failures;
        std::printf("FAIL %s: %s\n", what, sp_last_error());
    }
}

void expect(unsigned calls, const char* name) { std::printf("EXPECT\t%u\t%s\n", calls, name); }

volatile double sink = 0.0;
void work(int n) {
    for (int k = 0; k < 1000 * n; ++k) sink = sink + k * 0.5;
}

// Registered before sp_setup runs: registration waits for the first use.
scope_profiler::Region global_region("global region");

void throws_inside(int depth) {
    SP_SCOPE("throwing");
    work(1);
    if (depth > 0) {
        SP_SCOPE("throwing inner");
        throw std::runtime_error("boom");
    }
    throw std::logic_error("boom");
}

int early_return(int i) {
    SP_SCOPE("early return");
    if (i % 2 == 1) return 1;
    SP_SCOPE("second half");
    work(1);
    return 0;
}

void two_in_one_block() {
    SP_SCOPE("block a");
    SP_SCOPE("block b");
    work(1);
}

void two_on_one_line() { SP_SCOPE("line a"); SP_SCOPE("line b"); }

void hot_loop() {
    static const scope_profiler::Region kernel("kernel");
    for (int i = 0; i < 1000; ++i) {
        SP_SCOPE(kernel);
        sink = sink + i;
    }
    // Live statistics while profiling runs: every call so far, and a summary table.
    int status = -1;
    sp_stats s = scope_profiler::stats(kernel, &status);
    check(status == SP_OK && s.count >= 1000 && s.count % 1000 == 0 && s.min_ns <= s.max_ns && s.total_ns >= s.max_ns, "live statistics");
    check(scope_profiler::print_summary() == SP_OK, "print_summary");
    std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: cxx_scope <file>\n");
        return 2;
    }
    scope_profiler::Session session(argv[1], 0, 0);
    check(session.status() == SP_OK, "session setup");

    // Exceptions: the regions are closed before the handler runs.
    int caught = 0;
    for (int i = 0; i < 6; ++i) {
        try {
            throws_inside(i % 2);
        } catch (const std::exception&) {
            SP_SCOPE("handler");
            ++caught;
        }
    }
    check(caught == 6, "all exceptions caught");
    expect(6, "throwing");
    expect(3, "throwing inner");
    expect(6, "handler");

    for (int i = 0; i < 10; ++i) early_return(i);
    expect(10, "early return");
    expect(5, "second half");

    // break and continue leave the loop body's scope.
    for (int i = 0; i < 10; ++i) {
        SP_SCOPE("loop body");
        if (i % 3 == 0) continue;
        if (i == 8) break;
        work(1);
    }
    expect(9, "loop body");

    for (int i = 0; i < 4; ++i) two_in_one_block();
    expect(4, "block a");
    expect(4, "block b");
    two_on_one_line();
    expect(1, "line a");
    expect(1, "line b");

    hot_loop();
    hot_loop();
    expect(2000, "kernel");

    for (int i = 0; i < 3; ++i) {
        SP_SCOPE(global_region);
        work(1);
    }
    expect(3, "global region");
    check(global_region.handle() >= 0, "global region registered");

    for (int i = 0; i < 2; ++i) {
        SP_SCOPE(std::string("dyn") + "amic/" + std::to_string(i));
    }
    expect(1, "dynamic/0");
    expect(1, "dynamic/1");
    {
        scope_profiler::Region owned(std::string("owned region"));
        SP_SCOPE(owned);
        check(std::string(owned.name()) == "owned region", "Region keeps a copy of the name");
    }
    expect(1, "owned region");

    {
        scope_profiler::Scope manual("manual stop");
        work(1);
        manual.stop();
        manual.stop();
        SP_SCOPE("after manual stop");
    }
    expect(1, "manual stop");
    expect(1, "after manual stop");

    // A failing start records nothing and its scope does not stop anything.
    {
        SP_SCOPE("");
        check(std::string(sp_last_error()).find("empty") != std::string::npos, "empty name reported");
    }

    check(scope_profiler::status_string(SP_OK) == "success", "status_string");
    check(session.finalize() == SP_OK, "finalize");
    check(session.finalize() == SP_ALREADY_FINALIZED, "second finalize");
    {
        SP_SCOPE("after finalize");  // refused, harmless
    }
    std::printf("DONE failures=%d\n", failures);
    return 0;
}
