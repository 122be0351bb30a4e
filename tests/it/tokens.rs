//! Token data as trainers keep it (issue 35): `.npy`, llm.c shards, Megatron indexed datasets and headerless
//! raw files, written here from the format descriptions, opened through the C API as `hostfirst_file`s, read
//! value for value against a reader of this file's own, and every hostile variant refused with its exact
//! status, no handle and no descriptor left behind. The C side (`tests/c/test_tokens.c`) runs under the
//! valgrind pass. The hostile variants are also the fuzz targets' seed corpus, `tests/corpus/tokens/`,
//! replayed here (refresh with `HOSTFIRST_UPDATE_CORPUS=1 cargo test --test it tokens::`).

use crate::common::*;
use crate::file_support::{handles, last_error, panics_on_this_thread};
use hostfirst::ffi::*;
use hostfirst::file::formats::megatron::write_index;
use hostfirst::file::{Format, RawLayout, RAW_INFER};
use hostfirst::place::Gather;
use hostfirst::{DType, Device, Status, TensorFile};
use std::ffi::CString;
use std::path::{Path, PathBuf};

// ---- writers, from the format descriptions ------------------------------------------------------------

/// An `.npy` file: magic, version, header length, the dict padded with spaces and a newline to a multiple of
/// 64 bytes, then `data`.
pub fn npy(major: u8, descr: &str, shape: &[u64], fortran: bool, data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let f = if fortran { "True" } else { "False" };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': {f}, 'shape': {shape}, }}");
    let pre = if major == 1 { 10 } else { 12 };
    while (pre + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut v = b"\x93NUMPY".to_vec();
    v.extend_from_slice(&[major, 0]);
    if major == 1 {
        v.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        v.extend_from_slice(&(h.len() as u32).to_le_bytes());
    }
    v.extend_from_slice(h.as_bytes());
    v.extend_from_slice(data);
    v
}

/// An `.npy` file with the dict as given.
pub fn npy_dict(major: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let mut h = dict.to_string();
    let pre = if major == 1 { 10 } else { 12 };
    while (pre + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut v = b"\x93NUMPY".to_vec();
    v.extend_from_slice(&[major, 0]);
    if major == 1 {
        v.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        v.extend_from_slice(&(h.len() as u32).to_le_bytes());
    }
    v.extend_from_slice(h.as_bytes());
    v.extend_from_slice(data);
    v
}

/// An llm.c shard: 256 int32 (magic, version, count), then the tokens.
pub fn llmc(magic: i32, version: i32, ntok: i32, tokens: &[u8]) -> Vec<u8> {
    let mut h = vec![0i32; 256];
    h[..3].copy_from_slice(&[magic, version, ntok]);
    let mut v: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
    v.extend_from_slice(tokens);
    v
}

/// u16 tokens `i * 7 + 3` for `i < n`.
fn toks(n: u64) -> Vec<u8> {
    (0..n).flat_map(|i| ((i * 7 + 3) as u16).to_le_bytes()).collect()
}

fn dir() -> PathBuf {
    scratch(&format!("tokens-{}", std::process::id()))
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Open descriptors of this process (Linux).
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn open_c(path: &Path) -> (Status, *mut hostfirst_file) {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut f = std::ptr::null_mut();
    (hostfirst_file_open(c.as_ptr(), &mut f), f)
}

// ---- the hostile variants: (name, files, the path to open, expected status) ----------------------------

/// Every hostile variant: a name, the files it consists of (name, bytes) and the expected status of
/// `hostfirst_file_open` on the first. Megatron variants are an `.idx` and a `.bin`.
/// A hostile variant: its name, its files (name, bytes), and the status opening the first must give.
pub type Variant = (String, Vec<(String, Vec<u8>)>, Status);

pub fn hostile() -> Vec<Variant> {
    let mut out: Vec<Variant> = Vec::new();
    let mut one = |name: &str, ext: &str, bytes: Vec<u8>, st: Status| {
        out.push((name.to_string(), vec![(format!("{name}.{ext}"), bytes)], st));
    };
    let good_npy = npy(1, "<u2", &[4], false, &toks(4));
    for cut in [6, 7, 9, 11, 40, good_npy.len() - 1] {
        let st = if cut < 10 { Status::HeaderTooSmall } else { Status::Truncated };
        one(&format!("npy-cut-{cut}"), "npy", good_npy[..cut].to_vec(), st);
    }
    one("npy-extra-byte", "npy", [good_npy.clone(), vec![0]].concat(), Status::IncompleteBuffer);
    one("npy-lying-shape", "npy", npy(1, "<u2", &[5], false, &toks(4)), Status::Truncated);
    one("npy-huge-shape", "npy", npy(1, "<u2", &[1 << 62, 1 << 62], false, &toks(4)), Status::ValidationOverflow);
    one(
        "npy-negative-dim",
        "npy",
        npy_dict(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (-4,), }", &toks(4)),
        Status::InvalidHeader,
    );
    one("npy-object", "npy", npy(1, "|O", &[1], false, &[0; 8]), Status::UnsupportedDtype);
    one("npy-big-endian", "npy", npy(2, ">f4", &[1], false, &[0; 4]), Status::UnsupportedDtype);
    one("npy-complex128", "npy", npy(3, "<c16", &[1], false, &[0; 16]), Status::UnsupportedDtype);
    one("npy-fortran", "npy", npy(1, "<u2", &[2, 2], true, &toks(4)), Status::UnsupportedLayout);
    one("npy-bad-descr", "npy", npy(1, "<u3", &[1], false, &[0; 3]), Status::InvalidHeader);
    let mut v4 = good_npy.clone();
    v4[6] = 4;
    one("npy-version-4", "npy", v4, Status::UnsupportedVersion);
    let mut big = good_npy.clone();
    big[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
    one("npy-header-too-large", "npy", big, Status::HeaderTooLarge);
    let good_llmc = llmc(20240520, 1, 4, &toks(4));
    one("llmc-short-header", "bin", good_llmc[..100].to_vec(), Status::HeaderTooSmall);
    one("llmc-truncated", "bin", good_llmc[..1030].to_vec(), Status::Truncated);
    one("llmc-extra", "bin", [good_llmc.clone(), vec![0, 0]].concat(), Status::IncompleteBuffer);
    one("llmc-lying-count", "bin", llmc(20240520, 1, i32::MAX, &toks(4)), Status::Truncated);
    one("llmc-negative-count", "bin", llmc(20240520, 1, -4, &toks(4)), Status::InvalidHeader);
    one("llmc-bad-version", "bin", llmc(20240520, 2, 4, &toks(4)), Status::UnsupportedVersion);
    one("llmc-llama3-bad-version", "bin", llmc(20240801, 1, 2, &toks(4)), Status::UnsupportedVersion);
    let mega = |name: &str, idx: Vec<u8>, bin_len: usize, st: Status| {
        (name.to_string(), vec![(format!("{name}.idx"), idx), (format!("{name}.bin"), vec![0u8; bin_len])], st)
    };
    let good = write_index(8, &[3, 0, 2], &[0, 2, 3], None);
    let mut m = vec![
        mega("mega-bin-short", good.clone(), 9, Status::Truncated),
        mega("mega-bin-long", good.clone(), 12, Status::IncompleteBuffer),
        mega("mega-idx-short-header", good[..20].to_vec(), 10, Status::HeaderTooSmall),
        mega("mega-idx-truncated", good[..good.len() - 1].to_vec(), 10, Status::Truncated),
        mega("mega-docs-out-of-order", write_index(8, &[3, 0, 2], &[0, 3, 2], None), 10, Status::InvalidIndex),
        mega("mega-docs-end", write_index(8, &[3, 0, 2], &[0, 2], None), 10, Status::InvalidIndex),
    ];
    let edit = |at: usize, bytes: &[u8]| {
        let mut v = good.clone();
        v[at..at + bytes.len()].copy_from_slice(bytes);
        v
    };
    m.push(mega("mega-version-2", edit(9, &2u64.to_le_bytes()), 10, Status::UnsupportedVersion));
    m.push(mega("mega-dtype-code-9", edit(17, &[9]), 10, Status::InvalidHeader));
    m.push(mega("mega-huge-count", edit(18, &(1u64 << 60).to_le_bytes()), 10, Status::Truncated));
    m.push(mega("mega-overflow-count", edit(18, &(u64::MAX / 3).to_le_bytes()), 10, Status::ValidationOverflow));
    m.push(mega("mega-negative-length", edit(34, &(-1i32).to_le_bytes()), 10, Status::InvalidIndex));
    let ptr_at = |i: usize| 34 + 12 + 8 * i;
    m.push(mega("mega-pointer-overlap", edit(ptr_at(1), &4i64.to_le_bytes()), 10, Status::InvalidOffset));
    m.push(mega("mega-pointer-gap", edit(ptr_at(1), &8i64.to_le_bytes()), 10, Status::InvalidOffset));
    m.push(mega("mega-pointer-out-of-order", edit(ptr_at(2), &0i64.to_le_bytes()), 10, Status::InvalidOffset));
    m.push(mega("mega-pointer-past-end", edit(ptr_at(2), &(1i64 << 40).to_le_bytes()), 10, Status::InvalidOffset));
    out.extend(m);
    out
}

/// An input of the fuzz target `open_raw` (fuzz/fuzz_targets/open_raw.rs): the layout in 8 bytes (dtype code,
/// rank, offset as u16 LE, up to four 1-byte dims, 255 = inferred), then the file.
fn raw_input(dtype: DType, dims: &[u8], offset: u16, file: &[u8]) -> Vec<u8> {
    let mut v = vec![dtype as u8, dims.len() as u8];
    v.extend_from_slice(&offset.to_le_bytes());
    let mut d = dims.to_vec();
    d.resize(4, 0);
    v.extend_from_slice(&d);
    v.extend_from_slice(file);
    v
}

/// Seeds for the fuzz targets besides the hostile variants: inputs that open (so fuzzing starts past validation,
/// where the targets read views, slice rows, take sequence spans and gather), and raw layouts, good and bad (the
/// `open_raw` target had no seed). Each in its corpus form (a Megatron one as the 8-byte length of its `.bin`,
/// then its `.idx`), with the status `open_corpus_input` must give.
pub fn fuzz_seeds() -> Vec<(String, Vec<u8>, Status)> {
    let mega = |idx: Vec<u8>, bin_len: u64| [bin_len.to_le_bytes().to_vec(), idx].concat();
    let s = |name: &str, bytes: Vec<u8>, st: Status| (name.to_string(), bytes, st);
    let f32s: Vec<u8> = (0..15).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect();
    vec![
        s("npy-valid-u16", npy(1, "<u2", &[40], false, &toks(40)), Status::Ok),
        s("npy-valid-2d-f32", npy(2, "<f4", &[3, 5], false, &f32s), Status::Ok),
        s(
            "npy-valid-scalar",
            npy_dict(3, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", &[7; 8]),
            Status::Ok,
        ),
        s("npy-valid-empty", npy(1, "|i1", &[0, 4], false, &[]), Status::Ok),
        s("llmc-valid-u16", llmc(20240520, 1, 50, &toks(50)), Status::Ok),
        s("llmc-valid-u32", llmc(20240801, 7, 3, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 1, 0]), Status::Ok),
        s("llmc-valid-empty", llmc(20240520, 1, 0, &[]), Status::Ok),
        s("mega-valid-u16", mega(write_index(8, &[3, 0, 5, 1], &[0, 2, 4], None), 18), Status::Ok),
        s("mega-valid-i32", mega(write_index(4, &[2, 9], &[0, 2], None), 44), Status::Ok),
        s("mega-valid-empty", mega(write_index(1, &[], &[0], None), 0), Status::Ok),
        s("raw-valid-u16-infer", raw_input(DType::U16, &[255], 4, &[b"HDR!".to_vec(), toks(32)].concat()), Status::Ok),
        s("raw-valid-u8-rows", raw_input(DType::U8, &[255, 4], 0, &[9; 32]), Status::Ok),
        s("raw-valid-i32-scalar", raw_input(DType::I32, &[], 0, &[1, 2, 3, 4]), Status::Ok),
        s("raw-valid-bf16-2x3", raw_input(DType::BF16, &[2, 3], 2, &[0; 14]), Status::Ok),
        s("raw-partial-row", raw_input(DType::U16, &[255, 3], 0, &toks(16)), Status::IncompleteBuffer),
        s("raw-extra-byte", raw_input(DType::U8, &[4], 0, &[1, 2, 3, 4, 5]), Status::IncompleteBuffer),
        s("raw-short", raw_input(DType::U32, &[4], 0, &[0; 12]), Status::IncompleteBuffer),
        s("raw-offset-past-end", raw_input(DType::U8, &[255], 100, &[0; 10]), Status::IncompleteBuffer),
        s("raw-f4-half-byte", raw_input(DType::F4, &[3], 0, &[0; 2]), Status::MisalignedSlice),
        s(
            "raw-npy-image",
            raw_input(DType::U16, &[255], 0, &npy(1, "<u2", &[4], false, &toks(4))),
            Status::OtherFormat,
        ),
    ]
}

// ---- tests ---------------------------------------------------------------------------------------------

#[test]
fn npy_every_dtype_and_version_value_for_value() {
    let cases: &[(&str, DType, u64)] = &[
        ("|b1", DType::BOOL, 1),
        ("|u1", DType::U8, 1),
        ("|i1", DType::I8, 1),
        ("<i2", DType::I16, 2),
        ("<u2", DType::U16, 2),
        ("<i4", DType::I32, 4),
        ("<u4", DType::U32, 4),
        ("<i8", DType::I64, 8),
        ("<u8", DType::U64, 8),
        ("<f2", DType::F16, 2),
        ("<f4", DType::F32, 4),
        ("<f8", DType::F64, 8),
        ("<c8", DType::C64, 8),
    ];
    for major in 1..=3u8 {
        for (descr, dtype, size) in cases {
            let shape = [3u64, 5];
            let data: Vec<u8> =
                (0..15 * size).map(|i| (i * 31 % 251) as u8 & if *dtype == DType::BOOL { 1 } else { 0xff }).collect();
            let p = write(&format!("all-{major}-{}.npy", dtype.name()), &npy(major, descr, &shape, false, &data));
            let f = TensorFile::open(&p).unwrap_or_else(|e| panic!("{descr} v{major}: {e}"));
            assert_eq!(f.format(), Format::Npy);
            let v = f.view("data").unwrap();
            assert_eq!((v.dtype(), v.shape()), (*dtype, &shape[..]), "{descr}");
            assert_eq!(v.to_vec().unwrap(), data, "{descr} v{major}");
            assert_eq!(f.metadata("descr"), Some(*descr));
            // Views on any dimension read the same bytes as slicing the array would.
            let col = v.narrow(1, 2, 2).unwrap().to_vec().unwrap();
            let want: Vec<u8> = (0..3)
                .flat_map(|r| data[((r * 5 + 2) * size) as usize..((r * 5 + 4) * size) as usize].to_vec())
                .collect();
            assert_eq!(col, want);
        }
    }
}

#[test]
fn llmc_and_raw_and_downstream() {
    let n = 5000u64;
    let p = write("shard.bin", &llmc(20240520, 1, n as i32, &toks(n)));
    let f = TensorFile::open(&p).unwrap();
    assert_eq!((f.format(), f.len(), f.name(0)), (Format::Llmc, 1, Some("tokens")));
    let t = f.view("tokens").unwrap();
    assert_eq!((t.dtype(), t.shape(), t.file_offset()), (DType::U16, &[n][..], 1024));
    assert_eq!(t.to_vec().unwrap(), toks(n));
    // The gather (pread and prefaulted paths) and the padded sequence rows.
    let mut g = Gather::new(Device::CPU, DType::U16, 3, 8).unwrap();
    let offsets = [0u64, 17, n - 8];
    let b = g.run(&t, &offsets).unwrap();
    let mut got = vec![0u8; 48];
    b.lock().unwrap().copy_to_host(&mut got).unwrap();
    let want: Vec<u8> =
        offsets.iter().flat_map(|&o| toks(n)[(2 * o) as usize..(2 * o + 16) as usize].to_vec()).collect();
    assert_eq!(got, want);
    drop(b);
    let b = g.run_spans(&t, &[10, 20, n - 2], &[3, 100, 2], 0xBEEF).unwrap();
    b.lock().unwrap().copy_to_host(&mut got).unwrap();
    let row = |o: u64, k: u64| {
        let mut r = toks(n)[(2 * o) as usize..(2 * (o + k)) as usize].to_vec();
        while r.len() < 16 {
            r.extend_from_slice(&0xBEEFu16.to_le_bytes());
        }
        r
    };
    assert_eq!(got, [row(10, 3), row(20, 8), row(n - 2, 2)].concat());
    assert_eq!(g.run_spans(&t, &[n - 1, 0, 0], &[2, 1, 1], 0).unwrap_err().status(), Status::OutOfRange);
    // The same bytes as a raw file (nanoGPT's train.bin) and as a raw view past the llm.c header.
    let raw = write("train.bin", &toks(n));
    let r = TensorFile::open_raw(&raw, &RawLayout::tokens(DType::U16)).unwrap();
    assert_eq!((r.format(), r.name(0)), (Format::Raw, Some("data")));
    assert_eq!(r.view("data").unwrap().to_vec().unwrap(), toks(n));
    let past = RawLayout { offset: 1024, name: "tokens".into(), ..RawLayout::tokens(DType::U16) };
    assert_eq!(TensorFile::open_raw(&p, &past).unwrap().view("tokens").unwrap().to_vec().unwrap(), toks(n));
    let e = TensorFile::open_raw(&p, &RawLayout::tokens(DType::U16)).unwrap_err();
    assert_eq!(e.status(), Status::OtherFormat, "{e}");
    assert!(e.message().contains("llm.c token shard") && e.message().contains("hostfirst_file_open"), "{e}");
    // A known format asked for as another names what it is and the call that opens it.
    let e = TensorFile::open_format(&p, Format::Npy).unwrap_err();
    assert_eq!(e.status(), Status::OtherFormat);
    assert!(e.message().contains("llm.c") && e.message().contains("HOSTFIRST_FORMAT_LLMC"), "{e}");
    let st = write("x.safetensors", &{
        let h = b"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}".to_vec();
        [(h.len() as u64).to_le_bytes().to_vec(), h, vec![7]].concat()
    });
    assert_eq!(TensorFile::open_format(&st, Format::Llmc).unwrap_err().status(), Status::OtherFormat);
    assert_eq!(TensorFile::open_format(&p, Format::Llmc).unwrap().format(), Format::Llmc);
    // A headerless file opened as safetensors says what to do.
    let e = TensorFile::open(&raw).unwrap_err();
    assert!(e.message().contains("hostfirst_file_open_raw"), "{e}");
}

/// Megatron: written from the format description, read back against our own reader of the description.
#[test]
fn megatron_sequences_and_documents() {
    let lengths = [3i32, 0, 5, 1, 7];
    let docs = [0i64, 2, 3, 5];
    let total: i32 = lengths.iter().sum();
    let bin = toks(total as u64);
    let d = dir();
    std::fs::write(d.join("corpus_text_document.idx"), write_index(8, &lengths, &docs, None)).unwrap();
    std::fs::write(d.join("corpus_text_document.bin"), &bin).unwrap();
    for path in ["corpus_text_document.idx", "corpus_text_document.bin", "corpus_text_document"] {
        let f = TensorFile::open(d.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(f.format(), Format::Megatron);
        let names: Vec<&str> = f.names().collect();
        assert_eq!(names, ["tokens", "sequence_lengths", "sequence_pointers", "document_indices"]);
        assert_eq!(f.view("tokens").unwrap().to_vec().unwrap(), bin);
        let l = f.view("sequence_lengths").unwrap().to_vec().unwrap();
        assert_eq!(l, lengths.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        let dv = f.view("document_indices").unwrap().to_vec().unwrap();
        assert_eq!(dv, docs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        assert_eq!(f.metadata("max_sequence_length"), Some("7"));
        assert_eq!(f.metadata("document_count"), Some("3"));
    }
    let f = TensorFile::open(d.join("corpus_text_document")).unwrap();
    // Our own reader of the description: sequence i starts at the sum of the lengths before it.
    let idx = [4u64, 0, 2, 1];
    let (mut s, mut l) = ([0u64; 4], [0u64; 4]);
    f.sequence_spans(&idx, &mut s, &mut l).unwrap();
    for (k, &i) in idx.iter().enumerate() {
        let start: i32 = lengths[..i as usize].iter().sum();
        assert_eq!((s[k], l[k]), (start as u64, lengths[i as usize] as u64));
    }
    assert_eq!(f.sequence_spans(&[5], &mut [0], &mut [0]).unwrap_err().status(), Status::OutOfRange);
    // The C call: whole sequences, padded, with the lengths each row holds.
    let mut g: *mut hostfirst_gather = std::ptr::null_mut();
    let cpu = hostfirst_device { kind: 1, ordinal: 0 };
    assert_eq!(hostfirst_gather_new(cpu, DType::U16 as u32, 4, 4, &mut g), Status::Ok, "{}", last_error());
    let (st, fh) = open_c(&d.join("corpus_text_document.idx"));
    assert_eq!(st, Status::Ok);
    let mut rows = [0u64; 4];
    let mut batch: *mut hostfirst_buffer = std::ptr::null_mut();
    assert_eq!(hostfirst_gather_run_sequences(g, fh, idx.as_ptr(), 4, 9, rows.as_mut_ptr(), &mut batch), Status::Ok);
    assert_eq!(rows, [4, 3, 4, 0]);
    let mut got = vec![0u8; 32];
    assert_eq!(hostfirst_buffer_copy_to_host(batch, got.as_mut_ptr().cast(), 32), Status::Ok);
    let want: Vec<u8> = idx
        .iter()
        .flat_map(|&i| {
            let start: i32 = lengths[..i as usize].iter().sum();
            let k = (lengths[i as usize] as usize).min(4);
            let mut r = bin[2 * start as usize..2 * (start as usize + k)].to_vec();
            r.resize(8, 0);
            for e in r[2 * k..].chunks_exact_mut(2) {
                e.copy_from_slice(&9u16.to_le_bytes());
            }
            r
        })
        .collect();
    assert_eq!(got, want);
    let mut fmt = Format::Auto;
    assert_eq!(hostfirst_file_format(fh, &mut fmt), Status::Ok);
    assert_eq!(fmt, Format::Megatron);
    // Not a Megatron file: UNSUPPORTED; an index past the count: OUT_OF_RANGE; nothing written.
    let (_, other) = open_c(&write("seq.npy", &npy(1, "<u2", &[4], false, &toks(4))));
    rows = [7; 4];
    assert_eq!(
        hostfirst_gather_run_sequences(g, other, idx.as_ptr(), 4, 0, rows.as_mut_ptr(), &mut batch),
        Status::Unsupported
    );
    assert_eq!(
        hostfirst_gather_run_sequences(g, fh, [9u64, 0, 0, 0].as_ptr(), 4, 0, rows.as_mut_ptr(), &mut batch),
        Status::OutOfRange
    );
    assert_eq!(rows, [7; 4]);
    for h in [fh, other] {
        assert_eq!(hostfirst_file_free(h), Status::Ok);
    }
    assert_eq!(hostfirst_buffer_free(batch), Status::Ok);
    assert_eq!(hostfirst_gather_free(g), Status::Ok);
}

#[test]
fn hostile_files_get_exact_statuses_and_leak_nothing() {
    alone(concat!(module_path!(), "::hostile_files_get_exact_statuses_and_leak_nothing"), || {
        let (h0, fd0, p0) = (handles(), fds(), panics_on_this_thread());
        for (name, files, want) in hostile() {
            let d = dir().join(&name);
            std::fs::create_dir_all(&d).unwrap();
            for (n, b) in &files {
                std::fs::write(d.join(n), b).unwrap();
            }
            let (st, f) = open_c(&d.join(&files[0].0));
            assert_eq!(st, want, "{name}: got {} ({})", st.name(), last_error());
            assert!(f.is_null(), "{name}");
            assert!(!last_error().is_empty());
            let fmt = if name.starts_with("npy") {
                Format::Npy
            } else if name.starts_with("llmc") {
                Format::Llmc
            } else {
                Format::Megatron
            };
            let c = CString::new(d.join(&files[0].0).to_str().unwrap()).unwrap();
            let mut f = std::ptr::null_mut();
            assert_eq!(hostfirst_file_open_format(c.as_ptr(), fmt as u32, &mut f), want, "{name} as {fmt:?}");
        }
        assert_eq!((handles(), fds(), panics_on_this_thread()), (h0, fd0, p0));
    });
}

/// The corpus files are the hostile variants (npy and llm.c images as they are; a Megatron variant as the
/// 8-byte length of its `.bin` then its `.idx`), and each is opened from memory the way the fuzz targets
/// open their inputs.
fn corpus_bytes(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    match files {
        [(_, one)] => one.clone(),
        [(_, idx), (_, bin)] => [(bin.len() as u64).to_le_bytes().to_vec(), idx.clone()].concat(),
        _ => unreachable!(),
    }
}

/// Opens a corpus input as the fuzz targets do; the status (memory statuses: `INCOMPLETE_BUFFER` where a
/// file gives `TRUNCATED`).
pub fn open_corpus_input(name: &str, bytes: &[u8]) -> Status {
    let r = if name.starts_with("raw") {
        // As fuzz/fuzz_targets/open_raw.rs reads its input.
        if bytes.len() < 8 {
            return Status::InvalidArgument;
        }
        let Some(dtype) = DType::from_u32(u32::from(bytes[0])) else { return Status::InvalidArgument };
        let rank = usize::from(bytes[1] % 5);
        let offset = u64::from(u16::from_le_bytes([bytes[2], bytes[3]]));
        let shape = bytes[4..4 + rank].iter().map(|&d| if d == 255 { RAW_INFER } else { u64::from(d) }).collect();
        TensorFile::raw_from_bytes(bytes[8..].to_vec(), &RawLayout { dtype, shape, offset, name: "data".into() })
    } else if name.starts_with("mega") {
        let (len, idx) = bytes.split_at(8.min(bytes.len()));
        let n = u64::from_le_bytes(len.try_into().unwrap_or([0; 8])).min(1 << 20) as usize;
        TensorFile::megatron_from_bytes(idx.to_vec(), vec![0u8; n])
    } else if name.starts_with("npy") {
        TensorFile::from_bytes_format(bytes.to_vec(), Format::Npy)
    } else {
        TensorFile::from_bytes_format(bytes.to_vec(), Format::Llmc)
    };
    r.map_or_else(|e| e.status(), |_| Status::Ok)
}

#[test]
fn corpus_replays() {
    let dir = root().join("tests/corpus/tokens");
    if std::env::var_os("HOSTFIRST_UPDATE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, files, _) in hostile() {
            let b = corpus_bytes(&files);
            let st = open_corpus_input(&name, &b);
            std::fs::write(dir.join(format!("{name}.{}.bin", st.name())), b).unwrap();
        }
        for (name, b, st) in fuzz_seeds() {
            std::fs::write(dir.join(format!("{name}.{}.bin", st.name())), b).unwrap();
        }
    }
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
        let (name, want) = stem.rsplit_once('.').unwrap();
        let got = open_corpus_input(name, &std::fs::read(&p).unwrap());
        assert_eq!(got.name(), want, "{}", p.display());
        n += 1;
    }
    assert!(n >= hostile().len() + fuzz_seeds().len(), "{n} corpus files for {} variants", hostile().len());
}

/// The fuzz seeds give the statuses they are filed under: the valid ones open, and the bad raw layouts are
/// refused as a raw file would be (`OTHER_FORMAT` for an `.npy` image at offset 0).
#[test]
fn fuzz_seeds_give_their_statuses() {
    for (name, bytes, want) in fuzz_seeds() {
        assert_eq!(open_corpus_input(&name, &bytes), want, "{name}");
    }
}

#[test]
fn c_program_opens_every_format() {
    let bin = compile_c_test("test_tokens");
    let out = run_ok(&bin, &[dir().to_str().unwrap()], &[]);
    assert!(out.contains("test_tokens: ok"), "{out}");
}

/// Issue 43, point 10: a file of another format opened as Megatron is OTHER_FORMAT, as the header promises,
/// whatever its name (an `.npy`, an llm.c shard, a safetensors file): the path was taken as the prefix of a
/// dataset, `<path>.idx`, and the open failed with IO. A prefix whose `.idx` exists still opens the dataset.
#[test]
fn another_format_opened_as_megatron_is_other_format() {
    let d = dir().join("other-as-megatron");
    std::fs::create_dir_all(&d).unwrap();
    let files = [
        ("tokens.npy", npy(1, "<u2", &[4], false, &toks(4))),
        ("shard.bin.x", llmc(20240520, 1, 4, &toks(4))),
        ("w.safetensors", b"\x10\0\0\0\0\0\0\0{\"__metadata__\":{}}".to_vec()),
    ];
    for (name, bytes) in &files {
        std::fs::write(d.join(name), bytes).unwrap();
        let e = TensorFile::open_format(d.join(name), Format::Megatron).unwrap_err();
        assert_eq!(e.status(), Status::OtherFormat, "{name}: {e}");
        let c = CString::new(d.join(name).to_str().unwrap()).unwrap();
        let mut f = std::ptr::null_mut();
        assert_eq!(hostfirst_file_open_format(c.as_ptr(), Format::Megatron as u32, &mut f), Status::OtherFormat);
        assert!(f.is_null() && last_error().contains(name), "{}", last_error());
    }
    // A name that is both a file and the prefix of a dataset: the dataset.
    std::fs::write(d.join("tokens.npy.idx"), write_index(8, &[2, 2], &[0, 2], None)).unwrap();
    std::fs::write(d.join("tokens.npy.bin"), toks(4)).unwrap();
    let f = TensorFile::open_format(d.join("tokens.npy"), Format::Megatron).unwrap();
    assert_eq!(f.format(), Format::Megatron);
    // Neither a file nor a prefix: still the missing .idx.
    let e = TensorFile::open_format(d.join("nothing"), Format::Megatron).unwrap_err();
    assert!(e.message().contains("nothing.idx"), "{e}");
}

/// Issue 43, point 11: the `.idx` rewritten in place after the open (its pointers now past the tokens): the spans
/// are checked against the tokens tensor and refused (INVALID_OFFSET, naming the sequence, the span and the
/// token count) instead of returned OK for a caller that indexes the tokens directly.
#[test]
fn sequence_spans_of_an_idx_rewritten_in_place_are_checked() {
    let d = dir().join("rewritten-idx");
    std::fs::create_dir_all(&d).unwrap();
    let (idx, bin) = (d.join("c.idx"), d.join("c.bin"));
    std::fs::write(&idx, write_index(8, &[3, 5], &[0, 2], None)).unwrap();
    std::fs::write(&bin, toks(8)).unwrap();
    let f = TensorFile::open_format(&idx, Format::Megatron).unwrap();
    let (mut s, mut l) = ([0u64; 2], [0u64; 2]);
    f.sequence_spans(&[0, 1], &mut s, &mut l).unwrap();
    assert_eq!((s, l), ([0, 3], [3, 5]));
    // Same size, new lengths (so new pointers): the second sequence now ends at token 3 + 50.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&idx)
        .and_then(|mut o| std::io::Write::write_all(&mut o, &write_index(8, &[3, 50], &[0, 2], None)))
        .unwrap();
    let (mut s, mut l) = ([7u64; 2], [7u64; 2]);
    let e = f.sequence_spans(&[0, 1], &mut s, &mut l).unwrap_err();
    assert_eq!(e.status(), Status::InvalidOffset, "{e}");
    assert!(e.message().contains("sequence 1") && e.message().contains("8 tokens"), "{e}");
    assert_eq!((s, l), ([7; 2], [7; 2]), "outputs untouched on failure");
    // The C call says the same (an .idx that says so at the open is refused there: TRUNCATED, the .bin is short).
    assert_eq!(open_c(&d.join("c.bin")).0, Status::Truncated);
    std::fs::write(&idx, write_index(8, &[3, 5], &[0, 2], None)).unwrap();
    let (st, fh) = open_c(&d.join("c.bin"));
    assert_eq!(st, Status::Ok);
    let (mut s, mut l) = ([0u64; 1], [0u64; 1]);
    assert_eq!(hostfirst_file_sequence_spans(fh, [1u64].as_ptr(), 1, s.as_mut_ptr(), l.as_mut_ptr()), Status::Ok);
    let mut o = std::fs::OpenOptions::new().write(true).open(&idx).unwrap();
    std::io::Write::write_all(&mut o, &write_index(8, &[3, 50], &[0, 2], None)).unwrap();
    let st = hostfirst_file_sequence_spans(fh, [1u64].as_ptr(), 1, s.as_mut_ptr(), l.as_mut_ptr());
    assert_eq!(st, Status::InvalidOffset, "{}", last_error());
    assert_eq!(hostfirst_file_free(fh), Status::Ok);
}
