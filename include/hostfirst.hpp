/*
 * hostfirst.hpp - header-only C++17 RAII wrappers over the C API in hostfirst.h.
 *
 * Every failing call throws hostfirst::error (status + the library's message, and a refused fit check's numbers,
 * all copied when it is thrown). Handles are move-only owners that free themselves; scopes are RAII guards that
 * pop themselves (checked) on destruction.
 *
 *   auto f = hostfirst::file::open("tokens.safetensors");   // header only; data mapped read-only
 *   hostfirst::view tokens = f.view("tokens");              // zero-copy; outlives f
 *   hostfirst::view head = tokens.slice_rows(0, 1024);      // zero-copy rows (narrow(dim, start, len): any dim)
 *   std::vector<uint16_t> v = head.to_vector<uint16_t>();   // pread copy: TRUNCATED instead of SIGBUS
 *   hostfirst::dlpack_tensor t = tokens.to_dlpack();        // DLPack 1.1, read-only, kDLCPU
 *
 * The wrappers cover the whole C API (a test fails when a hostfirst_* function of hostfirst.h is not called
 * here): the census, devices and default-device scopes; files, views and sharded sets; puts (sync, with
 * stats, async), buffers and their CUDA stream handshake; rules, plans (with the rules that place no tensor)
 * and whole-file loads; the batch gather; remote settings (remote_options, remote_configure); shard-on-read (mesh, rules, plan, run); declared read plans; the safetensors writer; DLPack
 * exports; dtypes, errors and build information. The wrappers of hostfirst.h's experimental tier (shard-on-read,
 * read plans, open gather streams, census warnings, the read engine) are there only when HOSTFIRST_EXPERIMENTAL is defined
 * before this header is included, as in hostfirst.h. Enum values (statuses, dtypes, device kinds) are the C header's HOSTFIRST_*
 * constants; info structs are the C header's, with strings owned by the handle that filled them.
 *
 * Ownership: every handle class owns one C handle and frees it in its destructor; a constructor or factory
 * whose C call fails throws and owns nothing (the C API writes outputs only on success). Handles handed out
 * by a call (a batch, a load's tensor, a shard's buffer) are new handles of their own. DLPack exports come
 * back in owners that call the deleter (see dlpack_tensor); release() hands the raw pointer to a consumer.
 * Callbacks (progress, agree) are C function pointers called from inside the library. The wrappers that take
 * options with callbacks (view::put, view::put_start, load::run, shard_plan::run, writer::open) guard them: an
 * exception one throws never enters the library (which cannot unwind it: the process would abort); the wrapper
 * cancels the operation (the callback returns nonzero) and rethrows that exception to the caller once the C
 * call has returned (put_op::wait for put_start, writer::finish for a writer), instead of hostfirst::error
 * CANCELLED. Calling the C functions
 * directly, a C++ callback must still not throw.
 *
 *   hostfirst::rules r;  r.add("tokens", "host").add("*", "cuda:0");
 *   auto p = hostfirst::plan::make(f, r);                   // dry run; p.unmatched_rules() lists typos
 *   auto l = hostfirst::load::run(f, p);                    // tokens stay a zero-copy host view
 *   hostfirst::gather g(hostfirst::device("cuda:0"), HOSTFIRST_DTYPE_U16, 8, 1024);
 *   hostfirst::buffer batch = g.run(tokens, offsets);       // never rewritten while `batch` lives
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef HOSTFIRST_HPP
#define HOSTFIRST_HPP

/* C++17 or later (MSVC reports its language level in _MSVC_LANG). Older modes get this one message and
 * nothing else of the header; C++11/14 programs can use the C API in hostfirst.h directly. */
#if (defined(_MSVC_LANG) && _MSVC_LANG < 201703L) || (!defined(_MSVC_LANG) && __cplusplus < 201703L)
#error "hostfirst.hpp requires C++17 or later: compile with -std=c++17 (MSVC: /std:c++17), or include hostfirst.h (C API) instead"
#else

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hostfirst.h"

namespace hostfirst {

/// The exception every wrapper throws: the status code, its name, the library's message and, for a call the fit
/// check refused, its numbers. All of it is copied when the error is made, so it stays true after later failed
/// calls and on any thread (an exception_ptr rethrown elsewhere): the library keeps its last error per thread,
/// and only until that thread's next failure.
class error : public std::runtime_error {
public:
    /// An error with no fit numbers (the wrappers' own argument checks; a program's own errors).
    error(hostfirst_status status, const std::string &message)
        : std::runtime_error(std::string(hostfirst_status_name(status)) + ": " + message), status_(status) {}
    /// The error of the C call that has just returned `status` on this thread: the thread's last error message
    /// and, for a fit check's refusal, its numbers, taken now.
    static error from_last_error(hostfirst_status status) {
        error e(status, hostfirst_last_error_message());
        if (status == HOSTFIRST_STATUS_OUT_OF_MEMORY && hostfirst_last_error_status() == status) {
            e.fit_.struct_size = sizeof e.fit_;
            e.has_fit_ = hostfirst_last_error_fit(&e.fit_) == HOSTFIRST_STATUS_OK;
        }
        return e;
    }
    hostfirst_status status() const noexcept { return status_; }
    const char *status_name() const noexcept { return hostfirst_status_name(status_); }
    /// For HOSTFIRST_STATUS_OUT_OF_MEMORY raised by a fit check: true, and needed/free/total bytes and the
    /// device in `out` (as they were when the call failed); false, `out` untouched, for any other error.
    bool fit(hostfirst_fit_info &out) const noexcept {
        if (!has_fit_) return false;
        out = fit_;
        return true;
    }

private:
    hostfirst_status status_;
    bool has_fit_ = false;
    hostfirst_fit_info fit_{};
};

/// Throws hostfirst::error (error::from_last_error) unless status is OK.
inline void check(hostfirst_status status) {
    if (status != HOSTFIRST_STATUS_OK) throw error::from_last_error(status);
}

/// Throws unless the loaded library serves a program compiled with this header: the one rule,
/// HOSTFIRST_VERSION_COMPATIBLE (the same ABI line, the library at least as new as the header).
inline void check_version() {
    if (!HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, hostfirst_version_number()))
        throw error(HOSTFIRST_STATUS_UNSUPPORTED, std::string("library version ") + hostfirst_version() +
                                                      " does not serve a program built against header version " +
                                                      std::to_string(HOSTFIRST_VERSION_NUMBER));
}

/// A device value (kind + ordinal), parsed from and formatted to specs such as "cuda:1".
class device {
public:
    device() : d_{HOSTFIRST_DEVICE_CPU, 0} {}
    explicit device(hostfirst_device d) : d_(d) {}
    /// Parses a spec ("cpu", "cuda:1", "gpu", "cuda:GPU-<uuid>", "cuda:MIG-<uuid>", "cuda_host"); throws if absent
    /// or malformed.
    explicit device(const std::string &spec) { check(hostfirst_device_parse(spec.c_str(), &d_)); }
    /// A placement target: a spec or "default" (throws IMPLICIT_PLACEMENT in strict mode).
    static device target(const std::string &spec) {
        hostfirst_device d;
        check(hostfirst_target_parse(spec.c_str(), &d));
        return device(d);
    }
    static device cpu() { return device(); }
    std::string spec() const {
        char buf[64];
        check(hostfirst_device_format(d_, buf, sizeof buf, nullptr));
        return buf;
    }
    hostfirst_device_kind kind() const noexcept { return d_.kind; }
    int32_t ordinal() const noexcept { return d_.ordinal; }
    const hostfirst_device &c() const noexcept { return d_; }
    hostfirst_device_info info() const {
        hostfirst_device_info i{};
        i.struct_size = sizeof i;
        check(hostfirst_device_describe(d_, &i));
        return i;
    }
    /// (free, total) bytes now; for CUDA through NVML (no context) where it can, see hostfirst_device_memory.
    std::pair<uint64_t, uint64_t> memory() const {
        uint64_t f = 0, t = 0;
        check(hostfirst_device_memory(d_, &f, &t));
        return {f, t};
    }
    friend bool operator==(const device &a, const device &b) {
        return hostfirst_device_equal(&a.d_, &b.d_) != 0;
    }
    friend bool operator!=(const device &a, const device &b) { return !(a == b); }

private:
    hostfirst_device d_;
};

/// One backend of the census.
struct backend {
    std::string name, status, reason, driver_version;
    uint32_t device_count;
};

/// Every backend hostfirst knows, with the reason one is unavailable.
inline std::vector<backend> backends() {
    std::vector<backend> out;
    for (size_t i = 0, n = hostfirst_backend_count(); i < n; i++) {
        hostfirst_backend_info b{};
        b.struct_size = sizeof b;
        check(hostfirst_backend_describe(i, &b));
        out.push_back({b.name, hostfirst_backend_status_name(b.status), b.reason, b.driver_version, b.device_count});
    }
    return out;
}

/// The devices of every available backend (cpu:0 first).
inline std::vector<device> devices() {
    size_t n = 0;
    check(hostfirst_devices(nullptr, 0, &n));
    std::vector<hostfirst_device> raw(n);
    check(hostfirst_devices(raw.data(), raw.size(), &n));
    std::vector<device> out;
    for (size_t i = 0; i < n; i++) out.emplace_back(raw[i]);
    return out;
}

/// The effective default device and where it came from ("SCOPE", "PROCESS", "ENV", "BUILT_IN").
struct default_info {
    hostfirst::device device;
    std::string source;
    uint32_t depth;
};

inline default_info default_device() {
    hostfirst_device d;
    hostfirst_default_source source = HOSTFIRST_DEFAULT_SOURCE_SCOPE;
    uint32_t depth = 0;
    check(hostfirst_default_device(&d, &source, &depth));
    return {hostfirst::device(d), hostfirst_default_source_name(source), depth};
}

/// RAII default-device scope for the calling thread: pushes on construction, pops (checked) on destruction.
/// Move-only; must be destroyed on the thread that created it, innermost first (C++ scoping does this).
class scope {
public:
    explicit scope(const device &d) { check(hostfirst_scope_push(d.c(), &token_)); }
    explicit scope(const std::string &spec) : scope(device(spec)) {}
    scope(const scope &) = delete;
    scope &operator=(const scope &) = delete;
    scope(scope &&o) noexcept : token_(std::exchange(o.token_, 0)) {}
    scope &operator=(scope &&) = delete;
    ~scope() {
        if (token_) (void)hostfirst_scope_pop(token_); /* a mismatch here is a bug in the caller's nesting */
    }
    /// Pops now, throwing SCOPE_MISMATCH if this is not the innermost scope.
    void pop() {
        check(hostfirst_scope_pop(token_));
        token_ = 0;
    }

private:
    uint64_t token_ = 0;
};

/// A thread's default and strict flag captured to carry into a worker: `auto g = carried.enter();`.
class carried_scope {
public:
    carried_scope() { check(hostfirst_scope_capture(&c_)); }
    class guard {
    public:
        explicit guard(const hostfirst_carried_scope &c) { check(hostfirst_scope_enter(&c, &token_)); }
        guard(const guard &) = delete;
        guard &operator=(const guard &) = delete;
        guard(guard &&o) noexcept : token_(std::exchange(o.token_, 0)) {}
        guard &operator=(guard &&) = delete;
        ~guard() {
            if (token_) (void)hostfirst_scope_leave(token_);
        }

    private:
        uint64_t token_ = 0;
    };
    guard enter() const { return guard(c_); }
    hostfirst::device device() const { return hostfirst::device(c_.device); }

private:
    hostfirst_carried_scope c_;
};

/// RAII strict mode for the calling thread: implicit default placement fails while it lives.
class strict_guard {
public:
    strict_guard() {
        check(hostfirst_strict_get(&prev_, nullptr));
        check(hostfirst_strict_thread_set(1));
    }
    strict_guard(const strict_guard &) = delete;
    strict_guard &operator=(const strict_guard &) = delete;
    ~strict_guard() { (void)hostfirst_strict_thread_set(prev_); }

private:
    int32_t prev_ = 0;
};

/// Strict mode for the whole process (every thread) on or off (hostfirst_strict_process_set; never fails).
inline void set_strict_process(bool on) { check(hostfirst_strict_process_set(on ? 1 : 0)); }

/// The calling thread's and the process's strict flags.
struct strict_flags {
    bool thread, process;
};
inline strict_flags strict() {
    int32_t t = 0, p = 0;
    check(hostfirst_strict_get(&t, &p));
    return {t != 0, p != 0};
}

/// Sets the process-wide default device (overrides HOSTFIRST_DEFAULT_DEVICE and the built-in rule, not
/// scopes); the device must be present.
inline void set_default_device(const device &d) { check(hostfirst_default_device_set(d.c())); }
/// Clears the process-wide default device (the environment or the built-in rule applies again).
inline void clear_default_device() { check(hostfirst_default_device_clear()); }
/// "The default device" as a placement resolves it: throws IMPLICIT_PLACEMENT in strict mode.
inline device resolve_default_device() {
    hostfirst_device d;
    check(hostfirst_default_resolve(&d));
    return device(d);
}

#if defined(HOSTFIRST_EXPERIMENTAL) /* experimental: may change in any minor (hostfirst.h, CONVENTIONS) */
/// Census warnings about the environment (e.g. an unknown name in HOSTFIRST_PLATFORMS).
inline std::vector<std::string> census_warnings() {
    std::vector<std::string> out;
    for (size_t i = 0, n = hostfirst_census_warning_count(); i < n; i++) {
        out.emplace_back(hostfirst_census_warning(i));
    }
    return out;
}
#endif /* HOSTFIRST_EXPERIMENTAL */

namespace detail {
/// Fills a string through one of the C API's (buf, capacity, out_len) calls: a length query, then the copy.
template <class F>
std::string copy_string(F &&call) {
    size_t len = 0;
    check(call(nullptr, 0, &len));
    std::string out(len + 1, '\0');
    check(call(&out[0], out.size(), &len));
    out.resize(len);
    return out;
}
}  // namespace detail

/// The build description (version, features, CUDA API level).
inline std::string build_info() {
    return detail::copy_string([](char *b, size_t c, size_t *n) { return hostfirst_build_info(b, c, n); });
}
#if defined(HOSTFIRST_EXPERIMENTAL) /* experimental: may change in any minor (hostfirst.h, CONVENTIONS) */
/// How this process reads files: "io_uring (...)" or "pread pool (...; why)" (see hostfirst_read_engine).
inline std::string read_engine() {
    return detail::copy_string([](char *b, size_t c, size_t *n) { return hostfirst_read_engine(b, c, n); });
}
#endif /* HOSTFIRST_EXPERIMENTAL */
/// The status of this thread's most recent failed call (OK if none has failed).
inline hostfirst_status last_error_status() noexcept { return hostfirst_last_error_status(); }
/// A copy of this thread's most recent error message ("" if none).
inline std::string last_error_message() { return hostfirst_last_error_message(); }
/// The number of distinct status codes the library defines.
inline size_t status_count() noexcept { return hostfirst_status_count(); }
/// True for the file-format range (a malformed or rejected safetensors file or index).
inline bool is_format_error(hostfirst_status status) noexcept { return hostfirst_status_is_format_error(status) != 0; }

/// Dtypes are the C header's hostfirst_dtype values (HOSTFIRST_DTYPE_*).
namespace dtype {
/// The safetensors name ("BF16"); throws INVALID_ARGUMENT for a value that is no dtype.
inline std::string name(hostfirst_dtype dtype) {
    std::string n = hostfirst_dtype_name(dtype);
    if (n == "UNKNOWN")
        throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, "no dtype has the value " + std::to_string(uint32_t(dtype)));
    return n;
}
/// Bits per element (4 for F4, 6 for F6), 0 for a value that is no dtype.
inline uint32_t bits(hostfirst_dtype dtype) noexcept { return hostfirst_dtype_bits(dtype); }
/// Parses an exact safetensors name ("BF16"); throws INVALID_ARGUMENT for an unknown one.
inline hostfirst_dtype from_name(const std::string &name) {
    hostfirst_dtype d = HOSTFIRST_DTYPE_BOOL;
    check(hostfirst_dtype_from_name(name.c_str(), &d));
    return d;
}
/// The DLPack DLDataType of a dtype.
inline hostfirst_dlpack_dtype to_dlpack(hostfirst_dtype dtype) {
    hostfirst_dlpack_dtype out{};
    check(hostfirst_dtype_to_dlpack(dtype, &out));
    return out;
}
}  // namespace dtype

/// Frees the process-wide caches of page-locked memory (staging slabs, resident registrations).
inline void release_cached_memory() { check(hostfirst_release_cached_memory()); }

namespace detail {
/// A copy of options `Opts` (put_options, load_options, shard_run_options) whose progress callback is guarded:
/// the library calls a noexcept trampoline, which calls the caller's callback with the caller's user pointer,
/// catches whatever it throws, keeps the first exception and cancels the operation (returns 1). rethrow()
/// then throws it on the caller's thread, after the C call returned. Not copyable or movable (the library holds
/// its address as the callback's user pointer).
template <class Opts>
class guarded_options {
public:
    explicit guarded_options(const Opts &opts) : o_(opts), fn_(opts.progress), user_(opts.user) {
        if (fn_) {
            o_.progress = &trampoline;
            o_.user = this;
        }
    }
    guarded_options(const guarded_options &) = delete;
    guarded_options &operator=(const guarded_options &) = delete;
    const Opts *get() const noexcept { return &o_; }
    /// Throws the exception the callback threw, if any (once).
    void rethrow() {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

private:
    static int32_t trampoline(uint64_t done, uint64_t total, void *self) noexcept {
        auto *g = static_cast<guarded_options *>(self);
        if (g->error_) return 1; /* cancelling: the library may still report the end */
        try {
            return g->fn_(done, total, g->user_);
        } catch (...) {
            g->error_ = std::current_exception();
            return 1;
        }
    }
    Opts o_;
    hostfirst_progress_fn fn_;
    void *user_;
    std::exception_ptr error_;
};

/// Calls `call(opts)` with the options' callback guarded (guarded_options): a callback's exception is rethrown
/// here once the call has returned (it cancelled the call); otherwise a failing status throws hostfirst::error.
template <class Opts, class F>
void call_guarded(const Opts &opts, F &&call) {
    guarded_options<Opts> g(opts);
    hostfirst_status st = call(g.get());
    g.rethrow();
    check(st);
}

/// Calls `call(args..., &out)` and hands the new handle to its owner: the C API writes `out` only on
/// success, so a failing call throws and leaves nothing to free.
template <class Owner, class Raw, class F, class... A>
Owner adopt(F call, A... args) {
    Raw *out = nullptr;
    check(call(args..., &out));
    return Owner(out);
}

/// Fills the index-th extensible info struct of a handle (struct_size set first).
template <class Info, class H, class F>
Info describe(const H *h, size_t index, F call) {
    Info i{};
    i.struct_size = sizeof i;
    check(call(h, index, &i));
    return i;
}
/// The one output of `call(h, &out)`.
template <class R, class H, class F>
R get(const H *h, F call) {
    R out{};
    check(call(h, &out));
    return out;
}

/// A move-only owner of one C handle, freed with Free (which accepts NULL) on destruction.
template <class T, hostfirst_status (*Free)(T *)>
class owner {
public:
    explicit owner(T *p = nullptr) noexcept : p_(p) {}
    owner(const owner &) = delete;
    owner &operator=(const owner &) = delete;
    owner(owner &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    owner &operator=(owner &&o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    ~owner() { reset(); }
    /// Owns the handle `call(args..., &out)` makes (throws, owning nothing, when the call fails).
    template <class F, class... A>
    static owner make(F call, A... args) {
        return adopt<owner, T>(call, args...);
    }
    void reset() noexcept { (void)Free(std::exchange(p_, nullptr)); }
    T *get() const noexcept { return p_; }

private:
    T *p_ = nullptr;
};

/// A move-only owner of one exported DLPack managed tensor: calls its deleter on destruction.
template <class T>
class dlpack_owner {
public:
    explicit dlpack_owner(T *t = nullptr) noexcept : t_(t) {}
    dlpack_owner(const dlpack_owner &) = delete;
    dlpack_owner &operator=(const dlpack_owner &) = delete;
    dlpack_owner(dlpack_owner &&o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
    dlpack_owner &operator=(dlpack_owner &&o) noexcept {
        if (this != &o) {
            reset();
            t_ = std::exchange(o.t_, nullptr);
        }
        return *this;
    }
    ~dlpack_owner() { reset(); }
    T *get() const noexcept { return t_; }
    T *operator->() const noexcept { return t_; }
    explicit operator bool() const noexcept { return t_ != nullptr; }
    /// Hands the tensor to a consumer (cast to dlpack.h's type); the consumer must call the deleter once.
    T *release() noexcept { return std::exchange(t_, nullptr); }
    /// Versioned form: the READ_ONLY flag. The legacy form has no flags and hostfirst exports it writable.
    bool read_only() const noexcept {
        if constexpr (std::is_same_v<T, hostfirst_dlpack_managed_tensor_versioned>)
            return t_ && (t_->flags & HOSTFIRST_DLPACK_FLAG_READ_ONLY) != 0;
        else
            return false;
    }
    /// Versioned form: the IS_COPIED flag (a copy made for this export). The legacy form cannot say.
    bool is_copied() const noexcept {
        if constexpr (std::is_same_v<T, hostfirst_dlpack_managed_tensor_versioned>)
            return t_ && (t_->flags & HOSTFIRST_DLPACK_FLAG_IS_COPIED) != 0;
        else
            return false;
    }
    void reset() noexcept {
        T *t = std::exchange(t_, nullptr);
        if (t && t->deleter) t->deleter(t);
    }

private:
    T *t_ = nullptr;
};
}  // namespace detail

/* DLPack ownership. Every export (to_dlpack, to_dlpack_legacy) comes back in an owner that
 * calls the tensor's deleter when it is destroyed: nothing leaks if the code between export and hand-off
 * throws. To hand a tensor to a consumer (a framework, a Python capsule), call release(): the raw
 * DLManagedTensorVersioned* / DLManagedTensor* is then the consumer's, which must call its deleter exactly
 * once. Until the deleter runs the tensor keeps its memory (file mapping, buffer) alive on its own, whatever
 * happens to the view, buffer or file it came from, and counts in handle_count(). */

/// Owner of one DLPack 1.1 tensor (layout of dlpack.h's DLManagedTensorVersioned).
using dlpack_tensor = detail::dlpack_owner<hostfirst_dlpack_managed_tensor_versioned>;
/// Owner of one unversioned ("legacy") DLPack tensor (layout of dlpack.h's DLManagedTensor).
using dlpack_legacy_tensor = detail::dlpack_owner<hostfirst_dlpack_managed_tensor>;

/// A consumer's DLPack request (hostfirst_dlpack_options_init: a DLPack 1.1 consumer that asked nothing else;
/// set copy, dl_device, stream as the consumer gave them).
struct dlpack_options : hostfirst_dlpack_options {
    dlpack_options() : hostfirst_dlpack_options{} {
        check(hostfirst_dlpack_options_init(this, sizeof(hostfirst_dlpack_options)));
    }
};

/// Options of a put (hostfirst_put_options_init: every field its default). The wrappers guard its callback.
struct put_options : hostfirst_put_options {
    put_options() : hostfirst_put_options{} { check(hostfirst_put_options_init(this, sizeof(hostfirst_put_options))); }
};

/// Options of a whole-file load (hostfirst_load_options_init: copies, no callback). load::run guards its callback.
struct load_options : hostfirst_load_options {
    load_options() : hostfirst_load_options{} {
        check(hostfirst_load_options_init(this, sizeof(hostfirst_load_options)));
    }
};

/// Settings of remote sources (hostfirst_remote_options_init: nothing configured, so the environment and the
/// defaults decide). Set what you need (cache_dir may point at a std::string's c_str(): the library copies it),
/// then pass it to remote_configure().
struct remote_options : hostfirst_remote_options {
    remote_options() : hostfirst_remote_options{} {
        check(hostfirst_remote_options_init(this, sizeof(hostfirst_remote_options)));
    }
};

/// Sets the process-wide settings of remote sources (hostfirst_remote_configure): configured fields win over
/// the environment variables; they apply to opens that start after the call.
inline void remote_configure(const remote_options &opts) { check(hostfirst_remote_configure(&opts)); }

/// Forgets the configured remote settings: the environment and the defaults decide again.
inline void remote_reset() { check(hostfirst_remote_configure(nullptr)); }

#if defined(HOSTFIRST_EXPERIMENTAL) /* experimental: may change in any minor (hostfirst.h, CONVENTIONS) */
/// Options of a shard plan: read merging and how its runs read (hostfirst_shard_options_init).
struct shard_options : hostfirst_shard_options {
    shard_options() : hostfirst_shard_options{} {
        check(hostfirst_shard_options_init(this, sizeof(hostfirst_shard_options)));
    }
};

/// Options of a read plan: the over-read cap, the largest request, reader threads
/// (hostfirst_read_plan_options_init: all defaults).
struct read_plan_options : hostfirst_read_plan_options {
    read_plan_options() : hostfirst_read_plan_options{} {
        check(hostfirst_read_plan_options_init(this, sizeof(hostfirst_read_plan_options)));
    }
};

/// Options of one run of a shard plan: the progress callback (hostfirst_shard_run_options_init), which
/// shard_plan::run guards.
struct shard_run_options : hostfirst_shard_run_options {
    shard_run_options() : hostfirst_shard_run_options{} {
        check(hostfirst_shard_run_options_init(this, sizeof(hostfirst_shard_run_options)));
    }
};
#endif /* HOSTFIRST_EXPERIMENTAL */

namespace detail {
/// The DLPack exports of a handle class D (view, buffer) whose c() gives the C handle H, over its one C export
/// X (hostfirst_view_to_dlpack, hostfirst_buffer_to_dlpack). What each shares, maps or copies is the C
/// function's contract.
template <class D, class H,
          hostfirst_status (*X)(const H *, const hostfirst_dlpack_options *,
                                hostfirst_dlpack_managed_tensor_versioned **, hostfirst_dlpack_managed_tensor **)>
class dlpack_exports {
public:
    /// Exports as a DLPack 1.x tensor (DLManagedTensorVersioned) for the request `opts` (copy, device, CUDA
    /// stream; the defaults share the memory where the C function does). A request for the legacy form
    /// (legacy set, or a max_version below 1.0) throws NULL_ARGUMENT: use to_dlpack_legacy.
    dlpack_tensor to_dlpack(const dlpack_options &opts = dlpack_options()) const {
        hostfirst_dlpack_managed_tensor_versioned *v = nullptr;
        check(X(handle(), &opts, &v, nullptr));
        return dlpack_tensor(v);
    }
    /// Exports in the unversioned form (DLManagedTensor, a consumer of DLPack 0.x), which has no read-only flag:
    /// always writable memory. `opts` as for to_dlpack; its legacy is set to 1 and its max_version to {0, 0}.
    dlpack_legacy_tensor to_dlpack_legacy(dlpack_options opts = dlpack_options()) const {
        opts.max_version = hostfirst_dlpack_version{0, 0};
        opts.legacy = 1;
        hostfirst_dlpack_managed_tensor *l = nullptr;
        check(X(handle(), &opts, nullptr, &l));
        return dlpack_legacy_tensor(l);
    }

private:
    const H *handle() const noexcept { return static_cast<const D *>(this)->c(); }
};
}  // namespace detail

namespace detail {
/// What a view and a buffer both answer: D has c() (its C handle H) and copy_to(dst, capacity); Describe
/// fills Info (a struct beginning with struct_size, with name, dtype, rank, shape and nbytes).
template <class D, class H, class Info, hostfirst_status (*Describe)(const H *, Info *)>
class tensor_accessors {
public:
    /// Everything at once (pointers valid while the handle lives).
    Info info() const {
        Info i{};
        i.struct_size = sizeof i;
        check(Describe(self().c(), &i));
        return i;
    }
    std::string name() const { return info().name; }
    hostfirst_dtype dtype() const { return info().dtype; }
    std::string dtype_name() const { return hostfirst_dtype_name(info().dtype); }
    std::vector<uint64_t> shape() const {
        auto i = info();
        return i.rank ? std::vector<uint64_t>(i.shape, i.shape + i.rank) : std::vector<uint64_t>();
    }
    /// Size in bytes (packed, C order).
    uint64_t nbytes() const { return info().nbytes; }
    /// A host copy of the bytes.
    std::vector<uint8_t> bytes() const { return to_vector<uint8_t>(); }
    /// A host copy as elements of T; throws INVALID_ARGUMENT if nbytes is not a multiple of sizeof(T).
    template <class T>
    std::vector<T> to_vector() const {
        uint64_t n = nbytes();
        if (n % sizeof(T) != 0)
            throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, name() + ": " + std::to_string(n) +
                                                               " bytes is not a whole number of elements of this size");
        std::vector<T> out(static_cast<size_t>(n / sizeof(T)));
        self().copy_to(out.data(), static_cast<size_t>(n));
        return out;
    }

private:
    const D &self() const noexcept { return static_cast<const D &>(*this); }
};
}  // namespace detail

/// Memory owned on one device (cpu, cuda_host, cuda:N): made by puts, loads, gathers and shard runs, or
/// adopted from a hostfirst_buffer* of the C API. Freed by the destructor. Move-only; const members are
/// thread-safe. DLPack exports share its memory, writable (kDLCUDA / kDLCUDAHost / kDLCPU), and keep it alive;
/// a gather batch they hold is never rewritten.
class buffer
    : public detail::tensor_accessors<buffer, hostfirst_buffer, hostfirst_buffer_info, hostfirst_buffer_describe>,
      public detail::dlpack_exports<buffer, hostfirst_buffer, hostfirst_buffer_to_dlpack> {
public:
    explicit buffer(hostfirst_buffer *b) noexcept : b_(b) {}

    hostfirst::device device() const { return hostfirst::device(info().device); }
    /// True for a copy-on-write mapping of its file (put_options::copy_on_write): untouched pages still
    /// come from the file, and truncating the file reaches written pages too (SIGBUS past the new end, the
    /// file's new content once it grows again; see hostfirst_put); false for memory of its own.
    bool is_file_backed() const {
        int32_t out = 0;
        check(hostfirst_buffer_is_file_backed(c(), &out));
        return out != 0;
    }
    /// Copies the whole buffer (from any device) into dst (capacity bytes); BUFFER_TOO_SMALL writes nothing.
    void copy_to(void *dst, size_t capacity) const { check(hostfirst_buffer_copy_to_host(c(), dst, capacity)); }
    /// A new buffer on `target` (fit-checked; the source is unchanged).
    buffer to(const hostfirst::device &target) const { return to_ptr(&target.c()); }
    /// A new buffer on the default device (IMPLICIT_PLACEMENT in strict mode).
    buffer to_default() const { return to_ptr(nullptr); }
    /// CUDA stream handshake for consumers outside DLPack: `stream` (DLPack values: 1 legacy default, 2
    /// per-thread default, > 2 a CUstream, -1 nothing) waits for hostfirst's last write. Host buffers: no-op.
    void sync_stream(int64_t stream) const { check(hostfirst_buffer_sync_stream(c(), stream)); }
    /// The release side: hostfirst's next rewrite of this buffer waits for the work queued on `stream` now.
    void record_stream(int64_t stream) const { check(hostfirst_buffer_record_stream(c(), stream)); }
    const hostfirst_buffer *c() const noexcept { return b_.get(); }

private:
    buffer to_ptr(const hostfirst_device *target) const {
        return detail::adopt<buffer, hostfirst_buffer>(hostfirst_buffer_to, c(), target);
    }
    detail::owner<hostfirst_buffer, hostfirst_buffer_free> b_;
};

/// An asynchronous put (view::put_start); the destructor cancels a running put and frees an untaken result.
class put_op {
public:
    explicit put_op(hostfirst_put_op *op) noexcept : op_(op) {}
    /// Adopts `op` together with the guarded options its callback runs with (see view::put_start).
    put_op(hostfirst_put_op *op, std::unique_ptr<detail::guarded_options<put_options>> guard) noexcept
        : guard_(std::move(guard)), op_(op) {}
    /// True once the put has finished (wait() then returns at once); false while it runs. Throws
    /// ALREADY_USED after the result was taken.
    bool poll() const {
        hostfirst_status st = hostfirst_put_poll(op_.get());
        if (st == HOSTFIRST_STATUS_NOT_READY) return false;
        check(st);
        return true;
    }
    /// Blocks until the put finishes; returns its buffer or throws its error (or the exception its progress
    /// callback threw, which cancelled it). Once only (then ALREADY_USED).
    hostfirst::buffer wait() {
        hostfirst_buffer *b = nullptr;
        hostfirst_status st = hostfirst_put_wait(op_.get(), &b);
        if (guard_) guard_->rethrow();
        check(st);
        return hostfirst::buffer(b);
    }
    const hostfirst_put_op *c() const noexcept { return op_.get(); }

private:
    /// Declared before op_, so destroyed after it: freeing the operation waits for its worker, the last
    /// caller of the guarded callback.
    std::unique_ptr<detail::guarded_options<put_options>> guard_;
    detail::owner<hostfirst_put_op, hostfirst_put_op_free> op_;
};

/// A read-only, zero-copy view of one tensor (or a part of one). Keeps its file mapping alive; valid
/// after the file is closed. Move-only; all const members are thread-safe. DLPack exports: to_dlpack() is the
/// read-only mapping itself (kDLCPU, flag READ_ONLY); to_dlpack_legacy() a private copy-on-write mapping of its
/// pages (writable; the file never changes), or a packed copy for memory and strided views. Either keeps the
/// mapping alive on its own.
class view : public detail::tensor_accessors<view, hostfirst_view, hostfirst_view_info, hostfirst_view_describe>,
             public detail::dlpack_exports<view, hostfirst_view, hostfirst_view_to_dlpack> {
public:
    /// Adopts a handle (freed by the destructor).
    explicit view(hostfirst_view *v) noexcept : v_(v) {}

    /// Zero-copy pointer into the read-only mapping (SIGBUS if the file is truncated meanwhile; see
    /// hostfirst_view_info). Check alignment() before casting to an element type.
    const void *data() const { return info().data; }
    uint64_t alignment() const { return info().alignment; }

    /// Rows [start, stop) of dimension 0, zero-copy, as an independent view.
    view slice_rows(uint64_t start, uint64_t stop) const {
        return detail::adopt<view, hostfirst_view>(hostfirst_view_slice_rows, c(), start, stop);
    }
    /// Elements [start, start + len) of dimension `dim`, zero-copy, as an independent view; strided for an
    /// inner dimension (to_vector() and puts give its packed C-order elements, reading only its runs).
    view narrow(uint32_t dim, uint64_t start, uint64_t len) const {
        return detail::adopt<view, hostfirst_view>(hostfirst_view_narrow, c(), dim, start, len);
    }
    /// Maps the view's pages now (hostfirst_view_prefault); afterwards gathers copy its windows from the
    /// mapping with no page faults instead of one pread each. Returns true when the pages were mapped, false
    /// for read-ahead advice only or memory buffers.
    bool prefault() const {
        int32_t populated = 0;
        check(hostfirst_view_prefault(c(), &populated));
        return populated == 1;
    }
    /// Copies the bytes with pread into dst (capacity bytes); TRUNCATED instead of SIGBUS.
    void copy_to(void *dst, size_t capacity) const { check(hostfirst_view_copy(c(), dst, capacity, nullptr)); }
    /// Copies len bytes from `offset` (packed C order) into dst with pread: streaming in chunks.
    void read(uint64_t offset, void *dst, size_t len) const { check(hostfirst_view_read(c(), offset, dst, len)); }
    using tensor_accessors::bytes;
    /// A copy of bytes [offset, offset + len) (pread); OUT_OF_RANGE past the end.
    std::vector<uint8_t> bytes(uint64_t offset, size_t len) const {
        std::vector<uint8_t> out(len);
        read(offset, out.data(), len);
        return out;
    }
    /// Puts the view onto `target` as a new buffer (fit-checked before anything is allocated); `stats`, when
    /// given, says what the transfer did (hostfirst_put's out_stats; its struct_size is set here).
    buffer put(const device &target, const put_options &opts = put_options(),
               hostfirst_put_stats *stats = nullptr) const {
        return put_ptr(&target.c(), opts, stats);
    }
    /// Puts the view onto the calling thread's default device (IMPLICIT_PLACEMENT in strict mode).
    buffer put_default(const put_options &opts = put_options(), hostfirst_put_stats *stats = nullptr) const {
        return put_ptr(nullptr, opts, stats);
    }
    /// Starts the put on a worker thread (the target is resolved now); this view may go right after. The
    /// progress callback runs on that thread, guarded: put_op::wait rethrows what it threw.
    put_op put_start(const device &target, const put_options &opts = put_options()) const {
        auto guard = std::make_unique<detail::guarded_options<put_options>>(opts);
        hostfirst_put_op *op = nullptr;
        check(hostfirst_put_start(c(), &target.c(), guard->get(), &op));
        return put_op(op, std::move(guard));
    }
    const hostfirst_view *c() const noexcept { return v_.get(); }

private:
    buffer put_ptr(const hostfirst_device *target, const put_options &opts, hostfirst_put_stats *stats) const {
        if (stats) stats->struct_size = sizeof *stats;
        hostfirst_buffer *out = nullptr;
        detail::call_guarded(opts, [&](const put_options *o) { return hostfirst_put(c(), target, o, &out, stats); });
        return buffer(out);
    }
    detail::owner<hostfirst_view, hostfirst_view_free> v_;
};

/// An open file of named tensors: a safetensors file or sharded set (*.safetensors.index.json), a NumPy .npy
/// file, an llm.c token shard, a Megatron indexed dataset or a headerless raw file. Move-only; const members
/// are thread-safe. Views outlive it; strings it returns do not.
class file {
public:
    /// Opens a file of any format recognised by content, or an index (header only; the data is mapped
    /// read-only, not read).
    static file open(const std::string &path) {
        return detail::adopt<file, hostfirst_file>(hostfirst_file_open, path.c_str());
    }
    /// Opens a file as `format` only (HOSTFIRST_STATUS_OTHER_FORMAT, naming it, for a file of another format).
    static file open_format(const std::string &path, hostfirst_format format) {
        return detail::adopt<file, hostfirst_file>(hostfirst_file_open_format, path.c_str(), format);
    }
    /// Opens a headerless file as one tensor: `shape[0]` may be HOSTFIRST_FILE_RAW_INFER (rows from the size).
    static file open_raw(const std::string &path, hostfirst_dtype dtype, const std::vector<uint64_t> &shape,
                         uint64_t offset = 0, const std::string &name = "data") {
        return detail::adopt<file, hostfirst_file>(hostfirst_file_open_raw, path.c_str(), dtype, shape.data(),
                                                   shape.size(), offset, name.c_str());
    }
    /// The file's format.
    hostfirst_format format() const { return detail::get<hostfirst_format>(c(), hostfirst_file_format); }
    /// How this file is read (hostfirst_file_read_engine): its file system, mapped or owned reads and why, the
    /// process's reader and whether O_DIRECT works for it.
    std::string read_engine() const {
        const hostfirst_file *f = c();
        return detail::copy_string([f](char *b, size_t cap, size_t *n) { return hostfirst_file_read_engine(f, b, cap, n); });
    }
    /// The format's name ("NPY", "MEGATRON").
    static std::string format_name(hostfirst_format format) { return hostfirst_format_name(format); }
    /// A Megatron dataset's sequences as (first element in `tokens`, length) pairs.
    std::vector<std::pair<uint64_t, uint64_t>> sequence_spans(const std::vector<uint64_t> &indices) const {
        std::vector<uint64_t> starts(indices.size()), lengths(indices.size());
        check(hostfirst_file_sequence_spans(c(), indices.data(), indices.size(), starts.data(), lengths.data()));
        std::vector<std::pair<uint64_t, uint64_t>> out;
        for (size_t i = 0; i < indices.size(); i++) out.emplace_back(starts[i], lengths[i]);
        return out;
    }
    /// Opens a safetensors image in caller memory, which must outlive the file and its views.
    static file open_memory(const void *data, size_t len) {
        return detail::adopt<file, hostfirst_file>(hostfirst_file_open_memory, data, len);
    }
    explicit file(hostfirst_file *f) noexcept : f_(f) {}

    size_t size() const { return detail::get<size_t>(c(), hostfirst_file_tensor_count); }
    /// Tensor names in file order.
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (size_t i = 0, n = size(); i < n; i++) {
            const char *p = nullptr;
            check(hostfirst_file_tensor_name(c(), i, &p));
            out.emplace_back(p);
        }
        return out;
    }
    bool contains(const std::string &name) const {
        size_t i = 0;
        hostfirst_status st = hostfirst_file_find(c(), name.c_str(), &i);
        if (st == HOSTFIRST_STATUS_NOT_FOUND) return false;
        check(st);
        return true;
    }
    hostfirst::view view(const std::string &name) const {
        return detail::adopt<hostfirst::view, hostfirst_view>(hostfirst_file_view, c(), name.c_str());
    }
    hostfirst::view view_at(size_t index) const {
        return detail::adopt<hostfirst::view, hostfirst_view>(hostfirst_file_view_at, c(), index);
    }
    /// `__metadata__` (for a set: the index's metadata, then the shards').
    std::map<std::string, std::string> metadata() const {
        std::map<std::string, std::string> out;
        size_t n = 0;
        check(hostfirst_file_metadata_count(c(), &n));
        for (size_t i = 0; i < n; i++) {
            const char *k = nullptr, *v = nullptr;
            check(hostfirst_file_metadata_get(c(), i, &k, &v));
            out.emplace(k, v);
        }
        return out;
    }
    /// One metadata value, or nullopt when the key is absent.
    std::optional<std::string> metadata(const std::string &key) const {
        const char *v = nullptr;
        hostfirst_status st = hostfirst_file_metadata_find(c(), key.c_str(), &v);
        if (st == HOSTFIRST_STATUS_NOT_FOUND) return std::nullopt;
        check(st);
        return std::string(v);
    }
    /// The path it was opened with (the index for a set); nullopt for a file opened from memory.
    std::optional<std::string> path() const {
        const char *p = nullptr;
        hostfirst_status st = hostfirst_file_path(c(), &p);
        if (st == HOSTFIRST_STATUS_NOT_FOUND) return std::nullopt;
        check(st);
        return std::string(p);
    }
    uint64_t data_bytes() const { return detail::get<uint64_t>(c(), hostfirst_file_data_bytes); }
    const hostfirst_file *c() const noexcept { return f_.get(); }

private:
    detail::owner<hostfirst_file, hostfirst_file_free> f_;
};

/// An ordered list of placement rules: glob pattern on tensor names -> "host", "default" or a device spec.
/// The first match wins; unmatched tensors stay on the host. `rules r; r.add("tokens", "host").add("*", "cuda:0");`
class rules {
public:
    rules() : r_(decltype(r_)::make(hostfirst_rules_new)) {}
    /// Appends `pattern` -> `target` (lower priority than every rule already added).
    rules &add(const std::string &pattern, const std::string &target) {
        check(hostfirst_rules_add(r_.get(), pattern.c_str(), target.c_str()));
        return *this;
    }
    /// Appends a rule written "pattern=target" (the CLI's --rule form).
    rules &add(const std::string &spec) {
        check(hostfirst_rules_add_spec(r_.get(), spec.c_str()));
        return *this;
    }
    const hostfirst_rules *c() const noexcept { return r_.get(); }

private:
    detail::owner<hostfirst_rules, hostfirst_rules_free> r_;
};

/// A placement plan: the dry run of rules over a file (nothing allocated). Strings in the infos it returns
/// live as long as the plan. Outside strict mode a rule that places no tensor is listed by unmatched_rules(),
/// not refused (strict mode: make() throws UNMATCHED_RULE): check it.
class plan {
public:
    static plan make(const file &f, const rules &r) {
        return detail::adopt<plan, hostfirst_plan>(hostfirst_plan_make, f.c(), r.c());
    }
    explicit plan(hostfirst_plan *p) noexcept : p_(p) {}
    size_t tensor_count() const { return detail::get<size_t>(c(), hostfirst_plan_tensor_count); }
    hostfirst_plan_tensor_info tensor(size_t i) const {
        return detail::describe<hostfirst_plan_tensor_info>(c(), i, hostfirst_plan_tensor);
    }
    size_t device_count() const { return detail::get<size_t>(c(), hostfirst_plan_device_count); }
    /// The i-th device receiving tensors: bytes, usable memory, fits, the largest tensor.
    hostfirst_plan_device_info device(size_t i) const {
        return detail::describe<hostfirst_plan_device_info>(c(), i, hostfirst_plan_device);
    }
    size_t unmatched_rule_count() const { return detail::get<size_t>(c(), hostfirst_plan_unmatched_rule_count); }
    hostfirst_plan_unmatched_rule_info unmatched_rule(size_t i) const {
        return detail::describe<hostfirst_plan_unmatched_rule_info>(c(), i, hostfirst_plan_unmatched_rule);
    }
    /// Every rule that places no tensor, in rule order.
    std::vector<hostfirst_plan_unmatched_rule_info> unmatched_rules() const {
        std::vector<hostfirst_plan_unmatched_rule_info> out;
        for (size_t i = 0, n = unmatched_rule_count(); i < n; i++) out.push_back(unmatched_rule(i));
        return out;
    }
    const hostfirst_plan *c() const noexcept { return p_.get(); }

private:
    detail::owner<hostfirst_plan, hostfirst_plan_free> p_;
};

/// One tensor of a load: a device buffer (kind HOSTFIRST_LOADED_BUFFER) or a host view (HOSTFIRST_LOADED_VIEW);
/// the other member holds NULL. Both are new handles of their own.
struct loaded {
    hostfirst_loaded kind;
    hostfirst::buffer buffer;
    hostfirst::view view;
};

/// The result of a whole-file load: every tensor by name. Buffers and views taken from it outlive it.
class load {
public:
    /// Applies `p` (made from `f`); every device is fit-checked before the first byte moves.
    /// Options: copy_on_write for cpu tensors, the progress callback.
    static load run(const file &f, const plan &p, const load_options &opts = load_options()) {
        hostfirst_load *out = nullptr;
        detail::call_guarded(opts, [&](const load_options *o) { return hostfirst_load_run(f.c(), p.c(), o, &out); });
        return load(out);
    }
    explicit load(hostfirst_load *l) noexcept : l_(l) {}
    size_t size() const { return detail::get<size_t>(c(), hostfirst_load_count); }
    /// The tensor `name` as new handles (NOT_FOUND if absent).
    loaded get(const std::string &name) const {
        hostfirst_loaded kind = HOSTFIRST_LOADED_VIEW;
        hostfirst_buffer *b = nullptr;
        hostfirst_view *v = nullptr;
        check(hostfirst_load_get(c(), name.c_str(), &kind, &b, &v));
        return {kind, hostfirst::buffer(b), hostfirst::view(v)};
    }
    /// HOSTFIRST_LOADED_VIEW or HOSTFIRST_LOADED_BUFFER, without making a handle.
    hostfirst_loaded kind(const std::string &name) const {
        hostfirst_loaded kind = HOSTFIRST_LOADED_VIEW;
        check(hostfirst_load_get(c(), name.c_str(), &kind, nullptr, nullptr));
        return kind;
    }
    /// Every tensor described in one call (hostfirst_load_entries), in file order; the entries' name and
    /// shape pointers (and the memory at their addresses) stay valid while this load lives.
    std::vector<hostfirst_load_entry> entries() const {
        size_t n = 0;
        check(hostfirst_load_entries(c(), nullptr, 0, sizeof(hostfirst_load_entry), &n));
        std::vector<hostfirst_load_entry> out(n);
        if (n) check(hostfirst_load_entries(c(), out.data(), n, sizeof(hostfirst_load_entry), &n));
        return out;
    }
    /// Every tensor name, in file order, from one packed buffer (hostfirst_load_names).
    std::vector<std::string> names() const {
        size_t need = 0;
        check(hostfirst_load_names(c(), nullptr, 0, &need));
        std::string packed(need, '\0');
        if (need) check(hostfirst_load_names(c(), packed.data(), need, &need));
        std::vector<std::string> out;
        for (size_t at = 0; at < need; at += out.back().size() + 1) out.emplace_back(packed.c_str() + at);
        return out;
    }
    const hostfirst_load *c() const noexcept { return l_.get(); }

private:
    detail::owner<hostfirst_load, hostfirst_load_free> l_;
};

/// Start offsets uniform in [0, len - window) from the splitmix64 stream `state` (advanced: reproducible
/// successive batches).
inline std::vector<uint64_t> random_offsets(uint64_t &state, uint64_t len, uint64_t window, size_t n) {
    std::vector<uint64_t> out(n);
    check(hostfirst_random_offsets(&state, len, window, out.data(), n));
    return out;
}

/// A gather's ring of batches: its bound, the batches allocated, how many consumers hold.
struct ring_info {
    size_t bound, allocated, held;
};

/// A reusable batch gather of [batch, window] elements of one dtype on one device. A batch handed out (a
/// buffer from run / run_from_buffer / batch(), or its DLPack export) is never rewritten while it
/// lives; when every batch is held the ring grows up to its bound, then runs throw BUSY.
class gather {
public:
    gather(const hostfirst::device &d, hostfirst_dtype dtype, uint64_t batch, uint64_t window)
        : g_(decltype(g_)::make(hostfirst_gather_new, d.c(), dtype, batch, window)) {}
    /// Fills a free batch, row i = elements [offsets[i], offsets[i] + window) of the 1-D `source`, and hands
    /// it out (not rewritten while the returned buffer lives; drop it to give the batch back to the ring).
    buffer run(const view &source, const std::vector<uint64_t> &offsets) {
        return detail::adopt<buffer, hostfirst_buffer>(hostfirst_gather_run, g_.get(), source.c(), offsets.data(),
                                                       offsets.size());
    }
    /// Gathers from a 1-D host buffer (the truncation-proof fast path), handing out the batch.
    buffer run_from_buffer(const buffer &source, const std::vector<uint64_t> &offsets) {
        return detail::adopt<buffer, hostfirst_buffer>(hostfirst_gather_run_from_buffer, g_.get(), source.c(),
                                                       offsets.data(), offsets.size());
    }
    /// Whole sequences of a Megatron dataset, padded with `pad` to the window; `lengths` (if given) receives
    /// the tokens each row holds.
    buffer run_sequences(const file &dataset, const std::vector<uint64_t> &indices, uint64_t pad = 0,
                         std::vector<uint64_t> *lengths = nullptr) {
        std::vector<uint64_t> l(indices.size());
        buffer b = detail::adopt<buffer, hostfirst_buffer>(hostfirst_gather_run_sequences, g_.get(), dataset.c(),
                                                           indices.data(), indices.size(), pad, l.data());
        if (lengths) *lengths = std::move(l);
        return b;
    }
    /// The current batch, as a new handle.
    buffer batch() const {
        return detail::adopt<buffer, hostfirst_buffer>(hostfirst_gather_batch, g_.get());
    }
    /// The most batches the ring may hold (1 to HOSTFIRST_GATHER_MAX_RING_BOUND).
    void set_ring_bound(size_t bound) { check(hostfirst_gather_set_ring_bound(g_.get(), bound)); }
    /// What later runs from a file leave in the page cache (1.1): HOSTFIRST_PAGE_CACHE_KEEP (the default),
    /// _DROP or _BYPASS (direct I/O where the file system allows it); another value throws INVALID_ARGUMENT.
    void set_page_cache(hostfirst_page_cache policy) { check(hostfirst_gather_set_page_cache(g_.get(), policy)); }
    ring_info ring() const {
        ring_info r{};
        check(hostfirst_gather_ring(g_.get(), &r.bound, &r.allocated, &r.held));
        return r;
    }
    uint64_t nbytes() const { return detail::get<uint64_t>(g_.get(), hostfirst_gather_nbytes); }
    /// Copies the current batch (C order) into dst (capacity bytes).
    void copy_to_host(void *dst, size_t capacity) const {
        check(hostfirst_gather_copy_to_host(g_.get(), dst, capacity));
    }
    /// The current batch as elements of T.
    template <class T>
    std::vector<T> to_vector() const {
        std::vector<T> out(static_cast<size_t>(nbytes() / sizeof(T)));
        copy_to_host(out.data(), out.size() * sizeof(T));
        return out;
    }
    const hostfirst_gather *c() const noexcept { return g_.get(); }
    hostfirst_gather *c() noexcept { return g_.get(); }

private:
    detail::owner<hostfirst_gather, hostfirst_gather_free> g_;
};

/// Batches prefetched while the step runs (hostfirst_gather_stream_start): a background thread fills up to
/// `depth` batches of `g` ahead; next() hands them out in order (each a buffer the ring never refills while it
/// lives) and returns std::nullopt after the last. A failure in the thread is thrown by the next() that would
/// have returned its batch. Destroying the stream cancels it (the run in progress finishes, nothing more).
class gather_stream {
public:
    /// n_batches batches of `source` (a 1-D tensor), offsets[k * batch ..] for batch k.
    gather_stream(gather &g, const view &source, const std::vector<uint64_t> &offsets, size_t n_batches,
                  size_t depth)
        : s_(decltype(s_)::make(hostfirst_gather_stream_start, g.c(), source.c(), offsets.data(), n_batches, depth)) {}
    /// The same from a 1-D host buffer (each window a memcpy).
    gather_stream(gather &g, const buffer &source, const std::vector<uint64_t> &offsets, size_t n_batches,
                  size_t depth)
        : s_(decltype(s_)::make(hostfirst_gather_stream_start_from_buffer, g.c(), source.c(), offsets.data(),
                                n_batches, depth)) {}
#if defined(HOSTFIRST_EXPERIMENTAL) /* experimental: may change in any minor (hostfirst.h, CONVENTIONS) */
    /// An open stream of `source` (a 1-D tensor; hostfirst_gather_stream_open): no batch yet; push() gives it
    /// batches until end_input().
    gather_stream(gather &g, const view &source, size_t depth)
        : s_(decltype(s_)::make(hostfirst_gather_stream_open, g.c(), source.c(), depth)) {}
    /// An open stream of a 1-D host buffer.
    gather_stream(gather &g, const buffer &source, size_t depth)
        : s_(decltype(s_)::make(hostfirst_gather_stream_open_from_buffer, g.c(), source.c(), depth)) {}
    /// Gives an open stream n_batches more batches (offsets.size() == n_batches * batch; each checked first).
    void push(const std::vector<uint64_t> &offsets, size_t n_batches) {
        check(hostfirst_gather_stream_push(s_.get(), offsets.data(), n_batches));
    }
    /// No more batches come: the stream ends after those pushed so far.
    void end_input() { check(hostfirst_gather_stream_end_input(s_.get())); }
#endif /* HOSTFIRST_EXPERIMENTAL */
    /// The next batch, waiting for it if needed; std::nullopt at the end. An open stream whose pushed batches
    /// were all handed out throws NOT_READY.
    std::optional<buffer> next() {
        hostfirst_buffer *b = nullptr;
        check(hostfirst_gather_stream_next(s_.get(), &b));
        if (!b) return std::nullopt;
        return buffer(b);
    }
    const hostfirst_gather_stream *c() const noexcept { return s_.get(); }

private:
    detail::owner<hostfirst_gather_stream, hostfirst_gather_stream_free> s_;
};

#if defined(HOSTFIRST_EXPERIMENTAL) /* experimental: may change in any minor (hostfirst.h, CONVENTIONS) */
/// A device mesh: named axes with sizes, positions numbered row-major (the last axis fastest).
class shard_mesh {
public:
    shard_mesh(const std::vector<std::string> &names, const std::vector<uint64_t> &sizes) {
        if (names.size() != sizes.size())
            throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, "shard_mesh: " + std::to_string(names.size()) +
                                                               " names but " + std::to_string(sizes.size()) + " sizes");
        std::vector<const char *> raw;
        for (const auto &n : names) raw.push_back(n.c_str());
        m_ = decltype(m_)::make(hostfirst_shard_mesh_new, raw.data(), sizes.data(), raw.size());
    }
    uint64_t positions() const { return detail::get<uint64_t>(c(), hostfirst_shard_mesh_positions); }
    /// The position at these coordinates (one per axis, outermost first).
    uint64_t position(const std::vector<uint64_t> &coords) const {
        uint64_t p = 0;
        check(hostfirst_shard_mesh_position(c(), coords.data(), coords.size(), &p));
        return p;
    }
    const hostfirst_shard_mesh *c() const noexcept { return m_.get(); }

private:
    detail::owner<hostfirst_shard_mesh, hostfirst_shard_mesh_free> m_;
};

/// Sharding rules over a mesh: glob -> partition spec ("x,y", "_,y", "x+y", "" replicates); the mesh may go.
class shard_rules {
public:
    explicit shard_rules(const shard_mesh &mesh)
        : r_(decltype(r_)::make(hostfirst_shard_rules_new, mesh.c())) {}
    shard_rules &add(const std::string &pattern, const std::string &spec) {
        check(hostfirst_shard_rules_add(r_.get(), pattern.c_str(), spec.c_str()));
        return *this;
    }
    /// Leaves the tensors `pattern` matches out of the plans (no shard, nothing read).
    shard_rules &skip(const std::string &pattern) {
        check(hostfirst_shard_rules_skip(r_.get(), pattern.c_str()));
        return *this;
    }
    const hostfirst_shard_rules *c() const noexcept { return r_.get(); }

private:
    detail::owner<hostfirst_shard_rules, hostfirst_shard_rules_free> r_;
};

/// One shard of a run: a new buffer handle (the shard, C order) and the file bytes read for it (0: a copy).
struct shard_buffer {
    hostfirst::buffer buffer;
    uint64_t bytes_read;
};

/// The buffers of a run of a shard plan; buffers taken from it outlive it.
class shard_result {
public:
    explicit shard_result(hostfirst_shard_result *r) noexcept : r_(r) {}
    size_t size() const { return detail::get<size_t>(c(), hostfirst_shard_result_count); }
    shard_buffer get(size_t index) const {
        hostfirst_buffer *b = nullptr;
        uint64_t read = 0;
        check(hostfirst_shard_result_get(c(), index, &b, &read));
        return {hostfirst::buffer(b), read};
    }
    uint64_t bytes_read() const { return detail::get<uint64_t>(c(), hostfirst_shard_result_bytes_read); }
    const hostfirst_shard_result *c() const noexcept { return r_.get(); }

private:
    detail::owner<hostfirst_shard_result, hostfirst_shard_result_free> r_;
};

/// A shard plan's totals: bytes of every shard, file bytes its reads take, whether every device had room.
struct shard_totals {
    uint64_t shard_bytes, read_bytes;
    bool fits;
};

/// The shards this process loads: for the owned mesh positions (shards to devices[i]), every tensor's
/// part and the reads it takes. Infos it returns live as long as the plan; results of its runs outlive it.
class shard_plan {
public:
    static shard_plan make(const file &f, const shard_rules &r, const std::vector<uint64_t> &positions,
                           const std::vector<device> &devices, const shard_options &opts = shard_options()) {
        if (positions.size() != devices.size())
            throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, "shard_plan: " + std::to_string(positions.size()) +
                                                               " positions but " + std::to_string(devices.size()) +
                                                               " devices");
        std::vector<hostfirst_device> raw;
        for (const auto &d : devices) raw.push_back(d.c());
        return detail::adopt<shard_plan, hostfirst_shard_plan>(hostfirst_shard_plan_make, f.c(), r.c(),
                                                               positions.data(), raw.data(), raw.size(), &opts);
    }
    explicit shard_plan(hostfirst_shard_plan *p) noexcept : p_(p) {}
    size_t size() const { return detail::get<size_t>(c(), hostfirst_shard_plan_count); }
    hostfirst_shard_info describe(size_t index) const {
        return detail::describe<hostfirst_shard_info>(c(), index, hostfirst_shard_plan_describe);
    }
    shard_totals totals() const {
        shard_totals t{};
        int32_t fits = 0;
        check(hostfirst_shard_plan_totals(c(), &t.shard_bytes, &t.read_bytes, &fits));
        t.fits = fits != 0;
        return t;
    }
    /// Loads every shard into its own buffer (fit-checked first; pread, never the mapping). A progress
    /// callback that throws cancels the run, and its exception is rethrown here.
    shard_result run(const shard_run_options &opts = shard_run_options()) const {
        hostfirst_shard_result *out = nullptr;
        detail::call_guarded(opts, [&](const shard_run_options *o) { return hostfirst_shard_run(c(), o, &out); });
        return shard_result(out);
    }
    const hostfirst_shard_plan *c() const noexcept { return p_.get(); }

private:
    detail::owner<hostfirst_shard_plan, hostfirst_shard_plan_free> p_;
};

/// One declared slice of a read plan: a tensor, whole (`starts`/`lens` empty) or a range per dimension.
struct read_slice {
    std::string name;
    std::vector<uint64_t> starts, lens;
};

/// A declared read plan: the slices a caller will read, as coalesced file requests, inspectable before any byte
/// moves (describe, request) and run into the caller's buffers as often as needed (execute).
class read_plan {
public:
    static read_plan make(const file &f, const std::vector<read_slice> &slices,
                          const read_plan_options &opts = read_plan_options()) {
        std::vector<hostfirst_read_plan_slice> raw;
        for (const auto &s : slices) {
            if (s.starts.size() != s.lens.size())
                throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, "read_plan: slice '" + s.name + "' has " +
                                                                   std::to_string(s.starts.size()) + " starts but " +
                                                                   std::to_string(s.lens.size()) + " lens");
            raw.push_back({s.name.c_str(), s.starts.size(), s.starts.empty() ? nullptr : s.starts.data(),
                           s.lens.empty() ? nullptr : s.lens.data()});
        }
        return detail::adopt<read_plan, hostfirst_read_plan>(hostfirst_read_plan_make, f.c(), raw.data(),
                                                             raw.size(), &opts);
    }
    explicit read_plan(hostfirst_read_plan *p) noexcept : p_(p) {}
    /// Slices, bytes needed, bytes read, requests, peak memory, files.
    hostfirst_read_plan_stats describe() const {
        hostfirst_read_plan_stats st{};
        st.struct_size = sizeof st;
        check(hostfirst_read_plan_describe(c(), &st));
        return st;
    }
    /// The index-th request after coalescing (describe().requests of them).
    hostfirst_read_plan_request_info request(uint64_t index) const {
        hostfirst_read_plan_request_info r{};
        r.struct_size = sizeof r;
        check(hostfirst_read_plan_request(c(), index, &r));
        return r;
    }
    /// Reads every slice into dsts[i] (capacities[i] bytes each, one per slice); returns the file bytes read.
    uint64_t execute(const std::vector<void *> &dsts, const std::vector<uint64_t> &capacities) const {
        if (dsts.size() != capacities.size())
            throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, "read_plan::execute: " + std::to_string(dsts.size()) +
                                                               " destinations but " +
                                                               std::to_string(capacities.size()) + " capacities");
        uint64_t read = 0;
        check(hostfirst_read_plan_execute(c(), dsts.data(), capacities.data(), dsts.size(), &read));
        return read;
    }
    const hostfirst_read_plan *c() const noexcept { return p_.get(); }

private:
    detail::owner<hostfirst_read_plan, hostfirst_read_plan_free> p_;
};
#endif /* HOSTFIRST_EXPERIMENTAL */

/// Options of a safetensors writer (hostfirst_writer_options_init: one process, one file, fsync). writer::open
/// guards its callbacks (agree, progress): one that throws fails the save and finish() rethrows the exception.
struct writer_options : hostfirst_writer_options {
    writer_options() : hostfirst_writer_options{} {
        check(hostfirst_writer_options_init(this, sizeof(hostfirst_writer_options)));
    }
};

namespace detail {
/// The callbacks of a writer's options, guarded as guarded_options guards a progress callback: the library
/// calls noexcept trampolines with this object as the user pointer; an exception is kept (the first) and the
/// save fails (progress returns 1: cancel; agree returns -1: an error on this rank, CANCELLED on the others);
/// writer::finish rethrows it once the C call has returned. Owned by the writer on the heap, so its address
/// stays valid while the writer moves.
class writer_guard {
public:
    explicit writer_guard(const writer_options &opts)
        : o_(opts), progress_(opts.progress), agree_(opts.agree), user_(opts.user) {
        o_.user = this;
        if (progress_) o_.progress = &on_progress;
        if (agree_) o_.agree = &on_agree;
    }
    writer_guard(const writer_guard &) = delete;
    writer_guard &operator=(const writer_guard &) = delete;
    const hostfirst_writer_options *get() const noexcept { return &o_; }
    void rethrow() {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

private:
    static int32_t on_progress(uint64_t done, uint64_t total, void *self) noexcept {
        auto *g = static_cast<writer_guard *>(self);
        if (g->error_) return 1;
        try {
            return g->progress_(done, total, g->user_);
        } catch (...) {
            g->error_ = std::current_exception();
            return 1;
        }
    }
    static int32_t on_agree(int32_t ok, void *self) noexcept {
        auto *g = static_cast<writer_guard *>(self);
        if (g->error_) return -1;
        try {
            return g->agree_(ok, g->user_);
        } catch (...) {
            g->error_ = std::current_exception();
            return -1;
        }
    }
    hostfirst_writer_options o_;
    hostfirst_progress_fn progress_;
    hostfirst_agree_fn agree_;
    void *user_;
    std::exception_ptr error_;
};
}  // namespace detail

/// A streaming safetensors writer: declare tensors (views, buffers on any device, host memory kept alive until
/// finish), set the metadata, finish() once. finish() writes a temporary file beside the target and renames it
/// over the target when complete (never a half-written file); with options.world > 1 it is collective.
///
///   auto w = hostfirst::writer::open("model.safetensors");
///   w.add("wte", HOSTFIRST_DTYPE_F32, {vocab, dim}, wte.data(), wte.size() * 4).add(f.view("tokens"));
///   w.metadata({{"format", "pt"}});
///   hostfirst_writer_info info = w.finish();
class writer {
public:
    static writer open(const std::string &path, const writer_options &opts = writer_options()) {
        auto g = std::make_unique<detail::writer_guard>(opts);
        hostfirst_writer *w = nullptr;
        check(hostfirst_writer_open(path.c_str(), g->get(), &w));
        return writer(w, std::move(g));
    }
    /// A writer into an open descriptor (Unix; the writer uses a duplicate and never closes `fd`).
    static writer open_fd(int fd, const writer_options &opts = writer_options()) {
        auto g = std::make_unique<detail::writer_guard>(opts);
        hostfirst_writer *w = nullptr;
        check(hostfirst_writer_open_fd(fd, g->get(), &w));
        return writer(w, std::move(g));
    }
    /// Adopts `w`, whose options' callbacks (if any) must not throw: use open() for guarded ones.
    explicit writer(hostfirst_writer *w) noexcept : w_(w) {}

    /// A view's bytes under its own name (or `name`), read through the engine at finish.
    writer &add(const view &v) {
        check(hostfirst_writer_add_view(c(), nullptr, v.c()));
        return *this;
    }
    writer &add(const std::string &name, const view &v) {
        check(hostfirst_writer_add_view(c(), name.c_str(), v.c()));
        return *this;
    }
    /// A buffer's bytes on any device (CUDA through the page-locked ring); the writer keeps it alive.
    writer &add(const std::string &name, const buffer &b) {
        check(hostfirst_writer_add_buffer(c(), name.c_str(), b.c()));
        return *this;
    }
    /// Host memory (C order, little-endian), written where it lies: keep it alive until finish() returns.
    writer &add(const std::string &name, hostfirst_dtype dtype, const std::vector<uint64_t> &shape, const void *data,
                size_t nbytes) {
        check(hostfirst_writer_add_host(c(), name.c_str(), dtype, shape.data(), shape.size(), data, nbytes));
        return *this;
    }
    /// A tensor whose bytes come in pieces (add_piece).
    writer &declare(const std::string &name, hostfirst_dtype dtype, const std::vector<uint64_t> &shape) {
        check(hostfirst_writer_declare(c(), name.c_str(), dtype, shape.data(), shape.size()));
        return *this;
    }
    writer &add_piece(const std::string &name, const std::vector<uint64_t> &start, const std::vector<uint64_t> &len,
                      const void *data, size_t nbytes) {
        if (start.size() != len.size())
            throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, "add_piece: start and len differ in rank");
        check(hostfirst_writer_add_piece_host(c(), name.c_str(), start.data(), len.data(), start.size(), data, nbytes));
        return *this;
    }
    writer &add_piece(const std::string &name, const std::vector<uint64_t> &start, const buffer &b) {
        check(hostfirst_writer_add_piece_buffer(c(), name.c_str(), start.data(), start.size(), b.c()));
        return *this;
    }
    writer &add_piece(const std::string &name, const std::vector<uint64_t> &start, const view &v) {
        check(hostfirst_writer_add_piece_view(c(), name.c_str(), start.data(), start.size(), v.c()));
        return *this;
    }
    /// `__metadata__`, written in the order given.
    writer &metadata(const std::vector<std::pair<std::string, std::string>> &entries) {
        std::vector<const char *> k, v;
        for (const auto &e : entries) {
            k.push_back(e.first.c_str());
            v.push_back(e.second.c_str());
        }
        check(hostfirst_writer_set_metadata(c(), k.data(), v.data(), entries.size()));
        return *this;
    }
    /// Writes the save; throws (every target as it was) on failure.
    /// An exception thrown by a callback of the options is rethrown here (the save failed).
    hostfirst_writer_info finish() {
        hostfirst_writer_info info{};
        info.struct_size = sizeof info;
        hostfirst_status st = hostfirst_writer_finish(c(), &info);
        if (g_) g_->rethrow();
        check(st);
        parts_ = info.parts;
        return info;
    }
    /// The part files of the finished save.
    std::vector<std::string> part_paths() const {
        std::vector<std::string> out;
        for (uint64_t i = 0; i < parts_; i++) {
            const char *p = nullptr;
            check(hostfirst_writer_part_path(c(), static_cast<size_t>(i), &p));
            out.emplace_back(p);
        }
        return out;
    }
    hostfirst_writer *c() const noexcept { return w_.get(); }

private:
    writer(hostfirst_writer *w, std::unique_ptr<detail::writer_guard> g) noexcept : w_(w), g_(std::move(g)) {}
    detail::owner<hostfirst_writer, hostfirst_writer_free> w_;
    std::unique_ptr<detail::writer_guard> g_; /* the callbacks' guard: the library holds its address */
    uint64_t parts_ = 0;
};

/// The number of live handles (files, views, buffers, unreleased DLPack exports): a leak check.
inline size_t handle_count() {
    size_t n = 0;
    check(hostfirst_handle_count(&n));
    return n;
}

}  // namespace hostfirst

#endif /* C++17 */
#endif /* HOSTFIRST_HPP */
