//! The backend census: `hostfirst_backend_*`, `hostfirst_census_*`.

use super::args::{c_backend_status, constant_suffix, out_struct, out_struct_size, static_cstr, write_out_struct};
use crate::device::{census, BackendStatus};
use crate::error::{Error, Status};
use std::ffi::c_char;

/// One backend of the census, filled by `hostfirst_backend_describe`. Set
/// `struct_size = sizeof(hostfirst_backend_info)` before the call; fields may be appended in later minor
/// versions. All strings are owned by the library and live for the process lifetime.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_backend_info {
    /// In: the caller's `sizeof(hostfirst_backend_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// `"cpu"`, `"cuda"` or `"gds"` (GPUDirect Storage, from 1.1).
    pub name: *const c_char,
    /// The backend's status.
    pub status: c_backend_status,
    /// Why the backend is not available ("" when it is). For `LIBRARY_NOT_FOUND`, the names searched.
    pub reason: *const c_char,
    /// Driver version `"major.minor"` when known, else "".
    pub driver_version: *const c_char,
    /// Devices the backend exposes (0 unless available).
    pub device_count: u32,
}

out_struct!(hostfirst_backend_info, device_count);

/// Returns the number of backends hostfirst knows (cpu, cuda and, from 1.1, gds), whatever their status.
///
/// Takes the census on first use (see `hostfirst_backend_describe`). Never fails. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_backend_count() -> usize {
    hostfirst_boundary!("hostfirst_backend_count", default = 0, { census().backend_count() })
}

/// Describes backend `index` (0 = cpu, 1 = cuda, 2 = gds) into `*out` (set `out->struct_size` first).
///
/// The census is taken once per process on first use of any function that needs it (the backend and device
/// functions, a CUDA or `cuda_host` spec, the built-in default device): it reads `HOSTFIRST_PLATFORMS` and
/// `CUDA_VISIBLE_DEVICES` then, loads the CUDA driver library (`libcuda.so.1`, then `libcuda.so`) if present
/// and calls `cuInit`, but creates no CUDA context and allocates no device memory. Opening files and work on
/// cpu (specs `cpu`, puts and gathers to cpu) never take it and never load the driver. Later changes to the
/// environment are not seen. In a child process forked after CUDA was initialised (or while the census was
/// initialising it), CUDA is reported as `INIT_FAILED` with a reason naming fork() (the driver cannot be used
/// after fork); cpu stays available.
///
/// **gds** (GPUDirect Storage through NVIDIA's cuFile, new in 1.1) is probed the first time index 2 is
/// described, never by the census itself (so libcufile is loaded only when asked). Linux only
/// (`NOT_COMPILED` elsewhere); hidden with cuda by `HOSTFIRST_PLATFORMS`; its status names the first thing
/// that stops it, in this order: `UNSUPPORTED_PLATFORM` (WSL), `LIBRARY_NOT_FOUND` (`libcufile.so.0`, then
/// `libcufile.so`; never loaded from the current folder: empty or relative `LD_LIBRARY_PATH` entries are not
/// searched), `COMPAT_MODE_FORCED` (`CUFILE_FORCE_COMPAT_MODE=true`, or `"force_compat_mode": true` in the
/// cufile.json that `CUFILE_ENV_PATH_JSON` names, else /etc/cufile.json), `MODULE_MISSING` (no
/// /proc/driver/nvidia-fs), `UDEV_UNREADABLE` (/run/udev), `NO_DEVICES` (the cuda backend is not available;
/// the reason says why), `NO_RDMA_SUPPORT` (no device has `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`),
/// `INIT_FAILED` (`cuFileDriverOpen` failed; the reason names cuFile's error). Available: `driver_version` is
/// cuFile's version and `device_count` the devices with GPUDirect RDMA. Reading through cuFile is not done yet.
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`struct_size` too small), `OUT_OF_RANGE` for
/// `index >= hostfirst_backend_count()`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_backend_describe(index: usize, out: *mut hostfirst_backend_info) -> Status {
    hostfirst_boundary!("hostfirst_backend_describe", {
        let size = out_struct_size(out, "out")?;
        let c = census();
        let b = c.backend_at(index).ok_or_else(|| {
            Error::new(Status::OutOfRange, format!("backend index {index}: there are {} backends", c.backend_count()))
        })?;
        let info = hostfirst_backend_info {
            struct_size: 0,
            name: static_cstr(b.name),
            status: b.status as u32,
            reason: static_cstr(&b.reason),
            driver_version: static_cstr(&b.driver_version),
            device_count: b.device_count,
        };
        write_out_struct(out, size, info);
        Ok(())
    })
}

/// Returns the static name of a backend status: its constant without the `HOSTFIRST_BACKEND_STATUS_` prefix
/// (`"AVAILABLE"`, `"LIBRARY_NOT_FOUND"`, ...); `"UNKNOWN"` for values this library does not define. Never
/// NULL. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_backend_status_name(status: c_backend_status) -> *const c_char {
    hostfirst_boundary!("hostfirst_backend_status_name", default = c"UNKNOWN".as_ptr(), {
        match BackendStatus::from_repr(status) {
            Some(s) => static_cstr(&constant_suffix(s.name())),
            None => c"UNKNOWN".as_ptr(),
        }
    })
}

/// Returns the number of warnings the census raised about the environment (e.g. an unknown name in
/// `HOSTFIRST_PLATFORMS`). Read them with `hostfirst_census_warning`.
#[no_mangle]
pub extern "C" fn hostfirst_census_warning_count() -> usize {
    hostfirst_boundary!("hostfirst_census_warning_count", default = 0, { census().warnings.len() })
}

/// Returns census warning `index` (`0 .. hostfirst_census_warning_count()`), or the empty string when out of
/// range; never NULL. The string lives for the process lifetime.
#[no_mangle]
pub extern "C" fn hostfirst_census_warning(index: usize) -> *const c_char {
    hostfirst_boundary!("hostfirst_census_warning", default = c"".as_ptr(), {
        census().warnings.get(index).map(|w| static_cstr(w)).unwrap_or(c"".as_ptr())
    })
}
