//! Opens arbitrary bytes as an llm.c token shard (`TensorFile::from_bytes_format(.., Format::Llmc)`), then
//! reads its tokens back. Any status is fine; a panic, a crash or a read outside the input is a bug.
//! Seeds: tests/corpus/tokens/llmc-*.bin (replayed by `cargo test --test it tokens::`).
#![no_main]

use hostfirst::file::Format;
use hostfirst::TensorFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = TensorFile::from_bytes_format(data.to_vec(), Format::Llmc) else { return };
    let v = f.view("tokens").expect("a shard has one tensor, 'tokens'");
    let bytes = v.to_vec().expect("a validated shard reads back");
    assert_eq!(&data[1024..], &bytes[..], "the tokens are everything after the 1024-byte header");
});
