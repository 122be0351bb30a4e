//! Shared helpers for the integration tests: locating the built library, compiling C programs with
//! `-Wall -Wextra -Werror`, building the stand-in CUDA driver, and running programs with a chosen environment.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The crate root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding libhostfirst.so for this test build (target/<profile>).
///
/// `cargo test` does not refresh the cdylib, so the first call builds it with the same profile and features
/// as this test binary (cheap when it is already current).
pub fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current exe");
        let dir = exe.parent().and_then(|d| d.parent()).expect("profile dir").to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(root()).args(["build", "--lib", "--quiet"]);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        if cfg!(feature = "test-hooks") {
            cmd.args(["--features", "test-hooks"]);
        }
        check(cmd.output().expect("run cargo build"), "cargo build --lib");
        assert!(dir.join("libhostfirst.so").exists(), "libhostfirst.so not found in {}", dir.display());
        // Programs linked here record the versioned SONAME; build.rs puts that name beside the library.
        if let Some(soname) = option_env!("HOSTFIRST_SONAME") {
            assert!(dir.join(soname).exists(), "build.rs did not create {soname} in {}", dir.display());
        }
        dir
    })
    .clone()
}

/// A scratch directory for this test binary's outputs.
pub fn scratch(name: &str) -> PathBuf {
    let d = lib_dir().join("hostfirst-tests").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The C compiler: $CC or `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// True when a C compiler runs here. CI installs one; a machine without one skips the C tests loudly.
pub fn have_cc() -> bool {
    static HAVE: OnceLock<bool> = OnceLock::new();
    *HAVE.get_or_init(|| Command::new(cc()).arg("--version").output().map(|o| o.status.success()).unwrap_or(false))
}

fn check(out: Output, what: &str) -> Output {
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Extra preprocessor flags matching this build's features.
pub fn feature_flags() -> Vec<String> {
    let mut v = Vec::new();
    if cfg!(feature = "test-hooks") {
        v.push("-DHOSTFIRST_TEST_HOOKS".to_string());
    }
    v
}

/// Compiles C sources into an executable linked against libhostfirst with an rpath; returns its path.
///
/// The compiler writes a private temporary file that is then renamed into place, so two tests compiling the
/// same program at once never run (or overwrite) a half-written binary.
pub fn compile_c(sources: &[&Path], out_name: &str, extra: &[&str]) -> PathBuf {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let out = scratch("bin").join(out_name);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = scratch("bin").join(format!(".{out_name}.{}.{seq}", std::process::id()));
    let lib = lib_dir();
    let mut cmd = Command::new(cc());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(format!("-I{}", root().join("tests/c").display()))
        .args(feature_flags())
        .args(extra)
        .args(sources)
        .arg("-o")
        .arg(&tmp)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhostfirst", "-lpthread", "-lm"]);
    check(cmd.output().expect("run the C compiler"), &format!("compiling {out_name}"));
    std::fs::rename(&tmp, &out).expect("move the compiled program into place");
    out
}

/// Compiles `tests/c/<name>.c` (with tests/c/check.h) into an executable.
pub fn compile_c_test(name: &str) -> PathBuf {
    let src = root().join("tests/c").join(format!("{name}.c"));
    compile_c(&[&src], name, &[])
}

/// Runs a program with extra environment variables (and removes those given as `None`).
///
/// In the valgrind pass ([`VALGRIND`] = 1, see tests/it/valgrind.rs) the C and C++ programs the tests compile
/// (tests/c, the examples, the CLI) run under valgrind memcheck, and a memcheck error fails the run even when
/// the program was expected to fail.
pub fn run(bin: &Path, args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let memcheck = under_valgrind() && bin.parent() == Some(profile_dir().join("hostfirst-tests/bin").as_path());
    let logs = memcheck.then(valgrind_log_dir);
    let mut cmd = match &logs {
        Some(dir) => {
            let mut c = Command::new("valgrind");
            c.args(VALGRIND_FLAGS).arg(format!("--log-file={}/vg.%p.log", dir.display())).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(args);
    // Keep the child's census independent of the developer's environment unless a test sets it.
    for k in ["HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES"] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("run program");
    if let Some(dir) = logs {
        check_valgrind_logs(&dir, bin, args);
    }
    out
}

/// The variable that turns the valgrind pass on in a test process (tests/it/valgrind.rs sets it to 1).
pub const VALGRIND: &str = "HOSTFIRST_VALGRIND";

/// The memcheck flags of the valgrind pass: any error, and any definitely lost block, is an error.
pub const VALGRIND_FLAGS: &[&str] = &[
    "--tool=memcheck",
    "--error-exitcode=1",
    "--leak-check=full",
    "--errors-for-leak-kinds=definite",
    "--show-leak-kinds=definite",
    "--num-callers=40",
    "--read-inline-info=no", // a third less time per run; reports still name the functions
];

/// True in the valgrind pass.
pub fn under_valgrind() -> bool {
    std::env::var(VALGRIND).as_deref() == Ok("1")
}

/// A fresh directory for one valgrind run's logs (one file per process: forked children log apart).
fn valgrind_log_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = profile_dir().join("hostfirst-tests/valgrind").join(format!("{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Panics, showing the log, when a process of the run reported memcheck errors (`ERROR SUMMARY: N errors`
/// with N > 0); the exit status alone cannot tell when the program itself was expected to exit 1. A process
/// killed by a signal (a forked child that shows the SIGBUS hazard) never got to free its memory: its leak
/// reports are not counted, its memory errors are.
fn check_valgrind_logs(dir: &Path, bin: &Path, args: &[&str]) {
    let mut logs = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        logs += 1;
        let errors = text
            .lines()
            .filter_map(|l| l.split("ERROR SUMMARY: ").nth(1))
            .find_map(|rest| rest.split_whitespace().next().and_then(|n| n.replace(',', "").parse::<usize>().ok()));
        let killed = text.contains("Process terminating with default action of signal");
        let leaks = if killed { text.matches(" are definitely lost in loss record ").count() } else { 0 };
        if errors.is_some_and(|n| n > leaks) {
            panic!("valgrind memcheck errors in {} {}:\n{text}", bin.display(), args.join(" "));
        }
    }
    assert!(logs > 0, "valgrind wrote no log for {} {} (is valgrind installed?)", bin.display(), args.join(" "));
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs and asserts exit status 0; returns stdout.
pub fn run_ok(bin: &Path, args: &[&str], env: &[(&str, Option<&str>)]) -> String {
    let out = check(run(bin, args, env), &format!("{} {}", bin.display(), args.join(" ")));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Builds the `hostfirst` CLI with its one recipe, cli/build.sh (once per test binary), against the library
/// under test, and returns its path.
pub fn cli() -> PathBuf {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        assert!(have_cc(), "no C compiler ('{}')", cc());
        let out = scratch("bin").join("hostfirst");
        let lib = lib_dir();
        let mut cmd = Command::new("bash");
        cmd.arg(root().join("cli/build.sh"))
            .arg(&out)
            .arg("-g")
            .arg(format!("-L{}", lib.display()))
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .env("CC", cc());
        check(cmd.output().expect("run cli/build.sh"), "building the CLI with cli/build.sh");
        out
    })
    .clone()
}

/// Parses a JSON document (the CLI's --json output).
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{text}"))
}

// ---- the stand-in CUDA driver (tests/cuda_stub/stand_in_cuda.c) ------------------------------------------

/// The environment variable that tells a re-executed test binary which test body to run (see
/// [`in_stand_in_child`]).
pub const STAND_IN_CHILD: &str = "HOSTFIRST_STAND_IN_CHILD";

/// target/<profile> of this test binary, found without building anything.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().and_then(|d| d.parent()).expect("profile dir").to_path_buf()
}

/// Builds the stand-in driver once per test binary (`cc -shared -fPIC -Wall -Wextra -Werror`, SONAME
/// libcuda.so.1) into its own directory, next to the symlinks `libcuda.so` (the development name, which
/// hostfirst tries after libcuda.so.1) and `libnvidia-ml.so.1` (the stand-in also answers NVML's memory
/// queries), and returns that directory. Each test binary gets its own directory, so binaries
/// running at the same time never race on the file.
pub fn stand_in_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build_stand_in("", &[])).clone()
}

/// A variant of the stand-in compiled with extra `-D` defines (e.g. `STAND_IN_WITHOUT_UUID_V2`), in its own
/// directory named after `variant`. Builds every time it is called: call it once per test.
pub fn stand_in_variant_dir(variant: &str, defines: &[&str]) -> PathBuf {
    build_stand_in(variant, defines)
}

fn build_stand_in(variant: &str, defines: &[&str]) -> PathBuf {
    assert!(have_cc(), "no C compiler ('{}'): the stand-in CUDA driver cannot be built", cc());
    let exe = std::env::current_exe().expect("current exe");
    let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
    let name = if variant.is_empty() { format!("stand-in-{stem}") } else { format!("stand-in-{stem}-{variant}") };
    let dir = profile_dir().join("hostfirst-tests").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join("tests/cuda_stub/stand_in_cuda.c");
    let lib = dir.join("libcuda.so.1");
    let mut cmd = Command::new(cc());
    cmd.args(["-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-Wl,-soname,libcuda.so.1"])
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .arg("-lpthread");
    check(cmd.output().expect("run the C compiler"), "compiling the stand-in CUDA driver");
    for name in ["libcuda.so", "libnvidia-ml.so.1"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so.1", &link).expect("symlink to the stand-in");
    }
    dir
}

/// The stand-in knobs that choose how it runs rather than what it simulates: a test run sets them in its own
/// environment (`STAND_IN_DEFERRED=1 STAND_IN_SEED=7 cargo test ...`, as scripts/test.sh does for its second
/// pass over the CUDA tests) and every stand-in child inherits them unless the test sets them itself.
pub const STAND_IN_MODE_KNOBS: &[&str] = &["STAND_IN_DEFERRED", "STAND_IN_SEED"];

/// True when this test run uses the deferred stand-in (see [`STAND_IN_MODE_KNOBS`]).
pub fn stand_in_deferred() -> bool {
    std::env::var("STAND_IN_DEFERRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The environment for a child that should load the stand-in: `LD_LIBRARY_PATH` with the stand-in's
/// directory first, every `STAND_IN_*` knob inherited from the caller's environment removed except the mode
/// knobs ([`STAND_IN_MODE_KNOBS`]), then `knobs` (`None` removes a variable).
pub fn stand_in_env(knobs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    stand_in_env_in(&stand_in_dir(), knobs)
}

/// [`stand_in_env`] for a stand-in built into `dir` (see [`stand_in_variant_dir`]).
pub fn stand_in_env_in(dir: &Path, knobs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", dir.display()),
        _ => dir.display().to_string(),
    };
    let mut env: Vec<(String, Option<String>)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("STAND_IN_") && !STAND_IN_MODE_KNOBS.contains(&k.as_str()))
        .map(|(k, _)| (k, None))
        .collect();
    env.push(("LD_LIBRARY_PATH".to_string(), Some(path)));
    env.extend(knobs.iter().map(|(k, v)| (k.to_string(), v.map(|s| s.to_string()))));
    env
}

/// Runs a program with the stand-in driver on the library path and the given knobs (see [`run`]).
pub fn run_with_stand_in(bin: &Path, args: &[&str], knobs: &[(&str, Option<&str>)]) -> Output {
    let env = stand_in_env(knobs);
    let refs: Vec<(&str, Option<&str>)> = env.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
    run(bin, args, &refs)
}

/// Like [`run_with_stand_in`], asserting exit status 0; returns stdout.
pub fn run_ok_with_stand_in(bin: &Path, args: &[&str], knobs: &[(&str, Option<&str>)]) -> String {
    let out = check(
        run_with_stand_in(bin, args, knobs),
        &format!("{} {} (stand-in, {knobs:?})", bin.display(), args.join(" ")),
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs `body` in a child process that has the stand-in driver loaded with `knobs`.
///
/// The driver library is loaded once per process and the census is taken once, so every CUDA configuration
/// needs its own process. Call this as the whole body of a `#[test]`, naming it
/// `concat!(module_path!(), "::test_fn")`: in the parent it re-executes this test binary for exactly that
/// test with the stand-in on `LD_LIBRARY_PATH` and [`STAND_IN_CHILD`] set, and asserts that the child ran one
/// test and passed; in the child it runs `body`.
///
/// The child runs with `STAND_IN_LEAK_REPORT=1` (unless `knobs` set it), and its exit report must show no
/// live device allocations, registrations, streams or events and no queued operation: what a test leaves
/// behind fails it. (Page-locked slabs may stay: the staging pool keeps them for the process lifetime.)
pub fn in_stand_in_child(test: &str, knobs: &[(&str, Option<&str>)], body: impl FnOnce()) {
    in_child(test, knobs, true, body)
}

/// Runs `body` alone in a child process (no stand-in): for tests that count what is per process (open
/// descriptors, live handles), which other tests of this binary would disturb. Named as for
/// [`in_stand_in_child`].
pub fn alone(test: &str, body: impl FnOnce()) {
    in_child(test, &[], false, body)
}

fn in_child(test: &str, knobs: &[(&str, Option<&str>)], stand_in: bool, body: impl FnOnce()) {
    // `module_path!()` starts with the crate's name; the test harness names tests without it.
    let test = test.split_once("::").map_or(test, |(_, rest)| rest);
    if std::env::var(STAND_IN_CHILD).as_deref() == Ok(test) {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut all: Vec<(&str, Option<&str>)> = knobs.to_vec();
    all.push((STAND_IN_CHILD, Some(test)));
    let check_report = stand_in && !knobs.iter().any(|(k, _)| *k == "STAND_IN_LEAK_REPORT");
    if check_report {
        all.push(("STAND_IN_LEAK_REPORT", Some("1")));
    }
    let args = [test, "--exact", "--nocapture", "--test-threads=1"];
    let out = if stand_in { run_with_stand_in(&exe, &args, &all) } else { run(&exe, &args, &all) };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child for {test} ({knobs:?}) failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    if check_report {
        assert_clean_exit_report(&stderr, &format!("child for {test} ({knobs:?})"));
    }
}

/// Asserts that the stand-in's exit report (STAND_IN_LEAK_REPORT=1) on a process's stderr shows nothing live
/// but page-locked memory and retained contexts: no device allocation, registration, stream, event or queued
/// operation. No report at all means the process never loaded the stand-in (it prints whenever it was loaded).
pub fn assert_clean_exit_report(stderr: &str, what: &str) {
    let Some(line) = stderr.lines().rev().find(|l| l.starts_with("stand-in cuda: at exit:")) else { return };
    for clean in
        ["0 device allocations (0 bytes)", " 0 registrations", " 0 streams, 0 events live", "; 0 queued operations"]
    {
        assert!(line.contains(clean), "{what}: the stand-in's exit report shows a leak ('{clean}' expected): {line}");
    }
}

/// Reads one of the stand-in's counters (`stand_in_live_allocations`, ...) in a process that has loaded it.
/// Panics when the stand-in is not loaded or lacks the function.
pub fn stand_in_query(name: &str) -> u64 {
    let lib = std::ffi::CString::new("libcuda.so.1").unwrap();
    let sym = std::ffi::CString::new(name).unwrap();
    // SAFETY: dlopen of an already-loaded library returns its handle; the symbol, if present, is one of the
    // stand-in's `unsigned long long f(void)` query functions.
    unsafe {
        let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "the stand-in driver is not loadable in this process");
        let f = libc::dlsym(h, sym.as_ptr());
        assert!(!f.is_null(), "the stand-in driver has no {name}");
        let f: extern "C" fn() -> u64 = std::mem::transmute(f);
        let v = f();
        libc::dlclose(h);
        v
    }
}

/// The stand-in's current context on the calling thread (`cuCtxGetCurrent`), as an address (0 = none).
pub fn stand_in_current_context() -> usize {
    let lib = std::ffi::CString::new("libcuda.so.1").unwrap();
    // SAFETY: as in `stand_in_query`; cuCtxGetCurrent is `CUresult (CUcontext*)`.
    unsafe {
        let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null());
        let f = libc::dlsym(h, c"cuCtxGetCurrent".as_ptr());
        assert!(!f.is_null());
        let f: extern "C" fn(*mut *mut std::ffi::c_void) -> i32 = std::mem::transmute(f);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(f(&mut ctx), 0, "cuCtxGetCurrent");
        libc::dlclose(h);
        ctx as usize
    }
}
