//! Helpers for the loading tests: safetensors images built byte by byte, the reliability catalogue as data,
//! and opening through the C API with leak, handle and panic accounting.

#![allow(dead_code)]

use hostfirst::ffi::*;
use hostfirst::Status;
use std::cell::Cell;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// `len (u64 LE) | header | data`.
pub fn image(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

/// A raw length prefix followed by `rest`.
pub fn prefixed(n: u64, rest: &[u8]) -> Vec<u8> {
    let mut v = n.to_le_bytes().to_vec();
    v.extend_from_slice(rest);
    v
}

/// One row of the malformed-file catalogue, docs/malformed-files.md (possibly one of several variants).
pub struct Case {
    /// Corpus file stem, e.g. `row05-header-past-end`.
    pub name: &'static str,
    pub bytes: Vec<u8>,
    /// Status from `hostfirst_file_open_memory`.
    pub memory: Status,
    /// Status from `hostfirst_file_open` on the same bytes in a file.
    pub file: Status,
}

fn case(name: &'static str, bytes: Vec<u8>, memory: Status) -> Case {
    Case { name, bytes, memory, file: memory }
}

fn case2(name: &'static str, bytes: Vec<u8>, memory: Status, file: Status) -> Case {
    Case { name, bytes, memory, file }
}

/// The 16 U8 tensors of 2^60 bytes whose contiguous offsets end at u64::MAX (row 27).
pub fn row27_header() -> String {
    let big = 1u64 << 60;
    let mut h = String::from("{");
    for i in 0..16u64 {
        let b = i * big;
        let e = if i == 15 { u64::MAX } else { (i + 1) * big };
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(r#""t{i:02}":{{"dtype":"U8","shape":[{}],"data_offsets":[{b},{e}]}}"#, e - b));
    }
    h.push('}');
    h
}

fn t(name: &str, dtype: &str, shape: &str, b: u64, e: u64) -> String {
    format!(r#""{name}":{{"dtype":"{dtype}","shape":[{shape}],"data_offsets":[{b},{e}]}}"#)
}

/// Every catalogue case with input bytes (rows 32-34 need more than bytes and have their own tests).
pub fn catalogue() -> Vec<Case> {
    use Status::*;
    let ok4 = t("a", "F32", "", 0, 4);
    vec![
        case("row01-empty", vec![], HeaderTooSmall),
        case("row01-short", b"<\0\0".to_vec(), HeaderTooSmall),
        case("row02-header-too-large", b"<\0\0\0\0\xff\xff\xff".to_vec(), HeaderTooLarge),
        case("row03-length-beyond-32-bit", prefixed((1 << 32) + 2, b"{}"), HeaderTooLarge),
        case("row04-length-plus-8-overflows", prefixed(u64::MAX - 3, b"{}"), InvalidHeaderLength),
        case2("row05-header-past-end", b"<\0\0\0\0\0\0\0".to_vec(), InvalidHeaderLength, Truncated),
        case("row06-not-utf8", prefixed(1, b"\xff"), InvalidHeaderUtf8),
        case("row07-not-json", image("{", b""), InvalidHeaderJson),
        case("row08-empty-header", prefixed(0, b""), InvalidHeaderJson),
        case("row09-null", image("null", b""), InvalidHeaderJson),
        case("row09-array", image("[]", b""), InvalidHeaderJson),
        case("row09-string", image("\"x\"", b""), InvalidHeaderJson),
        case("row10-unknown-dtype", image(&format!("{{{}}}", t("a", "Q8", "4", 0, 4)), &[0; 4]), InvalidHeaderJson),
        case("row11-negative-dim", image(&format!("{{{}}}", t("a", "U8", "-1", 0, 4)), &[0; 4]), InvalidHeaderJson),
        case("row11-fractional-dim", image(&format!("{{{}}}", t("a", "U8", "1.5", 0, 4)), &[0; 4]), InvalidHeaderJson),
        case(
            "row12-offsets-three",
            image(r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}}"#, &[0; 4]),
            InvalidHeaderJson,
        ),
        case(
            "row12-offsets-one",
            image(r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}}"#, &[0; 4]),
            InvalidHeaderJson,
        ),
        case(
            "row13-metadata-number",
            image(&format!(r#"{{"__metadata__":{{"k":0}},{ok4}}}"#), &[0; 4]),
            InvalidHeaderJson,
        ),
        case(
            "row14-tensor-named-metadata",
            image(&format!("{{{}}}", t("__metadata__", "F32", "", 0, 4)), &[0; 4]),
            InvalidHeaderJson,
        ),
        case("row15-nul-padding", image(&format!("{{{ok4}}}\0\0\0"), &[0; 4]), InvalidHeaderJson),
        case("row16-whitespace-empty", image("\t\n{}\r ", b""), Ok),
        case("row16-whitespace-tensor", image(&format!("  {{{ok4}}}    "), &[0; 4]), Ok),
        case(
            "row17-unknown-field",
            image(r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{"x":[1,2]}}}"#, &[1, 2]),
            Ok,
        ),
        case("row18-first-not-at-zero", image(&format!("{{{}}}", t("a", "U8", "4", 4, 8)), &[0; 8]), InvalidOffset),
        case(
            "row18-gap",
            image(&format!("{{{},{}}}", t("a", "U8", "4", 0, 4), t("b", "U8", "4", 6, 10)), &[0; 10]),
            InvalidOffset,
        ),
        case(
            "row18-overlap",
            image(&format!("{{{},{}}}", t("a", "U8", "4", 0, 4), t("b", "U8", "4", 2, 6)), &[0; 6]),
            InvalidOffset,
        ),
        case(
            "row18-end-before-begin",
            image(&format!("{{{},{}}}", t("a", "U8", "4", 0, 4), t("b", "U8", "0", 4, 2)), &[0; 4]),
            InvalidOffset,
        ),
        case(
            "row19-duplicate-different",
            image(&format!("{{{},{}}}", t("a", "U8", "4", 0, 4), t("a", "U8", "4", 4, 8)), &[0; 8]),
            DuplicateTensor,
        ),
        case(
            "row20-duplicate-identical",
            image(&format!("{{{},{}}}", t("a", "U8", "4", 0, 4), t("a", "U8", "4", 0, 4)), &[0; 4]),
            DuplicateTensor,
        ),
        case(
            "row21-shape-product-overflow",
            image(&format!("{{{}}}", t("a", "U8", "2,18446744073709551614", 0, 4)), &[0; 4]),
            ValidationOverflow,
        ),
        case(
            "row22-bits-overflow",
            image(&format!("{{{}}}", t("a", "U8", "2,9223372036854775807", 0, 4)), &[0; 4]),
            ValidationOverflow,
        ),
        case("row23-f4-odd-elements", image(&format!("{{{}}}", t("a", "F4", "3", 0, 2)), &[0; 2]), MisalignedSlice),
        case("row24-span-mismatch", image(&format!("{{{}}}", t("a", "I32", "2,2", 0, 4)), &[0; 4]), TensorInvalidInfo),
        case("row25-extra-bytes", image(&format!("{{{ok4}}}"), &[0; 5]), IncompleteBuffer),
        case2("row26-short-data", image(&format!("{{{ok4}}}"), &[0; 3]), IncompleteBuffer, Truncated),
        case("row27-offsets-end-at-u64-max", image(&row27_header(), b""), ValidationOverflow),
        case(
            "row28-i32-usize-max-rows",
            image(&format!("{{{}}}", t("a", "I32", "18446744073709551615,2", 0, 0)), b""),
            ValidationOverflow,
        ),
        case(
            "row29-zero-sized",
            image(&format!("{{{},{}}}", t("a", "F32", "2,0", 0, 0), t("b", "F32", "0,0", 0, 0)), b""),
            Ok,
        ),
        case("row30-scalar", image(&format!("{{{ok4}}}"), &1.5f32.to_le_bytes()), Ok),
        case("row31-no-tensors", image("{}", b""), Ok),
        case("row35-misaligned-data", image(&format!("{{{}}}", t("a", "F64", "1", 0, 8)), &2.5f64.to_le_bytes()), Ok),
        case(
            "row36-nan-inf",
            image(
                &format!("{{{}}}", t("a", "F32", "3", 0, 12)),
                &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY].map(f32::to_le_bytes).concat(),
            ),
            Ok,
        ),
        // Beyond the catalogue: stricter-than-reference cases.
        case(
            "extra-name-with-nul",
            image(&format!("{{{}}}", t("a\\u0000b", "U8", "1", 0, 1)), &[0]),
            InvalidHeaderJson,
        ),
        case("extra-rank-33", image(&format!("{{{}}}", t("a", "U8", &["1"; 33].join(","), 0, 1)), &[0]), LimitExceeded),
        case(
            "extra-name-too-long",
            image(&format!("{{{}}}", t(&"n".repeat(4097), "U8", "1", 0, 1)), &[0]),
            LimitExceeded,
        ),
        case(
            "extra-duplicate-metadata",
            image(&format!(r#"{{"__metadata__":{{}},"__metadata__":{{}},{ok4}}}"#), &[0; 4]),
            InvalidHeaderJson,
        ),
        case("extra-missing-dtype", image(r#"{"a":{"shape":[1],"data_offsets":[0,1]}}"#, &[0]), InvalidHeaderJson),
        // Not safetensors at all: said so, with what the bytes look like (not HEADER_TOO_LARGE and a huge number).
        case(
            "extra-not-safetensors-text",
            b"# hostfirst\nHost RAM first, an accelerator when asked.\n".to_vec(),
            NotSafetensors,
        ),
        case(
            "extra-not-safetensors-zip",
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl".to_vec(),
            NotSafetensors,
        ),
        case(
            "extra-not-safetensors-lfs-pointer",
            b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 1234\n".to_vec(),
            NotSafetensors,
        ),
    ]
}

// ---- accounting --------------------------------------------------------------------------------------

thread_local! {
    static PANICS: Cell<usize> = const { Cell::new(0) };
}

/// Panics seen on this thread since the hook was installed (the hook still prints them).
pub fn panics_on_this_thread() -> usize {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.set(p.get() + 1));
            prev(info);
        }));
    });
    PANICS.with(|p| p.get())
}

pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

pub fn handles() -> usize {
    let mut n = 0;
    assert_eq!(hostfirst_handle_count(&mut n), Status::Ok);
    n
}

pub fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostfirst-load");
    std::fs::create_dir_all(&d).unwrap();
    d.join(format!("{}-{name}", std::process::id()))
}

pub fn last_error() -> String {
    let p = hostfirst::ffi::hostfirst_last_error_message();
    // SAFETY: the library returns a valid NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Opens `bytes` from memory through the C API, walks and copies every tensor; returns the first failing
/// status (or OK). Asserts the outputs-on-success rule and that every handle is released.
pub fn open_memory_and_walk(bytes: &[u8]) -> Status {
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    let st = hostfirst_file_open_memory(bytes.as_ptr().cast(), bytes.len(), &mut f);
    if st != Status::Ok {
        assert!(f.is_null(), "output written on failure");
        return st;
    }
    let st = walk(f);
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    st
}

/// Walks every tensor of an open file: view, describe, copy, and checks sizes agree.
pub fn walk(f: *mut hostfirst_file) -> Status {
    let mut n = 0usize;
    assert_eq!(hostfirst_file_tensor_count(f, &mut n), Status::Ok);
    for i in 0..n {
        let mut v: *mut hostfirst_view = std::ptr::null_mut();
        let st = hostfirst_file_view_at(f, i, &mut v);
        if st != Status::Ok {
            return st;
        }
        let mut info: hostfirst_view_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<hostfirst_view_info>();
        assert_eq!(hostfirst_view_describe(v, &mut info), Status::Ok);
        let shape: &[u64] =
            if info.rank == 0 { &[] } else { unsafe { std::slice::from_raw_parts(info.shape, info.rank as usize) } };
        let elems: u128 = shape.iter().map(|&d| d as u128).product();
        let bits = hostfirst_dtype_bits(info.dtype) as u128;
        assert_eq!(elems * bits / 8, info.nbytes as u128, "nbytes = shape x dtype (catalogue row 33)");
        let mut buf = vec![0u8; info.nbytes as usize];
        let mut need = 0u64;
        let st = hostfirst_view_copy(v, buf.as_mut_ptr().cast(), buf.len(), &mut need);
        assert_eq!(need, info.nbytes);
        if st == Status::Ok && info.nbytes > 0 {
            let mapped = unsafe { std::slice::from_raw_parts(info.data as *const u8, info.nbytes as usize) };
            assert_eq!(mapped, &buf[..], "copy equals the mapped bytes");
        }
        assert_eq!(hostfirst_view_free(v), Status::Ok);
        if st != Status::Ok {
            return st;
        }
    }
    Status::Ok
}

/// Opens a path through the C API; on success walks and frees it.
pub fn open_path_and_walk(path: &Path) -> Status {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    let st = hostfirst_file_open(c.as_ptr(), &mut f);
    if st != Status::Ok {
        assert!(f.is_null(), "output written on failure");
        return st;
    }
    let st = walk(f);
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    st
}
