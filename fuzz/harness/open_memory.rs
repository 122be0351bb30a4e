//! The safetensors header from memory: the input is opened with `hostfirst_file_open_memory`, then every
//! tensor is walked: view by index and by name, describe, copy, compare with the input bytes, slice rows,
//! metadata. Any status is fine; a panic (even one the boundary would catch), a crash or a leaked handle is a
//! bug. Its corpus is tests/corpus/safetensors (also replayed by tests/it/file_corpus.rs).

use super::{check_failure, handles};
use hostfirst::ffi::*;
use hostfirst::Status;

pub fn run(data: &[u8]) -> Status {
    let before = handles();
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    let st = hostfirst_file_open_memory(data.as_ptr().cast(), data.len(), &mut f);
    check_failure(st, "hostfirst_file_open_memory");
    if st != Status::Ok {
        assert!(f.is_null());
        assert_eq!(handles(), before);
        return st;
    }
    let mut n = 0usize;
    assert_eq!(hostfirst_file_tensor_count(f, &mut n), Status::Ok);
    for i in 0..n {
        let mut name = std::ptr::null();
        assert_eq!(hostfirst_file_tensor_name(f, i, &mut name), Status::Ok);
        let mut idx = usize::MAX;
        assert_eq!(hostfirst_file_find(f, name, &mut idx), Status::Ok);
        assert_eq!(idx, i);
        let mut v: *mut hostfirst_view = std::ptr::null_mut();
        assert_eq!(hostfirst_file_view(f, name, &mut v), Status::Ok);
        let mut info: hostfirst_view_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<hostfirst_view_info>();
        assert_eq!(hostfirst_view_describe(v, &mut info), Status::Ok);
        // The view's bytes lie inside the input (no out-of-bounds pointer can come back).
        let start = info.data as usize;
        assert!(start >= data.as_ptr() as usize);
        assert!(start + info.nbytes as usize <= data.as_ptr() as usize + data.len());
        let mut buf = vec![0u8; info.nbytes as usize];
        let mut need = 0u64;
        assert_eq!(hostfirst_view_copy(v, buf.as_mut_ptr().cast(), buf.len(), &mut need), Status::Ok);
        assert_eq!(&data[start - data.as_ptr() as usize..][..buf.len()], &buf[..]);
        if info.rank > 0 {
            // SAFETY: `rank` dimensions, valid while the view lives.
            let rows = unsafe { *info.shape };
            let mut s: *mut hostfirst_view = std::ptr::null_mut();
            let st = hostfirst_view_slice_rows(v, rows / 2, rows, &mut s);
            check_failure(st, "hostfirst_view_slice_rows");
            if st == Status::Ok {
                hostfirst_view_free(s);
            }
        }
        assert_eq!(hostfirst_view_free(v), Status::Ok);
    }
    let mut mc = 0usize;
    hostfirst_file_metadata_count(f, &mut mc);
    for i in 0..mc {
        let (mut k, mut val) = (std::ptr::null(), std::ptr::null());
        assert_eq!(hostfirst_file_metadata_get(f, i, &mut k, &mut val), Status::Ok);
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    assert_eq!(handles(), before);
    Status::Ok
}
