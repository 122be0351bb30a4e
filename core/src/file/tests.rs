//! Unit tests of the safe core (the catalogue, property and C tests live under tests/).

use super::*;
use crate::dtype::DType;
use crate::error::Status;

fn image(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn status(r: crate::Result<TensorFile>) -> Status {
    match r {
        Ok(_) => Status::Ok,
        Err(e) => e.status(),
    }
}

#[test]
fn opens_views_and_slices() {
    let data: Vec<u8> = (0u8..24).collect();
    let h = r#"{"__metadata__":{"format":"pt","b":"x"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},"s":{"dtype":"I32","shape":[],"data_offsets":[4,8]},"e":{"dtype":"U8","shape":[0,3],"data_offsets":[0,0]},"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
    let f = TensorFile::from_bytes(image(h, &data)).unwrap();
    assert_eq!(f.len(), 4);
    // File order: by offset, the empty tensor (0,0) before t (0,4).
    assert_eq!(f.names().collect::<Vec<_>>(), ["e", "t", "s", "w"]);
    assert_eq!(f.find("w"), Some(3));
    assert_eq!(f.find("nope"), None);
    assert_eq!(f.metadata_len(), 2);
    assert_eq!(f.metadata_entry(0), Some(("format", "pt")));
    assert_eq!(f.metadata("b"), Some("x"));
    assert_eq!(f.data_bytes(), 24);
    let w = f.view("w").unwrap();
    assert_eq!((w.dtype(), w.shape(), w.nbytes(), w.data_offset()), (DType::F32, &[2u64, 2][..], 16, 8));
    assert_eq!(w.file_offset(), 8 + h.len() as u64 + 8);
    assert_eq!(w.mapped(), &data[8..24]);
    let r1 = w.slice_rows(1, 2).unwrap();
    assert_eq!(r1.shape(), &[1, 2]);
    assert_eq!(r1.mapped(), &data[16..24]);
    let mut buf = [0u8; 4];
    r1.read_at(4, &mut buf).unwrap();
    assert_eq!(buf, [20, 21, 22, 23]);
    assert_eq!(r1.read_at(5, &mut buf).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(w.slice_rows(2, 1).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(w.slice_rows(0, 3).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(f.view("s").unwrap().slice_rows(0, 0).unwrap_err().status(), Status::Unsupported);
    let e = f.view("e").unwrap();
    assert_eq!(e.nbytes(), 0);
    assert_eq!(e.to_vec().unwrap(), Vec::<u8>::new());
    assert_eq!(f.view("zz").unwrap_err().status(), Status::NotFound);
    assert_eq!(f.view_at(4).unwrap_err().status(), Status::OutOfRange);
    drop(f);
    assert_eq!(w.to_vec().unwrap(), &data[8..24]); // the view outlives its file
}

#[test]
fn sub_byte_slices_need_byte_boundaries() {
    // F4 [4, 3]: 12 nibbles = 6 bytes; a row is 12 bits.
    let f =
        TensorFile::from_bytes(image(r#"{"q":{"dtype":"F4","shape":[4,3],"data_offsets":[0,6]}}"#, &[0; 6])).unwrap();
    let q = f.view("q").unwrap();
    assert_eq!(q.slice_rows(0, 2).unwrap().nbytes(), 3);
    assert_eq!(q.slice_rows(1, 2).unwrap_err().status(), Status::MisalignedSlice);
}

#[test]
fn views_are_send_sync_and_cheap() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<View>();
    assert_send_sync::<TensorFile>();
}

#[test]
fn reference_panic_is_a_format_error() {
    // Catalogue row 27 fed straight to the reference crate (bypassing our own checks): with overflow checks
    // on it panics inside; our wrapper must turn that into VALIDATION_OVERFLOW, and without overflow checks
    // it reports an incomplete buffer.
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
    let buf = image(&h, &[]);
    let e = header::reference_check(&buf).unwrap_err();
    assert!(matches!(e.status(), Status::ValidationOverflow | Status::IncompleteBuffer), "{e}");
    assert_eq!(status(TensorFile::from_bytes(buf)), Status::ValidationOverflow);
}

#[test]
fn header_len_checks_in_order() {
    assert_eq!(header::header_len(b"", 0, Status::Truncated).unwrap_err().status(), Status::HeaderTooSmall);
    assert_eq!(
        header::header_len(&u64::MAX.to_le_bytes(), 8, Status::Truncated).unwrap_err().status(),
        Status::InvalidHeaderLength
    );
    assert_eq!(
        header::header_len(&100_000_001u64.to_le_bytes(), 8, Status::Truncated).unwrap_err().status(),
        Status::HeaderTooLarge
    );
    assert_eq!(
        header::header_len(&10u64.to_le_bytes(), 12, Status::Truncated).unwrap_err().status(),
        Status::Truncated
    );
    assert_eq!(header::header_len(&4u64.to_le_bytes(), 12, Status::Truncated).unwrap(), 4);
}

#[test]
fn alignment_is_capped_power_of_two() {
    assert_eq!(alignment_of(0), 4096);
    assert_eq!(alignment_of(1), 1);
    assert_eq!(alignment_of(24), 8);
    assert_eq!(alignment_of(1 << 20), 4096);
}

/// The reference crate does not re-check headers at open, so our verdict must equal the reference's on large
/// headers too: valid, and each kind of damage the reference
/// detects (gap, overlap, end before begin, size mismatch, trailing bytes, short data, unknown dtype, bad
/// JSON), plus a duplicate name, which only we reject (the reference keeps the last).
#[test]
fn large_headers_agree_with_the_reference() {
    const N: u64 = 20_000;
    const K: u64 = N / 2;
    // `edit(i, begin)` may return (entry JSON, next begin) for tensor i instead of the regular 16-byte F32 [2, 2].
    let build = |edit: &dyn Fn(u64, u64) -> Option<(String, u64)>| -> Vec<u8> {
        let mut h = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        let mut off = 0u64;
        let mut data_end = 0u64;
        for i in 0..N {
            let (e, next) = edit(i, off).unwrap_or_else(|| {
                (format!("\"model.layers.{i}.mlp.weight\":{{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[{off},{}]}}", off + 16), off + 16)
            });
            h.push(',');
            h.push_str(&e);
            off = next;
            data_end = data_end.max(off);
        }
        h.push('}');
        image(&h, &vec![7u8; data_end as usize])
    };
    let entry = |i: u64, dtype: &str, shape: &str, b: u64, e: u64| {
        format!(
            "\"model.layers.{i}.mlp.weight\":{{\"dtype\":\"{dtype}\",\"shape\":{shape},\"data_offsets\":[{b},{e}]}}"
        )
    };
    let ours = |bytes: &[u8]| status(TensorFile::from_bytes(bytes.to_vec()));
    let reference = |bytes: &[u8]| match header::reference_check(bytes) {
        Ok(_) => Status::Ok,
        Err(e) => e.status(),
    };
    let valid = build(&|_, _| None);
    let cases: Vec<(&str, Vec<u8>, Status)> = vec![
        ("valid", valid.clone(), Status::Ok),
        (
            "gap",
            build(&|i, o| (i == K).then(|| (entry(i, "F32", "[2,2]", o + 4, o + 20), o + 20))),
            Status::InvalidOffset,
        ),
        (
            "overlap",
            build(&|i, o| (i == K).then(|| (entry(i, "F32", "[2,2]", o - 8, o + 8), o + 8))),
            Status::InvalidOffset,
        ),
        (
            "end before begin",
            build(&|i, o| (i == K).then(|| (entry(i, "F32", "[2,2]", o, o - 1), o + 16))),
            Status::InvalidOffset,
        ),
        (
            "size mismatch",
            build(&|i, o| (i == K).then(|| (entry(i, "F32", "[2,3]", o, o + 16), o + 16))),
            Status::TensorInvalidInfo,
        ),
        (
            "unknown dtype",
            build(&|i, o| (i == K).then(|| (entry(i, "F31", "[2,2]", o, o + 16), o + 16))),
            Status::InvalidHeaderJson,
        ),
        (
            "bad json",
            build(&|i, o| {
                (i == K).then(|| (entry(i, "F32", "[2,2]", o, o + 16).replace("\"shape\"", "shape"), o + 16))
            }),
            Status::InvalidHeaderJson,
        ),
    ];
    for (what, bytes, want) in &cases {
        let (a, b) = (ours(bytes), reference(bytes));
        assert_eq!(a, *want, "{what}: ours");
        assert_eq!(b == Status::Ok, *want == Status::Ok, "{what}: the reference says {}", b.name());
    }
    // Trailing bytes and short data.
    let mut long = valid.clone();
    long.push(0);
    assert_eq!((ours(&long), reference(&long)), (Status::IncompleteBuffer, Status::IncompleteBuffer));
    let short = &valid[..valid.len() - 1];
    assert_ne!(ours(short), Status::Ok);
    assert_ne!(reference(short), Status::Ok);
    // A duplicate name: stricter than the reference, never laxer.
    let dup = build(&|i, o| (i == K).then(|| (entry(i - 1, "F32", "[2,2]", o, o + 16), o + 16)));
    assert_eq!(ours(&dup), Status::DuplicateTensor);
}

/// Narrowed views against a reference: the packed bytes of per-dimension ranges of a C-order array.
mod narrow {
    use super::*;
    use proptest::prelude::*;

    /// The packed C-order bytes of `ranges` (offset, len per dim) of a C-order array of `shape`.
    pub(crate) fn reference(data: &[u8], shape: &[u64], elem: usize, ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        if ranges.iter().any(|r| r.1 == 0) {
            return out;
        }
        let rank = shape.len();
        let mut idx = vec![0u64; rank];
        loop {
            let mut lin = 0u64;
            for k in 0..rank {
                lin = lin * shape[k] + ranges[k].0 + idx[k];
            }
            let at = lin as usize * elem;
            out.extend_from_slice(&data[at..at + elem]);
            let mut k = rank;
            loop {
                if k == 0 {
                    return out;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < ranges[k].1 {
                    break;
                }
                idx[k] = 0;
            }
        }
    }

    pub(crate) fn file_of(shape: &[u64], dtype: &str, elem: usize) -> (TensorFile, Vec<u8>) {
        let n: u64 = shape.iter().product::<u64>() * elem as u64;
        let data: Vec<u8> = (0..n).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let h = format!(r#"{{"t":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[0,{n}]}}}}"#, dims.join(","));
        (TensorFile::from_bytes(image(&h, &data)).unwrap(), data)
    }

    #[test]
    fn inner_narrow_is_strided_and_composes() {
        let (f, data) = file_of(&[4, 6], "F32", 4);
        let t = f.view("t").unwrap();
        let c = t.narrow(1, 2, 3).unwrap();
        assert!(!c.is_contiguous());
        assert_eq!((c.shape(), c.strides(), c.nbytes()), (&[4u64, 3][..], vec![6, 1], 48));
        assert_eq!(c.data_offset(), 8);
        assert_eq!(c.span_bytes(), 3 * 24 + 12);
        assert_eq!(c.to_vec().unwrap(), reference(&data, &[4, 6], 4, &[(0, 4), (2, 3)]));
        // Narrow the narrow: rows 1..3, then column 1 of those (column 3 of the tensor).
        let cc = c.narrow(0, 1, 2).unwrap().narrow(1, 1, 1).unwrap();
        assert_eq!(cc.to_vec().unwrap(), reference(&data, &[4, 6], 4, &[(1, 2), (3, 1)]));
        // One row of a column narrow is contiguous again.
        let one = c.narrow(0, 2, 1).unwrap();
        assert!(one.is_contiguous());
        assert_eq!(one.mapped(), &reference(&data, &[4, 6], 4, &[(2, 1), (2, 3)])[..]);
        // slice_rows is narrow(0, ..).
        let r = t.slice_rows(1, 3).unwrap();
        assert!(r.is_contiguous());
        assert_eq!(r.to_vec().unwrap(), t.narrow(0, 1, 2).unwrap().to_vec().unwrap());
        // A ranged read of a strided view starts and ends inside runs.
        let mut part = [0u8; 20];
        c.read_at(5, &mut part).unwrap();
        assert_eq!(&part[..], &reference(&data, &[4, 6], 4, &[(0, 4), (2, 3)])[5..25]);
        assert_eq!(c.read_at(40, &mut part).unwrap_err().status(), Status::OutOfRange);
    }

    #[test]
    fn narrow_bounds() {
        let (f, _) = file_of(&[4, 6], "U8", 1);
        let t = f.view("t").unwrap();
        assert_eq!(t.narrow(2, 0, 1).unwrap_err().status(), Status::OutOfRange);
        assert_eq!(t.narrow(1, 5, 2).unwrap_err().status(), Status::OutOfRange);
        assert_eq!(t.narrow(1, u64::MAX, 2).unwrap_err().status(), Status::OutOfRange);
        assert!(t.narrow(1, 6, 0).unwrap().to_vec().unwrap().is_empty());
        let e = t.narrow(1, 6, 0).unwrap().narrow(0, 1, 2).unwrap();
        assert_eq!((e.shape(), e.nbytes()), (&[2u64, 0][..], 0));
        let msg = t.narrow(3, 0, 1).unwrap_err().message().to_string();
        assert!(msg.contains("'t'") && msg.contains("dimension 3"), "{msg}");
        let (s, _) = file_of(&[], "U8", 1);
        assert_eq!(s.view("t").unwrap().narrow(0, 0, 1).unwrap_err().status(), Status::OutOfRange);
        assert_eq!(s.view("t").unwrap().slice_rows(0, 0).unwrap_err().status(), Status::Unsupported);
    }

    #[test]
    fn sub_byte_inner_narrows_need_whole_bytes() {
        // F4 [4, 4]: a row is 2 bytes; columns 0..2 are whole bytes, columns 1..3 are not.
        let f = TensorFile::from_bytes(image(
            r#"{"q":{"dtype":"F4","shape":[4,4],"data_offsets":[0,8]}}"#,
            &[0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe],
        ))
        .unwrap();
        let q = f.view("q").unwrap();
        assert_eq!(q.narrow(1, 2, 2).unwrap().to_vec().unwrap(), vec![0x32, 0x76, 0xba, 0xfe]);
        assert_eq!(q.narrow(1, 1, 2).unwrap_err().status(), Status::MisalignedSlice);
        assert_eq!(q.narrow(1, 0, 1).unwrap_err().status(), Status::MisalignedSlice);
    }

    fn shape_and_narrows() -> impl Strategy<Value = (Vec<u64>, Vec<(usize, u64, u64)>)> {
        proptest::collection::vec(1u64..6, 1..5).prop_flat_map(|shape| {
            let rank = shape.len();
            let ops = proptest::collection::vec((0..rank, 0u64..6, 0u64..6), 0..4);
            (Just(shape), ops)
        })
    }

    proptest! {
        #[test]
        fn copy_out_equals_numpy_slicing((shape, ops) in shape_and_narrows(), elem in prop::sample::select(vec![1usize, 2, 4])) {
            let dtype = match elem { 1 => "U8", 2 => "U16", _ => "F32" };
            let (f, data) = file_of(&shape, dtype, elem);
            let mut v = f.view("t").unwrap();
            let mut ranges: Vec<(u64, u64)> = shape.iter().map(|&d| (0, d)).collect();
            for (dim, start, len) in ops {
                let size = ranges[dim].1;
                // Clamp into range (out-of-range narrows are tested above).
                let start = start.min(size);
                let len = len.min(size - start);
                v = v.narrow(dim, start, len).unwrap();
                ranges[dim] = (ranges[dim].0 + start, len);
            }
            let want = reference(&data, &shape, elem, &ranges);
            prop_assert_eq!(v.nbytes() as usize, want.len());
            prop_assert_eq!(v.shape(), &ranges.iter().map(|r| r.1).collect::<Vec<_>>()[..]);
            prop_assert_eq!(&v.to_vec().unwrap(), &want);
            // Any sub-range of the packed bytes.
            if !want.is_empty() {
                let a = want.len() / 3;
                let b = want.len() - want.len() / 5;
                let mut part = vec![0u8; b - a];
                v.read_at(a as u64, &mut part).unwrap();
                prop_assert_eq!(&part[..], &want[a..b]);
            }
        }
    }
}

#[test]
fn files_that_are_not_safetensors_say_so_and_what_they_look_like() {
    let cases: [(&[u8], &str); 8] = [
        (b"# README\nThis is text, not tensors.\n", "looks like text (it begins \"# README"),
        (b"<!DOCTYPE html><html><body>404</body></html>", "HTML or XML text"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n", "git lfs pull"),
        (b"PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl", "zip archive"),
        (b"GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "GGUF"),
        (b"\x93NUMPY\x01\x00v\x00{'descr': '<f4'", "NumPy .npy"),
        (b"\x80\x02}q\x00(X\x05\x00\x00\x00state", "pickle"),
        (b"\xde\xad\xbe\xef\x01\x02\x03\x04\xff\xfe\x00\x01", "binary data of another format (it begins de ad be ef"),
    ];
    for (bytes, looks) in cases {
        let e = header::header_len(bytes, bytes.len() as u64, Status::Truncated).unwrap_err();
        assert_eq!(e.status(), Status::NotSafetensors, "{e}");
        assert!(e.message().starts_with("not a safetensors file: it looks like"), "{e}");
        assert!(e.message().contains(looks), "{looks}: {e}");
        assert!(e.message().contains("Check the path"), "says what to do: {e}");
        if bytes.starts_with(b"\x93NUMPY") {
            // An open recognises .npy by content (issue 35): this truncated one gets the .npy verdict, and
            // asked for as safetensors it is named with the call that opens it.
            assert_eq!(status(TensorFile::from_bytes(bytes.to_vec())), Status::InvalidHeaderLength);
            let safetensors = crate::file::Format::Safetensors;
            assert_eq!(status(TensorFile::from_bytes_format(bytes.to_vec(), safetensors)), Status::OtherFormat);
            continue;
        }
        assert_eq!(status(TensorFile::from_bytes(bytes.to_vec())), Status::NotSafetensors);
    }
    // What could still be a (damaged) safetensors file keeps its precise status: nothing after the prefix to
    // judge, or a JSON object after it.
    for (bytes, st) in [
        (&b"<\0\0\0\0\xff\xff\xff"[..], Status::HeaderTooLarge),
        (b"\x02\0\0\0\x01\0\0\0 {}", Status::HeaderTooLarge),
        (b"\xfc\xff\xff\xff\xff\xff\xff\xff{}", Status::InvalidHeaderLength),
        (b"\x40\0\0\0\0\0\0\0{\"a\":", Status::Truncated),
    ] {
        assert_eq!(header::header_len(bytes, bytes.len() as u64, Status::Truncated).unwrap_err().status(), st);
    }
}

/// Text whose first 8 bytes read as an impossible length is not safetensors, whatever follows them (a short
/// JSON array ends right there, a longer one may go on with '{'); and an empty path says it is empty.
#[test]
fn json_array_text_is_not_safetensors_and_an_empty_path_is_named() {
    for bytes in [
        &b"[1,2,3] \n"[..],
        b"[1,2,3]\n",
        b"[1,2,3] {\"a\": 1}\n",
        b"[\n  {\"name\": \"a\"},\n  {\"name\": \"b\"}\n]\n",
    ] {
        let e = header::header_len(bytes, bytes.len() as u64, Status::Truncated).unwrap_err();
        assert_eq!(e.status(), Status::NotSafetensors, "{:?}: {e}", String::from_utf8_lossy(bytes));
        assert!(e.message().contains("it looks like text (it begins \"["), "{e}");
        assert_eq!(status(TensorFile::from_bytes(bytes.to_vec())), Status::NotSafetensors);
    }
    let dir = std::env::temp_dir().join(format!("hostfirst-json-array-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["a.safetensors", "a"] {
        let path = dir.join(name);
        std::fs::write(&path, b"[1,2,3] \n").unwrap();
        assert_eq!(status(TensorFile::open(&path)), Status::NotSafetensors, "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let e = TensorFile::open("").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(e.message(), "the path is empty: give the path of a .safetensors file or of a *.safetensors.index.json");
}

/// Content is an index when its first byte that is not JSON whitespace is `{` (and no length prefix fits),
/// however much whitespace comes first: the same text opens the same way named `.json` or not (the fuzzer's
/// `index_set` found a difference when the `{` stood past the first 64 bytes).
#[test]
fn an_index_behind_any_amount_of_whitespace_is_recognised_by_content() {
    let dir = std::env::temp_dir().join(format!("hostfirst-index-ws-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for lead in [0usize, 63, 64, 72, 4095, 4096, 70_000] {
        let mut text = vec![b'\n'; lead];
        text.extend_from_slice(b"{\"weight_map\": {\"w\": 7}}");
        let (json, other) = (dir.join("m.index.json"), dir.join("m.idx"));
        std::fs::write(&json, &text).unwrap();
        std::fs::write(&other, &text).unwrap();
        let by_name = status(TensorFile::open(&json));
        assert_eq!(by_name, Status::InvalidIndex, "{lead} bytes of whitespace, .json name");
        assert_eq!(status(TensorFile::open(&other)), by_name, "{lead} bytes of whitespace, by content");
    }
    // All whitespace: not JSON text, not safetensors.
    let blank = dir.join("blank");
    std::fs::write(&blank, vec![b' '; 5000]).unwrap();
    assert_eq!(status(TensorFile::open(&blank)), Status::NotSafetensors);
    std::fs::remove_dir_all(&dir).unwrap();
}
