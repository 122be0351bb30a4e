//! Replays the committed corpus of every fuzz target (tests/corpus/<target>/) through the target's own
//! checks (fuzz/harness/, included below: the same code libFuzzer runs under AddressSanitizer), on stable
//! Rust, without libFuzzer. A file is named `<name>.<STATUS>.bin`: the target must return that status for
//! it (every crash fuzzing found is kept this way, under the status the fixed library gives).
//!
//! A binary of its own rather than a module of tests/it: the `index_set` and `open_file` checks observe
//! every `open` of the process (fuzz/harness/opens.rs defines the C library's open functions in this
//! program), which must not see the files other tests open at the same time. The tests here take one lock.
//!
//! Add a corpus file: copy it to `tests/corpus/<target>/<what>.bin` and run
//! `HOSTFIRST_UPDATE_CORPUS=1 cargo test --test fuzz_corpus`, which renames it `<what>.<STATUS>.bin` after the
//! status the target returns (check that it is the right one). See fuzz/README.md.

#[path = "../../fuzz/harness/mod.rs"]
mod harness;

use hostfirst::Status;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn replay(name: &str) {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t = harness::TARGETS.iter().find(|t| t.name == name).expect("a target of that name");
    let dir = corpus_root().join(t.corpus);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus", dir.display());
    let mut failures = Vec::new();
    for p in &files {
        let stem = p.file_stem().unwrap().to_str().unwrap();
        let expected = stem.rsplit('.').next().unwrap();
        let bytes = std::fs::read(p).unwrap();
        let Some(want) = hostfirst::error::ALL_STATUSES.iter().copied().find(|s| s.name() == expected) else {
            // A new file (a seed, a crash): named after the status the target gives it, when asked to.
            assert!(
                std::env::var_os("HOSTFIRST_UPDATE_CORPUS").is_some(),
                "{}: '{expected}' is not a status name (HOSTFIRST_UPDATE_CORPUS=1 names it after its status)",
                p.display()
            );
            let got = (t.run)(&bytes);
            std::fs::rename(p, p.with_file_name(format!("{stem}.{}.bin", got.name()))).unwrap();
            continue;
        };
        let got = std::panic::catch_unwind(|| (t.run)(&bytes));
        match got {
            Ok(s) if s == want => {}
            Ok(s) => failures.push(format!("{}: {} (expected {})", p.display(), s.name(), want.name())),
            Err(_) => failures.push(format!("{}: a check failed (see the panic above)", p.display())),
        }
    }
    assert!(failures.is_empty(), "{} of {} corpus files:\n{}", failures.len(), files.len(), failures.join("\n"));
}

#[test]
fn open_memory() {
    replay("open_memory");
}

#[test]
fn open_file() {
    replay("open_file");
}

#[test]
fn index_set() {
    replay("index_set");
}

#[test]
fn device_spec() {
    replay("device_spec");
}

#[test]
fn rules_glob() {
    replay("rules_glob");
}

#[test]
fn shard_plan() {
    replay("shard_plan");
}

#[test]
fn env_vars() {
    replay("env_vars");
}

/// The targets whose corpus another test replays (with the library's own types, in the integration tests):
/// (target, the test file, the test, the corpus folder under tests/corpus).
const REPLAYED_ELSEWHERE: &[(&str, &str, &str, &str)] = &[
    ("open_npy", "tests/it/tokens.rs", "fn corpus_replays()", "tokens"),
    ("open_llmc", "tests/it/tokens.rs", "fn corpus_replays()", "tokens"),
    ("open_megatron", "tests/it/tokens.rs", "fn corpus_replays()", "tokens"),
    ("open_raw", "tests/it/tokens.rs", "fn corpus_replays()", "tokens"),
    ("writer", "tests/it/writer_corpus.rs", "fn writer_corpus_replays()", "writer"),
];

/// Every target has a test that replays its corpus (above, or one of REPLAYED_ELSEWHERE), a corpus folder, and a
/// libFuzzer binary in fuzz/Cargo.toml; every binary is one of these targets.
#[test]
fn every_target_is_replayed_and_built() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let src = std::fs::read_to_string(file!()).unwrap();
    let cargo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml")).unwrap();
    let bins: Vec<&str> = cargo
        .lines()
        .filter_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
        .filter(|n| *n != "hostfirst-fuzz")
        .collect();
    let mut names: Vec<&str> = harness::TARGETS.iter().map(|t| t.name).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (target, file, test, corpus) in REPLAYED_ELSEWHERE {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(text.contains(test), "{target}: {file} has no {test}");
        assert!(
            text.contains(&format!("tests/corpus/{corpus}")),
            "{target}: {file} does not read tests/corpus/{corpus}"
        );
        assert!(corpus_root().join(corpus).is_dir(), "no corpus folder tests/corpus/{corpus}");
        names.push(target);
    }
    assert_eq!(
        {
            let mut b = bins.clone();
            b.sort();
            b
        },
        {
            names.sort();
            names.clone()
        },
        "fuzz/Cargo.toml [[bin]]s"
    );
    for t in harness::TARGETS {
        assert!(src.contains(&format!("replay(\"{}\")", t.name)), "no replay test for {}", t.name);
        assert!(corpus_root().join(t.corpus).is_dir(), "no corpus folder tests/corpus/{}", t.corpus);
    }
}

/// The open recorder sees the opens the library makes (so an empty record means nothing was opened).
#[test]
fn opens_are_observed() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !harness::opens::SUPPORTED {
        eprintln!("opens cannot be observed on this platform; the containment checks see nothing");
        return;
    }
    let dir = harness::scratch("opens");
    harness::opens::self_test(&dir);
    let p = dir.join("x.safetensors");
    std::fs::write(&p, b"not a file").unwrap();
    let (r, seen) = harness::opens::record(|| hostfirst::TensorFile::open(&p));
    assert!(r.is_err());
    assert_eq!(seen, vec![p.clone()]);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = Status::Ok;
}
