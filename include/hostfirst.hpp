/*
 * hostfirst.hpp - header-only C++17 RAII wrappers over the C API in hostfirst.h.
 *
 * Every failing call throws hostfirst::error (status + the library's message). Handles are move-only
 * owners that free themselves; scopes are RAII guards that pop themselves (checked) on destruction.
 *
 *   auto f = hostfirst::file::open("tokens.safetensors");   // header only; data mapped read-only
 *   hostfirst::view tokens = f.view("tokens");              // zero-copy; outlives f
 *   hostfirst::view head = tokens.slice_rows(0, 1024);      // zero-copy rows (narrow(dim, start, len): any dim)
 *   std::vector<uint16_t> v = head.to_vector<uint16_t>();   // pread copy: TRUNCATED instead of SIGBUS
 *   hostfirst::dlpack_tensor t = tokens.to_dlpack();        // DLPack 1.1, read-only, kDLCPU
 *
 * The wrappers cover files, views, devices, default-device scopes and DLPack. Placement (hostfirst_put*,
 * hostfirst_rules_* / hostfirst_plan_* / hostfirst_load_*, hostfirst_gather_*) is called through the C API
 * directly; hostfirst::buffer adopts the hostfirst_buffer* those calls return. Enum values (statuses, dtypes,
 * device kinds) are the C header's HOSTFIRST_* constants.
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
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hostfirst.h"

namespace hostfirst {

/// The exception every wrapper throws: the status code, its name and the thread's last error message.
class error : public std::runtime_error {
public:
    error(hostfirst_status status, const std::string &message)
        : std::runtime_error(std::string(hostfirst_status_name(status)) + ": " + message), status_(status) {}
    hostfirst_status status() const noexcept { return status_; }
    const char *status_name() const noexcept { return hostfirst_status_name(status_); }
    /// For HOSTFIRST_STATUS_OUT_OF_MEMORY raised by a fit check: needed/free/total bytes and the device.
    bool fit(hostfirst_fit_info &out) const noexcept {
        return status_ == HOSTFIRST_STATUS_OUT_OF_MEMORY && hostfirst_last_fit(&out) == HOSTFIRST_STATUS_OK;
    }

private:
    hostfirst_status status_;
};

/// Throws hostfirst::error unless status is OK.
inline void check(hostfirst_status status) {
    if (status != HOSTFIRST_STATUS_OK) throw error(status, hostfirst_last_error());
}

/// Throws unless the loaded library matches the header this program was compiled with.
inline void check_version() {
    if (hostfirst_version_number() != HOSTFIRST_VERSION_NUMBER)
        throw error(HOSTFIRST_STATUS_UNSUPPORTED, std::string("library version ") + hostfirst_version() +
                                                      " does not match the header");
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
    int32_t kind() const noexcept { return d_.kind; }
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
        return a.d_.kind == b.d_.kind && a.d_.ordinal == b.d_.ordinal;
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
        hostfirst_backend_info b;
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

/// The effective default device and where it came from ("scope", "process", "env", "built-in").
struct default_info {
    hostfirst::device device;
    std::string source;
    uint32_t depth;
};

inline default_info default_device() {
    hostfirst_device d;
    uint32_t source = 0, depth = 0;
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

/// Owner of one exported DLPack 1.1 tensor (layout of dlpack.h's DLManagedTensorVersioned). Calls the
/// deleter on destruction unless release()d to a consumer, which then owns the deleter call. Move-only.
class dlpack_tensor {
public:
    explicit dlpack_tensor(hostfirst_dlpack_managed_tensor_versioned *t) noexcept : t_(t) {}
    dlpack_tensor(const dlpack_tensor &) = delete;
    dlpack_tensor &operator=(const dlpack_tensor &) = delete;
    dlpack_tensor(dlpack_tensor &&o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
    dlpack_tensor &operator=(dlpack_tensor &&o) noexcept {
        if (this != &o) {
            reset();
            t_ = std::exchange(o.t_, nullptr);
        }
        return *this;
    }
    ~dlpack_tensor() { reset(); }
    hostfirst_dlpack_managed_tensor_versioned *get() const noexcept { return t_; }
    hostfirst_dlpack_managed_tensor_versioned *operator->() const noexcept { return t_; }
    /// Hands the tensor to a consumer (e.g. cast to DLManagedTensorVersioned*); it must call the deleter.
    hostfirst_dlpack_managed_tensor_versioned *release() noexcept { return std::exchange(t_, nullptr); }
    bool read_only() const noexcept { return t_ && (t_->flags & HOSTFIRST_DLPACK_FLAG_READ_ONLY) != 0; }
    void reset() noexcept {
        if (t_ && t_->deleter) t_->deleter(t_);
        t_ = nullptr;
    }

private:
    hostfirst_dlpack_managed_tensor_versioned *t_ = nullptr;
};

/// A read-only, zero-copy view of one tensor (or a row range of one). Keeps its file mapping alive; valid
/// after the file is closed. Move-only; all const members are thread-safe.
class view {
public:
    /// Adopts a handle (freed by the destructor).
    explicit view(hostfirst_view *v) noexcept : v_(v) {}
    view(const view &) = delete;
    view &operator=(const view &) = delete;
    view(view &&o) noexcept : v_(std::exchange(o.v_, nullptr)) {}
    view &operator=(view &&o) noexcept {
        if (this != &o) {
            (void)hostfirst_view_free(v_);
            v_ = std::exchange(o.v_, nullptr);
        }
        return *this;
    }
    ~view() { (void)hostfirst_view_free(v_); }

    /// Everything at once (pointers valid while this view lives).
    hostfirst_view_info info() const {
        hostfirst_view_info i{};
        i.struct_size = sizeof i;
        check(hostfirst_view_describe(v_, &i));
        return i;
    }
    std::string name() const { return info().name; }
    uint32_t dtype() const { return info().dtype; }
    std::string dtype_name() const { return hostfirst_dtype_name(info().dtype); }
    std::vector<uint64_t> shape() const {
        auto i = info();
        return i.rank ? std::vector<uint64_t>(i.shape, i.shape + i.rank) : std::vector<uint64_t>();
    }
    uint64_t nbytes() const { return info().nbytes; }
    /// Zero-copy pointer into the read-only mapping (SIGBUS if the file is truncated meanwhile; see
    /// hostfirst_view_info). Check alignment() before casting to an element type.
    const void *data() const { return info().data; }
    uint64_t alignment() const { return info().alignment; }

    /// Rows [start, stop) of dimension 0, zero-copy, as an independent view.
    view slice_rows(uint64_t start, uint64_t stop) const {
        hostfirst_view *out = nullptr;
        check(hostfirst_view_slice_rows(v_, start, stop, &out));
        return view(out);
    }
    /// Elements [start, start + len) of dimension `dim`, zero-copy, as an independent view; strided for an
    /// inner dimension (to_vector() and puts give its packed C-order elements, reading only its runs).
    view narrow(uint32_t dim, uint64_t start, uint64_t len) const {
        hostfirst_view *out = nullptr;
        check(hostfirst_view_narrow(v_, dim, start, len, &out));
        return view(out);
    }
    /// Maps the view's pages now (hostfirst_view_prefault); afterwards gathers copy its windows from the
    /// mapping with no page faults instead of one pread each. Returns true when the pages were mapped, false
    /// for read-ahead advice only or memory buffers.
    bool prefault() const {
        bool populated = false;
        check(hostfirst_view_prefault(v_, &populated));
        return populated;
    }
    /// Copies the bytes with pread into dst (capacity bytes); TRUNCATED instead of SIGBUS.
    void copy_to(void *dst, size_t capacity) const { check(hostfirst_view_copy(v_, dst, capacity, nullptr)); }
    /// A copy of the bytes (pread).
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> out(static_cast<size_t>(nbytes()));
        copy_to(out.data(), out.size());
        return out;
    }
    /// A copy as elements of T; throws INVALID_ARGUMENT if nbytes is not a multiple of sizeof(T).
    template <class T>
    std::vector<T> to_vector() const {
        uint64_t n = nbytes();
        if (n % sizeof(T) != 0)
            throw error(HOSTFIRST_STATUS_INVALID_ARGUMENT, name() + ": " + std::to_string(n) +
                                                               " bytes is not a whole number of elements of this size");
        std::vector<T> out(static_cast<size_t>(n / sizeof(T)));
        copy_to(out.data(), static_cast<size_t>(n));
        return out;
    }
    /// Exports as a DLPack 1.1 tensor: zero-copy, read-only, kDLCPU; keeps the mapping alive on its own.
    dlpack_tensor to_dlpack() const {
        hostfirst_dlpack_managed_tensor_versioned *t = nullptr;
        check(hostfirst_view_to_dlpack(v_, &t));
        return dlpack_tensor(t);
    }
    const hostfirst_view *c() const noexcept { return v_; }

private:
    hostfirst_view *v_ = nullptr;
};

/// An open safetensors file or sharded set (*.safetensors.index.json). Move-only; const members are
/// thread-safe. Views outlive it; strings it returns do not.
class file {
public:
    /// Opens a file or an index (header only; the data is mapped read-only, not read).
    static file open(const std::string &path) {
        hostfirst_file *f = nullptr;
        check(hostfirst_file_open(path.c_str(), &f));
        return file(f);
    }
    /// Opens a safetensors image in caller memory, which must outlive the file and its views.
    static file open_memory(const void *data, size_t len) {
        hostfirst_file *f = nullptr;
        check(hostfirst_file_open_memory(data, len, &f));
        return file(f);
    }
    explicit file(hostfirst_file *f) noexcept : f_(f) {}
    file(const file &) = delete;
    file &operator=(const file &) = delete;
    file(file &&o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
    file &operator=(file &&o) noexcept {
        if (this != &o) {
            (void)hostfirst_file_free(f_);
            f_ = std::exchange(o.f_, nullptr);
        }
        return *this;
    }
    ~file() { (void)hostfirst_file_free(f_); }

    size_t size() const {
        size_t n = 0;
        check(hostfirst_file_tensor_count(f_, &n));
        return n;
    }
    /// Tensor names in file order.
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (size_t i = 0, n = size(); i < n; i++) {
            const char *p = nullptr;
            check(hostfirst_file_tensor_name(f_, i, &p));
            out.emplace_back(p);
        }
        return out;
    }
    bool contains(const std::string &name) const {
        size_t i = 0;
        hostfirst_status st = hostfirst_file_find(f_, name.c_str(), &i);
        if (st == HOSTFIRST_STATUS_NOT_FOUND) return false;
        check(st);
        return true;
    }
    hostfirst::view view(const std::string &name) const {
        hostfirst_view *v = nullptr;
        check(hostfirst_file_view(f_, name.c_str(), &v));
        return hostfirst::view(v);
    }
    hostfirst::view view_at(size_t index) const {
        hostfirst_view *v = nullptr;
        check(hostfirst_file_view_at(f_, index, &v));
        return hostfirst::view(v);
    }
    /// `__metadata__` (for a set: the index's metadata, then the shards').
    std::map<std::string, std::string> metadata() const {
        std::map<std::string, std::string> out;
        size_t n = 0;
        check(hostfirst_file_metadata_count(f_, &n));
        for (size_t i = 0; i < n; i++) {
            const char *k = nullptr, *v = nullptr;
            check(hostfirst_file_metadata_get(f_, i, &k, &v));
            out.emplace(k, v);
        }
        return out;
    }
    uint64_t data_bytes() const {
        uint64_t n = 0;
        check(hostfirst_file_data_bytes(f_, &n));
        return n;
    }
    const hostfirst_file *c() const noexcept { return f_; }

private:
    hostfirst_file *f_ = nullptr;
};

/// Memory owned on one device (cpu, cuda_host, cuda:N). Adopts a hostfirst_buffer* made by the C API
/// (hostfirst_put, hostfirst_buffer_to, hostfirst_load_get) and frees it. Move-only.
class buffer {
public:
    explicit buffer(hostfirst_buffer *b) noexcept : b_(b) {}
    buffer(const buffer &) = delete;
    buffer &operator=(const buffer &) = delete;
    buffer(buffer &&o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
    buffer &operator=(buffer &&o) noexcept {
        if (this != &o) {
            (void)hostfirst_buffer_free(b_);
            b_ = std::exchange(o.b_, nullptr);
        }
        return *this;
    }
    ~buffer() { (void)hostfirst_buffer_free(b_); }
    /// Exports as a DLPack 1.1 tensor: zero-copy, writable; kDLCUDA / kDLCUDAHost / kDLCPU.
    dlpack_tensor to_dlpack() const {
        hostfirst_dlpack_managed_tensor_versioned *t = nullptr;
        check(hostfirst_buffer_to_dlpack(b_, &t));
        return dlpack_tensor(t);
    }
    const hostfirst_buffer *c() const noexcept { return b_; }

private:
    hostfirst_buffer *b_ = nullptr;
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
