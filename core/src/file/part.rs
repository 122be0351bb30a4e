//! One safetensors file (or memory buffer): its validated header and where its bytes live.

use super::header::{self, Header};
use super::names::CName;
use crate::engine::per_file::{FileEngine, MapPolicy};
use crate::error::{Error, Result, Status};
use crate::remote::RemoteObject;
use memmap2::Mmap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Caller memory borrowed through the C API (`hostfirst_file_open_memory`): the caller promises it stays
/// valid and unmodified until every handle that uses it is freed.
pub(crate) struct RawMemory {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the memory is only read, and the C contract makes the caller keep it alive and unmodified while
// any handle uses it, from any thread.
unsafe impl Send for RawMemory {}
// SAFETY: as above; shared reads of immutable memory.
unsafe impl Sync for RawMemory {}

impl RawMemory {
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (or `len == 0`) and stay valid and unmodified for the
    /// lifetime of every object built over it.
    pub(crate) unsafe fn new(ptr: *const u8, len: usize) -> RawMemory {
        RawMemory { ptr: if len == 0 { std::ptr::NonNull::<u8>::dangling().as_ptr() } else { ptr }, len }
    }
}

impl AsRef<[u8]> for RawMemory {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: guaranteed by the constructor's contract; a zero length uses a dangling non-null pointer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

pub(crate) enum Source {
    /// `populated`: the absolute byte ranges `[lo, hi)` that [`Part::prefault`] mapped, merged and sorted.
    File {
        file: fs::File,
        map: Mmap,
        populated: Mutex<Vec<(u64, u64)>>,
        /// Live [`ReadaheadOff`] guards on this descriptor.
        no_readahead: Mutex<usize>,
        /// Whether the mapping may be handed out, chosen at open from the file system.
        engine: FileEngine,
    },
    Memory(Box<dyn AsRef<[u8]> + Send + Sync>),
    /// An object read by URL with ranged GETs ([`crate::remote`]): no mapping, owned reads only.
    Remote(RemoteObject),
}

/// Where the bytes of a file being opened come from.
pub(crate) enum Backing {
    File(fs::File),
    /// Boxed: an object's URL, client and ETag are much larger than a descriptor.
    Remote(Box<RemoteObject>),
}

/// What [`Part::open_file_detect`] found (a value returned once per open, never stored: no need to box).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Opened {
    /// A validated safetensors file.
    Part(Part),
    /// The file looks like a multi-file set's JSON index, not safetensors.
    Index,
}

/// A validated safetensors file or buffer.
pub(crate) struct Part {
    pub display: String,
    pub path: Option<PathBuf>,
    pub path_c: Option<CName>,
    pub source: Source,
    pub header: Header,
}

fn io_error(display: &str, what: &str, e: &std::io::Error) -> Error {
    Error::new(Status::Io, format!("{display}: {what}: {e}"))
}

/// Reads exactly `dst.len()` bytes at `offset` through the transfer engine's positioned read
/// ([`crate::engine::read_exact`]); a short file gives `TRUNCATED`.
pub(crate) fn pread_exact(
    file: &fs::File,
    offset: u64,
    dst: &mut [u8],
    display: &str,
    what: &dyn Fn() -> String,
) -> Result<()> {
    let end = offset + dst.len() as u64;
    crate::engine::read_exact(crate::os::raw_file(file), offset, dst).map_err(|kind| match kind {
        crate::engine::FailureKind::Eof { .. } => {
            let now = file.metadata().map(|m| m.len().to_string()).unwrap_or_else(|_| "?".into());
            Error::new(
                Status::Truncated,
                format!(
                    "{display}: {}: the file ends before byte {end} (it is now {now} bytes; was it truncated after opening?)",
                    what()
                ),
            )
        }
        crate::engine::FailureKind::Os(e) => io_error(display, &what(), &e),
    })
}

/// A regular file (or a remote object) being opened: its descriptor, length and first bytes, before any
/// format's header is parsed.
pub(crate) struct Opening {
    pub display: String,
    pub path: PathBuf,
    pub backing: Backing,
    pub len: u64,
    /// The first `min(len, 4096)` bytes (for a remote object, `min(len, remote::FIRST_READ)`).
    pub first: Vec<u8>,
}

impl Opening {
    /// How many leading bytes are read at open.
    pub(crate) const FIRST_READ: usize = 4096;

    /// Opens `path` (a regular file; [`crate::os::open_read`], so that a FIFO cannot hang the open), takes its length and
    /// reads its first 4 KiB.
    pub(crate) fn new(path: &Path) -> Result<Opening> {
        if let Some(url) = path.to_str().filter(|p| crate::remote::is_url(p)) {
            let (obj, first) = RemoteObject::open(url)?;
            return Ok(Opening {
                display: obj.display().to_string(),
                path: path.to_path_buf(),
                len: obj.len,
                backing: Backing::Remote(Box::new(obj)),
                first,
            });
        }
        let display = path.to_string_lossy().into_owned(); // what `path.display()` shows, without formatting
        let file = crate::os::open_read(path).map_err(|e| io_error(&display, "cannot open", &e))?;
        let meta = file.metadata().map_err(|e| io_error(&display, "cannot stat", &e))?;
        if !meta.is_file() {
            return Err(Error::new(Status::Io, format!("{display}: not a regular file")));
        }
        let len = meta.len();
        let have = len.min(Opening::FIRST_READ as u64) as usize;
        let mut first = vec![0u8; have];
        pread_exact(&file, 0, &mut first, &display, &|| "reading the header".into())?;
        Ok(Opening { display, path: path.to_path_buf(), backing: Backing::File(file), len, first })
    }

    /// The file's first byte that is not JSON whitespace (space, tab, CR, LF), `None` when there is none: what
    /// decides whether content is JSON text (an index). Reads past the first 4 KiB only when those are all
    /// whitespace, so the rule has no window: the same content gives the same verdict as a `.json` name.
    fn first_non_whitespace(&self) -> Result<Option<u8>> {
        let ws = |b: &u8| b" \t\r\n".contains(b);
        if let Some(&b) = self.first.iter().find(|b| !ws(b)) {
            return Ok(Some(b));
        }
        let mut at = self.first.len() as u64;
        let mut chunk = vec![0u8; 64 << 10];
        while at < self.len {
            let n = (self.len - at).min(chunk.len() as u64) as usize;
            self.read(at, &mut chunk[..n])?;
            if let Some(&b) = chunk[..n].iter().find(|b| !ws(b)) {
                return Ok(Some(b));
            }
            at += n as u64;
        }
        Ok(None)
    }

    /// Reads `dst.len()` bytes at `offset` (`TRUNCATED` past the end).
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        match &self.backing {
            Backing::File(file) => pread_exact(file, offset, dst, &self.display, &|| "reading the header".into()),
            Backing::Remote(obj) => obj.read(offset, dst, &|| "reading the header".into()),
        }
    }

    /// The open as a safetensors file (see [`Part::open_file_detect`]).
    pub(crate) fn safetensors(self, detect_index: bool) -> Result<Opened> {
        let ctx = |e: Error| e.context(&self.display);
        let (len, have) = (self.len, self.first.len());
        let prefix = &self.first[..have.min(header::PREFIX_PEEK)];
        if detect_index {
            let starts_json = self.first_non_whitespace()? == Some(b'{');
            let prefix_ok = prefix.len() >= 8
                && u64::from_le_bytes(prefix[..8].try_into().expect("8 bytes"))
                    .checked_add(8)
                    .is_some_and(|s| s <= len);
            if starts_json && !prefix_ok {
                return Ok(Opened::Index);
            }
        }
        let n = header::header_len(prefix, len, Status::Truncated).map_err(ctx)? as usize;
        let header = if 8 + n <= have {
            header::parse(&self.first[8..8 + n], len, Status::Truncated).map_err(ctx)?
        } else {
            let mut json = vec![0u8; n];
            self.read(8, &mut json)?;
            header::parse(&json, len, Status::Truncated).map_err(ctx)?
        };
        Ok(Opened::Part(self.into_part(header)?))
    }

    /// Maps the file read-only (without populating it) and makes the part of `header`.
    pub(crate) fn into_part(self, header: Header) -> Result<Part> {
        let Opening { display, path, backing, len, .. } = self;
        let file = match backing {
            Backing::File(file) => file,
            Backing::Remote(obj) => {
                return Ok(Part {
                    path_c: CName::from_str(&display),
                    display,
                    path: Some(path),
                    source: Source::Remote(*obj),
                    header,
                })
            }
        };
        let engine = FileEngine::choose(crate::os::file_system(crate::os::raw_file(&file)), MapPolicy::from_env()?);
        // The length is the one `fstat` gave at open (memmap2 would ask again).
        let map_len = usize::try_from(len)
            .map_err(|_| Error::new(Status::Io, format!("{display}: {len} bytes cannot be mapped here")))?;
        // SAFETY: a read-only shared mapping. If another process truncates the file while it is mapped, reads
        // through the mapping fault (SIGBUS); that hazard is documented on every API returning mapped memory,
        // and the pread paths (`read_at`) never touch the mapping. An empty file maps to an empty slice.
        let map = unsafe { memmap2::MmapOptions::new().len(map_len).map(&file) }
            .map_err(|e| io_error(&display, "cannot map", &e))?;
        Ok(Part {
            path_c: CName::from_str(&display),
            display,
            path: Some(path),
            source: Source::File { file, map, populated: Mutex::new(Vec::new()), no_readahead: Mutex::new(0), engine },
            header,
        })
    }
}

impl Part {
    /// Opens and validates a safetensors file. Reads only the header (with pread); maps the file read-only
    /// without populating it, so no data page is touched.
    pub(crate) fn open_file(path: &Path) -> Result<Part> {
        match Part::open_file_detect(path, false)? {
            Opened::Part(s) => Ok(s),
            Opened::Index => unreachable!("index detection is off"),
        }
    }

    /// [`Part::open_file`]; with `detect_index`, a file whose first bytes begin a JSON object but cannot be a
    /// safetensors length prefix for this file is reported as [`Opened::Index`] (a multi-file set's index)
    /// instead of an error. One open, one `fstat`, one `pread` of the first 4 KiB (a header that fits there
    /// is not read again), one mapping.
    pub(crate) fn open_file_detect(path: &Path, detect_index: bool) -> Result<Opened> {
        let o = Opening::new(path)?;
        o.safetensors(detect_index)
    }

    /// Validates a memory buffer (owned by `owner`) with `parse`, given the buffer, its length and the status of
    /// a buffer shorter than it declares (`INCOMPLETE_BUFFER`).
    pub(crate) fn from_memory_with(
        owner: Box<dyn AsRef<[u8]> + Send + Sync>,
        parse: impl FnOnce(&[u8]) -> Result<Header>,
    ) -> Result<Part> {
        let header = parse((*owner).as_ref()).map_err(|e| e.context("<memory>"))?;
        Ok(Part { display: "<memory>".to_string(), path: None, path_c: None, source: Source::Memory(owner), header })
    }

    /// Validates a memory buffer (owned by `owner`).
    pub(crate) fn from_memory(owner: Box<dyn AsRef<[u8]> + Send + Sync>) -> Result<Part> {
        let display = "<memory>".to_string();
        let bytes = (*owner).as_ref();
        let len = bytes.len() as u64;
        let ctx = |e: Error| e.context("<memory>");
        let n = header::header_len(bytes, len, Status::InvalidHeaderLength).map_err(ctx)?;
        let header = header::parse(&bytes[8..8 + n as usize], len, Status::IncompleteBuffer).map_err(ctx)?;
        let part = Part { display, path: None, path_c: None, source: Source::Memory(owner), header };
        Ok(part)
    }

    /// The whole file or buffer (file: the read-only mapping).
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.source {
            Source::File { map, .. } => &map[..],
            Source::Memory(m) => (**m).as_ref(),
            Source::Remote(_) => &[],
        }
    }

    /// Whether the mapping (or memory buffer) may be handed out: always for a memory buffer; for a file, what
    /// its read engine chose at open ([`crate::engine::per_file`]).
    pub(crate) fn maps(&self) -> bool {
        match &self.source {
            Source::File { engine, .. } => engine.maps(),
            Source::Memory(_) => true,
            Source::Remote(_) => false,
        }
    }

    /// The read engine's report for this file ([`FileEngine::report`]), or what a memory buffer is.
    pub(crate) fn read_engine_report(&self) -> String {
        match &self.source {
            Source::File { engine, file, .. } => {
                engine.report(self.path.as_deref(), crate::os::mount_type(crate::os::raw_file(file)))
            }
            Source::Memory(_) => "memory: a buffer in this process's memory, read in place".to_string(),
            Source::Remote(obj) => obj.report(),
        }
    }

    /// Maps the file pages of `[offset, offset + len)` (absolute) into this process now, reading any that are
    /// not in the page cache, so later reads through the mapping take no page faults. Returns `true` when the
    /// pages were populated, `false` when the kernel offers only read-ahead advice (Linux before 5.14, other
    /// systems) or the source is a memory buffer. A file now shorter than the range gives `TRUNCATED`.
    pub(crate) fn prefault(&self, offset: u64, len: u64, what: &dyn Fn() -> String) -> Result<bool> {
        let Source::File { file, map, populated, engine, .. } = &self.source else { return Ok(false) };
        if !engine.maps() {
            return Ok(false); // owned reads: the mapping is never touched (reads go through pread)
        }
        if len == 0 {
            return Ok(true);
        }
        let now = file.metadata().map_err(|e| io_error(&self.display, "cannot stat", &e))?.len();
        let end = offset.saturating_add(len);
        if end > now {
            return Err(Error::new(
                Status::Truncated,
                format!(
                    "{}: {}: the file is now {now} bytes, shorter than the {end} bytes it had when opened",
                    self.display,
                    what()
                ),
            ));
        }
        // SAFETY: [offset, end) lies within our live read-only mapping (end <= the length it was mapped with:
        // the header check bounds every tensor by the file's length at open); populating changes no contents.
        match unsafe { crate::os::populate_read(map.as_ptr().wrapping_add(offset as usize), (end - offset) as usize) } {
            Ok(crate::os::Populate::Done) => {
                add_range(&mut populated.lock().unwrap_or_else(|p| p.into_inner()), offset, end);
                Ok(true)
            }
            Ok(crate::os::Populate::AdviceOnly) => Ok(false),
            Err(crate::os::PopulateError::Shrunk) => Err(Error::new(
                Status::Truncated,
                format!("{}: {}: the file shrank while its pages were being mapped", self.display, what()),
            )),
            Err(crate::os::PopulateError::Os(e)) => {
                Err(io_error(&self.display, &format!("{}: populating the mapping", what()), &e))
            }
        }
    }

    /// Whether reads of `[offset, offset + len)` (absolute) through the mapping are expected to take no page
    /// faults: a memory buffer, or a file range that [`Part::prefault`] populated (the kernel may still
    /// reclaim such pages under memory pressure; a read then faults them in again, correctly but slower).
    pub(crate) fn is_populated(&self, offset: u64, len: u64) -> bool {
        match &self.source {
            Source::Memory(_) => true,
            Source::Remote(_) => false,
            Source::File { populated, .. } => {
                let end = offset.saturating_add(len);
                populated.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|&(lo, hi)| lo <= offset && end <= hi)
            }
        }
    }

    /// Copies `dst.len()` bytes at absolute `offset`: pread for files, memcpy for memory.
    pub(crate) fn read_at(&self, offset: u64, dst: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        match &self.source {
            Source::File { file, .. } => pread_exact(file, offset, dst, &self.display, what),
            Source::Remote(obj) => obj.read(offset, dst, what),
            Source::Memory(m) => {
                let b = (**m).as_ref();
                let src = usize::try_from(offset).ok().and_then(|o| b.get(o..o.checked_add(dst.len())?)).ok_or_else(
                    || Error::new(Status::Internal, format!("{}: {}: read outside the buffer", self.display, what())),
                )?;
                dst.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// While it lives, the kernel reads only the pages asked for from its file (`POSIX_FADV_RANDOM` on the
/// descriptor): part-on-read reads a few ranges of a file, and read-ahead past the end of each range took
/// half as many bytes again from storage for dimension-0 parts (BENCHMARKS.md, part-on-read). Guards nest;
/// the last one dropped restores the default advice. Advice only: reads are correct either way.
pub(crate) struct ReadaheadOff(std::sync::Arc<Part>);

impl ReadaheadOff {
    pub(crate) fn new(part: &std::sync::Arc<Part>) -> ReadaheadOff {
        part.advise_random(true);
        ReadaheadOff(std::sync::Arc::clone(part))
    }
}

impl Drop for ReadaheadOff {
    fn drop(&mut self) {
        self.0.advise_random(false);
    }
}

impl Part {
    fn advise_random(&self, on: bool) {
        let Source::File { file, no_readahead, .. } = &self.source else { return };
        let mut n = no_readahead.lock().unwrap_or_else(|p| p.into_inner());
        let before = *n;
        *n = if on { before + 1 } else { before.saturating_sub(1) };
        if (before == 0) != (*n == 0) {
            crate::os::advise_random(crate::os::raw_file(file), on);
        }
    }
}

/// Adds `[lo, hi)` to a sorted list of disjoint ranges, merging it with every range it overlaps or touches.
fn add_range(ranges: &mut Vec<(u64, u64)>, mut lo: u64, mut hi: u64) {
    ranges.retain(|&(a, b)| {
        if b < lo || a > hi {
            return true;
        }
        lo = lo.min(a);
        hi = hi.max(b);
        false
    });
    let at = ranges.partition_point(|&(a, _)| a < lo);
    ranges.insert(at, (lo, hi));
}

#[cfg(test)]
mod range_tests {
    use super::add_range;

    #[test]
    fn ranges_merge_when_they_overlap_or_touch() {
        let mut r = Vec::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 30, 40);
        assert_eq!(r, [(10, 20), (30, 40)]);
        add_range(&mut r, 20, 25);
        assert_eq!(r, [(10, 25), (30, 40)]);
        add_range(&mut r, 0, 5);
        assert_eq!(r, [(0, 5), (10, 25), (30, 40)]);
        add_range(&mut r, 4, 31);
        assert_eq!(r, [(0, 40)]);
        add_range(&mut r, 50, 60);
        add_range(&mut r, 45, 46);
        assert_eq!(r, [(0, 40), (45, 46), (50, 60)]);
    }
}
