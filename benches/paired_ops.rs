//! Same-process, paired comparisons with the safetensors crate (issue 22): each round runs hostfirst's C API
//! and the crate back to back in this one process, alternating which goes first; the report gives each
//! side's median and the median of the per-round ratios (neighbours in time are the fair comparison on a
//! machine whose speed drifts). The first round of each is a warm-up and is not counted.
//!
//!   many-paired FILE ROUNDS   hostfirst_file_open + hostfirst_plan_make (rule `*=cpu`) + hostfirst_load_run +
//!                             hostfirst_load_count vs the crate's File::open + mmap + deserialize + to_vec of
//!                             each tensor. Frees are outside the timed span on both sides.
//!   open-paired FILE ROUNDS   hostfirst_file_open + hostfirst_file_tensor_count + hostfirst_file_free vs the
//!                             crate's File::open + mmap + SafeTensors::read_metadata (+ drop).

use hostfirst::ffi::file::{hostfirst_file_free, hostfirst_file_open, hostfirst_file_tensor_count};
use hostfirst::ffi::load::{hostfirst_load_count, hostfirst_load_free, hostfirst_load_run};
use hostfirst::ffi::plan::{hostfirst_plan_free, hostfirst_plan_make};
use hostfirst::ffi::rules::{hostfirst_rules_add, hostfirst_rules_free, hostfirst_rules_new};
use hostfirst::Status;
use std::ffi::CString;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    v[v.len() / 2]
}

fn ok(s: Status) {
    if s != Status::Ok {
        // SAFETY: the thread-local message, valid until the next hostfirst call on this thread.
        let m = unsafe { std::ffi::CStr::from_ptr(hostfirst::ffi::status::hostfirst_last_error_message()) };
        panic!("{s:?}: {}", m.to_string_lossy());
    }
}

/// Runs `ours` and `theirs` `rounds + 1` times each, alternating the order; returns the JSON fields.
fn paired(rounds: usize, mut ours: impl FnMut() -> f64, mut theirs: impl FnMut() -> f64) -> String {
    let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=rounds {
        let (x, y) = if i % 2 == 0 {
            let x = ours();
            (x, theirs())
        } else {
            let y = theirs();
            (ours(), y)
        };
        if i > 0 {
            a.push(x);
            b.push(y);
            r.push(x / y);
        }
    }
    format!(
        r#""rounds":{rounds},"hostfirst_s":{:.9},"peer_s":{:.9},"paired_ratio":{:.4},"hostfirst_min_s":{:.9},"peer_min_s":{:.9}"#,
        median(&mut a),
        median(&mut b),
        median(&mut r),
        a[0],
        b[0]
    )
}

pub fn op_many_paired(args: &[String]) -> String {
    let (path, rounds): (&str, usize) = (&args[0], args[1].parse().unwrap());
    let cpath = CString::new(path).unwrap();
    let (star, cpu) = (CString::new("*").unwrap(), CString::new("cpu").unwrap());
    let mut tensors = 0usize;
    let ours = || {
        let t = Instant::now();
        let (mut f, mut r, mut p, mut l) =
            (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        ok(hostfirst_file_open(cpath.as_ptr(), &mut f));
        ok(hostfirst_rules_new(&mut r));
        ok(hostfirst_rules_add(r, star.as_ptr(), cpu.as_ptr()));
        ok(hostfirst_plan_make(f, r, &mut p));
        ok(hostfirst_load_run(f, p, std::ptr::null(), &mut l));
        let mut n = 0usize;
        ok(hostfirst_load_count(l, &mut n));
        let dt = t.elapsed().as_secs_f64();
        ok(hostfirst_load_free(l));
        ok(hostfirst_plan_free(p));
        ok(hostfirst_rules_free(r));
        ok(hostfirst_file_free(f));
        dt
    };
    let theirs = || {
        let t = Instant::now();
        let file = std::fs::File::open(path).expect("open");
        // SAFETY: read-only mapping of a file nobody truncates during the benchmark.
        let mmap = unsafe { memmap2::Mmap::map(&file).expect("mmap") };
        let st = safetensors::SafeTensors::deserialize(&mmap).expect("deserialize");
        let out: Vec<Vec<u8>> = st.tensors().into_iter().map(|(_, v)| v.data().to_vec()).collect();
        let dt = t.elapsed().as_secs_f64();
        tensors = out.len();
        drop(out);
        dt
    };
    let fields = paired(rounds, ours, theirs);
    format!(r#"{{"op":"many-paired","impl":"c-api-vs-crate","file":"{path}","tensors":{tensors},{fields}}}"#)
}

pub fn op_open_paired(args: &[String]) -> String {
    let (path, rounds): (&str, usize) = (&args[0], args[1].parse().unwrap());
    let cpath = CString::new(path).unwrap();
    let mut tensors = 0usize;
    let ours = || {
        let t = Instant::now();
        let mut f = std::ptr::null_mut();
        ok(hostfirst_file_open(cpath.as_ptr(), &mut f));
        let mut n = 0usize;
        ok(hostfirst_file_tensor_count(f, &mut n));
        ok(hostfirst_file_free(f));
        let dt = t.elapsed().as_secs_f64();
        tensors = n;
        dt
    };
    let theirs = || {
        let t = Instant::now();
        let file = std::fs::File::open(path).expect("open");
        // SAFETY: as above.
        let mmap = unsafe { memmap2::Mmap::map(&file).expect("mmap") };
        let (_, meta) = safetensors::SafeTensors::read_metadata(&mmap).expect("read_metadata");
        std::hint::black_box(&meta);
        drop((meta, mmap, file));
        t.elapsed().as_secs_f64()
    };
    let fields = paired(rounds, ours, theirs);
    format!(r#"{{"op":"open-paired","impl":"c-api-vs-crate","file":"{path}","tensors":{tensors},{fields}}}"#)
}
