//! Argument helpers of the C skin: NULL-checked pointers, C strings, caller buffers and arrays, interned
//! strings, and the extensible output structs (the PJRT rule). A leaf: the exported functions use it, it uses
//! only the core's error type.

use crate::error::{Error, Result, Status};
use std::ffi::{c_char, CStr, CString};

// Enum-typed integers from C. A Rust enum must never be built from an integer C passed in (an unknown value
// would be undefined behaviour), so parameters and struct fields C writes keep the plain integer in Rust, and
// cbindgen prints the enum's typedef for them (cbindgen.toml `[export] exclude` + `[export.rename]`): C callers
// see `hostfirst_dtype dtype`, the library receives a `u32` and validates it with [`enum_arg`].

/// A `hostfirst_status` from C (printed as `hostfirst_status`).
pub type c_status = u32;
/// A `hostfirst_dtype` from C (printed as `hostfirst_dtype`).
pub type c_dtype = u32;
/// A `hostfirst_device_kind` from C (printed as `hostfirst_device_kind`).
pub type c_device_kind = i32;
/// A `hostfirst_backend_status` from C (printed as `hostfirst_backend_status`).
pub type c_backend_status = u32;
/// A `hostfirst_default_source` from C (printed as `hostfirst_default_source`).
pub type c_default_source = u32;

/// Validates an enum integer from C: an unknown value is `INVALID_ARGUMENT` naming the parameter, the value
/// and the C type, e.g. `dtype 99 is not a hostfirst_dtype value`.
pub(crate) fn enum_arg<E, V: Copy + std::fmt::Display>(
    v: V,
    from: impl Fn(V) -> Option<E>,
    param: &str,
    c_type: &str,
) -> Result<E> {
    from(v).ok_or_else(|| Error::new(Status::InvalidArgument, format!("{param} {v} is not a {c_type} value")))
}

/// The one spelling of every `hostfirst_*_name` function: the value's C constant without its
/// `HOSTFIRST_<TYPE>_` prefix, from the core's lower-case (snake or kebab) name: `built-in` → `BUILT_IN`.
pub(crate) fn constant_suffix(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// A required output pointer: NULL gives `NULL_ARGUMENT` naming the parameter.
pub(crate) fn out_ptr<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter '{name}' is NULL")));
    }
    // SAFETY: non-NULL; the C contract is that it points to writable memory for a T.
    Ok(unsafe { &mut *p })
}

/// An input options struct whose first field is `size_t struct_size`: NULL gives `default`; otherwise the
/// first `min(struct_size, sizeof(T))` bytes the caller provides are copied over `default` (fields of a newer
/// header than the caller's keep their defaults). A `struct_size` smaller than that field is `INVALID_ARGUMENT`.
///
/// `T` must be a `#[repr(C)]` struct starting with `struct_size: usize` whose fields accept any bit pattern
/// (integers, nullable function pointers, raw pointers).
pub(crate) fn read_options<T: Copy>(p: *const T, default: T, name: &str) -> Result<T> {
    let mut o = default;
    if p.is_null() {
        return Ok(o);
    }
    // SAFETY: non-NULL; the caller promises at least struct_size readable bytes, struct_size first.
    let size = unsafe { *(p as *const usize) };
    if size < std::mem::size_of::<usize>() {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{name}->struct_size is {size}; set it to the size of the struct ({})", std::mem::size_of::<T>()),
        ));
    }
    let n = size.min(std::mem::size_of::<T>());
    // SAFETY: copies n <= sizeof(T) bytes the caller provided over a valid value of T; T's fields accept any
    // bit pattern (this function's contract).
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, &mut o as *mut T as *mut u8, n) };
    Ok(o)
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

/// The interned strings of [`static_cstr`].
pub(crate) static CSTRINGS: crate::forksafe::GlobalMutex<std::collections::BTreeMap<String, &'static CStr>> =
    crate::forksafe::GlobalMutex::new(std::collections::BTreeMap::new());

/// Interns a string for the process lifetime and returns a stable NUL-terminated pointer (used for census
/// strings, which never change once taken).
pub(crate) fn static_cstr(s: &str) -> *const c_char {
    let mut map = CSTRINGS.lock();
    if let Some(c) = map.get(s) {
        return c.as_ptr();
    }
    let leaked: &'static CStr = Box::leak(CString::new(s.replace('\0', "\\0")).unwrap_or_default().into_boxed_c_str());
    map.insert(s.to_string(), leaked);
    leaked.as_ptr()
}

/// An output struct that starts with `size_t struct_size` and grows only by appending fields.
pub(crate) trait OutStruct: Copy {
    /// The C type name, for messages.
    const NAME: &'static str;
    /// The oldest size the library accepts: the struct's size in hostfirst 0.1.0, through the last field it
    /// had then. Appending a field raises `size_of::<Self>()`, never this.
    const SIZE_V1: usize;
}

/// The end of field `$field` of `$t`: `SIZE_V1` is the end of the last field a struct had in 0.1.0.
macro_rules! end_of_field {
    ($t:ty, $field:ident) => {{
        const fn pointee_size<F>(_: *const F) -> usize {
            std::mem::size_of::<F>()
        }
        let u = std::mem::MaybeUninit::<$t>::uninit();
        // SAFETY: only the field's address is taken (to learn its type's size); nothing is read.
        std::mem::offset_of!($t, $field) + pointee_size(unsafe { std::ptr::addr_of!((*u.as_ptr()).$field) })
    }};
}
pub(crate) use end_of_field;

/// Declares `$t` an extensible output struct whose 0.1.0 version ended with field `$last`.
macro_rules! out_struct {
    ($t:ident, $last:ident) => {
        impl $crate::ffi::args::OutStruct for $t {
            const NAME: &'static str = stringify!($t);
            const SIZE_V1: usize = $crate::ffi::args::end_of_field!($t, $last);
        }
    };
}
pub(crate) use out_struct;

/// Checks a caller's output struct before any work (the PJRT rule): `out` is not NULL and its `struct_size`
/// is at least the oldest supported size ([`OutStruct::SIZE_V1`]). Returns that `struct_size`.
pub(crate) fn out_struct_size<T: OutStruct>(out: *mut T, param: &str) -> Result<usize> {
    if out.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter '{param}' is NULL")));
    }
    // SAFETY: non-NULL; every such struct begins with the `size_t struct_size` the caller set, so at least a
    // usize is readable even when the caller's struct is older (smaller) than `T`.
    let size = unsafe { (out as *const usize).read() };
    if size < T::SIZE_V1 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{param}->struct_size is {size}; set it to sizeof({}) ({} in this version, at least {})",
                T::NAME,
                std::mem::size_of::<T>(),
                T::SIZE_V1
            ),
        ));
    }
    Ok(size)
}

/// Writes `value` into a caller's output struct of `size` bytes (from [`out_struct_size`]): the fields that fit
/// are written, nothing past `size`, and `struct_size` becomes the number of bytes written.
pub(crate) fn write_out_struct<T: OutStruct>(out: *mut T, size: usize, value: T) {
    let n = size.min(std::mem::size_of::<T>());
    let mut v = value;
    // SAFETY: `v` is a T, which starts with its usize `struct_size`; then the first `n` bytes of it go to the
    // caller's struct, which holds at least `size >= n` bytes (checked by `out_struct_size`).
    unsafe {
        (&mut v as *mut T as *mut usize).write(n);
        std::ptr::copy_nonoverlapping(&v as *const T as *const u8, out as *mut u8, n);
    }
}

pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A struct as 0.1.0 had it (`struct_size`, `a`) plus a field appended later (`b`).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Grown {
        struct_size: usize,
        a: u64,
        b: u64,
    }
    impl OutStruct for Grown {
        const NAME: &'static str = "grown";
        const SIZE_V1: usize = end_of_field!(Grown, a);
    }

    const FILL: u64 = 0xAAAA_AAAA_AAAA_AAAA;

    #[test]
    fn an_old_struct_gets_the_fields_it_has() {
        assert_eq!(Grown::SIZE_V1, 16);
        // The caller's struct is the 0.1.0 one (16 bytes), followed by memory it does not own.
        let mut mem = [16, FILL, FILL, FILL];
        let out = mem.as_mut_ptr() as *mut Grown;
        let size = out_struct_size(out, "out").unwrap();
        write_out_struct(out, size, Grown { struct_size: 0, a: 7, b: 9 });
        assert_eq!(mem, [16, 7, FILL, FILL], "wrote past the caller's struct");
    }

    #[test]
    fn a_newer_or_too_small_struct() {
        // A caller with a newer, larger struct: our fields are written and struct_size says how many.
        let mut mem = [40, FILL, FILL, FILL, FILL];
        let out = mem.as_mut_ptr() as *mut Grown;
        let size = out_struct_size(out, "out").unwrap();
        write_out_struct(out, size, Grown { struct_size: 0, a: 7, b: 9 });
        assert_eq!(mem, [24, 7, 9, FILL, FILL]);
        // Smaller than the oldest size: refused, nothing written.
        let mut small = Grown { struct_size: 15, a: 1, b: 2 };
        let e = out_struct_size(&mut small, "out").unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("at least 16"), "{}", e.message());
        assert_eq!(out_struct_size::<Grown>(std::ptr::null_mut(), "out").unwrap_err().status(), Status::NullArgument);
    }
}
