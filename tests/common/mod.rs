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
        link_soname(&dir);
        dir
    })
    .clone()
}

/// Programs linked against a library with a versioned SONAME (build.rs) ask the loader for
/// `libhostfirst.so.<soversion>`, not `libhostfirst.so`: put that name beside the built library, as an
/// installed tree has it (docs/PACKAGING.md).
fn link_soname(dir: &Path) {
    let Some(soname) = option_env!("HOSTFIRST_SONAME") else { return };
    let link = dir.join(soname);
    if std::fs::symlink_metadata(&link).is_ok() {
        return;
    }
    #[cfg(unix)]
    {
        let tmp = dir.join(format!("{soname}.tmp{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink("libhostfirst.so", &tmp).expect("create the SONAME link");
        std::fs::rename(&tmp, &link).expect("create the SONAME link");
    }
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
pub fn compile_c(sources: &[&Path], out_name: &str, extra: &[&str]) -> PathBuf {
    let out = scratch("bin").join(out_name);
    let lib = lib_dir();
    let mut cmd = Command::new(cc());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(format!("-I{}", root().join("tests/c").display()))
        .args(feature_flags())
        .args(extra)
        .args(sources)
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhostfirst", "-lpthread", "-lm"]);
    check(cmd.output().expect("run the C compiler"), &format!("compiling {out_name}"));
    out
}

/// Compiles `tests/c/<name>.c` (with tests/c/check.h) into an executable.
pub fn compile_c_test(name: &str) -> PathBuf {
    let src = root().join("tests/c").join(format!("{name}.c"));
    compile_c(&[&src], name, &[])
}

/// Runs a program with extra environment variables (and removes those given as `None`).
pub fn run(bin: &Path, args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let mut cmd = Command::new(bin);
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
    if let Ok(w) = std::env::var("HOSTFIRST_TEST_WRAPPER") {
        let mut parts = w.split_whitespace();
        if let Some(first) = parts.next() {
            let mut wrapped = Command::new(first);
            wrapped.args(parts).arg(bin).args(args);
            for (k, v) in cmd.get_envs() {
                match v {
                    Some(v) => wrapped.env(k, v),
                    None => wrapped.env_remove(k),
                };
            }
            return wrapped.output().expect("run wrapped program");
        }
    }
    cmd.output().expect("run program")
}

/// Runs and asserts exit status 0; returns stdout.
pub fn run_ok(bin: &Path, args: &[&str], env: &[(&str, Option<&str>)]) -> String {
    let out = check(run(bin, args, env), &format!("{} {}", bin.display(), args.join(" ")));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Builds the `hostfirst` CLI from examples-c/cli/*.c (once per test binary) and returns its path.
pub fn cli() -> PathBuf {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        assert!(have_cc(), "no C compiler ('{}')", cc());
        let dir = root().join("examples-c/cli");
        let mut srcs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "c"))
            .collect();
        srcs.sort();
        let refs: Vec<&Path> = srcs.iter().map(|p| p.as_path()).collect();
        compile_c(&refs, "hostfirst", &[&format!("-I{}", dir.display())])
    })
    .clone()
}

/// Parses a JSON document (the CLI's --json output).
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{text}"))
}
