//! Replays tests/corpus/safetensors/*.bin (the reliability catalogue plus every fuzz crash ever found) on
//! stable Rust: each file is opened from memory through the C API, every tensor is walked and copied, and the
//! status must equal the one in its name (`<stem>.<STATUS>.bin`), with no panic.
//!
//! The catalogue cases are generated from tests/it/file_support.rs; refresh them with
//!     HOSTFIRST_UPDATE_CORPUS=1 cargo test --test it file_corpus::
//! A new fuzz crash is added by copying it to `crash-<hash>.<EXPECTED_STATUS>.bin`.

use crate::common::alone;
use crate::file_support::*;
use hostfirst::Status;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/safetensors")
}

fn file_name(c: &Case) -> String {
    format!("{}.{}.bin", c.name, c.memory.name())
}

#[test]
fn catalogue_cases_are_in_the_corpus() {
    let dir = corpus_dir();
    if std::env::var_os("HOSTFIRST_UPDATE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for c in catalogue() {
            std::fs::write(dir.join(file_name(&c)), &c.bytes).unwrap();
        }
    }
    for c in catalogue() {
        let p = dir.join(file_name(&c));
        let on_disk = std::fs::read(&p).unwrap_or_else(|e| {
            panic!("{}: {e}; regenerate with HOSTFIRST_UPDATE_CORPUS=1 cargo test --test it file_corpus::", p.display())
        });
        assert!(on_disk == c.bytes, "{} differs from the catalogue case", p.display());
    }
}

#[test]
fn replay_corpus() {
    alone(concat!(module_path!(), "::replay_corpus"), || {
        let mut n = 0;
        let mut entries: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "bin"))
            .collect();
        entries.sort();
        let hs = handles();
        for p in entries {
            let stem = p.file_stem().unwrap().to_str().unwrap();
            let expected = stem.rsplit('.').next().unwrap();
            let status = hostfirst::error::ALL_STATUSES
                .iter()
                .copied()
                .find(|s| s.name() == expected)
                .unwrap_or_else(|| panic!("{}: '{expected}' is not a status name", p.display()));
            let bytes = std::fs::read(&p).unwrap();
            let panics = panics_on_this_thread();
            let got = open_memory_and_walk(&bytes);
            assert_eq!(got, status, "{}: got {} ({})", p.display(), got.name(), last_error());
            assert_ne!(got, Status::Panic);
            assert_eq!(panics_on_this_thread(), panics, "{}: panicked", p.display());
            n += 1;
        }
        assert_eq!(handles(), hs);
        assert!(n >= catalogue().len(), "only {n} corpus files");
    });
}
