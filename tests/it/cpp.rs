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

/// The wrappers' CUDA paths (puts, stream handshake, DLPack on kDLCUDA, resident cache release, a gather and a
/// load onto cuda:0) against the stand-in driver: no real GPU involved.
#[test]
fn cpp_raii_wrappers_on_the_stand_in() {
    let out = compile_cpp("tests/cpp/test_hpp.cpp", "test_hpp_cuda");
    run_ok_with_stand_in(&out, &[root().join("tests/fixtures").to_str().unwrap(), "cuda"], &[]);
}

#[test]
fn cpp_example_builds_and_runs() {
    let out = compile_cpp("examples-c/cpp_example.cpp", "cpp_example");
    let tokens = root().join("tests/fixtures/tokens.safetensors");
    let text = run_ok(&out, &[tokens.to_str().unwrap()], &[]);
    assert!(text.contains("tokens: U16 [ 4096 ], 8192 bytes"), "{text}");
    assert!(text.contains("dlpack 1.1: device 1, code 1 bits 16, read-only yes"), "{text}");
    assert!(text.contains("default: cpu:0 (SCOPE)"), "{text}");
    assert!(text.contains("plan: tokens -> host\n"), "{text}");
    assert!(text.contains("warning: rule 1 '*=default' places no tensor"), "{text}");
    assert!(text.contains("loaded 1 tensors; tokens is a host view"), "{text}");
    // The batch's first row is the 8 tokens of the file at the offset it printed.
    let line = text.lines().find(|l| l.starts_with("batch [4, 8] on cpu:0; row 0 from offset ")).expect(&text);
    let (offset, row) = line["batch [4, 8] on cpu:0; row 0 from offset ".len()..].split_once(':').unwrap();
    let offset: usize = offset.parse().unwrap();
    let bytes = std::fs::read(&tokens).unwrap();
    let data = &bytes[8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize..];
    let want: Vec<String> =
        (offset..offset + 8).map(|i| u16::from_le_bytes([data[2 * i], data[2 * i + 1]]).to_string()).collect();
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), want, "{text}");
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

/// Removes `/* ... */` and `// ...` comments, so a name counts only where the code uses it.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |end| &after[end + 2..]);
        } else if rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |end| &rest[end..]);
        } else if rest.starts_with('"') {
            // a string literal: copied as is (it may hold "//")
            let end = rest[1..].find('"').map_or(rest.len(), |e| e + 2);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Every `hostfirst_*` identifier directly followed by `(` (a declaration or a call).
fn function_names(code: &str) -> std::collections::BTreeSet<String> {
    let bytes = code.as_bytes();
    let mut names = std::collections::BTreeSet::new();
    let mut i = 0;
    while let Some(found) = code[i..].find("hostfirst_") {
        let start = i + found;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let boundary = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if boundary && bytes.get(end) == Some(&b'(') {
            names.insert(code[start..end].to_string());
        }
        i = end;
    }
    names
}

/// Every identifier of the code (C-style), to see whether a function is used (called or passed).
fn identifiers(code: &str) -> std::collections::BTreeSet<&str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect()
}

/// The C++ header cannot fall behind the C API: every exported `hostfirst_*` function of hostfirst.h (but the
/// `hostfirst__test_*` hooks and [`NOT_FOR_CPP`]) is used by the code of hostfirst.hpp (a mention in a comment
/// does not count).
/// C functions with no C++ wrapper, and why: the capsule destructor is for Python bindings without a compiled
/// extension (ctypes, cffi); a C++ extension module makes its capsules with its own destructor.
const NOT_FOR_CPP: &[&str] = &["hostfirst_dlpack_capsule_destructor"];

#[test]
fn cpp_header_wraps_every_c_function() {
    let c_header = std::fs::read_to_string(root().join("include/hostfirst.h")).unwrap();
    let hpp = std::fs::read_to_string(root().join("include/hostfirst.hpp")).unwrap();
    let exported: Vec<String> = function_names(&strip_comments(&c_header))
        .into_iter()
        .filter(|n| !n.starts_with("hostfirst__test_") && !NOT_FOR_CPP.contains(&n.as_str()))
        .collect();
    assert!(exported.len() > 100, "parsed only {} functions from hostfirst.h", exported.len());
    let hpp_code = strip_comments(&hpp);
    let used = identifiers(&hpp_code);
    let missing: Vec<&String> = exported.iter().filter(|n| !used.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "include/hostfirst.hpp does not wrap {} C function(s): {missing:#?}", missing.len());
}

#[test]
fn cpp_coverage_check_ignores_comments() {
    let code = strip_comments("/* hostfirst_a(x) */ int hostfirst_b(void); // hostfirst_c()\nf(\"//\", hostfirst_d);");
    assert_eq!(function_names(&code).into_iter().collect::<Vec<_>>(), ["hostfirst_b"]);
    let used = identifiers(&code);
    assert!(used.contains("hostfirst_d") && !used.contains("hostfirst_a") && !used.contains("hostfirst_c"));
}

/// The README's C++ snippet compiles with the project's flags and runs on the token fixture.
#[test]
fn cpp_readme_snippet_builds_and_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let from = readme.find("C++ (`include/hostfirst.hpp`").expect("the README's C++ section");
    let block = &readme[from..];
    let start = block.find("```cpp\n").expect("a ```cpp block") + "```cpp\n".len();
    let snippet = &block[start..start + block[start..].find("```").unwrap()];
    let src = scratch("cpp_readme").join("readme_snippet.cpp");
    std::fs::write(
        &src,
        format!(
            "#include <cstdio>\n#include <vector>\n#include <unistd.h>\n#include \"hostfirst.hpp\"\n\
             int main(int argc, char **argv) {{\n    if (argc < 2 || chdir(argv[1]) != 0) return 2;\n    try {{\n\
             {snippet}\n        std::printf(\"batch %llu bytes\\n\", static_cast<unsigned long long>(batch.nbytes()));\n\
             }} catch (const hostfirst::error &e) {{\n        std::fprintf(stderr, \"%s\\n\", e.what());\n        \
             return 1;\n    }}\n    return 0;\n}}\n"
        ),
    )
    .unwrap();
    let out = compile_cpp(src.to_str().unwrap(), "readme_snippet");
    let text = run_ok(&out, &[root().join("tests/fixtures").to_str().unwrap()], &[]);
    assert!(text.contains("rule 1 '*=default' places no tensor"), "{text}");
    assert!(text.contains("batch 4096 bytes"), "{text}");
}
