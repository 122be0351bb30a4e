//! `TensorFile`: one safetensors file, a memory buffer, or a multi-file set, behind one set of accessors.

use super::formats::{self, headerless::RawLayout, megatron, Format};
use super::header::{self, Entry};
use super::index;
use super::names::{CName, NameIndex};
use super::part::{Opened, Opening, Part, RawMemory};
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
    format: Format,
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
    /// Opens a file of any format hostfirst recognises, by content: a `.safetensors` file, a multi-file set when
    /// the path is an index (see [`TensorFile::open_index`]; detected by a `.json` name or by content), a NumPy
    /// `.npy` file, an llm.c token shard, or a Megatron indexed dataset (given its `.idx`, its `.bin` or the
    /// prefix of both). A headerless raw file has no magic to recognise: open it with
    /// [`TensorFile::open_raw`]. Reads only headers (a Megatron `.idx` whole, to validate it); never touches an
    /// accelerator.
    pub fn open(path: impl AsRef<Path>) -> Result<TensorFile> {
        // A sharded index: a `.json` name, or content that starts (after JSON whitespace) with `{` while its
        // first 8 bytes cannot be a safetensors length prefix for this file (found by the one open below).
        let path = path.as_ref();
        not_empty(path)?;
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            return TensorFile::open_index(path);
        }
        let o = match Opening::new(path) {
            Ok(o) => o,
            // A Megatron prefix (`data/corpus_text_document` for `.idx` + `.bin`).
            Err(e) if !path.exists() && with_suffix(path, "idx").is_file() => {
                return TensorFile::open_megatron(path).map_err(|m| if m.status() == Status::Io { e } else { m })
            }
            Err(e) => return Err(e),
        };
        match formats::sniff(&o.first) {
            Some(f) => TensorFile::open_sniffed(o, f),
            None if megatron_sibling(path) => TensorFile::open_megatron(path),
            None => match o.safetensors(true)? {
                Opened::Part(s) => Ok(TensorFile::single(Arc::new(s), Format::Safetensors)),
                Opened::Index => TensorFile::open_index(path),
            },
        }
    }

    /// Opens `path` as `format` only. `Format::Auto` is [`TensorFile::open`]; `Format::Raw` needs a layout
    /// ([`TensorFile::open_raw`]): `INVALID_ARGUMENT`. A file of another format hostfirst recognises gets
    /// `OTHER_FORMAT`, naming what it is and the call that opens it; one of no known format gets the format's
    /// own verdict on its header (`INVALID_HEADER` for a missing magic, the safetensors statuses for
    /// safetensors).
    pub fn open_format(path: impl AsRef<Path>, format: Format) -> Result<TensorFile> {
        let path = path.as_ref();
        not_empty(path)?;
        match format {
            Format::Auto => return TensorFile::open(path),
            Format::SafetensorsIndex => return TensorFile::open_index(path),
            Format::Megatron => return TensorFile::open_megatron(path),
            Format::Raw => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    "a raw file has no header to read its layout from: open it with hostfirst_file_open_raw, giving \
                     its dtype, shape and offset",
                ))
            }
            Format::Safetensors | Format::Npy | Format::Llmc => {}
        }
        let o = Opening::new(path)?;
        let found =
            formats::sniff(&o.first).or_else(|| looks_like_safetensors(&o.first, o.len).then_some(Format::Safetensors));
        match found {
            Some(f) if f != format => Err(formats::other_format(&o.display, f, format)),
            _ if format == Format::Safetensors => match o.safetensors(false)? {
                Opened::Part(s) => Ok(TensorFile::single(Arc::new(s), Format::Safetensors)),
                Opened::Index => unreachable!("index detection is off"),
            },
            _ => TensorFile::open_sniffed(o, format),
        }
    }

    /// Opens an `.npy` file or an llm.c shard (`f`), or the Megatron dataset whose `.idx` is open in `o`.
    fn open_sniffed(o: Opening, f: Format) -> Result<TensorFile> {
        let display = o.display.clone();
        let ctx = |e: Error| e.context(&display);
        let header = match f {
            Format::Npy => formats::npy::parse(&o.first, o.len, Status::Truncated, &mut |off, dst| o.read(off, dst)),
            Format::Llmc => formats::llmc::parse(&o.first, o.len, Status::Truncated),
            Format::Megatron => {
                let bin = with_extension(&o.path, "bin");
                return TensorFile::megatron_files(o, &bin);
            }
            _ => unreachable!("sniff names only formats with a magic"),
        }
        .map_err(ctx)?;
        Ok(TensorFile::single(Arc::new(o.into_part(header)?), f))
    }

    /// Opens a Megatron indexed dataset: `path` is its `.idx`, its `.bin` or the prefix of both.
    pub fn open_megatron(path: impl AsRef<Path>) -> Result<TensorFile> {
        let path = path.as_ref();
        not_empty(path)?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let (idx, bin) = match ext {
            "idx" => (path.to_path_buf(), with_extension(path, "bin")),
            "bin" => (with_extension(path, "idx"), path.to_path_buf()),
            // The prefix of `<path>.idx` and `<path>.bin`, unless there is no such `.idx` and the path is a file:
            // then what that file is decides (another format: OTHER_FORMAT, not an IO error about a missing
            // `.idx`; an index by its magic: that index).
            _ => {
                let (pidx, pbin) = (with_suffix(path, "idx"), with_suffix(path, "bin"));
                if !pidx.exists() && path.is_file() {
                    let o = Opening::new(path)?;
                    let found = formats::sniff(&o.first)
                        .or_else(|| looks_like_safetensors(&o.first, o.len).then_some(Format::Safetensors));
                    match found {
                        Some(Format::Megatron) => return TensorFile::megatron_files(o, &with_extension(path, "bin")),
                        Some(f) => return Err(formats::other_format(&o.display, f, Format::Megatron)),
                        None => {}
                    }
                }
                (pidx, pbin)
            }
        };
        let o = Opening::new(&idx)?;
        if let Some(f) = formats::sniff(&o.first).filter(|&f| f != Format::Megatron) {
            return Err(formats::other_format(&o.display, f, Format::Megatron));
        }
        TensorFile::megatron_files(o, &bin)
    }

    fn megatron_files(idx: Opening, bin_path: &Path) -> Result<TensorFile> {
        let bin = Opening::new(bin_path)
            .map_err(|e| e.context(format!("the tokens of the Megatron index {}", idx.display)))?;
        let parsed = megatron::parse(&idx.first, idx.len, bin.len, &bin.display, Status::Truncated, &mut |off, dst| {
            idx.read(off, dst)
        })
        .map_err(|e| e.context(&idx.display))?;
        let display = idx.display.clone();
        let path = idx.path.clone();
        let metadata = parsed.idx.metadata.clone();
        let parts = vec![Arc::new(bin.into_part(parsed.bin)?), Arc::new(idx.into_part(parsed.idx)?)];
        Ok(TensorFile::from_parts(display, Some(path), parts, metadata, Format::Megatron))
    }

    /// Opens a headerless file with the layout the caller gives (see [`RawLayout`]): nanoGPT's
    /// `np.memmap(path, dtype=np.uint16, mode="r")` is `TensorFile::open_raw(path, &RawLayout::tokens(DType::U16))`.
    pub fn open_raw(path: impl AsRef<Path>, layout: &RawLayout) -> Result<TensorFile> {
        let path = path.as_ref();
        not_empty(path)?;
        let o = Opening::new(path)?;
        let header =
            formats::headerless::parse(layout, &o.first, o.len, Status::Truncated, &mut |f| sniffed_is_valid(f, &o))
                .map_err(|e| e.context(&o.display))?;
        Ok(TensorFile::single(Arc::new(o.into_part(header)?), Format::Raw))
    }

    /// [`TensorFile::open_raw`] over an image in memory (owned by the returned object).
    pub fn raw_from_bytes(bytes: impl AsRef<[u8]> + Send + Sync + 'static, layout: &RawLayout) -> Result<TensorFile> {
        let part = Part::from_memory_with(Box::new(bytes), |b| {
            formats::headerless::parse(layout, b, b.len() as u64, Status::IncompleteBuffer, &mut |f| {
                memory_is_valid(f, b)
            })
        })?;
        Ok(TensorFile::single(Arc::new(part), Format::Raw))
    }

    /// A Megatron dataset held in memory: its `.idx` and `.bin` images (owned by the returned object).
    pub fn megatron_from_bytes(
        idx: impl AsRef<[u8]> + Send + Sync + 'static,
        bin: impl AsRef<[u8]> + Send + Sync + 'static,
    ) -> Result<TensorFile> {
        let bin_len = bin.as_ref().len() as u64;
        let ib = idx.as_ref();
        let parsed = megatron::parse(
            ib,
            ib.len() as u64,
            bin_len,
            "<memory .bin>",
            Status::IncompleteBuffer,
            &mut |off, dst| {
                let s = usize::try_from(off).ok().and_then(|o| ib.get(o..o.checked_add(dst.len())?));
                dst.copy_from_slice(s.ok_or_else(|| Error::new(Status::Internal, "read outside the .idx image"))?);
                Ok(())
            },
        )
        .map_err(|e| e.context("<memory>"))?;
        let metadata = parsed.idx.metadata.clone();
        let (pidx, pbin) = (parsed.idx, parsed.bin);
        let parts = vec![
            Arc::new(Part::from_memory_with(Box::new(bin), |_| Ok(pbin))?),
            Arc::new(Part::from_memory_with(Box::new(idx), |_| Ok(pidx))?),
        ];
        Ok(TensorFile::from_parts("<memory>".to_string(), None, parts, metadata, Format::Megatron))
    }

    /// A file of several parts that is not a safetensors set (a Megatron dataset: `.bin` then `.idx`): tensors
    /// in part order, then file order.
    fn from_parts(
        display: String,
        path: Option<PathBuf>,
        parts: Vec<Arc<Part>>,
        metadata: Vec<(CName, CName)>,
        format: Format,
    ) -> TensorFile {
        let mut order = Vec::new();
        let mut by_name = NameIndex::with_capacity(parts.iter().map(|p| p.header.entries.len()).sum());
        for (si, s) in parts.iter().enumerate() {
            for (ei, e) in s.header.entries.iter().enumerate() {
                let at = order.len() as u32;
                order.push((si as u32, ei as u32));
                let _ = by_name.insert(s.header.name(e), at, |g| SetIndex::name_at(&order, &parts, g));
            }
        }
        let data_bytes = parts.iter().map(|s| s.header.data_len).fold(0u64, |a, b| a.saturating_add(b));
        TensorFile {
            inner: Arc::new(Inner {
                path_c: CName::new(display.clone()),
                display,
                path,
                set: Some(SetIndex { order, by_name }),
                parts,
                metadata,
                data_bytes,
                format,
            }),
        }
    }

    /// Opens one `.safetensors` file (never an index).
    pub fn open_safetensors(path: impl AsRef<Path>) -> Result<TensorFile> {
        not_empty(path.as_ref())?;
        let part = Arc::new(Part::open_file(path.as_ref())?);
        Ok(TensorFile::single(part, Format::Safetensors))
    }

    /// Validates an image held in memory (owned by the returned object): a safetensors image, or, recognised by
    /// content, an `.npy` file or an llm.c shard. (A Megatron index needs its `.bin`:
    /// [`TensorFile::megatron_from_bytes`].)
    pub fn from_bytes(bytes: impl AsRef<[u8]> + Send + Sync + 'static) -> Result<TensorFile> {
        TensorFile::from_bytes_format(bytes, Format::Auto)
    }

    /// [`TensorFile::from_bytes`] as `format` only (`Auto`, `Safetensors`, `Npy` or `Llmc`; others give
    /// `INVALID_ARGUMENT`); another recognised format gives `OTHER_FORMAT`.
    pub fn from_bytes_format(bytes: impl AsRef<[u8]> + Send + Sync + 'static, format: Format) -> Result<TensorFile> {
        let b = bytes.as_ref();
        let found = formats::sniff(b);
        let format = match (format, found) {
            (Format::Auto, Some(Format::Megatron)) => {
                return Err(formats::other_format("<memory>", Format::Megatron, Format::Auto))
            }
            (Format::Auto, Some(f)) => f,
            (Format::Auto, None) => Format::Safetensors,
            (Format::Safetensors | Format::Npy | Format::Llmc, _) => format,
            (other, _) => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("format {} cannot be opened from one memory buffer", other.name()),
                ))
            }
        };
        let found = found.or_else(|| looks_like_safetensors(b, b.len() as u64).then_some(Format::Safetensors));
        if let Some(f) = found.filter(|&f| f != format) {
            return Err(formats::other_format("<memory>", f, format));
        }
        let part = match format {
            Format::Npy => Part::from_memory_with(Box::new(bytes), |b| {
                formats::npy::parse(b, b.len() as u64, Status::IncompleteBuffer, &mut |_, _| {
                    Err(Error::new(Status::Internal, "a memory image is read whole"))
                })
            })?,
            Format::Llmc => Part::from_memory_with(Box::new(bytes), |b| {
                formats::llmc::parse(b, b.len() as u64, Status::IncompleteBuffer)
            })?,
            _ => Part::from_memory(Box::new(bytes))?,
        };
        Ok(TensorFile::single(Arc::new(part), format))
    }

    /// Validates a safetensors image in caller memory, without copying it.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (any pointer when `len == 0`), and the memory must stay
    /// valid and unmodified until this object and every view made from it are dropped.
    pub unsafe fn from_raw(ptr: *const u8, len: usize) -> Result<TensorFile> {
        // SAFETY: forwarded from this function's contract.
        let mem = unsafe { RawMemory::new(ptr, len) };
        TensorFile::from_bytes(mem)
    }

    fn single(part: Arc<Part>, format: Format) -> TensorFile {
        TensorFile {
            inner: Arc::new(Inner {
                display: part.display.clone(),
                path: part.path.clone(),
                path_c: part.path_c.clone(),
                metadata: part.header.metadata.clone(),
                data_bytes: part.header.data_len,
                set: None,
                parts: vec![part],
                format,
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
    ///
    /// A save of the set while it opens (hostfirst's writer replaces the index before any part a reader of the
    /// old index may open): when the index is no longer the file it read once the parts are open, the parts may
    /// be of two saves, or gone, and the set is opened again (up to 100 times), so a set opened is one save's.
    pub fn open_index(path: impl AsRef<Path>) -> Result<TensorFile> {
        let path = path.as_ref();
        not_empty(path)?;
        if let Some(url) = path.to_str().filter(|p| crate::remote::is_url(p)) {
            // A remote index: its text in one or two GETs; its parts are the objects beside it.
            let (obj, first) = crate::remote::RemoteObject::open(url)?;
            let text = obj.read_all(first, super::MAX_INDEX_SIZE, "the index")?;
            return TensorFile::open_index_text(path, text);
        }
        let mut tries = 0u32;
        loop {
            tries += 1;
            let (text, file) = index::read(path)?;
            let r = TensorFile::open_index_text(path, text);
            if tries < 100 && !crate::os::same_file(&file, path) {
                continue;
            }
            return r;
        }
    }

    fn open_index_text(path: &Path, text: Vec<u8>) -> Result<TensorFile> {
        let display = path.display().to_string();
        let ctx = |e: Error| e.context(&display);
        let idx = index::parse(&text).map_err(ctx)?;
        drop(text);
        let dir = path.parent().unwrap_or(Path::new("."));

        // Parts, sorted by file name, each opened once.
        let mut part_names: BTreeMap<&str, u32> = idx.weight_map.iter().map(|(_, s)| (s.as_str(), 0)).collect();
        let mut parts = Vec::with_capacity(part_names.len());
        for (i, (name, slot)) in part_names.iter_mut().enumerate() {
            *slot = i as u32;
            let p = dir.join(name);
            let remote = p.to_str().is_some_and(crate::remote::is_url);
            if !remote && !p.exists() {
                return Err(Error::new(
                    Status::InvalidIndex,
                    format!("{display}: part file '{name}' ({}) does not exist", p.display()),
                ));
            }
            let s = Part::open_file(&p).map_err(|e| match e.status() {
                // A remote part that is not there: the index names what does not exist, as for a local set.
                Status::NotFound if remote => Error::new(
                    Status::InvalidIndex,
                    format!("{display}: part file '{name}' does not exist: {}", e.message()),
                ),
                _ => e.context(format!("{display}: part file '{name}'")),
            })?;
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
                format: Format::SafetensorsIndex,
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

    /// The read engine's report ([`crate::engine::per_file`]): the file system holding the file (name, `statfs`
    /// magic, class), whether its views are mapped or read with owned reads and why, the process's reader
    /// (io_uring or the pread pool, and why), and whether direct I/O (`O_DIRECT`) works for it and why not
    /// (probed on each call). A file of several parts (a multi-file set, a Megatron dataset) gives one line per
    /// part, `"<part>: <report>"`, joined by newlines.
    pub fn read_engine(&self) -> String {
        match &self.inner.parts[..] {
            [one] => one.read_engine_report(),
            parts => parts
                .iter()
                .map(|p| format!("{}: {}", p.display, p.read_engine_report()))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// Whether every part's mapping may be handed out (false when any part is read with owned reads).
    pub fn maps(&self) -> bool {
        self.inner.parts.iter().all(|p| p.maps())
    }

    /// The path for messages (`"<memory>"` for buffers).
    pub fn display_name(&self) -> &str {
        &self.inner.display
    }

    /// The file's format (never `Format::Auto`).
    pub fn format(&self) -> Format {
        self.inner.format
    }

    /// True for a file of several parts: a multi-file safetensors set, or a Megatron dataset (`.bin` + `.idx`).
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

    /// A Megatron dataset's sequences `indices[i]` as spans of its `tokens` tensor: `starts[i]` the element
    /// offset of the sequence's first token, `lens[i]` its length in elements (what
    /// `place::Gather::run_spans` takes). Reads 12 bytes of the `.idx` per sequence (positioned reads: a
    /// truncated file gives `TRUNCATED`). Every span is checked to lie in the `tokens` tensor (the `.idx` is
    /// read again, and may have been rewritten since the open). Errors: `UNSUPPORTED` for a file that is not a
    /// Megatron dataset, `INVALID_ARGUMENT` when the three slices differ in length, `OUT_OF_RANGE` naming the
    /// first index past the sequence count, `INVALID_OFFSET` for a span outside the tokens; outputs are written
    /// only on success.
    pub fn sequence_spans(&self, indices: &[u64], starts: &mut [u64], lens: &mut [u64]) -> Result<()> {
        if self.format() != Format::Megatron {
            return Err(Error::new(
                Status::Unsupported,
                format!(
                    "{}: sequences belong to Megatron indexed datasets; this is {}",
                    self.inner.display,
                    self.format().what()
                ),
            ));
        }
        if starts.len() != indices.len() || lens.len() != indices.len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{} indices, {} starts, {} lengths", indices.len(), starts.len(), lens.len()),
            ));
        }
        let (lv, pv, tv) = (self.view("sequence_lengths")?, self.view("sequence_pointers")?, self.view("tokens")?);
        let n = lv.shape()[0];
        if let Some((i, &x)) = indices.iter().enumerate().find(|(_, &x)| x >= n) {
            return Err(Error::new(
                Status::OutOfRange,
                format!("{}: sequence index {i} is {x}, but there are {n} sequences", self.inner.display),
            ));
        }
        let item = u64::from(tv.dtype().bits() / 8);
        let tokens = tv.shape()[0];
        let (mut s, mut l) = (vec![0u64; indices.len()], vec![0u64; indices.len()]);
        for (k, &x) in indices.iter().enumerate() {
            let (mut lb, mut pb) = ([0u8; 4], [0u8; 8]);
            lv.read_at(x * 4, &mut lb)?;
            pv.read_at(x * 8, &mut pb)?;
            // Validated at open (non-negative lengths, pointers the running sum of whole elements), but read now:
            // an `.idx` rewritten in place since may say anything, so each span is checked against the tokens.
            let (len, ptr) = (i32::from_le_bytes(lb), u64::from_le_bytes(pb));
            let end = (ptr / item).checked_add(len.max(0) as u64);
            if len < 0 || ptr % item != 0 || end.map_or(true, |e| e > tokens) {
                return Err(Error::new(
                    Status::InvalidOffset,
                    format!(
                        "{}: sequence {x} is {len} tokens at byte {ptr}, outside the tokens tensor of {tokens} tokens                          of {item} bytes (was the .idx rewritten since the file was opened?)",
                        self.inner.display
                    ),
                ));
            }
            l[k] = len as u64;
            s[k] = ptr / item;
        }
        starts.copy_from_slice(&s);
        lens.copy_from_slice(&l);
        Ok(())
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

/// `path` with `.ext` appended (a Megatron prefix's files: `corpus_text_document` + `.idx`).
fn with_suffix(path: &Path, ext: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// `path` with its extension replaced by `ext`.
fn with_extension(path: &Path, ext: &str) -> PathBuf {
    path.with_extension(ext)
}

/// Whether `path` is a `.bin` beside a Megatron `.idx` (the tokens of an indexed dataset, which have no magic).
fn megatron_sibling(path: &Path) -> bool {
    if !path.extension().is_some_and(|e| e == "bin") {
        return false;
    }
    let mut magic = [0u8; 9];
    std::fs::File::open(with_extension(path, "idx"))
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|_| magic == formats::MEGATRON_MAGIC)
}

/// Whether the first bytes of a file of `len` bytes look like safetensors: a possible header length followed
/// by `{` (used only to name the format in `OTHER_FORMAT` when another format was asked for).
fn looks_like_safetensors(first: &[u8], len: u64) -> bool {
    header::header_len(first, len, Status::Truncated).is_ok()
        && first[8..].iter().find(|b| !b" \t\r\n".contains(b)) == Some(&b'{')
}

/// Whether the open file is a valid file of `f` (the format its magic announces), for the raw opener's check.
fn sniffed_is_valid(f: Format, o: &Opening) -> bool {
    match f {
        Format::Npy => {
            formats::npy::parse(&o.first, o.len, Status::Truncated, &mut |off, dst| o.read(off, dst)).is_ok()
        }
        Format::Llmc => formats::llmc::parse(&o.first, o.len, Status::Truncated).is_ok(),
        _ => true,
    }
}

/// [`sniffed_is_valid`] for a memory image.
fn memory_is_valid(f: Format, b: &[u8]) -> bool {
    match f {
        Format::Npy => formats::npy::parse(b, b.len() as u64, Status::IncompleteBuffer, &mut |_, _| {
            Err(Error::new(Status::Internal, "a memory image is read whole"))
        })
        .is_ok(),
        Format::Llmc => formats::llmc::parse(b, b.len() as u64, Status::IncompleteBuffer).is_ok(),
        _ => true,
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
            super::part::Source::Memory(_) | super::part::Source::Remote(_) => None,
        }
    }
    /// For a tensor of a remote object: an identity of that object (the same for all its tensors, while they
    /// live) and the tensor's absolute offset in it; `None` for files and memory.
    pub(crate) fn remote_and_offset(&self) -> Option<(usize, u64)> {
        match &self.part.source {
            super::part::Source::Remote(_) => {
                Some((std::sync::Arc::as_ptr(self.part) as usize, self.part.header.data_start() + self.entry.start))
            }
            _ => None,
        }
    }
    /// Bytes `offset..offset + len` (absolute) of the tensor's remote object, in one ranged GET, handed to
    /// `sink` as they arrive (`RemoteObject::read_scatter`). `INTERNAL` for a tensor that is not remote.
    pub(crate) fn read_remote(
        &self,
        offset: u64,
        len: u64,
        sink: &mut dyn FnMut(u64, &[u8]),
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        match &self.part.source {
            super::part::Source::Remote(obj) => obj.read_scatter(offset, len, sink, what),
            _ => Err(Error::new(Status::Internal, format!("{}: not a remote object", what()))),
        }
    }
    /// Whether the file's mapping may be handed out (see [`View::maps`]).
    pub fn maps(&self) -> bool {
        self.part.maps()
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
