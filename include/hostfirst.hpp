/*
 * hostfirst.hpp - header-only C++17 RAII wrappers over the C API in hostfirst.h.
 *
 * Every failing call throws hostfirst::error (status + the library's message). Handles are move-only
 * owners that free themselves; scopes are RAII guards that pop themselves (checked) on destruction.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef HOSTFIRST_HPP
#define HOSTFIRST_HPP

#include <cstdint>
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
    /// Parses a spec ("cpu", "cuda:1", "gpu", "cuda:GPU-<uuid>", "cuda_host"); throws if absent or malformed.
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
    /// (free, total) bytes now; for CUDA this retains the primary context.
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

}  // namespace hostfirst

#endif /* HOSTFIRST_HPP */
