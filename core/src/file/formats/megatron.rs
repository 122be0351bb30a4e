//! Megatron-LM / NeMo indexed datasets: `PREFIX.idx` describes the sequences of `PREFIX.bin`, which holds
//! their tokens back to back.
//!
//! `.idx` layout (little-endian): the magic `MMIDIDX\0\0` (9 bytes), the version (u64, 1), the dtype code (u8:
//! 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16: Megatron-LM's `DType`), the sequence count `N` (u64),
//! the document-index count `D` (u64), then `sequence_lengths` (N x i32, elements), `sequence_pointers` (N x
//! i64, byte offsets into the `.bin`), `document_indices` (D x i64: 0, then the sequence index that ends each
//! document) and, in a multimodal index only, `sequence_modes` (N x i8).
//!
//! Validation (the whole `.idx` is read once at open, 12 bytes a sequence, in chunks; nothing is kept): every
//! length non-negative (`INVALID_INDEX`); the pointers exactly the running sum of the lengths times the element
//! size, from 0, so that the sequences tile the `.bin` in order without gaps or overlaps (`INVALID_OFFSET`
//! naming the sequence otherwise: out of order, overlapping, or leaving a gap); the sum exactly the `.bin`'s
//! length (`TRUNCATED` / `INCOMPLETE_BUFFER`); the document indices starting at 0, never decreasing, ending at
//! `N` (`INVALID_INDEX`); the `.idx` exactly as long as its counts say, or longer by `N` bytes of modes.

use super::{exact_cover, header, Spec, MEGATRON_MAGIC};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::header::Header;

/// Bytes before the arrays: magic 9, version 8, dtype code 1, two counts of 8.
pub const FIXED_HEADER: u64 = 34;
/// Entries read per chunk while validating.
const CHUNK: u64 = 1 << 16;

/// The dtype of a Megatron dtype code (Megatron-LM's `DType` enum).
pub fn dtype_of_code(code: u8) -> Option<DType> {
    Some(match code {
        1 => DType::U8,
        2 => DType::I8,
        3 => DType::I16,
        4 => DType::I32,
        5 => DType::I64,
        6 => DType::F64,
        7 => DType::F32,
        8 => DType::U16,
        _ => return None,
    })
}

/// What a validated index says, beyond its two headers.
pub(crate) struct Parsed {
    /// The `.idx` as a header of the four arrays.
    pub idx: Header,
    /// The `.bin` as a header of one tensor, `tokens`.
    pub bin: Header,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses and validates an index whose first bytes are `start` and whose length is `idx_len`, against a `.bin`
/// of `bin_len` bytes (named `bin_display` in messages). `read` fetches `.idx` bytes at an absolute offset. `short` is the status of a file
/// shorter than it declares (`TRUNCATED` for files, `INCOMPLETE_BUFFER` for memory).
pub(crate) fn parse(
    start: &[u8],
    idx_len: u64,
    bin_len: u64,
    bin_display: &str,
    short: Status,
    read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<Parsed> {
    if !start.starts_with(MEGATRON_MAGIC) {
        return Err(Error::new(
            Status::InvalidHeader,
            "not a Megatron index: it does not begin with the magic MMIDIDX\\0\\0".to_string(),
        ));
    }
    let Some(h) = start.get(..FIXED_HEADER as usize) else {
        return Err(Error::new(
            Status::HeaderTooSmall,
            format!("{} bytes end inside the {FIXED_HEADER}-byte Megatron index header", start.len()),
        ));
    };
    let version = u64_at(h, 9);
    if version != 1 {
        return Err(Error::new(
            Status::UnsupportedVersion,
            format!("Megatron index version {version}; hostfirst reads version 1 (as Megatron-LM does)"),
        ));
    }
    let code = h[17];
    let dtype = dtype_of_code(code).ok_or_else(|| {
        Error::new(
            Status::InvalidHeader,
            format!("Megatron index dtype code {code}; Megatron-LM's codes are 1 to 8 (u8 i8 i16 i32 i64 f64 f32 u16)"),
        )
    })?;
    let (n, d) = (u64_at(h, 18), u64_at(h, 26));
    let item = u64::from(dtype.bits() / 8);
    let overflow = || {
        Error::new(
            Status::ValidationOverflow,
            format!("Megatron index counts ({n} sequences, {d} document indices) overflow 64-bit sizes"),
        )
    };
    let lengths_at = FIXED_HEADER;
    let pointers_at = n.checked_mul(4).and_then(|x| x.checked_add(lengths_at)).ok_or_else(overflow)?;
    let docs_at = n.checked_mul(8).and_then(|x| x.checked_add(pointers_at)).ok_or_else(overflow)?;
    let end = d.checked_mul(8).and_then(|x| x.checked_add(docs_at)).ok_or_else(overflow)?;
    if end > idx_len {
        return Err(Error::new(
            short,
            format!(
                "the Megatron index declares {n} sequences and {d} document indices ({end} bytes) but the .idx has \
                 only {idx_len}"
            ),
        ));
    }
    let multimodal = match idx_len - end {
        0 => false,
        extra if extra == n && n > 0 => true,
        extra => {
            return Err(Error::new(
                Status::IncompleteBuffer,
                format!(
                    "{extra} bytes follow the document indices of the Megatron index (expected none, or {n} bytes of \
                     sequence modes)"
                ),
            ))
        }
    };

    // Lengths and pointers, a chunk of each at a time.
    let mut lens = vec![0u8; (CHUNK.min(n) * 4) as usize];
    let mut ptrs = vec![0u8; (CHUNK.min(n) * 8) as usize];
    let mut expected = 0u64; // the byte offset sequence i must begin at
    let mut max_len = 0u64;
    let mut i = 0u64;
    while i < n {
        let k = CHUNK.min(n - i);
        read(lengths_at + 4 * i, &mut lens[..(4 * k) as usize])?;
        read(pointers_at + 8 * i, &mut ptrs[..(8 * k) as usize])?;
        for j in 0..k as usize {
            let s = i + j as u64;
            let len = i32::from_le_bytes(lens[4 * j..4 * j + 4].try_into().expect("4 bytes"));
            let ptr = u64_at(&ptrs, 8 * j);
            if len < 0 {
                return Err(Error::new(Status::InvalidIndex, format!("Megatron sequence {s} has the length {len}")));
            }
            if ptr != expected {
                let why = if (ptr as i64) < 0 {
                    "is negative".to_string()
                } else if ptr < expected {
                    format!("is out of order or overlaps the sequence before it (which ends at byte {expected})")
                } else {
                    format!("leaves a gap (expected it to begin at byte {expected})")
                };
                return Err(Error::new(
                    Status::InvalidOffset,
                    format!("Megatron sequence {s}: pointer {} {why}", ptr as i64),
                ));
            }
            let bytes = (len as u64).checked_mul(item).ok_or_else(overflow)?;
            expected = expected.checked_add(bytes).ok_or_else(overflow)?;
            max_len = max_len.max(len as u64);
        }
        i += k;
    }
    let total_bytes = expected;
    exact_cover(
        0,
        total_bytes,
        bin_len,
        short,
        &format!("the Megatron index ({n} sequences, {} bytes of {})", total_bytes, dtype.name()),
    )
    .map_err(|e| e.context(bin_display))?;

    // Document indices: 0, non-decreasing, ending at n.
    if d == 0 {
        return Err(Error::new(
            Status::InvalidIndex,
            "the Megatron index has no document indices (Megatron writes at least the leading 0)",
        ));
    }
    let mut docs = vec![0u8; (CHUNK.min(d) * 8) as usize];
    let mut prev = 0u64;
    let mut i = 0u64;
    while i < d {
        let k = CHUNK.min(d - i);
        read(docs_at + 8 * i, &mut docs[..(8 * k) as usize])?;
        for j in 0..k as usize {
            let at = i + j as u64;
            let v = u64_at(&docs, 8 * j);
            let bad = if at == 0 && v != 0 {
                Some("must be 0".to_string())
            } else if v < prev || (v as i64) < 0 {
                Some(format!("is below the one before it ({prev})"))
            } else if v > n {
                Some(format!("is past the sequence count {n}"))
            } else if at == d - 1 && v != n {
                Some(format!("is the last and must equal the sequence count {n}"))
            } else {
                None
            };
            if let Some(why) = bad {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!("Megatron document index {at} is {} and {why}", v as i64),
                ));
            }
            prev = v;
        }
        i += k;
    }

    let tokens = total_bytes / item;
    let metadata = vec![
        ("format".to_string(), "megatron".to_string()),
        ("version".to_string(), "1".to_string()),
        ("dtype_code".to_string(), code.to_string()),
        ("sequence_count".to_string(), n.to_string()),
        ("document_count".to_string(), (d - 1).to_string()),
        ("max_sequence_length".to_string(), max_len.to_string()),
        ("multimodal".to_string(), multimodal.to_string()),
    ];
    let mut specs = vec![
        Spec { name: "sequence_lengths", dtype: DType::I32, shape: vec![n], start: 0 },
        Spec { name: "sequence_pointers", dtype: DType::I64, shape: vec![n], start: pointers_at - lengths_at },
        Spec { name: "document_indices", dtype: DType::I64, shape: vec![d], start: docs_at - lengths_at },
    ];
    if multimodal {
        specs.push(Spec { name: "sequence_modes", dtype: DType::I8, shape: vec![n], start: end - lengths_at });
    }
    let idx = header(FIXED_HEADER, idx_len - FIXED_HEADER, &specs, metadata.clone())?;
    let bin = header(0, total_bytes, &[Spec { name: "tokens", dtype, shape: vec![tokens], start: 0 }], metadata)?;
    Ok(Parsed { idx, bin })
}

/// Writes a Megatron index for sequences of the given lengths (tests and fuzz seeds; `modes` for a multimodal
/// index). Pointers are the running sum, document indices as given.
pub fn write_index(code: u8, lengths: &[i32], docs: &[i64], modes: Option<&[i8]>) -> Vec<u8> {
    let item = dtype_of_code(code).map_or(1, |t| u64::from(t.bits() / 8));
    let mut v = MEGATRON_MAGIC.to_vec();
    v.extend_from_slice(&1u64.to_le_bytes());
    v.push(code);
    v.extend_from_slice(&(lengths.len() as u64).to_le_bytes());
    v.extend_from_slice(&(docs.len() as u64).to_le_bytes());
    for l in lengths {
        v.extend_from_slice(&l.to_le_bytes());
    }
    let mut p = 0i64;
    for l in lengths {
        v.extend_from_slice(&p.to_le_bytes());
        p += i64::from(*l) * item as i64;
    }
    for d in docs {
        v.extend_from_slice(&d.to_le_bytes());
    }
    if let Some(m) = modes {
        v.extend(m.iter().map(|&x| x as u8));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(idx: &[u8], bin_len: u64) -> Result<Parsed> {
        parse(idx, idx.len() as u64, bin_len, "<bin>", Status::IncompleteBuffer, &mut |off, dst| {
            dst.copy_from_slice(&idx[off as usize..off as usize + dst.len()]);
            Ok(())
        })
    }

    #[test]
    fn a_small_index() {
        let idx = write_index(8, &[3, 0, 2], &[0, 2, 3], None);
        let p = open(&idx, 10).unwrap();
        assert_eq!(p.bin.entries[0].dtype, DType::U16);
        assert_eq!(&p.bin.entries[0].shape[..], &[5]);
        assert_eq!(p.idx.entries.len(), 3);
        assert_eq!(p.idx.entries[1].start, 12);
        let m = write_index(8, &[1, 1], &[0, 2], Some(&[1, 2]));
        assert_eq!(open(&m, 4).unwrap().idx.entries.len(), 4);
    }

    #[test]
    fn hostile_indexes() {
        let st = |idx: Vec<u8>, bin: u64| open(&idx, bin).err().map(|e| e.status());
        let good = write_index(8, &[3, 0, 2], &[0, 2, 3], None);
        assert_eq!(st(good.clone(), 10), None);
        assert_eq!(st(good.clone(), 9), Some(Status::IncompleteBuffer));
        assert_eq!(st(good.clone(), 12), Some(Status::IncompleteBuffer));
        let mut v = good.clone();
        v[9] = 2;
        assert_eq!(st(v, 10), Some(Status::UnsupportedVersion));
        let mut v = good.clone();
        v[17] = 9;
        assert_eq!(st(v, 10), Some(Status::InvalidHeader));
        let mut v = good.clone();
        v[0] = b'X';
        assert_eq!(st(v, 10), Some(Status::InvalidHeader));
        // A huge sequence count: refused by the .idx length before anything is allocated or read.
        let mut v = good.clone();
        v[18..26].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        assert_eq!(st(v, 10), Some(Status::ValidationOverflow));
        let mut v = good.clone();
        v[18..26].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(st(v, 10), Some(Status::IncompleteBuffer));
        // Pointers out of order, overlapping, leaving a gap.
        let ptr = |v: &mut Vec<u8>, i: usize, p: i64| {
            let at = 34 + 4 * 3 + 8 * i;
            v[at..at + 8].copy_from_slice(&p.to_le_bytes());
        };
        for (i, p) in [(1, 4), (1, 8), (2, 0), (0, 2), (2, -2)] {
            let mut v = good.clone();
            ptr(&mut v, i, p);
            assert_eq!(st(v, 10), Some(Status::InvalidOffset), "pointer {i} = {p}");
        }
        // A negative length; document indices out of order or not ending at the count.
        let mut v = good.clone();
        v[34..38].copy_from_slice(&(-1i32).to_le_bytes());
        assert_eq!(st(v, 10), Some(Status::InvalidIndex));
        assert_eq!(st(write_index(8, &[3, 0, 2], &[0, 3, 2], None), 10), Some(Status::InvalidIndex));
        assert_eq!(st(write_index(8, &[3, 0, 2], &[1, 3], None), 10), Some(Status::InvalidIndex));
        assert_eq!(st(write_index(8, &[3, 0, 2], &[0, 2], None), 10), Some(Status::InvalidIndex));
        assert_eq!(st(write_index(8, &[3, 0, 2], &[], None), 10), Some(Status::InvalidIndex));
        // Trailing bytes that are not N modes.
        let mut v = good.clone();
        v.push(0);
        assert_eq!(st(v, 10), Some(Status::IncompleteBuffer));
        // Truncated at every byte.
        for cut in 0..good.len() {
            let want = if cut < 9 {
                Status::InvalidHeader
            } else if cut < 34 {
                Status::HeaderTooSmall
            } else {
                Status::IncompleteBuffer
            };
            assert_eq!(st(good[..cut].to_vec(), 10), Some(want), "cut at {cut}");
        }
    }
}
