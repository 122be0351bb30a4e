//! The platform layer: every call the core makes to the operating system that std does not make portable, behind
//! one set of functions with one contract. The rest of the core calls these and holds no `#[cfg(unix)]` /
//! `#[cfg(windows)]` of its own for them (a test, `tests/it/engine_path.rs`, keeps `libc::pread`/`preadv` and
//! friends out of the other modules, and every system call out of the writer). Two implementations: `unix.rs` (Linux; no other Unix system is built or
//! tested) and `windows.rs` (x86_64-pc-windows-gnu, tested under Wine by `scripts/test-windows.sh`).
//!
//! # Files
//!
//! | function | Unix | Windows |
//! |---|---|---|
//! | [`RawFile`], [`raw_file`] | the descriptor (`RawFd`) | the `HANDLE` (a `Copy` wrapper that is `Send`) |
//! | [`read_at`] | `pread` | `FileExt::seek_read` (`ReadFile` with the offset in an `OVERLAPPED`) |
//! | [`write_at`], [`write_all_at`] | `pwrite` | `FileExt::seek_write` |
//! | [`read_vectored_at`] | `preadv` (at most [`IOV_MAX`] pieces a call) | one [`read_at`] per piece, in order, stopping at the first short one |
//! | [`open_read`] | `O_RDONLY | O_NONBLOCK` (a FIFO cannot hang the open) | plain read-only open, sharing read, write and delete |
//! | [`advise_random`] | `posix_fadvise(RANDOM / NORMAL)` on Linux | nothing (Windows takes access hints only when a file is opened) |
//! | [`advise_willneed`] | `posix_fadvise(WILLNEED)` on Linux | nothing |
//!
//! [`read_at`] and [`read_vectored_at`] may return fewer bytes than asked (0 at end of file) and report `EINTR` as
//! [`std::io::ErrorKind::Interrupted`]; callers loop. Several threads may read one [`RawFile`] at once on both
//! systems. On Windows the I/O manager serialises reads on a handle opened for synchronous I/O (all of std's), so
//! the engine's thread pool gets correctness there, not parallel reads of one file (overlapped I/O on an IOCP
//! would; not done).
//!
//! # Writing files (the writer)
//!
//! | function | Unix | Windows |
//! |---|---|---|
//! | [`io_class`] | `ENOSPC`, `EDQUOT`, `EFBIG`: no space; `EACCES`, `EPERM`, `EROFS`: permission | `ERROR_HANDLE_DISK_FULL`, `ERROR_DISK_FULL`, `ERROR_DISK_QUOTA_EXCEEDED`, `ERROR_FILE_TOO_LARGE`; `ERROR_ACCESS_DENIED`, `ERROR_WRITE_PROTECT` |
//! | [`start_writeback`], [`wait_writeback`] | `sync_file_range` on Linux | nothing (the final `FlushFileBuffers` does it all) |
//! | [`reserve`] | `fallocate` on Linux | `SetFileInformationByHandle(FileAllocationInfo)` |
//! | [`create_new_held`], [`hold`], [`remove_if_unheld`] | `O_EXCL`, then `flock(LOCK_EX)`; a stale file is one whose lock can be taken | `CREATE_NEW` without `FILE_SHARE_DELETE`: nobody removes it while it is open; a stale file is one that can be removed |
//! | [`sync_dir`] | `fsync` of the directory | nothing (a directory cannot be flushed; NTFS journals the rename) |
//! | [`free_space`] | `statvfs` (`f_bavail * f_frsize`) | `GetDiskFreeSpaceExW` (the caller's quota) |
//! | [`dup_descriptor`] | `fcntl(F_DUPFD_CLOEXEC)` | refused (`Unsupported`): a C runtime descriptor belongs to the caller's runtime |
//! | [`kill_self`] | `SIGKILL` | `TerminateProcess`, exit code 137 |
//!
//! Renaming over a target is std's `rename` on both (`rename(2)`; `MoveFileExW(MOVEFILE_REPLACE_EXISTING)`, which
//! needs the renamed file closed and fails while another process has the target mapped).
//!
//! # Memory
//!
//! | function | Unix | Windows |
//! |---|---|---|
//! | [`populate_read`] | `MADV_POPULATE_READ` (Linux 5.14+; `EFAULT` = the file shrank), else `MADV_WILLNEED` | `PrefetchVirtualMemory`, then one read per page |
//! | [`populate_write`] | `MADV_POPULATE_WRITE` (Linux 5.14+; an EINVAL refusal is learned once), else nothing | nothing (first writes fault pages in) |
//! | [`page_size`] | `sysconf(_SC_PAGESIZE)` | `GetSystemInfo().dwPageSize` |
//! | [`host_memory`] | `/proc/meminfo` (`MemTotal`, `MemAvailable`), else `sysconf` pages | `GlobalMemoryStatusEx` (`ullTotalPhys`, `ullAvailPhys`) |
//! | [`cpu_name`] | `model name` of `/proc/cpuinfo` | `PROCESSOR_IDENTIFIER` (set by Windows for every process) |
//!
//! Anonymous and copy-on-write file mappings are `memmap2`'s (`MmapMut::map_anon`, `MmapOptions::map_copy`):
//! `MAP_PRIVATE` on Unix, a section mapped `FILE_MAP_COPY` on Windows; see `place/host.rs`.
//!
//! **A mapped file that changes.** Unix lets another process truncate a file while it is mapped; touching a page
//! past the new end raises SIGBUS, and [`populate_read`] reports it as [`PopulateError::Shrunk`] instead. Windows
//! refuses to shrink a file while any mapping of it lives (`SetEndOfFile` fails with `ERROR_USER_MAPPED_FILE`,
//! 1224): the writer is refused and the mapping keeps its bytes. On Linux, writes in place reach shared mappings
//! and the pages of a copy-on-write mapping not yet written; Windows promises that only between mapped views of
//! one file (writes with `WriteFile` are not part of its contract, and not tested here).
//!
//! # Processes
//!
//! | function | Unix | Windows |
//! |---|---|---|
//! | [`HAS_FORK`], [`register_fork_handlers`] | `pthread_atfork` | no fork: nothing to register |
//! | [`parent_pid`] | `getppid` | 0 (only the fork handlers ask) |
//! | [`loaded_symbol`] | `dlsym(RTLD_DEFAULT, name)` | `GetProcAddress` in each module of the process (`K32EnumProcessModules`), first match |
//! | [`open_system_library`] | `dlopen(name)`: the loader's search (`LD_LIBRARY_PATH`, the cache, the system directories; never the current directory) | `LoadLibraryExW(name, LOAD_LIBRARY_SEARCH_SYSTEM32)`: the System32 directory only, never the current directory, the program's directory or `PATH` (DLL planting) |
//! | [`open_library_file`] | `dlopen(path)` of an absolute path: that file, no search | `LoadLibraryExW(path, LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR \| LOAD_LIBRARY_SEARCH_SYSTEM32)`: that file; its own imports from its directory and System32 |

use std::ffi::CStr;
use std::fs::File;
use std::path::{Path, PathBuf};

pub mod fs;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as imp;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as imp;

pub use imp::{IoVec, RawFile};

/// Whether this system has `fork()` (and so fork handlers).
pub const HAS_FORK: bool = cfg!(unix);

/// `read_vectored_at` hands at most this many pieces to one system call (Linux `IOV_MAX`).
pub const IOV_MAX: usize = 1024;

/// The handle positional reads use for `file`; valid while `file` is open.
pub fn raw_file(file: &File) -> RawFile {
    imp::raw_file(file)
}

/// One positional read of up to `dst.len()` bytes of `file` at `offset`: the bytes read (0 at end of file). Does
/// not use or move a file position that other calls rely on. `file` must stay open during the call.
pub fn read_at(file: RawFile, dst: &mut [u8], offset: u64) -> std::io::Result<usize> {
    imp::read_at(file, dst, offset)
}

/// One positional write of up to `src.len()` bytes to `file` at `offset`: the bytes written.
pub fn write_at(file: &File, src: &[u8], offset: u64) -> std::io::Result<usize> {
    imp::write_at(file, src, offset)
}

/// Writes all of `src` to `file` at `offset` (short writes resumed, `Interrupted` retried).
pub fn write_all_at(file: &File, mut src: &[u8], mut offset: u64) -> std::io::Result<()> {
    while !src.is_empty() {
        match write_at(file, src, offset) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "the write wrote nothing")),
            Ok(n) => {
                src = &src[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One positional read of `file` at `offset` into the pieces of `iov` in order (at most [`IOV_MAX`] of them):
/// the bytes read, which may stop anywhere, 0 at end of file.
///
/// # Safety
/// Every piece must point at memory valid for writes of its length that nothing else accesses during the call
/// (pieces may repeat: a scratch piece for gaps that are thrown away).
pub unsafe fn read_vectored_at(file: &File, iov: &[IoVec], offset: u64) -> std::io::Result<usize> {
    // SAFETY: forwarded from the caller.
    unsafe { imp::read_vectored_at(file, &iov[..iov.len().min(IOV_MAX)], offset) }
}

/// Opens `path` for reading without ever blocking in the open itself (Unix: `O_NONBLOCK`, so a FIFO given as
/// a file name fails the regular-file check instead of waiting for a writer). Reads of regular files are not
/// affected.
pub fn open_read(path: &Path) -> std::io::Result<File> {
    imp::open_read(path)
}

/// The file system holding the open `file` (Unix: `fstatfs`'s `f_type`, see [`fs::from_magic`]). Windows:
/// `Unsupported` (not detected there; files are mapped as before).
pub fn file_system(file: RawFile) -> std::io::Result<fs::FileSystem> {
    imp::file_system(file)
}

/// The type of the mount holding the open `file` as the system names it (Linux: `/proc/self/mountinfo`, found by
/// the file's device: `fuse.sshfs`, `virtiofs`, `nfs4`...); `None` where it does not say. Reads a file: for
/// reports, not for every open.
pub fn mount_type(file: RawFile) -> Option<String> {
    imp::mount_type(file)
}

/// Whether direct I/O (`O_DIRECT`, bypassing the page cache) works for the file at `path`: opens it again with
/// `O_DIRECT` and reads its first 4 KiB into page-aligned memory. `Err(why)` names the step the system refused
/// (a file system without direct I/O answers `EINVAL`); Linux only (`Err` elsewhere, saying so).
pub fn direct_io(path: &Path) -> Result<(), String> {
    imp::direct_io(path)
}

/// Advice: from now on `file` is read at random places (`on`), or as usual again. Reads are correct either way.
pub fn advise_random(file: RawFile, on: bool) {
    imp::advise_random(file, on)
}

/// Advice: `len` bytes of `file` at `offset` will be read soon (read-ahead may start now).
pub fn advise_willneed(file: RawFile, offset: u64, len: u64) {
    imp::advise_willneed(file, offset, len)
}

/// What [`populate_read`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Populate {
    /// Every page of the range is in memory and mapped: reads of it take no major faults.
    Done,
    /// The system offers only read-ahead advice here (Linux before 5.14): given.
    AdviceOnly,
}

/// Why [`populate_read`] failed.
#[derive(Debug)]
pub enum PopulateError {
    /// The file behind the mapping is now shorter than the range (Unix only: Windows cannot shrink a mapped file).
    Shrunk,
    /// Anything else.
    Os(std::io::Error),
}

/// Brings the pages of `[addr, addr + len)` into memory and maps them for reading, reading from storage what is
/// not cached, so later reads take no page faults; contents never change.
///
/// # Safety
/// The range must lie in one live mapping (or allocation) of this process that stays mapped during the call.
pub unsafe fn populate_read(addr: *const u8, len: usize) -> Result<Populate, PopulateError> {
    if len == 0 {
        return Ok(Populate::Done);
    }
    // SAFETY: forwarded from the caller.
    unsafe { imp::populate_read(addr, len) }
}

/// Faults `bytes` in for writing in one call where the system can (`MADV_POPULATE_WRITE`), instead of one fault
/// per page inside the copy that follows. Best effort: nothing happens elsewhere, or for memory that is not
/// page-aligned at both ends; contents never change.
pub fn populate_write(bytes: &mut [u8]) {
    imp::populate_write(bytes)
}

/// The page size in bytes (4096 where the system does not say).
pub fn page_size() -> usize {
    imp::page_size()
}

/// Physical host memory, (total, available) bytes; `None` where the system does not say.
pub fn host_memory() -> Option<(u64, u64)> {
    imp::host_memory()
}

/// Parses `MemTotal` and `MemAvailable` (kB) out of a `/proc/meminfo` text (`MemFree` where the kernel predates
/// `MemAvailable`); available is at most total.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        kb.checked_mul(1024)
    };
    let total = field("MemTotal:")?;
    let avail = field("MemAvailable:").or_else(|| field("MemFree:"))?;
    Some((total, avail.min(total)))
}

/// The host CPU's name as the system gives it, if it does.
pub fn cpu_name() -> Option<String> {
    imp::cpu_name().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Registers fork handlers (Unix: `pthread_atfork`). Returns whether anything was registered: `false` where there
/// is no `fork()`.
pub fn register_fork_handlers(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) -> bool {
    imp::register_fork_handlers(prepare, parent, child)
}

/// The parent process's id (Unix: `getppid`); 0 on Windows, which has no fork and never needs it.
pub fn parent_pid() -> u32 {
    imp::parent_pid()
}

/// The address of the exported function or variable `name` in a module already loaded into this process (no
/// module is loaded); `None` when no loaded module exports it. Unix: `dlsym(RTLD_DEFAULT)` (the global scope:
/// not found in a library loaded with `RTLD_LOCAL`). Windows: each module of the process, in load order.
pub fn loaded_symbol(name: &CStr) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    imp::loaded_symbol(name)
}

/// Opens a library of the system (a driver's: the CUDA driver, NVML, libcufile) by its file name, where the
/// system keeps such libraries and nowhere a user's files can plant one. Windows: the System32 directory only
/// (`LOAD_LIBRARY_SEARCH_SYSTEM32`), so an `nvcuda.dll` in the current directory, the program's directory or on
/// `PATH` is never loaded. Unix: the dynamic loader's search, unless `LD_LIBRARY_PATH` has an empty or relative
/// entry (`/opt/cuda/lib64:` — the loader reads the empty one as the current folder): then only its absolute
/// folders and [`SYSTEM_LIBRARY_FOLDERS`], by full path, never the current folder. The error is the loader's
/// message, or says what was searched and why.
pub fn open_system_library(name: &str) -> Result<libloading::Library, String> {
    imp::open_system_library(name, std::env::var_os("LD_LIBRARY_PATH"))
}

/// [`open_system_library`] with `LD_LIBRARY_PATH` given (the gds probe's tests give their own).
pub fn open_system_library_with(
    name: &str,
    library_path: Option<std::ffi::OsString>,
) -> Result<libloading::Library, String> {
    imp::open_system_library(name, library_path)
}

/// The absolute folders searched by full path for a system library on Unix when `LD_LIBRARY_PATH` could lead
/// the loader into the current folder: the distributions' library folders, CUDA's, and WSL's driver folder.
pub const SYSTEM_LIBRARY_FOLDERS: &[&str] = &[
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/lib/wsl/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/lib",
];

/// `LD_LIBRARY_PATH`'s absolute folders, and whether it has an entry that is not absolute (empty or relative:
/// the loader would look in the current folder, or relative to it). glibc splits on ':' and ';'.
pub fn library_path_folders(value: Option<&std::ffi::OsStr>) -> (Vec<PathBuf>, bool) {
    let mut abs = Vec::new();
    let mut relative = false;
    if let Some(v) = value {
        for e in v.to_string_lossy().split([':', ';']) {
            if Path::new(e).is_absolute() {
                abs.push(PathBuf::from(e));
            } else {
                relative = true;
            }
        }
    }
    (abs, relative)
}

/// The loader's message for a library that did not load (with its cause, where libloading keeps one apart).
pub fn loader_message(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(why) => format!("{e}: {why}"),
        None => e.to_string(),
    }
}

/// Opens exactly the library file at `path`, which the user named (an absolute path: no search happens).
pub fn open_library_file(path: &Path) -> Result<libloading::Library, libloading::Error> {
    imp::open_library_file(path)
}

/// What an I/O error means for the statuses that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoClass {
    /// The file system (or the user's quota, or the largest file it takes) is full.
    NoSpace,
    /// Access refused, or a read-only file system.
    PermissionDenied,
    /// Anything else.
    Other,
}

/// The class of an operating-system error (by its code; [`IoClass::Other`] for an error without one).
pub fn io_class(e: &std::io::Error) -> IoClass {
    imp::io_class(e)
}

/// Whether `e` says a file would pass the largest size allowed (Unix `EFBIG`: the process's `RLIMIT_FSIZE` or the
/// file system's largest file; Windows `ERROR_FILE_TOO_LARGE`). Its class is [`IoClass::NoSpace`], but free space
/// has nothing to do with it.
pub fn is_file_too_large(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(imp::FILE_TOO_LARGE)
}

/// The status of an operating-system error: `NO_SPACE` for a full file system or quota, `PERMISSION_DENIED` for
/// refused access or a read-only file system, `IO` otherwise. (Here, not in `error.rs`, which depends on
/// nothing: the classes are the platform's.)
pub fn status_of_io(e: &std::io::Error) -> crate::error::Status {
    use crate::error::Status;
    match io_class(e) {
        IoClass::NoSpace => Status::NoSpace,
        IoClass::PermissionDenied => Status::PermissionDenied,
        IoClass::Other if e.kind() == std::io::ErrorKind::PermissionDenied => Status::PermissionDenied,
        IoClass::Other => Status::Io,
    }
}

/// An error for a failed operating-system call: the status of [`status_of_io`] and the message `"{what}: {e}"`.
pub fn io_error(what: impl std::fmt::Display, e: &std::io::Error) -> crate::error::Error {
    crate::error::Error::new(status_of_io(e), format!("{what}: {e}"))
}

/// Asks the system to start writing `[offset, offset + len)` of `file` to storage now, without waiting. Best
/// effort: an error here is left to the final flush, which reports it.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    imp::start_writeback(file, offset, len)
}

/// Waits until `[offset, offset + len)` of `file`, handed to [`start_writeback`] earlier, is on storage where the
/// system can wait for a range (else `Ok` at once: the final flush does it); the system's error otherwise.
pub fn wait_writeback(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    imp::wait_writeback(file, offset, len)
}

/// Allocates the blocks of `[0, len)` of `file` now, so that a file system without room says so before anything
/// is written: `Ok(true)` when done, `Ok(false)` where the system or file system cannot (the writes find out), an
/// error of class [`IoClass::NoSpace`] (or another error on Unix) otherwise. Does not change the file's length
/// on Unix; may leave it anywhere up to `len` on Windows (the caller sets the length after).
pub fn reserve(file: &File, len: u64) -> std::io::Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    imp::reserve(file, len)
}

/// Creates `path` (which must not exist) for reading and writing, held from the moment it is returned: another
/// writer's [`remove_if_unheld`] never removes it while this handle lives. Unix: `O_EXCL`, then an exclusive
/// `flock`, then a check that `path` still names the file locked (a clean-up may lock and remove a file in the
/// instant between its creation and the lock: then the error [`is_lost_to_cleanup`] says so, and the caller makes
/// a new one). Windows: `CREATE_NEW` without `FILE_SHARE_DELETE`, held by its share mode from the creation on.
pub fn create_new_held(path: &Path) -> std::io::Result<File> {
    imp::create_new_held(path)
}

/// Whether `path` names the open file `file` now, through symbolic links (false when it names another file, or
/// nothing). Unix: the same
/// device and inode. Windows: the same creation time, last write time and size (a file renamed over `path` was
/// made later).
pub fn same_file(file: &File, path: &Path) -> bool {
    imp::same_file(file, path)
}

/// The error of [`create_new_held`] for a file another writer's clean-up took before it could be held.
#[derive(Debug)]
pub struct LostToCleanup;

impl std::fmt::Display for LostToCleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("another writer's clean-up removed the file before it could be locked")
    }
}

impl std::error::Error for LostToCleanup {}

/// Whether `e` is [`LostToCleanup`] (the caller tries again with a new file).
pub fn is_lost_to_cleanup(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<LostToCleanup>())
}

/// An exclusive lock over a path shared by cooperating processes (the lock of a split set), held until dropped.
/// The holder removes the lock file when done (Unix: one left by a killed holder stays until the next holder
/// takes it over and removes it; Windows: the system deletes it when its holder's handle closes).
pub struct PathLock {
    _imp: imp::PathLock,
}

/// Takes the lock of `path` (creating the file), waiting while another process or thread holds it. Unix: `flock`
/// on the file, then a check that `path` still names the file locked (its last holder may have removed it: then
/// again). Windows: the file opened with no sharing and deleted when closed; a sharing violation means it is held,
/// and the open is tried again every 10 ms. On a file system without locks (Unix `ENOLCK`, `EOPNOTSUPP`) it
/// returns without holding anything.
pub fn lock_path(path: &Path) -> std::io::Result<PathLock> {
    imp::lock_path(path).map(|l| PathLock { _imp: l })
}

/// Takes the hold on a file made by [`create_new_held`] (Unix: an exclusive `flock`, none on a file system
/// without locks). Nothing to do on Windows.
pub fn hold(file: &File) -> std::io::Result<()> {
    imp::hold(file)
}

/// Removes `path` when no live handle holds it (see [`create_new_held`]); best effort.
pub fn remove_if_unheld(path: &Path) {
    imp::remove_if_unheld(path)
}

/// Which step of [`sync_dir`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirStep {
    /// Opening the directory.
    Open,
    /// Flushing it.
    Sync,
}

/// Makes the entries of `dir` (a rename into it) durable: `fsync` of the directory on Unix (a file system that
/// cannot sync one is not an error); nothing on Windows.
pub fn sync_dir(dir: &Path) -> Result<(), (DirStep, std::io::Error)> {
    imp::sync_dir(dir)
}

/// Free bytes of the file system holding `dir` for this (unprivileged) user, where the system says.
pub fn free_space(dir: &Path) -> Option<u64> {
    imp::free_space(dir)
}

/// A file of this process's own on the open descriptor `fd` of the caller (a duplicate, close-on-exec), which
/// stays the caller's. Windows: [`std::io::ErrorKind::Unsupported`], saying why.
pub fn dup_descriptor(fd: i32) -> std::io::Result<File> {
    imp::dup_descriptor(fd)
}

/// Ends this process at once, as a kill from outside would (no destructors, no atexit handlers, no flush).
pub fn kill_self() -> ! {
    imp::kill_self()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_library_path_entries_are_never_searched() {
        let f = |v: &str| library_path_folders(Some(std::ffi::OsStr::new(v)));
        assert_eq!(f("/a::b:/c"), (vec![PathBuf::from("/a"), PathBuf::from("/c")], true));
        assert_eq!(f("/a;/b"), (vec![PathBuf::from("/a"), PathBuf::from("/b")], false));
        assert_eq!(f("/a:"), (vec![PathBuf::from("/a")], true));
        assert_eq!(f("/a"), (vec![PathBuf::from("/a")], false));
        assert_eq!(library_path_folders(None), (vec![], false));
    }

    fn scratch(name: &str, len: usize) -> (PathBuf, File) {
        let dir = std::env::temp_dir().join(format!("hostfirst-os-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, (0..len).map(|i| (i * 7 % 253) as u8).collect::<Vec<_>>()).unwrap();
        let f = open_read(&p).unwrap();
        (p, f)
    }

    #[test]
    fn positional_reads_read_the_bytes_asked_and_stop_at_the_end() {
        let (_p, f) = scratch("read", 10_000);
        let mut b = vec![0u8; 300];
        assert_eq!(read_at(raw_file(&f), &mut b, 9_800).unwrap(), 200);
        assert!(b[..200].iter().enumerate().all(|(i, &x)| x == ((9_800 + i) * 7 % 253) as u8));
        assert_eq!(read_at(raw_file(&f), &mut b, 10_000).unwrap(), 0);
        assert_eq!(read_at(raw_file(&f), &mut b, 5).unwrap(), 300);
        assert_eq!(b[0], 35);
    }

    #[test]
    fn vectored_reads_fill_pieces_in_order_and_reuse_scratch() {
        let (_p, f) = scratch("vec", 4096);
        let (mut a, mut gap, mut c) = (vec![0u8; 10], vec![0u8; 5], vec![0u8; 20]);
        let iov = [
            IoVec::new(a.as_mut_ptr(), a.len()),
            IoVec::new(gap.as_mut_ptr(), gap.len()),
            IoVec::new(c.as_mut_ptr(), c.len()),
            IoVec::new(gap.as_mut_ptr(), gap.len()),
        ];
        // SAFETY: the pieces point at live buffers of these lengths, used by nothing else meanwhile.
        let n = unsafe { read_vectored_at(&f, &iov, 100) }.unwrap();
        assert_eq!(n, 40);
        assert!(a.iter().enumerate().all(|(i, &x)| x == ((100 + i) * 7 % 253) as u8));
        assert!(c.iter().enumerate().all(|(i, &x)| x == ((115 + i) * 7 % 253) as u8));
        // SAFETY: as above.
        assert_eq!(unsafe { read_vectored_at(&f, &iov, 4090) }.unwrap(), 6);
    }

    /// `same_file`: the file itself, through a link, not after a rename over its name or its removal.
    #[test]
    fn same_file_follows_links_and_sees_replacements() {
        let (p, f) = scratch("same", 10);
        assert!(same_file(&f, &p));
        #[cfg(unix)]
        {
            let link = p.with_extension("link");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&p, &link).unwrap();
            assert!(same_file(&f, &link), "through a link");
            std::fs::remove_file(&link).unwrap();
        }
        let other = p.with_extension("other");
        std::fs::write(&other, b"another file").unwrap();
        std::fs::rename(&other, &p).unwrap();
        assert!(!same_file(&f, &p), "replaced");
        std::fs::remove_file(&p).unwrap();
        assert!(!same_file(&f, &p), "removed");
    }

    #[test]
    fn writes_land_where_asked() {
        let (p, _f) = scratch("write", 100);
        let w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        write_all_at(&w, b"abc", 50).unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(&got[50..53], b"abc");
        assert_eq!(got.len(), 100);
    }

    #[test]
    fn memory_facts_are_plausible() {
        assert!(page_size().is_power_of_two() && page_size() >= 4096);
        let (total, avail) = host_memory().expect("this system says how much memory it has");
        assert!(total > 64 << 20 && avail <= total, "{total} {avail}");
    }

    #[test]
    fn populating_a_mapping_keeps_its_bytes() {
        let (_p, f) = scratch("populate", 3 * 4096 + 5);
        // SAFETY: a read-only mapping of a file this test owns and does not change.
        let m = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        // SAFETY: the range lies in the live mapping `m`.
        let r = unsafe { populate_read(m.as_ptr().wrapping_add(4096), m.len() - 4096) }.unwrap();
        assert!(matches!(r, Populate::Done | Populate::AdviceOnly));
        assert_eq!(m[4096], (4096 * 7 % 253) as u8);
        let mut v = vec![1u8; 3 << 20];
        populate_write(&mut v);
        assert!(v.iter().all(|&x| x == 1));
    }

    #[test]
    fn a_symbol_of_a_loaded_library_is_found_and_a_missing_one_is_not() {
        let name = if cfg!(windows) { c"GetCurrentProcessId" } else { c"getpid" };
        assert!(loaded_symbol(name).is_some());
        assert!(loaded_symbol(c"hostfirst_no_such_symbol_anywhere").is_none());
    }
}
