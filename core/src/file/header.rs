//! Parsing and validating a safetensors header.
//!
//! Our own pass does every check the reference crate (`safetensors::SafeTensors::read_metadata`) makes, with
//! checked arithmetic, and keeps what it throws away (header key order, duplicate keys). The reference is not
//! run at open (its full parse cost as much as our whole open: an open could never be cheaper than the
//! crate's); the tests hold the two verdicts together instead: the malformed-file catalogue, the large-header
//! cases in `file/tests.rs`, and a property test that every random mutation we accept the reference accepts
//! with the same data length (`tests/it/file_props.rs`). [`reference_check`] stays for those tests.

use super::names::{CName, NameAt, NameBlock, NameIndex};
use super::raw::{MetaValue, RawEntry, RawHeader};
use super::{MAX_HEADER_SIZE, MAX_METADATA_ENTRIES, MAX_NAME_LEN, MAX_RANK, MAX_TENSORS};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::cell::RefCell;
use std::fmt;

/// One validated tensor entry. `start` is relative to the data section.
/// `name` is a place in the header's name block ([`Header::name`]).
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub name: NameAt,
    pub dtype: DType,
    pub shape: std::sync::Arc<[u64]>,
    pub start: u64,
    pub nbytes: u64,
}

/// A validated header: tensors in file order (by data offset; ties between empty tensors keep header order).
#[derive(Debug)]
pub(crate) struct Header {
    /// Offset of the data section in the file (`8 +` the JSON's length for safetensors).
    pub data_start: u64,
    /// Bytes of the data section (the end of the last tensor).
    pub data_len: u64,
    pub entries: Vec<Entry>,
    /// Every tensor name, NUL-terminated, in one shared buffer (entries hold places in it).
    pub names: std::sync::Arc<str>,
    /// Position in `entries` by name.
    pub by_name: NameIndex,
    pub metadata: Vec<(CName, CName)>,
}

impl Header {
    /// The text of the name of entry `e`.
    pub fn name(&self, e: &Entry) -> &str {
        NameBlock::text(&self.names, e.name)
    }

    /// The NUL-terminated name of entry `e`, valid while this header lives.
    pub fn cname_ptr(&self, e: &Entry) -> *const std::ffi::c_char {
        NameBlock::ptr(&self.names, e.name)
    }

    /// The name of entry `e` as a shared C string (a clone of the block's handle).
    pub fn cname(&self, e: &Entry) -> CName {
        NameBlock::name(&self.names, e.name)
    }

    /// Offset of the data section in the file (`8 + header_len` for safetensors).
    pub fn data_start(&self) -> u64 {
        self.data_start
    }
}

/// How many leading bytes of a file [`header_len`] looks at: the length prefix, and enough of what follows to
/// say what a file that is not safetensors looks like.
pub(crate) const PREFIX_PEEK: usize = 64;

/// The outcome of reading the 8-byte prefix: how many header bytes follow.
///
/// `prefix` is the start of the file or buffer (at least its first 8 bytes; up to [`PREFIX_PEEK`] are used),
/// `total_len` the length of the whole. `truncated_status` is what a header that runs past the end gives:
/// `TRUNCATED` for files, `INVALID_HEADER_LENGTH` for memory buffers. When the length is impossible and the
/// bytes after the prefix do not begin a JSON object either, the input is not safetensors at all:
/// `NOT_SAFETENSORS`, saying what it looks like (a zip archive, a Git LFS pointer, text, ...).
pub(crate) fn header_len(prefix: &[u8], total_len: u64, truncated_status: Status) -> Result<u64> {
    let Some(p) = prefix.get(..8) else {
        return Err(Error::new(
            Status::HeaderTooSmall,
            format!("{} bytes is shorter than the 8-byte header-length prefix", prefix.len()),
        ));
    };
    let n = u64::from_le_bytes(p.try_into().expect("8 bytes"));
    // Checked first so that a prefix near u64::MAX is reported as the overflow it is (catalogue row 4).
    let problem = match n.checked_add(8) {
        None => Error::new(Status::InvalidHeaderLength, format!("header length {n} + 8 overflows")),
        Some(_) if n > MAX_HEADER_SIZE => Error::new(
            Status::HeaderTooLarge,
            format!("header length {n} exceeds the safetensors limit of {MAX_HEADER_SIZE} bytes"),
        ),
        Some(stop) if stop > total_len => {
            Error::new(truncated_status, format!("header length {n} needs {stop} bytes but there are only {total_len}"))
        }
        Some(_) => return Ok(n),
    };
    Err(not_safetensors(prefix, n, total_len).unwrap_or(problem))
}

/// `NOT_SAFETENSORS` when the (impossible) length prefix is text, or the bytes after it do not begin a JSON
/// object; `None` when they might (then the length itself is the problem, or there is nothing after it to
/// look at).
fn not_safetensors(prefix: &[u8], n: u64, total_len: u64) -> Option<Error> {
    let peek = &prefix[..prefix.len().min(PREFIX_PEEK)];
    // Eight bytes of printable text are never a length prefix (any length up to the limit has its high four
    // bytes zero): such a file is text, whatever follows them (a short JSON array may end right there, a
    // longer one may go on with '{').
    let text = peek[..8].iter().all(|b| (0x20..0x7f).contains(b) || matches!(b, b'\t' | b'\n' | b'\r'));
    let after = peek[8..].iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if !text && after.map_or(true, |a| *a == b'{') {
        return None;
    }
    let looks = looks_like(peek);
    Some(Error::new(
        Status::NotSafetensors,
        format!(
            "not a safetensors file: it looks like {looks}. A safetensors file begins with an 8-byte little-endian \
             header length followed by a JSON object; here the first 8 bytes read as length {n} (the file has \
             {total_len} bytes) and '{{' does not follow. Check the path, or convert the file to safetensors; \
             headerless data (nanoGPT's train.bin) opens with hostfirst_file_open_raw, given its dtype, shape and offset"
        ),
    ))
}

/// What the first bytes of a file that is not safetensors look like, for the message.
fn looks_like(b: &[u8]) -> String {
    let starts = |m: &[u8]| b.starts_with(m);
    let known = if starts(b"version https://git-lfs") {
        Some("a Git LFS pointer, not the file's content (run `git lfs pull` in its repository)")
    } else if starts(b"PK\x03\x04") {
        Some("a zip archive (a PyTorch .pt/.bin checkpoint or a NumPy .npz is one)")
    } else if starts(b"GGUF") {
        Some("a GGUF file (llama.cpp)")
    } else if starts(b"\x93NUMPY") {
        Some("a NumPy .npy file")
    } else if starts(b"\x89HDF\r\n\x1a\n") {
        Some("an HDF5 file (e.g. Keras .h5)")
    } else if b.len() >= 2 && b[0] == 0x80 && (2..=5).contains(&b[1]) {
        Some("a Python pickle (e.g. a PyTorch checkpoint saved without zip)")
    } else if starts(b"\x1f\x8b") {
        Some("gzip-compressed data")
    } else {
        None
    };
    if let Some(k) = known {
        return k.to_string();
    }
    let text = String::from_utf8_lossy(b);
    let printable = text.chars().filter(|c| !c.is_control() || c.is_whitespace()).count();
    if printable * 10 >= text.chars().count() * 9 && !text.contains('\u{fffd}') {
        let first: String = text.trim_start().chars().take(32).collect();
        let kind = if first.starts_with('<') { "HTML or XML text (a failed download?)" } else { "text" };
        return format!("{kind} (it begins \"{}\")", first.escape_debug());
    }
    let hex: Vec<String> = b.iter().take(8).map(|x| format!("{x:02x}")).collect();
    format!("binary data of another format (it begins {})", hex.join(" "))
}

// ---- raw parse ---------------------------------------------------------------------------------------
//
// One serde pass over the JSON with hand-written visitors: keys are read borrowed where the text allows,
// dtypes and shapes are decoded in place, and the caps (tensor count, name length, rank) and C-string rule
// (no NUL in names) are enforced as entries are met, so header-bloat input stops early.

/// Where a semantic failure found during the serde pass is parked (serde errors carry only text), and the
/// tensor being read (to name it in syntax errors).
#[derive(Default)]
struct Side {
    error: RefCell<Option<Error>>,
    tensor: RefCell<Option<NameAt>>,
    /// The last shape read: consecutive tensors of one shape share one allocation.
    last_shape: RefCell<Option<std::sync::Arc<[u64]>>>,
    /// Every tensor name, in one block (as the fast path builds it).
    names: RefCell<NameBlock>,
}

impl Side {
    /// The name of the tensor being read, if any (for messages).
    fn tensor_name(&self) -> Option<String> {
        let at = (*self.tensor.borrow())?;
        Some(self.names.borrow().get(at).to_string())
    }

    fn fail<E: de::Error>(&self, e: Error) -> E {
        *self.error.borrow_mut() = Some(e);
        E::custom("hostfirst validation error")
    }
}

struct TopSeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = RawHeader;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<RawHeader, D::Error> {
        d.deserialize_map(TopVisitor(self.0))
    }
}

enum Key {
    Metadata,
    /// A tensor name: its place in the header's name block.
    Tensor(NameAt),
}

struct KeySeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tensor name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key, E> {
        if v == "__metadata__" {
            return Ok(Key::Metadata);
        }
        if v.len() > MAX_NAME_LEN {
            return Err(self.0.fail(Error::new(
                Status::LimitExceeded,
                format!(
                    "tensor name '{}...' is {} bytes; the hostfirst cap is {MAX_NAME_LEN}",
                    truncate(v, 64),
                    v.len()
                ),
            )));
        }
        match self.0.names.borrow_mut().push(v) {
            Some(at) => Ok(Key::Tensor(at)),
            None => Err(self.0.fail(Error::new(
                Status::InvalidHeaderJson,
                format!("tensor name '{}' contains a NUL character, which C cannot represent", v.escape_debug()),
            ))),
        }
    }
}

struct TopVisitor<'s>(&'s Side);

impl<'de> Visitor<'de> for TopVisitor<'_> {
    type Value = RawHeader;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object mapping tensor names to {dtype, shape, data_offsets}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
        let side = self.0;
        let mut entries = Vec::new();
        let mut metadata = None;
        let mut seen_metadata = false;
        while let Some(key) = map.next_key_seed(KeySeed(side))? {
            let name = match key {
                Key::Metadata => {
                    if seen_metadata {
                        return Err(side.fail(Error::new(Status::InvalidHeaderJson, "`__metadata__` appears twice")));
                    }
                    seen_metadata = true;
                    metadata = map.next_value_seed(MetaSeed(side))?;
                    continue;
                }
                Key::Tensor(at) => at,
            };
            if entries.len() >= MAX_TENSORS {
                return Err(side.fail(Error::new(
                    Status::LimitExceeded,
                    format!("more than {MAX_TENSORS} tensors in one header (the hostfirst cap)"),
                )));
            }
            *side.tensor.borrow_mut() = Some(name);
            let (dtype, shape, offsets) = map.next_value_seed(EntrySeed(side))?;
            *side.tensor.borrow_mut() = None;
            entries.push(RawEntry { name, dtype, shape, offsets });
        }
        let names = std::mem::take(&mut *side.names.borrow_mut()).finish();
        Ok(RawHeader { names, entries, metadata })
    }
}

struct MetaSeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for MetaSeed<'_> {
    type Value = Option<Vec<(String, MetaValue)>>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed<'_> {
    type Value = Option<Vec<(String, MetaValue)>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("`__metadata__` as an object of strings")
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            // Stops at the cap before reading further: millions of tiny entries cost neither time nor memory.
            if v.len() == MAX_METADATA_ENTRIES {
                return Err(self.0.fail(metadata_cap_error("`__metadata__`")));
            }
            let val = map.next_value_seed(MetaValueSeed)?;
            v.push((k, val));
        }
        Ok(Some(v))
    }
}

/// The error of a metadata map over [`MAX_METADATA_ENTRIES`].
pub(crate) fn metadata_cap_error(what: &str) -> Error {
    Error::new(
        Status::MetadataLimitExceeded,
        format!(
            "{what} has more than {MAX_METADATA_ENTRIES} entries (the hostfirst cap on metadata entries; real \
             checkpoints carry a few dozen): refused before reading the rest"
        ),
    )
}

struct MetaValueSeed;

impl<'de> DeserializeSeed<'de> for MetaValueSeed {
    type Value = MetaValue;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<MetaValue, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaValueSeed {
    type Value = MetaValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a metadata value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<MetaValue, E> {
        Ok(Ok(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<MetaValue, E> {
        Ok(Ok(v))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<MetaValue, E> {
        Ok(Err("null"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<MetaValue, E> {
        Ok(Err("boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<MetaValue, E> {
        Ok(Err("number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<MetaValue, E> {
        Ok(Err("number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<MetaValue, E> {
        Ok(Err("number"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<MetaValue, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err("array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<MetaValue, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Err("object"))
    }
}

struct EntrySeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = (DType, std::sync::Arc<[u64]>, [u64; 2]);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

enum Field {
    Dtype,
    Shape,
    Offsets,
    Other,
}

struct FieldSeed;

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = Field;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Field, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed {
    type Value = Field;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Field, E> {
        Ok(match v {
            "dtype" => Field::Dtype,
            "shape" => Field::Shape,
            "data_offsets" => Field::Offsets,
            _ => Field::Other,
        })
    }
}

struct DTypeSeed;

impl<'de> DeserializeSeed<'de> for DTypeSeed {
    type Value = DType;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<DType, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for DTypeSeed {
    type Value = DType;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a safetensors dtype name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<DType, E> {
        DType::from_name(v).ok_or_else(|| E::custom(format!("unknown dtype '{}'", v.escape_debug())))
    }
}

struct ShapeSeed<'s>(&'s Side);

impl<'de> DeserializeSeed<'de> for ShapeSeed<'_> {
    type Value = std::sync::Arc<[u64]>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed<'_> {
    type Value = std::sync::Arc<[u64]>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a shape: an array of non-negative integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        let mut dims = [0u64; MAX_RANK];
        let mut rank = 0;
        while let Some(d) = seq.next_element::<u64>()? {
            if rank == MAX_RANK {
                let name = self.0.tensor_name().unwrap_or_default();
                return Err(self.0.fail(Error::new(
                    Status::LimitExceeded,
                    format!("tensor '{name}': rank exceeds the hostfirst cap of {MAX_RANK}"),
                )));
            }
            dims[rank] = d;
            rank += 1;
        }
        let mut last = self.0.last_shape.borrow_mut();
        if let Some(prev) = last.as_ref().filter(|p| p[..] == dims[..rank]) {
            return Ok(prev.clone());
        }
        let shape: std::sync::Arc<[u64]> = std::sync::Arc::from(&dims[..rank]);
        *last = Some(shape.clone());
        Ok(shape)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = (DType, std::sync::Arc<[u64]>, [u64; 2]);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tensor entry {\"dtype\", \"shape\", \"data_offsets\"}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        while let Some(k) = map.next_key_seed(FieldSeed)? {
            match k {
                Field::Dtype if dtype.is_none() => dtype = Some(map.next_value_seed(DTypeSeed)?),
                Field::Shape if shape.is_none() => shape = Some(map.next_value_seed(ShapeSeed(self.0))?),
                Field::Offsets if offsets.is_none() => offsets = Some(map.next_value_seed(PairSeed)?),
                Field::Dtype => return Err(de::Error::duplicate_field("dtype")),
                Field::Shape => return Err(de::Error::duplicate_field("shape")),
                Field::Offsets => return Err(de::Error::duplicate_field("data_offsets")),
                // Unknown fields are accepted, as the reference crate does (catalogue row 17).
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((
            dtype.ok_or_else(|| de::Error::missing_field("dtype"))?,
            shape.ok_or_else(|| de::Error::missing_field("shape"))?,
            offsets.ok_or_else(|| de::Error::missing_field("data_offsets"))?,
        ))
    }
}

struct PairSeed;

impl<'de> DeserializeSeed<'de> for PairSeed {
    type Value = [u64; 2];
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<[u64; 2], D::Error> {
        d.deserialize_seq(PairSeed)
    }
}

impl<'de> Visitor<'de> for PairSeed {
    type Value = [u64; 2];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("data_offsets as [begin, end]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<[u64; 2], A::Error> {
        let a = seq.next_element::<u64>()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let b = seq.next_element::<u64>()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
        let mut extra = 2;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            extra += 1;
        }
        if extra != 2 {
            return Err(de::Error::invalid_length(extra, &self));
        }
        Ok([a, b])
    }
}

fn parse_raw(json: &str) -> Result<RawHeader> {
    // Headers as writers emit them take the fast path; it gives up on anything else, and the serde pass
    // below then decides (and words any error).
    if let Some(h) = super::fast_header::parse(json) {
        return Ok(h);
    }
    parse_raw_serde(json)
}

/// The deepest nesting of arrays and objects a header may have: what serde_json's recursion limit lets the
/// reference crate read (it refuses 128 levels, "recursion limit exceeded"). Our pass skips unknown fields
/// without recursing, so it would read any depth; this keeps both verdicts the same.
pub(crate) const MAX_JSON_DEPTH: usize = 127;

/// Where the header's nesting of arrays and objects first goes deeper than [`MAX_JSON_DEPTH`] (a byte
/// offset), if it does; brackets inside strings do not count.
fn too_deep(json: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in json.as_bytes().iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The serde pass: every header, every verdict and message.
fn parse_raw_serde(json: &str) -> Result<RawHeader> {
    if let Some(at) = too_deep(json) {
        return Err(Error::new(
            Status::InvalidHeaderJson,
            format!(
                "header JSON is nested more than {MAX_JSON_DEPTH} levels deep (at byte {at} of the header), past \
                 the recursion limit of safetensors' own reader"
            ),
        ));
    }
    let side = Side::default();
    let mut de = serde_json::Deserializer::from_str(json);
    let parsed = TopSeed(&side).deserialize(&mut de).and_then(|h| de.end().map(|_| h));
    match parsed {
        Ok(h) => Ok(h),
        Err(e) => {
            if let Some(err) = side.error.borrow_mut().take() {
                return Err(err);
            }
            let msg = match side.tensor_name() {
                Some(t) => format!("tensor '{t}': header JSON: {e}"),
                None => format!("header is not a valid safetensors JSON object: {e}"),
            };
            Err(Error::new(Status::InvalidHeaderJson, msg))
        }
    }
}

// ---- validation --------------------------------------------------------------------------------------

fn cname(s: String, what: impl FnOnce() -> String) -> Result<CName> {
    CName::new(s).ok_or_else(|| {
        Error::new(Status::InvalidHeaderJson, format!("{} contains a NUL character, which C cannot represent", what()))
    })
}

fn convert_metadata(raw: Vec<(String, MetaValue)>) -> Result<Vec<(CName, CName)>> {
    // A tensor named `__metadata__` lands here: the key is reserved for the string map (catalogue row 14).
    let looks_like_tensor = raw.iter().any(|(k, v)| k == "dtype" && v.is_ok())
        && raw.iter().any(|(k, _)| k == "data_offsets" || k == "shape");
    if looks_like_tensor {
        return Err(Error::new(
            Status::InvalidHeaderJson,
            "a tensor may not be named `__metadata__` (the key is reserved for the string-to-string metadata map)",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (k, v) in raw {
        let s = v.map_err(|kind| {
            Error::new(
                Status::InvalidHeaderJson,
                format!("`__metadata__` key '{k}' has a {kind} value; safetensors metadata values must be strings"),
            )
        })?;
        if !seen.insert(k.clone()) {
            return Err(Error::new(Status::InvalidHeaderJson, format!("`__metadata__` key '{k}' appears twice")));
        }
        let key = cname(k.clone(), || format!("`__metadata__` key '{}'", k.escape_debug()))?;
        let val = cname(s, || format!("the value of `__metadata__` key '{k}'"))?;
        out.push((key, val));
    }
    Ok(out)
}

/// Element count and byte size of a tensor, with checked arithmetic.
pub(crate) fn tensor_bytes(name: &str, dtype: DType, shape: &[u64]) -> Result<u64> {
    let overflow = || {
        Error::new(
            Status::ValidationOverflow,
            format!("tensor '{name}': {dtype} shape {shape:?} overflows 64-bit size arithmetic"),
        )
    };
    let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(overflow)?;
    let bits = n.checked_mul(dtype.bits() as u64).ok_or_else(overflow)?;
    if bits % 8 != 0 {
        return Err(Error::new(
            Status::MisalignedSlice,
            format!("tensor '{name}': {n} elements of {dtype} are {bits} bits, not a whole number of bytes"),
        ));
    }
    Ok(bits / 8)
}

/// Parses and validates the header JSON (the bytes after the length prefix). `total_len` is the length of
/// the whole file or buffer; `short_status` is what a data section shorter than declared gives.
pub(crate) fn parse(header: &[u8], total_len: u64, short_status: Status) -> Result<Header> {
    let header_len = header.len() as u64;
    let json = std::str::from_utf8(header)
        .map_err(|e| Error::new(Status::InvalidHeaderUtf8, format!("header is not valid UTF-8 ({e})")))?;
    let raw = parse_raw(json)?;
    let metadata = match raw.metadata {
        Some(m) => convert_metadata(m)?,
        None => Vec::new(),
    };

    // File order: by (begin, end), ties (empty tensors) in header order (the sort is stable; files written
    // in order are one run, so this is linear for them).
    let mut raw_entries = raw.entries;
    raw_entries.sort_by_key(|r| r.offsets);
    let block = raw.names;
    let text = |r: &RawEntry| NameBlock::text(&block, r.name);

    let mut by_name = NameIndex::with_capacity(raw_entries.len());
    let name_of = |i: u32| text(&raw_entries[i as usize]);
    for (file_idx, r) in raw_entries.iter().enumerate() {
        if by_name.insert(text(r), file_idx as u32, name_of).is_err() {
            return Err(Error::new(
                Status::DuplicateTensor,
                format!(
                    "tensor '{}' appears more than once in the header (safetensors forbids duplicate names)",
                    text(r)
                ),
            ));
        }
    }

    // Contiguous, hole-free offsets from 0, sizes matching shapes (the reference `validate`, checked).
    let mut expected = 0u64;
    let mut sorted = Vec::with_capacity(raw_entries.len());
    for r in raw_entries {
        let name = text(&r);
        let [b, end] = r.offsets;
        if b != expected || end < b {
            let why = if end < b {
                "ends before it begins".to_string()
            } else if b < expected {
                format!("overlaps the previous tensor (which ends at {expected})")
            } else {
                format!("leaves a gap (expected it to begin at {expected})")
            };
            return Err(Error::new(Status::InvalidOffset, format!("tensor '{name}': data_offsets [{b}, {end}] {why}")));
        }
        expected = end;
        let nbytes = tensor_bytes(name, r.dtype, &r.shape)?;
        if end - b != nbytes {
            return Err(Error::new(
                Status::TensorInvalidInfo,
                format!(
                    "tensor '{}': {} {:?} needs {nbytes} bytes but data_offsets [{b}, {end}] span {}",
                    name,
                    r.dtype,
                    &r.shape[..],
                    end - b
                ),
            ));
        }
        sorted.push(Entry { name: r.name, dtype: r.dtype, shape: r.shape, start: b, nbytes });
    }
    let data_len = expected;

    // The file must be exactly covered: 8 + header + data == length, in checked arithmetic (catalogue row 27).
    let need = 8u64.checked_add(header_len).and_then(|x| x.checked_add(data_len)).ok_or_else(|| {
        Error::new(
            Status::ValidationOverflow,
            format!("8 + header length {header_len} + data length {data_len} overflows 64 bits"),
        )
    })?;
    if need > total_len {
        return Err(Error::new(
            short_status,
            format!("the header declares {data_len} data bytes ({need} in all) but there are only {total_len}"),
        ));
    }
    if need < total_len {
        return Err(Error::new(
            Status::IncompleteBuffer,
            format!(
                "{} bytes follow the last tensor (expected exactly {need} bytes in all, found {total_len})",
                total_len - need
            ),
        ));
    }
    Ok(Header { data_start: 8 + header_len, data_len, entries: sorted, names: block, by_name, metadata })
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Maps an error of the reference crate to our status.
#[cfg(test)]
pub(crate) fn reference_status(e: &safetensors::SafeTensorError) -> Status {
    use safetensors::SafeTensorError as E;
    match e {
        E::InvalidHeader(_) => Status::InvalidHeaderUtf8,
        E::InvalidHeaderDeserialization(_) => Status::InvalidHeaderJson,
        E::HeaderTooLarge => Status::HeaderTooLarge,
        E::HeaderTooSmall => Status::HeaderTooSmall,
        E::InvalidHeaderLength => Status::InvalidHeaderLength,
        E::TensorNotFound(_) => Status::NotFound,
        E::TensorInvalidInfo => Status::TensorInvalidInfo,
        E::InvalidOffset(_) => Status::InvalidOffset,
        E::MetadataIncompleteBuffer => Status::IncompleteBuffer,
        E::ValidationOverflow => Status::ValidationOverflow,
        E::MisalignedSlice => Status::MisalignedSlice,
        _ => Status::InvalidHeaderJson,
    }
}

/// Runs the reference crate's validation over the whole buffer inside `catch_unwind`. A panic (the crate
/// has unchecked additions, catalogue rows 27-28) becomes `VALIDATION_OVERFLOW`. Returns the reference's
/// data length on success.
#[cfg(test)]
pub(crate) fn reference_check(buffer: &[u8]) -> Result<u64> {
    let r =
        std::panic::catch_unwind(|| safetensors::SafeTensors::read_metadata(buffer).map(|(_, m)| m.data_len() as u64));
    match r {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => {
            Err(Error::new(reference_status(&e), format!("rejected by the reference safetensors parser: {e}")))
        }
        Err(_) => Err(Error::new(
            Status::ValidationOverflow,
            "the reference safetensors parser panicked on this header (arithmetic overflow); treated as a format error",
        )),
    }
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;

    fn summary(h: &RawHeader) -> Vec<String> {
        let mut v: Vec<String> = h
            .entries
            .iter()
            .map(|e| format!("{}|{}|{:?}|{:?}", NameBlock::text(&h.names, e.name), e.dtype, &e.shape[..], e.offsets))
            .collect();
        v.push(format!("{:?}", h.metadata));
        v
    }

    /// Errors the serde pass finds inside an entry name the tensor being read.
    #[test]
    fn serde_pass_errors_name_the_tensor() {
        let dims = vec!["1"; MAX_RANK + 1].join(",");
        let deep = format!(
            r#"{{"ok":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]}},"deep":{{"dtype":"U8","shape":[{dims}],"data_offsets":[1,2]}}}}"#
        );
        let e = parse_raw_serde(&deep).err().expect("rank over the cap");
        assert_eq!(e.status(), Status::LimitExceeded);
        assert!(e.message().starts_with("tensor 'deep': rank exceeds"), "{}", e.message());
        let bad = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b\u0062":{"dtype":"U8","shape":[1],"data_offsets":[1,}}"#;
        let e = parse_raw_serde(bad).err().expect("invalid JSON");
        assert_eq!(e.status(), Status::InvalidHeaderJson);
        assert!(e.message().starts_with("tensor 'bb': header JSON:"), "{}", e.message());
    }

    /// Where the fast path answers, it answers exactly what the serde pass does.
    #[test]
    fn fast_path_equals_the_serde_pass() {
        let mut seed = 0x9E3779B97F4A7C15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let dtypes = ["F32", "BF16", "U8", "I64", "F8_E4M3", "BOOL"];
        for round in 0..300 {
            let mut h = String::from("{");
            if round % 3 == 0 {
                h.push_str(r#""__metadata__": {"format": "pt", "k": "v w"},"#);
            }
            let n = next(12) + u64::from(round % 3 == 0);
            let mut off = 0;
            for i in 0..n {
                let rank = next(4) as usize;
                let shape: Vec<String> = (0..rank).map(|_| next(5).to_string()).collect();
                let len = next(100);
                let (a, b) = if round % 2 == 0 { ("dtype", "shape") } else { ("shape", "dtype") };
                let dt = format!("\"{}\"", dtypes[next(6) as usize]);
                let sh = format!("[{}]", shape.join(", "));
                let (va, vb) = if round % 2 == 0 { (dt, sh) } else { (sh, dt) };
                h.push_str(&format!(
                    "{}\"t.{i}.w\" :{{\"{a}\":{va},\"{b}\" : {vb},\"data_offsets\":[{off},{}]}}\n",
                    if i > 0 { "," } else { "" },
                    off + len
                ));
                off += len;
            }
            h.push('}');
            let fast = super::super::fast_header::parse(&h).expect("a plain header takes the fast path");
            let slow = parse_raw_serde(&h).unwrap_or_else(|e| panic!("{h}: {e}"));
            assert_eq!(summary(&fast), summary(&slow), "{h}");
        }
    }
}
