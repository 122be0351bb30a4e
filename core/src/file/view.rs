//! Tensor views: cheap, thread-safe handles on one tensor, or on a narrowed part of one (any ranges of any
//! dimensions, strided and zero-copy), that keep its file alive.

use super::layout::{read_packed, ReadPolicy, Runs};
use super::names::CName;
use super::part::Part;
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use std::path::Path;
use std::sync::Arc;

/// A read-only view of one tensor, or of a part of one narrowed along any dimensions ([`View::narrow`];
/// [`View::slice_rows`] is the dimension-0 case).
///
/// A view narrowed on an inner dimension is *strided*: its elements are not one contiguous block of the
/// file ([`View::is_contiguous`] is false, [`View::strides`] says where they are). Everything
/// that copies a view ([`View::read_at`], puts, loads) works on its packed C-order bytes and reads only
/// the runs it needs; [`View::mapped`] and DLPack export give the strided memory as it is.
///
/// Cloning is a few reference-count increments; a view keeps its file's mapping and descriptor alive, so
/// it stays valid after the `TensorFile` it came from is dropped. `Send + Sync`: any number of threads may
/// read one view at once.
#[derive(Clone)]
pub struct View {
    pub(crate) part: Arc<Part>,
    pub(crate) name: CName,
    pub(crate) dtype: DType,
    pub(crate) shape: Arc<[u64]>,
    /// Offset in the data section of the first element.
    pub(crate) start: u64,
    /// Packed size in bytes (the product of the shape and the element size).
    pub(crate) nbytes: u64,
    /// Element strides when the view is not C-contiguous (narrowed on an inner dimension); `None` when it
    /// is. Never set on an empty view.
    pub(crate) strides: Option<Arc<[u64]>>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("file", &self.part.display)
            .field("name", &self.name.as_str())
            .field("dtype", &self.dtype)
            .field("shape", &&self.shape[..])
            .field("file_offset", &self.file_offset())
            .field("nbytes", &self.nbytes)
            .field("strides", &self.strides.as_deref())
            .finish()
    }
}

impl View {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape (empty for a scalar). For a narrowed view, each narrowed dimension is its length.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Size of the data in bytes, packed (what a copy-out or a put produces).
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// True when the view's bytes are one contiguous C-order block of the file: every whole tensor, every
    /// dimension-0 slice, every empty view, and narrows whose outer dimensions are all of size 1.
    pub fn is_contiguous(&self) -> bool {
        self.strides.is_none()
    }

    /// Element strides, one per dimension (C-order strides of the shape for a contiguous view). Strides of a
    /// narrowed view are those of the tensor it came from.
    pub fn strides(&self) -> Vec<u64> {
        match &self.strides {
            Some(s) => s.to_vec(),
            None => c_strides(&self.shape),
        }
    }

    /// The runs of contiguous bytes this view consists of (one run for a contiguous view). `None` for an
    /// empty view.
    pub fn runs(&self) -> Option<Runs> {
        if self.nbytes == 0 {
            return None;
        }
        match &self.strides {
            None => Some(Runs { start: self.start, run: self.nbytes, outer: Vec::new() }),
            Some(s) => Some(
                Runs::new(&self.shape, s, self.dtype.bits() as u64, self.start * 8, &|| self.describe())
                    .expect("validated when the view was narrowed"),
            ),
        }
    }

    /// Bytes of the file between the view's first and last byte (`nbytes` for a contiguous view).
    pub fn span_bytes(&self) -> u64 {
        match self.runs() {
            None => 0,
            Some(r) => {
                let (lo, hi) = r.span(0);
                hi - lo
            }
        }
    }

    fn describe(&self) -> String {
        format!("{}: tensor '{}'", self.part.display, self.name)
    }

    /// Absolute offset of the first byte in its file (or buffer).
    pub fn file_offset(&self) -> u64 {
        self.part.header.data_start() + self.start
    }

    /// Offset of the first byte within the file's data section (the header's `data_offsets[0]` for a whole
    /// tensor).
    pub fn data_offset(&self) -> u64 {
        self.start
    }

    /// The file this view reads from; `None` for a buffer opened from memory.
    pub fn path(&self) -> Option<&Path> {
        self.part.path.as_deref()
    }

    /// The file's name for messages (`"<memory>"` for buffers).
    pub fn file_display(&self) -> &str {
        &self.part.display
    }

    /// The bytes, zero-copy, straight from the read-only mapping (or the memory buffer).
    ///
    /// For a strided view this is the span from its first to its last byte, with the bytes of the rows it
    /// does not include in between: address its elements with [`View::strides`].
    ///
    /// No page is read until it is touched. **Hazard:** if the file is truncated by anyone while the mapping
    /// is in use, touching a page past the new end raises SIGBUS in this process; use [`View::read_at`]
    /// (pread) where that matters, and for a data loader gather from a cpu copy
    /// (`place::Gather::run_from_buffer`). The data is not necessarily aligned for its dtype (see
    /// [`View::alignment`]).
    pub fn mapped(&self) -> &[u8] {
        // A remote object has no mapping: an empty slice (its data pointer is NULL in the C API).
        let off = self.file_offset() as usize;
        self.part.bytes().get(off..off + self.span_bytes() as usize).unwrap_or(&[])
    }

    /// Whether this view's bytes may be handed out as the mapping ([`View::mapped`]): false for a file its read
    /// engine reads with owned reads (a network or user-space file system, or `HOSTFIRST_MAP=never`: see
    /// [`crate::engine::per_file`]). Everything that would hand out the mapping copies instead.
    pub fn maps(&self) -> bool {
        self.part.maps()
    }

    /// The read engine's report for this view's file: its file system, mapped or owned reads and why, the
    /// process's reader, and whether direct I/O works for it.
    pub fn read_engine(&self) -> String {
        self.part.read_engine_report()
    }

    /// Alignment of the mapped data in bytes: the largest power of two dividing its address, capped at 4096.
    pub fn alignment(&self) -> u64 {
        alignment_of(self.mapped().as_ptr() as usize)
    }

    /// Maps every page of this view into the process now (`MADV_POPULATE_READ`), reading from storage what
    /// is not in the page cache, so that reads through [`View::mapped`] (the gather primitive's) take
    /// no page faults afterwards. For a data loader this is a one-time cost that makes each later batch
    /// several times faster (BENCHMARKS.md, section 3, has both).
    ///
    /// The pages stay in the page cache, which the kernel may reclaim again under memory pressure, so call it
    /// for tensors that fit in available memory (a strided view populates its whole span): a tensor larger than available host memory less the fit
    /// check's margin gives `OUT_OF_MEMORY` with the numbers, and nothing is read. Returns `true` when the
    /// pages were mapped, `false` when the system offers only read-ahead advice (Linux before 5.14, other
    /// systems) or the view is over a memory buffer (nothing to do). A file that shrank since it was opened
    /// gives `TRUNCATED`, never SIGBUS.
    pub fn prefault(&self) -> Result<bool> {
        if self.part.path.is_some() {
            let (free, total) = crate::device::fit::usable(crate::Device::CPU)?;
            crate::device::fit::check_against(
                &format!("prefault of tensor '{}'", self.name),
                self.span_bytes(),
                crate::Device::CPU,
                free,
                total,
            )?;
        }
        self.part.prefault(self.file_offset(), self.span_bytes(), &|| format!("tensor '{}'", self.name))
    }

    /// Whether reads of this view through [`View::mapped`] take no page faults: the view lies inside a
    /// range that [`View::prefault`] populated (on this view or another view of the same file), or it is
    /// over a memory buffer. The gather primitive uses it to choose between copying from the mapping (when
    /// true) and positioned reads.
    pub fn is_prefaulted(&self) -> bool {
        self.part.is_populated(self.file_offset(), self.span_bytes())
    }

    /// Copies `dst.len()` bytes starting `offset` bytes into this view's packed C-order bytes.
    ///
    /// A strided view reads only its runs, merging neighbouring runs into one read under the default
    /// [`ReadPolicy`] (see [`View::read_at_with`]). Files are read with positioned reads (`pread`) on the file descriptor, never through the mapping, so a
    /// file that shrank since it was opened gives `TRUNCATED` instead of SIGBUS. Safe to call from many
    /// threads at once. A range outside the view gives `OUT_OF_RANGE`.
    pub fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.read_at_with(offset, dst, &ReadPolicy::default()).map(|_| ())
    }

    /// [`View::read_at`] with an explicit policy for merging the runs of a strided view; returns the
    /// bytes read from the file (from the buffer for a memory source), which exceeds `dst.len()` by the gaps
    /// merged reads took.
    pub fn read_at_with(&self, offset: u64, dst: &mut [u8], policy: &ReadPolicy) -> Result<u64> {
        let end = offset.checked_add(dst.len() as u64);
        if end.map_or(true, |e| e > self.nbytes) {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "{}: tensor '{}': bytes [{offset}, {offset} + {}) are outside its {} bytes",
                    self.part.display,
                    self.name,
                    dst.len(),
                    self.nbytes
                ),
            ));
        }
        if dst.is_empty() {
            return Ok(0);
        }
        let what = || format!("tensor '{}'", self.name);
        if self.strides.is_none() {
            let abs = self.file_offset() + offset;
            self.part.read_at(abs, dst, &what)?;
            return Ok(dst.len() as u64);
        }
        let runs = self.runs().expect("a non-empty view");
        read_packed(&self.part, &runs, offset, dst, policy, &what)
    }

    /// Copies the whole view into a new vector (pread for files).
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v =
            vec![0u8; usize::try_from(self.nbytes).map_err(|_| Error::new(Status::OutOfMemory, "tensor too large"))?];
        self.read_at(0, &mut v)?;
        Ok(v)
    }

    /// Rows `start..stop` along dimension 0, zero-copy: `narrow(0, start, stop - start)`.
    ///
    /// Errors: `UNSUPPORTED` for a scalar; `OUT_OF_RANGE` when `start > stop` or `stop > shape[0]`;
    /// `MISALIGNED_SLICE` when a row boundary of a sub-byte dtype does not fall on a byte.
    pub fn slice_rows(&self, start: u64, stop: u64) -> Result<View> {
        if self.shape.is_empty() {
            return Err(Error::new(
                Status::Unsupported,
                format!("{}: tensor '{}' is a scalar and has no rows to slice", self.part.display, self.name),
            ));
        }
        if start > stop {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "{}: tensor '{}': rows {start}..{stop} are not within 0..{}",
                    self.part.display, self.name, self.shape[0]
                ),
            ));
        }
        self.narrow(0, start, stop - start)
    }

    /// Elements `[start, start + len)` along dimension `dim`, zero-copy; the other dimensions are kept.
    ///
    /// Narrowing composes: narrowing a narrowed view narrows the original tensor further (offsets are
    /// relative to the view). Narrowing dimension 0 of a contiguous view gives a contiguous view; narrowing
    /// an inner dimension gives a strided one (unless every dimension before it has size 1).
    ///
    /// Errors: `OUT_OF_RANGE` when `dim` is not below the rank (a scalar has no dimension) or
    /// `start + len > shape[dim]`; `MISALIGNED_SLICE` when a run of a sub-byte dtype (F4, F6) would start or
    /// end inside a byte.
    pub fn narrow(&self, dim: usize, start: u64, len: u64) -> Result<View> {
        let rank = self.shape.len();
        if dim >= rank {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "{}: tensor '{}' has {rank} dimension(s); there is no dimension {dim}",
                    self.part.display, self.name
                ),
            ));
        }
        let size = self.shape[dim];
        if start.checked_add(len).map_or(true, |e| e > size) {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "{}: tensor '{}': [{start}, {start} + {len}) is not within dimension {dim} of size {size}",
                    self.part.display, self.name
                ),
            ));
        }
        let mut shape: Vec<u64> = self.shape.to_vec();
        shape[dim] = len;
        let bits = self.dtype.bits() as u64;
        let elems = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let nbits = elems.and_then(|e| e.checked_mul(bits));
        let Some(nbits) = nbits.filter(|_| len > 0 && self.nbytes > 0) else {
            // Empty: no stride arithmetic (the other dimensions of an empty tensor may not fit 64 bits).
            return Ok(View { shape: shape.into(), nbytes: 0, strides: None, ..self.clone() });
        };
        // The view is not empty, so neither is its source: its strides fit (they divide its size).
        let strides = self.strides();
        let start_bits = self.start * 8 + start * strides[dim] * bits;
        let what = || {
            format!(
                "{}: tensor '{}' narrowed on dimension {dim} to [{start}, {})",
                self.part.display,
                self.name,
                start + len
            )
        };
        if nbits % 8 != 0 {
            return Err(Error::new(
                Status::MisalignedSlice,
                format!("{}: {nbits} bits is not a whole number of bytes", what()),
            ));
        }
        let runs = Runs::new(&shape, &strides, bits, start_bits, &what)?;
        let contiguous = runs.outer.is_empty();
        Ok(View {
            part: Arc::clone(&self.part),
            name: self.name.clone(),
            dtype: self.dtype,
            shape: shape.into(),
            start: runs.start,
            nbytes: nbits / 8,
            strides: if contiguous { None } else { Some(strides.into()) },
        })
    }

    /// Turns off read-ahead on this view's file while the guard lives (see [`super::part::ReadaheadOff`]).
    pub(crate) fn readahead_off(&self) -> super::part::ReadaheadOff {
        super::part::ReadaheadOff::new(&self.part)
    }

    /// The element strides of a strided view (NULL when contiguous), valid while this view lives.
    pub fn strides_ptr(&self) -> *const u64 {
        self.strides.as_ref().map_or(std::ptr::null(), |s| s.as_ptr())
    }

    /// The open file this view reads from and the absolute offset of its first byte in it; `None` for a view
    /// over a memory buffer. (For private mappings of the view's pages: copy-on-write puts and exports.)
    pub(crate) fn file_and_offset(&self) -> Option<(&std::fs::File, u64)> {
        match &self.part.source {
            super::part::Source::File { file, .. } => Some((file, self.file_offset())),
            super::part::Source::Memory(_) | super::part::Source::Remote(_) => None,
        }
    }

    /// The name as a NUL-terminated C string, valid while this view lives.
    pub fn name_ptr(&self) -> *const std::ffi::c_char {
        self.name.as_ptr()
    }
}

/// C-order element strides of `shape` (saturating: only used where the product fits).
pub(crate) fn c_strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// The largest power of two dividing `addr`, capped at 4096 (an address of 0 gives 4096).
pub fn alignment_of(addr: usize) -> u64 {
    if addr == 0 {
        return 4096;
    }
    (1u64 << addr.trailing_zeros().min(12)).min(4096)
}
