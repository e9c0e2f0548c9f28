// C++ consumer: a Session writing to argv[1], SP_SCOPE("cxx region") 4 times.
#include <scope_profiler.hpp>

int main(int argc, char** argv) {
    scope_profiler::Session session(argc > 1 ? argv[1] : nullptr, 0, 0);
    for (int i = 0; i < 4; ++i) {
        SP_SCOPE("cxx region");
    }
    return session.finalize() == SP_OK ? 0 : 1;
}
