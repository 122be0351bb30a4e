//! Synchronous copies into, out of and between device allocations: when a call returns, the bytes are in place
//! and visible to work on any stream.
//!
//! Why not the driver's synchronous forms alone? `cuMemcpyDtoD_v2` and `cuMemcpyPeer` return before the copy
//! runs (device-to-device copies do not synchronise with the host), and `cuMemcpyHtoD_v2` from pageable memory
//! returns once the bytes are staged; the copy then waits on the legacy default stream, where work on a
//! non-blocking stream (ours, or a consumer's) does not wait for it. So these copies run on a short-lived
//! stream of the destination's device and are waited for with a blocking-sync event. Reads to the host
//! (`cuMemcpyDtoH_v2`) return complete and stay as they are.

use super::memory::{check_range, DeviceMemory};
use super::probe::api;
use super::stream::Stream;
use crate::error::{Error, Result, Status};
use std::ffi::c_void;

impl DeviceMemory {
    /// Copies `src` into this allocation at `offset`, synchronously: when it returns, the bytes are in device
    /// memory, visible to work on any stream, and `src` may be reused. `src` may be pageable, pinned or
    /// registered memory.
    ///
    /// Enqueued on a stream of its own (`cuMemcpyHtoDAsync_v2`) and waited for with a blocking-sync event: the
    /// plain `cuMemcpyHtoD_v2` returns once pageable bytes are *staged*, with the DMA still queued on the
    /// legacy default stream, where a reader on a non-blocking stream would not wait for it.
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        let what = || {
            format!(
                "cuMemcpyHtoDAsync_v2(host -> cuda:{}, {} bytes at offset {offset} of {})",
                self.ordinal(),
                src.len(),
                self.len()
            )
        };
        check_range(&what(), offset, src.len(), self.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let api = api()?;
        let stream = Stream::new(self.ordinal())?;
        let _current = self.context().enter()?;
        // SAFETY: the range was checked against the allocation; `src` is a live borrow of src.len() bytes, and
        // the stream is synchronised below before `src` is released (on every path: `synchronized` waits).
        let r = unsafe {
            (api.memcpy_htod_async)(
                self.device_ptr() + offset as u64,
                src.as_ptr() as *const c_void,
                src.len(),
                stream.raw(),
            )
        };
        let enqueued = api.check(r, what);
        enqueued.and(self.settle_copy(&stream, what))
    }

    /// Waits for the copy just queued on `stream` into this memory, under the one rule of
    /// [`super::inflight`]: after an error the stream is synchronised again until the copy is known to have
    /// ended (so nothing reads a borrowed source any more when this returns), and if that cannot be
    /// established this memory is kept from being freed ([`DeviceMemory::keep_after_error`]).
    fn settle_copy(&self, stream: &Stream, what: impl Fn() -> String) -> Result<()> {
        stream.synchronize_settled().map_err(|f| {
            if !f.ended {
                self.keep_after_error();
            }
            f.error.context(what())
        })
    }

    /// Copies `dst.len()` bytes from this allocation at `offset` into `dst`, synchronously (`cuMemcpyDtoH_v2`).
    /// On failure the contents of `dst` are unspecified.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let len = dst.len();
        let what = || {
            format!(
                "cuMemcpyDtoH_v2(cuda:{} -> host, {len} bytes at offset {offset} of {})",
                self.ordinal(),
                self.len()
            )
        };
        check_range(&what(), offset, len, self.len())?;
        if len == 0 {
            return Ok(());
        }
        let api = api()?;
        let _current = self.context().enter()?;
        // SAFETY: range checked; `dst` is an exclusive borrow of `len` bytes, written only until the
        // synchronous copy returns.
        let r = unsafe { (api.memcpy_dtoh)(dst.as_mut_ptr() as *mut c_void, self.device_ptr() + offset as u64, len) };
        api.check(r, what)
    }

    /// Copies `len` bytes from `src` at `src_offset` into this allocation at `dst_offset`, synchronously: when it
    /// returns the bytes are in place, visible to work on any stream. Overlapping ranges are not allowed
    /// (`INVALID_ARGUMENT`).
    ///
    /// On one device `cuMemcpyDtoDAsync_v2`, between two `cuMemcpyPeerAsync` after enabling peer access where
    /// the devices allow it (else the driver stages through host memory itself), on a stream of this device,
    /// waited for with a blocking-sync event. Device-to-device copies are asynchronous to the host even in
    /// their "synchronous" forms (`cuMemcpyDtoD_v2`, `cuMemcpyPeer` return before the copy runs, queued on the
    /// legacy default stream), so without the wait a consumer reading on a non-blocking stream could see the
    /// bytes before they land.
    pub fn copy_from_device(&self, dst_offset: usize, src: &DeviceMemory, src_offset: usize, len: usize) -> Result<()> {
        let peer = src.ordinal() != self.ordinal();
        let call = if peer { "cuMemcpyPeerAsync" } else { "cuMemcpyDtoDAsync_v2" };
        let what = || {
            format!(
                "{call}(cuda:{} -> cuda:{}, {len} bytes from offset {src_offset} of {} to offset {dst_offset} of {})",
                src.ordinal(),
                self.ordinal(),
                src.len(),
                self.len()
            )
        };
        check_range(&what(), src_offset, len, src.len())?;
        check_range(&what(), dst_offset, len, self.len())?;
        if len == 0 {
            return Ok(());
        }
        let (s, d) = (src.device_ptr() + src_offset as u64, self.device_ptr() + dst_offset as u64);
        if s < d + len as u64 && d < s + len as u64 {
            return Err(Error::new(Status::InvalidArgument, format!("{}: source and destination overlap", what())));
        }
        let api = api()?;
        if peer {
            self.context().enable_peer_access(src.context());
        }
        let stream = Stream::new(self.ordinal())?;
        let _current = self.context().enter()?;
        // SAFETY: both ranges checked against live allocations (borrowed until the stream is synchronised
        // below), each in its own device's retained primary context; the stream belongs to the current one.
        let r = unsafe {
            if peer {
                (api.memcpy_peer_async)(d, self.context().raw(), s, src.context().raw(), len, stream.raw())
            } else {
                (api.memcpy_dtod_async)(d, s, len, stream.raw())
            }
        };
        let enqueued = api.check(r, what);
        enqueued.and(self.settle_copy(&stream, what))
    }
}
