//! The backend census: every backend hostfirst knows, whether it is usable and why not, and its devices.
//!
//! The census is taken once per process, on first use, and cached: the environment (`HOSTFIRST_PLATFORMS`,
//! `CUDA_VISIBLE_DEVICES`) is read then. Taking it loads the CUDA driver (unless `HOSTFIRST_PLATFORMS` or
//! `CUDA_VISIBLE_DEVICES` hides CUDA) but never creates a CUDA context and never allocates device memory.
//! Work that only needs the host (opening files, cpu specs, puts and gathers on cpu) never takes it.
//!
//! In a child forked after CUDA was initialised, the census reports CUDA as unusable (the driver cannot be
//! used after `fork()`), with a reason saying so; cpu stays available.

use super::cuda;
use super::host;
use super::platforms::{platforms, Platforms};
use super::spec::{CudaSelector, DeviceSpec, ACCEPTED_SPECS};
pub use super::types::Backend;
use super::types::{BackendStatus, Device, DeviceInfo, DeviceKind};
use crate::error::{Error, Result, Status};
use crate::forksafe::InitOnce;
use std::ffi::OsStr;

pub use super::platforms::BACKEND_NAMES;

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

/// The process census, taken on first use. In a child forked after CUDA was initialised, a census that says
/// CUDA cannot be used in this process.
pub fn census() -> &'static Census {
    static CENSUS: InitOnce<Census> = InitOnce::new();
    static FORKED: InitOnce<Census> = InitOnce::new();
    let c = CENSUS.get_or_init(|| build(platforms(), cuda::status()));
    match cuda::forked_reason() {
        None => c,
        Some(reason) => FORKED.get_or_init(|| {
            let mut f = c.clone();
            f.devices.retain(|d| d.device.kind != DeviceKind::CUDA);
            if let Some(b) = f.backends.iter_mut().find(|b| b.name == "cuda") {
                b.status = BackendStatus::InitFailed;
                b.reason = reason;
                b.device_count = 0;
            }
            f
        }),
    }
}

/// Takes a census now with the given `HOSTFIRST_PLATFORMS` value (None: unset). CUDA, unless that value
/// hides it, is the process's probe (the driver is loaded once per process).
pub fn take_census(platforms: Option<&OsStr>) -> Census {
    let p = Platforms::parse(platforms);
    let hidden;
    let probe = match p.hidden_reason("cuda") {
        Some(reason) => {
            hidden = cuda::CudaProbe::unavailable(BackendStatus::HiddenByEnv, reason, String::new());
            &hidden
        }
        None => cuda::status(),
    };
    build(&p, probe)
}

fn build(p: &Platforms, probe: &cuda::CudaProbe) -> Census {
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
        reason: if p.shows("cpu") {
            String::new()
        } else {
            "cpu cannot be hidden: host memory is always available".to_string()
        },
        driver_version: String::new(),
        device_count: 1,
    }];
    let mut devices = vec![cpu_info];
    let available = probe.status == BackendStatus::Available;
    backends.push(Backend {
        name: "cuda",
        status: probe.status,
        reason: probe.reason.clone(),
        driver_version: probe.driver_version.clone(),
        device_count: if available { probe.devices.len() as u32 } else { 0 },
    });
    if available {
        devices.extend(probe.devices.iter().cloned());
    }
    Census { backends, devices, warnings: p.warnings.clone() }
}

/// Resolves a spec that needs no census (`cpu`, `cpu:0`), or None when the census must decide. Keeps
/// cpu-only work from loading the CUDA driver.
pub fn resolve_without_census(spec: &DeviceSpec) -> Option<Device> {
    matches!(spec, DeviceSpec::Cpu(0)).then_some(Device::CPU)
}

impl Census {
    /// The backend with this name (`gds` is probed on first use: [`super::gds`]).
    pub fn backend(&self, name: &str) -> Option<&Backend> {
        if name == "gds" {
            return Some(super::gds::backend(self.cuda()));
        }
        self.backends.iter().find(|b| b.name == name)
    }

    /// The cuda entry, which the gds probe reads (GPUDirect needs CUDA devices).
    fn cuda(&self) -> &Backend {
        self.backends.iter().find(|b| b.name == "cuda").expect("the census has cuda")
    }

    /// How many backends there are: cpu, cuda and gds ([`BACKEND_NAMES`]), whatever their status.
    pub fn backend_count(&self) -> usize {
        self.backends.len() + 1
    }

    /// Backend `index` in census order: cpu, cuda, then gds (GPUDirect Storage, probed the first time it is
    /// asked for here: taking the census never loads libcufile).
    pub fn backend_at(&self, index: usize) -> Option<&Backend> {
        match index.checked_sub(self.backends.len()) {
            None => self.backends.get(index),
            Some(0) => Some(super::gds::backend(self.cuda())),
            Some(_) => None,
        }
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
                            CudaSelector::Uuid(u) => uuid_hex(&d.uuid) == u.replace('-', ""),
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

/// The 32 hex digits of a `GPU-…` or `MIG-…` UUID, lower-case.
fn uuid_hex(uuid: &str) -> String {
    let lower = uuid.to_ascii_lowercase();
    let bare = lower.strip_prefix("gpu-").or_else(|| lower.strip_prefix("mig-")).unwrap_or(&lower);
    bare.replace('-', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_always_first_and_available() {
        let c = take_census(Some(OsStr::new("cpu")));
        assert_eq!(c.backends[0].name, "cpu");
        assert_eq!(c.backends[0].status, BackendStatus::Available);
        assert_eq!(c.devices[0].device, Device::CPU);
        assert!(c.devices[0].total_memory > 0);
        assert_eq!(c.backend_count(), BACKEND_NAMES.len());
        assert_eq!(c.backends.len() + 1, BACKEND_NAMES.len(), "gds is not part of the census taken");
    }

    #[test]
    fn platforms_hides_cuda_and_warns_on_unknown() {
        let c = take_census(Some(OsStr::new("cpu, tpu")));
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
        let c = take_census(Some(OsStr::new("cpu")));
        assert_eq!(c.resolve(&DeviceSpec::Cpu(0), "cpu").unwrap(), Device::CPU);
        assert_eq!(c.resolve(&DeviceSpec::Cpu(1), "cpu:1").unwrap_err().status(), Status::NoSuchDevice);
        assert_eq!(c.resolve(&DeviceSpec::CudaHost, "cuda_host").unwrap_err().status(), Status::Unavailable);
        assert_eq!(resolve_without_census(&DeviceSpec::Cpu(0)), Some(Device::CPU));
        assert_eq!(resolve_without_census(&DeviceSpec::Cpu(1)), None);
        assert_eq!(resolve_without_census(&DeviceSpec::CudaHost), None);
    }

    #[test]
    fn uuids_of_both_kinds() {
        assert_eq!(uuid_hex("GPU-A0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"), "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
        assert_eq!(uuid_hex("MIG-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"), "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
    }
}
