//! The page-cache policy of a read (issue 45, point 1): what a load, put, gather or shard-on-read leaves in
//! the operating system's page cache.
//!
//! - [`PageCache::Keep`] (the default, the behaviour before 1.1): reads go through the page cache and what
//!   they brought in stays there.
//! - [`PageCache::Drop`]: reads go through the page cache; when the operation ends (successfully or not), the
//!   pages of its files that were **not** in the cache before it started are given back
//!   (`POSIX_FADV_DONTNEED`). Pages that were cached before (another reader's, an earlier load's) stay: the
//!   cache is sampled with `mincore` over a fresh read-only mapping of each file when the operation starts
//!   ([`CacheScope`]). A page another process brings in *during* the operation is dropped too (it was not
//!   there at the start); that costs it a re-read, never correctness. Pages the kernel's readahead is still
//!   reading past the end of a partial read when the operation ends are skipped by `DONTNEED` and may stay
//!   (a whole-file load reads every page it brings in, so none stay there).
//! - [`PageCache::Bypass`]: reads that can use direct I/O do (`O_DIRECT` on a second descriptor of the same
//!   file, into page-aligned staging, then copied to the destination: [`DirectFiles`], [`read_direct`] for loads,
//!   [`read_many_direct`] for a gather's windows and shard-on-read's requests); where
//!   the file system refuses `O_DIRECT` (e.g. `EINVAL` from an older tmpfs, most FUSE mounts) or a path has no
//!   direct reader (a load's `cuda_host` and copy-on-write tensors, a shard run's strided CUDA parts, a
//!   strided gather source), the reads go through the cache and the operation ends as with `Drop`, and
//!   [`DirectFiles::fallback`] says why. Either way at most the pages cached before remain.
//!
//! On systems without `mincore`/`posix_fadvise`/`O_DIRECT` (Windows), `Drop` and `Bypass` behave as `Keep`
//! and say so ([`unsupported_here`]).

use crate::error::{Error, Result, Status};
use std::fs::File;
use std::sync::Mutex;

/// What a read leaves in the operating system's page cache (the `page_cache` field of the load and put
/// options; values are never renumbered; an unknown value is `INVALID_ARGUMENT` naming the field).
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PageCache {
    /// Read through the page cache and leave what it brought in cached (the default; 1.0's behaviour).
    #[default]
    Keep = 0,
    /// Read through the page cache, then drop the pages of the file this read brought in (pages cached
    /// before it stay). Linux; elsewhere as `KEEP`.
    Drop = 1,
    /// Direct I/O (`O_DIRECT`) into aligned staging where the file system allows it; where it does not
    /// (some tmpfs, FUSE), or for reads with no direct path, read as with `DROP`. Linux; elsewhere as `KEEP`.
    Bypass = 2,
}

impl PageCache {
    /// Every policy, in the order of their values.
    pub fn all() -> [PageCache; 3] {
        [PageCache::Keep, PageCache::Drop, PageCache::Bypass]
    }

    /// The policy of a C integer; None for an unknown value.
    pub fn from_u32(v: u32) -> Option<PageCache> {
        PageCache::all().get(v as usize).copied()
    }

    /// `keep`, `drop` or `bypass`.
    pub fn name(self) -> &'static str {
        match self {
            PageCache::Keep => "keep",
            PageCache::Drop => "drop",
            PageCache::Bypass => "bypass",
        }
    }

    /// Parses a name (exact, lower case); an unknown one is `INVALID_ARGUMENT` naming `param` and the choices.
    pub fn parse(s: &str, param: &str) -> Result<PageCache> {
        PageCache::all().into_iter().find(|p| p.name() == s).ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("{param} {s:?} is not a page-cache policy: keep, drop or bypass"),
            )
        })
    }
}

/// Why `Drop` and `Bypass` do nothing on this system (None where they work).
pub fn unsupported_here() -> Option<&'static str> {
    if cfg!(target_os = "linux") {
        None
    } else {
        Some("page-cache policies need mincore, posix_fadvise and O_DIRECT (Linux); the cache is kept")
    }
}

/// The size of a page of the page cache.
pub fn page_size() -> usize {
    crate::os::page_size()
}

/// Which pages of a file are in the page cache now: (resident, total) pages, sampled with `mincore` over a
/// fresh read-only mapping (mapping touches no page). For tests and the benchmark: "at most 5 % remains".
pub fn resident_pages(file: &File) -> std::io::Result<(usize, usize)> {
    let map = residency(file)?;
    Ok((map.iter().filter(|&&b| b & 1 != 0).count(), map.len()))
}

#[cfg(target_os = "linux")]
fn residency(file: &File) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let len = file.metadata()?.len() as usize;
    let page = page_size();
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    if len == 0 {
        return Ok(vec);
    }
    // SAFETY: a new shared read-only mapping of the whole file; nothing reads through it, it is unmapped below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `p` maps `len` bytes; `vec` holds one byte per page of them.
    let r = unsafe { libc::mincore(p, len, vec.as_mut_ptr().cast()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, len) };
    if r != 0 {
        return Err(err);
    }
    Ok(vec)
}

/// The residency of each page range `[lo, hi)` (sorted, disjoint, within the file) of `file`: one mapping of
/// the span they cover (touching no page), `mincore` range by range.
#[cfg(target_os = "linux")]
fn residency_ranges(file: &File, ranges: &[(u64, u64)]) -> std::io::Result<Vec<Vec<u8>>> {
    use std::os::fd::AsRawFd;
    let page = page_size();
    let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else { return Ok(Vec::new()) };
    let span = ((last.1 - first.0) as usize) * page;
    let at = (first.0 as usize * page) as libc::off_t;
    // SAFETY: a new shared read-only mapping of the span; nothing reads through it, it is unmapped below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), span, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), at) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::with_capacity(ranges.len());
    let mut failed = None;
    for &(lo, hi) in ranges {
        let mut vec = vec![0u8; (hi - lo) as usize];
        let off = (lo - first.0) as usize * page;
        // SAFETY: `[off, off + vec.len() pages)` lies within the mapping made above; one byte per page.
        let r = unsafe { libc::mincore(p.cast::<u8>().add(off).cast(), vec.len() * page, vec.as_mut_ptr().cast()) };
        if r != 0 {
            failed = Some(std::io::Error::last_os_error());
            break;
        }
        out.push(vec);
    }
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, span) };
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

#[cfg(not(target_os = "linux"))]
fn residency_ranges(_file: &File, _ranges: &[(u64, u64)]) -> std::io::Result<Vec<Vec<u8>>> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, unsupported_here().unwrap_or("")))
}

#[cfg(not(target_os = "linux"))]
fn residency(_file: &File) -> std::io::Result<Vec<u8>> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, unsupported_here().unwrap_or("")))
}

/// Drops the pages `[first, first + count)` of `file` from the page cache (advice: clean pages go).
#[cfg(target_os = "linux")]
fn drop_pages(file: &File, first: usize, count: usize) {
    use std::os::fd::AsRawFd;
    let page = page_size() as i64;
    // SAFETY: advice on a descriptor we hold; no memory is involved.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), first as i64 * page, count as i64 * page, libc::POSIX_FADV_DONTNEED)
    };
}

/// The page-cache side of one operation under a policy: made before the operation's first read
/// ([`CacheScope::begin`]), it gives back, when dropped, the pages of its files that the operation brought
/// into the cache (`Drop`, `Bypass`); under `Keep` it does nothing and costs nothing.
pub struct CacheScope {
    /// Each file (a duplicate descriptor, so the scope outlives no one's file), the first page sampled and the
    /// residency of the pages from there at the start (the whole file, or one range of it).
    files: Vec<(File, usize, Vec<u8>)>,
}

impl CacheScope {
    /// Samples the cache of each distinct file of `files` under `policy` (nothing under `Keep`). A file whose
    /// cache cannot be sampled (not mappable) is skipped: its pages are kept.
    pub fn begin<'a>(policy: PageCache, files: impl IntoIterator<Item = &'a File>) -> CacheScope {
        let mut scope = CacheScope { files: Vec::new() };
        if policy == PageCache::Keep || unsupported_here().is_some() {
            return scope;
        }
        let mut seen: Vec<(u64, u64)> = Vec::new();
        for f in files {
            let Some(id) = file_id(f) else { continue };
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
            if let (Ok(dup), Ok(map)) = (f.try_clone(), residency(f)) {
                scope.files.push((dup, 0, map));
            }
        }
        scope
    }

    /// Samples the cache of the byte ranges `ranges` ((offset, length)) of one file under `policy` (nothing
    /// under `Keep`): what a gather's batch reads, a few pages of a file that may be far larger than memory,
    /// so only those pages are sampled (`mincore` over one mapping of the span the ranges cover, range by
    /// range) and only those the batch brought in are dropped when the scope ends. A file that cannot be
    /// mapped is skipped (its pages are kept).
    pub fn begin_ranges(policy: PageCache, file: &File, ranges: impl IntoIterator<Item = (u64, u64)>) -> CacheScope {
        let mut scope = CacheScope { files: Vec::new() };
        if policy == PageCache::Keep || unsupported_here().is_some() {
            return scope;
        }
        let page = page_size() as u64;
        let mut pages: Vec<(u64, u64)> = ranges
            .into_iter()
            .filter(|r| r.1 > 0)
            .map(|(o, n)| (o / page, (o.saturating_add(n)).div_ceil(page)))
            .collect();
        if pages.is_empty() {
            return scope;
        }
        pages.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(pages.len());
        for (lo, hi) in pages {
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        let Ok(len) = file.metadata().map(|m| m.len()) else { return scope };
        let end_page = len.div_ceil(page);
        merged.retain_mut(|r| {
            r.1 = r.1.min(end_page);
            r.0 < r.1
        });
        if let Ok(sampled) = residency_ranges(file, &merged) {
            for ((lo, _), map) in merged.into_iter().zip(sampled) {
                if let Ok(dup) = file.try_clone() {
                    scope.files.push((dup, lo as usize, map));
                }
            }
        }
        scope
    }

    /// The number of files whose cache the scope will restore.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when the scope does nothing.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

impl Drop for CacheScope {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        for (f, first, before) in &self.files {
            let mut i = 0;
            while i < before.len() {
                if before[i] & 1 != 0 {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < before.len() && before[i] & 1 == 0 {
                    i += 1;
                }
                drop_pages(f, first + start, i - start);
            }
        }
    }
}

/// (device, inode) of an open file: what makes two descriptors the same file.
#[cfg(unix)]
fn file_id(f: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(_f: &File) -> Option<(u64, u64)> {
    None
}

/// The `O_DIRECT` twins of the files one operation reads under `Bypass`, opened on first use (a second open
/// of the same file through `/proc/self/fd`), and why a file has none.
#[derive(Default)]
pub struct DirectFiles {
    /// (the buffered file's identity, its direct twin or why not).
    opened: Mutex<Vec<Opened>>,
}

/// A file's identity and its direct twin, or why it has none.
type Opened = ((u64, u64), std::result::Result<std::sync::Arc<File>, String>);

impl DirectFiles {
    /// None under `Keep` and `Drop`; an empty set under `Bypass`.
    pub fn for_policy(policy: PageCache) -> Option<DirectFiles> {
        (policy == PageCache::Bypass).then(DirectFiles::default)
    }

    /// The direct twin of `file`, or None (then read `file` as usual; [`DirectFiles::fallback`] says why).
    pub fn get(&self, file: &File) -> Option<std::sync::Arc<File>> {
        let id = file_id(file)?;
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, r)) = opened.iter().find(|(k, _)| *k == id) {
            return r.as_ref().ok().cloned();
        }
        let r = open_direct(file).map(std::sync::Arc::new);
        opened.push((id, r.clone()));
        r.ok()
    }

    /// Why some file of the operation was read through the cache instead (the first reason), if one was.
    pub fn fallback(&self) -> Option<String> {
        let opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        opened.iter().find_map(|(_, r)| r.as_ref().err().cloned())
    }
}

#[cfg(target_os = "linux")]
fn open_direct(file: &File) -> std::result::Result<File, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => {
                format!("the file system refuses O_DIRECT ({e}); read through the page cache, then dropped")
            }
            _ => format!("O_DIRECT open failed ({e}); read through the page cache, then dropped"),
        })
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_file: &File) -> std::result::Result<File, String> {
    Err(unsupported_here().unwrap_or("no O_DIRECT here").to_string())
}

/// The alignment of direct reads: offsets, lengths and buffers (4 KiB covers every common block device).
pub const DIRECT_ALIGN: usize = 4096;

/// A page-aligned staging buffer for direct reads, grown on demand and reused (one per reader thread).
#[derive(Default)]
pub struct Staging {
    ptr: Option<std::ptr::NonNull<u8>>,
    cap: usize,
}

// SAFETY: owns its allocation; used by one thread at a time.
unsafe impl Send for Staging {}

impl Staging {
    fn layout(cap: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(cap, DIRECT_ALIGN).expect("a staging size below isize::MAX")
    }

    /// At least `len` bytes, aligned to [`DIRECT_ALIGN`].
    fn get(&mut self, len: usize) -> Result<&mut [u8]> {
        if self.cap < len {
            self.free();
            let cap = len.next_multiple_of(DIRECT_ALIGN);
            // Zeroed: the slice handed out is initialised memory, and a read the kernel makes into it through
            // io_uring (which memcheck cannot follow) leaves it defined for valgrind's pass (the gather CLI's
            // bypass copies were reported as uninitialised with a plain alloc).
            // SAFETY: a non-zero size (len > cap >= 0 and rounded up).
            let p = unsafe { std::alloc::alloc_zeroed(Self::layout(cap)) };
            let p = std::ptr::NonNull::new(p).ok_or_else(|| {
                Error::new(Status::OutOfMemory, format!("{cap} bytes of aligned staging for direct reads"))
            })?;
            self.ptr = Some(p);
            self.cap = cap;
        }
        let p = self.ptr.expect("allocated above");
        // SAFETY: `cap` bytes allocated (zeroed) at `p`, owned by self.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), self.cap) })
    }

    /// The bytes held now (for the fit check and the RSS bound: staging counts).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    fn free(&mut self) {
        if let Some(p) = self.ptr.take() {
            // SAFETY: allocated by get() with this layout.
            unsafe { std::alloc::dealloc(p.as_ptr(), Self::layout(self.cap)) };
            self.cap = 0;
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.free();
    }
}

/// The most bytes staged at once (larger spans are read in pieces of this through the staging).
pub const DIRECT_PIECE: usize = 8 << 20;
/// The host memory `threads` reader threads may hold as direct-read staging at once (each one piece and a
/// block, aligned): what the fit check of a `bypass` transfer adds to the host's needs, and the staging ring
/// in its RSS bound.
pub fn staging_bytes(threads: usize) -> u64 {
    threads as u64 * (DIRECT_PIECE + DIRECT_ALIGN) as u64
}

/// The fewest reader threads of a host load under `bypass`, whatever the CPU count. A direct read waits for
/// the disk and then copies its piece out of the staging; with one thread per CPU of a small machine the
/// disk sits idle while every thread copies (two threads of 1 MiB reads: about 0.4× fio's 16 × 4 MiB on
/// the 2-core benchmark VM, BENCHMARKS.md section 16; eight threads of 4 MiB reads: about 0.65×). Eight
/// threads keep about 16 reads of 4 MiB in flight, as fio's direct sequential read does, for 64 MiB of
/// staging.
pub const DIRECT_MIN_THREADS: usize = 8;

/// The reader threads of a host load under `bypass`: the CPUs available (as for buffered reads), at least
/// [`DIRECT_MIN_THREADS`]. [`staging_bytes`] of this many is what the fit check counts.
pub fn direct_threads() -> usize {
    crate::engine::default_threads().max(DIRECT_MIN_THREADS)
}

/// The size of each of the concurrent direct reads that fill a staged piece (fio's block in the benchmark's
/// reference read).
pub const DIRECT_SUB: usize = 4 << 20;

/// Reads the bytes of `iov` ((address, length) of consecutive pieces of the file from `at`) from `direct`
/// (an `O_DIRECT` descriptor) through `staging`: whole aligned blocks covering each piece of at most [`DIRECT_PIECE`] bytes,
/// copied out to the destinations. A file that ends before the last needed byte is `TRUNCATED` naming it
/// (`what`), an OS failure `IO`.
///
/// # Safety
/// Each `(address, length)` of `iov` must be valid for writes of `length` bytes, and no one else may access
/// those bytes during the call (the contract of `preadv`'s destinations).
pub unsafe fn read_direct(
    direct: &File,
    at: u64,
    iov: &[(*mut u8, usize)],
    staging: &mut Staging,
    what: &dyn Fn() -> String,
) -> Result<()> {
    let total: usize = iov.iter().map(|v| v.1).sum();
    let end = at + total as u64;
    // The file's length now: a piece whose last aligned block lies wholly inside the file reads that block
    // with the others, concurrently; only a block the file ends inside (which comes back short) is read on
    // its own after them.
    let flen = direct.metadata().map(|m| m.len()).unwrap_or(0);
    let (mut vi, mut vo) = (0usize, 0usize); // the current destination piece and the offset in it
    let mut pos = at; // the next file byte to deliver
    let align = DIRECT_ALIGN as u64;
    while pos < end {
        let start = pos / align * align;
        // A piece and a block from the block start: a range of DIRECT_PIECE bytes that starts inside a block
        // (a host load's group) is one staged read, not a full piece and then one of a single block.
        let want_end = end.min(start + (DIRECT_PIECE + DIRECT_ALIGN) as u64);
        let len = ((want_end - start).div_ceil(align) * align) as usize;
        let buf = &mut staging.get(len)?[..len];
        let truncated = |at: u64| {
            let now = direct.metadata().map(|m| m.len().to_string()).unwrap_or_else(|_| "?".into());
            Error::new(
                Status::Truncated,
                format!(
                    "{}: the file ends before byte {} (it is now {now} bytes; was it truncated after opening?)",
                    what(),
                    at.max(pos).min(end)
                ),
            )
        };
        // The aligned blocks as concurrent reads of DIRECT_SUB bytes (io_uring or the pread pool: a cold disk
        // needs many reads in flight); a last block that the file ends inside, after them, one read at a time
        // (it comes back short, and a direct read cannot resume at an unaligned offset).
        let whole = if start + len as u64 <= flen { len } else { ((want_end - start) / align * align) as usize };
        let mut reads: Vec<crate::engine::Read<'_>> = buf[..whole]
            .chunks_mut(DIRECT_SUB)
            .enumerate()
            .map(|(i, d)| crate::engine::Read {
                fd: crate::os::raw_file(direct),
                offset: start + (i * DIRECT_SUB) as u64,
                dst: d,
            })
            .collect();
        crate::engine::read_many(&mut reads, &crate::engine::Tuning::default()).map_err(|f| match f.kind {
            crate::engine::FailureKind::Eof { at } => truncated(at),
            crate::engine::FailureKind::Os(e) => Error::new(Status::Io, format!("{}: direct read failed: {e}", what())),
        })?;
        drop(reads);
        let tail = ((want_end - start) as usize).saturating_sub(whole);
        if tail > 0 {
            let fd = crate::os::raw_file(direct);
            crate::engine::read_at_least(fd, start + whole as u64, &mut buf[whole..], tail).map_err(|f| match f {
                crate::engine::FailureKind::Eof { at } => truncated(at),
                crate::engine::FailureKind::Os(e) => {
                    Error::new(Status::Io, format!("{}: direct read failed: {e}", what()))
                }
            })?;
        }
        // Deliver [pos, want_end) from the staging into the destinations, in order.
        let mut src = (pos - start) as usize;
        let stop = (want_end - start) as usize;
        while src < stop {
            let (base, vlen) = iov[vi];
            let n = (vlen - vo).min(stop - src);
            // SAFETY: the iovec's memory is the caller's destination, exclusively ours for the call (as for
            // read_vectored_at); `src..src + n` lies within the bytes read into the staging.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(src), base.add(vo), n) };
            src += n;
            vo += n;
            if vo == vlen {
                vi += 1;
                vo = 0;
            }
        }
        pos = want_end;
    }
    Ok(())
}

/// Performs every read of `reads` (any offsets and lengths; their `fd` is not used) with direct I/O on
/// `direct` (an `O_DIRECT` descriptor of the same file, [`DirectFiles::get`]): each read is covered by whole
/// aligned blocks read into `staging`, as concurrent reads of at most [`DIRECT_SUB`] bytes through the engine
/// ([`crate::engine::read_many`]: io_uring or the pread pool, `tuning.queue_depth` in flight), then copied
/// to its destination; a block the file ends inside is read after them on its own (it comes back short).
/// Staging holds at most about [`DIRECT_PIECE`] bytes: longer sets go in waves. What a gather's windows and
/// shard-on-read's requests use under `bypass`, as loads use [`read_direct`]. Failures as
/// [`crate::engine::read_many`]'s (the index of the read; `Eof` at the first byte the file does not have);
/// staging that cannot be allocated is an `Os` failure of the first read.
pub fn read_many_direct(
    direct: &File,
    reads: &mut [crate::engine::Read<'_>],
    tuning: &crate::engine::Tuning,
    staging: &mut Staging,
) -> std::result::Result<(), crate::engine::ReadFailure> {
    use crate::engine::{FailureKind, ReadFailure};
    let fail = |index: usize, kind: FailureKind| ReadFailure { index, kind };
    let flen = direct.metadata().map_err(|e| fail(0, FailureKind::Os(e)))?.len();
    let fd = crate::os::raw_file(direct);
    let align = DIRECT_ALIGN as u64;
    // Segments of at most DIRECT_PIECE bytes: (read, offset in its destination, file offset, length).
    let mut segs: Vec<(usize, usize, u64, usize)> = Vec::with_capacity(reads.len());
    for (i, r) in reads.iter().enumerate() {
        let mut k = 0;
        while k < r.dst.len() {
            let n = (r.dst.len() - k).min(DIRECT_PIECE);
            segs.push((i, k, r.offset + k as u64, n));
            k += n;
        }
    }
    // A segment's aligned blocks: [lo, hi).
    let blocks = |fo: u64, n: usize| (fo / align * align, (fo + n as u64).div_ceil(align) * align);
    let mut rest = &segs[..];
    while !rest.is_empty() {
        // The next wave: segments while their blocks fit in one piece of staging (at least one).
        let (mut count, mut total) = (0usize, 0usize);
        while count < rest.len() {
            let (lo, hi) = blocks(rest[count].2, rest[count].3);
            let need = (hi - lo) as usize;
            if count > 0 && total + need > DIRECT_PIECE + 2 * DIRECT_ALIGN {
                break;
            }
            total += need;
            count += 1;
        }
        let (wave, after) = rest.split_at(count);
        rest = after;
        let buf = staging.get(total).map_err(|e| {
            fail(
                wave[0].0,
                FailureKind::Os(std::io::Error::new(std::io::ErrorKind::OutOfMemory, e.message().to_string())),
            )
        })?;
        let buf = &mut buf[..total];
        // Whole blocks inside the file as concurrent reads; the blocks the file ends inside after them.
        let mut set: Vec<crate::engine::Read<'_>> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        let mut tails: Vec<(usize, u64, usize, usize, usize)> = Vec::new(); // (read, file offset, at, len, min)
        let mut free: &mut [u8] = buf;
        let mut at = 0usize;
        for &(i, _, fo, n) in wave {
            let (lo, hi) = blocks(fo, n);
            let want_end = fo + n as u64;
            let span = (hi - lo) as usize;
            let whole = if hi <= flen { span } else { ((want_end - lo) / align * align) as usize };
            let (mine, later) = std::mem::take(&mut free).split_at_mut(span);
            free = later;
            for (k, d) in mine[..whole].chunks_mut(DIRECT_SUB).enumerate() {
                set.push(crate::engine::Read { fd, offset: lo + (k * DIRECT_SUB) as u64, dst: d });
                owner.push(i);
            }
            let tail = ((want_end - lo) as usize).saturating_sub(whole);
            if tail > 0 {
                tails.push((i, lo + whole as u64, at + whole, span - whole, tail));
            }
            at += span;
        }
        let r = crate::engine::read_many(&mut set, tuning);
        drop(set);
        r.map_err(|f| {
            let i = owner[f.index];
            let kind = match f.kind {
                FailureKind::Eof { at } => FailureKind::Eof { at: at.max(reads[i].offset) },
                other => other,
            };
            fail(i, kind)
        })?;
        let buf = &mut staging.get(total).expect("allocated above")[..total];
        for &(i, fo, at, len, min) in &tails {
            crate::engine::read_at_least(fd, fo, &mut buf[at..at + len], min).map_err(|k| {
                let kind = match k {
                    FailureKind::Eof { at } => FailureKind::Eof { at: at.max(reads[i].offset) },
                    other => other,
                };
                fail(i, kind)
            })?;
        }
        // Copy each segment out of its blocks.
        let mut at = 0usize;
        for &(i, k, fo, n) in wave {
            let (lo, hi) = blocks(fo, n);
            let from = at + (fo - lo) as usize;
            reads[i].dst[k..k + n].copy_from_slice(&buf[from..from + n]);
            at += (hi - lo) as usize;
        }
    }
    Ok(())
}

thread_local! {
    /// The staging of direct reads made on this thread by [`read_direct_here`].
    static STAGING: std::cell::RefCell<Staging> = std::cell::RefCell::new(Staging::default());
}

/// [`read_direct`] of one destination through this thread's staging (the reader of a parallel fill: each
/// thread has its own). Call [`release_staging_here`] on the calling thread when the transfer ends.
pub fn read_direct_here(direct: &File, at: u64, dst: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
    STAGING.with(|s| {
        let mut s = s.borrow_mut();
        // SAFETY: `dst` is an exclusive borrow, valid for its length.
        unsafe { read_direct(direct, at, &[(dst.as_mut_ptr(), dst.len())], &mut s, what) }
    })
}

/// Frees this thread's direct-read staging (the threads a transfer starts free theirs when they end).
pub fn release_staging_here() {
    STAGING.with(|s| s.borrow_mut().free());
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn names_values_and_parsing() {
        for (i, p) in PageCache::all().into_iter().enumerate() {
            assert_eq!(PageCache::from_u32(i as u32), Some(p));
            assert_eq!(PageCache::parse(p.name(), "x").unwrap(), p);
        }
        assert_eq!(PageCache::from_u32(3), None);
        let e = PageCache::parse("evict", "page_cache").unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().starts_with("page_cache \"evict\" is not a page-cache policy"), "{}", e.message());
    }

    /// Direct reads of unaligned ranges into several destinations are byte-exact, across pieces.
    #[test]
    fn direct_reads_are_exact_or_say_why_not() {
        let dir = std::env::temp_dir().join(format!("hostfirst-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("direct");
        let len = DIRECT_PIECE + 3 * DIRECT_ALIGN + 123;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let d = DirectFiles::for_policy(PageCache::Bypass).unwrap();
        let Some(direct) = d.get(&f) else {
            let why = d.fallback().unwrap();
            assert!(why.contains("O_DIRECT"), "{why}");
            return;
        };
        let mut staging = Staging::default();
        for (at, sizes) in
            [(0u64, vec![10usize, 5000, 70_000]), (4093, vec![DIRECT_PIECE, 9]), (len as u64 - 200, vec![200])]
        {
            let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            let iov: Vec<(*mut u8, usize)> = bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())).collect();
            // SAFETY: the destinations are the live buffers above.
            unsafe { read_direct(&direct, at, &iov, &mut staging, &|| "t".into()) }.unwrap();
            let got: Vec<u8> = bufs.concat();
            assert!(got[..] == data[at as usize..at as usize + got.len()], "at {at}");
        }
        let mut b = vec![0u8; 300];
        let iov = [(b.as_mut_ptr(), b.len())];
        // SAFETY: as above.
        let e = unsafe { read_direct(&direct, len as u64 - 200, &iov, &mut staging, &|| "t".into()) }.unwrap_err();
        assert_eq!(e.status(), Status::Truncated, "{}", e.message());
        // Sets of reads at unaligned offsets and lengths (two in one block, one longer than a piece, one
        // ending in the file's last partial block) are byte-exact; one past the end is Eof at the file's end.
        let spans = [(1u64, 10usize), (5, 4000), (4093, DIRECT_PIECE + 5000), (77_777, 1), (len as u64 - 300, 300)];
        for depth in [1, 64] {
            let mut bufs: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0u8; n]).collect();
            let mut reads: Vec<crate::engine::Read<'_>> = spans
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(o, _), b)| crate::engine::Read { fd: -1, offset: o, dst: b })
                .collect();
            let t = crate::engine::Tuning { queue_depth: depth, ..Default::default() };
            read_many_direct(&direct, &mut reads, &t, &mut staging).unwrap();
            for (&(o, n), b) in spans.iter().zip(&bufs) {
                assert!(b[..] == data[o as usize..o as usize + n], "depth {depth}: {o}+{n}");
            }
        }
        let (mut a, mut b) = (vec![0u8; 100], vec![0u8; 400]);
        let mut reads = [
            crate::engine::Read { fd: -1, offset: 3, dst: &mut a },
            crate::engine::Read { fd: -1, offset: len as u64 - 300, dst: &mut b },
        ];
        let f = read_many_direct(&direct, &mut reads, &Default::default(), &mut staging).unwrap_err();
        assert_eq!(f.index, 1);
        assert!(matches!(f.kind, crate::engine::FailureKind::Eof { at } if at == len as u64), "{:?}", f.kind);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
