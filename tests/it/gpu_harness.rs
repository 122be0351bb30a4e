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

/// The first GPU run's script (`bash benches/gpu/run.sh first`, issue 32) on the stand-in: builds the carry into
/// its own folder, runs exactly the device's script in this test run's stand-in mode (immediate in the main pass,
/// deferred in the deferred pass) with `knobs` added, and returns (output, the out folder, the carry folder).
fn first_run_dry(name: &str, knobs: &[(&str, &str)]) -> (std::process::Output, std::path::PathBuf, std::path::PathBuf) {
    let base = root().join("target/gpu-dry-run");
    let (out, carry, data) =
        (base.join(format!("{name}-out")), base.join(format!("{name}-carry")), base.join(format!("{name}-data")));
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = Command::new("bash");
    cmd.current_dir(root())
        .args(["benches/gpu/run.sh", "--dry-run", "first", "--out"])
        .arg(&out)
        .arg("--data")
        .arg(&data)
        .env("HOSTFIRST_GPU_CARRY", &carry);
    for (k, v) in knobs {
        cmd.env(k, v);
    }
    (cmd.output().expect("bash"), out, carry)
}

/// The device call the README gives: (command, timeout_s), read from benches/gpu/README.md.
fn readme_device_call() -> (String, u64) {
    let text = std::fs::read_to_string(root().join("benches/gpu/README.md")).unwrap();
    let field = |k: &str| {
        let line = text.lines().find(|l| l.starts_with(k)).unwrap_or_else(|| panic!("the README gives no '{k}'"));
        line[k.len()..].trim().to_string()
    };
    assert_eq!(field("carry:"), r#"[".gpu-carry"]"#);
    (field("command:"), field("timeout_s:").parse().unwrap())
}

/// The first GPU run, dry: every check passes on the stand-in in this pass's mode (the test command runs it in both),
/// the call and each step stay within their time limits, what travels is at most 40 MiB (stripped, checksummed
/// carry), the result files are the documented ones, and the README's device call is this script within the
/// 7 minutes a first call may take.
#[test]
fn first_gpu_run_dry_run_passes_on_the_stand_in_within_its_budget() {
    let (cmd, timeout) = readme_device_call();
    assert_eq!(cmd, "bash benches/gpu/run.sh first --out $OUT 2>&1");
    let src = std::fs::read_to_string(root().join("benches/gpu/first.py")).unwrap();
    let budget: f64 =
        src.split("opt(\"--budget\", \"").nth(1).and_then(|s| s.split('"').next()).unwrap().parse().unwrap();
    assert!(
        budget <= 420.0 && budget + 30.0 <= timeout as f64 && timeout <= 480,
        "budget {budget}, timeout_s {timeout}"
    );

    let (o, out, carry) = first_run_dry("first_pass", &[]);
    let (so, se) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "the dry run failed ({}):\n{so}\n{se}", o.status);
    assert!(so.contains("ALL CHECKS PASSED (speed measured)") && !so.contains("CHECK FAILED"), "{so}");
    // What travels, checked by the build before any device is asked.
    let line = so.lines().find(|l| l.starts_with("what travels")).unwrap_or_else(|| panic!("{so}"));
    let travels: u64 = line.split("): ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    assert!(travels <= 40 << 20, "{line}");
    let manifest = std::fs::read_to_string(carry.join("manifest")).unwrap();
    for (file, key) in [("hostfirst-bench", "sha256="), ("libhostfirst.so", "lib_sha256=")] {
        let size = std::fs::metadata(carry.join(file)).unwrap().len();
        // Stripped: about 11 MB since 1.1's object-store client (the debug info would add several times that).
        assert!(size < 16 << 20, "{file} is stripped: {size} B");
        let sha = String::from_utf8(Command::new("sha256sum").arg(carry.join(file)).output().unwrap().stdout).unwrap();
        assert!(manifest.contains(&format!("{key}{}", sha.split_whitespace().next().unwrap())), "{manifest}");
    }
    assert!(manifest.contains(&format!("travels_bytes={travels}")), "{manifest}");
    // The result files: the documented names, at most 8.
    let mut files: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["gpu-first.json", "gpu-first.log", "summary.txt"], "memcheck's log only where it ran");
    let v = json(&std::fs::read_to_string(out.join("gpu-first.json")).unwrap());
    let m = &v["machine"];
    assert_eq!(m["stand_in"], true);
    assert_eq!(m["stand_in_mode"], if stand_in_deferred() { "deferred" } else { "immediate" });
    let wall = m["wall_s"].as_f64().unwrap();
    assert!(wall <= m["budget_s"].as_f64().unwrap() && wall <= 150.0, "the call took {wall} s");
    let recs = v["records"].as_array().unwrap();
    for r in recs {
        assert!(r.get("failed").is_none(), "{r}");
        let skipped = r["skipped"].as_str().unwrap_or("");
        assert!(!skipped.contains("time budget"), "{r}");
    }
    let find = |op: &str| recs.iter().filter(|r| r["op"] == op).collect::<Vec<_>>();
    let check = find("gpu-check");
    assert_eq!(check.len(), 1);
    assert_eq!(check[0]["outcome"], "passed", "{}", check[0]);
    let names: Vec<&str> = check[0]["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in
        ["put-resident-67108867", "gather-consumers-on-other-streams", "release-during-graph-capture", "forked-child"]
    {
        assert!(names.contains(&n), "{names:?}");
    }
    let load = find("gpu-load-check");
    assert_eq!(load[0]["outcome"], "passed", "{}", load[0]);
    assert_eq!(load[0]["tensors"], 4096);
    assert_eq!(find("gpu-census").len(), 4);
    assert!(find("gpu-census").iter().skip(1).all(|r| r["ok"] == true));
    let puts = find("gpu-put");
    assert_eq!(
        puts.iter().map(|r| r["impl"].as_str().unwrap()).collect::<Vec<_>>(),
        ["hostfirst-put-ring", "hostfirst-put-resident"]
    );
    assert!(puts.iter().all(|r| r["verified"] == true), "{puts:?}");
    assert_eq!(find("sanitizer")[0]["skipped"], "stand-in driver");
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(summary.contains("PASS  gpu-load-check") && summary.contains("ALL CHECKS PASSED"), "{summary}");
}

/// A forced failure (`STAND_IN_FAIL_ALLOC=1`: every process's first `cuMemAlloc` fails) stops the first GPU run
/// before its speed part: the call exits 1 with a `CHECK FAILED` block naming what failed, no speed is measured,
/// and the summary says so.
#[test]
fn first_gpu_run_stops_before_speed_when_a_check_fails_on_the_stand_in() {
    let (o, out, _) = first_run_dry("first_fail", &[("STAND_IN_FAIL_ALLOC", "1")]);
    let (so, se) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{so}\n{se}");
    let block = so.split("CHECK FAILED:\n").nth(1).unwrap_or_else(|| panic!("no CHECK FAILED block: {so}"));
    assert!(block.starts_with("  gpu-check: put-ring-1: OutOfMemory"), "{block}");
    assert!(!so.contains("[speed"), "no speed step ran: {so}");
    let v = json(&std::fs::read_to_string(out.join("gpu-first.json")).unwrap());
    let recs = v["records"].as_array().unwrap();
    assert!(recs.iter().all(|r| r["op"] != "gpu-put"), "no speed record");
    let speed = recs.iter().find(|r| r["op"] == "speed").expect("the speed part's record");
    assert!(speed["skipped"].as_str().unwrap().starts_with("a check failed"), "{speed}");
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(
        summary.contains("FAIL  gpu-check") && summary.contains("SKIP  speed: skipped: a check failed"),
        "{summary}"
    );
    assert!(summary.contains("CHECK FAILED:") && summary.contains("What to do"), "{summary}");
}
