//! Handing tensors over: copy-on-write puts to cpu (bytes, isolation from the file, anonymous memory, what
//! writes and truncation of the file do; the fit check is in place_cpu.rs), DLPack exports in both forms (a
//! legacy consumer's write never reaches the file), the gather's batch ring (a held batch is never rewritten,
//! BUSY at the bound), gathers from a host buffer, and the CUDA stream handshake on the stand-in driver.

use crate::common::*;
use hostfirst::place::export::{export_buffer, export_view, ConsumerStream, CopyPolicy, Form, Keep};
use hostfirst::place::gather::{random_offsets, Gather};
use hostfirst::place::{load_with, put, LoadOptions, Plan, PutOptions, Rules, Target};
use hostfirst::{DType, Device, Status, TensorFile};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Writes a safetensors file of `(name, dtype, shape, bytes)` tensors; the header length is chosen so the
/// data does not start on a page boundary.
fn write_file(name: &str, tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> PathBuf {
    let mut header = String::from("{");
    let mut off = 0usize;
    for (i, (n, dt, shape, bytes)) in tensors.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header.push_str(&format!(
            r#""{n}":{{"dtype":"{dt}","shape":[{}],"data_offsets":[{off},{}]}}"#,
            dims.join(","),
            off + bytes.len()
        ));
        off += bytes.len();
    }
    header.push('}');
    header.push_str(&" ".repeat((8 - (header.len() + 3) % 8) % 8 + 3)); // 8 + len: not page-aligned
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    for (_, _, _, b) in tensors {
        img.extend_from_slice(b);
    }
    // One folder per process (tests re-run in child processes) and, for shared fixtures, one name per thread
    // (model()): a test never reads a file another test is rewriting.
    let path = scratch(&format!("handoff-{}", std::process::id())).join(name);
    std::fs::write(&path, &img).unwrap();
    path
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(salt as u32 % 31) as u8 ^ salt).collect()
}

fn cow() -> PutOptions<'static> {
    PutOptions { copy_on_write: true, ..PutOptions::default() }
}

/// `(Rss, Anonymous)` in KiB of the mapping that holds `addr`, from /proc/self/smaps.
fn vma_kib(addr: u64) -> (u64, u64) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let (mut rss, mut anon) = (None, None);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-').filter(|(lo, _)| u64::from_str_radix(lo, 16).is_ok()) {
            let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap_or(0));
            inside = lo <= addr && addr < hi;
            continue;
        }
        let kib = || line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
        if inside && line.starts_with("Rss:") {
            rss = Some(kib());
        }
        if inside && line.starts_with("Anonymous:") {
            anon = Some(kib());
        }
    }
    (rss.expect("the mapping is in smaps"), anon.expect("the mapping has an Anonymous line"))
}

fn model() -> (PathBuf, Vec<(&'static str, Vec<u8>)>) {
    let t = vec![
        ("odd", "U8", vec![10_001], pattern(10_001, 1)),
        ("tok", "U16", vec![3 << 19], pattern(3 << 20, 2)),
        ("small", "F32", vec![5], pattern(20, 3)),
    ];
    let path = write_file(&format!("model-{:?}.safetensors", std::thread::current().id()), &t);
    (path, t.into_iter().map(|(n, _, _, b)| (n, b)).collect())
}

#[test]
fn copy_on_write_put_reads_the_file_and_keeps_writes_private() {
    let (path, tensors) = model();
    let file_before = std::fs::read(&path).unwrap();
    let f = TensorFile::open(&path).unwrap();
    let mut bufs = Vec::new();
    for (name, bytes) in &tensors {
        let v = f.view(name).unwrap();
        let b = put(&v, Target::Device(Device::CPU), cow()).unwrap();
        assert!(b.is_file_backed(), "{name}");
        assert_eq!(b.device(), Device::CPU);
        assert_eq!(b.host_bytes().unwrap(), &bytes[..], "{name}: bytes equal the file");
        assert_eq!(b.address() % 4096, v.file_offset() % 4096, "{name}: where the file puts it in its page");
        bufs.push(b);
    }
    // Writes: first and last byte of every tensor (neighbours share pages with each other), and a whole span.
    for b in &mut bufs {
        let d = b.host_bytes_mut().unwrap();
        let n = d.len();
        d[0] ^= 0xff;
        d[n - 1] ^= 0xff;
        d[n / 3..n / 2].fill(0x5a);
    }
    assert!(std::fs::read(&path).unwrap() == file_before, "the file never changes");
    for (name, bytes) in &tensors {
        assert!(f.view(name).unwrap().to_vec().unwrap() == *bytes, "{name}: the file's bytes, read with pread");
        let again = put(&f.view(name).unwrap(), Target::Device(Device::CPU), cow()).unwrap();
        assert!(again.host_bytes().unwrap() == &bytes[..], "{name}: a new mapping sees the file, not our writes");
    }
    let d = bufs[1].host_bytes().unwrap();
    assert_eq!((d[0], d[d.len() / 3]), (tensors[1].1[0] ^ 0xff, 0x5a), "our writes stay in our buffer");
    // A Rust buffer made this way goes out through DLPack like any cpu buffer, writable and shared.
    let shared = Arc::new(Mutex::new(bufs.pop().unwrap()));
    let e = export_buffer(&shared, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
    assert!(!e.read_only && !e.copied && e.device == Device::CPU);
    assert_eq!(e.data, shared.lock().unwrap().address());
}

#[test]
fn copy_on_write_put_grows_anonymous_memory_only_when_written() {
    let n = 64usize << 20;
    let path = write_file("anon.safetensors", &[("big", "U8", vec![n as u64], pattern(n, 9))]);
    let f = TensorFile::open(&path).unwrap();
    let mut b = put(&f.view("big").unwrap(), Target::Device(Device::CPU), cow()).unwrap();
    let addr = b.address();
    let (rss, anon) = vma_kib(addr);
    assert_eq!(anon, 0, "nothing private after the put");
    assert!(rss >= (n as u64 >> 10) * 9 / 10, "populated for reading up front: Rss {rss} KiB of {} KiB", n >> 10);
    let sum: u64 = b.host_bytes().unwrap().iter().step_by(4096).map(|&x| x as u64).sum();
    std::hint::black_box(sum);
    assert_eq!(vma_kib(addr).1, 0, "reading copies nothing");
    let d = b.host_bytes_mut().unwrap();
    let written = 8usize << 20;
    for i in (0..written).step_by(4096) {
        d[i] = d[i].wrapping_add(1);
    }
    let anon = vma_kib(addr).1;
    let want = written as u64 >> 10;
    assert!(anon >= want && anon <= want + 8, "only written pages become private: {anon} KiB, wrote {want} KiB");
    // An eager put of the same tensor is anonymous memory of its own, all of it.
    let e = put(&f.view("big").unwrap(), Target::Device(Device::CPU), PutOptions::default()).unwrap();
    assert!(!e.is_file_backed());
    assert!(vma_kib(e.address()).1 >= (n as u64 >> 10) * 9 / 10);
}

#[test]
fn copy_on_write_put_of_a_truncated_file_is_refused() {
    let (path, _) = model();
    let copy = scratch(&format!("handoff-{}", std::process::id())).join("trunc.safetensors");
    std::fs::copy(&path, &copy).unwrap();
    let f = TensorFile::open(&copy).unwrap();
    let len = std::fs::metadata(&copy).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&copy).unwrap().set_len(len - 100).unwrap();
    let e = put(&f.view("small").unwrap(), Target::Device(Device::CPU), cow()).unwrap_err();
    assert_eq!(e.status(), Status::Truncated, "{}", e.message());
    assert!(e.message().contains("'small'"), "{}", e.message());
    put(&f.view("odd").unwrap(), Target::Device(Device::CPU), cow()).unwrap(); // before the new end: fine
}

/// The documented tie to the file: pages not yet written read the file's page cache, so a write to the file
/// (here by this process with pwrite; another process's is the same) shows in them; pages written keep ours.
#[test]
fn copy_on_write_unwritten_pages_follow_the_file() {
    let n = 1usize << 20;
    let path = write_file("follow.safetensors", &[("t", "U8", vec![n as u64], pattern(n, 4))]);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("t").unwrap();
    let mut b = put(&v, Target::Device(Device::CPU), cow()).unwrap();
    let (p, q) = (100 * 1024, 600 * 1024); // two bytes on different pages
    b.host_bytes_mut().unwrap()[q] = 0x11;
    let w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    w.write_all_at(&[0xee], v.file_offset() + p as u64).unwrap();
    w.write_all_at(&[0xee], v.file_offset() + q as u64).unwrap();
    let d = b.host_bytes().unwrap();
    assert_eq!(d[p], 0xee, "a page not yet written shows the file's change");
    assert_eq!(d[q], 0x11, "a written page is ours");
    // An eager copy is isolated from both.
    w.write_all_at(&[0x77], v.file_offset() + p as u64).unwrap();
    let mut c = put(&v, Target::Device(Device::CPU), PutOptions::default()).unwrap();
    w.write_all_at(&[0x33], v.file_offset() + p as u64).unwrap();
    assert_eq!(c.host_bytes_mut().unwrap()[p], 0x77);
}

/// Runs `body` in a child process that must die of `signal` (the parent asserts it did).
fn in_child_dying_of(test: &str, signal: i32, body: impl FnOnce()) {
    let test = test.split_once("::").map_or(test, |(_, rest)| rest);
    if std::env::var(STAND_IN_CHILD).as_deref() == Ok(test) {
        body();
        println!("the child survived");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = run(&exe, &[test, "--exact", "--nocapture", "--test-threads=1"], &[(STAND_IN_CHILD, Some(test))]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(signal),
        "child for {test}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

fn truncate_after_cow_put(touch_written: bool) {
    let n = 1usize << 20;
    let name = if touch_written { "sigbus-w.safetensors" } else { "sigbus.safetensors" };
    let path = write_file(name, &[("t", "U8", vec![n as u64], pattern(n, 5))]);
    let f = TensorFile::open(&path).unwrap();
    let mut b = put(&f.view("t").unwrap(), Target::Device(Device::CPU), cow()).unwrap();
    b.host_bytes_mut().unwrap()[n - 10] = 1;
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    let d = b.host_bytes().unwrap();
    let x = std::hint::black_box(if touch_written { d[n - 10] } else { d[n / 2] });
    println!("read {x}");
}

#[test]
fn copy_on_write_truncation_raises_sigbus_on_pages_not_written() {
    in_child_dying_of(
        concat!(module_path!(), "::copy_on_write_truncation_raises_sigbus_on_pages_not_written"),
        libc::SIGBUS,
        || truncate_after_cow_put(false),
    );
}

#[test]
fn copy_on_write_truncation_raises_sigbus_on_written_pages_too() {
    in_child_dying_of(
        concat!(module_path!(), "::copy_on_write_truncation_raises_sigbus_on_written_pages_too"),
        libc::SIGBUS,
        || truncate_after_cow_put(true),
    );
}

#[test]
fn copy_on_write_falls_back_to_a_copy_without_a_file_and_loads_use_it() {
    let h = r#"{"x":{"dtype":"U8","shape":[5],"data_offsets":[0,5]}}"#;
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend([1u8, 2, 3, 4, 5]);
    let m = TensorFile::from_bytes(img).unwrap();
    let b = put(&m.view("x").unwrap(), Target::Device(Device::CPU), cow()).unwrap();
    assert!(!b.is_file_backed(), "a view over memory is copied");
    assert_eq!(b.host_bytes().unwrap(), &[1, 2, 3, 4, 5]);

    let (path, tensors) = model();
    let f = TensorFile::open(&path).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["small=host", "*=cpu"]).unwrap()).unwrap();
    let mut calls = Vec::new();
    let mut cb = |d: u64, t: u64| {
        calls.push((d, t));
        false
    };
    let loaded = load_with(
        &f,
        &plan,
        LoadOptions { copy_on_write: true, progress: Some(&mut cb), page_cache: Default::default() },
    )
    .unwrap();
    assert_eq!(*calls.last().unwrap(), (plan.device_bytes(), plan.device_bytes()));
    for (name, bytes) in &tensors {
        match loaded.get(name).unwrap() {
            hostfirst::place::Placed::Buffer(b) => {
                let b = b.lock().unwrap();
                assert!(b.is_file_backed(), "{name}");
                assert!(b.host_bytes().unwrap() == &bytes[..], "{name}");
            }
            hostfirst::place::Placed::View(v) => assert_eq!(v.name(), "small"),
        }
    }
    let plain = load_with(&f, &plan, LoadOptions::default()).unwrap();
    let hostfirst::place::Placed::Buffer(b) = plain.get("tok").unwrap() else { panic!("tok is a buffer") };
    assert!(!b.lock().unwrap().is_file_backed(), "copies unless asked");
}

#[test]
fn legacy_export_of_a_view_is_writable_and_never_reaches_the_file() {
    let (path, tensors) = model();
    let before = std::fs::read(&path).unwrap();
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let e = export_view(&v, Form::Legacy, CopyPolicy::IfNeeded, None).unwrap();
    assert!(!e.read_only && !e.copied, "a copy-on-write mapping, not a copy");
    assert_ne!(e.data, v.mapped().as_ptr() as u64, "never the read-only mapping");
    let Keep::Buffer(b) = &e.keep else { panic!("a buffer") };
    assert!(b.lock().unwrap().is_file_backed());
    // The consumer writes through the pointer it was given.
    let n = tensors[1].1.len();
    // SAFETY: the export keeps n writable bytes alive at e.data.
    let d = unsafe { std::slice::from_raw_parts_mut(e.data as *mut u8, n) };
    assert!(d == &tensors[1].1[..]);
    d.fill(0xab);
    assert!(std::fs::read(&path).unwrap() == before, "the file is unchanged");
    assert!(v.mapped() == &tensors[1].1[..], "and so is the view");
    // The versioned form is the read-only mapping; a copy when asked.
    let r = export_view(&v, Form::Versioned, CopyPolicy::IfNeeded, None).unwrap();
    assert!(r.read_only && r.data == v.mapped().as_ptr() as u64);
    let c = export_view(&v, Form::Legacy, CopyPolicy::Always, None).unwrap();
    let Keep::Buffer(cb) = &c.keep else { panic!("a buffer") };
    assert!(c.copied && !cb.lock().unwrap().is_file_backed());
}

fn direct(src: &[u8], elem: usize, offsets: &[u64], window: u64) -> Vec<u8> {
    offsets.iter().flat_map(|&o| src[o as usize * elem..(o + window) as usize * elem].to_vec()).collect()
}

fn bytes_of(b: &Arc<Mutex<hostfirst::place::Buffer>>) -> Vec<u8> {
    let b = b.lock().unwrap();
    let mut v = vec![0u8; b.nbytes() as usize];
    b.copy_to_host(&mut v).unwrap();
    v
}

/// A held batch (a reference, or a DLPack export) is never rewritten; released batches are reused; at the
/// bound a run is BUSY and changes nothing.
fn check_ring(device: Device) {
    let n = 20_000u64;
    let src = pattern(2 * n as usize, 6);
    let path = write_file(&format!("ring-{device}.safetensors"), &[("tok", "U16", vec![n], src.clone())]);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let mut g = Gather::new(device, DType::U16, 4, 64).unwrap();
    assert_eq!((g.ring_bound(), g.ring_len(), g.held()), (4, 1, 0));
    let mut state = 3u64;
    let mut offs = vec![0u64; 4];
    let mut next = |g: &mut Gather| {
        random_offsets(&mut state, n, 64, &mut offs).unwrap();
        let b = g.run(&v, &offs).unwrap();
        (b, offs.clone())
    };
    // Released every step: two batches (the current one and the one being filled), reused.
    for _ in 0..5 {
        drop(next(&mut g));
    }
    assert_eq!(g.ring_len(), 2);
    // Held: a reference and an export of it; three more runs go elsewhere, and the held one keeps its bytes.
    let (held, held_offs) = next(&mut g);
    let export = export_buffer(&held, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
    let want = direct(&src, 2, &held_offs, 64);
    for _ in 0..3 {
        let (b, o) = next(&mut g);
        assert!(!Arc::ptr_eq(&b, &held));
        assert!(bytes_of(&b) == direct(&src, 2, &o, 64));
    }
    assert!(bytes_of(&held) == want, "a held batch is never rewritten ({device})");
    assert_eq!((g.ring_len(), g.held()), (3, 1), "the held batch, the current one, the one being filled");
    drop(held);
    assert_eq!(g.held(), 1, "the export alone still holds it");
    for _ in 0..3 {
        drop(next(&mut g));
    }
    let Keep::Buffer(eb) = &export.keep else { panic!("a buffer") };
    assert!(bytes_of(eb) == want, "exported: still never rewritten");
    drop(export);
    assert_eq!(g.held(), 0);
    // Every batch held: grow to the bound, then BUSY with nothing changed.
    let mut kept: Vec<_> = (0..4).map(|_| next(&mut g)).collect();
    assert_eq!((g.ring_len(), g.held()), (4, 4));
    let current = bytes_of(&g.current());
    let e = g.run(&v, &[0, 1, 2, 3]).unwrap_err();
    assert_eq!(e.status(), Status::Busy, "{}", e.message());
    assert!(e.message().contains("all 4 batches") && e.message().contains("still held"), "{}", e.message());
    assert!(bytes_of(&g.current()) == current, "BUSY changes nothing");
    for (b, o) in &kept {
        assert!(bytes_of(b) == direct(&src, 2, o, 64));
    }
    let (released, _) = kept.remove(1);
    let addr = released.lock().unwrap().address();
    drop(released);
    let (b, _) = next(&mut g);
    assert_eq!(b.lock().unwrap().address(), addr, "the released batch is reused");
    drop(b);
    // Lowering the bound: idle batches go now; held ones stay valid; raising it again grows on demand.
    g.set_ring_bound(1).unwrap();
    assert_eq!(g.ring_len(), 1);
    for (b, o) in &kept {
        assert!(bytes_of(b) == direct(&src, 2, o, 64), "dropped from the ring, still valid while held");
    }
    drop(kept);
    assert_eq!(g.set_ring_bound(0).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(g.set_ring_bound(1025).unwrap_err().status(), Status::InvalidArgument);
    let hold = g.current();
    assert_eq!(g.run(&v, &[0, 1, 2, 3]).unwrap_err().status(), Status::Busy, "bound 1, held");
    drop(hold);
    drop(g.run(&v, &[0, 1, 2, 3]).unwrap());
    // A window longer than the tensor is a clear OUT_OF_RANGE, not an allocation failure.
    let mut long = Gather::new(device, DType::U16, 1, n + 1).unwrap();
    let e = long.run(&v, &[0]).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(e.message().contains("window (20001) is longer than tensor 'tok' (20000 elements)"), "{}", e.message());
}

#[test]
fn ring_never_rewrites_a_held_batch_on_cpu() {
    check_ring(Device::CPU);
}

/// A host buffer as the source: matches a direct computation, and a truncated file cannot touch it.
fn check_gather_from_buffer(device: Device) {
    let n = 1u64 << 16;
    let src = pattern(2 * n as usize, 7);
    let path = write_file(&format!("from-buffer-{device}.safetensors"), &[("tok", "U16", vec![n], src.clone())]);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let host = put(&v, Target::Device(Device::CPU), PutOptions::default()).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    let mut g = Gather::new(device, DType::U16, 8, 100).unwrap();
    let mut state = 11u64;
    let mut offs = vec![0u64; 8];
    for step in 0..4 {
        random_offsets(&mut state, n, 100, &mut offs).unwrap();
        if step == 0 {
            offs[7] = n - 100;
        }
        let b = g.run_from_buffer(&host, &offs).unwrap();
        assert!(bytes_of(&b) == direct(&src, 2, &offs, 100), "step {step} on {device}");
    }
    assert_eq!(g.run(&v, &offs).unwrap_err().status(), Status::Truncated, "the view reads the truncated file");
    let e = g.run_from_buffer(&host, &[0, 0, 0, 0, 0, 0, 0, n - 99]).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange, "{}", e.message());
    let mut g8 = Gather::new(device, DType::U8, 8, 100).unwrap();
    assert_eq!(g8.run_from_buffer(&host, &offs).unwrap_err().status(), Status::InvalidArgument, "dtype differs");
}

#[test]
fn gather_from_a_host_buffer_is_truncation_proof() {
    check_gather_from_buffer(Device::CPU);
}

fn waits() -> u64 {
    stand_in_query("stand_in_stream_wait_events")
}

#[test]
fn stand_in_ring_and_stream_handshake() {
    in_stand_in_child(concat!(module_path!(), "::stand_in_ring_and_stream_handshake"), &[], || {
        check_ring(Device::cuda(0));
        check_gather_from_buffer(Device::cuda(0));
        let cuda_src = Arc::new(Mutex::new(
            hostfirst::place::Buffer::alloc("c", DType::U16, &[100], 200, Device::cuda(0)).unwrap(),
        ));
        let mut g = Gather::new(Device::cuda(0), DType::U16, 2, 8).unwrap();
        let e = g.run_from_buffer(&cuda_src.lock().unwrap(), &[0, 1]).unwrap_err();
        assert_eq!(e.status(), Status::Unsupported, "{}", e.message());

        // The consumer side: exporting a batch for a stream makes that stream wait on the batch's event.
        let path = write_file("handshake.safetensors", &[("tok", "U16", vec![1000], pattern(2000, 8))]);
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("tok").unwrap();
        let b = g.run(&v, &[0, 10]).unwrap();
        let w0 = waits();
        let e1 = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
        assert_eq!(waits(), w0 + 1, "the legacy default stream waits on the copy's event");
        assert_eq!(e1.release_on, Some(ConsumerStream::Legacy));
        let e2 = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::PerThread).unwrap();
        let e3 = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::NoSync).unwrap();
        assert_eq!(waits(), w0 + 2, "-1: the consumer synchronises itself");
        assert_eq!(e3.release_on, None);
        let events = stand_in_query("stand_in_live_events");
        // The release side: each release records an event on the consumer's stream; for streams 1 and 2 that
        // is the legacy default stream (it covers every blocking stream, every thread's per-thread one too),
        // so both releases keep one event ...
        for e in [e1, e2, e3] {
            hostfirst::place::export::release(&e.keep, e.release_on).unwrap();
        }
        assert_eq!(stand_in_query("stand_in_live_events"), events + 1, "one per stream recorded on");
        let addr = b.lock().unwrap().address();
        drop(b);
        // ... and the next rewrite of that batch waits for them on the gather's stream. (A run never fills the
        // current batch: the next run fills the spare, the one after rewrites this batch.)
        let w1 = waits();
        drop(g.run(&v, &[3, 4]).unwrap());
        assert_eq!(waits(), w1, "the spare: no consumer released it");
        let b = g.run(&v, &[5, 6]).unwrap();
        assert_eq!(b.lock().unwrap().address(), addr);
        assert!(Arc::ptr_eq(&b, &g.current()));
        assert_eq!(waits(), w1 + 1, "the copy stream waited for the consumers' release event");
        assert_eq!(stand_in_query("stand_in_live_events"), events, "and forgot them");
        drop(b);
        let w2 = waits();
        drop(g.run(&v, &[7, 8]).unwrap());
        assert_eq!(waits(), w2, "nothing to wait for when no consumer released it");
        // Host buffers need no handshake.
        let h = Arc::new(Mutex::new(hostfirst::place::Buffer::alloc("h", DType::U8, &[4], 4, Device::CPU).unwrap()));
        let e = export_buffer(&h, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
        assert!(e.release_on.is_none());
        assert_eq!(waits(), w2);
        // The consumer's stream work (the waits and release records queued on the default stream) runs at its
        // next synchronisation; a synchronous copy from the device is one.
        assert!(bytes_of(&g.current()) == direct(&pattern(2000, 8), 2, &[7, 8], 8));
        drop((g, f, e, cuda_src));
        assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
        assert_eq!(stand_in_query("stand_in_live_pinned"), 0);
    });
}

/// The C program, compiled once (two tests compiling one output path would race), on cpu and on the stand-in.
#[test]
fn c_handoff_on_cpu_and_the_stand_in() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_handoff");
    run_ok(&bin, &[scratch("c_handoff").to_str().unwrap()], &[]);
    let out = run_ok_with_stand_in(&bin, &[scratch("c_handoff_stand_in").to_str().unwrap(), "cuda"], &[]);
    assert!(out.contains("cuda ok"), "{out}");
}

#[test]
fn cli_put_copy_on_write_and_gather_from_host() {
    let path = write_file("cli.safetensors", &[("tok", "U16", vec![20_000], pattern(40_000, 10))]);
    let p = path.to_str().unwrap();
    let v = json(&run_ok(&cli(), &["put", p, "tok", "--device", "cpu", "--copy-on-write", "--json"], &[]));
    assert_eq!((v["copy_on_write"].as_bool(), v["verified"].as_bool()), (Some(true), Some(true)), "{v}");
    let v = json(&run_ok(&cli(), &["put", p, "tok", "--device", "cpu", "--json"], &[]));
    assert_eq!(v["copy_on_write"].as_bool(), Some(false), "eager unless asked");
    let out = run_ok(&cli(), &["put", p, "tok", "--device", "cpu", "--copy-on-write"], &[]);
    assert!(out.contains("copy-on-write: the buffer maps the file's pages privately"), "{out}");

    let args = ["gather", p, "tok", "--batch", "4", "--window", "100", "--device", "cpu", "--iters", "5"];
    let v = json(&run_ok(&cli(), &[&args[..], &["--from-host", "--json"]].concat(), &[]));
    assert_eq!((v["check"].as_str(), v["from_host"].as_bool()), (Some("ok"), Some(true)), "{v}");
    assert!(v["put_s"].as_f64().unwrap() >= 0.0);
    // A window as long as the tensor, or far longer: a clear error, not an out-of-memory one.
    for w in ["20000", "1000000000000000"] {
        let o = run(&cli(), &["gather", p, "tok", "--batch", "4", "--window", w, "--device", "cpu"], &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("must be shorter than tensor 'tok' (20000 elements)"), "{err}");
        assert!(!err.contains("OUT_OF_MEMORY"), "{err}");
    }
}
