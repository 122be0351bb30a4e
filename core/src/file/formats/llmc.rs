//! llm.c / modded-nanogpt token shards: a header of 256 little-endian int32 (`[0]` the magic, `[1]` the version,
//! `[2]` the token count, the rest unused), then the tokens. llm.c writes two kinds: GPT-2 shards (magic
//! 20240520, version 1, u16 tokens; modded-nanogpt reads only these) and LLaMA-3 shards (magic 20240801,
//! version 7, u32 tokens). One tensor, `tokens`, 1-D. The file must be exactly the header and the tokens (as
//! modded-nanogpt's reader asserts).

use super::{exact_cover, header, Spec};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::header::Header;

/// Bytes of the header.
pub const HEADER_BYTES: u64 = 1024;
/// The GPT-2 shard magic (u16 tokens, version 1).
pub const MAGIC_GPT2: i32 = 20240520;
/// The LLaMA-3 shard magic (u32 tokens, version 7).
pub const MAGIC_LLAMA3: i32 = 20240801;
/// The tensor's name.
pub const TENSOR: &str = "tokens";

/// Whether `m` is the magic of an llm.c token shard.
pub(crate) fn is_token_magic(m: i32) -> bool {
    m == MAGIC_GPT2 || m == MAGIC_LLAMA3
}

/// Parses and validates a shard whose first bytes are `start` (at least the header, when the file has one)
/// and whose length is `total_len`; `short` is the status of a file shorter than it declares.
pub(crate) fn parse(start: &[u8], total_len: u64, short: Status) -> Result<Header> {
    if start.len() >= 4 {
        let magic = i32::from_le_bytes(start[..4].try_into().expect("4 bytes"));
        if !is_token_magic(magic) {
            let what = match magic {
                20240326 => "the magic of an llm.c model checkpoint, not a token shard",
                20240522 => "the magic of an llm.c evaluation file (multiple-choice examples), not a token shard",
                _ => "no llm.c magic",
            };
            return Err(Error::new(
                Status::InvalidHeader,
                format!(
                    "not an llm.c token shard: the first int32 is {magic}, {what} (token shards begin with \
                     {MAGIC_GPT2} or {MAGIC_LLAMA3})"
                ),
            ));
        }
    }
    let Some(h) = start.get(..HEADER_BYTES as usize) else {
        return Err(Error::new(
            Status::HeaderTooSmall,
            format!("{} bytes end inside the {HEADER_BYTES}-byte llm.c header (256 int32)", start.len()),
        ));
    };
    let int = |i: usize| i32::from_le_bytes(h[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let (magic, version, ntok) = (int(0), int(1), int(2));
    let (dtype, want) = if magic == MAGIC_GPT2 { (DType::U16, 1) } else { (DType::U32, 7) };
    if version != want {
        return Err(Error::new(
            Status::UnsupportedVersion,
            format!(
                "llm.c shard version {version} under magic {magic}; the format defines version {want} ({} tokens)",
                dtype.name()
            ),
        ));
    }
    if ntok < 0 {
        return Err(Error::new(Status::InvalidHeader, format!("llm.c shard token count {ntok} is negative")));
    }
    let n = ntok as u64;
    let nbytes = n * u64::from(dtype.bits() / 8);
    exact_cover(HEADER_BYTES, nbytes, total_len, short, &format!("the llm.c header ({n} {} tokens)", dtype.name()))?;
    let metadata = vec![
        ("format".to_string(), "llm.c".to_string()),
        ("magic".to_string(), magic.to_string()),
        ("version".to_string(), version.to_string()),
    ];
    header(HEADER_BYTES, nbytes, &[Spec { name: TENSOR, dtype, shape: vec![n], start: 0 }], metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(magic: i32, version: i32, ntok: i32, tokens: &[u8]) -> Vec<u8> {
        let mut h = vec![0i32; 256];
        h[0] = magic;
        h[1] = version;
        h[2] = ntok;
        let mut v: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
        v.extend_from_slice(tokens);
        v
    }

    fn open(b: &[u8]) -> Result<Header> {
        parse(b, b.len() as u64, Status::IncompleteBuffer)
    }

    #[test]
    fn both_kinds_open() {
        let h = open(&shard(MAGIC_GPT2, 1, 3, &[1, 0, 2, 0, 3, 0])).unwrap();
        assert_eq!((h.entries[0].dtype, &h.entries[0].shape[..], h.data_start), (DType::U16, &[3u64][..], 1024));
        let h = open(&shard(MAGIC_LLAMA3, 7, 1, &[1, 0, 0, 0])).unwrap();
        assert_eq!(h.entries[0].dtype, DType::U32);
    }

    #[test]
    fn hostile_shards() {
        let st = |b: Vec<u8>| open(&b).unwrap_err().status();
        assert_eq!(st(shard(MAGIC_GPT2, 2, 1, &[0, 0])), Status::UnsupportedVersion);
        assert_eq!(st(shard(MAGIC_LLAMA3, 1, 1, &[0; 4])), Status::UnsupportedVersion);
        assert_eq!(st(shard(MAGIC_GPT2, 1, -1, &[])), Status::InvalidHeader);
        assert_eq!(st(shard(20240326, 1, 1, &[0, 0])), Status::InvalidHeader);
        assert_eq!(st(shard(MAGIC_GPT2, 1, 3, &[0, 0])), Status::IncompleteBuffer); // short: memory status
        assert_eq!(st(shard(MAGIC_GPT2, 1, 1, &[0, 0, 0, 0])), Status::IncompleteBuffer);
        assert_eq!(st(shard(MAGIC_GPT2, 1, i32::MAX, &[])), Status::IncompleteBuffer);
        let good = shard(MAGIC_GPT2, 1, 1, &[7, 0]);
        for cut in 4..1024 {
            assert_eq!(open(&good[..cut]).unwrap_err().status(), Status::HeaderTooSmall, "cut {cut}");
        }
        let short = parse(&good[..1025], 1025, Status::Truncated).unwrap_err();
        assert_eq!(short.status(), Status::Truncated);
    }
}
