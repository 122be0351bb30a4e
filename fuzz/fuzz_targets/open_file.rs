//! libFuzzer entry for the `open_file` target; the checks are in fuzz/harness/open_file.rs, shared with the corpus
//! replay of `cargo test` (tests/fuzz_corpus/main.rs).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::open_file::run(data);
});
