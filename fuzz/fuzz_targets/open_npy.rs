//! Opens arbitrary bytes as a NumPy `.npy` image (the core's `TensorFile::from_bytes_format`, what
//! `hostfirst_file_open` does for a file with the `.npy` magic), then reads its tensor back and slices it.
//! Any status is fine; a panic, a crash or a view outside the input is a bug.
//! Seeds: tests/corpus/tokens/npy-*.bin (replayed by `cargo test --test it tokens::`).
#![no_main]

use hostfirst::file::Format;
use hostfirst::TensorFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = TensorFile::from_bytes_format(data.to_vec(), Format::Npy) else { return };
    let v = f.view("data").expect("an .npy file has one tensor, 'data'");
    let bytes = v.to_vec().expect("a validated tensor reads back");
    assert_eq!(bytes.len() as u64, v.nbytes());
    assert_eq!(&data[v.file_offset() as usize..], &bytes[..], "the data is the rest of the file");
    if let Some(&rows) = v.shape().first() {
        let _ = v.slice_rows(rows / 2, rows);
    }
});
