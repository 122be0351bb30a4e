//! The CUDA driver, opened at run time (no link-time dependency: the library builds and runs without CUDA):
//! the census probe, device properties, live memory, and a small safe wrapper (contexts, device and pinned
//! memory, registrations, streams, events, copies) that the placement layer builds on.
//!
//! Rules this module keeps:
//! - Nothing loads the driver library until something needs CUDA: the census, a CUDA spec, resolving a
//!   built-in default that could be a GPU, or a wrapper call. `HOSTFIRST_PLATFORMS` and `CUDA_VISIBLE_DEVICES`
//!   are checked before the library is opened; opening files and cpu work never open it.
//! - The driver is `libcuda.so.1`, tried before `libcuda.so` (a toolkit stub of that name must not win); see
//!   [`driver`]. Every entry point is resolved once, up front; a missing one is an error, never a panic. The
//!   probe still runs under `catch_unwind` as a last resort.
//! - This module owns its probe result ([`status`]); the census reads it, never the other way round.
//! - Taking the census creates no context and allocates nothing. Free memory comes from NVML where it can
//!   ([`nvml`], no context); the first call that needs device memory, `cuMemGetInfo` or a stream retains the
//!   device's **primary context** (once per device, kept for the process lifetime, shared with the CUDA
//!   runtime and frameworks that use primary contexts). Work for a device goes through that device's context:
//!   pinned staging and registrations for a put to cuda:3 never create a context on cuda:0.
//! - Wrapper operations make the device's context current only for the duration of the call and then
//!   restore whatever context the calling thread had (the CUDA runtime derives its current device from it).
//!   [`Context::bind`] is the explicit "make it current and leave it" for callers that want that.
//! - After `fork()`, in a child of a process that had initialised CUDA, every wrapper call is `UNAVAILABLE`
//!   with a reason saying so (the driver cannot be used after fork) and the census reports CUDA as unusable;
//!   cpu work goes on.
//!
//! The probe lives in [`probe`]; the wrapper types are documented in [`memory`], [`copy`] and [`stream`] and
//! re-exported here; [`inflight`] holds the one rule for errors of asynchronous work that every path follows. Modules below this one never import it back.

pub mod capture;
pub mod copy;
pub mod driver;
pub mod event;
pub mod inflight;
pub mod memory;
pub mod nvml;
pub mod probe;
pub mod stream;

use crate::error::Result;

pub use driver::{format_driver_version, format_uuid, is_mig_name};
pub use event::Event;
pub use inflight::{CopyQueue, Failed, InFlight};
pub use memory::{
    gpu_direct_rdma_supported, host_register_supported, read_only_register_supported, Context, DeviceMemory,
    HostRegistration, PinnedHostMemory,
};
pub use probe::{
    forked_reason, hidden_by_visible_devices, info, library_not_found_reason, named_library_reason, probe, status,
    CudaProbe,
};
pub use stream::{HostBytes, HostBytesMut, Stream};

/// Live (free, total) memory of CUDA device `ordinal`, for reporting.
///
/// Creates no context where it can: when this process has not retained the device's primary context, NVML
/// (`nvmlDeviceGetMemoryInfo`, device-wide, by the device's `GPU-`/`MIG-` UUID) answers. Needs a context
/// otherwise - when the context is already retained (then `cuMemGetInfo_v2` in it, which is as cheap and
/// exact) or when NVML is missing or does not know the device (then this retains the primary context, kept for
/// the process lifetime, like [`context_mem_info`]).
pub fn mem_info(ordinal: u32) -> Result<(u64, u64)> {
    probe::api()?;
    probe::check_ordinal(ordinal)?;
    if !Context::is_retained(ordinal) {
        if let Some(m) = info(ordinal).and_then(|d| nvml::memory_by_uuid(&d.uuid)) {
            return Ok(m);
        }
    }
    context_mem_info(ordinal)
}

/// Live (free, total) memory of CUDA device `ordinal` as an allocation will see it (`cuMemGetInfo_v2` in the
/// device's primary context, retaining it on first use: the fit check before an allocation uses this, since
/// the allocation needs the context anyway and creating it takes memory). The context is current only for
/// the call; the calling thread's previous context is restored.
pub fn context_mem_info(ordinal: u32) -> Result<(u64, u64)> {
    let ctx = Context::get(ordinal)?;
    let api = probe::api()?;
    let _current = ctx.enter()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; the device's context is current on this thread.
    let r = unsafe { (api.mem_get_info)(&mut free, &mut total) };
    api.check(r, || format!("cuMemGetInfo_v2(cuda:{ordinal})"))?;
    Ok((free as u64, total as u64))
}
