//! Where every byte of a save goes: the headers, the data offsets and the part files, computed once from the
//! declarations, before anything is written.
//!
//! **One file** is laid out exactly as the `safetensors` crate's serializer lays it out (`tensor.rs`,
//! `prepare` and `serialize`): tensors sorted by descending dtype (the crate's `Dtype` order, which is
//! increasing alignment) and then by name (byte order); data offsets packed from 0 in that order; the header
//! the compact JSON serde_json writes for the crate's `Metadata` (`__metadata__` first when there is
//! metadata, then every tensor as `{"dtype":..,"shape":[..],"data_offsets":[begin,end]}`), padded with spaces
//! to a multiple of 8 bytes, after its length as 8 little-endian bytes. The crate keeps metadata in a
//! `HashMap`, so it writes several keys in an order that changes from run to run; hostfirst writes them in
//! the order given (a test takes the crate's order from its output and compares byte for byte).
//!
//! **Part files** follow the Hugging Face writers (`huggingface_hub.split_state_dict_into_shards_factory`):
//! tensors in declaration order go into the current part until the next would pass the size limit, a
//! tensor larger than the limit gets a part of its own (listed before the part being filled, as there);
//! parts are named `<stem>-00001-of-0000N.safetensors` and `<stem>.safetensors.index.json` maps every name
//! to its part (`{"metadata": {"total_size": <tensor bytes>, ...}, "weight_map": {...}}`, keys sorted, two
//! spaces of indent, as `transformers` writes it). A split that yields one part writes `<stem>.safetensors`
//! and no index, as they do, unless the path given names the index.

use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::MAX_HEADER_SIZE;

/// The size of the length prefix.
pub const PREFIX: u64 = 8;

/// A tensor as the layout sees it.
#[derive(Clone, Debug)]
pub struct TensorSpec<'a> {
    /// The name.
    pub name: &'a str,
    /// The dtype.
    pub dtype: DType,
    /// The shape.
    pub shape: &'a [u64],
    /// Its bytes (checked: the shape times the dtype's bits, a whole number of bytes).
    pub nbytes: u64,
}

/// One file of a save.
#[derive(Clone, Debug)]
pub struct PartLayout {
    /// The file's name (no directory): `model.safetensors`, `model-00001-of-00002.safetensors`, or the name
    /// given for a single file.
    pub file_name: String,
    /// The length prefix, the header JSON and its padding: the file's first `header.len()` bytes.
    pub header: Vec<u8>,
    /// Bytes of tensor data after the header.
    pub data_len: u64,
    /// Its tensors in file order: (index in the declarations, offset in the data section).
    pub tensors: Vec<(usize, u64)>,
}

impl PartLayout {
    /// The file's size.
    pub fn file_len(&self) -> u64 {
        self.header.len() as u64 + self.data_len
    }
    /// Absolute offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.header.len() as u64
    }
}

/// Every file of a save.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The safetensors files.
    pub parts: Vec<PartLayout>,
    /// The index (`<stem>.safetensors.index.json`): its file name and bytes; `None` for a single file.
    pub index: Option<(String, Vec<u8>)>,
    /// For each declaration, (its part, its offset in that part's data section).
    pub placement: Vec<(usize, u64)>,
    /// FNV-1a 64 of every name and byte above: equal on every rank that declared the same save.
    pub digest: u64,
}

/// How the path given names the files of a split save.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naming {
    /// The file name given (no directory).
    pub given: String,
    /// `model` for `model.safetensors` or `model.safetensors.index.json`; `None` when the name has neither
    /// suffix (such a path can only be written as one file).
    pub stem: Option<String>,
    /// The path given names the index.
    pub is_index: bool,
}

impl Naming {
    /// Reads a file name.
    pub fn of(file_name: &str) -> Naming {
        let given = file_name.to_string();
        if let Some(stem) = file_name.strip_suffix(".safetensors.index.json") {
            return Naming { given, stem: Some(stem.to_string()), is_index: true };
        }
        if let Some(stem) = file_name.strip_suffix(".safetensors") {
            return Naming { given, stem: Some(stem.to_string()), is_index: false };
        }
        Naming { given, stem: None, is_index: false }
    }
}

/// The crate's order: descending dtype (its `Dtype` order), then name.
fn crate_order(a: &TensorSpec<'_>, b: &TensorSpec<'_>) -> std::cmp::Ordering {
    b.dtype.to_safetensors().cmp(&a.dtype.to_safetensors()).then(a.name.as_bytes().cmp(b.name.as_bytes()))
}

/// A JSON string literal as serde_json writes it (the crate's serializer), appended to `out`.
fn json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing a string to a vector cannot fail");
}

/// The first bytes of one file holding `tensors` (already in file order, with their data offsets) and
/// `metadata`: the length prefix, the header JSON and its padding. `HEADER_TOO_LARGE` past the format's limit.
pub fn header_bytes(
    tensors: &[(&TensorSpec<'_>, u64)],
    metadata: Option<&[(String, String)]>,
    what: &str,
) -> Result<Vec<u8>> {
    let mut json = Vec::with_capacity(64 + tensors.len() * 96);
    json.extend_from_slice(&[0u8; 8]);
    json.push(b'{');
    let mut first = true;
    if let Some(m) = metadata {
        json.extend_from_slice(b"\"__metadata__\":{");
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                json.push(b',');
            }
            json_str(&mut json, k);
            json.push(b':');
            json_str(&mut json, v);
        }
        json.push(b'}');
        first = false;
    }
    for (t, off) in tensors {
        if !first {
            json.push(b',');
        }
        first = false;
        json_str(&mut json, t.name);
        json.extend_from_slice(b":{\"dtype\":\"");
        json.extend_from_slice(t.dtype.name().as_bytes());
        json.extend_from_slice(b"\",\"shape\":[");
        for (i, d) in t.shape.iter().enumerate() {
            if i > 0 {
                json.push(b',');
            }
            json.extend_from_slice(d.to_string().as_bytes());
        }
        json.extend_from_slice(format!("],\"data_offsets\":[{},{}]}}", off, off + t.nbytes).as_bytes());
    }
    json.push(b'}');
    let n = (json.len() - 8).next_multiple_of(8);
    if n as u64 > MAX_HEADER_SIZE {
        return Err(Error::new(
            Status::HeaderTooLarge,
            format!(
                "{what}: the header of {} tensors and {} metadata entries would be {n} bytes; the safetensors limit \
                 is {MAX_HEADER_SIZE}",
                tensors.len(),
                metadata.map_or(0, |m| m.len())
            ),
        ));
    }
    json.resize(8 + n, b' ');
    json[..8].copy_from_slice(&(n as u64).to_le_bytes());
    Ok(json)
}

/// Splits declarations (by index, in declaration order, with their sizes) into parts of at most `limit` bytes
/// the Hugging Face way (see the module documentation). `limit == 0`: one part.
pub fn split(sizes: &[u64], limit: u64) -> Vec<Vec<usize>> {
    if limit == 0 {
        return vec![(0..sizes.len()).collect()];
    }
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut current_size = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        if size > limit {
            parts.push(vec![i]);
            continue;
        }
        if current_size + size > limit {
            parts.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current.push(i);
        current_size += size;
    }
    if !current.is_empty() {
        parts.push(current);
    }
    if parts.is_empty() {
        parts.push(Vec::new());
    }
    parts
}

/// The whole layout of a save of `tensors` (declaration order) with `metadata` to a path whose file name is
/// `naming`, split by `limit` bytes (0: one file).
pub fn plan(
    tensors: &[TensorSpec<'_>],
    metadata: Option<&[(String, String)]>,
    naming: &Naming,
    limit: u64,
    what: &str,
) -> Result<Layout> {
    let sizes: Vec<u64> = tensors.iter().map(|t| t.nbytes).collect();
    let groups = split(&sizes, limit);
    let set = groups.len() > 1 || naming.is_index;
    let stem = match (&naming.stem, set) {
        (Some(s), _) => s.clone(),
        (None, false) => String::new(),
        (None, true) => {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "{what}: a save split into {} parts needs a path ending in .safetensors or \
                     .safetensors.index.json (the parts are named <stem>-00001-of-0000N.safetensors), not '{}'",
                    groups.len(),
                    naming.given
                ),
            ))
        }
    };
    let count = groups.len();
    let mut placement = vec![(0usize, 0u64); tensors.len()];
    let mut parts = Vec::with_capacity(count);
    for (p, group) in groups.iter().enumerate() {
        let file_name =
            if !set { naming.given.clone() } else { format!("{stem}-{:05}-of-{count:05}.safetensors", p + 1) };
        let mut order: Vec<usize> = group.clone();
        order.sort_by(|&a, &b| crate_order(&tensors[a], &tensors[b]));
        let mut off = 0u64;
        let mut placed = Vec::with_capacity(order.len());
        for &i in &order {
            placed.push((i, off));
            placement[i] = (p, off);
            off = off.checked_add(tensors[i].nbytes).ok_or_else(|| {
                Error::new(
                    Status::ValidationOverflow,
                    format!("{what}: the data of part {file_name} overflows 64 bits"),
                )
            })?;
        }
        let refs: Vec<(&TensorSpec<'_>, u64)> = placed.iter().map(|&(i, o)| (&tensors[i], o)).collect();
        let header = header_bytes(&refs, metadata, &format!("{what}: {file_name}"))?;
        parts.push(PartLayout { file_name, header, data_len: off, tensors: placed });
    }
    let index = if set {
        let total: u64 = sizes.iter().sum();
        Some((format!("{stem}.safetensors.index.json"), index_json(tensors, &placement, &parts, metadata, total)))
    } else {
        None
    };
    let mut h = Fnv::new();
    for p in &parts {
        h.eat(p.file_name.as_bytes());
        h.eat(&p.header);
        h.eat(&p.data_len.to_le_bytes());
    }
    if let Some((n, b)) = &index {
        h.eat(n.as_bytes());
        h.eat(b);
    }
    Ok(Layout { parts, index, placement, digest: h.0 })
}

/// The index document: `metadata` (`total_size` and the metadata given, sorted by key) and the
/// `weight_map` (sorted by name), two spaces of indent, a final newline.
fn index_json(
    tensors: &[TensorSpec<'_>],
    placement: &[(usize, u64)],
    parts: &[PartLayout],
    metadata: Option<&[(String, String)]>,
    total: u64,
) -> Vec<u8> {
    // `total_size`, then the metadata given, which wins a clash (as huggingface_hub merges them).
    let mut meta = serde_json::Map::new();
    meta.insert("total_size".to_string(), serde_json::Value::from(total));
    for (k, v) in metadata.unwrap_or(&[]) {
        meta.insert(k.clone(), serde_json::Value::String(v.clone()));
    }
    let mut map: Vec<(&str, &str)> =
        tensors.iter().zip(placement).map(|(t, &(p, _))| (t.name, parts[p].file_name.as_str())).collect();
    map.sort_by(|a, b| a.0.cmp(b.0));
    let mut weight_map = serde_json::Map::new();
    for (n, f) in map {
        weight_map.insert(n.to_string(), serde_json::Value::String(f.to_string()));
    }
    let mut doc = serde_json::Map::new();
    doc.insert("metadata".to_string(), sorted(meta));
    doc.insert("weight_map".to_string(), serde_json::Value::Object(weight_map));
    let mut out = serde_json::to_vec_pretty(&serde_json::Value::Object(doc)).expect("serialising JSON values");
    out.push(b'\n');
    out
}

/// An object with its keys sorted (serde_json's map keeps them sorted without the `preserve_order` feature;
/// this makes it so either way).
fn sorted(m: serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    let mut v: Vec<(String, serde_json::Value)> = m.into_iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    serde_json::Value::Object(v.into_iter().collect())
}

/// FNV-1a 64.
pub(crate) struct Fnv(pub u64);

impl Fnv {
    pub fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn eat(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ x as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_follows_the_hugging_face_rule() {
        assert_eq!(split(&[5, 5, 5], 0), vec![vec![0, 1, 2]]);
        assert_eq!(split(&[5, 5, 5], 10), vec![vec![0, 1], vec![2]]);
        // A tensor over the limit gets its own part, listed before the part being filled.
        assert_eq!(split(&[3, 20, 3, 5], 10), vec![vec![1], vec![0, 2], vec![3]]);
        assert_eq!(split(&[], 10), vec![Vec::<usize>::new()]);
        assert_eq!(split(&[0, 0], 1), vec![vec![0, 1]]);
    }

    #[test]
    fn naming() {
        assert_eq!(Naming::of("model.safetensors").stem.as_deref(), Some("model"));
        let n = Naming::of("m.safetensors.index.json");
        assert!(n.is_index && n.stem.as_deref() == Some("m"));
        assert_eq!(Naming::of("weights.bin").stem, None);
    }

    #[test]
    fn header_is_padded_and_prefixed() {
        let t = TensorSpec { name: "a\"b", dtype: DType::F32, shape: &[2], nbytes: 8 };
        let h = header_bytes(&[(&t, 0)], None, "x").unwrap();
        let n = u64::from_le_bytes(h[..8].try_into().unwrap()) as usize;
        assert_eq!(h.len(), 8 + n);
        assert_eq!(n % 8, 0);
        let text = std::str::from_utf8(&h[8..]).unwrap().trim_end();
        assert_eq!(text, r#"{"a\"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#);
        let h = header_bytes(&[], Some(&[]), "x").unwrap();
        assert_eq!(std::str::from_utf8(&h[8..]).unwrap(), r#"{"__metadata__":{}}     "#);
    }
}
