//! One writer fuzz case, shared by the `writer` fuzz target (fuzz/fuzz_targets/writer.rs) and the replay of
//! its seed corpus by the ordinary test suite (tests/it/writer_corpus.rs, over tests/corpus/writer/*.bin).
//!
//! The input is a little program of writer calls through the C API: declare tensors from host memory (any
//! dtype integer, rank, shape, and a byte count that may or may not match), declare tensors in pieces and add
//! boxes (in range or not, overlapping or not), set metadata (duplicate keys included), split into parts, then
//! finish. A model of what each accepted call declared is kept; every refusal must be a status (never PANIC or
//! INTERNAL) that leaves the model as it was. After finish: when it succeeded, hostfirst's reader must give
//! back every tensor byte for byte and the metadata; when it failed, nothing may exist at the target and no
//! staged file may be left. The handle count returns to where it started.

use hostfirst::ffi::*;
use hostfirst::Status;
use std::collections::HashMap;
use std::ffi::CString;
use std::path::Path;

/// Reads the input as a stream of small numbers.
struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.at)?;
        self.at += 1;
        Some(b)
    }
    fn small(&mut self, n: u8) -> Option<u64> {
        self.byte().map(|b| (b % n) as u64)
    }
    fn text(&mut self) -> Option<String> {
        let len = self.small(12)? as usize;
        let end = (self.at + len).min(self.data.len());
        let s: String = String::from_utf8_lossy(&self.data[self.at..end]).chars().filter(|&c| c != '\0').collect();
        self.at = end;
        Some(s)
    }
}

/// A declared tensor of the model: its dtype, shape, bytes, and which bytes pieces gave.
struct Model {
    bytes: Vec<u8>,
    covered: Vec<bool>,
}

fn nbytes(dtype: u32, shape: &[u64]) -> Option<u64> {
    let bits = hostfirst_dtype_bits(dtype) as u64;
    let elems = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let b = elems.checked_mul(bits)?;
    (bits > 0 && b % 8 == 0).then_some(b / 8)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

/// C-order strides (elements).
fn strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn never_a_bug(st: Status, what: &str) {
    assert!(st != Status::Panic && st != Status::Internal, "{what}: {st:?}");
    assert!(Status::from_u32(st as u32).is_some());
}

fn staged_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".hostfirst-tmp")).count())
        .unwrap_or(0)
}

/// Runs one case in `dir` (a scratch directory the caller owns).
pub fn run(data: &[u8], dir: &Path) {
    let mut before = 0usize;
    hostfirst_handle_count(&mut before);
    let mut input = Input { data, at: 0 };
    let split = input.small(4).unwrap_or(0);
    let name = if split == 3 { "case.bin" } else { "case.safetensors" };
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let mut opts: hostfirst_writer_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_writer_options_init(&mut opts, std::mem::size_of::<hostfirst_writer_options>()), Status::Ok);
    opts.max_part_bytes = [0, 64, 1, 16][split as usize];
    opts.no_sync = 1;
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let mut w: *mut hostfirst_writer = std::ptr::null_mut();
    assert_eq!(hostfirst_writer_open(cpath.as_ptr(), &opts, &mut w), Status::Ok);

    let mut model: Vec<(String, u32, Vec<u64>, Model)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut metadata: Option<Vec<(String, String)>> = None;
    // Host memory the writer reads at finish: kept here until then.
    let mut keep: Vec<Vec<u8>> = Vec::new();

    while let Some(op) = input.small(6) {
        match op {
            // A whole tensor from host memory.
            0 | 1 => {
                let Some(n) = input.text() else { break };
                let dtype = input.small(24).unwrap_or(12) as u32;
                let rank = input.small(4).unwrap_or(1) as usize;
                let shape: Vec<u64> = (0..rank).map(|_| input.small(5).unwrap_or(1)).collect();
                let delta = input.small(8).unwrap_or(0);
                let want = nbytes(dtype, &shape);
                let len = want.unwrap_or(3) as usize + if delta == 7 { 1 } else { 0 };
                let bytes = pattern(len, input.byte().unwrap_or(0));
                let cn = CString::new(n.clone()).unwrap();
                let st = hostfirst_writer_add_host(
                    w,
                    cn.as_ptr(),
                    dtype,
                    shape.as_ptr(),
                    shape.len(),
                    bytes.as_ptr().cast(),
                    len,
                );
                never_a_bug(st, "add_host");
                if st == Status::Ok {
                    assert!(want == Some(len as u64) && !index.contains_key(&n) && n != "__metadata__");
                    index.insert(n.clone(), model.len());
                    model.push((n, dtype, shape, Model { covered: vec![true; len], bytes: bytes.clone() }));
                    keep.push(bytes);
                } else {
                    assert!(
                        want != Some(len as u64) || index.contains_key(&n) || n == "__metadata__" || n.len() > 4096
                    );
                }
            }
            // A tensor to come in pieces.
            2 => {
                let Some(n) = input.text() else { break };
                let dtype = input.small(24).unwrap_or(2) as u32;
                let rank = input.small(3).unwrap_or(1) as usize + 1;
                let shape: Vec<u64> = (0..rank).map(|_| input.small(6).unwrap_or(2)).collect();
                let cn = CString::new(n.clone()).unwrap();
                let st = hostfirst_writer_declare(w, cn.as_ptr(), dtype, shape.as_ptr(), shape.len());
                never_a_bug(st, "declare");
                if st == Status::Ok && !index.contains_key(&n) {
                    let len = nbytes(dtype, &shape).expect("accepted") as usize;
                    index.insert(n.clone(), model.len());
                    model.push((n, dtype, shape, Model { bytes: vec![0; len], covered: vec![false; len] }));
                }
            }
            // A box of a declared tensor (byte-sized dtypes, so the model's bookkeeping stays simple).
            3 => {
                if model.is_empty() {
                    continue;
                }
                let t = input.small(255).unwrap_or(0) as usize % model.len();
                let (n, dtype, shape) = (model[t].0.clone(), model[t].1, model[t].2.clone());
                let start: Vec<u64> = shape.iter().map(|_| input.small(4).unwrap_or(0)).collect();
                let len: Vec<u64> = shape.iter().map(|_| input.small(4).unwrap_or(1)).collect();
                let bits = hostfirst_dtype_bits(dtype) as u64;
                if bits % 8 != 0 {
                    continue; // sub-byte dtypes: the unit tests cover their boxes
                }
                let Some(pn) = nbytes(dtype, &len) else { continue };
                let bytes = pattern(pn as usize, input.byte().unwrap_or(0));
                let cn = CString::new(n).unwrap();
                let st = hostfirst_writer_add_piece_host(
                    w,
                    cn.as_ptr(),
                    start.as_ptr(),
                    len.as_ptr(),
                    start.len(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                );
                never_a_bug(st, "add_piece_host");
                if st == Status::Ok {
                    // Place the box's bytes in the model (whole elements: byte-sized dtypes here).
                    let esize = (bits / 8).max(1);
                    let st_ = strides(&shape);
                    let lst = strides(&len);
                    let elems: u64 = len.iter().product();
                    let m = &mut model[t].3;
                    for e in 0..elems {
                        let mut off = 0u64;
                        for d in 0..len.len() {
                            off += (start[d] + (e / lst[d]) % len[d]) * st_[d];
                        }
                        for b in 0..esize {
                            let at = (off * esize + b) as usize;
                            assert!(!m.covered[at], "an overlapping box was accepted");
                            m.covered[at] = true;
                            m.bytes[at] = bytes[(e * esize + b) as usize];
                        }
                    }
                    keep.push(bytes);
                }
            }
            // Metadata (maybe with a key twice).
            4 => {
                let k = input.small(4).unwrap_or(0) as usize;
                let mut pairs: Vec<(String, String)> = Vec::new();
                for _ in 0..k {
                    pairs.push((input.text().unwrap_or_default(), input.text().unwrap_or_default()));
                }
                let keys: Vec<CString> = pairs.iter().map(|(k, _)| CString::new(k.clone()).unwrap()).collect();
                let vals: Vec<CString> = pairs.iter().map(|(_, v)| CString::new(v.clone()).unwrap()).collect();
                let kp: Vec<*const std::ffi::c_char> = keys.iter().map(|c| c.as_ptr()).collect();
                let vp: Vec<*const std::ffi::c_char> = vals.iter().map(|c| c.as_ptr()).collect();
                let st = hostfirst_writer_set_metadata(w, kp.as_ptr(), vp.as_ptr(), pairs.len());
                never_a_bug(st, "set_metadata");
                let mut seen = std::collections::HashSet::new();
                let unique = pairs.iter().all(|(k, _)| seen.insert(k.clone()));
                assert_eq!(st == Status::Ok, unique, "metadata {pairs:?}: {st:?}");
                if st == Status::Ok {
                    metadata = Some(pairs);
                }
            }
            _ => break,
        }
    }

    let mut info: hostfirst_writer_info = unsafe { std::mem::zeroed() };
    info.struct_size = std::mem::size_of::<hostfirst_writer_info>();
    let st = hostfirst_writer_finish(w, &mut info);
    never_a_bug(st, "finish");
    let complete = model.iter().all(|(_, _, _, m)| m.covered.iter().all(|&c| c));
    if st == Status::Ok {
        assert!(complete, "finish accepted a tensor that lacks bytes");
        let target = if info.index.is_null() {
            path.clone()
        } else {
            std::path::PathBuf::from(unsafe { std::ffi::CStr::from_ptr(info.index) }.to_str().unwrap())
        };
        let f = hostfirst::file::TensorFile::open(&target).expect("what the writer wrote opens");
        assert_eq!(f.len(), model.len());
        for (n, dtype, shape, m) in &model {
            let v = f.view(n).expect("every tensor is there");
            assert_eq!(v.dtype() as u32, *dtype);
            assert_eq!(v.shape(), &shape[..]);
            assert!(v.to_vec().unwrap() == m.bytes, "tensor {n:?}");
        }
        for (k, v) in metadata.iter().flatten() {
            assert_eq!(f.metadata(k), Some(v.as_str()), "metadata {k:?}");
        }
    } else {
        assert!(!path.exists() && info.index.is_null(), "a failed finish left the target");
    }
    assert_eq!(staged_files(dir), 0, "a staged file was left");
    assert_eq!(hostfirst_writer_free(w), Status::Ok);
    drop(keep);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    let mut after = 0usize;
    hostfirst_handle_count(&mut after);
    assert_eq!(before, after, "a handle leaked");
}
