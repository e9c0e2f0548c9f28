// Instrumented code that leaves its functions the hard way (tests/functions.rs): C++ exceptions
// thrown through instrumented frames, longjmp out of them, recursion deeper than the 4096 calls a
// thread may have open, each on the main thread and on two threads at once. Built with
// g++ -finstrument-functions and linked with the library; never calls sp_*.
// Usage: instrumented_hostile ROUNDS DEPTH; prints "caught N" at the end.
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <stdexcept>

static volatile long sink;
static int rounds = 100, depth = 6000;
static thread_local jmp_buf jump;
static long caught_all;

__attribute__((noinline)) void thrower(int d) {
    if (d == 0) throw std::runtime_error("thrown through instrumented frames");
    thrower(d - 1);
    sink = sink + 1;
}

__attribute__((noinline)) long catcher() {
    try {
        thrower(5);
    } catch (const std::exception &) {
        return 1;
    }
    return 0;
}

__attribute__((noinline)) void jumper(int d) {
    if (d == 0) longjmp(jump, 1);
    jumper(d - 1);
    sink = sink + 1;
}

__attribute__((noinline)) int jump_root() {
    if (setjmp(jump) == 0) jumper(3);
    return 1;
}

__attribute__((noinline)) long deep(int n) {
    if (n == 0) return 0;
    long r = deep(n - 1) + 1;
    sink = sink + r;
    return r;
}

__attribute__((noinline)) void after() { sink = sink + 1; }

static long work() {
    long caught = 0;
    for (int i = 0; i < rounds; i++) {
        caught += catcher();
        jump_root();
    }
    deep(depth - 1);
    for (int i = 0; i < 10; i++) after();
    return caught;
}

static void *worker(void *) {
    long c = work();
    __atomic_add_fetch(&caught_all, c, __ATOMIC_RELAXED);
    return nullptr;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    if (argc > 2) depth = atoi(argv[2]);
    caught_all = work();
    pthread_t t[2];
    for (auto &x : t) pthread_create(&x, nullptr, worker, nullptr);
    for (auto &x : t) pthread_join(x, nullptr);
    printf("caught %ld\n", caught_all);
    return 0;
}
