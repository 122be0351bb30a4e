//! Puts to CUDA against the stand-in driver: the staging ring, fit check, failures, cancellation,
//! progress, strict mode, async operations, buffer_to, resident mode. Each test runs in its own child process
//! (`in_stand_in_child`) because the driver is loaded once per process.

use crate::common::*;
use hostfirst::device::Device;
use hostfirst::place::op::{AsyncPutOptions, PutOp};
use hostfirst::place::staging::RingConfig;
use hostfirst::place::{buffer_to, put, put_with_stats, release_cached_memory, PutOptions, Target};
use hostfirst::{Status, TensorFile};

/// A safetensors image with one U8 tensor `t` of `n` bytes of a pattern, plus an empty tensor `e`.
fn image(n: usize) -> (Vec<u8>, Vec<u8>) {
    let data: Vec<u8> = (0..n).map(|i| (i.wrapping_mul(31) ^ (i >> 9)) as u8).collect();
    let h = format!(
        r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}},"e":{{"dtype":"F32","shape":[0,4],"data_offsets":[{n},{n}]}}}}"#
    );
    let mut v = (h.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(h.as_bytes());
    v.extend_from_slice(&data);
    (v, data)
}

fn small_ring() -> RingConfig {
    RingConfig { threads: 3, staging_bytes: 256 << 10, slab_bytes: 64 << 10 }
}

fn opts(cfg: &RingConfig) -> PutOptions<'static> {
    PutOptions { tuning: tuning(cfg), ..PutOptions::default() }
}

fn tuning(cfg: &RingConfig) -> hostfirst::engine::Tuning {
    hostfirst::engine::Tuning {
        threads: cfg.threads,
        chunk: cfg.slab_bytes,
        staging: cfg.staging_bytes,
        ..Default::default()
    }
}

fn assert_nothing_live() {
    release_cached_memory();
    for q in ["stand_in_live_allocations", "stand_in_live_pinned", "stand_in_live_registrations"] {
        assert_eq!(stand_in_query(q), 0, "{q}");
    }
}

#[test]
fn round_trip_one_and_two_devices() {
    in_stand_in_child(
        concat!(module_path!(), "::round_trip_one_and_two_devices"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            // Not a multiple of the slab, and 4× the ring.
            let n = (1 << 20) + 12345;
            let (img, data) = image(n);
            let f = TensorFile::from_bytes(img).unwrap();
            let v = f.view("t").unwrap();
            for dev in [Device::cuda(0), Device::cuda(1)] {
                let b = put(&v, Target::Device(dev), opts(&small_ring())).unwrap();
                assert_eq!((b.device(), b.nbytes()), (dev, n as u64));
                let mut back = vec![0u8; n];
                b.copy_to_host(&mut back).unwrap();
                assert!(back == data, "byte-for-byte on {dev}");
                // Host memory bounded by the ring: 256 KiB as 4 slabs of 64 KiB, reused by the second put.
                assert_eq!(stand_in_query("stand_in_live_pinned"), 4);
                assert_eq!(hostfirst::place::staging::cached_bytes(), 256 << 10);
            }
            // Defaults (one slab of a rounded size), a slice, and the empty tensor.
            let d = put(&v, Target::Device(Device::cuda(1)), PutOptions::default()).unwrap();
            let mut back = vec![0u8; n];
            d.copy_to_host(&mut back).unwrap();
            assert!(back == data);
            let s = v.slice_rows(1000, 70000).unwrap();
            let b = put(&s, Target::Device(Device::cuda(0)), opts(&small_ring())).unwrap();
            let mut back = vec![0u8; 69000];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == data[1000..70000]);
            let e = put(&f.view("e").unwrap(), Target::Device(Device::cuda(0)), PutOptions::default()).unwrap();
            assert_eq!((e.nbytes(), e.shape()), (0, &[0u64, 4][..]));
            assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0, "never DMA from pageable memory");
            assert!(hostfirst::place::staging::cached_bytes() > 0, "slabs kept for reuse");
            drop((b, d, e));
            assert_nothing_live();
        },
    );
}

#[test]
fn fit_check_on_a_small_device() {
    in_stand_in_child(
        concat!(module_path!(), "::fit_check_on_a_small_device"),
        &[("STAND_IN_TOTAL_MEMORY", Some("1M"))],
        || {
            // 1 MiB device: the context reserve (256 MiB by default) exceeds it, so nothing fits.
            let (img, _) = image(300 << 10);
            let f = TensorFile::from_bytes(img).unwrap();
            let e = put(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), PutOptions::default()).unwrap_err();
            assert_eq!(e.status(), Status::OutOfMemory);
            assert!(e.message().starts_with("tensor 't' (300.00 KiB) does not fit on cuda:0: "), "{}", e.message());
            assert!(e.message().contains(" free of 1.00 MiB"), "{}", e.message());
            let fit = e.fit().unwrap();
            assert_eq!((fit.needed, fit.total, fit.device.as_str()), (300 << 10, 1 << 20, "cuda:0"));
            assert_eq!(stand_in_query("stand_in_total_allocations"), 0, "nothing allocated");
            assert_nothing_live();
        },
    );
}

#[test]
fn copy_failure_mid_put_frees_everything() {
    in_stand_in_child(
        concat!(module_path!(), "::copy_failure_mid_put_frees_everything"),
        &[("STAND_IN_FAIL_COPY_AFTER", Some("300000"))],
        || {
            let (img, _) = image(1 << 20);
            let f = TensorFile::from_bytes(img).unwrap();
            let e = put(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), opts(&small_ring())).unwrap_err();
            assert_eq!(e.status(), Status::DeviceError);
            assert!(e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{}", e.message());
            assert_nothing_live();
        },
    );
}

/// A copy failing with an error that is not sticky (reported, deferred, at the synchronisation that waits for
/// it): the put fails, and once it has, every staging slab, resident registration and device allocation is
/// freed, in both stand-in modes (nothing stays page-locked for good).
#[test]
fn copy_failure_that_is_not_sticky_mid_put_frees_everything() {
    for deferred in ["0", "1"] {
        in_stand_in_child(
            concat!(module_path!(), "::copy_failure_that_is_not_sticky_mid_put_frees_everything"),
            &[
                ("STAND_IN_DEFERRED", Some(deferred)),
                ("STAND_IN_FAIL_COPY_AFTER", Some("300000")),
                ("STAND_IN_COPY_ERROR", Some("CUDA_ERROR_INVALID_VALUE")),
            ],
            || {
                let (img, _) = image(1 << 20);
                let path = scratch("place_cuda_not_sticky").join(format!("t{}.safetensors", std::process::id()));
                std::fs::write(&path, &img).unwrap();
                let file = TensorFile::open(&path).unwrap();
                let memory = TensorFile::from_bytes(img).unwrap();
                let gpu = Target::Device(Device::cuda(0));
                // From a resident registration of the file's mapping, then through the staging ring (which,
                // deferred, used to lose the error a completion query reported and return success).
                let resident =
                    put(&file.view("t").unwrap(), gpu, PutOptions { resident: true, ..PutOptions::default() })
                        .unwrap_err();
                let staged = put(&memory.view("t").unwrap(), gpu, opts(&small_ring())).unwrap_err();
                for e in [staged, resident] {
                    assert_eq!(e.status(), Status::DeviceError);
                    assert!(e.message().contains("CUDA_ERROR_INVALID_VALUE"), "{}", e.message());
                }
                drop((file, memory));
                std::fs::remove_file(&path).unwrap();
                assert_nothing_live();
            },
        );
    }
}

#[test]
fn progress_and_cancellation() {
    in_stand_in_child(concat!(module_path!(), "::progress_and_cancellation"), &[], || {
        let n = 3 << 20;
        let (img, _) = image(n);
        let f = TensorFile::from_bytes(img).unwrap();
        let v = f.view("t").unwrap();
        let mut seen = Vec::new();
        let mut cb = |d: u64, t: u64| {
            seen.push((d, t));
            false
        };
        put(&v, Target::Device(Device::cuda(0)), PutOptions { progress: Some(&mut cb), ..opts(&small_ring()) })
            .unwrap();
        assert_eq!(*seen.last().unwrap(), (n as u64, n as u64));
        assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "monotonic");
        let mut cancel = |_d: u64, _t: u64| true;
        let e =
            put(&v, Target::Device(Device::cuda(0)), PutOptions { progress: Some(&mut cancel), ..opts(&small_ring()) })
                .unwrap_err();
        assert_eq!(e.status(), Status::Cancelled);
        assert_nothing_live();
    });
}

#[test]
fn strict_mode_and_default_target() {
    in_stand_in_child(
        concat!(module_path!(), "::strict_mode_and_default_target"),
        &[("HOSTFIRST_DEFAULT_DEVICE", Some("cuda:0"))],
        || {
            let (img, data) = image(5000);
            let f = TensorFile::from_bytes(img).unwrap();
            let v = f.view("t").unwrap();
            let b = put(&v, Target::Default, PutOptions::default()).unwrap();
            assert_eq!(b.device(), Device::cuda(0));
            let mut back = vec![0u8; 5000];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == data);
            hostfirst::scope::set_thread_strict(true);
            assert_eq!(
                put(&v, Target::Default, PutOptions::default()).unwrap_err().status(),
                Status::ImplicitPlacement
            );
            assert!(
                put(&v, Target::Device(Device::cuda(0)), PutOptions::default()).is_ok(),
                "explicit targets still work"
            );
            hostfirst::scope::set_thread_strict(false);
            drop(b);
            assert_nothing_live();
        },
    );
}

#[test]
fn async_put_poll_wait_already_used() {
    in_stand_in_child(concat!(module_path!(), "::async_put_poll_wait_already_used"), &[], || {
        let n = 2 << 20;
        let (img, data) = image(n);
        let f = TensorFile::from_bytes(img).unwrap();
        let v = f.view("t").unwrap();
        let cfg = small_ring();
        let mk = || AsyncPutOptions { tuning: tuning(&cfg), ..Default::default() };
        let op = PutOp::start(&v, Target::Device(Device::cuda(0)), mk()).unwrap();
        let (b, _) = op.wait().unwrap();
        assert!(op.is_done().is_err());
        assert_eq!(op.wait().unwrap_err().status(), Status::AlreadyUsed);
        let mut back = vec![0u8; n];
        b.copy_to_host(&mut back).unwrap();
        assert!(back == data);
        // Cancelled from the callback.
        let op = PutOp::start(
            &v,
            Target::Device(Device::cuda(0)),
            AsyncPutOptions { progress: Some(Box::new(|_, _| true)), ..mk() },
        )
        .unwrap();
        while !op.is_done().unwrap() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(op.wait().unwrap_err().status(), Status::Cancelled);
        // Dropped while running: cancelled and joined.
        drop(PutOp::start(&v, Target::Device(Device::cuda(0)), mk()).unwrap());
        drop((b, op));
        assert_nothing_live();
    });
}

#[test]
fn buffer_to_between_devices() {
    in_stand_in_child(
        concat!(module_path!(), "::buffer_to_between_devices"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            let n = 700_001;
            let (img, data) = image(n);
            let f = TensorFile::from_bytes(img).unwrap();
            let a = put(&f.view("t").unwrap(), Target::Device(Device::CPU), PutOptions::default()).unwrap();
            let mut cur = a;
            for dev in
                [Device::cuda(0), Device::cuda(1), Device::CUDA_HOST, Device::cuda(0), Device::cuda(0), Device::CPU]
            {
                cur = buffer_to(&cur, Target::Device(dev)).unwrap();
                assert_eq!(cur.device(), dev);
                let mut back = vec![0u8; n];
                cur.copy_to_host(&mut back).unwrap();
                assert!(back == data, "via {dev}");
            }
            assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0);
            assert_eq!(stand_in_query("stand_in_peer_copies"), 1, "cuda:0 -> cuda:1 went peer to peer");
            drop(cur);
            assert_nothing_live();
        },
    );
}

#[test]
fn resident_round_trip() {
    in_stand_in_child(concat!(module_path!(), "::resident_round_trip"), &[], || {
        let n = (3 << 20) + 7;
        let (img, data) = image(n);
        let path = scratch("place_cuda_resident").join("t.safetensors");
        std::fs::write(&path, &img).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("t").unwrap();
        let o = || PutOptions { resident: true, ..PutOptions::default() };
        let (b, s1) = put_with_stats(&v, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(!s1.reused_registration && s1.register_seconds > 0.0, "{s1:?}");
        assert_eq!(stand_in_query("stand_in_live_registrations"), 1);
        let (b2, s2) = put_with_stats(&v, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(s2.reused_registration && s2.register_seconds == 0.0, "{s2:?}");
        for b in [&b, &b2] {
            let mut back = vec![0u8; n];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == data);
        }
        assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0, "copied from the registered mapping");
        drop((b, b2, v, f));
        assert_nothing_live();
    });
}

/// Resident puts of views that share pages: a slice inside a registered tensor reuses its registration; a
/// tensor that only partly overlaps registered ranges (the whole tensor after a slice, or a neighbour sharing a
/// boundary page) goes through the staging ring and says so; every copy is byte-exact.
#[test]
fn resident_overlapping_views_reuse_or_stage() {
    in_stand_in_child(concat!(module_path!(), "::resident_overlapping_views_reuse_or_stage"), &[], || {
        let n = (3 << 20) + 7;
        let (img, data) = image(n);
        let path = scratch("place_cuda_resident_overlap").join("t.safetensors");
        std::fs::write(&path, &img).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("t").unwrap();
        let o = || PutOptions { resident: true, ..PutOptions::default() };
        let check = |b: &hostfirst::place::Buffer, want: &[u8]| {
            let mut back = vec![0u8; want.len()];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == want);
        };
        // A slice first (U8 [n]: rows are bytes), then the whole tensor: partial overlap -> staged.
        let (lo, hi) = (100_000u64, 2_000_000u64);
        let s = v.slice_rows(lo, hi).unwrap();
        let (bs, st) = put_with_stats(&s, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(!st.reused_registration && !st.staged_instead, "{st:?}");
        check(&bs, &data[lo as usize..hi as usize]);
        let (bw, st) = put_with_stats(&v, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(st.staged_instead && !st.reused_registration && st.register_seconds == 0.0, "{st:?}");
        check(&bw, &data);
        // A neighbour sharing the slice's last page: staged as well.
        let nb = v.slice_rows(hi, hi + 10).unwrap();
        let (bn, st) = put_with_stats(&nb, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(st.staged_instead, "{st:?}");
        check(&bn, &data[hi as usize..hi as usize + 10]);
        // A slice inside the registered one: reused, at an offset.
        let inner = v.slice_rows(lo + 5, lo + 70_000).unwrap();
        let (bi, st) = put_with_stats(&inner, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(st.reused_registration && !st.staged_instead, "{st:?}");
        check(&bi, &data[lo as usize + 5..lo as usize + 70_000]);
        assert_eq!(stand_in_query("stand_in_live_registrations"), 1);
        // After the cache is released, the whole tensor registers (the slice then reuses it).
        drop((bs, bw, bn, bi, s, nb, inner));
        hostfirst::place::release_cached_memory();
        assert_eq!(stand_in_query("stand_in_live_registrations"), 0);
        let (bw, st) = put_with_stats(&v, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(!st.staged_instead && !st.reused_registration, "{st:?}");
        check(&bw, &data);
        let s = v.slice_rows(lo, hi).unwrap();
        let (bs, st) = put_with_stats(&s, Target::Device(Device::cuda(0)), o()).unwrap();
        assert!(st.reused_registration, "{st:?}");
        check(&bs, &data[lo as usize..hi as usize]);
        assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0);
        drop((bw, bs, s, v, f));
        assert_nothing_live();
    });
}

/// Small tensors of different sizes, put one after another: each is one slab read and copied on the calling
/// thread, and the pool's slabs are reused when large enough, so the whole sequence page-locks one slab.
#[test]
fn small_puts_reuse_one_pooled_slab() {
    in_stand_in_child(concat!(module_path!(), "::small_puts_reuse_one_pooled_slab"), &[], || {
        let sizes = [300_000usize, 200_000, 100_000, 50_000, 10_000, 250_000, 1];
        let mut h = String::from("{");
        let mut data = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let b = data.len();
            h.push_str(&format!(
                r#"{}"s{i}":{{"dtype":"U8","shape":[{n}],"data_offsets":[{b},{}]}}"#,
                if i > 0 { "," } else { "" },
                b + n
            ));
            data.extend((0..*n).map(|k| (k * 7 + i) as u8));
        }
        h.push('}');
        let mut img = (h.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(h.as_bytes());
        img.extend_from_slice(&data);
        let f = TensorFile::from_bytes(img).unwrap();
        let mut off = 0;
        for (i, n) in sizes.iter().enumerate() {
            let b = put(&f.view(&format!("s{i}")).unwrap(), Target::Device(Device::cuda(0)), PutOptions::default())
                .unwrap();
            let mut back = vec![0u8; *n];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == data[off..off + n], "s{i}");
            off += n;
        }
        assert_eq!(stand_in_query("stand_in_live_pinned"), 1, "one slab, pooled and reused");
        assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0);
        drop(f);
        assert_nothing_live();
    });
}

#[test]
fn c_place_with_the_stand_in() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_place");
    let dir = scratch("c_place_stand_in");
    let out = run_ok_with_stand_in(&bin, &[dir.to_str().unwrap(), "cuda"], &[("STAND_IN_DEVICES", Some("2"))]);
    assert!(out.contains("ok"), "{out}");
    let out = run_ok_with_stand_in(&bin, &[dir.to_str().unwrap(), "small"], &[("STAND_IN_TOTAL_MEMORY", Some("1M"))]);
    assert!(out.contains("ok"), "{out}");
    // A copy error that is not sticky, in both modes: nothing stays page-locked or registered (under valgrind,
    // in the valgrind pass: no definite loss either).
    for deferred in ["0", "1"] {
        let knobs = [
            ("STAND_IN_DEFERRED", Some(deferred)),
            ("STAND_IN_FAIL_COPY_AFTER", Some("100000")),
            ("STAND_IN_COPY_ERROR", Some("CUDA_ERROR_INVALID_VALUE")),
            ("STAND_IN_LEAK_REPORT", Some("1")),
        ];
        let out = run_with_stand_in(&bin, &[dir.to_str().unwrap(), "copy-error"], &knobs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"), "{knobs:?}: {err}");
        assert_clean_exit_report(&err, &format!("copy-error {knobs:?}"));
        let report = err.lines().find(|l| l.starts_with("stand-in cuda: at exit:")).expect("the exit report");
        assert!(report.contains(" 0 pinned,"), "{knobs:?}: page-locked memory left: {report}");
    }
}

#[test]
fn cancel_mid_transfer_and_truncated_file() {
    in_stand_in_child(concat!(module_path!(), "::cancel_mid_transfer_and_truncated_file"), &[], || {
        // A slow source: the first progress report (after 50 ms) comes long before the end, and cancels.
        let total = 3u64 << 20;
        let dst = hostfirst::device::cuda::DeviceMemory::alloc(0, total as usize).unwrap();
        let slow = |off: u64, d: &mut [u8]| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            d.fill((off >> 16) as u8);
            Ok(())
        };
        let mut calls = Vec::new();
        let mut cb = |done: u64, t: u64| {
            calls.push((done, t));
            true
        };
        let e = hostfirst::place::staging::transfer(total, &dst, &small_ring(), slow, Some(&mut cb)).unwrap_err();
        assert_eq!(e.status(), Status::Cancelled);
        assert_eq!(calls.len(), 1);
        assert!(calls[0].0 < total, "cancelled before the end: {calls:?}");
        assert!(stand_in_query("stand_in_bytes_copied") < total);
        drop(dst);

        // A file truncated between open and put: an I/O status, nothing leaked.
        let (img, _) = image(1 << 20);
        let path = scratch("place_cuda_trunc").join("t.safetensors");
        std::fs::write(&path, &img).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("t").unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(img.len() as u64 / 2).unwrap();
        let e = put(&v, Target::Device(Device::cuda(0)), opts(&small_ring())).unwrap_err();
        assert!(matches!(e.status(), Status::Truncated | Status::Io), "{e:?}");
        let e = put(&v, Target::Device(Device::cuda(0)), PutOptions { resident: true, ..PutOptions::default() })
            .unwrap_err();
        assert!(matches!(e.status(), Status::Truncated | Status::Io), "{e:?}");
        drop((v, f));
        assert_nothing_live();
    });
}

/// Reads a CUDA buffer back through a non-blocking stream of its device (as a consumer such as a framework
/// would, without synchronising with the legacy default stream).
fn read_on_own_stream(b: &hostfirst::place::Buffer) -> Vec<u8> {
    let hostfirst::place::Memory::Cuda(mem) = b.memory() else { panic!("not a CUDA buffer") };
    let stream = hostfirst::device::cuda::Stream::new(mem.ordinal()).unwrap();
    stream.copy_to_host_async(mem, 0, vec![0u8; mem.len()], 0, mem.len()).unwrap().wait().unwrap()
}

/// Copies between device buffers (buffer_to on one device and between two) are complete when buffer_to
/// returns, for a reader on any stream: device-to-device copies are asynchronous to the host even in their
/// "synchronous" driver forms, and the deferred stand-in leaves such a copy queued on the legacy default
/// stream, where a non-blocking reader does not wait for it. Peer copies take the direct path (peer access
/// enabled), and no wait spins a core.
#[test]
fn buffer_to_is_complete_for_readers_on_any_stream() {
    in_stand_in_child(
        concat!(module_path!(), "::buffer_to_is_complete_for_readers_on_any_stream"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            let n = 300_001;
            let (img, data) = image(n);
            let f = TensorFile::from_bytes(img).unwrap();
            let a = put(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), PutOptions::default()).unwrap();
            let b = buffer_to(&a, Target::Device(Device::cuda(0))).unwrap();
            assert!(read_on_own_stream(&b) == data, "same device");
            let c = buffer_to(&b, Target::Device(Device::cuda(1))).unwrap();
            assert!(read_on_own_stream(&c) == data, "peer");
            assert_eq!(stand_in_query("stand_in_peer_copies"), 1);
            assert_eq!(stand_in_query("stand_in_peer_copies_direct"), 1, "peer access was enabled");
            let d = buffer_to(&c, Target::Device(Device::cuda(0))).unwrap();
            assert!(read_on_own_stream(&d) == data, "peer, the other way");
            assert_eq!(stand_in_query("stand_in_spinning_waits"), 0, "every wait blocks instead of spinning");
            drop((a, b, c, d));
            assert_nothing_live();
        },
    );
}

/// Where the devices cannot access each other, peer copies still work (the driver stages them).
#[test]
fn peer_copies_without_peer_access() {
    in_stand_in_child(
        concat!(module_path!(), "::peer_copies_without_peer_access"),
        &[("STAND_IN_DEVICES", Some("2")), ("STAND_IN_PEER_ACCESS", Some("0"))],
        || {
            let (img, data) = image(70_000);
            let f = TensorFile::from_bytes(img).unwrap();
            let a = put(&f.view("t").unwrap(), Target::Device(Device::cuda(1)), PutOptions::default()).unwrap();
            let b = buffer_to(&a, Target::Device(Device::cuda(0))).unwrap();
            assert!(read_on_own_stream(&b) == data);
            assert_eq!((stand_in_query("stand_in_peer_copies"), stand_in_query("stand_in_peer_copies_direct")), (1, 0));
            drop((a, b));
            assert_nothing_live();
        },
    );
}

/// A process that only uses cuda:1 never creates a context on cuda:0: staging slabs, resident registrations,
/// gathers and cuda_host buffers go through the target's (or an already used) context. cuda:0 here is an
/// exclusive-process GPU another process holds, so any use of it would fail.
#[test]
fn work_for_one_device_uses_only_its_context() {
    in_stand_in_child(
        concat!(module_path!(), "::work_for_one_device_uses_only_its_context"),
        &[("STAND_IN_DEVICES", Some("2")), ("STAND_IN_UNAVAILABLE", Some("0"))],
        || {
            let n = (1 << 20) + 5;
            let (img, data) = image(n);
            let path = scratch("place_cuda_one_device").join("t.safetensors");
            std::fs::write(&path, &img).unwrap();
            let f = TensorFile::open(&path).unwrap();
            let v = f.view("t").unwrap();
            let gpu1 = Target::Device(Device::cuda(1));
            let staged = put(&v, gpu1, opts(&small_ring())).unwrap();
            let (resident, st) =
                put_with_stats(&v, gpu1, PutOptions { resident: true, ..PutOptions::default() }).unwrap();
            assert!(!st.staged_instead, "{st:?}");
            let mut g = hostfirst::place::gather::Gather::new(Device::cuda(1), hostfirst::DType::U8, 2, 1000).unwrap();
            g.run(&v, &[10, 5000]).unwrap();
            let host = buffer_to(&staged, Target::Device(Device::CUDA_HOST)).unwrap();
            for b in [&staged, &resident, &host] {
                let mut back = vec![0u8; n];
                b.copy_to_host(&mut back).unwrap();
                assert!(back == data);
            }
            let mut batch = vec![0u8; 2000];
            g.copy_to_host(&mut batch).unwrap();
            assert!(batch[..1000] == data[10..1010] && batch[1000..] == data[5000..6000]);
            assert!(!hostfirst::device::cuda::Context::is_retained(0));
            assert_eq!(stand_in_query("stand_in_live_contexts"), 1, "only cuda:1's context");
            let e = put(&v, Target::Device(Device::cuda(0)), PutOptions::default()).unwrap_err();
            assert!(e.message().contains("CUDA_ERROR_DEVICE_UNAVAILABLE"), "cuda:0 really is unusable: {e:?}");
            drop((staged, resident, host, g, v, f));
            assert_nothing_live();
        },
    );
}

/// Where the device cannot register read-only memory, a resident put of a file's tensor (a read-only mapping,
/// which the driver refuses to register otherwise) goes through the staging ring and says so; a tensor in
/// writable memory still registers (without the read-only flag).
#[test]
fn resident_falls_back_to_staging_without_read_only_registration() {
    in_stand_in_child(
        concat!(module_path!(), "::resident_falls_back_to_staging_without_read_only_registration"),
        &[("STAND_IN_READ_ONLY_REGISTER", Some("0"))],
        || {
            let n = (2 << 20) + 3;
            let (img, data) = image(n);
            let path = scratch("place_cuda_resident_ro").join("t.safetensors");
            std::fs::write(&path, &img).unwrap();
            let f = TensorFile::open(&path).unwrap();
            let o = || PutOptions { resident: true, ..PutOptions::default() };
            let (b, st) = put_with_stats(&f.view("t").unwrap(), Target::Device(Device::cuda(0)), o()).unwrap();
            assert!(st.staged_instead && !st.reused_registration, "{st:?}");
            assert_eq!(stand_in_query("stand_in_register_calls"), 0, "no registration was attempted");
            let mut back = vec![0u8; n];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == data);
            let m = TensorFile::from_bytes(img).unwrap();
            let (b2, st) = put_with_stats(&m.view("t").unwrap(), Target::Device(Device::cuda(0)), o()).unwrap();
            assert!(!st.staged_instead, "{st:?}");
            assert_eq!(stand_in_query("stand_in_last_register_flags"), 0x01, "portable, not read-only");
            b2.copy_to_host(&mut back).unwrap();
            assert!(back == data);
            drop((b, b2, f, m));
            assert_nothing_live();
        },
    );
}

/// A synchronous copy from page-locked memory (`buffer_to` from cuda_host, through
/// `DeviceMemory::copy_from_host`) whose error the driver reports before the copy has ended
/// (`STAND_IN_EARLY_ERROR`: the rest of the DMA still reads the source): the copy fails, and by the time it
/// has returned nothing still reads the caller's source or writes the new buffer — it synchronised again
/// until the copy had ended (it used to return at the first error, with the rest of the copy queued).
#[test]
fn a_copy_whose_error_is_reported_before_it_ends_is_waited_for() {
    in_stand_in_child(
        concat!(module_path!(), "::a_copy_whose_error_is_reported_before_it_ends_is_waited_for"),
        &[
            ("STAND_IN_DEFERRED", Some("1")),
            ("STAND_IN_EARLY_ERROR", Some("1")),
            ("STAND_IN_FAIL_COPY_AFTER", Some("100000")),
            ("STAND_IN_COPY_ERROR", Some("CUDA_ERROR_INVALID_VALUE")),
        ],
        || {
            let n = 700_001;
            let (img, _) = image(n);
            let f = TensorFile::from_bytes(img).unwrap();
            let host = put(&f.view("t").unwrap(), Target::Device(Device::CUDA_HOST), PutOptions::default()).unwrap();
            let waits = stand_in_query("stand_in_implicit_syncs");
            let e = buffer_to(&host, Target::Device(Device::cuda(0))).unwrap_err();
            assert_eq!(e.status(), Status::DeviceError);
            assert!(e.message().contains("CUDA_ERROR_INVALID_VALUE"), "{}", e.message());
            // Freeing the failed call's new buffer waits for queued work that uses it (as the driver's free
            // does): it must have found none.
            assert_eq!(
                stand_in_query("stand_in_implicit_syncs"),
                waits,
                "the failed copy was still running when its destination was freed"
            );
            assert_eq!(stand_in_query("stand_in_queued_ops"), 0);
            drop(host);
            assert_nothing_live();
        },
    );
}
