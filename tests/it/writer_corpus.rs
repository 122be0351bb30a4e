//! Replays tests/corpus/writer/*.bin (the seeds of the `writer` fuzz target, and every crash it ever found) on
//! stable Rust, through the same case the fuzz target runs (fuzz/fuzz_targets/writer_case.rs): a program of
//! writer calls whose accepted declarations must read back equal and whose refusals must be statuses that
//! leave nothing written. A new fuzz crash is added by copying it into that directory.

#[path = "../../fuzz/fuzz_targets/writer_case.rs"]
mod writer_case;

#[test]
fn writer_corpus_replays() {
    let corpus = crate::common::root().join("tests/corpus/writer");
    let mut files: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|e| panic!("{}: {e}", corpus.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "the seed corpus is missing ({} files)", files.len());
    let dir = crate::common::scratch(&format!("writer-corpus-{}", std::process::id()));
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let r = std::panic::catch_unwind(|| writer_case::run(&data, &dir));
        assert!(r.is_ok(), "{} failed (see the panic above)", f.display());
    }
}

/// The case is not vacuous: a program that declares, adds pieces and sets metadata writes a file the reader
/// opens, and a bad one is refused (the replay above would pass on anything if `run` did nothing).
#[test]
fn the_case_writes_and_refuses() {
    let dir = crate::common::scratch(&format!("writer-case-{}", std::process::id()));
    // split 0; op 0: name "ab", F32 (12), rank 1, [3], exact bytes, seed; op 4: one metadata entry; end.
    let good = [0u8, 0, 2, b'a', b'b', 12, 1, 3, 0, 9, 4, 1, 1, b'k', 1, b'v', 5];
    writer_case::run(&good, &dir);
    // The same with a byte count one off: refused, nothing written (asserted inside).
    let bad = [0u8, 0, 2, b'a', b'b', 12, 1, 3, 7, 9, 5];
    writer_case::run(&bad, &dir);
}
