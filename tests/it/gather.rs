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
        &[("STAND_IN_DEVICES", Some("1")), ("STAND_IN_POISON", Some("1"))],
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
