//! The safetensors header from a file: the input is written to a file and opened through the file path
//! (`hostfirst_file_open`: one open, fstat, pread of the header, a mapping; index detection by content) and
//! through the core's `TensorFile::open_safetensors` (no detection), and compared with the same bytes opened
//! from memory. Checks:
//! - the statuses agree, except where the header documents a difference: a file shorter than its header
//!   declares is `TRUNCATED` where memory gives `INVALID_HEADER_LENGTH` or `INCOMPLETE_BUFFER`; content that
//!   is JSON and cannot start with a length prefix is opened as an index (a set whose parts would be next
//!   to the file: nothing outside its folder may be opened, see [`super::opens`]);
//! - a file that opens has the tensors (names, dtypes, shapes, bytes) the memory image has, its bytes are
//!   where `file_offset` says in the input, and the pread path gives them too;
//! - no handle and no descriptor is left behind.

use super::opens;
use super::{check_failure, cstring, describe, handles, open_fds};
use hostfirst::ffi::*;
use hostfirst::file::Format;
use hostfirst::Status;
use std::path::PathBuf;
use std::sync::OnceLock;

fn folder() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let base = super::scratch("open_file");
        let inner = base.join("in");
        std::fs::create_dir_all(&inner).unwrap();
        opens::self_test(&base);
        inner
    })
}

fn all(f: *const hostfirst_file) -> Vec<super::Described> {
    let mut n = 0usize;
    assert_eq!(hostfirst_file_tensor_count(f, &mut n), Status::Ok);
    (0..n).map(|i| describe(f, i)).collect()
}

pub fn run(data: &[u8]) -> Status {
    let dir = folder();
    let path = dir.join("f.safetensors");
    std::fs::write(&path, data).unwrap();
    let c = cstring(path.to_str().unwrap().as_bytes());
    let (hs, fds) = (handles(), open_fds());

    let mut m: *mut hostfirst_file = std::ptr::null_mut();
    let st_mem = hostfirst_file_open_memory(data.as_ptr().cast(), data.len(), &mut m);
    check_failure(st_mem, "hostfirst_file_open_memory");

    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    let (st, opened) = opens::record(|| hostfirst_file_open(c.as_ptr(), &mut f));
    opens::assert_inside(&opened, dir, "hostfirst_file_open");
    check_failure(st, "hostfirst_file_open");

    let (plain, opened) = opens::record(|| hostfirst::file::TensorFile::open_safetensors(&path));
    opens::assert_inside(&opened, dir, "TensorFile::open_safetensors");
    let st_plain = plain.as_ref().map_or_else(|e| e.status(), |_| Status::Ok);
    assert_ne!(st_plain, Status::Panic);
    drop(plain);

    // An image with a token format's magic is opened from memory as that format (the header of
    // hostfirst_file_open_memory), as hostfirst_file_open does by content; open_safetensors does not detect.
    let sniffed = hostfirst::file::formats::sniff(data);
    let truncated_ok = |file: Status| {
        file == Status::Truncated && matches!(st_mem, Status::InvalidHeaderLength | Status::IncompleteBuffer)
    };
    match sniffed {
        None => assert!(
            st_plain == st_mem || truncated_ok(st_plain),
            "file {} vs memory {} for the same bytes",
            st_plain.name(),
            st_mem.name()
        ),
        Some(Format::Npy | Format::Llmc) => assert!(
            st == st_mem || truncated_ok(st),
            "{:?} image: hostfirst_file_open {} vs memory {}",
            sniffed,
            st.name(),
            st_mem.name()
        ),
        // A Megatron index needs its .bin, which memory cannot name.
        Some(_) => assert_eq!(st_mem, Status::OtherFormat, "a Megatron index from memory"),
    }
    let starts_json = data.iter().find(|b| !b" \t\r\n".contains(b)) == Some(&b'{');
    let prefix_fits = data.len() >= 8
        && u64::from_le_bytes(data[..8].try_into().unwrap()).checked_add(8).is_some_and(|n| n <= data.len() as u64);
    let is_index = starts_json && !prefix_fits;
    if !is_index && sniffed.is_none() {
        assert_eq!(st, st_plain, "hostfirst_file_open vs TensorFile::open_safetensors");
    }

    if st == Status::Ok && !is_index && !matches!(sniffed, Some(Format::Megatron)) {
        assert_eq!(st_mem, Status::Ok);
        let (a, b) = (all(f), all(m));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.name, x.dtype, &x.shape, x.nbytes), (&y.name, y.dtype, &y.shape, y.nbytes));
            assert!(x.bytes == y.bytes, "tensor '{}': file and memory bytes differ", x.name);
            let off = x.file_offset as usize;
            assert!(data[off..off + x.bytes.len()] == x.bytes[..], "tensor '{}': not at its file_offset", x.name);
        }
    }
    if !f.is_null() {
        assert_eq!(st, Status::Ok, "output written on failure");
        assert_eq!(hostfirst_file_free(f), Status::Ok);
    }
    if !m.is_null() {
        assert_eq!(st_mem, Status::Ok, "output written on failure");
        assert_eq!(hostfirst_file_free(m), Status::Ok);
    }
    assert_eq!(handles(), hs);
    assert_eq!(open_fds(), fds, "a descriptor left open ({})", st.name());
    st
}
