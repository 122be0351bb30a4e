//! Puts: a tensor view (or slice) onto a device as a new buffer, fit-checked before anything is allocated.

use super::buffer::{Buffer, Memory};
use crate::device::fit;
use crate::device::{Device, DeviceKind};
use crate::engine::device::HostSource;
use crate::engine::{self, Progress, Tuning};
use crate::error::Result;
use crate::file::View;

/// Where a put goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A named device.
    Device(Device),
    /// The default device, resolved through the default stack (refused in strict mode).
    Default,
}

impl Target {
    /// Resolves to a device; `what` names the tensor for messages.
    pub fn resolve(self, what: &str) -> Result<Device> {
        match self {
            Target::Device(d) => d.validate(),
            Target::Default => crate::scope::resolve_default(what),
        }
    }
}

/// Options of a put.
#[derive(Default)]
pub struct PutOptions<'a> {
    /// Threads, piece size and staging of the transfer (zeros: the engine's defaults, see [`Tuning`]; for
    /// CUDA puts, `chunk` is the staging slab and a zero `staging` means 256 MiB, see [`super::staging`]).
    pub tuning: Tuning,
    /// Resident mode for CUDA puts: page-lock the mapped range once and copy from it (see
    /// [`super::resident`] for why the default is the staging ring).
    pub resident: bool,
    /// Copy-on-write host puts (truncating the file discards written pages past the new end: SIGBUS, or the
    /// file's new content once it is extended again; see `hostfirst_put`): a put that lands on `cpu` maps the
    /// tensor's pages in its file privately
    /// ([`Buffer::map_private`], populated for reading up front) instead of copying them. Other targets, and
    /// views over memory buffers (no file to map), copy as usual. See [`put`] for the contract.
    pub copy_on_write: bool,
    /// Progress sink (bytes done, total) → true to cancel; called at a bounded rate from the calling thread.
    pub progress: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
    /// What the put leaves in the page cache ([`crate::cache`]): `drop` gives back the pages of the view's
    /// file it brought in; `bypass` reads a contiguous view of a file into a `cpu` (or `cuda_host`) buffer
    /// with direct I/O where the file system allows it, and otherwise reads as with `drop`.
    pub page_cache: crate::cache::PageCache,
}

/// What a put did (for the resident mode: the registration cost).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PutStats {
    /// Seconds spent registering the mapped range (resident mode, first transfer only).
    pub register_seconds: f64,
    /// True when a resident put reused a cached registration.
    pub reused_registration: bool,
    /// True when a resident put went through the staging ring instead, because the view shares pages with
    /// cached registrations that do not cover it, because it is a read-only file mapping and the device
    /// cannot register read-only memory, because the device cannot register host memory at all or the
    /// driver refused the registration (see [`super::resident`]), or because it is strided.
    pub staged_instead: bool,
}

/// Puts `view` on `target`: fit check, allocation, copy. On any failure nothing stays allocated.
///
/// With [`PutOptions::copy_on_write`] and a `cpu` target, the buffer is a private writable mapping of the
/// tensor's pages instead of a copy: its cost is a page table, not a copy (populating 2 GiB in the page
/// cache takes milliseconds). It reads as the file, may be written (a write copies the page it touches into
/// anonymous memory; the file never changes), and its pages not yet written stay tied to the file: another
/// process writing the file may change them, and truncating the file raises SIGBUS when any page past the new
/// end is touched (on Linux even pages already written). The fit check counts what can become private: every
/// page the tensor touches. Copies (the default) have none of these ties.
pub fn put(view: &View, target: Target, opts: PutOptions<'_>) -> Result<Buffer> {
    put_with_stats(view, target, opts).map(|(b, _)| b)
}

/// [`put`], also returning what the transfer did.
pub fn put_with_stats(view: &View, target: Target, opts: PutOptions<'_>) -> Result<(Buffer, PutStats)> {
    let what = format!("tensor '{}'", view.name());
    let device = target.resolve(&what)?;
    // A strided view is copied (packed) instead, and so is a file read with owned reads (never mapped).
    let cow = opts.copy_on_write && view.is_contiguous() && view.maps();
    if let (true, DeviceKind::CPU, Some((_, offset))) = (cow, device.kind, view.file_and_offset()) {
        fit::check(&what, super::host::private_span(offset, view.nbytes()), device)?;
        return Ok((map_private(view, opts.progress)?, PutStats::default()));
    }
    fit::check(&what, view.nbytes(), device)?;
    let mut buf = Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), device)?;
    let stats = fill_impl(view, &mut buf, opts, true)?;
    Ok((buf, stats))
}

/// A copy-on-write cpu buffer for `view` (file-backed, checked by the caller): mapped and populated, with
/// the progress contract of a copy (one call at the end, which may still cancel).
pub(crate) fn map_private(view: &View, progress: Option<&mut dyn FnMut(u64, u64) -> bool>) -> Result<Buffer> {
    let buf = Buffer::map_private(view, true)?;
    Progress::new(progress, view.nbytes())
        .finish()
        .map_err(|e| e.context(format!("put of tensor '{}'", view.name())))?;
    Ok(buf)
}

/// Copies the view's bytes into an allocated buffer of the same size.
pub fn fill(view: &View, buf: &mut Buffer, opts: PutOptions<'_>) -> Result<()> {
    fill_with_stats(view, buf, opts).map(|_| ())
}

/// [`fill`], also returning what the transfer did.
pub fn fill_with_stats(view: &View, buf: &mut Buffer, opts: PutOptions<'_>) -> Result<PutStats> {
    fill_impl(view, buf, opts, false)
}

/// `fresh`: the buffer was just allocated, so its host pages are not faulted in yet; each reader populates
/// its chunk in one call before reading into it (see [`super::host::populate_write`]).
fn fill_impl(view: &View, buf: &mut Buffer, opts: PutOptions<'_>, fresh: bool) -> Result<PutStats> {
    let device = buf.device();
    // Sampled before the first read; the pages this put brought in go back when it ends, failed or not.
    let _cache = crate::cache::CacheScope::begin(opts.page_cache, view.file_and_offset().map(|f| f.0));
    // No read-ahead past the tensor meanwhile: pages the kernel is still reading ahead when the put ends
    // cannot be dropped, and the next read's scope would find them cached (a get_tensor per tensor under
    // `drop` left 19 % of a file cached).
    let _readahead_off = (opts.page_cache != crate::cache::PageCache::Keep && view.file_and_offset().is_some())
        .then(|| view.readahead_off());
    let direct = crate::cache::DirectFiles::for_policy(opts.page_cache);
    let direct_file = match (&direct, view.file_and_offset()) {
        (Some(d), Some((file, at))) if view.is_contiguous() => d.get(file).map(|f| (f, at)),
        _ => None,
    };
    match buf.memory_mut() {
        Memory::Host(_) | Memory::Pinned(_) => {
            let dst = buf.host_bytes_mut().expect("host memory");
            let populate = fresh && matches!(device.kind, DeviceKind::CPU);
            let prepare: Option<engine::bulk::Prepare<'_>> =
                if populate { Some(&super::host::populate_write) } else { None };
            let mut progress = Progress::new(opts.progress, view.nbytes());
            match &direct_file {
                Some((file, at)) => {
                    let what = || format!("tensor '{}'", view.name());
                    let read = |off: u64, d: &mut [u8]| crate::cache::read_direct_here(file, at + off, d, &what);
                    let r = engine::fill_host(dst, &opts.tuning, prepare, read, &mut progress);
                    crate::cache::release_staging_here();
                    r?
                }
                None => engine::fill_host(dst, &opts.tuning, prepare, |off, d| view.read_at(off, d), &mut progress)?,
            }
            progress.finish()?;
            Ok(PutStats::default())
        }
        Memory::Cuda(dev) => {
            debug_assert_eq!(device.kind, DeviceKind::CUDA);
            let mut progress = opts.progress;
            let mut stats = PutStats::default();
            if opts.resident && view.nbytes() > 0 && !view.is_contiguous() {
                // A strided view is not one range to register: its runs go through the ring.
                stats.staged_instead = true;
            } else if opts.resident && view.nbytes() > 0 {
                let reborrowed: Option<&mut dyn FnMut(u64, u64) -> bool> = match progress {
                    Some(ref mut p) => Some(&mut **p),
                    None => None,
                };
                match super::resident::to_cuda(view, dev, 64 << 20, reborrowed)? {
                    Some(s) => {
                        return Ok(PutStats {
                            register_seconds: s.register_seconds,
                            reused_registration: s.reused,
                            staged_instead: false,
                        })
                    }
                    None => stats.staged_instead = true,
                }
            }
            super::staging::to_cuda(view, dev, &engine::staging::ring_config(&opts.tuning), progress)?;
            Ok(stats)
        }
    }
}

/// Copies `buf` onto `device` as a new buffer (cpu ↔ cuda_host ↔ cuda:N), fit-checked first. Between two CUDA
/// devices the driver copies peer to peer (`cuMemcpyPeerAsync`, with peer access enabled where the devices
/// allow it). Synchronous: when it returns, the new buffer's bytes are in place and visible to work on any
/// stream (copies between device buffers are waited for, see [`crate::device::cuda::DeviceMemory::copy_from_device`]).
pub fn buffer_to(buf: &Buffer, target: Target) -> Result<Buffer> {
    let what = format!("buffer '{}'", buf.name());
    let device = target.resolve(&what)?;
    fit::check(&what, buf.nbytes(), device)?;
    let mut out = Buffer::alloc(buf.name(), buf.dtype(), buf.shape(), buf.nbytes(), device)?;
    let n = buf.nbytes() as usize;
    if n == 0 {
        return Ok(out);
    }
    let tuning = Tuning::default();
    let mut progress = Progress::new(None, n as u64);
    let fresh_cpu = device.kind == DeviceKind::CPU;
    match (buf.memory(), out.memory_mut()) {
        (Memory::Cuda(s), Memory::Cuda(d)) => engine::device::device_to_device(s, d, n)?, // same device or peer
        (Memory::Host(h), Memory::Cuda(d)) => {
            engine::device::host_to_device(HostSource::Pageable(h.as_slice()), d, &tuning, &mut progress)?
        }
        (Memory::Pinned(p), Memory::Cuda(d)) => {
            engine::device::host_to_device(HostSource::PageLocked(p.as_slice()), d, &tuning, &mut progress)?
        }
        (src, _) => {
            // Host destinations: host sources copied in parallel pieces into fresh pages (populated by the
            // thread that copies them); a device source read back in one synchronous copy.
            let one_piece = Tuning { threads: 1, chunk: n, ..tuning };
            let t = if matches!(src, Memory::Cuda(_)) { one_piece } else { tuning };
            let prepare: Option<engine::bulk::Prepare<'_>> =
                if fresh_cpu { Some(&super::host::populate_write) } else { None };
            let dst = out.host_bytes_mut().expect("host memory");
            engine::fill_host(dst, &t, prepare, |off, d| buf.read_at(off, d), &mut progress)?;
        }
    }
    Ok(out)
}
