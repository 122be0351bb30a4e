//! The batch gather for training loops: `hostfirst_gather_*`, `hostfirst_random_offsets`.

use super::args::{in_ref, opt_out, out_bytes, out_ptr};
use super::buffer::hostfirst_buffer;
use super::device::hostfirst_device;
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::place::gather::{random_offsets, Gather};
use std::ffi::c_void;
use std::sync::Mutex;

/// A reusable batch gather: a bounded ring of `[batch, window]` batches on one device (plus page-locked
/// staging and a stream for CUDA). Created by `hostfirst_gather_new`, released by `hostfirst_gather_free`.
/// Calls on one handle are serialised internally.
pub struct hostfirst_gather {
    _private: [u8; 0],
}

pub(crate) struct GatherC {
    gather: Gather,
}

impl Handle for hostfirst_gather {
    type Target = Mutex<GatherC>;
    const NAME: &'static str = "hostfirst_gather";
}

/// Creates a reusable gather of `[batch, window]` elements of `dtype` (a `HOSTFIRST_DTYPE_*` of whole bytes)
/// on `device`: allocates, after a fit check, the first batch (and for CUDA one page-locked staging buffer
/// of the same size and a stream). Writes a new handle to `*out` (free with `hostfirst_gather_free`).
///
/// **Batch ownership: the ring.** Each run fills a batch that no one else holds, other than the current
/// one, and makes it the gather's current batch only once every window is in place, so a run that fails
/// never changes the current batch (at the ring's bound with only the current batch free, the windows are
/// assembled in a private scratch or staging buffer first and copied into it on success). A batch handed out — a `hostfirst_buffer` handle from `hostfirst_gather_run_batch` or
/// `hostfirst_gather_batch`, or a DLPack export of one — is never rewritten while any such reference to it
/// remains (the handle not freed, the export's deleter not run), on cpu or on CUDA; on CUDA the rewrite also
/// waits, on the device, for the events recorded on the consumers' streams when they released it (see
/// `hostfirst_buffer_to_dlpack_ex` and `hostfirst_buffer_record_stream`). When every batch is held, the ring
/// grows by one batch (fit-checked: `OUT_OF_MEMORY` if it does not fit) up to its bound,
/// `HOSTFIRST_GATHER_DEFAULT_RING_BOUND` (4) unless set with `hostfirst_gather_set_ring_bound`; at the bound
/// a run returns `HOSTFIRST_STATUS_BUSY` and changes nothing. A consumer that holds at most the current batch while
/// the next is filled keeps two batches (the current one and the one being filled); each further batch it
/// holds at once adds one. Once the
/// ring has grown to what the consumer holds at once, runs allocate nothing. Batches are the only memory
/// hostfirst both reuses and hands out: its staging slabs, resident registrations and the gather's staging
/// buffer are internal and never reach a consumer; every other buffer it hands out is never rewritten.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (batch or window 0, unknown or sub-byte dtype, bad device
/// value), `NO_SUCH_DEVICE`, `UNAVAILABLE`, `OUT_OF_MEMORY`, `DEVICE_ERROR`. Thread-safe.
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
        *out = handle::insert_new::<hostfirst_gather>(Mutex::new(GatherC { gather: g }));
        Ok(())
    })
}

/// The ring bound of a new gather (`hostfirst_gather_new`).
pub const HOSTFIRST_GATHER_DEFAULT_RING_BOUND: usize = 4;
/// The largest bound `hostfirst_gather_set_ring_bound` accepts.
pub const HOSTFIRST_GATHER_MAX_RING_BOUND: usize = 1024;
const _: () = assert!(
    HOSTFIRST_GATHER_DEFAULT_RING_BOUND == crate::place::gather::DEFAULT_RING_BOUND
        && HOSTFIRST_GATHER_MAX_RING_BOUND == crate::place::gather::MAX_RING_BOUND
);

fn offsets_arg<'a>(offsets: *const u64, n: usize) -> Result<&'a [u64]> {
    if n == 0 {
        return Ok(&[]);
    }
    in_ref(offsets, "offsets")?;
    // SAFETY: non-NULL with the caller's promise of `n` readable values.
    Ok(unsafe { std::slice::from_raw_parts(offsets, n) })
}

/// Writes a new buffer handle for `batch` to `*out` when `out` is non-NULL.
fn hand_out(batch: crate::place::gather::Batch, out: *mut *mut hostfirst_buffer) {
    if let Some(o) = opt_out(out) {
        *o = handle::insert::<hostfirst_buffer>(batch);
    }
}

/// Assembles one batch: row `i` = elements `offsets[i] .. offsets[i] + window` of the 1-D tensor `source`,
/// for `i < n` (`n` must equal the batch), into a batch of the ring no one holds (see `hostfirst_gather_new`),
/// which becomes the gather's current batch. The windows are read into the batch (cpu and cuda_host) or into
/// the staging buffer followed by one asynchronous copy (cuda). Returns once the batch is in place.
///
/// How windows are read: if `hostfirst_view_prefault` populated the source's pages (on this view or another
/// view of the same file) or the source is over a memory buffer, each window is a memcpy from the mapping,
/// the fastest way — but a file truncated under the mapping raises SIGBUS (see `hostfirst_view_info.data`).
/// Otherwise each window is one positioned read (`pread`), which avoids a page fault per window and turns a
/// file truncated after opening into `TRUNCATED` instead of SIGBUS. **For a training loop over a tensor that
/// fits in memory, the fast and truncation-proof way** is to put it to cpu once (an eager copy,
/// `hostfirst_put`) and gather from that buffer with `hostfirst_gather_run_from_buffer`: memcpy speed, and
/// nothing done to the file can fault or fail it. BENCHMARKS.md section 3 has the speeds.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (source not 1-D, dtype differs, `n`
/// differs from the batch), `OUT_OF_RANGE` (a window longer than the tensor, or the first offset — index and
/// value — whose window runs past the end), `BUSY` (every batch held at the ring's bound), `OUT_OF_MEMORY`
/// (growing the ring): with these no batch changed. `TRUNCATED` or `IO` while reading, `DEVICE_ERROR` while
/// copying: the current batch stays the previous one, byte for byte (one exception: a `DEVICE_ERROR` in the
/// copy into the current batch itself, when it was the only batch free at the ring's bound, leaves it
/// undefined). Calls on one gather are serialised. `hostfirst_gather_run_batch` also hands out the batch.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run", { gather_view(gather, source, offsets, n, std::ptr::null_mut()) })
}

/// `hostfirst_gather_run`, and writes a **new** `hostfirst_buffer` handle for the batch it filled to
/// `*out_batch` (NULL: not wanted). The handle is the caller's (free it with `hostfirst_buffer_free`); while it
/// lives — or any DLPack export made from it — that batch is never rewritten, so the data a consumer took
/// cannot change under it. Free it when done, or the ring grows to its bound and then reports `BUSY`. On
/// failure `*out_batch` is unchanged. Thread-safe; calls on one gather are serialised.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run_batch(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run_batch", { gather_view(gather, source, offsets, n, out_batch) })
}

fn gather_view(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
    out: *mut *mut hostfirst_buffer,
) -> Result<()> {
    let g = handle::get::<hostfirst_gather>(gather, "gather")?;
    let v = handle::get::<hostfirst_view>(source, "source")?;
    let offsets = offsets_arg(offsets, n)?;
    let batch = g.lock().unwrap_or_else(|e| e.into_inner()).gather.run(&v, offsets)?;
    hand_out(batch, out);
    Ok(())
}

/// Gathers from a 1-D host buffer (`cpu` or `cuda_host`) instead of a view: rows as for
/// `hostfirst_gather_run`, each window a memcpy from the buffer. The truncation-proof fast path: put the token
/// tensor to cpu once with an eager copy (`hostfirst_put`), then gather from that buffer at memory speed;
/// nothing done to the file afterwards can fault or fail the gather (a copy-on-write buffer,
/// `opts->copy_on_write`, is as fast but keeps its file's SIGBUS hazard for pages not written). The source
/// buffer is only read. Writes a new handle for the filled batch to `*out_batch` (NULL: not wanted; see
/// `hostfirst_gather_run_batch`). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`,
/// `OUT_OF_RANGE`, `BUSY`, `OUT_OF_MEMORY` as for `hostfirst_gather_run`; `UNSUPPORTED` for a CUDA source
/// buffer; `DEVICE_ERROR` while copying to CUDA. Thread-safe; calls on one gather are serialised.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run_from_buffer(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_buffer,
    offsets: *const u64,
    n: usize,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run_from_buffer", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let src = handle::get::<hostfirst_buffer>(source, "source")?;
        let offsets = offsets_arg(offsets, n)?;
        let batch = {
            let src = src.lock().unwrap_or_else(|e| e.into_inner());
            let mut g = g.lock().unwrap_or_else(|e| e.into_inner());
            g.gather.run_from_buffer(&src, offsets)?
        };
        hand_out(batch, out_batch);
        Ok(())
    })
}

/// Writes a **new** `hostfirst_buffer` handle for the gather's current batch (the one the last successful run
/// filled; before the first run, the first batch, zero-filled — on CUDA by a memset on the gather's stream
/// completed before `hostfirst_gather_new` returns) to `*out`. The caller frees it with
/// `hostfirst_buffer_free`; while it lives that batch is not rewritten (see `hostfirst_gather_new`).
/// (This replaces 0.1's `hostfirst_gather_buffer`, which lent one borrowed handle whose contents changed
/// with every run.) Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_batch(gather: *const hostfirst_gather, out: *mut *mut hostfirst_buffer) -> Status {
    hostfirst_boundary!("hostfirst_gather_batch", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let out = out_ptr(out, "out")?;
        let batch = g.lock().unwrap_or_else(|e| e.into_inner()).gather.current();
        *out = handle::insert::<hostfirst_buffer>(batch);
        Ok(())
    })
}

/// Sets the most batches the gather's ring may hold (1 to `HOSTFIRST_GATHER_MAX_RING_BOUND`; a new gather
/// has `HOSTFIRST_GATHER_DEFAULT_RING_BOUND`). 1 gives one batch, rewritten by every run and `BUSY` while it
/// is held. Lowering the bound drops batches beyond it from the ring, idle ones first: idle ones are freed
/// now, held ones when their last reference is released; the current batch stays. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (bound out of range; nothing changed). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_set_ring_bound(gather: *mut hostfirst_gather, bound: usize) -> Status {
    hostfirst_boundary!("hostfirst_gather_set_ring_bound", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let r = g.lock().unwrap_or_else(|e| e.into_inner()).gather.set_ring_bound(bound);
        r
    })
}

/// Describes the gather's ring: its bound, the batches allocated now, and how many of them are held by
/// consumers (buffer handles not freed, DLPack exports not deleted). Each output may be NULL. Errors:
/// `NULL_ARGUMENT` (gather), `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_ring(
    gather: *const hostfirst_gather,
    out_bound: *mut usize,
    out_allocated: *mut usize,
    out_held: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_ring", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let g = g.lock().unwrap_or_else(|e| e.into_inner());
        let (bound, len, held) = (g.gather.ring_bound(), g.gather.ring_len(), g.gather.held());
        drop(g);
        for (p, v) in [(out_bound, bound), (out_allocated, len), (out_held, held)] {
            if let Some(o) = opt_out(p) {
                *o = v;
            }
        }
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
        let batch = g.lock().unwrap_or_else(|e| e.into_inner()).gather.current();
        let r = batch.lock().unwrap_or_else(|e| e.into_inner()).copy_to_host(dst);
        r
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

/// Frees a gather: its staging and stream, and the batches no one holds. Batches still held (buffer handles,
/// DLPack exports) stay valid and are freed with their last reference. NULL is a no-op; a freed or foreign
/// handle gives `INVALID_HANDLE`. Memory is released once no call in flight uses it. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_free(gather: *mut hostfirst_gather) -> Status {
    hostfirst_boundary!("hostfirst_gather_free", { handle::remove(gather, "gather").map(|_| ()) })
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
