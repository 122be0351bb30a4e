//! The batch gather for training loops: `hostfirst_gather_*`, `hostfirst_random_offsets`.

use super::args::{in_ref, out_bytes, out_ptr};
use super::buffer::hostfirst_buffer;
use super::device::hostfirst_device;
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::dtype::DType;
use crate::error::{Error, Status};
use crate::place::gather::{random_offsets, Gather};
use std::ffi::c_void;
use std::sync::Mutex;

/// A reusable batch gather: a `[batch, window]` destination on one device (plus page-locked staging for
/// CUDA). Created by `hostfirst_gather_new`, released by `hostfirst_gather_free`. Calls on one handle are
/// serialised internally.
pub struct hostfirst_gather {
    _private: [u8; 0],
}

pub(crate) struct GatherC {
    gather: Gather,
    /// The borrowed `hostfirst_buffer` handle for the destination, issued on first request (0: none yet).
    buffer_handle: usize,
}

impl Handle for hostfirst_gather {
    type Target = Mutex<GatherC>;
    const NAME: &'static str = "hostfirst_gather";
}

/// Creates a reusable gather of `[batch, window]` elements of `dtype` (a `HOSTFIRST_DTYPE_*` of whole bytes)
/// on `device`: allocates, after a fit check, the destination (and for CUDA one page-locked staging buffer
/// of the same size and a stream). Later `hostfirst_gather_run` calls allocate nothing. Writes a new handle
/// to `*out` (free with `hostfirst_gather_free`). Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (batch or window
/// 0, unknown or sub-byte dtype, bad device value), `NO_SUCH_DEVICE`, `UNAVAILABLE`, `OUT_OF_MEMORY`,
/// `DEVICE_ERROR`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_new(
    device: hostfirst_device,
    dtype: u32,
    batch: u64,
    window: u64,
    out: *mut *mut hostfirst_gather,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_new", {
        let out = out_ptr(out, "out")?;
        let d = device.to_device("device")?;
        let dt = DType::from_u32(dtype).ok_or_else(|| {
            Error::new(Status::InvalidArgument, format!("dtype {dtype} is not a HOSTFIRST_DTYPE_* value"))
        })?;
        let g = Gather::new(d, dt, batch, window)?;
        *out = handle::insert_new::<hostfirst_gather>(Mutex::new(GatherC { gather: g, buffer_handle: 0 }));
        Ok(())
    })
}

/// Assembles one batch: row `i` of the destination = elements `offsets[i] .. offsets[i] + window` of the
/// 1-D tensor `source`, for `i < n` (`n` must equal the batch). The windows are read into the destination
/// (cpu and cuda_host) or into the staging buffer followed by one asynchronous copy (cuda). Returns once the
/// batch is in place.
///
/// How windows are read: if `hostfirst_view_prefault` populated the source's pages (on this view or another
/// view of the same file) or the source is over a memory buffer, each window is a memcpy from the mapping,
/// the fastest way (see `hostfirst_view_info.data` for the truncation hazard of mapped reads). Otherwise each
/// window is one positioned read (`pread`), which avoids a page fault per window and turns a file truncated
/// after opening into `TRUNCATED` instead of SIGBUS. For a training loop over a tensor that fits in memory,
/// call `hostfirst_view_prefault` once first (BENCHMARKS.md section 3 has both).
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (source not 1-D, dtype differs, `n`
/// differs from the batch), `OUT_OF_RANGE` naming the first offset (index and value) whose window runs past
/// the end: the destination is unchanged. `TRUNCATED` or `IO` while reading, `DEVICE_ERROR` while copying:
/// the destination then holds a partly assembled batch. Calls on one gather are serialised.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let v = handle::get::<hostfirst_view>(source, "source")?;
        let offsets: &[u64] = if n == 0 {
            &[]
        } else {
            in_ref(offsets, "offsets")?;
            // SAFETY: non-NULL with the caller's promise of `n` readable values.
            unsafe { std::slice::from_raw_parts(offsets, n) }
        };
        let mut g = g.lock().unwrap_or_else(|e| e.into_inner());
        g.gather.run(&v, offsets)
    })
}

/// Writes the gather's destination as a **borrowed** `hostfirst_buffer` handle to `*out` (the same handle
/// on every call): usable with every buffer function while the gather lives; do not free it —
/// `hostfirst_gather_free` does, after which it is stale (`INVALID_HANDLE`). Its contents change with each
/// `hostfirst_gather_run`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_buffer(gather: *mut hostfirst_gather, out: *mut *mut hostfirst_buffer) -> Status {
    hostfirst_boundary!("hostfirst_gather_buffer", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let out = out_ptr(out, "out")?;
        let mut g = g.lock().unwrap_or_else(|e| e.into_inner());
        let live =
            g.buffer_handle != 0 && handle::get::<hostfirst_buffer>(g.buffer_handle as *const _, "buffer").is_ok();
        if !live {
            g.buffer_handle = handle::insert::<hostfirst_buffer>(g.gather.buffer().clone()) as usize;
        }
        *out = g.buffer_handle as *mut hostfirst_buffer;
        Ok(())
    })
}

/// Copies the current batch (`batch * window * element size` bytes, C order) into `dst`, which holds `cap`
/// bytes. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `BUFFER_TOO_SMALL`, `DEVICE_ERROR`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_copy_to_host(
    gather: *const hostfirst_gather,
    dst: *mut c_void,
    cap: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_copy_to_host", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let dst = out_bytes(dst as *mut u8, cap, "dst")?;
        let g = g.lock().unwrap_or_else(|e| e.into_inner());
        g.gather.copy_to_host(dst)
    })
}

/// Writes the size of one batch in bytes to `*out_nbytes`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_nbytes(gather: *const hostfirst_gather, out_nbytes: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_gather_nbytes", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        *out_ptr(out_nbytes, "out_nbytes")? = g.lock().unwrap_or_else(|e| e.into_inner()).gather.nbytes();
        Ok(())
    })
}

/// Frees a gather, its destination, staging and stream, and makes its borrowed buffer handle stale. NULL is
/// a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Memory is released once no call in flight uses
/// it. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_free(gather: *mut hostfirst_gather) -> Status {
    hostfirst_boundary!("hostfirst_gather_free", {
        if let Some(g) = handle::remove::<hostfirst_gather>(gather, "gather")? {
            let h = g.lock().unwrap_or_else(|e| e.into_inner()).buffer_handle;
            if h != 0 {
                let _ = handle::remove::<hostfirst_buffer>(h as *mut _, "buffer");
            }
        }
        Ok(())
    })
}

/// Draws `n` start offsets uniform in `[0, len - window)` into `out` (nanoGPT's `get_batch`: each window
/// and its one-shifted target fit), from the splitmix64 stream whose state is `*state` (seed it with any
/// value; it advances, so successive calls give successive batches, reproducibly). Errors:
/// `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`window >= len`). Thread-safe (each caller owns its state).
#[no_mangle]
pub extern "C" fn hostfirst_random_offsets(state: *mut u64, len: u64, window: u64, out: *mut u64, n: usize) -> Status {
    hostfirst_boundary!("hostfirst_random_offsets", {
        let st = out_ptr(state, "state")?;
        let out: &mut [u64] = if n == 0 {
            &mut []
        } else {
            out_ptr(out, "out")?;
            // SAFETY: non-NULL with the caller's promise of room for `n` values.
            unsafe { std::slice::from_raw_parts_mut(out, n) }
        };
        random_offsets(st, len, window, out)
    })
}
