//! `hostfirst plan`, `hostfirst load` and `hostfirst gather`: output shapes, on cpu and on stand-in devices.

use crate::common::*;
use std::path::PathBuf;

/// tokens: U16[20000]; w: F32[16, 16]; b: U8[5].
fn model(name: &str) -> PathBuf {
    let tok: Vec<u8> = (0..40000u32).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
    let w: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
    let header = "{\"tokens\":{\"dtype\":\"U16\",\"shape\":[20000],\"data_offsets\":[0,40000]},\
         \"w\":{\"dtype\":\"F32\",\"shape\":[16,16],\"data_offsets\":[40000,41024]},\
         \"b\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[41024,41029]}}";
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    img.extend_from_slice(&tok);
    img.extend_from_slice(&w);
    img.extend_from_slice(&[1, 2, 3, 4, 5]);
    let p = scratch("cli_rules").join(format!("{name}.safetensors"));
    std::fs::write(&p, img).unwrap();
    p
}

#[test]
fn plan_json_shape() {
    let m = model("plan_json_shape");
    let out = run_ok(&cli(), &["plan", m.to_str().unwrap(), "--rule", "tokens=host", "--rule", "*=cpu", "--json"], &[]);
    let v = json(&out);
    let t = v["tensors"].as_array().unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(
        (t[0]["name"].as_str(), t[0]["target"].as_str(), t[0]["rule"].as_i64()),
        (Some("tokens"), Some("host"), Some(0))
    );
    assert_eq!(
        (t[1]["name"].as_str(), t[1]["target"].as_str(), t[1]["rule"].as_i64()),
        (Some("w"), Some("cpu:0"), Some(1))
    );
    assert_eq!(t[1]["nbytes"].as_u64(), Some(1024));
    let d = v["devices"].as_array().unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["device"].as_str(), Some("cpu:0"));
    assert_eq!((d[0]["bytes"].as_u64(), d[0]["tensors"].as_u64()), (Some(1029), Some(2)));
    assert_eq!((d[0]["largest"].as_str(), d[0]["fits"].as_bool()), (Some("w"), Some(true)));
    assert!(d[0]["usable"].as_u64().unwrap() > 0 && d[0]["total"].as_u64().unwrap() > 0);

    // Human table; no rule: everything on the host.
    let out = run_ok(&cli(), &["plan", m.to_str().unwrap()], &[]);
    assert!(out.contains("tokens") && out.contains("host") && !out.contains("cpu:0"), "{out}");
    // A bad rule: usage-grade error, nothing on stdout.
    let o = run(&cli(), &["plan", m.to_str().unwrap(), "--rule", "x=tpu"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty() && String::from_utf8_lossy(&o.stderr).contains("INVALID_ARGUMENT"));
    // A typo in a target is answered with the complete list of targets, host and default included.
    for (args, what) in [(["plan", "--rule", "x=hots"], "rule target 'hots'"), (["gather", "--device", "defualt"], "")]
    {
        let mut args = args.to_vec();
        args.insert(1, m.to_str().unwrap());
        if args[0] == "gather" {
            args.extend(["tokens", "--batch", "2", "--window", "4"]);
        }
        let o = run(&cli(), &args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(what), "{args:?}: {err}");
        for form in ["default", "cpu", "cuda:N", "cuda_host"] {
            assert!(err.contains(form), "{args:?}: '{form}' missing from: {err}");
        }
        assert_eq!(err.contains("host (stay"), args[0] == "plan", "host is a rule target only: {err}");
    }
}

#[test]
fn load_json_reports_placement_and_time() {
    let m = model("load_json_reports_placement_and_time");
    let out = run_ok(&cli(), &["load", m.to_str().unwrap(), "--rule", "tokens=host", "--rule", "w=cpu", "--json"], &[]);
    let v = json(&out);
    assert_eq!(v["bytes_moved"].as_u64(), Some(1024));
    assert!(v["seconds"].as_f64().unwrap() >= 0.0);
    let t = v["tensors"].as_array().unwrap();
    assert_eq!(t[1]["target"].as_str(), Some("cpu:0"));
    assert!(t.iter().all(|x| x["seconds"].as_f64().is_some()));
    let out = run_ok(&cli(), &["load", m.to_str().unwrap(), "--rule", "*=cpu"], &[]);
    assert!(out.contains("loaded:"), "{out}");
}

#[test]
fn gather_json_fields() {
    let m = model("gather_json_fields");
    let out = run_ok(
        &cli(),
        &[
            "gather",
            m.to_str().unwrap(),
            "tokens",
            "--batch",
            "8",
            "--window",
            "65",
            "--device",
            "cpu",
            "--iters",
            "20",
            "--seed",
            "3",
            "--json",
        ],
        &[],
    );
    let v = json(&out);
    assert_eq!(v["check"].as_str(), Some("ok"));
    assert_eq!((v["batch"].as_u64(), v["window"].as_u64(), v["iters"].as_u64()), (Some(8), Some(65), Some(20)));
    assert_eq!((v["device"].as_str(), v["dtype"].as_str(), v["seed"].as_u64()), (Some("cpu:0"), Some("U16"), Some(3)));
    assert_eq!(v["batch_bytes"].as_u64(), Some(8 * 65 * 2));
    let (p50, p99) = (v["p50_us"].as_f64().unwrap(), v["p99_us"].as_f64().unwrap());
    assert!(p50 > 0.0 && p99 >= p50, "{v}");
    assert!(v.get("prefault_s").is_none(), "{v}");
    // --prefault: timed and reported; the batch still matches a direct read.
    let mut prefault = vec!["gather", m.to_str().unwrap(), "tokens"];
    prefault.extend("--batch 4 --window 9 --device cpu --iters 3 --prefault".split(' '));
    let out = run_ok(&cli(), &[&prefault[..], &["--json"]].concat(), &[]);
    let v = json(&out);
    assert_eq!(v["check"].as_str(), Some("ok"));
    assert!(v["prefault_s"].as_f64().unwrap() >= 0.0, "{v}");
    assert_eq!(v["prefault_populated"].as_bool(), Some(true), "{v}");
    let out = run_ok(&cli(), &prefault, &[]);
    assert!(out.starts_with("prefault tokens: ") && out.contains("pages mapped"), "{out}");
    // 2-D tensor and missing arguments.
    let o = run(&cli(), &["gather", m.to_str().unwrap(), "w", "--batch", "2", "--window", "2", "--device", "cpu"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let o = run(&cli(), &["gather", m.to_str().unwrap(), "tokens", "--batch", "2"], &[]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn stand_in_plan_load_and_gather_on_two_devices() {
    let m = model("stand_in_plan_load_and_gather_on_two_devices");
    let ms = m.to_str().unwrap();
    let knobs = [
        ("STAND_IN_DEVICES", Some("2")),
        ("STAND_IN_TOTAL_MEMORY", Some("16G,40K")),
        ("STAND_IN_CONTEXT_RESERVE", Some("0")),
    ];
    let v = json(&run_ok_with_stand_in(
        &cli(),
        &["plan", ms, "--rule", "tokens=cuda:1", "--rule", "*=cuda:0", "--json"],
        &knobs,
    ));
    let d = v["devices"].as_array().unwrap();
    assert_eq!((d[0]["device"].as_str(), d[0]["fits"].as_bool()), (Some("cuda:1"), Some(false)));
    assert_eq!((d[1]["device"].as_str(), d[1]["fits"].as_bool()), (Some("cuda:0"), Some(true)));
    // Load refuses up front, naming the device.
    let o = run_with_stand_in(&cli(), &["load", ms, "--rule", "tokens=cuda:1", "--rule", "*=cuda:0"], &knobs);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("OUT_OF_MEMORY") && err.contains("cuda:1"), "{err}");
    let v = json(&run_ok_with_stand_in(
        &cli(),
        &["load", ms, "--rule", "tokens=host", "--rule", "*=cuda:0", "--json"],
        &knobs,
    ));
    assert_eq!(v["bytes_moved"].as_u64(), Some(1029));
    let v = json(&run_ok_with_stand_in(
        &cli(),
        &["gather", ms, "tokens", "--batch", "4", "--window", "100", "--device", "cuda:0", "--iters", "5", "--json"],
        &knobs,
    ));
    assert_eq!((v["check"].as_str(), v["device"].as_str()), (Some("ok"), Some("cuda:0")));
}

/// A rule that places no tensor (the typo: `token` for `tokens`) is warned about by plan and load, one
/// line per rule naming it, listed in the JSON, and refused under --strict with UNMATCHED_RULE.
#[test]
fn unmatched_rules_warn_and_strict_refuses_them() {
    let m = model("unmatched_rules_warn_and_strict_refuses_them");
    let p = m.to_str().unwrap();
    for cmd in ["plan", "load"] {
        let out = run(&cli(), &[cmd, p, "--rule", "token=host", "--rule", "*=cpu", "--rule", "w=host"], &[]);
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("hostfirst: warning: ")).collect();
        assert_eq!(warnings.len(), 2, "{cmd}: one line per unmatched rule:\n{err}");
        assert!(
            warnings[0].contains("rule 0 'token=host' matches no tensor") && warnings[0].contains("'token*'"),
            "{err}"
        );
        assert!(warnings[1].contains("rule 2 'w=host'") && warnings[1].contains("taken by rule 1"), "{err}");
        // The typo's consequence is visible: tokens went to cpu by the '*' rule.
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.lines().any(|l| l.starts_with("tokens") && l.contains("cpu:0")), "{table}");

        let out = run_ok(&cli(), &[cmd, p, "--rule", "token=host", "--rule", "*=cpu", "--json"], &[]);
        let v = json(&out);
        let u = v["unmatched_rules"].as_array().unwrap();
        assert_eq!(u.len(), 1, "{v}");
        assert_eq!((u[0]["rule"].as_u64(), u[0]["pattern"].as_str()), (Some(0), Some("token")));
        assert_eq!((u[0]["shadowed_by"].as_i64(), u[0]["tensor"].as_str()), (Some(-1), Some("tokens")));
        // Every rule used: no warning, an empty list.
        let out = run(&cli(), &[cmd, p, "--rule", "tokens=host", "--rule", "*=cpu", "--json"], &[]);
        assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(json(&String::from_utf8_lossy(&out.stdout))["unmatched_rules"].as_array().unwrap().len(), 0);

        let out = run(&cli(), &[cmd, p, "--rule", "token=host", "--rule", "*=cpu", "--strict"], &[]);
        assert_eq!(out.status.code(), Some(1), "{cmd} --strict");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("hostfirst: {p}: UNMATCHED_RULE: strict mode is on")), "{err}");
        assert!(err.contains("rule 0 'token=host' matches no tensor"), "{err}");
        run_ok(&cli(), &[cmd, p, "--rule", "tokens=host", "--rule", "*=cpu", "--strict"], &[]);
    }
}
