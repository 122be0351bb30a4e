//! The engine's host → CUDA writer side: a bounded ring of reusable page-locked staging slabs, filled by parallel
//! positioned reads and drained by asynchronous copies on a dedicated stream.
//!
//! ```text
//!   reader threads (N)            calling thread                       stream (1, non-blocking)
//!   take next range ──► take free slab ──► pread into it ──► filled ──► cuMemcpyHtoDAsync ──► event
//!                          ▲                                                                   │
//!                          └──────────────── slab recycled once its event has completed ◄──────┘
//! ```
//!
//! - **Never DMA from pageable or mapped pages**: the driver only ever copies from [`PinnedHostMemory`]; the
//!   file's bytes reach the slab by `pread` (which also turns a truncated file into `TRUNCATED`/`IO` instead
//!   of `SIGBUS`).
//! - **Host memory bounded by the ring**: at most `staging_bytes` of slabs exist for one put, whatever the
//!   tensor size (default [`DEFAULT_STAGING_BYTES`] = 256 MiB as 16 × [`DEFAULT_SLAB_BYTES`] = 16 MiB; small
//!   tensors get smaller slabs, at least 64 KiB, and no more slabs than pieces).
//! - **Reuse**: slabs go back to a process-wide pool (bounded to [`POOL_CAP_BYTES`]) so repeated puts do
//!   not pay `cuMemHostAlloc` again; `place::release_cached_memory` frees the pool (and resident registrations).
//!   In a child forked after CUDA was initialised no slab is handed out or pooled (`UNAVAILABLE` naming
//!   fork()): the driver's page-locked pages may be absent there.
//! - **Progress** is reported from the calling thread at most every [`PROGRESS_INTERVAL`], monotonic, and
//!   once at the end with `done == total`; returning `true` cancels: readers stop, in-flight copies are waited
//!   for, slabs go back to the pool and the caller drops the destination → `CANCELLED`.
//! - **Errors**: the first read error or driver error wins; the same clean-up happens and the error
//!   (`DEVICE_ERROR` naming the driver's error, `IO`, `TRUNCATED`) is returned. Copies in flight are a
//!   [`CopyQueue`], so an error a completion query sees is never lost, and what a failed copy may still use
//!   is released only once it is known to have ended (the one rule of [`crate::device::cuda::inflight`]).

use super::{Tuning, PROGRESS_INTERVAL};
use crate::device::cuda::{CopyQueue, DeviceMemory, PinnedHostMemory, Stream};
use crate::error::{Error, Result, Status};
use crate::forksafe::GlobalMutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default total size of the staging ring for one put.
pub const DEFAULT_STAGING_BYTES: usize = 256 << 20;
/// Default size of one staging slab.
pub const DEFAULT_SLAB_BYTES: usize = 16 << 20;
/// Smallest slab.
pub const MIN_SLAB_BYTES: usize = 64 << 10;
/// Most bytes of idle slabs kept in the process-wide pool.
pub const POOL_CAP_BYTES: usize = 256 << 20;

/// Tuning of one transfer; zeros mean the defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingConfig {
    /// Reader threads (0: CPUs available, at most 16).
    pub threads: usize,
    /// Total bytes of staging (0: [`DEFAULT_STAGING_BYTES`]).
    pub staging_bytes: usize,
    /// Bytes per slab (0: [`DEFAULT_SLAB_BYTES`]).
    pub slab_bytes: usize,
}

/// The ring geometry for a transfer of `total` bytes: (slab size, slab count).
pub fn geometry(total: u64, cfg: &RingConfig) -> (usize, usize) {
    let staging = if cfg.staging_bytes == 0 { DEFAULT_STAGING_BYTES } else { cfg.staging_bytes };
    let slab = if cfg.slab_bytes == 0 { DEFAULT_SLAB_BYTES } else { cfg.slab_bytes };
    let slab = slab.min(staging).max(MIN_SLAB_BYTES.min(staging.max(1)));
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    // Small tensors: a slab no larger than the tensor rounded up to 64 KiB.
    let slab = slab.min(total.div_ceil(MIN_SLAB_BYTES).max(1) * MIN_SLAB_BYTES).max(1);
    let pieces = total.div_ceil(slab).max(1);
    let count = (staging / slab).clamp(1, pieces.max(1));
    (slab, count)
}

/// The staging ring's configuration for a [`Tuning`]: its chunk is the slab size; zeros keep the ring's own
/// defaults (16 MiB slabs, 256 MiB of staging).
pub(crate) fn ring_config(t: &Tuning) -> RingConfig {
    RingConfig { threads: t.threads, staging_bytes: t.staging, slab_bytes: t.chunk }
}

/// The idle staging slabs.
pub(crate) static SLABS: GlobalMutex<Vec<PinnedHostMemory>> = GlobalMutex::new(Vec::new());

fn pool() -> &'static GlobalMutex<Vec<PinnedHostMemory>> {
    &SLABS
}

/// A slab of at least `len` bytes: the smallest pooled one that is large enough (a transfer uses only the
/// first `len` bytes), else a new one. Reusing larger slabs keeps loads of many small tensors of different
/// sizes from page-locking new memory for each.
/// New slabs are allocated through the destination device's context (`ordinal`); pooled ones, being portable,
/// serve any device.
pub(crate) fn take_slab(ordinal: u32, len: usize) -> Result<PinnedHostMemory> {
    if let Some(reason) = crate::device::cuda::forked_reason() {
        // The pool's slabs were page-locked by the driver before a fork(): never handed out in the child.
        return Err(Error::new(
            Status::Unavailable,
            format!("a page-locked staging slab cannot be used in this process: {reason}"),
        ));
    }
    {
        let mut p = pool().lock();
        let best = p.iter().enumerate().filter(|(_, s)| s.len() >= len).min_by_key(|(_, s)| s.len()).map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(p.swap_remove(i));
        }
    }
    PinnedHostMemory::alloc_on(ordinal, len).map_err(|e| e.context("allocating a page-locked staging slab"))
}

/// Hands a slab whose copy completed back to the readers, or to the pool once they have stopped.
fn recycle(free_tx: &Option<mpsc::Sender<PinnedHostMemory>>, slab: PinnedHostMemory) {
    match free_tx {
        Some(tx) => {
            if let Err(mpsc::SendError(slab)) = tx.send(slab) {
                give_slab(slab);
            }
        }
        None => give_slab(slab),
    }
}

pub(crate) fn give_slab(slab: PinnedHostMemory) {
    if crate::device::cuda::forked_reason().is_some() {
        drop(slab); // never pooled in a forked child (freeing it there makes no driver call)
        return;
    }
    let mut p = pool().lock();
    let held: usize = p.iter().map(|s| s.len()).sum();
    if held + slab.len() <= POOL_CAP_BYTES {
        p.push(slab);
    }
}

/// Bytes of idle staging slabs held by the process-wide pool.
pub fn cached_bytes() -> usize {
    pool().lock().iter().map(|s| s.len()).sum()
}

/// Frees every idle staging slab of the pool (`place::release_cached_memory` also frees resident
/// registrations). Transfers in progress keep their own slabs.
pub fn release_slabs() {
    let slabs = std::mem::take(&mut *pool().lock());
    drop(slabs);
}

struct Filled {
    off: u64,
    len: usize,
    slab: PinnedHostMemory,
}

/// The engine over any positioned reader: `read(offset, dst)` fills `dst` with bytes `offset..` of the source.
pub fn transfer<R>(
    total: u64,
    dst: &DeviceMemory,
    cfg: &RingConfig,
    read: R,
    mut progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<()>
where
    R: Fn(u64, &mut [u8]) -> Result<()> + Sync,
{
    if total == 0 {
        if let Some(p) = progress.as_mut() {
            if p(0, 0) {
                return Err(cancelled());
            }
        }
        return Ok(());
    }
    let (slab_len, count) = geometry(total, cfg);
    let threads = if cfg.threads == 0 { super::default_threads() } else { cfg.threads };
    let pieces = total.div_ceil(slab_len as u64);
    let threads = threads.clamp(1, count.min(pieces as usize).max(1));
    let stream = Stream::new(dst.ordinal())?;
    if pieces == 1 {
        // One slab's worth (small tensors): read and copy on this thread, without reader threads or channels.
        let len = total as usize;
        let mut slab = take_slab(dst.ordinal(), slab_len)?;
        if let Err(e) = read(0, &mut slab.as_mut_slice()[..len]) {
            give_slab(slab);
            return Err(e);
        }
        // A failed enqueue or copy releases the slab by the one rule (a slab the driver may still use is never
        // pooled), and `dst` is kept when the copy into it could not be settled.
        let copy = stream.copy_to_device_async(slab, 0, dst, 0, len)?;
        match copy.finish() {
            Ok((slab, _)) => give_slab(slab),
            Err(f) => {
                if !f.ended {
                    dst.keep_after_error();
                }
                return Err(f.error);
            }
        }
        if let Some(p) = progress.as_mut() {
            if p(total, total) {
                return Err(Error::new(
                    Status::Cancelled,
                    "cancelled by the progress callback at completion".to_string(),
                ));
            }
        }
        return Ok(());
    }

    // The ring: slabs allocated (or taken from the pool) up front, so failure to pin is reported before any read.
    let (free_tx, free_rx) = mpsc::channel::<PinnedHostMemory>();
    for _ in 0..count {
        free_tx.send(take_slab(dst.ordinal(), slab_len)?).expect("receiver alive");
    }
    let free_rx = Mutex::new(free_rx);
    let (filled_tx, filled_rx) = mpsc::channel::<Result<Filled>>();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);

    let mut outcome: Result<()> = Ok(());
    let mut queue: CopyQueue<PinnedHostMemory> = CopyQueue::new();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let filled_tx = filled_tx.clone();
            let (free_rx, next, stop, read) = (&free_rx, &next, &stop, &read);
            s.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let off = next.fetch_add(slab_len as u64, Ordering::Relaxed);
                if off >= total {
                    break;
                }
                let slab = match free_rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                    Ok(s) => s,
                    Err(_) => break, // the ring was closed: stopping
                };
                let len = (total - off).min(slab_len as u64) as usize;
                let mut slab = slab;
                let r = read(off, &mut slab.as_mut_slice()[..len]).map(|()| Filled { off, len, slab });
                let failed = r.is_err();
                if filled_tx.send(r).is_err() || failed {
                    break;
                }
            });
        }
        drop(filled_tx);

        let mut free_tx = Some(free_tx);
        let (mut enqueued, mut copied) = (0u64, 0u64);
        let mut completed = Vec::with_capacity(count);
        let mut last_report = Instant::now();
        loop {
            // Recycle completed copies (oldest first); an error a query saw fails the put.
            let r = queue.reap(&mut completed);
            for (n, slab, _) in completed.drain(..) {
                copied += n;
                recycle(&free_tx, slab);
            }
            if let Err(e) = r {
                fail(&mut outcome, e, &stop, &mut free_tx);
            }
            if outcome.is_ok() {
                if let Some(p) = progress.as_mut() {
                    if last_report.elapsed() >= PROGRESS_INTERVAL {
                        last_report = Instant::now();
                        if p(copied, total) {
                            fail(&mut outcome, cancelled(), &stop, &mut free_tx);
                        }
                    }
                }
            }
            if queue.is_empty() && (outcome.is_err() || enqueued == total) {
                break;
            }
            // Next filled slab; while waiting, copies in flight may complete.
            let wait = if queue.is_empty() { Duration::from_millis(20) } else { Duration::from_micros(200) };
            match filled_rx.recv_timeout(wait) {
                Ok(Ok(Filled { off, len, slab })) => {
                    if outcome.is_err() {
                        give_slab(slab);
                        continue;
                    }
                    match stream.copy_to_device_async(slab, 0, dst, off as usize, len) {
                        Ok(f) => {
                            enqueued += len as u64;
                            queue.push(len as u64, f);
                        }
                        Err(e) => fail(&mut outcome, e, &stop, &mut free_tx),
                    }
                }
                Ok(Err(e)) => fail(&mut outcome, e, &stop, &mut free_tx),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let r = queue.wait_oldest(&mut completed);
                    for (n, slab, _) in completed.drain(..) {
                        copied += n;
                        recycle(&free_tx, slab);
                    }
                    if let Err(e) = r {
                        fail(&mut outcome, e, &stop, &mut free_tx);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if enqueued < total && outcome.is_ok() {
                        // Every reader exited without an error and without covering the range: cannot happen,
                        // but never report success for bytes that were not copied.
                        fail(
                            &mut outcome,
                            Error::new(Status::Internal, "staging readers stopped early".to_string()),
                            &stop,
                            &mut free_tx,
                        );
                    }
                    if queue.is_empty() {
                        break;
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        drop(free_tx);
        // Readers exit; drain whatever they still hand over.
        for f in filled_rx.iter().flatten() {
            give_slab(f.slab);
        }
    });
    // After a failure, what is still in flight is settled by the one rule before anything is freed; `dst`
    // is kept (leaked when dropped) only when a failed copy into it could not be established to have ended.
    let mut rest = Vec::new();
    if !queue.settle_all(&mut rest) {
        dst.keep_after_error();
    }
    for (_, slab, _) in rest {
        give_slab(slab);
    }
    // Slabs left in the ring go back to the pool.
    for slab in free_rx.into_inner().unwrap_or_else(|p| p.into_inner()).try_iter() {
        give_slab(slab);
    }
    outcome?;
    if let Some(p) = progress.as_mut() {
        if p(total, total) {
            return Err(Error::new(Status::Cancelled, "cancelled by the progress callback at completion".to_string()));
        }
    }
    Ok(())
}

fn fail(outcome: &mut Result<()>, e: Error, stop: &AtomicBool, free_tx: &mut Option<mpsc::Sender<PinnedHostMemory>>) {
    stop.store(true, Ordering::Relaxed);
    free_tx.take(); // readers waiting for a slab wake up and exit
    if outcome.is_ok() {
        *outcome = Err(e);
    }
}

fn cancelled() -> Error {
    Error::new(Status::Cancelled, "cancelled by the progress callback".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_geometry() {
        let d = RingConfig::default();
        assert_eq!(geometry(10 << 30, &d), (16 << 20, 16));
        assert_eq!(geometry(40 << 20, &d), (16 << 20, 3));
        assert_eq!(geometry(100, &d), (64 << 10, 1));
        assert_eq!(geometry(0, &d).1, 1);
        let c = RingConfig { threads: 2, staging_bytes: 1 << 20, slab_bytes: 256 << 10 };
        assert_eq!(geometry(10 << 20, &c), (256 << 10, 4));
    }
}
