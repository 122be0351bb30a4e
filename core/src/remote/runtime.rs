//! The tokio runtime that remote reads run on: built on first use, owned by the core, never asked of the caller.
//!
//! Futures are spawned onto it and their results waited for on a channel, so [`run`] works from any thread,
//! including a thread of the caller's own tokio runtime (where `block_on` would panic). A child after
//! `fork()` has none of the parent's runtime threads: the runtime is tagged with the process id that built it,
//! and a child builds its own on its first remote read, leaking (never dropping, never using) the parent's.

use crate::forksafe::GlobalMutex;
use std::future::Future;
use std::sync::Arc;

/// The runtime and the process that built it. The lock is held only to clone or replace the `Arc` (never
/// across a build or a wait), so a child forked while another thread held it is released by the fork handlers.
pub(crate) static RUNTIME: GlobalMutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = GlobalMutex::new(None);

/// Worker threads: requests are I/O-bound; this many keep 32 concurrent GETs busy.
const WORKERS: usize = 4;

fn runtime() -> Result<Arc<tokio::runtime::Runtime>, String> {
    let pid = std::process::id();
    if let Some((p, rt)) = RUNTIME.lock().as_ref() {
        if *p == pid {
            return Ok(Arc::clone(rt));
        }
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name("hostfirst-remote")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime for remote reads: {e}"))?;
    let built = Arc::new(built);
    let mut slot = RUNTIME.lock();
    match slot.as_ref() {
        // Another thread of this process built one first: use it (ours is dropped here, in its own process).
        Some((p, rt)) if *p == pid => Ok(Arc::clone(rt)),
        _ => {
            if let Some(old) = slot.replace((pid, Arc::clone(&built))) {
                // The parent's runtime: its threads do not exist in this child; dropping it would wait for them.
                std::mem::forget(old);
            }
            Ok(built)
        }
    }
}

/// Runs `fut` on the core's runtime and waits for its output on the calling thread.
pub(crate) fn run<F>(fut: F) -> Result<F::Output, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| "the remote read's task ended without an answer".to_string())
}

/// Starts `fut` on the core's runtime without waiting for it (its results travel on a channel of its own).
pub(crate) fn spawn<F>(fut: F) -> Result<(), String>
where
    F: Future<Output = ()> + Send + 'static,
{
    runtime()?.spawn(fut);
    Ok(())
}
