//! What a desk review of the CUDA code against NVIDIA's documented semantics found (issue 32), each on the
//! stand-in and each failing without its fix: a DLPack release never records on a consumer's own stream (which
//! may be destroyed by then); a release during another framework's CUDA graph capture neither invalidates the
//! capture nor is lost (relaxed mode, or kept for a safe point while a capture is seen). The third finding
//! (cuda_host memory in a forked child) is checked by `tests/c/test_cuda_process.c fork`
//! (`cuda_stub::forked_child_reports_cuda_unusable_and_works_on_cpu`).

use crate::common::*;
use hostfirst::device::cuda::capture::deferred_releases;
use hostfirst::device::cuda::{Context, PinnedHostMemory};
use hostfirst::device::Device;
use hostfirst::dlpack::{self, Deleters, Published, Request};
use hostfirst::dtype::DType;
use hostfirst::place::export::{export_buffer, release, ConsumerStream, CopyPolicy, Form};
use hostfirst::place::gather::Gather;
use hostfirst::place::{put, release_cached_memory, PutOptions, Target};
use hostfirst::TensorFile;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A file with one U16 tensor "tok" of `n` elements (element i = i * 7 + 3) and one U8 tensor "t" of 1 MiB.
fn file(name: &str, n: usize) -> (PathBuf, Vec<u8>) {
    let tok: Vec<u8> = (0..n).flat_map(|i| ((i * 7 + 3) as u16).to_le_bytes()).collect();
    let t = 1usize << 20;
    let h = format!(
        r#"{{"tok":{{"dtype":"U16","shape":[{n}],"data_offsets":[0,{}]}},"t":{{"dtype":"U8","shape":[{t}],"data_offsets":[{},{}]}}}}"#,
        tok.len(),
        tok.len(),
        tok.len() + t
    );
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend_from_slice(&tok);
    img.extend((0..t).map(|i| (i % 251) as u8));
    let path = scratch(name).join("review.safetensors");
    std::fs::write(&path, img).unwrap();
    (path, tok)
}

fn rows(tok: &[u8], offsets: &[u64], w: usize) -> Vec<u8> {
    offsets.iter().flat_map(|&o| tok[o as usize * 2..(o as usize + w) * 2].to_vec()).collect()
}

/// A driver entry point (or control) of the stand-in, by name.
fn driver_fn(name: &str) -> *mut c_void {
    let lib = std::ffi::CString::new("libcuda.so.1").unwrap();
    let sym = std::ffi::CString::new(name).unwrap();
    // SAFETY: the stand-in is loaded in this process (dlopen returns it); dlsym only looks the name up.
    let f = unsafe { libc::dlsym(libc::dlopen(lib.as_ptr(), libc::RTLD_NOW), sym.as_ptr()) };
    assert!(!f.is_null(), "the stand-in lacks {name}");
    f
}

/// Calls a stand-in function taking no argument and returning an int (a CUresult).
fn call0(name: &str) -> i32 {
    // SAFETY: every name passed is a `CUresult f(void)` or `unsigned long long f(void)` of the stand-in.
    let f: extern "C" fn() -> u64 = unsafe { std::mem::transmute(driver_fn(name)) };
    f() as i32
}

extern "C" fn versioned_deleter(t: *mut dlpack::ManagedTensorVersioned) {
    dlpack::release(t as *mut c_void);
}
extern "C" fn legacy_deleter(t: *mut dlpack::ManagedTensor) {
    dlpack::release(t as *mut c_void);
}
const DELETERS: Deleters = Deleters { versioned: versioned_deleter, legacy: legacy_deleter };

/// Exports `b` through DLPack (the versioned form) for `stream`; the returned pointer goes to its deleter.
fn dlpack_export(b: &Arc<Mutex<hostfirst::place::Buffer>>, stream: ConsumerStream) -> *mut c_void {
    let req = Request { form: Form::Versioned, copy: CopyPolicy::IfNeeded, device: None, stream };
    match dlpack::export_buffer(b, &req, DELETERS).unwrap() {
        Published::Versioned(m) => m as *mut c_void,
        Published::Legacy(m) => m as *mut c_void,
    }
}

/// The deleter a consumer calls (`DLManagedTensorVersioned::deleter`).
fn run_deleter(m: *mut c_void) {
    let m = m as *mut dlpack::ManagedTensorVersioned;
    // SAFETY: a live export made by `dlpack_export`; its deleter is called once.
    unsafe { ((*m).deleter.unwrap())(m) };
}

/// DLPack defines the consumer's stream for the export call only: a consumer (CuPy on garbage collection) may
/// destroy its stream before the export's deleter runs. The release must not touch that stream (a destroyed
/// handle poisons the context on the stand-in, as the undefined behaviour it is on hardware); the rewrite of the
/// batch must still come after the consumer's queued read (hostfirst waits for the whole device first). Before
/// the fix the release recorded an event on the destroyed stream: the context was poisoned and the next run
/// failed with a sticky error.
#[test]
fn cuda_release_after_the_consumer_destroyed_its_stream() {
    const TEST: &str = concat!(module_path!(), "::cuda_release_after_the_consumer_destroyed_its_stream");
    in_stand_in_child(TEST, &[], || {
        let (path, tok) = file("cuda_review_destroyed_stream", 4096);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("tok").unwrap();
        let mut g = Gather::new(Device::cuda(0), DType::U16, 4, 64).unwrap();
        g.set_ring_bound(1).unwrap();
        let first = [0u64, 100, 200, 300];
        let b = g.run(&v, &first).unwrap();
        let n = g.nbytes() as usize;
        let dptr = b.lock().unwrap().address();
        // The consumer: a stream of its own, a read of the batch queued on it, then the stream destroyed.
        Context::get(0).unwrap().bind().unwrap();
        let mut stream: usize = 0;
        // SAFETY: cuStreamCreate's C signature, a valid out-pointer, flags CU_STREAM_NON_BLOCKING.
        let create: extern "C" fn(*mut usize, u32) -> i32 = unsafe { std::mem::transmute(driver_fn("cuStreamCreate")) };
        assert_eq!(create(&mut stream, 1), 0);
        let m = dlpack_export(&b, ConsumerStream::Raw(stream));
        drop(b);
        let seen = PinnedHostMemory::alloc_on(0, n).unwrap();
        type Read = extern "C" fn(*mut c_void, u64, usize, usize) -> i32;
        // SAFETY: cuMemcpyDtoHAsync_v2's C signature; `seen` is live page-locked memory of `n` bytes, read only
        // after the context is synchronised below.
        let read: Read = unsafe { std::mem::transmute(driver_fn("cuMemcpyDtoHAsync_v2")) };
        assert_eq!(read(seen.as_ptr() as *mut c_void, dptr, n, stream), 0);
        // SAFETY: cuStreamDestroy_v2's C signature and the live stream made above.
        let destroy: extern "C" fn(usize) -> i32 = unsafe { std::mem::transmute(driver_fn("cuStreamDestroy_v2")) };
        assert_eq!(destroy(stream), 0);
        run_deleter(m);
        assert_eq!(stand_in_query("stand_in_poisoned_by_streams"), 0, "the destroyed stream was not touched");
        let second = [1u64, 2, 3, 4];
        let b = g.run(&v, &second).expect("the context is not poisoned");
        assert_eq!(b.lock().unwrap().address(), dptr, "bound 1: the same batch was rewritten");
        assert_eq!(call0("cuCtxSynchronize"), 0);
        assert!(seen.as_slice() == rows(&tok, &first, 64).as_slice(), "the consumer read the batch it was given");
        let mut back = vec![0u8; n];
        b.lock().unwrap().copy_to_host(&mut back).unwrap();
        assert!(back == rows(&tok, &second, 64));
        // A later release for a default stream is recorded as before (on the legacy stream).
        let legacy0 = stand_in_query("stand_in_records_on_legacy");
        let e = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
        release(&e.keep, e.release_on).unwrap();
        assert_eq!(stand_in_query("stand_in_records_on_legacy"), legacy0 + 1);
        drop((e, b, g, seen));
    });
}

/// Another framework captures a CUDA graph (torch.cuda.graph: a non-blocking stream, global mode) while a
/// DLPack deleter runs, on the capturing thread (a garbage collection inside the captured region) and on another
/// thread. The deleter's CUDA calls (an event recorded, device memory freed with the last reference) must not
/// invalidate the capture: they run in relaxed mode, and where a capture they would conflict with is seen (a
/// blocking stream capturing makes the legacy stream unusable) they are kept and done at the next safe point,
/// after the capture; the batch is then reused and the freed memory is gone. Before the fix the deleter's first
/// call invalidated the capture (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` at its end) and the release failed.
#[test]
fn cuda_release_during_a_graph_capture_keeps_the_capture_valid() {
    const TEST: &str = concat!(module_path!(), "::cuda_release_during_a_graph_capture_keeps_the_capture_valid");
    let variants: &[&[(&str, Option<&str>)]] = &[
        &[("STAND_IN_CAPTURE_MODE", Some("global"))],
        &[("STAND_IN_CAPTURE_MODE", Some("global")), ("STAND_IN_CAPTURE_BLOCKING", Some("1"))],
        &[("STAND_IN_CAPTURE_MODE", Some("thread_local"))],
    ];
    let body = || {
        let blocking = std::env::var("STAND_IN_CAPTURE_BLOCKING").as_deref() == Ok("1");
        let (path, tok) = file("cuda_review_capture", 4096);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("tok").unwrap();
        let mut g = Gather::new(Device::cuda(0), DType::U16, 4, 64).unwrap();
        g.set_ring_bound(1).unwrap();
        let first = [5u64, 50, 500, 3000];
        let b = g.run(&v, &first).unwrap();
        let dptr = b.lock().unwrap().address();
        let batch_export = dlpack_export(&b, ConsumerStream::Legacy);
        drop(b);
        // A device buffer whose last reference is the export: its release frees device memory.
        let owned = Arc::new(Mutex::new(
            put(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), PutOptions::default()).unwrap(),
        ));
        let owned_export = dlpack_export(&owned, ConsumerStream::PerThread);
        drop(owned);
        let live = stand_in_query("stand_in_live_allocations");
        let legacy0 = stand_in_query("stand_in_records_on_legacy");

        // SAFETY: the stand-in's control `unsigned long long stand_in_begin_capture(int device)`.
        let begin: extern "C" fn(i32) -> u64 = unsafe { std::mem::transmute(driver_fn("stand_in_begin_capture")) };
        assert_eq!(begin(0), 0, "the capture begins");
        run_deleter(batch_export); // on the capturing thread
        let m = owned_export as usize;
        std::thread::spawn(move || run_deleter(m as *mut c_void)).join().unwrap(); // and on another one
        assert_eq!(stand_in_query("stand_in_capture_refusals"), 0, "no call the capture forbids was made");
        if blocking {
            assert_eq!(deferred_releases(), 2, "the legacy stream is unusable: both releases are kept");
            assert_eq!(stand_in_query("stand_in_live_allocations"), live, "nothing freed during the capture");
        } else {
            assert_eq!(deferred_releases(), 0, "a non-blocking capture: released now, in relaxed mode");
            assert_eq!(stand_in_query("stand_in_records_on_legacy"), legacy0 + 2);
        }
        assert_eq!(call0("stand_in_end_capture"), 0, "the capture is still valid at its end");

        let second = [9u64, 90, 900, 2000];
        let b = g.run(&v, &second).expect("the kept release is done at the run's safe point");
        assert_eq!(deferred_releases(), 0);
        assert_eq!(stand_in_query("stand_in_records_on_legacy"), legacy0 + 2, "both releases recorded");
        assert_eq!(b.lock().unwrap().address(), dptr, "bound 1: the released batch is reused");
        let mut back = vec![0u8; g.nbytes() as usize];
        b.lock().unwrap().copy_to_host(&mut back).unwrap();
        assert!(back == rows(&tok, &second, 64));
        assert_eq!(stand_in_query("stand_in_live_allocations"), live - 1, "the exported buffer was freed");
        drop((b, g));
        release_cached_memory();
    };
    if std::env::var(STAND_IN_CHILD).is_ok() {
        return in_stand_in_child(TEST, &[], body);
    }
    for knobs in variants {
        in_stand_in_child(TEST, knobs, body);
    }
}

/// A garbage collector's finalizer (Python frees a Buffer a consumer used by address: it records the consumer's
/// stream, then frees the handle) during another framework's CUDA graph capture, on the capturing thread and on
/// another (`tests/c/test_cuda_process.c capture`): the capture stays valid, and the device memory is freed by
/// the next hostfirst call after the capture. Before the fix `hostfirst_buffer_record_stream` and
/// `hostfirst_buffer_free` made their driver calls in global mode and invalidated the capture.
#[test]
fn cuda_finalizer_during_a_graph_capture_keeps_the_capture_valid() {
    let src = root().join("tests/c/test_cuda_process.c");
    let bin = compile_c(&[&src], "test_cuda_process_capture", &["-ldl", "-lpthread"]);
    let n = 4096usize;
    let h = format!(r#"{{"tokens":{{"dtype":"U16","shape":[{n}],"data_offsets":[0,{}]}}}}"#, 2 * n);
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend((0..n).flat_map(|i| ((i * 5 + 1) as u16).to_le_bytes()));
    let path = scratch("cuda_review_finalizer").join("process.safetensors");
    std::fs::write(&path, img).unwrap();
    for knobs in [
        &[("STAND_IN_CAPTURE_MODE", Some("global"))][..],
        &[("STAND_IN_CAPTURE_MODE", Some("global")), ("STAND_IN_CAPTURE_BLOCKING", Some("1"))],
        &[("STAND_IN_CAPTURE_MODE", Some("thread_local"))],
    ] {
        let mut all = knobs.to_vec();
        all.push(("STAND_IN_LEAK_REPORT", Some("1")));
        let out = run_with_stand_in(&bin, &["capture", path.to_str().unwrap()], &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{knobs:?}: {err}");
        assert_clean_exit_report(&err, "capture");
    }
}
