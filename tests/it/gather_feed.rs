//! Open gather streams fed incrementally (src/ffi/gather.rs, core/src/place/gather_stream.rs): the C program
//! tests/c/test_gather_feed.c, compiled once, on cpu and on cuda:0 of the stand-in driver (in the run's mode:
//! immediate, or deferred with STAND_IN_DEFERRED=1), whose exit report must show nothing live; in the valgrind
//! pass too.

use crate::common::*;

#[test]
fn c_gather_feed_on_cpu_and_the_stand_in() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_gather_feed");
    run_ok(&bin, &[scratch("c_gather_feed").to_str().unwrap()], &[]);
    let out = run_with_stand_in(
        &bin,
        &[scratch("c_gather_feed_stand_in").to_str().unwrap(), "cuda"],
        &[("STAND_IN_LEAK_REPORT", Some("1")), ("STAND_IN_POISON_FRESH", Some("1"))],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    assert_clean_exit_report(&stderr, "test_gather_feed on the stand-in");
}
