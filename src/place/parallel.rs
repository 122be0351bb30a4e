//! Parallel positioned reads into a destination, with progress reporting on the calling thread and
//! cooperative cancellation.

use crate::error::{Error, Result, Status};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A progress sink: called with (bytes done, bytes total); returns `true` to cancel.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64) -> bool;

/// The shortest interval between two progress reports (the last report, at completion, is always made).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// Default number of reader threads: the CPUs available to the process, between 1 and 16.
pub fn default_threads() -> usize {
    // Cached: available_parallelism reads cgroup files and was a third of a small put's cost.
    static N: crate::forksafe::InitOnce<usize> = crate::forksafe::InitOnce::new();
    *N.get_or_init(|| crate::device::host::cpu_count().clamp(1, 16))
}

/// Default chunk for parallel reads.
pub const DEFAULT_CHUNK: usize = 8 << 20;

/// Fills `dst` with `read(offset, chunk)` calls over `threads` threads in `chunk`-byte pieces; `read` gets
/// the offset relative to the start of `dst`. The calling thread is one of the readers (`threads - 1` more
/// are started, none when there is a single chunk), and it alone reports progress: between its chunks, at
/// most every [`PROGRESS_INTERVAL`], and once at the end with `done == total`. Returning `true` cancels
/// (remaining chunks are skipped; the result is `Cancelled`). The first read error wins and stops the others.
pub fn parallel_fill<R>(
    dst: &mut [u8],
    threads: usize,
    chunk: usize,
    read: R,
    mut progress: Option<Progress<'_>>,
) -> Result<()>
where
    R: Fn(u64, &mut [u8]) -> Result<()> + Sync,
{
    let total = dst.len() as u64;
    let chunk = chunk.max(4096);
    let threads = threads.max(1).min(dst.len().div_ceil(chunk).max(1));
    let queue = Mutex::new(dst.chunks_mut(chunk).enumerate());
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    // One reader's loop; `on_chunk` runs after each of its chunks and returns true to cancel.
    let reader = |on_chunk: &mut dyn FnMut() -> bool| loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
        let Some((i, piece)) = next else { break };
        let n = piece.len() as u64;
        if let Err(e) = read((i * chunk) as u64, piece) {
            stop.store(true, Ordering::Relaxed);
            first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
            break;
        }
        done.fetch_add(n, Ordering::Relaxed);
        if on_chunk() {
            stop.store(true, Ordering::Relaxed);
            break;
        }
    };
    let mut cancelled = false;
    let mut last = Instant::now();
    let mut report = || match progress.as_mut() {
        Some(p) if last.elapsed() >= PROGRESS_INTERVAL && !stop.load(Ordering::Relaxed) => {
            last = Instant::now();
            cancelled = p(done.load(Ordering::Relaxed), total);
            cancelled
        }
        _ => false,
    };
    if threads == 1 {
        reader(&mut report);
    } else {
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(|| reader(&mut || false));
            }
            reader(&mut report);
        });
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    if cancelled {
        return Err(Error::new(Status::Cancelled, "cancelled by the progress callback".to_string()));
    }
    if let Some(p) = progress.as_mut() {
        if p(total, total) {
            return Err(Error::new(Status::Cancelled, "cancelled by the progress callback at completion".to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(off: u64, dst: &mut [u8]) -> Result<()> {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = ((off + i as u64) % 251) as u8;
        }
        Ok(())
    }

    #[test]
    fn fills_every_byte_in_order() {
        for threads in [1, 2, 7] {
            for len in [0usize, 1, 4095, 4096 * 3 + 17, 1 << 20] {
                let mut v = vec![0u8; len];
                parallel_fill(&mut v, threads, 4096, pattern, None).unwrap();
                assert!(v.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8), "threads {threads} len {len}");
            }
        }
    }

    #[test]
    fn progress_is_monotonic_and_ends_at_total() {
        let mut v = vec![0u8; 1 << 20];
        let mut seen = Vec::new();
        let slow = |off: u64, d: &mut [u8]| {
            std::thread::sleep(Duration::from_millis(2));
            pattern(off, d)
        };
        let mut cb = |d: u64, t: u64| {
            seen.push((d, t));
            false
        };
        parallel_fill(&mut v, 2, 4096, slow, Some(&mut cb)).unwrap();
        assert_eq!(*seen.last().unwrap(), (1 << 20, 1 << 20));
        assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn cancel_and_errors() {
        let mut v = vec![0u8; 1 << 20];
        let slow = |off: u64, d: &mut [u8]| {
            std::thread::sleep(Duration::from_millis(3));
            pattern(off, d)
        };
        let mut cb = |_d: u64, _t: u64| true;
        let e = parallel_fill(&mut v, 2, 4096, slow, Some(&mut cb)).unwrap_err();
        assert_eq!(e.status(), Status::Cancelled);
        let failing = |off: u64, _d: &mut [u8]| {
            if off >= 8192 {
                Err(Error::new(Status::Io, format!("read at {off} failed")))
            } else {
                Ok(())
            }
        };
        let e = parallel_fill(&mut v, 3, 4096, failing, None).unwrap_err();
        assert_eq!(e.status(), Status::Io);
    }
}
