//! The transfer engine: the one path by which bytes of a file reach memory hostfirst hands out.
//!
//! **Reader side** (this module): [`read_many`] takes a set of positioned reads — (descriptor, file offset,
//! destination) — and issues them concurrently, up to [`Tuning::queue_depth`] at once, so that cold data costs
//! about one round of the storage device's latency instead of one per read, and warm data costs one system
//! call per batch instead of one per read. Two backends, chosen once per process at run time:
//!
//! - **io_uring** where the kernel offers it: probed, never version-checked (an 8-entry ring, the probe of
//!   `IORING_OP_READ`, a no-op round trip; seccomp filters, `kernel.io_uring_disabled` and sandboxes answer
//!   `EPERM`/`ENOSYS` there). The whole set is submitted with one `io_uring_enter`; reads of cached pages
//!   complete inline, the others asynchronously in the kernel, and the calling thread waits for all of them
//!   at once. Each thread keeps a ring of its own that defers completion work until the thread waits
//!   (`IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`, Linux 6.1): a cold batch then wakes its
//!   thread once instead of once per read, which matters when a training step shares the CPUs. Kernels
//!   without it use a small per-process cache of plain rings. A ring inherited through `fork` is never used. If a ring of the asked depth cannot be made later
//!   (`ENOMEM`, `RLIMIT_MEMLOCK`), the engine demotes itself to the pool for the rest of the process.
//! - **a pool of blocking `pread`s** otherwise: persistent helper threads (started on demand, at most
//!   `queue_depth - 1`) and the calling thread claim reads from the set; the caller never depends on a helper,
//!   so a forked child (which has no helpers) still completes every read, serially.
//!
//! `HOSTFIRST_IO=pool` (or `uring`, `auto`) forces the choice for the process; [`backend`] says which one is in
//! use and why (the build info and `hostfirst devices` print it).
//!
//! [`fill`] reads one large range as pieces of [`Tuning::chunk`] bytes in waves of the queue depth, reporting
//! to a [`Progress`] between waves: the form the bulk transfers (put, load, shard-on-read) will take when they
//! move onto the engine. Today the gather is the engine's user.
//!
//! **Writer side**: [`write::write_many`] is the same for positioned writes of host bytes into one file
//! (io_uring `IORING_OP_WRITE` or a pool of `pwrite`s), with the durability helpers the safetensors writer
//! uses; [`drain::device_to_host_slabs`] streams CUDA memory to host consumers through the staging ring.
//!
//! Short reads are resumed; `EINTR`/`EAGAIN` are retried; a read at end of file reports [`ReadFailure::Eof`]
//! (the caller turns it into `TRUNCATED`). Whatever happens, [`read_many`] returns only once no read it
//! issued can still write into a destination.

pub mod bulk;
pub mod device;
pub mod drain;
pub mod per_file;
pub mod plan;
pub mod staging;
pub mod write;
pub use bulk::{
    fill_host, read_exact, read_pieces, read_scatter, read_scatter_with, read_vectored_exact, ScatterDst, ScatterPiece,
    ScatterPlan,
};
pub use plan::{ReadPlan, Request, Slice};
mod pool;
#[cfg(target_os = "linux")]
pub(crate) mod uring;

use crate::error::{Error, Result, Status};
use crate::forksafe::InitOnce;
use crate::os::RawFile;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// How much parallelism a transfer uses. One type for every path of the engine; 0 in any field means "the
/// default" ([`Tuning::resolved`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Threads that copy bytes (memcpy from a mapping, staging copies). Default: the CPUs available, 1 to 16.
    pub threads: usize,
    /// Bytes per piece of a large transfer (each piece is one read and one progress step). Default 8 MiB.
    pub chunk: usize,
    /// Bytes of page-locked staging a CUDA transfer may use. Default: 4 pieces.
    pub staging: usize,
    /// Reads in flight at once (io_uring entries, or pool threads plus the caller). Default 64: what a
    /// solid-state disk needs to reach its random-read rate.
    pub queue_depth: usize,
}

/// The default queue depth.
pub const DEFAULT_QUEUE_DEPTH: usize = 64;
/// The largest queue depth accepted (larger values are clamped).
pub const MAX_QUEUE_DEPTH: usize = 4096;
/// The default piece size.
pub const DEFAULT_CHUNK: usize = 8 << 20;

impl Tuning {
    /// Every field set: defaults for zeros, the queue depth clamped to 1..=[`MAX_QUEUE_DEPTH`].
    pub fn resolved(&self) -> Tuning {
        let threads = if self.threads == 0 { default_threads() } else { self.threads };
        let chunk = if self.chunk == 0 { DEFAULT_CHUNK } else { self.chunk.max(4096) };
        let staging = if self.staging == 0 { 4 * chunk } else { self.staging };
        let queue_depth = if self.queue_depth == 0 { DEFAULT_QUEUE_DEPTH } else { self.queue_depth };
        Tuning { threads, chunk, staging, queue_depth: queue_depth.clamp(1, MAX_QUEUE_DEPTH) }
    }
}

/// Default number of reader threads: the CPUs available to the process, between 1 and 16.
pub fn default_threads() -> usize {
    // Cached: available_parallelism reads cgroup files and was a third of a small put's cost.
    static N: InitOnce<usize> = InitOnce::new();
    *N.get_or_init(|| crate::device::host::cpu_count().clamp(1, 16))
}

/// The shortest interval between two progress reports (the last report, at completion, is always made).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// The progress contract, once: a sink called with (bytes done, bytes total) that returns `true` to cancel;
/// reports are rate-limited to one per [`PROGRESS_INTERVAL`], never go backwards, and end with exactly one
/// final call with `done == total` (which may still cancel). A transfer of several tensors reports offsets
/// across all of them: each part is started at its `base` with [`Progress::part`].
pub struct Progress<'a> {
    sink: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
    total: u64,
    base: u64,
    reported: u64,
    last: Option<Instant>,
}

impl<'a> Progress<'a> {
    /// A progress over `total` bytes reporting to `sink` (None: nothing is reported, nothing cancels).
    pub fn new(sink: Option<&'a mut dyn FnMut(u64, u64) -> bool>, total: u64) -> Progress<'a> {
        Progress { sink, total, base: 0, reported: 0, last: None }
    }

    /// Later [`Progress::at`] calls count from `base` bytes (the start of the next tensor of a multi-tensor
    /// transfer).
    pub fn part(&mut self, base: u64) {
        self.base = base.min(self.total);
    }

    /// `done` bytes of the current part are in place: reports `base + done` if the interval has passed since
    /// the last report (the first report is never delayed) and it is ahead of it. `CANCELLED` when the sink
    /// asks to stop.
    pub fn at(&mut self, done: u64) -> Result<()> {
        let now = (self.base + done).min(self.total);
        let Some(sink) = self.sink.as_mut() else { return Ok(()) };
        if now < self.reported || now == self.total || self.last.is_some_and(|t| t.elapsed() < PROGRESS_INTERVAL) {
            return Ok(());
        }
        self.last = Some(Instant::now());
        self.reported = now;
        if sink(now, self.total) {
            return Err(Error::new(Status::Cancelled, "cancelled by the progress callback".to_string()));
        }
        Ok(())
    }

    /// Everything is in place: the final report (`done == total`); `CANCELLED` if the sink asks to stop even now.
    pub fn finish(&mut self) -> Result<()> {
        let total = self.total;
        let Some(sink) = self.sink.as_mut() else { return Ok(()) };
        self.reported = total;
        if sink(total, total) {
            return Err(Error::new(Status::Cancelled, "cancelled by the progress callback at completion".to_string()));
        }
        Ok(())
    }
}

/// One positioned read: `dst.len()` bytes of descriptor `fd` from `offset`.
pub struct Read<'a> {
    /// An open, readable descriptor or handle ([`crate::os::raw_file`]); it must stay open until [`read_many`]
    /// returns.
    pub fd: RawFile,
    /// The file offset.
    pub offset: u64,
    /// Where the bytes go.
    pub dst: &'a mut [u8],
}

/// Why a read of a set failed: the index of the read in the set, and what happened.
#[derive(Debug)]
pub struct ReadFailure {
    /// The read's index in the set.
    pub index: usize,
    /// What happened.
    pub kind: FailureKind,
}

/// What went wrong with one read.
#[derive(Debug)]
pub enum FailureKind {
    /// The file ended before byte `at` (absolute offset) of the read.
    Eof {
        /// The first file offset that could not be read.
        at: u64,
    },
    /// The system said no.
    Os(std::io::Error),
}

/// The backends of the reader side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// io_uring, one submission per set of reads.
    IoUring,
    /// Persistent threads doing blocking `pread`s, the caller among them.
    Pool,
}

impl Backend {
    /// `"io_uring"` or `"pread pool"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::IoUring => "io_uring",
            Backend::Pool => "pread pool",
        }
    }
}

const UNDECIDED: u8 = 0;
const URING: u8 = 1;
const POOL: u8 = 2;
static CHOSEN: AtomicU8 = AtomicU8::new(UNDECIDED);
/// Why the pool is used (the probe's answer, the environment, or the failure that demoted io_uring).
static WHY_POOL: InitOnce<String> = InitOnce::new();
static DEMOTED: InitOnce<String> = InitOnce::new();

fn choose() -> u8 {
    let c = CHOSEN.load(Ordering::Acquire);
    if c != UNDECIDED {
        return c;
    }
    let pick = if env_forces_pool(std::env::var_os("HOSTFIRST_IO").as_deref()) {
        let _ = WHY_POOL.set("HOSTFIRST_IO=pool".to_string());
        POOL
    } else {
        match probed() {
            Ok(()) => URING,
            Err(why) => {
                let _ = WHY_POOL.set(format!("io_uring unavailable: {why}"));
                POOL
            }
        }
    };
    // The first decision wins if two threads probe at once.
    match CHOSEN.compare_exchange(UNDECIDED, pick, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => pick,
        Err(other) => other,
    }
}

/// Whether a value of `HOSTFIRST_IO` (None: unset) forces the pool of preads: `pool` or `pread`, white space
/// around it ignored. Anything else (unset, other words, text that is not UTF-8) leaves the choice to the
/// io_uring probe.
pub fn env_forces_pool(value: Option<&std::ffi::OsStr>) -> bool {
    value.and_then(|v| v.to_str()).is_some_and(|v| matches!(v.trim(), "pool" | "pread"))
}

#[cfg(target_os = "linux")]
fn probe_uring() -> std::result::Result<(), String> {
    uring::probe()
}

#[cfg(not(target_os = "linux"))]
fn probe_uring() -> std::result::Result<(), String> {
    Err("not Linux".to_string())
}

/// The io_uring probe's answer, made once for the process.
static PROBED: InitOnce<std::result::Result<(), String>> = InitOnce::new();

fn probed() -> std::result::Result<(), String> {
    PROBED.get_or_init(probe_uring).clone()
}

/// Whether io_uring is usable in this process, and why not (issue 45, point 5): the kernel's answer to the
/// probe, explained (`io_uring_setup` refused by a seccomp filter or by `kernel.io_uring_disabled`, a kernel
/// without io_uring, the locked-memory limit), or the failure that demoted it later. Probes when
/// `HOSTFIRST_IO=pool` kept the reader from probing (the answer is then about the system, not the reader).
pub fn uring_usable() -> std::result::Result<(), String> {
    if let Some(d) = DEMOTED.get() {
        return Err(format!("demoted after it failed: {d}"));
    }
    probed()
}

/// Stops using io_uring for the rest of the process (a ring of the needed depth could not be made).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn demote(why: String) {
    let _ = DEMOTED.set(why);
    CHOSEN.store(POOL, Ordering::Release);
}

/// The backend in use (probing on first call; the probe is cached for the process).
pub fn backend() -> Backend {
    if choose() == URING {
        Backend::IoUring
    } else {
        Backend::Pool
    }
}

/// One line for the build info and `hostfirst devices`: the backend, and why the pool when it is the pool.
pub fn describe() -> String {
    match backend() {
        Backend::IoUring => format!("io_uring (queue depth {DEFAULT_QUEUE_DEPTH})"),
        Backend::Pool => {
            let why = DEMOTED
                .get()
                .map(|d| format!("io_uring demoted: {d}"))
                .or_else(|| WHY_POOL.get().cloned())
                .unwrap_or_default();
            format!("pread pool (up to {DEFAULT_QUEUE_DEPTH} reads in flight; {why})")
        }
    }
}

/// Performs every read of `reads`, up to `tuning.queue_depth` at once, and returns once all have completed —
/// or, on the first failure, once no read issued can still write into its destination (the destinations of
/// the failed set then hold unspecified bytes). Backends as in the module documentation.
pub fn read_many(reads: &mut [Read<'_>], tuning: &Tuning) -> std::result::Result<(), ReadFailure> {
    let depth = tuning.resolved().queue_depth;
    if reads.is_empty() {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    if reads.len() > 1 && choose() == URING {
        match uring::read_all(reads, depth) {
            Ok(r) => return r,
            Err(setup) => demote(setup),
        }
    }
    pool::read_all(reads, depth)
}

/// [`read_many`] on the pool whatever the backend (tests compare the two).
pub fn read_many_pool(reads: &mut [Read<'_>], tuning: &Tuning) -> std::result::Result<(), ReadFailure> {
    pool::read_all(reads, tuning.resolved().queue_depth)
}

/// [`read_many`] on io_uring whatever the choice: `Err(why)` when no ring can be had (tests).
#[cfg(target_os = "linux")]
pub fn read_many_uring(
    reads: &mut [Read<'_>],
    tuning: &Tuning,
) -> std::result::Result<std::result::Result<(), ReadFailure>, String> {
    uring::probe()?;
    uring::read_all(reads, tuning.resolved().queue_depth)
}

/// Reads `dst.len()` bytes of `fd` from `offset` as pieces of `tuning.chunk` bytes, `tuning.queue_depth` of them in
/// flight at a time (the building block for large transfers), reporting to `progress` after each wave of pieces
/// (rate-limited, see [`Progress`]) and once at the end; a read failure becomes an error through `failed`.
/// `CANCELLED` when the progress sink asks to stop: no piece is then in flight and `dst` holds what was read.
pub fn fill(
    fd: RawFile,
    offset: u64,
    dst: &mut [u8],
    tuning: &Tuning,
    progress: &mut Progress<'_>,
    failed: &dyn Fn(ReadFailure) -> Error,
) -> Result<()> {
    let t = tuning.resolved();
    let mut done = 0u64;
    let mut pieces = dst.chunks_mut(t.chunk).enumerate().peekable();
    while pieces.peek().is_some() {
        let mut wave: Vec<Read<'_>> = pieces
            .by_ref()
            .take(t.queue_depth)
            .map(|(i, d)| Read { fd, offset: offset + (i * t.chunk) as u64, dst: d })
            .collect();
        let bytes: u64 = wave.iter().map(|r| r.dst.len() as u64).sum();
        read_many(&mut wave, &t).map_err(failed)?;
        done += bytes;
        if pieces.peek().is_some() {
            progress.at(done)?;
        }
    }
    progress.finish()
}

/// One blocking positioned read of all of `dst` (resumed after short reads, retried on `EINTR`).
fn pread_full(fd: RawFile, mut offset: u64, mut dst: &mut [u8]) -> std::result::Result<(), FailureKind> {
    while !dst.is_empty() {
        let n = match crate::os::read_at(fd, dst, offset) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FailureKind::Os(e)),
        };
        if n == 0 {
            return Err(FailureKind::Eof { at: offset });
        }
        offset += n as u64;
        dst = &mut dst[n..];
    }
    Ok(())
}

/// Reads into `dst` from `fd` at `offset` until at least `min` bytes are in (`min` at most `dst.len()`; short
/// reads resumed, `EINTR` retried) and returns how many were read, up to `dst.len()`: for the last block of a
/// direct (`O_DIRECT`) read, which asks for a whole aligned block and comes back short at the end of the file.
/// [`FailureKind::Eof`] where the file ends before `offset + min`.
pub fn read_at_least(fd: RawFile, offset: u64, dst: &mut [u8], min: usize) -> std::result::Result<usize, FailureKind> {
    let mut got = 0;
    while got < min {
        match crate::os::read_at(fd, &mut dst[got..], offset + got as u64) {
            Ok(0) => return Err(FailureKind::Eof { at: offset + got as u64 }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FailureKind::Os(e)),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::fd::AsRawFd;

    /// A scratch file of `len` bytes, byte i = i * 31 mod 251.
    fn file(name: &str, len: usize) -> (std::path::PathBuf, std::fs::File) {
        let dir = std::env::temp_dir().join(format!("hostfirst-engine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, (0..len).map(|i| (i * 31 % 251) as u8).collect::<Vec<_>>()).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        (p, f)
    }

    type ReadFn = fn(&mut [Read<'_>], &Tuning) -> std::result::Result<(), ReadFailure>;

    fn backends() -> Vec<(&'static str, ReadFn)> {
        let mut v: Vec<(&'static str, ReadFn)> = vec![("pool", read_many_pool), ("auto", read_many)];
        #[cfg(target_os = "linux")]
        if uring::probe().is_ok() {
            v.push(("uring", |r, t| read_many_uring(r, t).expect("probed")));
        }
        v
    }

    /// Many reads (more than the depth, some empty, some long, overlapping) match the file byte for byte.
    #[test]
    fn every_backend_reads_every_byte() {
        let len = 3 << 20;
        let (_p, f) = file("every", len);
        let want: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let mut state = 9u64;
        let spans: Vec<(u64, usize)> = (0..300)
            .map(|k| {
                let n = [0usize, 1, 2050, 4096, 70_000, 1 << 20][k % 6];
                let o = crate::place::gather::splitmix64(&mut state) % (len - n) as u64;
                (o, n)
            })
            .collect();
        for (name, read) in backends() {
            for depth in [1, 4, 64] {
                let mut bufs: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0u8; n]).collect();
                let mut reads: Vec<Read<'_>> = spans
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(&(o, _), b)| Read { fd: f.as_raw_fd(), offset: o, dst: b })
                    .collect();
                read(&mut reads, &Tuning { queue_depth: depth, ..Tuning::default() }).unwrap();
                for ((o, n), b) in spans.iter().zip(&bufs) {
                    assert!(b[..] == want[*o as usize..*o as usize + n], "{name} depth {depth} at {o}+{n}");
                }
            }
        }
    }

    /// A read past the end of the file is `Eof` at the first missing byte; a bad descriptor is an OS error;
    /// the other reads of the set are unaffected in what they report.
    #[test]
    fn every_backend_reports_eof_and_errors() {
        let (_p, f) = file("short", 10_000);
        for (name, read) in backends() {
            let (mut a, mut b, mut c) = (vec![0u8; 100], vec![0u8; 200], vec![0u8; 100]);
            let mut reads = vec![
                Read { fd: f.as_raw_fd(), offset: 0, dst: &mut a },
                Read { fd: f.as_raw_fd(), offset: 9_900, dst: &mut b },
                Read { fd: f.as_raw_fd(), offset: 500, dst: &mut c },
            ];
            let e = read(&mut reads, &Tuning::default()).unwrap_err();
            assert_eq!(e.index, 1, "{name}");
            assert!(matches!(e.kind, FailureKind::Eof { at: 10_000 }), "{name}: {:?}", e.kind);
            let (mut a, mut b) = (vec![0u8; 10], vec![0u8; 10]);
            let mut reads =
                vec![Read { fd: f.as_raw_fd(), offset: 0, dst: &mut a }, Read { fd: -1, offset: 0, dst: &mut b }];
            let e = read(&mut reads, &Tuning::default()).unwrap_err();
            assert_eq!(e.index, 1, "{name}");
            assert!(
                matches!(&e.kind, FailureKind::Os(o) if o.raw_os_error() == Some(libc::EBADF)),
                "{name}: {:?}",
                e.kind
            );
        }
    }

    /// The probe's answer is cached and named; on this kernel (Linux >= 5.6, io_uring not disabled) it is
    /// io_uring unless HOSTFIRST_IO=pool forces the pool.
    #[test]
    fn the_backend_is_chosen_once_and_described() {
        let b = backend();
        assert_eq!(backend(), b);
        assert!(describe().starts_with(b.name()), "{}", describe());
        #[cfg(target_os = "linux")]
        if std::env::var_os("HOSTFIRST_IO").is_none() && uring::probe().is_ok() {
            assert_eq!(b, Backend::IoUring, "{}", describe());
        }
        if std::env::var("HOSTFIRST_IO").as_deref() == Ok("pool") {
            assert_eq!(b, Backend::Pool);
            assert!(describe().contains("HOSTFIRST_IO=pool"), "{}", describe());
        }
    }

    /// A large range in small pieces: every byte, progress monotonic and final, cancel stops early, a short file
    /// is the failure the caller maps.
    #[test]
    fn fill_reads_in_waves_with_progress_and_cancel() {
        let len = 1 << 20;
        let (_p, f) = file("fill", len);
        let want: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let t = Tuning { chunk: 4096, queue_depth: 8, ..Tuning::default() };
        let failed = |r: ReadFailure| Error::new(Status::Io, format!("read {} failed: {:?}", r.index, r.kind));
        let mut seen = Vec::new();
        let mut sink = |d: u64, total: u64| {
            seen.push((d, total));
            false
        };
        let mut dst = vec![0u8; len - 100];
        fill(f.as_raw_fd(), 100, &mut dst, &t, &mut Progress::new(Some(&mut sink), (len - 100) as u64), &failed)
            .unwrap();
        assert!(dst[..] == want[100..]);
        assert_eq!(seen.first().map(|s| s.0 < (len - 100) as u64), Some(true), "{seen:?}");
        assert_eq!(*seen.last().unwrap(), ((len - 100) as u64, (len - 100) as u64));
        assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
        let mut calls = 0;
        let mut cancel = |_: u64, _: u64| {
            calls += 1;
            true
        };
        let mut dst = vec![0u8; len];
        let e = fill(f.as_raw_fd(), 0, &mut dst, &t, &mut Progress::new(Some(&mut cancel), len as u64), &failed);
        assert_eq!(e.unwrap_err().status(), Status::Cancelled);
        assert_eq!(calls, 1, "stopped at the first report");
        let mut dst = vec![0u8; 8192];
        let e = fill(f.as_raw_fd(), len as u64 - 4096, &mut dst, &t, &mut Progress::new(None, 8192), &failed);
        assert!(e.unwrap_err().message().contains("Eof"));
    }

    /// A forked child reads through io_uring too: the ring its thread inherited belongs to the parent's task
    /// (a single-issuer ring refuses any other task), so the child makes its own.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_forked_child_reads_with_a_ring_of_its_own() {
        let len = 1 << 16;
        let (_p, f) = file("fork", len);
        let fd = f.as_raw_fd();
        let check = move || {
            let (mut a, mut b) = (vec![0u8; 5000], vec![0u8; 3000]);
            let mut reads = vec![Read { fd, offset: 100, dst: &mut a }, Read { fd, offset: 60_000, dst: &mut b }];
            read_many(&mut reads, &Tuning::default()).unwrap();
            let want = |o: usize, n: usize| (o..o + n).map(|i| (i * 31 % 251) as u8).collect::<Vec<_>>();
            a == want(100, 5000) && b == want(60_000, 3000)
        };
        assert!(check(), "parent");
        // SAFETY: the child only reads and exits with _exit (glibc's allocator is usable after fork).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let ok = std::panic::catch_unwind(check).unwrap_or(false);
            // SAFETY: ends the child without running the parent's atexit handlers or test harness.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
        assert!(check(), "parent after the fork");
    }

    #[test]
    fn tuning_defaults_and_clamps() {
        let t = Tuning::default().resolved();
        assert!(t.threads >= 1 && t.chunk == DEFAULT_CHUNK && t.staging == 4 * DEFAULT_CHUNK);
        assert_eq!(t.queue_depth, DEFAULT_QUEUE_DEPTH);
        let t = Tuning { threads: 3, chunk: 10, staging: 7, queue_depth: 1 << 20 }.resolved();
        assert_eq!((t.threads, t.chunk, t.staging, t.queue_depth), (3, 4096, 7, MAX_QUEUE_DEPTH));
    }

    #[test]
    fn progress_is_rate_limited_monotonic_and_final() {
        let mut seen = Vec::new();
        let mut sink = |d: u64, t: u64| {
            seen.push((d, t));
            false
        };
        let mut p = Progress::new(Some(&mut sink), 100);
        p.at(10).unwrap(); // first report: at once
        p.at(20).unwrap(); // within the interval: skipped
        p.part(50);
        std::thread::sleep(PROGRESS_INTERVAL);
        p.at(5).unwrap(); // 55, across parts
        p.part(0);
        std::thread::sleep(PROGRESS_INTERVAL);
        p.at(1).unwrap(); // behind: never reported
        p.finish().unwrap();
        assert_eq!(seen, [(10, 100), (55, 100), (100, 100)]);
        let mut cancel = |_: u64, _: u64| true;
        let mut p = Progress::new(Some(&mut cancel), 10);
        assert_eq!(p.at(1).unwrap_err().status(), Status::Cancelled);
        assert_eq!(p.finish().unwrap_err().status(), Status::Cancelled);
        Progress::new(None, 5).finish().unwrap();
    }
}
