//! Building safetensors images for the targets that need valid files (sets, rules, shard plans).

/// One tensor of an image: name, dtype name, shape, and its bytes (their length must match).
pub struct Tensor {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A safetensors image: the length prefix, the header (tensors in order, data packed in order, optional
/// `__metadata__`) and the data.
pub fn safetensors(tensors: &[Tensor], metadata: &[(&str, &str)]) -> Vec<u8> {
    let mut header = String::from("{");
    let mut first = true;
    if !metadata.is_empty() {
        header.push_str("\"__metadata__\":{");
        for (i, (k, v)) in metadata.iter().enumerate() {
            if i > 0 {
                header.push(',');
            }
            header.push_str(&format!("{}:{}", json_string(k), json_string(v)));
        }
        header.push('}');
        first = false;
    }
    let mut offset = 0usize;
    for t in tensors {
        if !first {
            header.push(',');
        }
        first = false;
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        header.push_str(&format!(
            "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            json_string(&t.name),
            t.dtype,
            shape.join(","),
            offset,
            offset + t.data.len()
        ));
        offset += t.data.len();
    }
    header.push('}');
    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    out
}

/// Deterministic bytes for a tensor (`seed` tells tensors apart).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed.wrapping_mul(97)) ^ (i >> 8) as u8).collect()
}
