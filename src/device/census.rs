//! The backend census: every backend hostfirst knows, whether it is usable and why not, and its devices.
//!
//! The census is taken once per process, on first use, and cached: the environment (`HOSTFIRST_PLATFORMS`,
//! `CUDA_VISIBLE_DEVICES`) is read then. Taking it never creates a CUDA context and never allocates device memory.

use super::cuda;
use super::host;
use super::{CudaSelector, Device, DeviceKind, DeviceSpec, ACCEPTED_SPECS};
use crate::error::{Error, Result, Status};
use std::sync::OnceLock;
use strum::{FromRepr, IntoStaticStr, VariantArray};

// The one definition of the backend statuses: cbindgen exports it as `hostfirst_backend_status`
// (`HOSTFIRST_BACKEND_STATUS_*`); the names (`hostfirst_backend_status_name`, JSON, CLI) and the list of values
// are derived from it (strum).
/// Why a backend is or is not usable: the values of `hostfirst_backend_info.status` (a `uint32_t`). Stable,
/// never renumbered.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, FromRepr, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum BackendStatus {
    /// Usable.
    Available = 0,
    /// Support was not compiled into this build.
    NotCompiled = 1,
    /// The backend's driver library could not be loaded (the reason lists the names searched).
    LibraryNotFound = 2,
    /// The driver loaded but reports no devices.
    NoDevices = 3,
    /// Hidden by the environment (`HOSTFIRST_PLATFORMS`, `CUDA_VISIBLE_DEVICES`).
    HiddenByEnv = 4,
    /// The driver failed to initialise (the reason carries its error name).
    InitFailed = 5,
    /// The driver is older than hostfirst needs (a driver for CUDA 11.4 or newer; the reason gives both
    /// versions).
    DriverTooOld = 6,
}

impl BackendStatus {
    /// The JSON / CLI name: `available`, `not_compiled`, `library_not_found`, ...
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// One backend in the census.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// `cpu` or `cuda`.
    pub name: &'static str,
    /// Usable or why not.
    pub status: BackendStatus,
    /// Human reason; empty when available.
    pub reason: String,
    /// Driver version as `major.minor` when known, else empty.
    pub driver_version: String,
    /// Number of devices the backend exposes (0 unless available).
    pub device_count: u32,
}

/// Static properties of one device. Free memory is live: see [`DeviceInfo::memory`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device.
    pub device: Device,
    /// Marketing name (CUDA) or CPU model (cpu).
    pub name: String,
    /// Total memory in bytes (CUDA: device memory; cpu: MemTotal).
    pub total_memory: u64,
    /// CUDA: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`; empty for cpu.
    pub uuid: String,
    /// CUDA: PCI bus id (`0000:3b:00.0`); empty for cpu.
    pub pci_bus_id: String,
    /// CUDA: compute capability (major, minor); (0, 0) for cpu.
    pub compute_capability: (i32, i32),
    /// CUDA: number of multiprocessors; cpu: logical CPUs available to the process.
    pub multiprocessor_count: u32,
}

impl DeviceInfo {
    /// Live (free, total) bytes. cpu: MemAvailable / MemTotal. CUDA: `cuMemGetInfo`, which needs a context:
    /// this retains the device's primary context (created on first use, kept for the process lifetime).
    pub fn memory(&self) -> Result<(u64, u64)> {
        memory(self.device)
    }
}

/// Live (free, total) bytes of a device; see [`DeviceInfo::memory`]. `cuda_host` reports host memory.
pub fn memory(device: Device) -> Result<(u64, u64)> {
    match device.kind {
        DeviceKind::CPU | DeviceKind::CUDA_HOST => {
            let (total, avail) = host::memory();
            Ok((avail, total))
        }
        DeviceKind::CUDA => cuda::mem_info(device.ordinal),
    }
}

/// The census: every backend and every device of the available backends.
#[derive(Clone, Debug)]
pub struct Census {
    /// All backends, cpu first.
    pub backends: Vec<Backend>,
    /// All devices of available backends: `cpu:0` first, then `cuda:0..N`.
    pub devices: Vec<DeviceInfo>,
    /// Problems with the environment that did not stop the census (e.g. unknown names in `HOSTFIRST_PLATFORMS`).
    pub warnings: Vec<String>,
}

/// Backends hostfirst knows, in census order.
pub const BACKEND_NAMES: &[&str] = &["cpu", "cuda"];

/// The process census, taken on first use.
pub fn census() -> &'static Census {
    static CENSUS: OnceLock<Census> = OnceLock::new();
    CENSUS.get_or_init(|| take_census(std::env::var("HOSTFIRST_PLATFORMS").ok().as_deref()))
}

/// Takes a census now with the given `HOSTFIRST_PLATFORMS` value (None: unset).
pub fn take_census(platforms: Option<&str>) -> Census {
    let mut warnings = Vec::new();
    let mut allowed: Option<Vec<String>> = None;
    if let Some(p) = platforms {
        let names: Vec<String> =
            p.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect();
        for n in &names {
            if !BACKEND_NAMES.contains(&n.as_str()) && n != "gpu" {
                warnings.push(format!(
                    "HOSTFIRST_PLATFORMS names unknown backend '{n}' (known: {})",
                    BACKEND_NAMES.join(", ")
                ));
            }
        }
        if !names.is_empty() {
            allowed = Some(names);
        }
    }
    let shown = |name: &str| match &allowed {
        None => true,
        Some(list) => list.iter().any(|n| n == name || (name == "cuda" && n == "gpu")),
    };

    let (mem_total, _) = host::memory();
    let cpu_info = DeviceInfo {
        device: Device::CPU,
        name: host::cpu_name(),
        total_memory: mem_total,
        uuid: String::new(),
        pci_bus_id: String::new(),
        compute_capability: (0, 0),
        multiprocessor_count: host::cpu_count() as u32,
    };
    // The host is always a backend: host-first means there is always somewhere to put a tensor.
    let mut backends = vec![Backend {
        name: "cpu",
        status: BackendStatus::Available,
        reason: if shown("cpu") {
            String::new()
        } else {
            "cpu cannot be hidden: host memory is always available".to_string()
        },
        driver_version: String::new(),
        device_count: 1,
    }];
    let mut devices = vec![cpu_info];

    if !shown("cuda") {
        backends.push(Backend {
            name: "cuda",
            status: BackendStatus::HiddenByEnv,
            reason: format!("hidden by HOSTFIRST_PLATFORMS={}", platforms.unwrap_or("")),
            driver_version: String::new(),
            device_count: 0,
        });
    } else {
        let probe = cuda::probe();
        backends.push(Backend {
            name: "cuda",
            status: probe.status,
            reason: probe.reason,
            driver_version: probe.driver_version,
            device_count: if probe.status == BackendStatus::Available { probe.devices.len() as u32 } else { 0 },
        });
        if probe.status == BackendStatus::Available {
            devices.extend(probe.devices);
        }
    }
    Census { backends, devices, warnings }
}

impl Census {
    /// The backend with this name.
    pub fn backend(&self, name: &str) -> Option<&Backend> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// True when CUDA is available with at least one device.
    pub fn cuda_available(&self) -> bool {
        self.backend("cuda").map(|b| b.status == BackendStatus::Available && b.device_count > 0).unwrap_or(false)
    }

    /// Properties of a device present in the census.
    pub fn info(&self, device: Device) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.device == device)
    }

    /// Comma-separated specs of the devices present, for messages.
    pub fn present(&self) -> String {
        let mut v: Vec<String> = self.devices.iter().map(|d| d.device.to_string()).collect();
        if self.cuda_available() {
            v.push("cuda_host".into());
        }
        v.join(", ")
    }

    fn cuda_unavailable(&self, spec: &str) -> Error {
        let why = self
            .backend("cuda")
            .map(|b| format!("{} ({})", b.status.name(), b.reason))
            .unwrap_or_else(|| "not known".into());
        Error::new(
            Status::Unavailable,
            format!("device '{spec}': the cuda backend is not available: {why}; devices present: {}", self.present()),
        )
    }

    /// Resolves a parsed spec to a present device. `text` is the spec as given, for messages.
    pub fn resolve(&self, spec: &DeviceSpec, text: &str) -> Result<Device> {
        let text = text.trim();
        match spec {
            DeviceSpec::Cpu(0) => Ok(Device::CPU),
            DeviceSpec::Cpu(n) => Err(Error::new(
                Status::NoSuchDevice,
                format!("device '{text}': there is only cpu:0, not cpu:{n}; devices present: {}", self.present()),
            )),
            DeviceSpec::CudaHost => {
                if self.cuda_available() {
                    Ok(Device::CUDA_HOST)
                } else {
                    Err(self.cuda_unavailable(text))
                }
            }
            DeviceSpec::Cuda(sel) => {
                if !self.cuda_available() {
                    return Err(self.cuda_unavailable(text));
                }
                let found = self.devices.iter().find(|d| {
                    d.device.kind == DeviceKind::CUDA
                        && match sel {
                            CudaSelector::Ordinal(n) => d.device.ordinal == *n,
                            CudaSelector::Uuid(u) => {
                                d.uuid.to_ascii_lowercase().trim_start_matches("gpu-").replace('-', "")
                                    == u.replace('-', "")
                            }
                        }
                });
                found.map(|d| d.device).ok_or_else(|| {
                    Error::new(
                        Status::NoSuchDevice,
                        format!(
                            "device '{text}' is not present; devices present: {}; accepted forms: {ACCEPTED_SPECS}",
                            self.present()
                        ),
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_always_first_and_available() {
        let c = take_census(None);
        assert_eq!(c.backends[0].name, "cpu");
        assert_eq!(c.backends[0].status, BackendStatus::Available);
        assert_eq!(c.devices[0].device, Device::CPU);
        assert!(c.devices[0].total_memory > 0);
        assert_eq!(c.backends.len(), BACKEND_NAMES.len());
    }

    #[test]
    fn platforms_hides_cuda_and_warns_on_unknown() {
        let c = take_census(Some("cpu, tpu"));
        let cuda = c.backend("cuda").unwrap();
        assert_eq!(cuda.status, BackendStatus::HiddenByEnv);
        assert!(cuda.reason.contains("HOSTFIRST_PLATFORMS"));
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("tpu"));
        let e = c.resolve(&DeviceSpec::parse("cuda:0").unwrap(), "cuda:0").unwrap_err();
        assert_eq!(e.status(), Status::Unavailable);
        assert!(e.message().contains("hidden_by_env"), "{}", e.message());
        assert!(e.message().contains("cpu:0"));
    }

    #[test]
    fn cpu_ordinals() {
        let c = take_census(Some("cpu"));
        assert_eq!(c.resolve(&DeviceSpec::Cpu(0), "cpu").unwrap(), Device::CPU);
        assert_eq!(c.resolve(&DeviceSpec::Cpu(1), "cpu:1").unwrap_err().status(), Status::NoSuchDevice);
        assert_eq!(c.resolve(&DeviceSpec::CudaHost, "cuda_host").unwrap_err().status(), Status::Unavailable);
    }
}
