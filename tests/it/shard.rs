//! Narrowed views and shard-on-read against whole-file slicing: puts of strided views on cpu and (through
//! the stand-in driver) CUDA, shard plans over a sharded set on a 2x4 mesh, the bytes each read takes,
//! errors with their exact statuses, progress and cancel, the fit check before anything moves.

use crate::common::*;
use hostfirst::file::ReadPolicy;
use hostfirst::place::{put, put_with_stats, PutOptions, Target};
use hostfirst::shard::{self, Mesh, Owned, ShardOptions, ShardPlan, ShardRules};
use hostfirst::{Device, Status, TensorFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A tensor to write: name, dtype, bits per element, shape.
pub(crate) struct T(pub &'static str, pub &'static str, pub u64, pub Vec<u64>);

fn bytes_for(t: &T, salt: u64) -> Vec<u8> {
    let n = (t.3.iter().product::<u64>() * t.2).div_ceil(8);
    (0..n).map(|i| ((i ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect()
}

/// Writes one safetensors file of `tensors` (header built with serde_json) and returns each tensor's bytes.
fn write_st(path: &Path, tensors: &[&T], salt: u64) -> Vec<(String, Vec<u8>)> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    let mut out = Vec::new();
    for t in tensors {
        let b = bytes_for(t, salt ^ t.0.len() as u64);
        header.insert(
            t.0.into(),
            serde_json::json!({"dtype": t.1, "shape": t.3, "data_offsets": [data.len(), data.len() + b.len()]}),
        );
        data.extend_from_slice(&b);
        out.push((t.0.to_string(), b));
    }
    let h = serde_json::Value::Object(header).to_string();
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend_from_slice(&data);
    std::fs::write(path, img).unwrap();
    out
}

/// A sharded set in two files; returns the index path and every tensor's bytes.
pub(crate) fn write_set(tag: &str, tensors: &[T]) -> (PathBuf, Vec<(String, Vec<u8>)>) {
    let dir = scratch(&format!("shard-{tag}-{}", std::process::id()));
    let half = tensors.len() / 2;
    let (a, b): (Vec<&T>, Vec<&T>) = (tensors[..half].iter().collect(), tensors[half..].iter().collect());
    let mut all = write_st(&dir.join("m-00001.safetensors"), &a, 1);
    all.extend(write_st(&dir.join("m-00002.safetensors"), &b, 2));
    let map: serde_json::Map<String, serde_json::Value> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.0.to_string(), (if i < half { "m-00001.safetensors" } else { "m-00002.safetensors" }).into()))
        .collect();
    let idx = dir.join("m.safetensors.index.json");
    std::fs::write(&idx, serde_json::json!({"metadata": {}, "weight_map": map}).to_string()).unwrap();
    (idx, all)
}

/// Packed bytes of the block `ranges` (start, len per dim) of a C-order array of `shape`, `bits` per element
/// (each innermost run a whole number of bytes): recursive over dimensions.
pub(crate) fn block(data: &[u8], shape: &[u64], bits: u64, ranges: &[(u64, u64)]) -> Vec<u8> {
    fn rec(data: &[u8], shape: &[u64], bits: u64, ranges: &[(u64, u64)], base_bits: u64, out: &mut Vec<u8>) {
        let (start, len) = ranges[0];
        if shape.len() == 1 {
            let (lo, hi) = (base_bits + start * bits, base_bits + (start + len) * bits);
            assert!(lo % 8 == 0 && hi % 8 == 0, "the reference needs whole bytes");
            out.extend_from_slice(&data[(lo / 8) as usize..(hi / 8) as usize]);
            return;
        }
        let inner: u64 = shape[1..].iter().product::<u64>() * bits;
        for i in start..start + len {
            rec(data, &shape[1..], bits, &ranges[1..], base_bits + i * inner, out);
        }
    }
    let mut out = Vec::new();
    if !ranges.iter().any(|r| r.1 == 0) {
        rec(data, shape, bits, ranges, 0, &mut out);
    }
    out
}

pub(crate) fn tensors() -> Vec<T> {
    vec![
        T("layer.0.w", "F32", 32, vec![8, 12]),
        T("layer.0.col", "BF16", 16, vec![6, 16]),
        T("layer.0.row", "U8", 8, vec![4, 10]),
        T("embed", "U16", 16, vec![16, 4]),
        T("bias", "F32", 32, vec![12]),
        T("q", "F4", 4, vec![4, 16]),
        T("cube", "I32", 32, vec![2, 4, 8]),
        T("empty", "F32", 32, vec![0, 8]),
    ]
}

fn rules(mesh: &Arc<Mesh>) -> ShardRules {
    let mut r = ShardRules::new(Arc::clone(mesh));
    for (p, s) in [
        ("layer.*.w", "x,y"),
        ("*.col", "_,y"),
        ("*.row", "x"),
        ("embed", "x+y"),
        ("q", "_,y"),
        ("cube", "x,_,y"),
        ("empty", "_,y"),
    ] {
        r.add(p, s).unwrap();
    }
    r
}

fn buffer_bytes(b: &std::sync::Mutex<hostfirst::place::Buffer>) -> Vec<u8> {
    let b = b.lock().unwrap();
    let mut v = vec![0u8; b.nbytes() as usize];
    b.copy_to_host(&mut v).unwrap();
    v
}

/// Runs the 2x4 plan with every position owned by `devices[pos % len]` and checks every shard against
/// whole-file slicing.
fn load_all_and_compare(tag: &str, devices: &[Device]) {
    let all = tensors();
    let (idx, bytes) = write_set(tag, &all);
    let f = TensorFile::open(&idx).unwrap();
    assert!(f.is_set());
    let mesh = Arc::new(Mesh::new(&[("x", 2), ("y", 4)]).unwrap());
    let owned: Vec<Owned> =
        (0..8).map(|p| Owned { position: p, device: devices[p as usize % devices.len()] }).collect();
    let plan = ShardPlan::make(&f, &rules(&mesh), &owned, ReadPolicy::default()).unwrap();
    assert_eq!(plan.entries.len(), 8 * all.len());
    assert_eq!(plan.files.len(), 2);
    let mut seen = Vec::new();
    let mut cb = |d: u64, t: u64| {
        seen.push((d, t));
        false
    };
    let load = shard::run(
        &plan,
        ShardOptions {
            tuning: hostfirst::engine::Tuning { threads: 2, chunk: 4096, ..Default::default() },
            progress: Some(&mut cb),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(*seen.last().unwrap(), (plan.shard_bytes(), plan.shard_bytes()));
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
    for (e, s) in plan.entries.iter().zip(&load.shards) {
        let t = all.iter().find(|t| t.0 == e.name()).unwrap();
        let data = &bytes.iter().find(|(n, _)| n == e.name()).unwrap().1;
        let want = block(data, &t.3, t.2, &e.ranges);
        assert_eq!(buffer_bytes(&s.buffer), want, "{} at position {}", e.name(), e.position);
        let b = s.buffer.lock().unwrap();
        assert_eq!((b.device(), b.shape()), (e.device, e.shape()));
        if e.copy_of.is_some() {
            assert_eq!(s.bytes_read, 0);
        } else {
            // Its own bytes at least, and what the plan said; a gap between neighbouring shards read together
            // is counted for one of them, so one shard may count bytes outside its own span.
            assert!(s.bytes_read >= e.nbytes(), "{}", e.name());
            assert_eq!(s.bytes_read, e.planned_read, "{} at position {}", e.name(), e.position);
        }
    }
    // Per tensor, the host parts are read together and never take more than the tensor's bytes (a merged read
    // spans only between its parts); CUDA parts are read one by one.
    for t in &all {
        let read: u64 = plan
            .entries
            .iter()
            .zip(&load.shards)
            .filter(|(e, _)| e.name() == t.0 && e.device.kind != hostfirst::DeviceKind::CUDA)
            .map(|(_, s)| s.bytes_read)
            .sum();
        let whole = t.3.iter().product::<u64>() * t.2 / 8;
        assert!(read <= whole, "{}: {read} bytes read of a {whole}-byte tensor", t.0);
    }
    assert_eq!(load.bytes_read(), plan.planned_read());
    // P('x','y') on [8, 12]: position 6 = (x=1, y=2) holds rows 4..8, columns 6..9.
    let w6 = plan.entries.iter().find(|e| e.name() == "layer.0.w" && e.position == 6).unwrap();
    assert_eq!(w6.ranges, vec![(4, 4), (6, 3)]);
    // Unmatched (bias) is replicated: one read, seven copies.
    let bias: Vec<_> = plan.entries.iter().filter(|e| e.name() == "bias").collect();
    assert_eq!(bias.iter().filter(|e| e.copy_of.is_none()).count(), 1);
    assert!(bias.iter().all(|e| e.rule.is_none() && e.ranges == vec![(0, 12)]));
    // P('x') on a 2x4 mesh: the 4 positions of one x coordinate share a part.
    let rows: Vec<_> = plan.entries.iter().filter(|e| e.name() == "layer.0.row").collect();
    assert_eq!(rows.iter().filter(|e| e.copy_of.is_none()).count(), 2);
    assert_eq!(load.bytes_read(), load.shards.iter().map(|s| s.bytes_read).sum::<u64>());
}

#[test]
fn shards_of_a_set_equal_whole_file_slicing_on_cpu() {
    load_all_and_compare("cpu", &[Device::CPU]);
}

#[test]
fn shards_to_cuda_through_the_stand_in() {
    in_stand_in_child(
        concat!(module_path!(), "::shards_to_cuda_through_the_stand_in"),
        &[("STAND_IN_DEVICES", Some("2"))],
        || {
            load_all_and_compare("cuda", &[Device::cuda(0), Device::cuda(1), Device::CUDA_HOST]);
            hostfirst::place::release_cached_memory();
            assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
            assert_eq!(stand_in_query("stand_in_live_pinned"), 0);
        },
    );
}

#[test]
fn strided_puts_pack_the_runs_on_cpu_and_cuda() {
    in_stand_in_child(concat!(module_path!(), "::strided_puts_pack_the_runs_on_cpu_and_cuda"), &[], || {
        // 3 MiB of f32 [48, 16384]: columns 1000..9192 are 48 runs of 32 KiB.
        let t = T("w", "F32", 32, vec![48, 16384]);
        let dir = scratch(&format!("shard-puts-{}", std::process::id()));
        let data = write_st(&dir.join("w.safetensors"), &[&t], 7).remove(0).1;
        let f = TensorFile::open(dir.join("w.safetensors")).unwrap();
        let v = f.view("w").unwrap().narrow(1, 1000, 8192).unwrap().narrow(0, 3, 40).unwrap();
        assert!(!v.is_contiguous());
        let want = block(&data, &t.3, 32, &[(3, 40), (1000, 8192)]);
        for dev in [Device::CPU, Device::CUDA_HOST, Device::cuda(0)] {
            // Small slabs: runs are split across slabs and slabs hold parts of several runs.
            let opts = PutOptions {
                tuning: hostfirst::engine::Tuning {
                    threads: 3,
                    chunk: 100_000,
                    staging: 400_000,
                    ..Default::default()
                },
                ..PutOptions::default()
            };
            let b = put(&v, Target::Device(dev), opts).unwrap();
            assert_eq!((b.shape(), b.nbytes()), (&[40u64, 8192][..], want.len() as u64));
            let mut back = vec![0u8; want.len()];
            b.copy_to_host(&mut back).unwrap();
            assert!(back == want, "{dev}");
        }
        // Resident mode cannot register a strided view: it is staged, and says so.
        let opts = PutOptions { resident: true, ..PutOptions::default() };
        let (b, stats) = put_with_stats(&v, Target::Device(Device::cuda(0)), opts).unwrap();
        assert!(stats.staged_instead);
        let mut back = vec![0u8; want.len()];
        b.copy_to_host(&mut back).unwrap();
        assert!(back == want);
    });
}

#[test]
fn ranks_of_a_one_axis_mesh_cover_each_tensor_once() {
    let all = tensors();
    let (idx, bytes) = write_set("ranks", &all);
    let f = TensorFile::open(&idx).unwrap();
    let mesh = Arc::new(Mesh::new(&[("rank", 4)]).unwrap());
    let mut r = ShardRules::new(Arc::clone(&mesh));
    r.add("layer.0.w", "_,rank").unwrap();
    r.add("embed", "rank").unwrap();
    for name in ["layer.0.w", "embed"] {
        let t = all.iter().find(|t| t.0 == name).unwrap();
        let data = &bytes.iter().find(|(n, _)| n == name).unwrap().1;
        let mut pieces = Vec::new();
        for rank in 0..4 {
            let plan = ShardPlan::make(&f, &r, &[Owned { position: rank, device: Device::CPU }], ReadPolicy::default())
                .unwrap();
            let load = shard::run(&plan, ShardOptions::default()).unwrap();
            let (e, s) = plan.entries.iter().zip(&load.shards).find(|(e, _)| e.name() == name).unwrap();
            pieces.push((e.ranges.clone(), buffer_bytes(&s.buffer)));
        }
        // Reassemble: concatenating along the split dimension gives the tensor back.
        let dim = if name == "embed" { 0 } else { 1 };
        let mut whole = Vec::new();
        let rows = if dim == 0 { 1 } else { t.3[0] };
        for row in 0..rows {
            for (ranges, b) in &pieces {
                let run = (b.len() as u64 / rows) as usize;
                assert_eq!(ranges[dim].1 * 4, t.3[dim]);
                whole.extend_from_slice(&b[row as usize * run..(row as usize + 1) * run]);
            }
        }
        assert!(&whole == data, "{name}");
    }
}

#[test]
fn bad_plans_fail_with_exact_statuses() {
    let all = tensors();
    let (idx, _) = write_set("bad", &all);
    let f = TensorFile::open(&idx).unwrap();
    let mesh = Arc::new(Mesh::new(&[("x", 2), ("y", 4)]).unwrap());
    let cpu = |p| Owned { position: p, device: Device::CPU };
    let plan = |r: &ShardRules, owned: &[Owned]| ShardPlan::make(&f, r, owned, ReadPolicy::default()).map(|_| ());
    // Uneven: 12 columns of layer.0.w over x+y (8 parts).
    let mut r = ShardRules::new(Arc::clone(&mesh));
    r.add("layer.0.w", "_,x+y").unwrap();
    let e = plan(&r, &[cpu(0)]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    for needle in ["tensor 'layer.0.w'", "dimension 1 has size 12", "'x+y' (8 parts)"] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    // A spec longer than the tensor's rank.
    let mut r = ShardRules::new(Arc::clone(&mesh));
    r.add("bias", "x,y").unwrap();
    assert_eq!(plan(&r, &[cpu(0)]).unwrap_err().status(), Status::InvalidArgument);
    // Positions: past the mesh, owned twice; a bad policy.
    let r = rules(&mesh);
    assert_eq!(plan(&r, &[cpu(8)]).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(plan(&r, &[cpu(1), cpu(1)]).unwrap_err().status(), Status::InvalidArgument);
    let p = ReadPolicy { max_over_read: 0.5, ..ReadPolicy::default() };
    assert_eq!(ShardPlan::make(&f, &r, &[cpu(0)], p).unwrap_err().status(), Status::InvalidArgument);
    // A sub-byte shard starting inside a byte: F4 [4, 16] columns over 16 parts are half-byte runs.
    let big = Arc::new(Mesh::new(&[("z", 16)]).unwrap());
    let mut r = ShardRules::new(big);
    r.add("q", "_,z").unwrap();
    let e = ShardPlan::make(&f, &r, &[cpu(1)], ReadPolicy::default()).unwrap_err();
    assert_eq!(e.status(), Status::MisalignedSlice);
    // An empty owned list is a plan with nothing to do.
    let plan = ShardPlan::make(&f, &rules(&mesh), &[], ReadPolicy::default()).unwrap();
    assert!(plan.entries.is_empty());
    assert_eq!(shard::run(&plan, ShardOptions::default()).unwrap().shards.len(), 0);
}

#[test]
fn reads_take_the_shard_bytes_not_the_tensor() {
    // 4 MiB f32 [64, 16384] (64 KiB rows) and 256 KiB u8 [4096, 64] (64-byte rows).
    let wide = T("wide", "F32", 32, vec![64, 16384]);
    let narrow = T("narrow", "U8", 8, vec![4096, 64]);
    let dir = scratch(&format!("shard-bytes-{}", std::process::id()));
    write_st(&dir.join("b.safetensors"), &[&wide, &narrow], 3);
    let f = TensorFile::open(dir.join("b.safetensors")).unwrap();
    let mesh = Arc::new(Mesh::new(&[("r", 4)]).unwrap());
    for (spec, wide_read) in [("r", 1u64 << 20), ("_,r", 1 << 20)] {
        let mut r = ShardRules::new(Arc::clone(&mesh));
        r.add("*", spec).unwrap();
        let plan =
            ShardPlan::make(&f, &r, &[Owned { position: 2, device: Device::CPU }], ReadPolicy::default()).unwrap();
        let load = shard::run(&plan, ShardOptions::default()).unwrap();
        let (w, n) = (&load.shards[0], &load.shards[1]);
        assert_eq!(plan.entries[0].name(), "wide");
        // 64 KiB rows split 4 ways: 16 KiB runs 48 KiB apart are read one by one, exactly.
        assert_eq!((w.bytes_read, plan.entries[0].planned_read), (wide_read, wide_read), "{spec}");
        if spec == "_,r" {
            assert_eq!(plan.entries[0].runs, 64);
            // 16-byte runs 48 bytes apart share pages: merged, reading the span once.
            assert_eq!(plan.entries[1].runs, 4096);
            assert_eq!(n.bytes_read, plan.entries[1].view.span_bytes());
            assert!(n.bytes_read < 4096 * 64 / 4 * 4);
        } else {
            assert_eq!(n.bytes_read, 4096 * 64 / 4);
        }
    }
    // A policy of 1.0 merges only gaps that cost no page; 3.0 merges 16 KiB runs 48 KiB apart.
    let mut r = ShardRules::new(Arc::clone(&mesh));
    r.add("wide", "_,r").unwrap();
    let own = [Owned { position: 0, device: Device::CPU }];
    let loose = ShardPlan::make(&f, &r, &own, ReadPolicy { max_over_read: 4.0, max_read: 1 << 20 }).unwrap();
    assert!(loose.entries[0].planned_read > 1 << 20, "{}", loose.entries[0].planned_read);
    let got = shard::run(&loose, ShardOptions::default()).unwrap();
    assert!(got.shards[0].bytes_read > 1 << 20);
}

/// Column shards of one tensor that this process owns side by side are read together: a row's runs of every
/// owned shard form one merged read when the gaps between them stay within the over-read bound, so owning
/// all four shards of 64 KiB rows takes four 1 MiB reads (not 256 of 16 KiB), and owning shards that leave
/// gaps of a quarter row or more stays one read per run and reads exactly the shard bytes.
#[test]
fn neighbouring_shards_are_read_together_within_the_bound() {
    let wide = T("wide", "F32", 32, vec![64, 16384]);
    let dir = scratch(&format!("shard-neighbours-{}", std::process::id()));
    let data = write_st(&dir.join("w.safetensors"), &[&wide], 5).remove(0).1;
    let f = TensorFile::open(dir.join("w.safetensors")).unwrap();
    let mesh = Arc::new(Mesh::new(&[("r", 4)]).unwrap());
    let mut r = ShardRules::new(Arc::clone(&mesh));
    r.add("*", "_,r").unwrap();
    let shard_bytes = 64 * 16384 * 4 / 4;
    // (owned positions, reads planned): all four = the whole tensor in max_read pieces; 1 and 2 side by side
    // = 32 KiB per row with a 32 KiB gap (not merged); 0 and 2 = 16 KiB runs 16 KiB apart (1.5x, not merged).
    for (owned, reads) in [(vec![0u64, 1, 2, 3], 4u64), (vec![1], 64), (vec![1, 2], 64), (vec![0, 2], 128)] {
        let own: Vec<Owned> = owned.iter().map(|&p| Owned { position: p, device: Device::CPU }).collect();
        let plan = ShardPlan::make(&f, &r, &own, ReadPolicy::default()).unwrap();
        let want_bytes = shard_bytes * owned.len() as u64;
        assert_eq!((plan.files[0].reads, plan.planned_read()), (reads, want_bytes), "{owned:?}");
        for threads in [1, 3] {
            let tuning = hostfirst::engine::Tuning { threads, chunk: 256 << 10, ..Default::default() };
            let load = shard::run(&plan, ShardOptions { tuning, ..Default::default() }).unwrap();
            assert_eq!(load.bytes_read(), want_bytes, "{owned:?} on {threads} threads");
            for (e, s) in plan.entries.iter().zip(&load.shards) {
                assert_eq!(buffer_bytes(&s.buffer), block(&data, &wide.3, 32, &e.ranges), "{owned:?} {}", e.position);
                assert_eq!(s.bytes_read, shard_bytes);
            }
        }
    }
    // A looser bound merges the 16 KiB gaps of positions 0 and 2: about one read per 1 MiB, counted once.
    let loose = ReadPolicy { max_over_read: 1.6, ..ReadPolicy::default() };
    let own = [Owned { position: 0, device: Device::CPU }, Owned { position: 2, device: Device::CPU }];
    let plan = ShardPlan::make(&f, &r, &own, loose).unwrap();
    let load = shard::run(&plan, ShardOptions::default()).unwrap();
    assert_eq!(load.bytes_read(), plan.planned_read());
    // (The data section is not page aligned: each 16 KiB run touches 5 pages, so the gaps merge all along.)
    let read = plan.planned_read();
    assert!(read > 2 * shard_bytes && read <= 4 * shard_bytes, "{read}");
    assert!(plan.files[0].reads <= 5, "{}", plan.files[0].reads);
    for (e, s) in plan.entries.iter().zip(&load.shards) {
        assert_eq!(buffer_bytes(&s.buffer), block(&data, &wide.3, 32, &e.ranges));
    }
}

#[test]
fn cancel_and_fit_failure_on_cuda_keep_nothing() {
    in_stand_in_child(
        concat!(module_path!(), "::cancel_and_fit_failure_on_cuda_keep_nothing"),
        &[("STAND_IN_TOTAL_MEMORY", Some("512M"))],
        || {
            let all = tensors();
            let (idx, _) = write_set("cancel", &all);
            let f = TensorFile::open(&idx).unwrap();
            let mesh = Arc::new(Mesh::new(&[("x", 2), ("y", 4)]).unwrap());
            let owned: Vec<Owned> = (0..8).map(|p| Owned { position: p, device: Device::cuda(0) }).collect();
            let plan = ShardPlan::make(&f, &rules(&mesh), &owned, ReadPolicy::default()).unwrap();
            // Cancel at the first report with bytes in place (the engine's progress is rate-limited, so the
            // number of calls a fast run makes is not fixed; the first report is never delayed).
            let mut placed = 0;
            let mut cancel = |d: u64, _t: u64| {
                placed = d;
                d > 0
            };
            let e =
                shard::run(&plan, ShardOptions { progress: Some(&mut cancel), ..Default::default() }).err().unwrap();
            assert_eq!(e.status(), Status::Cancelled);
            assert!(placed > 0 && placed < plan.shard_bytes(), "cancelled mid-way: {placed}");
            hostfirst::place::release_cached_memory();
            assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
            // 300 MiB on a 512 MiB device less its 256 MiB context: refused before any allocation, with the numbers.
            let dir = scratch(&format!("shard-fit-{}", std::process::id()));
            let big = T("big", "U8", 8, vec![300 << 20]);
            let path = dir.join("big.safetensors");
            write_sparse(&path, &big);
            let f = TensorFile::open(&path).unwrap();
            let r = ShardRules::new(Arc::new(Mesh::new(&[("r", 1)]).unwrap()));
            let plan =
                ShardPlan::make(&f, &r, &[Owned { position: 0, device: Device::cuda(0) }], ReadPolicy::default())
                    .unwrap();
            assert!(!plan.fits());
            let e = shard::run(&plan, ShardOptions::default()).err().unwrap();
            assert_eq!(e.status(), Status::OutOfMemory);
            assert!(e.message().contains("shard load") && e.message().contains("cuda:0"), "{}", e.message());
            assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
        },
    );
}

/// A one-tensor file whose data is a hole (sparse): large without writing its bytes.
fn write_sparse(path: &Path, t: &T) {
    let n = t.3.iter().product::<u64>() * t.2 / 8;
    let mut m = serde_json::Map::new();
    m.insert(t.0.into(), serde_json::json!({"dtype": t.1, "shape": t.3, "data_offsets": [0, n]}));
    let h = serde_json::Value::Object(m).to_string();
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    std::fs::write(path, &img).unwrap();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(img.len() as u64 + n).unwrap();
}

#[test]
fn strided_views_export_with_strides_or_as_packed_copies() {
    use hostfirst::place::export::{export_view, CopyPolicy, Form, Keep};
    let t = T("w", "F32", 32, vec![6, 10]);
    let dir = scratch(&format!("shard-export-{}", std::process::id()));
    let data = write_st(&dir.join("e.safetensors"), &[&t], 5).remove(0).1;
    let f = TensorFile::open(dir.join("e.safetensors")).unwrap();
    let v = f.view("w").unwrap().narrow(1, 2, 5).unwrap();
    let want = block(&data, &t.3, 32, &[(0, 6), (2, 5)]);
    // Versioned: zero-copy into the mapping, with the tensor's element strides.
    let e = export_view(&v, Form::Versioned, CopyPolicy::IfNeeded, None).unwrap();
    assert!(e.read_only && !e.copied && e.strides.as_deref() == Some(&[10, 1][..]));
    assert_eq!(e.data, v.mapped().as_ptr() as u64);
    // Legacy (no read-only flag, no copy-on-write mapping of a strided view): a packed copy.
    let e = export_view(&v, Form::Legacy, CopyPolicy::IfNeeded, None).unwrap();
    assert!(e.copied && e.strides.is_none() && e.shape == [6, 5]);
    let Keep::Buffer(b) = &e.keep else { panic!("a copy is a buffer") };
    assert_eq!(buffer_bytes(b), want);
    let e = export_view(&v, Form::Legacy, CopyPolicy::Never, None).err().unwrap();
    assert_eq!(e.status(), Status::Unsupported);
    // A copy-on-write put of a strided view is an ordinary packed copy.
    let b = put(&v, Target::Device(Device::CPU), PutOptions { copy_on_write: true, ..PutOptions::default() }).unwrap();
    assert!(!b.is_file_backed());
    let mut back = vec![0u8; want.len()];
    b.copy_to_host(&mut back).unwrap();
    assert_eq!(back, want);
}

/// `bypass` reads the CUDA parts of a shard run with direct I/O too (issue 45, point 2): the staging ring's
/// readers fill its slabs from their own aligned staging, so nothing the run reads enters the page cache.
/// Two row shards of each of two f32 tensors (rows of 1,003 and 1,001 elements: unaligned starts and lengths)
/// on cuda:0 of the stand-in, from a cold file; at the run's final progress call (every byte read, its cache
/// scope not yet restored) the file is cached under `drop` (the observable works) and at most 5 % of it under
/// `bypass`; afterwards at most 5 % either way; every shard byte-exact.
#[test]
fn bypass_reads_cuda_shards_directly_through_the_stand_in() {
    in_stand_in_child(concat!(module_path!(), "::bypass_reads_cuda_shards_directly_through_the_stand_in"), &[], || {
        use hostfirst::cache::{resident_pages, PageCache};
        use std::os::fd::AsRawFd;
        let p = scratch(&format!("shard-bypass-{}", std::process::id())).join("cuda.safetensors");
        let (w, v) = (T("w", "F32", 32, vec![1000, 1003]), T("v", "F32", 32, vec![2048, 1001]));
        let bytes = write_st(&p, &[&w, &v], 7);
        let cached = || {
            let (r, n) = resident_pages(&std::fs::File::open(&p).unwrap()).unwrap();
            r as f64 / n as f64
        };
        let direct_here = hostfirst::cache::DirectFiles::default();
        let fallback = direct_here.get(&std::fs::File::open(&p).unwrap()).is_none();
        let f = TensorFile::open(&p).unwrap();
        let mesh = Arc::new(Mesh::new(&[("x", 2)]).unwrap());
        let mut rules = ShardRules::new(Arc::clone(&mesh));
        rules.add("*", "x").unwrap();
        let owned: Vec<Owned> = (0..2).map(|p| Owned { position: p, device: Device::cuda(0) }).collect();
        let plan = ShardPlan::make(&f, &rules, &owned, ReadPolicy::default()).unwrap();
        for policy in [PageCache::Drop, PageCache::Bypass] {
            let file = std::fs::File::open(&p).unwrap();
            file.sync_all().unwrap();
            // SAFETY: advice on an open descriptor.
            assert_eq!(unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
            let mut at_end = None;
            let mut sink = |d: u64, t: u64| {
                if d == t {
                    at_end = Some(cached());
                }
                false
            };
            let opts = ShardOptions { page_cache: policy, progress: Some(&mut sink), ..Default::default() };
            let load = shard::run(&plan, opts).unwrap();
            for (e, s) in plan.entries.iter().zip(&load.shards) {
                let data = &bytes.iter().find(|(n, _)| n == e.name()).unwrap().1;
                let half = data.len() / 2;
                let want = &data[e.position as usize * half..(e.position as usize + 1) * half];
                assert!(buffer_bytes(&s.buffer) == want, "{policy:?}: {} at {}", e.name(), e.position);
                assert_eq!(s.buffer.lock().unwrap().device(), Device::cuda(0));
            }
            drop(load);
            let during = at_end.expect("a final progress call");
            match policy {
                PageCache::Drop => assert!(during > 0.9, "drop: {during:.3} cached before the run's end"),
                _ if fallback => eprintln!("O_DIRECT refused here: {:?}", direct_here.fallback()),
                _ => assert!(during <= 0.05, "cuda shard bypass: {:.1} % entered the cache", during * 100.0),
            }
            let c = cached();
            assert!(c <= 0.05, "{policy:?}: {:.1} % stays cached", c * 100.0);
        }
        hostfirst::place::release_cached_memory();
        assert_eq!(stand_in_query("stand_in_live_allocations"), 0);
    });
}
