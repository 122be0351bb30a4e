//! Staged files: the temporary file a save writes in the target's directory, and the rename that makes it the
//! target — so that the target is, at every instant, either the old file or the complete new one.
//!
//! - The temporary file is `.<target name>.<tag>.hostfirst-tmp` in the target's directory (a rename never
//!   crosses file systems), made with `O_EXCL`, with the permissions of the file it replaces (or the
//!   process's default), its blocks allocated up front where the system can ([`engine::write::reserve`]:
//!   a full disk says so before the first byte is written).
//! - While a writer owns it, it holds an exclusive advisory lock on it (`flock`, Unix) — Windows: it is open
//!   without `FILE_SHARE_DELETE`, so no other process can remove it (both: [`crate::os::create_new_held`]). A process killed at any point
//!   leaves the old target and at most this file; the lock dies with the process, and the next writer of
//!   that target removes every such file it can lock ([`remove_stale`]), never one a live writer holds.
//! - Commit: `fsync` the file, `rename` it over the target (atomic; a reader holding the old file keeps its
//!   bytes), then `fsync` the directory ([`sync_dir`]) so the rename itself survives a crash.
//!   Windows differs (documented, not hidden): a file must be closed before it can be renamed, so the handle
//!   is closed after `FlushFileBuffers` and before `MoveFileExW(MOVEFILE_REPLACE_EXISTING)` (std's rename); a
//!   target that another process has open or mapped cannot be replaced (the error says so, and the target is
//!   unchanged); and a directory cannot be flushed, so [`sync_dir`] does nothing there (NTFS journals the
//!   rename itself).
//! - Dropped without a commit (an error, a cancel, a panic), the temporary file is removed.

use crate::engine::write::reserve;
use crate::error::{Error, Result, Status};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The suffix of every staged file.
pub const SUFFIX: &str = ".hostfirst-tmp";

/// The name of the staged file of `target_name` with `tag`.
pub fn temp_name(target_name: &str, tag: &str) -> String {
    format!(".{target_name}.{tag}{SUFFIX}")
}

/// A tag no other writer uses: this process's id and 64 random bits.
pub fn unique_tag() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("{}-{:016x}", std::process::id(), h.finish())
}

/// A staged file on its way to `target`.
pub struct Staged {
    /// The file it becomes.
    pub target: PathBuf,
    /// The temporary path.
    pub temp: PathBuf,
    file: Option<File>,
    /// Whether this writer removes the temporary file when dropped uncommitted (false for a file another
    /// rank staged, which that rank removes).
    owned: bool,
    committed: bool,
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

impl Staged {
    /// Makes the staged file of `target` (tag: [`unique_tag`] unless given), `len` bytes long (allocated
    /// where the system can), locked, with the target's permissions when it exists. `NO_SPACE`,
    /// `PERMISSION_DENIED` or `IO` naming the directory and the numbers otherwise; nothing is left behind.
    pub fn create(target: &Path, len: u64, tag: Option<&str>) -> Result<Staged> {
        let (dir, name) = split(target)?;
        let tag = tag.map_or_else(unique_tag, str::to_string);
        let temp = dir.join(temp_name(&name, &tag));
        // O_EXCL (Windows: CREATE_NEW, and no FILE_SHARE_DELETE: nobody removes it while it is open).
        let file = match crate::os::create_new_held(&temp) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tag.starts_with('d') => {
                // A staged file of the same save left by a killed job (distributed tags are not unique):
                // removed if nobody holds it, then made again.
                crate::os::remove_if_unheld(&temp);
                crate::os::create_new_held(&temp)
                    .map_err(|e| crate::os::io_error(format!("creating the staged file {}", display(&temp)), &e))?
            }
            Err(e) => {
                return Err(crate::os::io_error(
                    format!("creating a file in {} (for {})", display(&dir), display(target)),
                    &e,
                ))
            }
        };
        let mut staged = Staged { target: target.to_path_buf(), temp, file: Some(file), owned: true, committed: false };
        staged.prepare(len)?;
        Ok(staged)
    }

    fn prepare(&mut self, len: u64) -> Result<()> {
        let file = self.file.as_ref().expect("open");
        crate::os::hold(file).map_err(|e| crate::os::io_error(format!("locking {}", display(&self.temp)), &e))?;
        if let Ok(m) = std::fs::metadata(&self.target) {
            // The new file keeps the old one's permissions (best effort: a file we may not chmod keeps ours).
            let _ = file.set_permissions(m.permissions());
        }
        match reserve(file, len) {
            Ok(_) => {}
            Err(e) => {
                let free = crate::os::free_space(self.temp.parent().unwrap_or(Path::new(".")));
                let mut msg = format!(
                    "{}: the file needs {} bytes ({})",
                    display(&self.target),
                    len,
                    crate::error::human_bytes(len)
                );
                if let Some(f) = free {
                    msg.push_str(&format!("; the file system has {f} bytes free ({})", crate::error::human_bytes(f)));
                }
                return Err(crate::os::io_error(msg, &e));
            }
        }
        file.set_len(len).map_err(|e| crate::os::io_error(format!("sizing {}", display(&self.temp)), &e))?;
        Ok(())
    }

    /// Opens the staged file of `target` that another rank made with `tag` (for writing its pieces).
    pub fn open_existing(target: &Path, tag: &str) -> Result<Staged> {
        let (dir, name) = split(target)?;
        let temp = dir.join(temp_name(&name, tag));
        let file = OpenOptions::new().write(true).open(&temp).map_err(|e| {
            crate::os::io_error(
                format!(
                    "opening {}, which the first rank staged (do all ranks declare the same tensors, shapes and \
                     metadata?)",
                    display(&temp)
                ),
                &e,
            )
        })?;
        Ok(Staged { target: target.to_path_buf(), temp, file: Some(file), owned: false, committed: false })
    }

    /// The open file.
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("a staged file is open until committed")
    }

    /// Flushes the file's data and size to storage (`fsync`).
    pub fn sync(&self) -> Result<()> {
        self.file().sync_all().map_err(|e| crate::os::io_error(format!("fsync of {}", display(&self.temp)), &e))
    }

    /// Renames the staged file over the target (after [`Staged::sync`] when `durable`). The directory is not
    /// synced here (one [`sync_dir`] serves every file of a directory).
    pub fn commit(&mut self, durable: bool) -> Result<()> {
        if durable {
            self.sync()?;
        }
        self.close_for_rename();
        if let Err(e) = std::fs::rename(&self.temp, &self.target) {
            let hint = if cfg!(windows) { " (Windows: is the target open or mapped by a reader?)" } else { "" };
            return Err(crate::os::io_error(
                format!(
                    "renaming {} over {}{hint}; the target is unchanged",
                    display(&self.temp),
                    display(&self.target)
                ),
                &e,
            ));
        }
        self.committed = true;
        self.file = None;
        Ok(())
    }

    /// Windows: closes the file, which is open without `FILE_SHARE_DELETE` and so cannot be renamed (under any of
    /// its names: its own, or a second name from [`Staged::link_aside`]) or removed while open; it is still
    /// removed when dropped uncommitted. Elsewhere nothing: the file stays open (and locked) until committed.
    pub fn close_for_rename(&mut self) {
        #[cfg(windows)]
        {
            self.file = None;
        }
    }

    /// A second name for the staged file, `.<target>.<tag>.l.hostfirst-tmp` (a hard link): the set commit
    /// renames it over the target while the first name stays for an index that names it. `Err` where the file
    /// system has no hard links (nothing was changed).
    pub fn link_aside(&self) -> std::io::Result<PathBuf> {
        let name = self.temp.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let link = self.temp.with_file_name(format!("{}.l{SUFFIX}", name.trim_end_matches(SUFFIX)));
        let _ = std::fs::remove_file(&link);
        std::fs::hard_link(&self.temp, &link)?;
        Ok(link)
    }

    /// The staged file's name (no directory).
    pub fn temp_file_name(&self) -> String {
        self.temp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Marks the staged file as placed by other means (its name is removed by the caller when nothing names it).
    pub fn placed(&mut self) {
        self.committed = true;
        self.file = None;
    }

    /// Closes the file without committing or removing it (a rank that wrote its pieces into a file the first
    /// rank staged).
    pub fn close(mut self) {
        self.file = None;
        self.owned = false;
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed && self.owned {
            // Windows: our own handle (no FILE_SHARE_DELETE) would refuse the removal; closed first.
            self.close_for_rename();
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// (directory, file name) of a target; `INVALID_ARGUMENT` for a path without a file name.
pub fn split(target: &Path) -> Result<(PathBuf, String)> {
    let name = target.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::new(
            Status::InvalidArgument,
            format!("'{}' names no file (it has no file name, or one that is not UTF-8)", display(target)),
        )
    })?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name.to_string()))
}

/// Removes every staged file of `target_name` in `dir` that no live writer holds (left by a killed process),
/// except those named in `keep` (files a current index names: a set committed through its staged names).
/// Best effort: what cannot be removed stays for a later writer.
pub fn remove_stale(dir: &Path, target_name: &str, keep: &[String]) {
    let prefix = format!(".{target_name}.");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&prefix)
            && name.ends_with(SUFFIX)
            && name.len() > prefix.len() + SUFFIX.len()
            && !keep.iter().any(|k| k == name)
        {
            crate::os::remove_if_unheld(&e.path());
        }
    }
}

/// Makes the directory's entries (a rename into it) durable: `fsync` of the directory (Unix); nothing on
/// Windows, where a directory cannot be flushed (see the module documentation).
pub fn sync_dir(dir: &Path) -> Result<()> {
    crate::os::sync_dir(dir).map_err(|(step, e)| match step {
        crate::os::DirStep::Open => crate::os::io_error(format!("opening the directory {}", display(dir)), &e),
        crate::os::DirStep::Sync => {
            crate::os::io_error(format!("fsync of the directory {} after the rename", display(dir)), &e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hostfirst-staged-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn commit_replaces_and_drop_removes() {
        let d = dir("commit");
        let target = d.join("t.safetensors");
        std::fs::write(&target, b"old").unwrap();
        let s = Staged::create(&target, 3, None).unwrap();
        crate::engine::write::write_exact(s.file(), 0, b"new").unwrap();
        drop(s);
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "the staged file is gone");
        let mut s = Staged::create(&target, 3, None).unwrap();
        crate::engine::write::write_exact(s.file(), 0, b"new").unwrap();
        s.commit(true).unwrap();
        sync_dir(&d).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    }

    /// A staged file a live writer holds survives the next writer's clean-up; one nobody holds does not.
    #[cfg(unix)]
    #[test]
    fn stale_files_go_held_files_stay() {
        let d = dir("stale");
        let target = d.join("m.safetensors");
        let held = Staged::create(&target, 10, None).unwrap();
        let dead = d.join(temp_name("m.safetensors", "1-dead"));
        std::fs::write(&dead, b"left by a killed writer").unwrap();
        let other = d.join(temp_name("other.safetensors", "1-dead"));
        std::fs::write(&other, b"another target's").unwrap();
        remove_stale(&d, "m.safetensors", &[]);
        assert!(held.temp.exists(), "a held file stays");
        assert!(!dead.exists(), "a stale file goes");
        assert!(other.exists(), "another target's file stays");
    }
}
