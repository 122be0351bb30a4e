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
    assert!(out.contains("cpu: AVAILABLE"), "{out}");
    assert!(
        out.contains("SCOPE_MISMATCH") || out.contains("not the innermost") || out.contains("not on this thread"),
        "{out}"
    );
}

/// The README's checkout build line, run exactly as written (from a directory that has the repository's
/// `include/` and `target/` where the repository root has them) after a plain `cargo build --release`: the
/// program must link, find the library at run time (rpath + the SONAME link build.rs makes) and succeed.
#[test]
fn readme_checkout_build_line_works_after_cargo_build_release() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().map(str::trim).filter(|l| l.starts_with("cc -Iinclude app.c")).collect();
    assert_eq!(lines.len(), 1, "README.md should have one checkout build line 'cc -Iinclude app.c ...': {lines:?}");
    let line = lines[0];

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo).current_dir(root()).args(["build", "--release", "--quiet"]).output();
    let out = out.expect("run cargo build --release");
    assert!(out.status.success(), "cargo build --release: {}", String::from_utf8_lossy(&out.stderr));

    // A stand-in for the repository root: app.c here, include/ and target/ linked to the real ones.
    let dir = scratch("readme_line");
    let target = lib_dir().parent().expect("target dir").to_path_buf();
    for (name, to) in [("include", root().join("include")), ("target", target)] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&to, &link).unwrap();
    }
    let _ = std::fs::remove_file(dir.join("app"));
    let start = readme.find("```c\n").expect("a C block in README.md") + 5;
    let end = start + readme[start..].find("```").expect("closed block");
    std::fs::write(dir.join("app.c"), &readme[start..end]).unwrap();

    let mut sh = std::process::Command::new("sh");
    sh.current_dir(&dir).arg("-c").arg(line).env("PWD", &dir).env_remove("LD_LIBRARY_PATH");
    let out = sh.output().expect("run sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "`{line}` failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cpu: AVAILABLE"), "{stdout}");
}
