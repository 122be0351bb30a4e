//! C programs compiled with -Wall -Wextra -Werror against include/hostfirst.h and libhostfirst, run, and
//! their exit status asserted. CUDA-path programs run against the stand-in driver in tests/cuda_stub.rs.

use crate::common::*;

#[test]
fn c_core_without_cuda() {
    assert!(have_cc(), "no C compiler ('{}'); install gcc (the test script does)", cc());
    let bin = compile_c_test("test_core");
    run_ok(&bin, &[], &[("EXPECT_CUDA_STATUS", Some("LIBRARY_NOT_FOUND"))]);
    run_ok(&bin, &[], &[("HOSTFIRST_PLATFORMS", Some("cpu")), ("EXPECT_CUDA_STATUS", Some("HIDDEN_BY_ENV"))]);
}

#[test]
fn header_compiles_standalone_in_every_mode() {
    assert!(have_cc(), "no C compiler");
    let dir = scratch("header");
    let inc = root().join("include");
    let one = dir.join("one.c");
    let two = dir.join("two.c");
    std::fs::write(&one, "#include \"hostfirst.h\"\n#include \"hostfirst.h\"\nint one(void) { return (int)hostfirst_version_number(); }\n").unwrap();
    std::fs::write(&two, "#include \"hostfirst.h\"\nint one(void);\nint main(void) { return one() == HOSTFIRST_VERSION_NUMBER ? 0 : 1; }\n").unwrap();
    // With and without the experimental tier (its declarations must stand alone too).
    for (std, define) in
        [("c99", ""), ("c11", ""), ("c99", "-DHOSTFIRST_EXPERIMENTAL"), ("c11", "-DHOSTFIRST_EXPERIMENTAL")]
    {
        let out = std::process::Command::new(cc())
            .args([&format!("-std={std}"), "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-c"])
            .args((!define.is_empty()).then_some(define))
            .arg(format!("-I{}", inc.display()))
            .arg(&one)
            .arg("-o")
            .arg(dir.join(format!("one-{std}{define}.o")))
            .output()
            .unwrap();
        assert!(out.status.success(), "{std} {define}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = std::process::Command::new(&cxx)
        .args([
            "-x",
            "c++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-DHOSTFIRST_EXPERIMENTAL",
            "-c",
        ])
        .arg(format!("-I{}", inc.display()))
        .arg(&one)
        .arg("-o")
        .arg(dir.join("one-cxx.o"))
        .output()
        .unwrap();
    assert!(out.status.success(), "c++17: {}", String::from_utf8_lossy(&out.stderr));
    // Two translation units, each including the header (one of them twice), linked and run.
    let bin = compile_c(&[&one, &two], "header_two_tu", &["-Wpedantic"]);
    run_ok(&bin, &[], &[]);
}

#[test]
fn c_load() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_file");
    let dir = scratch("c_load");
    run_ok(&bin, &[dir.to_str().unwrap()], &[]);
}

#[test]
fn c_place() {
    run_ok(&compile_c_test("test_place"), &[scratch("c_place").to_str().unwrap()], &[]);
}

#[test]
fn c_rules() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_rules");
    let dir = scratch("c_rules");
    run_ok(&bin, &[dir.to_str().unwrap()], &[]);
}

#[test]
fn c_dlpack() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_dlpack");
    run_ok(&bin, &[root().join("tests/fixtures").to_str().unwrap()], &[]);
}

#[test]
fn c_shard() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_shard");
    run_ok(&bin, &[scratch("c_shard").to_str().unwrap()], &[]);
}

/// Declared read plans through the C API (tests/c/test_read_plan.c). Outside valgrind, with the pool of preads
/// (one `pread` per request), the program also checks the process's read syscalls and bytes during an
/// execution against the plan's requests and read bytes (/proc/self/io; valgrind's own reads would count).
#[test]
fn c_read_plan() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_read_plan");
    let dir = scratch("c_read_plan");
    let count = cfg!(target_os = "linux") && !under_valgrind();
    let args: Vec<&str> = [dir.to_str().unwrap()].into_iter().chain(count.then_some("count")).collect();
    run_ok(&bin, &args, &[("HOSTFIRST_IO", Some("pool"))]);
}

/// fork() while other threads run cpu puts: every child completes a cpu put within a deadline (no lock of
/// the library is inherited held). Fewer forks under valgrind, where each costs far more.
#[test]
fn c_fork_under_threads() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_fork_threads");
    let forks = if under_valgrind() { "20" } else { "300" };
    run_ok(&bin, &[scratch("c_fork_threads").to_str().unwrap(), forks], &[]);
}

/// What truncating a file, and truncating then extending it, does to the written pages of a copy-on-write put
/// and of a legacy DLPack export (the contract the header and README state).
#[test]
fn c_cow_truncate() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_cow_truncate");
    run_ok(&bin, &[scratch("c_cow_truncate").to_str().unwrap()], &[]);
}

/// Options structs: every init called as an older and a newer program would, too small a struct_size refused
/// with both sizes, and every function reading options given them at the end of readable memory.
#[test]
fn c_options() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_options");
    run_ok(&bin, &[root().join("tests/fixtures").to_str().unwrap()], &[]);
}
