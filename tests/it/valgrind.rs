//! The valgrind pass: every test that runs a C or C++ program (tests/c, the examples, the C++ header test, the
//! `hostfirst` CLI) runs again with those programs under valgrind memcheck (`--error-exitcode=1
//! --leak-check=full --errors-for-leak-kinds=definite`, see `common::VALGRIND_FLAGS`), in a child of this test
//! binary with `HOSTFIRST_VALGRIND=1`. The plain run is the normal test run; this is in addition to it.
//!
//! Only the compiled programs run under valgrind (`common::run` wraps the executables in the tests' bin
//! directory), not the Rust test binary itself, so the pass costs a few minutes, not hours. Nothing is skipped:
//! every test of the modules below passes under memcheck. Where the programs fork a child that dies of SIGBUS
//! on purpose (test_load.c shows the documented hazard of the mapped pointer), that child's leak report is
//! not counted (it never got to free anything); its memory errors are.
//!
//! valgrind is installed by scripts/test.sh. Without it the test fails under CI (`CI=true`) and otherwise
//! skips with a message; `HOSTFIRST_VALGRIND=0` skips it on purpose for a quick local run (not under CI).

use crate::common::*;

/// The test-name filters of the pass: every module whose tests run compiled C/C++ programs (checked by
/// `every_module_that_runs_c_programs_is_in_the_pass`). `readme_example::readme_checkout` runs its program
/// through `sh` after a release build and stays in the plain run only.
const PASS: &[&str] = &[
    "c_abi::",
    "cpp::",
    "example_host_first::",
    "readme_example::readme_c_example",
    "cli_convert::",
    "cli_devices::",
    "cli_help::",
    "cli_inspect::",
    "cli_put::",
    "cli_rules::",
    "cli_shard::",
    "cli_tokens::",
    "remote_s3::the_cli_inspects_an_s3_object",
    // The MPI ranks start through mpirun, not `common::run`, so they are not under memcheck here (OpenMPI's
    // own allocations would drown the report); the pass re-runs the test as it is.
    "mpi::",
    "cuda_stub::",
    "cuda_review::",
    "place_cuda::",
    "handoff::",
    "gather::",
    "load_job::",
    "load_bulk::",
    "gather_feed::",
    "tokens::",
    "writer::",
    "header_api::",
    "gds::",
    "file_engine::",
    "page_cache::",
];

fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

#[test]
fn c_programs_pass_memcheck() {
    if under_valgrind() {
        return; // the child itself
    }
    if std::env::var(VALGRIND).as_deref() == Ok("0") {
        assert!(!ci(), "{VALGRIND}=0 skips the valgrind pass; not allowed under CI");
        eprintln!("SKIPPED: the valgrind pass ({VALGRIND}=0)");
        return;
    }
    let have = std::process::Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    if !have {
        assert!(!ci(), "valgrind is missing (CI=true): scripts/test.sh installs it (apt-get install valgrind)");
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED: valgrind is not installed (scripts/test.sh installs it)");
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe).args(PASS).env(VALGRIND, "1").output().expect("run the valgrind pass");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the valgrind pass failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    for filter in PASS {
        let passed = stdout.lines().filter(|l| l.starts_with(&format!("test {filter}")) && l.ends_with(" ok")).count();
        assert!(passed > 0, "no test matching '{filter}' passed in the valgrind pass:\n{stdout}");
    }
}

/// A module that starts compiling and running C programs joins the pass (or says why it cannot).
#[test]
fn every_module_that_runs_c_programs_is_in_the_pass() {
    let dir = root().join("tests/it");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_string();
        // windows.rs: its programs are Windows programs under Wine (not memcheck's), and the Linux CLI it compares
        // them with runs under memcheck in the cli_* modules.
        if path.extension() != Some("rs".as_ref())
            || ["common", "main", "valgrind", "windows"].contains(&module.as_str())
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let runs_c = ["compile_c(", "compile_c_test(", "compile_cpp(", "cli()"].iter().any(|p| text.contains(p));
        let listed = PASS.iter().any(|f| f.starts_with(&format!("{module}::")));
        assert!(!runs_c || listed, "tests/it/{module}.rs runs C programs: add \"{module}::\" to PASS in {}", file!());
    }
}
