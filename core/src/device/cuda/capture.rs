//! CUDA calls made where hostfirst does not choose the moment: a DLPack deleter runs when the consumer lets go of
//! a tensor (a garbage collector, on any thread, at any time), possibly while another framework is capturing a
//! CUDA graph.
//!
//! During stream capture CUDA restricts calls made next to it: a "potentially unsafe" call (an allocation, a
//! free, ...) from a thread whose capture interaction mode is global invalidates another thread's global-mode
//! capture (`torch.cuda.graph` captures in global mode), and some calls conflict with a capture whatever the
//! mode (using the legacy default stream while a blocking stream captures; synchronising the context). So the
//! release a deleter performs (an event recorded on the legacy default stream, the last reference to device or
//! page-locked memory dropped, which frees it) goes through [`release_or_defer`]:
//!
//! - its CUDA calls run with the calling thread's interaction mode set to relaxed
//!   (`cuThreadExchangeStreamCaptureMode`, restored afterwards): the mode CUDA provides so that a library's
//!   calls do not invalidate someone else's capture;
//! - first it asks whether a capture it would conflict with is running: `cuStreamIsCapturing` on the legacy
//!   default stream of every device whose primary context this process holds (which reports a capture on any
//!   blocking stream of that context) and on the calling thread's per-thread default stream. When one is seen,
//!   or when the driver will not answer, nothing is called now: the release is kept and done at the next safe
//!   point ([`safe_point`]) that sees no capture: the next outermost hostfirst C call, or the next export,
//!   gather run, load, DLPack release or `release_cached_memory` through the Rust API. Until then the memory
//!   stays allocated and, for a gather batch, out of the ring.
//!
//! A capture on a non-blocking stream (torch's capture stream is one) cannot be seen from outside by any driver
//! call; the relaxed mode is what keeps the deleter's calls from invalidating it. A deleter must not be called
//! from a CUDA host callback (`cuLaunchHostFunc`), where CUDA forbids every driver call: no framework does.
//!
//! In a child forked after CUDA was initialised nothing is kept: dropping a release makes no driver call there.

use super::driver::{is_sticky, Api, CUDA_SUCCESS};
use super::memory::Context;
use super::probe::api;
use crate::forksafe::GlobalMutex;
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: c_int = 2;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_STATUS_NONE: c_int = 0;
/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`, as stream handles.
const DEFAULT_STREAMS: [usize; 2] = [1, 2];

/// Releases kept while a capture was seen, done at the next safe point.
pub(crate) static DEFERRED: GlobalMutex<Vec<Box<dyn Send>>> = GlobalMutex::new(Vec::new());
/// How many releases [`DEFERRED`] holds (read without the lock on every safe point).
static PENDING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread runs releases: a release that reaches a safe point does not drain again.
    static RELEASING: Cell<bool> = const { Cell::new(false) };
}

/// While alive, the calling thread's stream capture interaction mode is relaxed; the previous one is restored
/// on drop.
struct Relaxed {
    api: &'static Api,
    previous: c_int,
}

impl Relaxed {
    /// `None` when the driver refuses the exchange (then nothing else is called either).
    fn enter(api: &'static Api) -> Option<Relaxed> {
        let mut mode = CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in/out pointer to a CUstreamCaptureMode.
        let r = unsafe { (api.thread_exchange_stream_capture_mode)(&mut mode) };
        (r == CUDA_SUCCESS).then_some(Relaxed { api, previous: mode })
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: as in `enter`; restores what the thread had.
        let _ = unsafe { (self.api.thread_exchange_stream_capture_mode)(&mut mode) };
    }
}

/// True when a capture the releases could conflict with is running in a context this process holds, or when
/// the driver does not say (see the module documentation); a context poisoned by a sticky error counts as not
/// capturing (releases in it fail harmlessly, and kept ones would never be done). Called in relaxed mode.
fn capture_seen(api: &'static Api) -> bool {
    for ctx in Context::retained() {
        let Ok(_current) = ctx.enter() else { return true };
        for stream in DEFAULT_STREAMS {
            let mut status: c_int = CAPTURE_STATUS_NONE;
            // SAFETY: a default stream handle of the current context and a valid out-pointer.
            let r = unsafe { (api.stream_is_capturing)(stream as super::driver::RawHandle, &mut status) };
            // A sticky error: the context is dead, every call in it fails harmlessly and no capture runs there.
            if is_sticky(r) {
                break;
            }
            if r != CUDA_SUCCESS || status != CAPTURE_STATUS_NONE {
                return true;
            }
        }
    }
    false
}

/// Drops `release` (whose drop makes the deleter's CUDA calls) now when that is safe, else keeps it for the
/// next [`safe_point`]; see the module documentation. Releases kept earlier are done too when no capture is
/// seen now.
pub fn release_or_defer<T: Send + 'static>(release: T) {
    let Ok(api) = api() else {
        drop(release); // no CUDA here (or a forked child): the drop makes no driver call
        return;
    };
    let was = RELEASING.with(|r| r.replace(true));
    let relaxed = Relaxed::enter(api);
    if relaxed.is_none() || capture_seen(api) {
        drop(relaxed);
        RELEASING.with(|r| r.set(was));
        defer(Box::new(release));
        return;
    }
    drop(release);
    if !was {
        drain();
    }
    drop(relaxed);
    RELEASING.with(|r| r.set(was));
}

fn defer(release: Box<dyn Send>) {
    let mut kept = DEFERRED.lock();
    kept.push(release);
    PENDING.store(kept.len(), Ordering::Release);
}

/// Does every kept release (the caller checked that no capture is seen, in relaxed mode).
fn drain() {
    let kept = {
        let mut kept = DEFERRED.lock();
        PENDING.store(0, Ordering::Release);
        std::mem::take(&mut *kept)
    };
    drop(kept);
}

/// A safe point: does the releases [`release_or_defer`] kept, unless a capture is still seen. Costs one atomic
/// load when none is kept. Call it only where the calling thread holds no hostfirst lock (a release locks the
/// buffer it releases).
pub fn safe_point() {
    if PENDING.load(Ordering::Acquire) == 0 || RELEASING.with(|r| r.get()) {
        return;
    }
    let Ok(api) = api() else { return };
    RELEASING.with(|r| r.set(true));
    if let Some(relaxed) = Relaxed::enter(api) {
        if !capture_seen(api) {
            drain();
        }
        drop(relaxed);
    }
    RELEASING.with(|r| r.set(false));
}

/// Runs `f` with the calling thread's capture interaction mode relaxed, telling it whether a capture its CUDA
/// calls could conflict with is seen now (`true` also when the driver does not say): then `f` must make none.
/// Without CUDA, `f(false)`. For C calls a garbage collector makes (a finalizer recording a consumer's stream
/// before it frees a buffer, see `hostfirst_buffer_record_stream`).
pub fn with_relaxed<R>(f: impl FnOnce(bool) -> R) -> R {
    let Ok(api) = api() else { return f(false) };
    let was = RELEASING.with(|r| r.replace(true));
    let relaxed = Relaxed::enter(api);
    let seen = relaxed.is_none() || capture_seen(api);
    let r = f(seen);
    drop(relaxed);
    RELEASING.with(|r| r.set(was));
    r
}

/// How many releases are kept for the next safe point (for tests and diagnostics).
pub fn deferred_releases() -> usize {
    PENDING.load(Ordering::Acquire)
}
