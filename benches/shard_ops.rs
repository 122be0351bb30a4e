//! The shard-on-read operations of the benchmark driver (issue 14), one per process, one JSON line each.
//! Driven by `benches/run.py` (section `shard`).
//!
//!   shard-load FILE WORLD RANK DIM
//!       hostfirst: open + shard plan (a one-axis mesh of WORLD positions, every tensor split along DIM) for
//!       position RANK on cpu + shard::run. Reports the time, the shard bytes, the file bytes the reads took
//!       (counted at the pread level), the planned bytes and reads, and /proc/self/io read_bytes (bytes fetched
//!       from storage by this process).
//!   read-then-slice FILE WORLD RANK DIM
//!       baseline: what a loader without shard-on-read does: put each whole tensor on cpu, then copy rank
//!       RANK's part out of it (numpy-style slicing in memory).

use hostfirst::file::ReadPolicy;
use hostfirst::place::{put, PutOptions, Target};
use hostfirst::shard::{self, Mesh, Owned, ShardOptions, ShardPlan, ShardRules};
use hostfirst::{Device, TensorFile};
use std::sync::Arc;
use std::time::Instant;

/// This process's `read_bytes` from /proc/self/io (bytes it caused to be fetched from storage).
fn io_read_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("read_bytes:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn args(a: &[String]) -> (&str, u64, u64, usize) {
    (&a[0], a[1].parse().expect("WORLD"), a[2].parse().expect("RANK"), a[3].parse().expect("DIM"))
}

pub fn op_shard_load(a: &[String]) -> String {
    let (path, world, rank, dim) = args(a);
    let io0 = io_read_bytes();
    let t = Instant::now();
    let file = TensorFile::open(path).expect("open");
    let mesh = Arc::new(Mesh::new(&[("r", world)]).expect("mesh"));
    let mut rules = ShardRules::new(mesh);
    let spec = format!("{}r", "_,".repeat(dim));
    rules.add("*", &spec).expect("rule");
    let plan = ShardPlan::make(&file, &rules, &[Owned { position: rank, device: Device::CPU }], ReadPolicy::default())
        .expect("plan");
    let t_plan = t.elapsed().as_secs_f64();
    let load = shard::run(&plan, ShardOptions::default()).expect("run");
    let t_all = t.elapsed().as_secs_f64();
    let io = io_read_bytes() - io0;
    let runs: u64 = plan.entries.iter().map(|e| e.runs).sum();
    format!(
        r#"{{"op":"shard","impl":"hostfirst-shard","file":"{path}","world":{world},"rank":{rank},"dim":{dim},"tensors":{},"runs":{runs},"shard_bytes":{},"bytes_read":{},"planned_read":{},"reads":{},"file_bytes":{},"io_read_bytes":{io},"t_plan_s":{t_plan:.9},"t_s":{t_all:.9}}}"#,
        plan.entries.len(),
        plan.shard_bytes(),
        load.bytes_read(),
        plan.planned_read(),
        plan.files.iter().map(|f| f.reads).sum::<u64>(),
        file.data_bytes(),
    )
}

pub fn op_read_then_slice(a: &[String]) -> String {
    let (path, world, rank, dim) = args(a);
    let io0 = io_read_bytes();
    let t = Instant::now();
    let file = TensorFile::open(path).expect("open");
    let mut parts = Vec::with_capacity(file.len());
    let mut shard_bytes = 0u64;
    for i in 0..file.len() {
        let v = file.view_at(i).expect("view");
        let whole = put(&v, Target::Device(Device::CPU), PutOptions::default()).expect("put");
        let src = whole.host_bytes().expect("cpu");
        // Slice rank's part along `dim` out of the whole tensor in memory.
        let shape = v.shape();
        let elem = (v.dtype().bits() / 8) as usize;
        let outer: usize = shape[..dim].iter().product::<u64>() as usize;
        let inner: usize = shape[dim + 1..].iter().product::<u64>() as usize * elem;
        let len = (shape[dim] / world) as usize;
        let row = shape[dim] as usize * inner;
        let mut part = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            let at = o * row + rank as usize * len * inner;
            part.extend_from_slice(&src[at..at + len * inner]);
        }
        shard_bytes += part.len() as u64;
        parts.push(part);
    }
    let t_all = t.elapsed().as_secs_f64();
    let io = io_read_bytes() - io0;
    format!(
        r#"{{"op":"shard","impl":"read-then-slice","file":"{path}","world":{world},"rank":{rank},"dim":{dim},"tensors":{},"shard_bytes":{shard_bytes},"bytes_read":{},"file_bytes":{},"io_read_bytes":{io},"t_s":{t_all:.9}}}"#,
        parts.len(),
        file.data_bytes(),
        file.data_bytes(),
    )
}
