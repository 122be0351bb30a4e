//! What a CUDA review against the driver's documented semantics found (issue 23), each on the stricter stand-in
//! and each failing without its fix in both modes: a resident put whose registration is refused stages instead;
//! a release for the default streams is recorded where the consumer's work is (the legacy stream), whichever
//! thread releases; a batch whose release cannot be recorded is never rewritten; every sticky error the driver
//! documents is labelled sticky; a CUDA gather's first batch is zero-filled, not fresh device memory. Also the
//! stand-in's new strictness as hostfirst meets it: an unknown stream handle poisons the context (undefined
//! behaviour on hardware), and a foreign framework sharing the primary context.

use crate::common::*;
use hostfirst::device::cuda::{Context, PinnedHostMemory};
use hostfirst::device::Device;
use hostfirst::dtype::DType;
use hostfirst::place::export::{export_buffer, release, ConsumerStream, CopyPolicy};
use hostfirst::place::gather::Gather;
use hostfirst::place::{put, put_with_stats, release_cached_memory, PutOptions, Target};
use hostfirst::{Status, TensorFile};
use std::ffi::c_void;
use std::path::PathBuf;

/// A file with one U16 tensor "tok" of `n` elements (element i = i * 7 + 3) and one U8 tensor "t" of `bytes`.
fn file(name: &str, n: usize, bytes: usize) -> (PathBuf, Vec<u8>, Vec<u8>) {
    let tok: Vec<u8> = (0..n).flat_map(|i| ((i * 7 + 3) as u16).to_le_bytes()).collect();
    let t: Vec<u8> = (0..bytes).map(|i| (i.wrapping_mul(131) ^ (i >> 7)) as u8 | 1).collect();
    let h = format!(
        r#"{{"tok":{{"dtype":"U16","shape":[{n}],"data_offsets":[0,{}]}},"t":{{"dtype":"U8","shape":[{bytes}],"data_offsets":[{},{}]}}}}"#,
        tok.len(),
        tok.len(),
        tok.len() + bytes
    );
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend_from_slice(&tok);
    img.extend_from_slice(&t);
    let path = scratch(name).join("truth.safetensors");
    std::fs::write(&path, img).unwrap();
    (path, tok, t)
}

/// The rows a gather of `offsets` (window `w`) must produce from `tok`'s bytes.
fn rows(tok: &[u8], offsets: &[u64], w: usize) -> Vec<u8> {
    offsets.iter().flat_map(|&o| tok[o as usize * 2..(o as usize + w) * 2].to_vec()).collect()
}

/// A driver entry point of the stand-in, by name.
fn driver_fn(name: &str) -> *mut c_void {
    let lib = std::ffi::CString::new("libcuda.so.1").unwrap();
    let sym = std::ffi::CString::new(name).unwrap();
    // SAFETY: the stand-in is loaded in this process (dlopen returns it); dlsym only looks the name up.
    let f = unsafe { libc::dlsym(libc::dlopen(lib.as_ptr(), libc::RTLD_NOW), sym.as_ptr()) };
    assert!(!f.is_null(), "the stand-in lacks {name}");
    f
}

/// The consumer's work: an asynchronous device-to-host copy of `n` bytes at `dptr` into page-locked `dst`, on
/// `stream` (1 legacy, 2 per-thread), queued with the device's context current on the calling thread.
fn consumer_reads(dptr: u64, dst: &PinnedHostMemory, n: usize, stream: usize) {
    Context::get(0).unwrap().bind().unwrap();
    type F = extern "C" fn(*mut c_void, u64, usize, usize) -> i32;
    // SAFETY: cuMemcpyDtoHAsync_v2's C signature; `dst` is live page-locked memory of at least `n` bytes that
    // the caller reads only after synchronising `stream`.
    let f: F = unsafe { std::mem::transmute(driver_fn("cuMemcpyDtoHAsync_v2")) };
    assert_eq!(f(dst.as_ptr() as *mut c_void, dptr, n, stream), 0);
}

/// `cuStreamSynchronize(stream)` on the calling thread (context current).
fn consumer_syncs(stream: usize) {
    type F = extern "C" fn(usize) -> i32;
    // SAFETY: cuStreamSynchronize's C signature.
    let f: F = unsafe { std::mem::transmute(driver_fn("cuStreamSynchronize")) };
    assert_eq!(f(stream), 0);
}

/// Runs `body` in one stand-in child per set of knobs (in a child: once, with the knobs it was given).
fn in_children(test: &str, variants: &[&[(&str, Option<&str>)]], body: impl Fn()) {
    if std::env::var(STAND_IN_CHILD).is_ok() {
        return in_stand_in_child(test, &[], body);
    }
    for knobs in variants {
        in_stand_in_child(test, knobs, &body);
    }
}

/// Resident mode where the driver will not page-lock the range (`cuMemHostRegister` refused) or the device
/// cannot register host memory at all (`HOST_REGISTER_SUPPORTED` = 0): the put goes through the staging ring,
/// complete and correct, and its stats say so. Before the fix the put failed with `DEVICE_ERROR`.
#[test]
fn resident_put_stages_when_registration_is_refused() {
    const TEST: &str = concat!(module_path!(), "::resident_put_stages_when_registration_is_refused");
    let variants: &[&[(&str, Option<&str>)]] = &[
        &[("STAND_IN_REGISTER_ERROR", Some("CUDA_ERROR_NOT_PERMITTED"))],
        &[("STAND_IN_REGISTER_ERROR", Some("CUDA_ERROR_OUT_OF_MEMORY"))],
        &[("STAND_IN_HOST_REGISTER", Some("0"))],
    ];
    in_children(TEST, variants, || {
        let (path, _, t) = file("cuda_truth_resident", 16, (3 << 20) + 5);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("t").unwrap();
        let opts = PutOptions { resident: true, ..PutOptions::default() };
        let (b, st) = put_with_stats(&v, Target::Device(Device::cuda(0)), opts).unwrap();
        assert!(st.staged_instead && !st.reused_registration && st.register_seconds == 0.0, "{st:?}");
        let mut back = vec![0u8; t.len()];
        b.copy_to_host(&mut back).unwrap();
        assert!(back == t, "the staged put is byte-exact");
        if std::env::var("STAND_IN_HOST_REGISTER").as_deref() == Ok("0") {
            assert_eq!(stand_in_query("stand_in_register_calls"), 0, "the attribute is asked before trying");
        }
        drop(b);
        release_cached_memory();
        assert_eq!(stand_in_query("stand_in_live_registrations"), 0);
        assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
    });
}

/// A consumer on the per-thread default stream (DLPack stream 2) queues work reading a batch; the deleter runs
/// on another thread (a garbage collector, an autograd worker). The release must cover the consumer's work, so
/// it is recorded on the legacy stream (which every blocking stream, every thread's per-thread one too, is
/// ordered before), not on the releasing thread's own per-thread stream. Deferred, the consumer's read is still
/// queued when the gather rewrites the batch: it must read the old batch. Both modes: the record went to the
/// legacy stream. Before the fix it went to the deleter thread's per-thread stream and the rewrite overtook it.
#[test]
fn release_from_another_thread_covers_the_consumers_per_thread_stream() {
    const TEST: &str = concat!(module_path!(), "::release_from_another_thread_covers_the_consumers_per_thread_stream");
    in_stand_in_child(TEST, &[], || {
        let (path, tok, _) = file("cuda_truth_per_thread", 4096, 1);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("tok").unwrap();
        let mut g = Gather::new(Device::cuda(0), DType::U16, 4, 64).unwrap();
        g.set_ring_bound(1).unwrap();
        let first = [0u64, 100, 200, 300];
        let b = g.run(&v, &first).unwrap();
        let n = g.nbytes() as usize;
        let dptr = b.lock().unwrap().address();
        let e = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::PerThread).unwrap();
        drop(b);
        let seen = PinnedHostMemory::alloc_on(0, n).unwrap();
        consumer_reads(dptr, &seen, n, 2);
        let (legacy0, per_thread0) =
            (stand_in_query("stand_in_records_on_legacy"), stand_in_query("stand_in_records_on_per_thread"));
        std::thread::spawn(move || {
            release(&e.keep, e.release_on).unwrap();
            drop(e);
        })
        .join()
        .unwrap();
        assert_eq!(stand_in_query("stand_in_records_on_legacy"), legacy0 + 1, "the release is on the legacy stream");
        assert_eq!(stand_in_query("stand_in_records_on_per_thread"), per_thread0, "not on the deleter's stream");
        let b = g.run(&v, &[1000, 1001, 1002, 1003]).unwrap();
        assert_eq!(b.lock().unwrap().address(), dptr, "bound 1: the same batch was rewritten");
        consumer_syncs(2);
        assert!(seen.as_slice() == rows(&tok, &first, 64).as_slice(), "the consumer read the batch it was given");
        drop((b, g, seen));
    });
}

/// When the release event cannot be recorded, nothing orders a rewrite after the consumer's work: the batch is
/// never rewritten (the next run takes another batch, and the ring drops it). Deferred, the consumer's queued
/// read still sees its batch. Before the fix the failure was swallowed and the batch rewritten in place.
#[test]
fn a_batch_whose_release_cannot_be_recorded_is_never_rewritten() {
    const TEST: &str = concat!(module_path!(), "::a_batch_whose_release_cannot_be_recorded_is_never_rewritten");
    in_stand_in_child(TEST, &[], || {
        let (path, tok, _) = file("cuda_truth_failed_release", 4096, 1);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("tok").unwrap();
        let mut g = Gather::new(Device::cuda(0), DType::U16, 4, 64).unwrap();
        g.set_ring_bound(1).unwrap(); // the retired batch must not make the ring BUSY either
        let first = [7u64, 70, 700, 3000];
        let b = g.run(&v, &first).unwrap();
        let n = g.nbytes() as usize;
        let dptr = b.lock().unwrap().address();
        let e = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
        drop(b);
        let seen = PinnedHostMemory::alloc_on(0, n).unwrap();
        consumer_reads(dptr, &seen, n, 1);
        type Fail = extern "C" fn(u32, i32);
        // SAFETY: the stand-in's control `void stand_in_fail_next_records(unsigned, int)`.
        let fail: Fail = unsafe { std::mem::transmute(driver_fn("stand_in_fail_next_records")) };
        fail(1, 400); // CUDA_ERROR_INVALID_HANDLE, not sticky
        let err = release(&e.keep, e.release_on).unwrap_err();
        assert_eq!(err.status(), Status::DeviceError);
        assert!(err.message().contains("will not be reused"), "{}", err.message());
        drop(e);
        let second = [1u64, 2, 3, 4];
        let b = g.run(&v, &second).unwrap();
        assert_ne!(b.lock().unwrap().address(), dptr, "the batch whose release failed is not rewritten");
        assert!(bytes(&b) == rows(&tok, &second, 64));
        drop(b);
        let b = g.run(&v, &first).unwrap();
        assert_ne!(b.lock().unwrap().address(), dptr, "... ever");
        assert_eq!(g.ring_len(), 1, "and the ring dropped it");
        consumer_syncs(1);
        assert!(seen.as_slice() == rows(&tok, &first, 64).as_slice(), "the consumer read the batch it was given");
        drop((b, g, seen));
    });
}

fn bytes(b: &hostfirst::place::gather::Batch) -> Vec<u8> {
    let g = b.lock().unwrap();
    let mut out = vec![0u8; g.nbytes() as usize];
    g.copy_to_host(&mut out).unwrap();
    out
}

/// Every error the driver documents as leaving the process in an inconsistent state is labelled sticky, and
/// what a failed copy held is released rather than leaked (no transfer of a dead context runs). Before the fix
/// `CUDA_ERROR_LAUNCH_TIMEOUT`, `_ASSERT` and `_NVLINK_UNCORRECTABLE` were reported as ordinary errors.
#[test]
fn every_documented_sticky_error_is_labelled_sticky() {
    const TEST: &str = concat!(module_path!(), "::every_documented_sticky_error_is_labelled_sticky");
    for code in ["CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ASSERT", "CUDA_ERROR_NVLINK_UNCORRECTABLE"] {
        in_stand_in_child(
            TEST,
            &[("STAND_IN_FAIL_COPY_AFTER", Some("100")), ("STAND_IN_COPY_ERROR", Some(code))],
            || {
                let code = std::env::var("STAND_IN_COPY_ERROR").unwrap();
                let (path, _, _) = file("cuda_truth_sticky", 16, 1 << 20);
                let f = TensorFile::open(&path).unwrap();
                let e = put(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), PutOptions::default()).unwrap_err();
                assert_eq!(e.status(), Status::DeviceError);
                assert!(e.message().contains(&code) && e.message().contains("sticky error"), "{}", e.message());
                let e = hostfirst::device::cuda::DeviceMemory::alloc(0, 64).unwrap_err();
                assert!(e.message().contains(&code) && e.message().contains("sticky"), "{}", e.message());
                release_cached_memory();
                assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
            },
        );
    }
}

/// Fresh device memory is not zeroes (the stand-in fills it with 0xA5, as a reused device allocation holds
/// old data); a CUDA gather's batch before its first run is promised zero-filled. Before the fix it handed out
/// whatever `cuMemAlloc` gave.
#[test]
fn cuda_gather_first_batch_is_zero_filled() {
    const TEST: &str = concat!(module_path!(), "::cuda_gather_first_batch_is_zero_filled");
    in_stand_in_child(TEST, &[], || {
        let raw = hostfirst::device::cuda::DeviceMemory::alloc(0, 4096).unwrap();
        assert_eq!(stand_in_query("stand_in_poison_byte"), 0xA5);
        let mut back = vec![0u8; 4096];
        raw.copy_to_host(0, &mut back).unwrap();
        assert!(back.iter().all(|&x| x == 0xA5), "fresh device memory is poisoned");
        drop(raw);
        let g = Gather::new(Device::cuda(0), DType::U16, 8, 128).unwrap();
        let mut batch = vec![1u8; g.nbytes() as usize];
        g.copy_to_host(&mut batch).unwrap();
        assert!(batch.iter().all(|&x| x == 0), "the first batch is zero-filled");
        assert!(bytes(&g.current()).iter().all(|&x| x == 0));
    });
}

/// A stream value that is no live stream (destroyed, or never one) is undefined behaviour on hardware: the
/// stand-in poisons the context, and hostfirst reports that as a sticky `DEVICE_ERROR` and leaks nothing. The
/// documentation says the stream must stay alive; this shows what a violation looks like at its worst. With
/// `STAND_IN_VALIDATE_STREAMS=1` (the old, kinder stand-in) it is an ordinary `CUDA_ERROR_INVALID_HANDLE`.
#[test]
fn cuda_unknown_stream_handle_poisons_the_context() {
    const TEST: &str = concat!(module_path!(), "::cuda_unknown_stream_handle_poisons_the_context");
    let variants: &[&[(&str, Option<&str>)]] =
        &[&[("STAND_IN_VALIDATE_STREAMS", Some("0"))], &[("STAND_IN_VALIDATE_STREAMS", Some("1"))]];
    in_children(TEST, variants, || {
        let validate = std::env::var("STAND_IN_VALIDATE_STREAMS").unwrap() == "1";
        let (path, _, _) = file("cuda_truth_bad_stream", 4096, 1);
        let f = TensorFile::open(&path).unwrap();
        let mut g = Gather::new(Device::cuda(0), DType::U16, 2, 8).unwrap();
        let b = g.run(&f.view("tok").unwrap(), &[0, 1]).unwrap();
        let e = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::Raw(0x1234)).err().unwrap();
        assert_eq!(e.status(), Status::DeviceError);
        if validate {
            assert!(e.message().contains("CUDA_ERROR_INVALID_HANDLE"), "{}", e.message());
            assert!(g.run(&f.view("tok").unwrap(), &[2, 3]).is_ok(), "the context stays usable");
        } else {
            assert!(e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS") && e.message().contains("sticky"), "{e:?}");
            assert_eq!(stand_in_query("stand_in_poisoned_by_streams"), 1);
            let e = g.run(&f.view("tok").unwrap(), &[2, 3]).unwrap_err();
            assert!(e.message().contains("sticky"), "{}", e.message());
        }
        drop((b, g));
    });
}

/// A foreign framework shares the device's primary context and queues its own work there. hostfirst's puts and
/// gathers go on, never waiting for that work except where the driver makes them (allocations and frees, the
/// legacy stream a release is recorded on); when the framework's work faults with a sticky error, the shared
/// context is dead for hostfirst too: its calls fail with a labelled sticky `DEVICE_ERROR` (immediate: at
/// once; deferred: at the first allocation, which waits for the device), cpu work goes on, nothing leaks.
#[test]
fn cuda_foreign_framework_shares_the_primary_context() {
    const TEST: &str = concat!(module_path!(), "::cuda_foreign_framework_shares_the_primary_context");
    let variants: &[&[(&str, Option<&str>)]] = &[
        &[("STAND_IN_FOREIGN", Some("1"))],
        &[("STAND_IN_FOREIGN", Some("1")), ("STAND_IN_FOREIGN_ERROR", Some("CUDA_ERROR_ILLEGAL_ADDRESS"))],
    ];
    in_children(TEST, variants, || {
        let (path, tok, t) = file("cuda_truth_foreign", 4096, 1 << 20);
        let f = TensorFile::open(&path).unwrap();
        let r = put(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), PutOptions::default());
        if std::env::var("STAND_IN_FOREIGN_ERROR").is_ok() {
            let e = r.err().unwrap();
            assert!(e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS") && e.message().contains("sticky"), "{e:?}");
        } else {
            let b = r.unwrap();
            let mut back = vec![0u8; t.len()];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == t);
            let mut g = Gather::new(Device::cuda(0), DType::U16, 2, 16).unwrap();
            let batch = g.run(&f.view("tok").unwrap(), &[5, 9]).unwrap();
            assert!(bytes(&batch) == rows(&tok, &[5, 9], 16));
            let e = export_buffer(&batch, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
            type Submit = extern "C" fn(i32) -> u64;
            // SAFETY: the stand-in's control `unsigned long long stand_in_foreign_submit(int)`.
            let submit: Submit = unsafe { std::mem::transmute(driver_fn("stand_in_foreign_submit")) };
            assert_eq!(submit(0), 0, "the framework queues more work");
            release(&e.keep, e.release_on).unwrap();
            drop((e, batch));
            // The rewrite waits for the release event on the legacy stream, which is ordered after the
            // framework's queued work: that work has run by the time the batch is rewritten.
            let batch = g.run(&f.view("tok").unwrap(), &[1, 2]).unwrap();
            assert!(bytes(&batch) == rows(&tok, &[1, 2], 16));
            assert_eq!(stand_in_query("stand_in_foreign_ops_run"), stand_in_query("stand_in_foreign_submissions"));
            drop((b, g, batch));
        }
        let cpu = put(&f.view("t").unwrap(), Target::Device(Device::CPU), PutOptions::default()).unwrap();
        assert_eq!(cpu.nbytes(), t.len() as u64);
        release_cached_memory();
        assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
        assert!(stand_in_query("stand_in_foreign_submissions") >= 1);
    });
}

/// The stand-in's latency knobs make timing assumptions visible: registration costs time per GiB (a resident
/// put reports it in its stats; the next put of the range reuses the registration and pays nothing), a blocking
/// wait costs a wake-up (a gather run, which waits for its copy, takes at least that), and the first context
/// retain costs its creation.
#[test]
fn cuda_latency_knobs_show_in_what_hostfirst_reports() {
    const TEST: &str = concat!(module_path!(), "::cuda_latency_knobs_show_in_what_hostfirst_reports");
    let knobs: &[(&str, Option<&str>)] = &[
        ("STAND_IN_REGISTER_MS_PER_GIB", Some("20000")),
        ("STAND_IN_WAKEUP_US", Some("20000")),
        ("STAND_IN_CONTEXT_CREATE_MS", Some("50")),
    ];
    in_stand_in_child(TEST, knobs, || {
        let t = std::time::Instant::now();
        Context::get(0).unwrap();
        assert!(t.elapsed().as_secs_f64() >= 0.05, "context creation: {:?}", t.elapsed());
        let (path, tok, data) = file("cuda_truth_latency", 4096, 3 << 20);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("t").unwrap();
        let opts = || PutOptions { resident: true, ..PutOptions::default() };
        let (b, st) = put_with_stats(&v, Target::Device(Device::cuda(0)), opts()).unwrap();
        assert!(st.register_seconds >= 0.05 && !st.reused_registration, "3 MiB at 20 s/GiB: {st:?}");
        let (b2, st2) = put_with_stats(&v, Target::Device(Device::cuda(0)), opts()).unwrap();
        assert!(st2.reused_registration && st2.register_seconds == 0.0, "{st2:?}");
        let mut back = vec![0u8; data.len()];
        b2.copy_to_host(&mut back).unwrap();
        assert!(back == data);
        let mut g = Gather::new(Device::cuda(0), DType::U16, 2, 16).unwrap();
        let t = std::time::Instant::now();
        let batch = g.run(&f.view("tok").unwrap(), &[3, 4]).unwrap();
        assert!(t.elapsed().as_secs_f64() >= 0.02, "a run waits for its copy: {:?}", t.elapsed());
        assert!(bytes(&batch) == rows(&tok, &[3, 4], 16));
        drop((b, b2, batch, g));
        release_cached_memory();
    });
}
