/* scope_profiler.hpp: header-only C++ helpers over the C ABI of scope_profiler.h (C++11).
 *
 *   #include <scope_profiler.hpp>
 *
 *   int main() {
 *       scope_profiler::Session session("run.h5");      // sp_setup ... sp_finalize
 *       SP_SCOPE("solve");                               // stopped at the end of the scope,
 *                                                        // __FILE__:__LINE__ recorded
 *       static const scope_profiler::Region kernel("kernel");
 *       for (int i = 0; i < n; ++i) {
 *           SP_SCOPE(kernel);                            // hot loop: handle, no string work
 *           ...
 *       }
 *   }
 *
 * A Scope stops its region on every exit path: normal end, return, break, continue and
 * exceptions (the destructor runs during unwinding). Nothing here throws; a failing call
 * is reported on stderr by the library and the program carries on.
 *
 * Compiled with -DSP_DISABLE, SP_SCOPE is empty and the classes call the inline no-ops of
 * scope_profiler.h: the program needs no library (see the end of scope_profiler.h).
 */
#ifndef SCOPE_PROFILER_HPP
#define SCOPE_PROFILER_HPP

#include "scope_profiler.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace scope_profiler {

/** Options for sp_setup, prepared with sp_options_init and marked as coming from C++. */
inline sp_options options() noexcept {
    sp_options o;
    sp_options_init(&o);
    o.language = "C++";
    return o;
}

/** sp_setup with these options (a NULL language becomes "C++"). Returns the status. */
inline int setup(sp_options o) noexcept {
    if (o.language == nullptr) o.language = "C++";
    return sp_setup(&o);
}

/** sp_setup: file_path NULL, use_likwid -1 and verbosity -1 defer to the environment. */
inline int setup(const char* file_path = nullptr, int use_likwid = -1, int verbosity = -1) noexcept {
    sp_options o = options();
    o.file_path = file_path;
    o.use_likwid = use_likwid;
    o.verbosity = verbosity;
    return sp_setup(&o);
}

/** sp_finalize: writes the file. Returns the status. */
inline int finalize() noexcept { return sp_finalize(); }

/** The last error message of the calling thread. */
inline std::string last_error() { return std::string(sp_last_error()); }

/** The description of a status code. */
inline std::string status_string(int status) { return std::string(sp_status_string(status)); }

/** Profiling for the lifetime of the object: sp_setup in the constructor, sp_finalize in
 *  the destructor (unless setup failed or profiling was set up before). */
class Session {
public:
    explicit Session(const char* file_path = nullptr, int use_likwid = -1, int verbosity = -1) noexcept
        : status_(setup(file_path, use_likwid, verbosity)) {}
    explicit Session(const sp_options& o) noexcept : status_(setup(o)) {}
    ~Session() {
        if (status_ == SP_OK) sp_finalize();
    }
    /** Status of the sp_setup call. */
    int status() const noexcept { return status_; }
    /** Finalize now (the destructor then does nothing). Returns the status of sp_finalize,
     *  or SP_ALREADY_FINALIZED when this session did not set profiling up. */
    int finalize() noexcept {
        if (status_ != SP_OK) return SP_ALREADY_FINALIZED;
        status_ = SP_ALREADY_FINALIZED;
        return sp_finalize();
    }

private:
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    int status_;
};

/** A region registered once, for hot loops: Scope over a Region starts and stops by
 *  handle. Registration happens on first use after sp_setup, so a Region may be a
 *  global or a function-local static; it is thread-safe. */
class Region {
public:
    /** `name` must outlive the Region (string literals do). */
    explicit Region(const char* name) noexcept : name_(name), handle_(-1) {}
    /** Keeps a copy of the name. */
    explicit Region(const std::string& name) : owned_(name), name_(nullptr), handle_(-1) {}

    /** The handle, registering the name if needed; negative if that failed. */
    std::int32_t handle() const noexcept {
        std::int32_t h = handle_.load(std::memory_order_acquire);
        if (h >= 0) return h;
        h = name_ != nullptr ? sp_region_register(name_) : sp_region_register_n(owned_.data(), owned_.size());
        if (h >= 0) handle_.store(h, std::memory_order_release);
        return h;
    }
    const char* name() const noexcept { return name_ != nullptr ? name_ : owned_.c_str(); }
    /** Add your own FLOP count to this region on the calling thread (sp_region_add_flops). */
    int add_flops(double flops) const noexcept { return sp_region_add_flops(handle(), flops); }
    /** Add your own byte count to this region on the calling thread (sp_region_add_bytes). */
    int add_bytes(double bytes) const noexcept { return sp_region_add_bytes(handle(), bytes); }

private:
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    std::string owned_;
    const char* name_;
    mutable std::atomic<std::int32_t> handle_;
};

/** One SP_SCOPE call site: where it is in the source, and the handle registered there.
 *  SP_SCOPE makes one static Site per call site (constant-initialized: no guard, no lock). */
class Site {
public:
    constexpr Site(const char* file, int line) noexcept : file_(file), line_(line), handle_(-1), noted_(false) {}

    /** The handle of `name` registered with this location, cached after the first success:
     *  for a name that is the same at every pass (a string literal). */
    std::int32_t handle(const char* name) const noexcept {
        std::int32_t h = handle_.load(std::memory_order_acquire);
        if (h >= 0) return h;
        h = sp_region_register_at(name, file_, line_);
        if (h >= 0) handle_.store(h, std::memory_order_release);
        return h;
    }
    /** Register a name built at run time with this location (every pass: takes a lock). */
    std::int32_t handle(const std::string& name) const noexcept {
        return sp_region_register_at_n(name.data(), name.size(), file_, std::strlen(file_), line_);
    }
    /** Record this location for `name` once per site (the first name seen here). */
    void note(const char* name) const noexcept {
        if (noted_.load(std::memory_order_acquire)) return;
        if (sp_region_register_at(name, file_, line_) >= 0) noted_.store(true, std::memory_order_release);
    }
    const char* file() const noexcept { return file_; }
    int line() const noexcept { return line_; }

private:
    Site(const Site&) = delete;
    Site& operator=(const Site&) = delete;
    const char* file_;
    int line_;
    mutable std::atomic<std::int32_t> handle_;
    mutable std::atomic<bool> noted_;
};

/** Statistics of a region's completed calls so far, over every thread (sp_region_get_stats);
 *  all zero if the call failed (the status goes to `*status` when given). */
inline sp_stats stats(const Region& region, int* status = nullptr) noexcept {
    sp_stats s = sp_stats();
    s.struct_size = sizeof s;
    int rc = sp_region_get_stats(region.handle(), &s);
    if (status != nullptr) *status = rc;
    if (rc != SP_OK) {
        s = sp_stats();
        s.struct_size = sizeof s;
    }
    return s;
}

/** Record run metadata of your own (sp_set_metadata): stored as `user.<key>`, rank 0's value
 *  as the run's. Any value that converts with std::to_string works through the overloads. */
inline int set_metadata(const std::string& key, const std::string& value) noexcept {
    try {
        return sp_set_metadata(key.c_str(), value.c_str());
    } catch (...) {
        return SP_ERR_INVALID_ARGUMENT;
    }
}
inline int set_metadata(const char* key, const char* value) noexcept { return sp_set_metadata(key, value); }
template <class T, typename std::enable_if<std::is_arithmetic<T>::value, int>::type = 0>
inline int set_metadata(const std::string& key, T value) noexcept {
    try {
        return set_metadata(key, std::to_string(value));
    } catch (...) {
        return SP_ERR_INVALID_ARGUMENT;
    }
}

/** Print this process's summary table so far to stdout (sp_print_summary). */
inline int print_summary() noexcept { return sp_print_summary(); }

/** Sample every recording thread `hz` times per second of its CPU time (sp_start_sampling):
 *  the hottest source lines inside each region (docs/sampling.md). Returns the status. */
inline int start_sampling(int hz) noexcept { return sp_start_sampling(hz); }

/** Stop sampling, keeping the samples for finalize (sp_stop_sampling). */
inline int stop_sampling() noexcept { return sp_stop_sampling(); }

/** Times one call of a region from construction to destruction (or stop()). */
class Scope {
public:
    /** By name. `name` must stay valid until the scope ends (string literals do). */
    explicit Scope(const char* name) noexcept : name_(name), handle_(-1), open_(sp_region_start(name) == SP_OK) {}
    /** By name, for names built at run time (registers the name, then works by handle). */
    explicit Scope(const std::string& name) noexcept
        : name_(nullptr), handle_(sp_region_register_n(name.data(), name.size())), open_(start_id()) {}
    /** By registered region: the hot-loop form. */
    explicit Scope(const Region& region) noexcept : name_(nullptr), handle_(region.handle()), open_(start_id()) {}

    /** At a call site (what SP_SCOPE uses), recording the site's file and line as the
     *  region's location. A string literal is registered once per site and then timed by
     *  handle; */
    template <std::size_t N>
    Scope(const Site& site, const char (&name)[N]) noexcept : name_(nullptr), handle_(site.handle(&name[0])), open_(start_id()) {}
    /** a name built at run time is registered with the location at every pass; */
    Scope(const Site& site, const std::string& name) noexcept : name_(nullptr), handle_(site.handle(name)), open_(start_id()) {}
    /** a Region is timed by its handle, its location registered once per site; */
    Scope(const Site& site, const Region& region) noexcept : name_(nullptr), handle_(site.handle(region.name())), open_(start_id()) {}
    /** a `const char*` (whose text may change between passes) is timed by name, the site's
     *  location recorded for the first name seen there. */
    template <class T, typename std::enable_if<std::is_pointer<T>::value && std::is_convertible<T, const char*>::value, int>::type = 0>
    Scope(const Site& site, const T& name) noexcept : name_(name), handle_(-1), open_(false) {
        if (name_ == nullptr) return;
        site.note(name_);
        open_ = sp_region_start(name_) == SP_OK;
    }

    ~Scope() { stop(); }

    /** Stop the region now; later calls and the destructor do nothing. */
    void stop() noexcept {
        if (!open_) return;
        open_ = false;
        if (name_ != nullptr) {
            sp_region_stop(name_);
        } else {
            sp_region_stop_id(handle_);
        }
    }

private:
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    bool start_id() const noexcept { return handle_ >= 0 && sp_region_start_id(handle_) == SP_OK; }
    const char* name_;
    std::int32_t handle_;
    bool open_;
};

} // namespace scope_profiler

#define SP_PP_CAT_(a, b) a##b
#define SP_PP_CAT(a, b) SP_PP_CAT_(a, b)
#ifdef __COUNTER__
#define SP_PP_UNIQUE(prefix) SP_PP_CAT(prefix, SP_PP_CAT(__LINE__, SP_PP_CAT(_, __COUNTER__)))
#else
#define SP_PP_UNIQUE(prefix) SP_PP_CAT(prefix, __LINE__)
#endif

/** Time the rest of the enclosing scope as region `what`: a name (string literal, const char*
 *  or std::string) or a scope_profiler::Region. Several per scope are fine. The call site's
 *  __FILE__ and __LINE__ become the region's source location (the first place a region is
 *  registered with a location wins); a string literal or Region is registered once per call
 *  site (a static handle) and timed by handle, the hot-loop path. With SP_DISABLE defined it
 *  compiles to nothing (scope_profiler.h describes the compile-time switch). */
#if defined(SP_DISABLE)
/* Compiled out (-DSP_DISABLE): nothing is created or called; `what` is not evaluated. */
#define SP_SCOPE(what) static_cast<void>(sizeof(what))
#else
#define SP_SCOPE(what) SP_SCOPE_AT_(what, SP_PP_UNIQUE(sp_scope_))
#endif
#define SP_SCOPE_AT_(what, id) \
    static const ::scope_profiler::Site SP_PP_CAT(id, _site)(__FILE__, __LINE__); \
    ::scope_profiler::Scope id(SP_PP_CAT(id, _site), what)

#endif /* SCOPE_PROFILER_HPP */
