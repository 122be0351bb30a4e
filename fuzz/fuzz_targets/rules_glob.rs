//! libFuzzer entry for the `rules_glob` target; the checks are in fuzz/harness/rules_glob.rs, shared with the corpus
//! replay of `cargo test` (tests/fuzz_corpus/main.rs).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::rules_glob::run(data);
});
