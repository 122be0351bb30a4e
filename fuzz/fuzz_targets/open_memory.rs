//! Opens arbitrary bytes through the C entry point `hostfirst_file_open_memory`, then walks every tensor:
//! view by index and by name, describe, copy into a buffer, compare with the mapped bytes, slice rows.
//! Any status is fine; a panic (even one the boundary would catch), a crash or a leak is a bug.
#![no_main]

use hostfirst::ffi::*;
use hostfirst::Status;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut before = 0usize;
    hostfirst_handle_count(&mut before);
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    let st = hostfirst_file_open_memory(data.as_ptr().cast(), data.len(), &mut f);
    assert_ne!(st, Status::Panic);
    if st != Status::Ok {
        assert!(f.is_null());
        assert!(hostfirst::Status::from_u32(st as u32).is_some());
        return;
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
            let rows = unsafe { *info.shape };
            let mut s: *mut hostfirst_view = std::ptr::null_mut();
            let st = hostfirst_view_slice_rows(v, rows / 2, rows, &mut s);
            assert_ne!(st, Status::Panic);
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
    let mut after = 0usize;
    hostfirst_handle_count(&mut after);
    assert_eq!(before, after);
});
