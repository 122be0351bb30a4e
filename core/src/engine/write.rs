//! The engine's file-writer side: positioned writes of host bytes into one file, several in flight.
//!
//! [`write_many`] takes a set of positioned writes — (file offset, source bytes) — and issues them
//! concurrently, up to [`Tuning::queue_depth`] at once, through the backend the reader side chose for the
//! process ([`super::backend`]):
//!
//! - **io_uring** (Linux, where the probe passed): the set is submitted with `IORING_OP_WRITE` entries on a ring
//!   of the calling thread's own, completions reaped until every write is done. Buffered writes to one file
//!   are serialised by the kernel on the file's inode (io-wq hashes them), so what the ring buys is one system
//!   call per set and the calling thread free to wait for all of them at once.
//! - **a pool of blocking positioned writes** otherwise (and on every other system): the calling thread and up
//!   to `queue_depth - 1` scoped helper threads claim writes from the set (`pwrite` on Unix, `seek_write` on
//!   Windows).
//!
//! Short writes are resumed, `EINTR`/`EAGAIN` retried; a write that makes no progress is an error, never a
//! loop. Whatever happens, [`write_many`] returns only once no write it issued can still read a source.
//!
//! Durability helpers: [`start_writeback`] asks the kernel to begin writing a range to storage now (Linux
//! `sync_file_range(SYNC_FILE_RANGE_WRITE)`; a no-op elsewhere), so that the disk works while later bytes are
//! still being produced and the final `fsync` finds little left to do; [`wait_writeback`] waits for a range
//! written earlier, which bounds the dirty pages a large save leaves behind it; [`reserve`] allocates a file's
//! blocks before any byte is written (`fallocate`; Windows: the file's allocation size), so that a full file
//! system is found at once. All three go through the platform layer ([`crate::os`]).

use super::Tuning;
use std::fs::File;

/// One positioned write: all of `src` at file offset `offset`.
pub struct Write<'a> {
    /// The file offset.
    pub offset: u64,
    /// The bytes.
    pub src: &'a [u8],
}

/// Why a write of a set failed: its index in the set and the system's error.
#[derive(Debug)]
pub struct WriteFailure {
    /// The write's index in the set.
    pub index: usize,
    /// What the system said.
    pub error: std::io::Error,
}

/// Writes all of `src` at `offset` of `file` on the calling thread (short writes resumed, `EINTR` retried).
/// A write that reports zero bytes written is `WriteZero`, never a loop.
pub fn write_exact(file: &File, mut offset: u64, mut src: &[u8]) -> std::io::Result<()> {
    while !src.is_empty() {
        match write_at(file, offset, src) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "the system wrote 0 bytes")),
            Ok(n) => {
                offset += n as u64;
                src = &src[n..];
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn write_at(file: &File, offset: u64, src: &[u8]) -> std::io::Result<usize> {
    // pwrite on Unix; seek_write on Windows (which moves the handle's file pointer too; the writer uses
    // positioned writes only).
    crate::os::write_at(file, src, offset)
}

/// Performs every write of `writes` into `file`, up to `tuning.queue_depth` at once (io_uring where the engine
/// uses it, else the pool), and returns once all have completed — or, on the first failure, once no write
/// issued can still read its source (the file then holds unspecified bytes in the failed set's ranges).
pub fn write_many(file: &File, writes: &[Write<'_>], tuning: &Tuning) -> Result<(), WriteFailure> {
    if writes.is_empty() {
        return Ok(());
    }
    let depth = tuning.resolved().queue_depth;
    #[cfg(target_os = "linux")]
    if writes.len() > 1 && super::backend() == super::Backend::IoUring {
        if let Ok(r) = uring::write_all(file, writes, depth) {
            return r;
        }
        // No ring could be made: the pool does the set (nothing was written).
    }
    pool(file, writes, depth)
}

/// [`write_many`] on the pool whatever the backend (tests compare the two).
pub fn write_many_pool(file: &File, writes: &[Write<'_>], tuning: &Tuning) -> Result<(), WriteFailure> {
    pool(file, writes, tuning.resolved().queue_depth)
}

/// [`write_many`] on io_uring whatever the choice: `Err(why)` when no ring can be had (tests).
#[cfg(target_os = "linux")]
pub fn write_many_uring(
    file: &File,
    writes: &[Write<'_>],
    tuning: &Tuning,
) -> Result<Result<(), WriteFailure>, String> {
    super::uring::probe()?;
    uring::write_all(file, writes, tuning.resolved().queue_depth)
}

/// The pool: the calling thread and up to `depth - 1` scoped helpers claim writes by index; the first failure
/// stops the claiming; every helper is joined before this returns.
fn pool(file: &File, writes: &[Write<'_>], depth: usize) -> Result<(), WriteFailure> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let n = writes.len();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<WriteFailure>> = Mutex::new(None);
    let work = || loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(w) = writes.get(i) else { return };
        if let Err(error) = write_exact(file, w.offset, w.src) {
            stop.store(true, Ordering::Relaxed);
            failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(WriteFailure { index: i, error });
            return;
        }
    };
    let helpers = depth.saturating_sub(1).min(n - 1).min(super::default_threads());
    if helpers == 0 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..helpers {
                // A thread that cannot start is not needed: the others (the caller among them) do its share.
                let _ = std::thread::Builder::new().name("hostfirst-write".into()).spawn_scoped(s, work);
            }
            work();
        });
    }
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Asks the kernel to start writing `[offset, offset + len)` of `file` to storage now, without waiting
/// (Linux: `sync_file_range(SYNC_FILE_RANGE_WRITE)`; elsewhere nothing: the final `fsync` does it all;
/// [`crate::os::start_writeback`]).
/// Best effort: an error here is left to the final `fsync`, which reports it.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    crate::os::start_writeback(file, offset, len)
}

/// Waits until `[offset, offset + len)` of `file`, written and handed to [`start_writeback`] earlier, is on
/// storage (Linux: `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)`, which also bounds the dirty pages
/// a large write leaves; elsewhere nothing). An error is returned (`EIO`, `ENOSPC` of a delayed allocation).
pub fn wait_writeback(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    crate::os::wait_writeback(file, offset, len)
}

/// Allocates the blocks of `[0, len)` of `file` now (the `fallocate` system call, Linux; Windows:
/// `SetFileInformationByHandle(FileAllocationInfo)`; [`crate::os::reserve`]), so that a file system
/// without room says so before anything is written. `Ok(false)` where the system or file system cannot (then the
/// writes find out; glibc's `posix_fallocate` would write a byte into every block instead, which is not used);
/// an error (`ENOSPC`, `EDQUOT`, `EFBIG`) otherwise.
pub fn reserve(file: &File, len: u64) -> std::io::Result<bool> {
    crate::os::reserve(file, len)
}

#[cfg(target_os = "linux")]
mod uring {
    //! The io_uring backend of [`super::write_many`]: a set of writes submitted together, completions reaped
    //! until every write is done.

    use super::{Write, WriteFailure};
    use io_uring::{opcode, types, IoUring};
    use std::os::fd::AsRawFd;

    thread_local! {
        /// This thread's ring for writes, with the process that made it (a ring inherited through fork is
        /// never used: the child makes its own).
        static RING: std::cell::RefCell<Option<(u32, IoUring)>> = const { std::cell::RefCell::new(None) };
    }

    fn take(entries: u32) -> Result<IoUring, String> {
        let pid = std::process::id();
        if let Some((p, ring)) = RING.with(|r| r.borrow_mut().take()) {
            if p == pid && ring.params().sq_entries() >= entries {
                return Ok(ring);
            }
        }
        IoUring::new(entries).map_err(|e| format!("io_uring_setup({entries} entries): {e}"))
    }

    fn give(ring: IoUring) {
        RING.with(|r| *r.borrow_mut() = Some((std::process::id(), ring)));
    }

    /// Performs every write with at most `depth` in flight. `Err(why)` when no ring could be made (nothing was
    /// written); otherwise the writes' outcome. Returns only once nothing is in flight: if the ring fails
    /// while writes are in flight, the process aborts rather than let the kernel read memory it no longer
    /// owns.
    pub(super) fn write_all(
        file: &std::fs::File,
        writes: &[Write<'_>],
        depth: usize,
    ) -> Result<Result<(), WriteFailure>, String> {
        let entries = depth.min(writes.len()).next_power_of_two().clamp(1, 4096) as u32;
        let mut ring = take(entries)?;
        let cap = (ring.params().sq_entries() as usize).min(depth.max(1));
        let fd = file.as_raw_fd();
        let lens: Vec<usize> = writes.iter().map(|w| w.src.len()).collect();
        // SAFETY: every entry points at `pos..pos + len` of a source (`pos + len ≤ src.len()`, as `drive`
        // promises), borrowed from `writes` for this whole call.
        let stopped = unsafe {
            crate::engine::uring::drive(&mut ring, &lens, cap, "writes", |i, pos, len| {
                let w = &writes[i];
                opcode::Write::new(types::Fd(fd), w.src[pos..].as_ptr(), len as u32)
                    .offset(w.offset + pos as u64)
                    .build()
            })
        };
        let failure = stopped.map(|s| WriteFailure {
            index: s.index,
            error: s
                .error
                .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::WriteZero, "the system wrote 0 bytes")),
        });
        give(ring);
        Ok(match failure {
            Some(f) => Err(f),
            None => Ok(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> (std::path::PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("hostfirst-engine-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        (p, f)
    }

    type WriteFn = fn(&File, &[Write<'_>], &Tuning) -> Result<(), WriteFailure>;

    fn backends() -> Vec<(&'static str, WriteFn)> {
        let mut v: Vec<(&'static str, WriteFn)> = vec![("pool", write_many_pool), ("auto", write_many)];
        #[cfg(target_os = "linux")]
        if super::super::uring::probe().is_ok() {
            v.push(("uring", |f, w, t| write_many_uring(f, w, t).expect("probed")));
        }
        v
    }

    /// Many writes (more than the depth, some empty, some long, in any order) land byte for byte.
    #[test]
    fn every_backend_writes_every_byte() {
        let len = 3 << 20;
        let want: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        for (name, write) in backends() {
            for depth in [1, 4, 64] {
                let (p, f) = scratch(&format!("every-{name}-{depth}"));
                // Cut the range into pieces of varied sizes, then write them in a shuffled order.
                let mut cuts = vec![0usize];
                let mut state = 7u64;
                while *cuts.last().unwrap() < len {
                    let step = [0usize, 1, 4095, 4096, 70_000, 1 << 20][(state % 6) as usize];
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 3;
                    cuts.push((cuts.last().unwrap() + step).min(len));
                }
                let mut writes: Vec<Write<'_>> =
                    cuts.windows(2).map(|w| Write { offset: w[0] as u64, src: &want[w[0]..w[1]] }).collect();
                writes.reverse();
                write(&f, &writes, &Tuning { queue_depth: depth, ..Tuning::default() }).unwrap();
                assert!(std::fs::read(&p).unwrap() == want, "{name} depth {depth}");
            }
        }
    }

    /// A write to a descriptor that cannot be written is the system's error, naming the write.
    #[test]
    fn every_backend_reports_errors() {
        let (p, _) = scratch("ro");
        let ro = File::open(&p).unwrap();
        let data = vec![1u8; 8192];
        for (name, write) in backends() {
            let writes = [Write { offset: 0, src: &data[..10] }, Write { offset: 10, src: &data }];
            let e = write(&ro, &writes, &Tuning::default()).unwrap_err();
            assert!(e.index < 2, "{name}");
            #[cfg(unix)]
            assert_eq!(e.error.raw_os_error(), Some(libc::EBADF), "{name}: {:?}", e.error);
        }
    }

    #[test]
    fn reserve_and_writeback_work_on_a_plain_file() {
        let (p, f) = scratch("reserve");
        let reserved = reserve(&f, 1 << 20).unwrap();
        if reserved {
            assert_eq!(std::fs::metadata(&p).unwrap().len(), 1 << 20);
        }
        write_exact(&f, 0, &[7u8; 4096]).unwrap();
        start_writeback(&f, 0, 4096);
        wait_writeback(&f, 0, 4096).unwrap();
        assert_eq!(std::fs::read(&p).unwrap()[..4096], [7u8; 4096]);
    }
}
