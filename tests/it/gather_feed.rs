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

/// The stable starts make no open stream (issue 43): `n_batches` `SIZE_MAX` (0.2's experimental open value) is
/// `INVALID_ARGUMENT` naming the experimental `hostfirst_gather_stream_open`, nothing is written to `out` and no
/// handle stays; the experimental entry point, which a program opts into, starts one.
#[test]
fn stable_start_refuses_the_open_value() {
    use crate::file_support::{image, last_error};
    use hostfirst::ffi::*;
    use hostfirst::Status;
    let bytes = image(r#"{"tok":{"dtype":"U16","shape":[64],"data_offsets":[0,128]}}"#, &[1; 128]);
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    assert_eq!(hostfirst_file_open_memory(bytes.as_ptr().cast(), bytes.len(), &mut f), Status::Ok);
    let mut v: *mut hostfirst_view = std::ptr::null_mut();
    assert_eq!(hostfirst_file_view_at(f, 0, &mut v), Status::Ok);
    let mut g: *mut hostfirst_gather = std::ptr::null_mut();
    let cpu = hostfirst_device { kind: 1, ordinal: 0 };
    assert_eq!(hostfirst_gather_new(cpu, hostfirst::DType::U16 as u32, 2, 4, &mut g), Status::Ok);
    let mut buf: *mut hostfirst_buffer = std::ptr::null_mut();
    assert_eq!(hostfirst_put(v, &cpu, std::ptr::null(), &mut buf, std::ptr::null_mut()), Status::Ok);

    let sentinel = 0x5a5a as *mut hostfirst_gather_stream;
    let mut s = sentinel;
    assert_eq!(hostfirst_gather_stream_start(g, v, std::ptr::null(), usize::MAX, 1, &mut s), Status::InvalidArgument);
    assert!(last_error().contains("hostfirst_gather_stream_open"), "{}", last_error());
    assert_eq!(s, sentinel);
    assert_eq!(
        hostfirst_gather_stream_start_from_buffer(g, buf, std::ptr::null(), usize::MAX, 1, &mut s),
        Status::InvalidArgument
    );
    assert!(last_error().contains("hostfirst_gather_stream_open"), "{}", last_error());
    assert_eq!(s, sentinel);

    // The experimental entry points start open streams, ended at once here.
    let ended_at_once = |open: &dyn Fn(*mut *mut hostfirst_gather_stream) -> Status| {
        let mut s: *mut hostfirst_gather_stream = std::ptr::null_mut();
        assert_eq!(open(&mut s), Status::Ok, "{}", last_error());
        assert_eq!(hostfirst_gather_stream_end_input(s), Status::Ok);
        let mut b: *mut hostfirst_buffer = std::ptr::null_mut();
        assert_eq!(hostfirst_gather_stream_next(s, &mut b), Status::Ok);
        assert!(b.is_null());
        assert_eq!(hostfirst_gather_stream_free(s), Status::Ok);
    };
    ended_at_once(&|s| hostfirst_gather_stream_open(g, v, 1, s));
    ended_at_once(&|s| hostfirst_gather_stream_open_from_buffer(g, buf, 1, s));
    assert_eq!(hostfirst_buffer_free(buf), Status::Ok, "buffer: {}", last_error());
    assert_eq!(hostfirst_gather_free(g), Status::Ok, "gather: {}", last_error());
    assert_eq!(hostfirst_view_free(v), Status::Ok, "view: {}", last_error());
    assert_eq!(hostfirst_file_free(f), Status::Ok, "file: {}", last_error());
}
