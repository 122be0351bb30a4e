//! libFuzzer entry for the `index_set` target; the checks are in fuzz/harness/index_set.rs, shared with the corpus
//! replay of `cargo test` (tests/fuzz_corpus/main.rs).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::index_set::run(data);
});
