//! The writer through the C API: random declarations, pieces and metadata, then finish; what is written reads
//! back equal, what is refused is refused with a status and leaves nothing (see writer_case.rs, which the test
//! suite also runs over the seed corpus tests/corpus/writer/*.bin, tests/it/writer_corpus.rs). Seeds and every
//! crash found go to tests/corpus/writer/:
//!   cargo +nightly fuzz run writer ../tests/corpus/writer          (from fuzz/, with ASan)
//! or on stable, coverage-guided without a sanitizer, as fuzz/Cargo.toml says for open_memory, with `writer`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod writer_case;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("hostfirst-fuzz-writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    writer_case::run(data, &dir);
});
