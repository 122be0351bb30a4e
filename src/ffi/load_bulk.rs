//! A load's tensors in bulk: `hostfirst_load_entries` (name, kind, device, dtype, shape, size and address of
//! every tensor in one call) and `hostfirst_load_names` (every name in one packed buffer), so that a binding
//! describes a 20,000-tensor load in one or two calls instead of two per tensor.

use super::args::c_dtype;
use super::args::{out_bytes, out_ptr, out_struct, struct_size_ok, write_struct_at};
use super::device::hostfirst_device;
use super::handle;
use super::load::{hostfirst_load, hostfirst_loaded};
use crate::error::{Error, Status};
use crate::place::Loaded;
use std::ffi::c_char;

/// One tensor of a load, as `hostfirst_load_entries` writes it. Every pointer in it is owned by the load and
/// stays valid until the load is freed (`hostfirst_load_free`); buffer handles taken from the load do not
/// extend it. The struct only ever grows by appending fields (see `entry_size` of `hostfirst_load_entries`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_load_entry {
    /// Set by the library to the bytes of known fields it wrote in this entry (`sizeof(hostfirst_load_entry)`
    /// when `entry_size` is at least that).
    pub struct_size: usize,
    /// The tensor name, NUL-terminated (interior NULs of a name appear as the two characters `\0`).
    pub name: *const c_char,
    /// `HOSTFIRST_LOADED_BUFFER` (a buffer on `device`) or `HOSTFIRST_LOADED_VIEW` (a zero-copy view of the
    /// file's read-only mapping; `device` is then cpu).
    pub kind: hostfirst_loaded,
    /// One of `HOSTFIRST_DTYPE_*`.
    pub dtype: c_dtype,
    /// The device holding the bytes.
    pub device: hostfirst_device,
    /// Number of dimensions.
    pub rank: u32,
    /// `rank` dimensions (NULL when rank is 0).
    pub shape: *const u64,
    /// Size in bytes.
    pub nbytes: u64,
    /// The data: for a buffer the host pointer (cpu, cuda_host; writable) or the CUDA device address
    /// (`CUdeviceptr`; 0 for an empty CUDA buffer), as an integer; for a view the address of its bytes in
    /// the file's read-only mapping (on Linux, reading it after the file was truncated raises SIGBUS, as for
    /// any mapping: `hostfirst_view_copy` reads with `pread` instead; Windows refuses to shrink a mapped file).
    pub address: u64,
}

out_struct!(hostfirst_load_entry, address);

fn entry(l: &Loaded, i: usize) -> hostfirst_load_entry {
    let d = l.describe(i).expect("index below the load's length");
    let name = l.name_ptr(i).expect("index below the load's length");
    hostfirst_load_entry {
        struct_size: 0,
        name,
        kind: if d.is_buffer { hostfirst_loaded::Buffer } else { hostfirst_loaded::View },
        dtype: d.dtype as u32,
        device: d.device.into(),
        rank: d.shape.len() as u32,
        // The shape lives in the file's header, which the load keeps until it is freed.
        shape: if d.shape.is_empty() { std::ptr::null() } else { d.shape.as_ptr() },
        nbytes: d.nbytes,
        address: d.address,
    }
}

/// The largest `entry_size` `hostfirst_load_entries` accepts: no version of `hostfirst_load_entry` will be
/// larger, so a bigger stride is a caller's mistake (a byte count passed as an entry size), refused before
/// anything is written.
pub const HOSTFIRST_MAX_ENTRY_SIZE: u32 = 1024;

/// Describes every tensor of `load`, in file order, into the caller's array `out` of `capacity` entries of
/// `entry_size` bytes each (pass `sizeof(hostfirst_load_entry)`). Each entry follows the rule of every
/// extensible struct (the header's CONVENTIONS): an older, smaller entry from an earlier header is accepted as
/// long as it holds the whole 1.0 layout, the library writes only the whole fields that fit and zeroes the
/// bytes of a newer, larger entry past the fields it knows, and sets each entry's `struct_size` to the bytes
/// of known fields written.
///
/// Always writes the number of tensors to `*out_count`. `(out NULL, capacity 0)` is a count query and
/// succeeds; a `capacity` smaller than the count gives `BUFFER_TOO_SMALL` and writes no entry. Entry `i`
/// is the tensor `hostfirst_load_get` finds by `out[i].name`, described without making a handle: its `name`
/// and `shape` pointers are owned by the load and valid until the load is freed, and `address` is the
/// memory a buffer handle from `hostfirst_load_get` would describe (`hostfirst_buffer_describe`), kept alive
/// by the load. To keep a tensor past the load, take its handle with `hostfirst_load_get`.
///
/// Errors: `NULL_ARGUMENT` (load, out_count; out with capacity > 0), `INVALID_HANDLE`, `INVALID_ARGUMENT`
/// (`entry_size` smaller than the oldest supported entry or larger than `HOSTFIRST_MAX_ENTRY_SIZE`;
/// `capacity * entry_size` bytes from `out` overflowing or running past the end of the address space),
/// `BUFFER_TOO_SMALL` (count in `*out_count`).
/// On error no entry is written. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_entries(
    load: *const hostfirst_load,
    out: *mut hostfirst_load_entry,
    capacity: usize,
    entry_size: usize,
    out_count: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_load_entries", {
        let l = handle::get::<hostfirst_load>(load, "load")?;
        let count = out_ptr(out_count, "out_count")?;
        if entry_size <= HOSTFIRST_MAX_ENTRY_SIZE as usize {
            struct_size_ok::<hostfirst_load_entry>(entry_size, "entry_size")?;
        }
        if entry_size > HOSTFIRST_MAX_ENTRY_SIZE as usize {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "entry_size is {entry_size}; pass sizeof(hostfirst_load_entry) ({} in this version; no version \
                     is larger than HOSTFIRST_MAX_ENTRY_SIZE = {HOSTFIRST_MAX_ENTRY_SIZE})",
                    std::mem::size_of::<hostfirst_load_entry>()
                ),
            ));
        }
        let n = l.len();
        *count = n;
        if out.is_null() && capacity == 0 {
            return Ok(());
        }
        if out.is_null() {
            return Err(Error::new(Status::NullArgument, format!("array 'out' is NULL with capacity {capacity}")));
        }
        // The array must be one that can exist: at most isize::MAX bytes, not running past the address space.
        let fits = capacity
            .checked_mul(entry_size)
            .filter(|&bytes| bytes <= isize::MAX as usize)
            .and_then(|bytes| (out as usize).checked_add(bytes));
        if fits.is_none() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "array 'out' at {out:p} with capacity {capacity} entries of {entry_size} bytes does not fit in \
                     the address space"
                ),
            ));
        }
        if capacity < n {
            return Err(Error::new(
                Status::BufferTooSmall,
                format!("the load has {n} tensors; the array holds {capacity} entries"),
            ));
        }
        for i in 0..n {
            // SAFETY: the caller's array holds `capacity >= n` entries of `entry_size` bytes (checked above to
            // fit in the address space).
            unsafe { write_struct_at(out, i, entry_size, entry(&l, i)) };
        }
        Ok(())
    })
}

/// Writes every tensor name of `load`, in file order, into `buf` as one packed run of NUL-terminated
/// strings (`"a\0b\0c\0"`: the names of `hostfirst_load_entries`, in the same order). Always writes the
/// bytes needed, NULs included, to `*out_len`; `(buf NULL, capacity 0)` is a length query and succeeds; a
/// smaller `capacity` gives `BUFFER_TOO_SMALL` and writes nothing. Interior NULs of a name appear as the two
/// characters `\0`, so the run splits at every NUL into exactly one name per tensor. Errors:
/// `NULL_ARGUMENT` (load, out_len; buf with capacity > 0), `INVALID_HANDLE`, `BUFFER_TOO_SMALL`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_names(
    load: *const hostfirst_load,
    buf: *mut c_char,
    capacity: usize,
    out_len: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_load_names", {
        let l = handle::get::<hostfirst_load>(load, "load")?;
        let len = out_ptr(out_len, "out_len")?;
        let names: Vec<&[u8]> = (0..l.len()).map(|i| name_bytes(&l, i)).collect();
        let need: usize = names.iter().map(|n| n.len() + 1).sum();
        *len = need;
        if buf.is_null() && capacity == 0 {
            return Ok(());
        }
        let dst = out_bytes(buf as *mut u8, capacity, "buf")?;
        if capacity < need {
            return Err(Error::new(
                Status::BufferTooSmall,
                format!(
                    "the {} names of the load need {need} bytes with their NULs; the buffer has {capacity}",
                    names.len()
                ),
            ));
        }
        let mut at = 0;
        for n in names {
            dst[at..at + n.len()].copy_from_slice(n);
            dst[at + n.len()] = 0;
            at += n.len() + 1;
        }
        Ok(())
    })
}

/// The C name of tensor `i` (the bytes of `hostfirst_load_entry.name`, without the NUL).
fn name_bytes(l: &Loaded, i: usize) -> &[u8] {
    let p = l.name_ptr(i).expect("index below the load's length");
    // SAFETY: a NUL-terminated string owned by the load's file, which `l` keeps alive.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes()
}

#[cfg(test)]
mod tests {
    use super::super::args::Extensible;
    use super::*;

    #[test]
    fn entry_v1_is_the_whole_struct() {
        // 0.2 introduces the entry: its oldest accepted size is all of it (later fields get appended).
        assert_eq!(<hostfirst_load_entry as Extensible>::MIN_SIZE, std::mem::size_of::<hostfirst_load_entry>());
        assert_eq!(std::mem::size_of::<hostfirst_load_entry>(), 64);
    }
}
