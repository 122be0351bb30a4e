//! The census's `gds` entry (GPUDirect Storage through cuFile; issue 45, part 5) against a stand-in libcufile
//! (tests/cufile_stub/stand_in_cufile.c) beside the stand-in CUDA driver, with the system's folders
//! (/proc/driver/nvidia-fs, /proc/sys/kernel/osrelease, /run/udev, /etc/cufile.json) under a folder each test
//! makes (`HOSTFIRST_TEST_GDS_ROOT`, honoured by test-hooks builds only). Each typed reason, in the order the
//! census checks them; libcufile is loaded only when the gds entry is asked for, and never from the current
//! folder.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the stand-in libcufile once per test binary, in a folder of its own.
fn cufile_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        assert!(have_cc(), "no C compiler: the stand-in libcufile cannot be built");
        let dir = lib_dir().join("hostfirst-tests").join(format!("stand-in-cufile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new(cc())
            .args(["-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
            .arg("-Wl,-soname,libcufile.so.0")
            .arg("-o")
            .arg(dir.join("libcufile.so.0"))
            .arg(root().join("tests/cufile_stub/stand_in_cufile.c"))
            .output()
            .expect("run the C compiler");
        assert!(out.status.success(), "compiling the stand-in libcufile: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
    .clone()
}

/// What a fake system has.
#[derive(Clone, Copy)]
struct System {
    wsl: bool,
    nvidia_fs: bool,
    udev: bool,
}

const GOOD: System = System { wsl: false, nvidia_fs: true, udev: true };

fn fake_root(name: &str, s: System) -> PathBuf {
    let r = scratch("gds").join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&r);
    std::fs::create_dir_all(r.join("proc/sys/kernel")).unwrap();
    let release = if s.wsl { "5.15.167.4-microsoft-standard-WSL2\n" } else { "6.8.0-generic\n" };
    std::fs::write(r.join("proc/sys/kernel/osrelease"), release).unwrap();
    if s.nvidia_fs {
        std::fs::create_dir_all(r.join("proc/driver/nvidia-fs")).unwrap();
        std::fs::write(r.join("proc/driver/nvidia-fs/stats"), "GDS Version: 1.13\n").unwrap();
    }
    if s.udev {
        std::fs::create_dir_all(r.join("run/udev/data")).unwrap();
    }
    r
}

/// The environment of a child: both stand-ins on the library path (libcufile's first), the fake root, no
/// cuFile settings of the caller's, then `knobs`.
fn env(root: &Path, log: &Path, knobs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    let lib_path = format!("{}:{}", cufile_dir().display(), stand_in_dir().display());
    let mut e: Vec<(String, Option<String>)> = vec![
        ("HOSTFIRST_TEST_GDS_ROOT".into(), Some(root.display().to_string())),
        ("STAND_IN_CUFILE_LOG".into(), Some(log.display().to_string())),
        ("CUFILE_FORCE_COMPAT_MODE".into(), None),
        ("CUFILE_ENV_PATH_JSON".into(), None),
        ("STAND_IN_DEVICES".into(), Some("2".into())),
    ];
    e.extend(knobs.iter().map(|(k, v)| (k.to_string(), v.map(str::to_string))));
    // Last, so it wins over the CUDA stand-in's own LD_LIBRARY_PATH.
    e.push(("LD_LIBRARY_PATH".into(), Some(lib_path)));
    e
}

/// `hostfirst devices --json` in a fake system: the gds entry, and what the stand-in logged.
fn gds(name: &str, s: System, knobs: &[(&str, Option<&str>)]) -> (serde_json::Value, String) {
    let root = fake_root(name, s);
    let log = root.join("cufile.log");
    let e = env(&root, &log, knobs);
    let refs: Vec<(&str, Option<&str>)> = e.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
    let out = run_ok_with_stand_in(&cli(), &["devices", "--json"], &refs);
    let v = json(&out);
    let b = v["backends"][2].clone();
    assert_eq!(b["name"], "gds", "{out}");
    (b, std::fs::read_to_string(&log).unwrap_or_default())
}

fn status(b: &serde_json::Value) -> &str {
    b["status"].as_str().unwrap()
}

fn reason(b: &serde_json::Value) -> &str {
    b["reason"].as_str().unwrap()
}

#[test]
fn gds_is_available_when_everything_is_there_and_the_driver_is_closed_again() {
    let (b, log) = gds("ok", GOOD, &[]);
    assert_eq!((status(&b), reason(&b)), ("available", ""), "{b}");
    assert_eq!(b["driver_version"], "1.13");
    assert_eq!(b["devices"], 2, "both stand-in devices support GPUDirect RDMA");
    assert_eq!(log, "loaded\nopen\nclose\n");
}

#[test]
fn each_typed_reason_in_the_order_it_is_checked() {
    let (b, log) = gds("wsl", System { wsl: true, ..GOOD }, &[]);
    assert_eq!(status(&b), "unsupported_platform", "{b}");
    assert!(reason(&b).contains("WSL"), "{b}");
    assert_eq!(log, "", "WSL is known before libcufile is loaded");

    let (b, _) = gds("compat-env", GOOD, &[("CUFILE_FORCE_COMPAT_MODE", Some("true"))]);
    assert_eq!(status(&b), "compat_mode_forced", "{b}");
    assert!(reason(&b).contains("CUFILE_FORCE_COMPAT_MODE=true"), "{b}");
    assert_eq!(b["driver_version"], "1.13", "the version is known once the library loads");

    let cfg = scratch("gds").join(format!("cufile-{}.json", std::process::id()));
    std::fs::write(&cfg, "{\n  // NVIDIA's file has comments\n  \"properties\": { \"force_compat_mode\": true }\n}\n")
        .unwrap();
    let (b, _) = gds("compat-json", GOOD, &[("CUFILE_ENV_PATH_JSON", Some(cfg.to_str().unwrap()))]);
    assert_eq!(status(&b), "compat_mode_forced", "{b}");
    assert!(reason(&b).contains(cfg.to_str().unwrap()) && reason(&b).contains("force_compat_mode"), "{b}");

    let (b, _) = gds("nvfs", System { nvidia_fs: false, ..GOOD }, &[]);
    assert_eq!(status(&b), "module_missing", "{b}");
    assert!(reason(&b).contains("/proc/driver/nvidia-fs"), "{b}");

    let (b, _) = gds("udev", System { udev: false, ..GOOD }, &[]);
    assert_eq!(status(&b), "udev_unreadable", "{b}");
    assert!(reason(&b).contains("/run/udev"), "{b}");

    let (b, _) = gds("nocuda", GOOD, &[("STAND_IN_DEVICES", Some("0"))]);
    assert_eq!(status(&b), "no_devices", "{b}");
    assert!(reason(&b).contains("needs the cuda backend"), "{b}");

    let (b, log) = gds("nogdr", GOOD, &[("STAND_IN_GDR", Some("0"))]);
    assert_eq!(status(&b), "no_rdma_support", "{b}");
    assert!(reason(&b).contains("GPU_DIRECT_RDMA_SUPPORTED is 0 on 2 devices"), "{b}");
    assert_eq!(log, "loaded\n", "the driver is not opened when no device could use it");

    let (b, log) = gds("open", GOOD, &[("STAND_IN_CUFILE_OPEN_ERROR", Some("5009"))]);
    assert_eq!(status(&b), "init_failed", "{b}");
    assert!(reason(&b).contains("cuFileDriverOpen failed: error 5009 (CU_FILE_DEVICE_NOT_SUPPORTED)"), "{b}");
    assert_eq!(log, "loaded\nopen failed\n");

    let (b, log) = gds("hidden", GOOD, &[("HOSTFIRST_PLATFORMS", Some("cpu"))]);
    assert_eq!(status(&b), "hidden_by_env", "{b}");
    assert_eq!(log, "");
}

/// Without a libcufile on the library path: LIBRARY_NOT_FOUND naming what was tried. (Skipped, saying so,
/// where the machine has a real libcufile the loader finds.)
#[test]
fn no_libcufile_is_library_not_found_on_the_stand_in_cuda() {
    let real = Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcufile.so.0"));
    if real.unwrap_or(false) {
        eprintln!("SKIPPED no_libcufile_is_library_not_found: this machine has a real libcufile.so.0");
        return;
    }
    let root = fake_root("nolib", GOOD);
    let out = run_ok_with_stand_in(
        &cli(),
        &["devices", "--json"],
        &[("HOSTFIRST_TEST_GDS_ROOT", Some(root.to_str().unwrap())), ("STAND_IN_DEVICES", Some("1"))],
    );
    let b = json(&out)["backends"][2].clone();
    assert_eq!(status(&b), "library_not_found", "{b}");
    assert!(reason(&b).contains("tried libcufile.so.0, libcufile.so") && reason(&b).contains("nvidia-gds"), "{b}");
}

/// A libcufile in the current folder is never loaded, even when an empty LD_LIBRARY_PATH entry (which the
/// loader reads as the current folder) would reach it.
#[test]
fn libcufile_is_never_loaded_from_the_current_folder_with_the_stand_in_cuda() {
    let root = fake_root("cwd", GOOD);
    let log = root.join("cufile.log");
    let mut e = env(&root, &log, &[]);
    e.retain(|(k, _)| k != "LD_LIBRARY_PATH");
    e.push(("LD_LIBRARY_PATH".into(), Some(format!("{}:", stand_in_dir().display()))));
    let mut cmd = Command::new(cli());
    cmd.arg("devices").arg("--json").current_dir(cufile_dir());
    for k in ["HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES"] {
        cmd.env_remove(k);
    }
    for (k, v) in &e {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("run the CLI");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let b = json(&String::from_utf8_lossy(&out.stdout))["backends"][2].clone();
    assert_eq!(status(&b), "library_not_found", "{b}");
    assert!(reason(&b).contains("never the current folder"), "{b}");
    assert_eq!(std::fs::read_to_string(&log).unwrap_or_default(), "", "the stand-in was never loaded");
}

/// Taking the census (cpu and cuda: devices, a cuda spec) never loads libcufile; describing gds does.
#[test]
fn the_census_loads_libcufile_only_when_gds_is_asked_for_with_the_stand_in_cuda() {
    let root = fake_root("lazy", GOOD);
    let log = root.join("cufile.log");
    let e = env(&root, &log, &[]);
    let refs: Vec<(&str, Option<&str>)> = e.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
    in_stand_in_child(
        concat!(module_path!(), "::the_census_loads_libcufile_only_when_gds_is_asked_for_with_the_stand_in_cuda"),
        &refs,
        || {
            let log2 = PathBuf::from(std::env::var("STAND_IN_CUFILE_LOG").unwrap());
            let c = hostfirst::device::census::census();
            assert!(c.cuda_available());
            assert_eq!(c.backends.len(), 2);
            hostfirst::Device::parse("cuda:1").unwrap();
            assert_eq!(std::fs::read_to_string(&log2).unwrap_or_default(), "", "not loaded by the census");
            let g = c.backend_at(2).unwrap();
            assert_eq!((g.name, g.status), ("gds", hostfirst::device::BackendStatus::Available), "{g:?}");
            assert_eq!(std::fs::read_to_string(&log2).unwrap(), "loaded\nopen\nclose\n");
        },
    );
}
