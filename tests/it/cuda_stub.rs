//! The CUDA path against the stand-in driver (tests/cuda_stub/stand_in_cuda.c).
//!
//! The CLI and C programs run as child processes with the stand-in on `LD_LIBRARY_PATH`; the Rust API tests
//! re-execute this test binary for one test at a time (`in_stand_in_child`), because the driver library is
//! loaded, and the census taken, once per process.

use crate::common::*;
use hostfirst::device::census::census;
use hostfirst::device::cuda::{
    context_mem_info, mem_info, Context, DeviceMemory, Event, HostRegistration, InFlight, PinnedHostMemory, Stream,
};
use hostfirst::device::{BackendStatus, Device, DeviceKind};
use hostfirst::Status;

const UUID0: &str = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf";
const UUID1: &str = "GPU-b0b1b2b3-b4b5-b6b7-b8b9-babbbcbdbebf";
const GIB: u64 = 1 << 30;
const RESERVE: u64 = 256 << 20;

fn cuda_backend(v: &serde_json::Value) -> &serde_json::Value {
    let b = &v["backends"][1];
    assert_eq!(b["name"], "cuda");
    b
}

fn devices_json(knobs: &[(&str, Option<&str>)]) -> serde_json::Value {
    let out = run_ok_with_stand_in(&cli(), &["devices", "--json"], knobs);
    assert_eq!(out.trim().lines().count(), 1, "one JSON object: {out}");
    json(&out)
}

// ---- the CLI and the C ABI -------------------------------------------------------------------------------

#[test]
fn cli_two_devices() {
    let v = devices_json(&[("STAND_IN_DEVICES", Some("2"))]);
    let b = cuda_backend(&v);
    assert_eq!(b["status"], "available");
    assert_eq!(b["reason"], "");
    assert_eq!(b["devices"], 2);
    assert_eq!(b["driver_version"], "12.8");
    let devs = v["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 3);
    assert_eq!(devs[0]["spec"], "cpu:0");
    for (i, uuid, pci) in [(0usize, UUID0, "0000:17:00.0"), (1, UUID1, "0000:37:00.0")] {
        let d = &devs[i + 1];
        assert_eq!(d["spec"], format!("cuda:{i}"));
        assert_eq!(d["kind"], "cuda");
        assert_eq!(d["name"], format!("Stand-in GPU {i}"));
        assert_eq!(d["uuid"], uuid);
        assert_eq!(d["pci_bus_id"], pci);
        assert_eq!(d["compute_capability"], "9.0");
        assert_eq!(d["multiprocessors"], 132);
        assert_eq!(d["total_memory"], 16 * GIB);
        assert_eq!(d["free_memory"], 16 * GIB, "free memory from NVML: no context was created, so no reserve");
    }
    assert_eq!(v["default"]["spec"], "cuda:0");
    assert_eq!(v["default"]["source"], "built_in");
}

/// `hostfirst devices` prints free memory without creating a context on any GPU where NVML answers (the
/// stand-in's exit report counts retained contexts), and through each device's context where it does not.
#[test]
fn cli_devices_creates_no_context_where_nvml_answers() {
    for (nvml, contexts, free) in [("1", 0, 16 * GIB), ("0", 2, 16 * GIB - RESERVE)] {
        let out = run_with_stand_in(
            &cli(),
            &["devices", "--json"],
            &[("STAND_IN_DEVICES", Some("2")), ("STAND_IN_NVML", Some(nvml)), ("STAND_IN_LEAK_REPORT", Some("1"))],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains(&format!("; {contexts} primary contexts retained")), "STAND_IN_NVML={nvml}: {err}");
        let v = json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(v["devices"][2]["free_memory"], free, "STAND_IN_NVML={nvml}");
    }
}

/// A MIG instance is named `MIG-<uuid>` (as nvidia-smi -L prints it and CUDA_VISIBLE_DEVICES accepts it),
/// selectable by that UUID, and NVML finds it by that name (free memory without a context).
#[test]
fn cli_mig_instances_are_named_mig() {
    let mig_uuid = UUID1.replacen("GPU-", "MIG-", 1);
    let spec = format!("cuda:{mig_uuid}");
    let knobs = [
        ("STAND_IN_DEVICES", Some("2")),
        ("STAND_IN_NAMES", Some("NVIDIA A100-SXM4-40GB, NVIDIA A100-SXM4-40GB MIG 1g.5gb")),
        ("HOSTFIRST_DEFAULT_DEVICE", Some(spec.as_str())),
        ("STAND_IN_LEAK_REPORT", Some("1")),
    ];
    let out = run_with_stand_in(&cli(), &["devices", "--json"], &knobs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["devices"][1]["uuid"], UUID0, "a whole GPU keeps GPU-");
    assert_eq!(v["devices"][2]["uuid"], mig_uuid.as_str());
    assert_eq!(v["devices"][2]["free_memory"], 16 * GIB, "NVML found the MIG instance by its MIG- UUID");
    assert_eq!(v["default"]["spec"], "cuda:1", "cuda:MIG-<uuid> selects the instance");
    assert!(err.contains("; 0 primary contexts retained"), "{err}");
    // CUDA_VISIBLE_DEVICES=MIG-<prefix> selects it too.
    let v = devices_json(&[
        ("STAND_IN_DEVICES", Some("2")),
        ("STAND_IN_NAMES", Some("NVIDIA A100-SXM4-40GB, NVIDIA A100-SXM4-40GB MIG 1g.5gb")),
        ("CUDA_VISIBLE_DEVICES", Some("MIG-b0b1b2b3")),
    ]);
    assert_eq!(cuda_backend(&v)["devices"], 1);
    assert_eq!(v["devices"][1]["uuid"], mig_uuid.as_str());
}

#[test]
fn cli_properties_from_knobs() {
    let v = devices_json(&[
        ("STAND_IN_DEVICES", Some("2")),
        ("STAND_IN_NAMES", Some("Big One, Small One")),
        ("STAND_IN_TOTAL_MEMORY", Some("80G,24G")),
        ("STAND_IN_COMPUTE_CAPABILITY", Some("9.0,8.6")),
        ("STAND_IN_UUIDS", Some("GPU-12345678-9abc-def0-1234-56789abcdef0")),
        ("STAND_IN_DRIVER_VERSION", Some("13000")),
    ]);
    assert_eq!(cuda_backend(&v)["driver_version"], "13.0");
    let d = &v["devices"];
    assert_eq!(d[1]["name"], "Big One");
    assert_eq!(d[2]["name"], "Small One");
    assert_eq!(d[1]["total_memory"], 80 * GIB);
    assert_eq!(d[2]["total_memory"], 24 * GIB);
    assert_eq!(d[2]["compute_capability"], "8.6");
    assert_eq!(d[1]["uuid"], "GPU-12345678-9abc-def0-1234-56789abcdef0");
    assert_eq!(d[2]["uuid"], UUID1, "devices without a UUID knob keep the deterministic default");
}

#[test]
fn cli_human_table_with_devices() {
    let out = run_ok_with_stand_in(&cli(), &["devices"], &[("STAND_IN_DEVICES", Some("2"))]);
    assert!(out.contains("cuda:1") && out.contains(UUID1) && out.contains("sm_90"), "{out}");
    assert!(out.contains("default device: cuda:0 (source: built_in)"), "{out}");
}

#[test]
fn cli_platforms_cpu_hides_the_driver() {
    let v = devices_json(&[("STAND_IN_DEVICES", Some("2")), ("HOSTFIRST_PLATFORMS", Some("cpu"))]);
    let b = cuda_backend(&v);
    assert_eq!(b["status"], "hidden_by_env");
    assert!(b["reason"].as_str().unwrap().contains("HOSTFIRST_PLATFORMS"));
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert_eq!(v["default"]["spec"], "cpu:0");
}

#[test]
fn cli_visible_devices_that_hide_everything() {
    for value in ["", " ", "-1", "NoDevFiles"] {
        let v = devices_json(&[("STAND_IN_DEVICES", Some("2")), ("CUDA_VISIBLE_DEVICES", Some(value))]);
        let b = cuda_backend(&v);
        assert_eq!(b["status"], "hidden_by_env", "CUDA_VISIBLE_DEVICES={value:?}");
        let reason = b["reason"].as_str().unwrap();
        assert!(reason.contains(&format!("CUDA_VISIBLE_DEVICES=\"{value}\"")), "{reason}");
        assert_eq!(b["driver_version"], "", "nothing was loaded");
    }
}

#[test]
fn cli_visible_devices_reorder_and_select() {
    let v = devices_json(&[("STAND_IN_DEVICES", Some("3")), ("CUDA_VISIBLE_DEVICES", Some("2,0"))]);
    assert_eq!(cuda_backend(&v)["devices"], 2);
    assert_eq!(v["devices"][1]["name"], "Stand-in GPU 2");
    assert_eq!(v["devices"][2]["uuid"], UUID0);
    let v = devices_json(&[("STAND_IN_DEVICES", Some("2")), ("CUDA_VISIBLE_DEVICES", Some("GPU-b0b1"))]);
    assert_eq!(cuda_backend(&v)["devices"], 1);
    assert_eq!(v["devices"][1]["uuid"], UUID1);
}

#[test]
fn cli_init_failure_names_the_driver_error() {
    let v = devices_json(&[("STAND_IN_INIT_ERROR", Some("CUDA_ERROR_OPERATING_SYSTEM"))]);
    let b = cuda_backend(&v);
    assert_eq!(b["status"], "init_failed");
    let reason = b["reason"].as_str().unwrap();
    assert!(reason.contains("cuInit") && reason.contains("CUDA_ERROR_OPERATING_SYSTEM"), "{reason}");
    assert_eq!(b["driver_version"], "12.8", "the version is known even when cuInit fails");
    assert_eq!(v["default"]["spec"], "cpu:0");
    let v = devices_json(&[("STAND_IN_INIT_ERROR", Some("999"))]);
    assert!(cuda_backend(&v)["reason"].as_str().unwrap().contains("CUDA_ERROR_UNKNOWN"));
}

#[test]
fn cli_old_driver() {
    let v = devices_json(&[("STAND_IN_DRIVER_VERSION", Some("11020"))]);
    let b = cuda_backend(&v);
    assert_eq!(b["status"], "driver_too_old");
    let reason = b["reason"].as_str().unwrap();
    assert!(reason.contains("11.2") && reason.contains("11.4"), "both versions: {reason}");
    assert_eq!(b["driver_version"], "11.2");
    assert_eq!(cuda_backend(&devices_json(&[("STAND_IN_DRIVER_VERSION", Some("11040"))]))["status"], "available");
}

#[test]
fn cli_no_devices() {
    let v = devices_json(&[("STAND_IN_DEVICES", Some("0"))]);
    assert_eq!(cuda_backend(&v)["status"], "no_devices");
    assert!(cuda_backend(&v)["reason"].as_str().unwrap().contains("0 devices"));
    let v = devices_json(&[("STAND_IN_INIT_ERROR", Some("CUDA_ERROR_NO_DEVICE"))]);
    assert_eq!(cuda_backend(&v)["status"], "no_devices");
    let v = devices_json(&[("STAND_IN_DEVICES", Some("2")), ("CUDA_VISIBLE_DEVICES", Some("7"))]);
    let b = cuda_backend(&v);
    assert_eq!(b["status"], "no_devices");
    assert!(b["reason"].as_str().unwrap().contains("CUDA_VISIBLE_DEVICES=\"7\""), "{b}");
    assert_eq!(v["default"]["spec"], "cpu:0");
}

#[test]
fn cli_default_device_env_with_cuda() {
    let v = devices_json(&[("STAND_IN_DEVICES", Some("2")), ("HOSTFIRST_DEFAULT_DEVICE", Some("gpu:1"))]);
    assert_eq!(v["default"]["spec"], "cuda:1");
    assert_eq!(v["default"]["source"], "env");
    let spec = format!("cuda:{UUID1}");
    let v = devices_json(&[("STAND_IN_DEVICES", Some("2")), ("HOSTFIRST_DEFAULT_DEVICE", Some(spec.as_str()))]);
    assert_eq!(v["default"]["spec"], "cuda:1");
    let out = run_with_stand_in(
        &cli(),
        &["devices", "--json"],
        &[("STAND_IN_DEVICES", Some("2")), ("HOSTFIRST_DEFAULT_DEVICE", Some("cuda:2"))],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cuda:2") && err.contains("cuda:1"), "names the value and the devices present: {err}");
}

#[test]
fn c_census_with_two_devices() {
    let src = root().join("tests/c/test_cuda_census.c");
    let bin = compile_c(&[&src], "test_cuda_census", &["-ldl"]);
    // Free memory through NVML (no context), then without NVML (cuMemGetInfo retains each context once).
    for (nvml, contexts) in [("1", 0), ("0", 2)] {
        let out = run_with_stand_in(
            &bin,
            &[],
            &[("STAND_IN_DEVICES", Some("2")), ("STAND_IN_LEAK_REPORT", Some("1")), ("STAND_IN_NVML", Some(nvml))],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "STAND_IN_NVML={nvml}: {err}");
        assert!(
            err.contains(&format!(
                "0 device allocations (0 bytes), 0 pinned, 0 registrations, 0 streams, 0 events live; 0 queued \
                 operations; {contexts} primary contexts retained"
            )),
            "the stand-in's exit report: {err}"
        );
    }
}

#[test]
fn c_core_with_the_stand_in() {
    let bin = compile_c_test("test_core");
    run_ok_with_stand_in(&bin, &[], &[("STAND_IN_DEVICES", Some("2")), ("EXPECT_CUDA_STATUS", Some("AVAILABLE"))]);
}

// ---- the Rust API in child processes ---------------------------------------------------------------------

#[test]
fn census_creates_no_context_and_specs_follow_uuids() {
    // Physical devices 0 and 1, made visible in reverse order.
    in_stand_in_child(
        concat!(module_path!(), "::census_creates_no_context_and_specs_follow_uuids"),
        &[("STAND_IN_DEVICES", Some("2")), ("CUDA_VISIBLE_DEVICES", Some("1,0"))],
        || {
            let c = census();
            assert!(c.cuda_available());
            assert_eq!(c.backend("cuda").unwrap().status, BackendStatus::Available);
            assert_eq!(c.info(Device::cuda(0)).unwrap().uuid, UUID1);
            assert_eq!(stand_in_query("stand_in_context_retains"), 0, "the census retains no context");
            assert_eq!(Device::parse(&format!("cuda:{UUID1}")).unwrap(), Device::cuda(0));
            assert_eq!(Device::parse(&format!("gpu:{}", UUID0.to_uppercase())).unwrap(), Device::cuda(1));
            assert_eq!(Device::parse("cuda:1").unwrap(), Device::cuda(1));
            assert_eq!(Device::parse("cuda_host").unwrap().kind, DeviceKind::CUDA_HOST);
            let e = Device::parse("cuda:2").unwrap_err();
            assert_eq!(e.status(), Status::NoSuchDevice);
            assert!(e.message().contains("cpu:0, cuda:0, cuda:1"), "{}", e.message());
            assert_eq!(stand_in_query("stand_in_context_retains"), 0);
            assert!(!Context::is_retained(0));

            // Free memory through NVML: no context.
            assert_eq!(mem_info(0).unwrap(), (16 * GIB, 16 * GIB));
            assert_eq!(stand_in_query("stand_in_context_retains"), 0);
            assert_eq!(stand_in_query("stand_in_nvml_memory_queries"), 1);
            // As an allocation sees it: in the device's context, retained once.
            let (free, total) = context_mem_info(0).unwrap();
            assert_eq!((free, total), (16 * GIB - RESERVE, 16 * GIB));
            assert_eq!(stand_in_query("stand_in_context_retains"), 1);
            assert_eq!(mem_info(0).unwrap(), (free, total), "once the context is retained, cuMemGetInfo in it");
            assert_eq!(stand_in_query("stand_in_nvml_memory_queries"), 1);
            assert_eq!(stand_in_query("stand_in_context_retains"), 1, "retained once per device");
            assert!(Context::is_retained(0) && !Context::is_retained(1));
            assert_eq!(mem_info(2).unwrap_err().status(), Status::NoSuchDevice);
            assert_eq!(stand_in_current_context(), 0, "the calling thread's context is restored");
        },
    );
}

#[test]
fn platforms_cpu_makes_the_wrapper_unavailable() {
    in_stand_in_child(
        concat!(module_path!(), "::platforms_cpu_makes_the_wrapper_unavailable"),
        &[("HOSTFIRST_PLATFORMS", Some("cpu"))],
        || {
            assert_eq!(DeviceMemory::alloc(0, 8).unwrap_err().status(), Status::Unavailable);
            let e = PinnedHostMemory::alloc(8).unwrap_err();
            assert_eq!(e.status(), Status::Unavailable);
            assert!(e.message().contains("hidden_by_env"), "{}", e.message());
            assert_eq!(Stream::new(0).unwrap_err().status(), Status::Unavailable);
        },
    );
}

#[test]
fn device_memory_round_trip() {
    in_stand_in_child(
        concat!(module_path!(), "::device_memory_round_trip"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            let n = 1 << 20;
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
            let a = DeviceMemory::alloc(0, n).unwrap();
            assert_eq!((a.ordinal(), a.len()), (0, n));
            assert_ne!(a.device_ptr(), 0);
            assert_eq!(stand_in_query("stand_in_live_allocations"), 1);
            assert_eq!(mem_info(0).unwrap().0, 16 * GIB - RESERVE - n as u64);
            a.copy_from_host(0, &data).unwrap();
            let mut back = vec![0u8; n];
            a.copy_to_host(0, &mut back).unwrap();
            assert!(back == data, "byte-for-byte");

            // Offsets, device-to-device, bounds.
            let b = DeviceMemory::alloc(0, 4096).unwrap();
            b.copy_from_device(0, &a, 1000, 4096).unwrap();
            let mut part = vec![0u8; 100];
            b.copy_to_host(50, &mut part).unwrap();
            assert_eq!(part, data[1050..1150]);
            b.copy_from_host(4000, &[9; 96]).unwrap();
            b.copy_to_host(3990, &mut part[..20]).unwrap();
            assert_eq!(&part[..20], &[&data[4990..5000], &[9u8; 10][..]].concat()[..]);
            let before = stand_in_query("stand_in_bytes_copied");
            let e = b.copy_from_host(4000, &[1; 97]).unwrap_err();
            assert_eq!(e.status(), Status::OutOfRange);
            assert!(e.message().contains("97 bytes at offset 4000") && e.message().contains("4096"), "{}", e.message());
            assert_eq!(b.copy_to_host(usize::MAX, &mut part).unwrap_err().status(), Status::OutOfRange);
            assert_eq!(b.copy_from_device(0, &a, n - 10, 20).unwrap_err().status(), Status::OutOfRange);
            assert_eq!(a.copy_from_device(0, &a, 10, 20).unwrap_err().status(), Status::InvalidArgument, "overlap");
            assert_eq!(stand_in_query("stand_in_bytes_copied"), before, "refused copies reach no driver");

            let c = DeviceMemory::alloc(1, 16).unwrap();
            // Between devices: a peer copy (cuMemcpyPeer with both primary contexts).
            c.copy_from_device(0, &b, 50, 16).unwrap();
            let mut peer_back = [0u8; 16];
            c.copy_to_host(0, &mut peer_back).unwrap();
            assert_eq!(peer_back[..], data[1050..1066]);
            assert_eq!(stand_in_query("stand_in_peer_copies"), 1);
            assert_eq!(c.copy_from_device(0, &b, 4090, 16).unwrap_err().status(), Status::OutOfRange);
            assert_eq!(stand_in_query("stand_in_peer_copies"), 1, "refused before the driver");
            assert_eq!(DeviceMemory::alloc(2, 16).unwrap_err().status(), Status::NoSuchDevice);
            let empty = DeviceMemory::alloc(1, 0).unwrap();
            assert!(empty.is_empty());
            empty.copy_from_host(0, &[]).unwrap();
            assert_eq!(stand_in_query("stand_in_live_allocations"), 3);
            drop((a, b, c, empty));
            assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
            assert_eq!(stand_in_query("stand_in_live_device_bytes"), 0);
            assert_eq!(stand_in_current_context(), 0);
        },
    );
}

#[test]
fn pinned_streams_events_and_async_copies() {
    in_stand_in_child(
        concat!(module_path!(), "::pinned_streams_events_and_async_copies"),
        &[("STAND_IN_EVENT_NOT_READY", Some("2"))],
        || {
            let n = 64 * 1024;
            let mut pinned = PinnedHostMemory::alloc(n).unwrap();
            assert_eq!(stand_in_query("stand_in_live_pinned"), 1);
            assert!(pinned.iter().all(|b| *b == 0), "zero-filled");
            for (i, b) in pinned.iter_mut().enumerate() {
                *b = (i % 253) as u8;
            }
            let expect = pinned.to_vec();
            let dev = DeviceMemory::alloc(0, n).unwrap();
            let stream = Stream::new(0).unwrap();
            assert_eq!(stand_in_query("stand_in_live_streams"), 1);

            let mut flight: InFlight<PinnedHostMemory> = stream.copy_to_device_async(pinned, 0, &dev, 0, n).unwrap();
            assert!(!flight.is_done().unwrap(), "the stand-in reports NOT_READY twice after a record");
            assert!(!flight.is_done().unwrap());
            assert!(flight.is_done().unwrap());
            let pinned = flight.wait().unwrap();
            assert_eq!(pinned.as_slice(), &expect[..], "the buffer comes back untouched");

            let out = PinnedHostMemory::alloc(n).unwrap();
            let out = stream.copy_to_host_async(&dev, 0, out, 0, n).unwrap().wait().unwrap();
            assert_eq!(out.as_slice(), &expect[..]);
            assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0, "both copies were from page-locked memory");

            // Pageable buffers work too (the stand-in counts them) and sub-ranges land where asked.
            let v = stream.copy_to_host_async(&dev, 100, vec![0u8; 10], 2, 5).unwrap().wait().unwrap();
            assert_eq!(&v[2..7], &expect[100..105]);
            assert_eq!(&v[..2], &[0, 0]);
            assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 1);
            let e = stream.copy_to_device_async(vec![1u8; 10], 5, &dev, 0, 6).unwrap_err();
            assert_eq!(e.status(), Status::OutOfRange);

            // Events directly; dropping an InFlight waits for it.
            let ev = Event::new(0).unwrap();
            assert!(ev.query().unwrap(), "an event never recorded is complete");
            ev.record(&stream).unwrap();
            assert!(!ev.query().unwrap());
            ev.synchronize().unwrap();
            assert!(ev.query().unwrap());
            stream.synchronize().unwrap();
            let dropped = stream.copy_to_device_async(out, 0, &dev, 0, n).unwrap();
            assert_eq!(stand_in_query("stand_in_live_events"), 2);
            drop(dropped);
            assert_eq!(stand_in_query("stand_in_live_pinned"), 1, "the InFlight released its buffer");
            drop((pinned, ev, stream, dev));
            for q in
                ["stand_in_live_pinned", "stand_in_live_streams", "stand_in_live_events", "stand_in_live_allocations"]
            {
                assert_eq!(stand_in_query(q), 0, "{q}");
            }
        },
    );
}

#[test]
fn streams_and_events_check_devices() {
    in_stand_in_child(
        concat!(module_path!(), "::streams_and_events_check_devices"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            let s1 = Stream::new(1).unwrap();
            let ev0 = Event::new(0).unwrap();
            assert_eq!(ev0.record(&s1).unwrap_err().status(), Status::InvalidArgument);
            let d0 = DeviceMemory::alloc(0, 16).unwrap();
            let e = s1.copy_to_device_async(vec![0u8; 16], 0, &d0, 0, 16).unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument);
            assert!(e.message().contains("cuda:0") && e.message().contains("cuda:1"), "{}", e.message());
            let d1 = DeviceMemory::alloc(1, 16).unwrap();
            s1.copy_to_device_async(vec![3u8; 16], 0, &d1, 0, 16).unwrap().wait().unwrap();
            let mut b = [0u8; 16];
            d1.copy_to_host(0, &mut b).unwrap();
            assert_eq!(b, [3u8; 16]);
        },
    );
}

#[test]
fn host_registration() {
    in_stand_in_child(concat!(module_path!(), "::host_registration"), &[], || {
        let data = vec![5u8; 8192];
        let reg = HostRegistration::register(&data).unwrap();
        assert!(reg.is_read_only());
        assert_eq!(reg.len(), 8192);
        assert_eq!(stand_in_query("stand_in_live_registrations"), 1);
        assert_eq!(stand_in_query("stand_in_last_register_flags"), 0x01 | 0x08, "portable | read-only");
        let e = HostRegistration::register(&data[100..200]).unwrap_err();
        assert_eq!(e.status(), Status::DeviceError);
        assert!(e.message().contains("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"), "{}", e.message());
        assert!(e.message().contains("100 bytes"), "{}", e.message());

        // An async copy from registered memory counts as page-locked.
        let dev = DeviceMemory::alloc(0, 8192).unwrap();
        let stream = Stream::new(0).unwrap();
        let shared: std::sync::Arc<[u8]> = std::sync::Arc::from(vec![7u8; 4096]);
        let reg2 = HostRegistration::register(&shared).unwrap();
        stream.copy_to_device_async(shared.clone(), 0, &dev, 0, 4096).unwrap().wait().unwrap();
        assert_eq!(stand_in_query("stand_in_pageable_async_copies"), 0);
        drop((reg, reg2));
        assert_eq!(stand_in_query("stand_in_live_registrations"), 0);
        let empty = HostRegistration::register(&[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(stand_in_query("stand_in_live_registrations"), 0);
    });
}

#[test]
fn host_registration_without_read_only_support() {
    in_stand_in_child(
        concat!(module_path!(), "::host_registration_without_read_only_support"),
        &[("STAND_IN_READ_ONLY_REGISTER", Some("0"))],
        || {
            let data = vec![1u8; 4096];
            let reg = HostRegistration::register(&data).unwrap();
            assert!(!reg.is_read_only());
            assert_eq!(stand_in_query("stand_in_last_register_flags"), 0x01);
        },
    );
}

/// A copy failing with a sticky error (CUDA_ERROR_ILLEGAL_ADDRESS) poisons the context: the error names the
/// copy and says it is sticky, every later call in the context fails the same way, and nothing leaks (the
/// resources die with the context).
#[test]
fn sticky_copy_failure_is_labelled_poisons_the_context_and_leaks_nothing() {
    in_stand_in_child(
        concat!(module_path!(), "::sticky_copy_failure_is_labelled_poisons_the_context_and_leaks_nothing"),
        &[("STAND_IN_FAIL_COPY_AFTER", Some("6000"))],
        || {
            let dev = DeviceMemory::alloc(0, 8192).unwrap();
            dev.copy_from_host(0, &[1u8; 4096]).unwrap();
            let e = dev.copy_from_host(4096, &[2u8; 4096]).unwrap_err();
            assert_eq!(e.status(), Status::DeviceError);
            let m = e.message();
            assert!(
                m.contains("CUDA_ERROR_ILLEGAL_ADDRESS")
                    && m.contains("cuMemcpyHtoDAsync_v2")
                    && m.contains("4096 bytes")
                    && m.contains("sticky error")
                    && m.contains("restart the process"),
                "{m}"
            );
            // Everything in the context now fails with the same, labelled, error.
            for e in [
                Stream::new(0).unwrap_err(),
                DeviceMemory::alloc(0, 64).unwrap_err(),
                PinnedHostMemory::alloc_on(0, 64).unwrap_err(),
                dev.copy_to_host(0, &mut [0u8; 16]).unwrap_err(),
            ] {
                assert_eq!(e.status(), Status::DeviceError);
                assert!(e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS") && e.message().contains("sticky"), "{e:?}");
            }
            drop(dev);
            for q in
                ["stand_in_live_allocations", "stand_in_live_pinned", "stand_in_live_streams", "stand_in_live_events"]
            {
                assert_eq!(stand_in_query(q), 0, "{q}");
            }
        },
    );
}

/// A copy failing with an error that is not sticky: reported (at the call or, deferred, at the next
/// synchronisation) and labelled as such, and the context stays usable.
#[test]
fn copy_failure_that_is_not_sticky_leaves_the_context_usable() {
    in_stand_in_child(
        concat!(module_path!(), "::copy_failure_that_is_not_sticky_leaves_the_context_usable"),
        &[("STAND_IN_FAIL_COPY_AFTER", Some("6000")), ("STAND_IN_COPY_ERROR", Some("CUDA_ERROR_INVALID_VALUE"))],
        || {
            let dev = DeviceMemory::alloc(0, 8192).unwrap();
            dev.copy_from_host(0, &[1u8; 4096]).unwrap();
            let e = dev.copy_from_host(4096, &[2u8; 4096]).unwrap_err();
            assert_eq!(e.status(), Status::DeviceError);
            assert!(e.message().contains("CUDA_ERROR_INVALID_VALUE") && !e.message().contains("sticky"), "{e:?}");
            let stream = Stream::new(0).unwrap();
            let more = DeviceMemory::alloc(0, 64).unwrap();
            let e = stream.copy_to_device_async(vec![3u8; 64], 0, &more, 0, 64).and_then(|f| f.wait()).unwrap_err();
            assert!(e.message().contains("CUDA_ERROR_INVALID_VALUE"), "the knob fails every later copy: {e:?}");
            drop((dev, more, stream));
            for q in ["stand_in_live_allocations", "stand_in_live_streams", "stand_in_live_events"] {
                assert_eq!(stand_in_query(q), 0, "{q}");
            }
        },
    );
}

#[test]
fn allocation_failure_when_memory_is_exhausted() {
    in_stand_in_child(
        concat!(module_path!(), "::allocation_failure_when_memory_is_exhausted"),
        &[("STAND_IN_TOTAL_MEMORY", Some("64M")), ("STAND_IN_CONTEXT_RESERVE", Some("16M"))],
        || {
            let mib = 1usize << 20;
            let a = DeviceMemory::alloc(0, 40 * mib).unwrap();
            let b = DeviceMemory::alloc(0, 7 * mib).unwrap();
            assert_eq!(mem_info(0).unwrap(), (mib as u64, 64 * mib as u64));
            let e = DeviceMemory::alloc(0, 2 * mib).unwrap_err();
            assert_eq!(e.status(), Status::OutOfMemory);
            assert!(
                e.message().contains("CUDA_ERROR_OUT_OF_MEMORY") && e.message().contains("2097152 bytes"),
                "{}",
                e.message()
            );
            let fit = e.fit().expect("fit numbers");
            assert_eq!((fit.needed, fit.free, fit.total), (2 * mib as u64, mib as u64, 64 * mib as u64));
            assert_eq!(fit.device, "cuda:0");
            drop(a);
            let c = DeviceMemory::alloc(0, 2 * mib).unwrap();
            drop((b, c));
            assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
        },
    );
}

#[test]
fn nth_allocation_failure() {
    in_stand_in_child(
        concat!(module_path!(), "::nth_allocation_failure"),
        &[("STAND_IN_FAIL_ALLOC", Some("2"))],
        || {
            let a = DeviceMemory::alloc(0, 16).unwrap();
            let e = DeviceMemory::alloc(0, 16).unwrap_err();
            assert_eq!(e.status(), Status::OutOfMemory);
            let c = DeviceMemory::alloc(0, 16).unwrap();
            drop((a, c));
            assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
        },
    );
}

#[test]
fn contexts_bind_and_restore() {
    in_stand_in_child(
        concat!(module_path!(), "::contexts_bind_and_restore"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            assert!(census().cuda_available()); // cuInit, before asking the stand-in for the current context
            assert_eq!(stand_in_current_context(), 0);
            let m = DeviceMemory::alloc(1, 64).unwrap();
            assert_eq!(stand_in_current_context(), 0, "wrapper calls leave the thread's context as it was");
            let c0 = Context::get(0).unwrap();
            c0.bind().unwrap();
            let bound = stand_in_current_context();
            assert_ne!(bound, 0);
            m.copy_from_host(0, &[1; 64]).unwrap();
            assert_eq!(stand_in_current_context(), bound, "restored to the caller's context, not cleared");
            assert!(std::ptr::eq(c0, Context::get(0).unwrap()), "one context per device");
            assert_eq!(stand_in_query("stand_in_context_retains"), 2);
            drop(m);
            assert_eq!(stand_in_current_context(), bound);
        },
    );
}

#[test]
fn many_threads() {
    in_stand_in_child(concat!(module_path!(), "::many_threads"), &[("STAND_IN_DEVICES", Some("2"))], || {
        std::thread::scope(|s| {
            for t in 0..4u8 {
                s.spawn(move || {
                    let ordinal = (t % 2) as u32;
                    let stream = Stream::new(ordinal).unwrap();
                    for i in 0..50u8 {
                        let m = DeviceMemory::alloc(ordinal, 256).unwrap();
                        let v = vec![t ^ i; 256];
                        let back = stream.copy_to_device_async(v.clone(), 0, &m, 0, 256).unwrap().wait().unwrap();
                        assert_eq!(back, v);
                        let out = stream.copy_to_host_async(&m, 0, vec![0u8; 256], 0, 256).unwrap().wait().unwrap();
                        assert_eq!(out, v);
                    }
                });
            }
        });
        assert_eq!(stand_in_query("stand_in_context_retains"), 2);
        for q in ["stand_in_live_allocations", "stand_in_live_streams", "stand_in_live_events"] {
            assert_eq!(stand_in_query(q), 0, "{q}");
        }
    });
}

#[test]
fn stand_in_exports_every_entry_point_hostfirst_resolves() {
    in_stand_in_child(concat!(module_path!(), "::stand_in_exports_every_entry_point_hostfirst_resolves"), &[], || {
        let lib = std::ffi::CString::new("libcuda.so.1").unwrap();
        // SAFETY: loads the stand-in (on LD_LIBRARY_PATH) and only looks symbols up.
        let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW) };
        assert!(!h.is_null());
        let missing: Vec<&str> = hostfirst::device::cuda::driver::SYMBOLS
            .iter()
            .copied()
            .filter(|s| {
                let c = std::ffi::CString::new(*s).unwrap();
                // SAFETY: a live handle and a NUL-terminated name.
                unsafe { libc::dlsym(h, c.as_ptr()) }.is_null()
            })
            .collect();
        assert!(missing.is_empty(), "the stand-in lacks {missing:?}");
    });
}

#[test]
fn a_driver_missing_an_entry_point_is_init_failed_not_a_panic() {
    let dir = stand_in_variant_dir("without-uuid-v2", &["STAND_IN_WITHOUT_UUID_V2"]);
    let run_cli = |knobs: &[(&str, Option<&str>)]| {
        let env = stand_in_env_in(&dir, knobs);
        let refs: Vec<(&str, Option<&str>)> = env.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
        let out = run(&cli(), &["devices", "--json"], &refs);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "no panic message: {}", String::from_utf8_lossy(&out.stderr));
        json(&String::from_utf8_lossy(&out.stdout))
    };
    let v = run_cli(&[]);
    let b = cuda_backend(&v);
    assert_eq!(b["status"], "init_failed");
    assert!(b["reason"].as_str().unwrap().contains("cuDeviceGetUuid_v2"), "{b}");
    assert_eq!(b["driver_version"], "12.8");
    // An old driver lacking the symbol is reported as too old, which is the actionable reason.
    let v = run_cli(&[("STAND_IN_DRIVER_VERSION", Some("11020"))]);
    assert_eq!(cuda_backend(&v)["status"], "driver_too_old");
}

// ---- the stand-in's own model of the driver -------------------------------------------------------------

/// The stand-in is as strict as the real driver where hostfirst's correctness depends on it (queued work,
/// stream ordering, errors at synchronisation, sticky errors, context checks, page protection, fork): a C
/// program drives it through the driver API alone and checks what each mode must show.
#[test]
fn stand_in_models_the_driver_strictly() {
    let src = root().join("tests/c/test_stand_in_model.c");
    let bin = compile_c(&[&src], "test_stand_in_model", &["-ldl", "-lpthread"]);
    type Knobs<'a> = &'a [(&'a str, Option<&'a str>)];
    let runs: &[(&str, Knobs)] = &[
        ("order", &[("STAND_IN_DEFERRED", Some("0"))]),
        ("order", &[("STAND_IN_DEFERRED", Some("1"))]),
        ("order", &[("STAND_IN_DEFERRED", Some("1")), ("STAND_IN_SEED", Some("12345"))]),
        (
            "errors",
            &[
                ("STAND_IN_DEFERRED", Some("1")),
                ("STAND_IN_FAIL_COPY_AFTER", Some("0")),
                ("STAND_IN_COPY_ERROR", Some("CUDA_ERROR_INVALID_VALUE")),
            ],
        ),
        ("sticky", &[("STAND_IN_DEFERRED", Some("0")), ("STAND_IN_FAIL_COPY_AFTER", Some("0"))]),
        ("sticky", &[("STAND_IN_DEFERRED", Some("1")), ("STAND_IN_FAIL_COPY_AFTER", Some("0"))]),
        ("register", &[]),
        ("register", &[("STAND_IN_READ_ONLY_REGISTER", Some("0"))]),
        ("context", &[]),
        ("fork", &[]),
        ("strict", &[("STAND_IN_DEFERRED", Some("0"))]),
        ("strict", &[("STAND_IN_DEFERRED", Some("1"))]),
        ("strict", &[("STAND_IN_DEFERRED", Some("1")), ("STAND_IN_SEED", Some("99"))]),
        (
            "kind",
            &[
                ("STAND_IN_DEFERRED", Some("1")),
                ("STAND_IN_POISON_FRESH", Some("0")),
                ("STAND_IN_PER_THREAD_STREAMS", Some("0")),
                ("STAND_IN_VALIDATE_STREAMS", Some("1")),
                ("STAND_IN_DEVICE_WIDE_SYNC", Some("0")),
            ],
        ),
        ("refused", &[("STAND_IN_REGISTER_ERROR", Some("800"))]),
        ("refused", &[("STAND_IN_HOST_REGISTER", Some("0"))]),
        ("peer", &[("STAND_IN_DEFERRED", Some("1")), ("STAND_IN_DEVICES", Some("2"))]),
        (
            "peer",
            &[
                ("STAND_IN_DEFERRED", Some("1")),
                ("STAND_IN_DEVICES", Some("2")),
                ("STAND_IN_PEER_LEGACY_WAIT", Some("1")),
            ],
        ),
        ("foreign", &[("STAND_IN_DEFERRED", Some("0")), ("STAND_IN_FOREIGN", Some("1"))]),
        ("foreign", &[("STAND_IN_DEFERRED", Some("1")), ("STAND_IN_FOREIGN", Some("1"))]),
        (
            "foreign",
            &[
                ("STAND_IN_DEFERRED", Some("1")),
                ("STAND_IN_FOREIGN", Some("1")),
                ("STAND_IN_FOREIGN_ERROR", Some("700")),
            ],
        ),
        (
            "foreign",
            &[
                ("STAND_IN_DEFERRED", Some("0")),
                ("STAND_IN_FOREIGN", Some("1")),
                ("STAND_IN_FOREIGN_ERROR", Some("700")),
            ],
        ),
        (
            "latency",
            &[
                ("STAND_IN_WAKEUP_US", Some("30000")),
                ("STAND_IN_CONTEXT_CREATE_MS", Some("40")),
                ("STAND_IN_REGISTER_MS_PER_GIB", Some("2000")),
            ],
        ),
    ];
    for (section, knobs) in runs {
        let mut all = knobs.to_vec();
        all.push(("STAND_IN_LEAK_REPORT", Some("1")));
        let out = run_with_stand_in(&bin, &[section], &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{section} {knobs:?}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
        assert_clean_exit_report(&err, &format!("{section} {knobs:?}"));
    }
}

// ---- when the driver is loaded, and fork() -------------------------------------------------------------

/// The file tests/c/test_cuda_process.c expects: one u16 tensor "tokens" of 4096 elements, element i = i * 5 + 1.
fn process_test_file(dir: &str) -> String {
    let n = 4096usize;
    let h = format!(r#"{{"tokens":{{"dtype":"U16","shape":[{n}],"data_offsets":[0,{}]}}}}"#, 2 * n);
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend((0..n).flat_map(|i| ((i * 5 + 1) as u16).to_le_bytes()));
    let path = scratch(dir).join("process.safetensors");
    std::fs::write(&path, img).unwrap();
    path.to_str().unwrap().to_string()
}

/// Opening a file, putting to cpu, gathering on cpu and parsing "cpu" never load the CUDA driver, even with one
/// on the library path (`LD_DEBUG=libs` shows every library the loader opens); taking the census does (the
/// control: the check can fail).
#[test]
fn cpu_work_never_loads_libcuda() {
    let src = root().join("tests/c/test_cuda_process.c");
    let bin = compile_c(&[&src], "test_cuda_process_cpu_only", &["-ldl"]);
    let file = process_test_file("cuda_process_cpu_only");
    let loads = |extra: &[&str]| {
        let mut args = vec!["cpu-only", file.as_str()];
        args.extend_from_slice(extra);
        let out = run_with_stand_in(&bin, &args, &[("LD_DEBUG", Some("libs"))]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err.lines()
            .filter(|l| l.contains("libcuda") || l.contains("libnvidia-ml"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let cpu_only = loads(&[]);
    assert!(cpu_only.is_empty(), "cpu work loaded the driver:\n{}", cpu_only.join("\n"));
    let census = loads(&["census"]);
    assert!(census.iter().any(|l| l.contains("libcuda.so.1")), "the census loads libcuda.so.1 (LD_DEBUG works here)");
}

/// The driver is `libcuda.so.1`, tried before `libcuda.so`: a `libcuda.so` that is not a driver (here: a
/// library of no use, standing in for the toolkit's stub) on the search path does not win.
#[test]
fn libcuda_so_1_is_tried_before_libcuda_so() {
    let dir = scratch("stub_libcuda_so");
    let stub = dir.join("libcuda.so");
    let src = dir.join("stub.c");
    std::fs::write(&src, "int cuInit(unsigned f) { (void)f; return 34; /* CUDA_ERROR_STUB_LIBRARY */ }\n").unwrap();
    let out = std::process::Command::new(cc()).args(["-shared", "-fPIC", "-o"]).arg(&stub).arg(&src).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The stub's directory first, then the stand-in's (which has libcuda.so.1).
    let path = format!("{}:{}", dir.display(), stand_in_dir().display());
    let out = run(&cli(), &["devices", "--json"], &[("LD_LIBRARY_PATH", Some(path.as_str()))]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(cuda_backend(&v)["status"], "available", "libcuda.so.1 won over the stub: {v}");
}

/// The CUDA driver (and NVML) is never loaded from the current folder, even when an empty `LD_LIBRARY_PATH`
/// entry (which the loader reads as the current folder) would reach it: the same search as libcufile's
/// (core/src/os). Run in the stand-in's folder: without the empty entry the stand-in is not on the path; with it,
/// a bare `dlopen("libcuda.so.1")` loaded it (the control: on the path by its absolute folder, it loads).
#[test]
fn the_cuda_driver_is_never_loaded_from_the_current_folder_with_the_stand_in() {
    let real = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"));
    if real.unwrap_or(false) {
        eprintln!("SKIPPED the_cuda_driver_is_never_loaded_from_the_current_folder: a real libcuda.so.1 is installed");
        return;
    }
    let empty = scratch("cuda_cwd_empty");
    let devices = |library_path: String| {
        let mut cmd = std::process::Command::new(cli());
        cmd.args(["devices", "--json"]).current_dir(stand_in_dir());
        for k in ["HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES", "HOSTFIRST_CUDA_DRIVER"] {
            cmd.env_remove(k);
        }
        for (k, v) in stand_in_env(&[]) {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.env("LD_LIBRARY_PATH", library_path);
        let out = cmd.output().expect("run the CLI");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        cuda_backend(&json(&String::from_utf8_lossy(&out.stdout))).clone()
    };
    for planted in [format!("{}:", empty.display()), format!(":{}", empty.display()), ".".to_string()] {
        let b = devices(planted.clone());
        assert_eq!(b["status"], "library_not_found", "LD_LIBRARY_PATH={planted:?}: {b}");
        let reason = b["reason"].as_str().unwrap();
        assert!(reason.contains("never the current folder"), "{reason}");
    }
    let control = devices(format!("{}:", stand_in_dir().display()));
    assert_eq!(control["status"], "available", "by its absolute folder the stand-in loads: {control}");
}

/// The reason given when no driver library loads names the two names tried and what to do, in a few dozen
/// words (it used to list 34 names, Windows ones included).
#[test]
fn library_not_found_reason_is_short() {
    let dir = scratch("no_driver");
    let out = run(&cli(), &["devices", "--json"], &[("LD_LIBRARY_PATH", Some(dir.to_str().unwrap()))]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    let b = cuda_backend(&v);
    if b["status"] != "library_not_found" {
        return; // a machine with a real driver installed system-wide
    }
    let reason = b["reason"].as_str().unwrap();
    assert!(reason.contains("tried libcuda.so.1, libcuda.so") && reason.contains("LD_LIBRARY_PATH"), "{reason}");
    assert!(!reason.contains("nvcuda") && !reason.contains(".dll"), "{reason}");
    assert!(reason.len() < 260, "{} chars: {reason}", reason.len());
}

/// After fork(), the child of a process that initialised CUDA reports CUDA as unusable with a reason naming
/// fork(), never calls the driver, and does cpu work; the parent still uses CUDA.
#[test]
fn forked_child_reports_cuda_unusable_and_works_on_cpu() {
    let src = root().join("tests/c/test_cuda_process.c");
    let bin = compile_c(&[&src], "test_cuda_process_fork", &["-ldl"]);
    let file = process_test_file("cuda_process_fork");
    let out = run_with_stand_in(&bin, &["fork", &file], &[("STAND_IN_LEAK_REPORT", Some("1"))]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_clean_exit_report(&err, "fork");
}

/// scripts/test.sh runs the CUDA tests a second time on the deferred stand-in, selecting them by name
/// (`cargo test --test it -- cuda stand_in`): every test that uses the stand-in must have `cuda` or
/// `stand_in` in its path, or it would silently run in one mode only.
#[test]
fn every_stand_in_test_is_selected_by_the_deferred_pass() {
    let uses = ["in_stand_in_child", "run_with_stand_in", "run_ok_with_stand_in", "stand_in_env", "stand_in_dir()"];
    let mut missed = Vec::new();
    for entry in std::fs::read_dir(root().join("tests/it")).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        if module == "common" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for body in text.split("\n#[test]\n").skip(1) {
            let Some(name) = body.strip_prefix("fn ").and_then(|b| b.split('(').next()) else { continue };
            let end = body.find("\n}\n").unwrap_or(body.len());
            let full = format!("{module}::{name}");
            if uses.iter().any(|u| body[..end].contains(u)) && !full.contains("cuda") && !full.contains("stand_in") {
                missed.push(full);
            }
        }
    }
    assert!(missed.is_empty(), "tests using the stand-in but not selected by `-- cuda stand_in`: {missed:?}");
}
