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
/// A `hostfirst_format` from C (printed as `hostfirst_format`).
pub type c_format = u32;

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

/// An options struct (input) that starts with `size_t struct_size` and grows only by appending fields.
/// Declared with [`options_struct!`], which lists every field (checked: a field left out does not compile).
///
/// Growth rule: a field appended in a later version starts at or after the previous version's `sizeof`
/// (never in its tail padding), so a caller's `sizeof` of an older struct covers whole old fields only.
/// `every_options_struct_is_well_formed` (unit test) checks the field table.
pub(crate) trait OptionsStruct: Copy {
    /// The C type name, for messages.
    const NAME: &'static str;
    /// The oldest size the library accepts: the end of the last field of the struct's first published
    /// version (0.2.0). Appending a field never changes it.
    const SIZE_V1: usize;
    /// `(offset, end)` of every field, in declaration order.
    const FIELDS: &'static [(usize, usize)];
}

/// Declares `$t` an options struct whose first published version ended with field `$last`; `$f` are all
/// its fields in order.
macro_rules! options_struct {
    ($t:ident, first_version_ends_with = $last:ident, fields = [$($f:ident),+ $(,)?]) => {
        impl $crate::ffi::args::OptionsStruct for $t {
            const NAME: &'static str = stringify!($t);
            const SIZE_V1: usize = $crate::ffi::args::end_of_field!($t, $last);
            const FIELDS: &'static [(usize, usize)] =
                &[$((std::mem::offset_of!($t, $f), $crate::ffi::args::end_of_field!($t, $f))),+];
        }
        const _: () = {
            /// Compiles only when the list names every field of the struct.
            #[allow(dead_code)]
            fn every_field_is_listed(v: $t) {
                let $t { $($f: _),+ } = v;
            }
        };
    };
}
pub(crate) use options_struct;

/// Copies the whole fields of `T` that lie within the first `size` bytes from `src` to `dst`, field by
/// field (padding is neither read nor written).
///
/// # Safety
/// `src` and `dst` point to at least `min(size, sizeof(T))` readable / writable bytes laid out as `T`.
unsafe fn copy_fields<T: OptionsStruct>(src: *const u8, dst: *mut u8, size: usize) {
    for &(start, end) in T::FIELDS.iter().filter(|&&(_, end)| end <= size) {
        // SAFETY: start..end lies within the first `size` bytes of both (the filter and the contract).
        unsafe { std::ptr::copy_nonoverlapping(src.add(start), dst.add(start), end - start) };
    }
}

/// The `struct_size` a caller gave for an options struct, checked against the oldest published size.
fn options_size<T: OptionsStruct>(size: usize, param: &str) -> Result<usize> {
    if size < T::SIZE_V1 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{param}: struct_size {size} is smaller than {} ({} bytes in its first version, {} in this one); \
                 pass sizeof the struct",
                T::NAME,
                T::SIZE_V1,
                std::mem::size_of::<T>()
            ),
        ));
    }
    Ok(size)
}

/// The body of every `hostfirst_*_options_init(out, struct_size)`: writes the defaults of the whole fields
/// that fit in the caller's `struct_size` bytes (nothing past them), and `out->struct_size = struct_size`.
/// A `struct_size` below the first published version is `INVALID_ARGUMENT` naming the struct and both sizes.
pub(crate) fn init_options<T: OptionsStruct>(out: *mut T, struct_size: usize, defaults: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter 'out' ({} *) is NULL", T::NAME)));
    }
    let size = options_size::<T>(struct_size, "out")?;
    // SAFETY: the caller promises `struct_size` writable bytes at `out`, laid out as (a version of) T; only
    // fields ending within them are written. The struct starts with its usize `struct_size`, written last.
    unsafe {
        copy_fields::<T>(&defaults as *const T as *const u8, out as *mut u8, size);
        (out as *mut usize).write(struct_size);
    }
    Ok(())
}

/// An input options struct: NULL gives `defaults`; otherwise the whole fields within the caller's
/// `struct_size` are read over `defaults` (fields past it, those of a newer header than the caller's, keep
/// their defaults) and nothing past `struct_size` is read. A `struct_size` below the struct's first
/// published version is `INVALID_ARGUMENT` naming the struct and both sizes. `T`'s fields must accept any
/// bit pattern (integers, nullable function pointers, raw pointers).
pub(crate) fn read_options<T: OptionsStruct>(p: *const T, defaults: T, name: &str) -> Result<T> {
    let mut o = defaults;
    if p.is_null() {
        return Ok(o);
    }
    // SAFETY: non-NULL; the caller promises at least struct_size readable bytes, struct_size first.
    let size = options_size::<T>(unsafe { *(p as *const usize) }, name)?;
    // SAFETY: copies the fields ending within the caller's struct_size bytes over a valid value of T; T's
    // fields accept any bit pattern (this function's contract).
    unsafe { copy_fields::<T>(p as *const u8, &mut o as *mut T as *mut u8, size) };
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

/// A caller array `(ptr, count)` of `T`: `(NULL, 0)` is empty, `(NULL, n > 0)` is `NULL_ARGUMENT`.
pub(crate) fn in_slice<'a, T>(p: *const T, count: usize, name: &str) -> Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("array '{name}' is NULL with {count} elements")));
    }
    // SAFETY: non-NULL with the caller's promise of `count` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

/// A caller output array `(ptr, count)` of `T`, same NULL rules as [`in_slice`].
pub(crate) fn out_slice<'a, T>(p: *mut T, count: usize, name: &str) -> Result<&'a mut [T]> {
    if count == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("array '{name}' is NULL with {count} elements")));
    }
    // SAFETY: non-NULL with the caller's promise of `count` writable elements.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, count) })
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

    /// An options struct whose first version had `struct_size`, `a` and `flag`; `b` appended later.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Opts {
        struct_size: usize,
        a: u64,
        flag: u32,
        b: u64,
    }
    // First version: struct_size, a, flag (20 bytes, sizeof 24); b starts at 24, past its tail padding.
    options_struct!(Opts, first_version_ends_with = flag, fields = [struct_size, a, flag, b]);
    const DEF: Opts = Opts { struct_size: 32, a: 1, flag: 2, b: 3 };

    #[test]
    fn options_init_writes_whole_fields_within_struct_size() {
        assert_eq!((Opts::SIZE_V1, std::mem::size_of::<Opts>()), (20, 32));
        // An older caller: its struct is the first version (sizeof 24), then memory it does not own.
        let mut mem = [FILL; 5];
        init_options(mem.as_mut_ptr() as *mut Opts, 24, DEF).unwrap();
        assert_eq!(mem[..2], [24, 1]);
        assert_eq!(mem[2] as u32, 2, "flag");
        assert_eq!(mem[3..], [FILL, FILL], "wrote past the caller's struct");
        // A newer caller (a larger struct): our fields, nothing past them; struct_size is the caller's.
        let mut mem = [FILL; 6];
        init_options(mem.as_mut_ptr() as *mut Opts, 40, DEF).unwrap();
        assert_eq!((mem[0], mem[1], mem[3], mem[4], mem[5]), (40, 1, 3, FILL, FILL));
        // Too small: refused, nothing written, the message names the struct and both sizes.
        let mut mem = [FILL; 4];
        let e = init_options(mem.as_mut_ptr() as *mut Opts, 19, DEF).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("struct_size 19 is smaller than Opts (20 bytes"), "{}", e.message());
        assert_eq!(mem, [FILL; 4]);
        assert_eq!(init_options::<Opts>(std::ptr::null_mut(), 32, DEF).unwrap_err().status(), Status::NullArgument);
    }

    #[test]
    fn options_reader_takes_defaults_past_struct_size() {
        // An older caller's struct (first version, struct_size 24) followed by bytes that are not its own.
        let mem: [u64; 5] = [24, 7, 9, 0xBAD, 0xBAD];
        let o = read_options(mem.as_ptr() as *const Opts, DEF, "opts").unwrap();
        assert_eq!((o.a, o.flag, o.b), (7, 9, 3), "b past struct_size takes its default");
        // struct_size 20 (offsetof + sizeof of the last first-version field): the same.
        let mem: [u64; 5] = [20, 7, 9, 0xBAD, 0xBAD];
        let o = read_options(mem.as_ptr() as *const Opts, DEF, "opts").unwrap();
        assert_eq!((o.a, o.flag, o.b), (7, 9, 3));
        // The whole struct.
        let mem: [u64; 4] = [32, 7, 9, 8];
        assert_eq!(read_options(mem.as_ptr() as *const Opts, DEF, "opts").unwrap().b, 8);
        // NULL: the defaults; too small: refused with both sizes.
        assert_eq!(read_options::<Opts>(std::ptr::null(), DEF, "opts").unwrap(), DEF);
        let mem: [u64; 4] = [8, 7, 9, 8];
        let e = read_options(mem.as_ptr() as *const Opts, DEF, "opts").unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("opts: struct_size 8 is smaller than Opts (20 bytes"), "{}", e.message());
    }

    /// The real options structs: every field listed in order, none appended into an earlier version's tail
    /// padding, and the first version's size is what the header's structs have.
    #[test]
    fn every_options_struct_is_well_formed() {
        fn check<T: OptionsStruct>() {
            let f = T::FIELDS;
            assert_eq!(f[0], (0, std::mem::size_of::<usize>()), "{}: struct_size first", T::NAME);
            assert!(f.windows(2).all(|w| w[0].1 <= w[1].0), "{}: fields in order", T::NAME);
            assert!(f.last().unwrap().1 <= std::mem::size_of::<T>());
            let v1_sizeof = T::SIZE_V1.next_multiple_of(std::mem::align_of::<T>());
            for &(start, end) in f.iter().filter(|&&(_, end)| end > T::SIZE_V1) {
                assert!(start >= v1_sizeof, "{}: a field at {start}..{end} lies in the first version", T::NAME);
            }
            assert!(f.iter().any(|&(_, end)| end == T::SIZE_V1), "{}: SIZE_V1 ends a field", T::NAME);
        }
        check::<Opts>();
        check::<crate::ffi::put::hostfirst_put_options>();
        check::<crate::ffi::load::hostfirst_load_options>();
        check::<crate::ffi::dlpack::hostfirst_dlpack_options>();
        check::<crate::ffi::shard::hostfirst_shard_options>();
        check::<crate::ffi::shard::hostfirst_shard_run_options>();
        check::<crate::ffi::writer::hostfirst_writer_options>();
    }
}
