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

/// Before C++17 the header stops with one clear message (no cryptic `std::exchange` error after it).
#[test]
fn cpp_header_before_cpp17_says_cpp17_is_required() {
    assert!(have_cc(), "no C compiler");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let src = scratch("cpp_std").join("uses_hpp.cpp");
    std::fs::write(&src, "#include \"hostfirst.hpp\"\nint main() { return 0; }\n").unwrap();
    for std in ["c++11", "c++14", "c++17"] {
        let out = Command::new(&cxx)
            .args([&format!("-std={std}"), "-Wall", "-Wextra", "-Wpedantic", "-Wundef", "-Werror", "-fsyntax-only"])
            .arg(format!("-I{}", root().join("include").display()))
            .arg(&src)
            .output()
            .expect("run the C++ compiler");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if std == "c++17" {
            assert!(out.status.success(), "{std}: {stderr}");
            continue;
        }
        assert!(!out.status.success(), "{std}: the header compiled");
        assert!(stderr.contains("hostfirst.hpp requires C++17 or later"), "{std}: {stderr}");
        assert_eq!(stderr.matches("error:").count(), 1, "{std}: only the #error, nothing after it:\n{stderr}");
    }
}
