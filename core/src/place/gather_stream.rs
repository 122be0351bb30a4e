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
//! **Input.** A stream started with every offset ([`GatherStream::start`]) ends after its last batch. An
//! open stream ([`GatherStream::open`]) takes its offsets incrementally ([`GatherStream::push`], each batch
//! checked before it is accepted) until [`GatherStream::end_input`]: its worker waits for input instead of
//! ending, so a consumer that keeps `depth` batches pushed ahead of the ones it takes never sees the worker
//! pause. `next` on an open stream with nothing pushed that has not been handed out returns `NOT_READY` (it
//! cannot wait: the caller that would push is the caller waiting).
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

/// Checks one batch's offsets before an open stream accepts them (the gather's window check on its source).
pub type CheckBatch = Box<dyn Fn(&[u64]) -> Result<()> + Send>;

struct State {
    queue: VecDeque<Result<Batch>>,
    /// Offsets pushed and not yet taken by the worker (whole batches).
    input: VecDeque<u64>,
    /// More input may come (an open stream before `end_input`).
    input_open: bool,
    /// The worker is filling a batch it took from `input`.
    running: bool,
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

/// A running prefetch (see the module documentation).
pub struct GatherStream {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    /// Offsets per batch.
    batch: usize,
    /// Batches pushed in all (for a stream started with every offset: all of them).
    batches: usize,
    delivered: usize,
    pid: u32,
    /// The check of pushed batches (open streams).
    check: Option<CheckBatch>,
}

impl GatherStream {
    /// Starts the worker on `offsets` (`n_batches` sets of `batch` offsets, already checked by the caller),
    /// filling up to `depth` (1 to [`MAX_DEPTH`]) batches ahead with `run`; the stream ends after the last.
    /// Errors: `INVALID_ARGUMENT` (depth out of range, `offsets.len() != n_batches * batch`), `UNAVAILABLE`
    /// (the thread cannot be started).
    pub fn start(batch: usize, offsets: Vec<u64>, depth: usize, run: RunBatch) -> Result<GatherStream> {
        if batch == 0 || offsets.len() % batch != 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather stream: {} offsets is not a whole number of batches of {batch}", offsets.len()),
            ));
        }
        let n = offsets.len() / batch;
        Self::spawn(batch, offsets.into(), false, depth, run, None).map(|mut s| {
            s.batches = n;
            s
        })
    }

    /// Starts the worker of an open stream: no batch yet; [`push`](Self::push) gives it batches (each checked
    /// with `check` first) until [`end_input`](Self::end_input), and it waits for input meanwhile. Errors as
    /// for [`start`](Self::start).
    pub fn open(batch: usize, depth: usize, run: RunBatch, check: CheckBatch) -> Result<GatherStream> {
        if batch == 0 {
            return Err(Error::new(Status::InvalidArgument, "gather stream: a batch of 0 offsets".to_string()));
        }
        Self::spawn(batch, VecDeque::new(), true, depth, run, Some(check))
    }

    fn spawn(
        batch: usize,
        input: VecDeque<u64>,
        input_open: bool,
        depth: usize,
        mut run: RunBatch,
        check: Option<CheckBatch>,
    ) -> Result<GatherStream> {
        if depth == 0 || depth > MAX_DEPTH {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather stream: depth {depth}; expected 1 to {MAX_DEPTH}"),
            ));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                input,
                input_open,
                running: false,
                cancelled: false,
                finished: false,
                failed: None,
            }),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("hostfirst-gather-stream".to_string())
            .spawn(move || {
                let mut offs = vec![0u64; batch];
                for k in 0usize.. {
                    {
                        // Wait for room ahead of the consumer and a whole batch of input (or the input's end).
                        let mut st = s.lock();
                        loop {
                            if st.cancelled {
                                break;
                            }
                            if st.queue.len() < depth && st.input.len() >= batch {
                                break;
                            }
                            if st.input.len() < batch && !st.input_open {
                                break;
                            }
                            st = s.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                        }
                        if st.cancelled || st.input.len() < batch {
                            break;
                        }
                        for (o, v) in offs.iter_mut().zip(st.input.drain(..batch)) {
                            *o = v;
                        }
                        st.running = true;
                    }
                    let item = loop {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&offs))).unwrap_or_else(
                            |_| Err(Error::new(Status::Panic, format!("gather stream: batch {k}: the run panicked"))),
                        );
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
                    {
                        let mut st = s.lock();
                        st.queue.push_back(item);
                        st.running = false;
                    }
                    s.changed.notify_all();
                    if failed {
                        break;
                    }
                }
                let mut st = s.lock();
                st.finished = true;
                st.running = false;
                drop(st);
                s.changed.notify_all();
            })
            .map_err(|e| Error::new(Status::Unavailable, format!("gather stream: cannot start its thread: {e}")))?;
        Ok(GatherStream {
            shared,
            worker: Some(worker),
            batch,
            batches: 0,
            delivered: 0,
            pid: std::process::id(),
            check,
        })
    }

    fn same_process(&self) -> Result<()> {
        if self.pid != std::process::id() {
            return Err(Error::new(
                Status::Unavailable,
                "gather stream: its worker thread belongs to the parent process (this process was forked)".to_string(),
            ));
        }
        Ok(())
    }

    /// Gives an open stream more batches: `offsets` holds whole batches, each checked (the first that fails
    /// gives its error naming the batch by its number in the stream, and nothing of the call is taken).
    /// Errors: `INVALID_ARGUMENT` (not whole batches; a stream started with every offset, or whose input was
    /// ended), the check's errors (`OUT_OF_RANGE`), `UNAVAILABLE` in a forked child.
    pub fn push(&mut self, offsets: &[u64]) -> Result<()> {
        self.same_process()?;
        let Some(check) = &self.check else {
            return Err(Error::new(
                Status::InvalidArgument,
                "gather stream: it was started with all its offsets; push needs an open stream".to_string(),
            ));
        };
        if offsets.len() % self.batch != 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather stream: {} offsets is not a whole number of batches of {}", offsets.len(), self.batch),
            ));
        }
        if !self.shared.lock().input_open {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "gather stream: its input was ended after {} batches; nothing more can be pushed",
                    self.batches
                ),
            ));
        }
        for (j, o) in offsets.chunks_exact(self.batch).enumerate() {
            check(o).map_err(|e| Error::new(e.status(), format!("batch {}: {}", self.batches + j, e.message())))?;
        }
        self.shared.lock().input.extend(offsets.iter().copied());
        self.batches += offsets.len() / self.batch;
        self.shared.changed.notify_all();
        Ok(())
    }

    /// Says no more input comes: the stream ends after the batches pushed so far. Calling it again (or on a
    /// stream started with every offset) changes nothing.
    pub fn end_input(&mut self) {
        self.shared.lock().input_open = false;
        self.shared.changed.notify_all();
    }

    /// The next batch in order, waiting for the worker if it is not ready; `Ok(None)` once every batch has been
    /// handed out. The error of a failed run is returned in its batch's place and by every later call.
    /// `UNAVAILABLE` in a forked child (the worker is the parent's).
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        self.same_process()?;
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
            if st.input_open && !st.running && st.input.len() < self.batch {
                return Err(Error::new(
                    Status::NotReady,
                    format!(
                        "gather stream: all {} batches pushed have been handed out and its input is open; push \
                         more offsets, or end the input",
                        self.batches
                    ),
                ));
            }
            st = self.shared.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Offsets per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// Batches the stream was started with, or pushed to it so far.
    pub fn len(&self) -> usize {
        self.batches
    }
    /// True for a stream of no batches (so far).
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
