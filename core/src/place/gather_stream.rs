//! Batches prefetched while the step runs: a background worker runs a gather over a sequence of offset sets,
//! keeping up to `depth` filled batches ready ahead of the consumer.
//!
//! The worker calls the gather's run for batch 0, 1, ... in order (for CUDA that includes the host-to-device
//! copy through the gather's staging buffer on its stream) and queues each filled batch; [`GatherStream::next_batch`]
//! hands them out in order. Queued batches are references to ring batches, so the ring's ownership rule holds
//! unchanged: a batch queued or held by the consumer is never refilled. The worker waits while `depth` batches
//! are ready; when the ring is at its bound with every batch held (`BUSY`), it waits for the consumer to release
//! one — unless nothing is queued, in which case the consumer holds every batch and waiting would never end: the
//! stream then ends with that `BUSY`.
//!
//! A failure of a run (I/O, truncation, device) ends the stream: the batches filled before it are still handed
//! out, and the `next` that would have returned the failed batch returns its error, as does every `next` after.
//! Dropping the stream cancels it: the worker finishes the run in progress (a run is never abandoned half-way),
//! queues nothing more and is joined; queued batches return to the ring.

use super::gather::Batch;
use crate::error::{Error, Result, Status};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The deepest prefetch accepted.
pub const MAX_DEPTH: usize = 64;

/// Fills one batch for the given offsets (the gather's run, with whatever locking its owner needs).
pub type RunBatch = Box<dyn FnMut(&[u64]) -> Result<Batch> + Send>;

struct State {
    queue: VecDeque<Result<Batch>>,
    /// Set by the consumer side (drop): the worker stops after its current run.
    cancelled: bool,
    /// Set by the worker when it has queued its last item.
    finished: bool,
    /// The error the stream ended with, once the consumer has reached it (returned by every later `next`).
    failed: Option<Error>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when the queue or the flags change (both directions).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running prefetch of `n_batches` batches (see the module documentation).
pub struct GatherStream {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    batches: usize,
    delivered: usize,
    pid: u32,
}

impl GatherStream {
    /// Starts the worker on `offsets` (`n_batches` sets of `batch` offsets, already checked by the caller),
    /// filling up to `depth` (1 to [`MAX_DEPTH`]) batches ahead with `run`. Errors: `INVALID_ARGUMENT` (depth
    /// out of range, `offsets.len() != n_batches * batch`), `UNAVAILABLE` (the thread cannot be started).
    pub fn start(batch: usize, offsets: Vec<u64>, depth: usize, mut run: RunBatch) -> Result<GatherStream> {
        if depth == 0 || depth > MAX_DEPTH {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather stream: depth {depth}; expected 1 to {MAX_DEPTH}"),
            ));
        }
        if batch == 0 || offsets.len() % batch != 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather stream: {} offsets is not a whole number of batches of {batch}", offsets.len()),
            ));
        }
        let n = offsets.len() / batch;
        let shared = Arc::new(Shared {
            state: Mutex::new(State { queue: VecDeque::new(), cancelled: false, finished: false, failed: None }),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("hostfirst-gather-stream".to_string())
            .spawn(move || {
                for k in 0..n {
                    let offs = &offsets[k * batch..(k + 1) * batch];
                    {
                        let mut st = s.lock();
                        while st.queue.len() >= depth && !st.cancelled {
                            st = s.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                        }
                        if st.cancelled {
                            break;
                        }
                    }
                    let item = loop {
                        let r =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(offs))).unwrap_or_else(|_| {
                                Err(Error::new(Status::Panic, format!("gather stream: batch {k}: the run panicked")))
                            });
                        match r {
                            Err(e) if e.status() == Status::Busy => {
                                let st = s.lock();
                                if st.cancelled {
                                    break None;
                                }
                                if st.queue.is_empty() {
                                    let msg = format!("gather stream: batch {k}: {}", e.message());
                                    break Some(Err(Error::new(Status::Busy, msg)));
                                }
                                // The consumer holds batches and has more queued: wait for it to take one (it may
                                // release others meanwhile), then try again.
                                drop(s.changed.wait_timeout(st, Duration::from_millis(2)));
                            }
                            Err(e) => {
                                let msg = format!("gather stream: batch {k}: {}", e.message());
                                break Some(Err(Error::new(e.status(), msg)));
                            }
                            Ok(b) => break Some(Ok(b)),
                        }
                    };
                    let Some(item) = item else { break };
                    let failed = item.is_err();
                    s.lock().queue.push_back(item);
                    s.changed.notify_all();
                    if failed {
                        break;
                    }
                }
                s.lock().finished = true;
                s.changed.notify_all();
            })
            .map_err(|e| Error::new(Status::Unavailable, format!("gather stream: cannot start its thread: {e}")))?;
        Ok(GatherStream { shared, worker: Some(worker), batches: n, delivered: 0, pid: std::process::id() })
    }

    /// The next batch in order, waiting for the worker if it is not ready; `Ok(None)` once every batch has been
    /// handed out. The error of a failed run is returned in its batch's place and by every later call.
    /// `UNAVAILABLE` in a forked child (the worker is the parent's).
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        if self.pid != std::process::id() {
            return Err(Error::new(
                Status::Unavailable,
                "gather stream: its worker thread belongs to the parent process (this process was forked)".to_string(),
            ));
        }
        let mut st = self.shared.lock();
        loop {
            if let Some(e) = &st.failed {
                return Err(e.clone());
            }
            if let Some(item) = st.queue.pop_front() {
                self.shared.changed.notify_all();
                return match item {
                    Ok(b) => {
                        self.delivered += 1;
                        Ok(Some(b))
                    }
                    Err(e) => {
                        st.failed = Some(e.clone());
                        Err(e)
                    }
                };
            }
            if st.finished {
                return Ok(None);
            }
            st = self.shared.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Batches the stream was started with.
    pub fn len(&self) -> usize {
        self.batches
    }
    /// True for a stream of no batches.
    pub fn is_empty(&self) -> bool {
        self.batches == 0
    }
    /// Batches handed out so far.
    pub fn delivered(&self) -> usize {
        self.delivered
    }
    /// Batches filled and waiting now.
    pub fn ready(&self) -> usize {
        self.shared.lock().queue.iter().filter(|i| i.is_ok()).count()
    }
}

impl Drop for GatherStream {
    fn drop(&mut self) {
        self.shared.lock().cancelled = true;
        self.shared.changed.notify_all();
        if let Some(w) = self.worker.take() {
            if self.pid == std::process::id() {
                let _ = w.join();
            }
        }
        self.shared.lock().queue.clear();
    }
}
