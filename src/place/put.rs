//! Puts: a tensor view (or slice) onto a device as a new buffer, fit-checked before anything is allocated.

use super::buffer::{Buffer, Memory};
use super::parallel::{default_threads, parallel_fill, DEFAULT_CHUNK};
use crate::device::fit;
use crate::device::{Device, DeviceKind};
use crate::error::Result;
use crate::file::TensorView;

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
    /// Reader threads (0: the default, the CPUs available, at most 16).
    pub threads: usize,
    /// Chunk size for reads (0: default 8 MiB).
    pub chunk: usize,
    /// Total bytes of page-locked staging for CUDA puts (0: 256 MiB, see [`super::staging`]).
    pub staging_bytes: usize,
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
pub fn put(view: &TensorView, target: Target, opts: PutOptions<'_>) -> Result<Buffer> {
    put_with_stats(view, target, opts).map(|(b, _)| b)
}

/// [`put`], also returning what the transfer did.
pub fn put_with_stats(view: &TensorView, target: Target, opts: PutOptions<'_>) -> Result<(Buffer, PutStats)> {
    let what = format!("tensor '{}'", view.name());
    let device = target.resolve(&what)?;
    let cow = opts.copy_on_write && view.is_contiguous(); // a strided view is copied (packed) instead
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
pub(crate) fn map_private(view: &TensorView, progress: Option<&mut dyn FnMut(u64, u64) -> bool>) -> Result<Buffer> {
    let buf = Buffer::map_private(view, true)?;
    if let Some(p) = progress {
        if p(view.nbytes(), view.nbytes()) {
            return Err(crate::error::Error::new(
                crate::error::Status::Cancelled,
                format!("put of tensor '{}' cancelled by the progress callback", view.name()),
            ));
        }
    }
    Ok(buf)
}

/// Copies the view's bytes into an allocated buffer of the same size.
pub fn fill(view: &TensorView, buf: &mut Buffer, opts: PutOptions<'_>) -> Result<()> {
    fill_with_stats(view, buf, opts).map(|_| ())
}

/// [`fill`], also returning what the transfer did.
pub fn fill_with_stats(view: &TensorView, buf: &mut Buffer, opts: PutOptions<'_>) -> Result<PutStats> {
    fill_impl(view, buf, opts, false)
}

/// `fresh`: the buffer was just allocated, so its host pages are not faulted in yet; each reader populates
/// its chunk in one call before reading into it (see [`super::host::populate_write`]).
fn fill_impl(view: &TensorView, buf: &mut Buffer, opts: PutOptions<'_>, fresh: bool) -> Result<PutStats> {
    let threads = if opts.threads == 0 { default_threads() } else { opts.threads };
    let chunk = if opts.chunk == 0 { DEFAULT_CHUNK } else { opts.chunk };
    let device = buf.device();
    match buf.memory_mut() {
        Memory::Host(_) | Memory::Pinned(_) => {
            let dst = buf.host_bytes_mut().expect("host memory");
            let populate = fresh && matches!(device.kind, DeviceKind::CPU);
            parallel_fill(
                dst,
                threads,
                chunk,
                |off, d| {
                    if populate {
                        super::host::populate_write(d);
                    }
                    view.read_at(off, d)
                },
                opts.progress,
            )?;
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
            let cfg = super::staging::RingConfig { threads, staging_bytes: opts.staging_bytes, slab_bytes: opts.chunk };
            super::staging::to_cuda(view, dev, &cfg, progress)?;
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
    match (buf.memory(), out.memory_mut()) {
        (Memory::Cuda(s), Memory::Cuda(d)) => d.copy_from_device(0, s, 0, n)?, // same device or peer
        (src, Memory::Cuda(d)) => match src {
            Memory::Host(h) => copy_host_to_cuda(h.as_slice(), d)?,
            Memory::Pinned(p) => d.copy_from_host(0, p.as_slice())?,
            Memory::Cuda(_) => unreachable!("CUDA to CUDA is matched above"),
        },
        (_, Memory::Host(h)) => buf.read_at(0, h.as_mut_slice())?,
        (_, Memory::Pinned(p)) => buf.read_at(0, p.as_mut_slice())?,
    }
    Ok(out)
}

/// Pageable host bytes to CUDA through the staging ring (never DMA from pageable memory).
fn copy_host_to_cuda(src: &[u8], dst: &crate::device::cuda::DeviceMemory) -> Result<()> {
    let cfg = super::staging::RingConfig::default();
    super::staging::transfer(
        src.len() as u64,
        dst,
        &cfg,
        |off, d| {
            d.copy_from_slice(&src[off as usize..off as usize + d.len()]);
            Ok(())
        },
        None,
    )
}
