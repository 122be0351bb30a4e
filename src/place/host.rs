//! Owned host memory for buffers: page-aligned, zero-initialised, lazily faulted.
//!
//! Large allocations (≥ 1 MiB) come straight from anonymous `mmap` on Unix: page-aligned, zero pages the kernel
//! supplies on first touch (no memset pass). Transparent huge pages are not requested: on the benchmark VM
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
    #[cfg(unix)]
    Mapped,
}

/// A zero-initialised, aligned, owned host allocation.
pub struct HostAlloc {
    ptr: NonNull<u8>,
    len: usize,
    kind: Kind,
}

// SAFETY: HostAlloc owns its memory exclusively, like Vec<u8>; &HostAlloc only gives &[u8].
unsafe impl Send for HostAlloc {}
// SAFETY: shared access is read-only through &[u8].
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    /// Allocates `len` zeroed bytes. Failure is `OutOfMemory` naming `what` and the size.
    pub fn zeroed(len: usize, what: &str) -> Result<HostAlloc> {
        if len == 0 {
            return Ok(HostAlloc { ptr: NonNull::dangling(), len: 0, kind: Kind::Empty });
        }
        #[cfg(unix)]
        if len >= MMAP_THRESHOLD {
            // SAFETY: anonymous private mapping; arguments are valid; result checked against MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(Error::new(
                    Status::OutOfMemory,
                    format!(
                        "{what}: mapping {} of host memory failed: {}",
                        crate::error::human_bytes(len as u64),
                        std::io::Error::last_os_error()
                    ),
                ));
            }
            return Ok(HostAlloc { ptr: NonNull::new(p as *mut u8).expect("mmap non-null"), len, kind: Kind::Mapped });
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
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        match self.kind {
            Kind::Empty => {}
            // SAFETY: allocated with this layout by alloc_zeroed.
            Kind::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            #[cfg(unix)]
            // SAFETY: mapped by us with this length.
            Kind::Mapped => unsafe {
                libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
            },
        }
    }
}

/// Faults in `bytes` for writing in one system call (`MADV_POPULATE_WRITE`, Linux 5.14+) instead of one
/// page fault per 4 KiB page taken inside the copy that follows. Best effort: on older kernels, other
/// systems, or memory that is not page-aligned at both ends, nothing happens and the copy faults as before.
pub fn populate_write(bytes: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let page = 4096usize;
        let start = bytes.as_mut_ptr() as usize;
        let (lo, hi) = (start.next_multiple_of(page), (start + bytes.len()) / page * page);
        if hi > lo {
            // SAFETY: [lo, hi) lies inside `bytes`, which we borrow mutably; populating writable private
            // memory changes no contents (zero pages stay zero, existing pages are left as they are).
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, MADV_POPULATE_WRITE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
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
