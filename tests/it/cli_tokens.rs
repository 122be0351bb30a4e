//! The CLI on token files (issue 35): `inspect`, `put`, `gather` and `shard` on a `.npy` file, an llm.c shard, a
//! Megatron dataset and (with `--raw DTYPE[:SHAPE][@OFFSET]`) a headerless file, each checked against the bytes
//! the test wrote (FNV-1a 64 of every tensor and of every rank's shard, computed here); every rank of 4 reads
//! exactly its quarter of the tokens; `--raw` usage errors exit 2 with what is wrong, and files refused by the
//! library exit 1 with one line that says the command-line way out.

use crate::common::*;
use crate::tokens::{llmc, npy};
use hostfirst::file::formats::megatron::write_index;
use std::path::PathBuf;

pub(crate) fn fnv(b: &[u8]) -> String {
    let h = b.iter().fold(0xcbf29ce484222325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100000001b3));
    format!("{h:016x}")
}

fn toks(n: u64) -> Vec<u8> {
    (0..n).flat_map(|i| ((i * 7919 + 13) as u16).to_le_bytes()).collect()
}

fn le<T: Copy, const N: usize>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}

/// One token file: its path, the `--raw` value it needs (if any), its format's name, and its tensors as
/// (name, dtype, shape, bytes).
pub(crate) struct TokenFile {
    pub(crate) path: PathBuf,
    pub(crate) raw: Option<&'static str>,
    pub(crate) format: &'static str,
    pub(crate) tensors: Vec<(&'static str, &'static str, Vec<u64>, Vec<u8>)>,
}

impl TokenFile {
    /// `args` with `--raw VALUE` after them when the file needs it.
    pub(crate) fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut v = args.to_vec();
        if let Some(r) = self.raw {
            v.extend(["--raw", r]);
        }
        v
    }

    fn p(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

const LENGTHS: [i32; 7] = [5, 0, 17, 33, 9, 16, 40]; // 120 tokens
const DOCS: [i64; 3] = [0, 3, 7];

/// A `.npy` file, an llm.c shard, a Megatron dataset and a headerless file, in a fresh directory (windows.rs
/// runs the Windows CLI on them too).
pub(crate) fn files(tag: &str) -> Vec<TokenFile> {
    let d = scratch(&format!("cli-tokens-{tag}-{}", std::process::id()));
    let ints: Vec<i32> = (0..64 * 24).map(|i| i * 31 - 700).collect();
    let ints = le(&ints, i32::to_le_bytes);
    std::fs::write(d.join("a.npy"), npy(1, "<i4", &[64, 24], false, &ints)).unwrap();
    std::fs::write(d.join("shard.bin"), llmc(20240520, 1, 4000, &toks(4000))).unwrap();
    std::fs::write(d.join("corpus.idx"), write_index(8, &LENGTHS, &DOCS, None)).unwrap();
    std::fs::write(d.join("corpus.bin"), toks(120)).unwrap();
    std::fs::write(d.join("train.bin"), [b"sixteen byte hdr".to_vec(), toks(1000)].concat()).unwrap();
    let pointers: Vec<i64> =
        LENGTHS.iter().scan(0i64, |at, &l| Some(std::mem::replace(at, *at + 2 * l as i64))).collect();
    vec![
        TokenFile {
            path: d.join("a.npy"),
            raw: None,
            format: "NPY",
            tensors: vec![("data", "I32", vec![64, 24], ints)],
        },
        TokenFile {
            path: d.join("shard.bin"),
            raw: None,
            format: "LLMC",
            tensors: vec![("tokens", "U16", vec![4000], toks(4000))],
        },
        TokenFile {
            path: d.join("corpus"),
            raw: None,
            format: "MEGATRON",
            tensors: vec![
                ("tokens", "U16", vec![120], toks(120)),
                ("sequence_lengths", "I32", vec![7], le(&LENGTHS, i32::to_le_bytes)),
                ("sequence_pointers", "I64", vec![7], le(&pointers, i64::to_le_bytes)),
                ("document_indices", "I64", vec![3], le(&DOCS, i64::to_le_bytes)),
            ],
        },
        TokenFile {
            path: d.join("train.bin"),
            raw: Some("u16@16"),
            format: "RAW",
            tensors: vec![("data", "U16", vec![1000], toks(1000))],
        },
    ]
}

#[test]
fn inspect_names_the_format_and_checksums_every_tensor() {
    for f in files("inspect") {
        let out = run_ok(&cli(), &f.args(&["inspect", "--json", "--checksum", f.p()]), &[]);
        assert!(out.starts_with(&format!(r#"{{"file":"{}","format":"{}","metadata":{{"#, f.p(), f.format)), "{out}");
        let v = json(&out);
        let ts = v["tensors"].as_array().unwrap();
        assert_eq!(ts.len(), f.tensors.len(), "{out}");
        for (t, (name, dtype, shape, bytes)) in ts.iter().zip(&f.tensors) {
            assert_eq!((t["name"].as_str(), t["dtype"].as_str()), (Some(*name), Some(*dtype)), "{out}");
            assert_eq!(t["shape"], serde_json::json!(shape), "{out}");
            assert_eq!(t["nbytes"].as_u64(), Some(bytes.len() as u64), "{out}");
            assert_eq!(t["fnv1a64"].as_str(), Some(fnv(bytes).as_str()), "{} {name}", f.p());
        }
        let text = run_ok(&cli(), &f.args(&["inspect", f.p()]), &[]);
        assert!(text.contains(&format!("\nformat: {}\ntensors: {}", f.format, f.tensors.len())), "{text}");
    }
    // The raw layout's shape and offset: 100 rows of 10 after the 16-byte prefix, as np.memmap reads them.
    let raw = &files("inspect-shape")[3];
    let v = json(&run_ok(&cli(), &["inspect", "--json", "--raw=U16:-1,10@16", raw.p()], &[]));
    assert_eq!(
        (&v["tensors"][0]["shape"], &v["metadata"]["offset"]),
        (&serde_json::json!([100, 10]), &serde_json::json!("16"))
    );
    assert_eq!(v["tensors"][0]["fnv1a64"], serde_json::Value::Null, "no --checksum, no checksum");
}

#[test]
fn put_and_gather_token_tensors() {
    for f in files("put") {
        for (name, _, shape, bytes) in &f.tensors {
            let v = json(&run_ok(&cli(), &f.args(&["put", f.p(), name, "--device", "cpu", "--json"]), &[]));
            assert_eq!((v["bytes"].as_u64(), v["verified"].as_bool()), (Some(bytes.len() as u64), Some(true)));
            assert_eq!(v["fnv1a64"].as_str(), Some(fnv(bytes).as_str()), "{} {name}", f.p());
            if shape.len() == 1 && shape[0] > 64 {
                // Batches of windows of the 1-D token tensors, the first checked against a direct read.
                let args = f.args(&["gather", f.p(), name, "--batch", "4", "--window", "16", "--iters", "3", "--json"]);
                let g = json(&run_ok(&cli(), &args, &[]));
                assert_eq!(
                    (g["check"].as_str(), g["dtype"].as_str(), g["batch_bytes"].as_u64()),
                    (Some("ok"), Some("U16"), Some(128))
                );
                let args = f.args(&[
                    "gather",
                    f.p(),
                    name,
                    "--batch",
                    "2",
                    "--window",
                    "8",
                    "--iters",
                    "4",
                    "--depth",
                    "2",
                    "--json",
                ]);
                assert_eq!(json(&run_ok(&cli(), &args, &[]))["check"], "ok", "{} prefetched", f.p());
            }
        }
    }
    // Rows of the .npy file: rows 8..16 of int32 [64, 24].
    let npy = &files("put-rows")[0];
    let v = json(&run_ok(&cli(), &["put", npy.p(), "data", "--rows", "8:16", "--json"], &[]));
    assert_eq!(v["fnv1a64"].as_str(), Some(fnv(&npy.tensors[0].3[8 * 96..16 * 96]).as_str()));
    // gather wants a 1-D tensor: the .npy file's 2-D one is refused by name.
    let o = run(&cli(), &["gather", npy.p(), "data", "--batch", "2", "--window", "4"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tensor 'data' has rank 2; gather needs a 1-D tensor"));
}

#[test]
fn shard_reads_only_each_ranks_bytes() {
    for f in files("shard") {
        let (split, _, shape, bytes) = &f.tensors[0];
        let rule = format!("{split}=0");
        for rank in 0..4u64 {
            let r = rank.to_string();
            let args = f.args(&["shard", f.p(), "--world", "4", "--rank", &r, "--rule", &rule, "--json"]);
            let v = json(&run_ok(&cli(), &args, &[]));
            let ts = v["tensors"].as_array().unwrap();
            assert_eq!(ts.len(), f.tensors.len());
            // The split tensor: its quarter, at its start, and no byte more read.
            let (rows, part) = (shape[0] / 4, bytes.len() as u64 / 4);
            let t = &ts[0];
            assert_eq!(
                (t["name"].as_str(), t["dim"].as_u64(), t["start"].as_u64()),
                (Some(*split), Some(0), Some(rank * rows))
            );
            assert_eq!(
                (t["nbytes"].as_u64(), t["bytes_read"].as_u64()),
                (Some(part), Some(part)),
                "{} rank {rank}",
                f.p()
            );
            let want = &bytes[(rank * part) as usize..((rank + 1) * part) as usize];
            assert_eq!(t["fnv1a64"].as_str(), Some(fnv(want).as_str()), "{} rank {rank}", f.p());
            // Megatron's index tensors: whole on every rank, read once.
            for (t, (name, _, _, b)) in ts.iter().zip(&f.tensors).skip(1) {
                assert_eq!((t["name"].as_str(), t["dim"].as_u64()), (Some(*name), None));
                assert_eq!(
                    (t["nbytes"].as_u64(), t["bytes_read"].as_u64()),
                    (Some(b.len() as u64), Some(b.len() as u64))
                );
                assert_eq!(t["fnv1a64"].as_str(), Some(fnv(b).as_str()), "{name}");
            }
            let total: u64 = part + f.tensors.iter().skip(1).map(|t| t.3.len() as u64).sum::<u64>();
            assert_eq!(
                (v["totals"]["nbytes"].as_u64(), v["totals"]["bytes_read"].as_u64()),
                (Some(total), Some(total))
            );
        }
    }
    // 3 ranks cannot split 4000 tokens evenly: INVALID_ARGUMENT naming the tensor.
    let f = &files("shard-uneven")[1];
    let o = run(&cli(), &["shard", f.p(), "--world", "3", "--rank", "0", "--rule", "tokens=0"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("INVALID_ARGUMENT") && err.contains("tensor 'tokens': dimension 0 has size 4000"), "{err}");
}

#[test]
fn raw_option_usage_errors_and_refusals() {
    let fs = files("raw");
    let (npy, raw) = (fs[0].p(), fs[3].p());
    // Bad values of --raw: usage errors (exit 2), nothing on stdout, the value and what is wrong on stderr.
    for (value, needle) in [
        ("Q16", "unknown dtype 'Q16'"),
        ("", "is not DTYPE[:SHAPE][@OFFSET]"),
        (":10", "is not DTYPE[:SHAPE][@OFFSET]"),
        ("U16:", "SHAPE is dimensions joined by ','"),
        ("U16:10,-1", "SHAPE is dimensions joined by ','"),
        ("U16:-2", "SHAPE is dimensions joined by ','"),
        ("U16:1,,2", "SHAPE is dimensions joined by ','"),
        ("U16:99999999999999999999", "SHAPE is dimensions joined by ','"),
        ("U16@", "OFFSET is a number of bytes"),
        ("U16@-1", "OFFSET is a number of bytes"),
        ("U16@16x", "unexpected 'x'"),
        ("U16:4 ", "unexpected ' '"),
    ] {
        for cmd in ["inspect", "plan", "shard"] {
            let mut args = vec![cmd, raw, "--raw", value];
            if cmd == "shard" {
                args.extend(["--world", "1", "--rank", "0", "--rule", "data=0"]);
            }
            let o = run(&cli(), &args, &[]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(o.stdout.is_empty(), "{args:?}");
            assert!(
                err.starts_with(&format!("hostfirst {cmd}: --raw '{value}")) && err.contains(needle),
                "{args:?}: {err}"
            );
            assert!(err.contains(&format!("usage: hostfirst {cmd} ")), "{err}");
        }
    }
    let rank = format!("U16:{}", "1,".repeat(32) + "1");
    let o = run(&cli(), &["inspect", raw, "--raw", &rank], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("more than 32 dimensions"));
    // Files the library refuses: one line, exit 1, with the command-line way out where there is one.
    let fail = |args: &[&str], status: &str, needle: &str| {
        let o = run(&cli(), args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(o.stdout.is_empty() && err.matches('\n').count() == 1, "{args:?}: {err}");
        let path = args.iter().find(|a| a.starts_with('/')).unwrap();
        assert!(err.starts_with(&format!("hostfirst: {path}: {status}: ")) && err.contains(needle), "{args:?}: {err}");
    };
    let hint = "; from the command line: a headerless file opens with --raw DTYPE[:SHAPE][@OFFSET] (e.g. --raw U16)\n";
    fail(&["inspect", raw], "NOT_SAFETENSORS", hint);
    fail(&["put", raw, "data"], "NOT_SAFETENSORS", hint);
    fail(&["gather", raw, "data", "--batch", "1", "--window", "2"], "NOT_SAFETENSORS", hint);
    fail(&["load", raw, "--rule", "data=cpu"], "NOT_SAFETENSORS", hint);
    let other = "from the command line: without --raw it opens by its header (or give --raw the @OFFSET of its data)";
    fail(&["inspect", npy, "--raw", "U8"], "OTHER_FORMAT", other);
    fail(&["shard", npy, "--raw", "U8", "--world", "2", "--rank", "0", "--rule", "data=0"], "OTHER_FORMAT", other);
    // Layouts that do not cover the file exactly.
    fail(&["inspect", raw, "--raw", "U16:-1,3@16"], "INCOMPLETE_BUFFER", "not a whole number of 6-byte rows");
    fail(&["inspect", raw, "--raw", "U16:999"], "INCOMPLETE_BUFFER", "");
    fail(&["inspect", raw, "--raw", "U16@4096"], "TRUNCATED", "");
    fail(&["inspect", raw, "--raw", "U16:2000@16"], "TRUNCATED", "");
    // plan and load take it too; the tensor is 'data'.
    let out = run_ok(&cli(), &["plan", raw, "--raw", "U16@16", "--rule", "data=cpu", "--json"], &[]);
    assert_eq!(json(&out)["tensors"][0]["name"], "data", "{out}");
    let out = run_ok(&cli(), &["load", raw, "--raw", "U16:-1,10@16", "--rule", "data=cpu", "--json"], &[]);
    assert_eq!(json(&out)["bytes_moved"], 2000, "{out}");
}
