//! One transfer path (issue 22): outside the transfer engine (`core/src/engine`), no code of either crate (the
//! core in core/, the C API at the root) calls the primitives that read a file's bytes or copy to or from device
//! memory, with no exceptions: put, load, shard-on-read, `buffer_to`, resident puts and the gather all reach
//! files and devices through the engine. A source scan in the style of `boundary.rs`: it fails on any call
//! anywhere else.
//!
//! What counts as a primitive:
//! - file reads: `libc::pread*` (`pread`, `pread64`, `preadv`, `preadv2`), `libc::read(`, std's positioned
//!   reads (`FileExt`: `read_at`, `read_exact_at`, `seek_read`), io_uring, and the platform layer's positioned
//!   reads (`os::read_at`, `os::read_vectored_at`). The platform layer (`core/src/os`) defines those on each
//!   system and is not scanned: the engine reads through it;
//! - device copies: the CUDA layer's copy wrappers (`DeviceMemory::copy_from_host`, `copy_to_host(offset, dst)`,
//!   `copy_from_device`, `Stream::copy_to_device_async`, `copy_to_host_async`) and the driver's memcpy entry
//!   points (`memcpy_htod*`, `memcpy_dtoh*`, `memcpy_dtod*`, `memcpy_peer*`). The CUDA layer itself
//!   (`src/device/cuda`) defines these and is where the engine reaches the driver, so it is not scanned for
//!   them (it is scanned for file reads).
//!
//! Not scanned: `memcpy` out of a mapping or a host buffer (`copy_from_slice`), which is how the gather reads a
//! prefaulted tensor and how memory-backed files are read; whole-file reads of text (`fs::read_to_string` of a
//! sharded set's JSON index).

use std::path::{Path, PathBuf};

/// Patterns for file reads (scanned everywhere outside `src/engine`).
const FILE_READS: &[&str] =
    &["libc::pread", "libc::read(", "FileExt", "read_exact_at(", "io_uring::", "os::read_at(", "os::read_vectored_at("];

/// Patterns for device copies (scanned outside `src/engine` and `src/device/cuda`). `copy_to_host(` is a
/// primitive only with two arguments (`DeviceMemory::copy_to_host(offset, dst)`); `Buffer::copy_to_host(dst)`
/// is the buffer's public read-back, which reaches the device through the engine.
const DEVICE_COPIES: &[&str] = &[
    ".copy_from_host(",
    ".copy_to_host(",
    ".copy_from_device(",
    ".copy_to_device_async(",
    ".copy_to_host_async(",
    "memcpy_htod",
    "memcpy_dtoh",
    "memcpy_dtod",
    "memcpy_peer",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a line: nothing for a comment line, the part before a trailing `//` comment otherwise.
fn code(line: &str) -> &str {
    let t = line.trim_start();
    if t.starts_with("//") {
        return "";
    }
    match line.find("// ") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// Whether `text` (from just after `copy_to_host(`) has a comma at the call's own depth before it closes.
fn two_arguments(text: &str) -> bool {
    let mut depth = 0i32;
    for c in text.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' if depth == 0 => return false,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// The primitive calls in one file's source: (line number, pattern).
fn calls(source: &str, device_copies_too: bool) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    let lines: Vec<&str> = source.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let c = code(line);
        let patterns = FILE_READS.iter().chain(if device_copies_too { DEVICE_COPIES } else { &[] });
        for &p in patterns {
            for (at, _) in c.match_indices(p) {
                if p == ".copy_to_host(" {
                    // The arguments may continue on the next lines.
                    let rest: String =
                        std::iter::once(&c[at + p.len()..]).chain(lines[i + 1..].iter().take(4).copied()).collect();
                    if !two_arguments(&rest) {
                        continue;
                    }
                }
                found.push((i + 1, p));
            }
        }
    }
    found
}

#[test]
fn no_primitive_calls_outside_the_engine() {
    // Both crates: the core (core/, which has src/engine and src/device/cuda) and the C API (the repository
    // root, src/ffi). Paths are relative to the crate's own directory.
    let root = crate::common::root();
    let mut files = Vec::new();
    for krate in [root.join("core"), root.clone()] {
        let mut in_crate = Vec::new();
        rust_files(&krate.join("src"), &mut in_crate);
        files.extend(in_crate.into_iter().map(|f| (krate.clone(), f)));
    }
    assert!(files.iter().any(|(_, f)| f.ends_with("src/engine/mod.rs")), "the scan does not see the engine");
    let mut bad = Vec::new();
    for (krate, f) in &files {
        let rel = f.strip_prefix(krate).unwrap().to_string_lossy().replace('\\', "/");
        if rel.starts_with("src/engine/") || rel.starts_with("src/os/") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (line, p) in calls(&text, !rel.starts_with("src/device/cuda/")) {
            bad.push(format!("{rel}:{line}: `{p}` outside src/engine (route it through the engine)"));
        }
    }
    assert!(bad.is_empty(), "primitive calls outside the transfer engine:\n{}", bad.join("\n"));
}

/// The scan itself finds what it must and skips what it must (so the test above can fail).
#[test]
fn the_scan_finds_primitive_calls() {
    let src = r#"
        use std::os::unix::fs::FileExt;
        let n = unsafe { libc::pread64(fd, p, n, o) };
        let n = unsafe { libc::preadv(fd, iov, k, o) };
        f.read_exact_at(&mut b, 0)?;
        // libc::pread(fd, p, n, o) in a comment
        stream.copy_to_device_async(slab, 0, dst, 0, len)?;
        mem.copy_to_host(
            off, dst)?;
        buffer.copy_to_host(dst)?;
        let r = unsafe { (api.memcpy_htod_async)(d, s, n, st) };
        let n = crate::os::read_at(fd, dst, 0)?;
    "#;
    let found: Vec<&str> = calls(src, true).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        found,
        [
            "FileExt",
            "libc::pread",
            "libc::pread",
            "read_exact_at(",
            ".copy_to_device_async(",
            ".copy_to_host(",
            "memcpy_htod",
            "os::read_at("
        ]
    );
    assert_eq!(calls(src, false).len(), 5, "device copies are not scanned in the CUDA layer");
}

/// System calls the writer must make through the platform layer (`core/src/os`), which has both a Unix and a
/// Windows implementation of each.
const SYSTEM_CALLS: &[&str] = &["libc::", "std::os::unix", "std::os::windows", "std::os::fd", "OpenOptionsExt"];

/// The system calls in `source` (code, not comments): (line number, pattern).
fn system_calls(source: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let c = code(line);
        found.extend(SYSTEM_CALLS.iter().filter(|p| c.contains(**p)).map(|p| (i + 1, *p)));
    }
    found
}

/// The writer (core/src/write, the engine's write side up to its Linux-only io_uring module, the error classes
/// and the C API's writer) reaches the operating system only through the platform layer: what it needs exists on
/// Windows too, or is refused there in one documented place.
#[test]
fn the_writer_reaches_the_system_only_through_the_platform_layer() {
    let root = crate::common::root();
    let mut files: Vec<PathBuf> = Vec::new();
    rust_files(&root.join("core/src/write"), &mut files);
    files.retain(|f| !f.ends_with("tests.rs")); // unit tests may make pipes and kill children
    files.extend([
        root.join("core/src/engine/write.rs"),
        root.join("core/src/error.rs"),
        root.join("src/ffi/writer.rs"),
    ]);
    assert!(files.len() >= 6, "{files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // The io_uring backend is Linux by nature (the pool serves every other system).
        let text = text.split("\nmod uring {").next().unwrap();
        for (line, p) in system_calls(text) {
            bad.push(format!("{}:{line}: `{p}` (use crate::os)", f.strip_prefix(&root).unwrap().display()));
        }
    }
    assert!(bad.is_empty(), "system calls outside the platform layer:\n{}", bad.join("\n"));
    let probe = "let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };\n// libc::flock in a comment\nuse std::os::fd::AsRawFd;";
    assert_eq!(system_calls(probe), [(1, "libc::"), (3, "std::os::fd")], "the scan finds what it must");
}
