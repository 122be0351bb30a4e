//! Statuses and the calling thread's last failure: `hostfirst_status_*`, `hostfirst_last_*` and the fit-check
//! details (`hostfirst_fit_info`). The last error is recorded here by the panic boundary (`super::run_status`).

use super::args::{c_status, out_struct, out_struct_size, write_out_struct};
use super::device::hostfirst_device;
use crate::device::DeviceSpec;
use crate::error::{Error, FitFailure, Status, ALL_STATUSES};
use std::cell::RefCell;
use std::ffi::{c_char, CString};

// `Status` (src/error.rs) is exported to C as `hostfirst_status` (cbindgen.toml renames it).

/// The last failure on this thread.
pub(crate) struct LastError {
    pub status: Status,
    pub message: CString,
    pub fit: Option<FitFailure>,
}

thread_local! {
    pub(crate) static LAST_ERROR: RefCell<LastError> =
        RefCell::new(LastError { status: Status::Ok, message: CString::default(), fit: None });
}

/// For a call whose non-OK outcome can be an answer rather than a failure (`hostfirst_put_poll`'s
/// `NOT_READY`), run inside `hostfirst_boundary!(name, default = Status::Panic, { answer(|| ...) })`: an
/// error is recorded as the thread's last error as usual; `Ok(status)` is returned as is and leaves the last
/// error alone (the header's convention: only failing calls replace it).
pub(crate) fn answer(f: impl FnOnce() -> crate::error::Result<Status>) -> Status {
    match f() {
        Ok(s) => s,
        Err(e) => {
            set_last_error(&e);
            e.status()
        }
    }
}

/// Records `e` as the calling thread's last error.
pub(crate) fn set_last_error(e: &Error) {
    let msg = CString::new(e.message().replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = LastError { status: e.status(), message: msg, fit: e.fit().cloned() };
        }
    });
}

/// Details of the most recent failed fit check on this thread, filled by `hostfirst_last_error_fit`. Set
/// `struct_size = sizeof(hostfirst_fit_info)` before the call; fields may be appended in later minor versions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hostfirst_fit_info {
    /// In: the caller's `sizeof(hostfirst_fit_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// Bytes the operation needed.
    pub needed: u64,
    /// Bytes free on the device when checked (host memory: MemAvailable minus the safety margin).
    pub free: u64,
    /// Total bytes of the device.
    pub total: u64,
    /// The device checked.
    pub device: hostfirst_device,
}

out_struct!(hostfirst_fit_info, device);

/// Returns the static name of a status: its constant without the `HOSTFIRST_STATUS_` prefix, e.g.
/// `"OUT_OF_MEMORY"` for `HOSTFIRST_STATUS_OUT_OF_MEMORY`.
///
/// Unknown values give `"UNKNOWN"`. Never returns NULL; the string lives for the process lifetime. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_status_name(status: c_status) -> *const c_char {
    hostfirst_boundary!("hostfirst_status_name", default = c"UNKNOWN".as_ptr(), {
        match Status::from_u32(status) {
            Some(s) => super::args::static_cstr(s.name()),
            None => c"UNKNOWN".as_ptr(),
        }
    })
}

/// Returns 1 if `status` is in the file-format range (a malformed or rejected safetensors file or index),
/// else 0 (also for a value that is no `hostfirst_status`).
#[no_mangle]
pub extern "C" fn hostfirst_status_is_format_error(status: c_status) -> i32 {
    hostfirst_boundary!("hostfirst_status_is_format_error", default = 0, {
        Status::from_u32(status).map(|s| s.is_format() as i32).unwrap_or(0)
    })
}

/// Returns the number of distinct status codes this library defines (for tests and bindings).
#[no_mangle]
pub extern "C" fn hostfirst_status_count() -> usize {
    hostfirst_boundary!("hostfirst_status_count", default = 0, { ALL_STATUSES.len() })
}

/// Returns the status of the most recent failed hostfirst call on the calling thread, or
/// `HOSTFIRST_STATUS_OK` if none has failed yet.
///
/// The last error is per thread and is only replaced by the next *failing* call on the same thread;
/// successful calls leave it alone. The family: `hostfirst_last_error_status` (the code),
/// `hostfirst_last_error_message` (the text), `hostfirst_last_error_fit` (the numbers of a failed fit check).
/// Errors: none of its own: what it returns is the last failure's status, not this call's (`PANIC` only for
/// a bug inside the library). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_last_error_status() -> Status {
    hostfirst_boundary!("hostfirst_last_error_status", default = Status::Panic, {
        LAST_ERROR.try_with(|l| l.borrow().status).unwrap_or(Status::Internal)
    })
}

/// Returns the message of the most recent failed hostfirst call on the calling thread ("" if none).
///
/// The message names the thing (tensor, device, file) and the numbers (needed vs free bytes). The pointer
/// is owned by the library and valid until the next failing hostfirst call on the same thread; copy it
/// to keep it. Never returns NULL. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_last_error_message() -> *const c_char {
    hostfirst_boundary!("hostfirst_last_error_message", default = c"".as_ptr(), {
        LAST_ERROR.try_with(|l| l.borrow().message.as_ptr()).unwrap_or(c"".as_ptr())
    })
}

/// Copies the numbers of the calling thread's last failure into `*out` when that failure was a fit check
/// (`HOSTFIRST_STATUS_OUT_OF_MEMORY` raised before allocating). Set `out->struct_size` first.
///
/// Errors: `NOT_FOUND` (and the last error is not replaced) when the last failure was something else;
/// `NULL_ARGUMENT` if `out` is NULL, `INVALID_ARGUMENT` if its `struct_size` is too small or too large (these
/// two do not replace the last error either: the failure being asked about stays readable). `*out` is
/// written only on OK.
#[no_mangle]
pub extern "C" fn hostfirst_last_error_fit(out: *mut hostfirst_fit_info) -> Status {
    hostfirst_boundary!("hostfirst_last_error_fit", default = Status::Panic, {
        let size = match out_struct_size(out, "out") {
            Ok(size) => size,
            Err(e) => return e.status(),
        };
        let fit = LAST_ERROR.try_with(|l| l.borrow().fit.clone()).ok().flatten();
        let Some(f) = fit else { return Status::NotFound };
        let dev = DeviceSpec::parse(&f.device)
            .ok()
            .and_then(|s| crate::device::resolve(&s, &f.device).ok())
            .map(hostfirst_device::from)
            .unwrap_or(hostfirst_device { kind: 0, ordinal: -1 });
        write_out_struct(
            out,
            size,
            hostfirst_fit_info { struct_size: 0, needed: f.needed, free: f.free, total: f.total, device: dev },
        );
        Status::Ok
    })
}
