//! Versions and build information: `hostfirst_version*`, `hostfirst_build_info`.

use super::args::write_string;
use crate::error::Status;
use std::ffi::c_char;

/// Major version of this header. See `hostfirst_version_number()` for the library's.
pub const HOSTFIRST_VERSION_MAJOR: u32 = 0;

/// Minor version of this header.
pub const HOSTFIRST_VERSION_MINOR: u32 = 2;

/// Patch version of this header.
pub const HOSTFIRST_VERSION_PATCH: u32 = 0;

/// `MAJOR * 1000000 + MINOR * 1000 + PATCH` of this header (the sqlite idiom). Programs should check
/// `hostfirst_version_number() == HOSTFIRST_VERSION_NUMBER` at start-up.
pub const HOSTFIRST_VERSION_NUMBER: u32 = 2000;

/// Returns the library version as a static string such as `"0.2.0"`.
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
