//! The data-loader primitive: B windows of T elements from a 1-D host tensor, assembled as a [B, T] batch on
//! a device in one transfer, into a bounded ring of batch buffers that is reused step after step.
//!
//! cpu / cuda_host: the windows are read straight into the batch. cuda:N: they are read into one page-locked
//! staging buffer, then one asynchronous host-to-device copy on the gather's own stream moves the batch, and
//! `run` returns once it has completed. Once the ring has as many batches as the consumer holds at once, a
//! step allocates nothing.
//!
//! **Batch ownership.** Each run fills a batch that nobody else holds, other than the current one, and
//! returns it; it becomes current only when complete, so a failed run leaves the current batch as it was
//! (a ring at its bound whose only free batch is the current one assembles the windows in a scratch buffer,
//! or for CUDA the staging buffer, and copies them in on success). A batch handed out
//! (the returned reference, a `hostfirst_buffer` handle, a DLPack export) is never rewritten while any
//! reference to it remains: the ring reuses a batch only when it holds the last reference. On CUDA a batch is
//! also not rewritten before its consumers' streams have passed the events recorded when they released it
//! (the copy stream waits for them on the device, see [`Buffer::record_stream`]); a batch whose release could
//! not be recorded is dropped from the ring for good (freed when its last holder lets go). When every batch is held,
//! the ring grows by one batch (fit-checked) up to its bound ([`DEFAULT_RING_BOUND`], set with
//! [`Gather::set_ring_bound`]); at the bound a run fails with `BUSY` and changes nothing.
//!
//! How a window is read depends on the source. A host buffer ([`Gather::run_from_buffer`], e.g. after a put
//! to cpu) is copied with memcpy: the fastest way, and immune to anything done to the file. A tensor whose
//! pages were mapped by [`View::prefault`] (or one over a memory buffer) is copied from the mapping,
//! as fast, but a file truncated under it raises SIGBUS. Otherwise each window is one positioned read
//! (`pread`): a window's first touch of an unpopulated mapping costs a page fault, which on the benchmark
//! machine made a window 1.5-4x slower than a `pread` of it (BENCHMARKS.md, section 3), and a file truncated
//! under the gather gives `TRUNCATED` instead of SIGBUS.

use super::buffer::{Buffer, Memory};
use crate::device::cuda::{Event, PinnedHostMemory, Stream};
use crate::device::fit;
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::engine::{self, Tuning};
use crate::error::{human_bytes, Error, Result, Status};
use crate::file::View;
use std::sync::{Arc, Mutex};

/// Batches a gather's ring may hold unless told otherwise: the one being filled, the one the consumer
/// computes on, and two more for consumers that queue work ahead (JAX's asynchronous dispatch, a prefetch).
pub const DEFAULT_RING_BOUND: usize = 4;
/// The largest ring bound accepted.
pub const MAX_RING_BOUND: usize = 1024;

/// A batch: shared with whoever it was handed to; the ring rewrites it only when it holds the last reference.
pub type Batch = Arc<Mutex<Buffer>>;

/// Where the windows come from.
enum Source<'a> {
    View(&'a View),
    Host { name: &'a str, dtype: DType, shape: &'a [u64], bytes: &'a [u8] },
}

impl Source<'_> {
    fn name(&self) -> &str {
        match self {
            Source::View(v) => v.name(),
            Source::Host { name, .. } => name,
        }
    }
    fn dtype(&self) -> DType {
        match self {
            Source::View(v) => v.dtype(),
            Source::Host { dtype, .. } => *dtype,
        }
    }
    fn shape(&self) -> &[u64] {
        match self {
            Source::View(v) => v.shape(),
            Source::Host { shape, .. } => shape,
        }
    }
}

/// What each row of a batch holds.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// Row `i` = `window` elements from `offsets[i]`.
    Windows(&'a [u64]),
    /// Row `i` = the first `min(lens[i], window)` elements from `starts[i]`, then `pad` elements (the low
    /// bytes of `pad`, little-endian) up to `window`.
    Spans { starts: &'a [u64], lens: &'a [u64], pad: u64 },
}

impl Rows<'_> {
    fn len(&self) -> usize {
        match self {
            Rows::Windows(o) => o.len(),
            Rows::Spans { starts, .. } => starts.len(),
        }
    }
    /// (first element, elements read) of row `i` for rows of `window` elements.
    fn row(&self, i: usize, window: u64) -> (u64, u64) {
        match self {
            Rows::Windows(o) => (o[i], window),
            Rows::Spans { starts, lens, .. } => (starts[i], lens[i].min(window)),
        }
    }
}

/// Whether a batch may be filled again: not when its consumer's release could not be recorded
/// ([`Buffer::release_failed`]), since nothing would order the rewrite after that consumer's work.
fn reusable(b: &Batch) -> bool {
    !b.lock().unwrap_or_else(|p| p.into_inner()).release_failed()
}

/// A reusable gather: a ring of `[batch, window]` batch buffers on its device, plus staging and a stream for
/// CUDA.
pub struct Gather {
    device: Device,
    dtype: DType,
    batch: u64,
    window: u64,
    elem: usize,
    ring: Vec<Batch>,
    bound: usize,
    /// Index in `ring` of the batch the last successful run filled.
    last: Option<usize>,
    staging: Option<PinnedHostMemory>,
    stream: Option<Stream>,
    /// cpu / cuda_host, ring at its bound with only the current batch free: the windows are read here first
    /// and copied into that batch only once every read succeeded (allocated on first need, then kept).
    scratch: Option<Vec<u8>>,
    /// How the windows of a batch are read (queue depth) through the transfer engine.
    tuning: Tuning,
    /// What each run leaves in the page cache ([`Gather::set_page_cache`]).
    page_cache: crate::cache::PageCache,
    /// What `bypass` did in the last run ([`Gather::last_bypass`]).
    last_bypass: Mutex<Option<std::result::Result<u64, String>>>,
    /// The aligned staging of `bypass` runs (allocated on the first, kept: about 8 MiB at most).
    direct_staging: Mutex<crate::cache::Staging>,
}

/// A gather's checks of a source and of one batch's offsets ([`Gather::batch_check`]).
#[derive(Clone, Copy, Debug)]
pub struct BatchCheck {
    dtype: DType,
    batch: u64,
    window: u64,
}

impl BatchCheck {
    /// As [`Gather::check_view`].
    pub fn check_view(&self, source: &View, offsets: &[u64]) -> Result<()> {
        self.check(&Source::View(source), Rows::Windows(offsets))
    }

    /// As [`Gather::check_buffer`].
    pub fn check_buffer(&self, source: &Buffer, offsets: &[u64]) -> Result<()> {
        source.check_usable()?;
        let Some(bytes) = source.host_bytes() else { return Err(not_host(source)) };
        let src = Source::Host { name: source.name(), dtype: source.dtype(), shape: source.shape(), bytes };
        self.check(&src, Rows::Windows(offsets))
    }

    /// Checks `source` and the rows of a run.
    fn check(&self, source: &Source<'_>, rows: Rows<'_>) -> Result<()> {
        let name = source.name();
        if source.shape().len() != 1 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: tensor '{name}' has shape {:?}; the source must be 1-D", source.shape()),
            ));
        }
        if source.dtype() != self.dtype {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "gather: tensor '{name}' is {}, the gather was made for {}",
                    source.dtype().name(),
                    self.dtype.name()
                ),
            ));
        }
        if rows.len() as u64 != self.batch {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: {} offsets given for a batch of {}", rows.len(), self.batch),
            ));
        }
        match rows {
            Rows::Windows(offsets) => self.check_offsets(name, source.shape()[0], offsets),
            Rows::Spans { starts, lens, .. } => {
                let len = source.shape()[0];
                if let Some(i) = (0..starts.len()).find(|&i| {
                    let (o, n) = rows.row(i, self.window);
                    o.checked_add(n).map_or(true, |e| e > len)
                }) {
                    return Err(Error::new(
                        Status::OutOfRange,
                        format!(
                            "gather: row {i} (elements {} + {}) is past the end of tensor '{name}' ({len} elements)",
                            starts[i], lens[i]
                        ),
                    ));
                }
                Ok(())
            }
        }
    }

    /// The bounds check alone: every window of `offsets` within tensor `name` of `len` elements (the source
    /// itself checked before, by [`BatchCheck::check_view`] or [`BatchCheck::check_buffer`]).
    pub fn check_offsets(&self, name: &str, len: u64, offsets: &[u64]) -> Result<()> {
        if self.window > len {
            return Err(Error::new(
                Status::OutOfRange,
                format!("gather: the window ({}) is longer than tensor '{name}' ({len} elements)", self.window),
            ));
        }
        if let Some((i, &o)) =
            offsets.iter().enumerate().find(|(_, &o)| o.checked_add(self.window).map_or(true, |e| e > len))
        {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "gather: offset {i} ({o}) + window {} is past the end of tensor '{name}' ({len} elements)",
                    self.window
                ),
            ));
        }
        Ok(())
    }
}

/// Where a run assembles its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    /// Ring index of the batch that becomes current on success.
    index: usize,
    /// True when that batch is the current one (no spare could be had): the windows go to a scratch buffer
    /// (host) or the staging buffer (CUDA) first, so a failed read leaves it untouched.
    current: bool,
}

impl Gather {
    /// Allocates (after the fit check) the first `[batch, window]` batch of `dtype` on `device`, and for CUDA
    /// its staging and stream. Errors: `INVALID_ARGUMENT` (batch or window 0, a sub-byte dtype, size
    /// overflow), `OUT_OF_MEMORY` from the fit check, `DEVICE_ERROR`, `NO_SUCH_DEVICE`.
    pub fn new(device: Device, dtype: DType, batch: u64, window: u64) -> Result<Gather> {
        let device = device.validate()?;
        if batch == 0 || window == 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: batch ({batch}) and window ({window}) must be positive"),
            ));
        }
        if dtype.bits() % 8 != 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: dtype {} is not a whole number of bytes", dtype.name()),
            ));
        }
        let elem = (dtype.bits() / 8) as usize;
        let nbytes = batch
            .checked_mul(window)
            .and_then(|n| n.checked_mul(elem as u64))
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::new(Status::InvalidArgument, format!("gather: {batch} x {window} elements overflow"))
            })?;
        let what = format!("gather batch [{batch}, {window}] {}", dtype.name());
        let staging_bytes = if device.kind == DeviceKind::CUDA { nbytes } else { 0 };
        fit::check(&what, nbytes, device)?;
        if staging_bytes > 0 {
            fit::check(&format!("{what} staging"), staging_bytes, Device::CUDA_HOST)?;
        }
        let (staging, stream) = if device.kind == DeviceKind::CUDA {
            (Some(PinnedHostMemory::alloc_on(device.ordinal, nbytes as usize)?), Some(Stream::new(device.ordinal)?))
        } else {
            (None, None)
        };
        let mut g = Gather {
            device,
            dtype,
            batch,
            window,
            elem,
            ring: Vec::new(),
            bound: DEFAULT_RING_BOUND,
            last: None,
            staging,
            stream,
            scratch: None,
            tuning: Tuning::default(),
            page_cache: crate::cache::PageCache::Keep,
            last_bypass: Mutex::new(None),
            direct_staging: Mutex::new(crate::cache::Staging::default()),
        };
        g.ring.push(g.new_batch()?);
        Ok(g)
    }

    /// One more batch buffer, zero-filled (with, for CUDA, the event its writes are recorded on). Host
    /// memory comes zeroed; device memory is set to zero on the gather's stream (`cuMemsetD8Async`) and the
    /// call returns once that has completed, so a batch read before any run holds zeros, as documented. No
    /// fit check here.
    fn new_batch(&self) -> Result<Batch> {
        let mut b = Buffer::alloc("batch", self.dtype, &[self.batch, self.window], self.nbytes(), self.device)?;
        if let (Some(stream), Memory::Cuda(mem)) = (&self.stream, b.memory()) {
            let ev = Event::new(self.device.ordinal)?;
            stream.memset_async(mem, 0)?;
            // Waited for under the one error rule: a batch a failed memset may still write is never freed.
            let settled = stream.fence((), ev).and_then(|f| f.finish());
            let ev = match settled {
                Ok(((), ev)) => ev,
                Err(f) => {
                    if !f.ended {
                        mem.keep_after_error();
                    }
                    return Err(f.error);
                }
            };
            b.set_ready_event(ev);
        }
        Ok(Arc::new(Mutex::new(b)))
    }

    /// The device of the batches.
    pub fn device(&self) -> Device {
        self.device
    }
    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Rows (B).
    pub fn batch(&self) -> u64 {
        self.batch
    }
    /// Elements per row (T).
    pub fn window(&self) -> u64 {
        self.window
    }
    /// Bytes of one batch.
    pub fn nbytes(&self) -> u64 {
        self.batch * self.window * self.elem as u64
    }

    /// The batch the last successful run filled (before any run: the first batch, zero-filled). Holding the
    /// returned reference keeps that batch from being rewritten.
    pub fn current(&self) -> Batch {
        Arc::clone(&self.ring[self.last.unwrap_or(0)])
    }

    /// How the windows of a batch are read (the queue depth: windows in flight at once).
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }
    /// Sets how the windows of a batch are read (0 fields: defaults, see [`Tuning::resolved`]).
    pub fn set_tuning(&mut self, tuning: Tuning) {
        self.tuning = tuning;
    }

    /// The most batches the ring may hold.
    pub fn ring_bound(&self) -> usize {
        self.bound
    }
    /// Batches allocated now.
    pub fn ring_len(&self) -> usize {
        self.ring.len()
    }
    /// Batches held by someone besides the ring (exported, handles not freed, references kept).
    pub fn held(&self) -> usize {
        self.ring.iter().filter(|b| Arc::strong_count(b) > 1).count()
    }

    /// Sets what each run from a file leaves in the page cache: `Keep` (the default), `Drop` (the pages of
    /// the file a run's windows brought in are given back when the run ends, failed or not; only the windows'
    /// pages are sampled and dropped, so the cost follows the batch, not the file) or `Bypass` (the windows
    /// of a contiguous view are read with direct I/O, `O_DIRECT` into aligned staging, all at once through
    /// the transfer engine, where the file system allows it: nothing enters the cache; where it does not, or
    /// for a strided view, read as with `Drop`; [`Gather::last_bypass`] says which). A prefaulted source is
    /// read through its mapping and a buffer source from memory: no policy applies.
    pub fn set_page_cache(&mut self, policy: crate::cache::PageCache) {
        self.page_cache = policy;
    }

    /// The page-cache policy of the gather's runs.
    pub fn page_cache(&self) -> crate::cache::PageCache {
        self.page_cache
    }

    /// What `bypass` did in the last run that read windows from a file: `Some(Ok(bytes))` when they were
    /// read with direct I/O (the windows' bytes), `Some(Err(why))` when they were read
    /// through the page cache instead (the file system refuses `O_DIRECT`, a strided view); `None` when the
    /// last run was not under `bypass` or read no file.
    pub fn last_bypass(&self) -> Option<std::result::Result<u64, String>> {
        self.last_bypass.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets the most batches the ring may hold (1 to [`MAX_RING_BOUND`], else `INVALID_ARGUMENT`). Lowering it
    /// drops batches beyond the new bound from the ring, idle ones first: idle ones are freed now, held ones
    /// when their last holder releases them; the batch of the last run stays.
    pub fn set_ring_bound(&mut self, bound: usize) -> Result<()> {
        if bound == 0 || bound > MAX_RING_BOUND {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: ring bound {bound}; expected 1 to {MAX_RING_BOUND}"),
            ));
        }
        self.bound = bound;
        while self.ring.len() > bound {
            let last = self.last.unwrap_or(0);
            let victim = (0..self.ring.len())
                .filter(|&i| i != last)
                .min_by_key(|&i| Arc::strong_count(&self.ring[i]))
                .expect("a ring longer than 1 has a batch besides the last one");
            self.ring.remove(victim);
            if victim < last {
                self.last = Some(last - 1);
            }
        }
        Ok(())
    }

    /// Checks a view and the offsets of one batch as [`Gather::run`] would, without running: for callers that
    /// validate ahead (a prefetch stream checks every batch before it starts).
    pub fn check_view(&self, source: &View, offsets: &[u64]) -> Result<()> {
        self.batch_check().check_view(source, offsets)
    }

    /// [`Gather::check_view`] for a host buffer source ([`Gather::run_from_buffer`]).
    pub fn check_buffer(&self, source: &Buffer, offsets: &[u64]) -> Result<()> {
        self.batch_check().check_buffer(source, offsets)
    }

    /// Checks `source` and the rows of a run.
    fn check(&self, source: &Source<'_>, rows: Rows<'_>) -> Result<()> {
        self.batch_check().check(source, rows)
    }

    /// The gather's checks of a source and a batch's offsets, apart from the gather (a copy of its dtype,
    /// batch and window): an open prefetch stream checks each pushed batch with it without waiting for the
    /// gather's lock, which its worker holds while it fills a batch.
    pub fn batch_check(&self) -> BatchCheck {
        BatchCheck { dtype: self.dtype, batch: self.batch, window: self.window }
    }

    /// Reads the windows at `offsets` (already checked) into `dst`, row after row: memcpy from a host buffer
    /// or a prefaulted mapping; else every window at once through the transfer engine (one io_uring
    /// submission for the batch, or the pread pool), with the file's read-ahead off meanwhile (a window is a
    /// few pages; read-ahead would read 32 times that from a cold disk).
    fn fill(&self, source: &Source<'_>, rows: Rows<'_>, dst: &mut [u8]) -> Result<()> {
        self.fill_rows(source, rows, dst)?;
        if let Rows::Spans { pad, .. } = rows {
            // The tail of each short row: `pad` in each element.
            let elem = self.elem;
            let pad_bytes = pad.to_le_bytes();
            let row_bytes = self.window as usize * elem;
            for (i, row) in dst.chunks_exact_mut(row_bytes).enumerate() {
                let (_, n) = rows.row(i, self.window);
                for e in row[n as usize * elem..].chunks_exact_mut(elem) {
                    e.copy_from_slice(&pad_bytes[..elem]);
                }
            }
        }
        Ok(())
    }

    /// The elements each row reads (a window, or a span's first `min(len, window)`), into the start of its row.
    fn fill_rows(&self, source: &Source<'_>, rows: Rows<'_>, dst: &mut [u8]) -> Result<()> {
        let row = self.window as usize * self.elem;
        let elem = self.elem as u64;
        let parts = dst.chunks_exact_mut(row).enumerate().map(|(i, d)| {
            let (o, n) = rows.row(i, self.window);
            (i, o, &mut d[..(n * elem) as usize])
        });
        let src = match source {
            Source::Host { bytes, .. } => *bytes,
            Source::View(v) if v.is_prefaulted() => v.mapped(),
            Source::View(v) => {
                // The page-cache policy: the pages of this batch's windows, sampled now, restored when it ends.
                let _cache = match v.file_and_offset() {
                    _ if self.page_cache == crate::cache::PageCache::Keep => None,
                    Some((file, base)) if v.is_contiguous() => Some(crate::cache::CacheScope::begin_ranges(
                        self.page_cache,
                        file,
                        (0..rows.len()).map(|i| {
                            let (o, n) = rows.row(i, self.window);
                            (base + o * elem, n * elem)
                        }),
                    )),
                    Some((file, _)) => Some(crate::cache::CacheScope::begin(self.page_cache, [file])),
                    None => None,
                };
                let bypass = self.page_cache == crate::cache::PageCache::Bypass;
                let report = |r: std::result::Result<u64, String>| {
                    *self.last_bypass.lock().unwrap_or_else(|p| p.into_inner()) = bypass.then_some(r);
                };
                let Some((file, base)) = v.file_and_offset().filter(|_| v.is_contiguous()) else {
                    report(Err("a strided view is read through the page cache, then dropped".to_string()));
                    for (_, o, d) in parts {
                        v.read_at(o * elem, d)?;
                    }
                    return Ok(());
                };
                // Under bypass, the file's O_DIRECT twin (or why there is none).
                let direct = bypass.then(crate::cache::DirectFiles::default);
                let twin = direct.as_ref().and_then(|d| d.get(file));
                let _readahead_off = v.readahead_off();
                let fd = crate::os::raw_file(file);
                let mut index = Vec::with_capacity(rows.len());
                let mut reads: Vec<engine::Read<'_>> = Vec::with_capacity(rows.len());
                for (i, o, d) in parts.filter(|(_, _, d)| !d.is_empty()) {
                    index.push(i);
                    reads.push(engine::Read { fd, offset: base + o * elem, dst: d });
                }
                let bytes: u64 = reads.iter().map(|r| r.dst.len() as u64).sum();
                let r = match &twin {
                    Some(t) => {
                        let mut staging = self.direct_staging.lock().unwrap_or_else(|p| p.into_inner());
                        crate::cache::read_many_direct(t, &mut reads, &self.tuning, &mut staging)
                    }
                    None => engine::read_many(&mut reads, &self.tuning),
                };
                report(match (&twin, &direct) {
                    (Some(_), _) => Ok(bytes),
                    (None, d) => Err(d.as_ref().and_then(|d| d.fallback()).unwrap_or_default()),
                });
                return r.map_err(|f| {
                    let i = index[f.index];
                    let word = if matches!(rows, Rows::Windows(_)) { "window" } else { "row" };
                    let at = format!("{word} {i} (offset {})", rows.row(i, self.window).0);
                    match f.kind {
                        engine::FailureKind::Eof { at: end } => Error::new(
                            Status::Truncated,
                            format!(
                                "{}: tensor '{}': {}: the file ends at byte {} (it is now {} bytes; was it \
                                 truncated after opening?)",
                                v.file_display(),
                                v.name(),
                                at,
                                end,
                                file.metadata().map(|m| m.len().to_string()).unwrap_or_else(|_| "?".into())
                            ),
                        ),
                        engine::FailureKind::Os(e) => {
                            Error::new(Status::Io, format!("{}: tensor '{}': {}: {e}", v.file_display(), v.name(), at))
                        }
                    }
                });
            }
        };
        for (_, o, d) in parts {
            let s = o as usize * self.elem;
            d.copy_from_slice(&src[s..s + d.len()]);
        }
        Ok(())
    }

    /// Where the next run assembles its batch: a batch nobody else holds other than the current one, least
    /// recently filled first; else a new batch (fit-checked) while the bound allows, so that a failed run
    /// never touches the current batch; else the current batch itself through a scratch or staging buffer
    /// ([`Target::current`]) when nobody holds it; `BUSY` at the bound with every batch held. A batch whose
    /// consumer's release could not be recorded is never a target ([`Gather::drop_unreusable`]).
    fn target(&mut self) -> Result<Target> {
        self.drop_unreusable();
        let n = self.ring.len();
        let cur = self.last.unwrap_or(0);
        let free = |g: &Self, i: usize| Arc::strong_count(&g.ring[i]) == 1 && reusable(&g.ring[i]);
        if let Some(i) = (1..n).map(|k| (cur + k) % n).find(|&i| free(self, i)) {
            return Ok(Target { index: i, current: false });
        }
        let cur_free = free(self, cur);
        match self.grow() {
            Ok(i) => Ok(Target { index: i, current: false }),
            Err(_) if cur_free => Ok(Target { index: cur, current: true }),
            Err(e) => Err(e),
        }
    }

    /// Adds a batch to the ring (fit-checked) and returns its index; `BUSY` at the bound.
    fn grow(&mut self) -> Result<usize> {
        let n = self.ring.len();
        let what = format!("gather batch [{}, {}] {}", self.batch, self.window, self.dtype.name());
        // A batch kept only as the current one after its release failed does not count against the bound.
        let retired = self.ring.iter().filter(|b| !reusable(b)).count();
        if n - retired >= self.bound {
            return Err(Error::new(
                Status::Busy,
                format!(
                    "{what}: all {n} batches of the ring are still held (exported through DLPack, or buffer \
                     handles not freed); release one, or raise the bound (hostfirst_gather_set_ring_bound)"
                ),
            ));
        }
        fit::check(
            &format!("{what} (batch {} of at most {}, every other one held)", n + 1, self.bound),
            self.nbytes(),
            self.device,
        )
        .map_err(|e| {
            let msg = format!("{} ({} per batch)", e.message(), human_bytes(self.nbytes()));
            Error::new(e.status(), msg)
        })?;
        self.ring.push(self.new_batch()?);
        Ok(n)
    }

    /// Drops from the ring every batch but the last run's whose consumer's release could not be recorded
    /// ([`Buffer::release_failed`]): nothing could order its rewrite after that consumer's work. A held one
    /// is freed when its last holder lets go.
    fn drop_unreusable(&mut self) {
        let mut i = 0;
        while i < self.ring.len() {
            if i != self.last.unwrap_or(0) && !reusable(&self.ring[i]) {
                self.ring.remove(i);
                if self.last.is_some_and(|l| l > i) {
                    self.last = self.last.map(|l| l - 1);
                }
                continue;
            }
            i += 1;
        }
    }

    /// Assembles row `i` = `source[offsets[i] .. offsets[i] + window]` for every `i` into a batch nobody
    /// holds, and returns that batch (a new reference: while it, or any reference made from it, lives, the
    /// batch is not rewritten). Returns once the batch is in place (for CUDA: the copy has completed).
    ///
    /// Errors: `INVALID_ARGUMENT` (source not 1-D, another dtype, `offsets.len() != batch`), `OUT_OF_RANGE`
    /// (a window longer than the tensor, or the first offset whose window runs past its end), `BUSY` (every
    /// batch held at the ring's bound), `OUT_OF_MEMORY` (growing the ring does not fit): with these no batch
    /// changed. `TRUNCATED` (the file shrank since it was opened) or `IO` while reading, `DEVICE_ERROR` while
    /// copying: the batch being filled is not returned and the current batch keeps its bytes (except after a
    /// `DEVICE_ERROR` in the copy into the current batch, when it was the only one free at the ring's bound).
    /// A prefaulted source is read through the mapping (see [`View::mapped`] for its truncation
    /// hazard); any other is read with `pread`.
    pub fn run(&mut self, source: &View, offsets: &[u64]) -> Result<Batch> {
        self.run_source(&Source::View(source), Rows::Windows(offsets))
    }

    /// Variable-length rows, padded: row `i` = the first `min(lens[i], window)` elements of `source` from
    /// element `starts[i]`, then `pad` (its low bytes, little-endian, one element's worth) in every element up
    /// to `window`. What a batch of whole sequences of a Megatron dataset is (`starts` and `lens` from
    /// `TensorFile::sequence_spans`): a fixed `[batch, window]` shape, so it shares the ring, the device copy
    /// and the ownership rules of [`Gather::run`], and a jitted step sees one shape; a sequence longer than
    /// the window is cut at it. Errors as [`Gather::run`]; `OUT_OF_RANGE` names the first row whose span
    /// runs past the tensor's end.
    pub fn run_spans(&mut self, source: &View, starts: &[u64], lens: &[u64], pad: u64) -> Result<Batch> {
        if starts.len() != lens.len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: {} starts and {} lengths", starts.len(), lens.len()),
            ));
        }
        self.run_source(&Source::View(source), Rows::Spans { starts, lens, pad })
    }

    /// [`Gather::run`] from a 1-D host buffer (cpu or cuda_host; e.g. a put of the token tensor to cpu): each
    /// window is a memcpy, and nothing done to the file afterwards can fault or fail the gather (an eager
    /// copy owns its bytes; a copy-on-write buffer keeps its file's hazards for pages not written).
    /// `UNSUPPORTED` for a CUDA buffer.
    pub fn run_from_buffer(&mut self, source: &Buffer, offsets: &[u64]) -> Result<Batch> {
        source.check_usable()?;
        let Some(bytes) = source.host_bytes() else { return Err(not_host(source)) };
        let src = Source::Host { name: source.name(), dtype: source.dtype(), shape: source.shape(), bytes };
        self.run_source(&src, Rows::Windows(offsets))
    }

    fn run_source(&mut self, source: &Source<'_>, rows: Rows<'_>) -> Result<Batch> {
        // Releases of batches kept while a CUDA graph capture was seen are done here if none is seen now.
        crate::device::cuda::capture::safe_point();
        self.check(source, rows)?;
        let t = self.target()?;
        let batch = Arc::clone(&self.ring[t.index]);
        let mut dest = batch.lock().unwrap_or_else(|p| p.into_inner());
        // A cuda_host (or CUDA) batch made before a fork() is not touched in the child.
        dest.check_usable()?;
        if dest.host_bytes_mut().is_none() {
            self.fill_cuda(source, rows, &mut dest)?;
        } else if t.current {
            let mut scratch = match self.scratch.take() {
                Some(s) => s,
                None => {
                    let n = self.nbytes() as usize;
                    let mut v = Vec::new();
                    v.try_reserve_exact(n).map_err(|_| {
                        Error::new(
                            Status::OutOfMemory,
                            format!("gather: no memory for a {} scratch batch", human_bytes(n as u64)),
                        )
                    })?;
                    v.resize(n, 0);
                    v
                }
            };
            let r = self.fill(source, rows, &mut scratch);
            if r.is_ok() {
                dest.host_bytes_mut().expect("a host batch").copy_from_slice(&scratch);
            }
            self.scratch = Some(scratch);
            r?;
        } else {
            self.fill(source, rows, dest.host_bytes_mut().expect("a host batch"))?;
        }
        drop(dest);
        self.last = Some(t.index);
        Ok(batch)
    }

    /// CUDA: windows into the staging buffer, then one copy on the gather's stream after the batch's
    /// previous consumers' release events; the batch's event is recorded after the copy.
    fn fill_cuda(&mut self, source: &Source<'_>, rows: Rows<'_>, dest: &mut Buffer) -> Result<()> {
        let mut staging = match self.staging.take() {
            Some(s) => s,
            None => PinnedHostMemory::alloc_on(self.device.ordinal, self.nbytes() as usize)?, // after a failed copy
        };
        if let Err(e) = self.fill(source, rows, staging.as_mut_slice()) {
            self.staging = Some(staging);
            return Err(e);
        }
        let stream = self.stream.as_ref().expect("a CUDA gather has a stream");
        if let Err(e) = dest.wait_for_consumers(stream) {
            self.staging = Some(staging);
            return Err(e);
        }
        let Memory::Cuda(mem) = dest.memory() else { unreachable!("non-host memory is CUDA memory") };
        let n = self.nbytes() as usize;
        // `run` returns with the batch in place: the batch's own event has completed too (nothing of this run
        // stays queued on the stream).
        let (staging, recorded) = engine::device::staged_batch_to_device(stream, staging, mem, n, dest.ready_event())?;
        self.staging = Some(staging);
        recorded
    }

    /// Copies the batch the last run filled into `dst` (at least [`Gather::nbytes`] bytes, else
    /// `BUFFER_TOO_SMALL`).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        self.current().lock().unwrap_or_else(|p| p.into_inner()).copy_to_host(dst)
    }
}

fn not_host(source: &Buffer) -> Error {
    Error::new(
        Status::Unsupported,
        format!(
            "gather: buffer '{}' is on {}; gather sources are host memory (put it to cpu first)",
            source.name(),
            source.device()
        ),
    )
}

/// splitmix64: the next value of the stream whose state is `*state`.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// nanoGPT's `torch.randint(len - window, (n,))`: `out.len()` start offsets uniform in `[0, len - window)`
/// (each window plus its shifted target fits), drawn from the splitmix64 stream in `*state`, which advances.
/// `INVALID_ARGUMENT` when `window >= len`.
pub fn random_offsets(state: &mut u64, len: u64, window: u64, out: &mut [u64]) -> Result<()> {
    if window >= len {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("random offsets: window {window} must be shorter than the tensor ({len} elements)"),
        ));
    }
    let range = len - window;
    for o in out.iter_mut() {
        // Lemire's multiply-shift: unbiased enough for sampling windows, no division.
        *o = ((splitmix64(state) as u128 * range as u128) >> 64) as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_in_range_and_reproducible() {
        let (mut a, mut b) = (42u64, 42u64);
        let mut x = [0u64; 100];
        let mut y = [0u64; 100];
        random_offsets(&mut a, 1000, 10, &mut x).unwrap();
        random_offsets(&mut b, 1000, 10, &mut y).unwrap();
        assert_eq!(x, y);
        assert!(x.iter().all(|&o| o < 990));
        assert!(x.iter().any(|&o| o != x[0]));
        assert_eq!(random_offsets(&mut a, 10, 10, &mut x).unwrap_err().status(), Status::InvalidArgument);
    }
}
