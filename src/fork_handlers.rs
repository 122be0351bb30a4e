//! The `pthread_atfork` handlers: the one list of every process-global lock (see `forksafe.rs` for why and
//! how). This module names every module that holds such a lock, and no module but the C boundary names it
//! (`ffi::run_status`/`run_value` install the handlers on every call, which also keeps this module linked
//! into a static link), so the lock primitives in `forksafe.rs` depend on nothing.

use crate::forksafe::{self, Handlers};

/// Takes every process-global lock, outermost first. No code path takes two of them in another order.
extern "C" fn prepare() {
    forksafe::keep(vec![
        crate::ffi::handle::REGISTRY.hold(),
        crate::ffi::args::CSTRINGS.hold(),
        crate::ffi::dlpack::DLPACK_SLOTS.hold(),
        crate::scope::PROCESS_DEFAULT.hold(),
        crate::device::fit::HOST.hold(),
        crate::place::resident::CACHE.hold(),
        crate::engine::staging::SLABS.hold(),
        #[cfg(target_os = "linux")]
        crate::engine::uring::RINGS.hold(),
    ]);
}

extern "C" fn parent() {
    forksafe::release();
}

extern "C" fn child() {
    forksafe::release();
    crate::device::cuda::probe::forked_child();
}

static HANDLERS: Handlers = Handlers { prepare, parent, child };

/// Installs and registers the handlers (once per process; cheap after the first call, never blocks).
pub(crate) fn install() {
    forksafe::install(&HANDLERS);
}

extern "C" fn install_at_load() {
    install();
}

/// Runs [`install`] when the library (or a program linking it statically) is loaded, before any thread of the
/// program can be inside the library.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static INSTALL_AT_LOAD: extern "C" fn() = install_at_load;
