//! Headerless raw files (nanoGPT's `train.bin`: u16 tokens and nothing else), opened with a layout the caller
//! gives: dtype, shape and the offset of the first byte. One tensor, named by the caller (`data` by default).
//! Dimension 0 may be [`INFER`]: as many rows as the file holds after the offset (what `np.memmap` does
//! without a shape). The file must be exactly `offset + nbytes` bytes, as a safetensors file must be covered
//! exactly: `TRUNCATED` when it is shorter, `INCOMPLETE_BUFFER` when bytes follow (or, with an inferred
//! dimension, when a partial row is left over).
//!
//! A file at offset 0 that is a valid file of a format hostfirst recognises (`.npy`, an llm.c shard, a
//! Megatron index) is refused with `OTHER_FORMAT`, naming the call that reads its header: mapping a header as
//! data is never what was meant. Give an offset to skip a header on purpose.

use super::{exact_cover, header, sniff, Format, Spec};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::header::Header;
use crate::file::{MAX_NAME_LEN, MAX_RANK};

/// A shape entry (dimension 0 only) meaning "as many rows as the file holds".
pub const INFER: u64 = u64::MAX;
/// The tensor's name when the caller gives none.
pub const DEFAULT_NAME: &str = "data";

/// Where a raw file's tensor lies and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawLayout {
    /// The element type.
    pub dtype: DType,
    /// The shape; dimension 0 may be [`INFER`].
    pub shape: Vec<u64>,
    /// Offset of the first byte in the file.
    pub offset: u64,
    /// The tensor's name.
    pub name: String,
}

impl RawLayout {
    /// A 1-D layout of the whole file from byte 0: nanoGPT's `np.memmap(path, dtype, mode="r")`.
    pub fn tokens(dtype: DType) -> RawLayout {
        RawLayout { dtype, shape: vec![INFER], offset: 0, name: DEFAULT_NAME.to_string() }
    }
}

fn bad_arg(msg: String) -> Error {
    Error::new(Status::InvalidArgument, msg)
}

/// Validates `layout` against a file of `total_len` bytes whose first bytes are `start`; `short` is the status
/// of a file shorter than the layout needs. `looks_valid` tells whether the file is a valid file of the
/// format its magic announces (for the `OTHER_FORMAT` check).
pub(crate) fn parse(
    layout: &RawLayout,
    start: &[u8],
    total_len: u64,
    short: Status,
    looks_valid: &mut dyn FnMut(Format) -> bool,
) -> Result<Header> {
    let name = layout.name.as_str();
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
        return Err(bad_arg(format!(
            "raw layout: the tensor name '{}' must be 1 to {MAX_NAME_LEN} bytes without NUL",
            name.escape_debug()
        )));
    }
    if layout.shape.len() > MAX_RANK {
        return Err(bad_arg(format!(
            "raw layout: rank {} exceeds the hostfirst cap of {MAX_RANK}",
            layout.shape.len()
        )));
    }
    if layout.shape.iter().skip(1).any(|&d| d == INFER) {
        return Err(bad_arg("raw layout: only dimension 0 may be inferred from the file's size".to_string()));
    }
    if layout.offset == 0 {
        if let Some(f) = sniff(start).filter(|&f| looks_valid(f)) {
            return Err(Error::new(
                Status::OtherFormat,
                format!(
                    "this is {}, not headerless data: open it with {} (or give the offset of the data to map past \
                     its header on purpose)",
                    f.what(),
                    f.opener()
                ),
            ));
        }
    }
    let mut shape = layout.shape.clone();
    if shape.first() == Some(&INFER) {
        let mut row = shape.clone();
        row[0] = 1;
        let row_bytes = crate::file::header::tensor_bytes(name, layout.dtype, &row)?;
        if row_bytes == 0 {
            return Err(bad_arg(format!(
                "raw layout: rows of shape {:?} hold no bytes, so their count cannot be inferred",
                &shape[1..]
            )));
        }
        let Some(avail) = total_len.checked_sub(layout.offset) else {
            return Err(Error::new(
                short,
                format!("raw layout: offset {} is past the end of the file ({total_len} bytes)", layout.offset),
            ));
        };
        if avail % row_bytes != 0 {
            return Err(Error::new(
                Status::IncompleteBuffer,
                format!(
                    "raw layout: the {avail} bytes after offset {} are not a whole number of {row_bytes}-byte rows \
                     of {} {:?} ({} bytes left over)",
                    layout.offset,
                    layout.dtype.name(),
                    &shape[1..],
                    avail % row_bytes
                ),
            ));
        }
        shape[0] = avail / row_bytes;
    }
    let nbytes = crate::file::header::tensor_bytes(name, layout.dtype, &shape)?;
    exact_cover(
        layout.offset,
        nbytes,
        total_len,
        short,
        &format!("the raw layout ({} {:?} at offset {})", layout.dtype.name(), shape, layout.offset),
    )?;
    let metadata = vec![("format".to_string(), "raw".to_string()), ("offset".to_string(), layout.offset.to_string())];
    header(layout.offset, nbytes, &[Spec { name, dtype: layout.dtype, shape, start: 0 }], metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(l: &RawLayout, b: &[u8]) -> Result<Header> {
        parse(l, b, b.len() as u64, Status::Truncated, &mut |_| true)
    }

    #[test]
    fn layouts() {
        let h = open(&RawLayout::tokens(DType::U16), &[0u8; 10]).unwrap();
        assert_eq!(&h.entries[0].shape[..], &[5]);
        let l = RawLayout { dtype: DType::F32, shape: vec![INFER, 2], offset: 4, name: "w".into() };
        assert_eq!(&open(&l, &[0u8; 20]).unwrap().entries[0].shape[..], &[2, 2]);
        let st = |l: RawLayout, n: usize| open(&l, &vec![0u8; n]).unwrap_err().status();
        assert_eq!(st(RawLayout::tokens(DType::U16), 11), Status::IncompleteBuffer);
        let l = RawLayout { dtype: DType::U16, shape: vec![6], offset: 0, name: "t".into() };
        assert_eq!(st(l.clone(), 10), Status::Truncated);
        assert_eq!(st(l.clone(), 14), Status::IncompleteBuffer);
        assert_eq!(st(RawLayout { offset: 20, ..RawLayout::tokens(DType::U8) }, 10), Status::Truncated);
        assert_eq!(st(RawLayout { shape: vec![2, INFER], ..l.clone() }, 10), Status::InvalidArgument);
        assert_eq!(st(RawLayout { shape: vec![INFER, 0], ..l.clone() }, 10), Status::InvalidArgument);
        assert_eq!(st(RawLayout { name: String::new(), ..l.clone() }, 12), Status::InvalidArgument);
        assert_eq!(st(RawLayout { shape: vec![1u64 << 62, 8], ..l.clone() }, 12), Status::ValidationOverflow);
        assert_eq!(st(RawLayout { shape: vec![1; 33], ..l }, 12), Status::InvalidArgument);
        let mut npy = b"\x93NUMPY".to_vec();
        npy.resize(64, 0);
        assert_eq!(open(&RawLayout::tokens(DType::U8), &npy).unwrap_err().status(), Status::OtherFormat);
        let l = RawLayout { offset: 8, ..RawLayout::tokens(DType::U8) };
        assert!(open(&l, &npy).is_ok());
    }
}
