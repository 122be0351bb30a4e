//! Source audit of fork safety (see core/src/forksafe.rs): every process-global lock, in the core and in the
//! C-API crate, is taken by the `pthread_atfork` prepare handler, and no one-time initialisation can block.

use std::path::Path;

/// (the crate's `src`, the file whose `prepare` must hold its locks)
const CRATES: &[(&str, &str)] = &[("core/src", "core/src/fork_handlers.rs"), ("src", "src/fork_handlers.rs")];

/// The CUDA-only locks the forksafe module documentation explains (used only after the CUDA gate let a call
/// through, which never happens in a child forked after CUDA was initialised).
const CUDA_ONLY: &[&str] = &["CONTEXTS", "PAIRS", "SUPPORTED"];

fn audit(root: &Path, src: &str, held: &str, bad: &mut Vec<String>) -> usize {
    let held_text = std::fs::read_to_string(root.join(held)).unwrap();
    let mut statics = 0;
    let mut stack = vec![root.join(src)];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let file = p.strip_prefix(root).unwrap().display().to_string();
            for line in text.lines().map(str::trim) {
                if !["static ", "pub(crate) static ", "pub static "].iter().any(|s| line.starts_with(s)) {
                    continue;
                }
                statics += 1;
                let name = line.split_whitespace().find(|w| w.ends_with(':')).unwrap_or("").trim_end_matches(':');
                if ["OnceLock", "Once", "LazyLock", "Lazy<", "OnceCell"].iter().any(|t| line.contains(t))
                    && !line.contains("InitOnce")
                {
                    bad.push(format!("{file}: {line} (use forksafe::InitOnce)"));
                }
                let global = line.contains("GlobalMutex<") || line.contains("GlobalRwLock<");
                let lock = ["Mutex<", "RwLock<"].iter().any(|t| line.contains(t));
                if lock && !global && !CUDA_ONLY.contains(&name) {
                    bad.push(format!("{file}: {line} (use forksafe::GlobalMutex)"));
                }
                if global && !held_text.contains(&format!("::{name}.hold()")) {
                    bad.push(format!("{file}: {line} (not held by the prepare handler in {held})"));
                }
            }
        }
    }
    statics
}

#[test]
fn every_process_global_lock_is_fork_safe() {
    let root = crate::common::root();
    let mut bad = Vec::new();
    for (src, held) in CRATES {
        let statics = audit(&root, src, held, &mut bad);
        // The scan must see the statics it audits, or it would pass vacuously.
        assert!(statics > 3, "{src}: found only {statics} statics");
    }
    assert!(bad.is_empty(), "process-global state a forked child could find locked:\n{}", bad.join("\n"));
}
