//! Sharded sets (`*.safetensors.index.json`): a good set, a missing shard, a tensor in two shards, an index
//! naming a missing tensor, a shard with an unindexed tensor, and malformed indexes. Each failure gives its
//! exact status, creates no handle and leaks no descriptor.

use crate::common::alone;
use crate::file_support::*;
use hostfirst::{Status, TensorFile};
use std::path::{Path, PathBuf};

fn shard(dir: &Path, name: &str, tensors: &[(&str, &[u8])]) {
    let mut h = String::from(r#"{"__metadata__":{"format":"pt","shard":""#);
    h.push_str(name);
    h.push_str("\"}");
    let mut data = Vec::new();
    for (n, bytes) in tensors {
        h.push_str(&format!(
            r#","{n}":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}}"#,
            bytes.len(),
            data.len(),
            data.len() + bytes.len()
        ));
        data.extend_from_slice(bytes);
    }
    h.push('}');
    std::fs::write(dir.join(name), image(&h, &data)).unwrap();
}

fn index(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("model.safetensors.index.json");
    std::fs::write(&p, body).unwrap();
    p
}

fn set_dir(name: &str) -> PathBuf {
    let d = tmp(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    shard(&d, "b-00002.safetensors", &[("c", &[5, 6]), ("d", &[7])]);
    shard(&d, "a-00001.safetensors", &[("a", &[1, 2, 3]), ("b", &[4])]);
    d
}

const GOOD: &str = r#"{"metadata":{"total_size":7,"note":"x"},"weight_map":{"a":"a-00001.safetensors","b":"a-00001.safetensors","c":"b-00002.safetensors","d":"b-00002.safetensors"}}"#;

/// Callers run `alone` (descriptors and handles are counted per process).
fn expect(path: &Path, status: Status, needle: &str) {
    let (fds, hs) = (open_fds(), handles());
    let st = open_path_and_walk(path);
    assert_eq!(st, status, "{}: {}", path.display(), last_error());
    if st != Status::Ok {
        assert!(last_error().contains(needle), "message lacks '{needle}': {}", last_error());
    }
    assert_eq!((open_fds(), handles()), (fds, hs), "leak");
}

#[test]
fn good_set_is_one_logical_file() {
    alone(concat!(module_path!(), "::good_set_is_one_logical_file"), || {
        let d = set_dir("set-good");
        let p = index(&d, GOOD);
        expect(&p, Status::Ok, "");
        let f = TensorFile::open(&p).unwrap();
        assert!(f.is_set());
        assert_eq!(f.part_count(), 2);
        assert_eq!(f.names().collect::<Vec<_>>(), ["a", "b", "c", "d"]); // part files by name, then file order
        assert_eq!(f.find("c"), Some(2));
        assert_eq!(f.data_bytes(), 7);
        assert_eq!(f.metadata("total_size"), Some("7"));
        assert_eq!(f.metadata("format"), Some("pt"));
        assert_eq!(f.metadata("shard"), Some("a-00001.safetensors")); // first part file by name wins
        let c = f.view("c").unwrap();
        assert_eq!(c.to_vec().unwrap(), [5, 6]);
        assert!(c.path().unwrap().ends_with("b-00002.safetensors"));
        assert_eq!(c.data_offset(), 0);
        // Detection by content too: the same index under another name.
        let other = d.join("weights-map");
        std::fs::copy(&p, &other).unwrap();
        assert!(TensorFile::open(&other).unwrap().is_set());
        assert!(TensorFile::open_index(&other).unwrap().is_set());
    });
}

#[test]
fn missing_shard() {
    alone(concat!(module_path!(), "::missing_shard"), || {
        let d = set_dir("set-missing-shard");
        let p = index(&d, &GOOD.replace(r#""d":"b-00002.safetensors""#, r#""d":"c-00003.safetensors""#));
        expect(&p, Status::InvalidIndex, "c-00003.safetensors");
    });
}

#[test]
fn tensor_in_two_shards() {
    alone(concat!(module_path!(), "::tensor_in_two_shards"), || {
        let d = set_dir("set-two-shards");
        shard(&d, "b-00002.safetensors", &[("c", &[5, 6]), ("d", &[7]), ("a", &[9])]);
        let p = index(&d, GOOD);
        expect(&p, Status::DuplicateTensor, "'a' is in two part files");
    });
}

#[test]
fn index_names_a_missing_tensor() {
    alone(concat!(module_path!(), "::index_names_a_missing_tensor"), || {
        let d = set_dir("set-missing-tensor");
        let p = index(
            &d,
            &GOOD.replace(r#""d":"b-00002.safetensors""#, r#""d":"b-00002.safetensors","e":"b-00002.safetensors""#),
        );
        expect(&p, Status::InvalidIndex, "'e'");
    });
}

#[test]
fn index_names_the_wrong_shard() {
    alone(concat!(module_path!(), "::index_names_the_wrong_shard"), || {
        let d = set_dir("set-wrong-shard");
        let p = index(&d, &GOOD.replace(r#""c":"b-00002.safetensors""#, r#""c":"a-00001.safetensors""#));
        expect(&p, Status::InvalidIndex, "'c'");
    });
}

#[test]
fn shard_with_an_unindexed_tensor() {
    alone(concat!(module_path!(), "::shard_with_an_unindexed_tensor"), || {
        let d = set_dir("set-unindexed");
        let p = index(&d, &GOOD.replace(r#","d":"b-00002.safetensors""#, ""));
        expect(&p, Status::InvalidIndex, "'d', which the index does not list");
    });
}

#[test]
fn malformed_indexes() {
    alone(concat!(module_path!(), "::malformed_indexes"), || {
        let d = set_dir("set-malformed");
        expect(&index(&d, "{"), Status::InvalidIndex, "not a safetensors index");
        expect(&index(&d, r#"{"metadata":{}}"#), Status::InvalidIndex, "weight_map");
        expect(&index(&d, r#"{"weight_map":[1]}"#), Status::InvalidIndex, "weight_map");
        expect(&index(&d, r#"{"weight_map":{"a":"../a-00001.safetensors"}}"#), Status::InvalidIndex, "relative path");
        expect(&index(&d, r#"{"weight_map":{"a":"/etc/passwd"}}"#), Status::InvalidIndex, "relative path");
        expect(
            &index(&d, r#"{"weight_map":{"a":"a-00001.safetensors","a":"a-00001.safetensors"}}"#),
            Status::DuplicateTensor,
            "'a' appears more than once",
        );
        // A malformed shard reports its own format status and names the shard.
        std::fs::write(d.join("a-00001.safetensors"), image("{", b"")).unwrap();
        expect(&index(&d, GOOD), Status::InvalidHeaderJson, "a-00001.safetensors");
        // An empty weight_map is an empty set.
        expect(&index(&d, r#"{"weight_map":{}}"#), Status::Ok, "");
    });
}

/// The set's metadata is capped like a header's: an index `metadata` over the cap, and shards whose distinct
/// keys together pass it, give METADATA_LIMIT_EXCEEDED.
#[test]
fn metadata_over_the_cap() {
    alone(concat!(module_path!(), "::metadata_over_the_cap"), || {
        let cap = hostfirst::file::MAX_METADATA_ENTRIES;
        let d = set_dir("set-metadata-cap");
        let entries: Vec<String> = (0..=cap).map(|i| format!("\"k{i}\":{i}")).collect();
        let body = GOOD.replacen(
            r#""metadata":{"total_size":7,"note":"x"}"#,
            &format!("\"metadata\":{{{}}}", entries.join(",")),
            1,
        );
        expect(&index(&d, &body), Status::MetadataLimitExceeded, "\"metadata\" has more than 65536 entries");

        // Each shard under the cap, the union over it.
        let d = tmp("set-metadata-union");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (name, tensor, salt) in [("a-00001.safetensors", "a", "x"), ("b-00002.safetensors", "b", "y")] {
            let meta: Vec<String> = (0..cap / 2 + 1).map(|i| format!("\"{salt}{i}\":\"\"")).collect();
            let h = format!(
                "{{\"__metadata__\":{{{}}},\"{tensor}\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}}}",
                meta.join(",")
            );
            std::fs::write(d.join(name), image(&h, &[1])).unwrap();
        }
        let body = r#"{"weight_map":{"a":"a-00001.safetensors","b":"b-00002.safetensors"}}"#;
        expect(&index(&d, body), Status::MetadataLimitExceeded, "the set's metadata");
    });
}
