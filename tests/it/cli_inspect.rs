//! `hostfirst inspect`: agrees with the reference Python reader on every committed fixture
//! (tests/fixtures/expected.json, written by scripts/gen_fixtures.py), and fails cleanly on every file the
//! library rejects: exit 1, nothing on stdout, one line `hostfirst: <path>: <STATUS>: <message>` on stderr.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;

fn fixtures() -> std::path::PathBuf {
    root().join("tests/fixtures")
}

fn by_name(tensors: &Value) -> BTreeMap<String, Value> {
    tensors.as_array().unwrap().iter().map(|t| (t["name"].as_str().unwrap().to_string(), t.clone())).collect()
}

#[test]
fn json_checksums_agree_with_the_python_reader() {
    let expected = json(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap());
    let expected = expected.as_object().unwrap();
    assert!(expected.len() >= 6);
    for (rel, want) in expected {
        let path = fixtures().join(rel);
        let path_s = path.to_str().unwrap();
        let out = run_ok(&cli(), &["inspect", "--json", "--checksum", path_s], &[]);
        assert_eq!(out.matches('\n').count(), 1, "{rel}: one JSON object on one line");
        let got = json(&out);
        assert_eq!(got["file"], path_s);
        assert_eq!(got["metadata"], want["metadata"], "{rel}: metadata");
        let (g, w) = (by_name(&got["tensors"]), by_name(&want["tensors"]));
        assert_eq!(g.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>(), "{rel}: tensor names");
        for (name, wt) in &w {
            let gt = &g[name];
            for k in ["dtype", "shape", "fnv1a64"] {
                assert_eq!(gt[k], wt[k], "{rel}: tensor '{name}': {k}");
            }
            let elems: u64 = gt["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).product();
            let bits = match gt["dtype"].as_str().unwrap() {
                "F4" => 4,
                "BOOL" | "U8" | "I8" => 8,
                d if d.starts_with("F8") => 8,
                "I16" | "U16" | "F16" | "BF16" => 16,
                "I32" | "U32" | "F32" => 32,
                _ => 64,
            };
            assert_eq!(gt["nbytes"].as_u64().unwrap(), elems * bits / 8, "{rel}: '{name}' nbytes");
        }
        // File order: the non-empty tensors appear in the reader's offset order (ties between empty tensors
        // at one offset have no defined order in the reference reader).
        let order = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .filter(|t| t["fnv1a64"] != "cbf29ce484222325")
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(order(&got["tensors"]), order(&want["tensors"]), "{rel}: file order");
        // Offsets are contiguous within each file.
        let mut prev: Option<(u64, u64)> = None;
        for t in got["tensors"].as_array().unwrap() {
            let (o, n) = (t["offset"].as_u64().unwrap(), t["nbytes"].as_u64().unwrap());
            if let Some((po, pn)) = prev {
                assert!(o == po + pn || o == 0, "{rel}: offsets {po}+{pn} then {o}");
            }
            prev = Some((o, n));
        }
    }
}

#[test]
fn json_without_checksum_matches_the_contract() {
    let path = fixtures().join("basic.safetensors");
    let out = run_ok(&cli(), &["inspect", "--json", path.to_str().unwrap()], &[]);
    let v = json(&out);
    // Key order as in the contract (serde_json's map sorts keys, so check the text).
    assert!(out.starts_with(r#"{"file":"#) && out.contains(r#"},"tensors":[{"name":"#), "{out}");
    let t0 = &v["tensors"][0];
    assert_eq!(t0.as_object().unwrap().len(), 5);
    let first = format!(
        r#"{{"name":{},"dtype":{},"shape":{},"offset":0,"nbytes":{}}}"#,
        t0["name"], t0["dtype"], t0["shape"], t0["nbytes"]
    );
    assert!(out.contains(&first), "{first} in {out}");
    assert!(out.contains(r#""note":"unicode ✓ \"quoted\" \\ slash""#), "escaped, unicode kept: {out}");
}

#[test]
fn human_output_has_a_table_and_the_metadata() {
    let path = fixtures().join("basic.safetensors");
    let out = run_ok(&cli(), &["inspect", path.to_str().unwrap()], &[]);
    assert!(out.contains("NAME") && out.contains("DTYPE") && out.contains("SHAPE") && out.contains("SIZE"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("f32 ") && l.contains("F32") && l.contains("[2, 2]") && l.contains("16 B")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("scalar ") && l.contains("[]")), "{out}");
    assert!(out.contains("metadata: 2 entries") && out.contains("  format: pt"), "{out}");
    let set = fixtures().join("sharded/model.safetensors.index.json");
    let out = run_ok(&cli(), &["inspect", "--checksum", set.to_str().unwrap()], &[]);
    assert!(out.contains("tensors: 4") && out.contains("layers.1.w") && out.contains("total_size"), "{out}");
}

#[test]
fn human_table_columns_fit_long_names() {
    let long = "model.layers.31.self_attn.rotary_emb.inv_freq_with_a_long_suffix";
    let header = format!(
        r#"{{"{long}":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}},"w":{{"dtype":"U8","shape":[8],"data_offsets":[8,16]}}}}"#
    );
    let path = scratch("inspect-long-names").join("long.safetensors");
    std::fs::write(&path, crate::file_support::image(&header, &[0u8; 16])).unwrap();
    let out = run_ok(&cli(), &["inspect", path.to_str().unwrap()], &[]);
    let rows: Vec<&str> =
        out.lines().filter(|l| l.starts_with("NAME") || l.starts_with(long) || l.starts_with("w ")).collect();
    assert_eq!(rows.len(), 3, "{out}");
    let column = |row: &str, word: &str| row.find(word).unwrap_or_else(|| panic!("{word} in {row:?}"));
    let dtype_at = column(rows[0], "DTYPE");
    assert!(dtype_at > long.len(), "{out}");
    assert_eq!(column(rows[1], "F32"), dtype_at, "{out}");
    assert_eq!(column(rows[2], "U8"), dtype_at, "{out}");
}

#[test]
fn rejected_files_fail_cleanly() {
    for c in crate::file_support::catalogue() {
        if c.file == hostfirst::Status::Ok {
            continue;
        }
        let path = crate::file_support::tmp(&format!("cli-{}.safetensors", c.name));
        std::fs::write(&path, &c.bytes).unwrap();
        let p = path.to_str().unwrap();
        for args in [vec!["inspect", p], vec!["inspect", "--json", "--checksum", p]] {
            let out = run(&cli(), &args, &[]);
            assert_eq!(out.status.code(), Some(1), "{}: {args:?}", c.name);
            assert!(out.stdout.is_empty(), "{}: stdout must be empty", c.name);
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.matches('\n').count(), 1, "{}: one line: {err}", c.name);
            let prefix = format!("hostfirst: {p}: {}: ", c.file.name());
            assert!(err.starts_with(&prefix), "{}: expected '{prefix}...', got {err}", c.name);
        }
        std::fs::remove_file(&path).unwrap();
    }
    let out = run(&cli(), &["inspect", "/nonexistent/x.safetensors"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("hostfirst: /nonexistent/x.safetensors: IO: "));
}

#[test]
fn usage_errors() {
    assert_eq!(run(&cli(), &["inspect"], &[]).status.code(), Some(2));
    assert_eq!(run(&cli(), &["inspect", "--bogus", "x"], &[]).status.code(), Some(2));
    assert_eq!(run(&cli(), &["inspect", "a", "b"], &[]).status.code(), Some(2));
    assert!(run_ok(&cli(), &["--help"], &[]).contains("inspect FILE"));
}

/// A failure to write the output is reported as what it is (issue 43, point 5): stdout on a full disk
/// (/dev/full) gives exit status 1 and one line naming the file and the system's reason, never a silent success
/// nor an invented cause. (The output is assembled in memory, no temporary file; shard shares the code.)
#[test]
fn an_output_that_cannot_be_written_is_reported_as_such() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("SKIPPED: no /dev/full here");
        return;
    };
    let path = fixtures().join("basic.safetensors");
    let p = path.to_str().unwrap();
    for args in [&["inspect", p][..], &["inspect", "--json", "--checksum", p][..]] {
        let out = std::process::Command::new(cli())
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .expect("run the CLI");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("hostfirst: {p}: writing the output failed: No space left on device\n"),
            "{args:?}"
        );
    }
}
