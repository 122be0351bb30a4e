//! The README's first C example ("C in 20 lines") is compiled with -Werror straight out of README.md and run.

use crate::common::*;

#[test]
fn readme_c_example_compiles_and_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("a C block in README.md") + 5;
    let end = start + readme[start..].find("```").expect("closed block");
    let src = scratch("readme").join("readme_example.c");
    std::fs::write(&src, &readme[start..end]).unwrap();
    let bin = compile_c(&[&src], "readme_example", &[]);
    let out = run_ok(&bin, &[], &[]);
    assert!(out.contains("cpu: available"), "{out}");
    assert!(
        out.contains("SCOPE_MISMATCH") || out.contains("not the innermost") || out.contains("not on this thread"),
        "{out}"
    );
}
