//! Writing safetensors files: a streaming writer that never leaves a half-written file.
//!
//! ```no_run
//! use hostfirst_core::write::{Source, WriteOptions, Writer};
//! use hostfirst_core::DType;
//! let weights = vec![0u8; 4 * 1024];
//! let mut w = Writer::create("model.safetensors", WriteOptions::default())?;
//! w.add("w", DType::F32, &[32, 32], Source::bytes(weights))?;
//! w.set_metadata(vec![("format".into(), "pt".into())])?;
//! w.finish(None, None)?; // header first, data streamed, fsync, rename over the target, fsync the directory
//! # Ok::<(), hostfirst_core::Error>(())
//! ```
//!
//! - **Declarations first**: each tensor is declared with its name, dtype and shape and where its bytes
//!   are ([`Source`]: a view of an open file, a [`Buffer`] on any device, bytes the writer owns, or host memory
//!   the caller keeps alive until [`Writer::finish`]). Nothing is written, copied or allocated before
//!   `finish`: a declaration is checked and remembered (bad input — a duplicate name, a name the format or
//!   C cannot hold, a shape that does not match the source's bytes, overlapping pieces — is refused with a
//!   status, and the writer stays usable).
//! - **The layout** ([`layout`]) is computed from the declarations: byte for byte what the `safetensors`
//!   crate's serializer writes for the same tensors and metadata, split into Hugging Face part files and an
//!   index when a size limit is given.
//! - **`finish`** writes each file into a staged temporary file in the target's directory ([`staged`]): the
//!   header first, then the data, streamed by the transfer engine ([`crate::engine::write`]: positioned
//!   writes, several in flight, io_uring where available; host memory written from where it lies, views
//!   read through the engine, CUDA buffers drained through the pinned staging ring,
//!   [`crate::engine::drain`]), the kernel's writeback started as it goes; then `fsync`, `rename` over the
//!   target, `fsync` of the directory. A failure anywhere (`NO_SPACE`, `PERMISSION_DENIED`, `IO`, a device
//!   error of a source, `TRUNCATED` of a view's file, a cancel) removes the staged files and leaves every
//!   target as it was.
//! - **Ranks** ([`WriteOptions::world`] > 1): every rank of a job declares the same tensors (global shapes) and
//!   adds the pieces it holds ([`Writer::add_piece`]); `finish` is then collective: the first rank stages the
//!   files and writes the headers, every rank writes the bytes of its own pieces into them, the first rank
//!   checks that the pieces of all ranks cover every tensor exactly once and commits (see [`dist`]).

mod data;
mod dist;
pub mod layout;
pub mod staged;

use crate::dtype::DType;
use crate::engine::Tuning;
use crate::error::{Error, Result, Status};
use crate::file::{View, MAX_METADATA_ENTRIES, MAX_NAME_LEN, MAX_RANK, MAX_TENSORS};
use crate::place::Buffer;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where a piece's bytes come from (its packed C-order bytes).
#[derive(Clone)]
pub enum Source {
    /// A view of an open file (any format the reader opens): read through the transfer engine at `finish`.
    /// Its dtype and shape are the declaration's.
    View(View),
    /// A buffer on any device (cpu, cuda_host: written from where it lies; cuda:N: through the pinned
    /// staging ring). Kept alive by the writer; locked while its bytes are written.
    Buffer(Arc<Mutex<Buffer>>),
    /// Bytes the writer owns.
    Bytes(Arc<dyn AsRef<[u8]> + Send + Sync>),
    /// Host memory the caller keeps alive and unchanged until `finish` returns (see [`Source::raw`]).
    Raw(RawHost),
}

/// Caller host memory (see [`Source::raw`]).
#[derive(Clone, Copy)]
pub struct RawHost {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the memory is only read, and `Source::raw`'s contract makes the caller keep it valid and unchanged
// until `finish` returns (or the writer is dropped), from any thread.
unsafe impl Send for RawHost {}
// SAFETY: as above: shared reads of memory nobody writes meanwhile.
unsafe impl Sync for RawHost {}

impl Source {
    /// Owned bytes.
    pub fn bytes(b: impl AsRef<[u8]> + Send + Sync + 'static) -> Source {
        Source::Bytes(Arc::new(b))
    }

    /// Caller memory, written from where it lies (no copy).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (any pointer when `len == 0`), and the memory must stay
    /// valid and unchanged until the writer's `finish` has returned or the writer is dropped.
    pub unsafe fn raw(ptr: *const u8, len: usize) -> Source {
        let ptr = if len == 0 { std::ptr::NonNull::<u8>::dangling().as_ptr() } else { ptr };
        Source::Raw(RawHost { ptr, len })
    }

    /// The bytes it provides.
    pub fn nbytes(&self) -> u64 {
        match self {
            Source::View(v) => v.nbytes(),
            Source::Buffer(b) => b.lock().unwrap_or_else(|p| p.into_inner()).nbytes(),
            Source::Bytes(b) => (**b).as_ref().len() as u64,
            Source::Raw(r) => r.len as u64,
        }
    }

    /// A name for messages.
    fn describe(&self) -> String {
        match self {
            Source::View(v) => format!("a view of '{}' in {}", v.name(), v.file_display()),
            Source::Buffer(b) => {
                let b = b.lock().unwrap_or_else(|p| p.into_inner());
                format!("buffer '{}' on {}", b.name(), b.device())
            }
            Source::Bytes(_) => "host bytes".to_string(),
            Source::Raw(_) => "host memory".to_string(),
        }
    }
}

impl RawHost {
    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `Source::raw`'s contract: valid for `len` bytes and unchanged while the writer uses it.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Part of a declared tensor: the box `start[d] .. start[d] + len[d]` of every dimension, and its bytes.
#[derive(Clone)]
pub struct Piece {
    /// First element of each dimension.
    pub start: Vec<u64>,
    /// Elements of each dimension.
    pub len: Vec<u64>,
    /// The packed C-order bytes of the box.
    pub source: Source,
}

/// A declared tensor.
#[derive(Clone)]
pub struct Decl {
    /// The name.
    pub name: String,
    /// The dtype.
    pub dtype: DType,
    /// The (global) shape.
    pub shape: Vec<u64>,
    /// Its bytes.
    pub nbytes: u64,
    /// The pieces this process writes (a whole tensor: one piece covering it).
    pub pieces: Vec<Piece>,
}

/// The agreement step of a collective `finish` ([`WriteOptions::world`] > 1): called by every rank at the same
/// points with whether this rank succeeded so far; returns whether every rank did (an MPI_Allreduce of a
/// logical and, a barrier that exchanges a flag). An `Err` ends the save on this rank.
pub type Agree<'a> = &'a mut dyn FnMut(bool) -> Result<bool>;

/// How a save runs. `Default`: one process, one file, durable, the engine's defaults.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions {
    /// Transfer tuning: `threads` (reading view sources), `chunk` (bytes per write, default 8 MiB),
    /// `staging` (bytes of bounce buffers for view sources and of the pinned ring for CUDA sources, default
    /// 64 MiB), `queue_depth` (writes in flight, default 64). Zeros: defaults.
    pub tuning: Tuning,
    /// Split into part files of at most this many bytes of tensor data (Hugging Face layout); 0: one file.
    pub max_part_bytes: u64,
    /// `fsync` every file and the directory before `finish` returns (default true). False still writes through
    /// a staged file and a rename (never a half-written target), but the data may sit in the page cache.
    pub durable: bool,
    /// This process's rank (0 .. world).
    pub rank: u32,
    /// Processes writing the save together (0 or 1: this process alone).
    pub world: u32,
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions { tuning: Tuning::default(), max_part_bytes: 0, durable: true, rank: 0, world: 1 }
    }
}

impl WriteOptions {
    /// True when several processes write the save together.
    pub fn collective(&self) -> bool {
        self.world > 1
    }
}

/// Default chunk of a write.
pub const DEFAULT_WRITE_CHUNK: usize = 8 << 20;
/// Default bytes of bounce buffers (view sources) and of the pinned ring (CUDA sources).
pub const DEFAULT_WRITE_STAGING: usize = 64 << 20;

/// Where the files go.
enum Target {
    /// A path: staged files in its directory, renamed over it.
    Path(PathBuf),
    /// A descriptor the caller opened: written in place from its current position (seekable), or in order
    /// (a pipe). Never closed by the writer.
    Fd(File),
    /// An object-store URL (s3://, gs://, az://): each file streamed into a multipart upload, completed only
    /// when the whole save is uploaded ([`crate::remote::upload`]).
    Remote(crate::remote::upload::Dest),
}

/// What a finished save wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The safetensors files (for a descriptor: none).
    pub parts: Vec<PathBuf>,
    /// The index of a split save.
    pub index: Option<PathBuf>,
    /// Bytes of every file of the save (headers, data, index).
    pub file_bytes: u64,
    /// Bytes this process wrote (the headers and index when it is the first rank, and its pieces).
    pub written: u64,
    /// Tensors in the save.
    pub tensors: usize,
}

/// The state of a writer.
enum State {
    Open,
    Finished(std::result::Result<Summary, Error>),
}

/// A streaming safetensors writer (see the module documentation).
pub struct Writer {
    target: Target,
    display: String,
    opts: WriteOptions,
    decls: Vec<Decl>,
    by_name: HashMap<String, usize>,
    metadata: Option<Vec<(String, String)>>,
    state: State,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("target", &self.display).field("tensors", &self.decls.len()).finish()
    }
}

/// Checks a tensor name as the reader would: `INVALID_ARGUMENT` for `__metadata__` or a NUL,
/// `LIMIT_EXCEEDED` past [`MAX_NAME_LEN`] bytes.
fn check_name(name: &str, what: &str) -> Result<()> {
    if name == "__metadata__" {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{what}: a tensor may not be named `__metadata__` (the key of the metadata map)"),
        ));
    }
    if name.contains('\0') {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{what}: tensor name '{}' contains a NUL character", name.escape_debug()),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::new(
            Status::LimitExceeded,
            format!(
                "{what}: tensor name '{}...' is {} bytes; the hostfirst cap (what its reader opens) is {MAX_NAME_LEN}",
                name.chars().take(32).collect::<String>(),
                name.len()
            ),
        ));
    }
    Ok(())
}

/// The bytes of a tensor of `dtype` and `shape`: `VALIDATION_OVERFLOW` when it does not fit 64 bits,
/// `MISALIGNED_SLICE` when it is not a whole number of bytes (sub-byte dtypes), `LIMIT_EXCEEDED` past
/// [`MAX_RANK`] dimensions.
pub fn tensor_bytes(dtype: DType, shape: &[u64], what: &str) -> Result<u64> {
    if shape.len() > MAX_RANK {
        return Err(Error::new(
            Status::LimitExceeded,
            format!("{what}: {} dimensions; the hostfirst cap is {MAX_RANK}", shape.len()),
        ));
    }
    let bits = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .and_then(|e| e.checked_mul(dtype.bits() as u64))
        .ok_or_else(|| {
        Error::new(Status::ValidationOverflow, format!("{what}: shape {shape:?} overflows 64 bits"))
    })?;
    if bits % 8 != 0 {
        return Err(Error::new(
            Status::MisalignedSlice,
            format!("{what}: {shape:?} elements of {dtype} are {bits} bits, not a whole number of bytes"),
        ));
    }
    Ok(bits / 8)
}

impl Writer {
    /// A writer of the safetensors file `path` (or of the set it names, see [`WriteOptions::max_part_bytes`]).
    /// Nothing is created until [`Writer::finish`]. `INVALID_ARGUMENT` for an empty path, a path whose
    /// directory does not exist, or options that do not fit together.
    ///
    /// A URL (`s3://bucket/key.safetensors`, `gs://`, `az://`) saves to object storage: `finish` streams each
    /// file into a multipart upload and completes it only when the whole save is uploaded; a failure aborts
    /// every upload (see [`crate::remote::upload`]). `UNSUPPORTED` for an http(s) URL and for a collective
    /// save (`world` > 1) to a URL; `INVALID_ARGUMENT` for a URL that names no object or upload settings out
    /// of range.
    pub fn create(path: impl AsRef<Path>, opts: WriteOptions) -> Result<Writer> {
        let path = path.as_ref();
        if path.as_os_str().is_empty() {
            return Err(Error::new(Status::InvalidArgument, "the path is empty: give the file to write"));
        }
        if let Some(url) = path.to_str().filter(|p| crate::remote::is_url(p)) {
            return Writer::create_remote(url, opts);
        }
        let display = path.display().to_string();
        let (dir, _) = staged::split(path)?;
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("{display}: '{}' is not a directory", dir.display()),
                ))
            }
            Err(e) => return Err(crate::os::io_error(format!("{display}: the directory '{}'", dir.display()), &e)),
        }
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(Error::new(Status::InvalidArgument, format!("{display} is a directory, not a file")));
        }
        check_options(&opts, &display)?;
        Ok(Writer::new(Target::Path(path.to_path_buf()), display, opts))
    }

    /// A writer into an open file (a descriptor the caller owns and keeps open until `finish` returns; the
    /// writer duplicates nothing and closes nothing). A seekable file is written from its current position
    /// with positioned writes, and left positioned after the save; anything else (a pipe, a socket) is written
    /// in order, each tensor in one piece (given whole, or one piece covering it; several pieces: `UNSUPPORTED`
    /// at `finish`). No staged file: the caller owns what happens to a failed save there.
    /// One file only (`max_part_bytes` 0) and one process.
    pub fn to_file(file: File, opts: WriteOptions) -> Result<Writer> {
        let display = "<descriptor>".to_string();
        check_options(&opts, &display)?;
        if opts.max_part_bytes != 0 || opts.collective() {
            return Err(Error::new(
                Status::InvalidArgument,
                "a writer on a descriptor writes one file from one process: max_part_bytes must be 0 and world \
                 at most 1",
            ));
        }
        Ok(Writer::new(Target::Fd(file), display, opts))
    }

    fn create_remote(url: &str, opts: WriteOptions) -> Result<Writer> {
        let dest = crate::remote::upload::Dest::parse(url)?;
        let display = dest.display().to_string();
        check_options(&opts, &display)?;
        if opts.collective() {
            return Err(Error::new(
                Status::Unsupported,
                format!(
                    "{display}: a collective save ({} ranks) to object storage is not supported: save from one \
                     process, or save to a shared file system",
                    opts.world
                ),
            ));
        }
        crate::remote::upload::config().map_err(|e| e.context(&display))?;
        Ok(Writer::new(Target::Remote(dest), display, opts))
    }

    fn new(target: Target, display: String, opts: WriteOptions) -> Writer {
        Writer { target, display, opts, decls: Vec::new(), by_name: HashMap::new(), metadata: None, state: State::Open }
    }

    /// The options.
    pub fn options(&self) -> &WriteOptions {
        &self.opts
    }

    /// The target as messages name it.
    pub fn display_name(&self) -> &str {
        &self.display
    }

    /// Number of declared tensors.
    pub fn len(&self) -> usize {
        self.decls.len()
    }

    /// True when no tensor is declared.
    pub fn is_empty(&self) -> bool {
        self.decls.is_empty()
    }

    /// The declarations, in order.
    pub fn declarations(&self) -> &[Decl] {
        &self.decls
    }

    fn open(&self, what: &str) -> Result<()> {
        match &self.state {
            State::Open => Ok(()),
            State::Finished(r) => Err(Error::new(
                Status::AlreadyUsed,
                format!(
                    "{}: {what} after finish (which {})",
                    self.display,
                    match r {
                        Ok(_) => "succeeded".to_string(),
                        Err(e) => format!("failed: {e}"),
                    }
                ),
            )),
        }
    }

    /// Declares tensor `name` of `dtype` and (global) `shape` without bytes: its pieces come from
    /// [`Writer::add_piece`] (several pieces, or, with ranks, the pieces this rank holds).
    pub fn declare(&mut self, name: &str, dtype: DType, shape: &[u64]) -> Result<()> {
        self.open("declare")?;
        let what = format!("{}: tensor '{}'", self.display, name.escape_debug());
        check_name(name, &what)?;
        if let Some(&i) = self.by_name.get(name) {
            let d = &self.decls[i];
            if d.dtype == dtype && d.shape == shape {
                return Ok(()); // declared again, identically: nothing changes
            }
            return Err(Error::new(
                Status::DuplicateTensor,
                format!("{what} is already declared ({} {:?}), now as {dtype} {shape:?}", d.dtype, d.shape),
            ));
        }
        if self.decls.len() >= MAX_TENSORS {
            return Err(Error::new(
                Status::LimitExceeded,
                format!("{what}: {MAX_TENSORS} tensors are declared already; the hostfirst cap for one save"),
            ));
        }
        let nbytes = tensor_bytes(dtype, shape, &what)?;
        self.by_name.insert(name.to_string(), self.decls.len());
        self.decls.push(Decl { name: name.to_string(), dtype, shape: shape.to_vec(), nbytes, pieces: Vec::new() });
        Ok(())
    }

    /// Declares a whole tensor and its bytes. `DUPLICATE_TENSOR` when the name is declared already;
    /// `INVALID_ARGUMENT` when the source's bytes are not the shape's. On error nothing is declared.
    pub fn add(&mut self, name: &str, dtype: DType, shape: &[u64], source: Source) -> Result<()> {
        self.open("add")?;
        if self.by_name.contains_key(name) {
            return Err(Error::new(
                Status::DuplicateTensor,
                format!("{}: tensor '{}' is declared twice", self.display, name.escape_debug()),
            ));
        }
        let what = format!("{}: tensor '{}'", self.display, name.escape_debug());
        check_name(name, &what)?;
        let nbytes = tensor_bytes(dtype, shape, &what)?;
        check_source(&source, dtype, shape, nbytes, &what)?;
        self.declare(name, dtype, shape)?;
        let d = self.decls.last_mut().expect("just declared");
        d.pieces.push(Piece { start: vec![0; shape.len()], len: shape.to_vec(), source });
        Ok(())
    }

    /// Adds the piece of declared tensor `name` that starts at element `start` of each dimension and spans
    /// the source's shape (`len`). `NOT_FOUND` for an undeclared name; `OUT_OF_RANGE` for a box outside the
    /// tensor; `INVALID_ARGUMENT` for a box that overlaps a piece added before, a rank that differs, or a
    /// source whose bytes are not the box's.
    pub fn add_piece(&mut self, name: &str, start: &[u64], len: &[u64], source: Source) -> Result<()> {
        self.open("add_piece")?;
        let Some(&i) = self.by_name.get(name) else {
            return Err(Error::new(
                Status::NotFound,
                format!("{}: tensor '{}' is not declared (declare it first)", self.display, name.escape_debug()),
            ));
        };
        let d = &self.decls[i];
        let what = format!("{}: tensor '{}' {} {:?}", self.display, name.escape_debug(), d.dtype, d.shape);
        if start.len() != d.shape.len() || len.len() != d.shape.len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{what}: a piece of rank {} (start {start:?}, len {len:?})", start.len().max(len.len())),
            ));
        }
        for k in 0..start.len() {
            if start[k].checked_add(len[k]).map_or(true, |e| e > d.shape[k]) {
                return Err(Error::new(
                    Status::OutOfRange,
                    format!("{what}: the piece at {start:?} of {len:?} passes the end of dimension {k}"),
                ));
            }
        }
        let nbytes = tensor_bytes(d.dtype, len, &what)?;
        check_source(&source, d.dtype, len, nbytes, &format!("{what}: the piece at {start:?}"))?;
        if nbytes > 0 {
            for p in &d.pieces {
                if overlaps(&p.start, &p.len, start, len) {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!(
                            "{what}: the piece at {start:?} of {len:?} overlaps the piece at {:?} of {:?} added before \
                             (every byte is written once)",
                            p.start, p.len
                        ),
                    ));
                }
            }
        }
        self.decls[i].pieces.push(Piece { start: start.to_vec(), len: len.to_vec(), source });
        Ok(())
    }

    /// Sets the metadata map (`__metadata__`), replacing any set before; written in the order given (an empty
    /// map is written as `{}`, no map at all when this is never called). `INVALID_ARGUMENT` for a key given
    /// twice or text with a NUL; `METADATA_LIMIT_EXCEEDED` past [`MAX_METADATA_ENTRIES`].
    pub fn set_metadata(&mut self, entries: Vec<(String, String)>) -> Result<()> {
        self.open("set_metadata")?;
        if entries.len() > MAX_METADATA_ENTRIES {
            return Err(Error::new(
                Status::MetadataLimitExceeded,
                format!(
                    "{}: {} metadata entries; the hostfirst cap is {MAX_METADATA_ENTRIES}",
                    self.display,
                    entries.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(entries.len());
        for (k, v) in &entries {
            if !seen.insert(k.as_str()) {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("{}: metadata key '{}' is given twice", self.display, k.escape_debug()),
                ));
            }
            if k.contains('\0') || v.contains('\0') {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "{}: metadata key '{}' or its value contains a NUL character",
                        self.display,
                        k.escape_debug()
                    ),
                ));
            }
        }
        self.metadata = Some(entries);
        Ok(())
    }

    /// The layout of the save as declared now (what `finish` would write). Errors as `finish`'s checks.
    pub fn layout(&self) -> Result<layout::Layout> {
        let naming = match &self.target {
            Target::Path(p) => layout::Naming::of(&staged::split(p)?.1),
            Target::Fd(_) => layout::Naming { given: self.display.clone(), stem: None, is_index: false },
            Target::Remote(d) => layout::Naming::of(d.file_name()),
        };
        let specs: Vec<layout::TensorSpec<'_>> = self
            .decls
            .iter()
            .map(|d| layout::TensorSpec { name: &d.name, dtype: d.dtype, shape: &d.shape, nbytes: d.nbytes })
            .collect();
        layout::plan(&specs, self.metadata.as_deref(), &naming, self.opts.max_part_bytes, &self.display)
    }

    /// Writes the save (see the module documentation) and returns what it wrote. `progress(done, total)` gets
    /// this process's bytes as they are written and cancels (`CANCELLED`) by returning true. `agree` is
    /// required when [`WriteOptions::world`] > 1 (see [`Agree`]). The writer is used up either way: a second
    /// call is `ALREADY_USED` (with the first outcome in its message). On error every target is as it was.
    pub fn finish(
        &mut self,
        progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
        agree: Option<Agree<'_>>,
    ) -> Result<Summary> {
        self.open("finish")?;
        let r = self.run(progress, agree);
        self.state = State::Finished(r.clone());
        // The sources are not needed any more: release buffers, views and caller memory now.
        for d in &mut self.decls {
            d.pieces.clear();
        }
        r
    }

    fn run(&mut self, progress: Option<&mut dyn FnMut(u64, u64) -> bool>, agree: Option<Agree<'_>>) -> Result<Summary> {
        if self.opts.collective() {
            let Some(agree) = agree else {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("{}: a save by {} ranks needs the agreement callback", self.display, self.opts.world),
                ));
            };
            return dist::finish(self, progress, agree);
        }
        let layout = self.layout()?;
        self.check_complete()?;
        match &self.target {
            Target::Path(p) => data::finish_path(p, &self.display, &self.decls, &layout, &self.opts, progress),
            Target::Fd(f) => data::finish_fd(f, &self.decls, &layout, &self.opts, progress),
            Target::Remote(d) => data::finish_remote(d, &self.decls, &layout, &self.opts, progress),
        }
    }

    /// Every declared tensor is covered by its pieces (one process: nothing may be missing).
    fn check_complete(&self) -> Result<()> {
        for d in &self.decls {
            let have: u64 = d.pieces.iter().map(|p| piece_bytes(d, p)).sum();
            if have != d.nbytes {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "{}: tensor '{}' {} {:?} is {} bytes but its pieces give {have}: every byte needs a piece",
                        self.display,
                        d.name.escape_debug(),
                        d.dtype,
                        d.shape,
                        d.nbytes
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A point of a save where the crash test kills the process (feature `test-hooks`): with
/// `HOSTFIRST_WRITER_KILL_AT=k` in the environment, the k-th point a process passes (1-based, counted across
/// its saves) ends it as a kill would ([`crate::os::kill_self`]: SIGKILL on Unix; Windows: `TerminateProcess`,
/// exit code 137). Without the feature it compiles to nothing.
#[inline]
pub(crate) fn kill_point() {
    #[cfg(feature = "test-hooks")]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        static AT: crate::forksafe::InitOnce<u64> = crate::forksafe::InitOnce::new();
        static PASSED: AtomicU64 = AtomicU64::new(0);
        let at = *AT.get_or_init(|| {
            std::env::var("HOSTFIRST_WRITER_KILL_AT").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
        });
        if at != 0 && PASSED.fetch_add(1, Ordering::Relaxed) + 1 == at {
            crate::os::kill_self();
        }
    }
}

fn piece_bytes(d: &Decl, p: &Piece) -> u64 {
    tensor_bytes(d.dtype, &p.len, "").unwrap_or(0)
}

fn check_options(opts: &WriteOptions, display: &str) -> Result<()> {
    if opts.collective() && opts.rank >= opts.world {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{display}: rank {} of a world of {} ranks", opts.rank, opts.world),
        ));
    }
    if !opts.collective() && opts.rank != 0 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{display}: rank {} with a world of {} (ranks need world > 1)", opts.rank, opts.world),
        ));
    }
    Ok(())
}

/// The source gives exactly the bytes of `dtype` and `shape` (and, for views and buffers, is that dtype).
fn check_source(source: &Source, dtype: DType, shape: &[u64], nbytes: u64, what: &str) -> Result<()> {
    let (sdtype, sshape): (Option<DType>, Option<Vec<u64>>) = match source {
        Source::View(v) => (Some(v.dtype()), Some(v.shape().to_vec())),
        Source::Buffer(b) => {
            let b = b.lock().unwrap_or_else(|p| p.into_inner());
            (Some(b.dtype()), Some(b.shape().to_vec()))
        }
        _ => (None, None),
    };
    if let Some(sd) = sdtype {
        if sd != dtype {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{what}: declared {dtype}, but {} holds {sd}", source.describe()),
            ));
        }
    }
    if let Some(ss) = sshape {
        if ss != shape {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{what}: declared with shape {shape:?}, but {} has shape {ss:?}", source.describe()),
            ));
        }
    }
    let have = source.nbytes();
    if have != nbytes {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{what}: shape {shape:?} of {dtype} is {nbytes} bytes, but {} holds {have} bytes",
                source.describe()
            ),
        ));
    }
    Ok(())
}

/// Whether two boxes share an element.
fn overlaps(a_start: &[u64], a_len: &[u64], b_start: &[u64], b_len: &[u64]) -> bool {
    (0..a_start.len()).all(|k| {
        a_start[k] < b_start[k] + b_len[k] && b_start[k] < a_start[k] + a_len[k] && a_len[k] > 0 && b_len[k] > 0
    })
}

#[cfg(test)]
mod tests;
