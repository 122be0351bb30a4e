//! Status names, versions, the thread-local last error and the live-handle count.

use super::{opt_out, out_ptr, write_string, LAST_ERROR};
use crate::device::DeviceSpec;
use crate::error::{Status, ALL_STATUSES};
use crate::ffi::devices::hostfirst_device;
use std::ffi::c_char;

/// Major version of this header. See `hostfirst_version_number()` for the library's.
pub const HOSTFIRST_VERSION_MAJOR: u32 = 0;
/// Minor version of this header.
pub const HOSTFIRST_VERSION_MINOR: u32 = 1;
/// Patch version of this header.
pub const HOSTFIRST_VERSION_PATCH: u32 = 0;
/// `MAJOR * 1000000 + MINOR * 1000 + PATCH` of this header (the sqlite idiom). Programs should check
/// `hostfirst_version_number() == HOSTFIRST_VERSION_NUMBER` at start-up.
pub const HOSTFIRST_VERSION_NUMBER: u32 = 1000;

/// Details of the most recent failed fit check on this thread (see `hostfirst_last_fit`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hostfirst_fit_info {
    /// Bytes the operation needed.
    pub needed: u64,
    /// Bytes free on the device when checked (host memory: MemAvailable minus the safety margin).
    pub free: u64,
    /// Total bytes of the device.
    pub total: u64,
    /// The device checked.
    pub device: hostfirst_device,
}

/// Returns the library version as a static string such as `"0.1.0"`.
///
/// Never fails; the string lives for the process lifetime. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_version() -> *const c_char {
    hostfirst_boundary!("hostfirst_version", default = c"?".as_ptr(), {
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
    })
}

/// Returns the library version as `MAJOR * 1000000 + MINOR * 1000 + PATCH`.
///
/// Compare with `HOSTFIRST_VERSION_NUMBER` to detect a header/library mismatch. Never fails. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_version_number() -> u32 {
    hostfirst_boundary!("hostfirst_version_number", default = 0, {
        HOSTFIRST_VERSION_MAJOR * 1_000_000 + HOSTFIRST_VERSION_MINOR * 1000 + HOSTFIRST_VERSION_PATCH
    })
}

/// Returns the static name of a status without its prefix, e.g. `"OUT_OF_MEMORY"` for
/// `HOSTFIRST_STATUS_OUT_OF_MEMORY`.
///
/// Unknown values give `"UNKNOWN"`. Never returns NULL; the string lives for the process lifetime. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_status_name(status: u32) -> *const c_char {
    hostfirst_boundary!("hostfirst_status_name", default = c"UNKNOWN".as_ptr(), {
        match Status::from_u32(status) {
            Some(s) => super::static_cstr(s.name()),
            None => c"UNKNOWN".as_ptr(),
        }
    })
}

/// Returns 1 if `status` is in the file-format range (a malformed or rejected safetensors file or index),
/// else 0.
#[no_mangle]
pub extern "C" fn hostfirst_status_is_format_error(status: u32) -> i32 {
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
/// successful calls leave it alone.
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
/// to keep it. Never returns NULL.
#[no_mangle]
pub extern "C" fn hostfirst_last_error() -> *const c_char {
    hostfirst_boundary!("hostfirst_last_error", default = c"".as_ptr(), {
        LAST_ERROR.try_with(|l| l.borrow().message.as_ptr()).unwrap_or(c"".as_ptr())
    })
}

/// Copies the calling thread's last error message into `buf` (NUL-terminated).
///
/// `*out_len` (if `out_len` is not NULL) always receives the message length without the NUL. `buf == NULL`
/// with `capacity == 0` is a length query and returns OK. If `capacity < length + 1`, nothing is written
/// to `buf` and `HOSTFIRST_STATUS_BUFFER_TOO_SMALL` is returned; this call does not replace the last error
/// in that case, so the caller can retry with a larger buffer.
#[no_mangle]
pub extern "C" fn hostfirst_last_error_message(buf: *mut c_char, capacity: usize, out_len: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_last_error_message", default = Status::Panic, {
        let msg = LAST_ERROR.try_with(|l| l.borrow().message.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(l) = opt_out(out_len) {
            *l = msg.len();
        }
        if buf.is_null() && capacity == 0 {
            return Status::Ok;
        }
        if buf.is_null() {
            return Status::NullArgument;
        }
        if capacity < msg.len() + 1 {
            return Status::BufferTooSmall;
        }
        // SAFETY: non-NULL with `capacity` writable bytes per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, msg.len());
            *buf.add(msg.len()) = 0;
        }
        Status::Ok
    })
}

/// Copies the numbers of the calling thread's last failure into `*out` when that failure was a fit check
/// (`HOSTFIRST_STATUS_OUT_OF_MEMORY` raised before allocating).
///
/// Returns `HOSTFIRST_STATUS_NOT_FOUND` (and does not replace the last error) when the last failure was
/// something else; `HOSTFIRST_STATUS_NULL_ARGUMENT` if `out` is NULL.
#[no_mangle]
pub extern "C" fn hostfirst_last_fit(out: *mut hostfirst_fit_info) -> Status {
    hostfirst_boundary!("hostfirst_last_fit", default = Status::Panic, {
        if out.is_null() {
            return Status::NullArgument;
        }
        let fit = LAST_ERROR.try_with(|l| l.borrow().fit.clone()).ok().flatten();
        let Some(f) = fit else { return Status::NotFound };
        let dev = DeviceSpec::parse(&f.device)
            .ok()
            .and_then(|s| crate::device::resolve(&s, &f.device).ok())
            .map(hostfirst_device::from)
            .unwrap_or(hostfirst_device { kind: 0, ordinal: -1 });
        // SAFETY: checked non-NULL above.
        unsafe { *out = hostfirst_fit_info { needed: f.needed, free: f.free, total: f.total, device: dev } };
        Status::Ok
    })
}

/// Writes the number of live handles of all types (files, views, buffers, loads, ...) to `*out`.
///
/// Useful for leak checks: after every handle is freed the count returns to what it was. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_handle_count(out: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_handle_count", {
        *out_ptr(out, "out")? = super::handle::live_count();
        Ok(())
    })
}

/// Copies a string describing the build (version, features, CUDA API level) into `buf`, with the same
/// buffer rules as `hostfirst_last_error_message`.
#[no_mangle]
pub extern "C" fn hostfirst_build_info(buf: *mut c_char, capacity: usize, out_len: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_build_info", {
        let s = format!(
            "hostfirst {} (cuda driver API via cudarc, dynamic loading; test-hooks={})",
            env!("CARGO_PKG_VERSION"),
            cfg!(feature = "test-hooks")
        );
        write_string(&s, buf, capacity, out_len, "build info")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_constants_match_cargo() {
        assert_eq!(HOSTFIRST_VERSION_MAJOR.to_string(), env!("CARGO_PKG_VERSION_MAJOR"));
        assert_eq!(HOSTFIRST_VERSION_MINOR.to_string(), env!("CARGO_PKG_VERSION_MINOR"));
        assert_eq!(HOSTFIRST_VERSION_PATCH.to_string(), env!("CARGO_PKG_VERSION_PATCH"));
        assert_eq!(hostfirst_version_number(), HOSTFIRST_VERSION_NUMBER);
    }
}
