//! include/hostfirst.hpp: compiled as C++17 with -Wall -Wextra -Wpedantic -Werror, linked and run.

use crate::common::*;
use std::path::PathBuf;
use std::process::Command;

/// Compiles one C++ source against the header and libhostfirst; returns the executable.
fn compile_cpp(src: &str, out_name: &str) -> PathBuf {
    assert!(have_cc(), "no C compiler");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let lib = lib_dir();
    let out = scratch("bin").join(out_name);
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-g", "-pthread"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(root().join(src))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lhostfirst")
        .output()
        .expect("run the C++ compiler");
    assert!(status.status.success(), "{src}: {}", String::from_utf8_lossy(&status.stderr));
    out
}

#[test]
fn cpp_raii_wrappers() {
    let out = compile_cpp("tests/cpp/test_hpp.cpp", "test_hpp");
    run_ok(&out, &[root().join("tests/fixtures").to_str().unwrap()], &[]);
}

#[test]
fn cpp_example_builds_and_runs() {
    let out = compile_cpp("examples-c/cpp_example.cpp", "cpp_example");
    let tokens = root().join("tests/fixtures/tokens.safetensors");
    let text = run_ok(&out, &[tokens.to_str().unwrap()], &[]);
    assert!(text.contains("tokens: U16 [ 4096 ], 8192 bytes"), "{text}");
    assert!(text.contains("dlpack 1.1: device 1, code 1 bits 16, read-only yes"), "{text}");
    assert!(text.contains("default: cpu:0 (scope)"), "{text}");
}
