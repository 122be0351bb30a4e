//! The page-cache policy of a load (issue 45, point 1): `keep` leaves the file cached, `drop` and `bypass`
//! leave at most 5 % of it (measured with mincore over a fresh mapping: `hostfirst::cache::resident_pages`),
//! pages cached before a `drop` load stay, every byte is exact, and an unknown value is refused naming the
//! field. The files live under target/ (a real disk here, /dev/vda: tmpfs would answer O_DIRECT otherwise);
//! the test says so when the directory is on tmpfs, where `bypass` falls back to `drop`.

use crate::common::*;
use hostfirst::cache::{resident_pages, PageCache};
use hostfirst::place::{load_with, LoadOptions, Placed, Plan, Rules};
use hostfirst::{Status, TensorFile};
use std::ffi::CString;
use std::path::{Path, PathBuf};

const TENSORS: usize = 4;
const ELEMS: usize = 4 << 20; // 16 MiB of F32 each: 64 MiB of data

fn byte(k: usize) -> u8 {
    ((k as u32).wrapping_mul(2654435761).rotate_right(13) ^ (k as u32 >> 9)) as u8
}

/// A file of `TENSORS` F32 tensors; returns its path and its data section.
fn write_file(name: &str) -> (PathBuf, Vec<u8>) {
    let mut header = String::from("{");
    for i in 0..TENSORS {
        if i > 0 {
            header.push(',');
        }
        let a = i * ELEMS * 4;
        header.push_str(&format!(
            "\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[{ELEMS}],\"data_offsets\":[{a},{}]}}",
            a + ELEMS * 4
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let data: Vec<u8> = (0..TENSORS * ELEMS * 4).map(byte).collect();
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    img.extend_from_slice(&data);
    let p = scratch(&format!("page_cache-{}", std::process::id())).join(name);
    std::fs::write(&p, img).unwrap();
    (p, data)
}

/// Writes back and drops every page of the file (the cold start of each case).
fn evict(p: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(p).unwrap();
    f.sync_all().unwrap();
    // SAFETY: advice on an open descriptor.
    assert_eq!(unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
}

/// The fraction of the file's pages in the page cache now.
fn cached(p: &Path) -> f64 {
    let (resident, pages) = resident_pages(&std::fs::File::open(p).unwrap()).unwrap();
    resident as f64 / pages as f64
}

/// The fraction of the pages of bytes `[from, from + len)` of the file in the page cache now.
fn cached_range(p: &Path, from: usize, len: usize) -> f64 {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(p).unwrap();
    let page = 4096;
    let (lo, hi) = (from / page * page, (from + len).div_ceil(page) * page);
    let n = (hi - lo) / page;
    let mut vec = vec![0u8; n];
    // SAFETY: a fresh read-only mapping of the range (nothing reads through it), unmapped below.
    let m = unsafe {
        libc::mmap(std::ptr::null_mut(), hi - lo, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), lo as i64)
    };
    assert_ne!(m, libc::MAP_FAILED);
    // SAFETY: the mapping above; one byte per page.
    assert_eq!(unsafe { libc::mincore(m, hi - lo, vec.as_mut_ptr().cast()) }, 0);
    // SAFETY: the mapping above.
    unsafe { libc::munmap(m, hi - lo) };
    vec.iter().filter(|&&b| b & 1 != 0).count() as f64 / n as f64
}

fn on_tmpfs(p: &Path) -> bool {
    let c = CString::new(p.parent().unwrap().to_str().unwrap()).unwrap();
    // SAFETY: a zeroed statfs filled by the call.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and struct.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut s) }, 0);
    s.f_type == libc::TMPFS_MAGIC
}

/// Loads every tensor to `cpu` under `policy` and checks every byte.
fn load_all(p: &Path, data: &[u8], policy: PageCache) {
    let f = TensorFile::open(p).unwrap();
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    let loaded =
        load_with(&f, &plan, LoadOptions { copy_on_write: false, progress: None, page_cache: policy }).unwrap();
    for i in 0..TENSORS {
        let Some(Placed::Buffer(b)) = loaded.get(&format!("t{i}")) else { panic!("t{i} is not a buffer") };
        let b = b.lock().unwrap();
        let mut v = vec![0u8; b.nbytes() as usize];
        b.copy_to_host(&mut v).unwrap();
        assert!(v[..] == data[i * ELEMS * 4..(i + 1) * ELEMS * 4], "{policy:?}: t{i} differs");
    }
}

#[test]
fn keep_caches_drop_and_bypass_leave_at_most_5_percent() {
    let (p, data) = write_file("policies.safetensors");
    if on_tmpfs(&p) {
        eprintln!("NOTE: {} is on tmpfs: bypass falls back to drop there", p.display());
    }
    evict(&p);
    assert!(cached(&p) < 0.05, "the eviction works here: {:.3}", cached(&p));
    load_all(&p, &data, PageCache::Keep);
    assert!(cached(&p) > 0.95, "keep leaves the file cached: {:.3}", cached(&p));
    for policy in [PageCache::Drop, PageCache::Bypass] {
        evict(&p);
        load_all(&p, &data, policy);
        let c = cached(&p);
        assert!(c <= 0.05, "{policy:?} leaves {:.1} % of the file cached", c * 100.0);
    }
}

/// `drop` gives back only what it brought in: pages cached before the load stay cached.
#[test]
fn drop_keeps_what_was_cached_before() {
    let (p, data) = write_file("before.safetensors");
    evict(&p);
    // Cache the first half of the file (reading it through the page cache).
    let half = std::fs::metadata(&p).unwrap().len() as usize / 2;
    let mut buf = vec![0u8; half];
    let mut first = std::fs::File::open(&p).unwrap();
    // No readahead past the half (it would still be in flight when the load samples the cache).
    // SAFETY: advice on an open descriptor.
    assert_eq!(
        unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&first), 0, 0, libc::POSIX_FADV_RANDOM) },
        0
    );
    std::io::Read::read_exact(&mut first, &mut buf).unwrap();
    let before = cached(&p);
    assert!(before > 0.45, "half the file cached first: {before:.3}");
    load_all(&p, &data, PageCache::Drop);
    let after = cached(&p);
    assert!((after - before).abs() < 0.05, "cached before {before:.3}, after the drop load {after:.3}");
}

/// Through the C API: a load with each policy is byte-exact; an unknown value is INVALID_ARGUMENT naming
/// `opts->page_cache`, and nothing is written to `out`.
#[test]
fn c_load_options_page_cache() {
    use hostfirst::ffi::*;
    let (p, data) = write_file("c.safetensors");
    let path = CString::new(p.to_str().unwrap()).unwrap();
    let mut file = std::ptr::null_mut();
    assert_eq!(hostfirst_file_open(path.as_ptr(), &mut file), Status::Ok);
    let mut rules = std::ptr::null_mut();
    assert_eq!(hostfirst_rules_new(&mut rules), Status::Ok);
    assert_eq!(hostfirst_rules_add_spec(rules, c"*=cpu".as_ptr()), Status::Ok);
    let mut plan = std::ptr::null_mut();
    assert_eq!(hostfirst_plan_make(file, rules, &mut plan), Status::Ok);
    let mut opts: hostfirst_load_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_load_options_init(&mut opts, std::mem::size_of_val(&opts)), Status::Ok);
    assert_eq!(opts.page_cache, PageCache::Keep as u32, "the zero value is keep");
    for bad in [3u32, 99, u32::MAX] {
        opts.page_cache = bad;
        let mut out = 1usize as *mut hostfirst_load;
        assert_eq!(hostfirst_load_run(file, plan, &opts, &mut out), Status::InvalidArgument);
        assert_eq!(out as usize, 1, "out unchanged on error");
        let msg = unsafe { std::ffi::CStr::from_ptr(hostfirst_last_error_message()) }.to_str().unwrap().to_string();
        assert!(msg.contains(&format!("opts->page_cache {bad} is not a hostfirst_page_cache value")), "{msg}");
    }
    for policy in PageCache::all() {
        evict(&p);
        opts.page_cache = policy as u32;
        let mut out = std::ptr::null_mut();
        assert_eq!(hostfirst_load_run(file, plan, &opts, &mut out), Status::Ok, "{policy:?}");
        let mut buf = std::ptr::null_mut();
        let mut kind = hostfirst_loaded::View;
        assert_eq!(hostfirst_load_get(out, c"t3".as_ptr(), &mut kind, &mut buf, std::ptr::null_mut()), Status::Ok);
        assert_eq!(kind, hostfirst_loaded::Buffer);
        let mut v = vec![0u8; ELEMS * 4];
        assert_eq!(hostfirst_buffer_copy_to_host(buf, v.as_mut_ptr().cast(), v.len()), Status::Ok);
        assert!(v[..] == data[3 * ELEMS * 4..], "{policy:?}");
        assert_eq!(hostfirst_buffer_free(buf), Status::Ok);
        assert_eq!(hostfirst_load_free(out), Status::Ok);
        let c = cached(&p);
        match policy {
            PageCache::Keep => assert!(c > 0.95, "keep: {c:.3}"),
            _ => assert!(c <= 0.05, "{policy:?}: {c:.3}"),
        }
    }
    // An older caller's struct (the 1.0 size, without the field) loads with keep.
    opts.struct_size = HOSTFIRST_LOAD_OPTIONS_SIZE_1_0;
    opts.page_cache = 99; // past its struct_size: never read
    let mut out = std::ptr::null_mut();
    assert_eq!(hostfirst_load_run(file, plan, &opts, &mut out), Status::Ok);
    assert_eq!(hostfirst_load_free(out), Status::Ok);
    assert_eq!(hostfirst_plan_free(plan), Status::Ok);
    assert_eq!(hostfirst_rules_free(rules), Status::Ok);
    assert_eq!(hostfirst_file_free(file), Status::Ok);
}

/// Puts take the policy too: a put of one tensor (a quarter of the file) to `cpu` leaves that quarter cached
/// under keep and at most 5 % of it under drop and bypass; bytes exact; through C, an unknown value is
/// INVALID_ARGUMENT naming `opts->page_cache`.
#[test]
fn puts_leave_the_cache_as_said() {
    use hostfirst::place::{put, PutOptions, Target};
    // A file per policy: readahead still in flight past the tensor from an earlier put cannot be evicted
    // (the kernel skips pages under I/O), so each case starts from a file no one has read; and only the
    // tensor's own pages are counted (readahead may run past its end into the next tensor).
    for policy in PageCache::all() {
        let (p, data) = write_file(&format!("put-{}.safetensors", policy.name()));
        let f = TensorFile::open(&p).unwrap();
        let v = f.view("t2").unwrap();
        let want = &data[2 * ELEMS * 4..3 * ELEMS * 4];
        evict(&p);
        let b =
            put(&v, Target::Device(hostfirst::Device::CPU), PutOptions { page_cache: policy, ..Default::default() })
                .unwrap();
        assert!(b.host_bytes().unwrap() == want, "{policy:?}");
        let data_start = std::fs::metadata(&p).unwrap().len() as usize - TENSORS * ELEMS * 4;
        let c = cached_range(&p, data_start + 2 * ELEMS * 4, ELEMS * 4); // the fraction of the tensor's pages
        match policy {
            PageCache::Keep => assert!(c > 0.95, "keep: {c:.3} of the tensor cached"),
            _ => assert!(c <= 0.05, "{policy:?}: {:.1} % of the tensor stays cached", c * 100.0),
        }
    }
    use hostfirst::ffi::*;
    let (p, data) = write_file("put-c.safetensors");
    let mut opts: hostfirst_put_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_put_options_init(&mut opts, std::mem::size_of_val(&opts)), Status::Ok);
    assert_eq!(opts.page_cache, 0, "the zero value is keep");
    let path = CString::new(p.to_str().unwrap()).unwrap();
    let (mut file, mut view) = (std::ptr::null_mut(), std::ptr::null_mut());
    assert_eq!(hostfirst_file_open(path.as_ptr(), &mut file), Status::Ok);
    assert_eq!(hostfirst_file_view(file, c"t0".as_ptr(), &mut view), Status::Ok);
    let cpu = hostfirst_device { kind: 1, ordinal: 0 }; // HOSTFIRST_DEVICE_KIND_CPU
    for bad in [3u64, 1 << 32] {
        opts.page_cache = bad;
        let mut out = 1usize as *mut hostfirst_buffer;
        let s = hostfirst_put(view, &cpu, &opts, &mut out, std::ptr::null_mut());
        let msg = unsafe { std::ffi::CStr::from_ptr(hostfirst_last_error_message()) }.to_str().unwrap().to_string();
        assert_eq!(s, Status::InvalidArgument, "{msg}");
        assert!(msg.contains(&format!("opts->page_cache {bad} is not a hostfirst_page_cache value")), "{msg}");
        assert_eq!(out as usize, 1, "out unchanged on error");
    }
    evict(&p);
    opts.page_cache = PageCache::Bypass as u64;
    let mut out = std::ptr::null_mut();
    assert_eq!(hostfirst_put(view, &cpu, &opts, &mut out, std::ptr::null_mut()), Status::Ok);
    let mut got = vec![0u8; ELEMS * 4];
    assert_eq!(hostfirst_buffer_copy_to_host(out, got.as_mut_ptr().cast(), got.len()), Status::Ok);
    assert!(got[..] == data[..ELEMS * 4]);
    let data_start = std::fs::metadata(&p).unwrap().len() as usize - TENSORS * ELEMS * 4;
    let c = cached_range(&p, data_start, ELEMS * 4);
    assert!(c <= 0.05, "C put with bypass: {c:.4} of the tensor cached");
    assert_eq!(hostfirst_buffer_free(out), Status::Ok);
    assert_eq!(hostfirst_view_free(view), Status::Ok);
    assert_eq!(hostfirst_file_free(file), Status::Ok);
}

/// The CLI: `load` and `put` take `--page-cache keep|drop|bypass` (drop and bypass leave at most 5 % of the
/// file cached, keep leaves it cached); another value is a usage error (exit 2) naming the option.
#[test]
fn cli_page_cache() {
    let (p, _) = write_file("cli.safetensors");
    let path = p.to_str().unwrap();
    for policy in ["keep", "drop", "bypass"] {
        evict(&p);
        run_ok(&cli(), &["load", path, "--rule", "*=cpu", "--page-cache", policy, "--json"], &[]);
        let c = cached(&p);
        if policy == "keep" {
            assert!(c > 0.95, "load keep: {c:.3}");
        } else {
            assert!(c <= 0.05, "load {policy}: {c:.3}");
        }
    }
    let (p, _) = write_file("cli-put.safetensors");
    evict(&p);
    run_ok(&cli(), &["put", p.to_str().unwrap(), "t1", "--device", "cpu", "--page-cache", "drop", "--json"], &[]);
    // Only the tensor's pages count (readahead past its end may still be in flight when the put ends).
    let data_start = std::fs::metadata(&p).unwrap().len() as usize - TENSORS * ELEMS * 4;
    let c = cached_range(&p, data_start + ELEMS * 4, ELEMS * 4);
    assert!(c <= 0.05, "put drop (put and its verification): {c:.3} of the tensor cached");
    for cmd in [
        vec!["load", path, "--rule", "*=cpu"],
        vec!["put", path, "t0"],
        vec!["gather", path, "t1", "--batch", "2", "--window", "16"],
        vec!["shard", path, "--world", "2", "--rank", "0", "--rule", "t*=0"],
    ] {
        let mut args = cmd.clone();
        args.extend(["--page-cache", "evict"]);
        let out = std::process::Command::new(cli()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--page-cache wants keep, drop or bypass, got 'evict'"), "{err}");
    }
}

/// Shard-on-read takes the policy (issue 45, point 1): a run of a plan that reads the whole file (every
/// shard of a 2-way mesh owned here) leaves it cached under keep and at most 5 % of it under drop and bypass
/// (bypass reads directly there: see `bypass_reads_shards_and_gathers_directly`); bytes exact; through C, the run options' appended
/// `page_cache` is refused naming `opts->page_cache` for an unknown value, and nothing is written to `out`.
#[test]
fn shard_runs_leave_the_cache_as_said() {
    use hostfirst::file::ReadPolicy;
    use hostfirst::shard::{self, Mesh, Owned, ShardOptions, ShardPlan, ShardRules};
    use std::sync::Arc;
    let (p, data) = write_file("shard.safetensors");
    let f = TensorFile::open(&p).unwrap();
    let mesh = Arc::new(Mesh::new(&[("x", 2)]).unwrap());
    let mut rules = ShardRules::new(Arc::clone(&mesh));
    rules.add("t*", "x").unwrap();
    let owned: Vec<Owned> = (0..2).map(|p| Owned { position: p, device: hostfirst::Device::CPU }).collect();
    let plan = ShardPlan::make(&f, &rules, &owned, ReadPolicy::default()).unwrap();
    for policy in PageCache::all() {
        evict(&p);
        let load = shard::run(&plan, ShardOptions { page_cache: policy, ..Default::default() }).unwrap();
        assert_eq!(load.bytes_read(), (TENSORS * ELEMS * 4) as u64, "{policy:?}");
        for (e, s) in plan.entries.iter().zip(&load.shards) {
            let i: usize = e.name()[1..].parse().unwrap();
            let half = ELEMS * 4 / 2;
            let at = i * ELEMS * 4 + if e.position == 0 { 0 } else { half };
            let b = s.buffer.lock().unwrap();
            assert!(b.host_bytes().unwrap() == &data[at..at + half], "{policy:?}: {} at {}", e.name(), e.position);
        }
        drop(load);
        let c = cached(&p);
        match policy {
            PageCache::Keep => assert!(c > 0.95, "shard run keep: {c:.3}"),
            _ => assert!(c <= 0.05, "shard run {policy:?}: {:.1} % of the file stays cached", c * 100.0),
        }
    }
    use hostfirst::ffi::*;
    let mut ro: hostfirst_shard_run_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_shard_run_options_init(&mut ro, std::mem::size_of_val(&ro)), Status::Ok);
    assert_eq!(ro.page_cache, 0, "the zero value is keep");
    let path = CString::new(p.to_str().unwrap()).unwrap();
    let mut file = std::ptr::null_mut();
    assert_eq!(hostfirst_file_open(path.as_ptr(), &mut file), Status::Ok);
    let mut cmesh = std::ptr::null_mut();
    let (names, sizes) = ([c"x".as_ptr()], [2u64]);
    assert_eq!(hostfirst_shard_mesh_new(names.as_ptr(), sizes.as_ptr(), 1, &mut cmesh), Status::Ok);
    let mut crules = std::ptr::null_mut();
    assert_eq!(hostfirst_shard_rules_new(cmesh, &mut crules), Status::Ok);
    assert_eq!(hostfirst_shard_rules_add(crules, c"t*".as_ptr(), c"x".as_ptr()), Status::Ok);
    let positions = [0u64, 1];
    let cpu = hostfirst_device { kind: 1, ordinal: 0 }; // HOSTFIRST_DEVICE_KIND_CPU
    let devices = [cpu, cpu];
    let mut cplan = std::ptr::null_mut();
    assert_eq!(
        hostfirst_shard_plan_make(file, crules, positions.as_ptr(), devices.as_ptr(), 2, std::ptr::null(), &mut cplan),
        Status::Ok
    );
    for bad in [3u32, u32::MAX] {
        ro.page_cache = bad;
        let mut out = 1usize as *mut hostfirst_shard_result;
        let s = hostfirst_shard_run(cplan, &ro, &mut out);
        let msg = unsafe { std::ffi::CStr::from_ptr(hostfirst_last_error_message()) }.to_str().unwrap().to_string();
        assert_eq!(s, Status::InvalidArgument, "{msg}");
        assert!(msg.contains(&format!("opts->page_cache {bad} is not a hostfirst_page_cache value")), "{msg}");
        assert_eq!(out as usize, 1, "out unchanged on error");
    }
    evict(&p);
    ro.page_cache = PageCache::Drop as u32;
    let mut out = std::ptr::null_mut();
    assert_eq!(hostfirst_shard_run(cplan, &ro, &mut out), Status::Ok);
    let c = cached(&p);
    assert!(c <= 0.05, "C shard run drop: {c:.3}");
    // An older caller's struct (the 1.0 size, without the field) runs with keep.
    ro.struct_size = HOSTFIRST_SHARD_RUN_OPTIONS_SIZE_1_0;
    ro.page_cache = 99; // past its struct_size: never read
    let mut out2 = std::ptr::null_mut();
    assert_eq!(hostfirst_shard_run(cplan, &ro, &mut out2), Status::Ok);
    assert_eq!(hostfirst_shard_result_free(out2), Status::Ok);
    assert_eq!(hostfirst_shard_result_free(out), Status::Ok);
    assert_eq!(hostfirst_shard_plan_free(cplan), Status::Ok);
    assert_eq!(hostfirst_shard_rules_free(crules), Status::Ok);
    assert_eq!(hostfirst_shard_mesh_free(cmesh), Status::Ok);
    assert_eq!(hostfirst_file_free(file), Status::Ok);
}

/// Gathers take the policy (issue 45, point 1), through C: `hostfirst_gather_set_page_cache`. A batch of 32
/// windows of 64 KiB spread over the file leaves the windows' pages cached under keep and at most 5 % of them
/// under drop and bypass; bytes exact; an unknown value is INVALID_ARGUMENT naming `page_cache`.
#[test]
fn gathers_leave_the_cache_as_said() {
    use hostfirst::ffi::*;
    let (p, data) = write_file("gather.safetensors");
    let path = CString::new(p.to_str().unwrap()).unwrap();
    let (mut file, mut view) = (std::ptr::null_mut(), std::ptr::null_mut());
    assert_eq!(hostfirst_file_open(path.as_ptr(), &mut file), Status::Ok);
    assert_eq!(hostfirst_file_view(file, c"t1".as_ptr(), &mut view), Status::Ok);
    let cpu = hostfirst_device { kind: 1, ordinal: 0 }; // HOSTFIRST_DEVICE_KIND_CPU
    const BATCH: usize = 32;
    const WINDOW: usize = 16384; // f32 elements: 64 KiB
    let mut g = std::ptr::null_mut();
    assert_eq!(
        hostfirst_gather_new(cpu, 12 /* HOSTFIRST_DTYPE_F32 */, BATCH as u64, WINDOW as u64, &mut g),
        Status::Ok
    );
    for bad in [3u32, 99, u32::MAX] {
        assert_eq!(hostfirst_gather_set_page_cache(g, bad), Status::InvalidArgument);
        let msg = unsafe { std::ffi::CStr::from_ptr(hostfirst_last_error_message()) }.to_str().unwrap().to_string();
        assert!(msg.contains(&format!("page_cache {bad} is not a hostfirst_page_cache value")), "{msg}");
    }
    assert_eq!(hostfirst_gather_set_page_cache(std::ptr::null_mut(), 0), Status::NullArgument);
    let data_start = std::fs::metadata(&p).unwrap().len() as usize - TENSORS * ELEMS * 4;
    let offsets: Vec<u64> = (0..BATCH as u64).map(|i| i * (ELEMS as u64 / BATCH as u64) + 1000).collect();
    for policy in PageCache::all() {
        assert_eq!(hostfirst_gather_set_page_cache(g, policy as u32), Status::Ok);
        evict(&p);
        let mut batch = std::ptr::null_mut();
        assert_eq!(hostfirst_gather_run(g, view, offsets.as_ptr(), BATCH, &mut batch), Status::Ok, "{policy:?}");
        let mut got = vec![0u8; BATCH * WINDOW * 4];
        assert_eq!(hostfirst_buffer_copy_to_host(batch, got.as_mut_ptr().cast(), got.len()), Status::Ok);
        for (i, &o) in offsets.iter().enumerate() {
            let at = ELEMS * 4 + o as usize * 4;
            assert!(got[i * WINDOW * 4..(i + 1) * WINDOW * 4] == data[at..at + WINDOW * 4], "{policy:?}: window {i}");
        }
        assert_eq!(hostfirst_buffer_free(batch), Status::Ok);
        // The fraction of the windows' pages cached now.
        let c =
            offsets.iter().map(|&o| cached_range(&p, data_start + ELEMS * 4 + o as usize * 4, WINDOW * 4)).sum::<f64>()
                / BATCH as f64;
        match policy {
            PageCache::Keep => assert!(c > 0.95, "gather keep: {c:.3} of the windows cached"),
            _ => assert!(c <= 0.05, "gather {policy:?}: {:.1} % of the windows' pages stay cached", c * 100.0),
        }
    }
    assert_eq!(hostfirst_gather_free(g), Status::Ok);
    assert_eq!(hostfirst_view_free(view), Status::Ok);
    assert_eq!(hostfirst_file_free(file), Status::Ok);
}

// ---- the read report: what bypass does with a file, and whether io_uring and O_DIRECT are usable here ----
// (issue 45, point 1's fallback reason and point 5's read report)

/// A file of the test's data at `dir/name`; returns its path.
fn write_file_in(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let (p, data) = write_file(name);
    let q = dir.join(name);
    std::fs::copy(&p, &q).unwrap();
    std::fs::remove_file(&p).unwrap();
    (q, data)
}

/// On the local disk (the scratch folder under target/, ext4 here): the report says O_DIRECT is usable and
/// bypass reads directly; a bypass load there leaves at most 5 % cached (the case above).
#[test]
fn the_report_on_the_local_disk_says_bypass_reads_directly() {
    let (p, _) = write_file("report-disk.safetensors");
    if on_tmpfs(&p) {
        eprintln!("SKIPPED: the scratch folder {} is on tmpfs here", p.display());
        return;
    }
    let r = TensorFile::open(&p).unwrap().read_engine();
    assert!(r.contains("; O_DIRECT: usable; "), "{r}");
    assert!(r.ends_with("; page_cache bypass: direct reads (O_DIRECT) into aligned staging"), "{r}");
    assert!(r.contains("; io_uring: usable; ") || r.contains("; io_uring: not usable ("), "{r}");
}

/// On tmpfs (/dev/shm): the report names tmpfs and says what bypass does there: the file's pages are its
/// only copy, so they stay cached (older kernels also refuse O_DIRECT on tmpfs: then it falls back, saying
/// so); a bypass load is byte-exact.
#[test]
fn the_report_on_tmpfs_says_what_bypass_does_there() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("SKIPPED: no /dev/shm here");
        return;
    }
    let dir = shm.join(format!("hostfirst-page-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    /// Removes the folder (memory, on tmpfs) whatever the test did.
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _remove = Remove(dir.clone());
    let (p, data) = write_file_in(&dir, "tmpfs.safetensors");
    assert!(on_tmpfs(&p), "/dev/shm is tmpfs");
    let r = TensorFile::open(&p).unwrap().read_engine();
    assert!(r.starts_with("tmpfs (f_type 0x1021994, memory)"), "{r}");
    let bypass = r.split("; page_cache bypass: ").nth(1).unwrap_or_else(|| panic!("no bypass clause: {r}"));
    assert!(bypass.contains("tmpfs holds its files in memory: their pages stay cached under every policy"), "{r}");
    if r.contains("; O_DIRECT: usable; ") {
        assert!(bypass.starts_with("direct reads (O_DIRECT), but tmpfs"), "{r}");
    } else {
        assert!(bypass.starts_with("falls back (O_DIRECT not usable: refused by tmpfs"), "{r}");
    }
    load_all(&p, &data, PageCache::Bypass);
}

fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

/// A ramfs mount (a file system that refuses O_DIRECT), unmounted and removed when dropped.
struct Ramfs(PathBuf);

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Mounts ramfs on a fresh folder under target/, or says why not (None, after saying that the test skipped;
/// under CI=true as root a failed mount fails the test).
fn ramfs(test: &str) -> Option<Ramfs> {
    // SAFETY: no arguments, no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: mounting ramfs needs root");
        return None;
    }
    let dir = root().join("target/test-tmp").join(format!("ramfs-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new("mount").args(["-t", "ramfs", "none"]).arg(&dir).output().unwrap();
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!ci(), "{test}: CI=true as root, but ramfs cannot be mounted: {why}");
        eprintln!("SKIPPED {test}: mount -t ramfs: {why}");
        return None;
    }
    Some(Ramfs(dir))
}

/// On ramfs, which refuses O_DIRECT (EINVAL at open): the report says O_DIRECT is refused by ramfs and that
/// bypass falls back, with that reason; a bypass load, gather (unaligned windows) and shard run there are
/// byte-exact (they read through the cache), and the gather's `last_bypass` gives the reason.
#[test]
fn the_report_names_the_file_system_that_refuses_o_direct() {
    let Some(m) = ramfs("odirect") else { return };
    let (p, data) = write_file_in(&m.0, "ramfs.safetensors");
    let r = TensorFile::open(&p).unwrap().read_engine();
    assert!(r.starts_with("ramfs (f_type 0x858458f6, memory)"), "{r}");
    assert!(
        r.contains("; O_DIRECT: not usable (refused by ramfs: opening it with O_DIRECT gives Invalid argument"),
        "{r}"
    );
    assert!(r.contains("; page_cache bypass: falls back (O_DIRECT not usable: refused by ramfs: "), "{r}");
    assert!(r.ends_with("reading through the page cache; ramfs holds its files in memory: their pages stay cached under every policy"), "{r}");
    load_all(&p, &data, PageCache::Bypass);
    // The fallback the load took says the same.
    let d = hostfirst::cache::DirectFiles::for_policy(PageCache::Bypass).unwrap();
    assert!(d.get(&std::fs::File::open(&p).unwrap()).is_none());
    assert!(d.fallback().unwrap().contains("refuses O_DIRECT"), "{:?}", d.fallback());
    // A bypass gather and shard run there fall back too, byte-exact; the gather says why.
    let f = TensorFile::open(&p).unwrap();
    let mut g = hostfirst::place::Gather::new(hostfirst::Device::CPU, hostfirst::DType::F32, 4, 1001).unwrap();
    g.set_page_cache(PageCache::Bypass);
    let offsets = [3u64, 5000, 77_777, ELEMS as u64 - 1001];
    let batch = g.run(&f.view("t3").unwrap(), &offsets).unwrap();
    let got = batch.lock().unwrap().host_bytes().unwrap().to_vec();
    for (i, &o) in offsets.iter().enumerate() {
        let at = 3 * ELEMS * 4 + o as usize * 4;
        assert!(got[i * 4004..(i + 1) * 4004] == data[at..at + 4004], "ramfs gather window {i}");
    }
    match g.last_bypass() {
        Some(Err(why)) => assert!(why.contains("refuses O_DIRECT"), "{why}"),
        other => panic!("a bypass gather on ramfs: {other:?}"),
    }
    use hostfirst::shard::{self, Mesh, Owned, ShardOptions, ShardPlan, ShardRules};
    let mesh = std::sync::Arc::new(Mesh::new(&[("x", 2)]).unwrap());
    let mut rules = ShardRules::new(std::sync::Arc::clone(&mesh));
    rules.add("t*", "x").unwrap();
    let owned: Vec<Owned> = (0..2).map(|p| Owned { position: p, device: hostfirst::Device::CPU }).collect();
    let plan = ShardPlan::make(&f, &rules, &owned, hostfirst::file::ReadPolicy::default()).unwrap();
    let load = shard::run(&plan, ShardOptions { page_cache: PageCache::Bypass, ..Default::default() }).unwrap();
    for (e, s) in plan.entries.iter().zip(&load.shards) {
        let i: usize = e.name()[1..].parse().unwrap();
        let half = ELEMS * 4 / 2;
        let at = i * ELEMS * 4 + e.position as usize * half;
        assert!(s.buffer.lock().unwrap().host_bytes().unwrap() == &data[at..at + half], "ramfs shard {}", e.name());
    }
}

/// Runs `hostfirst inspect --json FILE` in a child whose seccomp filter answers `io_uring_setup` with `errno`
/// (as a container runtime's default profile does) and returns the file's read report.
fn report_under_seccomp(p: &Path, errno: i32) -> String {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(cli());
    cmd.args(["inspect", "--json", p.to_str().unwrap()]).env_remove("HOSTFIRST_IO");
    // SAFETY: the closure runs in the child between fork and exec and makes only async-signal-safe system
    // calls (prctl) on memory it owns.
    unsafe {
        cmd.pre_exec(move || {
            const IO_URING_SETUP: u32 = 425; // the same number on every Linux architecture
            let filter = [
                libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: 0 }, // BPF_LD|BPF_W|BPF_ABS: seccomp_data.nr
                libc::sock_filter { code: 0x15, jt: 0, jf: 1, k: IO_URING_SETUP }, // BPF_JMP|BPF_JEQ|BPF_K
                libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: libc::SECCOMP_RET_ERRNO | errno as u32 },
                libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: libc::SECCOMP_RET_ALLOW },
            ];
            let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "inspect under seccomp: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["read_engine"].as_str().unwrap_or_else(|| panic!("no read_engine: {v}")).to_string()
}

/// io_uring refused: under a seccomp filter that answers `io_uring_setup` with EPERM (container runtimes'
/// default) or ENOSYS, the report says io_uring is not usable and why, and the file is read by the pool.
#[test]
fn the_report_says_why_io_uring_is_refused() {
    let (p, _) = write_file("report-seccomp.safetensors");
    let r = report_under_seccomp(&p, libc::EPERM);
    assert!(
        r.contains("; io_uring: not usable (io_uring_setup refused (Operation not permitted (os error 1)) by this process's seccomp filter"),
        "{r}"
    );
    assert!(r.contains("; reads: pread pool ("), "{r}");
    let r = report_under_seccomp(&p, libc::ENOSYS);
    assert!(
        r.contains("; io_uring: not usable (io_uring_setup unavailable (Function not implemented (os error 38)): this process's seccomp filter answers ENOSYS"),
        "{r}"
    );
}

/// The CLI's other read commands take `--page-cache` too: `gather` (its check of the first batch reads under
/// the same policy) leaves the tensor's pages cached under keep and at most 5 % of them under drop and bypass;
/// `shard` (rank 0 of 2: half of each tensor) leaves the file as the policy says.
#[test]
fn cli_gather_and_shard_page_cache() {
    let (p, _) = write_file("cli-gather.safetensors");
    let path = p.to_str().unwrap();
    let data_start = std::fs::metadata(&p).unwrap().len() as usize - TENSORS * ELEMS * 4;
    for policy in ["keep", "drop", "bypass"] {
        evict(&p);
        // 8 batches of 16 windows of 1 MiB over t1 (16 MiB): nearly every page of it is read.
        let args = ["gather", path, "t1", "--batch", "16", "--window", "262144", "--iters", "8", "--device", "cpu"];
        let mut args = args.to_vec();
        args.extend(["--page-cache", policy, "--json"]);
        run_ok(&cli(), &args, &[]);
        let c = cached_range(&p, data_start + ELEMS * 4, ELEMS * 4);
        if policy == "keep" {
            assert!(c > 0.9, "gather keep: {c:.3} of t1 cached");
        } else {
            assert!(c <= 0.05, "gather {policy}: {:.1} % of t1 stays cached", c * 100.0);
        }
        evict(&p);
        run_ok(
            &cli(),
            &["shard", path, "--world", "2", "--rank", "0", "--rule", "t*=0", "--page-cache", policy, "--json"],
            &[],
        );
        let c = cached(&p);
        if policy == "keep" {
            assert!(c > 0.45, "shard keep: {c:.3} of the file cached (half of each tensor read)");
        } else {
            assert!(c <= 0.05, "shard {policy}: {:.1} % of the file stays cached", c * 100.0);
        }
    }
}

/// `bypass` on shard-on-read and gathers reads with direct I/O (issue 45, point 2): nothing the run reads
/// enters the page cache, even while the run still holds it. A 2-way shard run of a cold file, looked at
/// from its final progress call (every byte read, the run's cache scope not yet restored): under `drop`
/// the file is cached then (the observable works), under `bypass` at most 5 % of it is; afterwards at most
/// 5 % either way; bytes exact (the shards start at unaligned file offsets: the data section starts 8 +
/// header bytes in). A gather of 32 windows of 16,383 f32 (65,532 bytes: unaligned lengths) at unaligned
/// offsets reports its windows read directly ([`Gather::last_bypass`]) and leaves at most 5 % of their
/// pages cached; bytes exact. On tmpfs (O_DIRECT refused by older kernels) the stated fallback is checked
/// instead.
#[test]
fn bypass_reads_shards_and_gathers_directly() {
    use hostfirst::file::ReadPolicy;
    use hostfirst::place::Gather;
    use hostfirst::shard::{self, Mesh, Owned, ShardOptions, ShardPlan, ShardRules};
    use std::sync::Arc;
    let (p, data) = write_file("direct.safetensors");
    let f = TensorFile::open(&p).unwrap();
    let data_start = std::fs::metadata(&p).unwrap().len() as usize - TENSORS * ELEMS * 4;
    assert_ne!(data_start % 4096, 0, "the tensors start at unaligned offsets");
    let direct_here = hostfirst::cache::DirectFiles::default();
    let fallback = direct_here.get(&std::fs::File::open(&p).unwrap()).is_none();
    if fallback {
        eprintln!("{} refuses O_DIRECT: bypass falls back here ({:?})", p.display(), direct_here.fallback());
    }
    let mesh = Arc::new(Mesh::new(&[("x", 2)]).unwrap());
    let mut rules = ShardRules::new(Arc::clone(&mesh));
    rules.add("t*", "x").unwrap();
    let owned: Vec<Owned> = (0..2).map(|p| Owned { position: p, device: hostfirst::Device::CPU }).collect();
    let plan = ShardPlan::make(&f, &rules, &owned, ReadPolicy::default()).unwrap();
    for policy in [PageCache::Drop, PageCache::Bypass] {
        evict(&p);
        let mut at_end = None;
        let mut sink = |d: u64, t: u64| {
            if d == t {
                at_end = Some(cached(&p));
            }
            false
        };
        let opts = ShardOptions { page_cache: policy, progress: Some(&mut sink), ..Default::default() };
        let load = shard::run(&plan, opts).unwrap();
        for (e, s) in plan.entries.iter().zip(&load.shards) {
            let i: usize = e.name()[1..].parse().unwrap();
            let half = ELEMS * 4 / 2;
            let at = i * ELEMS * 4 + if e.position == 0 { 0 } else { half };
            let b = s.buffer.lock().unwrap();
            assert!(b.host_bytes().unwrap() == &data[at..at + half], "{policy:?}: {} at {}", e.name(), e.position);
        }
        drop(load);
        let during = at_end.expect("a final progress call");
        match policy {
            PageCache::Drop => assert!(during > 0.9, "drop: {during:.3} cached before the run's end"),
            _ if fallback => {}
            _ => assert!(during <= 0.05, "shard bypass: {:.1} % of the file entered the cache", during * 100.0),
        }
        let c = cached(&p);
        assert!(c <= 0.05, "shard run {policy:?}: {:.1} % stays cached", c * 100.0);
    }

    const BATCH: usize = 32;
    const WINDOW: usize = 16383;
    let mut g = Gather::new(hostfirst::Device::CPU, hostfirst::DType::F32, BATCH as u64, WINDOW as u64).unwrap();
    g.set_page_cache(PageCache::Bypass);
    let view = f.view("t2").unwrap();
    let offsets: Vec<u64> = (0..BATCH as u64).map(|i| i * (ELEMS as u64 / BATCH as u64) + 1001 + 3 * i).collect();
    evict(&p);
    let batch = g.run(&view, &offsets).unwrap();
    {
        let b = batch.lock().unwrap();
        let got = b.host_bytes().unwrap();
        for (i, &o) in offsets.iter().enumerate() {
            let at = 2 * ELEMS * 4 + o as usize * 4;
            assert!(got[i * WINDOW * 4..(i + 1) * WINDOW * 4] == data[at..at + WINDOW * 4], "window {i}");
        }
    }
    match g.last_bypass() {
        Some(Ok(n)) => assert_eq!(n, (BATCH * WINDOW * 4) as u64),
        Some(Err(why)) if fallback => assert!(why.contains("O_DIRECT"), "{why}"),
        other => panic!("the gather's bypass on a disk that allows O_DIRECT: {other:?}"),
    }
    let c =
        offsets.iter().map(|&o| cached_range(&p, data_start + 2 * ELEMS * 4 + o as usize * 4, WINDOW * 4)).sum::<f64>()
            / BATCH as f64;
    assert!(c <= 0.05, "gather bypass: {:.1} % of the windows' pages stay cached", c * 100.0);
    g.set_page_cache(PageCache::Keep);
    evict(&p);
    g.run(&view, &offsets).unwrap();
    assert_eq!(g.last_bypass(), None, "keep: no bypass report");
}
