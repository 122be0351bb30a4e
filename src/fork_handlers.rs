//! The `pthread_atfork` handlers of the library: `extern "C"` trampolines over the core's
//! `hostfirst_core::fork_handlers` (the core defines no `extern "C"` function), and their registration when
//! the library is loaded. `prepare` takes the skin's process-global locks first (outermost) and then the core's;
//! tests/it/forksafe.rs checks that every process-global lock of both crates is taken here or there.

use crate::forksafe::{self, Handlers};
use hostfirst_core::fork_handlers;

extern "C" fn prepare() {
    forksafe::keep(vec![crate::ffi::handle::REGISTRY.hold(), crate::ffi::args::CSTRINGS.hold()]);
    fork_handlers::prepare();
}

extern "C" fn parent() {
    fork_handlers::parent();
}

extern "C" fn child() {
    fork_handlers::child();
}

static HANDLERS: Handlers = Handlers { prepare, parent, child };

/// Installs and registers the handlers (once per process; cheap after the first call, never blocks). Called
/// on every C call (`ffi::run_status`/`run_value`), which also keeps this module linked into a static link.
pub(crate) fn install() {
    forksafe::install(&HANDLERS);
}

#[cfg(target_os = "linux")]
extern "C" fn install_at_load() {
    install();
}

/// Runs [`install`] when the library (or a program linking it statically) is loaded, before any thread of the
/// program can be inside the library.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static INSTALL_AT_LOAD: extern "C" fn() = install_at_load;

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn registered_at_load() {
        assert!(crate::forksafe::registered(), "the .init_array entry did not register the fork handlers");
    }
}
