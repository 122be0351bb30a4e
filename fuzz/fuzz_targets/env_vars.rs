//! libFuzzer entry for the `env_vars` target; the checks are in fuzz/harness/env_vars.rs, shared with the corpus
//! replay of `cargo test` (tests/fuzz_corpus/main.rs).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::env_vars::run(data);
});
