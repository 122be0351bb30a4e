//! Property tests: random tensors of every dtype and shape (scalars, empty tensors, rank up to 8) written by
//! the reference serializer, opened from memory and from a file, compared byte for byte; random mutations
//! of valid files never panic and either open or give a format error.

use crate::file_support::*;
use hostfirst::dtype::{DType, ALL_DTYPES};
use hostfirst::{Status, TensorFile};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
struct T {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn tensor() -> impl Strategy<Value = T> {
    (0..ALL_DTYPES.len(), prop::collection::vec(0usize..4, 0..=8), any::<u64>()).prop_map(|(d, mut shape, seed)| {
        let dtype = ALL_DTYPES[d];
        let mut n: usize = shape.iter().product();
        while (n * dtype.bits() as usize) % 8 != 0 {
            // Sub-byte dtypes must fill whole bytes: double the last dimension (or add one of 2).
            match shape.last_mut() {
                Some(l) => *l *= 2,
                None => shape.push(2),
            }
            n = shape.iter().product();
        }
        let nbytes = n * dtype.bits() as usize / 8;
        let mut x = seed | 1;
        let data = (0..nbytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        T { dtype, shape, data }
    })
}

/// Named tensors and `__metadata__` pairs of one generated file.
type FileSpec = (Vec<(String, T)>, Vec<(String, String)>);

fn files() -> impl Strategy<Value = FileSpec> {
    (
        prop::collection::btree_map("[a-z][a-z0-9._]{0,11}", tensor(), 0..7),
        prop::collection::vec(("[a-z]{1,6}", "\\PC{0,12}"), 0..3),
    )
        .prop_map(|(m, meta)| (m.into_iter().collect(), meta))
}

fn serialize(tensors: &[(String, T)], meta: &[(String, String)]) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, t)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(t.dtype.to_safetensors(), t.shape.clone(), &t.data).unwrap(),
            )
        })
        .collect();
    let meta: Option<HashMap<String, String>> =
        if meta.is_empty() { None } else { Some(meta.iter().cloned().collect()) };
    safetensors::serialize(views, meta).unwrap()
}

fn check_same(f: &TensorFile, tensors: &[(String, T)], meta: &[(String, String)]) {
    assert_eq!(f.len(), tensors.len());
    let expect_meta: HashMap<&str, &str> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(f.metadata_len(), expect_meta.len());
    for (k, v) in &expect_meta {
        assert_eq!(f.metadata(k), Some(*v));
    }
    let mut last_end = 0;
    for i in 0..f.len() {
        let v = f.view_at(i).unwrap();
        assert!(v.data_offset() >= last_end || v.nbytes() == 0, "file order is offset order");
        last_end = v.data_offset() + v.nbytes();
    }
    for (name, t) in tensors {
        let v = f.view(name).unwrap();
        assert_eq!(v.dtype(), t.dtype);
        assert_eq!(v.shape(), t.shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
        assert_eq!(v.nbytes() as usize, t.data.len());
        assert_eq!(v.mapped(), &t.data[..], "{name}: mapped bytes");
        assert_eq!(v.to_vec().unwrap(), t.data, "{name}: pread bytes");
        if let Some(&rows) = v.shape().first() {
            if let Ok(s) = v.slice_rows(rows / 2, rows) {
                let off = (s.file_offset() - v.file_offset()) as usize;
                assert_eq!(s.to_vec().unwrap(), &t.data[off..off + s.nbytes() as usize]);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_from_memory_and_file((tensors, meta) in files()) {
        let bytes = serialize(&tensors, &meta);
        check_same(&TensorFile::from_bytes(bytes.clone()).unwrap(), &tensors, &meta);
        let path = tmp(&format!("prop-{}.safetensors", std::thread::current().name().unwrap_or("t").replace("::", "_")));
        std::fs::write(&path, &bytes).unwrap();
        check_same(&TensorFile::open(&path).unwrap(), &tensors, &meta);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn mutations_never_panic(
        (tensors, meta) in files(),
        muts in prop::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = serialize(&tensors, &meta);
        for (kind, at, b) in muts {
            let len = bytes.len();
            match kind {
                0 if len > 0 => { let i = at.index(len); bytes[i] = b; }
                // Bias towards the header, where the interesting structure is.
                1 if len > 8 => { let i = 8 + at.index((len - 8).min(256)); bytes[i] = b"{}[]\",:0123456789-e. \0"[b as usize % 22]; }
                2 => { bytes.truncate(at.index(len + 1)); }
                _ => { let i = at.index(len + 1); bytes.insert(i, b); }
            }
        }
        let panics = panics_on_this_thread();
        let st = open_memory_and_walk(&bytes);
        prop_assert_eq!(panics_on_this_thread(), panics);
        prop_assert!(st == Status::Ok || st.is_format(), "status {}: {}", st.name(), last_error());
        // Never laxer than the reference crate (which no longer re-parses headers at open): what we accept,
        // it accepts too, with the same data length.
        if st == Status::Ok {
            let r = std::panic::catch_unwind(|| {
                safetensors::SafeTensors::read_metadata(&bytes).map(|(_, m)| m.data_len())
            });
            let f = TensorFile::from_bytes(bytes.clone()).unwrap();
            prop_assert!(
                matches!(r, Ok(Ok(n)) if n as u64 == f.data_bytes()),
                "hostfirst accepts what the reference rejects or reads differently: {:?}",
                r.map(|x| x.map_err(|e| e.to_string()))
            );
        }
    }
}
