// Source locations from C++: SP_SCOPE records its call site's file and line for string
// literals, Region objects, names built at run time and const char* names.
// Prints "AT<TAB>name<TAB>line", "EXPECT<TAB>calls<TAB>name" and "DONE failures=N".
// Usage: cxx_source_locations <output file>
#include <scope_profiler.hpp>

#include <cstdio>
#include <string>

namespace {
volatile double sink = 0.0;

void literal() {
    SP_SCOPE("literal"); static const int line = __LINE__;
    sink = sink + 1;
    static bool once = true;
    if (once) std::printf("AT\tliteral\t%d\n", line);
    once = false;
}
} // namespace

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    scope_profiler::Session session(argv[1], 0, 0);
    for (int i = 0; i < 50; ++i) literal();
    std::printf("EXPECT\t50\tliteral\n");

    static const scope_profiler::Region kernel("kernel");
    for (int i = 0; i < 10; ++i) {
        SP_SCOPE(kernel); if (i == 0) std::printf("AT\tkernel\t%d\n", __LINE__);
    }
    std::printf("EXPECT\t10\tkernel\n");

    for (int i = 0; i < 2; ++i) {
        std::string name = "built " + std::to_string(i);
        SP_SCOPE(name); std::printf("AT\t%s\t%d\n", name.c_str(), __LINE__);
    }
    std::printf("EXPECT\t1\tbuilt 0\nEXPECT\t1\tbuilt 1\n");

    const char* pointer = "by pointer";
    for (int i = 0; i < 3; ++i) {
        SP_SCOPE(pointer); if (i == 0) std::printf("AT\tby pointer\t%d\n", __LINE__);
    }
    std::printf("EXPECT\t3\tby pointer\n");
    std::printf("DONE failures=0\n");
    return 0;
}
