//! Versions and build information: `hostfirst_version*`, `hostfirst_build_info`.

use super::args::write_string;
use crate::error::Status;
use std::ffi::c_char;

/// Major version of this header. See `hostfirst_version_number()` for the library's.
pub const HOSTFIRST_VERSION_MAJOR: u32 = 1;

/// Minor version of this header.
pub const HOSTFIRST_VERSION_MINOR: u32 = 1;

/// Patch version of this header.
pub const HOSTFIRST_VERSION_PATCH: u32 = 0;

/// `MAJOR * 1000000 + MINOR * 1000 + PATCH` of this header (the sqlite idiom). Programs should check
/// `HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, hostfirst_version_number())` at start-up.
pub const HOSTFIRST_VERSION_NUMBER: u32 = 1001000;

/// Returns the library version as a static string such as `"1.0.0"`.
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
/// Compare with `HOSTFIRST_VERSION_NUMBER` by `HOSTFIRST_VERSION_COMPATIBLE` (the one rule: the same ABI line,
/// the library at least as new as the header). Never fails. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_version_number() -> u32 {
    hostfirst_boundary!("hostfirst_version_number", default = 0, {
        HOSTFIRST_VERSION_MAJOR * 1_000_000 + HOSTFIRST_VERSION_MINOR * 1000 + HOSTFIRST_VERSION_PATCH
    })
}

// `hostfirst_experimental_MAJOR_MINOR` (build.rs): the experimental tier's per-minor guard on Windows.
#[cfg(windows)]
include!(concat!(env!("OUT_DIR"), "/experimental_marker.rs"));

/// Copies a string describing the build (version, features, CUDA API level, and the read engine as
/// `hostfirst_read_engine` names it) into `buf`, NUL-terminated. `*out_len` (when `out_len` is not NULL) gets
/// the string's length without the NUL, whatever happens to `buf`; `buf` needs `capacity` of at least that
/// plus one, else nothing is written to it. `buf` NULL with `capacity` 0 asks only for the length (OK).
/// Errors: `NULL_ARGUMENT` (`buf` NULL with a non-zero `capacity`), `BUFFER_TOO_SMALL` (`capacity` below the
/// length plus one). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_build_info(buf: *mut c_char, capacity: usize, out_len: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_build_info", {
        let s = format!(
            "hostfirst {} (cuda driver API via cudarc, dynamic loading; test-hooks={}; reads: {})",
            env!("CARGO_PKG_VERSION"),
            cfg!(feature = "test-hooks"),
            crate::engine::describe()
        );
        write_string(&s, buf, capacity, out_len, "build info")
    })
}

/// Copies one line naming how this process reads files into `buf` (the buffer rules of
/// `hostfirst_build_info`): `"io_uring (queue depth 64)"` when the kernel offers io_uring, else
/// `"pread pool (...; <why>)"` — a pool of threads doing blocking positioned reads — with the reason (the
/// kernel's answer to the probe, `HOSTFIRST_IO=pool`, or the failure that demoted io_uring). The choice is
/// made by a probe at the first call that needs it (never from the kernel version) and kept for the process;
/// set `HOSTFIRST_IO=pool` in the environment before that to force the pool. Gathers, and the reads of the
/// other operations as they move onto the engine, issue their reads concurrently through it. Never blocks
/// for long (the probe makes one small ring). Errors: `NULL_ARGUMENT` (`buf` NULL with a non-zero
/// capacity), `BUFFER_TOO_SMALL` (`*out_len` still gets the length). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_engine(buf: *mut c_char, capacity: usize, out_len: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_read_engine", {
        write_string(&crate::engine::describe(), buf, capacity, out_len, "read engine")
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
