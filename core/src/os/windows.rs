//! The platform layer on Windows (see `mod.rs` for the contract of each function).

use super::{Populate, PopulateError};
use std::ffi::{c_void, CStr};
use std::fs::File;
use std::os::windows::fs::FileExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle};
use std::path::Path;
use windows_sys::Win32::Foundation::HMODULE;
use windows_sys::Win32::System::LibraryLoader::GetProcAddress;
use windows_sys::Win32::System::Memory::{PrefetchVirtualMemory, WIN32_MEMORY_RANGE_ENTRY};
use windows_sys::Win32::System::ProcessStatus::K32EnumProcessModules;
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, GlobalMemoryStatusEx, MEMORYSTATUSEX, SYSTEM_INFO};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

/// A file `HANDLE`, borrowed from an open `File` (never closed through this value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFile(pub std::os::windows::io::RawHandle);

// SAFETY: a handle is a process-wide value; any thread may read through it while the file is open.
unsafe impl Send for RawFile {}
// SAFETY: as above.
unsafe impl Sync for RawFile {}

/// One piece of a vectored read.
#[derive(Clone, Copy, Debug)]
pub struct IoVec {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a pointer and a length; whoever reads into it holds the memory exclusively (read_vectored_at's contract).
unsafe impl Send for IoVec {}

impl IoVec {
    /// A piece of `len` bytes at `ptr`.
    pub fn new(ptr: *mut u8, len: usize) -> IoVec {
        IoVec { ptr, len }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops the first `n` bytes (at most its length).
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        self.ptr = self.ptr.wrapping_add(n);
        self.len -= n;
    }
}

/// `ERROR_HANDLE_EOF`: a read that starts at or past the end of the file.
const ERROR_HANDLE_EOF: i32 = 38;

pub(super) fn raw_file(file: &File) -> RawFile {
    RawFile(file.as_raw_handle())
}

pub(super) fn read_at(file: RawFile, dst: &mut [u8], offset: u64) -> std::io::Result<usize> {
    // SAFETY: the caller's open handle, viewed as a File that is never dropped (so never closed here).
    let f = std::mem::ManuallyDrop::new(unsafe { File::from_raw_handle(file.0) });
    match f.seek_read(dst, offset) {
        Err(e) if e.raw_os_error() == Some(ERROR_HANDLE_EOF) => Ok(0),
        r => r,
    }
}

pub(super) fn write_at(file: &File, src: &[u8], offset: u64) -> std::io::Result<usize> {
    file.seek_write(src, offset)
}

/// # Safety
/// As `super::read_vectored_at`.
pub(super) unsafe fn read_vectored_at(file: &File, iov: &[IoVec], offset: u64) -> std::io::Result<usize> {
    let mut done = 0usize;
    for v in iov {
        // SAFETY: the piece is valid for writes of its length and used by no one else (the caller's contract).
        let dst = unsafe { std::slice::from_raw_parts_mut(v.ptr, v.len) };
        let mut filled = 0;
        while filled < dst.len() {
            match read_at(raw_file(file), &mut dst[filled..], offset + (done + filled) as u64) {
                Ok(0) => return Ok(done + filled),
                Ok(n) => filled += n,
                // The bytes read so far count; the caller's next call meets the error again.
                Err(_) if done + filled > 0 => return Ok(done + filled),
                Err(e) => return Err(e),
            }
        }
        done += filled;
    }
    Ok(done)
}

pub(super) fn open_read(path: &Path) -> std::io::Result<File> {
    // std opens with FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE: others may still write, rename or
    // delete the file (a mapping of it then keeps its bytes).
    File::open(path)
}

pub(super) fn advise_random(_file: RawFile, _on: bool) {}

pub(super) fn file_system(_file: RawFile) -> std::io::Result<super::fs::FileSystem> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "the file system is not detected on Windows"))
}

pub(super) fn mount_type(_file: RawFile) -> Option<String> {
    None
}

pub(super) fn direct_io(_path: &Path) -> Result<(), String> {
    Err("direct I/O (FILE_FLAG_NO_BUFFERING) is not used on Windows".to_string())
}

pub(super) fn advise_willneed(_file: RawFile, _offset: u64, _len: u64) {}

/// # Safety
/// As `super::populate_read`.
pub(super) unsafe fn populate_read(addr: *const u8, len: usize) -> Result<Populate, PopulateError> {
    let page = page_size();
    let lo = addr as usize / page * page;
    let hi = addr as usize + len;
    let range = WIN32_MEMORY_RANGE_ENTRY { VirtualAddress: lo as *mut c_void, NumberOfBytes: hi - lo };
    // SAFETY: one range of the caller's live mapping; prefetching reads pages in and changes no contents. Best
    // effort (Windows 8+): the reads below fault in whatever it did not bring.
    unsafe { PrefetchVirtualMemory(GetCurrentProcess(), 1, &range, 0) };
    let mut at = lo;
    while at < hi {
        // SAFETY: a byte of the caller's live mapping (the first page is read at `addr`, inside the range).
        unsafe { std::ptr::read_volatile(at.max(addr as usize) as *const u8) };
        at += page;
    }
    Ok(Populate::Done)
}

pub(super) fn populate_write(_bytes: &mut [u8]) {}

pub(super) fn page_size() -> usize {
    // SAFETY: GetSystemInfo fills the struct it is given; all-zero is a valid SYSTEM_INFO.
    let info = unsafe {
        let mut info: SYSTEM_INFO = std::mem::zeroed();
        GetSystemInfo(&mut info);
        info
    };
    let p = info.dwPageSize as usize;
    if p > 0 && p.is_power_of_two() {
        p
    } else {
        4096
    }
}

pub(super) fn host_memory() -> Option<(u64, u64)> {
    // SAFETY: all-zero is a valid MEMORYSTATUSEX; dwLength is set as the call requires.
    let mut m: MEMORYSTATUSEX = unsafe { std::mem::zeroed() };
    m.dwLength = std::mem::size_of::<MEMORYSTATUSEX>() as u32;
    // SAFETY: `m` is a live MEMORYSTATUSEX with its length set.
    if unsafe { GlobalMemoryStatusEx(&mut m) } == 0 || m.ullTotalPhys == 0 {
        return None;
    }
    Some((m.ullTotalPhys, m.ullAvailPhys.min(m.ullTotalPhys)))
}

pub(super) fn cpu_name() -> Option<String> {
    std::env::var("PROCESSOR_IDENTIFIER").ok()
}

pub(super) fn register_fork_handlers(_: extern "C" fn(), _: extern "C" fn(), _: extern "C" fn()) -> bool {
    false
}

pub(super) fn parent_pid() -> u32 {
    0
}

pub(super) fn loaded_symbol(name: &CStr) -> Option<std::ptr::NonNull<c_void>> {
    let mut modules: Vec<HMODULE> = vec![std::ptr::null_mut(); 256];
    loop {
        let mut needed = 0u32;
        let size = (modules.len() * std::mem::size_of::<HMODULE>()) as u32;
        // SAFETY: `modules` holds `size` bytes of writable HMODULE slots; `needed` is a live u32.
        if unsafe { K32EnumProcessModules(GetCurrentProcess(), modules.as_mut_ptr(), size, &mut needed) } == 0 {
            return None;
        }
        let n = needed as usize / std::mem::size_of::<HMODULE>();
        if n <= modules.len() {
            modules.truncate(n);
            break;
        }
        modules.resize(n, std::ptr::null_mut()); // more modules than slots: ask again with room for all
    }
    modules.into_iter().find_map(|m| {
        // SAFETY: a module of this process (a module unloaded meanwhile gives NULL) and a NUL-terminated name.
        let f = unsafe { GetProcAddress(m, name.as_ptr().cast()) }?;
        std::ptr::NonNull::new(f as *mut c_void)
    })
}

pub(super) fn open_system_library(
    name: &str,
    _library_path: Option<std::ffi::OsString>,
) -> Result<libloading::Library, String> {
    use libloading::os::windows::{Library, LOAD_LIBRARY_SEARCH_SYSTEM32};
    // SAFETY: loading a driver library runs its initialisers, which have no preconditions. The flag restricts the
    // search to System32 (Windows 8+, and 7 with KB2533623): never the current or the program's directory or PATH.
    unsafe { Library::load_with_flags(name, LOAD_LIBRARY_SEARCH_SYSTEM32) }
        .map(Into::into)
        .map_err(|e| super::loader_message(&e))
}

pub(super) fn open_library_file(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::windows::{Library, LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR, LOAD_LIBRARY_SEARCH_SYSTEM32};
    // SAFETY: as above; an absolute path names the file, and the DLLs it imports come from its own directory and
    // System32 only.
    unsafe { Library::load_with_flags(path, LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_SYSTEM32) }
        .map(Into::into)
}

// ---- writing files (the writer: core/src/write, core/src/engine/write.rs) ------------------------------------

/// `ERROR_HANDLE_DISK_FULL`, `ERROR_DISK_FULL`, `ERROR_DISK_QUOTA_EXCEEDED`, `ERROR_FILE_TOO_LARGE`.
const NO_SPACE_ERRORS: [i32; 4] = [39, 112, 1295, FILE_TOO_LARGE];

/// `ERROR_FILE_TOO_LARGE`.
pub(super) const FILE_TOO_LARGE: i32 = 223;
/// `ERROR_ACCESS_DENIED`, `ERROR_WRITE_PROTECT`.
const PERMISSION_ERRORS: [i32; 2] = [5, 19];

pub(super) fn io_class(e: &std::io::Error) -> super::IoClass {
    match e.raw_os_error() {
        Some(c) if NO_SPACE_ERRORS.contains(&c) => super::IoClass::NoSpace,
        Some(c) if PERMISSION_ERRORS.contains(&c) => super::IoClass::PermissionDenied,
        _ => super::IoClass::Other,
    }
}

pub(super) fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

pub(super) fn wait_writeback(_file: &File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Ok(())
}

pub(super) fn reserve(file: &File, len: u64) -> std::io::Result<bool> {
    use windows_sys::Win32::Storage::FileSystem::{
        FileAllocationInfo, SetFileInformationByHandle, FILE_ALLOCATION_INFO,
    };
    let info = FILE_ALLOCATION_INFO { AllocationSize: len.min(i64::MAX as u64) as i64 };
    // SAFETY: the caller's open handle (opened for writing) and a live FILE_ALLOCATION_INFO of the size given.
    let ok = unsafe {
        SetFileInformationByHandle(
            file.as_raw_handle(),
            FileAllocationInfo,
            (&info as *const FILE_ALLOCATION_INFO).cast(),
            std::mem::size_of::<FILE_ALLOCATION_INFO>() as u32,
        )
    };
    if ok != 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    // A full disk or quota is the answer asked for; anything else (a file system without allocation, an
    // emulation that lacks the call) leaves it to the writes.
    if matches!(io_class(&e), super::IoClass::NoSpace) {
        Err(e)
    } else {
        Ok(false)
    }
}

pub(super) fn create_new_held(path: &Path) -> std::io::Result<File> {
    // FILE_SHARE_READ | FILE_SHARE_WRITE without FILE_SHARE_DELETE: nobody removes or renames it while it is
    // open (the hold `hold` stands for on Unix).
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create_new(true);
    std::os::windows::fs::OpenOptionsExt::share_mode(&mut o, 0x1 | 0x2);
    o.open(path)
}

pub(super) fn same_file(file: &File, path: &Path) -> bool {
    use std::os::windows::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => {
            a.creation_time() == b.creation_time()
                && a.last_write_time() == b.last_write_time()
                && a.file_size() == b.file_size()
        }
        _ => false,
    }
}

/// A held lock file: open with no sharing, deleted by the system when closed.
pub(super) struct PathLock {
    _file: File,
}

pub(super) fn lock_path(path: &Path) -> std::io::Result<PathLock> {
    use std::os::windows::fs::OpenOptionsExt;
    const FILE_FLAG_DELETE_ON_CLOSE: u32 = 0x0400_0000;
    const ERROR_ACCESS_DENIED: i32 = 5;
    const ERROR_SHARING_VIOLATION: i32 = 32;
    let mut denied = 0u32;
    loop {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true).create(true).truncate(false);
        o.share_mode(0).custom_flags(FILE_FLAG_DELETE_ON_CLOSE);
        match o.open(path) {
            Ok(f) => return Ok(PathLock { _file: f }),
            // Held by another writer: wait for it.
            Err(e) if e.raw_os_error() == Some(ERROR_SHARING_VIOLATION) => {}
            // Its holder closed it and the deletion is pending for a moment; a real refusal persists (2 s).
            Err(e) if e.raw_os_error() == Some(ERROR_ACCESS_DENIED) && denied < 200 => denied += 1,
            Err(e) => return Err(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

pub(super) fn hold(_file: &File) -> std::io::Result<()> {
    // The share mode the file was opened with (create_new_held) is the hold.
    Ok(())
}

pub(super) fn remove_if_unheld(path: &Path) {
    // Fails with a sharing violation while its writer has it open (create_new_held).
    let _ = std::fs::remove_file(path);
}

pub(super) fn sync_dir(_dir: &Path) -> Result<(), (super::DirStep, std::io::Error)> {
    // A directory cannot be flushed on Windows; NTFS journals the rename itself.
    Ok(())
}

pub(super) fn free_space(dir: &Path) -> Option<u64> {
    use std::os::windows::ffi::OsStrExt;
    use windows_sys::Win32::Storage::FileSystem::GetDiskFreeSpaceExW;
    let wide: Vec<u16> = dir.as_os_str().encode_wide().chain(std::iter::once(0)).collect();
    let mut avail = 0u64;
    // SAFETY: a NUL-terminated UTF-16 path and a live u64; the other outputs are optional (NULL).
    let ok = unsafe { GetDiskFreeSpaceExW(wide.as_ptr(), &mut avail, std::ptr::null_mut(), std::ptr::null_mut()) };
    (ok != 0).then_some(avail)
}

pub(super) fn dup_descriptor(fd: i32) -> std::io::Result<File> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "fd {fd}: a C runtime descriptor belongs to the runtime that made it (msvcrt, ucrt, each DLL's own), \
             so the library cannot use the caller's; open the writer on a path"
        ),
    ))
}

pub(super) fn kill_self() -> ! {
    use windows_sys::Win32::System::Threading::TerminateProcess;
    // SAFETY: ends this process at once, as SIGKILL does on Unix (exit code 137 = 128 + 9, as shells report it).
    unsafe { TerminateProcess(GetCurrentProcess(), 137) };
    std::process::abort()
}
