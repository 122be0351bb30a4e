//! Owned host memory for buffers: page-aligned, zero-initialised, lazily faulted; or a private
//! (copy-on-write) mapping of a file's pages ([`HostAlloc::map_file_private`]).
//!
//! Large allocations (≥ 1 MiB) come straight from an anonymous mapping (memmap2's `map_anon`: `mmap` on Unix, a
//! pagefile-backed section on Windows): page-aligned, zero pages the kernel supplies on first touch (no memset
//! pass). Transparent huge pages are not requested: on the benchmark VM
//! (BENCHMARKS.md) `MADV_HUGEPAGE` made first-touch writes 2.6× slower. Small ones use the global allocator with 64-byte alignment.

use crate::error::{Error, Result, Status};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Alignment of small host allocations (a cache line; enough for every dtype and for SIMD).
pub const SMALL_ALIGN: usize = 64;
/// Size from which allocations are mapped directly.
pub const MMAP_THRESHOLD: usize = 1 << 20;

enum Kind {
    Empty,
    Heap(Layout),
    /// An anonymous mapping (held: dropping it unmaps).
    Mapped(#[allow(dead_code)] memmap2::MmapMut),
    /// A part of a shared allocation ([`HostAlloc::sub`]), which it keeps alive (held, never read).
    Part(#[allow(dead_code)] std::sync::Arc<HostAlloc>),
    /// A copy-on-write file mapping (`MAP_PRIVATE`; `FILE_MAP_COPY` on Windows) of the pages holding the data,
    /// which starts inside its first page (held: dropping it unmaps).
    FilePrivate(#[allow(dead_code)] memmap2::MmapMut),
}

/// A zero-initialised (or file-initialised, copy-on-write), owned host allocation.
pub struct HostAlloc {
    ptr: NonNull<u8>,
    len: usize,
    kind: Kind,
}

// SAFETY: HostAlloc owns its memory exclusively, like Vec<u8> (a private file mapping is this process's own
// copy-on-write memory); &HostAlloc only gives &[u8].
unsafe impl Send for HostAlloc {}
// SAFETY: shared access is read-only through &[u8].
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    /// Allocates `len` zeroed bytes. Failure is `OutOfMemory` naming `what` and the size.
    pub fn zeroed(len: usize, what: &str) -> Result<HostAlloc> {
        if len == 0 {
            return Ok(HostAlloc { ptr: NonNull::dangling(), len: 0, kind: Kind::Empty });
        }
        if len >= MMAP_THRESHOLD {
            let mut map = memmap2::MmapMut::map_anon(len).map_err(|e| {
                Error::new(
                    Status::OutOfMemory,
                    format!("{what}: mapping {} of host memory failed: {e}", crate::error::human_bytes(len as u64)),
                )
            })?;
            let ptr = NonNull::new(map.as_mut_ptr()).expect("a mapping is never at address 0");
            return Ok(HostAlloc { ptr, len, kind: Kind::Mapped(map) });
        }
        let layout = Layout::from_size_align(len, SMALL_ALIGN)
            .map_err(|_| Error::new(Status::OutOfMemory, format!("{what}: {len} bytes is too large to allocate")))?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| {
            Error::new(
                Status::OutOfMemory,
                format!("{what}: allocating {} of host memory failed", crate::error::human_bytes(len as u64)),
            )
        })?;
        Ok(HostAlloc { ptr, len, kind: Kind::Heap(layout) })
    }

    /// Bytes `offset..offset + len` of `arena` as an allocation of their own, keeping `arena` alive: loads
    /// sub-allocate every cpu tensor out of one allocation, freed when the last part goes. `OUT_OF_RANGE`
    /// when the range is not within the arena. The parts' bytes must not overlap for writes: `as_mut_slice`
    /// of a part gives its own range only, and callers hand out disjoint ranges.
    pub fn sub(arena: &std::sync::Arc<HostAlloc>, offset: usize, len: usize) -> Result<HostAlloc> {
        if offset.checked_add(len).map_or(true, |e| e > arena.len) {
            return Err(Error::new(
                Status::OutOfRange,
                format!("host sub-allocation: {len} bytes at offset {offset} outside {} bytes", arena.len),
            ));
        }
        if len == 0 {
            return Ok(HostAlloc { ptr: NonNull::dangling(), len: 0, kind: Kind::Empty });
        }
        // SAFETY: offset + len ≤ arena.len, so the pointer stays inside the allocation.
        let ptr = unsafe { NonNull::new_unchecked(arena.ptr.as_ptr().add(offset)) };
        Ok(HostAlloc { ptr, len, kind: Kind::Part(arena.clone()) })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed or written) bytes, or dangling with len 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Address of the first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// True for a private mapping of a file ([`HostAlloc::map_file_private`]).
    pub fn is_file_backed(&self) -> bool {
        matches!(self.kind, Kind::FilePrivate(_))
    }

    /// Maps `len` bytes of `file` starting at byte `offset` as private, writable memory (memmap2's copy mapping:
    /// `MAP_PRIVATE` with `PROT_READ | PROT_WRITE` on Unix, a `PAGE_WRITECOPY` section viewed `FILE_MAP_COPY` on
    /// Windows): reads see the file's bytes, a write copies the page it touches into anonymous memory of this
    /// process, and nothing is ever written back to the file. The mapping covers the pages holding the range
    /// (from the allocation granularity, 64 KiB, on Windows), so the data may start inside the first page
    /// (alignment as the file gives it). While it lives, Windows refuses to shrink the file.
    ///
    /// `populate`: fill the page tables for reading now ([`crate::os::populate_read`]: `MADV_POPULATE_READ` on
    /// Linux 5.14+, read-ahead advice on older kernels, `PrefetchVirtualMemory` and a read per page on Windows),
    /// reading from storage what is not in the page cache, so later reads take no page faults and a file that
    /// shrank is found now (`TRUNCATED`) instead of by a SIGBUS later. Populating maps the page cache's pages; it
    /// copies nothing, and the process's anonymous memory does not grow.
    ///
    /// Errors: `TRUNCATED` when the file is now shorter than `offset + len`; `IO` when the mapping fails.
    pub fn map_file_private(
        file: &std::fs::File,
        offset: u64,
        len: usize,
        populate: bool,
        what: &dyn Fn() -> String,
    ) -> Result<HostAlloc> {
        let end = offset.checked_add(len as u64).ok_or_else(|| {
            Error::new(Status::ValidationOverflow, format!("{}: offset {offset} + {len} bytes overflows", what()))
        })?;
        let now = file.metadata().map_err(|e| Error::new(Status::Io, format!("{}: cannot stat: {e}", what())))?.len();
        if end > now {
            return Err(Error::new(
                Status::Truncated,
                format!("{}: the file is now {now} bytes, shorter than the {end} bytes the tensor needs", what()),
            ));
        }
        if len == 0 {
            return Ok(HostAlloc { ptr: NonNull::dangling(), len: 0, kind: Kind::Empty });
        }
        // SAFETY: a new copy-on-write mapping of a regular file we hold open (writable for this process only:
        // writes never reach the file, so a read-only handle is enough).
        let mut map = unsafe { memmap2::MmapOptions::new().offset(offset).len(len).map_copy(file) }
            .map_err(|e| Error::new(Status::Io, format!("{}: mapping the file privately failed: {e}", what())))?;
        let ptr = NonNull::new(map.as_mut_ptr()).expect("a mapping is never at address 0");
        let alloc = HostAlloc { ptr, len, kind: Kind::FilePrivate(map) };
        if populate {
            // SAFETY: [ptr, ptr + len) is the mapping made above, owned by `alloc`.
            unsafe { crate::os::populate_read(ptr.as_ptr(), len) }.map_err(|e| match e {
                crate::os::PopulateError::Shrunk => Error::new(
                    Status::Truncated,
                    format!("{}: the file shrank while its pages were being mapped", what()),
                ),
                crate::os::PopulateError::Os(e) => {
                    Error::new(Status::Io, format!("{}: populating the private mapping: {e}", what()))
                }
            })?;
        }
        Ok(alloc)
    }
}

/// Bytes of a private mapping of `len` bytes at file offset `offset` that can become private (anonymous)
/// memory: every page the range touches, since a write copies whole pages.
pub fn private_span(offset: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let page = page_size() as u64;
    let first = offset / page;
    let last = (offset + len).div_ceil(page);
    (last - first) * page
}

fn page_size() -> usize {
    crate::os::page_size()
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        match self.kind {
            Kind::Empty | Kind::Part(_) => {} // a part: the shared allocation goes with its last reference
            // SAFETY: allocated with this layout by alloc_zeroed.
            Kind::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            Kind::Mapped(_) | Kind::FilePrivate(_) => {} // the mapping unmaps itself
        }
    }
}

/// Faults in `bytes` for writing in one system call (`MADV_POPULATE_WRITE`, Linux 5.14+) instead of one page
/// fault per 4 KiB page taken inside the copy that follows. Best effort: on older kernels, other systems, or
/// memory that is not page-aligned at both ends, nothing happens and the copy faults as before
/// ([`crate::os::populate_write`]).
pub fn populate_write(bytes: &mut [u8]) {
    crate::os::populate_write(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_alignment() {
        for len in [0usize, 1, 63, 4096, MMAP_THRESHOLD - 1, MMAP_THRESHOLD, 3 << 20] {
            let mut a = HostAlloc::zeroed(len, "t").unwrap();
            assert_eq!(a.len(), len);
            assert!(a.as_slice().iter().all(|b| *b == 0));
            populate_write(a.as_mut_slice());
            assert!(a.as_slice().iter().all(|b| *b == 0));
            if len > 0 {
                assert_eq!(a.as_ptr() as usize % SMALL_ALIGN, 0);
                a.as_mut_slice()[len - 1] = 7;
                assert_eq!(a.as_slice()[len - 1], 7);
            }
        }
    }
}
