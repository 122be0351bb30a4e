//! Devices: the `{kind, ordinal}` value, device specs (`cpu`, `cuda:1`, `gpu`, `cuda:GPU-<uuid>`, `cuda_host`),
//! the backend census, device properties, live memory readings, and the fit check made before allocating
//! ([`fit`]).
//!
//! Layers, bottom up (no module imports one above it):
//! - [`types`] (the plain values) and [`platforms`] (`HOSTFIRST_PLATFORMS`): leaves;
//! - [`spec`] (text forms), [`host`] (host memory and CPU facts);
//! - [`cuda`]: the CUDA backend, which owns its probe result;
//! - [`census`]: every backend's status, built from the CUDA probe; [`gds`] (GPUDirect Storage), probed
//!   only when its entry is asked for, on top of the census;
//! - this module: resolving specs against the census and live memory readings; [`fit`] on top of them.

pub mod census;
pub mod cuda;
pub mod fit;
pub mod gds;
pub mod host;
pub mod platforms;
pub mod spec;
pub mod types;

use crate::error::Result;

pub use census::{census, Backend, Census};
pub use spec::{CudaSelector, DeviceSpec, ACCEPTED_SPECS};
pub use types::{BackendStatus, Device, DeviceInfo, DeviceKind};

impl Device {
    /// Parses a spec and resolves it against the census: the device must exist and its backend be available.
    /// `cpu` and `cpu:0` resolve without taking the census (no CUDA driver is loaded for them).
    pub fn parse(spec: &str) -> Result<Device> {
        let parsed = DeviceSpec::parse(spec)?;
        resolve(&parsed, spec)
    }

    /// Checks that this device exists now (its backend is available and the ordinal in range). `cpu:0` is
    /// always present and needs no census.
    pub fn validate(self) -> Result<Device> {
        let spec = match self.kind {
            DeviceKind::CPU => DeviceSpec::Cpu(self.ordinal),
            DeviceKind::CUDA => DeviceSpec::Cuda(CudaSelector::Ordinal(self.ordinal)),
            DeviceKind::CUDA_HOST => DeviceSpec::CudaHost,
        };
        resolve(&spec, &self.to_string())
    }
}

/// Resolves a parsed spec: `cpu:0` directly, anything else against the census. `text` is the spec as given.
pub fn resolve(spec: &DeviceSpec, text: &str) -> Result<Device> {
    match census::resolve_without_census(spec) {
        Some(d) => Ok(d),
        None => census().resolve(spec, text),
    }
}

impl DeviceInfo {
    /// Live (free, total) bytes; see [`memory`].
    pub fn memory(&self) -> Result<(u64, u64)> {
        memory(self.device)
    }
}

/// Live (free, total) bytes of a device. cpu and `cuda_host`: `MemAvailable` / `MemTotal`. CUDA: see
/// [`cuda::mem_info`] (NVML without a context where it can, else `cuMemGetInfo` in the device's primary
/// context).
pub fn memory(device: Device) -> Result<(u64, u64)> {
    match device.kind {
        DeviceKind::CPU | DeviceKind::CUDA_HOST => {
            let (total, avail) = host::memory();
            Ok((avail, total))
        }
        DeviceKind::CUDA => cuda::mem_info(device.ordinal),
    }
}

/// Live (free, total) bytes of a device as an allocation on it will see them: [`memory`], except that CUDA
/// reads `cuMemGetInfo` in the device's primary context (retaining it: the allocation needs it anyway, and
/// creating it takes device memory that a reading without it would count as free).
pub fn memory_for_allocation(device: Device) -> Result<(u64, u64)> {
    match device.kind {
        DeviceKind::CUDA => cuda::context_mem_info(device.ordinal),
        _ => memory(device),
    }
}
