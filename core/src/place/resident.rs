//! Resident mode: the tensor's mapped range page-locked once (read-only `cuMemHostRegister`) and copied to
//! the device straight from the mapping, for data transferred many times.
//!
//! **Why it is not the default.** Registering pins every page: the kernel must fault the whole range in and
//! the driver must map it for the device, which costs on the order of 0.1 s per GB or more (plus the read
//! from disk for a cold file) before the first byte moves, and the pages stay locked (unswappable) while
//! registered. A single put through the staging ring costs only the copy itself with bounded host memory, so
//! registration pays off only after many transfers of the same range. Registrations are cached by (address,
//! length) of the mapped range — the cache entry keeps the file's mapping alive — and freed by
//! [`super::staging::release_cached_memory`].
//!
//! **Overlaps.** The driver locks whole pages and refuses a range that shares a page with a registered one.
//! A view inside a cached registration (a row slice of a registered tensor) reuses it at an offset. A view
//! that only partly overlaps cached registrations (including a neighbour sharing a boundary page) is not
//! registered: its put goes through the staging ring instead, and the put's stats say so.
//!
//! **Read-only mappings.** A file is mapped read-only, and the driver registers read-only pages only with
//! `CU_MEMHOSTREGISTER_READ_ONLY`, which some devices lack (`READ_ONLY_HOST_REGISTER_SUPPORTED` = 0). For such
//! a device a resident put of a file's tensor goes through the staging ring too, and says so. Registrations
//! are made through the destination device's context.
//!
//! **Registration refused.** A device that cannot register host memory at all
//! (`CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED` = 0), or a driver that refuses this range (some filesystems'
//! mappings, kernels, containers and sandboxes, the locked-memory limit, very large ranges:
//! `CUDA_ERROR_NOT_SUPPORTED`, `_NOT_PERMITTED`, `_OUT_OF_MEMORY`, `_INVALID_VALUE`,
//! `_HOST_MEMORY_ALREADY_REGISTERED` when another component registered these pages), does not fail the put: it
//! goes through the staging ring and says so ([`Lookup::Refused`], `staged_instead` in the put's stats). A
//! refusal is not cached: the next resident put of the range tries again.

use crate::device::cuda::{DeviceMemory, HostBytes, HostRegistration};
use crate::error::{Error, Result, Status};
use crate::file::View;
use crate::forksafe::GlobalMutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// A page-locked mapped range, with the view that keeps its mapping alive.
pub struct Resident {
    // Field order: the registration is dropped (unregistered) before the view (and with it the mapping).
    reg: HostRegistration<'static>,
    view: View,
    /// Seconds spent faulting and registering the range.
    pub register_seconds: f64,
}

// SAFETY: the bytes are the view's read-only mapping, kept alive (and at a fixed address) by the view the
// value owns; nothing writes through it.
unsafe impl HostBytes for Resident {
    fn host_bytes(&self) -> &[u8] {
        self.view.mapped()
    }
}

impl Resident {
    /// The registration.
    pub fn registration(&self) -> &HostRegistration<'static> {
        &self.reg
    }
}

/// The outcome of looking a view up for a resident transfer.
pub enum Lookup {
    /// A registration covering the view, and the view's offset within the registration's bytes.
    Ready(Arc<Resident>, usize, ResidentStats),
    /// The view partly overlaps (shares pages with) cached registrations: use the staging ring.
    Overlaps,
    /// The view is a read-only file mapping and the device cannot register read-only memory: use the
    /// staging ring.
    ReadOnlyUnsupported,
    /// The device cannot register host memory, or the driver refused this range (the error says why): use
    /// the staging ring.
    Refused(Error),
}

/// What a resident transfer did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResidentStats {
    /// Seconds spent registering for this transfer (0 when a cached registration was reused).
    pub register_seconds: f64,
    /// True when a cached registration was reused.
    pub reused: bool,
}

type Key = (usize, usize);

/// The cached registrations by (address, length).
pub(crate) static CACHE: GlobalMutex<BTreeMap<Key, Arc<Resident>>> = GlobalMutex::new(BTreeMap::new());

fn cache() -> &'static GlobalMutex<BTreeMap<Key, Arc<Resident>>> {
    &CACHE
}

/// Drops every cached registration (unregistering once no transfer still uses it).
pub fn release_all() {
    let all = std::mem::take(&mut *cache().lock());
    drop(all);
}

/// Number of cached registrations.
pub fn cached_count() -> usize {
    cache().lock().len()
}

/// Faults the range in before registration ([`crate::os::populate_read`]: `MADV_POPULATE_READ` on Linux ≥ 5.14,
/// which fails cleanly with EFAULT on a truncated file instead of SIGBUS; `PrefetchVirtualMemory` and a read per
/// page on Windows, where a mapped file cannot shrink), else reads every page through `pread` into a scratch
/// buffer (which also warms the page cache without touching the mapping).
fn populate(view: &View) -> Result<()> {
    let bytes = view.mapped();
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: the view's live mapping, kept by `view` during the call; populating changes no contents.
    match unsafe { crate::os::populate_read(bytes.as_ptr(), bytes.len()) } {
        Ok(crate::os::Populate::Done) => return Ok(()),
        Err(crate::os::PopulateError::Shrunk) => {
            return Err(Error::new(
                Status::Truncated,
                format!(
                    "{}: tensor '{}': the mapped range cannot be read (file truncated?)",
                    view.file_display(),
                    view.name()
                ),
            ))
        }
        Ok(crate::os::Populate::AdviceOnly) | Err(crate::os::PopulateError::Os(_)) => {}
    }
    // Fallback: verify the file still holds the range with positioned reads (no SIGBUS possible).
    let mut scratch = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < view.nbytes() {
        let n = (view.nbytes() - off).min(scratch.len() as u64) as usize;
        view.read_at(off, &mut scratch[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// The page-rounded range a registration of `[a, a + len)` locks.
fn pages(a: usize, len: usize) -> (usize, usize) {
    let page = crate::device::host::page_size();
    (a / page * page, (a + len).div_ceil(page) * page)
}

/// The cached registration covering `view`'s mapped range, registering it through `cuda:<ordinal>`'s context
/// (and timing that) when no cached one touches its pages; [`Lookup::Overlaps`] when cached ones touch them
/// without covering the view; [`Lookup::ReadOnlyUnsupported`] when the view is a read-only file mapping that
/// the device cannot register.
pub fn get(view: &View, ordinal: u32) -> Result<Lookup> {
    let m = view.mapped();
    let (a, len) = (m.as_ptr() as usize, m.len());
    let from_file = view.path().is_some();
    {
        let c = cache().lock();
        if let Some((&(b, _), r)) = c.iter().find(|(&(b, n), _)| b <= a && a + len <= b + n) {
            return Ok(Lookup::Ready(Arc::clone(r), a - b, ResidentStats { register_seconds: 0.0, reused: true }));
        }
        let (lo, hi) = pages(a, len);
        if c.keys().any(|&(b, n)| {
            let (blo, bhi) = pages(b, n);
            blo < hi && lo < bhi
        }) {
            return Ok(Lookup::Overlaps);
        }
    }
    if !crate::device::cuda::host_register_supported(ordinal) {
        return Ok(Lookup::Refused(Error::new(
            Status::Unsupported,
            format!("cuda:{ordinal} cannot register host memory (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED = 0)"),
        )));
    }
    if from_file && !crate::device::cuda::read_only_register_supported(ordinal) {
        return Ok(Lookup::ReadOnlyUnsupported);
    }
    let t = Instant::now();
    populate(view)?;
    // File mappings are registered by whole pages (the mapping starts on a page and its last page is mapped
    // whole), so the registration is exactly what the driver locks; memory buffers by their exact range.
    let (lo, hi) = if from_file { pages(a, len) } else { (a, a + len) };
    // SAFETY: the mapping is kept alive by `view`, stored beside the registration and dropped after it; the
    // page-rounded range lies within the same mapping.
    let reg = match unsafe { HostRegistration::register_raw_on(ordinal, lo as *const u8, hi - lo) } {
        Ok(reg) => reg,
        // The driver said no to this range: the ring still works (a sticky error would fail it there too).
        Err(e) if matches!(e.status(), Status::DeviceError | Status::OutOfMemory) => {
            return Ok(Lookup::Refused(
                e.context(format!("registering tensor '{}' for resident transfers", view.name())),
            ))
        }
        Err(e) => return Err(e.context(format!("registering tensor '{}' for resident transfers", view.name()))),
    };
    let secs = t.elapsed().as_secs_f64();
    let r = Arc::new(Resident { reg, view: view.clone(), register_seconds: secs });
    let mut c = cache().lock();
    let r = Arc::clone(c.entry((a, len)).or_insert(r));
    Ok(Lookup::Ready(r, 0, ResidentStats { register_seconds: secs, reused: false }))
}

/// Copies `view` into `dst` from its registered mapping, in pieces of `piece` bytes (progress and cancel
/// between pieces). `Ok(None)`: the view partly overlaps cached registrations, is a read-only mapping the
/// device cannot register, or its registration was refused, and nothing was copied (the caller uses the
/// staging ring).
pub fn to_cuda(
    view: &View,
    dst: &DeviceMemory,
    piece: usize,
    progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<Option<ResidentStats>> {
    let total = view.nbytes();
    if !view.maps() {
        return Ok(None); // owned reads: the mapping is never registered; the staging ring reads with pread
    }
    let (res, base, stats) = match get(view, dst.ordinal())? {
        Lookup::Ready(r, base, s) => (r, base, s),
        Lookup::Overlaps | Lookup::ReadOnlyUnsupported | Lookup::Refused(_) => return Ok(None),
    };
    let mut progress = crate::engine::Progress::new(progress, total);
    crate::engine::device::pinned_to_device(&res, base, total as usize, dst, piece, &mut progress)?;
    progress.finish()?;
    Ok(Some(stats))
}
