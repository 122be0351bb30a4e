//! The engine's bulk side: what put, shard-on-read and `buffer_to` call to move bytes into host memory.
//!
//! - [`read_exact`]: one blocking positioned read of a whole range (the engine's single-read primitive; every
//!   `pread` of a file's tensor bytes outside a read set comes here, through `View::read_at`).
//! - [`fill_host`]: a large host destination filled in [`Tuning::chunk`] pieces by [`Tuning::threads`] threads
//!   (the calling thread among them), each piece prepared (fresh pages populated) and read by the same thread,
//!   progress reported from the calling thread between its pieces.
//! - [`read_pieces`]: the scattered pieces of a strided range of one file, merged into reads under a
//!   [`ReadPolicy`] and submitted as read sets through [`super::read_many`] (one io_uring submission per set),
//!   progress between sets.
//!
//! None of them makes the final progress report: a transfer of several parts (the shards of a run) reports
//! across them with [`Progress::part`] and calls [`Progress::finish`] once at the end.

use super::{pread_full, read_many, FailureKind, Progress, Read, ReadFailure, Tuning};
use crate::error::{Error, Result};
use crate::file::layout::coalesce;
use crate::file::ReadPolicy;
use crate::os::{IoVec, RawFile};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Work done on a piece of a host destination just before bytes are read into it, by the thread that reads
/// it (populating fresh pages: [`crate::place::host::populate_write`]).
pub type Prepare<'a> = &'a (dyn Fn(&mut [u8]) + Sync);

/// Reads all of `dst` from `fd` at `offset` on the calling thread (short reads resumed, `EINTR` retried);
/// [`FailureKind::Eof`] at the first byte the file does not have.
pub fn read_exact(fd: RawFile, offset: u64, dst: &mut [u8]) -> std::result::Result<(), FailureKind> {
    pread_full(fd, offset, dst)
}

/// Fills `dst` with `read(offset, piece)` calls (offsets relative to the start of `dst`), in pieces of
/// `tuning.chunk` bytes over `tuning.threads` threads; the calling thread is one of them (no thread is
/// started for a single piece) and alone reports to `progress` between its pieces (`done` counts bytes of
/// `dst`). `prepare` runs on each piece just before its read, on the same thread (populating fresh pages in
/// parallel), and once more when every piece is in place (rate-limited: skipped when it reported within the
/// interval). The first read error wins and stops the others; a cancel from `progress` stops them too. No
/// final report: the caller calls [`Progress::finish`].
pub fn fill_host<R>(
    dst: &mut [u8],
    tuning: &Tuning,
    prepare: Option<Prepare<'_>>,
    read: R,
    progress: &mut Progress<'_>,
) -> Result<()>
where
    R: Fn(u64, &mut [u8]) -> Result<()> + Sync,
{
    let t = tuning.resolved();
    let chunk = t.chunk;
    let threads = t.threads.max(1).min(dst.len().div_ceil(chunk).max(1));
    let queue = Mutex::new(dst.chunks_mut(chunk).enumerate());
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        stop.store(true, Ordering::Relaxed);
        first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    };
    // One reader's loop; `after` runs after each of its pieces (the caller's reports progress).
    let reader = |after: &mut dyn FnMut() -> Result<()>| loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
        let Some((i, piece)) = next else { break };
        let n = piece.len() as u64;
        if let Some(p) = prepare {
            p(piece);
        }
        if let Err(e) = read((i * chunk) as u64, piece) {
            fail(e);
            break;
        }
        done.fetch_add(n, Ordering::Relaxed);
        if let Err(e) = after() {
            fail(e);
            break;
        }
    };
    on_threads(threads, &reader, &done, progress, &first_error)
}

/// Runs `worker` on `threads` threads, the calling thread one of them and the only one whose `after` reports
/// `done` to `progress`; then the first error in `first_error`, or, when there is none, one more report at
/// the end of the calling thread's share (rate-limited like the others): when the other threads took every
/// step, the caller has reported nothing yet, and the sink must still get its chance to cancel.
fn on_threads<W>(
    threads: usize,
    worker: &W,
    done: &AtomicU64,
    progress: &mut Progress<'_>,
    first_error: &Mutex<Option<Error>>,
) -> Result<()>
where
    W: Fn(&mut dyn FnMut() -> Result<()>) + Sync,
{
    let mut report = || progress.at(done.load(Ordering::Relaxed));
    if threads == 1 {
        worker(&mut report);
    } else {
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(|| worker(&mut || Ok(())));
            }
            worker(&mut report);
        });
    }
    match first_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(e) => Err(e),
        None => report(),
    }
}

/// One merged read of [`read_pieces`]: the file range `[lo, hi)` and the pieces (file offset, offset in the
/// destination, length) it serves.
struct Merged {
    lo: u64,
    hi: u64,
    pieces: Vec<(u64, u64, u64)>,
}

/// Reads the pieces `(file offset, offset in dst, length)` of `fd` — in increasing file order, disjoint in
/// `dst` — into `dst`: neighbouring pieces are merged into one read under `policy` (the gap read into a
/// scratch buffer and dropped), and the merged reads are submitted as read sets of about `tuning.staging`
/// bytes each through [`read_many`] (io_uring or the pread pool, `tuning.queue_depth` in flight), reporting
/// `done` = bytes of `dst` placed to `progress` between sets. Returns the bytes read from the file (≥ the
/// pieces' bytes by the gaps merged reads took). A read failure becomes an error through `failed`.
pub fn read_pieces(
    fd: RawFile,
    pieces: impl Iterator<Item = (u64, u64, u64)>,
    dst: &mut [u8],
    policy: &ReadPolicy,
    tuning: &Tuning,
    progress: &mut Progress<'_>,
    failed: &dyn Fn(ReadFailure) -> Error,
) -> Result<u64> {
    let t = tuning.resolved();
    let mut merged: Vec<Merged> = Vec::new();
    coalesce(pieces, policy, |lo, hi, group| {
        merged.push(Merged { lo, hi, pieces: group.to_vec() });
        Ok(())
    })?;
    let budget = t.staging.max(t.chunk) as u64;
    let (mut read_bytes, mut placed) = (0u64, 0u64);
    let mut rest = &merged[..];
    while !rest.is_empty() {
        // The next set: merged reads until the budget is reached (at least one).
        let mut n = 0;
        let mut bytes = 0u64;
        while n < rest.len() && (n == 0 || bytes + (rest[n].hi - rest[n].lo) <= budget) {
            bytes += rest[n].hi - rest[n].lo;
            n += 1;
        }
        let (set, after) = rest.split_at(n);
        rest = after;
        placed += read_set(fd, set, dst, &t, failed)?;
        read_bytes += bytes;
        if !rest.is_empty() {
            progress.at(placed)?;
        }
    }
    Ok(read_bytes)
}

/// One read set of [`read_pieces`]: single-piece reads straight into `dst`, merged ones into scratch, then
/// scattered. Returns the bytes of `dst` placed.
fn read_set(
    fd: RawFile,
    set: &[Merged],
    dst: &mut [u8],
    t: &Tuning,
    failed: &dyn Fn(ReadFailure) -> Error,
) -> Result<u64> {
    let scratch_len: u64 = set.iter().filter(|m| m.pieces.len() > 1).map(|m| m.hi - m.lo).sum();
    let mut scratch = vec![0u8; scratch_len as usize];
    // Direct reads: the single pieces, in destination order, carved out of `dst` one after the other.
    let mut direct: Vec<(u64, u64, u64)> = set.iter().filter(|m| m.pieces.len() == 1).map(|m| m.pieces[0]).collect();
    direct.sort_by_key(|p| p.1);
    let mut reads: Vec<Read<'_>> = Vec::with_capacity(set.len());
    let mut tail: &mut [u8] = dst;
    let mut at = 0u64;
    for &(src, d, n) in &direct {
        let (_, from) = std::mem::take(&mut tail).split_at_mut((d - at) as usize);
        let (piece, after) = from.split_at_mut(n as usize);
        reads.push(Read { fd, offset: src, dst: piece });
        tail = after;
        at = d + n;
    }
    let mut free: &mut [u8] = &mut scratch;
    for m in set.iter().filter(|m| m.pieces.len() > 1) {
        let (buf, after) = std::mem::take(&mut free).split_at_mut((m.hi - m.lo) as usize);
        reads.push(Read { fd, offset: m.lo, dst: buf });
        free = after;
    }
    read_many(&mut reads, t).map_err(failed)?;
    drop(reads);
    let mut placed: u64 = direct.iter().map(|p| p.2).sum();
    let mut s = 0usize;
    for m in set.iter().filter(|m| m.pieces.len() > 1) {
        for &(src, d, n) in &m.pieces {
            let from = s + (src - m.lo) as usize;
            dst[d as usize..(d + n) as usize].copy_from_slice(&scratch[from..from + n as usize]);
            placed += n;
        }
        s += (m.hi - m.lo) as usize;
    }
    Ok(placed)
}

/// A positioned vectored read of `file` at `at` into `iov` until every piece is full (a load's coalesced run
/// scattered into its tensors' places; `preadv`, or a read per piece on Windows: [`crate::os::read_vectored_at`]);
/// a file that ends first is `TRUNCATED`, `what` names the read in messages.
pub fn read_vectored_exact(
    file: &std::fs::File,
    mut at: u64,
    mut iov: &mut [IoVec],
    what: &dyn Fn() -> String,
) -> Result<()> {
    while !iov.is_empty() {
        if iov[0].is_empty() {
            iov = &mut iov[1..];
            continue;
        }
        // SAFETY: every piece points at memory this job owns exclusively (an arena range or its scratch),
        // valid for its length.
        let r = match unsafe { crate::os::read_vectored_at(file, iov, at) } {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::new(crate::error::Status::Io, format!("{}: read failed: {e}", what()))),
        };
        if r == 0 {
            let left: usize = iov.iter().map(|v| v.len()).sum();
            let now = file.metadata().map(|m| m.len().to_string()).unwrap_or_else(|_| "?".into());
            return Err(Error::new(
                crate::error::Status::Truncated,
                format!(
                    "{}: the file ends before byte {} (it is now {now} bytes; was it truncated after opening?)",
                    what(),
                    at + left as u64
                ),
            ));
        }
        let mut n = r;
        at += n as u64;
        while n > 0 {
            let v = &mut iov[0];
            if n >= v.len() {
                n -= v.len();
                iov = &mut iov[1..];
            } else {
                v.advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

/// A piece of a scattered read: (file offset, destination index, offset in that destination, length).
pub type ScatterPiece = (u64, usize, u64, u64);

/// One read of a [`ScatterPlan`]: the file range `[lo, hi)` and the pieces it serves (one piece covering the
/// whole range is read straight into its destination; several go through scratch, gaps dropped).
#[derive(Clone, Debug)]
struct ScatterRead {
    lo: u64,
    hi: u64,
    pieces: Vec<ScatterPiece>,
}

/// The reads that fill several destinations from one file: pieces of every destination merged across
/// destinations under a [`ReadPolicy`] (neighbouring shards of one tensor read together when the gaps between
/// them stay within the over-read bound), long single pieces cut into reads of at most the policy's
/// `max_read`, and the reads grouped into tasks of about [`Tuning::chunk`] bytes for [`read_scatter`].
#[derive(Clone, Debug)]
pub struct ScatterPlan {
    reads: Vec<ScatterRead>,
    /// Task boundaries: task `k` is `reads[tasks[k]..tasks[k + 1]]`.
    tasks: Vec<usize>,
    /// File bytes read on behalf of each destination (its pieces, and the gaps attributed to it).
    per_dst: Vec<u64>,
    /// Per destination, whether its pieces come in increasing destination order (then each task can prepare
    /// the part it fills; otherwise the destination is prepared whole before any read).
    monotone: Vec<bool>,
}

impl ScatterPlan {
    /// Plans the reads of `pieces` (sorted by file offset, disjoint in their destinations) into `dsts`
    /// destinations. A gap inside a merged read is counted for the destination that holds bytes on both sides
    /// of it (the piece before it, if that destination has a piece after it; else the piece after it).
    pub fn new(pieces: &[ScatterPiece], dsts: usize, policy: &ReadPolicy, tuning: &Tuning) -> Result<ScatterPlan> {
        let chunk = tuning.resolved().chunk as u64;
        let cut = policy.max_read.min(chunk).max(1);
        let mut reads: Vec<ScatterRead> = Vec::new();
        let mut per_dst = vec![0u64; dsts];
        let mut last_d: Vec<Option<u64>> = vec![None; dsts];
        let mut monotone = vec![true; dsts];
        for &(_, j, d, _) in pieces {
            if last_d[j].is_some_and(|l| d < l) {
                monotone[j] = false;
            }
            last_d[j] = Some(d);
        }
        // The piece's index stands in for its destination offset: coalesce only looks at file offsets.
        let indexed = pieces.iter().enumerate().map(|(i, &(src, _, _, n))| (src, i as u64, n));
        coalesce(indexed, policy, |lo, hi, group| {
            let group: Vec<ScatterPiece> = group.iter().map(|&(_, i, _)| pieces[i as usize]).collect();
            for (k, p) in group.iter().enumerate() {
                per_dst[p.1] += p.3;
                if let Some(next) = group.get(k + 1) {
                    let gap = next.0 - (p.0 + p.3);
                    let to = if group[k + 1..].iter().any(|q| q.1 == p.1) { p.1 } else { next.1 };
                    per_dst[to] += gap;
                }
            }
            if group.len() == 1 && hi - lo > cut {
                let (src, j, d, n) = group[0];
                let mut at = 0;
                while at < n {
                    let len = cut.min(n - at);
                    reads.push(ScatterRead {
                        lo: src + at,
                        hi: src + at + len,
                        pieces: vec![(src + at, j, d + at, len)],
                    });
                    at += len;
                }
            } else {
                reads.push(ScatterRead { lo, hi, pieces: group });
            }
            Ok(())
        })?;
        // Tasks of at most `chunk` bytes, and small enough that every thread gets several: the threads claim
        // them as they go, so they finish together (two 8 MiB tasks each on two threads left one thread
        // idle for a third of a 32 MiB tensor).
        let total: u64 = reads.iter().map(|r| r.hi - r.lo).sum();
        let per_task = chunk.min(total.div_ceil(4 * tuning.resolved().threads.max(1) as u64).max(MIN_TASK));
        let mut tasks = vec![0usize];
        let mut bytes = 0u64;
        for (i, r) in reads.iter().enumerate() {
            if bytes > 0 && bytes + (r.hi - r.lo) > per_task {
                tasks.push(i);
                bytes = 0;
            }
            bytes += r.hi - r.lo;
        }
        if reads.is_empty() {
            tasks.clear();
        } else {
            tasks.push(reads.len());
        }
        Ok(ScatterPlan { reads, tasks, per_dst, monotone })
    }

    /// File bytes read for each destination (they sum to [`ScatterPlan::bytes`]).
    pub fn per_dst(&self) -> &[u64] {
        &self.per_dst
    }

    /// File bytes the plan reads.
    pub fn bytes(&self) -> u64 {
        self.reads.iter().map(|r| r.hi - r.lo).sum()
    }

    /// Reads in the plan (after merging and cutting).
    pub fn reads(&self) -> usize {
        self.reads.len()
    }

    /// The reads in file order: `(lo, hi, destinations served)` of each (a destination counted once per read).
    pub fn requests(&self) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
        self.reads.iter().map(|r| {
            let mut dsts: Vec<usize> = r.pieces.iter().map(|p| p.1).collect();
            dsts.sort_unstable();
            dsts.dedup();
            (r.lo, r.hi, dsts.len() as u32)
        })
    }

    /// The reads in file order with the pieces each serves: `(lo, hi, pieces)` (a whole-file load turns
    /// them into its arena groups: [`super::plan::load_requests`]).
    pub(crate) fn reads_with_pieces(&self) -> impl Iterator<Item = (u64, u64, &[ScatterPiece])> + '_ {
        self.reads.iter().map(|r| (r.lo, r.hi, r.pieces.as_slice()))
    }

    /// Tasks the reads are grouped into (what the threads claim).
    pub fn tasks(&self) -> usize {
        self.tasks.len().saturating_sub(1)
    }

    /// The largest scratch one task needs: the bytes of its merged reads (a read serving one piece goes
    /// straight to its destination). [`read_scatter`] keeps one such scratch per thread.
    pub fn max_task_scratch(&self) -> u64 {
        self.tasks
            .windows(2)
            .map(|w| self.reads[w[0]..w[1]].iter().filter(|r| r.pieces.len() > 1).map(|r| r.hi - r.lo).sum::<u64>())
            .max()
            .unwrap_or(0)
    }
}

/// The smallest task [`ScatterPlan::new`] cuts for balance (smaller ones would cost more in claiming and
/// preparing than they save).
const MIN_TASK: u64 = 1 << 20;

/// The smallest read of [`read_scatter`] announced ahead to the kernel.
const HINT_MIN: u64 = 256 << 10;

/// A destination of [`read_scatter`].
pub struct ScatterDst<'a> {
    /// Where the plan's pieces for this destination go.
    pub bytes: &'a mut [u8],
    /// Run on each part of `bytes` just before it is filled, by the thread that fills it (populating fresh
    /// pages); `None`: nothing.
    pub prepare: Option<Prepare<'a>>,
    /// Copies of the destination (replicas of a part): each receives the same bytes at the same places, from
    /// the thread that read them while they are in its cache, prepared likewise. Each as long as `bytes`.
    pub copies: Vec<(&'a mut [u8], Option<Prepare<'a>>)>,
}

/// A place bytes go (a destination or one of its copies), as raw parts.
struct Target<'a> {
    ptr: *mut u8,
    len: usize,
    prepare: Option<Prepare<'a>>,
}

/// The targets of every destination, shared by the reading threads: destination `j` goes to
/// `targets[of[j][0]]` (read into) and its copies `targets[of[j][1..]]`.
struct Targets<'a> {
    targets: Vec<Target<'a>>,
    of: Vec<Vec<usize>>,
}

// SAFETY: each piece of a plan is a disjoint range of one destination (and of each of its copies) and is
// written by the one thread that claimed its task; the destinations are borrowed mutably by `read_scatter`
// for its whole duration. The prepare callbacks are `Sync`.
unsafe impl Sync for Targets<'_> {}

impl Targets<'_> {
    /// The bytes `[at, at + n)` of target `k`.
    ///
    /// # Safety
    /// No other live slice may overlap them (the plan's pieces are disjoint; tasks are claimed once).
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, k: usize, at: u64, n: u64) -> &mut [u8] {
        let d = &self.targets[k];
        assert!(at + n <= d.len as u64, "a piece outside its destination");
        // SAFETY: inside the target (checked above), which outlives `read_scatter`; exclusive per the caller.
        unsafe { std::slice::from_raw_parts_mut(d.ptr.add(at as usize), n as usize) }
    }
}

/// Executes `plan` on `fd` into `dsts` (the destinations the plan was made for, in its order): its tasks are
/// claimed by [`Tuning::threads`] threads (the calling thread among them), each submitting its task's reads
/// as one read set through [`read_many`] (io_uring or the pread pool, `tuning.queue_depth` shared among the
/// threads): so cold pages are read at the disk's depth and cached ones are copied by several threads at
/// once. A read covering one piece goes straight to its place; a merged read goes through the thread's
/// scratch and is scattered. Each destination's copies get the same bytes from the same thread. The calling
/// thread reports `done` = bytes placed (copies included) to `progress` between its tasks and once at the
/// end (rate-limited; no final report). The first failure wins and stops the others:
/// `failed(failure, destination index)`; a cancel from `progress` stops them too.
pub fn read_scatter(
    fd: RawFile,
    plan: &ScatterPlan,
    dsts: &mut [ScatterDst<'_>],
    tuning: &Tuning,
    progress: &mut Progress<'_>,
    failed: &(dyn Fn(ReadFailure, usize) -> Error + Sync),
) -> Result<()> {
    read_scatter_with(fd, None, plan, dsts, tuning, progress, failed)
}

/// [`read_scatter`], with `direct` (an `O_DIRECT` descriptor of the same file: page-cache policy `bypass`)
/// reading each task's requests with direct I/O through the thread's aligned staging
/// ([`crate::cache::read_many_direct`]; nothing is announced to the kernel ahead, nothing enters the cache).
pub fn read_scatter_with(
    fd: RawFile,
    direct: Option<&std::fs::File>,
    plan: &ScatterPlan,
    dsts: &mut [ScatterDst<'_>],
    tuning: &Tuning,
    progress: &mut Progress<'_>,
    failed: &(dyn Fn(ReadFailure, usize) -> Error + Sync),
) -> Result<()> {
    let t = tuning.resolved();
    let ntasks = plan.tasks.len().saturating_sub(1);
    if ntasks == 0 {
        return Ok(());
    }
    assert_eq!(dsts.len(), plan.monotone.len(), "the destinations the plan was made for");
    let mut raw = Targets { targets: Vec::new(), of: Vec::with_capacity(dsts.len()) };
    for (j, d) in dsts.iter_mut().enumerate() {
        let mut of = Vec::with_capacity(1 + d.copies.len());
        let len = d.bytes.len();
        let main = (&mut *d.bytes, d.prepare);
        for (bytes, prepare) in std::iter::once(main).chain(d.copies.iter_mut().map(|(b, p)| (&mut **b, *p))) {
            assert_eq!(bytes.len(), len, "a copy as long as its destination");
            // Destinations filled out of order are prepared whole, first (no task could own a part of them).
            if let (Some(p), false) = (prepare, plan.monotone[j]) {
                p(bytes);
            }
            of.push(raw.targets.len());
            raw.targets.push(Target { ptr: bytes.as_mut_ptr(), len: bytes.len(), prepare });
        }
        raw.of.push(of);
    }
    let threads = t.threads.max(1).min(ntasks);
    let depth = t.queue_depth.div_ceil(threads).max(1);
    let sub = Tuning { queue_depth: depth, ..t };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        stop.store(true, Ordering::Relaxed);
        first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    };
    let task = |k: usize, scratch: &mut Vec<u8>, staging: &mut crate::cache::Staging| -> Result<u64> {
        let reads = &plan.reads[plan.tasks[k]..plan.tasks[k + 1]];
        // The part of each in-order destination that this task fills (its first to its last piece), prepared
        // in the destination and its copies.
        let mut span: Vec<Option<(u64, u64)>> = vec![None; raw.of.len()];
        for &(_, j, d, n) in reads.iter().flat_map(|r| &r.pieces) {
            if plan.monotone[j] {
                span[j].get_or_insert((d, d + n)).1 = d + n;
            }
        }
        for (j, s) in span.iter().enumerate() {
            let Some((lo, hi)) = *s else { continue };
            for &k in &raw.of[j] {
                if let Some(p) = raw.targets[k].prepare {
                    // SAFETY: in an in-order destination, tasks (file order) fill increasing, disjoint spans.
                    p(unsafe { raw.slice(k, lo, hi - lo) });
                }
            }
        }
        let merged: usize = reads.iter().filter(|r| r.pieces.len() > 1).map(|r| (r.hi - r.lo) as usize).sum();
        if scratch.len() < merged {
            scratch.resize(merged, 0); // grown, never cleared: every byte used is read first
        }
        let mut set: Vec<Read<'_>> = Vec::with_capacity(reads.len());
        let mut owner: Vec<usize> = Vec::with_capacity(reads.len());
        let mut free: &mut [u8] = &mut scratch[..merged];
        for r in reads {
            if let [(src, j, d, n)] = r.pieces[..] {
                // SAFETY: the piece is this task's alone.
                set.push(Read { fd, offset: src, dst: unsafe { raw.slice(raw.of[j][0], d, n) } });
                owner.push(j);
            } else {
                let (buf, after) = std::mem::take(&mut free).split_at_mut((r.hi - r.lo) as usize);
                set.push(Read { fd, offset: r.lo, dst: buf });
                owner.push(r.pieces[0].1);
                free = after;
            }
        }
        let r = match direct {
            Some(d) => crate::cache::read_many_direct(d, &mut set, &sub, staging),
            None => read_many(&mut set, &sub),
        };
        r.map_err(|f| {
            let j = owner[f.index];
            failed(f, j)
        })?;
        drop(set);
        let mut placed = 0u64;
        let mut s = 0usize;
        for r in reads {
            if let [(_, j, d, n)] = r.pieces[..] {
                let (main, copies) = raw.of[j].split_first().expect("a destination has a target");
                for &k in copies {
                    // SAFETY: the piece is this task's alone, in the destination and in each copy.
                    unsafe { raw.slice(k, d, n) }.copy_from_slice(unsafe { raw.slice(*main, d, n) });
                }
                placed += n * raw.of[j].len() as u64;
                continue;
            }
            for &(src, j, d, n) in &r.pieces {
                let from = s + (src - r.lo) as usize;
                for &k in &raw.of[j] {
                    // SAFETY: the piece is this task's alone.
                    unsafe { raw.slice(k, d, n) }.copy_from_slice(&scratch[from..from + n as usize]);
                    placed += n;
                }
            }
            s += (r.hi - r.lo) as usize;
        }
        Ok(placed)
    };
    // The large reads of the task the threads will claim next are announced to the kernel
    // (`POSIX_FADV_WILLNEED`: it starts reading them and returns), so the disk works while every thread copies
    // (a thread's own read set keeps the disk busy only while it waits). Small reads are left to the read sets:
    // one hint costs about one read of cached pages. The kernel reads at most its I/O size per hint.
    let hint = |k: usize| {
        for r in &plan.reads[plan.tasks[k]..plan.tasks[k + 1]] {
            if r.hi - r.lo >= HINT_MIN {
                crate::os::advise_willneed(fd, r.lo, r.hi - r.lo); // advice only: failure changes nothing
            }
        }
    };
    let worker = |after: &mut dyn FnMut() -> Result<()>| {
        let mut scratch = Vec::new();
        let mut staging = crate::cache::Staging::default();
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= ntasks {
                break;
            }
            if let Some(ahead) = (k + threads < ntasks && direct.is_none()).then_some(k + threads) {
                hint(ahead);
            }
            match task(k, &mut scratch, &mut staging) {
                Ok(n) => {
                    done.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    fail(e);
                    break;
                }
            }
            if let Err(e) = after() {
                fail(e);
                break;
            }
        }
    };
    on_threads(threads, &worker, &done, progress, &first_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Status;
    use std::os::fd::AsRawFd;

    fn file(name: &str, len: usize) -> (std::path::PathBuf, std::fs::File, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("hostfirst-bulk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        (p, f, bytes)
    }

    /// Strided pieces (runs of 100 bytes every 300, and pages apart) land where they belong, merged reads
    /// count their gaps, progress is monotonic, every set size gives the same bytes.
    #[test]
    fn pieces_land_in_place_in_sets() {
        let (_p, f, want) = file("pieces", 1 << 20);
        for (run, stride) in [(100u64, 300u64), (5000, 20_000), (4096, 4096 * 3)] {
            let count = (1u64 << 20) / stride;
            let pieces: Vec<(u64, u64, u64)> = (0..count).map(|i| (i * stride + 11, i * run, run)).collect();
            for staging in [1usize, 64 << 10, 32 << 20] {
                let mut dst = vec![0u8; (count * run) as usize];
                let mut seen = Vec::new();
                let mut sink = |d: u64, _t: u64| {
                    seen.push(d);
                    false
                };
                let mut progress = Progress::new(Some(&mut sink), count * run);
                let t = Tuning { staging, chunk: 4096, queue_depth: 8, ..Tuning::default() };
                let failed = |r: ReadFailure| Error::new(Status::Io, format!("{r:?}"));
                let read = read_pieces(
                    f.as_raw_fd(),
                    pieces.iter().copied(),
                    &mut dst,
                    &ReadPolicy::default(),
                    &t,
                    &mut progress,
                    &failed,
                )
                .unwrap();
                for &(src, d, n) in &pieces {
                    assert!(dst[d as usize..(d + n) as usize] == want[src as usize..(src + n) as usize]);
                }
                assert!(read >= count * run && read <= stride * count, "{read}");
                assert!(seen.windows(2).all(|w| w[0] <= w[1]));
            }
        }
    }

    /// A piece past the end of the file is the caller's error; cancelling between sets stops.
    #[test]
    fn pieces_fail_and_cancel() {
        let (_p, f, _) = file("short", 50_000);
        let pieces = [(0u64, 0u64, 1000u64), (40_000, 1000, 20_000)];
        let mut dst = vec![0u8; 21_000];
        let failed = |r: ReadFailure| Error::new(Status::Truncated, format!("{:?}", r.kind));
        let e = read_pieces(
            f.as_raw_fd(),
            pieces.iter().copied(),
            &mut dst,
            &ReadPolicy::default(),
            &Tuning::default(),
            &mut Progress::new(None, 21_000),
            &failed,
        )
        .unwrap_err();
        assert_eq!(e.status(), Status::Truncated);
        // Ten unmerged 1000-byte reads, sets of 4 KiB: three sets, a progress report after the first.
        let pieces: Vec<_> = (0..10u64).map(|i| (i * 5000, i * 1000, 1000)).collect();
        let mut dst = vec![0u8; 10_000];
        let mut cancel = |_: u64, _: u64| true;
        let e = read_pieces(
            f.as_raw_fd(),
            pieces.into_iter(),
            &mut dst,
            &ReadPolicy { max_read: 1000, ..ReadPolicy::default() },
            &Tuning { staging: 1, chunk: 4096, ..Tuning::default() },
            &mut Progress::new(Some(&mut cancel), 10_000),
            &failed,
        )
        .unwrap_err();
        assert_eq!(e.status(), Status::Cancelled);
    }

    /// Every byte of a multi-piece fill, prepared once per piece; read errors and cancels stop it.
    #[test]
    fn fill_host_prepares_reads_and_stops() {
        let (_p, f, want) = file("fill", 1 << 20);
        for threads in [1, 3] {
            let mut dst = vec![0u8; (1 << 20) - 10];
            let prepared = AtomicU64::new(0);
            let prep = |d: &mut [u8]| {
                prepared.fetch_add(d.len() as u64, Ordering::Relaxed);
            };
            let t = Tuning { threads, chunk: 4096, ..Tuning::default() };
            let fd = f.as_raw_fd();
            let read = |off: u64, d: &mut [u8]| {
                read_exact(fd, 10 + off, d).map_err(|k| Error::new(Status::Io, format!("{k:?}")))
            };
            fill_host(&mut dst, &t, Some(&prep), read, &mut Progress::new(None, 0)).unwrap();
            assert!(dst[..] == want[10..]);
            assert_eq!(prepared.into_inner(), dst.len() as u64);
            let mut cancel = |_: u64, _: u64| true;
            let e = fill_host(&mut dst, &t, None, read, &mut Progress::new(Some(&mut cancel), 1 << 20));
            assert_eq!(e.unwrap_err().status(), Status::Cancelled);
            let mut big = vec![0u8; 2 << 20];
            let e = fill_host(&mut big, &t, None, read, &mut Progress::new(None, 0)).unwrap_err();
            assert!(e.message().contains("Eof"), "{}", e.message());
        }
    }

    /// Three interleaved destinations (column shards of 3000-byte rows, and one filled backwards): every byte
    /// in place on 1 and 3 threads, merged across destinations only within the bound, prepared once per
    /// byte of the in-order destinations, bytes read attributed to the destinations and summing to the plan.
    #[test]
    fn scatter_fills_interleaved_destinations() {
        let (_p, f, want) = file("scatter", 1 << 20);
        let rows = 300u64;
        let mut pieces: Vec<ScatterPiece> = Vec::new();
        for r in 0..rows {
            pieces.push((r * 3000, 0, r * 1000, 1000));
            pieces.push((r * 3000 + 1000, 1, r * 1000, 1000));
            pieces.push((r * 3000 + 2000, 2, (rows - 1 - r) * 1000, 1000)); // out of order
        }
        for threads in [1, 3] {
            let t = Tuning { threads, chunk: 64 << 10, queue_depth: 8, ..Tuning::default() };
            let plan = ScatterPlan::new(&pieces, 3, &ReadPolicy::default(), &t).unwrap();
            // Adjacent pieces of three destinations: the whole range in max_read (1 MiB) reads.
            assert_eq!((plan.bytes(), plan.reads()), (rows * 3000, 1));
            assert_eq!(plan.per_dst(), [rows * 1000; 3]);
            let (mut a, mut b, mut c) = (vec![0u8; 300_000], vec![0u8; 300_000], vec![0u8; 300_000]);
            let (mut a2, mut b2) = (vec![0u8; 300_000], vec![0u8; 300_000]);
            let prepared = AtomicU64::new(0);
            let prep = |d: &mut [u8]| {
                prepared.fetch_add(d.len() as u64, Ordering::Relaxed);
            };
            let failed = |r: ReadFailure, j: usize| Error::new(Status::Io, format!("{j}: {r:?}"));
            let mut seen = Vec::new();
            let mut sink = |d: u64, _t: u64| {
                seen.push(d);
                false
            };
            {
                // Destination 0 with a copy (prepared), 1 with none, 2 (out of order, prepared) with a copy.
                let mut dsts = vec![
                    ScatterDst { bytes: &mut a, prepare: Some(&prep), copies: vec![(&mut a2, Some(&prep))] },
                    ScatterDst { bytes: &mut b, prepare: None, copies: Vec::new() },
                    ScatterDst { bytes: &mut c, prepare: Some(&prep), copies: vec![(&mut b2, None)] },
                ];
                let mut progress = Progress::new(Some(&mut sink), 1_500_000);
                read_scatter(f.as_raw_fd(), &plan, &mut dsts, &t, &mut progress, &failed).unwrap();
            }
            for &(src, j, d, n) in &pieces {
                let want = &want[src as usize..(src + n) as usize];
                for got in [[&a, &a2], [&b, &b], [&c, &b2]][j] {
                    assert!(got[d as usize..(d + n) as usize] == *want, "{j} at {d}");
                }
            }
            assert_eq!(prepared.into_inner(), 900_000, "destinations 0 and 2 and the copy of 0, each byte once");
            assert!(seen.windows(2).all(|w| w[0] <= w[1]));
            // A tight bound keeps the destinations apart: 8000-byte pieces 8000 bytes apart are not merged.
            let apart: Vec<ScatterPiece> = (0..40u64)
                .flat_map(|r| [(r * 24_000, 0, r * 8000, 8000), (r * 24_000 + 16_000, 2, r * 8000, 8000)])
                .collect();
            let plan =
                ScatterPlan::new(&apart, 3, &ReadPolicy { max_over_read: 1.0, ..ReadPolicy::default() }, &t).unwrap();
            // (Only gaps that add no page merge: fewer than 80 reads, far less than the 960,000-byte span.)
            assert!(plan.reads() > 30 && plan.bytes() < 700_000, "{} reads, {} bytes", plan.reads(), plan.bytes());
            assert_eq!(plan.per_dst().iter().sum::<u64>(), plan.bytes());
            assert_eq!(plan.per_dst()[1], 0);
        }
    }

    /// A piece past the end of the file fails with its destination's index; a cancel stops the reads.
    #[test]
    fn scatter_fails_with_the_destination_and_cancels() {
        let (_p, f, _) = file("scatter-short", 100_000);
        let pieces: Vec<ScatterPiece> = vec![(0, 0, 0, 4096), (50_000, 1, 0, 4096), (99_000, 2, 0, 4096)];
        let t = Tuning { threads: 2, chunk: 4096, ..Tuning::default() };
        let plan = ScatterPlan::new(&pieces, 3, &ReadPolicy::default(), &t).unwrap();
        let (mut a, mut b, mut c) = (vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 4096]);
        let failed = |r: ReadFailure, j: usize| Error::new(Status::Truncated, format!("destination {j}: {:?}", r.kind));
        let mut dsts: Vec<ScatterDst<'_>> = [&mut a, &mut b, &mut c]
            .into_iter()
            .map(|d| ScatterDst { bytes: d.as_mut_slice(), prepare: None, copies: Vec::new() })
            .collect();
        let e = read_scatter(f.as_raw_fd(), &plan, &mut dsts, &t, &mut Progress::new(None, 0), &failed).unwrap_err();
        assert_eq!(e.status(), Status::Truncated);
        assert!(e.message().starts_with("destination 2: Eof { at: 100000 }"), "{}", e.message());
        let pieces: Vec<ScatterPiece> = (0..20u64).map(|i| (i * 4096, 0, i * 4096, 4096)).collect();
        let t = Tuning { threads: 1, chunk: 4096, ..Tuning::default() };
        let plan = ScatterPlan::new(&pieces, 1, &ReadPolicy { max_read: 4096, ..ReadPolicy::default() }, &t).unwrap();
        let mut big = vec![0u8; 20 * 4096];
        let mut calls = 0;
        let mut cancel = |_: u64, _: u64| {
            calls += 1;
            true
        };
        let mut dsts = vec![ScatterDst { bytes: &mut big, prepare: None, copies: Vec::new() }];
        let e = read_scatter(
            f.as_raw_fd(),
            &plan,
            &mut dsts,
            &t,
            &mut Progress::new(Some(&mut cancel), 20 * 4096),
            &failed,
        );
        assert_eq!(e.unwrap_err().status(), Status::Cancelled);
        assert_eq!(calls, 1, "stopped at the first report");
    }
}
