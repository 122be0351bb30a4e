//! The io_uring backend: a set of reads submitted together, completions reaped until every read is done.

use super::{FailureKind, Read, ReadFailure};
use crate::forksafe::GlobalMutex;
use io_uring::{opcode, types, IoUring, Probe};
use std::sync::atomic::{AtomicU8, Ordering};

/// Rings kept between calls: (the process that made it, the ring). A ring made before a `fork` belongs to
/// the parent and is never used by the child.
pub(crate) static RINGS: GlobalMutex<Vec<(u32, IoUring)>> = GlobalMutex::new(Vec::new());
/// At most this many idle rings are kept.
const KEPT: usize = 8;
/// The largest length of one read entry (the opcode takes a u32; longer reads continue as short reads).
const MAX_ENTRY: usize = 1 << 30;

/// Whether io_uring works here: an 8-entry ring, `IORING_OP_READ` in the kernel's probe, a no-op round trip.
pub(super) fn probe() -> Result<(), String> {
    let mut ring = IoUring::new(8).map_err(|e| setup_refused(&e))?;
    let mut p = Probe::new();
    ring.submitter().register_probe(&mut p).map_err(|e| format!("IORING_REGISTER_PROBE: {e}"))?;
    if !p.is_supported(opcode::Read::CODE) {
        return Err("the kernel's io_uring lacks IORING_OP_READ".to_string());
    }
    let nop = opcode::Nop::new().build().user_data(7);
    // SAFETY: a no-op refers to no memory.
    unsafe { ring.submission().push(&nop) }.map_err(|_| "submission queue full".to_string())?;
    ring.submit_and_wait(1).map_err(|e| format!("io_uring_enter: {e}"))?;
    let done = ring.completion().next().map(|c| (c.user_data(), c.result()));
    match done {
        Some((7, r)) if r >= 0 => Ok(()),
        Some((_, r)) => Err(format!("a no-op completed with {r}")),
        None => Err("a no-op did not complete".to_string()),
    }
}

/// Why `io_uring_setup` failed, in words: the errno and what gives it here (`/proc/self/status` says
/// whether a seccomp filter is installed; `/proc/sys/kernel/io_uring_disabled` whether the kernel refuses).
pub(crate) fn setup_refused(e: &std::io::Error) -> String {
    let filtered = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.split_whitespace().eq(["Seccomp:", "2"])));
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) if disabled == 2 => {
            format!("io_uring_setup refused ({e}): the kernel disables io_uring (kernel.io_uring_disabled = 2)")
        }
        Some(libc::EPERM) | Some(libc::EACCES) if disabled == 1 => {
            format!("io_uring_setup refused ({e}): kernel.io_uring_disabled = 1 lets only kernel.io_uring_group use it")
        }
        Some(libc::EPERM) | Some(libc::EACCES) if filtered => format!(
            "io_uring_setup refused ({e}) by this process's seccomp filter (container runtimes' default \
             profiles block io_uring)"
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => format!("io_uring_setup refused ({e})"),
        Some(libc::ENOSYS) if filtered => format!(
            "io_uring_setup unavailable ({e}): this process's seccomp filter answers ENOSYS, or the kernel has \
             no io_uring"
        ),
        Some(libc::ENOSYS) => {
            format!("the kernel has no io_uring ({e}: before Linux 5.1, or built without CONFIG_IO_URING)")
        }
        Some(libc::ENOMEM) => {
            format!("io_uring_setup: {e} (the locked-memory limit, ulimit -l, is too small for a ring)")
        }
        _ => format!("io_uring_setup: {e}"),
    }
}

fn take_ring(entries: u32) -> Result<IoUring, String> {
    let pid = std::process::id();
    if let Some(mut kept) = RINGS.try_lock() {
        // A parent's ring (inherited through fork) is dropped: that unmaps and closes only this process's copy.
        kept.retain(|(p, _)| *p == pid);
        if let Some(i) = kept.iter().position(|(_, r)| r.params().sq_entries() >= entries) {
            return Ok(kept.swap_remove(i).1);
        }
    }
    IoUring::new(entries).map_err(|e| format!("io_uring_setup({entries} entries): {e}"))
}

thread_local! {
    /// The io-wq worker cap this thread has set so far (see [`raise_iowq_cap`]).
    static IOWQ_CAP: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Reads of uncached pages run on the kernel's io-wq workers, "bounded" work capped by default at 4 per CPU: 8
/// reads in flight on a 2-core machine, whatever the ring's depth. The cap belongs to the submitting thread's
/// io-wq, so each thread raises it (once per size) to the entries it submits (best effort: kernels before 5.15
/// keep their default).
fn raise_iowq_cap(ring: &IoUring, entries: u32) {
    IOWQ_CAP.with(|cap| {
        if cap.get() < entries && ring.submitter().register_iowq_max_workers(&mut [entries, 0]).is_ok() {
            cap.set(entries);
        }
    });
}

/// Whether rings that defer completion work to the waiting thread can be made here (0: not tried yet, 1: yes,
/// 2: no; `IORING_SETUP_DEFER_TASKRUN` needs Linux 6.1).
static DEFER: AtomicU8 = AtomicU8::new(0);

thread_local! {
    /// This thread's own ring, with the process that made it: `IORING_SETUP_SINGLE_ISSUER` ties a ring to its
    /// thread, so it is kept per thread (dropped in a forked child, whose thread is another task).
    static OWN: std::cell::RefCell<Option<(u32, IoUring)>> = const { std::cell::RefCell::new(None) };
}

/// This thread's own ring of at least `entries` entries, with completion work deferred to the thread when it
/// waits (`IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`). Why: without it, every read that
/// completes later (an uncached page, read from storage) queues work that wakes the waiting thread at once,
/// one wake-up per read (64 for a cold batch, each one a trip through the scheduler on a busy machine, where a
/// training step shares the CPUs); deferred, the thread is woken once, when as many completions as it waits
/// for are in. None when the kernel cannot make such rings (then the shared rings serve).
fn own_ring(entries: u32) -> Option<IoUring> {
    if DEFER.load(Ordering::Relaxed) == 2 {
        return None;
    }
    let pid = std::process::id();
    let kept = OWN.with(|o| o.borrow_mut().take());
    if let Some((p, ring)) = kept {
        if p == pid && ring.params().sq_entries() >= entries {
            return Some(ring);
        }
    }
    match IoUring::builder().setup_single_issuer().setup_defer_taskrun().build(entries) {
        Ok(ring) => {
            DEFER.store(1, Ordering::Relaxed);
            Some(ring)
        }
        Err(_) => {
            DEFER.store(2, Ordering::Relaxed);
            None
        }
    }
}

fn put_own(ring: IoUring) {
    OWN.with(|o| *o.borrow_mut() = Some((std::process::id(), ring)));
}

fn put_ring(ring: IoUring) {
    if let Some(mut kept) = RINGS.try_lock() {
        if kept.len() < KEPT {
            kept.push((std::process::id(), ring));
        }
    }
}

/// Where [`drive`] stopped: the operation, the bytes of it done, and the error (`None`: the system moved 0
/// bytes, the end of the file for a read).
pub(super) struct Stopped {
    pub index: usize,
    pub done: usize,
    pub error: Option<std::io::Error>,
}

/// Moves `lens[i]` bytes for every operation `i` through `ring`, at most `cap` entries in flight: `entry(i,
/// pos, len)` builds the entry for bytes `pos..pos + len` of operation `i` (`pos + len ≤ lens[i]`, `len` at
/// most [`MAX_ENTRY`]). Interrupted and would-block completions are submitted again, short ones resumed for the
/// rest. The first failure (a negative result, or 0 bytes) stops new submissions; what is in flight is reaped
/// before it returns, so it never returns with an operation in flight. If the ring itself fails with entries
/// in flight the process aborts (`what` names them in the message), rather than let the kernel use memory its
/// owner may free. The one io_uring loop of the read engine and the writer.
///
/// # Safety
/// Every entry that `entry` builds must refer only to memory valid (and, for reads, not otherwise accessed)
/// until this function returns.
pub(super) unsafe fn drive(
    ring: &mut IoUring,
    lens: &[usize],
    cap: usize,
    what: &str,
    mut entry: impl FnMut(usize, usize, usize) -> io_uring::squeue::Entry,
) -> Option<Stopped> {
    let n = lens.len();
    // Bytes done per operation; operations to (re)submit: never-submitted ones come from `next`, resumed ones
    // from `again`.
    let mut done = vec![0usize; n];
    let mut again: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut inflight = 0usize;
    let mut failure: Option<Stopped> = None;
    loop {
        if failure.is_none() {
            let mut sq = ring.submission();
            while inflight < cap {
                let i = match again.pop() {
                    Some(i) => i,
                    None if next < n => {
                        next += 1;
                        if lens[next - 1] == 0 {
                            continue;
                        }
                        next - 1
                    }
                    None => break,
                };
                let pos = done[i];
                let e = entry(i, pos, (lens[i] - pos).min(MAX_ENTRY)).user_data(i as u64);
                // SAFETY: the caller's contract: the entry's memory stays valid until this function returns,
                // and it does not return before the entry's completion has been reaped.
                if unsafe { sq.push(&e) }.is_err() {
                    again.push(i);
                    break;
                }
                inflight += 1;
            }
        }
        if inflight == 0 {
            return failure;
        }
        // Wait for every entry in flight: the set needs them all, and one wake-up serves them (see own_ring).
        match ring.submit_and_wait(inflight) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)) => {}
            Err(e) => {
                eprintln!("hostfirst: io_uring_enter failed with {inflight} {what} in flight ({e}); aborting");
                std::process::abort();
            }
        }
        for c in ring.completion() {
            inflight -= 1;
            let i = c.user_data() as usize;
            let res = c.result();
            if failure.is_some() {
                continue;
            }
            if res == -libc::EINTR || res == -libc::EAGAIN {
                again.push(i);
            } else if res <= 0 {
                let error = (res < 0).then(|| std::io::Error::from_raw_os_error(-res));
                failure = Some(Stopped { index: i, done: done[i], error });
            } else {
                done[i] += res as usize;
                if done[i] < lens[i] {
                    again.push(i); // a short transfer: the rest
                }
            }
        }
    }
}

/// Performs every read in `reads` with at most `depth` in flight. `Err(why)` when no ring could be made (the
/// caller then uses the pool; nothing was read); otherwise the reads' outcome. Returns only once nothing is
/// in flight: if the ring fails while reads are in flight, the process aborts rather than let the kernel
/// write into memory it no longer owns.
pub(super) fn read_all(reads: &mut [Read<'_>], depth: usize) -> Result<Result<(), ReadFailure>, String> {
    let entries = depth.min(reads.len()).next_power_of_two().clamp(1, 4096) as u32;
    let (mut ring, own) = match own_ring(entries) {
        Some(r) => (r, true),
        None => (take_ring(entries)?, false),
    };
    raise_iowq_cap(&ring, entries);
    let cap = (ring.params().sq_entries() as usize).min(depth.max(1));
    let lens: Vec<usize> = reads.iter().map(|r| r.dst.len()).collect();
    let dsts: Vec<(*mut u8, i32, u64)> = reads.iter_mut().map(|r| (r.dst.as_mut_ptr(), r.fd, r.offset)).collect();
    // SAFETY: every entry points at `pos..pos + len` of a destination (`pos + len ≤ dst.len()`, as `drive`
    // promises), which the caller's `reads` keeps borrowed mutably for this whole call.
    let stopped = unsafe {
        drive(&mut ring, &lens, cap, "reads", |i, pos, len| {
            let (dst, fd, offset) = dsts[i];
            opcode::Read::new(types::Fd(fd), dst.add(pos), len as u32).offset(offset + pos as u64).build()
        })
    };
    let failure = stopped.map(|s| ReadFailure {
        index: s.index,
        kind: match s.error {
            Some(e) => FailureKind::Os(e),
            None => FailureKind::Eof { at: reads[s.index].offset + s.done as u64 },
        },
    });
    if own {
        put_own(ring);
    } else {
        put_ring(ring);
    }
    Ok(match failure {
        Some(f) => Err(f),
        None => Ok(()),
    })
}
