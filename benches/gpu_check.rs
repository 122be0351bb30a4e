//! The correctness op of the GPU harness (issue 23), run before any speed measurement on a GPU, and dry-run on the
//! stand-in driver by the test command. One process, one JSON record: `{"op": "gpu-check", "checks": [...]}`, each
//! check `{name, ok, detail | error, s}`; a failed check never stops the others.
//!
//!   gpu-check DIR BIG_BYTES [--skip NAME,NAME]
//!       DIR: scratch space for the test files. BIG_BYTES: the size of the one big tensor (over 4 GiB on a GPU;
//!       the dry run passes a small size: the same code path, scaled down). --skip: checks not to run (under
//!       compute-sanitizer the forked child is left out).
//!   gpu-census
//!       The census as JSON (`{"cuda": {status, reason, count}, "devices": [{device, uuid}]}`): run by run.py under
//!       `CUDA_VISIBLE_DEVICES` set to an empty list, a `GPU-` UUID and an out-of-range index.
//!   gpu-load-check DIR COUNT
//!       A load of COUNT tensors (every dtype width, sizes from 1 B to 4 MiB + 3, written once into DIR) to
//!       cuda:0 as one job: every tensor compared byte for byte with the file and checked for 256-byte
//!       alignment, all of them parts of one allocation; then one tensor exported through DLPack is kept while
//!       the load is freed and other allocations churn (allocated, written, freed), its bytes read through the
//!       exported pointer after; then the export is released and the device's free memory must be back.
//!
//! What it checks, byte for byte against the file's pattern: puts to cuda:0 through the staging ring and the
//! resident registration at 1 B, 4095 B, 16 MiB - 1, 16 MiB, 16 MiB + 1 and BIG_BYTES; sub-views (a row slice and
//! a strided narrow); an async put cancelled mid-way (nothing left allocated); `buffer_to` in every direction
//! (cpu, cuda_host, cuda:0, and cuda:0 <-> cuda:1 when there are two devices); a gather ring whose held batch
//! stays unchanged and is reused once released; the first batch zero-filled; out-of-memory refusals (the fit
//! check, and the driver's own); free memory from NVML (before the context) against `cuMemGetInfo` (after); the
//! time the first primary-context retain takes; a child forked after CUDA initialised (CUDA refused, cpu works);
//! a gather batch handed to consumers on other streams (the legacy stream, the per-thread stream 2, a stream of
//! the consumer's own destroyed before the release), each released by a deleter on another thread, the consumer's
//! queued read seeing its batch and the batch reused after; a DLPack release during a CUDA graph capture of
//! another "framework" (`cuStreamBeginCapture_v2` in global mode on a non-blocking stream), the capture still
//! valid at its end (issue 32).

use hostfirst::device::cuda::{context_mem_info, mem_info, Context, DeviceMemory, PinnedHostMemory};
use hostfirst::device::{census, BackendStatus, DeviceKind};
use hostfirst::place::export::{export_buffer, release, ConsumerStream, CopyPolicy};
use hostfirst::place::gather::Gather;
use hostfirst::place::op::{AsyncPutOptions, PutOp};
use hostfirst::place::{buffer_to, put, put_with_stats, release_cached_memory, PutOptions, Target};
use hostfirst::place::{load, Placed, Plan, Rules};
use hostfirst::{DType, Device, Status, TensorFile};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MIB: u64 = 1 << 20;

/// The few driver calls the checks make as a consumer or another framework would (a stream of its own, a copy
/// queued on it, a graph capture), looked up in the driver hostfirst loaded (`libcuda.so.1`).
struct Driver {
    stream_create: extern "C" fn(*mut usize, u32) -> i32,
    stream_destroy: extern "C" fn(usize) -> i32,
    stream_synchronize: extern "C" fn(usize) -> i32,
    ctx_synchronize: extern "C" fn() -> i32,
    dtoh_async: extern "C" fn(*mut std::ffi::c_void, u64, usize, usize) -> i32,
    dtoh: extern "C" fn(*mut std::ffi::c_void, u64, usize) -> i32,
    begin_capture: extern "C" fn(usize, i32) -> i32,
    end_capture: extern "C" fn(usize, *mut usize) -> i32,
    graph_destroy: extern "C" fn(usize) -> i32,
}

impl Driver {
    fn open() -> Result<Driver, String> {
        let lib = std::ffi::CString::new("libcuda.so.1").unwrap();
        // SAFETY: the driver is already loaded by hostfirst; dlopen returns it (or NULL).
        let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            return Err("libcuda.so.1 is not loadable".into());
        }
        let f = |name: &str| -> Result<*mut libc::c_void, String> {
            let c = std::ffi::CString::new(name).unwrap();
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(format!("the driver lacks {name}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is transmuted to its cuda.h C signature (handles and CUdeviceptr as integers).
        unsafe {
            Ok(Driver {
                stream_create: std::mem::transmute::<*mut libc::c_void, extern "C" fn(*mut usize, u32) -> i32>(f(
                    "cuStreamCreate",
                )?),
                stream_destroy: std::mem::transmute::<*mut libc::c_void, extern "C" fn(usize) -> i32>(f(
                    "cuStreamDestroy_v2",
                )?),
                stream_synchronize: std::mem::transmute::<*mut libc::c_void, extern "C" fn(usize) -> i32>(f(
                    "cuStreamSynchronize",
                )?),
                ctx_synchronize: std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> i32>(f(
                    "cuCtxSynchronize",
                )?),
                dtoh_async: std::mem::transmute::<
                    *mut libc::c_void,
                    extern "C" fn(*mut std::ffi::c_void, u64, usize, usize) -> i32,
                >(f("cuMemcpyDtoHAsync_v2")?),
                dtoh: std::mem::transmute::<*mut libc::c_void, extern "C" fn(*mut std::ffi::c_void, u64, usize) -> i32>(
                    f("cuMemcpyDtoH_v2")?,
                ),
                begin_capture: std::mem::transmute::<*mut libc::c_void, extern "C" fn(usize, i32) -> i32>(f(
                    "cuStreamBeginCapture_v2",
                )?),
                end_capture: std::mem::transmute::<*mut libc::c_void, extern "C" fn(usize, *mut usize) -> i32>(f(
                    "cuStreamEndCapture",
                )?),
                graph_destroy: std::mem::transmute::<*mut libc::c_void, extern "C" fn(usize) -> i32>(f(
                    "cuGraphDestroy",
                )?),
            })
        }
    }

    fn ok(r: i32, what: &str) -> Result<(), String> {
        if r == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed with CUresult {r}"))
        }
    }
}

extern "C" fn check_deleter(t: *mut hostfirst::dlpack::ManagedTensorVersioned) {
    hostfirst::dlpack::release(t as *mut std::ffi::c_void);
}
extern "C" fn check_legacy_deleter(t: *mut hostfirst::dlpack::ManagedTensor) {
    hostfirst::dlpack::release(t as *mut std::ffi::c_void);
}

/// A DLPack export (the versioned form) of `b` for `stream`, as a consumer gets it: (the managed struct's
/// address, for its deleter; the data pointer).
fn dlpack_export(
    b: &std::sync::Arc<std::sync::Mutex<hostfirst::place::Buffer>>,
    stream: ConsumerStream,
) -> Result<(usize, u64), String> {
    use hostfirst::dlpack::{Deleters, Published, Request};
    let req =
        Request { form: hostfirst::place::export::Form::Versioned, copy: CopyPolicy::IfNeeded, device: None, stream };
    let d = Deleters { versioned: check_deleter, legacy: check_legacy_deleter };
    match hostfirst::dlpack::export_buffer(b, &req, d).map_err(e2s)? {
        // SAFETY: a live export this process made.
        Published::Versioned(m) => Ok((m as usize, unsafe { (*m).dl_tensor.data as u64 + (*m).dl_tensor.byte_offset })),
        Published::Legacy(_) => Err("asked for the versioned form".into()),
    }
}

/// Runs the deleter of an export made by [`dlpack_export`] (once).
fn run_deleter(m: usize) {
    let m = m as *mut hostfirst::dlpack::ManagedTensorVersioned;
    // SAFETY: a live export; its deleter is called exactly once.
    unsafe { ((*m).deleter.expect("a deleter"))(m) };
}

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

/// The records so far, and the names of checks not to run.
struct Checks(Vec<serde_json::Value>, Vec<String>);

impl Checks {
    fn run(&mut self, name: &str, f: impl FnOnce() -> Check) {
        if self.1.iter().any(|s| s == name) {
            eprintln!("check {name}: skipped (--skip)");
            return;
        }
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
    // `--skip a,b`: checks not to run (under compute-sanitizer: the forked child).
    let skip: Vec<String> = match a.iter().position(|x| x == "--skip") {
        Some(i) => a.get(i + 1).map(|s| s.split(',').map(str::to_string).collect()).unwrap_or_default(),
        None => Vec::new(),
    };
    let mut c = Checks(Vec::new(), skip);
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

    c.run("gather-consumers-on-other-streams", || {
        let drv = Driver::open()?;
        let n = 8 * MIB;
        let (_, f) = tensor_file(&dir, n)?;
        let data = f.view("t").map_err(e2s)?.to_vec().map_err(e2s)?;
        let h = format!(r#"{{"tok":{{"dtype":"U16","shape":[{}],"data_offsets":[0,{n}]}}}}"#, n / 2);
        let mut img = (h.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(h.as_bytes());
        img.extend_from_slice(&data);
        let tf = TensorFile::from_bytes(img).map_err(e2s)?;
        let tok = tf.view("tok").map_err(e2s)?;
        let (b, t) = (64u64, 4097u64);
        let want = |offs: &[u64]| -> Vec<u8> {
            offs.iter().flat_map(|&o| data[(o * 2) as usize..((o + t) * 2) as usize].to_vec()).collect()
        };
        let mut g = Gather::new(Device::cuda(0), DType::U16, b, t).map_err(e2s)?;
        g.set_ring_bound(2).map_err(e2s)?;
        let nb = g.nbytes() as usize;
        let mut done = Vec::new();
        for (k, label) in ["legacy stream (1)", "per-thread stream (2)", "own stream, destroyed before the release"]
            .into_iter()
            .enumerate()
        {
            Context::get(0).map_err(e2s)?.bind().map_err(e2s)?;
            let (consumer, stream) = match k {
                0 => (ConsumerStream::Legacy, 1usize),
                1 => (ConsumerStream::PerThread, 2usize),
                _ => {
                    let mut s = 0usize;
                    Driver::ok((drv.stream_create)(&mut s, 1), "cuStreamCreate(non-blocking)")?;
                    (ConsumerStream::Raw(s), s)
                }
            };
            let offs: Vec<u64> = (0..b).map(|i| i * 997 + k as u64 * 131).collect();
            let batch = g.run(&tok, &offs).map_err(e2s)?;
            let addr = batch.lock().unwrap().address();
            let (m, data_ptr) = dlpack_export(&batch, consumer)?;
            drop(batch);
            if data_ptr != addr {
                return Err(format!("{label}: the export's data pointer {data_ptr:#x} is not the batch {addr:#x}"));
            }
            let seen = PinnedHostMemory::alloc_on(0, nb).map_err(e2s)?;
            Driver::ok((drv.dtoh_async)(seen.as_ptr() as *mut _, addr, nb, stream), "cuMemcpyDtoHAsync_v2")?;
            if k == 2 {
                Driver::ok((drv.stream_destroy)(stream), "cuStreamDestroy_v2")?;
            }
            std::thread::spawn(move || run_deleter(m)).join().map_err(|_| "the deleter thread panicked")?;
            let mut reused = false;
            for step in 0..3u64 {
                let offs2: Vec<u64> = (0..b).map(|i| i * 577 + step * 17 + 5).collect();
                let other = g.run(&tok, &offs2).map_err(e2s)?;
                reused |= other.lock().unwrap().address() == addr;
                let mut back = vec![0u8; nb];
                other.lock().unwrap().copy_to_host(&mut back).map_err(e2s)?;
                if back != want(&offs2) {
                    return Err(format!("{label}: a batch after the release differs from the file"));
                }
            }
            if k < 2 {
                Driver::ok((drv.stream_synchronize)(stream), "cuStreamSynchronize(consumer)")?;
            } else {
                Driver::ok((drv.ctx_synchronize)(), "cuCtxSynchronize")?;
            }
            if seen.as_slice() != want(&offs).as_slice() {
                return Err(format!("{label}: the consumer's queued read saw a rewritten batch"));
            }
            if !reused {
                return Err(format!("{label}: the released batch was never reused (ring {})", g.ring_len()));
            }
            done.push(label);
        }
        Ok(format!("{}: each read its batch, each released on another thread, each batch reused", done.join("; ")))
    });

    c.run("release-during-graph-capture", || {
        let drv = Driver::open()?;
        let (_, f) = tensor_file(&dir, 16 * MIB + 1)?;
        let v = f.view("t").map_err(e2s)?;
        let mut g = Gather::new(Device::cuda(0), DType::U8, 4, 4096).map_err(e2s)?;
        g.set_ring_bound(1).map_err(e2s)?;
        let batch = g.run(&v, &[0, 4096, 8192, 12288]).map_err(e2s)?;
        let addr = batch.lock().unwrap().address();
        let (m1, _) = dlpack_export(&batch, ConsumerStream::Legacy)?;
        drop(batch);
        let owned = std::sync::Arc::new(std::sync::Mutex::new(
            put(&v, Target::Device(Device::cuda(0)), PutOptions::default()).map_err(e2s)?,
        ));
        let (m2, _) = dlpack_export(&owned, ConsumerStream::PerThread)?;
        drop(owned);
        Context::get(0).map_err(e2s)?.bind().map_err(e2s)?;
        let mut s = 0usize;
        Driver::ok((drv.stream_create)(&mut s, 1), "cuStreamCreate(non-blocking)")?;
        Driver::ok((drv.begin_capture)(s, 0), "cuStreamBeginCapture_v2(global)")?;
        run_deleter(m1); // on the capturing thread, as a garbage collection inside the captured region
        let t2 = std::thread::spawn(move || run_deleter(m2)); // and on another thread (frees device memory)
        let joined = t2.join();
        let mut graph = 0usize;
        let ended = (drv.end_capture)(s, &mut graph);
        if graph != 0 {
            let _ = (drv.graph_destroy)(graph);
        }
        let _ = (drv.stream_destroy)(s);
        joined.map_err(|_| "the deleter thread panicked")?;
        Driver::ok(ended, "cuStreamEndCapture (the capture was invalidated by a release)")?;
        let kept = hostfirst::device::cuda::capture::deferred_releases();
        let again = g.run(&v, &[1, 2, 3, 4]).map_err(e2s)?;
        if again.lock().unwrap().address() != addr {
            return Err("the batch released during the capture was not reused after it".into());
        }
        if hostfirst::device::cuda::capture::deferred_releases() != 0 {
            return Err("releases kept during the capture were not done after it".into());
        }
        Ok(format!("capture valid at its end; {kept} release(s) kept until after it; the batch reused"))
    });

    c.run("forked-child", || {
        let (_, f) = tensor_file(&dir, 4095)?;
        let v = f.view("t").map_err(e2s)?;
        let host = put(&v, Target::Device(Device::CUDA_HOST), PutOptions::default()).map_err(e2s)?;
        // SAFETY: the child only calls hostfirst (whose fork handling this checks) and _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err("fork failed".into());
        }
        if pid == 0 {
            let cuda = DeviceMemory::alloc(0, 64).err().map(|e| e.status());
            let cpu = put(&v, Target::Device(Device::CPU), PutOptions::default()).map(|b| verify(&b, 0).is_ok());
            let mut one = [0u8; 4095];
            let pinned = host.copy_to_host(&mut one).err().map(|e| e.status());
            let ok =
                cuda == Some(Status::Unavailable) && matches!(cpu, Ok(true)) && pinned == Some(Status::Unavailable);
            // SAFETY: ends the child without running the parent's atexit handlers or destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            verify(&host, 0)?;
            Ok("the child: CUDA and cuda_host UNAVAILABLE, a cpu put byte-exact; the parent's cuda_host intact".into())
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

/// The load check's file: `count` tensors named `w.{i}` of every dtype width with sizes from 1 B to 4 MiB + 3
/// (every 256th tensor is the big one), the data region filled with [`pattern`] by file-data offset. Written
/// once per (count) into `dir`. Returns (path, each tensor's (offset, nbytes) in the data region).
fn load_check_file(dir: &Path, count: usize) -> Result<(PathBuf, Vec<(u64, u64)>), String> {
    const SIZES: [u64; 14] = [1, 2, 3, 7, 255, 256, 257, 1000, 4095, 4096, 4097, 65535, 65536, 65537];
    const DTYPES: [(&str, u64); 4] = [("U8", 1), ("F16", 2), ("F32", 4), ("F64", 8)];
    let mut hdr = serde_json::Map::new();
    let mut spans = Vec::with_capacity(count);
    let mut off = 0u64;
    for i in 0..count {
        let (dtype, width) = DTYPES[i % 4];
        let bytes = if i % 256 == 255 { 4 * MIB + 3 } else { SIZES[i % SIZES.len()] };
        let elems = (bytes / width).max(1);
        let nbytes = elems * width;
        hdr.insert(
            format!("w.{i}"),
            serde_json::json!({"dtype": dtype, "shape": [elems], "data_offsets": [off, off + nbytes]}),
        );
        spans.push((off, nbytes));
        off += nbytes;
    }
    let path = dir.join(format!("load-check-{count}.safetensors"));
    let mut h = serde_json::to_string(&hdr).map_err(|e| e.to_string())?;
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    let want_len = 8 + h.len() as u64 + off;
    if std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) != want_len {
        let mut w =
            std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(&path).map_err(|e| e.to_string())?);
        w.write_all(&(h.len() as u64).to_le_bytes()).map_err(|e| e.to_string())?;
        w.write_all(h.as_bytes()).map_err(|e| e.to_string())?;
        let chunk: Vec<u8> = (0..off).map(pattern).collect();
        w.write_all(&chunk).map_err(|e| e.to_string())?;
        w.flush().map_err(|e| e.to_string())?;
    }
    Ok((path, spans))
}

pub fn op_gpu_load_check(a: &[String]) -> String {
    let dir = PathBuf::from(a.first().expect("gpu-load-check DIR COUNT"));
    let count: usize = a.get(1).and_then(|s| s.parse().ok()).expect("gpu-load-check DIR COUNT");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut c = Checks(Vec::new(), Vec::new());
    let t0 = Instant::now();
    let mut file = None;
    c.run("load-check-file", || {
        let (path, spans) = load_check_file(&dir, count)?;
        let bytes: u64 = spans.iter().map(|s| s.1).sum();
        file = Some((path, spans));
        Ok(format!("{count} tensors, {bytes} bytes"))
    });
    let mut kept: Option<(usize, u64, u64, u64)> = None; // (export, data pointer, file offset, nbytes)
    let mut free_before = 0u64;
    c.run("load-every-tensor-byte-exact-and-aligned", || {
        let (path, spans) = file.as_ref().ok_or("no file")?;
        // The driver's own first-use allocations (streams, events, a first copy) come before the reading of
        // free memory that the end of the check compares with.
        {
            let (_, small) = tensor_file(&dir, 4095)?;
            drop(
                put(&small.view("t").map_err(e2s)?, Target::Device(Device::cuda(0)), PutOptions::default())
                    .map_err(e2s)?,
            );
            release_cached_memory();
        }
        free_before = context_mem_info(0).map_err(e2s)?.0;
        let f = TensorFile::open(path).map_err(e2s)?;
        let plan = Plan::make(&f, &Rules::parse(["*=cuda:0"]).map_err(e2s)?).map_err(e2s)?;
        let t = Instant::now();
        let loaded = load(&f, &plan, None).map_err(e2s)?;
        let secs = t.elapsed().as_secs_f64();
        let (mut lo, mut hi, mut padded) = (u64::MAX, 0u64, 0u64);
        let mut big = None;
        for (i, &(off, nbytes)) in spans.iter().enumerate() {
            let (name, placed) = loaded.at(i).ok_or_else(|| format!("tensor {i} missing"))?;
            let Placed::Buffer(b) = placed else { return Err(format!("{name} is not a buffer")) };
            let g = b.lock().unwrap();
            if g.device() != Device::cuda(0) || g.nbytes() != nbytes {
                return Err(format!("{name}: {} bytes on {}", g.nbytes(), g.device()));
            }
            let addr = g.address();
            if addr % 256 != 0 {
                return Err(format!("{name}: address {addr:#x} is not 256-byte aligned"));
            }
            verify(&g, off).map_err(|e| format!("{name}: {e}"))?;
            lo = lo.min(addr);
            hi = hi.max(addr + nbytes);
            padded += nbytes.div_ceil(256) * 256;
            if nbytes >= 4 * MIB && big.is_none() {
                big = Some((i, off, nbytes));
            }
        }
        if hi - lo > padded {
            return Err(format!("the parts span {} bytes, more than one allocation of {padded}", hi - lo));
        }
        let (i, off, nbytes) = big.ok_or("no big tensor")?;
        let Some((_, Placed::Buffer(b))) = loaded.at(i) else { return Err("the big tensor".into()) };
        let (m, ptr) = dlpack_export(b, ConsumerStream::Legacy)?;
        kept = Some((m, ptr, off, nbytes));
        let total: u64 = spans.iter().map(|s| s.1).sum();
        drop(loaded);
        Ok(format!(
            "{count} tensors ({total} bytes) in {secs:.3} s ({:.2} GB/s), every one byte-exact and 256-byte aligned, \
             all parts of one {}-byte span",
            total as f64 / secs / 1e9,
            hi - lo
        ))
    });
    c.run("kept-dlpack-part-survives-the-load-and-churn", || {
        let (m, ptr, off, nbytes) = kept.ok_or("nothing was kept")?;
        // Other allocations come and go, written, while only the export holds the load's arena.
        let (_, f) = tensor_file(&dir, 8 * MIB + 5)?;
        let v = f.view("t").map_err(e2s)?;
        for round in 0..16u64 {
            let size = ((round % 5) + 1) * 3 * MIB + round * 4097;
            let raw = DeviceMemory::alloc(0, size as usize).map_err(e2s)?;
            let b = put(&v, Target::Device(Device::cuda(0)), PutOptions::default()).map_err(e2s)?;
            drop((raw, b));
        }
        let drv = Driver::open()?;
        Context::get(0).map_err(e2s)?.bind().map_err(e2s)?;
        let mut back = vec![0u8; nbytes as usize];
        Driver::ok((drv.dtoh)(back.as_mut_ptr() as *mut _, ptr, back.len()), "cuMemcpyDtoH_v2(exported part)")?;
        if let Some(j) = (0..back.len()).find(|&j| back[j] != pattern(off + j as u64)) {
            return Err(format!("byte {j} of the kept part changed after the load was freed"));
        }
        run_deleter(m);
        Ok(format!("{nbytes} bytes through the exported pointer, unchanged after 16 allocate/write/free rounds"))
    });
    c.run("device-memory-back-after-the-load", || {
        release_cached_memory();
        let after = context_mem_info(0).map_err(e2s)?.0;
        if after + 8 * MIB < free_before {
            return Err(format!("free {free_before} before the load, {after} after everything was released"));
        }
        Ok(format!("free {free_before} before, {after} after"))
    });
    let failed: Vec<&str> =
        c.0.iter().filter(|r| r["ok"] == false).map(|r| r["name"].as_str().unwrap_or("?")).collect();
    serde_json::json!({
        "op": "gpu-load-check", "impl": "hostfirst", "tensors": count, "checks": c.0, "failed_checks": failed,
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
