//! What the `pthread_atfork` handlers do for the core: the one list of the core's process-global locks (see
//! `forksafe.rs` for why and how). This module names every module of the core that holds such a lock. The
//! handlers themselves (`extern "C"` trampolines registered with `pthread_atfork`, and their registration when
//! the library is loaded) belong to the C-API crate (`src/fork_handlers.rs` at the repository root): it takes its own
//! locks (outermost) and then calls [`prepare`], and calls [`parent`] or [`child`] after `fork()`.

use crate::forksafe;

/// Takes every process-global lock of the core, outermost first, and keeps the guards until [`parent`] or
/// [`child`]. No code path takes two of them in another order. Called by the `prepare` handler only.
pub fn prepare() {
    forksafe::keep(vec![
        crate::dlpack::exports::DLPACK_SLOTS.hold(),
        crate::scope::PROCESS_DEFAULT.hold(),
        crate::device::fit::HOST.hold(),
        crate::place::resident::CACHE.hold(),
        crate::engine::staging::SLABS.hold(),
        #[cfg(target_os = "linux")]
        crate::engine::uring::RINGS.hold(),
        crate::device::cuda::capture::DEFERRED.hold(),
        crate::remote::runtime::RUNTIME.hold(),
        crate::remote::settings::CONFIGURED.hold(),
    ]);
}

/// Releases every guard the `prepare` handler kept (in the parent after `fork()`).
pub fn parent() {
    forksafe::release();
}

/// Releases every guard the `prepare` handler kept, and marks CUDA unusable when the parent had started it (in
/// the child after `fork()`).
pub fn child() {
    forksafe::release();
    crate::device::cuda::probe::forked_child();
}
