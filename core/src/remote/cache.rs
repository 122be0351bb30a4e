//! The optional local cache of remote objects' bytes, keyed by (URL without credentials, ETag, length).
//!
//! An object's bytes are kept in fixed-size aligned chunks of [`CHUNK`] bytes (the last one shorter), one file
//! each, under `<cache folder>/hostfirst-remote-v1/<digest of the key>/<chunk number>.chunk`. Each file is the
//! chunk's bytes followed by a 16-byte trailer: the digest of the key (a digest collision between two keys never
//! serves one object's bytes for the other) and the digest of the bytes (a corrupt chunk is noticed). A chunk is
//! written to a temporary file in the same folder and renamed into place, so racing processes never leave a
//! half-written chunk under a chunk's name; a chunk file that is short, long or fails its digests is ignored
//! and fetched again (and replaced).
//!
//! The open's first GET always goes to the server and gives the current ETag, so a replaced object has a new key
//! and is never served from the cache; an object without an ETag is not cached. The folder is bounded by
//! `cache_max_bytes`: after this process has written that bound's eighth since it last looked (and on its
//! first write), it sums the folder's chunk files and removes the least recently used (by modification time,
//! which a hit refreshes) until they hold at most 90% of the bound. Failures to write the cache never fail a
//! read (the bytes came from the server); they only leave the chunk uncached.

use super::settings::CacheSettings;
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

/// Bytes per chunk (aligned: chunk `i` holds the object's bytes `i * CHUNK ..`).
pub const CHUNK: u64 = 4 << 20;
/// The folder under the cache folder that this layout owns.
const LAYOUT: &str = "hostfirst-remote-v1";
const TRAILER: usize = 16;

/// Bytes this process wrote into cache folders since it last looked at their size, and whether it has looked.
static WRITTEN: AtomicU64 = AtomicU64::new(0);
static LOOKED: AtomicBool = AtomicBool::new(false);

fn digest(parts: &[&[u8]]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    for p in parts {
        h.write(p);
        h.write_u8(0xff);
    }
    h.finish()
}

/// One object's chunks in the cache.
#[derive(Debug)]
pub(crate) struct ObjectCache {
    root: PathBuf,
    dir: PathBuf,
    key: u64,
    len: u64,
    max_bytes: u64,
}

impl ObjectCache {
    /// The cache of the object shown as `display` with ETag `etag` and `len` bytes; the folder is made on the
    /// first write.
    pub(crate) fn new(s: &CacheSettings, display: &str, etag: &str, len: u64) -> ObjectCache {
        let key = digest(&[display.as_bytes(), etag.as_bytes(), &len.to_le_bytes()]);
        let root = s.dir.join(LAYOUT);
        ObjectCache { dir: root.join(format!("{key:016x}")), root, key, len, max_bytes: s.max_bytes }
    }

    /// The object's bytes that chunk `i` holds.
    pub(crate) fn range(&self, i: u64) -> std::ops::Range<u64> {
        let start = i * CHUNK;
        start..(start + CHUNK).min(self.len)
    }

    fn path(&self, i: u64) -> PathBuf {
        self.dir.join(format!("{i}.chunk"))
    }

    /// Chunk `i`'s bytes, when its file is there and whole.
    pub(crate) fn get(&self, i: u64) -> Option<Vec<u8>> {
        let r = self.range(i);
        let want = (r.end - r.start) as usize;
        let path = self.path(i);
        let mut bytes = std::fs::read(&path).ok()?;
        if bytes.len() != want + TRAILER {
            return None;
        }
        let t = bytes.split_off(want);
        let key = u64::from_le_bytes(t[..8].try_into().ok()?);
        let sum = u64::from_le_bytes(t[8..].try_into().ok()?);
        if key != self.key || sum != digest(&[&bytes]) {
            return None;
        }
        // Least recently used first when the folder is trimmed: a hit counts as a use.
        if let Ok(f) = std::fs::File::options().write(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(bytes)
    }

    /// Keeps chunk `i`'s bytes (best effort: a failure leaves it uncached).
    pub(crate) fn put(&self, i: u64, data: &[u8]) {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let tmp = self.dir.join(format!(".{i}.{}.{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(data)?;
            f.write_all(&self.key.to_le_bytes())?;
            f.write_all(&digest(&[data]).to_le_bytes())?;
            drop(f);
            std::fs::rename(&tmp, self.path(i))
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
            return;
        }
        let added = WRITTEN.fetch_add(data.len() as u64, Ordering::Relaxed) + data.len() as u64;
        if !LOOKED.swap(true, Ordering::Relaxed) || added > self.max_bytes / 8 {
            WRITTEN.store(0, Ordering::Relaxed);
            trim(&self.root, self.max_bytes);
        }
    }
}

/// Removes the least recently used chunk files under `root` until they hold at most 90% of `max_bytes` (when
/// they hold more than `max_bytes`). Files another process removes meanwhile are skipped.
pub(crate) fn trim(root: &Path, max_bytes: u64) {
    let mut files = Vec::new();
    let mut total = 0u64;
    let Ok(objects) = std::fs::read_dir(root) else { return };
    for o in objects.flatten() {
        let Ok(chunks) = std::fs::read_dir(o.path()) else { continue };
        for c in chunks.flatten() {
            let p = c.path();
            if p.extension() != Some(std::ffi::OsStr::new("chunk")) {
                continue;
            }
            if let Ok(m) = c.metadata() {
                total += m.len();
                files.push((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len(), p));
            }
        }
    }
    if total <= max_bytes {
        return;
    }
    files.sort();
    let goal = max_bytes / 10 * 9;
    for (_, n, p) in files {
        if total <= goal {
            break;
        }
        if std::fs::remove_file(&p).is_ok() {
            total -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn trimming_removes_the_least_recently_used_chunks_past_the_bound() {
        let root = std::env::temp_dir().join(format!("hostfirst-cache-trim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let obj = root.join("0123456789abcdef");
        std::fs::create_dir_all(&obj).unwrap();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // Four chunks of 100 bytes, used at t0+0 .. t0+3 (written in another order), and a file that is no chunk.
        for (name, age) in [("2.chunk", 2u64), ("0.chunk", 0), ("3.chunk", 3), ("1.chunk", 1)] {
            let p = obj.join(name);
            std::fs::write(&p, [0u8; 100]).unwrap();
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(t0 + Duration::from_secs(age)).unwrap();
        }
        std::fs::write(obj.join(".5.1.2.tmp"), [0u8; 1000]).unwrap();
        trim(&root, 400); // within the bound: nothing removed
        assert_eq!(std::fs::read_dir(&obj).unwrap().count(), 5);
        trim(&root, 300); // past it: down to 90% (270 bytes): the two oldest go
        let mut left: Vec<String> =
            std::fs::read_dir(&obj).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, [".5.1.2.tmp", "2.chunk", "3.chunk"]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_chunk_is_read_back_only_whole_and_under_its_own_key() {
        let dir = std::env::temp_dir().join(format!("hostfirst-cache-get-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = CacheSettings { dir: dir.clone(), max_bytes: 1 << 30 };
        let len = CHUNK + 10;
        let a = ObjectCache::new(&s, "http://h/x", "\"v1\"", len);
        let tail: Vec<u8> = (0..10).collect();
        a.put(1, &tail);
        assert_eq!(a.get(1).as_deref(), Some(&tail[..]));
        assert_eq!(a.get(0), None, "never written");
        // Another ETag is another key: nothing of the first is served for it.
        assert_eq!(ObjectCache::new(&s, "http://h/x", "\"v2\"", len).get(1), None);
        // The same folder name with another key's trailer (a digest collision) is refused.
        let other = ObjectCache { key: a.key ^ 1, ..ObjectCache::new(&s, "http://h/x", "\"v1\"", len) };
        assert_eq!(other.get(1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
