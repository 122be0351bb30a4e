//! The Windows build (issue 33) run under Wine: the package zip of scripts/package-windows.sh and a DLL built with
//! the test hooks, both cross-built for x86_64-pc-windows-gnu. scripts/test-windows.sh (part of scripts/test.sh)
//! builds them, prepares a Wine prefix and runs `cargo test --test it windows::` with:
//!
//! - `HOSTFIRST_WINDOWS_ZIP`: the package zip; `HOSTFIRST_WINDOWS_TEST_DLL`: the test-hooks `hostfirst.dll`, its
//!   import library `libhostfirst.dll.a` beside it; `HOSTFIRST_WINDOWS_WHEEL`: the py3-none-win_amd64 wheel;
//! - `WINE` (the wine64 loader) and `WINEPREFIX`; `HOSTFIRST_WINDOWS_CC` (default `x86_64-w64-mingw32-gcc`).
//!
//! Without them each test says SKIPPED on stderr and returns (a plain `cargo test` needs no Wine); with
//! `HOSTFIRST_WINDOWS_REQUIRED=1` (set by the script) a missing piece fails instead.
//!
//! What runs: the DLL's export list against the Linux library's; every C test program that Windows can run (all but
//! those built around fork(), dlopen of libcuda.so.1 or the stand-in driver's Linux-only model), compiled with
//! mingw-w64 `-Wall -Wextra -Werror` against the DLL, with the arguments and environment the Linux tests give them,
//! including the file-changing contract as Windows has it (tests/c/platform.h); the examples; the CLI's `devices`,
//! `inspect`, `put` and `gather` on generated files, compared with the Linux CLI's answers; the malformed-file corpus
//! through both CLIs, status for status; the package consumed as users would (CMake's find_package, pkg-config,
//! the MSVC-format import library), each program run; the CUDA paths through nvcuda.dll on the stand-in driver;
//! the Windows wheel's tag and files, installed by pip for win_amd64, its CLI run from that layout; the version
//! resources of hostfirst.dll and hostfirst.exe (GetFileVersionInfoW), the licence texts in the zip and the wheel,
//! the wheel's metadata.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What the test command built for Windows, unpacked.
struct Win {
    /// The unpacked package (bin/, lib/, include/).
    pkg: PathBuf,
    /// A directory with the test-hooks hostfirst.dll and its import library; the test programs are built here,
    /// beside the DLL they load.
    bin: PathBuf,
    wine: PathBuf,
    cc: String,
}

fn required() -> bool {
    std::env::var("HOSTFIRST_WINDOWS_REQUIRED").is_ok_and(|v| v == "1")
}

/// The Windows build, or None (after a SKIPPED line) when the test command did not make one.
fn win() -> Option<&'static Win> {
    static WIN: OnceLock<Option<Win>> = OnceLock::new();
    WIN.get_or_init(|| {
        let var = |k: &str| std::env::var_os(k).map(PathBuf::from).filter(|p| !p.as_os_str().is_empty());
        let (Some(zip), Some(dll), Some(wine)) =
            (var("HOSTFIRST_WINDOWS_ZIP"), var("HOSTFIRST_WINDOWS_TEST_DLL"), var("WINE"))
        else {
            assert!(!required(), "HOSTFIRST_WINDOWS_REQUIRED=1 but HOSTFIRST_WINDOWS_ZIP, _TEST_DLL or WINE is unset");
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (windows::): no Windows build (scripts/test-windows.sh builds one and runs these tests)"
            );
            return None;
        };
        assert!(std::env::var_os("WINEPREFIX").is_some(), "WINEPREFIX is unset");
        let root = scratch("windows");
        let pkg_root = root.join("pkg");
        let _ = std::fs::remove_dir_all(&pkg_root);
        std::fs::create_dir_all(&pkg_root).unwrap();
        let out = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&zip)
            .arg(&pkg_root)
            .output()
            .expect("run python3 -m zipfile");
        assert!(out.status.success(), "unzipping {}: {}", zip.display(), String::from_utf8_lossy(&out.stderr));
        let tops: Vec<PathBuf> = std::fs::read_dir(&pkg_root).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(tops.len(), 1, "the zip holds one top directory: {tops:?}");
        let stem = zip.file_stem().unwrap().to_str().unwrap();
        assert_eq!(tops[0].file_name().unwrap().to_str().unwrap(), stem, "the top directory is named as the zip");
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for f in ["hostfirst.dll", "libhostfirst.dll.a"] {
            std::fs::copy(dll.with_file_name(f), bin.join(f)).unwrap_or_else(|e| panic!("{f} beside {dll:?}: {e}"));
        }
        let cc = std::env::var("HOSTFIRST_WINDOWS_CC").unwrap_or_else(|_| "x86_64-w64-mingw32-gcc".into());
        Some(Win { pkg: tops[0].clone(), bin, wine, cc })
    })
    .as_ref()
}

/// `path` as a Windows program under Wine names it (drive Z: is the Unix root).
fn wpath(path: &Path) -> String {
    format!("Z:{}", path.display()).replace('/', "\\")
}

/// How long one program may run under Wine before the test fails (a hang is a failure, not a stuck CI).
const WINE_DEADLINE: Duration = Duration::from_secs(600);

/// Runs a Windows program under Wine in its own directory (where Windows looks for the DLLs it imports). Its
/// output goes to files, not pipes: a Wine service process started meanwhile would inherit a pipe and hold it
/// open long after the program ended.
fn wine(w: &Win, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(&w.wine);
    cmd.arg(exe).args(args).current_dir(exe.parent().unwrap()).env("WINEDEBUG", "-all");
    for k in ["HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES", "HOSTFIRST_IO"] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_to_files(cmd, &format!("{} {}", exe.display(), args.join(" ")))
}

/// Runs `cmd` with stdin empty and stdout and stderr in files; fails the test past [`WINE_DEADLINE`].
fn run_to_files(mut cmd: Command, what: &str) -> Output {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = scratch("windows/output");
    let (out, err) =
        (dir.join(format!("{}-{n}.out", std::process::id())), dir.join(format!("{}-{n}.err", std::process::id())));
    cmd.stdin(Stdio::null()).stdout(std::fs::File::create(&out).unwrap()).stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > WINE_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} ran past {WINE_DEADLINE:?} under Wine:\n{}", text(&std::fs::read(&err).unwrap_or_default()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output { status, stdout: std::fs::read(&out).unwrap(), stderr: std::fs::read(&err).unwrap() };
    let _ = (std::fs::remove_file(&out), std::fs::remove_file(&err));
    o
}

/// Text of a Windows program's output with its CRLF line ends as LF.
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace("\r\n", "\n")
}

/// Runs a program that must succeed. Wine itself, started many times at once, very rarely ends a process with
/// status 1 before it runs a line of the program: no output at all (seen once in 72 concurrent starts of
/// examples-c/version.c here, and once in CI). Every program these tests run prints before it fails, so that one
/// shape is run once more, with Wine's error channel on, and said on stderr; any other failure fails at once.
fn wine_ok(w: &Win, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut o = wine(w, exe, args, env);
    if o.status.code() == Some(1) && o.stdout.is_empty() && o.stderr.is_empty() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "windows: {} ended with status 1 and no output under Wine: run once more",
            exe.display()
        );
        let mut env = env.to_vec();
        env.push(("WINEDEBUG", "err+all,fixme-all"));
        o = wine(w, exe, args, &env);
    }
    assert!(
        o.status.success(),
        "{} {} under Wine failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        exe.display(),
        args.join(" "),
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// Compiles C sources for Windows (-Wall -Wextra -Werror, the test hooks on) against the import library in
/// `w.bin`, into `w.bin`; winpthreads and libgcc linked in, so the program needs only hostfirst.dll beside it.
fn compile(w: &Win, sources: &[&Path], name: &str, extra: &[&str]) -> PathBuf {
    compile_in(w, &w.bin, sources, name, extra)
}

/// [`compile`] into `dir` (which holds hostfirst.dll and its import library).
fn compile_in(w: &Win, dir: &Path, sources: &[&Path], name: &str, extra: &[&str]) -> PathBuf {
    let exe = dir.join(format!("{name}.exe"));
    let tmp = dir.join(format!(".{name}.{}.exe", std::process::id()));
    let out = Command::new(&w.cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-DHOSTFIRST_TEST_HOOKS"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(format!("-I{}", root().join("tests/c").display()))
        .args(extra)
        .args(sources)
        .arg("-o")
        .arg(&tmp)
        .arg(format!("-L{}", dir.display()))
        .args(["-lhostfirst", "-static-libgcc", "-Wl,-Bstatic", "-lpthread", "-Wl,-Bdynamic", "-lm"])
        .output()
        .expect("run the mingw-w64 C compiler");
    assert!(out.status.success(), "compiling {name} for Windows:\n{}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

fn c_test(w: &Win, name: &str) -> PathBuf {
    compile(w, &[&root().join("tests/c").join(format!("{name}.c"))], name, &[])
}

/// A scratch directory for one program, as the program names it.
fn dir(name: &str) -> String {
    wpath(&scratch(&format!("windows/{name}")))
}

fn fixtures() -> String {
    wpath(&root().join("tests/fixtures"))
}

/// The names a PE file exports (`objdump -p`).
fn pe_exports(dll: &Path) -> Vec<String> {
    let out = Command::new("x86_64-w64-mingw32-objdump").arg("-p").arg(dll).output().expect("run objdump");
    assert!(out.status.success());
    let t = String::from_utf8_lossy(&out.stdout).to_string();
    let table = t.split("[Ordinal/Name Pointer] Table").nth(1).unwrap_or_else(|| panic!("{dll:?} exports nothing"));
    let mut v: Vec<String> = table
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split(']').nth(1).map(|n| n.trim().to_string()))
        .collect();
    v.sort();
    v
}

/// The DLLs a PE file imports.
fn pe_imports(file: &Path) -> Vec<String> {
    let out = Command::new("x86_64-w64-mingw32-objdump").arg("-p").arg(file).output().expect("run objdump");
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("DLL Name: ").map(|n| n.to_ascii_lowercase()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The `hostfirst_*` functions the Linux library exports (version suffixes dropped).
fn so_exports() -> Vec<String> {
    let so = lib_dir().join("libhostfirst.so");
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(&so).output().expect("run nm");
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|s| s.split('@').next().unwrap().to_string())
        .filter(|s| s.starts_with("hostfirst_"))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// System DLLs the library and programs may import: Windows' own, nothing of mingw-w64's runtime (libgcc_s,
/// libwinpthread) that a user would have to ship.
const SYSTEM_DLLS: &[&str] = &[
    "advapi32.dll",
    "api-ms-win-core-synch-l1-2-0.dll",
    // bcrypt (random numbers, ring/getrandom), crypt32 (the system's certificate store, rustls' native roots)
    // and secur32: the object-store client of 1.1 (issue 46); all three ship in System32 since Vista.
    "bcrypt.dll",
    "bcryptprimitives.dll",
    "crypt32.dll",
    "kernel32.dll",
    "msvcrt.dll",
    "ntdll.dll",
    "secur32.dll",
    "userenv.dll",
    "ws2_32.dll",
];

#[test]
fn the_dll_exports_what_the_linux_library_exports() {
    let Some(w) = win() else { return };
    let mut linux = so_exports();
    assert!(linux.len() > 100, "{} exports in libhostfirst.so", linux.len());
    // The DLL adds one: the experimental tier's marker of this minor (the Linux library has the symbol version).
    linux.push(experimental_marker());
    linux.sort();
    // The test build: test hooks on both sides.
    assert_eq!(pe_exports(&w.bin.join("hostfirst.dll")), linux, "test-hooks hostfirst.dll vs libhostfirst.so");
    // The package: the same without the test hooks, and its .def says the same.
    let release: Vec<String> = linux.iter().filter(|n| !n.starts_with("hostfirst__test")).cloned().collect();
    let dll = w.pkg.join("bin/hostfirst.dll");
    assert_eq!(pe_exports(&dll), release, "the package's hostfirst.dll vs libhostfirst.so");
    let def = std::fs::read_to_string(w.pkg.join("lib/hostfirst.def")).unwrap();
    let mut listed: Vec<String> = def.lines().skip(2).map(|l| l.trim().to_string()).collect();
    listed.sort();
    assert!(def.starts_with("LIBRARY hostfirst.dll\nEXPORTS\n"), "{def}");
    assert_eq!(listed, release, "hostfirst.def");
    for f in [dll, w.pkg.join("bin/hostfirst.exe")] {
        for d in pe_imports(&f) {
            assert!(d == "hostfirst.dll" || SYSTEM_DLLS.contains(&d.as_str()), "{} imports {d}", f.display());
        }
    }
}

/// The name of the experimental tier's marker that this minor's DLL exports (build.rs).
fn experimental_marker() -> String {
    format!("hostfirst_experimental_{}_{}", env!("CARGO_PKG_VERSION_MAJOR"), env!("CARGO_PKG_VERSION_MINOR"))
}

/// The experimental tier's per-minor guard on Windows (issue 43): a program built with HOSTFIRST_EXPERIMENTAL
/// imports this minor's marker and runs with this DLL; with a DLL of another minor (this one with its marker
/// renamed to the next minor's, as that DLL exports it) it is refused before main runs, while a program that
/// uses only the stable API runs with either.
#[test]
fn the_experimental_tier_is_bound_to_its_minor() {
    let Some(w) = win() else { return };
    let top = scratch("windows/experimental-guard");
    let (this, next) = (top.join("this-minor"), top.join("next-minor"));
    for d in [&this, &next] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    for f in ["hostfirst.dll", "libhostfirst.dll.a"] {
        std::fs::copy(w.pkg.join(if f.ends_with(".dll") { "bin" } else { "lib" }).join(f), this.join(f)).unwrap();
    }
    let marker = experimental_marker();
    let minor: u32 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
    let other = format!("hostfirst_experimental_{}_{}", env!("CARGO_PKG_VERSION_MAJOR"), minor + 1);
    assert_eq!(other.len(), marker.len(), "the next minor's name has the same length (a one-digit minor)");
    let dll = std::fs::read(this.join("hostfirst.dll")).unwrap();
    let at: Vec<usize> = dll
        .windows(marker.len() + 1)
        .enumerate()
        .filter(|(_, b)| b[..marker.len()] == *marker.as_bytes() && b[marker.len()] == 0)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "{marker} once in the stripped DLL (its export name table): {at:?}");
    let mut renamed = dll.clone();
    renamed[at[0]..at[0] + other.len()].copy_from_slice(other.as_bytes());
    std::fs::write(next.join("hostfirst.dll"), renamed).unwrap();
    assert!(pe_exports(&next.join("hostfirst.dll")).contains(&other));

    let guarded =
        compile_in(w, &this, &[&root().join("tests/windows/experimental_guard.c")], "experimental_guard", &[]);
    let imports = Command::new("x86_64-w64-mingw32-objdump").arg("-p").arg(&guarded).output().unwrap();
    assert!(String::from_utf8_lossy(&imports.stdout).contains(&marker), "the program imports {marker}");
    assert!(wine_ok(w, &guarded, &[], &[]).starts_with("census warnings: "));
    let stable = compile_in(w, &this, &[&root().join("examples-c/version.c")], "version", &[]);
    for exe in [&guarded, &stable] {
        std::fs::copy(exe, next.join(exe.file_name().unwrap())).unwrap();
    }
    let o = wine(w, &next.join("experimental_guard.exe"), &[], &[]);
    assert!(!o.status.success(), "started with another minor's DLL: {}", text(&o.stdout));
    assert!(!text(&o.stdout).contains("census warnings"), "main never ran: {}", text(&o.stdout));
    let out = wine_ok(w, &next.join("version.exe"), &[], &[]);
    assert!(out.starts_with(&format!("hostfirst {}", env!("CARGO_PKG_VERSION"))), "{out}");
}

#[test]
fn version_and_the_panic_boundary() {
    let Some(w) = win() else { return };
    let exe = compile(w, &[&root().join("examples-c/version.c")], "version", &[]);
    let out = wine_ok(w, &exe, &[], &[]);
    assert!(out.starts_with(&format!("hostfirst {v} (header {v})", v = env!("CARGO_PKG_VERSION"))), "{out}");
    // test_core: the boundary (a panic inside becomes HOSTFIRST_STATUS_PANIC: unwinding works in the DLL), the
    // census without a CUDA driver and with cuda hidden, scopes across threads.
    let core = c_test(w, "test_core");
    wine_ok(w, &core, &[], &[("EXPECT_CUDA_STATUS", "LIBRARY_NOT_FOUND")]);
    wine_ok(w, &core, &[], &[("HOSTFIRST_PLATFORMS", "cpu"), ("EXPECT_CUDA_STATUS", "HIDDEN_BY_ENV")]);
}

#[test]
fn c_file_place_rules_shard() {
    let Some(w) = win() else { return };
    wine_ok(w, &c_test(w, "test_file"), &[&dir("c_file")], &[]);
    wine_ok(w, &c_test(w, "test_place"), &[&dir("c_place")], &[]);
    wine_ok(w, &c_test(w, "test_rules"), &[&dir("c_rules")], &[]);
    wine_ok(w, &c_test(w, "test_shard"), &[&dir("c_shard")], &[]);
}

#[test]
fn c_dlpack_options_handoff() {
    let Some(w) = win() else { return };
    wine_ok(w, &c_test(w, "test_dlpack"), &[&fixtures()], &[]);
    wine_ok(w, &c_test(w, "test_options"), &[&fixtures()], &[]);
    wine_ok(w, &c_test(w, "test_handoff"), &[&dir("c_handoff")], &[]);
}

#[test]
fn c_loads_and_gather_streams() {
    let Some(w) = win() else { return };
    wine_ok(w, &c_test(w, "test_load_job"), &[&dir("c_load_job"), "cpu"], &[]);
    wine_ok(w, &c_test(w, "test_load_bulk"), &[&dir("c_load_bulk"), "cpu"], &[]);
    wine_ok(w, &c_test(w, "test_gather_stream"), &[&dir("c_gather_stream")], &[]);
    wine_ok(w, &c_test(w, "test_gather_feed"), &[&dir("c_gather_feed")], &[]);
}

/// The DLPack capsule destructor finds `PyCapsule_*` among the loaded modules (K32EnumProcessModules +
/// GetProcAddress), as it would find them in python3X.dll: a stand-in DLL exports them over a fake capsule.
#[test]
fn the_capsule_destructor_finds_python_in_a_loaded_dll() {
    let Some(w) = win() else { return };
    let dll = w.bin.join("fake_python.dll");
    let out = Command::new(&w.cc)
        .args(["-shared", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&dll)
        .arg(root().join("tests/windows/fake_python.c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "fake_python.dll: {}", text(&out.stderr));
    let exe = compile(w, &[&root().join("tests/windows/test_capsule.c")], "test_capsule", &[]);
    wine_ok(w, &exe, &[&fixtures()], &[]);
}

/// The file-changing contract on Windows: a copy-on-write put and a legacy DLPack export keep their pages while
/// the file cannot be cut (tests/c/test_cow_truncate.c, its Windows half).
#[test]
fn c_copy_on_write_and_a_file_that_cannot_shrink() {
    let Some(w) = win() else { return };
    wine_ok(w, &c_test(w, "test_cow_truncate"), &[&dir("c_cow_truncate")], &[]);
}

#[test]
fn the_host_first_example() {
    let Some(w) = win() else { return };
    let exe = compile(w, &[&root().join("examples-c/host_first.c")], "host_first", &[]);
    let out = wine_ok(w, &exe, &[&wpath(&token_file("host_first")), "tokens"], &[]);
    assert!(out.contains("tensor 'tokens': U16 [200003]") && out.contains("RSS after open"), "{out}");
    assert!(!out.contains("-1.0 MiB"), "the working set is read: {out}");
}

/// A directory like `w.bin` with the stand-in CUDA driver (tests/cuda_stub/stand_in_cuda.c) built as nvcuda.dll
/// and an nvml.dll whose NVML functions forward to it (one loaded module, as libnvidia-ml.so.1 and libcuda.so.1
/// are one object on Linux). The library loads the driver only from System32 or from the file
/// `HOSTFIRST_CUDA_DRIVER` names (and NVML from beside that file): programs run with [`stand_in_env`].
fn cuda_bin(w: &Win) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("windows/cuda-bin");
        for f in ["hostfirst.dll", "libhostfirst.dll.a"] {
            std::fs::copy(w.bin.join(f), dir.join(f)).unwrap();
        }
        let out = Command::new(&w.cc)
            .args(["-shared", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-o"])
            .arg(dir.join("nvcuda.dll"))
            .arg(root().join("tests/cuda_stub/stand_in_cuda.c"))
            .args(["-static-libgcc", "-Wl,-Bstatic", "-lpthread", "-Wl,-Bdynamic"])
            .output()
            .expect("run the mingw-w64 C compiler");
        assert!(out.status.success(), "the stand-in as nvcuda.dll:\n{}", text(&out.stderr));
        let nvml: Vec<String> =
            pe_exports(&dir.join("nvcuda.dll")).into_iter().filter(|n| n.starts_with("nvml")).collect();
        assert!(nvml.len() >= 4, "{nvml:?}");
        let def = format!(
            "LIBRARY nvml.dll\nEXPORTS\n{}",
            nvml.iter().map(|n| format!("    {n} = nvcuda.{n}\n")).collect::<String>()
        );
        std::fs::write(dir.join("nvml.def"), def).unwrap();
        std::fs::write(dir.join("nvml_forwarder.c"), "int hostfirst_nvml_forwarder;\n").unwrap();
        let out = Command::new(&w.cc)
            .arg("-shared")
            .arg("-o")
            .arg(dir.join("nvml.dll"))
            .arg(dir.join("nvml_forwarder.c"))
            .arg(dir.join("nvml.def"))
            .output()
            .unwrap();
        assert!(out.status.success(), "nvml.dll: {}", text(&out.stderr));
        dir
    })
}

/// `HOSTFIRST_CUDA_DRIVER` naming the stand-in of [`cuda_bin`], followed by `more`.
fn stand_in_env<'a>(bin: &Path, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, String)> {
    let mut env = vec![("HOSTFIRST_CUDA_DRIVER", wpath(&bin.join("nvcuda.dll")))];
    env.extend(more.iter().map(|(k, v)| (*k, v.to_string())));
    env
}

/// [`wine`] with an owned environment.
fn wine_env(w: &Win, exe: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    wine(w, exe, args, &env)
}

/// The CUDA paths of the DLL through nvcuda.dll (loaded with LoadLibraryExW, entry points by GetProcAddress),
/// against the stand-in driver: the census with NVML and without, a load, gathers and the DLPack stream handshake
/// on cuda:0, each leaving nothing live in the driver.
#[test]
fn cuda_through_nvcuda_dll_on_the_stand_in() {
    let Some(w) = win() else { return };
    let bin = cuda_bin(w);
    let c = |name: &str, extra: &[&str]| {
        compile_in(w, bin, &[&root().join("tests/c").join(format!("{name}.c"))], name, extra)
    };
    let census = c("test_cuda_census", &[]);
    for (nvml, contexts) in [("1", 0), ("0", 2)] {
        let env =
            stand_in_env(bin, &[("STAND_IN_DEVICES", "2"), ("STAND_IN_LEAK_REPORT", "1"), ("STAND_IN_NVML", nvml)]);
        let o = wine_env(w, &census, &[], &env);
        let err = text(&o.stderr);
        assert!(o.status.success(), "STAND_IN_NVML={nvml}: {err}");
        assert!(
            err.contains(&format!("0 device allocations (0 bytes), 0 pinned, 0 registrations, 0 streams, 0 events live; 0 queued operations; {contexts} primary contexts retained")),
            "the stand-in's exit report: {err}"
        );
    }
    let o = wine_env(
        w,
        &c("test_core", &[]),
        &[],
        &stand_in_env(bin, &[("STAND_IN_DEVICES", "2"), ("EXPECT_CUDA_STATUS", "AVAILABLE")]),
    );
    assert!(o.status.success(), "test_core on the stand-in: {}\n{}", text(&o.stdout), text(&o.stderr));
    // Beside the program but not named: never loaded (System32 only), so the census finds no driver.
    wine_ok(w, &c("test_core", &[]), &[], &[("STAND_IN_DEVICES", "2"), ("EXPECT_CUDA_STATUS", "LIBRARY_NOT_FOUND")]);
    let knobs = stand_in_env(bin, &[("STAND_IN_LEAK_REPORT", "1")]);
    for (name, args) in [
        ("test_load_job", vec![dir("cuda_load_job"), "cuda:0".to_string()]),
        ("test_load_bulk", vec![dir("cuda_load_bulk"), "cuda:0".to_string()]),
        ("test_gather_stream", vec![dir("cuda_gather_stream"), "cuda".to_string()]),
        ("test_handoff", vec![dir("cuda_handoff"), "cuda".to_string()]),
        ("test_writer", vec!["cuda".to_string(), dir("cuda_writer")]),
    ] {
        let exe = c(name, &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = wine_env(w, &exe, &args, &knobs);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{name} {args:?} on the stand-in: {}\n{err}", text(&o.stdout));
        assert!(err.contains("stand-in cuda: at exit:"), "{name}: no exit report from nvcuda.dll: {err}");
        assert_clean_exit_report(&err, name);
    }
}

/// A token file for the CLI: U16 tokens, and a second 2-D tensor.
fn token_file(name: &str) -> PathBuf {
    let n = 200_003usize;
    let tok: Vec<u8> = (0..n).flat_map(|i| ((i * 7919 + 13) as u16).to_le_bytes()).collect();
    let m: Vec<u8> = (0..64 * 33).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    let h = format!(
        r#"{{"__metadata__":{{"made":"windows test"}},"tokens":{{"dtype":"U16","shape":[{n}],"data_offsets":[0,{}]}},"w":{{"dtype":"F32","shape":[64,33],"data_offsets":[{},{}]}}}}"#,
        tok.len(),
        tok.len(),
        tok.len() + m.len()
    );
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend_from_slice(&tok);
    img.extend_from_slice(&m);
    let p = scratch(&format!("windows/{name}")).join("tokens.safetensors");
    std::fs::write(&p, img).unwrap();
    p
}

/// `devices` (Windows wording for the missing driver), `inspect` (the same JSON as on Linux, checksums
/// included), `put` (plain, copy-on-write, a row slice: the same FNV-1a as Linux, verified), `gather` (from the
/// file, prefaulted, from a host copy, prefetched: every batch checked).
#[test]
fn the_cli_under_wine_agrees_with_linux() {
    let Some(w) = win() else { return };
    let exe = w.pkg.join("bin/hostfirst.exe");

    let v = json(&wine_ok(w, &exe, &["devices", "--json"], &[]));
    assert_eq!(v["backends"][0]["status"], "available");
    assert_eq!(v["backends"][1]["status"], "library_not_found");
    let reason = v["backends"][1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("tried nvcuda.dll in System32") && reason.contains("HOSTFIRST_CUDA_DRIVER"),
        "Windows wording: {reason}"
    );
    assert!(!reason.contains("libcuda") && !reason.contains("PATH"), "never advises PATH: {reason}");
    let dev = &v["devices"][0];
    assert_eq!(dev["spec"], "cpu:0");
    let (total, free) = (dev["total_memory"].as_u64().unwrap(), dev["free_memory"].as_u64().unwrap());
    assert!(total > 64 << 20 && free <= total, "GlobalMemoryStatusEx: {total} {free}");
    let reads = v["reads"].as_str().unwrap();
    assert!(reads.starts_with("pread pool") && reads.contains("not Linux"), "{reads}");
    let v = json(&wine_ok(w, &exe, &["devices", "--json"], &[("HOSTFIRST_PLATFORMS", "cpu")]));
    assert_eq!(v["backends"][1]["status"], "hidden_by_env");

    let p = token_file("cli");
    let (lp, wp) = (p.to_str().unwrap().to_string(), wpath(&p));
    let strip_file = |mut v: serde_json::Value| {
        if let Some(o) = v.as_object_mut() {
            o.remove("file");
            // read_engine names the platform's file system (Windows detects none): it differs by design.
            o.remove("read_engine");
            for k in ["seconds", "gb_per_s", "puts", "best_seconds", "best_gb_per_s", "total_s", "p50_us", "p99_us"] {
                o.remove(k);
            }
        }
        v
    };
    let linux = json(&run_ok(&cli(), &["inspect", "--json", "--checksum", &lp], &[]));
    let windows = json(&wine_ok(w, &exe, &["inspect", "--json", "--checksum", &wp], &[]));
    let report = windows["read_engine"].as_str().unwrap_or_default().to_string();
    assert!(report.starts_with("file system not detected on this system: mapped"), "Windows read engine: {report}");
    assert_eq!(strip_file(windows), strip_file(linux), "inspect --json --checksum");

    for extra in [&[][..], &["--copy-on-write"][..], &["--rows", "100:90100"][..], &["--repeat", "3"][..]] {
        let mut args = vec!["put", "P", "tokens", "--device", "cpu", "--json"];
        args.extend_from_slice(extra);
        let on =
            |path: &str| args.iter().map(|a| if *a == "P" { path } else { a }).map(str::to_string).collect::<Vec<_>>();
        let la = on(&lp);
        let wa = on(&wp);
        let l = json(&run_ok(&cli(), &la.iter().map(String::as_str).collect::<Vec<_>>(), &[]));
        let wv = json(&wine_ok(w, &exe, &wa.iter().map(String::as_str).collect::<Vec<_>>(), &[]));
        assert_eq!(wv["verified"], true, "put {extra:?}: {wv}");
        for k in ["bytes", "fnv1a64", "device"] {
            assert_eq!(wv[k], l[k], "put {extra:?}: {k}");
        }
    }

    for extra in [&[][..], &["--prefault"][..], &["--from-host"][..], &["--depth", "3"][..]] {
        let mut a =
            vec!["gather", "P", "tokens", "--batch", "8", "--window", "257", "--device", "cpu", "--iters", "20"];
        a.extend_from_slice(extra);
        a.push("--json");
        let wa: Vec<&str> = a.iter().map(|x| if *x == "P" { wp.as_str() } else { x }).collect();
        let wv = json(&wine_ok(w, &exe, &wa, &[]));
        assert_eq!(wv["check"], "ok", "gather {extra:?}: {wv}");
        if extra == ["--prefault"] {
            assert_eq!(wv["prefault_populated"], true, "PrefetchVirtualMemory and a read per page: {wv}");
        }
    }
}

/// Builds a test-only C source of tests/windows as a DLL (`dll` true) or a program, into `out`.
fn build_windows_helper(w: &Win, source: &str, out: &Path, dll: bool) {
    let mut cmd = Command::new(&w.cc);
    if dll {
        cmd.arg("-shared");
    }
    let o = cmd
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-static-libgcc", "-o"])
        .arg(out)
        .arg(root().join("tests/windows").join(source))
        .output()
        .expect("run the mingw-w64 C compiler");
    assert!(o.status.success(), "{source} -> {}:\n{}", out.display(), text(&o.stderr));
}

/// DLL planting (issue 43): an nvcuda.dll and an nvml.dll planted in the current folder (a downloaded model's) and
/// in a folder on PATH are never loaded by `hostfirst.exe devices` nor by a plain `put` (which takes the census for
/// its default device): the driver comes from System32 only. The control, a LoadLibrary by bare name, does load
/// both plants, so the test sees a plant when one is loaded.
#[test]
fn a_dll_planted_in_the_current_folder_or_on_path_is_never_loaded() {
    let Some(w) = win() else { return };
    let top = scratch("windows/planted");
    let (app, model, on_path) = (top.join("app"), top.join("model"), top.join("on-path"));
    for d in [&app, &model, &on_path] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    for f in ["hostfirst.exe", "hostfirst.dll"] {
        std::fs::copy(w.pkg.join("bin").join(f), app.join(f)).unwrap();
    }
    for d in [&model, &on_path] {
        for name in ["nvcuda.dll", "nvml.dll"] {
            build_windows_helper(w, "planted_dll.c", &d.join(name), true);
        }
    }
    std::fs::copy(token_file("planted-src"), model.join("model.safetensors")).unwrap();
    let control = app.join("load_by_name.exe");
    build_windows_helper(w, "load_by_name.c", &control, false);
    let markers = || -> Vec<PathBuf> {
        [&model, &on_path]
            .iter()
            .flat_map(|d| ["nvcuda.dll.loaded", "nvml.dll.loaded"].map(|m| d.join(m)))
            .filter(|m| m.exists())
            .collect()
    };
    // Run from the model's folder, with the other folder on Wine's PATH.
    let run_in_model = |exe: &Path, args: &[&str]| {
        let mut cmd = Command::new(&w.wine);
        cmd.arg(exe).args(args).current_dir(&model).env("WINEDEBUG", "-all").env("WINEPATH", wpath(&on_path));
        for k in ["HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES", "HOSTFIRST_CUDA_DRIVER"] {
            cmd.env_remove(k);
        }
        run_to_files(cmd, &format!("{} {}", exe.display(), args.join(" ")))
    };
    let exe = app.join("hostfirst.exe");
    for args in [&["devices", "--json"][..], &["put", "model.safetensors", "tokens", "--json"][..]] {
        let o = run_in_model(&exe, args);
        assert!(o.status.success(), "hostfirst {args:?}: {}\n{}", text(&o.stdout), text(&o.stderr));
        assert_eq!(markers(), Vec::<PathBuf>::new(), "hostfirst {args:?} loaded a planted DLL");
        if args[0] == "devices" {
            let v = json(&text(&o.stdout));
            assert_eq!(v["backends"][1]["status"], "library_not_found", "{v}");
        } else {
            assert_eq!(json(&text(&o.stdout))["device"], "cpu:0");
        }
    }
    // The control: Windows' default search finds the plant in the current folder first, then the one on PATH.
    let o = run_in_model(&control, &["nvcuda.dll", "nvml.dll"]);
    assert_eq!(text(&o.stdout), "nvcuda.dll: loaded\nnvml.dll: loaded\n", "{}", text(&o.stderr));
    assert_eq!(markers(), vec![model.join("nvcuda.dll.loaded"), model.join("nvml.dll.loaded")]);
    for d in ["nvcuda.dll", "nvml.dll"] {
        std::fs::remove_file(model.join(d)).unwrap();
    }
    let o = run_in_model(&control, &["nvcuda.dll"]);
    assert_eq!(text(&o.stdout), "nvcuda.dll: loaded\n", "{}", text(&o.stderr));
    assert!(on_path.join("nvcuda.dll.loaded").exists(), "the plant on PATH is found by a search");
}

/// File names outside the ANSI code page (issue 43): é, Chinese and Cyrillic, in the file's name and in its
/// folder's. A copy of a token file under each name.
fn unicode_files() -> Vec<PathBuf> {
    let top = scratch("windows/unicode").join("données модели 数据");
    let _ = std::fs::remove_dir_all(&top);
    std::fs::create_dir_all(&top).unwrap();
    let src = token_file("unicode-src");
    ["café.safetensors", "模型.safetensors", "модель.safetensors", "naïve 模型 модель.safetensors"]
        .iter()
        .map(|n| {
            let p = top.join(n);
            std::fs::copy(&src, &p).unwrap();
            p
        })
        .collect()
}

/// Checks `exe inspect --json` and `exe put ... --json` on every name of [`unicode_files`], and `convert` to such
/// a name: the CLI reads its arguments as UTF-16 (wmain), so they reach the library as UTF-8.
fn check_unicode_paths(w: &Win, run: &dyn Fn(&[&str]) -> Output) {
    let files = unicode_files();
    for p in &files {
        let wp = wpath(p);
        let o = run(&["inspect", "--json", &wp]);
        assert!(o.status.success(), "inspect {wp}: {}", text(&o.stderr));
        let v = json(&text(&o.stdout));
        assert_eq!(v["file"], wp.as_str(), "the name comes back as given, in UTF-8");
        assert_eq!(v["tensors"].as_array().unwrap().len(), 2, "{v}");
        let o = run(&["put", &wp, "tokens", "--device", "cpu", "--json"]);
        assert!(o.status.success(), "put {wp}: {}", text(&o.stderr));
        assert_eq!(json(&text(&o.stdout))["verified"], true);
    }
    let out = files[0].with_file_name("выход 输出 é.safetensors");
    let _ = std::fs::remove_file(&out);
    let o = run(&["convert", &wpath(&files[1]), &wpath(&out)]);
    assert!(o.status.success(), "convert to {}: {}", out.display(), text(&o.stderr));
    assert!(out.is_file(), "convert wrote the file by its name: {}", out.display());
    let o = run(&["inspect", "--json", "--checksum", &wpath(&out)]);
    assert!(o.status.success(), "inspect {}: {}", out.display(), text(&o.stderr));
    let o2 = run(&["inspect", "--json", "--checksum", &wpath(&files[1])]);
    let sums = |v: serde_json::Value| -> Vec<(String, String)> {
        let t = v["tensors"].as_array().unwrap().iter();
        let mut v: Vec<(String, String)> =
            t.map(|t| (t["name"].as_str().unwrap().to_string(), t["fnv1a64"].as_str().unwrap().to_string())).collect();
        v.sort();
        v
    };
    assert_eq!(sums(json(&text(&o.stdout))), sums(json(&text(&o2.stdout))), "the same tensors");
    let _ = w;
}

/// The package's hostfirst.exe opens paths with characters outside the ANSI code page (issue 43).
#[test]
fn the_cli_opens_paths_named_in_any_script() {
    let Some(w) = win() else { return };
    let exe = w.pkg.join("bin/hostfirst.exe");
    check_unicode_paths(w, &|args| wine(w, &exe, args, &[("LC_ALL", "C.UTF-8")]));
}

/// `inspect` and `shard` assemble their output in memory (issue 43): the CLI imports no `tmpfile` (msvcrt's
/// makes its file in the root of the current drive, which Windows refuses to users who are not administrators;
/// Wine puts it elsewhere), and both work where no temporary file can be made (TMP and TEMP name a folder that
/// does not exist).
#[test]
fn inspect_and_shard_need_no_temporary_file() {
    let Some(w) = win() else { return };
    let exe = w.pkg.join("bin/hostfirst.exe");
    let o = Command::new("x86_64-w64-mingw32-objdump").arg("-p").arg(&exe).output().unwrap();
    let imports = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(imports.contains("hostfirst_file_open"), "objdump lists the CLI's imports");
    assert!(!imports.contains("tmpfile"), "hostfirst.exe imports tmpfile");
    let p = wpath(&token_file("no-tmp"));
    let missing = wpath(&scratch("windows/no-tmp").join("no such folder"));
    let env = [("TMP", missing.as_str()), ("TEMP", missing.as_str())];
    let v = json(&wine_ok(w, &exe, &["inspect", "--json", &p], &env));
    assert_eq!(v["tensors"].as_array().unwrap().len(), 2, "{v}");
    assert!(wine_ok(w, &exe, &["inspect", &p], &env).contains("metadata: 1 entry"));
    let v =
        json(&wine_ok(w, &exe, &["shard", &p, "--world", "1", "--rank", "0", "--rule", "tokens=0", "--json"], &env));
    assert_eq!(v["totals"]["tensors"], 2, "{v}");
}

/// Every malformed file of the corpus gets the same status from the Windows CLI as from the Linux one (and
/// nothing crashes: the exit status is 0 or 1, never a fault).
#[test]
fn the_corpus_gets_the_same_statuses_under_wine() {
    let Some(w) = win() else { return };
    let exe = w.pkg.join("bin/hostfirst.exe");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/corpus/safetensors"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "{} corpus files", files.len());
    // "hostfirst: <path>: <STATUS>: <message>" -> STATUS; "OK" for a success.
    let status = |o: &Output| -> String {
        if o.status.success() {
            return "OK".into();
        }
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        let e = text(&o.stderr);
        let rest = e.strip_prefix("hostfirst: ").unwrap_or_else(|| panic!("{e}"));
        // The path may hold ": " (Z:\...); the status is the first all-caps word after one.
        rest.split(": ")
            .find(|s| {
                s.starts_with(|c: char| c.is_ascii_uppercase())
                    && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .unwrap_or_else(|| panic!("no status in {e}"))
            .to_string()
    };
    let mut differ = Vec::new();
    std::thread::scope(|s| {
        let chunks: Vec<&[PathBuf]> = files.chunks(files.len().div_ceil(2)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let (exe, status) = (&exe, &status);
                s.spawn(move || {
                    let mut d = Vec::new();
                    for f in chunk {
                        let l = status(&run(&cli(), &["inspect", "--json", "--checksum", f.to_str().unwrap()], &[]));
                        let wo = wine(w, exe, &["inspect", "--json", "--checksum", &wpath(f)], &[]);
                        let wi = status(&wo);
                        if l != wi {
                            d.push(format!("{}: Linux {l}, Windows {wi} ({})", f.display(), text(&wo.stderr)));
                        }
                    }
                    d
                })
            })
            .collect();
        for h in handles {
            differ.extend(h.join().unwrap());
        }
    });
    assert!(differ.is_empty(), "statuses differ:\n{}", differ.join("\n"));
}

/// The zip as users take it: CMake's find_package (MinGW toolchain), pkg-config's flags, and the MSVC-format
/// import library (read here by the MinGW linker), each building examples-c/version.c, run under Wine with the
/// package's DLL.
#[test]
fn the_package_builds_programs_with_cmake_pkg_config_and_the_msvc_import_library() {
    let Some(w) = win() else { return };
    let pkg = &w.pkg;
    let work = scratch("windows/consumers");
    let run_dir = work.join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::copy(pkg.join("bin/hostfirst.dll"), run_dir.join("hostfirst.dll")).unwrap();
    let version = root().join("examples-c/version.c");
    let expect = format!("hostfirst {v} (header {v})", v = env!("CARGO_PKG_VERSION"));

    // pkg-config: relocatable flags from the unpacked tree.
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "hostfirst"])
        .env("PKG_CONFIG_PATH", pkg.join("lib/pkgconfig"))
        .env("PKG_CONFIG_LIBDIR", pkg.join("lib/pkgconfig"))
        .output()
        .expect("run pkg-config");
    assert!(pc.status.success(), "{}", text(&pc.stderr));
    let flags = text(&pc.stdout);
    let flags: Vec<&str> = flags.split_whitespace().collect();
    assert!(flags.contains(&"-lhostfirst"), "{flags:?}");
    let exe = run_dir.join("version_pc.exe");
    let o = Command::new(&w.cc)
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg(&version)
        .args(&flags)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "pkg-config build: {}", text(&o.stderr));
    assert!(wine_ok(w, &exe, &[], &[]).starts_with(&expect));

    // The MSVC-format import library (lld's /def output) read by the MinGW linker: it names hostfirst.dll.
    let exe = run_dir.join("version_lib.exe");
    let o = Command::new(&w.cc)
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg(format!("-I{}", pkg.join("include").display()))
        .arg(&version)
        .arg(pkg.join("lib/hostfirst.lib"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "hostfirst.lib: {}", text(&o.stderr));
    assert!(pe_imports(&exe).contains(&"hostfirst.dll".to_string()));
    assert!(wine_ok(w, &exe, &[], &[]).starts_with(&expect));

    // CMake: find_package(hostfirst <this version>) with the MinGW cross toolchain.
    if !crate::install::have_tool("cmake", "--version") {
        return;
    }
    let src = work.join("cmake-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.10)\nproject(hostfirst_windows_consumer C)\n\
             find_package(hostfirst {} REQUIRED)\nadd_executable(version_cmake \"{}\")\n\
             target_link_libraries(version_cmake PRIVATE hostfirst::hostfirst)\n",
            env!("CARGO_PKG_VERSION"),
            version.display()
        ),
    )
    .unwrap();
    let build = work.join("cmake-build");
    let _ = std::fs::remove_dir_all(&build);
    let o = Command::new("cmake")
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&build)
        .arg("-DCMAKE_SYSTEM_NAME=Windows")
        .arg(format!("-DCMAKE_C_COMPILER={}", w.cc))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", pkg.display()))
        .arg("-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=NEVER")
        .output()
        .unwrap();
    assert!(o.status.success(), "cmake configure:\n{}{}", text(&o.stdout), text(&o.stderr));
    let o = Command::new("cmake").arg("--build").arg(&build).output().unwrap();
    assert!(o.status.success(), "cmake build:\n{}{}", text(&o.stdout), text(&o.stderr));
    let exe = run_dir.join("version_cmake.exe");
    std::fs::copy(build.join("version_cmake.exe"), &exe).unwrap();
    assert!(wine_ok(w, &exe, &[], &[]).starts_with(&expect));
    // A version from another ABI line (the next major) is refused.
    let other_line = format!("{}.0", env!("CARGO_PKG_VERSION_MAJOR").parse::<u32>().unwrap() + 1);
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!("cmake_minimum_required(VERSION 3.10)\nproject(p C)\nfind_package(hostfirst {other_line} REQUIRED)\n"),
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&build);
    let o = Command::new("cmake")
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&build)
        .arg("-DCMAKE_SYSTEM_NAME=Windows")
        .arg(format!("-DCMAKE_C_COMPILER={}", w.cc))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", pkg.display()))
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "find_package(hostfirst {other_line}) must fail against {}",
        env!("CARGO_PKG_VERSION")
    );
}

/// The cp39-abi3-win_amd64 wheel: pip accepts it for Windows (installed with `--platform win_amd64 --target`), it
/// holds the package's DLL, CLI and native extension (a DLL importing only python3.dll, the stable ABI, and the C
/// runtime, exporting PyInit__native), and the CLI runs from the installed layout the way the `hostfirst` command
/// starts it (package directory on PATH). No Windows Python runs it here: the extension is never loaded.
#[test]
fn the_windows_wheel_installs_for_win_amd64_and_its_cli_runs() {
    let Some(w) = win() else { return };
    let Some(wheel) = std::env::var_os("HOSTFIRST_WINDOWS_WHEEL").map(PathBuf::from) else {
        assert!(!required(), "HOSTFIRST_WINDOWS_WHEEL is unset");
        return;
    };
    let name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(name, format!("hostfirst-{}-cp39-abi3-win_amd64.whl", env!("CARGO_PKG_VERSION")));
    let target = scratch("windows/wheel-target");
    let _ = std::fs::remove_dir_all(&target);
    let o = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index"])
        .args(["--platform", "win_amd64", "--only-binary=:all:", "--python-version", "3.11", "--target"])
        .arg(&target)
        .arg(&wheel)
        .output()
        .expect("run pip");
    assert!(o.status.success(), "pip install --platform win_amd64: {}", text(&o.stderr));
    let pkg = target.join("hostfirst");
    assert!(pkg.join("hostfirst.dll").is_file() && pkg.join("_lib.py").is_file());
    assert!(!pkg.join("bin/hostfirst").exists(), "no Linux CLI in the Windows wheel");
    let o =
        Command::new("x86_64-w64-mingw32-objdump").arg("-p").arg(pkg.join("_native.pyd")).output().expect("objdump");
    assert!(o.status.success(), "objdump -p _native.pyd: {}", text(&o.stderr));
    let dump = text(&o.stdout);
    let mut dlls: Vec<&str> = dump.lines().filter_map(|l| l.trim().strip_prefix("DLL Name: ")).collect();
    dlls.sort();
    assert_eq!(dlls, ["KERNEL32.dll", "msvcrt.dll", "python3.dll"], "the extension's imports");
    assert!(dump.contains("PyInit__native"), "the extension exports no PyInit__native");
    let same = |a: &Path, b: &Path| std::fs::read(a).unwrap() == std::fs::read(b).unwrap();
    assert!(same(&pkg.join("hostfirst.dll"), &w.pkg.join("bin/hostfirst.dll")), "the package's DLL");
    let exe = pkg.join("bin/hostfirst.exe");
    let mut cmd = Command::new(&w.wine);
    cmd.arg(&exe).args(["devices", "--json"]).env("WINEDEBUG", "-all").env("WINEPATH", wpath(&pkg));
    cmd.env_remove("HOSTFIRST_PLATFORMS").env_remove("CUDA_VISIBLE_DEVICES").env_remove("HOSTFIRST_DEFAULT_DEVICE");
    let o = run_to_files(cmd, "the wheel's hostfirst.exe");
    assert!(o.status.success(), "the wheel's CLI: {}", text(&o.stderr));
    assert_eq!(json(&text(&o.stdout))["devices"][0]["spec"], "cpu:0");
    // Paths in any script (issue 43), as the `hostfirst` command passes them (Python's subprocess: UTF-16).
    check_unicode_paths(w, &|args| {
        let mut cmd = Command::new(&w.wine);
        cmd.arg(&exe).args(args).env("WINEDEBUG", "-all").env("WINEPATH", wpath(&pkg)).env("LC_ALL", "C.UTF-8");
        cmd.env_remove("HOSTFIRST_PLATFORMS").env_remove("CUDA_VISIBLE_DEVICES").env_remove("HOSTFIRST_DEFAULT_DEVICE");
        run_to_files(cmd, "the wheel's hostfirst.exe")
    });
}

// ---- the writer and token files (merged from main after the port) -------------------------------------------

/// tests/c/test_writer.c under Wine: `api` (every declaration kind and bad input; the descriptor writer refused
/// with `UNSUPPORTED`; a save over a file a view maps refused with `PERMISSION_DENIED`, target and view intact),
/// its file byte for byte the `safetensors` crate's; then saves of new generations over a file and over a set of
/// part files (each rename replacing the old file), and a kill (`TerminateProcess`) at every kill point of both:
/// the target is always the old save or the complete new one, and the next save removes what a killed one left.
#[test]
fn c_writer_saves_replaces_and_survives_kills() {
    let Some(w) = win() else { return };
    let exe = c_test(w, "test_writer");
    let api = crate::writer::fresh("windows-api");
    wine_ok(w, &exe, &["api", &wpath(&api)], &[]);
    let got = std::fs::read(api.join("api.safetensors")).unwrap();
    assert!(got == crate::writer::api_expected(), "the Windows writer's file differs from the crate's serializer");
    assert_eq!(crate::writer::staged(&api), Vec::<String>::new());

    let mib = 2;
    for (name, split, most) in [("model.safetensors", 0u64, 1), ("model.safetensors.index.json", 1 << 20, 5)] {
        let dir = crate::writer::fresh(&format!("windows-kill-{split}"));
        let target = dir.join(name);
        let save = |g: u32, kill_at: usize| {
            let (gs, ms, ss, at) = (g.to_string(), mib.to_string(), split.to_string(), kill_at.to_string());
            let o = wine(w, &exe, &["gen", &wpath(&target), &gs, &ms, &ss, "0"], &[("HOSTFIRST_WRITER_KILL_AT", &at)]);
            let killed = o.status.code() == Some(137);
            assert!(killed || o.status.success(), "{name} generation {g} (kill at {kill_at}): {}", text(&o.stderr));
            killed
        };
        for g in 1..=2 {
            assert!(!save(g, 0));
            assert_eq!(crate::writer::generation_of(&target, mib), g, "{name}: a save replaces the old one");
            assert_eq!(crate::writer::staged(&dir), Vec::<String>::new(), "{name}");
        }
        let mut current = 2;
        let mut points = 0;
        for k in 1..=200 {
            let g = 100 + k as u32;
            let killed = save(g, k);
            let now = crate::writer::generation_of(&target, mib);
            assert!(now == current || now == g, "{name}, kill point {k}: generation {now}, neither {current} nor {g}");
            current = now;
            if !killed {
                points = k - 1;
                break;
            }
            assert!(
                crate::writer::staged(&dir).len() <= most,
                "{name}, kill point {k}: {:?}",
                crate::writer::staged(&dir)
            );
        }
        assert!(points >= 8, "{name}: only {points} kill points");
        assert!(!save(9999, 0));
        assert_eq!(crate::writer::generation_of(&target, mib), 9999);
        assert_eq!(crate::writer::staged(&dir), Vec::<String>::new(), "{name}: the next save removes what was left");
    }
}

/// A full file system and a read-only one (small tmpfs mounts, as tests/it/writer.rs makes them) under Wine: the
/// Windows error codes Wine gives (disk full, access denied or write protect) become `NO_SPACE` and
/// `PERMISSION_DENIED`, the old file stays, no staged file is left. Skipped (saying why) where this process
/// cannot mount.
#[test]
fn writer_refusals_under_wine() {
    let Some(w) = win() else { return };
    let exe = c_test(w, "test_writer");
    let m = match crate::writer::Mount::tmpfs("windows-nospace", "size=1m") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIPPED: writer_refusals_under_wine needs a small file system and cannot make one: {why}");
            return;
        }
    };
    let target = m.0.join("model.safetensors");
    std::fs::write(&target, b"the old, small file").unwrap();
    let out = wine_ok(w, &exe, &["refused", &wpath(&target), "NO_SPACE"], &[]);
    // Windows reserves the blocks first (FileAllocationInfo: the bytes needed and free); under Wine 8 the
    // reservation does not meet the full disk and the first write does (ERROR_DISK_FULL, 112). Either way NO_SPACE.
    assert!(
        out.contains("needs 4194304 bytes") && out.contains("bytes free") || out.contains("(os error 112)"),
        "{out}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"the old, small file");
    let fresh_target = m.0.join("new.safetensors");
    wine_ok(w, &exe, &["refused", &wpath(&fresh_target), "NO_SPACE"], &[]);
    assert!(!fresh_target.exists());

    let out = Command::new("mount").args(["-o", "remount,ro"]).arg(&m.0).output().unwrap();
    assert!(out.status.success(), "remount ro: {}", text(&out.stderr));
    wine_ok(w, &exe, &["refused", &wpath(&target), "PERMISSION_DENIED"], &[]);
    assert_eq!(std::fs::read(&target).unwrap(), b"the old, small file");
}

/// tests/c/test_tokens.c under Wine: every token format written by the program, opened, read value for value,
/// sliced, put and gathered; the hostile variants with their exact statuses.
#[test]
fn c_token_files() {
    let Some(w) = win() else { return };
    let d = crate::writer::fresh("windows-tokens");
    let out = wine_ok(w, &c_test(w, "test_tokens"), &[&wpath(&d)], &[]);
    assert!(out.contains("test_tokens: ok"), "{out}");
}

/// The CLI on token files (an `.npy`, an llm.c shard, a Megatron dataset, a headerless file with `--raw`):
/// `inspect --checksum` and `put` agree with the Linux CLI, `gather` checks its batches, `convert` writes the
/// same bytes as the Linux CLI's `convert` (also split into part files), a headerless file without `--raw` gets
/// the same status and hint; and `convert` of a file onto itself, which Linux does (the views keep the old
/// file), is refused on Windows with `PERMISSION_DENIED` (a mapped file cannot be replaced), the file unchanged.
#[test]
fn the_cli_on_token_files_and_convert_agrees_with_linux() {
    let Some(w) = win() else { return };
    let exe = w.pkg.join("bin/hostfirst.exe");
    let strip = |mut v: serde_json::Value| {
        if let Some(o) = v.as_object_mut() {
            // read_engine names the platform's file system (Windows detects none): it differs by design.
            for k in ["file", "input", "output", "seconds", "gb_per_s", "best_seconds", "best_gb_per_s", "read_engine"]
            {
                o.remove(k);
            }
        }
        v
    };
    let files = crate::cli_tokens::files("windows");
    let out_dir = crate::writer::fresh("windows-convert");
    for (i, f) in files.iter().enumerate() {
        let (lp, wp) = (f.path.to_str().unwrap().to_string(), wpath(&f.path));
        let on = |args: &[&str], p: &str| -> Vec<String> {
            f.args(args).iter().map(|a| if *a == "P" { p.to_string() } else { a.to_string() }).collect()
        };
        let linux = |args: &[&str]| {
            let a = on(args, &lp);
            run_ok(&cli(), &a.iter().map(String::as_str).collect::<Vec<_>>(), &[])
        };
        let windows = |args: &[&str]| {
            let a = on(args, &wp);
            wine_ok(w, &exe, &a.iter().map(String::as_str).collect::<Vec<_>>(), &[])
        };
        let args = ["inspect", "--json", "--checksum", "P"];
        assert_eq!(strip(json(&windows(&args))), strip(json(&linux(&args))), "{} inspect", f.format);
        let (tensor, dtype, _, bytes) = &f.tensors[0];
        let args = ["put", "P", tensor, "--device", "cpu", "--json"];
        let wv = json(&windows(&args));
        assert_eq!(wv["verified"], true, "{} put: {wv}", f.format);
        assert_eq!(wv["fnv1a64"], json(&linux(&args))["fnv1a64"], "{} put", f.format);
        assert_eq!(wv["fnv1a64"].as_str(), Some(crate::cli_tokens::fnv(bytes).as_str()), "{} put", f.format);
        if *dtype == "U16" {
            let args = ["gather", "P", tensor, "--batch", "4", "--window", "16", "--iters", "3", "--json"];
            assert_eq!(json(&windows(&args))["check"], "ok", "{} gather", f.format);
        }
        // convert (which takes no --raw): the same bytes from both CLIs, one file and part files.
        for part_mib in if f.raw.is_none() { &["0", "1"][..] } else { &[][..] } {
            let name = |os: &str| format!("{i}-{os}-{part_mib}.safetensors");
            let (lo, wo) = (out_dir.join(name("linux")), out_dir.join(name("windows")));
            run_ok(&cli(), &["convert", &lp, lo.to_str().unwrap(), "--max-part-mib", part_mib], &[]);
            wine_ok(w, &exe, &["convert", &wp, &wpath(&wo), "--max-part-mib", part_mib], &[]);
            assert!(std::fs::read(&wo).unwrap() == std::fs::read(&lo).unwrap(), "{} convert", f.format);
        }
    }
    assert_eq!(crate::writer::staged(&out_dir), Vec::<String>::new());

    // A headerless file without --raw: the same status and command-line hint as on Linux.
    let raw = files.iter().find(|f| f.raw.is_some()).unwrap();
    let l = run(&cli(), &["inspect", raw.path.to_str().unwrap()], &[]);
    let o = wine(w, &exe, &["inspect", &wpath(&raw.path)], &[]);
    assert_eq!((o.status.code(), l.status.code()), (Some(1), Some(1)));
    let (we, le) = (text(&o.stderr), String::from_utf8_lossy(&l.stderr).to_string());
    for needle in ["NOT_SAFETENSORS", "from the command line: a headerless file opens with --raw"] {
        assert!(we.contains(needle) && le.contains(needle), "{needle}:\nWindows: {we}\nLinux: {le}");
    }

    // convert onto itself: Linux replaces the file; Windows refuses to replace a file its views map.
    let src = out_dir.join("0-linux-0.safetensors");
    let before = std::fs::read(&src).unwrap();
    let o = wine(w, &exe, &["convert", &wpath(&src), &wpath(&src)], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("PERMISSION_DENIED") && err.contains("open or mapped by a reader"), "{err}");
    assert!(std::fs::read(&src).unwrap() == before, "the file is unchanged");
    assert_eq!(crate::writer::staged(&out_dir), Vec::<String>::new());
    run_ok(&cli(), &["convert", src.to_str().unwrap(), src.to_str().unwrap()], &[]);
}

// ---- release packaging: version resources, licence texts, the wheel's metadata (issue 43) ------------------------

/// The version resource of a PE file as Windows reads it (tests/windows/file_version.c: GetFileVersionInfoW and
/// VerQueryValueW under Wine), as `key=value` pairs; None when the file has none.
fn version_resource(w: &Win, file: &Path) -> Option<Vec<(String, String)>> {
    static READER: OnceLock<PathBuf> = OnceLock::new();
    let reader = READER.get_or_init(|| {
        let exe = scratch("windows/file-version").join("file_version.exe");
        let out = Command::new(&w.cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .arg(root().join("tests/windows/file_version.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-lversion")
            .output()
            .expect("run the mingw-w64 C compiler");
        assert!(out.status.success(), "file_version.c: {}", text(&out.stderr));
        exe
    });
    let o = wine(w, reader, &[&wpath(file)], &[]);
    match o.status.code() {
        Some(0) => {}
        Some(1) => return None,
        _ => panic!("file_version {} failed ({}): {}", file.display(), o.status, text(&o.stderr)),
    }
    Some(
        text(&o.stdout)
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("file_version printed {l:?}"));
                (k.to_string(), v.to_string())
            })
            .collect(),
    )
}

/// hostfirst.dll (the package's and the test build's) and hostfirst.exe carry a version resource with the
/// crate's version, their own file names and types, and the licence (packaging/windows/version.rc).
#[test]
fn the_dll_and_the_exe_carry_the_crates_version() {
    let Some(w) = win() else { return };
    let numbers = format!(
        "{}.{}.{}.0",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH")
    );
    for (file, name, file_type) in [
        (w.pkg.join("bin/hostfirst.dll"), "hostfirst.dll", "2"),
        (w.bin.join("hostfirst.dll"), "hostfirst.dll", "2"),
        (w.pkg.join("bin/hostfirst.exe"), "hostfirst.exe", "1"),
    ] {
        let got = version_resource(w, &file).unwrap_or_else(|| panic!("{} has no version resource", file.display()));
        let get = |k: &str| {
            got.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("{k}: {got:?}"))
        };
        let what = file.display();
        assert_eq!(get("fixed"), numbers, "{what}");
        assert_eq!(get("product"), numbers, "{what}");
        assert_eq!(get("type"), file_type, "{what}");
        assert_eq!(get("FileVersion"), env!("CARGO_PKG_VERSION"), "{what}");
        assert_eq!(get("ProductVersion"), env!("CARGO_PKG_VERSION"), "{what}");
        assert_eq!(get("ProductName"), "hostfirst", "{what}");
        assert_eq!(get("OriginalFilename"), name, "{what}");
        assert!(get("LegalCopyright").ends_with("MIT OR Apache-2.0."), "{what}: {got:?}");
    }
    // The reader answers None for a DLL without a version resource (tests/windows/fake_python.c), so the checks
    // above can fail.
    let bare = w.bin.join("no_version.dll");
    let out = Command::new(&w.cc)
        .args(["-shared", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bare)
        .arg(root().join("tests/windows/fake_python.c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "no_version.dll: {}", text(&out.stderr));
    assert_eq!(version_resource(w, &bare), None);
}

/// The zip carries both licence texts at its top, as the repository has them.
#[test]
fn the_zip_carries_the_licence_texts() {
    let Some(w) = win() else { return };
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let packed = std::fs::read(w.pkg.join(f)).unwrap_or_else(|e| panic!("{f} is not in the zip: {e}"));
        assert!(packed == std::fs::read(root().join(f)).unwrap(), "the zip's {f} differs from the repository's");
    }
}

/// The Windows wheel's metadata: the Windows classifier (not Linux's), the licence expression, and both texts
/// in .dist-info/licenses/.
#[test]
fn the_windows_wheel_has_windows_metadata_and_the_licences() {
    let Some(_) = win() else { return };
    let Some(wheel) = std::env::var_os("HOSTFIRST_WINDOWS_WHEEL").map(PathBuf::from) else {
        assert!(!required(), "HOSTFIRST_WINDOWS_WHEEL is unset");
        return;
    };
    let dir = scratch("windows/wheel-unpacked");
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new("python3").args(["-m", "zipfile", "-e"]).arg(&wheel).arg(&dir).output().unwrap();
    assert!(o.status.success(), "unzipping the wheel: {}", text(&o.stderr));
    let info = dir.join(format!("hostfirst-{}.dist-info", env!("CARGO_PKG_VERSION")));
    let meta = std::fs::read_to_string(info.join("METADATA")).unwrap();
    let systems: Vec<&str> = meta.lines().filter(|l| l.starts_with("Classifier: Operating System ::")).collect();
    assert_eq!(systems, ["Classifier: Operating System :: Microsoft :: Windows"], "{meta}");
    assert!(meta.lines().any(|l| l == "License-Expression: MIT OR Apache-2.0"), "{meta}");
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let packed = std::fs::read(info.join("licenses").join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(packed == std::fs::read(root().join(f)).unwrap(), "the wheel's {f} differs from the repository's");
    }
}
