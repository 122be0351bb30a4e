//! `TensorFile`: one safetensors file, a memory buffer, or a multi-file set, behind one set of accessors.

use super::header::Entry;
use super::index;
use super::names::{CName, NameIndex};
use super::part::{Opened, Part, RawMemory};
use super::view::View;
use super::MAX_SET_TENSORS;
use crate::error::{Error, Result, Status};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open safetensors file, memory buffer or multi-file set. Cloning is cheap (an `Arc`); it is `Send + Sync`
/// and every accessor may be called from many threads at once.
#[derive(Clone)]
pub struct TensorFile {
    inner: Arc<Inner>,
}

struct SetIndex {
    /// (part, entry) in set order: parts by file name, tensors in file order within each.
    order: Vec<(u32, u32)>,
    /// Position in `order` by name.
    by_name: NameIndex,
}

impl SetIndex {
    /// The name at position `g` of `order`.
    fn name_at<'a>(order: &[(u32, u32)], parts: &'a [Arc<Part>], g: u32) -> &'a str {
        let (p, e) = order[g as usize];
        let h = &parts[p as usize].header;
        h.name(&h.entries[e as usize])
    }

    fn find(&self, parts: &[Arc<Part>], name: &str) -> Option<u32> {
        self.by_name.get(name, |g| SetIndex::name_at(&self.order, parts, g))
    }
}

struct Inner {
    display: String,
    path: Option<PathBuf>,
    path_c: Option<CName>,
    parts: Vec<Arc<Part>>,
    set: Option<SetIndex>,
    metadata: Vec<(CName, CName)>,
    data_bytes: u64,
}

impl std::fmt::Debug for TensorFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorFile")
            .field("file", &self.inner.display)
            .field("tensors", &self.len())
            .field("parts", &self.inner.parts.len())
            .finish()
    }
}

impl TensorFile {
    /// Opens a `.safetensors` file, or a multi-file set when the path is an index (see [`TensorFile::open_index`];
    /// detected by a `.json` name or by content). Reads only headers; never touches an accelerator.
    pub fn open(path: impl AsRef<Path>) -> Result<TensorFile> {
        // A sharded index: a `.json` name, or content that starts (after JSON whitespace) with `{` while its
        // first 8 bytes cannot be a safetensors length prefix for this file (found by the one open below).
        let path = path.as_ref();
        not_empty(path)?;
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            return TensorFile::open_index(path);
        }
        match Part::open_file_detect(path, true)? {
            Opened::Part(s) => Ok(TensorFile::single(Arc::new(s))),
            Opened::Index => TensorFile::open_index(path),
        }
    }

    /// Opens one `.safetensors` file (never an index).
    pub fn open_safetensors(path: impl AsRef<Path>) -> Result<TensorFile> {
        not_empty(path.as_ref())?;
        let part = Arc::new(Part::open_file(path.as_ref())?);
        Ok(TensorFile::single(part))
    }

    /// Validates a safetensors image held in memory (owned by the returned object).
    pub fn from_bytes(bytes: impl AsRef<[u8]> + Send + Sync + 'static) -> Result<TensorFile> {
        let part = Arc::new(Part::from_memory(Box::new(bytes))?);
        Ok(TensorFile::single(part))
    }

    /// Validates a safetensors image in caller memory, without copying it.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (any pointer when `len == 0`), and the memory must stay
    /// valid and unmodified until this object and every view made from it are dropped.
    pub unsafe fn from_raw(ptr: *const u8, len: usize) -> Result<TensorFile> {
        // SAFETY: forwarded from this function's contract.
        let mem = unsafe { RawMemory::new(ptr, len) };
        let part = Arc::new(Part::from_memory(Box::new(mem))?);
        Ok(TensorFile::single(part))
    }

    fn single(part: Arc<Part>) -> TensorFile {
        TensorFile {
            inner: Arc::new(Inner {
                display: part.display.clone(),
                path: part.path.clone(),
                path_c: part.path_c.clone(),
                metadata: part.header.metadata.clone(),
                data_bytes: part.header.data_len,
                set: None,
                parts: vec![part],
            }),
        }
    }

    /// Opens a multi-file set from its `*.safetensors.index.json` (the Hugging Face `weight_map` format).
    ///
    /// Each part named in `weight_map` is opened once (part paths are relative to the index's directory).
    /// The set's tensors are ordered by part file name, then in file order within each part. Rules:
    /// every indexed tensor must be in the part the index names (`INVALID_INDEX` otherwise); a tensor in
    /// two parts is `DUPLICATE_TENSOR`; a part tensor missing from the index is `INVALID_INDEX`; a part
    /// that does not exist is `INVALID_INDEX`; a malformed part gives its own format status. Metadata: the
    /// index's `metadata` object (non-string values as JSON text), then each part's `__metadata__` keys not
    /// already present (first part by name wins).
    pub fn open_index(path: impl AsRef<Path>) -> Result<TensorFile> {
        let path = path.as_ref();
        not_empty(path)?;
        let display = path.display().to_string();
        let ctx = |e: Error| e.context(&display);
        let text = index::read(path)?;
        let idx = index::parse(&text).map_err(ctx)?;
        drop(text);
        let dir = path.parent().unwrap_or(Path::new("."));

        // Parts, sorted by file name, each opened once.
        let mut part_names: BTreeMap<&str, u32> = idx.weight_map.iter().map(|(_, s)| (s.as_str(), 0)).collect();
        let mut parts = Vec::with_capacity(part_names.len());
        for (i, (name, slot)) in part_names.iter_mut().enumerate() {
            *slot = i as u32;
            let p = dir.join(name);
            if !p.exists() {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!("{display}: part file '{name}' ({}) does not exist", p.display()),
                ));
            }
            let s = Part::open_file(&p).map_err(|e| e.context(format!("{display}: part file '{name}'")))?;
            parts.push(Arc::new(s));
        }

        let total: usize = parts.iter().map(|s| s.header.entries.len()).sum();
        if total > MAX_SET_TENSORS {
            return Err(Error::new(
                Status::LimitExceeded,
                format!(
                    "{display}: the part files hold {total} tensors; the hostfirst cap for a set is {MAX_SET_TENSORS}"
                ),
            ));
        }
        let mut order: Vec<(u32, u32)> = Vec::with_capacity(total);
        let mut by_name = NameIndex::with_capacity(total);
        for (si, s) in parts.iter().enumerate() {
            for (ei, e) in s.header.entries.iter().enumerate() {
                let at = order.len() as u32;
                order.push((si as u32, ei as u32));
                if let Err(prev) = by_name.insert(s.header.name(e), at, |g| SetIndex::name_at(&order, &parts, g)) {
                    let other = &parts[order[prev as usize].0 as usize];
                    return Err(Error::new(
                        Status::DuplicateTensor,
                        format!(
                            "{display}: tensor '{}' is in two part files: {} and {}",
                            s.header.name(e),
                            other.display,
                            s.display
                        ),
                    ));
                }
            }
        }
        let set = SetIndex { order, by_name };

        // The index and the parts must agree exactly.
        let mut indexed: HashMap<&str, &str> = HashMap::with_capacity(idx.weight_map.len());
        for (t, s) in &idx.weight_map {
            indexed.insert(t.as_str(), s.as_str());
            let Some(gi) = set.find(&parts, t.as_str()) else {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!("{display}: the index maps tensor '{t}' to part file '{s}', which does not contain it"),
                ));
            };
            let actual = set.order[gi as usize].0;
            if actual != part_names[s.as_str()] {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!(
                        "{display}: the index maps tensor '{t}' to part file '{s}', but it is in {}",
                        parts[actual as usize].display
                    ),
                ));
            }
        }
        for (si, ei) in &set.order {
            let s = &parts[*si as usize];
            let e = &s.header.entries[*ei as usize];
            if !indexed.contains_key(s.header.name(e)) {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!(
                        "{display}: part file {} holds tensor '{}', which the index does not list",
                        s.display,
                        s.header.name(e)
                    ),
                ));
            }
        }

        let mut metadata: Vec<(CName, CName)> = Vec::new();
        let mut keys = std::collections::HashSet::new();
        for (k, v) in idx.metadata {
            let (Some(kc), Some(vc)) = (CName::new(k.clone()), CName::new(v)) else {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!("{display}: metadata key '{}' contains a NUL", k.escape_debug()),
                ));
            };
            if keys.insert(k) {
                metadata.push((kc, vc));
            }
        }
        for s in &parts {
            for (k, v) in &s.header.metadata {
                if keys.insert(k.as_str().to_string()) {
                    if metadata.len() == super::MAX_METADATA_ENTRIES {
                        let e = super::header::metadata_cap_error("the set's metadata (the index's and its parts')");
                        return Err(e.context(&display));
                    }
                    metadata.push((k.clone(), v.clone()));
                }
            }
        }
        let data_bytes = parts.iter().map(|s| s.header.data_len).fold(0u64, |a, b| a.saturating_add(b));
        Ok(TensorFile {
            inner: Arc::new(Inner {
                path_c: CName::new(display.clone()),
                display,
                path: Some(path.to_path_buf()),
                parts,
                set: Some(set),
                metadata,
                data_bytes,
            }),
        })
    }

    fn entry(&self, i: usize) -> Option<(&Arc<Part>, &Entry)> {
        match &self.inner.set {
            None => {
                let s = &self.inner.parts[0];
                s.header.entries.get(i).map(|e| (s, e))
            }
            Some(set) => {
                let &(si, ei) = set.order.get(i)?;
                let s = &self.inner.parts[si as usize];
                Some((s, &s.header.entries[ei as usize]))
            }
        }
    }

    /// The path given at open (the index for a set); `None` for memory buffers.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The path for messages (`"<memory>"` for buffers).
    pub fn display_name(&self) -> &str {
        &self.inner.display
    }

    /// True for a multi-file set.
    pub fn is_set(&self) -> bool {
        self.inner.set.is_some()
    }

    /// Number of files (1 unless this is a set).
    pub fn part_count(&self) -> usize {
        self.inner.parts.len()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        match &self.inner.set {
            None => self.inner.parts[0].header.entries.len(),
            Some(s) => s.order.len(),
        }
    }

    /// True when there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Name of tensor `i` in file order.
    pub fn name(&self, i: usize) -> Option<&str> {
        self.entry(i).map(|(s, e)| s.header.name(e))
    }

    /// Name of tensor `i` in file order, as a shared C string (no copy of the text).
    pub fn cname(&self, i: usize) -> Option<CName> {
        self.entry(i).map(|(s, e)| s.header.cname(e))
    }

    /// Size in bytes of tensor `i` in file order (without making a view of it).
    pub fn nbytes_at(&self, i: usize) -> Option<u64> {
        self.entry(i).map(|(_, e)| e.nbytes)
    }

    /// Shape of tensor `i` in file order, owned by the file (without making a view of it).
    pub fn shape_at(&self, i: usize) -> Option<&[u64]> {
        self.entry(i).map(|(_, e)| &e.shape[..])
    }

    /// Element type of tensor `i` in file order (without making a view of it).
    pub fn dtype_at(&self, i: usize) -> Option<crate::dtype::DType> {
        self.entry(i).map(|(_, e)| e.dtype)
    }

    /// All names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).filter_map(move |i| self.name(i))
    }

    /// Index of a tensor by name (a hash lookup).
    pub fn find(&self, name: &str) -> Option<usize> {
        match &self.inner.set {
            None => {
                let h = &self.inner.parts[0].header;
                h.by_name.get(name, |i| h.name(&h.entries[i as usize])).map(|i| i as usize)
            }
            Some(s) => s.find(&self.inner.parts, name).map(|i| i as usize),
        }
    }

    /// Number of metadata entries.
    pub fn metadata_len(&self) -> usize {
        self.inner.metadata.len()
    }

    /// Metadata entry `i` as (key, value), in header order.
    pub fn metadata_entry(&self, i: usize) -> Option<(&str, &str)> {
        self.inner.metadata.get(i).map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The metadata value for `key`.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.inner.metadata.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v.as_str())
    }

    /// Total bytes of tensor data (all parts of a set).
    pub fn data_bytes(&self) -> u64 {
        self.inner.data_bytes
    }

    /// A view of tensor `i` (file order). `OUT_OF_RANGE` past the end.
    pub fn view_at(&self, i: usize) -> Result<View> {
        self.tensor_ref(i).map(|t| t.view()).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("{}: tensor index {i}, but there are {} tensors", self.inner.display, self.len()),
            )
        })
    }

    /// Tensor `i` (file order) by reference, without making a view; `None` past the end.
    pub fn tensor_ref(&self, i: usize) -> Option<TensorRef<'_>> {
        self.entry(i).map(|(part, entry)| TensorRef { part, entry })
    }

    /// A view of the tensor called `name`. `NOT_FOUND` if there is none.
    pub fn view(&self, name: &str) -> Result<View> {
        let i = self
            .find(name)
            .ok_or_else(|| Error::new(Status::NotFound, format!("{}: no tensor named '{name}'", self.inner.display)))?;
        self.view_at(i)
    }

    // ---- C helpers: pointers valid while this object (or a clone) lives ----

    pub fn name_ptr(&self, i: usize) -> Option<*const std::ffi::c_char> {
        self.entry(i).map(|(s, e)| s.header.cname_ptr(e))
    }

    pub fn metadata_ptrs(&self, i: usize) -> Option<(*const std::ffi::c_char, *const std::ffi::c_char)> {
        self.inner.metadata.get(i).map(|(k, v)| (k.as_ptr(), v.as_ptr()))
    }

    pub fn metadata_value_ptr(&self, key: &str) -> Option<*const std::ffi::c_char> {
        self.inner.metadata.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v.as_ptr())
    }

    pub fn path_ptr(&self) -> Option<*const std::ffi::c_char> {
        self.inner.path_c.as_ref().map(|c| c.as_ptr())
    }
}

/// `INVALID_ARGUMENT` for an empty path (which the system would report as a nameless I/O error).
fn not_empty(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(Error::new(
            Status::InvalidArgument,
            "the path is empty: give the path of a .safetensors file or of a *.safetensors.index.json",
        ));
    }
    Ok(())
}

/// A whole tensor of an open file, borrowed from it: what a load reads, without the reference counts a
/// [`View`] takes (a 20,000-tensor load makes no 20,000 views to read them). [`TensorRef::view`] makes the
/// view where one is needed.
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    part: &'a Arc<Part>,
    entry: &'a super::header::Entry,
}

impl<'a> TensorRef<'a> {
    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.part.header.name(self.entry)
    }
    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.entry.nbytes
    }
    /// The file (or set part) it belongs to, as messages name it.
    pub fn file_display(&self) -> &'a str {
        &self.part.display
    }
    /// The open file and the absolute offset of the tensor's first byte; `None` for a memory buffer.
    pub(crate) fn file_and_offset(&self) -> Option<(&'a std::fs::File, u64)> {
        match &self.part.source {
            super::part::Source::File { file, .. } => Some((file, self.part.header.data_start() + self.entry.start)),
            super::part::Source::Memory(_) => None,
        }
    }
    /// The address of the tensor's first byte in the file's read-only mapping (or memory buffer): what
    /// [`View::mapped`] of its view starts at.
    pub fn mapped_address(&self) -> u64 {
        self.part.bytes().as_ptr() as u64 + self.part.header.data_start() + self.entry.start
    }
    /// A view of the whole tensor.
    pub fn view(&self) -> View {
        let e = self.entry;
        View {
            part: Arc::clone(self.part),
            name: self.part.header.cname(e),
            dtype: e.dtype,
            shape: Arc::clone(&e.shape),
            start: e.start,
            nbytes: e.nbytes,
            strides: None,
        }
    }
}
