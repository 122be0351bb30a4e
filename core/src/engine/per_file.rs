//! The read engine of one open file: whether its bytes may be handed out as a mapping, chosen from the file
//! system that holds it ([`crate::os::file_system`]), and a report that says which and why.
//!
//! - **Mapped** (local disks, tmpfs, file systems the table does not know: today's behaviour): views are
//!   zero-copy pages of a read-only mapping; loads and puts still read with positioned reads.
//! - **Owned reads** (network and cluster file systems, FUSE and virtiofs): nothing hands out the mapping.
//!   A view's data pointer is NULL (`hostfirst_view_copy` and loads read with pread into memory hostfirst
//!   owns), DLPack exports copy, copy-on-write loads copy, `prefault` does nothing, a load's host placement
//!   becomes a cpu copy, and resident puts go through the staging ring. A mapping there faults page by page
//!   over the network or through a daemon (the 30-50x slowdowns users report) and raises SIGBUS when the
//!   file changes on another machine or the daemon exits; a pread gives `TRUNCATED` or `IO` instead.
//!
//! `HOSTFIRST_MAP` overrides the choice, read at each open: `auto` (or unset, empty) chooses as above,
//! `always` maps every file, `never` reads every file with owned reads. Any other value refuses the open with
//! `INVALID_ARGUMENT` naming the variable.

use crate::error::{Error, Result, Status};
use crate::os::fs::{FileSystem, FsClass};
use std::ffi::OsStr;

/// The environment variable that overrides the choice.
pub const MAP_ENV: &str = "HOSTFIRST_MAP";

/// What `HOSTFIRST_MAP` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapPolicy {
    /// Choose by file system.
    Auto,
    /// Map every file.
    Always,
    /// Owned reads for every file.
    Never,
}

impl MapPolicy {
    /// Parses a value of `HOSTFIRST_MAP` (None: unset). Surrounding white space and case are ignored; an
    /// unknown value is `INVALID_ARGUMENT` naming the variable and the values it takes.
    pub fn parse(value: Option<&OsStr>) -> Result<MapPolicy> {
        let Some(v) = value else { return Ok(MapPolicy::Auto) };
        let text = v.to_string_lossy();
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(MapPolicy::Auto),
            "always" => Ok(MapPolicy::Always),
            "never" => Ok(MapPolicy::Never),
            _ => Err(Error::new(
                Status::InvalidArgument,
                format!("{MAP_ENV}='{text}' is not one of auto, always, never (unset means auto)"),
            )),
        }
    }

    /// The process's `HOSTFIRST_MAP` now.
    pub fn from_env() -> Result<MapPolicy> {
        MapPolicy::parse(std::env::var_os(MAP_ENV).as_deref())
    }
}

/// How an open file's bytes are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Views may be zero-copy pages of a read-only mapping.
    Mapped,
    /// Nothing hands out the mapping: positioned reads into memory hostfirst owns.
    Owned,
}

/// The engine chosen for one open file, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEngine {
    /// Mapped or owned reads.
    pub access: Access,
    /// The file system, when the system says.
    pub fs: Option<FileSystem>,
    /// Why this access: the file system's class, or the override.
    pub why: String,
}

impl FileEngine {
    /// Chooses for a file on `fs` (`Err`: the system did not say) under `policy`.
    pub fn choose(fs: std::io::Result<FileSystem>, policy: MapPolicy) -> FileEngine {
        let (fs, hazard) = match fs {
            Ok(f) => {
                let hazard = match f.class {
                    FsClass::Network => Some(
                        "a network file system: a mapping faults page by page over the network, and a file \
                         changed on another machine raises SIGBUS in its reader",
                    ),
                    FsClass::UserSpace => Some(
                        "a user-space file system (FUSE, virtiofs): every page fault of a mapping is a round \
                         trip to its daemon, and a file that shrinks or a daemon that exits raises SIGBUS in \
                         its reader",
                    ),
                    _ => None,
                };
                (Some(f), hazard)
            }
            Err(_) => (None, None),
        };
        let (access, why) = match (policy, hazard) {
            (MapPolicy::Always, Some(h)) => (Access::Mapped, format!("{MAP_ENV}=always, although {h}")),
            (MapPolicy::Always, None) => (Access::Mapped, format!("{MAP_ENV}=always")),
            (MapPolicy::Never, _) => (Access::Owned, format!("{MAP_ENV}=never")),
            (MapPolicy::Auto, Some(h)) => (Access::Owned, format!("{h}; {MAP_ENV}=always maps it anyway")),
            (MapPolicy::Auto, None) => {
                let what = match &fs {
                    Some(f) if f.class == FsClass::Unknown => "a file system hostfirst does not know, mapped as before",
                    Some(f) if f.class == FsClass::Memory => "a file system in memory",
                    Some(_) => "a local file system",
                    None => "the file system is not known here, mapped as before",
                };
                (Access::Mapped, format!("{what}; {MAP_ENV}=never reads it with owned reads instead"))
            }
        };
        FileEngine { access, fs, why }
    }

    /// Whether views may hand out the mapping.
    pub fn maps(&self) -> bool {
        self.access == Access::Mapped
    }

    /// The report: the file system (name, the mount's own type `mount_type` where it differs: FUSE and
    /// virtiofs share a magic number, as NFS 3 and 4 do; `f_type`, class), the access and why, the process's
    /// reader ([`super::describe`]: io_uring or the pool and why), and whether direct I/O works for the file at
    /// `path` and why not ([`crate::os::direct_io`], probed now). One line.
    pub fn report(&self, path: Option<&std::path::Path>, mount_type: Option<String>) -> String {
        let fs = match &self.fs {
            Some(f) => match &mount_type {
                Some(t) if *t != f.name => format!("{} ({t}, f_type {:#x}, {})", f.name, f.magic, f.class.name()),
                _ => format!("{} (f_type {:#x}, {})", f.name, f.magic, f.class.name()),
            },
            None => "file system not detected on this system".to_string(),
        };
        let access = match self.access {
            Access::Mapped => "mapped (views are zero-copy pages of a read-only mapping)",
            Access::Owned => "owned reads (pread into memory hostfirst owns; no mapping is handed out)",
        };
        let probed = path.map(crate::os::direct_io);
        let name = self.fs.as_ref().map_or("the file system", |f| f.name.as_str());
        let direct = match &probed {
            Some(Ok(())) => "usable".to_string(),
            Some(Err(why)) => format!("not usable ({})", why.replacen("the file system", name, 1)),
            None => "not probed (no path)".to_string(),
        };
        let uring = match super::uring_usable() {
            Ok(()) => "usable".to_string(),
            Err(why) => format!("not usable ({why})"),
        };
        let bypass = self.bypass_clause(probed.as_ref().map(|r| r.as_ref().map(|_| ()).map_err(|w| w.as_str())));
        format!(
            "{fs}: {access}: {}; reads: {}; io_uring: {uring}; O_DIRECT: {direct}; page_cache bypass: {bypass}",
            self.why,
            super::describe()
        )
    }

    /// What `page_cache` BYPASS does with this file (issue 45, point 2), given the direct-I/O probe
    /// (`None`: not probed): direct reads, or the fallback and its reason.
    fn bypass_clause(&self, direct: Option<std::result::Result<(), &str>>) -> String {
        if let Some(why) = crate::cache::unsupported_here() {
            return format!("as keep ({why})");
        }
        let name = self.fs.as_ref().map_or("the file system", |f| f.name.as_str());
        let memory = self.fs.as_ref().is_some_and(|f| f.class == FsClass::Memory);
        let in_memory = format!("{name} holds its files in memory: their pages stay cached under every policy");
        match (direct, memory) {
            (Some(Ok(())), false) => "direct reads (O_DIRECT) into aligned staging".to_string(),
            (Some(Ok(())), true) => format!("direct reads (O_DIRECT), but {in_memory}"),
            (Some(Err(why)), false) => format!(
                "falls back (O_DIRECT not usable: {}): reading through the page cache, then dropping the pages \
                 the read brought in",
                why.replacen("the file system", name, 1)
            ),
            (Some(Err(why)), true) => format!(
                "falls back (O_DIRECT not usable: {}): reading through the page cache; {in_memory}",
                why.replacen("the file system", name, 1)
            ),
            (None, _) => "not probed (no path)".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::fs::from_magic;

    fn no_fs() -> std::io::Result<FileSystem> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no"))
    }

    #[test]
    fn network_and_user_space_file_systems_get_owned_reads_by_default() {
        for (magic, name) in [(0x6969u64, "nfs"), (0x6573_5546, "fuse"), (0x0BD0_0BD0, "lustre"), (0xFE53_4D42, "smb2")]
        {
            let e = FileEngine::choose(Ok(from_magic(magic)), MapPolicy::Auto);
            assert_eq!(e.access, Access::Owned, "{name}");
            assert!(e.why.contains("SIGBUS") && e.why.contains("HOSTFIRST_MAP=always"), "{name}: {}", e.why);
            let r = e.report(None, None);
            assert!(r.starts_with(&format!("{name} (f_type {magic:#x}, ")) && r.contains("owned reads"), "{r}");
            let r = e.report(None, Some("virtiofs".to_string()));
            assert!(r.starts_with(&format!("{name} (virtiofs, f_type {magic:#x}, ")), "{r}");
        }
        for magic in [0xEF53u64, 0x5846_5342, 0x0102_1994, 0x794C_7630, 0x1234_5678] {
            let e = FileEngine::choose(Ok(from_magic(magic)), MapPolicy::Auto);
            assert_eq!(e.access, Access::Mapped, "{magic:#x}");
            assert!(e.why.contains("HOSTFIRST_MAP=never"), "{}", e.why);
        }
        assert_eq!(FileEngine::choose(no_fs(), MapPolicy::Auto).access, Access::Mapped);
    }

    #[test]
    fn the_override_wins_and_says_so() {
        let e = FileEngine::choose(Ok(from_magic(0x6969)), MapPolicy::Always);
        assert_eq!(e.access, Access::Mapped);
        assert!(e.why.starts_with("HOSTFIRST_MAP=always, although a network"), "{}", e.why);
        let e = FileEngine::choose(Ok(from_magic(0xEF53)), MapPolicy::Never);
        assert_eq!((e.access, e.why.as_str()), (Access::Owned, "HOSTFIRST_MAP=never"));
    }

    #[test]
    fn the_policy_parses_and_refuses_unknown_values() {
        for (v, p) in [(None, MapPolicy::Auto), (Some(""), MapPolicy::Auto), (Some(" Always "), MapPolicy::Always)] {
            assert_eq!(MapPolicy::parse(v.map(OsStr::new)).unwrap(), p, "{v:?}");
        }
        assert_eq!(MapPolicy::parse(Some(OsStr::new("never"))).unwrap(), MapPolicy::Never);
        let e = MapPolicy::parse(Some(OsStr::new("sometimes"))).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("HOSTFIRST_MAP='sometimes'"), "{}", e.message());
    }

    /// The report of a real file: this system's file system, and a direct-I/O answer (usable, or why not).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_file_is_reported_with_its_file_system_and_direct_io() {
        let dir = std::env::temp_dir().join(format!("hostfirst-per-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, vec![7u8; 10_000]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let fs = crate::os::file_system(crate::os::raw_file(&f)).unwrap();
        let e = FileEngine::choose(Ok(fs.clone()), MapPolicy::Auto);
        let r = e.report(Some(&p), None);
        assert!(r.starts_with(&fs.name) && r.contains("; reads: ") && r.contains("; O_DIRECT: "), "{r}");
        assert!(crate::os::direct_io(&dir.join("missing")).unwrap_err().contains("opening it with O_DIRECT"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
