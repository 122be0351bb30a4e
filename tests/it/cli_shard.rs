//! `hostfirst shard`: each of 4 ranks gets its shard of every tensor a rule matches (others whole), with the
//! global and shard shapes, the start along the split dimension, the FNV-1a 64 of the shard's bytes (checked
//! against whole-file slicing, and against `inspect --checksum` for whole tensors) and the bytes read;
//! text output; exact failures for a rank past the world, an uneven split and bad usage.

use crate::common::*;
use crate::shard::{block, tensors, write_set};

fn fnv(b: &[u8]) -> String {
    let h = b.iter().fold(0xcbf29ce484222325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100000001b3));
    format!("{h:016x}")
}

const RULES: [&str; 6] = ["--rule", "layer.*.w=1", "--rule", "embed=0", "--rule", "*.col=1"];

#[test]
fn four_ranks_json_against_whole_file_slicing() {
    let all = tensors();
    let (idx, bytes) = write_set("cli", &all);
    let idx = idx.to_str().unwrap();
    let inspect = json(&run_ok(&cli(), &["inspect", "--json", "--checksum", idx], &[]));
    let whole_sum = |name: &str| {
        inspect["tensors"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap()["fnv1a64"].clone()
    };
    for rank in 0..4u64 {
        let r = rank.to_string();
        let mut args = vec!["shard", idx, "--world", "4", "--rank", &r, "--json"];
        args.extend(RULES);
        let out = run_ok(&cli(), &args, &[]);
        assert_eq!(out.matches('\n').count(), 1, "one JSON line");
        let got = json(&out);
        assert_eq!(
            (got["world"].as_u64(), got["rank"].as_u64(), got["device"].as_str()),
            (Some(4), Some(rank), Some("cpu:0"))
        );
        let ts = got["tensors"].as_array().unwrap();
        assert_eq!(ts.len(), all.len());
        let (mut nbytes, mut read) = (0u64, 0u64);
        for t in ts {
            let name = t["name"].as_str().unwrap();
            let spec = all.iter().find(|s| s.0 == name).unwrap();
            let data = &bytes.iter().find(|(n, _)| n == name).unwrap().1;
            let shape: Vec<u64> = t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
            assert_eq!(shape, spec.3, "{name}");
            let mut ranges: Vec<(u64, u64)> = shape.iter().map(|&d| (0, d)).collect();
            match t["dim"].as_u64() {
                Some(d) => {
                    let len = shape[d as usize] / 4;
                    ranges[d as usize] = (rank * len, len);
                    assert_eq!(t["start"].as_u64(), Some(rank * len), "{name}");
                }
                None => {
                    assert!(t["dim"].is_null() && t["start"] == 0);
                    assert_eq!(t["fnv1a64"], whole_sum(name), "{name}: the hash of inspect --checksum");
                }
            }
            let want = block(data, &spec.3, spec.2, &ranges);
            let shard_shape: Vec<u64> = ranges.iter().map(|r| r.1).collect();
            assert_eq!(t["shard_shape"], serde_json::json!(shard_shape), "{name}");
            assert_eq!(t["nbytes"].as_u64(), Some(want.len() as u64), "{name}");
            assert_eq!(t["fnv1a64"].as_str(), Some(fnv(&want).as_str()), "{name} on rank {rank}");
            assert!(t["bytes_read"].as_u64().unwrap() >= want.len() as u64);
            nbytes += t["nbytes"].as_u64().unwrap();
            read += t["bytes_read"].as_u64().unwrap();
        }
        let totals = &got["totals"];
        assert_eq!((totals["nbytes"].as_u64(), totals["bytes_read"].as_u64()), (Some(nbytes), Some(read)));
        assert_eq!(totals["tensors"].as_u64(), Some(all.len() as u64));
    }
}

#[test]
fn text_output_and_failures() {
    let (idx, _) = write_set("cli-text", &tensors());
    let idx = idx.to_str().unwrap();
    let mut args = vec!["shard", idx, "--world", "4", "--rank", "3"];
    args.extend(RULES);
    let out = run_ok(&cli(), &args, &[]);
    assert!(out.contains("rank 3 of 4 on cpu:0"), "{out}");
    assert!(out.contains("NAME") && out.contains("FNV1A64") && out.contains("\ntotal: 8 tensors"), "{out}");
    let line = out.lines().find(|l| l.starts_with("layer.0.w ")).unwrap();
    assert!(line.contains("[8, 12]") && line.contains("[8, 3]"), "{line}");

    let fail = |extra: &[&str], code: i32, needle: &str| {
        let mut a = vec!["shard", idx];
        a.extend(extra);
        let o = run(&cli(), &a, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {err}");
        assert!(o.stdout.is_empty(), "{extra:?}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    };
    fail(&["--world", "4", "--rank", "4", "--rule", "embed=0"], 1, "OUT_OF_RANGE: mesh position 4");
    fail(&["--world", "5", "--rank", "0", "--rule", "bias=0"], 1, "INVALID_ARGUMENT");
    fail(&["--world", "5", "--rank", "0", "--rule", "bias=0"], 1, "tensor 'bias': dimension 0 has size 12");
    fail(&["--world", "2", "--rank", "0", "--rule", "bias=1"], 1, "INVALID_ARGUMENT");
    fail(&["--world", "0", "--rank", "0", "--rule", "embed=0"], 1, "INVALID_ARGUMENT");
    fail(&["--world", "2", "--rank", "0", "--rule", "embed=0", "--device", "tpu:0"], 1, "INVALID_ARGUMENT");
    fail(&["--rank", "0", "--rule", "embed=0"], 2, "usage: hostfirst shard");
    fail(&["--world", "2", "--rank", "0"], 2, "at least one --rule");
    fail(&["--world", "2", "--rank", "0", "--rule", "w=x"], 2, "PATTERN=DIM");
    fail(&["--world", "2", "--rank", "-1"], 2, "usage");
    fail(&["--world", "2", "--rank", "0", "--bogus"], 2, "unknown option");
}

/// A rule that splits no tensor is reported, as plan and load report theirs: a warning line on stderr (the
/// output is still made, those tensors load whole), listed in the JSON; `--strict` refuses it.
#[test]
fn rules_that_split_nothing_are_reported() {
    let (idx, _) = write_set("cli-unmatched", &tensors());
    let idx = idx.to_str().unwrap();
    let args = ["shard", idx, "--world", "2", "--rank", "0", "--rule", "embed=0", "--rule", "layer=1"];
    let o = run(&cli(), &args, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "hostfirst: warning: {idx}: rule 1 'layer=1' splits no tensor: its pattern matches no tensor name, or \
             only tensors an earlier rule takes (the first matching rule wins), so the tensors it meant load whole; \
             patterns match whole names: tensor 'layer.0.w' would need 'layer*' or '*layer*'"
        )
    );
    let mut json = args.to_vec();
    json.push("--json");
    let v: serde_json::Value = serde_json::from_str(&run_ok(&cli(), &json, &[])).unwrap();
    assert_eq!(v["unmatched_rules"], serde_json::json!([{"rule": 1, "pattern": "layer", "dim": 1}]));
    let mut strict = args.to_vec();
    strict.push("--strict");
    let o = run(&cli(), &strict, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.starts_with(&format!("hostfirst: {idx}: UNMATCHED_RULE: strict mode: rule 1 'layer=1' splits no tensor")),
        "{err}"
    );
}

/// A rule pattern longer than the CLI takes is refused with its length and the limit, never cut short (a
/// shortened pattern matches other tensors).
#[test]
fn overlong_rule_pattern_is_refused() {
    let (idx, _) = write_set("cli-long-rule", &tensors());
    let idx = idx.to_str().unwrap();
    let rule = format!("{}*=0", "x".repeat(1500));
    let o = run(&cli(), &["shard", idx, "--world", "2", "--rank", "0", "--rule", &rule], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("hostfirst shard: the pattern of rule 0 is 1501 bytes long; patterns longer than 1023 bytes are not accepted"),
        "{err}"
    );
}
