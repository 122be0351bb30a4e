//! `hostfirst devices` without CUDA: census, devices, default and its source, env handling.

use crate::common::*;

#[test]
fn devices_json_without_cuda() {
    let out = run_ok(&cli(), &["devices", "--json"], &[]);
    let v = json(&out);
    let backends = v["backends"].as_array().unwrap();
    assert_eq!(backends[0]["name"], "cpu");
    assert_eq!(backends[0]["status"], "available");
    assert_eq!(backends[1]["name"], "cuda");
    assert_eq!(backends[1]["status"], "library_not_found");
    let reason = backends[1]["reason"].as_str().unwrap();
    assert!(reason.contains("libcuda.so"), "reason names the libraries searched: {reason}");
    // ... and carries the loader's own words (dlerror's), not only libloading's "dlopen failed".
    assert!(reason.contains("libcuda.so.1: cannot open shared object file"), "the loader's message: {reason}");
    // gds (GPUDirect Storage) is listed third, with the reason it cannot be used here.
    assert_eq!(backends[2]["name"], "gds");
    assert_ne!(backends[2]["status"], "available");
    assert!(!backends[2]["reason"].as_str().unwrap().is_empty(), "{}", backends[2]);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["spec"], "cpu:0");
    assert!(devices[0]["total_memory"].as_u64().unwrap() >= devices[0]["free_memory"].as_u64().unwrap());
    assert_eq!(v["default"]["spec"], "cpu:0");
    assert_eq!(v["default"]["source"], "built_in");
    assert_eq!(out.trim().lines().count(), 1, "exactly one JSON object on one line");
}

#[test]
fn devices_human_table() {
    let out = run_ok(&cli(), &["devices"], &[]);
    assert!(out.contains("BACKEND"));
    assert!(out.contains("library_not_found"));
    assert!(out.contains("default device: cpu:0 (source: built_in)"));
}

#[test]
fn platforms_env_hides_cuda() {
    let v = json(&run_ok(&cli(), &["devices", "--json"], &[("HOSTFIRST_PLATFORMS", Some("cpu"))]));
    assert_eq!(v["backends"][1]["status"], "hidden_by_env");
    assert!(v["backends"][1]["reason"].as_str().unwrap().contains("HOSTFIRST_PLATFORMS"));
}

#[test]
fn default_from_env_and_invalid_env() {
    let v = json(&run_ok(&cli(), &["devices", "--json"], &[("HOSTFIRST_DEFAULT_DEVICE", Some(" CPU "))]));
    assert_eq!(v["default"]["source"], "env");
    assert_eq!(v["default"]["spec"], "cpu:0");
    // An invalid default is an error (exit 1, one line on stderr), but the census and the devices are still
    // printed first: the diagnostic works exactly when it is needed.
    for bad in ["tpu:0", "cuda:1", "cpu:7"] {
        let out = run(&cli(), &["devices", "--json"], &[("HOSTFIRST_DEFAULT_DEVICE", Some(bad))]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("hostfirst: default device: "), "{err}");
        assert!(err.contains("HOSTFIRST_DEFAULT_DEVICE") && err.contains(bad), "{err}");
        let v = json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(v["backends"][0]["status"], "available", "{bad}: {v}");
        assert_eq!(v["backends"][1]["name"], "cuda", "{bad}: {v}");
        assert_eq!(v["devices"][0]["spec"], "cpu:0", "{bad}: {v}");
        assert!(v["default"].is_null(), "{v}");
        let status = v["default_error"]["status"].as_str().unwrap();
        assert!(["INVALID_ARGUMENT", "NO_SUCH_DEVICE", "UNAVAILABLE"].contains(&status), "{bad}: {v}");
        assert!(v["default_error"]["message"].as_str().unwrap().contains(bad), "{v}");

        let out = run(&cli(), &["devices"], &[("HOSTFIRST_DEFAULT_DEVICE", Some(bad))]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("BACKEND") && table.contains("cpu:0"), "{bad}: {table}");
        assert!(table.contains(&format!("default device: none ({status})")), "{table}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(bad));
    }
}

#[test]
fn usage_errors() {
    assert_eq!(run(&cli(), &[], &[]).status.code(), Some(2));
    assert_eq!(run(&cli(), &["frobnicate"], &[]).status.code(), Some(2));
    assert_eq!(run(&cli(), &["devices", "--bogus"], &[]).status.code(), Some(2));
    assert!(run_ok(&cli(), &["--version"], &[]).starts_with("hostfirst "));
}
