//! Opens arbitrary bytes as a headerless raw file with a layout taken from the first 8 bytes: dtype code (1),
//! rank (1, at most 4), offset (2, LE), then up to four 1-byte dims (255 = inferred from the size); the rest is
//! the file (`TensorFile::raw_from_bytes`). When it opens, the tensor must read back as the bytes after the
//! offset. Any status is fine; a panic or a crash is a bug.
//! Seeds: tests/corpus/tokens/raw-*.bin (layouts that open and that do not; replayed by `cargo test --test it tokens::`).
#![no_main]

use hostfirst::file::{RawLayout, RAW_INFER};
use hostfirst::{DType, TensorFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let Some(dtype) = DType::from_u32(u32::from(data[0])) else { return };
    let rank = usize::from(data[1] % 5);
    let offset = u64::from(u16::from_le_bytes([data[2], data[3]]));
    let shape: Vec<u64> = data[4..4 + rank].iter().map(|&d| if d == 255 { RAW_INFER } else { u64::from(d) }).collect();
    let file = data[8..].to_vec();
    let layout = RawLayout { dtype, shape, offset, name: "data".into() };
    let Ok(f) = TensorFile::raw_from_bytes(file.clone(), &layout) else { return };
    let v = f.view("data").expect("one tensor");
    assert_eq!(v.to_vec().expect("reads back"), &file[offset as usize..]);
});
