//! Whole-file loads as one job per device (src/place/arena.rs): one allocation per device, one stream and a
//! few reused events for CUDA, one memory query per device, coalesced reads, every byte verified; cancelled
//! and failed loads free their arena. CUDA through the stand-in driver, in whichever mode the run selects
//! (STAND_IN_DEFERRED=1 for the deferred one).

use crate::common::*;
use hostfirst::place::{load, load_with, release_cached_memory, LoadOptions, Placed, Plan, Rules};
use hostfirst::{Status, TensorFile};
use std::path::PathBuf;

/// Byte `k` of a test file's data section.
fn byte(k: usize) -> u8 {
    ((k as u32).wrapping_mul(2654435761).rotate_right(11) ^ (k as u32 >> 12)) as u8
}

/// A file of `count` F32 tensors `t0..` in header order, tensor `i` of `elems(i)` elements; with `reversed`
/// their data lies in the opposite order (the last tensor first). Returns the path and each tensor's bytes.
fn write_many(name: &str, count: usize, elems: impl Fn(usize) -> usize, reversed: bool) -> (PathBuf, Vec<Vec<u8>>) {
    let mut spans = vec![(0usize, 0usize); count];
    let mut at = 0usize;
    for k in 0..count {
        let i = if reversed { count - 1 - k } else { k };
        spans[i] = (at, elems(i) * 4);
        at += elems(i) * 4;
    }
    let mut header = String::from("{");
    for (i, (a, n)) in spans.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{a},{}]}}",
            elems(i),
            a + n
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let data: Vec<u8> = (0..at).map(byte).collect();
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    img.extend_from_slice(&data);
    let p = scratch(&format!("load_job-{}", std::process::id())).join(name);
    std::fs::write(&p, img).unwrap();
    (p, spans.into_iter().map(|(a, n)| data[a..a + n].to_vec()).collect())
}

fn bytes_of(p: &Placed) -> Vec<u8> {
    match p {
        Placed::View(v) => v.to_vec().unwrap(),
        Placed::Buffer(b) => {
            let b = b.lock().unwrap();
            let mut v = vec![0u8; b.nbytes() as usize];
            b.copy_to_host(&mut v).unwrap();
            v
        }
    }
}

fn address(p: &Placed) -> u64 {
    match p {
        Placed::Buffer(b) => b.lock().unwrap().address(),
        Placed::View(_) => panic!("a buffer was expected"),
    }
}

fn verify_all(f: &TensorFile, loaded: &hostfirst::place::Loaded, want: &[Vec<u8>]) {
    assert_eq!(loaded.len(), want.len());
    for i in 0..want.len() {
        let (name, p) = loaded.at(i).unwrap();
        assert_eq!(name, f.name(i).unwrap());
        let w = &want[name[1..].parse::<usize>().unwrap()];
        assert!(bytes_of(p) == *w, "tensor {name} byte-for-byte");
    }
}

/// The stand-in's counters a load should bound: (cuMemAlloc calls, memory queries, streams, events).
fn counts() -> [u64; 4] {
    [
        stand_in_query("stand_in_total_allocations"),
        stand_in_query("stand_in_mem_get_info_calls") + stand_in_query("stand_in_nvml_memory_queries"),
        stand_in_query("stand_in_streams_created"),
        stand_in_query("stand_in_events_created"),
    ]
}

fn assert_nothing_live() {
    release_cached_memory();
    for q in [
        "stand_in_live_allocations",
        "stand_in_live_pinned",
        "stand_in_live_streams",
        "stand_in_live_events",
        "stand_in_queued_ops",
    ] {
        assert_eq!(stand_in_query(q), 0, "{q}");
    }
}

#[test]
fn cpu_load_is_one_arena_of_aligned_parts_byte_for_byte() {
    // Sizes that are not multiples of the alignment, data in the opposite order of the header.
    let (path, want) = write_many("odd.safetensors", 300, |i| 1 + (i * 37) % 700, true);
    let f = TensorFile::open(&path).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    let mut calls = Vec::new();
    let mut cb = |d: u64, t: u64| {
        calls.push((d, t));
        false
    };
    let loaded = load(&f, &plan, Some(&mut cb)).unwrap();
    verify_all(&f, &loaded, &want);
    let total: u64 = want.iter().map(|w| w.len() as u64).sum();
    assert_eq!(calls.last(), Some(&(total, total)), "the last call says done == total");
    assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0), "monotonic: {calls:?}");
    // Parts of one allocation: 64-byte aligned, in file order, each right after the previous one rounded up.
    let addrs: Vec<(u64, u64)> = (0..want.len())
        .map(|i| {
            let (name, p) = loaded.at(i).unwrap();
            (address(p), want[name[1..].parse::<usize>().unwrap()].len() as u64)
        })
        .collect();
    for (i, w) in addrs.windows(2).enumerate() {
        assert_eq!(w[0].0 % 64, 0);
        assert_eq!(w[1].0, (w[0].0 + w[0].1).next_multiple_of(64), "tensor {} follows {i}", i + 1);
    }
    // A buffer outlives the load and keeps its part (and the arena) alive.
    let Some(Placed::Buffer(b)) = loaded.get("t5").cloned() else { panic!() };
    drop(loaded);
    let mut back = vec![0u8; want[5].len()];
    b.lock().unwrap().copy_to_host(&mut back).unwrap();
    assert!(back == want[5]);
}

#[test]
fn cpu_load_of_a_memory_image_and_a_truncated_file() {
    let (path, want) = write_many("mem.safetensors", 50, |i| 3 + i, false);
    let f = TensorFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    verify_all(&f, &load(&f, &plan, None).unwrap(), &want);

    let f = TensorFile::open(&path).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 100).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    let e = load(&f, &plan, None).err().unwrap();
    assert_eq!(e.status(), Status::Truncated, "{}", e.message());
    assert!(e.message().contains("the file ends before byte"), "{}", e.message());
}

#[test]
fn cuda_load_of_20000_tensors_is_one_job() {
    in_stand_in_child(concat!(module_path!(), "::cuda_load_of_20000_tensors_is_one_job"), &[], || {
        let (path, want) = write_many("many.safetensors", 20_000, |_| 1024, false);
        let f = TensorFile::open(&path).unwrap();
        let plan = Plan::make(&f, &Rules::parse(["*=cuda:0"]).unwrap()).unwrap();
        let before = counts();
        let loaded = load(&f, &plan, None).unwrap();
        let after = counts();
        let d: Vec<u64> = before.iter().zip(after).map(|(b, a)| a - b).collect();
        assert!(d[0] <= 16, "cuMemAlloc calls: {}", d[0]);
        assert_eq!(d[1], 1, "one memory query for the one device");
        assert!(d[2] <= 1, "streams created: {}", d[2]);
        assert!(d[3] <= 16, "events created: {} (one per staging slab at most)", d[3]);
        assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0, "never DMA from pageable memory");
        assert_eq!(stand_in_query("stand_in_live_allocations"), 1, "one allocation holds every tensor");
        verify_all(&f, &loaded, &want);
        let addrs: Vec<u64> = (0..want.len()).map(|i| address(loaded.at(i).unwrap().1)).collect();
        assert!(addrs.iter().all(|a| a % 256 == 0), "256-byte aligned parts");
        // The arena goes with the last part, not before.
        let Some(Placed::Buffer(b)) = loaded.get("t19999").cloned() else { panic!() };
        drop(loaded);
        assert_eq!(stand_in_query("stand_in_live_allocations"), 1, "a held buffer keeps the arena");
        let mut back = vec![0u8; 4096];
        b.lock().unwrap().copy_to_host(&mut back).unwrap();
        assert!(back == want[19_999]);
        drop(b);
        assert_nothing_live();
    });
}

#[test]
fn cuda_load_aligns_odd_sizes_and_mixes_devices() {
    in_stand_in_child(
        concat!(module_path!(), "::cuda_load_aligns_odd_sizes_and_mixes_devices"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            // Odd sizes, data in reverse order, and a tensor larger than a staging slab (16 MiB), split across
            // slabs.
            let big = (40 << 20) / 4 + 3;
            let (path, want) =
                write_many("mixed.safetensors", 200, |i| if i == 77 { big } else { 1 + (i * 53) % 900 }, true);
            let f = TensorFile::open(&path).unwrap();
            let rules = Rules::parse(["t1?=cpu", "t*7=cuda:1", "*=cuda:0"]).unwrap();
            let plan = Plan::make(&f, &rules).unwrap();
            let before = counts();
            let loaded = load(&f, &plan, None).unwrap();
            let d: Vec<u64> = before.iter().zip(counts()).map(|(b, a)| a - b).collect();
            assert_eq!(d[0], 2, "one allocation per CUDA device");
            assert_eq!(d[1], 2, "one memory query per CUDA device");
            assert!(d[2] <= 2, "one stream per CUDA device: {}", d[2]);
            verify_all(&f, &loaded, &want);
            for i in 0..want.len() {
                let p = loaded.at(i).unwrap().1;
                let Placed::Buffer(b) = p else { panic!() };
                let dev = b.lock().unwrap().device();
                let align = if dev.kind == hostfirst::device::DeviceKind::CUDA { 256 } else { 64 };
                assert_eq!(address(p) % align, 0, "t{i} on {dev}");
            }
            drop(loaded);
            assert_nothing_live();
        },
    );
}

#[test]
fn cuda_load_cancelled_or_truncated_frees_its_arena() {
    in_stand_in_child(concat!(module_path!(), "::cuda_load_cancelled_or_truncated_frees_its_arena"), &[], || {
        let (path, _) = write_many("cancel.safetensors", 20_000, |_| 1024, false);
        let f = TensorFile::open(&path).unwrap();
        let plan = Plan::make(&f, &Rules::parse(["*=cuda:0"]).unwrap()).unwrap();
        let mut calls = Vec::new();
        let mut cancel = |d: u64, t: u64| {
            calls.push((d, t));
            true
        };
        let e = load(&f, &plan, Some(&mut cancel)).err().unwrap();
        assert_eq!(e.status(), Status::Cancelled);
        assert_eq!(calls.len(), 1, "no call after the one that cancelled");
        assert_eq!(stand_in_query("stand_in_live_allocations"), 0, "the arena is freed");
        assert_nothing_live();

        // A file truncated after opening: TRUNCATED, nothing kept.
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
        let e = load(&f, &plan, None).err().unwrap();
        assert_eq!(e.status(), Status::Truncated, "{}", e.message());
        assert_nothing_live();
    });
}

/// The C program tests/c/test_load_job.c: every byte of 2,000 tensors, buffers that outlive the load, a
/// cancelled load and a truncated file freeing everything; on cpu, and on cuda:0 through the stand-in (whose
/// exit report must show nothing live). In the valgrind pass it runs under memcheck.
#[test]
fn c_load_job_on_cpu_and_the_stand_in() {
    assert!(have_cc(), "no C compiler");
    let bin = compile_c_test("test_load_job");
    let dir = scratch("c_load_job");
    let out = run_ok(&bin, &[dir.to_str().unwrap(), "cpu"], &[]);
    assert!(out.contains("ok"), "{out}");
    let run = run_with_stand_in(&bin, &[dir.to_str().unwrap(), "cuda:0"], &[("STAND_IN_LEAK_REPORT", Some("1"))]);
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success() && stdout.contains("ok"), "{stdout}\n{stderr}");
    assert_clean_exit_report(&stderr, "test_load_job on cuda:0");
    assert!(stderr.contains("stand-in cuda: at exit: 0 device allocations"), "{stderr}");
}

/// A load's tensors become buffers (and host tensors views) when first asked for: `describe` reports each
/// before and after that with the same device, dtype, shape (the file's own), size and address; threads
/// asking for the same tensor at once get the same buffer; a load whose tensors were never asked for frees
/// its arena with the load.
#[test]
fn tensors_are_placed_when_first_asked_for_and_once() {
    let (path, want) = write_many("lazy.safetensors", 64, |i| 1 + (i * 29) % 300, false);
    let f = TensorFile::open(&path).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["t1=host", "*=cpu"]).unwrap()).unwrap();
    let loaded = load(&f, &plan, None).unwrap();
    let before: Vec<_> = (0..want.len())
        .map(|i| {
            let d = loaded.describe(i).unwrap();
            (d.is_buffer, d.dtype, d.device, d.shape.as_ptr(), d.shape.to_vec(), d.nbytes, d.address)
        })
        .collect();
    assert!(!before[1].0 && before.iter().enumerate().all(|(i, b)| b.0 == (i != 1)), "t1 alone is a view");
    // Eight threads ask for every tensor at once, each in its own order: one buffer (or view) per tensor.
    let order = |k: usize, j: usize| (j * 5 + k * 11) % 64;
    let got: Vec<Vec<(usize, usize)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|k| {
                let l = &loaded;
                s.spawn(move || {
                    let mut seen: Vec<(usize, usize)> = (0..64)
                        .map(|j| {
                            let i = order(k, j);
                            let at = match l.get(&format!("t{i}")).unwrap() {
                                Placed::Buffer(b) => std::sync::Arc::as_ptr(b) as usize,
                                Placed::View(v) => v as *const _ as usize,
                            };
                            (i, at)
                        })
                        .collect();
                    seen.sort();
                    seen
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(got.iter().all(|g| *g == got[0]), "every thread got the same object for every tensor");
    for (i, b) in before.iter().enumerate() {
        let d = loaded.describe(i).unwrap();
        let after = (d.is_buffer, d.dtype, d.device, d.shape.as_ptr(), d.shape.to_vec(), d.nbytes, d.address);
        assert_eq!(&after, b, "tensor {i} is described the same before and after it was placed");
        let (name, p) = loaded.at(i).unwrap();
        assert!(bytes_of(p) == want[name[1..].parse::<usize>().unwrap()], "{name}");
        match p {
            Placed::Buffer(buf) => {
                let buf = buf.lock().unwrap();
                let mine = (buf.address(), buf.shape().as_ptr(), buf.nbytes(), buf.device());
                assert_eq!(mine, (d.address, d.shape.as_ptr(), d.nbytes, d.device), "tensor {i}");
            }
            Placed::View(v) => assert_eq!(v.mapped().as_ptr() as u64, d.address, "tensor {i}"),
        }
    }
    drop(loaded);
    // Copy-on-write cpu tensors are placed one by one at load time: described the same way.
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    let loaded =
        load_with(&f, &plan, LoadOptions { copy_on_write: true, progress: None, page_cache: Default::default() })
            .unwrap();
    assert_described_as_placed(&loaded, 64);
    drop(loaded);
    // Nothing asked for: the load alone holds the arena, and frees it.
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    let loaded = load(&f, &plan, None).unwrap();
    let d0 = loaded.describe(0).unwrap();
    assert!(d0.is_buffer && d0.address % 64 == 0);
    drop(loaded);
}

/// On CUDA too: a load described but never asked for a tensor holds its one allocation until it is freed.
#[test]
fn cuda_load_never_asked_for_frees_its_arena_with_the_load() {
    in_stand_in_child(
        concat!(module_path!(), "::cuda_load_never_asked_for_frees_its_arena_with_the_load"),
        &[],
        || {
            let (path, _) = write_many("never.safetensors", 500, |i| 1 + i % 97, false);
            let f = TensorFile::open(&path).unwrap();
            let plan = Plan::make(&f, &Rules::parse(["*=cuda:0"]).unwrap()).unwrap();
            let loaded = load(&f, &plan, None).unwrap();
            assert_eq!(stand_in_query("stand_in_live_allocations"), 1, "one allocation holds every tensor");
            let addrs: Vec<u64> = (0..500).map(|i| loaded.describe(i).unwrap().address).collect();
            assert!(
                addrs.iter().all(|a| a % 256 == 0) && addrs.windows(2).all(|w| w[0] < w[1]),
                "256-byte aligned parts"
            );
            assert_eq!(
                addrs[499],
                address(loaded.get("t499").unwrap()),
                "the buffer made later is where it was described"
            );
            drop(loaded);
            assert_nothing_live();
            // cuda_host tensors (placed one by one) and cuda:0 parts side by side.
            let plan = Plan::make(&f, &Rules::parse(["t1*=cuda_host", "*=cuda:0"]).unwrap()).unwrap();
            let loaded = load(&f, &plan, None).unwrap();
            assert_described_as_placed(&loaded, 500);
            drop(loaded);
            assert_nothing_live();
        },
    );
}

/// Every tensor of `loaded` is described as the buffer (or view) it is: device, shape (the same pointer),
/// size and address.
fn assert_described_as_placed(loaded: &hostfirst::place::Loaded, n: usize) {
    for i in 0..n {
        let d = loaded.describe(i).unwrap();
        match loaded.at(i).unwrap().1 {
            Placed::Buffer(b) => {
                let b = b.lock().unwrap();
                let got = (true, b.device(), b.shape().as_ptr(), b.nbytes(), b.address());
                assert_eq!(got, (d.is_buffer, d.device, d.shape.as_ptr(), d.nbytes, d.address), "tensor {i}");
            }
            Placed::View(v) => {
                let got = (false, v.shape().as_ptr(), v.nbytes(), v.mapped().as_ptr() as u64);
                assert_eq!(got, (d.is_buffer, d.shape.as_ptr(), d.nbytes, d.address), "tensor {i}");
            }
        }
    }
}

/// The fault sweep of a CUDA load: six 1 MiB tensors to cuda:0, a copy failing once `STAND_IN_FAIL_COPY_AFTER`
/// bytes have been copied, with a sticky (`CUDA_ERROR_ILLEGAL_ADDRESS`) or a non-sticky
/// (`CUDA_ERROR_INVALID_VALUE`) error, in both stand-in modes, deferred over seeds 1-5 and with errors
/// reported before their copy has ended (`STAND_IN_EARLY_ERROR`). Every fault point lies
/// inside the load's bytes, so the load must fail with `DEVICE_ERROR` naming the driver's error, and once it
/// has, nothing it allocated is live (device memory, staging slabs, streams, events, queued work). Should a
/// load report success, every tensor is read back and compared; a read-back that fails fails the test too.
#[test]
fn cuda_load_fault_sweep_never_reports_success_and_never_leaks() {
    const MIB: usize = 1 << 20;
    const TEST: &str = concat!(module_path!(), "::cuda_load_fault_sweep_never_reports_success_and_never_leaks");
    if std::env::var(STAND_IN_CHILD).is_ok() {
        in_stand_in_child(TEST, &[], || {
            let (path, want) = write_many("sweep.safetensors", 6, |_| MIB / 4, false);
            let f = TensorFile::open(&path).unwrap();
            let plan = Plan::make(&f, &Rules::parse(["*=cuda:0"]).unwrap()).unwrap();
            let code = std::env::var("STAND_IN_COPY_ERROR").unwrap();
            let case = format!(
                "fault after {} bytes, {code}, deferred={}, seed={}",
                std::env::var("STAND_IN_FAIL_COPY_AFTER").unwrap(),
                std::env::var("STAND_IN_DEFERRED").unwrap(),
                std::env::var("STAND_IN_SEED").unwrap_or_default()
            );
            match load(&f, &plan, None) {
                Ok(loaded) => {
                    let mut wrong = Vec::new();
                    for i in 0..want.len() {
                        let (name, p) = loaded.at(i).unwrap();
                        let Placed::Buffer(b) = p else { panic!("{name} is not a buffer") };
                        let mut back = vec![0u8; MIB];
                        match b.lock().unwrap().copy_to_host(&mut back) {
                            Ok(()) => {
                                let k = name[1..].parse::<usize>().unwrap();
                                let differ = back.iter().zip(&want[k]).filter(|(a, b)| a != b).count();
                                if differ > 0 {
                                    wrong.push(format!("{name}: {differ} of {MIB} bytes differ"));
                                }
                            }
                            Err(e) => wrong.push(format!("{name}: read-back failed: {}", e.message())),
                        }
                    }
                    panic!("{case}: the load reported success; {}", wrong.join("; "));
                }
                Err(e) => {
                    assert_eq!(e.status(), Status::DeviceError, "{case}: {}", e.message());
                    assert!(e.message().contains(&code), "{case}: {}", e.message());
                }
            }
            drop(f);
            assert_nothing_live();
        });
        return;
    }
    if stand_in_deferred() {
        return; // each case sets the stand-in's mode itself: the suite's deferred pass adds nothing
    }
    let (mut cases, mut failed) = (0, Vec::new());
    for code in ["CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_INVALID_VALUE"] {
        for fault in [1, MIB, 3 * MIB + 777, 6 * MIB - 1] {
            let fault = fault.to_string();
            // (deferred, seed, errors reported before their copy ends: STAND_IN_EARLY_ERROR)
            let modes = [
                ("0", "", "0"),
                ("1", "1", "0"),
                ("1", "2", "0"),
                ("1", "3", "0"),
                ("1", "4", "0"),
                ("1", "5", "0"),
                ("1", "1", "1"),
                ("1", "2", "1"),
            ];
            for (deferred, seed, early) in modes {
                let knobs = [
                    ("STAND_IN_DEFERRED", Some(deferred)),
                    ("STAND_IN_SEED", (!seed.is_empty()).then_some(seed)),
                    ("STAND_IN_EARLY_ERROR", Some(early)),
                    ("STAND_IN_FAIL_COPY_AFTER", Some(fault.as_str())),
                    ("STAND_IN_COPY_ERROR", Some(code)),
                ];
                cases += 1;
                let r = std::panic::catch_unwind(|| in_stand_in_child(TEST, &knobs, || unreachable!()));
                if r.is_err() {
                    failed.push(format!("{knobs:?}"));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {cases} fault cases failed (each child's output is above):\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A load's reads are its read plan's (issue 45: one coalescing and over-read rule for loads, read plans and
/// shard-on-read). The cpu job reads t0, t1, t3 and t5 of a file whose t2 and t4 stay host views (gaps of a
/// page and of 1 MiB between the tensors read): the load issues exactly the requests that
/// `ReadPlan::new` gives for those four tensors (a job under 16 MiB per reader thread reads at most 1 MiB
/// per request: the default policy's `max_read`): t0 (1.5 MiB) as two requests, t1 and t3 merged across
/// the one-page gap (the cap of 1.25 pages read per page needed holds), t5 alone after the 1 MiB gap.
#[test]
fn a_loads_requests_are_its_read_plans() {
    use hostfirst::engine::{ReadPlan, Slice, Tuning};
    use hostfirst::file::ReadPolicy;
    let elems = [3 << 17, 1000, 1024, 8192, 1 << 18, 2048];
    let (path, want) = write_many("gaps.safetensors", elems.len(), |i| elems[i], false);
    let f = TensorFile::open(&path).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["t2=host", "t4=host", "*=cpu"]).unwrap()).unwrap();
    let loaded = load(&f, &plan, None).unwrap();
    verify_all(&f, &loaded, &want);
    let read = ["t0", "t1", "t3", "t5"].map(Slice::whole);
    let rp = ReadPlan::new(&f, &read, ReadPolicy::default(), Tuning::default()).unwrap();
    assert_eq!(rp.request_count(), 4, "{:?}", rp.requests());
    assert_eq!(loaded.read_requests(), rp.request_count(), "the load's requests: {:?}", rp.requests());
}
