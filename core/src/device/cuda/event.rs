//! CUDA events: completion markers recorded on streams, queried, waited on and made to gate other streams.
//! Recording one on hostfirst's own [`super::Stream`] is in `stream.rs` (`Event::record`); everything else an
//! event does is here, so the one error rule ([`super::inflight`]) and the streams both build on this file.

use super::driver::{self, CuResult, RawHandle, CUDA_ERROR_NOT_READY, CUDA_SUCCESS};
use super::memory::Context;
use super::probe::api;
use crate::error::{Error, Result};

/// A CUDA event (`cuEventCreate` with `CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC`), destroyed on drop
/// (`cuEventDestroy_v2`). Used to know when work queued on a stream has completed, or to make another stream
/// wait for it ([`super::Stream::wait_event`]). Recording on one of hostfirst's streams is
/// [`Event::record`], in `stream.rs` beside the streams.
pub struct Event {
    pub(super) ctx: &'static Context,
    pub(super) raw: RawHandle,
}

// SAFETY: a `CUevent` is a driver handle; recording, querying and synchronising are thread-safe driver calls.
// It is destroyed only in `Drop`, which has exclusive access.
unsafe impl Send for Event {}
// SAFETY: see `Send`.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event on `cuda:<ordinal>` (retaining its primary context if needed).
    pub fn new(ordinal: u32) -> Result<Event> {
        let ctx = Context::get(ordinal)?;
        let api = api()?;
        let _current = ctx.enter()?;
        let mut raw: RawHandle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device's context is current.
        let r = unsafe { (api.event_create)(&mut raw, driver::EVENT_FLAGS) };
        api.check(r, || format!("cuEventCreate(cuda:{ordinal}, disable-timing | blocking-sync)"))?;
        Ok(Event { ctx, raw })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ctx.ordinal()
    }

    /// Records the event on a stream that hostfirst did not create, given as its raw `CUstream` value: a
    /// consumer's stream, or `CU_STREAM_LEGACY` (1) / `CU_STREAM_PER_THREAD` (2) for the default streams of
    /// this event's context (2 names the *calling thread's* per-thread stream). A `CUstream` must be a live
    /// stream of this event's device: the driver does not validate stream handles, and a destroyed or
    /// foreign one is undefined behaviour there (a crash, a record on an unrelated stream, a poisoned
    /// context), so callers document that contract rather than rely on an error.
    pub fn record_on_raw(&self, stream: usize) -> Result<()> {
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: a live event; the stream value is the caller's, who must keep it a live stream of this
        // device (documented at every entry point that takes one).
        api.check(unsafe { (api.event_record)(self.raw, stream as RawHandle) }, || {
            format!("cuEventRecord(cuda:{}, consumer stream {stream:#x})", self.ordinal())
        })
    }

    /// Makes a stream hostfirst did not create (raw `CUstream` value, with the contract of
    /// [`Event::record_on_raw`]) wait until this event has completed (`cuStreamWaitEvent`, entered in this
    /// event's context); the host is not blocked.
    pub fn make_raw_stream_wait(&self, stream: usize) -> Result<()> {
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: as in `record_on_raw`.
        api.check(unsafe { (api.stream_wait_event)(stream as RawHandle, self.raw, 0) }, || {
            format!("cuStreamWaitEvent(consumer stream {stream:#x}, event of cuda:{})", self.ordinal())
        })
    }

    /// `Ok(true)` when the recorded work has completed (or the event was never recorded), `Ok(false)` while it
    /// is still running (`CUDA_ERROR_NOT_READY`), `DEVICE_ERROR` for any other result (`cuEventQuery`).
    pub fn query(&self) -> Result<bool> {
        self.query_code().map_err(|(e, _)| e)
    }

    /// [`Event::query`], also giving the driver's code on failure.
    pub(crate) fn query_code(&self) -> std::result::Result<bool, (Error, CuResult)> {
        let api = api().map_err(|e| (e, CUDA_SUCCESS))?;
        let _current = self.ctx.enter().map_err(|e| (e, CUDA_SUCCESS))?;
        // SAFETY: a live event handle.
        let r = unsafe { (api.event_query)(self.raw) };
        if r == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        api.check(r, || format!("cuEventQuery(cuda:{})", self.ordinal())).map_err(|e| (e, r))?;
        Ok(true)
    }

    /// Blocks (without spinning) until the recorded work has completed (`cuEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.synchronize_code().map_err(|(e, _)| e)
    }

    /// [`Event::synchronize`], also giving the driver's code: `Ok(CUDA_SUCCESS)`, or the `DEVICE_ERROR` and the
    /// failing code.
    pub(crate) fn synchronize_code(&self) -> std::result::Result<(), (Error, CuResult)> {
        let api = api().map_err(|e| (e, CUDA_SUCCESS))?;
        let _current = self.ctx.enter().map_err(|e| (e, CUDA_SUCCESS))?;
        // SAFETY: a live event handle.
        let r = unsafe { (api.event_synchronize)(self.raw) };
        api.check(r, || format!("cuEventSynchronize(cuda:{})", self.ordinal())).map_err(|e| (e, r))
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event(cuda:{}, {:p})", self.ordinal(), self.raw)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            if let Ok(_current) = self.ctx.enter() {
                // SAFETY: created by cuEventCreate, destroyed exactly once, here.
                let _ = unsafe { (api.event_destroy)(self.raw) };
            }
        }
    }
}
