//! Opening safetensors files, memory buffers and multi-file sets: `hostfirst_file_*` (the core is `crate::file`).

use super::args::{c_str, in_bytes, out_ptr};
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::error::{Error, Status};
use crate::file::TensorFile;
use std::ffi::{c_char, c_void};

/// An open safetensors file, memory buffer or multi-file set (`*.safetensors.index.json`).
///
/// Created by `hostfirst_file_open` or `hostfirst_file_open_memory`; released by
/// `hostfirst_file_free`. Immutable once open: every function taking a `const hostfirst_file*` is thread-safe
/// and may run concurrently on the same handle. Views made from it stay valid after it is freed.
pub struct hostfirst_file {
    _private: [u8; 0],
}

impl Handle for hostfirst_file {
    type Target = TensorFile;
    const NAME: &'static str = "hostfirst_file";
}

/// Cap on tensors in one safetensors file (larger headers give `HOSTFIRST_STATUS_LIMIT_EXCEEDED`).
pub const HOSTFIRST_MAX_TENSORS: u32 = 262144;

/// Cap on tensors in a multi-file set.
pub const HOSTFIRST_MAX_SET_TENSORS: u32 = 1048576;

/// Cap on a tensor's rank.
pub const HOSTFIRST_MAX_RANK: u32 = 32;

/// Cap on a tensor name's length in bytes.
pub const HOSTFIRST_MAX_NAME_LEN: u32 = 4096;

/// Cap on the entries of a file's metadata (a header's `__metadata__`, a set's index `metadata` and the
/// set's merged metadata): more give `HOSTFIRST_STATUS_METADATA_LIMIT_EXCEEDED`, found while parsing, before
/// the rest is read (a header of millions of tiny entries costs neither time nor memory).
pub const HOSTFIRST_MAX_METADATA_ENTRIES: u32 = 65536;

// The caps above are literals for cbindgen; the core's values are the ones enforced.
const _: () = assert!(HOSTFIRST_MAX_TENSORS as usize == crate::file::MAX_TENSORS);
const _: () = assert!(HOSTFIRST_MAX_SET_TENSORS as usize == crate::file::MAX_SET_TENSORS);
const _: () = assert!(HOSTFIRST_MAX_RANK as usize == crate::file::MAX_RANK);
const _: () = assert!(HOSTFIRST_MAX_NAME_LEN as usize == crate::file::MAX_NAME_LEN);
const _: () = assert!(HOSTFIRST_MAX_METADATA_ENTRIES as usize == crate::file::MAX_METADATA_ENTRIES);

/// Opens a safetensors file, or a multi-file set when `path` is an index, and writes a new handle to `*out`.
///
/// An index (`*.safetensors.index.json`, the Hugging Face `weight_map` format) is recognised by a name ending
/// in `.json` or by content (JSON text that cannot be a safetensors length prefix) and opened as one logical
/// file: part file paths in `weight_map` are relative to the index's directory (absolute paths and `..` are
/// refused); each part file is opened once and validated like a single file. Tensors are ordered by part file
/// name, then in file order within each part file. Metadata of a set: the index's `metadata` object (non-string
/// values as JSON text, e.g. `total_size`), then each part file's `__metadata__` keys not already present. (0.1
/// also had `hostfirst_file_open_index`, which this covers.) Opening reads only the header(s) with
/// `pread` and maps each file read-only without reading its data, so its cost and memory do not grow with
/// the data size; it never initialises an accelerator. The file must be a regular file whose size is
/// exactly 8 + header + data bytes.
///
/// Validation follows the safetensors format strictly (reliability catalogue): every failure names the
/// file, the tensor when there is one, and what is wrong. Statuses: `NULL_ARGUMENT`; `INVALID_ARGUMENT`
/// (path empty or not UTF-8); `IO` (cannot open or stat, not a regular file); `TRUNCATED` (the file is shorter than
/// its header declares); `HEADER_TOO_SMALL`, `HEADER_TOO_LARGE`, `INVALID_HEADER_LENGTH`,
/// `INVALID_HEADER_UTF8`, `INVALID_HEADER_JSON` (syntax, types, unknown dtype, non-string metadata, a tensor
/// named `__metadata__`, a name containing NUL), `INVALID_OFFSET`, `DUPLICATE_TENSOR` (even identical
/// entries), `VALIDATION_OVERFLOW`, `MISALIGNED_SLICE`, `TENSOR_INVALID_INFO`, `INCOMPLETE_BUFFER` (bytes
/// after the last tensor), `LIMIT_EXCEEDED` (more than `HOSTFIRST_MAX_TENSORS` tensors, rank above
/// `HOSTFIRST_MAX_RANK`, a name longer than `HOSTFIRST_MAX_NAME_LEN` bytes), `METADATA_LIMIT_EXCEEDED`
/// (more than `HOSTFIRST_MAX_METADATA_ENTRIES` metadata entries), `NOT_SAFETENSORS` (not a safetensors file at
/// all: the message says what it looks like); for sets also `INVALID_INDEX` (a missing part file, an indexed
/// tensor not in its part file, a part file's tensor the index does not list), `DUPLICATE_TENSOR` (a name twice in
/// `weight_map`, or a tensor in two part files), `LIMIT_EXCEEDED` (more than `HOSTFIRST_MAX_SET_TENSORS` tensors).
/// Leading and trailing JSON whitespace around the header object is accepted (as the reference crate does).
///
/// On failure `*out` is left unchanged and no handle or file descriptor is left open. Free the handle with
/// `hostfirst_file_free`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_open(path: *const c_char, out: *mut *mut hostfirst_file) -> Status {
    hostfirst_boundary!("hostfirst_file_open", {
        let path = c_str(path, "path")?;
        let out = out_ptr(out, "out")?;
        let f = TensorFile::open(path)?;
        *out = handle::insert_new::<hostfirst_file>(f);
        Ok(())
    })
}

/// Validates a safetensors image in caller memory `(data, len)` and writes a new handle to `*out`, without
/// copying the data.
///
/// **Ownership:** the caller keeps the memory alive and unmodified until the file handle and every view
/// made from it are freed; view data pointers point into it. Same validation and statuses as
/// `hostfirst_file_open`, except that a buffer shorter than its header declares gives
/// `INVALID_HEADER_LENGTH` (header) or `INCOMPLETE_BUFFER` (data) instead of `TRUNCATED`. `(NULL, 0)` is an
/// empty buffer (`HEADER_TOO_SMALL`); `(NULL, len > 0)` is `NULL_ARGUMENT`. Used by tests and fuzzing.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_open_memory(data: *const c_void, len: usize, out: *mut *mut hostfirst_file) -> Status {
    hostfirst_boundary!("hostfirst_file_open_memory", {
        let bytes = in_bytes(data as *const u8, len, "data")?;
        let out = out_ptr(out, "out")?;
        // SAFETY: `bytes` is readable for its length; the documented contract makes the caller keep it alive
        // and unmodified while the handle or any of its views exists.
        let f = unsafe { TensorFile::from_raw(bytes.as_ptr(), bytes.len()) }?;
        *out = handle::insert_new::<hostfirst_file>(f);
        Ok(())
    })
}

/// Releases a file handle. NULL is a no-op returning OK; a handle already freed (or not a file handle)
/// gives `INVALID_HANDLE` and frees nothing.
///
/// Views made from the file stay valid (they keep the mapping alive); strings returned by the file's
/// accessors (`hostfirst_file_tensor_name`, metadata, path) become invalid. Thread-safe, but do not free a
/// handle while another thread may still pass it to a call that returns such strings.
#[no_mangle]
pub extern "C" fn hostfirst_file_free(file: *mut hostfirst_file) -> Status {
    hostfirst_boundary!("hostfirst_file_free", {
        handle::remove::<hostfirst_file>(file, "file")?;
        Ok(())
    })
}

/// Writes the number of tensors (all part files of a set) to `*out_count`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_tensor_count(file: *const hostfirst_file, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_file_tensor_count", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        *out_ptr(out_count, "out_count")? = f.len();
        Ok(())
    })
}

/// Writes the name of tensor `index` (file order: by data offset; for a set, part files by file name) to
/// `*out_name`.
///
/// The string is owned by the file and valid until `hostfirst_file_free`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `OUT_OF_RANGE` for `index >= count`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_tensor_name(
    file: *const hostfirst_file,
    index: usize,
    out_name: *mut *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_file_tensor_name", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let out = out_ptr(out_name, "out_name")?;
        let p = f.name_ptr(index).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("{}: tensor index {index}, but there are {} tensors", f.display_name(), f.len()),
            )
        })?;
        *out = p;
        Ok(())
    })
}

/// Looks a tensor up by name (a hash lookup, fast for any number of tensors) and writes its index to
/// `*out_index`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (name not UTF-8), `NOT_FOUND`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_find(
    file: *const hostfirst_file,
    name: *const c_char,
    out_index: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_file_find", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let name = c_str(name, "name")?;
        let out = out_ptr(out_index, "out_index")?;
        *out = f
            .find(name)
            .ok_or_else(|| Error::new(Status::NotFound, format!("{}: no tensor named '{name}'", f.display_name())))?;
        Ok(())
    })
}

/// Writes the number of `__metadata__` entries to `*out_count`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_metadata_count(file: *const hostfirst_file, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_file_metadata_count", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        *out_ptr(out_count, "out_count")? = f.metadata_len();
        Ok(())
    })
}

/// Writes metadata entry `index` (header order) to `*out_key` and `*out_value`; either may be NULL if not
/// wanted.
///
/// Strings are owned by the file and valid until `hostfirst_file_free`. Errors: `NULL_ARGUMENT` (file),
/// `INVALID_HANDLE`, `OUT_OF_RANGE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_metadata_get(
    file: *const hostfirst_file,
    index: usize,
    out_key: *mut *const c_char,
    out_value: *mut *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_file_metadata_get", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let (k, v) = f.metadata_ptrs(index).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("{}: metadata index {index}, but there are {} entries", f.display_name(), f.metadata_len()),
            )
        })?;
        if let Some(o) = super::args::opt_out(out_key) {
            *o = k;
        }
        if let Some(o) = super::args::opt_out(out_value) {
            *o = v;
        }
        Ok(())
    })
}

/// Writes the metadata value for `key` to `*out_value` (valid until `hostfirst_file_free`).
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`, `NOT_FOUND`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_metadata_find(
    file: *const hostfirst_file,
    key: *const c_char,
    out_value: *mut *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_file_metadata_find", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let key = c_str(key, "key")?;
        let out = out_ptr(out_value, "out_value")?;
        *out = f
            .metadata_value_ptr(key)
            .ok_or_else(|| Error::new(Status::NotFound, format!("{}: no metadata key '{key}'", f.display_name())))?;
        Ok(())
    })
}

/// Writes the total bytes of tensor data (all part files of a set) to `*out_bytes`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_data_bytes(file: *const hostfirst_file, out_bytes: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_file_data_bytes", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        *out_ptr(out_bytes, "out_bytes")? = f.data_bytes();
        Ok(())
    })
}

/// Writes the path the file was opened with (the index path for a set) to `*out_path`; valid until
/// `hostfirst_file_free`. A file opened from memory has no path: `NOT_FOUND`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_path(file: *const hostfirst_file, out_path: *mut *const c_char) -> Status {
    hostfirst_boundary!("hostfirst_file_path", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let out = out_ptr(out_path, "out_path")?;
        *out = f
            .path_ptr()
            .ok_or_else(|| Error::new(Status::NotFound, "the file was opened from memory and has no path"))?;
        Ok(())
    })
}

/// Creates a view of the tensor called `name` and writes it to `*out_view` (free it with
/// `hostfirst_view_free`). Cheap: no data is read. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`,
/// `INVALID_ARGUMENT`, `NOT_FOUND`. Thread-safe: views may be created from many threads at once.
#[no_mangle]
pub extern "C" fn hostfirst_file_view(
    file: *const hostfirst_file,
    name: *const c_char,
    out_view: *mut *mut hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_file_view", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let name = c_str(name, "name")?;
        let out = out_ptr(out_view, "out_view")?;
        let v = f.view(name)?;
        *out = handle::insert_new::<hostfirst_view>(v);
        Ok(())
    })
}

/// Creates a view of tensor `index` (file order) and writes it to `*out_view`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `OUT_OF_RANGE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_view_at(
    file: *const hostfirst_file,
    index: usize,
    out_view: *mut *mut hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_file_view_at", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let out = out_ptr(out_view, "out_view")?;
        let v = f.view_at(index)?;
        *out = handle::insert_new::<hostfirst_view>(v);
        Ok(())
    })
}
