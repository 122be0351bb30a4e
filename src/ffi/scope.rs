//! The default-device stack: the process default and the queries (`hostfirst_default_*`), per-thread and
//! carried scopes (`hostfirst_scope_*`), strict mode (`hostfirst_strict_*`).

use super::args::{bool_arg, c_default_source, in_ref, opt_out, out_ptr};
use super::device::hostfirst_device;
use crate::error::Status;
use crate::scope::{self, CarriedScope, DefaultSource, ScopeToken};

/// A thread's default device and strictness, captured by `hostfirst_scope_capture` to be entered on another
/// thread with `hostfirst_scope_enter`. A plain value: copy it into the worker's arguments.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hostfirst_carried_scope {
    /// The device that becomes the worker's default.
    pub device: hostfirst_device,
    /// 1 if the capturing thread was in strict mode (its per-thread flag), else 0.
    pub strict: i32,
}

/// Writes the calling thread's effective default device and where it came from.
///
/// Resolution order: the innermost scope of this thread, the process setting, `HOSTFIRST_DEFAULT_DEVICE` (read
/// once, at first use), the built-in rule (`cuda:0` if CUDA is available, else `cpu:0`). `*out_source`
/// receives a `HOSTFIRST_DEFAULT_SOURCE_*` value and `*out_depth` the number of scopes on this thread; both
/// may be NULL. Strict mode does not affect this query (see `hostfirst_default_resolve`).
/// Errors: `NULL_ARGUMENT` for `out_device`; when no scope or process setting applies and
/// `HOSTFIRST_DEFAULT_DEVICE` is invalid, its parse error (`INVALID_ARGUMENT`, `UNAVAILABLE` or
/// `NO_SUCH_DEVICE`, the message naming the variable and value). Thread-safe; scopes are per thread.
#[no_mangle]
pub extern "C" fn hostfirst_default_device(
    out_device: *mut hostfirst_device,
    out_source: *mut DefaultSource,
    out_depth: *mut u32,
) -> Status {
    hostfirst_boundary!("hostfirst_default_device", {
        let out = out_ptr(out_device, "out_device")?;
        let cur = scope::current()?;
        *out = cur.device.into();
        if let Some(s) = opt_out(out_source) {
            *s = cur.source;
        }
        if let Some(d) = opt_out(out_depth) {
            *d = cur.depth;
        }
        Ok(())
    })
}

/// Returns the static name of a default source: its constant without the `HOSTFIRST_DEFAULT_SOURCE_` prefix
/// (`"SCOPE"`, `"PROCESS"`, `"ENV"`, `"BUILT_IN"`); `"UNKNOWN"` otherwise. Never NULL. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_default_source_name(source: c_default_source) -> *const std::ffi::c_char {
    hostfirst_boundary!("hostfirst_default_source_name", default = c"UNKNOWN".as_ptr(), {
        match DefaultSource::from_repr(source) {
            Some(s) => super::args::static_cstr(&super::args::constant_suffix(s.name())),
            None => c"UNKNOWN".as_ptr(),
        }
    })
}

/// Sets the process-wide default device (overrides the environment and the built-in rule, not scopes).
///
/// The device must be present. Errors: (nothing changes) `INVALID_ARGUMENT` (an unknown device kind),
/// `UNAVAILABLE` (its backend is not available), `NO_SUCH_DEVICE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_default_device_set(device: hostfirst_device) -> Status {
    hostfirst_boundary!("hostfirst_default_device_set", {
        scope::set_process_default(Some(device.to_present("device")?))
    })
}

/// Clears the process-wide default device, so the environment or built-in rule applies again. Returns `OK`.
/// Errors: none of its own (`PANIC` only for a bug inside the library: see CONVENTIONS, Status). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_default_device_clear() -> Status {
    hostfirst_boundary!("hostfirst_default_device_clear", { scope::set_process_default(None) })
}

/// Resolves "the default device" as a placement would: like `hostfirst_default_device`, but fails with
/// `IMPLICIT_PLACEMENT` when strict mode is on for this thread or the process. Errors: `NULL_ARGUMENT`
/// (`out_device`), `IMPLICIT_PLACEMENT`, and those of an invalid `HOSTFIRST_DEFAULT_DEVICE` as in
/// `hostfirst_default_device` (`INVALID_ARGUMENT`, `UNAVAILABLE`, `NO_SUCH_DEVICE`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_default_resolve(out_device: *mut hostfirst_device) -> Status {
    hostfirst_boundary!("hostfirst_default_resolve", {
        let out = out_ptr(out_device, "out_device")?;
        *out = scope::resolve_default("the default device")?.into();
        Ok(())
    })
}

/// Pushes a scope that makes `device` the calling thread's default, and writes its token.
///
/// Other threads never see it. Pop it with `hostfirst_scope_pop(token)`. Errors: `NULL_ARGUMENT`; the
/// device must be present (`INVALID_ARGUMENT`, `UNAVAILABLE`, `NO_SUCH_DEVICE`); `LIMIT_EXCEEDED` past 65536
/// nested scopes on one thread.
///
/// Scopes belong to their thread. When a thread exits with scopes still pushed (and its strict flag set),
/// they are discarded with it: nothing leaks, no other thread and not the process default change, and their
/// tokens pop nowhere afterwards (`SCOPE_MISMATCH` on any thread). A thread that lives on, such as a pool
/// worker, keeps a scope its task forgot to pop for the next task: pop (or `hostfirst_scope_leave`) before the
/// task returns. Scope calls made while the thread itself is being torn down (from a thread-local destructor)
/// fail with `INTERNAL`; they never crash.
#[no_mangle]
pub extern "C" fn hostfirst_scope_push(device: hostfirst_device, out_token: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_scope_push", {
        let out = out_ptr(out_token, "out_token")?;
        *out = scope::push(device.to_present("device")?)?.0;
        Ok(())
    })
}

/// Pops the calling thread's innermost scope, which must be the one `token` names.
///
/// Errors: `SCOPE_MISMATCH` when `token` is not the innermost scope of this thread (out of order, from
/// another thread, already popped) or the thread has no scope: nothing changes, and the message says which
/// scope is innermost.
#[no_mangle]
pub extern "C" fn hostfirst_scope_pop(token: u64) -> Status {
    hostfirst_boundary!("hostfirst_scope_pop", { scope::pop(ScopeToken(token)).map(|_| ()) })
}

/// Captures the calling thread's effective default device and per-thread strict flag into `*out`, to be
/// entered on a worker thread with `hostfirst_scope_enter`.
///
/// Errors: `NULL_ARGUMENT`; an invalid `HOSTFIRST_DEFAULT_DEVICE` as in `hostfirst_default_device`.
#[no_mangle]
pub extern "C" fn hostfirst_scope_capture(out: *mut hostfirst_carried_scope) -> Status {
    hostfirst_boundary!("hostfirst_scope_capture", {
        let out = out_ptr(out, "out")?;
        let c = scope::capture()?;
        *out = hostfirst_carried_scope { device: c.device.into(), strict: c.strict as i32 };
        Ok(())
    })
}

/// Enters a carried scope on the calling thread: pushes its device as a scope and adopts its strict flag.
///
/// Leave with `hostfirst_scope_leave(token)`, which is checked like `hostfirst_scope_pop` and restores this
/// thread's previous strict flag. Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a malformed device or a
/// strict value other than 0 or 1; device presence as in `hostfirst_scope_push`.
#[no_mangle]
pub extern "C" fn hostfirst_scope_enter(carried: *const hostfirst_carried_scope, out_token: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_scope_enter", {
        let c = in_ref(carried, "carried")?;
        let out = out_ptr(out_token, "out_token")?;
        if c.strict != 0 && c.strict != 1 {
            return Err(crate::err!(InvalidArgument, "carried->strict is {}; expected 0 or 1", c.strict));
        }
        let device = c.device.to_device("carried->device")?;
        *out = scope::enter(CarriedScope { device, strict: c.strict == 1 })?.0;
        Ok(())
    })
}

/// Leaves a scope entered with `hostfirst_scope_enter` (checked like `hostfirst_scope_pop`; restores the
/// thread's strict flag as it was before the enter). Errors: `SCOPE_MISMATCH` (as for
/// `hostfirst_scope_pop`; nothing changes).
#[no_mangle]
pub extern "C" fn hostfirst_scope_leave(token: u64) -> Status {
    hostfirst_boundary!("hostfirst_scope_leave", { scope::leave(ScopeToken(token)).map(|_| ()) })
}

/// Turns strict mode on (`on` = 1) or off (0) for the calling thread. In strict mode any operation that would
/// resolve the implicit default device fails with `IMPLICIT_PLACEMENT` (the analogue of JAX's
/// transfer guard). Errors: `INVALID_ARGUMENT` for an `on` other than 0 or 1 (nothing changes).
#[no_mangle]
pub extern "C" fn hostfirst_strict_thread_set(on: i32) -> Status {
    hostfirst_boundary!("hostfirst_strict_thread_set", {
        scope::set_thread_strict(bool_arg(on, "on")?);
        Ok(())
    })
}

/// Turns strict mode on (`on` = 1) or off (0) for the whole process (every thread). Errors:
/// `INVALID_ARGUMENT` for an `on` other than 0 or 1 (nothing changes).
#[no_mangle]
pub extern "C" fn hostfirst_strict_process_set(on: i32) -> Status {
    hostfirst_boundary!("hostfirst_strict_process_set", {
        scope::set_process_strict(bool_arg(on, "on")?);
        Ok(())
    })
}

/// Writes the calling thread's and the process's strict flags (1 or 0); either output may be NULL. Errors:
/// none of its own (`PANIC` only for a bug inside the library).
#[no_mangle]
pub extern "C" fn hostfirst_strict_get(out_thread: *mut i32, out_process: *mut i32) -> Status {
    hostfirst_boundary!("hostfirst_strict_get", {
        if let Some(t) = opt_out(out_thread) {
            *t = scope::thread_strict() as i32;
        }
        if let Some(p) = opt_out(out_process) {
            *p = scope::process_strict() as i32;
        }
        Ok(())
    })
}
