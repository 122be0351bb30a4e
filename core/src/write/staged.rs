//! Staged files: the temporary file a save writes in the target's directory, and the rename that makes it the
//! target — so that the target is, at every instant, either the old file or the complete new one.
//!
//! - The temporary file is `.<target name>.<tag>.hostfirst-tmp` in the target's directory (a rename never
//!   crosses file systems), or `.hf<digest of the name>.<tag>.hostfirst-tmp` for a target name too long for
//!   that to fit 255 bytes ([`stage_key`]: any legal name can be saved). It is made with `O_EXCL`, with the
//!   permissions of the file it replaces (or the process's default), its blocks allocated up front where the
//!   system can ([`engine::write::reserve`]: a full disk says so before the first byte is written).
//! - It is held from the moment it exists ([`crate::os::create_new_held`]): Unix, an exclusive advisory lock
//!   (`flock`) taken right after the create, then a check that the name still is that file (another writer's
//!   clean-up may have locked and removed it in between: then a new one is made); Windows, it is open without
//!   `FILE_SHARE_DELETE` from its creation, so no other process can remove it. A process killed at any point
//!   leaves the old target and at most this file; the hold dies with the process, and the next writer of that
//!   target removes every such file it can lock ([`remove_stale`]), never one a live writer holds.
//! - Commit: `fsync` the file, `rename` it over the target (atomic; a reader holding the old file keeps its
//!   bytes), then `fsync` the directory ([`sync_dir`]) so the rename itself survives a crash.
//!   Windows differs (documented, not hidden): a file must be closed before it can be renamed, so the handle
//!   is closed after `FlushFileBuffers` and before `MoveFileExW(MOVEFILE_REPLACE_EXISTING)` (std's rename); a
//!   target that another process has open without sharing delete, or mapped, cannot be replaced: the replace
//!   is retried for 1.27 s (antivirus scanners and the search indexer hold files briefly), then refused with
//!   the target unchanged ([`rename_over`]); and a directory cannot be flushed, so [`sync_dir`] does nothing
//!   there (NTFS journals the rename itself).
//! - A split set (parts and an index) is saved under the lock of the set ([`lock_set`]): saves of one set take
//!   turns, so each commits a whole set and none sees another's files.
//! - Dropped without a commit (an error, a cancel, a panic), the temporary file is removed.

use crate::engine::write::reserve;
use crate::error::{Error, Result, Status};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The suffix of every staged file.
pub const SUFFIX: &str = ".hostfirst-tmp";

/// The suffix of the lock file of a set ([`SetLock`]).
pub const LOCK_SUFFIX: &str = ".hostfirst-lock";

/// The longest file name the systems take: 255 bytes (Linux `NAME_MAX`); 255 UTF-16 units on Windows, which a
/// name of 255 UTF-8 bytes never exceeds.
pub const NAME_MAX: usize = 255;

/// The longest tag a staged name carries (a process id, `-` and 16 hex digits; a distributed save's `d`, 16 hex
/// digits and a receipt's `.r<rank>`), plus the `.l` of [`Staged::link_aside`].
const TAG_ROOM: usize = 32 + 2;

/// What staged names start with for `target_name`: the name itself when every staged name of it fits
/// [`NAME_MAX`], else `hf` and a digest of the name (FNV-1a, the same in every process and on every host, so
/// ranks and later writers find the same names). A legal target name of any length gets staged names that fit.
pub fn stage_key(target_name: &str) -> String {
    if 1 + target_name.len() + 1 + TAG_ROOM + SUFFIX.len().max(LOCK_SUFFIX.len()) <= NAME_MAX {
        return target_name.to_string();
    }
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    h.write(target_name.as_bytes());
    format!("hf{:016x}", h.finish())
}

/// The name of the staged file of `target_name` with `tag` (at most [`NAME_MAX`] bytes for a tag of at most 32).
pub fn temp_name(target_name: &str, tag: &str) -> String {
    format!(".{}.{tag}{SUFFIX}", stage_key(target_name))
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
        let given = tag;
        let mut tries = 0u32;
        let (temp, file) = loop {
            tries += 1;
            let tag = given.map_or_else(unique_tag, str::to_string);
            let temp = dir.join(temp_name(&name, &tag));
            // Created and held at once (Unix: O_EXCL and flock, checked; Windows: CREATE_NEW without
            // FILE_SHARE_DELETE): another writer's clean-up never removes it from under us.
            match crate::os::create_new_held(&temp) {
                Ok(f) => break (temp, f),
                // Another writer's clean-up took it in the instant before it was held: a new one (a new name
                // unless the tag is a distributed save's).
                Err(e) if crate::os::is_lost_to_cleanup(&e) && tries < 100 => continue,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tag.starts_with('d') && tries < 100 => {
                    // A staged file of the same save left by a killed job (distributed tags are not unique):
                    // removed if nobody holds it, then made again.
                    crate::os::remove_if_unheld(&temp);
                    if tries > 1 {
                        // Another writer's clean-up holds it and is about to remove it: a moment for that.
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    continue;
                }
                Err(e) => {
                    return Err(crate::os::io_error(
                        format!("creating a file in {} (for {})", display(&dir), display(target)),
                        &e,
                    ))
                }
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
                if crate::os::is_file_too_large(&e) {
                    // Not the free space: the largest file this process may write or the file system takes.
                    msg.push_str(
                        ", more than the largest file this process may write (Unix: RLIMIT_FSIZE, `ulimit -f`) or \
                         the file system takes",
                    );
                } else if let Some(f) = free {
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
        rename_over(&self.temp, &self.target)?;
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

/// Windows error codes of a refused replace that a moment's wait may cure (another process has the target open
/// without sharing delete, maps it, or scans it: antivirus, the search indexer): `ERROR_ACCESS_DENIED`,
/// `ERROR_SHARING_VIOLATION`, `ERROR_LOCK_VIOLATION`, `ERROR_USER_MAPPED_FILE`.
const REFUSED_REPLACE: [i32; 4] = [5, 32, 33, 1224];

/// How long a refused replace is retried on Windows: 8 tries, waits of 10 ms doubling to 640 ms, 1.27 s in all.
const REPLACE_TRIES: u32 = 8;

/// Renames `from` over `to` (atomic; `IO`, `PERMISSION_DENIED` or `NO_SPACE` naming both, the target unchanged,
/// otherwise). Windows: a replace refused with one of [`REFUSED_REPLACE`] is retried for about a second and a
/// half, and the error asks whether a reader holds the target only for those codes and a target that is not a
/// reserved device name (`NUL`, `CON`, ...).
pub fn rename_over(from: &Path, to: &Path) -> Result<()> {
    let refused = |e: &std::io::Error| cfg!(windows) && e.raw_os_error().is_some_and(|c| REFUSED_REPLACE.contains(&c));
    retry_refused(|| std::fs::rename(from, to), refused, REPLACE_TRIES, &mut |ms| {
        std::thread::sleep(std::time::Duration::from_millis(ms))
    })
    .map_err(|e| {
        let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let hint = replace_hint(e.raw_os_error(), &name, cfg!(windows));
        crate::os::io_error(
            format!("renaming {} over {}{hint}; the target is unchanged", display(from), display(to)),
            &e,
        )
    })
}

/// Runs `op` until it succeeds, fails with an error `refused` does not accept, or has run `tries` times; waits
/// `sleep(ms)` between tries, 10 ms doubling.
fn retry_refused<T>(
    mut op: impl FnMut() -> std::io::Result<T>,
    refused: impl Fn(&std::io::Error) -> bool,
    tries: u32,
    sleep: &mut dyn FnMut(u64),
) -> std::io::Result<T> {
    let mut wait = 10u64;
    let mut n = 1u32;
    loop {
        match op() {
            Err(e) if n < tries && refused(&e) => {
                sleep(wait);
                wait *= 2;
                n += 1;
            }
            r => return r,
        }
    }
}

/// The hint a failed replace adds on Windows: only for a refusal a reader of the target can cause, and never for
/// a reserved device name (which no reader holds; Windows refuses it as a target whatever runs).
fn replace_hint(code: Option<i32>, target_name: &str, windows: bool) -> &'static str {
    if !windows || is_reserved_windows_name(target_name) {
        return "";
    }
    match code {
        Some(c) if REFUSED_REPLACE.contains(&c) => {
            " (Windows: is the target open or mapped by a reader? the replace was retried for 1.3 s)"
        }
        _ => "",
    }
}

/// Whether `name` is one of the device names Windows reserves in every directory (`CON`, `PRN`, `AUX`, `NUL`,
/// `COM0`-`COM9`, `LPT0`-`LPT9`, and the superscript-digit forms), with or without an extension, in any case, with
/// trailing spaces or dots.
pub fn is_reserved_windows_name(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or("").trim_end_matches([' ', '.']).to_ascii_uppercase();
    match stem.as_str() {
        "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$" => true,
        s => match (s.get(..3), s.get(3..)) {
            (Some("COM" | "LPT"), Some(tail)) => {
                tail.len() == 1 && tail.as_bytes()[0].is_ascii_digit() || ["¹", "²", "³"].contains(&tail)
            }
            _ => false,
        },
    }
}

/// Takes the lock over the split set whose index is `index_name` in `dir` (the file
/// `.<index name>.hostfirst-lock`, removed when the save ends), waiting while another save of the
/// set holds it: concurrent saves of one set take turns, each committing a whole set. `IO` (or
/// `PERMISSION_DENIED`) naming the lock file when it cannot be made.
pub fn lock_set(dir: &Path, index_name: &str) -> Result<crate::os::PathLock> {
    let path = dir.join(format!(".{}{LOCK_SUFFIX}", stage_key(index_name)));
    crate::os::lock_path(&path)
        .map_err(|e| crate::os::io_error(format!("taking the lock of the set {} ({})", index_name, display(&path)), &e))
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
    let prefix = format!(".{}.", stage_key(target_name));
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

    /// Issue 43, point 7: a target name of 255 bytes (the longest legal one) is saved, replaced, and its stale
    /// staged files are cleaned up: its staged names (a digest instead of the name) fit, as does the lock file
    /// of a set whose index name is that long. The staged name was `.<name>.<tag>.hostfirst-tmp`, 40 bytes
    /// longer than the name: IO, "File name too long", for every name over about 215 bytes.
    #[test]
    fn the_longest_legal_name_is_saved() {
        let d = dir("long");
        let name = format!("{}.safetensors", "n".repeat(NAME_MAX - ".safetensors".len()));
        assert_eq!(name.len(), NAME_MAX);
        let target = d.join(&name);
        for round in 0..2u8 {
            let mut s = Staged::create(&target, 3, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(s.temp_file_name().len() <= NAME_MAX);
            crate::engine::write::write_exact(s.file(), 0, &[round; 3]).unwrap();
            let link = s.link_aside().unwrap();
            assert!(link.file_name().unwrap().len() <= NAME_MAX);
            std::fs::remove_file(link).unwrap();
            s.commit(true).unwrap();
            assert_eq!(std::fs::read(&target).unwrap(), [round; 3]);
        }
        let dead = d.join(temp_name(&name, "1-dead"));
        std::fs::write(&dead, b"left by a killed writer").unwrap();
        remove_stale(&d, &name, &[]);
        assert!(!dead.exists());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        // Every tag a save uses fits with the longest name; names that fit keep their readable staged names.
        for tag in [unique_tag(), format!("d{:016x}.r{}", u64::MAX, u32::MAX), format!("{}-{:016x}", u32::MAX, 0)] {
            assert!(temp_name(&name, &tag).len() + 2 <= NAME_MAX, "{tag}");
        }
        assert_eq!(temp_name("m.safetensors", "1-2"), ".m.safetensors.1-2.hostfirst-tmp");
        let lock = lock_set(&d, &format!("{}.index.json", "i".repeat(NAME_MAX - ".index.json".len()))).unwrap();
        drop(lock);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "the lock file goes with its lock");
    }

    /// Windows' refused replace is retried (8 tries, 10 ms doubling), other errors are not; the hint asks about
    /// a reader only for the refusals a reader causes and never for a reserved device name.
    #[test]
    fn refused_replaces_are_retried_and_hinted_where_it_applies() {
        let refused = |e: &std::io::Error| e.raw_os_error() == Some(32);
        let mut waits = Vec::new();
        let mut left = 3;
        let r = retry_refused(
            || {
                left -= 1;
                if left > 0 {
                    Err(std::io::Error::from_raw_os_error(32))
                } else {
                    Ok(7)
                }
            },
            refused,
            REPLACE_TRIES,
            &mut |ms| waits.push(ms),
        );
        assert_eq!(r.unwrap(), 7);
        assert_eq!(waits, [10, 20]);
        waits.clear();
        let r: std::io::Result<()> =
            retry_refused(|| Err(std::io::Error::from_raw_os_error(32)), refused, REPLACE_TRIES, &mut |ms| {
                waits.push(ms)
            });
        assert_eq!(r.unwrap_err().raw_os_error(), Some(32));
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640]);
        waits.clear();
        let r: std::io::Result<()> =
            retry_refused(|| Err(std::io::Error::from_raw_os_error(2)), refused, REPLACE_TRIES, &mut |ms| {
                waits.push(ms)
            });
        assert!(r.is_err() && waits.is_empty(), "another error is not retried");
        for name in ["NUL", "con", "Con.safetensors", "aux.json", "COM1", "lpt9.txt", "nul .x", "COM¹"] {
            assert!(is_reserved_windows_name(name), "{name}");
            assert_eq!(replace_hint(Some(5), name, true), "", "{name}");
        }
        for name in ["model.safetensors", "console", "COM", "COM10", "LPT", "nullx", "é", "CO¹"] {
            assert!(!is_reserved_windows_name(name), "{name}");
        }
        assert!(replace_hint(Some(32), "model.safetensors", true).contains("open or mapped by a reader"));
        assert!(replace_hint(Some(1224), "model.safetensors", true).contains("open or mapped by a reader"));
        assert_eq!(replace_hint(Some(3), "model.safetensors", true), "", "path not found: no reader to blame");
        assert_eq!(replace_hint(Some(32), "model.safetensors", false), "", "not on Unix");
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
