//! Placement rules, plans, whole-file loads and the batch gather: on cpu, and on simulated CUDA devices
//! through the stand-in driver.

use crate::common::*;
use hostfirst::device::DeviceKind;
use hostfirst::place::gather::random_offsets;
use hostfirst::place::{load, Gather, Placed, Placement, Plan, Rules};
use hostfirst::{DType, Device, Status, TensorFile};
use std::path::PathBuf;

/// Writes a safetensors file of `(name, dtype, shape, bytes)` tensors.
fn write_file(name: &str, tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> PathBuf {
    let mut header = String::from("{");
    let mut data = Vec::new();
    for (i, (n, dt, shape, bytes)) in tensors.iter().enumerate() {
        let s: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"{n}\":{{\"dtype\":\"{dt}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            s.join(","),
            data.len(),
            data.len() + bytes.len()
        ));
        data.extend_from_slice(bytes);
    }
    header.push('}');
    while (8 + header.len()) % 8 != 0 {
        header.push(' ');
    }
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    img.extend_from_slice(&data);
    // Under target/ (one folder per process: stand-in tests run in child processes), not the system temp dir.
    let p = scratch(&format!("place_rules-{}", std::process::id())).join(name);
    std::fs::write(&p, img).unwrap();
    p
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u32).wrapping_mul(2654435761).rotate_right(13) as u8 ^ salt).collect()
}

/// tokens: u16[50000]; w1: f32[64, 64]; w2: f32[128]; bias: u8[17].
fn model() -> (PathBuf, Vec<(&'static str, Vec<u8>)>) {
    let t = vec![
        ("tokens", "U16", vec![50000], pattern(100000, 1)),
        ("w1", "F32", vec![64, 64], pattern(64 * 64 * 4, 2)),
        ("w2", "F32", vec![128], pattern(512, 3)),
        ("bias", "U8", vec![17], pattern(17, 4)),
    ];
    let p = write_file(&format!("model-{:?}.safetensors", std::thread::current().id()), &t);
    (p, t.into_iter().map(|(n, _, _, b)| (n, b)).collect())
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

#[test]
fn plan_first_match_wins_and_unmatched_stay_on_the_host() {
    let (path, _) = model();
    let f = TensorFile::open(&path).unwrap();
    let rules = Rules::parse(["tokens=host", "w1=cpu", "w*=cuda_host_never_matches_first_rule_wins", "w?=cpu"]);
    assert_eq!(rules.unwrap_err().status(), Status::InvalidArgument, "bad target refused when added");
    let rules = Rules::parse(["tokens=host", "w1=cpu", "w*=cpu:0", "*=host"]).unwrap();
    let plan = Plan::make(&f, &rules).unwrap();
    let by = |n: &str| plan.find(n).unwrap().clone();
    assert_eq!(by("tokens").placement, Placement::Host);
    assert_eq!(by("tokens").rule, Some(0));
    assert_eq!((by("w1").placement, by("w1").rule), (Placement::Device(Device::CPU), Some(1)));
    assert_eq!((by("w2").placement, by("w2").rule), (Placement::Device(Device::CPU), Some(2)));
    assert_eq!(by("bias").rule, Some(3));
    assert_eq!(plan.devices.len(), 1);
    let d = &plan.devices[0];
    assert_eq!((d.device, d.bytes, d.tensors), (Device::CPU, 64 * 64 * 4 + 512, 2));
    assert_eq!(d.largest, ("w1".to_string(), 64 * 64 * 4));
    assert!(d.fits && d.usable > 0 && d.total >= d.usable);

    // No rule at all: host-first.
    let plan = Plan::make(&f, &Rules::new()).unwrap();
    assert!(plan.entries.iter().all(|e| e.placement == Placement::Host && e.rule.is_none()));
    assert!(plan.devices.is_empty());
}

#[test]
fn default_resolves_through_the_stack_and_strict_mode_refuses_it() {
    let (path, _) = model();
    let f = TensorFile::open(&path).unwrap();
    let rules = Rules::parse(["tokens=host", "*=default"]).unwrap();
    let tok = hostfirst::scope::push(Device::CPU).unwrap();
    let plan = Plan::make(&f, &rules).unwrap();
    assert_eq!(plan.find("w1").unwrap().placement, Placement::Device(Device::CPU));
    hostfirst::scope::set_thread_strict(true);
    let e = Plan::make(&f, &rules).unwrap_err();
    hostfirst::scope::set_thread_strict(false);
    hostfirst::scope::pop(tok).unwrap();
    assert_eq!(e.status(), Status::ImplicitPlacement);
    assert!(e.message().contains("w1") && e.message().contains("*=default"), "{}", e.message());
    // Strict mode does not touch explicit targets.
    hostfirst::scope::set_thread_strict(true);
    let ok = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap());
    hostfirst::scope::set_thread_strict(false);
    ok.unwrap();
}

/// A rule that places nothing is listed by the plan (why, and what would match), and refused in strict mode.
#[test]
fn rules_that_place_nothing_are_reported_and_refused_in_strict_mode() {
    let (path, _) = model();
    let f = TensorFile::open(&path).unwrap();
    // The typo of the issue: `token` is not `tokens`, so tokens would go to the `*` rule's device.
    let rules = Rules::parse(["token=host", "*=cpu"]).unwrap();
    let plan = Plan::make(&f, &rules).unwrap();
    assert_eq!(plan.find("tokens").unwrap().placement, Placement::Device(Device::CPU));
    assert_eq!(plan.unmatched.len(), 1);
    let u = &plan.unmatched[0];
    assert_eq!((u.rule, u.pattern.as_str(), u.target.as_str()), (0, "token", "host"));
    assert_eq!((u.shadowed.clone(), u.near.as_deref()), (None, Some("tokens")));
    let text = u.to_string();
    assert!(text.contains("rule 0 'token=host' matches no tensor") && text.contains("'token*'"), "{text}");

    // A rule behind a broader one, and one that matches nothing at all.
    let plan = Plan::make(&f, &Rules::parse(["*=cpu", "tokens=host", "nothing*=cpu", "w1=cpu"]).unwrap()).unwrap();
    let got: Vec<String> = plan.unmatched.iter().map(|u| format!("{} {:?} {:?}", u.rule, u.shadowed, u.near)).collect();
    assert_eq!(got, [r#"1 Some(("tokens", 0)) None"#, "2 None None", r#"3 Some(("w1", 0)) None"#]);
    assert!(plan.unmatched[0].to_string().contains("taken by rule 0"), "{}", plan.unmatched[0]);
    // Every rule used: nothing listed.
    assert!(Plan::make(&f, &Rules::parse(["tokens=host", "*=cpu"]).unwrap()).unwrap().unmatched.is_empty());

    hostfirst::scope::set_thread_strict(true);
    let e = Plan::make(&f, &rules).unwrap_err();
    let ok = Plan::make(&f, &Rules::parse(["tokens=host", "*=cpu"]).unwrap());
    hostfirst::scope::set_thread_strict(false);
    ok.unwrap();
    assert_eq!(e.status(), Status::UnmatchedRule);
    assert!(
        e.message().starts_with("strict mode is on for this thread and rule 0 'token=host' matches no tensor"),
        "{e}"
    );
}

#[test]
fn load_on_cpu_byte_for_byte_with_progress_and_cancel() {
    let (path, tensors) = model();
    let f = TensorFile::open(&path).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["tokens=host", "*=cpu"]).unwrap()).unwrap();
    let mut seen = Vec::new();
    let mut cb = |d: u64, t: u64| {
        seen.push((d, t));
        false
    };
    let loaded = load(&f, &plan, Some(&mut cb)).unwrap();
    let total = plan.device_bytes();
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "monotonic: {seen:?}");
    assert_eq!(*seen.last().unwrap(), (total, total));
    assert_eq!(loaded.len(), 4);
    assert!(matches!(loaded.get("tokens"), Some(Placed::View(_))));
    assert!(matches!(loaded.get("w1"), Some(Placed::Buffer(_))));
    assert!(loaded.get("nope").is_none());
    for (n, b) in &tensors {
        assert!(bytes_of(loaded.get(n).unwrap()) == *b, "{n} byte-for-byte");
    }
    let mut cancel = |_: u64, _: u64| true;
    assert_eq!(load(&f, &plan, Some(&mut cancel)).err().unwrap().status(), Status::Cancelled);

    // A plan from another file is refused.
    let other = write_file("other.safetensors", &[("x", "U8", vec![1], vec![1])]);
    let o = TensorFile::open(&other).unwrap();
    assert_eq!(load(&o, &plan, None).err().unwrap().status(), Status::InvalidArgument);
}

fn direct(src: &[u8], elem: usize, offsets: &[u64], window: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for &o in offsets {
        v.extend_from_slice(&src[o as usize * elem..(o + window) as usize * elem]);
    }
    v
}

fn check_gather(device: Device) {
    let t = vec![
        ("tok16", "U16", vec![10007], pattern(20014, 5)),
        ("f32s", "F32", vec![3001], pattern(12004, 6)),
        ("bytes", "U8", vec![999], pattern(999, 7)),
        ("i64s", "I64", vec![700], pattern(5600, 8)),
        ("grid", "U16", vec![10, 10], pattern(200, 9)),
    ];
    let path = write_file(&format!("gather-{device}.safetensors"), &t);
    let f = TensorFile::open(&path).unwrap();
    for (name, dt, shape, bytes) in &t[..4] {
        let dtype = DType::from_name(dt).unwrap();
        let elem = dtype.bits() as usize / 8;
        let (b, w) = (8u64, 33u64);
        let mut g = Gather::new(device, dtype, b, w).unwrap();
        let mut addrs = vec![g.current().lock().unwrap().address()];
        let v = f.view(name).unwrap();
        let mut state = 7u64;
        let mut offs = vec![0u64; b as usize];
        // Both ways of reading windows: pread (not prefaulted), then memcpy from the populated mapping.
        assert!(!v.is_prefaulted(), "{name}: nothing prefaulted yet");
        for step in 0..6 {
            if step == 3 {
                assert!(v.prefault().unwrap(), "{name}: MADV_POPULATE_READ (Linux >= 5.14)");
                assert!(v.is_prefaulted() && f.view(name).unwrap().is_prefaulted(), "{name}: recorded on the file");
            }
            random_offsets(&mut state, shape[0], w, &mut offs).unwrap();
            if step % 3 == 0 {
                offs[0] = 0;
                offs[1] = shape[0] - w; // the last full window
            }
            g.run(&v, &offs).unwrap();
            let mut got = vec![0u8; g.nbytes() as usize];
            g.copy_to_host(&mut got).unwrap();
            assert!(got == direct(bytes, elem, &offs, w), "{name} step {step} on {device}");
            let addr = g.current().lock().unwrap().address();
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
            assert!(addrs.len() <= 2 && g.ring_len() == 2, "the current batch and one spare, reused");
        }
        // Out of range: names the first bad offset, index and value; the batch is unchanged.
        let mut bad = offs.clone();
        bad[3] = shape[0] - w + 1;
        bad[5] = u64::MAX;
        let e = g.run(&v, &bad).unwrap_err();
        assert_eq!(e.status(), Status::OutOfRange);
        assert!(e.message().contains(&format!("offset 3 ({})", shape[0] - w + 1)), "{}", e.message());
        assert_eq!(g.run(&v, &offs[..3]).unwrap_err().status(), Status::InvalidArgument);
    }
    let mut g = Gather::new(device, DType::U16, 2, 3).unwrap();
    let e = g.run(&f.view("grid").unwrap(), &[0, 1]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "2-D source: {}", e.message());
    let e = g.run(&f.view("f32s").unwrap(), &[0, 1]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "dtype mismatch");
    assert_eq!(Gather::new(device, DType::F4, 2, 3).err().unwrap().status(), Status::InvalidArgument);
    assert_eq!(Gather::new(device, DType::U8, 0, 3).err().unwrap().status(), Status::InvalidArgument);
}

#[test]
fn gather_on_cpu_matches_a_direct_computation() {
    check_gather(Device::CPU);
}

/// A file truncated after opening: an unprefaulted gather reads with pread and reports `TRUNCATED` naming the
/// tensor (no SIGBUS); windows before the new end still gather; a run after the error works.
fn check_truncated_gather(device: Device) {
    let n = 1u64 << 16; // u16 elements
    let path = write_file(
        &format!("gather-trunc-{device}.safetensors"),
        &[("tok", "U16", vec![n], pattern(2 * n as usize, 3))],
    );
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("tok").unwrap();
    let full = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(full - n).unwrap(); // the second half goes
    let mut g = Gather::new(device, DType::U16, 2, 64).unwrap();
    let pinned = || if device.kind == DeviceKind::CUDA { stand_in_query("stand_in_live_pinned") } else { 0 };
    let staging = pinned();
    let e = g.run(&v, &[0, n - 64]).unwrap_err();
    assert_eq!(e.status(), Status::Truncated, "{}", e.message());
    assert!(e.message().contains("'tok'"), "{}", e.message());
    assert_eq!(pinned(), staging, "the staging buffer is kept, not freed, after TRUNCATED");
    g.run(&v, &[0, 100]).unwrap();
    assert_eq!(pinned(), staging, "and reused by the next run");
    let mut got = vec![0u8; g.nbytes() as usize];
    g.copy_to_host(&mut got).unwrap();
    assert!(got == direct(&pattern(2 * n as usize, 3), 2, &[0, 100], 64), "windows before the new end on {device}");
    assert_eq!(v.prefault().unwrap_err().status(), Status::Truncated, "prefault checks the length too");
    assert!(!v.is_prefaulted());
}

#[test]
fn gather_from_a_truncated_file_gives_truncated() {
    check_truncated_gather(Device::CPU);
}

const GIB: u64 = 1 << 30;

#[test]
fn stand_in_load_on_two_devices_byte_for_byte() {
    in_stand_in_child(
        concat!(module_path!(), "::stand_in_load_on_two_devices_byte_for_byte"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            let (path, tensors) = model();
            let f = TensorFile::open(&path).unwrap();
            let plan =
                Plan::make(&f, &Rules::parse(["tokens=host", "w1=cuda:0", "w2=cuda:1", "bias=cpu"]).unwrap()).unwrap();
            assert_eq!(plan.devices.len(), 3);
            {
                let loaded = load(&f, &plan, None).unwrap();
                assert_eq!(hostfirst_live(), 2);
                for (n, b) in &tensors {
                    assert!(bytes_of(loaded.get(n).unwrap()) == *b, "{n} byte-for-byte");
                }
                let Placed::Buffer(w2) = loaded.get("w2").unwrap() else { panic!("w2 is a buffer") };
                assert_eq!(w2.lock().unwrap().device(), Device::cuda(1));
            }
            assert_eq!(hostfirst_live(), 0, "everything freed with the load");
            // Cancellation after the first device tensor frees it.
            let mut n = 0;
            let mut cancel = |_: u64, _: u64| {
                n += 1;
                n > 1
            };
            assert_eq!(load(&f, &plan, Some(&mut cancel)).err().unwrap().status(), Status::Cancelled);
            assert_eq!(hostfirst_live(), 0);
        },
    );
}

fn hostfirst_live() -> u64 {
    stand_in_query("stand_in_live_allocations")
}

#[test]
fn stand_in_load_fit_failure_allocates_nothing() {
    in_stand_in_child(
        concat!(module_path!(), "::stand_in_load_fit_failure_allocates_nothing"),
        &[
            ("STAND_IN_DEVICES", Some("2")),
            ("STAND_IN_TOTAL_MEMORY", Some("16G,48K")),
            ("STAND_IN_CONTEXT_RESERVE", Some("0")),
        ],
        || {
            let (path, _) = model();
            let f = TensorFile::open(&path).unwrap();
            // w1 (16 KiB) fits cuda:0; tokens (~98 KiB) cannot fit cuda:1's 48 KiB (less the 32 MiB margin).
            let plan = Plan::make(&f, &Rules::parse(["w1=cuda:0", "tokens=cuda:1"]).unwrap()).unwrap();
            let on = |d: Device| plan.devices.iter().find(|s| s.device == d).unwrap();
            assert!(on(Device::cuda(0)).fits && !on(Device::cuda(1)).fits, "{:?}", plan.devices);
            assert_eq!(
                (plan.devices[0].device, plan.devices[0].usable, plan.devices[0].total),
                (Device::cuda(1), 0, 48 << 10)
            );
            assert!(!plan.fits());
            let e = load(&f, &plan, None).err().unwrap();
            assert_eq!(e.status(), Status::OutOfMemory);
            assert!(e.message().contains("cuda:1") && e.message().contains("tokens"), "{}", e.message());
            assert_eq!(e.fit().unwrap().device, "cuda:1");
            assert_eq!(stand_in_query("stand_in_total_allocations"), 0, "nothing was ever allocated");
            assert_eq!(hostfirst_live(), 0);
            let _ = GIB;
        },
    );
}

#[test]
fn stand_in_gather_matches_and_allocates_nothing_per_step() {
    in_stand_in_child(
        concat!(module_path!(), "::stand_in_gather_matches_and_allocates_nothing_per_step"),
        &[("STAND_IN_DEVICES", Some("1"))],
        || {
            check_gather(Device::cuda(0));
            assert_eq!(hostfirst_live(), 0);
            check_truncated_gather(Device::cuda(0));
            assert_eq!(hostfirst_live(), 0);
            let path = write_file("steps.safetensors", &[("t", "U16", vec![4096], pattern(8192, 1))]);
            let f = TensorFile::open(&path).unwrap();
            let v = f.view("t").unwrap();
            let mut g = Gather::new(Device::cuda(0), DType::U16, 4, 64).unwrap();
            g.run(&v, &[0, 1, 2, 3]).unwrap();
            let (allocs, pinned) =
                (stand_in_query("stand_in_total_allocations"), stand_in_query("stand_in_live_pinned"));
            let mut state = 1;
            let mut offs = [0u64; 4];
            for _ in 0..20 {
                random_offsets(&mut state, 4096, 64, &mut offs).unwrap();
                g.run(&v, &offs).unwrap();
            }
            assert_eq!(stand_in_query("stand_in_total_allocations"), allocs, "no device allocation per step");
            assert_eq!(stand_in_query("stand_in_live_pinned"), pinned, "no staging allocation per step");
            drop(g);
            assert_eq!(hostfirst_live(), 0);
        },
    );
}
