//! The engine's writer side for device memory, as `buffer_to`, buffer reads, resident puts and CUDA gathers
//! use it: with the pinned staging ring for pageable host bytes ([`super::staging`], where CUDA puts' and
//! shards' tensors are streamed), the one place outside the CUDA layer (`src/device/cuda`) that calls its copies.
//!
//! Rules: pageable host memory never reaches the driver directly (it goes through the page-locked ring);
//! page-locked memory is copied as it is; every call is synchronous (the bytes are in place, visible to work
//! on any stream, when it returns).

use super::{Progress, Tuning};
use crate::device::cuda::DeviceMemory;
use crate::error::Result;

/// Where the bytes of a host-to-device copy are.
pub enum HostSource<'a> {
    /// Pageable memory: staged through the pinned ring.
    Pageable(&'a [u8]),
    /// Page-locked memory: copied by the driver straight from it.
    PageLocked(&'a [u8]),
}

/// Copies `src` into `dst` from offset 0 (which must hold it), reporting to `progress` (no final report: the
/// caller finishes it).
pub fn host_to_device(
    src: HostSource<'_>,
    dst: &DeviceMemory,
    tuning: &Tuning,
    progress: &mut Progress<'_>,
) -> Result<()> {
    match src {
        HostSource::PageLocked(s) => dst.copy_from_host(0, s),
        HostSource::Pageable(s) => {
            let cfg = super::staging::ring_config(tuning);
            let mut sink = |done: u64, _total: u64| progress.at(done).is_err();
            super::staging::transfer(
                s.len() as u64,
                dst,
                &cfg,
                |off, d| {
                    d.copy_from_slice(&s[off as usize..off as usize + d.len()]);
                    Ok(())
                },
                Some(&mut sink),
            )
        }
    }
}

/// Copies bytes `[offset, offset + dst.len())` of `src` into host memory (`cuMemcpyDtoH`, synchronous).
pub fn device_to_host(src: &DeviceMemory, offset: usize, dst: &mut [u8]) -> Result<()> {
    src.copy_to_host(offset, dst)
}

/// Copies `len` bytes of `src` from its start into `dst` from its start: on one device or peer to peer,
/// synchronous (see [`DeviceMemory::copy_from_device`]).
pub fn device_to_device(src: &DeviceMemory, dst: &DeviceMemory, len: usize) -> Result<()> {
    dst.copy_from_device(0, src, 0, len)
}

/// Enqueues a host-to-device copy (`cuMemcpyHtoDAsync_v2`) of `len` bytes at `src` of a page-locked slab to
/// offset `dst_off` of `dst`, on `stream`; both ranges are checked.
///
/// # Safety
/// The slab must stay alive and unwritten until an event recorded on `stream` after this call completes.
pub unsafe fn copy_from_slab_async(
    stream: &crate::device::cuda::Stream,
    slab: &crate::device::cuda::PinnedHostMemory,
    src: usize,
    dst_off: usize,
    len: usize,
    dst: &DeviceMemory,
) -> Result<()> {
    use crate::device::cuda::memory::check_range;
    let what = || {
        format!(
            "cuMemcpyHtoDAsync_v2(host -> cuda:{}, {} bytes from a staging slab to offset {} of a {}-byte load arena)",
            dst.ordinal(),
            len,
            dst_off,
            dst.len()
        )
    };
    check_range(&what(), src, len, slab.len())?;
    check_range(&what(), dst_off, len, dst.len())?;
    let api = crate::device::cuda::probe::api()?;
    let _current = dst.context().enter()?;
    // SAFETY: ranges checked; the caller keeps the slab alive and unwritten until the copy has completed.
    let r = unsafe {
        (api.memcpy_htod_async)(
            dst.device_ptr() + dst_off as u64,
            slab.as_ptr().add(src) as *const std::ffi::c_void,
            len,
            stream.raw(),
        )
    };
    api.check(r, what)
}

/// Copies `len` bytes of page-locked host bytes `src` from `src_off` to `dst` from offset 0, in pieces of
/// `piece` bytes (at least 1 MiB), up to four pieces queued at once on a stream of its own; each completed
/// piece is a progress point (`progress` gets offsets within `dst`; no final report, the caller finishes it).
/// Resident puts use it: `src` is a registered mapping ([`crate::place::resident::Resident`]), shared by the
/// pieces in flight. On an error or a cancel, the pieces already queued are waited for before it returns, so
/// nothing still reads `src` or writes `dst` afterwards.
pub fn pinned_to_device<B: crate::device::cuda::HostBytes + Clone>(
    src: &B,
    src_off: usize,
    len: usize,
    dst: &DeviceMemory,
    piece: usize,
    progress: &mut Progress<'_>,
) -> Result<()> {
    let stream = crate::device::cuda::Stream::new(dst.ordinal())?;
    let piece = piece.max(1 << 20);
    let mut queue = crate::device::cuda::CopyQueue::new();
    let mut completed = Vec::with_capacity(4);
    let (mut off, mut copied) = (0usize, 0usize);
    let mut result = Ok(());
    while result.is_ok() && copied < len {
        while result.is_ok() && off < len && queue.len() < 4 {
            let n = (len - off).min(piece);
            match stream.copy_to_device_async(src.clone(), src_off + off, dst, off, n) {
                Ok(f) => queue.push(n as u64, f),
                Err(e) => result = Err(e),
            }
            off += n;
        }
        if queue.is_empty() {
            break;
        }
        result = result.and(queue.wait_oldest(&mut completed));
        copied += completed.drain(..).map(|(n, _, _)| n as usize).sum::<usize>();
        if result.is_ok() && copied < len {
            result = progress.at(copied as u64);
        }
    }
    // On an error or a cancel, the pieces still queued are settled by the one rule before this returns.
    if !queue.settle_all(&mut completed) {
        dst.keep_after_error();
    }
    result
}

/// The gather's host-to-device step: copies the first `len` bytes of the page-locked `staging` to `dst` from
/// offset 0 on `stream` (the gather's own), records `ready` (the batch's event) after the copy, and returns
/// once both have completed. `Ok((staging, recorded))`: the staging buffer is free again, and `recorded` says
/// whether the event was recorded and reached (an error there leaves the batch's bytes in place but its event
/// unusable). `Err`: the copy could not be enqueued or completed, and the staging buffer is gone (dropped once
/// nothing can still read it; the caller allocates a new one).
pub fn staged_batch_to_device(
    stream: &crate::device::cuda::Stream,
    staging: crate::device::cuda::PinnedHostMemory,
    dst: &DeviceMemory,
    len: usize,
    ready: Option<&crate::device::cuda::Event>,
) -> Result<(crate::device::cuda::PinnedHostMemory, Result<()>)> {
    let inflight = stream.copy_to_device_async(staging, 0, dst, 0, len)?;
    let recorded = ready.map_or(Ok(()), |ev| ev.record(stream));
    let (staging, _) = inflight.finish().map_err(|f| {
        if !f.ended {
            dst.keep_after_error(); // the copy may still write the batch
        }
        f.error
    })?;
    Ok((staging, recorded.and_then(|()| ready.map_or(Ok(()), |ev| ev.synchronize()))))
}
