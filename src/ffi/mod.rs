//! The thin `extern "C"` skin over the safe core.
//!
//! Rules every exported function follows (enforced by `tests/boundary.rs`):
//! - its body is exactly one `hostfirst_boundary!` invocation, which catches panics, records the thread-local
//!   last error and converts `Result` to `hostfirst_status`;
//! - pointers are checked for NULL through the helpers below before use, integers from C are validated;
//! - outputs are written only on success (enumerations also report the required count on `BUFFER_TOO_SMALL`);
//! - handles are registry ids, never raw addresses: a freed, stale or wrong-type handle gives `INVALID_HANDLE`.

#![allow(non_camel_case_types)]
// Exported functions take raw pointers from C by design; every one is NULL-checked by the helpers below.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

/// The one panic boundary. Every exported function's body is exactly one invocation:
///
/// ```ignore
/// hostfirst_boundary!("hostfirst_x", { ...; Ok(()) })                 // returns hostfirst_status
/// hostfirst_boundary!("hostfirst_y", default = 0, { ...; value })     // returns a value, `default` on panic
/// ```
macro_rules! hostfirst_boundary {
    ($name:literal, default = $def:expr, $body:block) => {
        $crate::ffi::run_value($name, $def, || $body)
    };
    ($name:literal, $body:block) => {
        $crate::ffi::run_status($name, || -> $crate::error::Result<()> { $body })
    };
}

pub mod core;
pub mod devices;
pub mod dlpack;
#[allow(dead_code)]
pub mod handle;
pub mod load;
pub mod place;
pub mod rules;
pub mod scope;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;

use crate::error::{Error, FitFailure, Result, Status};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

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

/// Records `e` as the calling thread's last error.
pub(crate) fn set_last_error(e: &Error) {
    let msg = CString::new(e.message().replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = LastError { status: e.status(), message: msg, fit: e.fit().cloned() };
        }
    });
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs a status-returning body inside the panic boundary.
#[doc(hidden)]
pub fn run_status<F: FnOnce() -> Result<()>>(name: &'static str, f: F) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => {
            set_last_error(&e);
            e.status()
        }
        Err(p) => {
            let e = Error::new(
                Status::Panic,
                format!("{name}: internal panic caught at the C boundary: {}", panic_message(&*p)),
            );
            set_last_error(&e);
            Status::Panic
        }
    }
}

/// Runs a value-returning body inside the panic boundary; a panic yields `default`.
#[doc(hidden)]
pub fn run_value<T, F: FnOnce() -> T>(name: &'static str, default: T, f: F) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let e = Error::new(
                Status::Panic,
                format!("{name}: internal panic caught at the C boundary: {}", panic_message(&*p)),
            );
            set_last_error(&e);
            default
        }
    }
}

/// For a call whose non-OK outcome can be an answer rather than a failure (`hostfirst_put_poll`'s
/// `NOT_READY`), run inside `hostfirst_boundary!(name, default = Status::Panic, { answer(|| ...) })`: an
/// error is recorded as the thread's last error as usual; `Ok(status)` is returned as is and leaves the last
/// error alone (the header's convention: only failing calls replace it).
pub(crate) fn answer(f: impl FnOnce() -> Result<Status>) -> Status {
    match f() {
        Ok(s) => s,
        Err(e) => {
            set_last_error(&e);
            e.status()
        }
    }
}

// ---- argument helpers ------------------------------------------------------------------------------------

/// A required output pointer: NULL gives `NULL_ARGUMENT` naming the parameter.
pub(crate) fn out_ptr<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter '{name}' is NULL")));
    }
    // SAFETY: non-NULL; the C contract is that it points to writable memory for a T.
    Ok(unsafe { &mut *p })
}

/// An optional output pointer (NULL means "not wanted").
pub(crate) fn opt_out<'a, T>(p: *mut T) -> Option<&'a mut T> {
    // SAFETY: the C contract is that a non-NULL pointer points to writable memory for a T.
    unsafe { p.as_mut() }
}

/// A required input pointer.
pub(crate) fn in_ref<'a, T>(p: *const T, name: &str) -> Result<&'a T> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("parameter '{name}' is NULL")));
    }
    // SAFETY: non-NULL; the C contract is that it points to a valid T.
    Ok(unsafe { &*p })
}

/// The most bytes of a C string we accept (paths, specs, names, patterns).
pub(crate) const MAX_C_STRING: usize = 1 << 16;

/// A required NUL-terminated UTF-8 string argument.
pub(crate) fn c_str<'a>(p: *const c_char, name: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("string parameter '{name}' is NULL")));
    }
    // SAFETY: non-NULL; the contract is a NUL-terminated string. We scan at most MAX_C_STRING bytes.
    let bytes = unsafe {
        let mut n = 0usize;
        while n <= MAX_C_STRING && *p.add(n) != 0 {
            n += 1;
        }
        if n > MAX_C_STRING {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("string parameter '{name}' is longer than {MAX_C_STRING} bytes or not NUL-terminated"),
            ));
        }
        std::slice::from_raw_parts(p as *const u8, n)
    };
    std::str::from_utf8(bytes)
        .map_err(|e| Error::new(Status::InvalidArgument, format!("string parameter '{name}' is not valid UTF-8 ({e})")))
}

/// A caller byte buffer `(ptr, len)`: `(NULL, 0)` is empty, `(NULL, n > 0)` is `NULL_ARGUMENT`.
pub(crate) fn in_bytes<'a>(p: *const u8, len: usize, name: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("buffer '{name}' is NULL with length {len}")));
    }
    // SAFETY: non-NULL with the caller's promise of `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A caller output byte buffer `(ptr, len)`, same NULL rules as [`in_bytes`].
pub(crate) fn out_bytes<'a>(p: *mut u8, len: usize, name: &str) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("buffer '{name}' is NULL with capacity {len}")));
    }
    // SAFETY: non-NULL with the caller's promise of `len` writable bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Copies `s` plus a NUL into `(buf, cap)`. Always writes `*out_len = s.len()` (when non-NULL); when
/// `cap < s.len() + 1` nothing is written to `buf` and the status is `BUFFER_TOO_SMALL`. `(NULL, 0)` is a
/// length query and succeeds.
pub(crate) fn write_string(s: &str, buf: *mut c_char, cap: usize, out_len: *mut usize, what: &str) -> Result<()> {
    if let Some(l) = opt_out(out_len) {
        *l = s.len();
    }
    if buf.is_null() && cap == 0 {
        return Ok(());
    }
    let dst = out_bytes(buf as *mut u8, cap, "buf")?;
    if cap < s.len() + 1 {
        return Err(Error::new(
            Status::BufferTooSmall,
            format!("{what} needs {} bytes including the NUL, buffer has {cap}", s.len() + 1),
        ));
    }
    dst[..s.len()].copy_from_slice(s.as_bytes());
    dst[s.len()] = 0;
    Ok(())
}

/// Copies `items` into a caller array `(out, cap)`, always reporting the count in `*out_count`. `(NULL, 0)`
/// is a count query and succeeds; a too-small array gives `BUFFER_TOO_SMALL` and writes no element.
pub(crate) fn write_array<T: Copy>(
    items: &[T],
    out: *mut T,
    cap: usize,
    out_count: *mut usize,
    what: &str,
) -> Result<()> {
    let count = out_ptr(out_count, "out_count")?;
    *count = items.len();
    if out.is_null() && cap == 0 {
        return Ok(());
    }
    if out.is_null() {
        return Err(Error::new(Status::NullArgument, format!("array for {what} is NULL with capacity {cap}")));
    }
    if cap < items.len() {
        return Err(Error::new(
            Status::BufferTooSmall,
            format!("{} {what} present, array capacity is {cap}", items.len()),
        ));
    }
    // SAFETY: non-NULL with room for `cap >= items.len()` elements per the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
    Ok(())
}

/// Interns a string for the process lifetime and returns a stable NUL-terminated pointer (used for census
/// strings, which never change once taken).
pub(crate) fn static_cstr(s: &str) -> *const c_char {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static POOL: Mutex<Option<HashMap<String, &'static CStr>>> = Mutex::new(None);
    let mut g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(c) = map.get(s) {
        return c.as_ptr();
    }
    let leaked: &'static CStr = Box::leak(CString::new(s.replace('\0', "\\0")).unwrap_or_default().into_boxed_c_str());
    map.insert(s.to_string(), leaked);
    leaked.as_ptr()
}
