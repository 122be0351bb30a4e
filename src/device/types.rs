//! The plain values of the device layer: [`Device`] and [`DeviceKind`], a backend's [`BackendStatus`] and a
//! device's static [`DeviceInfo`].
//!
//! A leaf: it imports nothing from the rest of the crate, so the census, the CUDA backend and the C API can
//! all use these types without importing one another.

use std::fmt;

/// Where memory lives. The numbers equal DLPack's `DLDeviceType` values.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// Host memory (DLPack kDLCPU).
    Cpu = 1,
    /// CUDA device memory (DLPack kDLCUDA).
    Cuda = 2,
    /// Page-locked host memory registered with CUDA (DLPack kDLCUDAHost).
    CudaHost = 3,
}

impl DeviceKind {
    /// Validates an integer from C.
    pub fn from_i32(v: i32) -> Option<DeviceKind> {
        match v {
            1 => Some(DeviceKind::Cpu),
            2 => Some(DeviceKind::Cuda),
            3 => Some(DeviceKind::CudaHost),
            _ => None,
        }
    }

    /// Lower-case name as used in specs and JSON: `cpu`, `cuda`, `cuda_host`.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::CudaHost => "cuda_host",
        }
    }

    /// True when memory of this kind is directly addressable by the host.
    pub fn is_host(self) -> bool {
        matches!(self, DeviceKind::Cpu | DeviceKind::CudaHost)
    }
}

/// A device: a kind and an ordinal within the kind (always 0 for `cpu` and `cuda_host`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    /// The kind.
    pub kind: DeviceKind,
    /// The ordinal (CUDA ordinal after `CUDA_VISIBLE_DEVICES` renumbering).
    pub ordinal: u32,
}

impl Device {
    /// The host CPU device, `cpu:0`.
    pub const CPU: Device = Device { kind: DeviceKind::Cpu, ordinal: 0 };
    /// Page-locked host memory, `cuda_host`.
    pub const CUDA_HOST: Device = Device { kind: DeviceKind::CudaHost, ordinal: 0 };

    /// CUDA device `n`.
    pub fn cuda(n: u32) -> Device {
        Device { kind: DeviceKind::Cuda, ordinal: n }
    }
}

impl fmt::Display for Device {
    /// The canonical spec: `cpu:0`, `cuda:N`, `cuda_host`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DeviceKind::Cpu => write!(f, "cpu:{}", self.ordinal),
            DeviceKind::Cuda => write!(f, "cuda:{}", self.ordinal),
            DeviceKind::CudaHost => write!(f, "cuda_host"),
        }
    }
}

/// Why a backend is or is not usable. Values cross the C ABI; never renumber.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// The driver failed to initialise (the reason carries its error name), or it cannot be used in this
    /// process (a child forked after the parent initialised CUDA).
    InitFailed = 5,
    /// The driver is older than hostfirst needs.
    DriverTooOld = 6,
}

impl BackendStatus {
    /// The JSON / CLI name: `available`, `not_compiled`, `library_not_found`, ...
    pub fn name(self) -> &'static str {
        match self {
            BackendStatus::Available => "available",
            BackendStatus::NotCompiled => "not_compiled",
            BackendStatus::LibraryNotFound => "library_not_found",
            BackendStatus::NoDevices => "no_devices",
            BackendStatus::HiddenByEnv => "hidden_by_env",
            BackendStatus::InitFailed => "init_failed",
            BackendStatus::DriverTooOld => "driver_too_old",
        }
    }
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
    /// CUDA: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, or `MIG-…` for a MIG instance (as `nvidia-smi -L`
    /// prints it and `CUDA_VISIBLE_DEVICES` accepts it); empty for cpu.
    pub uuid: String,
    /// CUDA: PCI bus id (`0000:3b:00.0`); empty for cpu.
    pub pci_bus_id: String,
    /// CUDA: compute capability (major, minor); (0, 0) for cpu.
    pub compute_capability: (i32, i32),
    /// CUDA: number of multiprocessors; cpu: logical CPUs available to the process.
    pub multiprocessor_count: u32,
}

impl DeviceInfo {
    /// True for a MIG instance (its UUID starts with `MIG-`).
    pub fn is_mig(&self) -> bool {
        self.uuid.starts_with("MIG-")
    }
}
