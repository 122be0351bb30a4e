//! A load described in bulk (`hostfirst_load_entries`, `hostfirst_load_names`; src/ffi/load_bulk.rs): the C
//! program tests/c/test_load_bulk.c on cpu and on cuda:0 of the stand-in driver (in the run's stand-in mode),
//! whose exit report must show nothing live. In the valgrind pass it runs under memcheck.

use crate::common::*;

#[test]
fn c_load_bulk_on_cpu_and_the_stand_in() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_load_bulk");
    let dir = scratch("c_load_bulk");
    let out = run_ok(&bin, &[dir.to_str().unwrap(), "cpu"], &[]);
    assert!(out.contains("ok"), "{out}");
    let run = run_with_stand_in(&bin, &[dir.to_str().unwrap(), "cuda:0"], &[("STAND_IN_LEAK_REPORT", Some("1"))]);
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success() && stdout.contains("ok"), "{stdout}\n{stderr}");
    assert_clean_exit_report(&stderr, "test_load_bulk on cuda:0");
}
