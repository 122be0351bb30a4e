//! include/hostfirst.hpp: compiled as C++17 with -Wall -Wextra -Werror, linked and run.

mod common;
use common::*;
use std::process::Command;

#[test]
fn cpp_raii_wrappers() {
    assert!(have_cc(), "no C compiler");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let lib = lib_dir();
    let out = scratch("bin").join("test_hpp");
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-g", "-pthread"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(root().join("tests/cpp/test_hpp.cpp"))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lhostfirst")
        .output()
        .expect("run the C++ compiler");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    run_ok(&out, &[root().join("tests/fixtures").to_str().unwrap()], &[]);
}

#[test]
fn cpp_example_builds_and_runs() {
    assert!(have_cc(), "no C compiler");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let lib = lib_dir();
    let out = scratch("bin").join("cpp_example");
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(root().join("examples-c/cpp_example.cpp"))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lhostfirst")
        .output()
        .expect("run the C++ compiler");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let tokens = root().join("tests/fixtures/tokens.safetensors");
    let text = run_ok(&out, &[tokens.to_str().unwrap()], &[]);
    assert!(text.contains("tokens: U16 [ 4096 ], 8192 bytes"), "{text}");
    assert!(text.contains("dlpack 1.1: device 1, code 1 bits 16, read-only yes"), "{text}");
    assert!(text.contains("default: cpu:0 (scope)"), "{text}");
}
