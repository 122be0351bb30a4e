//! `CName`: an immutable string shared by Rust and C. Its UTF-8 text is followed by a NUL in a shared buffer,
//! so the same bytes serve `&str` (without the NUL) and `const char*` (with it). A name has a buffer of its
//! own, or shares one with every other name of a header ([`NameBlock`]: one allocation for 100,000 names
//! instead of 100,000). Hash and equality use the text only, so a `HashMap<CName, _>` can be searched with a
//! `&str`.

use std::borrow::Borrow;
use std::ffi::c_char;
use std::fmt;
use std::hash::BuildHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A shared, NUL-terminated UTF-8 string without interior NULs: `len` bytes of text at `start` of `buf`, then
/// a NUL.
#[derive(Clone)]
pub struct CName {
    buf: Arc<str>,
    start: u32,
    len: u32,
}

/// Many names in one buffer: [`NameBlock::push`] appends a name's text and its NUL and returns its place;
/// [`NameBlock::finish`] makes the buffer shared, after which [`NameBlock::name`] hands out the names.
#[derive(Default)]
pub(crate) struct NameBlock {
    text: String,
}

/// Where [`NameBlock::push`] put a name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NameAt {
    start: u32,
    len: u32,
}

impl NameBlock {
    /// Appends `s` and a NUL; `None` if `s` contains a NUL or the block would pass 4 GiB.
    pub(crate) fn push(&mut self, s: &str) -> Option<NameAt> {
        if s.as_bytes().contains(&0) {
            return None;
        }
        let start = u32::try_from(self.text.len()).ok()?;
        let len = u32::try_from(s.len()).ok()?;
        start.checked_add(len)?.checked_add(1)?;
        self.text.push_str(s);
        self.text.push('\0');
        Some(NameAt { start, len })
    }

    /// The text of the name at `at` of this (unfinished) block.
    pub(crate) fn get(&self, at: NameAt) -> &str {
        &self.text[at.start as usize..(at.start + at.len) as usize]
    }

    /// The shared buffer every name of the block points into.
    pub(crate) fn finish(self) -> Arc<str> {
        Arc::from(self.text)
    }

    /// The text of the name at `at` of a finished block.
    pub(crate) fn text(buf: &Arc<str>, at: NameAt) -> &str {
        &buf[at.start as usize..(at.start + at.len) as usize]
    }

    /// A pointer to the NUL-terminated name at `at` of a finished block, valid while `buf` (or a clone) lives.
    pub(crate) fn ptr(buf: &Arc<str>, at: NameAt) -> *const c_char {
        debug_assert_eq!(buf.as_bytes()[(at.start + at.len) as usize], 0);
        // SAFETY: a name's text and its NUL lie inside the block.
        unsafe { buf.as_ptr().add(at.start as usize) as *const c_char }
    }

    /// The name at `at` of a finished block.
    pub(crate) fn name(buf: &Arc<str>, at: NameAt) -> CName {
        debug_assert_eq!(buf.as_bytes()[(at.start + at.len) as usize], 0);
        CName { buf: buf.clone(), start: at.start, len: at.len }
    }
}

impl CName {
    /// Builds a name; `None` if `s` contains a NUL.
    pub fn new(mut s: String) -> Option<CName> {
        if s.as_bytes().contains(&0) {
            return None;
        }
        let len = u32::try_from(s.len()).ok()?;
        s.push('\0');
        Some(CName { buf: Arc::from(s), start: 0, len })
    }

    /// Builds a name from borrowed text; `None` if it contains a NUL.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(s: &str) -> Option<CName> {
        if s.as_bytes().contains(&0) {
            return None;
        }
        let len = u32::try_from(s.len()).ok()?;
        let mut owned = String::with_capacity(s.len() + 1);
        owned.push_str(s);
        owned.push('\0');
        Some(CName { buf: Arc::from(owned), start: 0, len })
    }

    /// The text, without the NUL.
    pub fn as_str(&self) -> &str {
        &self.buf[self.start as usize..(self.start + self.len) as usize]
    }

    /// The text and its NUL as a C string.
    pub fn as_c_str(&self) -> &std::ffi::CStr {
        let b = &self.buf.as_bytes()[self.start as usize..=(self.start + self.len) as usize];
        // SAFETY: a name's text has no NUL (every constructor refuses one) and is followed by one in `buf`.
        unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(b) }
    }

    /// A pointer to the NUL-terminated text, valid while this `CName` (or a clone) lives.
    pub fn as_ptr(&self) -> *const c_char {
        // SAFETY: `start` is within `buf` (a name's text and its NUL lie inside it).
        unsafe { self.buf.as_ptr().add(self.start as usize) as *const c_char }
    }
}

impl Borrow<str> for CName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for CName {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl PartialEq for CName {
    fn eq(&self, o: &Self) -> bool {
        self.as_str() == o.as_str()
    }
}

impl Eq for CName {}

impl fmt::Display for CName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for CName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Positions (`u32`, 4 bytes a slot) indexed by the name each points at: a header's name index. The table
/// holds no copy of a name; every call passes `name_of`, which gives the name at a position.
pub(crate) struct NameIndex {
    table: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl NameIndex {
    pub(crate) fn with_capacity(n: usize) -> NameIndex {
        NameIndex { table: hashbrown::HashTable::with_capacity(n), hasher: Default::default() }
    }

    /// Adds position `at` for `name` (which `name_of(at)` must give). `Err(prev)` when an equal name is already
    /// at `prev`; nothing is added then.
    pub(crate) fn insert<'a>(&mut self, name: &str, at: u32, name_of: impl Fn(u32) -> &'a str) -> Result<(), u32> {
        let h = self.hasher.hash_one(name);
        if let Some(&prev) = self.table.find(h, |&i| name_of(i) == name) {
            return Err(prev);
        }
        let hasher = &self.hasher;
        self.table.insert_unique(h, at, |&i| hasher.hash_one(name_of(i)));
        Ok(())
    }

    /// The position of `name`, if it is there.
    pub(crate) fn get<'a>(&self, name: &str, name_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        self.table.find(self.hasher.hash_one(name), |&i| name_of(i) == name).copied()
    }
}

impl fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NameIndex({} names)", self.table.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_block_share_one_buffer_and_end_in_a_nul() {
        let mut b = NameBlock::default();
        let at: Vec<NameAt> = ["a", "", "layer.0.weight"].iter().map(|s| b.push(s).unwrap()).collect();
        assert!(b.push("bad\0name").is_none());
        let buf = b.finish();
        let names: Vec<CName> = at.iter().map(|&a| NameBlock::name(&buf, a)).collect();
        assert_eq!(names.iter().map(CName::as_str).collect::<Vec<_>>(), ["a", "", "layer.0.weight"]);
        for n in &names {
            // SAFETY: as_ptr points at the text followed by a NUL inside the shared buffer.
            let c = unsafe { std::ffi::CStr::from_ptr(n.as_ptr()) };
            assert_eq!(c.to_str().unwrap(), n.as_str());
        }
        assert_eq!(Arc::strong_count(&buf), 4);
        assert!(names[2] == CName::from_str("layer.0.weight").unwrap());
    }

    #[test]
    fn the_index_finds_every_name_and_refuses_a_second_one() {
        let names: Vec<String> = (0..10_000).map(|i| format!("t{i}")).collect();
        let name_of = |i: u32| names[i as usize].as_str();
        let mut ix = NameIndex::with_capacity(names.len());
        for (i, n) in names.iter().enumerate() {
            ix.insert(n, i as u32, name_of).unwrap();
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(ix.get(n, name_of), Some(i as u32));
        }
        assert_eq!(ix.get("t10000", name_of), None);
        assert_eq!(ix.insert("t7", 7, name_of), Err(7));
    }
}
