//! A load's device tensors as one job per device: one allocation (the arena) that every tensor of that device
//! is a part of, reads coalesced across neighbouring tensors, and for CUDA one stream, one reused event per
//! staging slab, and the slabs kept busy back to back across tensors.
//!
//! - **Arena**: `cpu` tensors are parts of one host allocation ([`HostAlloc::sub`], each part 64-byte
//!   aligned, like hostfirst's other host buffers); `cuda:N` tensors are parts of one `cuMemAlloc`
//!   ([`DeviceMemory::sub`], each part 256-byte aligned, the alignment DLPack asks of data pointers). Every
//!   part holds a reference to its arena, which is freed when the last part is dropped. A failed or cancelled
//!   job drops its arena before returning, so nothing it allocated survives (the one exception, by the rule
//!   of [`crate::device::cuda::inflight`]: device memory a failed copy may still write is leaked, never freed
//!   under it, when that copy cannot be established to have ended).
//! - **Reads**: the requests are the job's read plan's, file by file ([`crate::engine::plan::load_requests`],
//!   the rule of every [`ReadPlan`](crate::engine::ReadPlan) and of shard-on-read): tensors sorted by their
//!   offset in their file, neighbours read together while the merged read stays within the read policy's
//!   over-read bound ([`ReadPolicy::max_over_read`], counted in pages) and within one read's size (1 to
//!   8 MiB for host memory, one staging slab for CUDA), longer tensors cut at that size. Host reads go
//!   straight into the arena with `preadv` (the bytes between tensors into a scratch buffer); CUDA reads fill
//!   a page-locked slab with one `pread`, and one `cuMemcpyHtoDAsync` per run of tensors that are contiguous
//!   in both the file and the arena moves it to the device. `pread` (never the mapping) turns a truncated
//!   file into `TRUNCATED`.
//! - **CUDA pipeline**: reader threads fill slabs; the calling thread enqueues each filled slab's copies on
//!   the job's one stream and re-records that slab's event; a slab goes back to the readers once its event
//!   has completed. The ring never drains between tensors: a slab holds many small tensors, or a piece of a
//!   large one. Streams and events are created once per job, not per tensor.
//! - **Progress** counts tensor bytes (never the gaps read between them), from the calling thread, at most
//!   every [`PROGRESS_INTERVAL`], monotonic; the caller makes the final call.

use super::host::HostAlloc;
use super::parallel::{default_threads, PROGRESS_INTERVAL};
use crate::device::cuda::{CopyQueue, DeviceMemory, Event, PinnedHostMemory, Stream};
use crate::error::{Error, Result, Status};
use crate::file::{ReadPolicy, TensorRef};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Alignment of each tensor inside a host arena.
pub const HOST_ALIGN: usize = 64;
/// Alignment of each tensor inside a CUDA arena (DLPack's 256 bytes).
pub const CUDA_ALIGN: usize = 256;
/// Largest coalesced host read.
pub const HOST_READ_BYTES: usize = 8 << 20;
/// The smallest group a host load cuts for balance between its threads.
const MIN_GROUP: usize = 1 << 20;

/// Progress of a whole load: `sink(done, total)` at most every [`PROGRESS_INTERVAL`]; true cancels.
pub(crate) struct Reporter<'a> {
    sink: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
    /// Bytes of jobs (or tensors) already finished.
    pub base: u64,
    /// File requests the finished jobs issued (their read plans' requests).
    pub requests: u64,
    total: u64,
    last: Instant,
}

impl<'a> Reporter<'a> {
    pub(crate) fn new(sink: Option<&'a mut dyn FnMut(u64, u64) -> bool>, total: u64) -> Reporter<'a> {
        Reporter { sink, base: 0, requests: 0, total, last: Instant::now() }
    }

    /// Reports `base + done` if the interval has passed; `CANCELLED` when the callback asks.
    pub(crate) fn tick(&mut self, done: u64) -> Result<()> {
        if self.sink.is_none() || self.last.elapsed() < PROGRESS_INTERVAL {
            return Ok(());
        }
        self.last = Instant::now();
        let (d, t) = (self.base + done, self.total);
        if self.sink.as_mut().is_some_and(|p| p(d, t)) {
            return Err(cancelled());
        }
        Ok(())
    }

    /// Reports `done` now (the final call, or between tensors of the per-tensor paths when due).
    pub(crate) fn call(&mut self, done: u64) -> Result<()> {
        self.last = Instant::now();
        let t = self.total;
        if self.sink.as_mut().is_some_and(|p| p(done, t)) {
            return Err(cancelled());
        }
        Ok(())
    }

    /// Whether a sink is set.
    pub(crate) fn active(&self) -> bool {
        self.sink.is_some()
    }

    /// The sink, for the per-tensor paths.
    pub(crate) fn sink(&mut self) -> Option<&mut (dyn FnMut(u64, u64) -> bool + 'a)> {
        self.sink.as_deref_mut()
    }

    /// Whether the interval has passed since the last call.
    pub(crate) fn due(&self) -> bool {
        self.last.elapsed() >= PROGRESS_INTERVAL
    }
}

pub(crate) fn cancelled() -> Error {
    Error::new(Status::Cancelled, "load cancelled by the progress callback; nothing kept")
}

/// Places of `tensors` in an arena whose parts are `align`-aligned: (offset of each, arena size).
fn layout(tensors: &[TensorRef<'_>], align: usize) -> Result<(Vec<usize>, usize)> {
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut end = 0usize;
    for v in tensors {
        let n = usize::try_from(v.nbytes()).ok();
        let at = end.checked_next_multiple_of(align);
        match (n, at.and_then(|a| n.and_then(|n| a.checked_add(n)))) {
            (Some(_), Some(e)) => {
                offsets.push(at.expect("checked"));
                end = e;
            }
            _ => {
                return Err(Error::new(
                    Status::OutOfMemory,
                    format!("tensor '{}': the load's tensors do not fit in this address space", v.name()),
                ))
            }
        }
    }
    Ok((offsets, end))
}

/// Bytes `src..src + len` of a group's read go to `dst..dst + len` of the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    src: usize,
    dst: usize,
    len: usize,
}

enum From<'a> {
    /// One read of `span` bytes of a file at absolute offset `at`.
    File { file: &'a std::fs::File, at: u64, span: usize },
    /// A tensor over memory (a file opened from bytes): bytes `at..at + span` of it.
    Memory { at: u64, span: usize },
    /// One ranged GET of `span` bytes of a remote object (the group's tensors') at absolute offset `at`.
    Remote { at: u64, span: usize },
}

/// Where a run of bytes a group may merge is read from: a file, or a remote object (its identity).
#[derive(Clone, Copy)]
enum Src<'a> {
    File(&'a std::fs::File),
    Remote(usize),
}

impl Src<'_> {
    /// The sort and identity key: kind, then the object.
    fn key(&self) -> (u8, usize) {
        match self {
            Src::File(f) => (0, *f as *const std::fs::File as usize),
            Src::Remote(id) => (1, *id),
        }
    }
}

/// One read and where its bytes go.
struct Group<'a> {
    from: From<'a>,
    /// The first tensor of the group (messages, memory reads).
    tensor: TensorRef<'a>,
    pieces: Vec<Piece>,
    /// Tensor bytes (the span less its gaps).
    bytes: u64,
}

impl Group<'_> {
    fn span(&self) -> usize {
        match self.from {
            From::File { span, .. } | From::Memory { span, .. } | From::Remote { span, .. } => span,
        }
    }

    fn push(&mut self, p: Piece) {
        self.bytes += p.len as u64;
        if let Some(last) = self.pieces.last_mut() {
            if last.src + last.len == p.src && last.dst + last.len == p.dst {
                last.len += p.len;
                return;
            }
        }
        self.pieces.push(p);
    }

    fn what(&self) -> String {
        format!("{}: tensor '{}'", self.tensor.file_display(), self.tensor.name())
    }
}

/// Cuts the tensors into reads: of at most `cap` bytes for a file, `remote_cap` for a remote object (one ranged
/// GET each). `offsets[i]` is where `tensors[i]` goes in the arena. The reads of file-backed and remote tensors
/// are the read plan's ([`crate::engine::plan::load_requests`], source by source): the one coalescing and
/// over-read rule of [`ReadPlan`](crate::engine::ReadPlan)s and shard-on-read, under `policy`'s over-read cap
/// with the source's cap as the largest request. Tensors of a memory buffer are copied in pieces of `cap`.
fn groups<'a>(
    tensors: &[TensorRef<'a>],
    offsets: &[usize],
    cap: usize,
    remote_cap: usize,
    policy: &ReadPolicy,
) -> Result<Vec<Group<'a>>> {
    let cap = cap.max(1);
    let mut out = Vec::new();
    // (source, absolute offset, tensor index) of every file-backed or remote tensor with bytes.
    let mut sourced: Vec<(Src<'a>, u64, usize)> = Vec::new();
    for (i, (&v, &dst)) in tensors.iter().zip(offsets).enumerate() {
        let n = v.nbytes() as usize;
        if n == 0 {
            continue;
        }
        match (v.file_and_offset(), v.remote_and_offset()) {
            (Some((file, at)), _) => sourced.push((Src::File(file), at, i)),
            (None, Some((id, at))) => sourced.push((Src::Remote(id), at, i)),
            (None, None) => {
                let mut k = 0;
                while k < n {
                    let len = (n - k).min(cap);
                    out.push(Group {
                        from: From::Memory { at: k as u64, span: len },
                        tensor: v,
                        pieces: vec![Piece { src: 0, dst: dst + k, len }],
                        bytes: len as u64,
                    });
                    k += len;
                }
            }
        }
    }
    sourced.sort_unstable_by_key(|p| (p.0.key(), p.1));
    for same in sourced.chunk_by(|a, b| a.0.key() == b.0.key()) {
        let src = same[0].0;
        let read_size = match src {
            Src::File(_) => cap,
            Src::Remote(_) => remote_cap.max(1),
        };
        // Destination j of the plan is tensor same[j].2; the pieces come sorted by offset.
        let pieces: Vec<crate::engine::ScatterPiece> =
            same.iter().enumerate().map(|(j, &(_, at, i))| (at, j, 0, tensors[i].nbytes())).collect();
        let plan = crate::engine::plan::load_requests(&pieces, same.len(), read_size, policy)?;
        for (lo, hi, served) in plan.reads_with_pieces() {
            let first = tensors[same[served[0].1].2];
            let span = (hi - lo) as usize;
            let from = match src {
                Src::File(file) => From::File { file, at: lo, span },
                Src::Remote(_) => From::Remote { at: lo, span },
            };
            let mut g = Group { from, tensor: first, pieces: Vec::new(), bytes: 0 };
            for &(src, j, d, n) in served {
                let i = same[j].2;
                g.push(Piece { src: (src - lo) as usize, dst: offsets[i] + d as usize, len: n as usize });
            }
            out.push(g);
        }
    }
    Ok(out)
}

/// The file requests of `groups` (what a job issues; the read plan's request count).
fn file_requests(groups: &[Group<'_>]) -> u64 {
    groups.iter().filter(|g| matches!(g.from, From::File { .. })).count() as u64
}

/// Host loads of at least this many bytes read ahead ([`read_ahead`]).
const READ_AHEAD_FROM: usize = 64 << 20;
/// How far ahead of the group a reader takes the kernel's read-ahead is asked to reach.
const READ_AHEAD_BYTES: usize = 64 << 20;

/// Asks the kernel (`POSIX_FADV_WILLNEED`) to start reading the file groups that lie up to `ahead` bytes
/// past group `i` (the one a reader just took; the first reader covers the whole window, each later one the
/// groups that enter it), so that reads of a cold file stay in flight while the readers copy: the reads of
/// a buffered load are otherwise one 8 MiB `preadv` per thread at a time, and the kernel's own read-ahead
/// of a file read by several threads at once keeps little in flight (a cold 2 GiB `keep` load measured
/// about 0.3× fio's direct read without this advice, about 0.36× with it; BENCHMARKS.md section 16). Advice only: nothing waits, failures are
/// ignored (the read that follows reports them), cached pages cost a lookup.
fn read_ahead(groups: &[Group<'_>], i: usize, ahead: usize) {
    // The last group of the window after group `k`: the groups after it whose spans add up to `ahead`.
    let window_end = |k: usize| {
        let (mut end, mut covered) = (k, 0usize);
        while end + 1 < groups.len() && covered < ahead {
            end += 1;
            covered += groups[end].span();
        }
        end
    };
    let from = if i == 0 { 1 } else { window_end(i - 1) + 1 };
    for g in groups.iter().take(window_end(i) + 1).skip(from) {
        if let From::File { file, at, span } = g.from {
            crate::os::advise_willneed(crate::os::raw_file(file), at, span as u64);
        }
    }
}

/// Reads one group into `dst` (the arena's base address for host jobs, with pieces' `dst` offsets; or a slab
/// with `relative`: pieces land at their `src` offsets).
///
/// # Safety
/// `base` must be valid for writes at every piece's destination, and no one else may access those bytes
/// during the call.
unsafe fn read_group(
    g: &Group<'_>,
    base: *mut u8,
    relative: bool,
    scratch: &mut Vec<u8>,
    io: &mut Io<'_>,
) -> Result<()> {
    let what = || g.what();
    match g.from {
        From::Remote { at, span } => {
            let base = base as usize;
            let pieces = &g.pieces;
            // The body lands where its bytes go as it arrives (the bytes between tensors are dropped).
            let mut sink = |pos: u64, b: &[u8]| {
                let (lo, hi) = (pos as usize, pos as usize + b.len());
                if relative {
                    // SAFETY: forwarded: the slab holds `span` bytes for this group, and hi <= span (checked by
                    // read_scatter: never more than the range asked for).
                    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (base as *mut u8).add(lo), b.len()) };
                    return;
                }
                let first = pieces.partition_point(|p| p.src + p.len <= lo);
                for p in pieces[first..].iter().take_while(|p| p.src < hi) {
                    let (a, z) = (p.src.max(lo), (p.src + p.len).min(hi));
                    // SAFETY: forwarded: the piece's arena range `p.dst..p.dst + p.len` is ours; a..z lies in it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            b.as_ptr().add(a - lo),
                            (base as *mut u8).add(p.dst + a - p.src),
                            z - a,
                        )
                    };
                }
            };
            g.tensor.read_remote(at, span as u64, &mut sink, &what)
        }
        From::Memory { at, span } => {
            let p = g.pieces[0];
            let d = if relative { p.src } else { p.dst };
            // SAFETY: forwarded from the caller: `span` bytes at `base + d` are ours.
            let dst = unsafe { std::slice::from_raw_parts_mut(base.add(d), span) };
            g.tensor.view().read_at(at, dst)
        }
        From::File { file, at, span } if relative => {
            // SAFETY: forwarded: the slab holds `span` bytes for this group.
            let dst = unsafe { std::slice::from_raw_parts_mut(base, span) };
            if let Some(direct) = io.direct.and_then(|d| d.get(file)) {
                // SAFETY: as above: the slab's `span` bytes are ours.
                return unsafe {
                    crate::cache::read_direct(&direct, at, &[(dst.as_mut_ptr(), span)], &mut io.staging, &what)
                };
            }
            let mut iov = [crate::os::IoVec::new(dst.as_mut_ptr(), span)];
            crate::engine::read_vectored_exact(file, at, &mut iov, &what)
        }
        From::File { file, at, .. } => {
            let largest_gap = g.pieces.windows(2).map(|w| w[1].src - (w[0].src + w[0].len)).max().unwrap_or(0);
            if scratch.len() < largest_gap {
                scratch.resize(largest_gap, 0);
            }
            let mut pieces: Vec<(*mut u8, usize)> = Vec::with_capacity(g.pieces.len() * 2);
            let mut pos = 0usize;
            for p in &g.pieces {
                if p.src > pos {
                    pieces.push((scratch.as_mut_ptr(), p.src - pos));
                }
                // SAFETY: forwarded: the piece's arena range is ours.
                let d = unsafe { base.add(p.dst) };
                super::host::populate_write(unsafe { std::slice::from_raw_parts_mut(d, p.len) });
                pieces.push((d, p.len));
                pos = p.src + p.len;
            }
            if let Some(direct) = io.direct.and_then(|d| d.get(file)) {
                // SAFETY: forwarded: arena ranges and the scratch are ours for the call.
                return unsafe { crate::cache::read_direct(&direct, at, &pieces, &mut io.staging, &what) };
            }
            let mut iov: Vec<crate::os::IoVec> = pieces.into_iter().map(|(p, n)| crate::os::IoVec::new(p, n)).collect();
            crate::engine::read_vectored_exact(file, at, &mut iov, &what)
        }
    }
}

/// How one reader thread of a job reads a file group: through the page cache, or (page-cache policy
/// `bypass`) with direct I/O through its own aligned staging.
pub(crate) struct Io<'a> {
    direct: Option<&'a crate::cache::DirectFiles>,
    staging: crate::cache::Staging,
}

impl<'a> Io<'a> {
    fn new(direct: Option<&'a crate::cache::DirectFiles>) -> Io<'a> {
        Io { direct, staging: crate::cache::Staging::default() }
    }
}

struct SendPtr(*mut u8);
// SAFETY: the pointer is the base of an arena each thread writes disjoint ranges of (one group each).
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(&self) -> *mut u8 {
        self.0
    }
}

/// The size of a load's ranged GETs of remote objects ([`crate::remote::part_bytes`] of the remote bytes).
fn remote_part(tensors: &[TensorRef<'_>]) -> usize {
    let total: u64 = tensors.iter().filter(|v| v.remote_and_offset().is_some()).map(|v| v.nbytes()).sum();
    if total == 0 {
        return usize::MAX; // no remote tensor: the cap is never used, and a local load reads no remote settings
    }
    crate::remote::part_bytes(total, crate::remote::load_concurrency())
}

/// Loads `tensors` into one host arena; returns it with each tensor's offset in it (in order: the tensor's
/// part is `HostAlloc::sub(&arena, offset, nbytes)`).
pub(crate) fn load_host(
    tensors: &[TensorRef<'_>],
    rep: &mut Reporter<'_>,
    direct: Option<&crate::cache::DirectFiles>,
) -> Result<(Arc<HostAlloc>, Vec<usize>)> {
    let threads = if direct.is_some() { crate::cache::direct_threads() } else { default_threads() };
    load_host_threads(tensors, rep, direct, threads)
}

/// [`load_host`] with `threads` reader threads (at most one per group).
pub(crate) fn load_host_threads(
    tensors: &[TensorRef<'_>],
    rep: &mut Reporter<'_>,
    direct: Option<&crate::cache::DirectFiles>,
    threads: usize,
) -> Result<(Arc<HostAlloc>, Vec<usize>)> {
    let (offsets, size) = layout(tensors, HOST_ALIGN)?;
    let what = format!("{} tensor(s) to cpu", tensors.len());
    let mut arena = HostAlloc::zeroed(size, &what)?;
    // Groups small enough that each thread claims many (so they finish together), at most HOST_READ_BYTES.
    let per_group = (size / (16 * default_threads())).clamp(MIN_GROUP, HOST_READ_BYTES);
    let groups = groups(tensors, &offsets, per_group, remote_part(tensors), &ReadPolicy::default())?;
    let base = SendPtr(arena.as_mut_slice().as_mut_ptr());
    // A remote group is one ranged GET that waits on the network, not on this machine's cores: a load keeps
    // crate::remote::load_concurrency() of them in flight (one reader thread each).
    let remote = groups.iter().filter(|g| matches!(g.from, From::Remote { .. })).count();
    let threads = if remote > 0 { threads.max(crate::remote::load_concurrency().min(remote)) } else { threads };
    let threads = threads.min(groups.len()).max(1);
    // Buffered reads of a large load ask the kernel to read ahead (below); direct reads have their own depth.
    let ahead = if direct.is_none() && size >= READ_AHEAD_FROM { READ_AHEAD_BYTES } else { 0 };
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let work = |on_group: &mut dyn FnMut() -> Result<()>| {
        let mut scratch = Vec::new();
        let mut io = Io::new(direct);
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(g) = groups.get(i) else { return };
            if ahead > 0 {
                read_ahead(&groups, i, ahead);
            }
            // SAFETY: groups write disjoint arena ranges; each group is taken by one thread.
            let r = unsafe { read_group(g, base.get(), false, &mut scratch, &mut io) }.and_then(|()| {
                done.fetch_add(g.bytes, Ordering::Relaxed);
                on_group()
            });
            if let Err(e) = r {
                stop.store(true, Ordering::Relaxed);
                first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                return;
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(|| work(&mut || Ok(())));
        }
        work(&mut || rep.tick(done.load(Ordering::Relaxed)));
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e); // the arena is dropped here: nothing kept
    }
    rep.requests += file_requests(&groups);
    Ok((Arc::new(arena), offsets))
}

/// A staging slab and the event recorded after its latest copy.
struct Slot {
    slab: PinnedHostMemory,
    event: Event,
}

/// Enqueues a host-to-device copy of piece `p` from a page-locked slab on `stream` (through the engine).
///
/// # Safety
/// The slab must stay alive and unwritten until an event recorded on `stream` after this call completes.
unsafe fn enqueue(stream: &Stream, slab: &PinnedHostMemory, p: Piece, dst: &DeviceMemory) -> Result<()> {
    // SAFETY: forwarded from this function's contract.
    unsafe { crate::engine::device::copy_from_slab_async(stream, slab, p.src, p.dst, p.len, dst) }
}

/// Loads `tensors` into one allocation on `cuda:<ordinal>` through the staging ring (one stream, one event per
/// slab); returns it with each tensor's offset in it, in order (as [`load_host`]). On failure the arena is
/// dropped: freed, or leaked when a copy into it could not be established to have ended (rule 2 of
/// [`crate::device::cuda::inflight`]).
pub(crate) fn load_cuda(
    ordinal: u32,
    tensors: &[TensorRef<'_>],
    rep: &mut Reporter<'_>,
    direct: Option<&crate::cache::DirectFiles>,
) -> Result<(Arc<DeviceMemory>, Vec<usize>)> {
    let (offsets, size) = layout(tensors, CUDA_ALIGN)?;
    let arena = DeviceMemory::alloc(ordinal, size)
        .map_err(|e| e.context(format!("{} tensor(s) to cuda:{ordinal} (one allocation)", tensors.len())))?;
    let bytes: u64 = tensors.iter().map(|v| v.nbytes()).sum();
    if bytes > 0 {
        let cfg = crate::engine::staging::RingConfig::default();
        let (slab_len, count) = crate::engine::staging::geometry(bytes, &cfg);
        let groups = groups(tensors, &offsets, slab_len, remote_part(tensors).min(slab_len), &ReadPolicy::default())?;
        let count = count.min(groups.len()).max(1);
        let threads = default_threads().min(count).max(1);
        ring(ordinal, &groups, &arena, slab_len, (count, threads), rep, direct)?;
        rep.requests += file_requests(&groups);
    }
    Ok((Arc::new(arena), offsets))
}

/// The pipeline. Copies in flight are a [`CopyQueue`] (the one error rule: an error a query sees fails the
/// load); after a failure everything still queued is settled, the slabs go back to the pool, and `dst` is
/// marked to be leaked only when a failed copy into it could not be established to have ended.
fn ring(
    ordinal: u32,
    groups: &[Group<'_>],
    dst: &DeviceMemory,
    slab_len: usize,
    (count, threads): (usize, usize),
    rep: &mut Reporter<'_>,
    direct: Option<&crate::cache::DirectFiles>,
) -> Result<()> {
    let stream = Stream::new(ordinal)?;
    let (free_tx, free_rx) = mpsc::channel::<Slot>();
    let mut slots_out = 0usize;
    for _ in 0..count {
        let slot = crate::engine::staging::take_slab(ordinal, slab_len)
            .and_then(|slab| Event::new(ordinal).map(|event| Slot { slab, event }));
        match slot {
            Ok(s) => {
                free_tx.send(s).expect("receiver alive");
                slots_out += 1;
            }
            Err(e) => {
                for s in free_rx.try_iter() {
                    crate::engine::staging::give_slab(s.slab);
                }
                return Err(e);
            }
        }
    }
    let free_rx = Mutex::new(free_rx);
    let (filled_tx, filled_rx) = mpsc::channel::<(usize, std::result::Result<Slot, (Error, Slot)>)>();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut outcome: Result<()> = Ok(());
    let mut queue: CopyQueue<PinnedHostMemory> = CopyQueue::new();
    let mut returned: Vec<Slot> = Vec::with_capacity(slots_out);

    std::thread::scope(|s| {
        for _ in 0..threads {
            let filled_tx = filled_tx.clone();
            let (free_rx, next, stop) = (&free_rx, &next, &stop);
            s.spawn(move || {
                let mut scratch = Vec::new();
                let mut io = Io::new(direct);
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(mut slot) = free_rx.lock().unwrap_or_else(|p| p.into_inner()).recv() else { break };
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(g) = groups.get(i) else {
                        let _ = filled_tx.send((usize::MAX, Ok(slot)));
                        break;
                    };
                    debug_assert!(g.span() <= slot.slab.len());
                    let base = slot.slab.as_mut_slice().as_mut_ptr();
                    // SAFETY: the slab is this thread's until it is sent on; the group's span fits in it.
                    let r = unsafe { read_group(g, base, true, &mut scratch, &mut io) };
                    let failed = r.is_err();
                    let msg = match r {
                        Ok(()) => (i, Ok(slot)),
                        Err(e) => (i, Err((e, slot))),
                    };
                    if filled_tx.send(msg).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(filled_tx);

        let mut free_tx = Some(free_tx);
        let (mut enqueued, mut copied) = (0usize, 0u64);
        let mut completed: Vec<(u64, PinnedHostMemory, Event)> = Vec::with_capacity(slots_out);
        let fail = |outcome: &mut Result<()>, e: Error, free_tx: &mut Option<mpsc::Sender<Slot>>| {
            stop.store(true, Ordering::Relaxed);
            free_tx.take();
            if outcome.is_ok() {
                *outcome = Err(e);
            }
        };
        let recycle = |slot: Slot, free_tx: &Option<mpsc::Sender<Slot>>, returned: &mut Vec<Slot>| match free_tx {
            Some(tx) => {
                if let Err(mpsc::SendError(slot)) = tx.send(slot) {
                    returned.push(slot);
                }
            }
            None => returned.push(slot),
        };
        loop {
            // Completed copies (oldest first) give their slab back; an error a query saw fails the load.
            let r = queue.reap(&mut completed);
            for (n, slab, event) in completed.drain(..) {
                copied += n;
                recycle(Slot { slab, event }, &free_tx, &mut returned);
            }
            if let Err(e) = r {
                fail(&mut outcome, e, &mut free_tx);
            }
            if outcome.is_ok() {
                if let Err(e) = rep.tick(copied) {
                    fail(&mut outcome, e, &mut free_tx);
                }
            }
            if queue.is_empty() && (outcome.is_err() || enqueued == groups.len()) {
                break;
            }
            let wait = if queue.is_empty() { Duration::from_millis(20) } else { Duration::from_micros(200) };
            match filled_rx.recv_timeout(wait) {
                Ok((_, Ok(slot))) if outcome.is_err() => returned.push(slot),
                Ok((usize::MAX, Ok(slot))) => recycle(slot, &free_tx, &mut returned),
                Ok((i, Ok(slot))) => {
                    let g = &groups[i];
                    // SAFETY: the slab goes into the queue fenced by its event recorded after these copies, and
                    // is neither written nor freed before that event completes (or the rule settles it).
                    let r = g.pieces.iter().try_for_each(|p| unsafe { enqueue(&stream, &slot.slab, *p, dst) });
                    enqueued += 1;
                    // Fenced even when a piece failed to queue: the pieces before it may run.
                    match stream.fence(slot.slab, slot.event) {
                        Ok(f) => queue.push(g.bytes, f),
                        Err(f) => {
                            let e = queue.note(f);
                            fail(&mut outcome, e, &mut free_tx);
                        }
                    }
                    if let Err(e) = r {
                        fail(&mut outcome, e, &mut free_tx);
                    }
                }
                Ok((_, Err((e, slot)))) => {
                    returned.push(slot);
                    fail(&mut outcome, e, &mut free_tx);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let r = queue.wait_oldest(&mut completed);
                    for (n, slab, event) in completed.drain(..) {
                        copied += n;
                        recycle(Slot { slab, event }, &free_tx, &mut returned);
                    }
                    if let Err(e) = r {
                        fail(&mut outcome, e, &mut free_tx);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if outcome.is_ok() && enqueued < groups.len() {
                        let e = Error::new(Status::Internal, "load readers stopped early".to_string());
                        fail(&mut outcome, e, &mut free_tx);
                    }
                    if queue.is_empty() {
                        break;
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        drop(free_tx);
        for (_, r) in filled_rx.iter() {
            match r {
                Ok(slot) | Err((_, slot)) => returned.push(slot),
            }
        }
    });
    // After a failure: whatever is still in flight is settled by the rule before anything is freed.
    let mut rest = Vec::new();
    let settled = queue.settle_all(&mut rest);
    returned.extend(rest.into_iter().map(|(_, slab, event)| Slot { slab, event }));
    if !settled {
        dst.keep_after_error();
    }
    for slot in free_rx.into_inner().unwrap_or_else(|p| p.into_inner()).try_iter() {
        returned.push(slot);
    }
    for slot in returned {
        crate::engine::staging::give_slab(slot.slab);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cache::{DirectFiles, PageCache};
    use crate::file::TensorFile;

    /// A safetensors file of U8 tensors of `sizes` bytes, one after another (the header padded to an odd
    /// multiple of 8, so no tensor starts on a block boundary), tensor k's byte j = (k * 7919 + j * 31) % 251;
    /// returns its path (in a directory of its own, which the caller removes: the path's parent) and each
    /// tensor's bytes.
    fn file(name: &str, sizes: &[usize]) -> (std::path::PathBuf, Vec<Vec<u8>>) {
        let dir = std::env::temp_dir().join(format!("hostfirst-arena-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut header = String::from("{");
        let mut at = 0;
        for (k, n) in sizes.iter().enumerate() {
            if k > 0 {
                header.push(',');
            }
            header
                .push_str(&format!("\"t{k}\":{{\"dtype\":\"U8\",\"shape\":[{n}],\"data_offsets\":[{at},{}]}}", at + n));
            at += n;
        }
        header.push('}');
        while header.len() % 8 != 0 || (header.len() / 8) % 2 == 0 {
            header.push(' ');
        }
        let data: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|j| ((k * 7919 + j * 31) % 251) as u8).collect())
            .collect();
        let mut img = (header.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(header.as_bytes());
        for d in &data {
            img.extend_from_slice(d);
        }
        let p = dir.join(name);
        std::fs::write(&p, img).unwrap();
        (p, data)
    }

    /// Tensors of awkward sizes (empty, one byte, unaligned, larger than a read and than a direct piece), read
    /// into one arena under every page-cache policy with 1 to 9 reader threads (the direct readers' count
    /// among them), come out byte for byte; the read-ahead of buffered loads (64 MiB and more) runs in the
    /// large case.
    #[test]
    fn host_loads_are_byte_exact_under_every_policy_and_thread_count() {
        let small = [5usize, 0, 4096, 3 << 20, 1, (9 << 20) + 4095, 77, 1 << 20];
        let large = [(40 << 20) + 3, 7, (30 << 20) + 4097];
        for (name, sizes) in [("small", &small[..]), ("large", &large[..])] {
            let (p, data) = file(name, sizes);
            let f = TensorFile::open(&p).unwrap();
            let tensors: Vec<TensorRef<'_>> = (0..f.len()).map(|i| f.tensor_ref(i).unwrap()).collect();
            for policy in PageCache::all() {
                let direct = DirectFiles::for_policy(policy);
                for threads in [1, 2, 3, crate::cache::DIRECT_MIN_THREADS + 1] {
                    let mut rep = Reporter::new(None, 0);
                    let (arena, offsets) = load_host_threads(&tensors, &mut rep, direct.as_ref(), threads).unwrap();
                    for (k, d) in data.iter().enumerate() {
                        let got = &arena.as_slice()[offsets[k]..offsets[k] + d.len()];
                        assert!(got == &d[..], "{name}: {policy:?}, {threads} thread(s): t{k} differs");
                        assert_eq!(offsets[k] % HOST_ALIGN, 0);
                    }
                }
                if let Some(why) = direct.as_ref().and_then(|d| d.fallback()) {
                    eprintln!("bypass fell back here: {why}");
                }
            }
            drop(tensors);
            drop(f);
            std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
        }
    }

    /// A file truncated after it was opened fails the load with `TRUNCATED` naming the tensor, under every
    /// policy and thread count, and hands out nothing: the arena is never returned (it is freed), whichever
    /// reader met the end first.
    #[test]
    fn a_truncated_file_fails_the_load_and_hands_out_nothing() {
        let (p, _) = file("trunc", &[3 << 20, 5 << 20, (2 << 20) + 9]);
        let f = TensorFile::open(&p).unwrap();
        let tensors: Vec<TensorRef<'_>> = (0..f.len()).map(|i| f.tensor_ref(i).unwrap()).collect();
        let len = std::fs::metadata(&p).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(len - (4 << 20)).unwrap();
        for policy in PageCache::all() {
            let direct = DirectFiles::for_policy(policy);
            for threads in [1, 2, crate::cache::DIRECT_MIN_THREADS] {
                let mut rep = Reporter::new(None, 0);
                let e = load_host_threads(&tensors, &mut rep, direct.as_ref(), threads).map(|_| ()).unwrap_err();
                assert_eq!(e.status(), Status::Truncated, "{policy:?}, {threads}: {}", e.message());
                assert!(e.message().contains("tensor 't"), "{}", e.message());
            }
        }
        drop(tensors);
        drop(f);
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}
