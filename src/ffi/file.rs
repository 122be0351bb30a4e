//! Opening safetensors files, memory buffers and multi-file sets: `hostfirst_file_*` (the core is `crate::file`).

use super::args::{c_dtype, c_format, c_str, enum_arg, in_bytes, out_ptr};
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::dtype::DType;
use crate::error::{Error, Status};
use crate::file::{Format, RawLayout, TensorFile};
use std::ffi::{c_char, c_void};

/// An open file of named tensors: a safetensors file, memory buffer or multi-file set
/// (`*.safetensors.index.json`), a NumPy `.npy` file, an llm.c token shard, a Megatron indexed dataset, or a
/// headerless raw file (`hostfirst_file_format` says which).
///
/// Created by `hostfirst_file_open`, `_open_format`, `_open_raw` or `_open_memory`; released by
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

/// Opens a file of any format hostfirst recognises by content and writes a new handle to `*out`: a safetensors
/// file, a multi-file set when `path` is an index, a NumPy `.npy` file (versions 1.0, 2.0, 3.0; magic
/// `\x93NUMPY`), an llm.c / modded-nanogpt token shard (256 x int32 header, magic 20240520 or 20240801) or a
/// Megatron-LM / NeMo indexed dataset (`.idx` magic `MMIDIDX`; `path` may be the `.idx`, the `.bin` beside it,
/// or the prefix of both). Every format becomes the same `hostfirst_file` of named tensors (views, puts, loads,
/// gathers and shard-on-read treat them alike):
///
/// - `.npy`: one tensor, `data`, of the array's dtype and shape (C order). Metadata `format` = `npy`,
///   `npy_version`, `descr`, `fortran_order`.
/// - llm.c: one 1-D tensor, `tokens` (U16 for magic 20240520 version 1, U32 for magic 20240801 version 7).
///   Metadata `format` = `llm.c`, `magic`, `version`.
/// - Megatron: `tokens` (1-D, the `.bin`, of the index's dtype), and from the `.idx` `sequence_lengths` (I32),
///   `sequence_pointers` (I64, byte offsets into the `.bin`), `document_indices` (I64) and, for a multimodal
///   index, `sequence_modes` (I8). Metadata `format` = `megatron`, `dtype_code`, `sequence_count`,
///   `document_count`, `max_sequence_length`, `multimodal`. The whole `.idx` is read once at open to validate
///   it (12 bytes a sequence): the pointers must be the running sum of the lengths (the sequences tile the
///   `.bin` in order) and the document indices run from 0 to the sequence count.
///
/// A headerless raw file (nanoGPT's `train.bin`) has no magic: `hostfirst_file_open_raw`. The statuses of the
/// other formats: `HEADER_TOO_SMALL` (the file ends inside a fixed header), `HEADER_TOO_LARGE` (an `.npy`
/// header over 10,000 bytes, NumPy's own limit), `TRUNCATED` / `INCOMPLETE_BUFFER` (the file is shorter /
/// longer than its header declares; the `.bin` shorter / longer than the index's sequences), `INVALID_HEADER`
/// (an `.npy` header that is not the dict NumPy writes, a negative count, an unknown Megatron dtype code),
/// `UNSUPPORTED_VERSION`, `UNSUPPORTED_DTYPE` (object, string, structured, datetime, big-endian, complex128,
/// float128 arrays), `UNSUPPORTED_LAYOUT` (a Fortran-ordered `.npy` array with more than one dimension longer
/// than 1: refused, not opened strided), `VALIDATION_OVERFLOW`, `LIMIT_EXCEEDED` (rank), `INVALID_OFFSET` (a
/// Megatron sequence pointer out of order, overlapping, or leaving a gap), `INVALID_INDEX` (a negative sequence
/// length, document indices out of order or not ending at the sequence count).
///
/// Safetensors: opens a safetensors file, or a multi-file set when `path` is an index.
///
/// An index (`*.safetensors.index.json`, the Hugging Face `weight_map` format) is recognised by a name ending
/// in `.json` or by content (its first byte that is not JSON whitespace is `{`, however much whitespace comes
/// first, and its first 8 bytes cannot be a safetensors length prefix for the file) and opened as one logical
/// file: part file paths in `weight_map` are relative to the index's directory (absolute paths and `..` are
/// refused); each part file is opened once and validated like a single file. Tensors are ordered by part file
/// name, then in file order within each part file. Metadata of a set: the index's `metadata` object (non-string
/// values as JSON text, e.g. `total_size`), then each part file's `__metadata__` keys not already present. A set
/// opened while a save replaces it is one save's: when the index is no longer the file read once the parts are
/// open, the set is opened again (hostfirst's writer replaces the index before any part a reader of the old
/// index could open). Opening reads only the header(s) with
/// `pread` and maps each file read-only without reading its data, so its cost and memory do not grow with
/// the data size; it never initialises an accelerator. The file must be a regular file whose size is
/// exactly 8 + header + data bytes.
///
/// Validation follows the safetensors format strictly (reliability catalogue): every failure names the
/// file, the tensor when there is one, and what is wrong. Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT`
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
/// `path` may be a URL (since 1.1): `s3://bucket/key`, `gs://bucket/key`, `az://container/key`, `http://` or
/// `https://` (any server that supports Range). The object is read with ranged GETs (the header in at most
/// two), configured from the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`; the `GOOGLE_*` and `AZURE_*` equivalents;
/// `HOSTFIRST_REMOTE_RETRIES`, `HOSTFIRST_REMOTE_TIMEOUT`); an index's parts are the objects beside it. A remote
/// file has no mapping: its views' `data` is NULL and their bytes are fetched on demand by `hostfirst_view_copy`
/// and loads. The first response's ETag is pinned: a later read of an object replaced since the open fails with
/// `IO` ("changed since it was opened"), never with bytes of two versions. For a URL also: `NOT_FOUND` (HTTP
/// 404), `PERMISSION_DENIED` (HTTP 403 or 401), `UNSUPPORTED` (a server that answers a range request with the
/// whole object), `IO` (a server still failing after the retries, naming the object; never a credential).
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

/// Opens `path` as the format `format` only and writes a new handle to `*out`.
///
/// `HOSTFIRST_FORMAT_AUTO` is `hostfirst_file_open`. `HOSTFIRST_FORMAT_SAFETENSORS`, `_NPY` and `_LLMC` open the
/// file if it is of that format; `_SAFETENSORS_INDEX` opens a multi-file set's index; `_MEGATRON` a Megatron
/// dataset (`path`: its `.idx`, its `.bin` or their prefix; a `path` that is a file with no `<path>.idx` beside
/// it is judged by its content, so an `.npy` asked for as `_MEGATRON` is `OTHER_FORMAT`). A file of another format hostfirst recognises
/// (by its magic, or a safetensors length prefix followed by `{`) gives `HOSTFIRST_STATUS_OTHER_FORMAT`, with
/// a message naming what it is and the call that opens it; a file of no known format gets the asked
/// format's own verdict (`INVALID_HEADER` for a missing magic). `HOSTFIRST_FORMAT_RAW` needs a layout:
/// `INVALID_ARGUMENT` (use `hostfirst_file_open_raw`); an unknown `format` value is `INVALID_ARGUMENT`.
/// Errors: `OTHER_FORMAT`, `INVALID_ARGUMENT` (as above), and those of `hostfirst_file_open` for the format
/// asked (`NULL_ARGUMENT`, `IO`, `TRUNCATED`, `INVALID_HEADER`, ...). On failure `*out` is unchanged and
/// nothing is left open.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_open_format(
    path: *const c_char,
    format: c_format,
    out: *mut *mut hostfirst_file,
) -> Status {
    hostfirst_boundary!("hostfirst_file_open_format", {
        let path = c_str(path, "path")?;
        let format = enum_arg(format, Format::from_u32, "format", "hostfirst_format")?;
        let out = out_ptr(out, "out")?;
        let f = TensorFile::open_format(path, format)?;
        *out = handle::insert_new::<hostfirst_file>(f);
        Ok(())
    })
}

/// A shape entry for `hostfirst_file_open_raw` (dimension 0 only): as many rows as the file holds after the
/// offset, as `np.memmap` infers without a shape.
pub const HOSTFIRST_FILE_RAW_INFER: u64 = u64::MAX;

// The literal above is for cbindgen; the core's value is the one used.
const _: () = assert!(HOSTFIRST_FILE_RAW_INFER == crate::file::RAW_INFER);

/// Opens a headerless file (nanoGPT's `train.bin`: u16 tokens and nothing else) as one tensor of `dtype` and
/// `shape` (`rank` entries; `shape` may be NULL when `rank` is 0, a scalar) whose first byte is at `offset`,
/// named `name` (NULL: `"data"`), and writes a new handle to `*out`.
///
/// `shape[0]` may be `HOSTFIRST_FILE_RAW_INFER`: as many rows of `shape[1..]` as the file holds after `offset`
/// (nanoGPT's `np.memmap(path, dtype=np.uint16, mode="r")` is dtype U16, shape `{HOSTFIRST_FILE_RAW_INFER}`,
/// rank 1, offset 0). The file must be exactly `offset` + the tensor's bytes, as a safetensors file must be
/// covered exactly: `TRUNCATED` when it is shorter (or `offset` is past its end), `INCOMPLETE_BUFFER` when
/// bytes follow (with an inferred dimension: a partial row left over). A file that is, at offset 0, a valid
/// `.npy` file, llm.c shard or Megatron index gives `OTHER_FORMAT` naming the call that reads its header (give
/// the offset of its data to map past the header on purpose). Errors: `OTHER_FORMAT` (as above), `NULL_ARGUMENT`;
/// `INVALID_ARGUMENT` (unknown dtype, `HOSTFIRST_FILE_RAW_INFER` past dimension 0 or with rows of no bytes,
/// rank above `HOSTFIRST_MAX_RANK`, an empty name or one longer than `HOSTFIRST_MAX_NAME_LEN`, path or name
/// not UTF-8); `VALIDATION_OVERFLOW`; `MISALIGNED_SLICE` (a sub-byte dtype that does not fill whole bytes);
/// `IO`. Metadata: `format` = `raw`, `offset`. On failure `*out` is unchanged and nothing is left open.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_open_raw(
    path: *const c_char,
    dtype: c_dtype,
    shape: *const u64,
    rank: usize,
    offset: u64,
    name: *const c_char,
    out: *mut *mut hostfirst_file,
) -> Status {
    hostfirst_boundary!("hostfirst_file_open_raw", {
        let path = c_str(path, "path")?;
        let dtype = enum_arg(dtype, DType::from_u32, "dtype", "hostfirst_dtype")?;
        if rank > crate::file::MAX_RANK {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("rank {rank} exceeds the hostfirst cap of {}", crate::file::MAX_RANK),
            ));
        }
        let shape = super::args::in_slice(shape, rank, "shape")?;
        let name = if name.is_null() { crate::file::formats::headerless::DEFAULT_NAME } else { c_str(name, "name")? };
        let out = out_ptr(out, "out")?;
        let layout = RawLayout { dtype, shape: shape.to_vec(), offset, name: name.to_string() };
        let f = TensorFile::open_raw(path, &layout)?;
        *out = handle::insert_new::<hostfirst_file>(f);
        Ok(())
    })
}

/// Writes the format of an open file to `*out_format` (never `HOSTFIRST_FORMAT_AUTO`). Errors:
/// `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_format(file: *const hostfirst_file, out_format: *mut Format) -> Status {
    hostfirst_boundary!("hostfirst_file_format", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        *out_ptr(out_format, "out_format")? = f.format();
        Ok(())
    })
}

/// Returns the static name of a format: its constant without the `HOSTFIRST_FORMAT_` prefix (`"NPY"`,
/// `"MEGATRON"`), or `"UNKNOWN"` for a value that is not a `hostfirst_format`. Never NULL. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_format_name(format: c_format) -> *const c_char {
    hostfirst_boundary!("hostfirst_format_name", default = c"UNKNOWN".as_ptr(), {
        match Format::from_u32(format) {
            Some(f) => super::args::static_cstr(f.name()),
            None => c"UNKNOWN".as_ptr(),
        }
    })
}

/// Validates a safetensors image in caller memory `(data, len)` and writes a new handle to `*out`, without
/// copying the data. An image that begins with the `.npy` magic or an llm.c token-shard magic is opened as that
/// format (statuses as `hostfirst_file_open`, with `INCOMPLETE_BUFFER` for a short image); a Megatron index
/// needs its `.bin` and gives `OTHER_FORMAT` here.
///
/// **Ownership:** the caller keeps the memory alive and unmodified until the file handle and every view
/// made from it are freed; view data pointers point into it. Same validation and statuses as
/// `hostfirst_file_open`, except that a buffer shorter than its header declares gives
/// `INVALID_HEADER_LENGTH` (header) or `INCOMPLETE_BUFFER` (data) instead of `TRUNCATED`. `(NULL, 0)` is an
/// empty buffer. Errors: those of `hostfirst_file_open` but `IO` and `TRUNCATED` (`INVALID_HEADER_JSON`,
/// `DUPLICATE_TENSOR`, ...), `INVALID_HEADER_LENGTH` and `INCOMPLETE_BUFFER` (a short image),
/// `HEADER_TOO_SMALL` (an empty one), `OTHER_FORMAT` (a Megatron index), `NULL_ARGUMENT` (`out`, or `data`
/// NULL with `len > 0`). Used by tests and fuzzing.
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

/// Releases a file handle. NULL is a no-op returning OK. Errors: `INVALID_HANDLE` (a handle already freed,
/// or not a file handle; nothing is freed).
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

/// Writes the number of tensors (all part files of a set) to `*out_count`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`. Thread-safe.
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

/// Copies one report of how this file is read into `buf`, with the buffer rules of `hostfirst_build_info`
/// (`(NULL, 0)` asks for the length; `*out_len` always gets the length without the NUL): the file system holding it (its name, the mount's own type where it differs, e.g. `fuse.sshfs` or
/// `virtiofs`, its `statfs` magic number and class: `local`, `memory`, `network`, `user-space` or `unknown`),
/// whether its views are **mapped** or read with **owned reads** and why, the process's reader (as
/// `hostfirst_read_engine` names it), whether io_uring is usable in this process or why not (since 1.1.0
/// explained: `io_uring_setup` refused by a seccomp filter or by `kernel.io_uring_disabled`, a kernel without
/// io_uring, the locked-memory limit), whether direct I/O (`O_DIRECT`) works for the file here or why not
/// (`refused by <file system>` where the file system refuses it, e.g. ramfs, older tmpfs, many FUSE mounts),
/// and what `HOSTFIRST_PAGE_CACHE_BYPASS` does with it: `direct reads (O_DIRECT) into aligned staging`, or
/// `falls back (O_DIRECT not usable: <why>): reading through the page cache, then dropping the pages the read
/// brought in` (on tmpfs and ramfs it adds that their pages stay cached under every policy: they are the
/// file). For example: `"fuse (f_type 0x65735546, user-space): owned reads (...): a user-space file system
/// (...); HOSTFIRST_MAP=always maps it anyway; reads: io_uring (queue depth 64); io_uring: usable; O_DIRECT:
/// not usable (...); page_cache bypass: falls back (...)"`.
///
/// The choice is made when the file is opened, from its file system (Linux `fstatfs`): local disks, tmpfs and
/// file systems hostfirst does not know are mapped (views' `data` point into the mapping); network and cluster
/// file systems (NFS, Lustre, GPFS, CephFS, CIFS/SMB, 9p, BeeGFS) and user-space ones (FUSE, virtiofs) are read
/// with owned reads: no mapping is handed out (a view's `data` is NULL; DLPack exports and copy-on-write loads
/// copy; loads read with `pread`), so a file changed or truncated under a reader gives
/// `HOSTFIRST_STATUS_TRUNCATED` instead of SIGBUS. The environment variable `HOSTFIRST_MAP`, read at each open,
/// overrides it: `auto` (or unset), `always` (map every file), `never` (owned reads for every file); any other
/// value refuses the open with `INVALID_ARGUMENT`. Windows does not detect the file system (files are mapped).
/// A file of several parts gives one line per part (`"<part>: <report>"`); a memory buffer says it is one.
/// Probes direct I/O by opening the file again (a 4 KiB read), so it may take as long as one small read.
///
/// Errors: `NULL_ARGUMENT` (`file`, or `buf` NULL with a non-zero capacity), `INVALID_HANDLE`,
/// `BUFFER_TOO_SMALL` (nothing is written to `buf`; `*out_len` gets the length). Thread-safe. New in 1.1.
#[no_mangle]
pub extern "C" fn hostfirst_file_read_engine(
    file: *const hostfirst_file,
    buf: *mut c_char,
    capacity: usize,
    out_len: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_file_read_engine", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        super::args::write_string(&f.read_engine(), buf, capacity, out_len, "read engine report")
    })
}

/// Writes the number of `__metadata__` entries to `*out_count`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`.
/// Thread-safe.
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

/// Writes the total bytes of tensor data (all part files of a set) to `*out_bytes`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_data_bytes(file: *const hostfirst_file, out_bytes: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_file_data_bytes", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        *out_ptr(out_bytes, "out_bytes")? = f.data_bytes();
        Ok(())
    })
}

/// Writes the path the file was opened with (the index path for a set) to `*out_path`; valid until
/// `hostfirst_file_free`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `NOT_FOUND` (a file opened from memory
/// has no path). Thread-safe.
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

/// For a Megatron dataset (`hostfirst_file_format` gives `HOSTFIRST_FORMAT_MEGATRON`): writes, for each of
/// the `n` sequence indices, the element offset of the sequence's first token in the `tokens` tensor to
/// `out_starts[i]` and its length in elements to `out_lengths[i]` (each an array of `n`). Document boundaries
/// are the `document_indices` tensor (document `d` is sequences `[document_indices[d],
/// document_indices[d + 1])`). Reads 12 bytes of the `.idx` per sequence with positioned reads.
///
/// Every span is checked to lie inside the `tokens` tensor: the `.idx` is read again by this call, and an
/// `.idx` rewritten in place since the open may say anything (reopen the file after rewriting a dataset).
///
/// Errors: `NULL_ARGUMENT` (an array NULL with `n > 0`), `INVALID_HANDLE`, `UNSUPPORTED` (not a Megatron
/// dataset), `OUT_OF_RANGE` (the first index at or past the sequence count), `INVALID_OFFSET` (a sequence whose
/// span is not inside the tokens: the `.idx` changed after the open), `TRUNCATED` / `IO`. Outputs are
/// written only on success. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_file_sequence_spans(
    file: *const hostfirst_file,
    indices: *const u64,
    n: usize,
    out_starts: *mut u64,
    out_lengths: *mut u64,
) -> Status {
    hostfirst_boundary!("hostfirst_file_sequence_spans", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let idx = super::args::in_slice(indices, n, "indices")?;
        let starts = super::args::out_slice(out_starts, n, "out_starts")?;
        let lengths = super::args::out_slice(out_lengths, n, "out_lengths")?;
        f.sequence_spans(idx, starts, lengths)?;
        Ok(())
    })
}
