//! Fork safety of the library's process-global state.
//!
//! `fork()` copies only the calling thread. A lock that another thread held at that moment stays held for good
//! in the child, and a one-time initialisation another thread was running stays "running" for good; the
//! child's first call that needs either would hang (Python `multiprocessing` with the fork start method, while
//! a loader thread runs puts, is the usual way to get there). The header promises that cpu work stays
//! available in a forked child, so:
//!
//! - Every process-global lock is a [`GlobalMutex`] or the handle registry's `RwLock`, and the `pthread_atfork`
//!   handlers take them all before `fork()`, in one fixed order, and release them after it in the parent and in
//!   the child: the C-API crate's trampolines (`src/fork_handlers.rs` at the repository root, registered through
//!   [`install`]) take the skin's locks, then `fork_handlers::prepare` takes the core's, as glibc does for malloc's arenas. Their critical sections are
//!   short and never call into code that could itself wait for `fork()` (no `dlopen`, no `pthread_atfork`, no
//!   driver initialisation), so the wait in `prepare` always ends.
//! - The CUDA-only locks (`device/cuda/memory.rs`) are not taken: they are used only after the CUDA gate
//!   (`cuda::api()`) let a call through, which never happens in a child forked after CUDA was initialised.
//! - One-time values are [`InitOnce`]s, which never block: a thread that finds a value missing computes it,
//!   and the first to store wins. A child forked in the middle of an initialisation computes the value again.
//! - A child forked while the CUDA probe was running counts as forked after CUDA initialisation (see
//!   `device/cuda/probe.rs`): it never loads or initialises the driver itself.
//!
//! A handle's own lock (a buffer, a gather) is not covered: a handle that another thread was using at the
//! moment of `fork()` must not be used in the child (the header says so).

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A process-global mutex that a forked child can always take (see the module documentation). Poisoning is
/// ignored: every critical section leaves its data consistent between statements.
pub struct GlobalMutex<T>(Mutex<T>);

impl<T: Send + 'static> GlobalMutex<T> {
    /// A new mutex holding `value`.
    pub const fn new(value: T) -> GlobalMutex<T> {
        GlobalMutex(Mutex::new(value))
    }

    /// Locks the mutex (and makes sure the fork handlers are registered).
    pub fn lock(&'static self) -> MutexGuard<'static, T> {
        register();
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks the mutex when no one holds it, without waiting.
    pub fn try_lock(&'static self) -> Option<MutexGuard<'static, T>> {
        register();
        match self.0.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The guard the fork handlers hold across `fork()`.
    pub fn hold(&'static self) -> Box<dyn Any> {
        Box::new(self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A process-global reader-writer lock that a forked child can always take (the handlers hold it for writing).
pub struct GlobalRwLock<T>(RwLock<T>);

impl<T: Send + Sync + 'static> GlobalRwLock<T> {
    /// A new lock holding `value`.
    pub const fn new(value: T) -> GlobalRwLock<T> {
        GlobalRwLock(RwLock::new(value))
    }

    /// Locks for reading.
    pub fn read(&'static self) -> RwLockReadGuard<'static, T> {
        register();
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks for writing.
    pub fn write(&'static self) -> RwLockWriteGuard<'static, T> {
        register();
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The guard the fork handlers hold across `fork()` (for writing).
    pub fn hold(&'static self) -> Box<dyn Any> {
        Box::new(self.0.write().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A value computed once per process, on first use, without ever blocking: concurrent first uses may each
/// compute it (the computation must be free of side effects that matter twice); the first stored wins and
/// the others are dropped. Unlike `OnceLock`, a child forked during the computation is never left waiting.
pub struct InitOnce<T>(AtomicPtr<T>);

impl<T: Send + Sync + 'static> Default for InitOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync + 'static> InitOnce<T> {
    /// An empty cell.
    pub const fn new() -> InitOnce<T> {
        InitOnce(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The value, when some call has stored it.
    pub fn get(&'static self) -> Option<&'static T> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored from `Box::into_raw` and is never freed (the value lives for
        // the rest of the process).
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Stores `value` when none is stored yet; false (and `value` dropped) when one already was.
    pub fn set(&'static self, value: T) -> bool {
        let new = Box::into_raw(Box::new(value));
        match self.0.compare_exchange(std::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(_) => {
                // SAFETY: `new` came from `Box::into_raw` above and was not published.
                drop(unsafe { Box::from_raw(new) });
                false
            }
        }
    }

    /// The value, computing it with `f` when none is stored yet.
    pub fn get_or_init(&'static self, f: impl FnOnce() -> T) -> &'static T {
        if let Some(v) = self.get() {
            return v;
        }
        let new = Box::into_raw(Box::new(f()));
        match self.0.compare_exchange(std::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just stored; never freed.
            Ok(_) => unsafe { &*new },
            Err(stored) => {
                // SAFETY: `new` came from `Box::into_raw` above and was not published.
                drop(unsafe { Box::from_raw(new) });
                // SAFETY: as in `get`.
                unsafe { &*stored }
            }
        }
    }
}

thread_local! {
    /// The guards the prepare handler took, released by the parent and child handlers (which run on the forking
    /// thread, or on its copy in the child).
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `guards` (taken by the prepare handler, outermost first) until [`release`].
pub fn keep(guards: Vec<Box<dyn Any>>) {
    // If the forking thread is being torn down the guards are released here, which only loses the protection.
    let _ = HELD.try_with(|h| h.borrow_mut().extend(guards));
}

/// Releases the guards [`keep`] kept, innermost first (the parent and child handlers).
pub fn release() {
    let _ = HELD.try_with(|h| {
        let mut held = h.borrow_mut();
        while held.pop().is_some() {}
    });
}

/// The three `pthread_atfork` handlers, defined by the C-API crate (this crate defines no `extern "C"`
/// function). The list of the core's locks lives in `fork_handlers.rs`, which names every module holding one;
/// this module names none, so every module can use its primitives.
pub struct Handlers {
    pub prepare: extern "C" fn(),
    pub parent: extern "C" fn(),
    pub child: extern "C" fn(),
}

/// The handlers, once `fork_handlers.rs` installed them (when the library is loaded, and on every C call).
static HANDLERS: AtomicPtr<Handlers> = AtomicPtr::new(std::ptr::null_mut());

/// 0: not registered, 1: being registered, 2: registered.
static REGISTERED: AtomicU8 = AtomicU8::new(0);

/// Installs the fork handlers and registers them with `pthread_atfork` (once per process; never blocks).
pub fn install(handlers: &'static Handlers) {
    let _ = HANDLERS.compare_exchange(
        std::ptr::null_mut(),
        handlers as *const Handlers as *mut Handlers,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    register();
}

/// Whether the fork handlers are registered with `pthread_atfork` (on Windows, which has no fork: whether
/// registering has been done, which registers nothing).
pub fn registered() -> bool {
    REGISTERED.load(Ordering::Acquire) == 2
}

/// Registers the installed fork handlers once per process (nothing before they are installed). Called by
/// [`install`] and on every lock; never blocks.
pub fn register() {
    if REGISTERED.load(Ordering::Acquire) == 2 {
        return;
    }
    let h = HANDLERS.load(Ordering::Acquire);
    if h.is_null() {
        return;
    }
    if REGISTERED.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        // SAFETY: `h` came from a `&'static Handlers`.
        let h = unsafe { &*h };
        // The handlers only lock and unlock the library's own mutexes and store to atomics. Where there is no
        // fork (Windows) nothing is registered, and nothing needs to be.
        crate::os::register_fork_handlers(h.prepare, h.parent, h.child);
        REGISTERED.store(2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_once_keeps_the_first_value() {
        static CELL: InitOnce<String> = InitOnce::new();
        assert!(CELL.get().is_none());
        assert_eq!(CELL.get_or_init(|| "a".to_string()), "a");
        assert_eq!(CELL.get_or_init(|| "b".to_string()), "a");
        assert_eq!(CELL.get().map(String::as_str), Some("a"));
    }
}
