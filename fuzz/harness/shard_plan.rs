//! Meshes, partition specs and shard plans. The input describes a mesh (axis names and sizes), a file of
//! up to four tensors (dtype, shape; bytes known), sharding rules (pattern, partition spec in text, or skip),
//! the positions this process owns with their devices, the read options, and whether the file is a buffer
//! or a file on disk. Everything goes through the C API: `hostfirst_shard_mesh_new`, `_rules_add`,
//! `_rules_skip`, `_plan_make`, `_plan_describe`, `_run`, `_result_get`. Checks:
//! - every status equals the one a direct computation gives, in the order the header documents (options,
//!   device values, then per position: twice, off the mesh, absent device; then per tensor: more spec
//!   entries than dimensions, an uneven split, a sub-byte shard that starts or ends inside a byte);
//! - a plan has one shard per tensor not skipped and owned position, in that order, each with the rule the
//!   reference matcher picks, the start and shape computed directly from the mesh coordinates, its size,
//!   and `copy_of` pointing at the first earlier shard of the same part;
//! - running the plan gives every shard's bytes exactly as cut directly from the tensor's bytes;
//! - no handle and no descriptor is left behind.
//!
//! Returns the status of the first step that fails (mesh, a rule, the plan, the run), or OK. Only `cpu`
//! devices are used (and invalid or absent ones), so the status does not depend on the machine.

use super::image::{pattern, safetensors, Tensor};
use super::input::Input;
use super::reference;
use super::{check_failure, cstring, handles, last_error, open_fds};
use hostfirst::ffi::*;
use hostfirst::Status;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::OnceLock;

const DTYPES: &[(&str, u64)] =
    &[("U8", 8), ("I16", 16), ("F32", 32), ("F64", 64), ("F4", 4), ("F6_E2M3", 6), ("BOOL", 8), ("C64", 64)];

struct Rule {
    pattern: Vec<u8>,
    /// None: a skip rule.
    spec: Option<Vec<u8>>,
}

fn file_path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| super::scratch("shard_plan").join("shards.safetensors"))
}

fn axis_size(b: u8) -> u64 {
    match b {
        250 => 1 << 20,
        251 => (1 << 20) + 1,
        252 => 1 << 32,
        253 => u64::MAX,
        254 => 1 << 10,
        255 => 0,
        _ => u64::from(b % 9),
    }
}

/// A rule the library took: its pattern's elements and, unless it is a skip rule, per tensor dimension the
/// splitting axes.
type Taken = (Vec<reference::Tok>, Option<Vec<Vec<usize>>>);

/// The status `ShardPlan::make` must give, and per shard (tensor, position index, rule, start, shape).
type Shards = Vec<(usize, usize, Option<usize>, Vec<u64>, Vec<u64>)>;

pub fn run(data: &[u8]) -> Status {
    let (hs, fds) = (handles(), open_fds());
    let st = go(&mut Input::new(data));
    assert_eq!(handles(), hs, "handles left behind");
    assert_eq!(open_fds(), fds, "descriptors left open");
    st
}

fn go(inp: &mut Input) -> Status {
    // The mesh.
    let k = usize::from(inp.byte() % 5);
    let mut raw_names: Vec<CString> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for _ in 0..k {
        raw_names.push(cstring(inp.bytes(12)));
        sizes.push(axis_size(inp.byte()));
    }
    let names: Option<Vec<String>> = raw_names.iter().map(|c| c.to_str().ok().map(str::to_string)).collect();
    let want = match &names {
        None => Status::InvalidArgument,
        Some(n) => reference::mesh_status(&n.iter().cloned().zip(sizes.iter().copied()).collect::<Vec<_>>()),
    };
    let ptrs: Vec<*const std::ffi::c_char> = raw_names.iter().map(|c| c.as_ptr()).collect();
    let mut mesh: *mut hostfirst_shard_mesh = std::ptr::null_mut();
    let st = hostfirst_shard_mesh_new(ptrs.as_ptr(), sizes.as_ptr(), k, &mut mesh);
    check_failure(st, "hostfirst_shard_mesh_new");
    assert_eq!(st, want, "mesh {raw_names:?} {sizes:?}: {}", last_error());
    if st != Status::Ok {
        assert!(mesh.is_null());
        return st;
    }
    let names = names.expect("a mesh that was made has UTF-8 names");
    let mut positions = 0u64;
    assert_eq!(hostfirst_shard_mesh_positions(mesh, &mut positions), Status::Ok);
    assert_eq!(positions, sizes.iter().product::<u64>());

    // The tensors.
    let t = usize::from(inp.byte() % 4) + 1;
    let mut tensors = Vec::new();
    let mut bits = Vec::new();
    for i in 0..t {
        let (mut dtype, mut b) = DTYPES[usize::from(inp.byte()) % DTYPES.len()];
        let rank = usize::from(inp.byte() % 4);
        let shape: Vec<u64> = (0..rank).map(|_| u64::from(inp.byte() % 9)).collect();
        let elems: u64 = shape.iter().product();
        if elems * b % 8 != 0 {
            (dtype, b) = ("U8", 8); // a sub-byte tensor must fill whole bytes to be a valid file
        }
        tensors.push(Tensor { name: format!("t{i}"), dtype, shape, data: pattern((elems * b / 8) as usize, i as u8) });
        bits.push(b);
    }

    // The rules.
    let mut rules = Vec::new();
    for _ in 0..inp.byte() % 4 {
        let skip = inp.byte() % 4 == 0;
        let pattern = inp.bytes(16).to_vec();
        let spec = if skip { None } else { Some(inp.bytes(24).to_vec()) };
        rules.push(Rule { pattern, spec });
    }

    // Owned positions and their devices.
    let mut owned: Vec<(u64, hostfirst_device)> = Vec::new();
    for _ in 0..inp.byte() % 5 {
        let p = inp.byte();
        let position = if p >= 250 { u64::MAX - u64::from(255 - p) } else { u64::from(p) };
        let device = match inp.byte() % 8 {
            7 => hostfirst_device { kind: 9, ordinal: 0 },
            6 => hostfirst_device { kind: 1, ordinal: 1 },
            5 => hostfirst_device { kind: 1, ordinal: -1 },
            _ => hostfirst_device { kind: 1, ordinal: 0 },
        };
        owned.push((position, device));
    }
    let opt = inp.byte();
    let on_disk = opt & 1 == 1;
    let mut options: hostfirst_shard_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_shard_options_init(&mut options, std::mem::size_of::<hostfirst_shard_options>()), Status::Ok);
    options.max_over_read = [0.0, 1.0, 3.5, 0.5, f64::NAN, 1.25, f64::INFINITY, 2.0][usize::from(opt >> 1) % 8];
    options.max_read_bytes = [0, 1, 5, 4096][usize::from(opt >> 4) % 4];
    options.chunk_bytes = [0, 1, 3, 64][usize::from(opt >> 6) % 4];
    options.threads = 1 + u32::from(inp.byte() % 2);

    let r = with_mesh(mesh, &names, &sizes, &tensors, &bits, &rules, &owned, &options, on_disk);
    assert_eq!(hostfirst_shard_mesh_free(mesh), Status::Ok);
    r
}

#[allow(clippy::too_many_arguments)]
fn with_mesh(
    mesh: *mut hostfirst_shard_mesh,
    names: &[String],
    sizes: &[u64],
    tensors: &[Tensor],
    bits: &[u64],
    rules: &[Rule],
    owned: &[(u64, hostfirst_device)],
    options: &hostfirst_shard_options,
    on_disk: bool,
) -> Status {
    let mut h: *mut hostfirst_shard_rules = std::ptr::null_mut();
    assert_eq!(hostfirst_shard_rules_new(mesh, &mut h), Status::Ok);
    // The rules the library took: pattern elements and, unless a skip rule, the spec's dimensions.
    let mut taken: Vec<Taken> = Vec::new();
    let mut status = Status::Ok;
    for r in rules {
        let p = cstring(&r.pattern);
        let st = match &r.spec {
            Some(s) => hostfirst_shard_rules_add(h, p.as_ptr(), cstring(s).as_ptr()),
            None => hostfirst_shard_rules_skip(h, p.as_ptr()),
        };
        check_failure(st, "hostfirst_shard_rules_add");
        let toks = std::str::from_utf8(&r.pattern).ok().and_then(reference::glob_tokens);
        let spec = match &r.spec {
            None => Some(None),
            Some(s) => std::str::from_utf8(s).ok().and_then(|s| reference::partition_spec(s, names)).map(Some),
        };
        match (toks, spec) {
            (Some(t), Some(s)) => {
                assert_eq!(st, Status::Ok, "rule {:?} {:?}: {}", r.pattern, r.spec, last_error());
                taken.push((t, s));
            }
            _ => {
                assert_eq!(st, Status::InvalidArgument, "rule {:?} {:?}", r.pattern, r.spec);
                if status == Status::Ok {
                    status = st;
                }
            }
        }
    }
    let r = with_rules(h, names, sizes, tensors, bits, &taken, owned, options, on_disk);
    assert_eq!(hostfirst_shard_rules_free(h), Status::Ok);
    if status != Status::Ok {
        status
    } else {
        r
    }
}

/// What `ShardPlan::make` must give, computed directly.
#[allow(clippy::too_many_arguments)]
fn expected(
    sizes: &[u64],
    tensors: &[Tensor],
    bits: &[u64],
    taken: &[Taken],
    owned: &[(u64, hostfirst_device)],
    options: &hostfirst_shard_options,
) -> Result<Shards, Status> {
    let over = if options.max_over_read == 0.0 { 1.25 } else { options.max_over_read };
    if !(over.is_finite() && over >= 1.0) {
        return Err(Status::InvalidArgument);
    }
    if owned.iter().any(|(_, d)| !(1..=3).contains(&d.kind) || d.ordinal < 0) {
        return Err(Status::InvalidArgument);
    }
    let positions: u64 = sizes.iter().product();
    let mut coords = Vec::new();
    for (i, (p, d)) in owned.iter().enumerate() {
        if owned[..i].iter().any(|(q, _)| q == p) {
            return Err(Status::InvalidArgument);
        }
        if *p >= positions {
            return Err(Status::OutOfRange);
        }
        if d.ordinal != 0 {
            return Err(Status::NoSuchDevice);
        }
        let mut c = vec![0u64; sizes.len()];
        let mut rest = *p;
        for a in (0..sizes.len()).rev() {
            c[a] = rest % sizes[a];
            rest /= sizes[a];
        }
        coords.push(c);
    }
    let mut out = Vec::new();
    for (ti, t) in tensors.iter().enumerate() {
        let name = &t.name;
        let rule = taken.iter().position(|(toks, _)| reference::glob_matches(toks, name));
        let dims = match rule {
            Some(r) => match &taken[r].1 {
                None => continue, // skipped
                Some(d) => d.clone(),
            },
            None => Vec::new(),
        };
        for (oi, c) in coords.iter().enumerate() {
            if dims.len() > t.shape.len() {
                return Err(Status::InvalidArgument);
            }
            let mut start = vec![0u64; t.shape.len()];
            let mut shape = t.shape.clone();
            for (d, axes) in dims.iter().enumerate() {
                if axes.is_empty() {
                    continue;
                }
                let parts: u64 = axes.iter().map(|&a| sizes[a]).product();
                let index = axes.iter().fold(0u64, |i, &a| i * sizes[a] + c[a]);
                if t.shape[d] % parts != 0 {
                    return Err(Status::InvalidArgument);
                }
                shape[d] = t.shape[d] / parts;
                start[d] = index * shape[d];
            }
            if !aligned(&t.shape, &start, &shape, bits[ti]) {
                return Err(Status::MisalignedSlice);
            }
            out.push((ti, oi, rule, start, shape));
        }
    }
    Ok(out)
}

/// Whether every contiguous run of the block (`start`, `shape`) of a tensor of `full` shape starts and ends
/// on a byte boundary (always for whole-byte dtypes; an empty block has no run).
fn aligned(full: &[u64], start: &[u64], shape: &[u64], bits: u64) -> bool {
    if bits % 8 == 0 || shape.contains(&0) {
        return true;
    }
    let mut ok = true;
    each_run(full, start, shape, |first, len| ok &= (first * bits) % 8 == 0 && (len * bits) % 8 == 0);
    ok
}

/// Calls `f(first element, element count)` for each maximal contiguous run of the block, in order.
fn each_run(full: &[u64], start: &[u64], shape: &[u64], mut f: impl FnMut(u64, u64)) {
    let mut prev: Option<(u64, u64)> = None;
    each_element(full, start, shape, |e| {
        prev = match prev {
            Some((s, n)) if s + n == e => Some((s, n + 1)),
            Some((s, n)) => {
                f(s, n);
                Some((e, 1))
            }
            None => Some((e, 1)),
        };
    });
    if let Some((s, n)) = prev {
        f(s, n);
    }
}

/// Calls `f` with the element index (C order in the whole tensor) of every element of the block, in order.
fn each_element(full: &[u64], start: &[u64], shape: &[u64], mut f: impl FnMut(u64)) {
    let count: u64 = shape.iter().product();
    let mut idx = vec![0u64; shape.len()];
    for _ in 0..count {
        let mut e = 0u64;
        for d in 0..full.len() {
            e = e * full[d] + start[d] + idx[d];
        }
        f(e);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The block's bytes cut from the tensor's (elements in C order, bits packed least significant first).
fn cut(t: &Tensor, bits: u64, start: &[u64], shape: &[u64]) -> Vec<u8> {
    let n: u64 = shape.iter().product();
    let mut out = vec![0u8; (n * bits).div_ceil(8) as usize];
    let mut k = 0u64;
    each_element(&t.shape, start, shape, |e| {
        for b in 0..bits {
            let (s, d) = (e * bits + b, k * bits + b);
            let bit = (t.data[(s / 8) as usize] >> (s % 8)) & 1;
            out[(d / 8) as usize] |= bit << (d % 8);
        }
        k += 1;
    });
    out
}

#[allow(clippy::too_many_arguments)]
fn with_rules(
    h: *mut hostfirst_shard_rules,
    names: &[String],
    sizes: &[u64],
    tensors: &[Tensor],
    bits: &[u64],
    taken: &[Taken],
    owned: &[(u64, hostfirst_device)],
    options: &hostfirst_shard_options,
    on_disk: bool,
) -> Status {
    let _ = names;
    let image = safetensors(tensors, &[]);
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    if on_disk {
        let p = file_path();
        std::fs::write(p, &image).unwrap();
        let c = cstring(p.to_str().unwrap().as_bytes());
        assert_eq!(hostfirst_file_open(c.as_ptr(), &mut f), Status::Ok, "{}", last_error());
    } else {
        assert_eq!(hostfirst_file_open_memory(image.as_ptr().cast(), image.len(), &mut f), Status::Ok);
    }
    let positions: Vec<u64> = owned.iter().map(|o| o.0).collect();
    let devices: Vec<hostfirst_device> = owned.iter().map(|o| o.1).collect();
    let mut plan: *mut hostfirst_shard_plan = std::ptr::null_mut();
    let st = hostfirst_shard_plan_make(f, h, positions.as_ptr(), devices.as_ptr(), owned.len(), options, &mut plan);
    check_failure(st, "hostfirst_shard_plan_make");
    let want = expected(sizes, tensors, bits, taken, owned, options);
    let got = if st == Status::Ok { Ok(()) } else { Err(st) };
    assert_eq!(got, want.as_ref().map(|_| ()).map_err(|s| *s), "plan status: {}", last_error());
    let Ok(shards) = want else {
        assert!(plan.is_null());
        assert_eq!(hostfirst_file_free(f), Status::Ok);
        return st;
    };
    let st = check_plan(plan, tensors, bits, owned, &shards);
    assert_eq!(hostfirst_shard_plan_free(plan), Status::Ok);
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    st
}

fn check_plan(
    plan: *mut hostfirst_shard_plan,
    tensors: &[Tensor],
    bits: &[u64],
    owned: &[(u64, hostfirst_device)],
    shards: &Shards,
) -> Status {
    let mut count = 0usize;
    assert_eq!(hostfirst_shard_plan_count(plan, &mut count), Status::Ok);
    assert_eq!(count, shards.len());
    let mut total = 0u64;
    for (k, (ti, oi, rule, start, shape)) in shards.iter().enumerate() {
        let mut info: hostfirst_shard_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<hostfirst_shard_info>();
        assert_eq!(hostfirst_shard_plan_describe(plan, k, &mut info), Status::Ok);
        let t = &tensors[*ti];
        // SAFETY: a NUL-terminated name and `rank` dimensions owned by the plan.
        let name = unsafe { std::ffi::CStr::from_ptr(info.name) }.to_str().unwrap();
        let arr = |p: *const u64| {
            if info.rank == 0 {
                Vec::new()
            } else {
                unsafe { std::slice::from_raw_parts(p, info.rank as usize) }.to_vec()
            }
        };
        assert_eq!((name, info.tensor, info.position), (t.name.as_str(), *ti, owned[*oi].0), "shard {k}");
        assert_eq!(info.device, owned[*oi].1);
        assert_eq!(info.rule, rule.map_or(-1, |r| r as i32), "shard {k}: rule");
        assert_eq!(arr(info.shape), t.shape, "shard {k}: whole shape");
        assert_eq!(arr(info.start), *start, "shard {k}: start");
        assert_eq!(arr(info.shard_shape), *shape, "shard {k}: shape");
        let nbytes = shape.iter().product::<u64>() * bits[*ti] / 8;
        assert_eq!(info.nbytes, nbytes, "shard {k}: size");
        total += nbytes;
        let copy_of = shards[..k].iter().position(|s| s.0 == *ti && s.3 == *start && s.4 == *shape);
        assert_eq!(info.copy_of, copy_of.map_or(-1, |c| c as i64), "shard {k}: copy_of");
        if copy_of.is_some() {
            assert_eq!(info.read_bytes, 0);
        }
    }
    let mut planned = 0u64;
    assert_eq!(hostfirst_shard_plan_totals(plan, &mut planned, std::ptr::null_mut(), std::ptr::null_mut()), Status::Ok);
    assert_eq!(planned, total);

    let mut res: *mut hostfirst_shard_result = std::ptr::null_mut();
    let st = hostfirst_shard_run(plan, std::ptr::null(), &mut res);
    check_failure(st, "hostfirst_shard_run");
    assert_eq!(st, Status::Ok, "running a cpu plan: {}", last_error());
    let mut n = 0usize;
    assert_eq!(hostfirst_shard_result_count(res, &mut n), Status::Ok);
    assert_eq!(n, shards.len());
    for (k, (ti, _, _, start, shape)) in shards.iter().enumerate() {
        let mut b: *mut hostfirst_buffer = std::ptr::null_mut();
        let mut read = 0u64;
        assert_eq!(hostfirst_shard_result_get(res, k, &mut b, &mut read), Status::Ok);
        let want = cut(&tensors[*ti], bits[*ti], start, shape);
        let mut got = vec![0u8; want.len()];
        let st = hostfirst_buffer_copy_to_host(b, got.as_mut_ptr().cast(), got.len());
        assert_eq!(st, Status::Ok, "shard {k}: {}", last_error());
        assert!(got == want, "shard {k} of '{}' at {start:?} {shape:?}: bytes differ", tensors[*ti].name);
        assert_eq!(hostfirst_buffer_free(b), Status::Ok);
    }
    assert_eq!(hostfirst_shard_result_free(res), Status::Ok);
    Status::Ok
}
