//! libFuzzer entry for the `device_spec` target; the checks are in fuzz/harness/device_spec.rs, shared with the corpus
//! replay of `cargo test` (tests/fuzz_corpus/main.rs).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::device_spec::run(data);
});
