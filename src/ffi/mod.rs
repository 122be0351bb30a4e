//! The thin `extern "C"` skin over the safe core.
//!
//! Rules every exported function follows (enforced by `tests/it/boundary.rs`):
//! - its body is exactly one `hostfirst_boundary!` invocation, which catches panics, records the thread-local
//!   last error and converts `Result` to `hostfirst_status`;
//! - pointers are checked for NULL through the helpers of [`args`] before use, integers from C are validated;
//! - outputs are written only on success (enumerations also report the required count on `BUFFER_TOO_SMALL`);
//! - handles are registry ids, never raw addresses: a freed, stale or wrong-type handle gives `INVALID_HANDLE`.

#![allow(non_camel_case_types)]
// Exported functions take raw pointers from C by design; every one is NULL-checked by the helpers below.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

/// The one panic boundary. Every exported function's body is exactly one invocation:
///
/// ```ignore
/// hostfirst_boundary!("hostfirst_x", { ...; Ok(()) })                 // returns hostfirst_status
/// hostfirst_boundary!("hostfirst_y", default = 0, { ...; value })     // returns a value, `default` on panic
/// ```
///
/// It also gives the exported symbol its version node (`hostfirst_x@@HOSTFIRST_0.2`, see [`symbol_version!`]),
/// so a function added by anyone is versioned like the rest. A function C only gets by pointer (a DLPack
/// deleter, a callback) is not exported and has no symbol to version: it says `local`, as in
/// `hostfirst_boundary!(local "hostfirst_x_deleter", default = (), { ... })`. (Forgetting `local` there fails
/// the build with "default version symbol NAME@@HOSTFIRST_0.2 must be defined".)
macro_rules! hostfirst_boundary {
    (local $name:literal, default = $def:expr, $body:block) => {
        $crate::ffi::run_value($name, $def, || $body)
    };
    ($name:literal, default = $def:expr, $body:block) => {{
        $crate::ffi::symbol_version!($name);
        $crate::ffi::run_value($name, $def, || $body)
    }};
    ($name:literal, $body:block) => {{
        $crate::ffi::symbol_version!($name);
        $crate::ffi::run_status($name, || -> $crate::error::Result<()> { $body })
    }};
}

/// Binds the exported symbol `$name` to the version node of abi/hostfirst.map (`HOSTFIRST_SYMBOL_VERSION`,
/// read from the map by build.rs) with an assembler `.symver` directive, on ELF targets with symbol versions.
///
/// Why not the version script alone: rustc links every cdylib with its own anonymous version script naming each
/// export, and a name listed there stays unversioned whatever a second script says (lld), or the link fails
/// (GNU ld). A `.symver` binding wins over both scripts; the map only defines the node. `remove` drops the
/// unversioned alias from the object file, so the static library and the rlib define each function once (the
/// linker resolves plain `hostfirst_x` references to the default version `hostfirst_x@@NODE`).
macro_rules! symbol_version {
    ($name:literal) => {
        // An item (global_asm! is not a statement), nested in the exported function so that it lands in the
        // same object file as the function's definition (`.symver` needs the symbol defined there). Not in the
        // crate's own unit-test binary: an executable need not keep an exported function, and an optimised
        // build drops those it inlined everywhere, leaving `.symver` nothing to bind.
        #[cfg(all(hostfirst_symver, not(test)))]
        mod symver {
            ::core::arch::global_asm!(concat!(
                ".symver ",
                $name,
                ", ",
                $name,
                "@@",
                env!("HOSTFIRST_SYMBOL_VERSION"),
                ", remove"
            ));
        }
    };
}
pub(crate) use symbol_version;

/// Argument helpers (a leaf module; see its doc).
pub(crate) mod args;

// One module per C prefix, in the header's order (cbindgen emits functions in the order it reads them).

/// `hostfirst_status_*`, `hostfirst_last_*`, `hostfirst_fit_info`.
pub mod status;

/// `hostfirst_version*`, `hostfirst_build_info`.
pub mod version;

/// The handle registry and `hostfirst_handle_count`.
#[allow(dead_code)]
pub mod handle;

/// `hostfirst_backend_*`, `hostfirst_census_*`.
pub mod backend;

/// `hostfirst_device*`, `hostfirst_devices`, `hostfirst_target_parse`.
pub mod device;

/// The default-device stack: `hostfirst_scope_*`, `hostfirst_default_*`, `hostfirst_strict_*`.
pub mod scope;

/// `hostfirst_dtype_*`.
pub mod dtype;

/// `hostfirst_file_*`.
pub mod file;

/// `hostfirst_view_*`.
pub mod view;

/// `hostfirst_buffer_*`, `hostfirst_release_cached_memory`.
pub mod buffer;

/// `hostfirst_put_*`.
pub mod put;

/// `hostfirst_rules_*`.
pub mod rules;

/// `hostfirst_plan_*`.
pub mod plan;

/// `hostfirst_load_*` (whole-file placement).
pub mod load;

/// `hostfirst_load_entries`, `hostfirst_load_names`: a load's tensors in bulk.
pub mod load_bulk;

/// `hostfirst_gather_*` (open streams too: `hostfirst_gather_stream_push`, `_end_input`), `hostfirst_random_offsets`.
pub mod gather;

/// `*_to_dlpack` and the DLPack structs.
pub mod dlpack;

/// `hostfirst_shard_*`: meshes, sharding rules, shard plans and runs (shard-on-read).
pub mod shard;

/// `hostfirst_writer_*`: the streaming safetensors writer.
pub mod writer;

/// `hostfirst__test_*` (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub mod test_hooks;

// The whole C API at `hostfirst::ffi::*`, for Rust callers and tests that use it as C does.
pub use self::{
    backend::*, buffer::*, device::*, dlpack::*, dtype::*, file::*, gather::*, load::*, load_bulk::*, plan::*, put::*,
    rules::*, scope::*, shard::*, status::*, version::*, view::*, writer::*,
};
pub use handle::hostfirst_handle_count;
#[cfg(feature = "test-hooks")]
pub use test_hooks::*;

use crate::error::{Error, Result, Status};
use status::set_last_error;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

thread_local! {
    /// How many status-returning C calls this thread is inside (a callback may call back into the API).
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Leaves one level of [`DEPTH`] when dropped (also on a panic).
struct Depth;

impl Drop for Depth {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs a status-returning body inside the panic boundary. An outermost call (not one a callback makes from
/// inside another) is first a safe point for the DLPack releases kept while a CUDA graph capture was seen
/// (`hostfirst_core::device::cuda::capture`): no hostfirst lock is held there.
#[doc(hidden)]
pub fn run_status<F: FnOnce() -> Result<()>>(name: &'static str, f: F) -> Status {
    crate::fork_handlers::install();
    let outermost = DEPTH.try_with(|d| d.replace(d.get() + 1) == 0).unwrap_or(false);
    let _depth = Depth;
    let f = move || {
        if outermost {
            hostfirst_core::device::cuda::capture::safe_point();
        }
        f()
    };
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => {
            set_last_error(&e);
            e.status()
        }
        Err(p) => {
            let e = Error::new(
                Status::Panic,
                format!("{name}: internal panic caught at the C boundary: {}", panic_message(&*p)),
            );
            set_last_error(&e);
            Status::Panic
        }
    }
}

/// Runs a value-returning body inside the panic boundary; a panic yields `default`.
#[doc(hidden)]
pub fn run_value<T, F: FnOnce() -> T>(name: &'static str, default: T, f: F) -> T {
    crate::fork_handlers::install();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let e = Error::new(
                Status::Panic,
                format!("{name}: internal panic caught at the C boundary: {}", panic_message(&*p)),
            );
            set_last_error(&e);
            default
        }
    }
}
