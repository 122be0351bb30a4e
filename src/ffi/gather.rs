//! The batch gather for training loops: `hostfirst_gather_*`, `hostfirst_random_offsets`.

use super::args::{c_dtype, c_page_cache, enum_arg, in_ref, opt_out, out_bytes, out_ptr, page_cache_arg};
use super::buffer::hostfirst_buffer;
use super::device::hostfirst_device;
use super::file::hostfirst_file;
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::place::gather::{random_offsets, BatchCheck, Gather};
use crate::place::gather_stream::GatherStream;
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
/// assembled in a private scratch or staging buffer first and copied into it on success). A batch handed out — a `hostfirst_buffer` handle from `hostfirst_gather_run` or
/// `hostfirst_gather_batch`, or a DLPack export of one — is never rewritten while any such reference to it
/// remains (the handle not freed, the export's deleter not run), on cpu or on CUDA; on CUDA the rewrite also
/// waits, on the device, for the events recorded on the consumers' streams when they released it (see
/// `hostfirst_buffer_to_dlpack` and `hostfirst_buffer_record_stream`). When every batch is held, the ring
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
    dtype: c_dtype,
    batch: u64,
    window: u64,
    out: *mut *mut hostfirst_gather,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_new", {
        let out = out_ptr(out, "out")?;
        let d = device.to_device("device")?;
        let dt = enum_arg(dtype, DType::from_u32, "dtype", "hostfirst_dtype")?;
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

pub(crate) fn offsets_arg<'a>(offsets: *const u64, n: usize) -> Result<&'a [u64]> {
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
/// for `i < n`, into a batch of the ring no one holds (see `hostfirst_gather_new`),
/// which becomes the gather's current batch. The windows are read into the batch (cpu and cuda_host) or into
/// the staging buffer followed by one asynchronous copy (cuda). Returns once the batch is in place.
///
/// How windows are read: if `hostfirst_view_prefault` populated the source's pages (on this view or another
/// view of the same file) or the source is over a memory buffer, each window is a memcpy from the mapping,
/// the fastest way — but on Linux a file truncated under the mapping raises SIGBUS (see
/// `hostfirst_view_info.data`; Windows refuses to shrink a mapped file).
/// Otherwise each window is one positioned read (`pread`), which avoids a page fault per window and turns a
/// file truncated after opening into `TRUNCATED` instead of SIGBUS. **For a training loop over a tensor that
/// fits in memory, the fast and truncation-proof way** is to put it to cpu once (an eager copy,
/// `hostfirst_put`) and gather from that buffer with `hostfirst_gather_run_from_buffer`: memcpy speed, and
/// nothing done to the file can fault or fail it. BENCHMARKS.md section 3 has the speeds.
///
/// `n` is the length of the caller's `offsets` array and must equal the gather's batch size: the batch shape
/// is fixed by `hostfirst_gather_new` (one shape for a jitted step); `n` is there so that the library never
/// reads past the caller's array (a mismatch is `INVALID_ARGUMENT`, naming both numbers, not a read of
/// memory that is not the caller's).
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (source not 1-D, dtype differs, `n`
/// differs from the batch), `OUT_OF_RANGE` (a window longer than the tensor, or the first offset — index and
/// value — whose window runs past the end), `BUSY` (every batch held at the ring's bound), `OUT_OF_MEMORY`
/// (growing the ring): with these no batch changed. `TRUNCATED` or `IO` while reading, `DEVICE_ERROR` while
/// copying: the current batch stays the previous one, byte for byte (one exception: a `DEVICE_ERROR` in the
/// copy into the current batch itself, when it was the only batch free at the ring's bound, leaves it
/// undefined). Calls on one gather are serialised.
///
/// When `out_batch` is not NULL it receives a **new** `hostfirst_buffer` handle for the batch just filled. The
/// handle is the caller's (free it with `hostfirst_buffer_free`); while it lives — or any DLPack export made
/// from it — that batch is never rewritten, so the data a consumer took cannot change under it. Free it when
/// done, or the ring grows to its bound and then reports `BUSY`. On failure `*out_batch` is unchanged.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run", { gather_view(gather, source, offsets, n, out_batch) })
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

/// Assembles one batch of whole sequences of a Megatron dataset (`dataset`, opened with `hostfirst_file_open`):
/// row `i` = the tokens of sequence `indices[i]`, for `i < n` (`n`, the length of `indices`, must equal the
/// batch size, as for `hostfirst_gather_run`), **padded**: the
/// first `min(length, window)` tokens, then `pad` in every element up to the window (`pad`'s low bytes,
/// little-endian, as one element: the pad token id). A sequence longer than the window is cut at it.
/// When `out_lengths` is not NULL, `out_lengths[i]` receives the tokens row `i` holds (`min(length, window)`),
/// what an attention mask or a loss mask is built from.
///
/// Padded rather than packed because the batch is then the gather's fixed `[batch, window]` buffer: it shares
/// the ring (never rewritten while held), the one transfer to `cuda:N`, DLPack export, and a jitted step sees
/// one shape (JAX recompiles for every new shape a packed batch would have). The gather's dtype must be the
/// dataset's token dtype. Other rules and ownership of `*out_batch` as `hostfirst_gather_run`. Errors: those
/// of `hostfirst_gather_run` (`NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`, `BUSY`, `OUT_OF_MEMORY`,
/// `TRUNCATED`, `IO`, `DEVICE_ERROR`), `UNSUPPORTED` (not a Megatron dataset) and `OUT_OF_RANGE` (an index at
/// or past the sequence count).
/// `*out_lengths` and `*out_batch` are written only on success. Thread-safe; calls on one gather are
/// serialised.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run_sequences(
    gather: *mut hostfirst_gather,
    dataset: *const hostfirst_file,
    indices: *const u64,
    n: usize,
    pad: u64,
    out_lengths: *mut u64,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run_sequences", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let f = handle::get::<super::file::hostfirst_file>(dataset, "dataset")?;
        let idx = offsets_arg(indices, n)?;
        let (mut starts, mut lens) = (vec![0u64; n], vec![0u64; n]);
        f.sequence_spans(idx, &mut starts, &mut lens)?;
        let tokens = f.view("tokens")?;
        let mut g = g.lock().unwrap_or_else(|e| e.into_inner());
        let window = g.gather.window();
        let batch = g.gather.run_spans(&tokens, &starts, &lens, pad)?;
        drop(g);
        if let Some(out) = (!out_lengths.is_null()).then(|| super::args::out_slice(out_lengths, n, "out_lengths")) {
            for (o, l) in out?.iter_mut().zip(&lens) {
                *o = (*l).min(window);
            }
        }
        hand_out(batch, out_batch);
        Ok(())
    })
}

/// Gathers from a 1-D host buffer (`cpu` or `cuda_host`) instead of a view: rows as for
/// `hostfirst_gather_run`, each window a memcpy from the buffer. The truncation-proof fast path: put the token
/// tensor to cpu once with an eager copy (`hostfirst_put`), then gather from that buffer at memory speed;
/// nothing done to the file afterwards can fault or fail the gather (a copy-on-write buffer,
/// `opts->copy_on_write`, is as fast but keeps its file's SIGBUS hazard for pages not written). The source
/// buffer is only read. Writes a new handle for the filled batch to `*out_batch` (NULL: not wanted; see
/// `hostfirst_gather_run`). A separate function, not a flag of `hostfirst_gather_run`, because the source is
/// another handle type and this path has other guarantees (memory speed, no file behind it). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`,
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
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
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

/// Sets what the gather's later runs from a file leave in the page cache (1.1): `HOSTFIRST_PAGE_CACHE_KEEP`
/// (0, the default of a new gather), `HOSTFIRST_PAGE_CACHE_DROP` (the pages of the file that a run's windows
/// brought into the cache are dropped when the run ends, failed or not; pages cached before stay; only the
/// windows' pages are sampled, with `mincore`, so the cost follows the batch, not the file) or
/// `HOSTFIRST_PAGE_CACHE_BYPASS` (the windows of a contiguous view are read with direct I/O, `O_DIRECT` into
/// aligned staging, all at once through the transfer engine, so nothing enters the cache; where the file
/// system refuses `O_DIRECT`, and for a strided view, read as DROP). Applies to `hostfirst_gather_run`, `hostfirst_gather_run_sequences` and the
/// streams started on the gather afterwards; a source populated with `hostfirst_view_prefault` is read
/// through its mapping and a buffer source from memory, under no policy. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (`page_cache` not a `hostfirst_page_cache`; nothing changed).
/// Thread-safe. New in 1.1.
#[no_mangle]
pub extern "C" fn hostfirst_gather_set_page_cache(gather: *mut hostfirst_gather, page_cache: c_page_cache) -> Status {
    hostfirst_boundary!("hostfirst_gather_set_page_cache", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let policy = page_cache_arg(page_cache, "page_cache")?;
        g.lock().unwrap_or_else(|e| e.into_inner()).gather.set_page_cache(policy);
        Ok(())
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

/// Copies the current batch (`batch * window * element size` bytes, C order) into `dst`, which holds
/// `capacity` bytes. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `BUFFER_TOO_SMALL`, `DEVICE_ERROR`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_copy_to_host(
    gather: *const hostfirst_gather,
    dst: *mut c_void,
    capacity: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_copy_to_host", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let dst = out_bytes(dst as *mut u8, capacity, "dst")?;
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
/// DLPack exports) stay valid and are freed with their last reference. NULL is a no-op. Memory is released
/// once no call in flight uses it. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_free(gather: *mut hostfirst_gather) -> Status {
    hostfirst_boundary!("hostfirst_gather_free", { handle::remove(gather, "gather").map(|_| ()) })
}

/// A prefetching stream of batches over one gather: a background worker fills batches ahead of the consumer.
/// Created by `hostfirst_gather_stream_start` (or `_start_from_buffer`), read with
/// `hostfirst_gather_stream_next`, released with `hostfirst_gather_stream_free`.
pub struct hostfirst_gather_stream {
    _private: [u8; 0],
}

impl Handle for hostfirst_gather_stream {
    type Target = Mutex<GatherStream>;
    const NAME: &'static str = "hostfirst_gather_stream";
}

/// The deepest prefetch `hostfirst_gather_stream_start` accepts.
pub const HOSTFIRST_GATHER_STREAM_MAX_DEPTH: usize = 64;
const _: () = assert!(HOSTFIRST_GATHER_STREAM_MAX_DEPTH == crate::place::gather_stream::MAX_DEPTH);

/// The common part of the two starts: checks every batch with `check`, raises the ring bound to `depth + 3`
/// if it is lower, and starts the worker with `run`. For an open stream (`n_batches` None, the experimental
/// `hostfirst_gather_stream_open`) it checks the source now and each pushed batch later against `extent` (the
/// source's name and length).
fn stream_start(
    gather: *mut hostfirst_gather,
    offsets: *const u64,
    n_batches: Option<usize>,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
    (check, extent): (impl Fn(&BatchCheck, &[u64]) -> Result<()>, (String, u64)),
    run: impl Fn(&mut Gather, &[u64]) -> Result<crate::place::gather::Batch> + Send + 'static,
) -> Result<()> {
    let g = handle::get::<hostfirst_gather>(gather, "gather")?;
    let out = out_ptr(out, "out")?;
    if depth == 0 || depth > HOSTFIRST_GATHER_STREAM_MAX_DEPTH {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("gather stream: depth {depth}; expected 1 to {HOSTFIRST_GATHER_STREAM_MAX_DEPTH}"),
        ));
    }
    let batch = {
        let gc = g.lock().unwrap_or_else(|e| e.into_inner());
        gc.gather.batch() as usize
    };
    let Some(n_batches) = n_batches else {
        let bc = {
            let mut gc = g.lock().unwrap_or_else(|e| e.into_inner());
            let bc = gc.gather.batch_check();
            // The source now (1-D, dtype, window within it), with the one batch that fits any source that fits.
            check(&bc, &vec![0; batch])?;
            if gc.gather.ring_bound() < depth + 3 {
                gc.gather.set_ring_bound(depth + 3)?;
            }
            bc
        };
        // Pushed batches are checked against the source's length taken now (a source's shape never changes),
        // without the gather's or the source's lock, both of which the worker holds while it fills a batch.
        let (name, len) = extent;
        let stream = GatherStream::open(
            batch,
            depth,
            Box::new(move |offs: &[u64]| run(&mut g.lock().unwrap_or_else(|e| e.into_inner()).gather, offs)),
            Box::new(move |offs: &[u64]| bc.check_offsets(&name, len, offs)),
        )?;
        *out = handle::insert_new::<hostfirst_gather_stream>(Mutex::new(stream));
        return Ok(());
    };
    let total = n_batches.checked_mul(batch).ok_or_else(|| {
        Error::new(Status::InvalidArgument, format!("gather stream: {n_batches} batches of {batch} offsets overflow"))
    })?;
    let offsets = offsets_arg(offsets, total)?.to_vec();
    {
        let mut gc = g.lock().unwrap_or_else(|e| e.into_inner());
        let bc = gc.gather.batch_check();
        for (k, offs) in offsets.chunks_exact(batch.max(1)).enumerate() {
            check(&bc, offs).map_err(|e| Error::new(e.status(), format!("batch {k}: {}", e.message())))?;
        }
        if gc.gather.ring_bound() < depth + 3 {
            gc.gather.set_ring_bound(depth + 3)?;
        }
    }
    let stream = GatherStream::start(
        batch,
        offsets,
        depth,
        Box::new(move |offs: &[u64]| run(&mut g.lock().unwrap_or_else(|e| e.into_inner()).gather, offs)),
    )?;
    *out = handle::insert_new::<hostfirst_gather_stream>(Mutex::new(stream));
    Ok(())
}

/// Starts prefetching `n_batches` batches of `gather` from the 1-D tensor `source`: batch `k` is what
/// `hostfirst_gather_run` would make from the `batch` offsets `offsets[k * batch ..]` (`offsets` holds
/// `n_batches * batch` values, copied: the array may be freed on return; NULL is allowed when `n_batches` is
/// 0, which makes a stream that ends at once). A background thread fills up to `depth` (1 to
/// `HOSTFIRST_GATHER_STREAM_MAX_DEPTH`) batches ahead of the consumer while it computes — reads through the
/// transfer engine and, for `cuda:N`, the host-to-device copy through the gather's page-locked staging on its
/// stream — and `hostfirst_gather_stream_next` hands them out in order. Writes a new handle to `*out` (free
/// with `hostfirst_gather_stream_free`). A stream fed batches as you go is experimental: it starts with
/// `hostfirst_gather_stream_open` (HOSTFIRST_EXPERIMENTAL), never here.
///
/// **Ownership.** Every batch is a batch of the gather's ring, under its rules (`hostfirst_gather_new`): a
/// batch waiting in the stream or handed out by `next` (until its handle is freed and its exports deleted) is
/// never refilled. So that `depth` batches can wait while the consumer holds one and the next is filled, the
/// gather's ring bound is raised to `depth + 3` if it is lower (never lowered). Each run becomes the gather's
/// current batch, as with `hostfirst_gather_run`; other calls on the gather stay allowed and are serialised
/// with the worker's runs. The stream keeps the gather and `source` alive until it is freed, even if their
/// handles are freed first.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (depth out of range, size overflow,
/// `n_batches` `SIZE_MAX`, source not 1-D or of another dtype), `OUT_OF_RANGE` (the first window past the end,
/// named by batch and offset index: every batch is checked before the thread starts, so nothing ran),
/// `UNAVAILABLE` (the thread could not be started). Errors of the
/// worker (a read or copy failing: `TRUNCATED`, `IO`, `DEVICE_ERROR`, `OUT_OF_MEMORY` growing the ring, `BUSY`
/// when the consumer holds every batch of the ring and none is waiting) end the stream and are returned, with
/// their message, by the `next` that would have returned that batch. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_start(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n_batches: usize,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_start", {
        start_from_view(gather, source, offsets, Some(closed_count(n_batches)?), depth, out)
    })
}

/// `n_batches` of a stable start: `SIZE_MAX` was 0.2's experimental open-stream value, which only
/// `hostfirst_gather_stream_open` (experimental, opted into) starts now; refused with a message saying so.
fn closed_count(n_batches: usize) -> Result<usize> {
    if n_batches == usize::MAX {
        return Err(Error::new(
            Status::InvalidArgument,
            "gather stream: n_batches SIZE_MAX asks for an open stream, which this stable start does not make: \
             start it with the experimental hostfirst_gather_stream_open (#define HOSTFIRST_EXPERIMENTAL)"
                .to_string(),
        ));
    }
    Ok(n_batches)
}

/// The start of a stream from a view: `n_batches` None makes an open stream.
fn start_from_view(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n_batches: Option<usize>,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
) -> Result<()> {
    let v = handle::get::<hostfirst_view>(source, "source")?;
    let v2 = std::sync::Arc::clone(&v);
    let extent = (v.name().to_string(), v.shape().first().copied().unwrap_or(0));
    stream_start(
        gather,
        offsets,
        n_batches,
        depth,
        out,
        (move |c: &BatchCheck, o: &[u64]| c.check_view(&v, o), extent),
        move |g, o| g.run(&v2, o),
    )
}

/// The start of a stream from a host buffer: `n_batches` None makes an open stream.
fn start_from_buffer(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_buffer,
    offsets: *const u64,
    n_batches: Option<usize>,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
) -> Result<()> {
    let b = handle::get::<hostfirst_buffer>(source, "source")?;
    let b2 = std::sync::Arc::clone(&b);
    let extent = {
        let b = b.lock().unwrap_or_else(|e| e.into_inner());
        (b.name().to_string(), b.shape().first().copied().unwrap_or(0))
    };
    stream_start(
        gather,
        offsets,
        n_batches,
        depth,
        out,
        (|c: &BatchCheck, o: &[u64]| c.check_buffer(&b.lock().unwrap_or_else(|e| e.into_inner()), o), extent),
        move |g, o| g.run_from_buffer(&b2.lock().unwrap_or_else(|e| e.into_inner()), o),
    )
}

/// `hostfirst_gather_stream_start` from a 1-D host buffer (`cpu` or `cuda_host`) instead of a view: each
/// window a memcpy, as `hostfirst_gather_run_from_buffer`. The stream keeps the buffer alive (its handle may
/// be freed); the buffer must not be written while the stream runs. Errors: `UNSUPPORTED` for a CUDA buffer;
/// the others as for `hostfirst_gather_stream_start` (`NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`,
/// `OUT_OF_RANGE`, `UNAVAILABLE`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_start_from_buffer(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_buffer,
    offsets: *const u64,
    n_batches: usize,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_start_from_buffer", {
        start_from_buffer(gather, source, offsets, Some(closed_count(n_batches)?), depth, out)
    })
}

/// Hands out the next batch of the stream, in order, waiting (without spinning) until the worker has filled
/// it: writes a **new** `hostfirst_buffer` handle to `*out_batch` (the caller's: free it with
/// `hostfirst_buffer_free` when the step is done with it — a held batch is never refilled, and holding many
/// stalls the worker, see `hostfirst_gather_stream_start`). After the last batch, returns OK with `*out_batch`
/// set to NULL. On CUDA the batch's copy has completed when it is handed out. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`; the error of a run that failed in the worker (status and message naming the batch), in
/// that batch's place and at every later call; `UNAVAILABLE` in a forked child (the worker is the parent's).
/// On error `*out_batch` is unchanged. Calls on one stream are serialised. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_next(
    stream: *mut hostfirst_gather_stream,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_next", {
        let s = handle::get::<hostfirst_gather_stream>(stream, "stream")?;
        let out = out_ptr(out_batch, "out_batch")?;
        let next = s.lock().unwrap_or_else(|e| e.into_inner()).next_batch()?;
        *out = match next {
            Some(b) => handle::insert::<hostfirst_buffer>(b),
            None => std::ptr::null_mut(),
        };
        Ok(())
    })
}

/// Frees a stream, cancelling it if batches remain: the worker finishes the run in progress (never leaving a
/// batch half-filled), starts no other, and is joined before this returns; batches waiting in the stream go
/// back to the ring. Batches already handed out stay valid (free their handles as usual). NULL is a no-op.
/// Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_free(stream: *mut hostfirst_gather_stream) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_free", { handle::remove(stream, "stream").map(|_| ()) })
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

// Open streams, fed incrementally: hostfirst_gather_stream_push and hostfirst_gather_stream_end_input.

/// Starts an open stream of `gather` from the 1-D tensor `source`: as `hostfirst_gather_stream_start`, but
/// with no batch; its batches come from `hostfirst_gather_stream_push` until
/// `hostfirst_gather_stream_end_input`, its thread waiting for input instead of ending. The source is checked
/// now (1-D, dtype, window within it). Writes a new handle to `*out` (free with
/// `hostfirst_gather_stream_free`). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (depth out of
/// range, source not 1-D or of another dtype), `OUT_OF_RANGE` (one window does not fit the source),
/// `UNAVAILABLE` (the thread could not be started). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_open(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_open", {
        start_from_view(gather, source, std::ptr::null(), None, depth, out)
    })
}

/// `hostfirst_gather_stream_open` from a 1-D host buffer (`cpu` or `cuda_host`), as
/// `hostfirst_gather_stream_start_from_buffer`. Errors: `UNSUPPORTED` for a CUDA buffer; the others as for
/// `hostfirst_gather_stream_open` (`NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`, `OUT_OF_RANGE`,
/// `UNAVAILABLE`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_open_from_buffer(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_buffer,
    depth: usize,
    out: *mut *mut hostfirst_gather_stream,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_open_from_buffer", {
        start_from_buffer(gather, source, std::ptr::null(), None, depth, out)
    })
}

/// Gives an open stream (started with `hostfirst_gather_stream_open`) `n_batches` more batches:
/// `offsets` holds `n_batches * batch` values (copied: the array may be freed on return; NULL is allowed
/// with `n_batches` 0), batch `j` of the call becoming the stream's batch `pushed_so_far + j`.
///
/// Each batch is checked as `hostfirst_gather_stream_start` checks its batches, before any is taken: the
/// first window past the end gives `OUT_OF_RANGE` naming the batch by its number in the stream and the offset
/// index, and nothing of this call is taken (the stream goes on with what it had). The stream's thread fills
/// pushed batches in order, up to `depth` ahead of the consumer, and waits for more input when it has filled
/// every batch pushed (it does not end). To keep it from ever pausing, keep at least `depth` batches pushed
/// beyond the ones `hostfirst_gather_stream_next` has handed out; `next` on an open stream whose pushed
/// batches have all been handed out returns `NOT_READY` at once (it cannot wait for a push that only its own
/// caller could make). A read failing in the thread ends the stream as for any stream: its error comes at the
/// `next` that would have returned that batch, and pushes after it are accepted and never filled.
///
/// The check needs neither the gather's lock nor the source's (the source was checked at the start, and its
/// length is kept), so a push never waits for the batch the thread is filling. Errors: `NULL_ARGUMENT` (stream; offsets with n_batches > 0),
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (a stream started with all its offsets, a stream whose input was
/// ended, size overflow), `OUT_OF_RANGE`, `UNAVAILABLE` (a forked child: the thread is the parent's).
/// Thread-safe; calls on one stream are serialised (a push waits for a `next` in progress on another thread).
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_push(
    stream: *mut hostfirst_gather_stream,
    offsets: *const u64,
    n_batches: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_push", {
        let s = handle::get::<hostfirst_gather_stream>(stream, "stream")?;
        let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
        let batch = s.batch();
        let total = n_batches.checked_mul(batch).ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("gather stream: {n_batches} batches of {batch} offsets overflow"),
            )
        })?;
        let offs = offsets_arg(offsets, total)?;
        s.push(offs)
    })
}

/// Says that no more batches come to an open stream: it ends after the batches pushed so far (`next` returns
/// OK with NULL after the last). Calling it again, or on a stream started with all its offsets, changes
/// nothing. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_end_input(stream: *mut hostfirst_gather_stream) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_end_input", {
        let s = handle::get::<hostfirst_gather_stream>(stream, "stream")?;
        s.lock().unwrap_or_else(|e| e.into_inner()).end_input();
        Ok(())
    })
}
