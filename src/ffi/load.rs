//! Host-first loading: safetensors files, memory buffers and sharded sets; tensor views; dtypes.

use super::handle::{self, Handle};
use super::{c_str, in_bytes, opt_out, out_bytes, out_ptr};
use crate::dtype::DType;
use crate::error::{Error, Status};
use crate::load::{TensorFile, TensorView};
use std::ffi::{c_char, c_void};

/// An open safetensors file, memory buffer or sharded set (`*.safetensors.index.json`).
///
/// Created by `hostfirst_file_open`, `hostfirst_file_open_index` or `hostfirst_file_open_memory`; released by
/// `hostfirst_file_free`. Immutable once open: every function taking a `const hostfirst_file*` is thread-safe
/// and may run concurrently on the same handle. Views made from it stay valid after it is freed.
pub struct hostfirst_file {
    _private: [u8; 0],
}

/// A read-only view of one tensor, or of a row range of one (`hostfirst_view_slice_rows`).
///
/// Created by `hostfirst_file_view`, `hostfirst_file_view_at` or `hostfirst_view_slice_rows`; released by
/// `hostfirst_view_free`. A view keeps its file's mapping and descriptor alive: freeing the file handle first
/// is safe. Immutable: every function taking a `const hostfirst_view*` is thread-safe.
pub struct hostfirst_view {
    _private: [u8; 0],
}

impl Handle for hostfirst_file {
    type Target = TensorFile;
    const NAME: &'static str = "hostfirst_file";
}

impl Handle for hostfirst_view {
    type Target = TensorView;
    const NAME: &'static str = "hostfirst_view";
}

/// Element type: boolean (1 byte). Values of `HOSTFIRST_DTYPE_*` are stable and never renumbered; 0 is no
/// dtype.
pub const HOSTFIRST_DTYPE_BOOL: u32 = 1;
/// Element type: unsigned 8-bit integer.
pub const HOSTFIRST_DTYPE_U8: u32 = 2;
/// Element type: signed 8-bit integer.
pub const HOSTFIRST_DTYPE_I8: u32 = 3;
/// Element type: signed 16-bit integer.
pub const HOSTFIRST_DTYPE_I16: u32 = 4;
/// Element type: unsigned 16-bit integer.
pub const HOSTFIRST_DTYPE_U16: u32 = 5;
/// Element type: signed 32-bit integer.
pub const HOSTFIRST_DTYPE_I32: u32 = 6;
/// Element type: unsigned 32-bit integer.
pub const HOSTFIRST_DTYPE_U32: u32 = 7;
/// Element type: signed 64-bit integer.
pub const HOSTFIRST_DTYPE_I64: u32 = 8;
/// Element type: unsigned 64-bit integer.
pub const HOSTFIRST_DTYPE_U64: u32 = 9;
/// Element type: IEEE half precision.
pub const HOSTFIRST_DTYPE_F16: u32 = 10;
/// Element type: bfloat16.
pub const HOSTFIRST_DTYPE_BF16: u32 = 11;
/// Element type: IEEE single precision.
pub const HOSTFIRST_DTYPE_F32: u32 = 12;
/// Element type: IEEE double precision.
pub const HOSTFIRST_DTYPE_F64: u32 = 13;
/// Element type: complex with two f32 parts (8 bytes).
pub const HOSTFIRST_DTYPE_C64: u32 = 14;
/// Element type: FP8 E5M2.
pub const HOSTFIRST_DTYPE_F8_E5M2: u32 = 15;
/// Element type: FP8 E4M3 (fn: no infinities).
pub const HOSTFIRST_DTYPE_F8_E4M3: u32 = 16;
/// Element type: FP8 E8M0 (MX scale).
pub const HOSTFIRST_DTYPE_F8_E8M0: u32 = 17;
/// Element type: MXFP4 E2M1, 4 bits per element (two per byte).
pub const HOSTFIRST_DTYPE_F4: u32 = 18;
/// Element type: MXFP6 E2M3, 6 bits per element.
pub const HOSTFIRST_DTYPE_F6_E2M3: u32 = 19;
/// Element type: MXFP6 E3M2, 6 bits per element.
pub const HOSTFIRST_DTYPE_F6_E3M2: u32 = 20;
/// Element type: FP8 E4M3 FNUZ.
pub const HOSTFIRST_DTYPE_F8_E4M3FNUZ: u32 = 21;
/// Element type: FP8 E5M2 FNUZ.
pub const HOSTFIRST_DTYPE_F8_E5M2FNUZ: u32 = 22;

/// Cap on tensors in one safetensors file (larger headers give `HOSTFIRST_STATUS_LIMIT_EXCEEDED`).
pub const HOSTFIRST_MAX_TENSORS: u32 = 262144;
/// Cap on tensors in a sharded set.
pub const HOSTFIRST_MAX_SET_TENSORS: u32 = 1048576;
/// Cap on a tensor's rank.
pub const HOSTFIRST_MAX_RANK: u32 = 32;
/// Cap on a tensor name's length in bytes.
pub const HOSTFIRST_MAX_NAME_LEN: u32 = 4096;
/// Cap on the entries of a file's metadata (a header's `__metadata__`, a set's index `metadata` and the
/// set's merged metadata): more give `HOSTFIRST_STATUS_METADATA_LIMIT_EXCEEDED`, found while parsing, before
/// the rest is read (a header of millions of tiny entries costs neither time nor memory).
pub const HOSTFIRST_MAX_METADATA_ENTRIES: u32 = 65536;

/// Everything about a view, filled by `hostfirst_view_describe`.
///
/// Set `struct_size = sizeof(hostfirst_view_info)` before the call; fields may be appended in later minor
/// versions. Pointers are owned by the library and stay valid until the view is freed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_view_info {
    /// In: the caller's `sizeof(hostfirst_view_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The tensor's name (NUL-terminated UTF-8); valid until the view is freed.
    pub name: *const c_char,
    /// A `HOSTFIRST_DTYPE_*` value.
    pub dtype: u32,
    /// Number of dimensions (0 for a scalar).
    pub rank: u32,
    /// `rank` dimensions, C order; NULL when `rank` is 0. Valid until the view is freed. For a row slice,
    /// `shape[0]` is the number of rows in the slice.
    pub shape: *const u64,
    /// Size of the data in bytes (0 for an empty tensor).
    pub nbytes: u64,
    /// Absolute offset of the first byte in its file (or memory buffer).
    pub file_offset: u64,
    /// Offset of the first byte within the file's data section (the header's `data_offsets[0]` for a whole
    /// tensor; what `hostfirst inspect` prints as "offset").
    pub data_offset: u64,
    /// Read-only pointer to the data, zero-copy: straight into the file's read-only mapping (or into the
    /// caller's buffer for `hostfirst_file_open_memory`). Pages are read from disk when first touched.
    /// Valid until the view is freed. May be misaligned for the dtype: check `alignment`.
    ///
    /// **SIGBUS hazard:** if the file is truncated (by any process) while this pointer is in use, touching a
    /// page past the new end of file raises SIGBUS, which kills the process unless it handles that signal.
    /// hostfirst installs no signal handler. Where files may change underneath you, read with
    /// `hostfirst_view_copy` / `hostfirst_view_read`, which use `pread` and return `HOSTFIRST_STATUS_TRUNCATED`
    /// instead.
    pub data: *const c_void,
    /// Alignment of `data` in bytes: the largest power of two dividing its address, capped at 4096.
    pub alignment: u64,
}

fn dtype_arg(v: u32) -> Option<DType> {
    DType::from_u32(v)
}

/// Returns the safetensors name of a dtype (`"F32"`, `"BF16"`, `"F8_E4M3"`, ...), or NULL for a value that is
/// not a `HOSTFIRST_DTYPE_*` constant. The string is static. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_name(dtype: u32) -> *const c_char {
    hostfirst_boundary!("hostfirst_dtype_name", default = std::ptr::null(), {
        match dtype_arg(dtype) {
            Some(d) => super::static_cstr(d.name()),
            None => std::ptr::null(),
        }
    })
}

/// Returns the size of one element in bits (4 for F4, 6 for the F6 types, otherwise 8, 16, 32 or 64), or 0
/// for a value that is not a `HOSTFIRST_DTYPE_*` constant. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_bits(dtype: u32) -> u32 {
    hostfirst_boundary!("hostfirst_dtype_bits", default = 0, { dtype_arg(dtype).map(|d| d.bits()).unwrap_or(0) })
}

/// Parses a safetensors dtype name (exact, e.g. `"BF16"`) into `*out_dtype`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for an unknown name. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_from_name(name: *const c_char, out_dtype: *mut u32) -> Status {
    hostfirst_boundary!("hostfirst_dtype_from_name", {
        let name = c_str(name, "name")?;
        let out = out_ptr(out_dtype, "out_dtype")?;
        let d = DType::from_name(name)
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("unknown dtype name '{name}'")))?;
        *out = d as u32;
        Ok(())
    })
}

/// Opens a safetensors file, or a sharded set when `path` is an index, and writes a new handle to `*out`.
///
/// An index is recognised by a name ending in `.json` or by content (JSON text that cannot be a safetensors
/// length prefix); see `hostfirst_file_open_index` for its rules. Opening reads only the header(s) with
/// `pread` and maps each file read-only without reading its data, so its cost and memory do not grow with
/// the data size; it never initialises an accelerator. The file must be a regular file whose size is
/// exactly 8 + header + data bytes.
///
/// Validation follows the safetensors format strictly (reliability catalogue): every failure names the
/// file, the tensor when there is one, and what is wrong. Statuses: `NULL_ARGUMENT`; `INVALID_ARGUMENT`
/// (path not UTF-8); `IO` (cannot open or stat, not a regular file); `TRUNCATED` (the file is shorter than
/// its header declares); `HEADER_TOO_SMALL`, `HEADER_TOO_LARGE`, `INVALID_HEADER_LENGTH`,
/// `INVALID_HEADER_UTF8`, `INVALID_HEADER_JSON` (syntax, types, unknown dtype, non-string metadata, a tensor
/// named `__metadata__`, a name containing NUL), `INVALID_OFFSET`, `DUPLICATE_TENSOR` (even identical
/// entries), `VALIDATION_OVERFLOW`, `MISALIGNED_SLICE`, `TENSOR_INVALID_INFO`, `INCOMPLETE_BUFFER` (bytes
/// after the last tensor), `LIMIT_EXCEEDED` (more than `HOSTFIRST_MAX_TENSORS` tensors, rank above
/// `HOSTFIRST_MAX_RANK`, a name longer than `HOSTFIRST_MAX_NAME_LEN` bytes), `METADATA_LIMIT_EXCEEDED`
/// (more than `HOSTFIRST_MAX_METADATA_ENTRIES` metadata entries), `NOT_SAFETENSORS` (not a safetensors file at
/// all: the message says what it looks like); for sets also `INVALID_INDEX`.
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

/// Opens a sharded set from its `*.safetensors.index.json` (the Hugging Face `weight_map` format) as one
/// logical file, whatever the file is called.
///
/// Shard paths in `weight_map` are relative to the index's directory (absolute paths and `..` are refused);
/// each shard is opened once and validated like `hostfirst_file_open`. Tensors are ordered by shard file
/// name, then in file order within each shard. Statuses beyond those of `hostfirst_file_open`:
/// `INVALID_INDEX` (not an index, a missing shard, an indexed tensor not in its shard, a shard tensor the
/// index does not list), `DUPLICATE_TENSOR` (a name twice in `weight_map`, or a tensor in two shards),
/// `LIMIT_EXCEEDED` (more than `HOSTFIRST_MAX_SET_TENSORS` tensors). Metadata of a set: the index's
/// `metadata` object (non-string values as JSON text, e.g. `total_size`), then each shard's `__metadata__`
/// keys not already present. On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_open_index(path: *const c_char, out: *mut *mut hostfirst_file) -> Status {
    hostfirst_boundary!("hostfirst_file_open_index", {
        let path = c_str(path, "path")?;
        let out = out_ptr(out, "out")?;
        let f = TensorFile::open_index(path)?;
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

/// Writes the number of tensors (all shards of a set) to `*out_count`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_tensor_count(file: *const hostfirst_file, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_file_tensor_count", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        *out_ptr(out_count, "out_count")? = f.len();
        Ok(())
    })
}

/// Writes the name of tensor `index` (file order: by data offset; for a set, shards by file name) to
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
        if let Some(o) = super::opt_out(out_key) {
            *o = k;
        }
        if let Some(o) = super::opt_out(out_value) {
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

/// Writes the total bytes of tensor data (all shards of a set) to `*out_bytes`. Thread-safe.
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

/// Releases a view. NULL is a no-op returning OK; a view already freed gives `INVALID_HANDLE`. Pointers from
/// `hostfirst_view_describe` become invalid. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_free(view: *mut hostfirst_view) -> Status {
    hostfirst_boundary!("hostfirst_view_free", {
        handle::remove::<hostfirst_view>(view, "view")?;
        Ok(())
    })
}

/// Describes a view into `*out` (set `out->struct_size = sizeof(hostfirst_view_info)` first).
///
/// See `hostfirst_view_info` for each field, including the **SIGBUS hazard of `data`**: the pointer goes
/// straight into a read-only mapping of the file, and touching it after the file was truncated kills the
/// process with SIGBUS; use `hostfirst_view_copy` when the file may change. The data may be misaligned for
/// its dtype (`alignment` says). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` when
/// `struct_size` is smaller than this version's struct. On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_describe(view: *const hostfirst_view, out: *mut hostfirst_view_info) -> Status {
    hostfirst_boundary!("hostfirst_view_describe", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let out = out_ptr(out, "out")?;
        let size = out.struct_size;
        if size < std::mem::size_of::<hostfirst_view_info>() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "out->struct_size is {size}; set it to sizeof(hostfirst_view_info) ({} in this version)",
                    std::mem::size_of::<hostfirst_view_info>()
                ),
            ));
        }
        let data = v.mapped().as_ptr();
        *out = hostfirst_view_info {
            struct_size: std::mem::size_of::<hostfirst_view_info>(),
            name: v.name_ptr(),
            dtype: v.dtype() as u32,
            rank: v.shape().len() as u32,
            shape: if v.shape().is_empty() { std::ptr::null() } else { v.shape().as_ptr() },
            nbytes: v.nbytes(),
            file_offset: v.file_offset(),
            data_offset: v.data_offset(),
            data: data as *const c_void,
            alignment: crate::load::alignment_of(data as usize),
        };
        Ok(())
    })
}

/// Creates a zero-copy view of rows `start..stop` (dimension 0) of `view` and writes it to `*out_view`.
///
/// The new view has the same name and dtype, `shape[0] = stop - start`, and is independent of `view` (free
/// both). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`; `OUT_OF_RANGE` when `start > stop` or `stop > shape[0]`;
/// `UNSUPPORTED` for a scalar; `MISALIGNED_SLICE` when a row boundary of a sub-byte dtype (F4, F6) is not on
/// a byte. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_slice_rows(
    view: *const hostfirst_view,
    start: u64,
    stop: u64,
    out_view: *mut *mut hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_view_slice_rows", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let out = out_ptr(out_view, "out_view")?;
        let s = v.slice_rows(start, stop)?;
        *out = handle::insert_new::<hostfirst_view>(s);
        Ok(())
    })
}

/// Copies the view's bytes into the caller's buffer `(dst, capacity)`.
///
/// `*out_nbytes` (if not NULL) always receives the view's size. Files are read with `pread` on the file
/// descriptor, not through the mapping, so a file truncated after opening gives `HOSTFIRST_STATUS_TRUNCATED`
/// (never SIGBUS); other read failures give `IO`. If `capacity < nbytes`, nothing is written and
/// `BUFFER_TOO_SMALL` is returned. `(NULL, 0)` is valid: a size query, or the copy of an empty tensor.
/// Errors also: `NULL_ARGUMENT` (`dst` NULL with a capacity), `INVALID_HANDLE`. On an I/O failure the
/// buffer's contents are unspecified. Thread-safe; many threads may copy from one view at once.
#[no_mangle]
pub extern "C" fn hostfirst_view_copy(
    view: *const hostfirst_view,
    dst: *mut c_void,
    capacity: usize,
    out_nbytes: *mut u64,
) -> Status {
    hostfirst_boundary!("hostfirst_view_copy", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        if let Some(n) = super::opt_out(out_nbytes) {
            *n = v.nbytes();
        }
        if dst.is_null() && capacity == 0 {
            return Ok(());
        }
        let buf = out_bytes(dst as *mut u8, capacity, "dst")?;
        if (capacity as u64) < v.nbytes() {
            return Err(Error::new(
                Status::BufferTooSmall,
                format!(
                    "{}: tensor '{}' needs {} bytes, buffer has {capacity}",
                    v.file_display(),
                    v.name(),
                    v.nbytes()
                ),
            ));
        }
        v.read_at(0, &mut buf[..v.nbytes() as usize])
    })
}

/// Copies `len` bytes starting `offset` bytes into the view into `dst` (a ranged `hostfirst_view_copy`, for
/// streaming large tensors in chunks).
///
/// Same reading rules as `hostfirst_view_copy` (`pread`, `TRUNCATED` instead of SIGBUS). Errors:
/// `NULL_ARGUMENT` (`dst` NULL with `len > 0`), `INVALID_HANDLE`, `OUT_OF_RANGE` when
/// `offset + len > nbytes`, `TRUNCATED`, `IO`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_read(
    view: *const hostfirst_view,
    offset: u64,
    dst: *mut c_void,
    len: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_view_read", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let buf = out_bytes(dst as *mut u8, len, "dst")?;
        v.read_at(offset, buf)
    })
}

/// Maps every page of the view into the process now (Linux `MADV_POPULATE_READ`), reading from storage what
/// is not in the page cache, so that later reads through the mapping, such as `hostfirst_gather_run`'s,
/// take no page faults. Call it once on a data loader's token tensor before the training loop: a one-time
/// cost (one pass over the tensor) that makes every later gather several times faster (BENCHMARKS.md):
/// after it, `hostfirst_gather_run` copies windows of this tensor (and of any view inside it) from the
/// mapping instead of reading each with `pread`.
///
/// Nothing is allocated: the pages belong to the page cache, which the kernel may reclaim again under memory
/// pressure. A view larger than available host memory less the fit check's margin gives `OUT_OF_MEMORY`
/// (message and `hostfirst_last_fit` as for a put) and reads nothing. When `populated` is not NULL it
/// receives, on success, `true` when the pages were mapped and `false` when the system offers only
/// read-ahead advice (Linux before 5.14, other systems) or the view is over a memory buffer (nothing to do).
///
/// Errors: `NULL_ARGUMENT` (`view`), `INVALID_HANDLE`, `OUT_OF_MEMORY`, `TRUNCATED` (the file is now
/// shorter than when it was opened; never SIGBUS), `IO`. Thread-safe; may take seconds for a large tensor
/// that is not in the page cache.
#[no_mangle]
pub extern "C" fn hostfirst_view_prefault(view: *const hostfirst_view, populated: *mut bool) -> Status {
    hostfirst_boundary!("hostfirst_view_prefault", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let p = v.prefault()?;
        if let Some(out) = opt_out(populated) {
            *out = p;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ALL_DTYPES;

    #[test]
    fn dtype_constants_match_core() {
        let consts = [
            HOSTFIRST_DTYPE_BOOL,
            HOSTFIRST_DTYPE_U8,
            HOSTFIRST_DTYPE_I8,
            HOSTFIRST_DTYPE_I16,
            HOSTFIRST_DTYPE_U16,
            HOSTFIRST_DTYPE_I32,
            HOSTFIRST_DTYPE_U32,
            HOSTFIRST_DTYPE_I64,
            HOSTFIRST_DTYPE_U64,
            HOSTFIRST_DTYPE_F16,
            HOSTFIRST_DTYPE_BF16,
            HOSTFIRST_DTYPE_F32,
            HOSTFIRST_DTYPE_F64,
            HOSTFIRST_DTYPE_C64,
            HOSTFIRST_DTYPE_F8_E5M2,
            HOSTFIRST_DTYPE_F8_E4M3,
            HOSTFIRST_DTYPE_F8_E8M0,
            HOSTFIRST_DTYPE_F4,
            HOSTFIRST_DTYPE_F6_E2M3,
            HOSTFIRST_DTYPE_F6_E3M2,
            HOSTFIRST_DTYPE_F8_E4M3FNUZ,
            HOSTFIRST_DTYPE_F8_E5M2FNUZ,
        ];
        assert_eq!(consts.len(), ALL_DTYPES.len());
        for (c, d) in consts.iter().zip(ALL_DTYPES) {
            assert_eq!(*c, *d as u32, "{d}");
        }
        assert_eq!(HOSTFIRST_MAX_TENSORS as usize, crate::load::MAX_TENSORS);
        assert_eq!(HOSTFIRST_MAX_SET_TENSORS as usize, crate::load::MAX_SET_TENSORS);
        assert_eq!(HOSTFIRST_MAX_RANK as usize, crate::load::MAX_RANK);
        assert_eq!(HOSTFIRST_MAX_NAME_LEN as usize, crate::load::MAX_NAME_LEN);
        assert_eq!(HOSTFIRST_MAX_METADATA_ENTRIES as usize, crate::load::MAX_METADATA_ENTRIES);
    }
}
