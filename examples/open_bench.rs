//! Measures what opening costs: a sparse 2 GiB token file vs a 2 MiB one (time and RSS growth), and a
//! header with 100,000 tensors (open time, lookups). Run with:
//!     cargo run --release --example open_bench [DIR]
use hostfirst::TensorFile;
use std::time::{Duration, Instant};

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

fn write(path: &std::path::Path, header: &str, data_len: u64, real: &[u8]) {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(real);
    std::fs::write(path, &v).unwrap();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(8 + header.len() as u64 + data_len).unwrap();
}

fn best<F: FnMut()>(mut f: F) -> Duration {
    (0..7)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn main() {
    let dir =
        std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| std::env::temp_dir().display().to_string()));
    for (name, len) in [("bench-2m.safetensors", 2u64 << 20), ("bench-2g.safetensors", 2 << 30)] {
        let p = dir.join(name);
        let h = format!(r#"{{"tokens":{{"dtype":"U16","shape":[{}],"data_offsets":[0,{len}]}}}}"#, len / 2);
        write(&p, &h, len, b"");
        let _ = TensorFile::open(&p).unwrap();
        let before = rss();
        let f = TensorFile::open(&p).unwrap();
        let grew = rss() - before;
        drop(f);
        let t = best(|| drop(TensorFile::open(&p).unwrap()));
        println!("{name}: open {t:?} (best of 7), RSS +{grew} bytes");
        std::fs::remove_file(&p).unwrap();
    }
    let n = 100_000;
    let mut h = String::from("{");
    for i in 0..n {
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(
            r#""model.layers.{i}.mlp.weight":{{"dtype":"BF16","shape":[2],"data_offsets":[{},{}]}}"#,
            i * 4,
            i * 4 + 4
        ));
    }
    h.push('}');
    let p = dir.join("bench-100k.safetensors");
    write(&p, &h, 4 * n as u64, &vec![0u8; 4 * n]);
    let t = best(|| drop(TensorFile::open(&p).unwrap()));
    let f = TensorFile::open(&p).unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("model.layers.{i}.mlp.weight")).collect();
    let t2 = Instant::now();
    for (i, name) in names.iter().enumerate() {
        assert_eq!(f.find(name), Some(i));
    }
    let look = t2.elapsed();
    println!("100k tensors ({} header bytes): open {t:?} (best of 7); {n} lookups {look:?}", h.len());
    let bytes = std::fs::read(&p).unwrap();
    let r = best(|| drop(safetensors::SafeTensors::read_metadata(&bytes).unwrap()));
    println!("  of which the reference crate's read_metadata alone: {r:?}");
    std::fs::remove_file(&p).unwrap();
}
