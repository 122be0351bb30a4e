//! libFuzzer entry for the `shard_plan` target; the checks are in fuzz/harness/shard_plan.rs, shared with the corpus
//! replay of `cargo test` (tests/fuzz_corpus/main.rs).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::shard_plan::run(data);
});
