//! The platform layer on Unix (see `mod.rs` for the contract of each function).

use super::{Populate, PopulateError};
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A file descriptor.
pub type RawFile = std::os::fd::RawFd;

/// One piece of a vectored read: layout-identical to `struct iovec`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct IoVec(libc::iovec);

// SAFETY: a pointer and a length; whoever reads into it holds the memory exclusively (read_vectored_at's contract).
unsafe impl Send for IoVec {}

impl IoVec {
    /// A piece of `len` bytes at `ptr`.
    pub fn new(ptr: *mut u8, len: usize) -> IoVec {
        IoVec(libc::iovec { iov_base: ptr.cast(), iov_len: len })
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.0.iov_len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.iov_len == 0
    }

    /// Drops the first `n` bytes (at most its length).
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.0.iov_len);
        self.0.iov_base = (self.0.iov_base as *mut u8).wrapping_add(n).cast();
        self.0.iov_len -= n;
    }
}

pub(super) fn raw_file(file: &File) -> RawFile {
    file.as_raw_fd()
}

pub(super) fn read_at(file: RawFile, dst: &mut [u8], offset: u64) -> std::io::Result<usize> {
    // SAFETY: `dst` is a live, writable slice of the given length; `file` is the caller's open descriptor.
    let n = unsafe { libc::pread(file, dst.as_mut_ptr().cast(), dst.len(), offset as libc::off_t) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

pub(super) fn write_at(file: &File, src: &[u8], offset: u64) -> std::io::Result<usize> {
    std::os::unix::fs::FileExt::write_at(file, src, offset)
}

/// # Safety
/// As `super::read_vectored_at`.
pub(super) unsafe fn read_vectored_at(file: &File, iov: &[IoVec], offset: u64) -> std::io::Result<usize> {
    // SAFETY: IoVec is a transparent iovec; every piece is valid for writes (the caller's contract).
    let r =
        unsafe { libc::preadv(file.as_raw_fd(), iov.as_ptr().cast(), iov.len() as libc::c_int, offset as libc::off_t) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as usize)
}

pub(super) fn open_read(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
}

pub(super) fn file_system(file: RawFile) -> std::io::Result<super::fs::FileSystem> {
    // SAFETY: all-zero is a valid statfs.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a writable statfs.
    if unsafe { libc::fstatfs(file, &mut s) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's type differs between ABIs
    Ok(super::fs::from_magic(s.f_type as u64))
}

pub(super) fn mount_type(file: RawFile) -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: all-zero is a valid stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a writable stat.
        if unsafe { libc::fstat(file, &mut st) } != 0 {
            return None;
        }
        let (major, minor) = (libc::major(st.st_dev), libc::minor(st.st_dev));
        let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        super::fs::mount_type_in(&text, major, minor)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

pub(super) fn direct_io(path: &Path) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let f =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT | libc::O_NONBLOCK).open(path).map_err(
                |e| match e.raw_os_error() {
                    // The open path's check (no direct I/O in the file system's address space operations).
                    Some(libc::EINVAL) => format!("refused by the file system: opening it with O_DIRECT gives {e}"),
                    _ => format!("opening it with O_DIRECT: {e}"),
                },
            )?;
        let layout = std::alloc::Layout::from_size_align(4096, 4096).expect("a valid layout");
        // SAFETY: a non-zero size.
        let buf = unsafe { std::alloc::alloc(layout) };
        if buf.is_null() {
            return Err("no memory for a 4 KiB aligned buffer".to_string());
        }
        // SAFETY: `buf` holds 4096 writable bytes, page-aligned, as O_DIRECT needs; freed below.
        let n = unsafe { libc::pread(f.as_raw_fd(), buf.cast(), 4096, 0) };
        let e = std::io::Error::last_os_error();
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(buf, layout) };
        if n < 0 {
            if e.raw_os_error() == Some(libc::EINVAL) {
                return Err(format!("refused by the file system: a direct read of 4 KiB at offset 0 gives {e}"));
            }
            return Err(format!("a direct read of 4 KiB at offset 0: {e}"));
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Err("O_DIRECT is used on Linux only".to_string())
    }
}

pub(super) fn advise_random(file: RawFile, on: bool) {
    #[cfg(target_os = "linux")]
    {
        let advice = if on { libc::POSIX_FADV_RANDOM } else { libc::POSIX_FADV_NORMAL };
        // SAFETY: advice on an open descriptor; no memory is involved.
        unsafe { libc::posix_fadvise(file, 0, 0, advice) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, on);
}

pub(super) fn advise_willneed(file: RawFile, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    // SAFETY: advice on an open descriptor; no memory is involved.
    unsafe {
        libc::posix_fadvise(file, offset as libc::off_t, len as libc::off_t, libc::POSIX_FADV_WILLNEED)
    };
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// # Safety
/// As `super::populate_read`.
pub(super) unsafe fn populate_read(addr: *const u8, len: usize) -> Result<Populate, PopulateError> {
    let page = page_size();
    let lo = addr as usize / page * page;
    let hi = addr as usize + len;
    #[cfg(target_os = "linux")]
    {
        const MADV_POPULATE_READ: libc::c_int = 22;
        const STEP: usize = 1 << 30;
        let mut at = lo;
        while at < hi {
            let n = (hi - at).min(STEP);
            // SAFETY: [at, at + n) lies within the caller's live mapping (page-aligned start, inside the same
            // mapping); populating changes no contents.
            if unsafe { libc::madvise(at as *mut libc::c_void, n, MADV_POPULATE_READ) } == 0 {
                at += n;
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) if at == lo => break, // no MADV_POPULATE_READ (Linux < 5.14): advice below
                Some(libc::EFAULT) => return Err(PopulateError::Shrunk),
                _ => return Err(PopulateError::Os(e)),
            }
        }
        if at >= hi {
            return Ok(Populate::Done);
        }
    }
    // SAFETY: advice only, within the caller's mapping.
    unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_WILLNEED) };
    Ok(Populate::AdviceOnly)
}

/// Whether this kernel refused `MADV_POPULATE_WRITE` (EINVAL: an advice it does not know, Linux < 5.14): found
/// by the first call, after which no call asks again and the copies simply fault their pages in.
#[cfg(target_os = "linux")]
static POPULATE_WRITE_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(super) fn populate_write(bytes: &mut [u8]) {
    #[cfg(target_os = "linux")]
    populate_write_with(bytes, &POPULATE_WRITE_REFUSED, |lo, len| {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: populate_write_with passes a page-aligned range inside `bytes`, which we borrow mutably;
        // populating writable private memory changes no contents (zero pages stay zero, others as they are).
        if unsafe { libc::madvise(lo as *mut libc::c_void, len, MADV_POPULATE_WRITE) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    });
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
}

/// `populate_write` with the advice call (`advise(start, len)`: Ok or the errno) and the refusal flag given:
/// the page-aligned inside of `bytes` is advised unless `refused` is set; EINVAL (the kernel does not know the
/// advice) sets it, so that the refusal costs one system call per process. Other errors (ENOMEM, EFAULT: no
/// memory to fault in now) refuse nothing for later; either way the caller's copy faults what is left.
#[cfg(target_os = "linux")]
fn populate_write_with(
    bytes: &mut [u8],
    refused: &std::sync::atomic::AtomicBool,
    advise: impl Fn(usize, usize) -> Result<(), i32>,
) {
    use std::sync::atomic::Ordering;
    let page = 4096usize;
    let start = bytes.as_mut_ptr() as usize;
    let (lo, hi) = (start.next_multiple_of(page), (start + bytes.len()) / page * page);
    if hi <= lo || refused.load(Ordering::Relaxed) {
        return;
    }
    if advise(lo, hi - lo) == Err(libc::EINVAL) {
        refused.store(true, Ordering::Relaxed);
    }
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 && (p as usize).is_power_of_two() {
        p as usize
    } else {
        4096
    }
}

pub(super) fn host_memory() -> Option<(u64, u64)> {
    if let Some(m) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| super::parse_meminfo(&t)) {
        return Some(m);
    }
    // SAFETY: sysconf has no preconditions; negative results mean "unknown".
    let (pages, avail, size) = unsafe {
        (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_AVPHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE))
    };
    if pages <= 0 || size <= 0 {
        return None;
    }
    let total = (pages as u64).saturating_mul(size as u64);
    let free = if avail > 0 { (avail as u64).saturating_mul(size as u64) } else { total };
    Some((total, free))
}

pub(super) fn cpu_name() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.to_string())
}

pub(super) fn register_fork_handlers(
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) -> bool {
    // SAFETY: registers three handlers; no preconditions.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}

pub(super) fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() as u32 }
}

pub(super) fn loaded_symbol(name: &CStr) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    std::ptr::NonNull::new(unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
}

pub(super) fn open_system_library(
    name: &str,
    library_path: Option<std::ffi::OsString>,
) -> Result<libloading::Library, String> {
    let (folders, relative) = super::library_path_folders(library_path.as_deref());
    if !relative {
        // The loader's own search: RUNPATH, LD_LIBRARY_PATH (absolute folders only), its cache and the default
        // folders. None of them is the current folder.
        // SAFETY: loading a driver library runs its initialisers, which have no preconditions.
        return unsafe { libloading::Library::new(name) }.map_err(|e| super::loader_message(&e));
    }
    let mut first_error = None;
    for dir in folders.iter().map(PathBuf::as_path).chain(super::SYSTEM_LIBRARY_FOLDERS.iter().map(Path::new)) {
        let p = dir.join(name);
        if p.exists() {
            // SAFETY: as above; a path with a '/' is opened as it is, without a search.
            match unsafe { libloading::Library::new(&p) } {
                Ok(l) => return Ok(l),
                Err(e) => {
                    first_error.get_or_insert_with(|| super::loader_message(&e));
                }
            }
        }
    }
    Err(format!(
        "{name}: {}; LD_LIBRARY_PATH has an empty or relative entry, so only its absolute folders and the \
         system's library folders were searched (never the current folder)",
        first_error.unwrap_or_else(|| "cannot open shared object file: not found".to_string())
    ))
}

pub(super) fn open_library_file(path: &Path) -> Result<libloading::Library, libloading::Error> {
    // SAFETY: as above; a path with a '/' is opened as it is, without a search.
    unsafe { libloading::Library::new(path) }
}

// ---- writing files (the writer: core/src/write, core/src/engine/write.rs) ------------------------------------

pub(super) const FILE_TOO_LARGE: i32 = libc::EFBIG;

pub(super) fn io_class(e: &std::io::Error) -> super::IoClass {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => super::IoClass::NoSpace,
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => super::IoClass::PermissionDenied,
        _ => super::IoClass::Other,
    }
}

pub(super) fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

pub(super) fn wait_writeback(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        loop {
            // SAFETY: a plain system call on an open descriptor; no memory is passed.
            let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // A file system or file kind without it (a pipe never gets here): the final fsync does it.
                Some(libc::ESPIPE) | Some(libc::EINVAL) | Some(libc::ENOSYS) => return Ok(()),
                _ => return Err(e),
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        Ok(())
    }
}

pub(super) fn reserve(file: &File, len: u64) -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    loop {
        // SAFETY: a plain system call on an open descriptor.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as i64) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL | libc::ENODEV | libc::ESPIPE) => return Ok(false),
            _ => return Err(e),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, len);
        Ok(false)
    }
}

pub(super) fn create_new_held(path: &Path) -> std::io::Result<File> {
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
    match flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => {}
        // A clean-up locked it first and removes it: not ours any more.
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
            return Err(std::io::Error::other(super::LostToCleanup))
        }
        // A file system without locks: the unique name is all there is.
        Err(e) if no_locks(&e) => return Ok(f),
        Err(e) => return Err(e),
    }
    // Locked; a clean-up that took the lock and removed the file in between has left the name empty (or a new
    // file of the same name, made by a writer of a distributed save).
    if !same_file(&f, path) {
        return Err(std::io::Error::other(super::LostToCleanup));
    }
    Ok(f)
}

fn flock(f: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: a plain system call on an open descriptor.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn no_locks(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL))
}

pub(super) fn same_file(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// A held lock file: removed (while still locked) and closed when dropped.
pub(super) struct PathLock {
    file: File,
    path: std::path::PathBuf,
    held: bool,
}

impl Drop for PathLock {
    fn drop(&mut self) {
        if self.held {
            // Removed before the lock is released: a waiter that gets the lock then finds the name gone (or
            // another file under it) and starts again, so two holders never coexist.
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = &self.file;
    }
}

pub(super) fn lock_path(path: &Path) -> std::io::Result<PathLock> {
    loop {
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        match flock(&file, libc::LOCK_EX) {
            Ok(()) => {}
            Err(e) if no_locks(&e) => return Ok(PathLock { file, path: path.to_path_buf(), held: false }),
            Err(e) => return Err(e),
        }
        if same_file(&file, path) {
            return Ok(PathLock { file, path: path.to_path_buf(), held: true });
        }
        // The last holder removed it after we opened it: this lock guards nothing; again with the new file.
    }
}

pub(super) fn hold(file: &File) -> std::io::Result<()> {
    // SAFETY: a plain system call on an open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    // A file system without locks (some network mounts) still gets a unique name: go on without.
    if matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) {
        return Ok(());
    }
    Err(e)
}

pub(super) fn remove_if_unheld(path: &Path) {
    let Ok(f) = File::open(path) else { return };
    // SAFETY: a plain system call on an open descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        // Removed while locked: a writer that opens it now finds its lock taken, then the file gone.
        let _ = std::fs::remove_file(path);
    }
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), (super::DirStep, std::io::Error)> {
    let d = File::open(dir).map_err(|e| (super::DirStep::Open, e))?;
    match d.sync_all() {
        // Some file systems cannot sync a directory (EINVAL); the rename is as durable as they make it.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        r => r.map_err(|e| (super::DirStep::Sync, e)),
    }
}

pub(super) fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: all-zero is a valid statvfs.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

pub(super) fn dup_descriptor(fd: i32) -> std::io::Result<File> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_DUPFD_CLOEXEC on any integer is a plain system call; it fails with EBADF for a non-descriptor.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `d` is a new descriptor this process owns from here on.
    Ok(unsafe { File::from_raw_fd(d) })
}

pub(super) fn kill_self() -> ! {
    // SAFETY: a plain system call; the process ends here.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    std::process::abort()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::populate_write_with;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A kernel older than 5.14 (forced: the advice answers EINVAL): the first populate asks and learns the
    /// refusal, later ones ask nothing; the memory is left as it was and stays writable (the copy faults it).
    #[test]
    fn populate_write_refused_with_einval_is_asked_once_and_the_copy_faults() {
        let refused = AtomicBool::new(false);
        let asked = AtomicUsize::new(0);
        let old_kernel = |_lo: usize, _len: usize| {
            asked.fetch_add(1, Ordering::Relaxed);
            Err(libc::EINVAL)
        };
        let mut v = vec![3u8; 5 << 20];
        populate_write_with(&mut v, &refused, old_kernel);
        assert_eq!(asked.load(Ordering::Relaxed), 1);
        assert!(refused.load(Ordering::Relaxed));
        for _ in 0..3 {
            populate_write_with(&mut v, &refused, old_kernel);
        }
        assert_eq!(asked.load(Ordering::Relaxed), 1, "asked again after the kernel refused");
        assert!(v.iter().all(|&b| b == 3));
        v.iter_mut().for_each(|b| *b = 9);
        assert!(v.iter().all(|&b| b == 9));
    }

    /// ENOMEM or EFAULT now (no memory to fault in at this moment) is no refusal: the next populate asks again.
    /// Memory smaller than a page inside asks nothing at all.
    #[test]
    fn populate_write_other_errors_refuse_nothing_for_later() {
        let refused = AtomicBool::new(false);
        let asked = AtomicUsize::new(0);
        let mut v = vec![0u8; 3 << 20];
        for errno in [libc::ENOMEM, libc::EFAULT] {
            populate_write_with(&mut v, &refused, |_, _| {
                asked.fetch_add(1, Ordering::Relaxed);
                Err(errno)
            });
        }
        assert_eq!(asked.load(Ordering::Relaxed), 2);
        assert!(!refused.load(Ordering::Relaxed));
        let mut small = [0u8; 100];
        populate_write_with(&mut small, &refused, |_, _| panic!("a range with no whole page was advised"));
    }
}
