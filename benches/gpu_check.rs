//! The correctness op of the GPU harness (issue 23), run before any speed measurement on a GPU, and dry-run on the
//! stand-in driver by the test command. One process, one JSON record: `{"op": "gpu-check", "checks": [...]}`, each
//! check `{name, ok, detail | error, s}`; a failed check never stops the others.
//!
//!   gpu-check DIR BIG_BYTES
//!       DIR: scratch space for the test files. BIG_BYTES: the size of the one big tensor (over 4 GiB on a GPU;
//!       the dry run passes a small size: the same code path, scaled down).
//!   gpu-census
//!       The census as JSON (`{"cuda": {status, reason, count}, "devices": [{device, uuid}]}`): run by run.py under
//!       `CUDA_VISIBLE_DEVICES` set to an empty list, a `GPU-` UUID and an out-of-range index.
//!
//! What it checks, byte for byte against the file's pattern: puts to cuda:0 through the staging ring and the
//! resident registration at 1 B, 4095 B, 16 MiB - 1, 16 MiB, 16 MiB + 1 and BIG_BYTES; sub-views (a row slice and
//! a strided narrow); an async put cancelled mid-way (nothing left allocated); `buffer_to` in every direction
//! (cpu, cuda_host, cuda:0, and cuda:0 <-> cuda:1 when there are two devices); a gather ring whose held batch
//! stays unchanged and is reused once released; the first batch zero-filled; out-of-memory refusals (the fit
//! check, and the driver's own); free memory from NVML (before the context) against `cuMemGetInfo` (after); the
//! time the first primary-context retain takes; a child forked after CUDA initialised (CUDA refused, cpu works).

use hostfirst::device::cuda::{context_mem_info, mem_info, Context, DeviceMemory};
use hostfirst::device::{census, BackendStatus, DeviceKind};
use hostfirst::place::export::{export_buffer, release, ConsumerStream, CopyPolicy};
use hostfirst::place::gather::Gather;
use hostfirst::place::op::{AsyncPutOptions, PutOp};
use hostfirst::place::{buffer_to, put, put_with_stats, release_cached_memory, PutOptions, Target};
use hostfirst::{DType, Device, Status, TensorFile};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MIB: u64 = 1 << 20;

/// The byte at file-data offset `i` of every test tensor: position-dependent, never constant over a page.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B1) >> 13) as u8 ^ (i >> 20) as u8
}

/// Writes a file of one U8 tensor "t" of `n` bytes of the pattern (in 64 MiB pieces; big files stay cheap).
fn write_tensor(path: &Path, n: u64) -> std::io::Result<()> {
    let h = format!(r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    f.write_all(&(h.len() as u64).to_le_bytes())?;
    f.write_all(h.as_bytes())?;
    let mut off = 0u64;
    let mut buf = vec![0u8; (64 * MIB).min(n.max(1)) as usize];
    while off < n {
        let k = (n - off).min(buf.len() as u64) as usize;
        for (j, b) in buf[..k].iter_mut().enumerate() {
            *b = pattern(off + j as u64);
        }
        f.write_all(&buf[..k])?;
        off += k as u64;
    }
    f.flush()
}

/// Compares a buffer with the pattern from `start`, reading it back in 64 MiB pieces.
fn verify(b: &hostfirst::place::Buffer, start: u64) -> Result<(), String> {
    let n = b.nbytes();
    let mut buf = vec![0u8; (64 * MIB).min(n.max(1)) as usize];
    let mut off = 0u64;
    while off < n {
        let k = (n - off).min(buf.len() as u64) as usize;
        b.read_at(off, &mut buf[..k]).map_err(|e| e.to_string())?;
        if let Some(j) = (0..k).find(|&j| buf[j] != pattern(start + off + j as u64)) {
            return Err(format!(
                "byte {} of {n} differs: {} != {}",
                off + j as u64,
                buf[j],
                pattern(start + off + j as u64)
            ));
        }
        off += k as u64;
    }
    Ok(())
}

type Check = Result<String, String>;

fn e2s(e: hostfirst::Error) -> String {
    format!("{:?}: {}", e.status(), e.message())
}

struct Checks(Vec<serde_json::Value>);

impl Checks {
    fn run(&mut self, name: &str, f: impl FnOnce() -> Check) {
        let t = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
            Err(format!(
                "panicked: {:?}",
                p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            ))
        });
        let s = (t.elapsed().as_secs_f64() * 1e3).round() / 1e3;
        let rec = match r {
            Ok(d) => serde_json::json!({"name": name, "ok": true, "detail": d, "s": s}),
            Err(e) => serde_json::json!({"name": name, "ok": false, "error": e, "s": s}),
        };
        eprintln!("check {}", rec);
        self.0.push(rec);
    }
}

fn tensor_file(dir: &Path, n: u64) -> Result<(PathBuf, TensorFile), String> {
    let path = dir.join(format!("check-{n}.safetensors"));
    if std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) < n {
        write_tensor(&path, n).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let f = TensorFile::open(&path).map_err(e2s)?;
    Ok((path, f))
}

fn put_check(dir: &Path, n: u64, resident: bool) -> Check {
    let (_, f) = tensor_file(dir, n)?;
    let v = f.view("t").map_err(e2s)?;
    let t = Instant::now();
    let (b, st) = put_with_stats(&v, Target::Device(Device::cuda(0)), PutOptions { resident, ..PutOptions::default() })
        .map_err(e2s)?;
    let secs = t.elapsed().as_secs_f64();
    verify(&b, 0)?;
    Ok(format!("{n} bytes in {secs:.3} s; staged_instead {}, register {:.3} s", st.staged_instead, st.register_seconds))
}

pub fn op_gpu_check(a: &[String]) -> String {
    let dir = PathBuf::from(a.first().expect("gpu-check DIR BIG_BYTES"));
    let big: u64 = a.get(1).and_then(|s| s.parse().ok()).expect("gpu-check DIR BIG_BYTES");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut c = Checks(Vec::new());
    let t0 = Instant::now();

    // Before anything retains the context: NVML's view, then the cost of the first retain, then the context's view.
    let mut nvml = None;
    c.run("nvml-before-context", || {
        if Context::is_retained(0) {
            return Err("the context was already retained".into());
        }
        let m = mem_info(0).map_err(e2s)?;
        nvml = Some(m);
        Ok(format!("free {} of {} (NVML, or the context when NVML is missing)", m.0, m.1))
    });
    c.run("context-creation", || {
        if Context::is_retained(0) {
            return Ok("not measured: the memory reading above created the context (NVML missing)".into());
        }
        let t = Instant::now();
        Context::get(0).map_err(e2s)?;
        Ok(format!("first cuDevicePrimaryCtxRetain: {:.3} s", t.elapsed().as_secs_f64()))
    });
    c.run("nvml-vs-cuMemGetInfo", || {
        let (free, total) = context_mem_info(0).map_err(e2s)?;
        let (nf, nt) = nvml.ok_or("no NVML reading")?;
        let d = format!(
            "cuMemGetInfo free {free} of {total}; NVML free {nf} of {nt}; free differs by {} MiB",
            (nf as i64 - free as i64) / MIB as i64
        );
        // NVML counts the whole board, cuMemGetInfo what this context can allocate: totals may differ by the
        // driver's reservation, never by more than a tenth.
        if total == 0 || nt == 0 || total.abs_diff(nt) > nt / 10 {
            Err(d)
        } else {
            Ok(d)
        }
    });

    for n in [1, 4095, 16 * MIB - 1, 16 * MIB, 16 * MIB + 1, big] {
        for resident in [false, true] {
            let name = format!("put-{}-{n}", if resident { "resident" } else { "ring" });
            c.run(&name, || put_check(&dir, n, resident));
            release_cached_memory();
        }
    }

    c.run("sub-views", || {
        let (path, _) = tensor_file(&dir, 16 * MIB + 1)?;
        // The same bytes seen as [rows, 4097]: a row slice (one range) and a narrow on the inner dimension (strided).
        let (rows, cols) = ((16 * MIB + 1) / 4097, 4097u64);
        let h = format!(r#"{{"m":{{"dtype":"U8","shape":[{rows},{cols}],"data_offsets":[0,{}]}}}}"#, rows * cols);
        let mut img = (h.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(h.as_bytes());
        let data = std::fs::read(&path).map_err(|e| e.to_string())?;
        let hlen = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize + 8;
        img.extend_from_slice(&data[hlen..hlen + (rows * cols) as usize]);
        let f = TensorFile::from_bytes(img).map_err(e2s)?;
        let m = f.view("m").map_err(e2s)?;
        let s = m.slice_rows(100, 300).map_err(e2s)?;
        let b = put(&s, Target::Device(Device::cuda(0)), PutOptions::default()).map_err(e2s)?;
        verify(&b, 100 * cols)?;
        let nrw = m.narrow(1, 17, 1000).map_err(e2s)?;
        for resident in [false, true] {
            let b = put(&nrw, Target::Device(Device::cuda(0)), PutOptions { resident, ..PutOptions::default() })
                .map_err(e2s)?;
            let mut back = vec![0u8; b.nbytes() as usize];
            b.copy_to_host(&mut back).map_err(e2s)?;
            for r in 0..rows {
                for k in 0..1000u64 {
                    if back[(r * 1000 + k) as usize] != pattern(r * cols + 17 + k) {
                        return Err(format!("narrow (resident {resident}): row {r} col {k} differs"));
                    }
                }
            }
        }
        Ok(format!("row slice [100, 300) of [{rows}, {cols}] and narrow(1, 17, 1000), ring and resident"))
    });

    c.run("async-put-cancelled", || {
        let (_, f) = tensor_file(&dir, 64 * MIB)?;
        let v = f.view("t").map_err(e2s)?;
        let before = context_mem_info(0).map_err(e2s)?.0;
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let k = calls.clone();
        let opts = AsyncPutOptions {
            tuning: hostfirst::engine::Tuning { chunk: 1 << 20, staging: 4 << 20, ..Default::default() },
            progress: Some(Box::new(move |_, _| k.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1)),
            ..Default::default()
        };
        let op = PutOp::start(&v, Target::Device(Device::cuda(0)), opts).map_err(e2s)?;
        op.cancel(); // mid-way from the caller, as well as from the callback after its second call
        match op.wait() {
            Err(e) if e.status() == Status::Cancelled => {}
            Err(e) => return Err(e2s(e)),
            Ok(_) => return Ok("finished before the cancel was seen (too fast to cancel; not a failure)".into()),
        }
        drop(op);
        release_cached_memory();
        let after = context_mem_info(0).map_err(e2s)?.0;
        if after + MIB < before {
            return Err(format!("free memory {before} before, {after} after: the cancelled put left memory"));
        }
        Ok(format!(
            "cancelled after {} progress calls; free memory back ({before} -> {after})",
            calls.load(std::sync::atomic::Ordering::SeqCst)
        ))
    });

    c.run("buffer_to-every-direction", || {
        let (_, f) = tensor_file(&dir, 16 * MIB + 1)?;
        let v = f.view("t").map_err(e2s)?;
        let ncuda = census().devices.iter().filter(|d| d.device.kind == DeviceKind::CUDA).count() as u32;
        let mut devices = vec![Device::CPU, Device::CUDA_HOST, Device::cuda(0)];
        if ncuda > 1 {
            devices.push(Device::cuda(1));
        }
        let mut done = Vec::new();
        for &from in &devices {
            let b = put(&v, Target::Device(from), PutOptions::default()).map_err(e2s)?;
            for &to in &devices {
                let c = buffer_to(&b, Target::Device(to)).map_err(e2s)?;
                verify(&c, 0).map_err(|e| format!("{from} -> {to}: {e}"))?;
                done.push(format!("{from}->{to}"));
            }
        }
        Ok(done.join(" "))
    });

    c.run("gather-ring-held-and-released", || {
        let n = 8 * MIB;
        let (_, f) = tensor_file(&dir, n)?;
        let h = format!(r#"{{"tok":{{"dtype":"U16","shape":[{}],"data_offsets":[0,{n}]}}}}"#, n / 2);
        let data = f.view("t").map_err(e2s)?.to_vec().map_err(e2s)?;
        let mut img = (h.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(h.as_bytes());
        img.extend_from_slice(&data);
        let tf = TensorFile::from_bytes(img).map_err(e2s)?;
        let tok = tf.view("tok").map_err(e2s)?;
        let (b, t) = (16u64, 1025u64);
        let mut g = Gather::new(Device::cuda(0), DType::U16, b, t).map_err(e2s)?;
        let mut zero = vec![1u8; g.nbytes() as usize];
        g.copy_to_host(&mut zero).map_err(e2s)?;
        if zero.iter().any(|&x| x != 0) {
            return Err("the first batch is not zero-filled".into());
        }
        let want = |offs: &[u64]| -> Vec<u8> {
            offs.iter().flat_map(|&o| data[(o * 2) as usize..((o + t) * 2) as usize].to_vec()).collect()
        };
        let read = |batch: &hostfirst::place::gather::Batch| -> Result<Vec<u8>, String> {
            let g = batch.lock().unwrap();
            let mut out = vec![0u8; g.nbytes() as usize];
            g.copy_to_host(&mut out).map_err(e2s)?;
            Ok(out)
        };
        let offs1: Vec<u64> = (0..b).map(|i| i * 1000 + 3).collect();
        let held = g.run(&tok, &offs1).map_err(e2s)?;
        let export = export_buffer(&held, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).map_err(e2s)?;
        for step in 0..5u64 {
            let offs: Vec<u64> = (0..b).map(|i| i * 777 + step * 31).collect();
            let batch = g.run(&tok, &offs).map_err(e2s)?;
            if read(&batch)? != want(&offs) {
                return Err(format!("step {step}: the batch differs from the file"));
            }
        }
        if read(&held)? != want(&offs1) {
            return Err("the held batch changed while it was held".into());
        }
        let addr = held.lock().unwrap().address();
        release(&export.keep, export.release_on).map_err(e2s)?;
        drop((export, held));
        let mut reused = false;
        for _ in 0..g.ring_len() {
            let batch = g.run(&tok, &offs1).map_err(e2s)?;
            reused |= batch.lock().unwrap().address() == addr;
            if read(&batch)? != want(&offs1) {
                return Err("a batch after the release differs".into());
            }
        }
        Ok(format!(
            "ring of {} batches, held batch unchanged over 5 runs, reused after release: {reused}",
            g.ring_len()
        ))
    });

    c.run("out-of-memory-refused", || {
        let (free, total) = context_mem_info(0).map_err(e2s)?;
        let rows = (free / 4096) * 2 + 1;
        let e = Gather::new(Device::cuda(0), DType::U16, rows, 2048)
            .err()
            .ok_or("a gather over twice the free memory was accepted")?;
        if e.status() != Status::OutOfMemory || !e.message().contains("free") {
            return Err(format!("fit check: {}", e2s(e)));
        }
        let e = DeviceMemory::alloc(0, (total + (1 << 30)) as usize)
            .err()
            .ok_or("the driver allocated more than the device has")?;
        if e.status() != Status::OutOfMemory {
            return Err(format!("driver: {}", e2s(e)));
        }
        if context_mem_info(0).map_err(e2s)?.0 + 64 * MIB < free {
            return Err("free memory dropped after the refusals".into());
        }
        Ok(format!(
            "fit check: {}; driver: {}",
            e2s(Gather::new(Device::cuda(0), DType::U16, rows, 2048).err().unwrap()),
            e.message()
        ))
    });

    c.run("forked-child", || {
        let (_, f) = tensor_file(&dir, 4095)?;
        let v = f.view("t").map_err(e2s)?;
        // SAFETY: the child only calls hostfirst (whose fork handling this checks) and _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err("fork failed".into());
        }
        if pid == 0 {
            let cuda = DeviceMemory::alloc(0, 64).err().map(|e| e.status());
            let cpu = put(&v, Target::Device(Device::CPU), PutOptions::default()).map(|b| verify(&b, 0).is_ok());
            let ok = cuda == Some(Status::Unavailable) && matches!(cpu, Ok(true));
            // SAFETY: ends the child without running the parent's atexit handlers or destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok("the child: CUDA UNAVAILABLE, a cpu put byte-exact".into())
        } else {
            Err(format!("the child exited with status {status:#x}"))
        }
    });

    let failed: Vec<&str> =
        c.0.iter().filter(|r| r["ok"] == false).map(|r| r["name"].as_str().unwrap_or("?")).collect();
    serde_json::json!({
        "op": "gpu-check", "impl": "hostfirst", "big_bytes": big, "checks": c.0, "failed_checks": failed,
        "outcome": if failed.is_empty() { "passed" } else { "failed" },
        "wall_s": t0.elapsed().as_secs_f64(),
    })
    .to_string()
}

pub fn op_gpu_census(_a: &[String]) -> String {
    let c = census();
    let cuda = c.backends.iter().find(|b| b.name == "cuda");
    serde_json::json!({
        "op": "gpu-census", "impl": "hostfirst",
        "cuda": cuda.map(|b| serde_json::json!({
            "status": format!("{:?}", b.status), "available": b.status == BackendStatus::Available,
            "reason": b.reason, "count": b.device_count})),
        "devices": c.devices.iter().filter(|d| d.device.kind == DeviceKind::CUDA)
            .map(|d| serde_json::json!({"device": d.device.to_string(), "uuid": d.uuid, "name": d.name}))
            .collect::<Vec<_>>(),
        "CUDA_VISIBLE_DEVICES": std::env::var("CUDA_VISIBLE_DEVICES").ok(),
    })
    .to_string()
}
