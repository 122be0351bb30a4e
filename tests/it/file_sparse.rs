//! Opening reads only the header: a sparse 2 GiB file opens as fast as a 2 MiB one and the process's RSS
//! grows by about the header size. Also: a file truncated after opening gives TRUNCATED through the pread
//! path, never SIGBUS. One test per concern; the RSS test is alone in this binary's measurement window.

use crate::common::alone;
use crate::file_support::*;
use hostfirst::{Status, TensorFile};
use std::time::{Duration, Instant};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A token file: one U16 tensor of `data_len` bytes, written sparse (ftruncate) after the header.
fn sparse_token_file(name: &str, data_len: u64) -> std::path::PathBuf {
    let h = format!(
        r#"{{"__metadata__":{{"format":"tokens"}},"tokens":{{"dtype":"U16","shape":[{}],"data_offsets":[0,{data_len}]}}}}"#,
        data_len / 2
    );
    let path = tmp(name);
    std::fs::write(&path, image(&h, b"")).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(8 + h.len() as u64 + data_len).unwrap();
    path
}

fn best_open(path: &std::path::Path) -> Duration {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            let f = TensorFile::open(path).unwrap();
            let d = t.elapsed();
            drop(f);
            d
        })
        .min()
        .unwrap()
}

#[test]
fn open_cost_and_rss_do_not_grow_with_data_size() {
    alone(concat!(module_path!(), "::open_cost_and_rss_do_not_grow_with_data_size"), || {
        let small = sparse_token_file("tokens-2m.safetensors", 2 << 20);
        let big = sparse_token_file("tokens-2g.safetensors", 2 << 30);
        let _ = TensorFile::open(&small).unwrap(); // warm up allocator and page cache for the header

        let before = rss_bytes();
        let f = TensorFile::open(&big).unwrap();
        let v = f.view("tokens").unwrap();
        let after = rss_bytes();
        assert_eq!(v.nbytes(), 2 << 30);
        let grew = after.saturating_sub(before);
        let (t_small, t_big) = (best_open(&small), best_open(&big));
        eprintln!("open 2 MiB: {t_small:?}; open 2 GiB: {t_big:?}; RSS {before} -> {after} (+{grew} bytes)");
        // Memory is the deterministic measure (times are printed, never asserted: this machine may be busy).
        assert!(grew < 4 << 20, "RSS grew by {grew} bytes opening a 2 GiB file");
        // A small read through pread touches only what it reads.
        let mut buf = [1u8; 16];
        v.read_at((2 << 30) - 16, &mut buf).unwrap();
        assert_eq!(buf, [0; 16]);
        assert!(rss_bytes().saturating_sub(before) < 4 << 20);
        drop((v, f));
        std::fs::remove_file(&small).unwrap();
        std::fs::remove_file(&big).unwrap();
    });
}

#[test]
fn truncated_after_open_gives_truncated_not_sigbus() {
    alone(concat!(module_path!(), "::truncated_after_open_gives_truncated_not_sigbus"), || {
        let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        let h = format!(r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[0,{}]}}}}"#, data.len(), data.len());
        let path = tmp("shrinks.safetensors");
        std::fs::write(&path, image(&h, &data)).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("a").unwrap();
        assert_eq!(v.to_vec().unwrap(), data);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
        let e = v.to_vec().unwrap_err();
        assert_eq!(e.status(), Status::Truncated, "{e}");
        assert!(e.message().contains("tensor 'a'") && e.message().contains("shrinks.safetensors"), "{e}");
        // Bytes the shrunk file still holds remain readable; the first byte past its end is TRUNCATED.
        let still = 100 - v.file_offset();
        let mut head = vec![0u8; still as usize];
        v.read_at(0, &mut head).unwrap();
        assert_eq!(head, &data[..still as usize]);
        let mut one = [0u8; 1];
        assert_eq!(v.read_at(still, &mut one).unwrap_err().status(), Status::Truncated);
        // Reopening the shrunk file is refused cleanly.
        assert_eq!(TensorFile::open(&path).unwrap_err().status(), Status::Truncated);
        std::fs::remove_file(&path).unwrap();
    });
}

#[test]
fn views_from_many_threads() {
    let n = 64usize;
    let mut h = String::from("{");
    let mut data = Vec::new();
    for i in 0..n {
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(r#""t{i}":{{"dtype":"U32","shape":[4],"data_offsets":[{},{}]}}"#, i * 16, i * 16 + 16));
        for k in 0..4u32 {
            data.extend_from_slice(&(i as u32 * 10 + k).to_le_bytes());
        }
    }
    h.push('}');
    let path = tmp("threads.safetensors");
    std::fs::write(&path, image(&h, &data)).unwrap();
    let f = TensorFile::open(&path).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let f = f.clone();
            s.spawn(move || {
                for r in 0..200 {
                    let i = (t * 31 + r * 7) % n;
                    let v = f.view(&format!("t{i}")).unwrap();
                    let got = v.to_vec().unwrap();
                    assert_eq!(&got[..4], &(i as u32 * 10).to_le_bytes());
                    assert_eq!(v.mapped(), &got[..]);
                }
            });
        }
    });
    std::fs::remove_file(&path).unwrap();
}

/// `View::prefault` maps a view's pages (reads through the mapping then find them present), refuses a
/// tensor larger than available memory before reading anything (the fit message and numbers), reports
/// TRUNCATED, not SIGBUS, for a file that shrank, and is a no-op over memory buffers.
#[test]
fn prefault_maps_pages_and_refuses_what_cannot_fit() {
    alone(concat!(module_path!(), "::prefault_maps_pages_and_refuses_what_cannot_fit"), || {
        // 64 MiB of real data: after prefault, every page of the view is resident and mapped (mincore).
        let n = 64usize << 20;
        let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
        let h = format!(r#"{{"tokens":{{"dtype":"U16","shape":[{}],"data_offsets":[0,{n}]}}}}"#, n / 2);
        let path = tmp("prefault.safetensors");
        std::fs::write(&path, image(&h, &data)).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let v = f.view("tokens").unwrap();
        let faults = |v: &hostfirst::View| {
            // Minor faults taken by reading one byte of every page through the mapping.
            let before = minor_faults();
            let m = v.mapped();
            let mut sum = 0u64;
            for i in (0..m.len()).step_by(4096) {
                sum += m[i] as u64;
            }
            std::hint::black_box(sum);
            minor_faults() - before
        };
        assert!(v.prefault().unwrap(), "MADV_POPULATE_READ is available on the kernels CI runs");
        let after = faults(&v);
        assert!(after < 64, "{after} faults reading a prefaulted 64 MiB view");
        // A second file handle on the same data has its own mapping: without prefault it faults.
        let f2 = TensorFile::open(&path).unwrap();
        let v2 = f2.view("tokens").unwrap();
        let cold = faults(&v2);
        assert!(cold > after, "a fresh mapping took {cold} faults, the prefaulted one {after}");
        assert_eq!(&v.mapped()[..8], &data[..8]);

        // Far larger than any CI machine: refused by the fit check with the numbers, nothing read.
        let big = sparse_token_file("prefault-1t.safetensors", 1 << 40);
        let fb = TensorFile::open(&big).unwrap();
        let e = fb.view("tokens").unwrap().prefault().unwrap_err();
        assert_eq!(e.status(), Status::OutOfMemory);
        assert!(
            e.message().contains("prefault of tensor 'tokens' (1024.00 GiB) does not fit on cpu:0"),
            "{}",
            e.message()
        );
        assert_eq!(e.fit().unwrap().needed, 1 << 40);

        // Shrunk after open: TRUNCATED.
        let fv = f.view("tokens").unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1000).unwrap();
        assert_eq!(fv.prefault().unwrap_err().status(), Status::Truncated);

        // Memory buffers: nothing to do.
        let mem = TensorFile::from_bytes(image(&h, &data)).unwrap();
        assert!(!mem.view("tokens").unwrap().prefault().unwrap());
        for p in [path, big] {
            std::fs::remove_file(p).unwrap();
        }
    });
}

fn minor_faults() -> u64 {
    // This thread's minor faults (other tests run on other threads).
    // SAFETY: getrusage writes one rusage struct, which we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) }, 0);
    r.ru_minflt as u64
}
