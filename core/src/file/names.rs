//! `CName`: an immutable string shared by Rust and C. One allocation holds the UTF-8 text followed by a NUL,
//! so the same bytes serve `&str` (without the NUL) and `const char*` (with it). Hash and equality use the
//! text only, so a `HashMap<CName, _>` can be searched with a `&str`.

use std::borrow::Borrow;
use std::ffi::c_char;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A shared, NUL-terminated UTF-8 string without interior NULs.
#[derive(Clone)]
pub struct CName(Arc<str>);

impl CName {
    /// Builds a name; `None` if `s` contains a NUL.
    pub fn new(mut s: String) -> Option<CName> {
        if s.as_bytes().contains(&0) {
            return None;
        }
        s.push('\0');
        Some(CName(Arc::from(s)))
    }

    /// Builds a name from borrowed text; `None` if it contains a NUL.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(s: &str) -> Option<CName> {
        if s.as_bytes().contains(&0) {
            return None;
        }
        let mut owned = String::with_capacity(s.len() + 1);
        owned.push_str(s);
        owned.push('\0');
        Some(CName(Arc::from(owned)))
    }

    /// [`CName::from_str`] building the text in `scratch` (cleared first) so the name costs one allocation.
    pub fn from_str_with(s: &str, scratch: &mut String) -> Option<CName> {
        if s.as_bytes().contains(&0) {
            return None;
        }
        scratch.clear();
        scratch.push_str(s);
        scratch.push('\0');
        Some(CName(Arc::from(scratch.as_str())))
    }

    /// The text, without the NUL.
    pub fn as_str(&self) -> &str {
        &self.0[..self.0.len() - 1]
    }

    /// A pointer to the NUL-terminated text, valid while this `CName` (or a clone) lives.
    pub fn as_ptr(&self) -> *const c_char {
        self.0.as_ptr() as *const c_char
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
