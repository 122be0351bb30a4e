//! The one rule for errors of asynchronous CUDA work. Every path that queues work on a stream follows it
//! through the types of this module — puts ([`crate::engine::staging`]), loads ([`crate::place::arena`]),
//! resident puts, gathers, the synchronous copies of [`super::copy`] — and so must any later one:
//!
//! 1. **An error seen is never lost, and never counted as success.** The driver reports an error that is not
//!    sticky once, to whichever query (`cuEventQuery`), wait or synchronise of the context comes first. So
//!    whoever sees it keeps it: [`InFlight::is_done`] latches it for [`InFlight::finish`] / [`InFlight::wait`],
//!    and a [`CopyQueue`] stops at the first copy that reported one. A copy counts as done only when its own
//!    completion was observed without an error.
//! 2. **Memory is released only once nothing can still use it.** After an error, the memory a copy reads or
//!    writes is released when the copy is known to have ended: at once after a sticky error (the context runs
//!    nothing any more), else as soon as a further synchronisation succeeds or turns sticky ([`settle`]).
//!    When none of [`RESYNC_TRIES`] more does, host memory is leaked and device memory marked so that dropping
//!    it leaks it ([`super::DeviceMemory::keep_after_error`]): never freed under a transfer that may still run.
//!    [`Failed::ended`] carries that verdict to whoever owns the rest of a job's memory.
//! 3. **A failed job then frees everything else** (staging, events, streams, device memory) as a successful
//!    one would: a failure leaks only what rule 2 could not settle.

use super::driver::{is_sticky, CuResult, CUDA_SUCCESS};
use super::event::Event;
use crate::error::{Error, Result};
use std::collections::VecDeque;

/// How many more synchronisations [`settle`] tries before it gives the work up as possibly still running.
pub const RESYNC_TRIES: usize = 8;

/// After a wait on `event` failed with the driver's `code`: whether the work the event follows is known to
/// have ended (rule 2 of this module). A sticky error ends all work of the context. An error that is not
/// sticky says nothing about that work (it is reported once, maybe for other work of the context), so the
/// event is synchronised again until one synchronisation succeeds or reports a sticky error, at most
/// [`RESYNC_TRIES`] times; `false` when none does or CUDA itself became unusable (no driver code to judge).
pub(crate) fn settle(event: &Event, code: CuResult) -> bool {
    if is_sticky(code) {
        return true;
    }
    for _ in 0..RESYNC_TRIES {
        match event.synchronize_code() {
            Ok(()) => return true,
            Err((_, code)) if is_sticky(code) => return true,
            Err((_, CUDA_SUCCESS)) => return false,
            Err(_) => {}
        }
    }
    false
}

/// A failed wait: the error, and whether the work it belongs to is known to have ended ([`settle`]'s verdict;
/// `false`: memory that work uses must not be freed).
#[derive(Debug)]
pub struct Failed {
    /// What failed.
    pub error: Error,
    /// Whether the failed work is known to have ended.
    pub ended: bool,
}

impl From<Failed> for Error {
    fn from(f: Failed) -> Error {
        f.error
    }
}

/// A host buffer lent to an asynchronous copy, returned by [`InFlight::wait`] once the copy has completed.
/// Dropping an `InFlight` waits too. After a driver error the buffer is released once the copy is known to
/// have ended and leaked otherwise (rule 2 of this module); forgetting an `InFlight` (`mem::forget`) leaks
/// it, which is safe for the same reason (the buffer types are `'static`: no borrowed memory).
#[must_use = "dropping an InFlight blocks until its copy completes; call wait() to get the buffer back"]
pub struct InFlight<B> {
    /// The buffer and the event recorded after its copy; `None` once finished.
    pending: Option<(B, Event)>,
    /// An error [`InFlight::is_done`] got from the driver, kept for [`InFlight::finish`] (rule 1).
    failed: Option<(Error, CuResult)>,
}

impl<B> InFlight<B> {
    /// `value` lent to work queued before `event` was recorded (see [`super::Stream::fence`]).
    pub(crate) fn new(value: B, event: Event) -> InFlight<B> {
        InFlight { pending: Some((value, event)), failed: None }
    }

    /// `Ok(true)` once the copy has completed (then [`InFlight::wait`] returns without blocking). An error is
    /// kept and returned again by [`InFlight::finish`] / [`InFlight::wait`], which never report success
    /// after it.
    pub fn is_done(&mut self) -> Result<bool> {
        if let Some((e, _)) = &self.failed {
            return Err(e.clone());
        }
        let (_, event) = self.pending.as_ref().expect("an InFlight is pending until finished");
        event.query_code().map_err(|(e, code)| {
            self.failed = Some((e.clone(), code));
            e
        })
    }

    /// The event recorded after the copy (e.g. to make another stream wait for it later).
    pub fn event(&self) -> &Event {
        &self.pending.as_ref().expect("an InFlight is pending until finished").1
    }

    /// Blocks until the copy has completed and returns the buffer. On a driver error (seen now or by an
    /// earlier [`InFlight::is_done`]) the error is returned and the buffer released by rule 2.
    pub fn wait(self) -> Result<B> {
        self.finish().map(|(b, _)| b).map_err(Error::from)
    }

    /// [`InFlight::wait`], also giving back the event (to record again), and on failure whether the copy is
    /// known to have ended (its buffer was then released; else it was leaked).
    pub fn finish(mut self) -> std::result::Result<(B, Event), Failed> {
        let (value, event) = self.pending.take().expect("an InFlight is pending until finished");
        let r = match self.failed.take() {
            Some(failed) => Err(failed),
            None => event.synchronize_code(),
        };
        match r {
            Ok(()) => Ok((value, event)),
            Err((error, code)) => {
                let ended = settle(&event, code);
                if ended {
                    drop(value);
                } else {
                    std::mem::forget(value);
                }
                Err(Failed { error, ended })
            }
        }
    }
}

impl<B> std::fmt::Debug for InFlight<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.pending {
            Some((_, event)) => write!(f, "InFlight({event:?})"),
            None => write!(f, "InFlight(finished)"),
        }
    }
}

impl<B> Drop for InFlight<B> {
    fn drop(&mut self) {
        if self.pending.is_some() {
            let this = InFlight { pending: self.pending.take(), failed: self.failed.take() };
            let _ = this.finish();
        }
    }
}

/// The copies a ring has in flight on one stream, oldest first, each with the bytes it counts for: the one
/// place where a ring learns that a copy ended (rule 1 of this module) and where a failed ring settles what
/// it still has in flight (rule 2).
pub struct CopyQueue<B> {
    queue: VecDeque<(u64, InFlight<B>)>,
    /// Whether every copy that failed so far is known to have ended.
    settled: bool,
}

impl<B> Default for CopyQueue<B> {
    fn default() -> Self {
        CopyQueue { queue: VecDeque::new(), settled: true }
    }
}

impl<B> CopyQueue<B> {
    /// An empty queue.
    pub fn new() -> CopyQueue<B> {
        CopyQueue::default()
    }

    /// Copies in flight.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no copy is in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Adds a copy (the newest) counting for `bytes`.
    pub fn push(&mut self, bytes: u64, copy: InFlight<B>) {
        self.queue.push_back((bytes, copy));
    }

    /// A copy that could not be fenced (see [`super::Stream::fence`]): counts towards [`CopyQueue::settled`].
    pub fn note(&mut self, failed: Failed) -> Error {
        self.settled &= failed.ended;
        failed.error
    }

    /// Takes every copy that has completed, oldest first, and appends its bytes, buffer and event to `done`.
    /// The first copy whose query or wait reports an error stops it: that copy is finished by rule 2 and its
    /// error returned; the copies after it stay queued.
    pub fn reap(&mut self, done: &mut Vec<(u64, B, Event)>) -> Result<()> {
        while let Some((_, front)) = self.queue.front_mut() {
            match front.is_done() {
                Ok(false) => break,
                Ok(true) | Err(_) => self.finish_oldest(done)?, // an error is latched: finish returns it
            }
        }
        Ok(())
    }

    /// Waits for the oldest copy (none: nothing to do) and appends it to `done`; its error otherwise.
    pub fn wait_oldest(&mut self, done: &mut Vec<(u64, B, Event)>) -> Result<()> {
        if self.queue.is_empty() {
            return Ok(());
        }
        self.finish_oldest(done)
    }

    fn finish_oldest(&mut self, done: &mut Vec<(u64, B, Event)>) -> Result<()> {
        let (bytes, copy) = self.queue.pop_front().expect("a copy in flight");
        match copy.finish() {
            Ok((value, event)) => {
                done.push((bytes, value, event));
                Ok(())
            }
            Err(f) => Err(self.note(f)),
        }
    }

    /// After a failure: waits for every copy still queued (completed ones are appended to `done`, failed ones
    /// are finished by rule 2) and says whether every copy that failed in this queue's life is known to have
    /// ended. Copies on one stream run in order, so `true` means nothing queued through this queue can still
    /// use any memory: the job may free all of it.
    pub fn settle_all(&mut self, done: &mut Vec<(u64, B, Event)>) -> bool {
        while !self.queue.is_empty() {
            let _ = self.finish_oldest(done);
        }
        self.settled
    }

    /// Whether every copy that failed so far is known to have ended.
    pub fn settled(&self) -> bool {
        self.settled
    }
}

impl<B> Drop for CopyQueue<B> {
    fn drop(&mut self) {
        self.settle_all(&mut Vec::new());
    }
}
