//! The token-data formats trainers keep, opened as the same [`TensorFile`](super::TensorFile) a safetensors
//! file is: NumPy `.npy` (format versions 1, 2 and 3), llm.c / modded-nanogpt shards (a 256 x int32 header),
//! Megatron-LM indexed datasets (`.idx` + `.bin`) and headerless raw files (dtype, shape and offset given by
//! the caller). Each parser turns a file's fixed header into the [`Header`] a safetensors header becomes
//! (tensors at offsets in one data section), so views, puts, gathers, loads and shard-on-read read them
//! unchanged.
//!
//! Validation is as strict as for safetensors: the sizes a header declares must cover the file exactly
//! (`TRUNCATED` when it is shorter, `INCOMPLETE_BUFFER` when bytes follow), all size arithmetic is checked
//! (`VALIDATION_OVERFLOW`), and nothing is allocated from a declared count before the file's length has
//! bounded it. Formats with a magic are recognised by content ([`sniff`]); a file of a known format given to
//! a call for another gets `OTHER_FORMAT`, naming what it is and the call that opens it.

pub mod headerless;
pub mod llmc;
pub mod megatron;
pub mod npy;

use super::header::{tensor_bytes, Entry, Header};
use super::names::{CName, NameBlock, NameIndex};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use strum::{FromRepr, IntoStaticStr, VariantArray};

/// The format of an open file, or the one a caller asks an open for. Values cross the C ABI as
/// `hostfirst_format` (`HOSTFIRST_FORMAT_*`) and are never renumbered.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, FromRepr, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Format {
    /// Asked for: recognise the format by content (what `hostfirst_file_open` does). Never a file's format.
    Auto = 0,
    /// A `.safetensors` file (or a memory image of one).
    Safetensors = 1,
    /// A multi-file set opened through its `*.safetensors.index.json`.
    SafetensorsIndex = 2,
    /// A NumPy `.npy` file, format version 1.0, 2.0 or 3.0: one tensor named `data`.
    Npy = 3,
    /// An llm.c / modded-nanogpt token shard (256 x int32 header, magic 20240520 with u16 tokens or
    /// 20240801 with u32 tokens): one tensor named `tokens`.
    Llmc = 4,
    /// A Megatron-LM / NeMo indexed dataset (`PREFIX.idx`, magic `MMIDIDX`, and `PREFIX.bin`): the tensors
    /// `tokens` (the `.bin`), `sequence_lengths`, `sequence_pointers`, `document_indices` and, for a multimodal
    /// index, `sequence_modes` (the `.idx`).
    Megatron = 5,
    /// A headerless file opened with an explicit dtype, shape and offset (nanoGPT's `train.bin`).
    Raw = 6,
}

impl Format {
    /// The stable name without prefix (`"NPY"`, `"MEGATRON"`).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Maps an integer from C; unknown values give `None`.
    pub fn from_u32(v: u32) -> Option<Format> {
        Format::from_repr(v)
    }

    /// What a file of this format is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Format::Auto => "a file of any format",
            Format::Safetensors => "a safetensors file",
            Format::SafetensorsIndex => "a safetensors index (*.safetensors.index.json)",
            Format::Npy => "a NumPy .npy file",
            Format::Llmc => "an llm.c token shard",
            Format::Megatron => "a Megatron indexed dataset (.idx)",
            Format::Raw => "a headerless raw file",
        }
    }

    /// The C call that opens a file of this format, for messages.
    pub fn opener(self) -> &'static str {
        match self {
            Format::Raw => "hostfirst_file_open_raw (give its dtype, shape and offset)",
            Format::Auto | Format::Safetensors | Format::SafetensorsIndex => {
                "hostfirst_file_open (or hostfirst_file_open_format with HOSTFIRST_FORMAT_AUTO)"
            }
            Format::Npy => "hostfirst_file_open (or hostfirst_file_open_format with HOSTFIRST_FORMAT_NPY)",
            Format::Llmc => "hostfirst_file_open (or hostfirst_file_open_format with HOSTFIRST_FORMAT_LLMC)",
            Format::Megatron => {
                "hostfirst_file_open on PREFIX.idx, PREFIX.bin or PREFIX (or hostfirst_file_open_format with \
                 HOSTFIRST_FORMAT_MEGATRON)"
            }
        }
    }
}

/// The NumPy magic.
pub(crate) const NPY_MAGIC: &[u8] = b"\x93NUMPY";
/// The Megatron index magic (`_INDEX_HEADER`).
pub(crate) const MEGATRON_MAGIC: &[u8] = b"MMIDIDX\x00\x00";

/// The format a file's first bytes announce, for the formats that have a magic; `None` for anything else
/// (safetensors has none: it is the default of a plain open).
pub fn sniff(prefix: &[u8]) -> Option<Format> {
    if prefix.starts_with(NPY_MAGIC) {
        return Some(Format::Npy);
    }
    if prefix.starts_with(MEGATRON_MAGIC) {
        return Some(Format::Megatron);
    }
    if prefix.len() >= 4 && llmc::is_token_magic(i32::from_le_bytes(prefix[..4].try_into().expect("4 bytes"))) {
        return Some(Format::Llmc);
    }
    None
}

/// `OTHER_FORMAT`: `display` is `found`, not the `asked` format.
pub(crate) fn other_format(display: &str, found: Format, asked: Format) -> Error {
    Error::new(
        Status::OtherFormat,
        format!("{display}: this is {}, not {}: open it with {}", found.what(), asked.what(), found.opener()),
    )
}

/// One tensor of a synthesised header: its name, dtype, shape and first byte in the data section.
pub(crate) struct Spec<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub start: u64,
}

/// Builds the [`Header`] of a non-safetensors file: tensors in file order (by `start`, each after the one
/// before), sizes with checked arithmetic, the data section `[data_start, data_start + data_len)`.
pub(crate) fn header(
    data_start: u64,
    data_len: u64,
    specs: &[Spec<'_>],
    metadata: Vec<(String, String)>,
) -> Result<Header> {
    let mut block = NameBlock::default();
    let mut ats = Vec::with_capacity(specs.len());
    for s in specs {
        ats.push(block.push(s.name).ok_or_else(|| Error::new(Status::Internal, "a format's tensor name"))?);
    }
    let names = block.finish();
    let mut entries = Vec::with_capacity(specs.len());
    let mut by_name = NameIndex::with_capacity(specs.len());
    for (i, (s, at)) in specs.iter().zip(ats).enumerate() {
        let nbytes = tensor_bytes(s.name, s.dtype, &s.shape)?;
        entries.push(Entry { name: at, dtype: s.dtype, shape: s.shape.clone().into(), start: s.start, nbytes });
        let _ = by_name.insert(s.name, i as u32, |j| NameBlock::text(&names, entries[j as usize].name));
    }
    let metadata = metadata.into_iter().filter_map(|(k, v)| Some((CName::new(k)?, CName::new(v)?))).collect();
    Ok(Header { data_start, data_len, entries, names, by_name, metadata })
}

/// The check every format ends with: the data section the header declares, `[data_start, data_start +
/// data_len)`, covers the file of `total_len` bytes exactly. `short` is what a shorter file gives
/// (`TRUNCATED` for files, `INCOMPLETE_BUFFER` for memory).
pub(crate) fn exact_cover(data_start: u64, data_len: u64, total_len: u64, short: Status, what: &str) -> Result<()> {
    let need = data_start.checked_add(data_len).ok_or_else(|| {
        Error::new(
            Status::ValidationOverflow,
            format!("{what}: data offset {data_start} + data length {data_len} overflows 64 bits"),
        )
    })?;
    if need > total_len {
        return Err(Error::new(
            short,
            format!(
                "{what} declares {data_len} data bytes after {data_start} header bytes ({need} in all) but the file \
                 has only {total_len}"
            ),
        ));
    }
    if need < total_len {
        return Err(Error::new(
            Status::IncompleteBuffer,
            format!(
                "{} bytes follow the data {what} declares (expected exactly {need} bytes in all, found {total_len})",
                total_len - need
            ),
        ));
    }
    Ok(())
}
