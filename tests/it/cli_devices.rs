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
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["spec"], "cpu:0");
    assert!(devices[0]["total_memory"].as_u64().unwrap() >= devices[0]["free_memory"].as_u64().unwrap());
    assert_eq!(v["default"]["spec"], "cpu:0");
    assert_eq!(v["default"]["source"], "built-in");
    assert_eq!(out.trim().lines().count(), 1, "exactly one JSON object on one line");
}

#[test]
fn devices_human_table() {
    let out = run_ok(&cli(), &["devices"], &[]);
    assert!(out.contains("BACKEND"));
    assert!(out.contains("library_not_found"));
    assert!(out.contains("default device: cpu:0 (source: built-in)"));
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
    for bad in ["tpu:0", "cuda:1", "cpu:7"] {
        let out = run(&cli(), &["devices", "--json"], &[("HOSTFIRST_DEFAULT_DEVICE", Some(bad))]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("HOSTFIRST_DEFAULT_DEVICE") && err.contains(bad), "{err}");
    }
}

#[test]
fn usage_errors() {
    assert_eq!(run(&cli(), &[], &[]).status.code(), Some(2));
    assert_eq!(run(&cli(), &["frobnicate"], &[]).status.code(), Some(2));
    assert_eq!(run(&cli(), &["devices", "--bogus"], &[]).status.code(), Some(2));
    assert!(run_ok(&cli(), &["--version"], &[]).starts_with("hostfirst "));
}
