//! The raw parse of a header (entries in file order, metadata unchecked) that both parsers produce: the fast
//! path in `fast_header.rs` and the serde pass in `header.rs`, which decides when the fast path gives up.

use super::names::CName;
use crate::dtype::DType;

pub(crate) struct RawEntry {
    pub(crate) name: CName,
    pub(crate) dtype: DType,
    pub(crate) shape: std::sync::Arc<[u64]>,
    pub(crate) offsets: [u64; 2],
}

pub(crate) struct RawHeader {
    pub(crate) entries: Vec<RawEntry>,
    pub(crate) metadata: Option<Vec<(String, MetaValue)>>,
}

/// A `__metadata__` value: the string, or the JSON kind of a value that is not one (skipped unbuilt: an
/// array or object value is walked, never materialised).
pub(crate) type MetaValue = std::result::Result<String, &'static str>;
