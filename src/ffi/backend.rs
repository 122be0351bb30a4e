//! The backend census: `hostfirst_backend_*`, `hostfirst_census_*`.

use super::args::{out_ptr, static_cstr};
use crate::device::{census, BackendStatus};
use crate::error::{Error, Status};
use std::ffi::c_char;

/// One backend of the census. All strings are owned by the library and live for the process lifetime.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_backend_info {
    /// `"cpu"` or `"cuda"`.
    pub name: *const c_char,
    /// A `HOSTFIRST_BACKEND_STATUS_*` value.
    pub status: u32,
    /// Why the backend is not available ("" when it is). For `LIBRARY_NOT_FOUND`, the names searched.
    pub reason: *const c_char,
    /// Driver version `"major.minor"` when known, else "".
    pub driver_version: *const c_char,
    /// Devices the backend exposes (0 unless available).
    pub device_count: u32,
}

/// Returns the number of backends hostfirst knows (cpu and cuda), whatever their status.
///
/// Takes the census on first use (see `hostfirst_backend_describe`). Never fails. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_backend_count() -> usize {
    hostfirst_boundary!("hostfirst_backend_count", default = 0, { census().backends.len() })
}

/// Describes backend `index` (0 = cpu, 1 = cuda) into `*out`.
///
/// The census is taken once per process on first use of any function that needs it (the backend and device
/// functions, a CUDA or `cuda_host` spec, the built-in default device): it reads `HOSTFIRST_PLATFORMS` and
/// `CUDA_VISIBLE_DEVICES` then, loads the CUDA driver library (`libcuda.so.1`, then `libcuda.so`) if present
/// and calls `cuInit`, but creates no CUDA context and allocates no device memory. Opening files and work on
/// cpu (specs `cpu`, puts and gathers to cpu) never take it and never load the driver. Later changes to the
/// environment are not seen. In a child process forked after CUDA was initialised (or while the census was
/// initialising it), CUDA is reported as `INIT_FAILED` with a reason naming fork() (the driver cannot be used
/// after fork); cpu stays available.
/// Errors: `NULL_ARGUMENT`, `OUT_OF_RANGE` for `index >= hostfirst_backend_count()`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_backend_describe(index: usize, out: *mut hostfirst_backend_info) -> Status {
    hostfirst_boundary!("hostfirst_backend_describe", {
        let out = out_ptr(out, "out")?;
        let c = census();
        let b = c.backends.get(index).ok_or_else(|| {
            Error::new(Status::OutOfRange, format!("backend index {index}: there are {} backends", c.backends.len()))
        })?;
        *out = hostfirst_backend_info {
            name: static_cstr(b.name),
            status: b.status as u32,
            reason: static_cstr(&b.reason),
            driver_version: static_cstr(&b.driver_version),
            device_count: b.device_count,
        };
        Ok(())
    })
}

/// Returns the static lower-case name of a backend status (`"available"`, `"library_not_found"`, ...);
/// `"unknown"` for values this library does not define. Never NULL.
#[no_mangle]
pub extern "C" fn hostfirst_backend_status_name(status: u32) -> *const c_char {
    hostfirst_boundary!("hostfirst_backend_status_name", default = c"unknown".as_ptr(), {
        match BackendStatus::from_repr(status) {
            Some(s) => static_cstr(s.name()),
            None => c"unknown".as_ptr(),
        }
    })
}

/// Returns the number of warnings the census raised about the environment (e.g. an unknown name in
/// `HOSTFIRST_PLATFORMS`). Read them with `hostfirst_census_warning`.
#[no_mangle]
pub extern "C" fn hostfirst_census_warning_count() -> usize {
    hostfirst_boundary!("hostfirst_census_warning_count", default = 0, { census().warnings.len() })
}

/// Returns census warning `index`, or NULL when out of range. The string lives for the process lifetime.
#[no_mangle]
pub extern "C" fn hostfirst_census_warning(index: usize) -> *const c_char {
    hostfirst_boundary!("hostfirst_census_warning", default = std::ptr::null(), {
        census().warnings.get(index).map(|w| static_cstr(w)).unwrap_or(std::ptr::null())
    })
}
