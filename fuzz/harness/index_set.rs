//! The multi-file index (`*.safetensors.index.json`): the input is the index's text, opened with
//! `hostfirst_file_open` from a folder of known part files, twice: named `*.json`, and named `model.idx`
//! (recognised by content). Checks:
//! - nothing outside the set's folder is ever opened (every `open` of the process is recorded, see
//!   [`super::opens`]); valid part files with the usual names lie outside it, one level up and in a sibling
//!   folder, so a path that escaped would also open;
//! - no handle and no file descriptor is left behind, whatever the status;
//! - a set that opens holds exactly the tensors of the parts its `weight_map` names, ordered by part name
//!   then file order, with the parts' bytes; every part's metadata key is in the set's metadata;
//! - both names give the same status when the content is an index.

use super::image::{pattern, safetensors, Tensor};
use super::opens;
use super::{check_failure, cstring, describe, handles, open_fds};
use hostfirst::ffi::*;
use hostfirst::Status;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

struct Fixture {
    /// The set's folder (canonical).
    set: PathBuf,
    /// The valid part files inside it.
    parts: Vec<Part>,
}

struct Part {
    /// Relative to the set's folder.
    path: &'static str,
    /// (name, bytes) in file order.
    tensors: Vec<(String, Vec<u8>)>,
    metadata_keys: Vec<&'static str>,
}

/// A part file to write: path, tensors, metadata.
type Spec = (&'static str, Vec<Tensor>, Vec<(&'static str, &'static str)>);

fn tensor(name: &str, dtype: &'static str, shape: &[u64], seed: u8) -> Tensor {
    let bits: u64 = match dtype {
        "U8" => 8,
        "I16" | "BF16" => 16,
        _ => 32,
    };
    let n = shape.iter().product::<u64>() * bits / 8;
    Tensor { name: name.into(), dtype, shape: shape.to_vec(), data: pattern(n as usize, seed) }
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let base = super::scratch("index_set");
        let set = base.join("set");
        std::fs::create_dir_all(set.join("sub")).unwrap();
        std::fs::create_dir_all(set.join("dir.safetensors")).unwrap();
        std::fs::create_dir_all(base.join("other")).unwrap();
        let specs: Vec<Spec> = vec![
            (
                "model-00001-of-00002.safetensors",
                vec![tensor("a", "F32", &[2], 1), tensor("b", "U8", &[3], 2)],
                vec![("format", "pt")],
            ),
            ("model-00002-of-00002.safetensors", vec![tensor("c", "I16", &[2, 2], 3)], vec![("k", "v2")]),
            ("sub/part.safetensors", vec![tensor("d", "BF16", &[1], 4)], vec![("k", "sub"), ("s", "1")]),
            ("dup.safetensors", vec![tensor("a", "U8", &[4], 5)], vec![]),
        ];
        let mut parts = Vec::new();
        for (rel, tensors, meta) in specs {
            std::fs::write(set.join(rel), safetensors(&tensors, &meta)).unwrap();
            parts.push(Part {
                path: rel,
                tensors: tensors.into_iter().map(|t| (t.name, t.data)).collect(),
                metadata_keys: meta.iter().map(|m| m.0).collect(),
            });
        }
        // A part whose header is refused, an empty one, and a folder with a part's name.
        let mut bad = u64::MAX.to_le_bytes().to_vec();
        bad.extend_from_slice(b"{}");
        std::fs::write(set.join("bad.safetensors"), bad).unwrap();
        std::fs::write(set.join("empty.safetensors"), b"").unwrap();
        // Valid files outside the set's folder, named as parts are.
        let decoy = safetensors(&[tensor("a", "F32", &[2], 9)], &[]);
        for p in ["model-00001-of-00002.safetensors", "outside.safetensors", "other/part.safetensors"] {
            std::fs::write(base.join(p), &decoy).unwrap();
        }
        // The index under both names is one file (written once per input).
        std::fs::write(set.join("model.safetensors.index.json"), b"{}").unwrap();
        std::fs::hard_link(set.join("model.safetensors.index.json"), set.join("model.idx")).unwrap();
        opens::self_test(&base);
        Fixture { set, parts }
    })
}

/// The fixture's part at the path `name` (as a `weight_map` value) names, if any.
fn part<'f>(fx: &'f Fixture, name: &str) -> Option<&'f Part> {
    let want: Vec<Component> = Path::new(name).components().collect();
    fx.parts.iter().find(|p| Path::new(p.path).components().collect::<Vec<_>>() == want)
}

/// Opens `path` recording its opens; checks containment, leaks and, for a set that opened, its contents.
/// `as_index`: whether the library must take the content as an index (a `.json` name, or JSON text no length
/// prefix fits); otherwise what opens is the single safetensors file the same bytes are in memory.
fn open(fx: &Fixture, path: &Path, index: &[u8], as_index: bool) -> Status {
    let c = cstring(path.to_str().unwrap().as_bytes());
    let (hs, fds) = (handles(), open_fds());
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    let (st, opened) = opens::record(|| hostfirst_file_open(c.as_ptr(), &mut f));
    opens::assert_inside(&opened, &fx.set, &format!("opening {}", path.display()));
    check_failure(st, "hostfirst_file_open");
    if st != Status::Ok {
        assert!(f.is_null(), "output written on failure");
        assert_eq!(handles(), hs, "a handle left behind by a failed open");
        assert_eq!(open_fds(), fds, "a descriptor left open by a failed open ({})", st.name());
        return st;
    }
    if as_index {
        check_set(fx, f, index);
    } else {
        check_single(f, index);
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    assert_eq!(handles(), hs);
    assert_eq!(open_fds(), fds, "descriptors left open after freeing the set");
    Status::Ok
}

/// A file opened by content as one safetensors file: the same tensors as the bytes opened from memory.
fn check_single(f: *mut hostfirst_file, bytes: &[u8]) {
    let mut m: *mut hostfirst_file = std::ptr::null_mut();
    assert_eq!(
        hostfirst_file_open_memory(bytes.as_ptr().cast(), bytes.len(), &mut m),
        Status::Ok,
        "opened from the file, refused from memory"
    );
    let (mut n, mut nm) = (0usize, 0usize);
    assert_eq!(hostfirst_file_tensor_count(f, &mut n), Status::Ok);
    assert_eq!(hostfirst_file_tensor_count(m, &mut nm), Status::Ok);
    assert_eq!(n, nm, "tensor counts of the file and of the same bytes in memory");
    for i in 0..n {
        let (a, b) = (describe(f, i), describe(m, i));
        assert_eq!((&a.name, a.dtype, &a.shape), (&b.name, b.dtype, &b.shape));
        assert!(a.bytes == b.bytes, "tensor '{}': file and memory bytes differ", a.name);
    }
    assert_eq!(hostfirst_file_free(m), Status::Ok);
}

fn check_set(fx: &Fixture, f: *mut hostfirst_file, index: &[u8]) {
    let wm = weight_map(index);
    let names: BTreeSet<&str> = wm.values().map(String::as_str).collect();
    let mut expected: Vec<(&str, &[u8])> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for n in &names {
        let p = part(fx, n).unwrap_or_else(|| panic!("set opened with part '{n}', which is no valid part"));
        for (t, bytes) in &p.tensors {
            assert_eq!(wm.get(t).map(String::as_str), Some(*n), "tensor '{t}' of part '{n}' not indexed to it");
            expected.push((t, bytes));
        }
        keys.extend(&p.metadata_keys);
    }
    assert_eq!(expected.len(), wm.len(), "the set's tensors and the weight_map differ");
    let mut count = 0usize;
    assert_eq!(hostfirst_file_tensor_count(f, &mut count), Status::Ok);
    assert_eq!(count, expected.len());
    for (i, (name, bytes)) in expected.iter().enumerate() {
        let d = describe(f, i);
        assert_eq!(d.name, *name, "tensor {i}: order is by part name, then file order");
        assert!(d.bytes == *bytes, "tensor '{name}': bytes differ from its part file's");
    }
    let mut mc = 0usize;
    assert_eq!(hostfirst_file_metadata_count(f, &mut mc), Status::Ok);
    let mut seen = BTreeSet::new();
    for i in 0..mc {
        let (mut k, mut val) = (std::ptr::null(), std::ptr::null());
        assert_eq!(hostfirst_file_metadata_get(f, i, &mut k, &mut val), Status::Ok);
        // SAFETY: NUL-terminated strings owned by the file.
        let k = unsafe { std::ffi::CStr::from_ptr(k) }.to_string_lossy().into_owned();
        assert!(seen.insert(k.clone()), "metadata key '{k}' twice");
    }
    for k in keys {
        assert!(seen.contains(k), "part metadata key '{k}' missing from the set's");
    }
}

/// The `weight_map` of an index the library accepted, read here with serde as the format says (an object
/// holding a `weight_map` object of strings; other members skipped whatever they hold).
fn weight_map(index: &[u8]) -> BTreeMap<String, String> {
    struct Top;
    impl<'de> Visitor<'de> for Top {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an index")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut wm = None;
            while let Some(k) = map.next_key::<String>()? {
                if k == "weight_map" {
                    wm = Some(map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            wm.ok_or_else(|| serde::de::Error::missing_field("weight_map"))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(index);
    let wm = serde::Deserializer::deserialize_map(&mut de, Top).expect("the library accepted an index serde refuses");
    de.end().expect("the library accepted an index with trailing text");
    wm
}

pub fn run(data: &[u8]) -> Status {
    let fx = fixture();
    let json = fx.set.join("model.safetensors.index.json");
    let idx = fx.set.join("model.idx");
    std::fs::write(&json, data).unwrap(); // also model.idx: a hard link
                                          // Content recognised as an index: JSON text whose first 8 bytes cannot be a length prefix of this file.
    let starts_json = data.iter().find(|b| !b" \t\r\n".contains(b)) == Some(&b'{');
    let prefix_fits = data.len() >= 8
        && u64::from_le_bytes(data[..8].try_into().unwrap()).checked_add(8).is_some_and(|n| n <= data.len() as u64);
    let st = open(fx, &json, data, true);
    let st2 = open(fx, &idx, data, starts_json && !prefix_fits);
    if starts_json && !prefix_fits {
        assert_eq!(st2, st, "the same index named .idx opened differently ({} vs {})", st2.name(), st.name());
    }
    st
}
