//! The engine's writer side for device memory, as `buffer_to` and buffer reads use it: the one place outside
//! the CUDA layer (`src/device/cuda`) that calls its synchronous copies, plus the pinned staging ring for
//! pageable host bytes ([`super::staging`], where CUDA puts' and shards' tensors are streamed too).
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
