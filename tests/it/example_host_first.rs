//! examples-c/host_first.c (the README's loading example) builds with -Werror and runs on a token file.

use crate::common::*;

#[test]
fn host_first_example_runs() {
    let bin = compile_c(&[&root().join("examples-c/host_first.c")], "host_first", &[]);
    let out = run_ok(&bin, &[root().join("tests/fixtures/tokens.safetensors").to_str().unwrap(), "tokens"], &[]);
    assert!(out.contains("RSS after open") && out.contains("tensor 'tokens': U16 [4096]"), "{out}");
    assert!(out.contains("copied rows 0..1024 (2048 bytes) with pread"), "{out}");
    let bad = run(&bin, &["/nonexistent.safetensors"], &[]);
    assert_eq!(bad.status.code(), Some(1));
}
