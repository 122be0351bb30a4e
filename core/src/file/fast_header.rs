//! A fast path for the header JSON as safetensors writers emit it: one object of tensor entries
//! `{"dtype": "...", "shape": [...], "data_offsets": [a, b]}` (each field once, in any order) and an optional
//! `__metadata__` object of plain strings; names and strings without escapes, integers without sign,
//! fraction or exponent. It builds the same raw header as the serde pass, about four times faster (the JSON
//! pass was most of the cost of opening a file of many tensors).
//!
//! It never decides that a header is wrong: on anything else (an escape, an unknown field, a duplicate
//! field, a number it does not expect, a cap reached, invalid JSON of any kind) it returns `None` and the
//! serde pass in [`super::header`] parses the whole header again and gives its verdict and message.

use super::names::NameBlock;
use super::raw::{RawEntry, RawHeader};
use super::{MAX_METADATA_ENTRIES, MAX_NAME_LEN, MAX_RANK, MAX_TENSORS};
use crate::dtype::DType;
use std::sync::Arc;

struct Cursor<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while let Some(c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let end = start + memchr::memchr2(b'"', b'\\', &self.b[start..])?;
        if self.b[end] != b'"' || self.b[start..end].iter().any(|&c| c < 0x20) {
            return None;
        }
        self.i = end;
        let s = &self.s[start..self.i]; // '"' is ASCII: both ends are char boundaries
        self.i += 1;
        Some(s)
    }

    /// A non-negative integer that fits in u64 (no leading zeros, fraction or exponent).
    fn uint(&mut self) -> Option<u64> {
        self.ws();
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.b.get(self.i).copied() {
            v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
            self.i += 1;
        }
        let n = self.i - start;
        if n == 0 || (n > 1 && self.b[start] == b'0') {
            return None;
        }
        if matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(v)
    }

    /// `[u, u, ...]` into `out`; returns the count (at most `out.len()`).
    fn uints(&mut self, out: &mut [u64]) -> Option<usize> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(0);
        }
        let mut n = 0;
        loop {
            *out.get_mut(n)? = self.uint()?;
            n += 1;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(n);
                }
                _ => return None,
            }
        }
    }
}

/// The fast parse, or `None` to let the serde pass decide.
pub(crate) fn parse(json: &str) -> Option<RawHeader> {
    let mut c = Cursor { b: json.as_bytes(), s: json, i: 0 };
    // Every name goes into one block (one allocation for the header's names, not one per name); an entry
    // holds its name's place in the block.
    let mut parsed: Vec<RawEntry> = Vec::new();
    let mut names = NameBlock::default();
    let mut metadata: Option<Vec<(String, Result<String, &'static str>)>> = None;
    let mut last_shape: Option<Arc<[u64]>> = None;
    let mut last_dtype = None;
    // One scratch for every entry's dimensions (only `[..rank]` is read), not a zeroed array per entry.
    let mut dims = [0u64; MAX_RANK];
    c.eat(b'{')?;
    if c.peek()? == b'}' {
        c.i += 1;
    } else {
        loop {
            let key = c.string()?;
            c.eat(b':')?;
            if key.as_bytes() == b"__metadata__" {
                if metadata.is_some() {
                    return None;
                }
                metadata = Some(meta(&mut c)?);
            } else {
                if key.len() > MAX_NAME_LEN || parsed.len() >= MAX_TENSORS {
                    return None;
                }
                let name = names.push(key)?;
                let (dtype, rank, offsets) = entry(&mut c, &mut last_dtype, &mut dims)?;
                let shape = match last_shape.as_ref().filter(|p| p[..] == dims[..rank]) {
                    Some(p) => p.clone(),
                    None => {
                        let s: Arc<[u64]> = Arc::from(&dims[..rank]);
                        last_shape = Some(s.clone());
                        s
                    }
                };
                parsed.push(RawEntry { name, dtype, shape, offsets });
            }
            match c.peek()? {
                b',' => c.i += 1,
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    c.ws();
    if c.i != c.b.len() {
        return None;
    }
    Some(RawHeader { names: names.finish(), entries: parsed, metadata })
}

/// `{"dtype": .., "shape": .., "data_offsets": ..}`, each once, any order.
/// The shape's dimensions go to `dims[..rank]`.
fn entry(
    c: &mut Cursor<'_>,
    last_dtype: &mut Option<DType>,
    dims: &mut [u64; MAX_RANK],
) -> Option<(DType, usize, [u64; 2])> {
    let (mut dtype, mut shape, mut offsets) = (None, None, None);
    c.eat(b'{')?;
    loop {
        let k = c.string()?;
        c.eat(b':')?;
        match k.as_bytes() {
            b"dtype" if dtype.is_none() => {
                let s = c.string()?;
                // Neighbours mostly share a dtype: compare with the last one before searching.
                let d = match *last_dtype {
                    Some(d) if d.name() == s => d,
                    _ => DType::from_name(s)?,
                };
                *last_dtype = Some(d);
                dtype = Some(d);
            }
            b"shape" if shape.is_none() => shape = Some(c.uints(dims)?),
            b"data_offsets" if offsets.is_none() => {
                let mut p = [0u64; 2];
                if c.uints(&mut p)? != 2 {
                    return None;
                }
                offsets = Some(p);
            }
            _ => return None, // a duplicate or unknown field: the serde pass decides
        }
        match c.peek()? {
            b',' => c.i += 1,
            b'}' => {
                c.i += 1;
                break;
            }
            _ => return None,
        }
    }
    Some((dtype?, shape?, offsets?))
}

/// `__metadata__`: an object of plain strings.
fn meta(c: &mut Cursor<'_>) -> Option<Vec<(String, Result<String, &'static str>)>> {
    let mut v = Vec::new();
    c.eat(b'{')?;
    if c.peek()? == b'}' {
        c.i += 1;
        return Some(v);
    }
    loop {
        if v.len() == MAX_METADATA_ENTRIES {
            return None;
        }
        let k = c.string()?.to_string();
        c.eat(b':')?;
        let val = c.string()?.to_string();
        v.push((k, Ok(val)));
        match c.peek()? {
            b',' => c.i += 1,
            b'}' => {
                c.i += 1;
                return Some(v);
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_headers_take_the_fast_path() {
        let h = parse(
            r#" {"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},
              "b" : { "data_offsets" : [24,24], "shape" : [0], "dtype" : "U8" } } "#,
        )
        .unwrap();
        assert_eq!(h.entries.len(), 2);
        assert_eq!(NameBlock::text(&h.names, h.entries[0].name), "a");
        assert_eq!((&h.entries[0].shape[..], h.entries[0].offsets), (&[2u64, 3][..], [0, 24]));
        assert_eq!((&h.entries[1].shape[..], h.entries[1].dtype), (&[0u64][..], DType::U8));
        assert_eq!(h.metadata.unwrap(), vec![("format".to_string(), Ok("pt".to_string()))]);
        assert_eq!(parse("{}").unwrap().entries.len(), 0);
    }

    #[test]
    fn anything_unusual_goes_to_the_serde_pass() {
        for bad in [
            r#"{"a\u0041":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}"#,
            r#"{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,5]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}}"#,
            r#"{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},}"#,
            r#"{"__metadata__":{"k":1}}"#,
            r#"{"__metadata__":null}"#,
            r#"{"__metadata__":{},"__metadata__":{}}"#,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
            "",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
