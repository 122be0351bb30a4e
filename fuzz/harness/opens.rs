//! Which files a call opens, observed where every open of the process passes: this program's own
//! definitions of the C library's `open`, `open64`, `openat` and `openat64` (on Linux with glibc). The Rust
//! standard library, and so hostfirst, calls these symbols; a program that defines them gets its own
//! definitions at link time, which note the path and call the C library's (found with `dlsym(RTLD_NEXT)`).
//! Deterministic: the path is noted in the open call itself, whatever thread makes it.
//!
//! [`record`] runs a closure with recording on and returns every path opened meanwhile (made absolute: a
//! relative path against the working directory or the `openat` directory). Elsewhere than Linux with glibc
//! nothing can be observed: [`SUPPORTED`] is false and the list is empty.

use std::path::{Component, Path, PathBuf};

/// Whether opens can be observed here.
pub const SUPPORTED: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    pub static ON: AtomicBool = AtomicBool::new(false);
    pub static SEEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    type Open = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
    type OpenAt = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;

    /// The C library's definition of `name` (cached in `slot`).
    fn next(slot: &AtomicUsize, name: &CStr) -> *mut c_void {
        let mut p = slot.load(Ordering::Acquire);
        if p == 0 {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition after this program's.
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
            assert!(p != 0, "dlsym(RTLD_NEXT, {name:?}) found nothing");
            slot.store(p, Ordering::Release);
        }
        p as *mut c_void
    }

    fn note(dirfd: c_int, path: *const c_char) {
        if !ON.load(Ordering::Acquire) || path.is_null() {
            return;
        }
        // SAFETY: open's contract: `path` is a NUL-terminated string.
        let p = Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
        let full = if p.is_absolute() {
            p.to_path_buf()
        } else if dirfd == libc::AT_FDCWD {
            std::env::current_dir().unwrap_or_default().join(p)
        } else {
            std::fs::read_link(format!("/proc/self/fd/{dirfd}")).unwrap_or_default().join(p)
        };
        SEEN.lock().unwrap_or_else(|e| e.into_inner()).push(full);
    }

    // The mode argument is variadic in C and read only with O_CREAT or O_TMPFILE; passing on whatever the
    // register holds is what the C library's own wrappers do (same calling convention on x86-64 and AArch64).

    /// # Safety
    /// The C library's `open`: `path` must be a NUL-terminated string.
    #[no_mangle]
    pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        note(libc::AT_FDCWD, path);
        // SAFETY: the C library's `open`, with the caller's arguments.
        unsafe { std::mem::transmute::<*mut c_void, Open>(next(&REAL, c"open"))(path, flags, mode) }
    }

    /// # Safety
    /// The C library's `open64`: `path` must be a NUL-terminated string.
    #[no_mangle]
    pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        note(libc::AT_FDCWD, path);
        // SAFETY: as for `open`.
        unsafe { std::mem::transmute::<*mut c_void, Open>(next(&REAL, c"open64"))(path, flags, mode) }
    }

    /// # Safety
    /// The C library's `openat`: `path` must be a NUL-terminated string.
    #[no_mangle]
    pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        note(dirfd, path);
        // SAFETY: as for `open`.
        unsafe { std::mem::transmute::<*mut c_void, OpenAt>(next(&REAL, c"openat"))(dirfd, path, flags, mode) }
    }

    /// # Safety
    /// The C library's `openat64`: `path` must be a NUL-terminated string.
    #[no_mangle]
    pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        note(dirfd, path);
        // SAFETY: as for `open`.
        unsafe { std::mem::transmute::<*mut c_void, OpenAt>(next(&REAL, c"openat64"))(dirfd, path, flags, mode) }
    }
}

/// Runs `f` and returns what it returned and the paths opened (by any thread) while it ran. Calls must not
/// overlap (the fuzz targets run one input at a time; the replay test holds one lock).
pub fn record<T>(f: impl FnOnce() -> T) -> (T, Vec<PathBuf>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::sync::atomic::Ordering;
        imp::SEEN.lock().unwrap_or_else(|e| e.into_inner()).clear();
        imp::ON.store(true, Ordering::Release);
        let out = f();
        imp::ON.store(false, Ordering::Release);
        let seen = std::mem::take(&mut *imp::SEEN.lock().unwrap_or_else(|e| e.into_inner()));
        (out, seen)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        (f(), Vec::new())
    }
}

/// `p` with `.` and `..` resolved by the text alone. Sound for the targets' folders, which hold no symbolic
/// link and whose own path has none (they are canonical): there the kernel resolves `..` the same way.
pub fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Asserts that every path in `opened` lies inside `folder` (canonical), `what` naming the call.
pub fn assert_inside(opened: &[PathBuf], folder: &Path, what: &str) {
    for p in opened {
        let n = normalise(p);
        assert!(n.starts_with(folder), "{what} opened {} ({}), outside {}", p.display(), n.display(), folder.display());
    }
}

/// Checks that the recorder sees an open at all (so an empty list means nothing was opened).
pub fn self_test(folder: &Path) {
    if !SUPPORTED {
        return;
    }
    let probe = folder.join("opens-self-test");
    std::fs::write(&probe, b"x").expect("write the probe file");
    let (r, seen) = record(|| std::fs::File::open(&probe));
    r.expect("open the probe file");
    assert_eq!(seen, vec![probe.clone()], "the open recorder does not see std::fs::File::open");
}
