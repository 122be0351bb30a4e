//! Tensor views: `hostfirst_view_*` (the DLPack export, `hostfirst_view_to_dlpack`, is in `dlpack.rs`).

use super::args::{opt_out, out_bytes, out_ptr, out_struct, out_struct_size, write_out_struct};
use super::handle::{self, Handle};
use crate::error::{Error, Status};
use crate::file::View;
use std::ffi::{c_char, c_void};

/// A read-only view of one tensor, or of a part of one: a row range (`hostfirst_view_slice_rows`) or a range
/// of any dimension (`hostfirst_view_narrow`, strided for inner dimensions).
///
/// Created by `hostfirst_file_view`, `hostfirst_file_view_at`, `hostfirst_view_slice_rows` or
/// `hostfirst_view_narrow`; released by
/// `hostfirst_view_free`. A view keeps its file's mapping and descriptor alive: freeing the file handle first
/// is safe. Immutable: every function taking a `const hostfirst_view*` is thread-safe.
pub struct hostfirst_view {
    _private: [u8; 0],
}

impl Handle for hostfirst_view {
    type Target = View;
    const NAME: &'static str = "hostfirst_view";
}

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
    /// The element type.
    pub dtype: super::args::c_dtype,
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
    /// **NULL when the file is read with owned reads** (see `hostfirst_file_read_engine`): by default a file
    /// on a network or user-space file system (NFS, Lustre, GPFS, CephFS, CIFS/SMB, 9p, FUSE, virtiofs), or
    /// any file under `HOSTFIRST_MAP=never`; and for a remote object (a file opened by URL: `s3://`, `gs://`,
    /// `az://`, `http(s)://`), which has no mapping: `hostfirst_view_copy` fetches its bytes on demand with ranged
    /// GETs into the caller's memory. Read such a view with `hostfirst_view_copy`.
    ///
    /// **SIGBUS hazard (Linux, POSIX):** if the file is truncated (by any process) while this pointer is in use,
    /// touching a page past the new end of file raises SIGBUS, which kills the process unless it handles that
    /// signal. hostfirst installs no signal handler. (Windows refuses to shrink the file while the view lives:
    /// see "Files that change while open" at the top.) Where files may change underneath you, read with
    /// `hostfirst_view_copy` / `hostfirst_view_read`, which use `pread` and return `HOSTFIRST_STATUS_TRUNCATED`
    /// instead. For a data loader's token tensor, put it to cpu once (an eager copy, `hostfirst_put`) and
    /// gather from that buffer (`hostfirst_gather_run_from_buffer`): as fast as the mapping, and no SIGBUS.
    pub data: *const c_void,
    /// Alignment of `data` in bytes: the largest power of two dividing its address, capped at 4096.
    pub alignment: u64,
    /// NULL when the view is one contiguous C-order block (every whole tensor, every row slice). For a strided
    /// view (`hostfirst_view_narrow` on an inner dimension): `rank` element strides, so element `(i0, i1, ...)`
    /// is at element offset `sum(ik * strides[k])` from `data`; `nbytes` is still the packed size, which copies
    /// (`hostfirst_view_copy`) and puts produce. Valid until the view is freed.
    pub strides: *const u64,
}

out_struct!(hostfirst_view_info, strides);

/// Releases a view. NULL is a no-op returning OK. Pointers from `hostfirst_view_describe` become invalid.
/// Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Thread-safe.
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
/// `struct_size` is smaller than the oldest supported size (see CONVENTIONS). On failure `*out` is unchanged.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_describe(view: *const hostfirst_view, out: *mut hostfirst_view_info) -> Status {
    hostfirst_boundary!("hostfirst_view_describe", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let size = out_struct_size(out, "out")?;
        let data = if v.maps() { v.mapped().as_ptr() } else { std::ptr::null() };
        write_out_struct(
            out,
            size,
            hostfirst_view_info {
                struct_size: 0,
                name: v.name_ptr(),
                dtype: v.dtype() as u32,
                rank: v.shape().len() as u32,
                shape: if v.shape().is_empty() { std::ptr::null() } else { v.shape().as_ptr() },
                nbytes: v.nbytes(),
                file_offset: v.file_offset(),
                data_offset: v.data_offset(),
                data: data as *const c_void,
                alignment: crate::file::alignment_of(data as usize),
                strides: v.strides_ptr(),
            },
        );
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

/// Creates a zero-copy view of elements `[start, start + len)` along dimension `dim` of `view` (other
/// dimensions kept) and writes it to `*out_view`.
///
/// Narrowing composes: offsets are relative to `view`, which may itself be narrowed; `dim` 0 is
/// `hostfirst_view_slice_rows`. A narrow of an inner dimension is strided (`hostfirst_view_info.strides`
/// non-NULL): nothing is read or copied now, and copies (`hostfirst_view_copy`, `hostfirst_view_read`), puts
/// and loads produce its packed C-order bytes, reading only the runs it covers (neighbouring runs are
/// merged into one `pread` when that costs at most 1.25 times the pages they need). DLPack export gives the
/// strides. The new view is independent of `view` (free both). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`;
/// `OUT_OF_RANGE` when `dim` is not below the view's rank or `start + len > shape[dim]`; `MISALIGNED_SLICE`
/// when a run of a sub-byte dtype (F4, F6) would start or end inside a byte. On failure `*out_view` is
/// unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_narrow(
    view: *const hostfirst_view,
    dim: u32,
    start: u64,
    len: u64,
    out_view: *mut *mut hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_view_narrow", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let out = out_ptr(out_view, "out_view")?;
        let s = v.narrow(dim as usize, start, len)?;
        *out = handle::insert_new::<hostfirst_view>(s);
        Ok(())
    })
}

/// Copies the view's bytes (packed, C order) into the caller's buffer `(dst, capacity)`.
///
/// `*out_nbytes` (if not NULL) always receives the view's size. Files are read with `pread` on the file
/// descriptor (`ReadFile` at an offset on Windows), not through the mapping, so a file truncated after opening
/// gives `HOSTFIRST_STATUS_TRUNCATED` (never SIGBUS); other read failures give `IO`. If `capacity < nbytes`, nothing is written and
/// `BUFFER_TOO_SMALL` is returned. `(NULL, 0)` is valid: a size query, or the copy of an empty tensor.
/// Errors: `BUFFER_TOO_SMALL`, `TRUNCATED`, `IO` (as above), `NULL_ARGUMENT` (`dst` NULL with a capacity),
/// `INVALID_HANDLE`. On an I/O failure the
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
        if let Some(n) = super::args::opt_out(out_nbytes) {
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

/// Maps every page of the view (of a strided view: every page from its first to its last byte) into the
/// process now (Linux `MADV_POPULATE_READ`; Windows `PrefetchVirtualMemory` and a read per page), reading from
/// storage what
/// is not in the page cache, so that later reads through the mapping, such as `hostfirst_gather_run`'s,
/// take no page faults. Call it once on a data loader's token tensor before the training loop: a one-time
/// cost (one pass over the tensor) that makes every later gather several times faster (BENCHMARKS.md):
/// after it, `hostfirst_gather_run` copies windows of this tensor (and of any view inside it) from the
/// mapping instead of reading each with `pread`.
///
/// Nothing is allocated: the pages belong to the page cache, which the kernel may reclaim again under memory
/// pressure. A view larger than available host memory less the fit check's margin gives `OUT_OF_MEMORY`
/// (message and `hostfirst_last_error_fit` as for a put) and reads nothing. When `populated` is not NULL it
/// receives, on success, 1 when the pages were mapped and 0 when the system offers only
/// read-ahead advice (Linux before 5.14, other POSIX systems) or the view is over a memory buffer (nothing to do).
///
/// The gathers that follow read through the mapping, so on Linux a file truncated afterwards kills them with
/// SIGBUS (see `hostfirst_view_info.data`; Windows refuses to shrink a mapped file). The truncation-proof way at the same speed: put the tensor to cpu (an
/// eager copy, `hostfirst_put`) and gather from that buffer with `hostfirst_gather_run_from_buffer`.
///
/// Errors: `NULL_ARGUMENT` (`view`), `INVALID_HANDLE`, `OUT_OF_MEMORY`, `TRUNCATED` (the file is now
/// shorter than when it was opened; never SIGBUS), `IO`. Thread-safe; may take seconds for a large tensor
/// that is not in the page cache.
#[no_mangle]
pub extern "C" fn hostfirst_view_prefault(view: *const hostfirst_view, populated: *mut i32) -> Status {
    hostfirst_boundary!("hostfirst_view_prefault", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let p = v.prefault()?;
        if let Some(out) = opt_out(populated) {
            *out = p as i32;
        }
        Ok(())
    })
}
