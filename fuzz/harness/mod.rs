//! The checks of every fuzz target, shared by the libFuzzer binaries (fuzz/fuzz_targets/*.rs) and the corpus
//! replay of the ordinary test suite (tests/fuzz_corpus/main.rs), which include this directory with
//! `#[path]`: the same code runs under libFuzzer with AddressSanitizer and under `cargo test` on stable.
//!
//! Each target is a `run(&[u8]) -> Status` function: any input is fine; it panics (a libFuzzer crash, a
//! failed test) when the library breaks a rule, and returns the status of the step under test, which does
//! not depend on the machine (no GPU, no census), so that a corpus file can be named after the status it
//! must keep giving (`tests/corpus/<target>/<name>.<STATUS>.bin`).
//!
//! Shared pieces: [`image`] builds safetensors images, [`reference`] holds the small reference parsers and
//! the glob matcher the library is compared with, [`opens`] records the files a call opens, [`input`]
//! reads structured inputs from fuzz bytes.

#![allow(dead_code)]

pub mod device_spec;
pub mod env_vars;
pub mod image;
pub mod index_set;
pub mod input;
pub mod open_file;
pub mod open_memory;
pub mod opens;
pub mod reference;
pub mod rules_glob;
pub mod shard_plan;

use hostfirst::ffi::*;
use hostfirst::Status;

/// A fuzz target: its name (the libFuzzer binary's), the folder of its committed corpus under tests/corpus/,
/// and its checks.
pub struct Target {
    pub name: &'static str,
    pub corpus: &'static str,
    pub run: fn(&[u8]) -> Status,
}

/// Every target. A new one is added here, as a [[bin]] in fuzz/Cargo.toml and with a corpus folder; the
/// replay test checks that the three agree.
pub const TARGETS: &[Target] = &[
    Target { name: "open_memory", corpus: "safetensors", run: open_memory::run },
    Target { name: "open_file", corpus: "open_file", run: open_file::run },
    Target { name: "index_set", corpus: "index_set", run: index_set::run },
    Target { name: "device_spec", corpus: "device_spec", run: device_spec::run },
    Target { name: "rules_glob", corpus: "rules_glob", run: rules_glob::run },
    Target { name: "shard_plan", corpus: "shard_plan", run: shard_plan::run },
    Target { name: "env_vars", corpus: "env_vars", run: env_vars::run },
];

/// Live handles of every kind.
pub fn handles() -> usize {
    let mut n = 0;
    assert_eq!(hostfirst_handle_count(&mut n), Status::Ok);
    n
}

/// The calling thread's last error message.
pub fn last_error() -> String {
    let p = hostfirst_last_error_message();
    assert!(!p.is_null());
    // SAFETY: the library returns a NUL-terminated string that lives until the thread's next call.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Checks a failed call: a real status, not a caught panic, and a message saying what went wrong.
pub fn check_failure(st: Status, what: &str) {
    assert_ne!(st, Status::Panic, "{what}: a panic reached the boundary: {}", last_error());
    assert!(Status::from_u32(st as u32).is_some(), "{what}: status {} is not a status", st as u32);
    if st != Status::Ok {
        assert!(!last_error().is_empty(), "{what}: {} without a message", st.name());
    }
}

/// Open file descriptors of this process (None where /proc is not there), but the io_uring rings the read
/// engine keeps for reuse (per thread and a few shared: made by the first read, not leaks).
pub fn open_fds() -> Option<usize> {
    let d = std::fs::read_dir("/proc/self/fd").ok()?;
    let ring = std::ffi::OsStr::new("anon_inode:[io_uring]");
    Some(d.filter_map(|e| e.ok()).filter(|e| std::fs::read_link(e.path()).map_or(true, |l| l != ring)).count())
}

/// A C string of `bytes` cut at the first NUL.
pub fn cstring(bytes: &[u8]) -> std::ffi::CString {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    std::ffi::CString::new(&bytes[..end]).expect("no NUL")
}

/// A per-process scratch folder for `target`, with no symbolic link on its path (canonical). Folders left by
/// processes that are gone are removed first (where /proc tells).
pub fn scratch(target: &str) -> std::path::PathBuf {
    let tmp = std::env::temp_dir();
    let prefix = format!("hostfirst-fuzz-{target}-");
    if std::path::Path::new("/proc/self").exists() {
        for e in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = e.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let d = tmp.join(format!("{prefix}{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch folder");
    std::fs::canonicalize(&d).expect("canonical scratch folder")
}

/// One tensor of an open file as the C API describes it.
pub struct Described {
    pub name: String,
    pub dtype: u32,
    pub shape: Vec<u64>,
    pub nbytes: u64,
    pub file_offset: u64,
    /// The bytes, copied with `hostfirst_view_copy`.
    pub bytes: Vec<u8>,
}

/// Describes and copies tensor `i` of `f` through the C API, checking what every view must satisfy: name
/// and index agree both ways, the copy has the described size, `hostfirst_view_read` (pread for files) gives
/// the same bytes, and every handle made is freed.
pub fn describe(f: *const hostfirst_file, i: usize) -> Described {
    let mut name = std::ptr::null();
    assert_eq!(hostfirst_file_tensor_name(f, i, &mut name), Status::Ok, "{}", last_error());
    let mut idx = usize::MAX;
    assert_eq!(hostfirst_file_find(f, name, &mut idx), Status::Ok, "{}", last_error());
    assert_eq!(idx, i, "find gives another index");
    let mut v: *mut hostfirst_view = std::ptr::null_mut();
    assert_eq!(hostfirst_file_view_at(f, i, &mut v), Status::Ok, "{}", last_error());
    let mut info: hostfirst_view_info = unsafe { std::mem::zeroed() };
    info.struct_size = std::mem::size_of::<hostfirst_view_info>();
    assert_eq!(hostfirst_view_describe(v, &mut info), Status::Ok, "{}", last_error());
    // SAFETY: the library returns a NUL-terminated name that lives as long as the file.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_str().expect("names are UTF-8").to_string();
    let shape = if info.rank == 0 {
        Vec::new()
    } else {
        // SAFETY: `rank` dimensions, valid while the view lives.
        unsafe { std::slice::from_raw_parts(info.shape, info.rank as usize) }.to_vec()
    };
    let n = usize::try_from(info.nbytes).expect("a tensor of a file in memory fits");
    let mut bytes = vec![0u8; n];
    let mut need = 0u64;
    assert_eq!(hostfirst_view_copy(v, bytes.as_mut_ptr().cast(), n, &mut need), Status::Ok, "{}", last_error());
    assert_eq!(need, info.nbytes);
    let mut read = vec![0u8; n];
    assert_eq!(hostfirst_view_read(v, 0, read.as_mut_ptr().cast(), n), Status::Ok, "{}", last_error());
    assert!(read == bytes, "tensor '{name}': hostfirst_view_read and hostfirst_view_copy disagree");
    assert_eq!(hostfirst_view_free(v), Status::Ok);
    Described { name, dtype: info.dtype as u32, shape, nbytes: info.nbytes, file_offset: info.file_offset, bytes }
}
