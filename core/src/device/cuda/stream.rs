//! Streams, events and asynchronous copies.
//!
//! An asynchronous copy keeps using host memory after the call returns, so a borrowed slice cannot be lent
//! to it safely. Instead the copy takes the host buffer **by value** (anything implementing [`HostBytes`] /
//! [`HostBytesMut`]: [`PinnedHostMemory`], `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>`, ...) and returns it inside an
//! [`InFlight`], together with an event recorded right after the copy. [`InFlight::wait`] gives the buffer
//! back once the copy has completed; dropping an `InFlight` waits too. Errors follow the one rule of
//! [`super::inflight`]: an error seen by a query is kept for the wait, and after an error the buffer is
//! released only once the copy is known to have ended (leaked otherwise, never freed under a running DMA).
//!
//! Waiting never spins a core: events are created with `CU_EVENT_BLOCKING_SYNC`, so `cuEventSynchronize`
//! blocks the thread (the default spin-waits, which costs a core per waiting thread), and
//! [`Stream::synchronize`] waits on such an event rather than calling `cuStreamSynchronize` (which spins under
//! the primary context's default scheduling, a setting shared with other users of that context).

use super::driver::{self, is_sticky, CuResult, RawHandle, CUDA_SUCCESS};
use super::event::Event;
use super::inflight::{settle, Failed, InFlight};
use super::memory::{check_range, Context, DeviceMemory, PinnedHostMemory};
use super::probe::api;
use crate::error::{Error, Result, Status};
use std::ffi::c_void;
use std::sync::Arc;

/// A CUDA stream on one device (`cuStreamCreate` with `CU_STREAM_NON_BLOCKING`: no implicit synchronisation
/// with the legacy default stream), destroyed on drop (`cuStreamDestroy_v2`; work already queued still
/// completes). Operations on one stream run in order; different streams may overlap.
pub struct Stream {
    ctx: &'static Context,
    raw: RawHandle,
}

// SAFETY: a `CUstream` is a driver handle; the driver API is thread-safe, and enqueueing work on the same
// stream from several threads is allowed (the order between threads is then up to the callers). The handle
// is destroyed only in `Drop`, which has exclusive access.
unsafe impl Send for Stream {}
// SAFETY: see `Send`; every `&self` method is a thread-safe driver call.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a non-blocking stream on `cuda:<ordinal>` (retaining its primary context if needed).
    pub fn new(ordinal: u32) -> Result<Stream> {
        let ctx = Context::get(ordinal)?;
        let api = api()?;
        let _current = ctx.enter()?;
        let mut raw: RawHandle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device's context is current.
        let r = unsafe { (api.stream_create)(&mut raw, driver::STREAM_NON_BLOCKING) };
        api.check(r, || format!("cuStreamCreate(cuda:{ordinal}, non-blocking)"))?;
        Ok(Stream { ctx, raw })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ctx.ordinal()
    }

    /// The driver handle (`CUstream`), valid while `self` lives.
    pub(crate) fn raw(&self) -> RawHandle {
        self.raw
    }

    /// Blocks, without spinning, until everything queued on the stream so far has completed: records a
    /// blocking-sync event and waits for it (`cuStreamSynchronize` only when no event can be made). An error
    /// from any of that work is reported here as `DEVICE_ERROR`.
    pub fn synchronize(&self) -> Result<()> {
        if let Ok(ev) = Event::new(self.ordinal()) {
            if ev.record(self).is_ok() {
                return ev.synchronize();
            }
        }
        self.synchronize_whole().map_err(|(e, _)| e)
    }

    /// Makes work queued on this stream after this call wait until `event` has completed
    /// (`cuStreamWaitEvent`); the host does not wait. The event may belong to another device. Waiting on an
    /// event never recorded is a no-op.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: live stream and event handles; flags must be 0 (CU_EVENT_WAIT_DEFAULT).
        api.check(unsafe { (api.stream_wait_event)(self.raw, event.raw, 0) }, || {
            format!("cuStreamWaitEvent(stream on cuda:{}, event on cuda:{})", self.ordinal(), event.ordinal())
        })
    }

    fn same_device(&self, what: &str, other: u32) -> Result<()> {
        if other == self.ordinal() {
            return Ok(());
        }
        Err(Error::new(
            Status::InvalidArgument,
            format!("{what}: the memory is on cuda:{other} but the stream on cuda:{}", self.ordinal()),
        ))
    }

    /// After work was enqueued that uses `value` (a buffer lent to copies on this stream): records `event`
    /// after it and returns `value` in an [`InFlight`] that completes with that work. If the event cannot be
    /// recorded, the stream is synchronised instead and `value` released by rule 2 of [`super::inflight`]
    /// (leaked when that work may still run); [`Failed::ended`] says which.
    pub fn fence<B>(&self, value: B, event: Event) -> std::result::Result<InFlight<B>, Failed> {
        match event.record(self) {
            Ok(()) => Ok(InFlight::new(value, event)),
            Err(error) => {
                let ended = self.synchronize_settled().map_or_else(|f| f.ended, |()| true);
                if ended {
                    drop(value);
                } else {
                    std::mem::forget(value);
                }
                Err(Failed { error, ended })
            }
        }
    }

    /// [`Stream::synchronize`] under rule 2 of [`super::inflight`]: on an error, whether everything queued on
    /// the stream so far is known to have ended ([`Failed::ended`]; `false`: memory that work uses must not
    /// be freed).
    pub fn synchronize_settled(&self) -> std::result::Result<(), Failed> {
        let Ok(ev) = Event::new(self.ordinal()) else {
            return self.synchronize_whole().map_err(|(error, code)| Failed { error, ended: is_sticky(code) });
        };
        if let Err(error) = ev.record(self) {
            let ended = self.settled_after_failure();
            return Err(Failed { error, ended });
        }
        ev.synchronize_code().map_err(|(error, code)| Failed { error, ended: settle(&ev, code) })
    }

    /// After a failure with no event to wait on: whether `cuStreamSynchronize` establishes that the stream's
    /// work has ended (it succeeds, or reports a sticky error), trying [`super::inflight::RESYNC_TRIES`] times.
    fn settled_after_failure(&self) -> bool {
        for _ in 0..super::inflight::RESYNC_TRIES {
            match self.synchronize_whole() {
                Ok(()) => return true,
                Err((_, code)) if is_sticky(code) => return true,
                Err((_, CUDA_SUCCESS)) => return false,
                Err(_) => {}
            }
        }
        false
    }

    /// `cuStreamSynchronize`, with the driver's code on failure (`CUDA_SUCCESS` when CUDA itself is unusable).
    fn synchronize_whole(&self) -> std::result::Result<(), (Error, CuResult)> {
        let api = api().map_err(|e| (e, CUDA_SUCCESS))?;
        let _current = self.ctx.enter().map_err(|e| (e, CUDA_SUCCESS))?;
        // SAFETY: a live stream handle of the current context.
        let r = unsafe { (api.stream_synchronize)(self.raw) };
        api.check(r, || format!("cuStreamSynchronize(cuda:{})", self.ordinal())).map_err(|e| (e, r))
    }

    /// Enqueues a host-to-device copy of `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`
    /// (`cuMemcpyHtoDAsync_v2`) and returns `src` in an [`InFlight`] that completes with the copy.
    ///
    /// For the copy to be asynchronous `src` should be page-locked ([`PinnedHostMemory`], or memory covered
    /// by a [`super::HostRegistration`]); pageable memory works but the driver stages it synchronously.
    /// Errors: `OUT_OF_RANGE` (no copy enqueued) when either range does not fit; `INVALID_ARGUMENT` when `dst`
    /// is on another device than the stream; `DEVICE_ERROR` from the driver. On error `src` is dropped.
    pub fn copy_to_device_async<B: HostBytes>(
        &self,
        src: B,
        src_offset: usize,
        dst: &DeviceMemory,
        dst_offset: usize,
        len: usize,
    ) -> Result<InFlight<B>> {
        let what = || {
            format!(
                "cuMemcpyHtoDAsync_v2(host -> cuda:{}, {len} bytes from offset {src_offset} of a {}-byte host buffer to offset {dst_offset} of {})",
                dst.ordinal(),
                src.host_bytes().len(),
                dst.len()
            )
        };
        self.same_device(&what(), dst.ordinal())?;
        check_range(&what(), src_offset, len, src.host_bytes().len())?;
        check_range(&what(), dst_offset, len, dst.len())?;
        let ev = Event::new(self.ordinal())?;
        if len > 0 {
            let api = api()?;
            let _current = self.ctx.enter()?;
            let host = src.host_bytes()[src_offset..src_offset + len].as_ptr();
            // SAFETY: ranges checked; `src` is moved into the returned InFlight, which keeps it alive and
            // unmodified (HostBytes contract) until the event recorded after this copy completes.
            let r = unsafe {
                (api.memcpy_htod_async)(dst.device_ptr() + dst_offset as u64, host as *const c_void, len, self.raw)
            };
            api.check(r, what)?;
        }
        self.fence(src, ev).map_err(|f| {
            if !f.ended {
                dst.keep_after_error(); // the copy may still write it
            }
            f.error
        })
    }

    /// Enqueues a device-to-host copy of `len` bytes from `src` at `src_offset` into `dst` at `dst_offset`
    /// (`cuMemcpyDtoHAsync_v2`) and returns `dst` in an [`InFlight`]; its bytes are readable after
    /// [`InFlight::wait`]. Errors as for [`Stream::copy_to_device_async`]; on error `dst` is dropped.
    pub fn copy_to_host_async<B: HostBytesMut>(
        &self,
        src: &DeviceMemory,
        src_offset: usize,
        mut dst: B,
        dst_offset: usize,
        len: usize,
    ) -> Result<InFlight<B>> {
        let dst_len = dst.host_bytes_mut().len();
        let what = || {
            format!(
                "cuMemcpyDtoHAsync_v2(cuda:{} -> host, {len} bytes from offset {src_offset} of {} to offset {dst_offset} of a {dst_len}-byte host buffer)",
                src.ordinal(),
                src.len()
            )
        };
        self.same_device(&what(), src.ordinal())?;
        check_range(&what(), src_offset, len, src.len())?;
        check_range(&what(), dst_offset, len, dst_len)?;
        let ev = Event::new(self.ordinal())?;
        if len > 0 {
            let api = api()?;
            let _current = self.ctx.enter()?;
            let host = dst.host_bytes_mut()[dst_offset..dst_offset + len].as_mut_ptr();
            // SAFETY: ranges checked; `dst` is moved into the returned InFlight, which hands it out again only
            // after the event recorded after this copy has completed (HostBytesMut contract: the address is
            // stable across the move and nobody else can reach the bytes meanwhile).
            let r = unsafe {
                (api.memcpy_dtoh_async)(host as *mut c_void, src.device_ptr() + src_offset as u64, len, self.raw)
            };
            api.check(r, what)?;
        }
        self.fence(dst, ev).map_err(Error::from)
    }

    /// Enqueues setting every byte of `dst` to `value` (`cuMemsetD8Async`): later work on this stream sees
    /// it; other streams and the host must wait for an event recorded after it. Errors: `INVALID_ARGUMENT`
    /// when `dst` is on another device than the stream; `DEVICE_ERROR` from the driver.
    pub fn memset_async(&self, dst: &DeviceMemory, value: u8) -> Result<()> {
        let what = || format!("cuMemsetD8Async(cuda:{}, {value:#x}, {} bytes)", dst.ordinal(), dst.len());
        self.same_device(&what(), dst.ordinal())?;
        if dst.is_empty() {
            return Ok(());
        }
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: a live allocation of this stream's device, its whole length; no host memory involved.
        let r = unsafe { (api.memset_d8_async)(dst.device_ptr(), value, dst.len(), self.raw) };
        api.check(r, what)
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream(cuda:{}, {:p})", self.ordinal(), self.raw)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            if let Ok(_current) = self.ctx.enter() {
                // SAFETY: created by cuStreamCreate, destroyed exactly once, here.
                let _ = unsafe { (api.stream_destroy)(self.raw) };
            }
        }
    }
}

/// Recording an event on a stream (the rest of [`Event`] is in `event.rs`).
impl Event {
    /// Records the event on `stream` (`cuEventRecord`): it completes when all work queued on the stream so far
    /// has. `INVALID_ARGUMENT` when the stream is on another device.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        if stream.ordinal() != self.ordinal() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "cuEventRecord: the event is on cuda:{} but the stream on cuda:{}",
                    self.ordinal(),
                    stream.ordinal()
                ),
            ));
        }
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: live event and stream handles of the same (current) context.
        api.check(unsafe { (api.event_record)(self.raw, stream.raw) }, || {
            format!("cuEventRecord(cuda:{})", self.ordinal())
        })
    }
}

/// Host bytes an asynchronous host-to-device copy may read after the call that enqueued it returns.
///
/// # Safety
/// Implementors guarantee that `host_bytes` returns the same memory every time it is called on a value, that
/// this memory stays valid and is not written through any path while the value is alive, and that moving
/// the value does not move the memory (it lives on the heap or in a mapping, not inline).
pub unsafe trait HostBytes: Send + 'static {
    /// The bytes.
    fn host_bytes(&self) -> &[u8];
}

/// Host bytes an asynchronous device-to-host copy may write after the call that enqueued it returns.
///
/// # Safety
/// As [`HostBytes`], and nothing but the holder of the value can read or write the memory.
pub unsafe trait HostBytesMut: Send + 'static {
    /// The bytes, writable.
    fn host_bytes_mut(&mut self) -> &mut [u8];
}

// SAFETY: the allocation is owned by the value, heap-allocated (not moved with it) and reachable only
// through it; `&self` access cannot write.
unsafe impl HostBytes for PinnedHostMemory {
    fn host_bytes(&self) -> &[u8] {
        self.as_slice()
    }
}
// SAFETY: as above; `&mut self` is the only access.
unsafe impl HostBytesMut for PinnedHostMemory {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}
// SAFETY: a Vec's buffer is on the heap and stays put while the Vec is moved and not resized; nothing can
// resize or write it while the InFlight owns it.
unsafe impl HostBytes for Vec<u8> {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: as above, with exclusive ownership.
unsafe impl HostBytesMut for Vec<u8> {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}
// SAFETY: heap allocation owned by the box.
unsafe impl HostBytes for Box<[u8]> {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: heap allocation owned exclusively by the box.
unsafe impl HostBytesMut for Box<[u8]> {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}
// SAFETY: shared and immutable while any clone (including the InFlight's) lives.
unsafe impl HostBytes for Arc<[u8]> {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: the pointee is shared and never mutably reachable while the InFlight holds a clone; it satisfies
// HostBytes itself, and `Sync` makes reading it from the driver thread fine.
unsafe impl<T: HostBytes + Sync> HostBytes for Arc<T> {
    fn host_bytes(&self) -> &[u8] {
        (**self).host_bytes()
    }
}
// SAFETY: static memory is never freed; `&'static [u8]` cannot be written.
unsafe impl HostBytes for &'static [u8] {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn thread_safety_markers() {
        assert_send_sync::<Stream>();
        assert_send_sync::<Event>();
        assert_send_sync::<InFlight<Vec<u8>>>();
    }

    #[test]
    fn without_a_driver_streams_are_unavailable() {
        if super::super::status().status == crate::device::types::BackendStatus::Available {
            return;
        }
        assert_eq!(Stream::new(0).err().map(|e| e.status()), Some(Status::Unavailable));
        assert_eq!(Event::new(0).err().map(|e| e.status()), Some(Status::Unavailable));
    }

    #[test]
    fn host_bytes_views() {
        let v = vec![1u8, 2, 3];
        assert_eq!(v.host_bytes(), &[1, 2, 3]);
        let a: Arc<[u8]> = Arc::from(vec![4u8, 5]);
        assert_eq!(a.host_bytes(), &[4, 5]);
        let s: &'static [u8] = b"xyz";
        assert_eq!(s.host_bytes(), b"xyz");
        let mut b: Box<[u8]> = vec![0u8; 2].into_boxed_slice();
        b.host_bytes_mut()[1] = 9;
        assert_eq!(&*b, &[0, 9]);
    }
}
