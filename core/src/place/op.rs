//! Asynchronous puts: a put running on a worker thread, polled or waited for by its owner.

use super::buffer::Buffer;
use super::put::{put_with_stats, PutOptions, PutStats, Target};
use crate::error::{Error, Result, Status};
use crate::file::View;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A progress sink that may run on another thread: (bytes done, total) → true to cancel.
pub type SendProgress = Box<dyn FnMut(u64, u64) -> bool + Send>;

/// Options of an asynchronous put (owned, unlike [`PutOptions`]).
#[derive(Default)]
pub struct AsyncPutOptions {
    /// As [`PutOptions::tuning`].
    pub tuning: crate::engine::Tuning,
    /// As [`PutOptions::resident`].
    pub resident: bool,
    /// As [`PutOptions::copy_on_write`].
    pub copy_on_write: bool,
    /// Called on the worker thread at a bounded rate; true cancels.
    pub progress: Option<SendProgress>,
    /// As [`PutOptions::page_cache`].
    pub page_cache: crate::cache::PageCache,
}

enum State {
    Running,
    Done(Result<(Buffer, PutStats)>),
    Taken,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    cancel: AtomicBool,
}

/// A put in progress. Dropping it cancels the put and waits for the worker (everything it took is freed).
pub struct PutOp {
    shared: Arc<Shared>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl PutOp {
    /// Starts putting `view` on `target`. The target is resolved now, on the calling thread (so the caller's
    /// default-device scope and strict mode apply); errors found before the worker starts are returned here.
    pub fn start(view: &View, target: Target, opts: AsyncPutOptions) -> Result<PutOp> {
        let device = target.resolve(&format!("tensor '{}'", view.name()))?;
        let shared =
            Arc::new(Shared { state: Mutex::new(State::Running), cv: Condvar::new(), cancel: AtomicBool::new(false) });
        let (sh, view) = (Arc::clone(&shared), view.clone());
        let worker = std::thread::Builder::new()
            .name("hostfirst-put".to_string())
            .spawn(move || {
                let AsyncPutOptions { tuning, resident, copy_on_write, mut progress, page_cache } = opts;
                let mut sink = |d: u64, t: u64| -> bool {
                    if sh.cancel.load(Ordering::Relaxed) {
                        return true;
                    }
                    match progress.as_mut() {
                        Some(p) => p(d, t),
                        None => false,
                    }
                };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    put_with_stats(
                        &view,
                        Target::Device(device),
                        PutOptions { tuning, resident, copy_on_write, progress: Some(&mut sink), page_cache },
                    )
                }))
                .unwrap_or_else(|_| Err(Error::new(Status::Internal, "the put worker panicked".to_string())));
                let r = match r {
                    Err(e) if e.status() == Status::Cancelled && sh.cancel.load(Ordering::Relaxed) => {
                        Err(Error::new(Status::Cancelled, "the put was cancelled".to_string()))
                    }
                    r => r,
                };
                *sh.state.lock().unwrap_or_else(|p| p.into_inner()) = State::Done(r);
                sh.cv.notify_all();
            })
            .map_err(|e| Error::new(Status::OutOfMemory, format!("starting a put worker thread failed: {e}")))?;
        Ok(PutOp { shared, worker: Some(worker) })
    }

    /// `Ok(true)` when finished (successfully or not; [`PutOp::wait`] then returns at once), `Ok(false)` while
    /// running; `ALREADY_USED` once the result was taken.
    pub fn is_done(&self) -> Result<bool> {
        match &*self.shared.state.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Running => Ok(false),
            State::Done(_) => Ok(true),
            State::Taken => Err(already_used()),
        }
    }

    /// Blocks until the put finishes and returns its buffer (or its error). A second call gives `ALREADY_USED`.
    pub fn wait(&self) -> Result<(Buffer, PutStats)> {
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*st, State::Running) {
            st = self.shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match std::mem::replace(&mut *st, State::Taken) {
            State::Done(r) => r,
            _ => Err(already_used()),
        }
    }

    /// Asks the worker to stop at its next progress point (the result becomes `CANCELLED`).
    pub fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
    }
}

fn already_used() -> Error {
    Error::new(Status::AlreadyUsed, "the put's result was already taken by an earlier wait".to_string())
}

impl Drop for PutOp {
    fn drop(&mut self) {
        self.cancel();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
