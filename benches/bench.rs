//! hostfirst benchmark driver: ONE operation per process, one JSON line on stdout.
//!
//! Not a test and not a criterion harness (`harness = false`); `cargo test` never runs it. Driven by
//! `benches/run.py` (through `bash benches/run.sh`), which starts a fresh process for every measurement.
//!
//! Ops:
//!   open FILE                      hostfirst: open + list names + metadata (+ per-tensor dtype/shape, timed apart)
//!   rust-safetensors FILE          peer: safetensors crate `SafeTensors::deserialize` on a memmap2 mapping
//!   put-cpu FILE TENSOR            hostfirst: place::put to Device::CPU; GB/s and VmHWM
//!   memcpy NBYTES THREADS [fresh|fresh-thp]
//!                                  baseline: multi-thread memcpy between pre-faulted buffers ("fresh": new dst;
//!                                  "fresh-thp": new mmap'd dst with MADV_HUGEPAGE, like hostfirst's buffers)
//!   fill-cpu FILE TENSOR           hostfirst: place::put::fill into a pre-faulted cpu Buffer (reused destination)
//!   pread FILE THREADS [fresh]     baseline: page-cache pread of the whole file into a pre-faulted buffer ("fresh":
//!                                  into newly allocated memory, its first-touch faults included)
//!   put-cow FILE TENSOR            hostfirst: copy-on-write put to cpu (private mapping populated for reading);
//!                                  time, anonymous RSS growth, then the cost of writing 1 byte per page of 64 MiB
//!   load-all FILE                  hostfirst: open + put every tensor to cpu (many-tensor files)
//!   load-rules FILE                hostfirst: open + plan + place::load with the one rule `*=cpu` (the whole-file API)
//!   rust-safetensors-load-all FILE peer: safetensors crate deserialize + to_vec every tensor
//!   gather-readat FILE TENSOR B T ITERS SEED
//!                                  B random T+1-token windows of a u16 tensor with hostfirst's existing
//!                                  View::read_at (NOT the gather primitive); p50/p99 per batch
//!   gather FILE TENSOR B T ITERS SEED
//!                                  hostfirst's gather primitive (place::Gather): x and y = two [B, T] u16 gathers at
//!                                  offsets and offsets+1, offsets drawn by place::gather::random_offsets; p50/p99
//!   gather1 FILE TENSOR B T ITERS SEED
//!                                  the same with one [B, T+1] gather (x = row[..T], y = row[1..] as views)
//!   gather1p FILE TENSOR B T ITERS SEED
//!                                  gather1 after View::prefault (its one-time cost reported as prefault_s)
//!   resident FILE                  fraction of the file's pages in the page cache (mincore)
//!   gpu-put, gpu-gather, gpu-seeds the GPU section (benches/gpu_ops.rs; run on a GPU by benches/gpu/run.sh)
//!   gpu-check, gpu-census         the GPU correctness op and the census (benches/gpu_check.rs), run first
//!   gpu-load-check                a load of a few thousand tensors to cuda:0, checked (benches/gpu_check.rs)
//!   shard-load, read-then-slice    shard-on-read vs read-then-slice (benches/shard_ops.rs)
//!   many-paired, open-paired       hostfirst's C API vs the safetensors crate in the same process, paired
//!                                  rounds (benches/paired_ops.rs)

mod gpu_check;
mod gpu_ops;
mod paired_ops;
mod shard_ops;

use hostfirst::place::{put, PutOptions, Target};
use hostfirst::{Device, TensorFile};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix(field) {
            if let Some(rest) = rest.strip_prefix(':') {
                return rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
        }
    }
    0
}

fn rss() -> (u64, u64, u64) {
    (status_kib("VmRSS"), status_kib("RssAnon"), status_kib("RssFile"))
}

fn header_len(path: &str) -> u64 {
    let f = File::open(path).expect("open");
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, 0).expect("read header length");
    u64::from_le_bytes(b)
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// A buffer whose pages are all faulted in (written), so copies into it measure bandwidth, not faults.
fn prefaulted(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    for i in (0..n).step_by(4096) {
        v[i] = 1;
    }
    v
}

fn split_copy(dst: &mut [u8], src: &[u8], threads: usize) {
    let per = dst.len().div_ceil(threads.max(1));
    std::thread::scope(|s| {
        for (d, sr) in dst.chunks_mut(per).zip(src.chunks(per)) {
            s.spawn(move || d.copy_from_slice(sr));
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let op = args.first().map(String::as_str).unwrap_or("");
    let out = match op {
        "open" => op_open(&args[1]),
        "rust-safetensors" => op_rust_st(&args[1]),
        "put-cpu" => op_put(&args[1], &args[2]),
        "memcpy" => {
            op_memcpy(args[1].parse().unwrap(), args[2].parse().unwrap(), args.get(3).map(String::as_str).unwrap_or(""))
        }
        "fill-cpu" => op_fill(&args[1], &args[2]),
        "pread" => op_pread(&args[1], args[2].parse().unwrap(), args.get(3).is_some_and(|a| a == "fresh")),
        "put-cow" => op_put_cow(&args[1], &args[2]),
        "load-all" => op_load_all(&args[1]),
        "load-rules" => op_load_rules(&args[1]),
        "rust-safetensors-load-all" => op_rust_st_load_all(&args[1]),
        "gather-readat" => op_gather_readat(&args[1..]),
        "resident" => op_resident(&args[1]),
        "gather" => op_gather(&args[1..], false, false),
        "gather1" => op_gather(&args[1..], true, false),
        "gather1p" => op_gather(&args[1..], true, true),
        "gpu-put" => gpu_ops::op_gpu_put(&args[1..]),
        "gpu-gather" => gpu_ops::op_gpu_gather(&args[1..]),
        "gpu-seeds" => gpu_ops::op_gpu_seeds(&args[1..]),
        "gpu-check" => gpu_check::op_gpu_check(&args[1..]),
        "gpu-load" => gpu_ops::op_gpu_load(&args[1..]),
        "gpu-census" => gpu_check::op_gpu_census(&args[1..]),
        "gpu-load-check" => gpu_check::op_gpu_load_check(&args[1..]),
        "shard-load" => shard_ops::op_shard_load(&args[1..]),
        "read-then-slice" => shard_ops::op_read_then_slice(&args[1..]),
        "many-paired" => paired_ops::op_many_paired(&args[1..]),
        "open-paired" => paired_ops::op_open_paired(&args[1..]),
        _ => {
            eprintln!("usage: see the top of benches/bench.rs");
            std::process::exit(2);
        }
    };
    println!("{out}");
}

fn op_open(path: &str) -> String {
    let hl = header_len(path);
    let (r0, a0, f0) = rss();
    let t = Instant::now();
    let file = TensorFile::open(path).expect("open");
    let t_open = secs(t);
    let mut names = 0usize;
    let mut name_bytes = 0usize;
    for n in file.names() {
        names += 1;
        name_bytes += n.len();
    }
    let mut meta = 0usize;
    for i in 0..file.metadata_len() {
        if let Some((k, v)) = file.metadata_entry(i) {
            meta += k.len() + v.len();
        }
    }
    let t_list = secs(t);
    let t2 = Instant::now();
    let mut elems = 0u64;
    for i in 0..file.len() {
        let v = file.view_at(i).expect("view");
        elems = elems.wrapping_add(v.shape().iter().product::<u64>()).wrapping_add(v.dtype() as u64);
    }
    let t_views = secs(t2);
    let (r1, a1, f1) = rss();
    std::hint::black_box((name_bytes, meta, elems));
    format!(
        r#"{{"op":"open","impl":"hostfirst","file":"{path}","tensors":{names},"header_bytes":{hl},"t_open_s":{t_open:.9},"t_open_list_meta_s":{t_list:.9},"t_views_s":{t_views:.9},"rss_before_kib":{r0},"rss_after_kib":{r1},"anon_growth_kib":{},"file_growth_kib":{}}}"#,
        a1 as i64 - a0 as i64,
        f1 as i64 - f0 as i64
    )
}

fn op_rust_st(path: &str) -> String {
    let hl = header_len(path);
    let (r0, a0, f0) = rss();
    let t = Instant::now();
    let f = File::open(path).expect("open");
    // SAFETY: read-only mapping of a file nobody truncates during the benchmark.
    let mmap = unsafe { memmap2::Mmap::map(&f).expect("mmap") };
    let (_, meta) = safetensors::SafeTensors::read_metadata(&mmap).expect("metadata");
    let st = safetensors::SafeTensors::deserialize(&mmap).expect("deserialize");
    let mut n = 0usize;
    let mut acc = 0usize;
    for name in st.names() {
        n += 1;
        acc += name.len();
    }
    if let Some(m) = meta.metadata() {
        for (k, v) in m {
            acc += k.len() + v.len();
        }
    }
    let t_list = secs(t);
    let t2 = Instant::now();
    for (_, v) in st.tensors() {
        acc = acc.wrapping_add(v.shape().iter().product::<usize>()).wrapping_add(v.dtype() as usize);
    }
    let t_views = secs(t2);
    let (r1, a1, f1) = rss();
    std::hint::black_box(acc);
    format!(
        r#"{{"op":"open","impl":"rust-safetensors","file":"{path}","tensors":{n},"header_bytes":{hl},"t_open_list_meta_s":{t_list:.9},"t_views_s":{t_views:.9},"rss_before_kib":{r0},"rss_after_kib":{r1},"anon_growth_kib":{},"file_growth_kib":{}}}"#,
        a1 as i64 - a0 as i64,
        f1 as i64 - f0 as i64
    )
}

fn op_put(path: &str, tensor: &str) -> String {
    let (r0, _, _) = rss();
    let t = Instant::now();
    let file = TensorFile::open(path).expect("open");
    let view = file.view(tensor).expect("view");
    let t_open = secs(t);
    let t = Instant::now();
    let buf = put(&view, Target::Device(Device::CPU), PutOptions::default()).expect("put");
    let t_put = secs(t);
    let bytes = buf.nbytes();
    let host = buf.host_bytes().expect("host");
    // One spot check that the data arrived (first/last 8 bytes).
    let mut chk = [0u8; 8];
    view.read_at(bytes - 8, &mut chk).expect("read");
    assert_eq!(&host[host.len() - 8..], &chk);
    let hwm = status_kib("VmHWM");
    let (r1, a1, _) = rss();
    let threads = hostfirst::place::parallel::default_threads();
    drop(buf);
    format!(
        r#"{{"op":"put-cpu","impl":"hostfirst","file":"{path}","bytes":{bytes},"threads":{threads},"t_open_s":{t_open:.9},"t_s":{t_put:.9},"gbps":{:.4},"rss_before_kib":{r0},"rss_after_kib":{r1},"anon_after_kib":{a1},"vmhwm_kib":{hwm}}}"#,
        bytes as f64 / 1e9 / t_put
    )
}

fn op_memcpy(n: usize, threads: usize, mode: &str) -> String {
    let src = prefaulted(n);
    let t;
    let fresh = !mode.is_empty();
    if mode == "fresh-thp" {
        // A fresh anonymous mapping with MADV_HUGEPAGE, as hostfirst's host allocations are made.
        // SAFETY: anonymous private mapping, checked; unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(p, n, libc::MADV_HUGEPAGE) };
        // SAFETY: p is a live mapping of n bytes owned here.
        let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) };
        let t0 = Instant::now();
        split_copy(dst, &src, threads);
        t = secs(t0);
        std::hint::black_box(&dst);
        // SAFETY: unmapping our own mapping; dst is not used after.
        unsafe { libc::munmap(p, n) };
    } else if fresh {
        // Destination freshly mapped (pages faulted by the copy itself), like a put's new buffer.
        let mut dst = Vec::<u8>::with_capacity(n);
        let t0 = Instant::now();
        // SAFETY: split_copy writes every byte before anything reads it.
        unsafe { dst.set_len(n) };
        split_copy(&mut dst, &src, threads);
        t = secs(t0);
        std::hint::black_box(&dst);
    } else {
        let mut dst = prefaulted(n);
        split_copy(&mut dst, &src, threads); // warm-up pass
        let t0 = Instant::now();
        split_copy(&mut dst, &src, threads);
        t = secs(t0);
        std::hint::black_box(&dst);
    }
    let hwm = status_kib("VmHWM");
    format!(
        r#"{{"op":"memcpy","impl":"{}","bytes":{n},"threads":{threads},"t_s":{t:.9},"gbps":{:.4},"vmhwm_kib":{hwm}}}"#,
        match mode {
            "fresh-thp" => "memcpy-fresh-dst-thp",
            "fresh" => "memcpy-fresh-dst",
            _ => "memcpy-prefaulted",
        },
        n as f64 / 1e9 / t
    )
}

/// hostfirst's `place::put::fill` into a cpu Buffer whose pages were faulted beforehand (steady state: a reused
/// destination), the like-for-like counterpart of the pre-faulted memcpy and pread baselines.
fn op_fill(path: &str, tensor: &str) -> String {
    let file = TensorFile::open(path).expect("open");
    let view = file.view(tensor).expect("view");
    let mut buf = hostfirst::place::Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), Device::CPU)
        .expect("alloc");
    let host = buf.host_bytes_mut().expect("host");
    for i in (0..host.len()).step_by(4096) {
        host[i] = 1;
    }
    let t0 = Instant::now();
    hostfirst::place::put::fill(&view, &mut buf, PutOptions::default()).expect("fill");
    let t = secs(t0);
    let bytes = buf.nbytes();
    let host = buf.host_bytes().expect("host");
    let mut chk = [0u8; 8];
    view.read_at(bytes - 8, &mut chk).expect("read");
    assert_eq!(&host[host.len() - 8..], &chk);
    format!(
        r#"{{"op":"put-cpu","impl":"hostfirst-fill-prefaulted","file":"{path}","bytes":{bytes},"t_s":{t:.9},"gbps":{:.4},"vmhwm_kib":{}}}"#,
        bytes as f64 / 1e9 / t,
        status_kib("VmHWM")
    )
}

/// A copy-on-write put: the private mapping's cost, the anonymous memory it took (none until written), and
/// what writing costs afterwards (one byte per 4 KiB page over the first 64 MiB: one page copy each).
fn op_put_cow(path: &str, tensor: &str) -> String {
    let file = TensorFile::open(path).expect("open");
    let view = file.view(tensor).expect("view");
    let (_, a0, _) = rss();
    let t0 = Instant::now();
    let opts = PutOptions { copy_on_write: true, ..PutOptions::default() };
    let mut buf = put(&view, Target::Device(Device::CPU), opts).expect("put");
    let t = secs(t0);
    let (_, a1, _) = rss();
    assert!(buf.is_file_backed());
    let bytes = buf.nbytes();
    let mut chk = [0u8; 8];
    view.read_at(bytes - 8, &mut chk).expect("read");
    assert_eq!(&buf.host_bytes().expect("host")[bytes as usize - 8..], &chk);
    let host = buf.host_bytes_mut().expect("host");
    let span = host.len().min(64 << 20);
    let t1 = Instant::now();
    for i in (0..span).step_by(4096) {
        host[i] ^= 1;
    }
    let t_write = secs(t1);
    let (_, a2, _) = rss();
    format!(
        r#"{{"op":"put-cow","impl":"hostfirst-cow","file":"{path}","bytes":{bytes},"t_s":{t:.9},"gbps":{:.4},"anon_growth_kib":{},"write_bytes":{span},"t_write_s":{t_write:.9},"anon_after_write_kib":{},"vmhwm_kib":{}}}"#,
        bytes as f64 / 1e9 / t,
        a1 as i64 - a0 as i64,
        a2 as i64 - a0 as i64,
        status_kib("VmHWM")
    )
}

fn op_pread(path: &str, threads: usize, fresh: bool) -> String {
    let f = File::open(path).expect("open");
    let n = f.metadata().expect("stat").len() as usize;
    // Fresh: calloc'd memory (a new anonymous mapping at this size), faulted in by the reads themselves.
    let mut dst = if fresh { vec![0u8; n] } else { prefaulted(n) };
    let t0 = Instant::now();
    let chunk = 8usize << 20;
    let next = std::sync::atomic::AtomicUsize::new(0);
    {
        let pieces: Vec<(usize, &mut [u8])> = dst.chunks_mut(chunk).enumerate().collect();
        let q = std::sync::Mutex::new(pieces.into_iter());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let item = q.lock().unwrap().next();
                    let Some((i, piece)) = item else { break };
                    f.read_exact_at(piece, (i * chunk) as u64).expect("pread");
                    next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
        });
    }
    let t = secs(t0);
    std::hint::black_box(&dst);
    format!(
        r#"{{"op":"pread","impl":"{}","file":"{path}","bytes":{n},"threads":{threads},"t_s":{t:.9},"gbps":{:.4},"vmhwm_kib":{}}}"#,
        if fresh { "pread-fresh-dst" } else { "pread-prefaulted" },
        n as f64 / 1e9 / t,
        status_kib("VmHWM")
    )
}

fn op_load_all(path: &str) -> String {
    let t = Instant::now();
    let file = TensorFile::open(path).expect("open");
    let t_open = secs(t);
    let mut bufs = Vec::with_capacity(file.len());
    let mut bytes = 0u64;
    for i in 0..file.len() {
        let v = file.view_at(i).expect("view");
        let b = put(&v, Target::Device(Device::CPU), PutOptions::default()).expect("put");
        bytes += b.nbytes();
        bufs.push(b);
    }
    let t_all = secs(t);
    let n = bufs.len();
    let hwm = status_kib("VmHWM");
    drop(bufs);
    format!(
        r#"{{"op":"load-all","impl":"hostfirst","file":"{path}","tensors":{n},"bytes":{bytes},"t_open_s":{t_open:.9},"t_s":{t_all:.9},"us_per_tensor":{:.3},"vmhwm_kib":{hwm}}}"#,
        t_all * 1e6 / n as f64
    )
}

fn op_load_rules(path: &str) -> String {
    use hostfirst::place::{load, Plan, Rules};
    let t = Instant::now();
    let file = TensorFile::open(path).expect("open");
    let t_open = secs(t);
    let rules = Rules::parse(["*=cpu"]).expect("rules");
    let plan = Plan::make(&file, &rules).expect("plan");
    let loaded = load(&file, &plan, None).expect("load");
    let t_all = secs(t);
    let n = loaded.len();
    let bytes = file.data_bytes();
    let hwm = status_kib("VmHWM");
    drop(loaded);
    format!(
        r#"{{"op":"load-all","impl":"hostfirst-load-rules","file":"{path}","tensors":{n},"bytes":{bytes},"t_open_s":{t_open:.9},"t_s":{t_all:.9},"us_per_tensor":{:.3},"vmhwm_kib":{hwm}}}"#,
        t_all * 1e6 / n as f64
    )
}

fn op_rust_st_load_all(path: &str) -> String {
    let t = Instant::now();
    let f = File::open(path).expect("open");
    // SAFETY: read-only mapping of a file nobody truncates during the benchmark.
    let mmap = unsafe { memmap2::Mmap::map(&f).expect("mmap") };
    let st = safetensors::SafeTensors::deserialize(&mmap).expect("deserialize");
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for (_, v) in st.tensors() {
        let d = v.data().to_vec();
        bytes += d.len() as u64;
        out.push(d);
    }
    let t_all = secs(t);
    let n = out.len();
    let hwm = status_kib("VmHWM");
    format!(
        r#"{{"op":"load-all","impl":"rust-safetensors","file":"{path}","tensors":{n},"bytes":{bytes},"t_s":{t_all:.9},"us_per_tensor":{:.3},"vmhwm_kib":{hwm}}}"#,
        t_all * 1e6 / n as f64
    )
}

fn op_gather_readat(a: &[String]) -> String {
    let (path, tensor) = (&a[0], &a[1]);
    let (b, t, iters, mut seed): (usize, usize, usize, u64) =
        (a[2].parse().unwrap(), a[3].parse().unwrap(), a[4].parse().unwrap(), a[5].parse().unwrap());
    let file = TensorFile::open(path).expect("open");
    let view = file.view(tensor).expect("view");
    let ntok = view.nbytes() / 2;
    let win = t + 1; // x and y share one window of T+1 tokens (nanoGPT's y is x shifted by one)
    let mut out = vec![0u8; b * win * 2];
    let mut lat = Vec::with_capacity(iters);
    let mut rng = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for it in 0..iters + 3 {
        let t0 = Instant::now();
        for row in out.chunks_mut(win * 2) {
            let start = rng() % (ntok - win as u64);
            view.read_at(start * 2, row).expect("read");
        }
        let dt = secs(t0);
        if it >= 3 {
            lat.push(dt);
        }
    }
    std::hint::black_box(&out);
    gather_json("hostfirst-read_at-loop", b, t, iters, lat)
}

fn op_resident(path: &str) -> String {
    let f = File::open(path).expect("open");
    let n = f.metadata().expect("stat").len() as usize;
    if n == 0 {
        return format!(r#"{{"op":"resident","file":"{path}","fraction":1.0}}"#);
    }
    // SAFETY: read-only mapping, only inspected with mincore (never touched).
    let mmap = unsafe { memmap2::Mmap::map(&f).expect("mmap") };
    let page = 4096usize;
    let pages = n.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: vec has one byte per page of the mapping.
    let rc = unsafe { libc::mincore(mmap.as_ptr() as *mut libc::c_void, n, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore");
    let res = vec.iter().filter(|&&b| b & 1 == 1).count();
    format!(
        r#"{{"op":"resident","file":"{path}","pages":{pages},"resident":{res},"fraction":{:.6}}}"#,
        res as f64 / pages as f64
    )
}

fn op_gather(a: &[String], one: bool, prefault: bool) -> String {
    use hostfirst::place::gather::{random_offsets, Gather};
    let (path, tensor) = (&a[0], &a[1]);
    let (b, t, iters, seed): (usize, usize, usize, u64) =
        (a[2].parse().unwrap(), a[3].parse().unwrap(), a[4].parse().unwrap(), a[5].parse().unwrap());
    let file = TensorFile::open(path).expect("open");
    let view = file.view(tensor).expect("view");
    let ntok = view.nbytes() / 2;
    let mut state = seed;
    let mut pre = String::new();
    if prefault {
        let t0 = Instant::now();
        let populated = view.prefault().expect("prefault");
        pre = format!(r#","prefault_s":{:.6},"prefault_populated":{populated}"#, secs(t0));
    }
    if one {
        // One [B, T+1] gather: x = row[..T], y = row[1..] (what the read_at loop does).
        let mut g = Gather::new(Device::CPU, hostfirst::DType::U16, b as u64, t as u64 + 1).expect("gather");
        let mut lat = Vec::with_capacity(iters);
        let mut offs = vec![0u64; b];
        for it in 0..iters + 3 {
            let t0 = Instant::now();
            random_offsets(&mut state, ntok, t as u64 + 1, &mut offs).expect("offsets");
            g.run(&view, &offs).expect("gather");
            let dt = secs(t0);
            if it >= 3 {
                lat.push(dt);
            }
        }
        let name = if prefault { "hostfirst-gather-one-window-prefaulted" } else { "hostfirst-gather-one-window" };
        let j = gather_json(name, b, t, iters, lat);
        return format!("{}{pre}}}", &j[..j.len() - 1]);
    }
    let mut gx = Gather::new(Device::CPU, hostfirst::DType::U16, b as u64, t as u64).expect("gather x");
    let mut gy = Gather::new(Device::CPU, hostfirst::DType::U16, b as u64, t as u64).expect("gather y");
    let mut offs = vec![0u64; b];
    let mut offs1 = vec![0u64; b];
    let mut lat = Vec::with_capacity(iters);
    for it in 0..iters + 3 {
        let t0 = Instant::now();
        random_offsets(&mut state, ntok, t as u64, &mut offs).expect("offsets");
        for (o1, o) in offs1.iter_mut().zip(&offs) {
            *o1 = o + 1;
        }
        gx.run(&view, &offs).expect("gather x");
        gy.run(&view, &offs1).expect("gather y");
        let dt = secs(t0);
        if it >= 3 {
            lat.push(dt);
        }
    }
    gather_json("hostfirst-gather", b, t, iters, lat)
}

/// The `q` quantile (0..=1, nearest rank) of `v`, which it sorts.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

fn gather_json(name: &str, b: usize, t: usize, iters: usize, mut lat: Vec<f64>) -> String {
    let mut p = |q: f64| quantile(&mut lat, q);
    let (p50, p99) = (p(0.5), p(0.99));
    format!(
        r#"{{"op":"gather","impl":"{name}","B":{b},"T":{t},"iters":{iters},"p50_s":{:.9},"p99_s":{:.9},"mean_s":{:.9}}}"#,
        p50,
        p99,
        lat.iter().sum::<f64>() / lat.len() as f64
    )
}
