//! The GPU benchmark harness (benches/gpu) survives first contact with a GPU machine: a process that dies with no
//! output is recorded and reported, not fatal; a call stays within its time budget and keeps what it measured;
//! the carried driver is checked (checksum, executable bit, glibc). No GPU is involved: these run the harness's
//! scripts on synthetic inputs.

use crate::common::*;
use std::process::Command;

fn python(args: &[&str]) -> std::process::Output {
    Command::new("python3").current_dir(root()).args(args).output().expect("python3")
}

fn ok(out: std::process::Output, what: &str) -> String {
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{so}\n{se}", out.status);
    so.into_owned()
}

/// A run file with a crashed process (no output), a killed one, a skipped one, an incomplete record and one
/// good record renders, naming each problem.
#[test]
fn report_tolerates_crashed_and_incomplete_records() {
    let dir = scratch("gpu_harness_report");
    let file = dir.join("gpu-synthetic.json");
    let doc = serde_json::json!({
        "machine": {"stand_in": false, "gpu": "synthetic", "gpu_fields": "", "cpu": "x", "cores": 2, "mem_gib": 1,
                     "kernel": "k", "python": "3", "versions": {}, "git": "g", "date_utc": "d", "wall_s": 1,
                     "command": "c", "gib": 1, "reps": 1},
        "records": [
            {"failed": "", "rc": -11, "cmd": ["hostfirst-bench", "gpu-put"]},
            {"failed": "killed by signal SIGKILL with no output", "rc": -9, "cmd": ["x"]},
            {"skipped": "time budget: 10 s left", "cmd": ["y"]},
            {"op": "gpu-put", "impl": "hostfirst-put-ring", "cache": "warm", "bytes": 8},
            {"op": "gpu-gather", "impl": "hostfirst-gather-cuda", "B": 12, "T": 1024, "p50_s": 0.001, "p99_s": 0.002},
            "not a record"
        ]
    });
    std::fs::write(&file, serde_json::to_string(&doc).unwrap()).unwrap();
    let broken = dir.join("gpu-cut-off.json");
    std::fs::write(&broken, "{\"machine\": {").unwrap();
    let out =
        ok(python(&["benches/gpu/report_gpu.py", file.to_str().unwrap(), broken.to_str().unwrap()]), "report_gpu.py");
    assert!(out.contains("Not measured in these runs"), "{out}");
    assert!(out.contains("failed with no output"), "{out}");
    assert!(out.contains("time budget") && out.contains("incomplete record (no ceiling_gbps_best"), "{out}");
    assert!(out.contains("| 12 | 1024 |"), "the good record is rendered: {out}");
}

/// The host-memory verdict of a put counts what the driver maps as shared memory too (page-locked pages may
/// not be anonymous): a put whose anonymous growth is half the ring but whose shared growth is as much again is
/// a miss, with VmLck / VmPin shown.
#[test]
fn put_verdict_counts_shared_growth() {
    let dir = scratch("gpu_harness_put_verdict");
    let file = dir.join("gpu-put.json");
    let ring = 256u64 << 20;
    let put = serde_json::json!({
        "op": "gpu-put", "impl": "hostfirst-put-ring", "cache": "warm", "bytes": 1u64 << 30, "resident": 1.0,
        "ceiling_gbps_best": 20.0, "gbps_first": 18.0, "gbps_best": 19.0, "ratio_first_to_ceiling": 0.9,
        "ratio_best_to_ceiling": 0.95, "anon_growth_kib": ring / 2048, "anon_growth_over_ring": 0.5,
        "shmem_growth_kib": ring / 1024 * 7 / 10, "host_growth_over_ring": 1.2, "register_s": 0.0,
        "verified": true, "vm_lck_kib_after": 0, "vm_pin_kib_after": ring / 1024, "staging_ring_bytes": ring
    });
    let doc = serde_json::json!({
        "machine": {"stand_in": false, "gpu": "synthetic", "gpu_fields": "", "cpu": "x", "cores": 2, "mem_gib": 1,
                     "kernel": "k", "python": "3", "versions": {}, "git": "g", "date_utc": "d", "wall_s": 1,
                     "command": "c", "gib": 1, "reps": 1},
        "records": [put]
    });
    std::fs::write(&file, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = ok(python(&["benches/gpu/report_gpu.py", file.to_str().unwrap()]), "report_gpu.py");
    let line = out.lines().find(|l| l.contains("host RSS the put adds")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("1.20× the ring") && line.contains("VmPin 256 MiB") && line.contains("missed"), "{line}");
}

/// run.py's process runner turns a crash with no output, a non-record output and a missing program into failed
/// records instead of raising.
#[test]
fn runner_records_crashes_instead_of_raising() {
    let code = r#"
import importlib.util, json, sys
sys.path.insert(0, "benches")
spec = importlib.util.spec_from_file_location("gpu_run", "benches/gpu/run.py")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
print(json.dumps([m.run1(["sh", "-c", "kill -9 $$"], None), m.run1(["sh", "-c", "echo hello"], None),
                  m.run1(["/nonexistent/hostfirst-bench"], None), m.run1(["sh", "-c", "sleep 5"], None, timeout=1)]))
"#;
    let out = ok(python(&["-c", code]), "run1");
    let v = json(out.lines().last().unwrap());
    assert_eq!(v[0]["failed"], "killed by signal SIGKILL with no output", "{v}");
    assert!(v[1]["failed"].as_str().unwrap().starts_with("no JSON record"), "{v}");
    assert!(v[2]["failed"].as_str().unwrap().starts_with("could not start"), "{v}");
    assert!(v[3]["failed"].as_str().unwrap().starts_with("timed out after 1 s"), "{v}");
}

/// A call whose budget cannot fit a measurement records it as skipped and still writes its file.
#[test]
fn a_call_stays_within_its_budget_and_writes_its_file() {
    let dir = scratch("gpu_harness_budget");
    let (data, out) = (dir.join("data"), dir.join("out"));
    let _ = std::fs::remove_dir_all(&out);
    let o = python(&[
        "benches/gpu/run.py",
        "--bench",
        "/bin/true",
        "--stand-in",
        dir.to_str().unwrap(),
        "--gib",
        "0.001",
        "--reps",
        "1",
        "--only",
        "put,seeds",
        "--budget",
        "1",
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = ok(o, "run.py --budget 1");
    assert!(text.contains("4 skipped"), "{text}");
    let file = std::fs::read_dir(&out).unwrap().next().expect("a run file").unwrap().path();
    let v = json(&std::fs::read_to_string(&file).unwrap());
    let recs = v["records"].as_array().unwrap();
    assert_eq!(recs.len(), 4);
    assert!(recs.iter().all(|r| r["skipped"].as_str().unwrap().starts_with("time budget")), "{v}");
    assert_eq!(v["machine"]["budget_s"], 1.0);
}

/// The carried driver is checked before a run: a carry that dropped the executable bit gets it back, a file that
/// does not match the manifest or needs a newer glibc than the machine has is refused with a message.
#[test]
fn carried_driver_is_checked() {
    let carry = scratch("gpu_harness_carry");
    let exe = carry.join("hostfirst-bench");
    std::fs::copy("/bin/true", &exe).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
    let sha = String::from_utf8(Command::new("sha256sum").arg(&exe).output().unwrap().stdout).unwrap();
    let sha = sha.split_whitespace().next().unwrap().to_string();
    let check = |glibc: &str, sum: &str| {
        std::fs::write(carry.join("manifest"), format!("sha256={sum}\nmode=755\nglibc={glibc}\n")).unwrap();
        Command::new("bash")
            .current_dir(root())
            .args(["benches/gpu/run.sh", "check"])
            .env("HOSTFIRST_GPU_CARRY", &carry)
            .output()
            .unwrap()
    };
    let out = check("2.2", &sha);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("lost its executable bit"), "{err}");
    assert!(std::fs::metadata(&exe).unwrap().permissions().mode() & 0o100 != 0, "restored");
    let out = check("99.0", &sha);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs glibc 99.0"), "{out:?}");
    let out = check("2.2", "0000");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not match"), "{out:?}");
}

/// scripts/glibc-needed.sh reads the newest glibc symbol version a binary needs (shared with the wheel build,
/// whose baseline is glibc 2.17), and --check compares it with this machine's.
#[test]
fn glibc_needed_reads_symbol_versions() {
    let lib = lib_dir().join("libhostfirst.so");
    let out = Command::new("bash").current_dir(root()).args(["scripts/glibc-needed.sh"]).arg(&lib).output().unwrap();
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    assert_eq!(parts.next(), Some(2), "a glibc 2.x version: {v}");
    let out = Command::new("bash")
        .current_dir(root())
        .args(["scripts/glibc-needed.sh", "--check"])
        .arg(&lib)
        .output()
        .unwrap();
    assert!(out.status.success(), "the library runs here, so this machine's glibc suffices: {out:?}");
}

/// The correctness op's dry run (issue 23): `bash benches/gpu/run.sh --dry-run --only check` builds the driver,
/// runs `gpu-check` (puts byte for byte at 1 B to 16 MiB + 1 and one bigger tensor, scaled down here; sub-views; a
/// cancelled async put; buffer_to in every direction; a held gather ring; out-of-memory refusals; NVML against
/// cuMemGetInfo; context creation; a forked child), the census under `CUDA_VISIBLE_DEVICES` empty, a `GPU-` UUID
/// and out of range, and the Python checks (skipped with a reason where numpy, torch or JAX are missing) against
/// the stand-in driver, and exits non-zero when any check fails. The stand-in proves the checks run and what they
/// compare; only a GPU run says the hardware agrees.
#[test]
fn gpu_check_dry_run_passes_on_the_stand_in() {
    let out = Command::new("bash")
        .current_dir(root())
        .args(["benches/gpu/run.sh", "--dry-run", "--only", "check"])
        .output()
        .expect("bash");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "run.sh --dry-run --only check failed ({}):\n{so}\n{se}", out.status);
    assert!(!so.contains("CHECK FAILED"), "{so}");
    assert!(so.contains("STAND-IN DRY RUN"), "the report says what it is: {so}");
    for name in [
        "put-ring-1 ",
        "put-resident-16777217",
        "sub-views",
        "async-put-cancelled",
        "buffer_to-every-direction",
        "gather-ring-held-and-released",
        "out-of-memory-refused",
        "nvml-vs-cuMemGetInfo",
        "context-creation",
        "forked-child",
        "census, CUDA_VISIBLE_DEVICES empty",
        "census, CUDA_VISIBLE_DEVICES uuid",
        "census, CUDA_VISIBLE_DEVICES out-of-range",
    ] {
        assert!(so.contains(&format!("| {name}")), "the report lists {name}: {so}");
    }
    assert!(!so.contains("**FAILED**"), "{so}");
    // The newest run file holds the gpu-check record with every check passed.
    let dir = root().join("target/gpu-dry-run");
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("20")))
        .max()
        .expect("a dry-run output folder");
    let file = std::fs::read_dir(&newest).unwrap().next().unwrap().unwrap().path();
    let v = json(&std::fs::read_to_string(&file).unwrap());
    let check = v["records"].as_array().unwrap().iter().find(|r| r["op"] == "gpu-check").expect("a gpu-check record");
    assert_eq!(check["outcome"], "passed", "{check}");
    assert!(check["checks"].as_array().unwrap().len() >= 20, "{check}");
}
