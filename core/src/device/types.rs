//! The plain values of the device layer: [`Device`] and [`DeviceKind`], a backend's [`BackendStatus`] and a
//! device's static [`DeviceInfo`].
//!
//! A leaf: it imports nothing from the rest of the crate, so the census, the CUDA backend and the C API can
//! all use these types without importing one another. `DeviceKind` and `BackendStatus` are the one definition
//! of their C enums (cbindgen exports them).

use std::fmt;
use strum::{FromRepr, IntoStaticStr, VariantArray};

// The one definition of the device kinds: cbindgen exports it as `hostfirst_device_kind`
// (`HOSTFIRST_DEVICE_<variant>`); the names and the mapping from C integers are derived from it (strum).
/// Where memory lives: the kinds of `hostfirst_device.kind` (an `int32_t`, checked on every call). The
/// values equal DLPack's `DLDeviceType` values.
/// cbindgen:prefix-with-name=false
/// cbindgen:rename-all=prefix:HOSTFIRST_DEVICE_
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, FromRepr, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "lowercase")]
#[allow(non_camel_case_types)]
pub enum DeviceKind {
    /// Host memory (equals DLPack `kDLCPU`).
    CPU = 1,
    /// CUDA device memory (equals DLPack `kDLCUDA`).
    CUDA = 2,
    /// Page-locked host memory registered with CUDA (equals DLPack `kDLCUDAHost`).
    CUDA_HOST = 3,
}

impl DeviceKind {
    /// Validates an integer from C.
    pub fn from_i32(v: i32) -> Option<DeviceKind> {
        DeviceKind::from_repr(v)
    }

    /// Lower-case name as used in specs and JSON: `cpu`, `cuda`, `cuda_host`.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// True when memory of this kind is directly addressable by the host.
    pub fn is_host(self) -> bool {
        matches!(self, DeviceKind::CPU | DeviceKind::CUDA_HOST)
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
    pub const CPU: Device = Device { kind: DeviceKind::CPU, ordinal: 0 };
    /// Page-locked host memory, `cuda_host`.
    pub const CUDA_HOST: Device = Device { kind: DeviceKind::CUDA_HOST, ordinal: 0 };

    /// CUDA device `n`.
    pub fn cuda(n: u32) -> Device {
        Device { kind: DeviceKind::CUDA, ordinal: n }
    }
}

impl fmt::Display for Device {
    /// The canonical spec: `cpu:0`, `cuda:N`, `cuda_host`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DeviceKind::CPU => write!(f, "cpu:{}", self.ordinal),
            DeviceKind::CUDA => write!(f, "cuda:{}", self.ordinal),
            DeviceKind::CUDA_HOST => write!(f, "cuda_host"),
        }
    }
}

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
    /// The backend's driver library could not be loaded (the reason names the libraries tried).
    LibraryNotFound = 2,
    /// The driver loaded but reports no devices.
    NoDevices = 3,
    /// Hidden by the environment (`HOSTFIRST_PLATFORMS`, `CUDA_VISIBLE_DEVICES`).
    HiddenByEnv = 4,
    /// The driver failed to initialise (the reason carries its error name), or it cannot be used in this
    /// process (a child forked after its parent initialised CUDA; the reason says so).
    InitFailed = 5,
    /// The driver is older than hostfirst needs (a driver for CUDA 11.4 or newer; the reason gives both
    /// versions).
    DriverTooOld = 6,
    /// GPUDirect Storage (`gds`): cuFile's compatibility mode is forced (`CUFILE_FORCE_COMPAT_MODE`, or
    /// `"force_compat_mode": true` in the cufile.json that `CUFILE_ENV_PATH_JSON` names, else /etc/cufile.json):
    /// reads would go through host memory, not straight to the GPU. New in 1.1.
    CompatModeForced = 7,
    /// GPUDirect Storage: the nvidia-fs kernel module is not loaded (no /proc/driver/nvidia-fs). New in 1.1.
    ModuleMissing = 8,
    /// GPUDirect Storage: this platform cannot have it (WSL). New in 1.1.
    UnsupportedPlatform = 9,
    /// GPUDirect Storage: /run/udev cannot be read (a container without it), so cuFile cannot find the
    /// storage devices. New in 1.1.
    UdevUnreadable = 10,
    /// GPUDirect Storage: no CUDA device supports GPUDirect RDMA (`CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`
    /// is 0 on every device). New in 1.1.
    NoRdmaSupport = 11,
}

impl BackendStatus {
    /// The JSON / CLI name: `available`, `not_compiled`, `library_not_found`, ...
    pub fn name(self) -> &'static str {
        self.into()
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
