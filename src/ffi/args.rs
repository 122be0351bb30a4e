//! Argument helpers of the C skin: NULL-checked pointers, C strings, caller buffers and arrays, interned
//! strings, and the one rule for every extensible struct (`size_t struct_size` first), in and out: see
//! [`Extensible`]. A leaf: the exported functions use it, it uses only the core's error type.

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
/// A `hostfirst_page_cache` from C (printed as `hostfirst_page_cache`).
pub type c_page_cache = u32;

/// The page-cache policy of an options struct's `page_cache` field (`what`: its name, e.g.
/// `opts->page_cache`): an unknown value is `INVALID_ARGUMENT` naming the field.
pub(crate) fn page_cache_arg(v: c_page_cache, what: &str) -> Result<crate::cache::PageCache> {
    enum_arg(v, crate::cache::PageCache::from_u32, what, "hostfirst_page_cache")
}

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
/// A boolean from C (the header's one spelling: `int32_t`, 1 true, 0 false); any other value is
/// `INVALID_ARGUMENT` naming the parameter.
pub(crate) fn bool_arg(v: i32, name: &str) -> Result<bool> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::new(Status::InvalidArgument, format!("{name} is {v}; expected 0 or 1"))),
    }
}

pub(crate) fn out_ptr<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter '{name}' is NULL")));
    }
    // SAFETY: non-NULL; the C contract is that it points to writable memory for a T.
    Ok(unsafe { &mut *p })
}

// ---- Extensible structs: the one rule for every struct that begins with `size_t struct_size` ----------------

/// The largest `struct_size` an extensible struct accepts (in either direction): no version of any of them will
/// be that large, so a bigger value is a caller's mistake (a byte count, `SIZE_MAX`), refused before a byte past
/// the known fields is touched. (The Linux kernel's `copy_struct_from_user` callers cap at a page likewise.)
pub(crate) const MAX_STRUCT_SIZE: usize = 4096;

/// Which way an extensible struct crosses the boundary (read by the unit tests, which check each way's rule).
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Options: the caller fills it (from its `*_options_init`), the library reads it ([`read_options`]).
    In,
    /// Infos and statistics: the library fills it ([`out_struct_size`], then [`write_out_struct`]).
    Out,
}

/// A struct of the C API that begins with `size_t struct_size` and grows only by appending fields. Every one,
/// in and out, follows one rule (the header's CONVENTIONS, "Extensible structs"; the Linux kernel's
/// `copy_struct_from_user` / `copy_struct_to_user`):
///
/// - `struct_size` is at least [`Extensible::MIN_SIZE`] (the end of the struct's last field in its 1.0 layout)
///   and at most [`MAX_STRUCT_SIZE`], else `INVALID_ARGUMENT` naming the struct and the sizes;
/// - in: the whole fields within `struct_size` are read (fields past it, from an older caller, take their
///   defaults, which are zero); bytes past the library's `sizeof`, up to `struct_size` (fields of a newer
///   header), must be zero, else `INVALID_ARGUMENT` naming the struct and the offset of the first non-zero byte,
///   and nothing is done. Every field's zero means its default, so a zero-filled struct with `struct_size` set
///   is the defaults, as NULL is;
/// - out (the `*_options_init` functions included): only whole fields within `struct_size` are written (never a
///   part of one), bytes past the library's `sizeof` up to `struct_size` are zeroed, and `struct_size` is set to
///   the bytes of known fields written (an init keeps the caller's `struct_size`).
///
/// Declared with [`options_struct!`] (in) or [`out_struct!`] (out), which also check the layout at compile time;
/// the unit test `every_header_struct_follows_the_rule` fails for a struct of the header that is neither, and
/// for an exported function that takes one without passing it to this module.
pub(crate) trait Extensible: Copy {
    /// The C type name, for messages.
    const NAME: &'static str;
    /// In (options) or out (infos).
    #[cfg_attr(not(test), allow(dead_code))]
    const DIRECTION: Direction;
    /// The smallest `struct_size` accepted: the end of the struct's last field in its 1.0 layout. Appending a
    /// field never changes it.
    const MIN_SIZE: usize;
    /// `(offset, end)` of every field appended after the 1.0 layout, in order.
    const APPENDED: &'static [(usize, usize)];
}

/// The end of field `$field` of `$t` (its offset plus its size).
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

/// The [`Extensible`] impl of `$t` and its compile-time layout check (use [`options_struct!`] / [`out_struct!`]).
macro_rules! extensible_struct {
    ($t:ident, $dir:ident, $last:ident, [$($a:ident),*]) => {
        impl $crate::ffi::args::Extensible for $t {
            const NAME: &'static str = stringify!($t);
            const DIRECTION: $crate::ffi::args::Direction = $crate::ffi::args::Direction::$dir;
            const MIN_SIZE: usize = $crate::ffi::args::end_of_field!($t, $last);
            const APPENDED: &'static [(usize, usize)] =
                &[$((std::mem::offset_of!($t, $a), $crate::ffi::args::end_of_field!($t, $a))),*];
        }
        const _: () = $crate::ffi::args::check_layout::<$t>(std::mem::offset_of!($t, struct_size));
    };
}
pub(crate) use extensible_struct;

/// Declares `$t` an options struct (in). `first_version_ends_with` names the last field of its 1.0 layout (the
/// smallest `struct_size` accepted ends there), `fields` are all its fields in order (checked: one left out does
/// not compile), and `appended` the fields added after 1.0, in order. `$t`'s fields must accept any bit pattern
/// (integers, floats, nullable function pointers, raw pointers) and mean their default when zero; the defaults
/// passed to [`read_options`] and [`init_options`] are all zero (tested for every options struct).
macro_rules! options_struct {
    ($t:ident, first_version_ends_with = $last:ident, fields = [$($f:ident),+ $(,)?]
        $(, appended = [$($a:ident),+ $(,)?])? $(,)?) => {
        $crate::ffi::args::extensible_struct!($t, In, $last, [$($($a),+)?]);
        const _: () = {
            /// Compiles only when the lists name every field of the struct.
            #[allow(dead_code)]
            fn every_field_is_listed(v: $t) {
                let $t { $($f: _,)+ $($($a: _,)+)? } = v;
            }
        };
    };
}
pub(crate) use options_struct;

/// Declares `$t` an output struct (out) whose 1.0 layout ends with field `$last` (its last field, checked at
/// compile time), with `appended` the fields added after 1.0, in order.
macro_rules! out_struct {
    ($t:ident, $last:ident $(, appended = [$($a:ident),+ $(,)?])? $(,)?) => {
        $crate::ffi::args::extensible_struct!($t, Out, $last, [$($($a),+)?]);
    };
}
pub(crate) use out_struct;

/// The compile-time layout check of every extensible struct: `struct_size` (at `struct_size_offset`) comes
/// first; the first appended field starts past the 1.0 layout's `sizeof` (never in its tail padding, which an
/// older caller's `sizeof` covers), later ones in order; and the declaration reaches the struct's last field.
pub(crate) const fn check_layout<T: Extensible>(struct_size_offset: usize) {
    assert!(struct_size_offset == 0, "an extensible struct begins with `size_t struct_size`");
    let align = std::mem::align_of::<T>();
    assert!(T::MIN_SIZE >= std::mem::size_of::<usize>(), "the 1.0 layout ends after struct_size");
    let mut end = T::MIN_SIZE;
    let mut i = 0;
    while i < T::APPENDED.len() {
        let (start, e) = T::APPENDED[i];
        if i == 0 {
            assert!(start >= end.next_multiple_of(align), "a field appended after 1.0 lies in the 1.0 sizeof");
        } else {
            assert!(start >= end, "appended fields are listed in order");
        }
        end = e;
        i += 1;
    }
    assert!(
        end.next_multiple_of(align) == std::mem::size_of::<T>(),
        "the declaration does not reach the struct's last field: name it (1.0 layout) or list it in `appended`"
    );
}

/// Checks a caller's `struct_size` for `T` (`what` names the parameter): at least the 1.0 layout, at most
/// [`MAX_STRUCT_SIZE`].
pub(crate) fn struct_size_ok<T: Extensible>(size: usize, what: &str) -> Result<usize> {
    let (name, min, here) = (T::NAME, T::MIN_SIZE, std::mem::size_of::<T>());
    if size < min {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{what}: struct_size {size} is smaller than {name} ({min} bytes at least: every field of its 1.0 \
                 layout; sizeof is {here} in this library); set struct_size = sizeof({name})"
            ),
        ));
    }
    if size > MAX_STRUCT_SIZE {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{what}: struct_size {size} is larger than any {name} ({MAX_STRUCT_SIZE} bytes at most; sizeof is \
                 {here} in this library); set struct_size = sizeof({name})"
            ),
        ));
    }
    Ok(size)
}

/// The bytes of known fields a caller's struct of `size` (>= `MIN_SIZE`) holds whole: `sizeof(T)` when it is
/// at least that, else the end of the last whole field within it.
fn known_end<T: Extensible>(size: usize) -> usize {
    if size >= std::mem::size_of::<T>() {
        return std::mem::size_of::<T>();
    }
    T::APPENDED.iter().filter(|&&(_, end)| end <= size).fold(T::MIN_SIZE, |acc, &(_, end)| acc.max(end))
}

/// Copies the whole known fields within the first `size` (>= `MIN_SIZE`) bytes from `src` to `dst`: the 1.0
/// layout, then each appended field that ends within `size`.
///
/// # Safety
/// `src` and `dst` hold at least `min(size, sizeof(T))` readable / writable bytes laid out as (a version of) `T`.
unsafe fn copy_known<T: Extensible>(src: *const u8, dst: *mut u8, size: usize) {
    // SAFETY: [0, MIN_SIZE) lies within both (size >= MIN_SIZE); so does every appended field ending by `size`.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, T::MIN_SIZE);
        for &(start, end) in T::APPENDED.iter().filter(|&&(_, end)| end <= size) {
            std::ptr::copy_nonoverlapping(src.add(start), dst.add(start), end - start);
        }
    }
}

/// Writes `value` into a caller's struct of `size` bytes (checked by [`struct_size_ok`]) by the rule: whole
/// known fields within `size`, zeros from `sizeof(T)` to `size`, and `struct_size` = the known bytes written.
/// Used for single output structs and for the entries of an array of them (`hostfirst_load_entries`).
///
/// # Safety
/// `dst` points to `size` writable bytes laid out as (a version of) `T`.
unsafe fn write_struct<T: Extensible>(dst: *mut u8, size: usize, value: T) {
    let mut v = value;
    // SAFETY: `v` is a T, which begins with its usize `struct_size`; the caller's struct holds `size` bytes.
    unsafe {
        (&mut v as *mut T as *mut usize).write(known_end::<T>(size));
        copy_known::<T>(&v as *const T as *const u8, dst, size);
        if size > std::mem::size_of::<T>() {
            std::ptr::write_bytes(dst.add(std::mem::size_of::<T>()), 0, size - std::mem::size_of::<T>());
        }
    }
}

/// The first non-zero byte of a caller's input struct past what this library knows (`sizeof(T)` .. `size`)
/// is `INVALID_ARGUMENT` naming the struct and the offset.
///
/// # Safety
/// `p` points to `size` readable bytes.
unsafe fn unknown_bytes_are_zero<T: Extensible>(p: *const u8, size: usize, what: &str) -> Result<()> {
    let known = std::mem::size_of::<T>();
    for off in known..size {
        // SAFETY: off < size (the caller's promise).
        let b = unsafe { *p.add(off) };
        if b != 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "{what}: byte {off} of {} is {b:#04x}, past the {known} bytes of the struct this library \
                     (hostfirst {}) knows (struct_size {size}): a field of a newer hostfirst.h is set, which this \
                     library cannot honour; leave it zero or use a library at least as new as the header",
                    T::NAME,
                    env!("CARGO_PKG_VERSION")
                ),
            ));
        }
    }
    Ok(())
}

/// The body of every `hostfirst_*_options_init(out, struct_size)`: writes `defaults` (all zero but
/// `struct_size`) by the output rule ([`write_struct`]) and sets `out->struct_size = struct_size`.
pub(crate) fn init_options<T: Extensible>(out: *mut T, struct_size: usize, defaults: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter 'out' ({} *) is NULL", T::NAME)));
    }
    let size = struct_size_ok::<T>(struct_size, "out")?;
    // Every options struct's defaults are all zero (tested), so they are written as zero bytes, the padding
    // between fields included: a struct value's padding holds whatever its stack slot held, which must not reach
    // the caller (valgrind saw it as uninitialised in a caller's memcmp).
    let _ = defaults;
    let end = known_end::<T>(size);
    // SAFETY: the caller promises `struct_size` writable bytes at `out`, laid out as (a version of) T; `end`
    // (whole known fields) and `sizeof(T)` .. `size` lie within them.
    unsafe {
        std::ptr::write_bytes(out as *mut u8, 0, end);
        if size > std::mem::size_of::<T>() {
            std::ptr::write_bytes((out as *mut u8).add(std::mem::size_of::<T>()), 0, size - std::mem::size_of::<T>());
        }
        (out as *mut usize).write(struct_size);
    }
    Ok(())
}

/// An input options struct by the rule: NULL gives `defaults`; otherwise its `struct_size` is checked, bytes
/// past `sizeof(T)` must be zero, and the whole fields within it are read over `defaults` (those past it, from
/// an older caller, keep their defaults). Nothing past `struct_size` is read.
pub(crate) fn read_options<T: Extensible>(p: *const T, defaults: T, what: &str) -> Result<T> {
    let mut o = defaults;
    if p.is_null() {
        return Ok(o);
    }
    // SAFETY: non-NULL; the caller promises at least struct_size readable bytes, struct_size first.
    let size = struct_size_ok::<T>(unsafe { (p as *const usize).read() }, what)?;
    // SAFETY: `size` readable bytes (the caller's promise); fields copied accept any bit pattern (the
    // options_struct! contract) and lie within both.
    unsafe {
        unknown_bytes_are_zero::<T>(p as *const u8, size, what)?;
        copy_known::<T>(p as *const u8, &mut o as *mut T as *mut u8, size);
    }
    Ok(o)
}

/// Checks a caller's output struct before any work: `out` is not NULL and its `struct_size` passes
/// [`struct_size_ok`]. Returns that `struct_size`, for [`write_out_struct`].
pub(crate) fn out_struct_size<T: Extensible>(out: *mut T, what: &str) -> Result<usize> {
    if out.is_null() {
        return Err(Error::new(Status::NullArgument, format!("output parameter '{what}' is NULL")));
    }
    // SAFETY: non-NULL; every such struct begins with the `size_t struct_size` the caller set, so at least a
    // usize is readable even when the caller's struct is older (smaller) than `T`.
    struct_size_ok::<T>(unsafe { (out as *const usize).read() }, what)
}

/// Writes `value` into a caller's output struct whose `size` came from [`out_struct_size`] ([`write_struct`]).
pub(crate) fn write_out_struct<T: Extensible>(out: *mut T, size: usize, value: T) {
    // SAFETY: `out` holds `size` writable bytes (checked by out_struct_size, the caller's promise).
    unsafe { write_struct(out as *mut u8, size, value) }
}

/// Writes `value` as entry `index` of a caller's array of entries of `entry_size` bytes each (an `entry_size`
/// checked with [`struct_size_ok`]), by the rule of [`write_struct`] (`hostfirst_load_entries`).
///
/// # Safety
/// `out` holds at least `index + 1` entries of `entry_size` writable bytes each.
pub(crate) unsafe fn write_struct_at<T: Extensible>(out: *mut T, index: usize, entry_size: usize, value: T) {
    // SAFETY: entry `index` starts `index * entry_size` bytes in and holds `entry_size` bytes (the contract).
    unsafe { write_struct((out as *mut u8).add(index * entry_size), entry_size, value) }
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
    c_str_up_to(p, name, MAX_C_STRING)
}

/// As [`c_str`] with a cap of `max` bytes instead of [`MAX_C_STRING`] (metadata text, which a header may hold
/// up to its own cap).
pub(crate) fn c_str_up_to<'a>(p: *const c_char, name: &str, max: usize) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("string parameter '{name}' is NULL")));
    }
    // SAFETY: non-NULL; the contract is a NUL-terminated string. We scan at most MAX_C_STRING bytes.
    let bytes = unsafe {
        let mut n = 0usize;
        while n <= max && *p.add(n) != 0 {
            n += 1;
        }
        if n > max {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("string parameter '{name}' is longer than {max} bytes or not NUL-terminated"),
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

pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output struct whose 1.0 layout is (`struct_size`, `a`), with `b` appended later.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Grown {
        struct_size: usize,
        a: u64,
        b: u64,
    }
    out_struct!(Grown, a, appended = [b]);

    const FILL: u64 = 0xAAAA_AAAA_AAAA_AAAA;

    #[test]
    fn an_old_struct_gets_the_fields_it_has() {
        assert_eq!(Grown::MIN_SIZE, 16);
        // The caller's struct is the 1.0 one (16 bytes), followed by memory it does not own.
        let mut mem = [16, FILL, FILL, FILL];
        let out = mem.as_mut_ptr() as *mut Grown;
        let size = out_struct_size(out, "out").unwrap();
        write_out_struct(out, size, Grown { struct_size: 0, a: 7, b: 9 });
        assert_eq!(mem, [16, 7, FILL, FILL], "wrote past the caller's struct");
    }

    #[test]
    fn a_newer_or_too_small_or_too_large_struct() {
        // A caller with a newer, larger struct: our fields, zeros past them up to its struct_size, and
        // struct_size says how many bytes are ours.
        let mut mem = [40, FILL, FILL, FILL, FILL, FILL];
        let out = mem.as_mut_ptr() as *mut Grown;
        let size = out_struct_size(out, "out").unwrap();
        write_out_struct(out, size, Grown { struct_size: 0, a: 7, b: 9 });
        assert_eq!(mem, [24, 7, 9, 0, 0, FILL]);
        // A struct_size that ends inside `b`: `b` is not written at all (no part of a field).
        let mut mem = [20, FILL, FILL, FILL];
        let out = mem.as_mut_ptr() as *mut Grown;
        let size = out_struct_size(out, "out").unwrap();
        write_out_struct(out, size, Grown { struct_size: 0, a: 7, b: 9 });
        assert_eq!(mem, [16, 7, FILL, FILL]);
        // Smaller than the 1.0 layout, or larger than any struct: refused, nothing written.
        for bad in [15, 0, MAX_STRUCT_SIZE + 1, usize::MAX] {
            let mut g = Grown { struct_size: bad, a: 1, b: 2 };
            let e = out_struct_size(&mut g, "out").unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument);
            assert!(e.message().starts_with(&format!("out: struct_size {bad} is ")), "{}", e.message());
            assert!(e.message().contains("Grown") && e.message().contains("sizeof(Grown)"), "{}", e.message());
        }
        assert_eq!(out_struct_size::<Grown>(std::ptr::null_mut(), "out").unwrap_err().status(), Status::NullArgument);
    }

    /// An options struct whose 1.0 layout is (`struct_size`, `a`, `flag`), with `b` appended later.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Opts {
        struct_size: usize,
        a: u64,
        flag: u32,
        b: u64,
    }
    // 1.0 layout: struct_size, a, flag (20 bytes, sizeof 24); b starts at 24, past its tail padding.
    options_struct!(Opts, first_version_ends_with = flag, fields = [struct_size, a, flag], appended = [b]);
    const DEF: Opts = Opts { struct_size: 32, a: 0, flag: 0, b: 0 };

    #[test]
    fn options_init_writes_whole_fields_within_struct_size() {
        assert_eq!((Opts::MIN_SIZE, std::mem::size_of::<Opts>()), (20, 32));
        // Every options struct's defaults are all zero (check_options tests it): an init writes zero bytes.
        let def = DEF;
        // An older caller: its struct is the 1.0 layout (sizeof 24), then memory it does not own. Its tail
        // padding (bytes 20..24, past the last whole field) is not written.
        let mut mem = [FILL; 5];
        init_options(mem.as_mut_ptr() as *mut Opts, 24, def).unwrap();
        assert_eq!(mem[..2], [24, 0]);
        assert_eq!(mem[2] as u32, 0, "flag");
        assert_eq!(mem[2] >> 32, FILL >> 32, "wrote the tail padding past the last whole field");
        assert_eq!(mem[3..], [FILL, FILL], "wrote past the caller's struct");
        // A newer caller (a larger struct): our fields, zeros past them (fields of its header we do not
        // know: zero means their default), nothing past its struct_size; struct_size is the caller's.
        let mut mem = [FILL; 7];
        init_options(mem.as_mut_ptr() as *mut Opts, 48, def).unwrap();
        assert_eq!((mem[0], mem[1], mem[2], mem[3], mem[4], mem[5], mem[6]), (48, 0, 0, 0, 0, 0, FILL));
        // Too small or too large: refused, nothing written, the message names the struct and the sizes.
        for bad in [19, MAX_STRUCT_SIZE + 8] {
            let mut mem = [FILL; 4];
            let e = init_options(mem.as_mut_ptr() as *mut Opts, bad, def).unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument);
            assert!(e.message().starts_with(&format!("out: struct_size {bad} is ")), "{}", e.message());
            assert!(e.message().contains("Opts (") && e.message().contains("sizeof is 32"), "{}", e.message());
            assert_eq!(mem, [FILL; 4]);
        }
        assert_eq!(init_options::<Opts>(std::ptr::null_mut(), 32, def).unwrap_err().status(), Status::NullArgument);
    }

    #[test]
    fn options_reader_takes_defaults_past_struct_size_and_refuses_unknown_bytes() {
        let def = Opts { a: 1, flag: 2, b: 3, ..DEF };
        // An older caller's struct (the 1.0 layout, struct_size 24) followed by bytes that are not its own.
        let mem: [u64; 5] = [24, 7, 9, 0xBAD, 0xBAD];
        let o = read_options(mem.as_ptr() as *const Opts, def, "opts").unwrap();
        assert_eq!((o.a, o.flag, o.b), (7, 9, 3), "b past struct_size takes its default");
        // struct_size 20 (the end of the last 1.0 field): the same.
        let mem: [u64; 5] = [20, 7, 9, 0xBAD, 0xBAD];
        let o = read_options(mem.as_ptr() as *const Opts, def, "opts").unwrap();
        assert_eq!((o.a, o.flag, o.b), (7, 9, 3));
        // A struct_size ending inside b: b is not read.
        let mem: [u64; 5] = [28, 7, 9, 0xBAD, 0xBAD];
        assert_eq!(read_options(mem.as_ptr() as *const Opts, def, "opts").unwrap().b, 3);
        // The whole struct; a newer one whose unknown bytes are zero.
        let mem: [u64; 6] = [48, 7, 9, 8, 0, 0];
        assert_eq!(read_options(mem.as_ptr() as *const Opts, def, "opts").unwrap().b, 8);
        // A newer struct with a non-zero unknown byte: refused, naming the struct and the offset.
        let mut mem: [u64; 6] = [48, 7, 9, 8, 0, 0];
        mem[5] = 0xEF << 16; // byte 42
        let e = read_options(mem.as_ptr() as *const Opts, def, "opts").unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().starts_with("opts: byte 42 of Opts is 0xef, past the 32 bytes"), "{}", e.message());
        // NULL: the defaults; too small or too large: refused.
        assert_eq!(read_options::<Opts>(std::ptr::null(), def, "opts").unwrap(), def);
        for bad in [8, 4097, usize::MAX] {
            let mem: [u64; 4] = [bad as u64, 7, 9, 8];
            let e = read_options(mem.as_ptr() as *const Opts, def, "opts").unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument);
            assert!(e.message().starts_with(&format!("opts: struct_size {bad} is ")), "{}", e.message());
        }
    }

    // ---- every struct of the header -------------------------------------------------------------------------

    /// Structs of the header that do not begin with `struct_size`, and why: their layout is fixed for good.
    const FIXED_LAYOUT: &[(&str, &str)] = &[
        ("hostfirst_device", "a value (kind, ordinal) laid out as DLPack's DLDevice, passed by value and in arrays"),
        ("hostfirst_carried_scope", "a value the caller copies between threads"),
        ("hostfirst_dlpack_version", "dlpack.h's DLPackVersion"),
        ("hostfirst_dlpack_device", "dlpack.h's DLDevice"),
        ("hostfirst_dlpack_dtype", "dlpack.h's DLDataType"),
        ("hostfirst_dlpack_tensor", "dlpack.h's DLTensor"),
        ("hostfirst_dlpack_managed_tensor_versioned", "dlpack.h's DLManagedTensorVersioned (versioned by DLPack)"),
        ("hostfirst_dlpack_managed_tensor", "dlpack.h's DLManagedTensor"),
        ("hostfirst_read_plan_slice", "an element of the caller's array of declared slices (experimental tier)"),
    ];

    /// What the test knows of one extensible struct.
    struct Case {
        name: &'static str,
        direction: Direction,
        check: fn(),
    }

    /// The rule, applied to `T` through this module's functions.
    fn check_struct<T: Extensible>() {
        let size = std::mem::size_of::<T>();
        let words = (MAX_STRUCT_SIZE + 64) / 8;
        // Too small and too large: refused with the struct's name, in both directions.
        for bad in [T::MIN_SIZE - 1, MAX_STRUCT_SIZE + 1] {
            let mut mem = vec![0u64; words];
            mem[0] = bad as u64;
            let e = out_struct_size(mem.as_mut_ptr() as *mut T, "p").unwrap_err();
            assert!(e.message().contains(T::NAME), "{}: {}", T::NAME, e.message());
            assert_eq!(e.status(), Status::InvalidArgument);
        }
        // What is written (whole fields, a zeroed tail, struct_size) is the same code for every struct, tested
        // on `Grown` above; an output struct's fields need not accept zero (placements start at 1).
        assert!(T::MIN_SIZE <= size && size <= MAX_STRUCT_SIZE, "{}", T::NAME);
    }

    /// The zero rule of an options struct: a zero-filled struct with struct_size set reads as its defaults
    /// (zero means the default, field by field), and a newer caller's zero tail is accepted, a non-zero byte
    /// there refused with the struct's name and the offset.
    fn check_options<T: Extensible + Default + std::fmt::Debug>() {
        check_struct::<T>();
        let size = std::mem::size_of::<T>();
        let words = (size + 16) / 8 + 1;
        let mut mem = vec![0u64; words];
        mem[0] = size as u64;
        let zero = read_options(mem.as_ptr() as *const T, T::default(), "opts").unwrap();
        // SAFETY: every field of an options struct accepts zero (the options_struct! contract).
        let all_zero: T = unsafe { std::mem::zeroed() };
        let mut defaults = T::default();
        // SAFETY: both are T, which begin with their usize struct_size.
        unsafe { (&mut defaults as *mut T as *mut usize).write(size) };
        assert_eq!(format!("{defaults:?}"), format!("{zero:?}"), "{}", T::NAME);
        let mut z = all_zero;
        // SAFETY: as above.
        unsafe { (&mut z as *mut T as *mut usize).write(size) };
        assert_eq!(
            format!("{defaults:?}"),
            format!("{z:?}"),
            "{}: its defaults are not all zero; zero must mean the default in every field",
            T::NAME
        );
        mem[0] = (size + 16) as u64;
        assert!(read_options(mem.as_ptr() as *const T, T::default(), "opts").is_ok(), "{}", T::NAME);
        let bytes = mem.as_mut_ptr() as *mut u8;
        // SAFETY: within `mem`.
        unsafe { *bytes.add(size + 3) = 1 };
        let e = read_options(mem.as_ptr() as *const T, T::default(), "opts").unwrap_err();
        assert!(e.message().starts_with(&format!("opts: byte {} of {}", size + 3, T::NAME)), "{}", e.message());
    }

    fn case<T: Extensible>() -> Case {
        Case { name: T::NAME, direction: T::DIRECTION, check: check_struct::<T> }
    }
    fn options_case<T: Extensible + Default + std::fmt::Debug>() -> Case {
        Case { name: T::NAME, direction: T::DIRECTION, check: check_options::<T> }
    }

    /// Every extensible struct of the C API. A new one goes here (the test below says so when it is missing).
    fn every_extensible_struct() -> Vec<Case> {
        use crate::ffi::*;
        vec![
            case::<status::hostfirst_fit_info>(),
            case::<backend::hostfirst_backend_info>(),
            case::<device::hostfirst_device_info>(),
            case::<view::hostfirst_view_info>(),
            case::<buffer::hostfirst_buffer_info>(),
            case::<put::hostfirst_put_stats>(),
            options_case::<put::hostfirst_put_options>(),
            case::<plan::hostfirst_plan_tensor_info>(),
            case::<plan::hostfirst_plan_device_info>(),
            case::<plan::hostfirst_plan_unmatched_rule_info>(),
            options_case::<load::hostfirst_load_options>(),
            case::<load_bulk::hostfirst_load_entry>(),
            options_case::<dlpack::hostfirst_dlpack_options>(),
            options_case::<shard::hostfirst_shard_options>(),
            options_case::<shard::hostfirst_shard_run_options>(),
            case::<shard::hostfirst_shard_info>(),
            options_case::<writer::hostfirst_writer_options>(),
            case::<writer::hostfirst_writer_info>(),
            options_case::<read_plan::hostfirst_read_plan_options>(),
            case::<read_plan::hostfirst_read_plan_stats>(),
            case::<read_plan::hostfirst_read_plan_request_info>(),
            options_case::<remote::hostfirst_remote_options>(),
        ]
    }

    /// Every `typedef struct NAME { ... } NAME;` of include/hostfirst.h, with its first member's declaration.
    fn header_structs() -> Vec<(String, String)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include/hostfirst.h");
        let text = std::fs::read_to_string(path).unwrap();
        let mut code = String::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("/*") {
            code.push_str(&rest[..i]);
            rest = &rest[i + rest[i..].find("*/").unwrap() + 2..];
        }
        code.push_str(rest);
        let mut out = Vec::new();
        let mut at = code.as_str();
        while let Some(i) = at.find("typedef struct ") {
            at = &at[i + "typedef struct ".len()..];
            let name: String = at.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let head = at[name.len()..].trim_start();
            if !head.starts_with('{') {
                continue; // an opaque handle: `typedef struct hostfirst_file hostfirst_file;`
            }
            let body = &head[1..head.find('}').unwrap()];
            let first = body.split(';').next().unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
            out.push((name, first));
        }
        out
    }

    /// The one rule for every struct in and out: each struct of the header either begins with
    /// `size_t struct_size` and is declared with options_struct!/out_struct! (and the rule holds for it), or is
    /// one of the fixed layouts above; and every exported function taking one passes it to this module.
    #[test]
    fn every_header_struct_follows_the_rule() {
        let cases = every_extensible_struct();
        let structs = header_structs();
        assert!(structs.len() >= 20, "only {} structs parsed from the header", structs.len());
        for (name, first) in &structs {
            let fixed = FIXED_LAYOUT.iter().any(|(n, _)| n == name);
            let known = cases.iter().any(|c| c.name == name);
            if first == "size_t struct_size" {
                assert!(
                    known,
                    "{name} begins with struct_size but is not declared with options_struct!/out_struct! \
                     (src/ffi/args.rs) or not listed in every_extensible_struct()"
                );
            } else {
                assert!(
                    fixed,
                    "{name} does not begin with `size_t struct_size`: make it extensible (struct_size first, \
                     options_struct!/out_struct!) or, if its layout is fixed for good, list it in FIXED_LAYOUT \
                     with the reason"
                );
            }
        }
        for c in &cases {
            assert!(structs.iter().any(|(n, _)| n == c.name), "{} is not a struct of the header", c.name);
            (c.check)();
        }
        // Every exported function that takes one of them hands it to this module's rule.
        let unchecked = functions_bypassing_the_rule(&cases);
        assert!(
            unchecked.is_empty(),
            "exported functions take extensible structs without passing them to read_options / out_struct_size / \
             write_out_struct / init_options / write_struct_at (src/ffi/args.rs): {unchecked:?}"
        );
    }

    /// The ways through the rule, each a set of functions of this module that must all get the struct pointer
    /// as their first argument: read it, fill its defaults, check then write it, write it as an array entry.
    const RULE_WAYS: &[&[&str]] =
        &[&["read_options"], &["init_options"], &["out_struct_size", "write_out_struct"], &["write_struct_at"]];

    /// A function of the source: name, `(parameter, type)`s, body, and whether it is exported.
    type SourceFn = (String, Vec<(String, String)>, String, bool);

    /// Every top-level `fn` of src/ffi/*.rs (an item starts at column 0 and ends at the first line `}`).
    fn source_functions() -> Vec<SourceFn> {
        const STARTS: &[&str] =
            &["fn ", "pub fn ", "pub(crate) fn ", "pub extern \"C\" fn ", "unsafe fn ", "pub(crate) unsafe fn "];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi");
        let mut fns = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let mut i = 0;
            while i < lines.len() {
                let Some(start) = STARTS.iter().find(|s| lines[i].starts_with(*s)) else {
                    i += 1;
                    continue;
                };
                let end = (i..lines.len()).find(|&j| lines[j] == "}").unwrap_or(lines.len() - 1);
                let item = lines[i..=end].join("\n");
                let sig_end = item.find(" {\n").unwrap_or(item.len());
                let sig = &item[start.len()..sig_end];
                let name: String = sig.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                let params = match (sig.find('('), sig.rfind(')')) {
                    (Some(o), Some(c)) if o < c => sig[o + 1..c]
                        .split(',')
                        .filter_map(|p| p.split_once(':'))
                        .map(|(n, t)| (n.trim().to_string(), t.split_whitespace().collect::<Vec<_>>().join(" ")))
                        .collect(),
                    _ => Vec::new(),
                };
                fns.push((name, params, item[sig_end..].to_string(), start.contains("extern")));
                i = end + 1;
            }
        }
        fns
    }

    /// The arguments of every call `name(...)` in `body`, split at top-level commas.
    fn calls<'a>(body: &'a str, name: &str) -> Vec<Vec<&'a str>> {
        let mut out = Vec::new();
        let pat = format!("{name}(");
        let mut from = 0;
        while let Some(i) = body[from..].find(&pat) {
            let start = from + i;
            from = start + pat.len();
            if body[..start].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue; // part of a longer name
            }
            let (mut depth, mut args, mut arg_start) = (0i32, Vec::new(), from);
            for (j, c) in body[from..].char_indices() {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' if depth > 0 => depth -= 1,
                    ')' => {
                        args.push(body[arg_start..from + j].trim());
                        break;
                    }
                    ',' if depth == 0 => {
                        args.push(body[arg_start..from + j].trim());
                        arg_start = from + j + 1;
                    }
                    _ => {}
                }
            }
            out.push(args);
        }
        out
    }

    /// Whether `body` hands `param` to the rule: to every function of one of [`RULE_WAYS`], each time as the
    /// first argument, directly or through helpers (functions of src/ffi) whose parameter at that place gets it
    /// (three levels deep).
    fn goes_through_rule(body: &str, param: &str, fns: &[SourceFn]) -> bool {
        fn reaches(body: &str, param: &str, rule: &str, fns: &[SourceFn], depth: u32) -> bool {
            if calls(body, rule).iter().any(|args| args.first() == Some(&param)) {
                return true;
            }
            depth > 0
                && fns.iter().filter(|f| !f.3).any(|(name, params, helper_body, _)| {
                    calls(body, name).iter().any(|args| {
                        args.iter().position(|a| *a == param).is_some_and(|i| {
                            params.get(i).is_some_and(|(p, _)| reaches(helper_body, p, rule, fns, depth - 1))
                        })
                    })
                })
        }
        RULE_WAYS.iter().any(|way| way.iter().all(|rule| reaches(body, param, rule, fns, 3)))
    }

    fn functions_bypassing_the_rule(cases: &[Case]) -> Vec<String> {
        let fns = source_functions();
        assert!(fns.iter().filter(|f| f.3).count() > 90, "only {} exported functions found", fns.len());
        let mut bad = Vec::new();
        for (name, params, body, exported) in &fns {
            if !exported {
                continue;
            }
            for (p, ty) in params {
                let Some(c) = cases.iter().find(|c| {
                    ty == &format!("*const {}", c.name)
                        || ty == &format!("*mut {}", c.name)
                        || ty.ends_with(&format!("::{}", c.name))
                }) else {
                    continue;
                };
                if !goes_through_rule(body, p, &fns) {
                    bad.push(format!("{name}({p}: {})", c.name));
                }
            }
        }
        bad
    }

    #[test]
    fn the_source_scan_sees_a_bypass() {
        let cases = [case::<Opts>()];
        let helper = |params: &[&str], body: &str| -> SourceFn {
            let params = params.iter().map(|p| (p.to_string(), "*const Opts".to_string())).collect();
            ("helper".to_string(), params, body.to_string(), false)
        };
        let fns = vec![helper(&["x", "q"], "{ let y = read_options(q, D, \"q\")?; }")];
        assert!(goes_through_rule("{ let o = read_options(opts, D, \"opts\")?; }", "opts", &fns));
        assert!(goes_through_rule("{ helper(v, opts) }", "opts", &fns));
        assert!(!goes_through_rule("{ helper(opts, v) }", "opts", &fns), "the helper's first parameter is not checked");
        assert!(!goes_through_rule("{ let o = unsafe { *opts }; }", "opts", &fns));
        assert!(!goes_through_rule("{ my_read_options(opts, D) }", "opts", &fns));
        // An output struct is both checked and written through the rule.
        let both = "{ let n = out_struct_size(out, \"out\")?; write_out_struct(out, n, v); }";
        assert!(goes_through_rule(both, "out", &fns));
        assert!(!goes_through_rule(
            "{ let n = unsafe { (*out).struct_size }; write_out_struct(out, n, v); }",
            "out",
            &fns
        ));
        assert_eq!(cases[0].direction, Direction::In);
    }
}
