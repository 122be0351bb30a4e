//! `hostfirst convert INPUT OUTPUT`: whatever the reader opens, written as safetensors through the writer. A file
//! the `safetensors` crate serialized converts to the same bytes; a set converts to one file and back into
//! part files; a file converts onto itself; failures leave the output as it was.

use crate::common::*;

fn crate_file(
    path: &std::path::Path,
    tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)],
    meta: Option<(&str, &str)>,
) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let m = meta.map(|(k, v)| std::collections::HashMap::from([(k.to_string(), v.to_string())]));
    std::fs::write(path, safetensors::serialize(views, m).unwrap()).unwrap();
}

fn model() -> Vec<(&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = |n: usize, k: u8| (0..n).map(|i| (i as u8).wrapping_mul(7) ^ k).collect::<Vec<u8>>();
    vec![
        ("embed", safetensors::Dtype::F32, vec![64, 32], bytes(64 * 32 * 4, 1)),
        ("layer.0.w", safetensors::Dtype::BF16, vec![32, 32], bytes(32 * 32 * 2, 2)),
        ("layer.0.b", safetensors::Dtype::F16, vec![32], bytes(64, 3)),
        ("tokens", safetensors::Dtype::U16, vec![1000], bytes(2000, 4)),
    ]
}

#[test]
fn convert_gives_the_crates_bytes_splits_and_joins() {
    let cli = cli();
    let dir = scratch(&format!("cli-convert-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.safetensors");
    crate_file(&input, &model(), Some(("format", "pt")));
    let out = dir.join("out.safetensors");
    let text = run_ok(&cli, &["convert", input.to_str().unwrap(), out.to_str().unwrap()], &[]);
    assert!(text.contains("4 tensors, 1 file"), "{text}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap(), "the crate's bytes again");
    // Into part files of at most 8 KiB, and back into one file: the same bytes once more.
    let set = dir.join("set.safetensors");
    let j = json(&run_ok(
        &cli,
        &["convert", out.to_str().unwrap(), set.to_str().unwrap(), "--max-part-mib", "0", "--json"],
        &[],
    ));
    assert_eq!(j["parts"], 1);
    let idx = dir.join("split.safetensors.index.json");
    std::fs::write(dir.join("tiny.txt"), "").unwrap();
    // --max-part-mib is in MiB: make a model larger than 1 MiB per tensor to split it.
    let big = dir.join("big.safetensors");
    let mib = |k: u8| (0..(1usize << 20)).map(|i| (i as u8) ^ k).collect::<Vec<u8>>();
    crate_file(
        &big,
        &[
            ("a", safetensors::Dtype::U8, vec![1 << 20], mib(1)),
            ("b", safetensors::Dtype::U8, vec![1 << 20], mib(2)),
            ("c", safetensors::Dtype::U8, vec![1 << 20], mib(3)),
        ],
        Some(("format", "np")),
    );
    let j = json(&run_ok(
        &cli,
        &["convert", big.to_str().unwrap(), idx.to_str().unwrap(), "--max-part-mib", "2", "--json", "--no-sync"],
        &[],
    ));
    assert_eq!(j["parts"], 2);
    assert_eq!(j["output"], idx.to_str().unwrap());
    assert!(dir.join("split-00001-of-00002.safetensors").exists());
    let joined = dir.join("joined.safetensors");
    run_ok(&cli, &["convert", idx.to_str().unwrap(), joined.to_str().unwrap()], &[]);
    assert_eq!(std::fs::read(&joined).unwrap(), std::fs::read(&big).unwrap(), "the set joined is the original");
    // Onto itself: the views read the old file while the new one is written.
    run_ok(&cli, &["convert", joined.to_str().unwrap(), joined.to_str().unwrap()], &[]);
    assert_eq!(std::fs::read(&joined).unwrap(), std::fs::read(&big).unwrap());
    // A missing input: exit 1, one line on stderr, no output.
    let nothing = dir.join("nothing.safetensors");
    let o = run(&cli, &["convert", dir.join("missing.safetensors").to_str().unwrap(), nothing.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty() && String::from_utf8_lossy(&o.stderr).contains("IO"));
    assert!(!nothing.exists());
    // A split output to a path the parts cannot be named after: INVALID_ARGUMENT, nothing written.
    let o = run(
        &cli,
        &["convert", big.to_str().unwrap(), dir.join("weights.bin").to_str().unwrap(), "--max-part-mib", "1"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("INVALID_ARGUMENT"), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!dir.join("weights.bin").exists());
    let o = run(&cli, &["convert", big.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "a missing operand is a usage error");
}
