//! Multi-file sets: the Hugging Face `*.safetensors.index.json` format.
//!
//! ```json
//! {"metadata": {"total_size": 123}, "weight_map": {"a": "model-00001-of-00002.safetensors", ...}}
//! ```

use super::{MAX_INDEX_SIZE, MAX_PARTS};
use crate::error::{Error, Result, Status};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use std::cell::RefCell;
use std::fmt;
use std::path::{Component, Path};

/// A parsed index: `weight_map` in file order, and the `metadata` object with non-string values rendered
/// as compact JSON text.
pub(crate) struct Index {
    pub weight_map: Vec<(String, String)>,
    pub metadata: Vec<(String, String)>,
}

#[derive(Default)]
struct Side {
    error: RefCell<Option<Error>>,
}

struct TopVisitor<'s>(&'s Side);

impl<'de> Visitor<'de> for TopVisitor<'_> {
    type Value = Index;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an index object with a \"weight_map\"")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Index, A::Error> {
        let mut weight_map = None;
        let mut metadata = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            match k.as_str() {
                "weight_map" if weight_map.is_none() => weight_map = Some(map.next_value_seed(WeightMapSeed(self.0))?),
                "metadata" => metadata = map.next_value_seed(MetadataSeed(self.0))?,
                "weight_map" => return Err(de::Error::duplicate_field("weight_map")),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let weight_map = weight_map.ok_or_else(|| de::Error::missing_field("weight_map"))?;
        Ok(Index { weight_map, metadata })
    }
}

struct WeightMapSeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for WeightMapSeed<'_> {
    type Value = Vec<(String, String)>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WeightMapSeed<'_> {
    type Value = Vec<(String, String)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("\"weight_map\" as an object of tensor name -> part file name")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let v: String = map.next_value()?;
            if !seen.insert(k.clone()) {
                *self.0.error.borrow_mut() = Some(Error::new(
                    Status::DuplicateTensor,
                    format!("tensor '{k}' appears more than once in \"weight_map\""),
                ));
                return Err(de::Error::custom("duplicate"));
            }
            if out.len() >= super::MAX_SET_TENSORS {
                *self.0.error.borrow_mut() = Some(Error::new(
                    Status::LimitExceeded,
                    format!("more than {} tensors in \"weight_map\" (the hostfirst cap)", super::MAX_SET_TENSORS),
                ));
                return Err(de::Error::custom("cap"));
            }
            out.push((k, v));
        }
        Ok(out)
    }
}

/// The index's `metadata` object, non-string values rendered as compact JSON text, read entry by entry up to
/// the metadata cap.
struct MetadataSeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Vec<(String, String)>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Vec<(String, String)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("\"metadata\" as an object")
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.len() == super::MAX_METADATA_ENTRIES {
                *self.0.error.borrow_mut() = Some(super::header::metadata_cap_error("\"metadata\""));
                return Err(de::Error::custom("cap"));
            }
            let v = match map.next_value::<serde_json::Value>()? {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            out.push((k, v));
        }
        Ok(out)
    }
}

/// Parses index JSON text.
pub(crate) fn parse(text: &[u8]) -> Result<Index> {
    let side = Side::default();
    let text = std::str::from_utf8(text)
        .map_err(|e| Error::new(Status::InvalidIndex, format!("index is not valid UTF-8 ({e})")))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let r = de::Deserializer::deserialize_map(&mut de, TopVisitor(&side)).and_then(|i| de.end().map(|_| i));
    let index = match r {
        Ok(i) => i,
        Err(e) => {
            if let Some(err) = side.error.borrow_mut().take() {
                return Err(err);
            }
            return Err(Error::new(Status::InvalidIndex, format!("not a safetensors index ({e})")));
        }
    };
    // Part names must stay inside the index's directory.
    let mut parts = std::collections::HashSet::new();
    for (t, s) in &index.weight_map {
        let p = Path::new(s);
        let ok = !s.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
        if !ok {
            return Err(Error::new(
                Status::InvalidIndex,
                format!(
                    "tensor '{t}' maps to part file '{s}', which is not a relative path inside the index's directory"
                ),
            ));
        }
        parts.insert(s.as_str());
        if parts.len() > MAX_PARTS {
            return Err(Error::new(
                Status::LimitExceeded,
                format!("more than {MAX_PARTS} part files (the hostfirst cap)"),
            ));
        }
    }
    Ok(index)
}

/// Reads an index file (at most `MAX_INDEX_SIZE` bytes, regular files only).
/// The text of the index at `path` and the file it was read from (still open: [`crate::os::same_file`] tells
/// whether `path` still names it).
pub(crate) fn read(path: &Path) -> Result<(Vec<u8>, std::fs::File)> {
    let display = path.display();
    let file =
        crate::os::open_read(path).map_err(|e| Error::new(Status::Io, format!("{display}: cannot open: {e}")))?;
    let meta = file.metadata().map_err(|e| Error::new(Status::Io, format!("{display}: cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(Error::new(Status::Io, format!("{display}: not a regular file")));
    }
    if meta.len() > MAX_INDEX_SIZE {
        return Err(Error::new(
            Status::LimitExceeded,
            format!("{display}: index is {} bytes; the hostfirst cap is {MAX_INDEX_SIZE}", meta.len()),
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    use std::io::Read;
    (&file)
        .take(MAX_INDEX_SIZE + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::new(Status::Io, format!("{display}: cannot read: {e}")))?;
    Ok((buf, file))
}
