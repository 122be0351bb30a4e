//! The pool backend: blocking positioned reads (`pread`, `seek_read` on Windows) by the calling thread and persistent helper threads.
//!
//! A set of reads is a [`Set`]: reads are claimed by index (an atomic counter), so each is done exactly once,
//! by whoever claims it. The caller claims reads too and never waits for a helper that has not claimed one,
//! so the set completes even with no helper at all (a forked child, a thread that could not be started).
//! The caller returns only when every read is done or skipped (after a failure), so no helper can still be
//! writing into a destination.

use super::{pread_full, Read, ReadFailure};
use crate::os::RawFile;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A read slower than this waited for storage (a page-cache hit takes about a microsecond).
const SLOW_READ: Duration = Duration::from_micros(25);

/// One read of a set, as raw parts (the destination is borrowed by the caller of [`read_all`], which does not
/// return while any of them may be used).
struct Job {
    fd: RawFile,
    offset: u64,
    dst: *mut u8,
    len: usize,
}

struct Set {
    jobs: Vec<Job>,
    next: AtomicUsize,
    stop: AtomicBool,
    /// (reads finished or skipped, the first failure).
    state: Mutex<(usize, Option<ReadFailure>)>,
    all_done: Condvar,
}

// SAFETY: the raw destination pointers are each written by exactly one thread (the one that claimed the
// index), and only while the caller of `read_all`, which owns the destinations, waits for the set to finish.
unsafe impl Send for Set {}
// SAFETY: as above; everything else in a set is atomics and a mutex.
unsafe impl Sync for Set {}

impl Set {
    /// Claims and performs reads until none is left; returns when this thread has nothing more to claim.
    /// `on_slow` is called after a read that took longer than [`SLOW_READ`] (it had to wait for storage).
    fn work(&self, on_slow: &mut dyn FnMut()) {
        loop {
            let t = Instant::now();
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(j) = self.jobs.get(i) else { return };
            let result = if self.stop.load(Ordering::Relaxed) {
                Ok(())
            } else {
                // SAFETY: index `i` was claimed by this thread alone; the destination is live (see `Set`).
                let dst = unsafe { std::slice::from_raw_parts_mut(j.dst, j.len) };
                pread_full(j.fd, j.offset, dst)
            };
            if t.elapsed() > SLOW_READ {
                on_slow();
            }
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(kind) = result {
                self.stop.store(true, Ordering::Relaxed);
                if st.1.is_none() {
                    st.1 = Some(ReadFailure { index: i, kind });
                }
            }
            st.0 += 1;
            if st.0 == self.jobs.len() {
                self.all_done.notify_all();
            }
        }
    }
}

/// Sets waiting for helpers, and the helpers' wake-up.
struct Queue {
    sets: Mutex<VecDeque<Arc<Set>>>,
    wake: Condvar,
}

static QUEUE: Queue = Queue { sets: Mutex::new(VecDeque::new()), wake: Condvar::new() };
/// Helpers started in the process `HELPERS_PID` (helpers do not survive a fork: a child starts its own).
static HELPERS: AtomicUsize = AtomicUsize::new(0);
static HELPERS_PID: AtomicU32 = AtomicU32::new(0);

fn helper() {
    loop {
        let set = {
            let mut q = QUEUE.sets.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                // Drop sets with nothing left to claim; take the first that has.
                while q.front().is_some_and(|s| s.next.load(Ordering::Relaxed) >= s.jobs.len()) {
                    q.pop_front();
                }
                if let Some(s) = q.front() {
                    break Arc::clone(s);
                }
                q = QUEUE.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        set.work(&mut || {});
    }
}

/// Makes sure `want` helpers run in this process (best effort: a thread that cannot start is not needed).
fn ensure_helpers(want: usize) {
    let pid = std::process::id();
    if HELPERS_PID.load(Ordering::Acquire) != pid {
        HELPERS.store(0, Ordering::Release);
        HELPERS_PID.store(pid, Ordering::Release);
    }
    while HELPERS.load(Ordering::Acquire) < want {
        let n = HELPERS.fetch_add(1, Ordering::AcqRel);
        if n >= want {
            HELPERS.fetch_sub(1, Ordering::AcqRel);
            break;
        }
        let spawned = std::thread::Builder::new().name(format!("hostfirst-io-{n}")).stack_size(64 << 10).spawn(helper);
        if spawned.is_err() {
            HELPERS.fetch_sub(1, Ordering::AcqRel);
            break;
        }
    }
}

/// Performs every read of `reads` on the caller and up to `depth - 1` helpers.
pub(super) fn read_all(reads: &mut [Read<'_>], depth: usize) -> Result<(), ReadFailure> {
    let n = reads.len();
    if n == 1 || depth <= 1 {
        for (i, r) in reads.iter_mut().enumerate() {
            pread_full(r.fd, r.offset, r.dst).map_err(|kind| ReadFailure { index: i, kind })?;
        }
        return Ok(());
    }
    let jobs = reads
        .iter_mut()
        .map(|r| Job { fd: r.fd, offset: r.offset, dst: r.dst.as_mut_ptr(), len: r.dst.len() })
        .collect();
    let set = Arc::new(Set {
        jobs,
        next: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        state: Mutex::new((0, None)),
        all_done: Condvar::new(),
    });
    // The caller starts alone: reads of cached pages take a microsecond, less than waking a thread. The first
    // read that had to wait for storage brings in the helpers for the rest of the set.
    let helpers = (depth - 1).min(n - 1);
    let mut woken = false;
    set.work(&mut || {
        if woken {
            return;
        }
        woken = true;
        ensure_helpers(helpers);
        // try_lock: a queue lock inherited held through fork must not hang the child; the caller reads alone.
        if let Ok(mut q) = QUEUE.sets.try_lock() {
            q.push_back(Arc::clone(&set));
            drop(q);
            QUEUE.wake.notify_all();
        }
    });
    let mut st = set.state.lock().unwrap_or_else(|p| p.into_inner());
    while st.0 < n {
        st = set.all_done.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    match st.1.take() {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
