//! Opening safetensors files: files, memory buffers and multi-file sets opened zero-copy and validated strictly,
//! with cheap thread-safe tensor views. (Placing a whole file on devices is `crate::place::load`.)
//!
//! Opening reads only the header (with `pread`) and maps the file read-only without populating it, so its
//! cost and memory do not grow with the data size. Validation is at least as strict as the reference crate
//! (held to it by tests, not re-run at open) and stricter where it is lax: duplicate
//! names, a tensor named `__metadata__`, and the caps below. Leading and trailing JSON whitespace around the
//! header object is accepted, as the reference crate does, although the format text says the header must
//! begin with `{` (interoperability over the letter of the spec). "Catalogue row N" in comments here and in the
//! tests is a row of docs/malformed-files.md, the status hostfirst returns for each kind of malformed file.
//!
//! ```no_run
//! use hostfirst_core::file::TensorFile;
//! let f = TensorFile::open("model.safetensors")?;
//! let v = f.view("embed.weight")?;
//! let first_rows = v.slice_rows(0, 16)?;
//! let mut buf = vec![0u8; first_rows.nbytes() as usize];
//! first_rows.read_at(0, &mut buf)?; // pread: a truncated file gives TRUNCATED, never SIGBUS
//! # Ok::<(), hostfirst_core::Error>(())
//! ```

mod fast_header;
pub mod formats;
mod header;
mod index;
pub mod layout;
mod names;
mod part;
mod raw;
mod tensor_file;
mod view;

pub use formats::headerless::{RawLayout, INFER as RAW_INFER};
pub use formats::Format;
pub use layout::{ReadPolicy, Runs};
pub use names::CName;
pub(crate) use part::ReadaheadOff;
pub use tensor_file::{TensorFile, TensorRef};
pub use view::{alignment_of, View};

/// The safetensors limit on the JSON header (bytes), as in the reference crate.
pub const MAX_HEADER_SIZE: u64 = 100_000_000;
/// Cap on tensors in one file: 262,144. Real checkpoints hold at most a few tens of thousands per file;
/// header-bloat files (catalogue row 34) beyond this give `LIMIT_EXCEEDED`.
pub const MAX_TENSORS: usize = 1 << 18;
/// Cap on tensors in a multi-file set: 1,048,576.
pub const MAX_SET_TENSORS: usize = 1 << 20;
/// Cap on the entries of a file's metadata (a header's `__metadata__`, an index's `metadata`, a set's merged
/// metadata): 65,536. Real checkpoints carry a few dozen; a header of millions of tiny entries (which the
/// 100 MB header limit allows) would cost seconds and gigabytes, and gives `METADATA_LIMIT_EXCEEDED` instead.
pub const MAX_METADATA_ENTRIES: usize = 1 << 16;
/// Cap on a tensor's rank: 32 (NumPy 1.x's limit).
pub const MAX_RANK: usize = 32;
/// Cap on a tensor name's length in bytes: 4096.
pub const MAX_NAME_LEN: usize = 4096;
/// Cap on the size of a `*.index.json` file: 100,000,000 bytes.
pub const MAX_INDEX_SIZE: u64 = 100_000_000;
/// Cap on the number of part files in a set: 65,536.
pub const MAX_PARTS: usize = 1 << 16;

#[cfg(test)]
mod tests;
