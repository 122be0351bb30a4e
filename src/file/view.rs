//! Tensor views: cheap, thread-safe handles on one tensor (or a row range of it) that keep its file alive.

use super::names::CName;
use super::shard::Shard;
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use std::path::Path;
use std::sync::Arc;

/// A read-only view of one tensor, or of a row range (`slice_rows`) of one.
///
/// Cloning is a few reference-count increments; a view keeps its file's mapping and descriptor alive, so
/// it stays valid after the `TensorFile` it came from is dropped. `Send + Sync`: any number of threads may
/// read one view at once.
#[derive(Clone)]
pub struct TensorView {
    pub(crate) shard: Arc<Shard>,
    pub(crate) name: CName,
    pub(crate) dtype: DType,
    pub(crate) shape: Arc<[u64]>,
    /// Offset in the data section.
    pub(crate) start: u64,
    pub(crate) nbytes: u64,
}

impl std::fmt::Debug for TensorView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorView")
            .field("file", &self.shard.display)
            .field("name", &self.name.as_str())
            .field("dtype", &self.dtype)
            .field("shape", &&self.shape[..])
            .field("file_offset", &self.file_offset())
            .field("nbytes", &self.nbytes)
            .finish()
    }
}

impl TensorView {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape (empty for a scalar). For a row slice, dimension 0 is the number of rows in the slice.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Size of the data in bytes.
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// Absolute offset of the first byte in its file (or buffer).
    pub fn file_offset(&self) -> u64 {
        self.shard.header.data_start() + self.start
    }

    /// Offset of the first byte within the file's data section (the header's `data_offsets[0]` for a whole
    /// tensor).
    pub fn data_offset(&self) -> u64 {
        self.start
    }

    /// The file this view reads from; `None` for a buffer opened from memory.
    pub fn path(&self) -> Option<&Path> {
        self.shard.path.as_deref()
    }

    /// The file's name for messages (`"<memory>"` for buffers).
    pub fn file_display(&self) -> &str {
        &self.shard.display
    }

    /// The bytes, zero-copy, straight from the read-only mapping (or the memory buffer).
    ///
    /// No page is read until it is touched. **Hazard:** if the file is truncated by anyone while the mapping
    /// is in use, touching a page past the new end raises SIGBUS in this process; use [`TensorView::read_at`]
    /// (pread) where that matters, and for a data loader gather from a cpu copy
    /// (`place::Gather::run_from_buffer`). The data is not necessarily aligned for its dtype (see
    /// [`TensorView::alignment`]).
    pub fn mapped(&self) -> &[u8] {
        let off = self.file_offset() as usize;
        &self.shard.bytes()[off..off + self.nbytes as usize]
    }

    /// Alignment of the mapped data in bytes: the largest power of two dividing its address, capped at 4096.
    pub fn alignment(&self) -> u64 {
        alignment_of(self.mapped().as_ptr() as usize)
    }

    /// Maps every page of this view into the process now (`MADV_POPULATE_READ`), reading from storage what
    /// is not in the page cache, so that reads through [`TensorView::mapped`] (the gather primitive's) take
    /// no page faults afterwards. For a data loader this is a one-time cost that makes each later batch
    /// several times faster (BENCHMARKS.md, section 3, has both).
    ///
    /// The pages stay in the page cache, which the kernel may reclaim again under memory pressure, so call it
    /// for tensors that fit in available memory: a tensor larger than available host memory less the fit
    /// check's margin gives `OUT_OF_MEMORY` with the numbers, and nothing is read. Returns `true` when the
    /// pages were mapped, `false` when the system offers only read-ahead advice (Linux before 5.14, other
    /// systems) or the view is over a memory buffer (nothing to do). A file that shrank since it was opened
    /// gives `TRUNCATED`, never SIGBUS.
    pub fn prefault(&self) -> Result<bool> {
        if self.shard.path.is_some() {
            let (free, total) = crate::device::fit::usable(crate::Device::CPU)?;
            crate::device::fit::check_against(
                &format!("prefault of tensor '{}'", self.name),
                self.nbytes,
                crate::Device::CPU,
                free,
                total,
            )?;
        }
        self.shard.prefault(self.file_offset(), self.nbytes, &|| format!("tensor '{}'", self.name))
    }

    /// Whether reads of this view through [`TensorView::mapped`] take no page faults: the view lies inside a
    /// range that [`TensorView::prefault`] populated (on this view or another view of the same file), or it is
    /// over a memory buffer. The gather primitive uses it to choose between copying from the mapping (when
    /// true) and positioned reads.
    pub fn is_prefaulted(&self) -> bool {
        self.shard.is_populated(self.file_offset(), self.nbytes)
    }

    /// Copies `dst.len()` bytes starting `offset` bytes into this view.
    ///
    /// Files are read with positioned reads (`pread`) on the file descriptor, never through the mapping, so a
    /// file that shrank since it was opened gives `TRUNCATED` instead of SIGBUS. Safe to call from many
    /// threads at once. A range outside the view gives `OUT_OF_RANGE`.
    pub fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(dst.len() as u64);
        if end.map_or(true, |e| e > self.nbytes) {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "{}: tensor '{}': bytes [{offset}, {offset} + {}) are outside its {} bytes",
                    self.shard.display,
                    self.name,
                    dst.len(),
                    self.nbytes
                ),
            ));
        }
        if dst.is_empty() {
            return Ok(());
        }
        let abs = self.file_offset() + offset;
        self.shard.read_at(abs, dst, &|| format!("tensor '{}'", self.name))
    }

    /// Copies the whole view into a new vector (pread for files).
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v =
            vec![0u8; usize::try_from(self.nbytes).map_err(|_| Error::new(Status::OutOfMemory, "tensor too large"))?];
        self.read_at(0, &mut v)?;
        Ok(v)
    }

    /// Rows `start..stop` along dimension 0, zero-copy.
    ///
    /// Errors: `UNSUPPORTED` for a scalar; `OUT_OF_RANGE` when `start > stop` or `stop > shape[0]`;
    /// `MISALIGNED_SLICE` when a row boundary of a sub-byte dtype does not fall on a byte.
    pub fn slice_rows(&self, start: u64, stop: u64) -> Result<TensorView> {
        let Some(&rows) = self.shape.first() else {
            return Err(Error::new(
                Status::Unsupported,
                format!("{}: tensor '{}' is a scalar and has no rows to slice", self.shard.display, self.name),
            ));
        };
        if start > stop || stop > rows {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "{}: tensor '{}': rows {start}..{stop} are not within 0..{rows}",
                    self.shard.display, self.name
                ),
            ));
        }
        let mut shape: Vec<u64> = self.shape.to_vec();
        shape[0] = stop - start;
        let (offset, nbytes) = if start == stop {
            // No row arithmetic: the inner dimensions of an empty tensor may not even fit 64 bits.
            (0, 0)
        } else {
            let overflow = || Error::new(Status::ValidationOverflow, "row size overflows");
            let row_bits = self.shape[1..]
                .iter()
                .try_fold(self.dtype.bits() as u64, |a, &d| a.checked_mul(d))
                .ok_or_else(overflow)?;
            let b0 = start.checked_mul(row_bits).ok_or_else(overflow)?;
            let b1 = stop.checked_mul(row_bits).ok_or_else(overflow)?;
            if b0 % 8 != 0 || b1 % 8 != 0 {
                return Err(Error::new(
                    Status::MisalignedSlice,
                    format!(
                        "{}: tensor '{}': rows {start}..{stop} of {} do not start and end on byte boundaries",
                        self.shard.display, self.name, self.dtype
                    ),
                ));
            }
            (b0 / 8, (b1 - b0) / 8)
        };
        Ok(TensorView {
            shard: Arc::clone(&self.shard),
            name: self.name.clone(),
            dtype: self.dtype,
            shape: shape.into(),
            start: self.start + offset,
            nbytes,
        })
    }

    /// The open file this view reads from and the absolute offset of its first byte in it; `None` for a view
    /// over a memory buffer. (For private mappings of the view's pages: copy-on-write puts and exports.)
    pub(crate) fn file_and_offset(&self) -> Option<(&std::fs::File, u64)> {
        match &self.shard.source {
            super::shard::Source::File { file, .. } => Some((file, self.file_offset())),
            super::shard::Source::Memory(_) => None,
        }
    }

    /// The name as a NUL-terminated C string, valid while this view lives.
    pub(crate) fn name_ptr(&self) -> *const std::ffi::c_char {
        self.name.as_ptr()
    }
}

/// The largest power of two dividing `addr`, capped at 4096 (an address of 0 gives 4096).
pub fn alignment_of(addr: usize) -> u64 {
    if addr == 0 {
        return 4096;
    }
    (1u64 << addr.trailing_zeros().min(12)).min(4096)
}
