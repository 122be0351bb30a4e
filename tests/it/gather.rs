//! The batch gather's failure and first-run guarantees (issue 20, items 3 and 4): a run that fails part-way
//! leaves the current batch byte-identical, and device batches are zero before the first run.

use crate::common::*;
use hostfirst::device::cuda::DeviceMemory;
use hostfirst::place::Gather;
use hostfirst::{DType, Device, Status, TensorFile};
use std::path::PathBuf;

/// A file with one u16 tensor `tok` of `n` elements (element i = i * 7 + 3, mod 2^16).
fn token_file(name: &str, n: u64) -> PathBuf {
    let header = format!("{{\"tok\":{{\"dtype\":\"U16\",\"shape\":[{n}],\"data_offsets\":[0,{}]}}}}", 2 * n);
    let mut header = header.into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(&header);
    for i in 0..n {
        img.extend_from_slice(&((i * 7 + 3) as u16).to_le_bytes());
    }
    let p = scratch(&format!("gather-{}", std::process::id())).join(name);
    std::fs::write(&p, img).unwrap();
    p
}

fn batch_bytes(g: &Gather) -> Vec<u8> {
    let mut got = vec![0u8; g.nbytes() as usize];
    g.copy_to_host(&mut got).unwrap();
    got
}

fn expected(offsets: &[u64], window: u64) -> Vec<u8> {
    offsets.iter().flat_map(|&o| (o..o + window).flat_map(|i| ((i * 7 + 3) as u16).to_le_bytes())).collect()
}

/// On `device`, for each ring bound (1: the current batch is the only one; 4: a spare is filled), with and
/// without the consumer holding the current batch: a run whose later windows lie past the end of a
/// truncated file fails with `TRUNCATED`, and the current batch — through `copy_to_host`, `current()` and a
/// held reference — keeps the previous run's bytes; a later good run works.
fn check_failed_run_keeps_the_current_batch(device: Device) {
    let n = 1u64 << 16;
    let path = token_file(&format!("keep-{device}.safetensors"), n);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let full = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(full - n).unwrap(); // second half gone
    let (w, good, bad) = (64u64, [5u64, 100, 7, 900], [10u64, 20, n - 64, 30]);
    for bound in [1usize, 4] {
        for hold in [false, true] {
            if bound == 1 && hold {
                continue; // a held batch at bound 1 is BUSY, tested below
            }
            let what = format!("{device}, bound {bound}, holding the batch: {hold}");
            let mut g = Gather::new(device, DType::U16, good.len() as u64, w).unwrap();
            g.set_ring_bound(bound).unwrap();
            let held = g.run(&v, &good).unwrap();
            let before = batch_bytes(&g);
            assert!(before == expected(&good, w), "{what}: the good run");
            let keep = if hold {
                Some(held)
            } else {
                drop(held);
                None
            };
            for _ in 0..3 {
                let e = g.run(&v, &bad).unwrap_err();
                assert_eq!(e.status(), Status::Truncated, "{what}: {}", e.message());
                assert!(batch_bytes(&g) == before, "{what}: the current batch changed after a failed run");
                let mut via_current = vec![0u8; g.nbytes() as usize];
                g.current().lock().unwrap().copy_to_host(&mut via_current).unwrap();
                assert!(via_current == before, "{what}: current()");
                if let Some(k) = &keep {
                    let mut held_bytes = vec![0u8; g.nbytes() as usize];
                    k.lock().unwrap().copy_to_host(&mut held_bytes).unwrap();
                    assert!(held_bytes == before, "{what}: the held batch");
                }
            }
            let next = [1u64, 2, 3, 4];
            g.run(&v, &next).unwrap();
            assert!(batch_bytes(&g) == expected(&next, w), "{what}: a run after the failures");
            assert!(g.ring_len() <= bound);
        }
    }
    let mut g = Gather::new(device, DType::U16, 4, w).unwrap();
    g.set_ring_bound(1).unwrap();
    let held = g.run(&v, &good).unwrap();
    assert_eq!(g.run(&v, &bad).unwrap_err().status(), Status::Busy, "bound 1, held: BUSY before any read");
    drop(held);
}

#[test]
fn failed_run_keeps_the_current_batch_on_cpu() {
    check_failed_run_keeps_the_current_batch(Device::CPU);
}

#[test]
fn stand_in_failed_run_keeps_the_current_batch() {
    in_stand_in_child(
        concat!(module_path!(), "::stand_in_failed_run_keeps_the_current_batch"),
        &[("STAND_IN_DEVICES", Some("1"))],
        || {
            check_failed_run_keeps_the_current_batch(Device::CUDA_HOST);
            check_failed_run_keeps_the_current_batch(Device::cuda(0));
        },
    );
}

/// With the stand-in filling fresh device memory with 0xA5 (as real device memory holds whatever was there),
/// a new CUDA gather's batch reads as zeros before any run, through `copy_to_host` and `current()`; and a
/// batch added to the ring later is zeroed as well. The first assertion proves the poison is on, so the
/// gather's zeros come from its memset.
#[test]
fn stand_in_device_batches_are_zero_before_the_first_run() {
    in_stand_in_child(
        concat!(module_path!(), "::stand_in_device_batches_are_zero_before_the_first_run"),
        &[("STAND_IN_DEVICES", Some("1")), ("STAND_IN_POISON_FRESH", Some("1"))],
        || {
            {
                let m = DeviceMemory::alloc(0, 256).unwrap();
                let mut raw = vec![0u8; 256];
                m.copy_to_host(0, &mut raw).unwrap();
                assert!(raw.iter().all(|&b| b == 0xA5), "the stand-in poisons fresh device memory");
            }
            let memsets = stand_in_query("stand_in_memsets");
            let g = Gather::new(Device::cuda(0), DType::U16, 8, 1000).unwrap();
            assert!(stand_in_query("stand_in_memsets") > memsets, "the batch was set on the device");
            assert!(batch_bytes(&g).iter().all(|&b| b == 0), "copy_to_host before the first run");
            let mut via = vec![1u8; g.nbytes() as usize];
            g.current().lock().unwrap().copy_to_host(&mut via).unwrap();
            assert!(via.iter().all(|&b| b == 0), "current() before the first run");
        },
    );
}

/// `hostfirst devices` names the read engine: io_uring where the probe succeeds (this kernel), the pread pool
/// with its reason when `HOSTFIRST_IO=pool` forces it.
#[test]
fn cli_devices_names_the_read_engine() {
    let v = json(&run_ok(&cli(), &["devices", "--json"], &[("HOSTFIRST_IO", Some("pool"))]));
    let reads = v["reads"].as_str().unwrap();
    assert!(reads.starts_with("pread pool") && reads.contains("HOSTFIRST_IO=pool"), "{reads}");
    let text = run_ok(&cli(), &["devices"], &[("HOSTFIRST_IO", None)]);
    let line = text.lines().find(|l| l.starts_with("reads: ")).expect("a reads line");
    assert!(line.starts_with("reads: io_uring") || line.contains("io_uring unavailable"), "{line}");
}

/// Runs the calling test again in a child process with `HOSTFIRST_IO=<io>` (the engine's backend is chosen
/// once per process); returns true in that child, where the test body runs.
fn with_io_backend(test: &str, io: &str) -> bool {
    if std::env::var("HOSTFIRST_TEST_IO_CHILD").as_deref() == Ok(test) {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = run(
        &exe,
        &[test, "--exact", "--nocapture", "--test-threads=1"],
        &[("HOSTFIRST_IO", Some(io)), ("HOSTFIRST_TEST_IO_CHILD", Some(test))],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} with HOSTFIRST_IO={io}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// Gathers through the engine (unprefaulted file: every window of a batch read at once) match a direct
/// computation at queue depths 1, 3 and 64, on both backends, for batches larger than the depth; a window
/// past the end of a truncated file names the window and the tensor.
fn check_engine_gather() {
    let n = 1u64 << 18;
    let path = token_file(&format!("engine-{}.safetensors", std::process::id()), n);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let (b, w) = (200u64, 1025u64);
    let mut g = Gather::new(Device::CPU, DType::U16, b, w).unwrap();
    let mut state = 11u64;
    let mut offs = vec![0u64; b as usize];
    for depth in [1usize, 3, 64] {
        g.set_tuning(hostfirst::engine::Tuning { queue_depth: depth, ..Default::default() });
        for _ in 0..3 {
            hostfirst::place::gather::random_offsets(&mut state, n, w, &mut offs).unwrap();
            g.run(&v, &offs).unwrap();
            assert!(batch_bytes(&g) == expected(&offs, w), "depth {depth}");
        }
    }
    let full = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(full - n).unwrap();
    for (i, o) in offs.iter_mut().enumerate() {
        *o = i as u64 * 100; // before the new end...
    }
    offs[150] = n - w; // ...but one
    let e = g.run(&v, &offs).unwrap_err();
    assert_eq!(e.status(), Status::Truncated, "{}", e.message());
    assert!(e.message().contains("tensor 'tok': window 150"), "{}", e.message());
    let backend = hostfirst::engine::backend();
    println!("gathered through {}", backend.name());
}

#[test]
fn engine_gather_on_the_pool() {
    if with_io_backend("gather::engine_gather_on_the_pool", "pool") {
        assert_eq!(hostfirst::engine::backend(), hostfirst::engine::Backend::Pool);
        check_engine_gather();
    }
}

#[test]
fn engine_gather_on_io_uring_where_offered() {
    if with_io_backend("gather::engine_gather_on_io_uring_where_offered", "auto") {
        check_engine_gather();
    }
}

use hostfirst::place::gather_stream::GatherStream;
use std::sync::{Arc, Mutex};

/// A stream over `g` (shared with the test) from view `v`, as the C API builds it.
fn stream_over(g: &Arc<Mutex<Gather>>, v: &hostfirst::file::View, offsets: Vec<u64>, depth: usize) -> GatherStream {
    let (g, v) = (Arc::clone(g), v.clone());
    let b = g.lock().unwrap().batch() as usize;
    g.lock().unwrap().set_ring_bound(depth + 3).unwrap();
    GatherStream::start(b, offsets, depth, Box::new(move |o: &[u64]| g.lock().unwrap().run(&v, o))).unwrap()
}

/// In order, byte for byte, ending with None; the worker fills `depth` batches ahead while the consumer waits;
/// a batch handed out keeps its bytes while later ones are filled; the ring stays within depth + 3.
fn check_stream(device: Device) {
    let n = 1u64 << 16;
    let path = token_file(&format!("stream-{device}.safetensors"), n);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let (b, w, batches, depth) = (8usize, 100u64, 30usize, 3usize);
    let g = Arc::new(Mutex::new(Gather::new(device, DType::U16, b as u64, w).unwrap()));
    let mut state = 5u64;
    let mut offsets = vec![0u64; b * batches];
    hostfirst::place::gather::random_offsets(&mut state, n, w, &mut offsets).unwrap();
    let mut s = stream_over(&g, &v, offsets.clone(), depth);
    assert_eq!(s.len(), batches);
    let mut held = Vec::new();
    for k in 0..batches {
        let batch = s.next_batch().unwrap().expect("a batch");
        let mut got = vec![0u8; b * w as usize * 2];
        batch.lock().unwrap().copy_to_host(&mut got).unwrap();
        assert!(got == expected(&offsets[k * b..(k + 1) * b], w), "batch {k} on {device}");
        if k == 2 {
            // The worker runs ahead while the consumer computes.
            let t = std::time::Instant::now();
            // Asynchronous: wait for it (2 minutes ends a hang; this is no speed test).
            while s.ready() < depth && t.elapsed() < std::time::Duration::from_secs(120) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(s.ready(), depth, "{depth} batches prefetched");
        }
        held.push((k, got, batch));
        if held.len() > 1 {
            held.remove(0); // hold the previous batch while the next is taken, as a Python for loop does
        }
        for (hk, bytes, hb) in &held {
            let mut now = vec![0u8; bytes.len()];
            hb.lock().unwrap().copy_to_host(&mut now).unwrap();
            assert!(now == *bytes, "held batch {hk} unchanged");
        }
        assert!(g.lock().unwrap().ring_len() <= depth + 3);
    }
    assert!(s.next_batch().unwrap().is_none(), "the end");
    assert!(s.next_batch().unwrap().is_none(), "still the end");
    assert_eq!(s.delivered(), batches);
}

#[test]
fn stream_on_cpu_in_order_and_ahead() {
    check_stream(Device::CPU);
}

/// A read failing in the worker (batch 4 past the end of the truncated file) ends the stream: batches 0-3
/// come first, then the TRUNCATED error naming batch 4, at every later call; dropping a stream mid-way
/// returns promptly and leaves only what the consumer holds.
#[test]
fn stream_errors_surface_in_order_and_drop_cancels() {
    let n = 1u64 << 16;
    let path = token_file("stream-err.safetensors", n);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let full = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(full - n).unwrap();
    let g = Arc::new(Mutex::new(Gather::new(Device::CPU, DType::U16, 2, 64).unwrap()));
    let mut offsets: Vec<u64> = (0..20).map(|i| i * 10).collect();
    offsets[9] = n - 64; // batch 4, row 1
    let mut s = stream_over(&g, &v, offsets.clone(), 2);
    for k in 0..4 {
        let b = s.next_batch().unwrap().expect("before the failure");
        let mut got = vec![0u8; 256];
        b.lock().unwrap().copy_to_host(&mut got).unwrap();
        assert!(got == expected(&offsets[2 * k..2 * k + 2], 64));
    }
    for _ in 0..2 {
        let e = s.next_batch().unwrap_err();
        assert_eq!(e.status(), Status::Truncated, "{}", e.message());
        assert!(e.message().contains("batch 4") && e.message().contains("'tok'"), "{}", e.message());
    }
    drop(s);
    // Cancel: a long stream dropped after two batches.
    let offsets: Vec<u64> = (0..2 * 100_000).map(|i| i % 1000).collect();
    let mut s = stream_over(&g, &v, offsets, 4);
    let kept = s.next_batch().unwrap().unwrap();
    drop(s.next_batch().unwrap().unwrap());
    let t = std::time::Instant::now();
    drop(s);
    // Run to its end, the stream would take many times this (200,000 batches); cancelled, it stops at once.
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "the worker was joined promptly");
    assert_eq!(g.lock().unwrap().held(), 1, "only the batch the consumer kept");
    drop(kept);
    assert_eq!(g.lock().unwrap().held(), 0);
}

/// A consumer that holds every batch: the worker cannot fill another, nothing is queued, and the stream ends
/// with BUSY instead of waiting for ever.
#[test]
fn stream_of_a_consumer_holding_everything_ends_busy() {
    let path = token_file("stream-busy.safetensors", 4096);
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let g = Arc::new(Mutex::new(Gather::new(Device::CPU, DType::U16, 1, 8).unwrap()));
    let mut s = stream_over(&g, &v, (0..50).collect(), 1); // ring bound 4
    let mut kept = Vec::new();
    let e = loop {
        match s.next_batch() {
            Ok(Some(b)) => kept.push(b),
            Ok(None) => panic!("cannot end: every batch is held"),
            Err(e) => break e,
        }
    };
    assert_eq!(e.status(), Status::Busy, "{}", e.message());
    assert!(kept.len() >= 3, "{}", kept.len());
}

#[test]
fn stand_in_stream_on_cuda() {
    in_stand_in_child(
        concat!(module_path!(), "::stand_in_stream_on_cuda"),
        &[("STAND_IN_DEVICES", Some("1")), ("STAND_IN_POISON_FRESH", Some("1"))],
        || {
            check_stream(Device::cuda(0));
            check_stream(Device::CUDA_HOST);
        },
    );
}

/// The C program (tests/c/test_gather_stream.c), compiled once, on cpu and on cuda:0 of the stand-in (in the
/// stand-in's mode of the run: immediate, or deferred with STAND_IN_DEFERRED=1); in the valgrind pass too.
#[test]
fn c_gather_stream_on_cpu_and_the_stand_in() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_gather_stream");
    run_ok(&bin, &[scratch("c_gather_stream").to_str().unwrap()], &[]);
    let out = run_with_stand_in(
        &bin,
        &[scratch("c_gather_stream_stand_in").to_str().unwrap(), "cuda"],
        &[("STAND_IN_LEAK_REPORT", Some("1")), ("STAND_IN_POISON_FRESH", Some("1"))],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    assert_clean_exit_report(&stderr, "test_gather_stream on the stand-in");
}

/// `hostfirst gather --depth D`: a prefetching stream; the first batch checks against a direct read, on cpu and
/// on cuda:0 of the stand-in; a bad depth is the library's INVALID_ARGUMENT.
#[test]
fn cli_gather_depth_on_cpu_and_cuda() {
    let path = token_file("cli-depth.safetensors", 1 << 16);
    let p = path.to_str().unwrap();
    assert!(run_ok(&cli(), &["gather", "--help"], &[]).contains("--depth"));
    let args = ["gather", p, "tok", "--batch", "8", "--window", "100", "--iters", "40", "--depth", "3", "--json"];
    let v = json(&run_ok(&cli(), &[&args[..], &["--device", "cpu"]].concat(), &[]));
    assert_eq!((v["check"].as_str(), v["depth"].as_u64()), (Some("ok"), Some(3)), "{v}");
    assert!(v["total_s"].as_f64().unwrap() > 0.0);
    let v = json(&run_ok_with_stand_in(&cli(), &[&args[..], &["--device", "cuda:0"]].concat(), &[]));
    assert_eq!((v["check"].as_str(), v["device"].as_str()), (Some("ok"), Some("cuda:0")), "{v}");
    let text = run_ok(&cli(), &["gather", p, "tok", "--batch", "2", "--window", "10", "--depth", "2"], &[]);
    assert!(text.contains("prefetched 2 ahead") && text.contains("matches a direct read"), "{text}");
    let o = run(&cli(), &["gather", p, "tok", "--batch", "2", "--window", "10", "--depth", "65"], &[]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("INVALID_ARGUMENT"), "{o:?}");
}
