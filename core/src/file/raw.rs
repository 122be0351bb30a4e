//! The raw parse of a header (entries in file order, metadata unchecked) that both parsers produce: the fast
//! path in `fast_header.rs` and the serde pass in `header.rs`, which decides when the fast path gives up.

use super::names::NameAt;
use crate::dtype::DType;

/// An entry as parsed; its name is a place in [`RawHeader::names`].
pub(crate) struct RawEntry {
    pub(crate) name: NameAt,
    pub(crate) dtype: DType,
    pub(crate) shape: std::sync::Arc<[u64]>,
    pub(crate) offsets: [u64; 2],
}

pub(crate) struct RawHeader {
    /// Every tensor name of the header in one shared buffer (a finished `NameBlock`).
    pub(crate) names: std::sync::Arc<str>,
    pub(crate) entries: Vec<RawEntry>,
    pub(crate) metadata: Option<Vec<(String, MetaValue)>>,
}

/// A `__metadata__` value: the string, or the JSON kind of a value that is not one (skipped unbuilt: an
/// array or object value is walked, never materialised).
pub(crate) type MetaValue = std::result::Result<String, &'static str>;
