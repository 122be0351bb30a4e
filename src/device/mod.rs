//! Devices: the `{kind, ordinal}` value, device specs (`cpu`, `cuda:1`, `gpu`, `cuda:GPU-<uuid>`, `cuda_host`),
//! the backend census, device properties, and memory readings with the fit check made before allocating
//! ([`fit`]).

pub mod census;
/// cbindgen:ignore
pub mod cuda;
/// cbindgen:ignore
pub mod fit;
/// cbindgen:ignore
pub mod host;

use crate::error::{Error, Result, Status};
use std::fmt;
use strum::{FromRepr, IntoStaticStr, VariantArray};

pub use census::{census, Backend, BackendStatus, Census, DeviceInfo};

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

/// cbindgen:ignore
impl Device {
    /// The host CPU device, `cpu:0`.
    pub const CPU: Device = Device { kind: DeviceKind::CPU, ordinal: 0 };
    /// Page-locked host memory, `cuda_host`.
    pub const CUDA_HOST: Device = Device { kind: DeviceKind::CUDA_HOST, ordinal: 0 };

    /// CUDA device `n`.
    pub fn cuda(n: u32) -> Device {
        Device { kind: DeviceKind::CUDA, ordinal: n }
    }

    /// Parses a spec and resolves it against the census: the device must exist and its backend be available.
    pub fn parse(spec: &str) -> Result<Device> {
        let parsed = DeviceSpec::parse(spec)?;
        census().resolve(&parsed, spec)
    }

    /// Checks that this device exists now (its backend is available and the ordinal in range).
    pub fn validate(self) -> Result<Device> {
        let spec = match self.kind {
            DeviceKind::CPU => DeviceSpec::Cpu(self.ordinal),
            DeviceKind::CUDA => DeviceSpec::Cuda(CudaSelector::Ordinal(self.ordinal)),
            DeviceKind::CUDA_HOST => DeviceSpec::CudaHost,
        };
        census().resolve(&spec, &self.to_string())
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

/// How a CUDA device is selected in a spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaSelector {
    /// By ordinal (`cuda`, `cuda:N`, `gpu:N`).
    Ordinal(u32),
    /// By UUID (`cuda:GPU-xxxxxxxx-...`), stable under `CUDA_VISIBLE_DEVICES` renumbering. Stored lower-case
    /// without the `GPU-` prefix.
    Uuid(String),
}

/// A syntactically valid device spec, not yet checked against the census.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `cpu` or `cpu:N`.
    Cpu(u32),
    /// `cuda`, `cuda:N`, `gpu`, `gpu:N`, `cuda:GPU-<uuid>`.
    Cuda(CudaSelector),
    /// `cuda_host` (also `cuda_host:0`, `pinned`).
    CudaHost,
}

/// The accepted spec forms, quoted in error messages.
pub const ACCEPTED_SPECS: &str = "cpu, cpu:0, cuda, cuda:N, gpu, gpu:N, cuda:GPU-<uuid>, cuda_host";

/// Longest spec we look at; longer input is rejected without being echoed whole.
const MAX_SPEC_LEN: usize = 128;

fn parse_ordinal(s: &str, whole: &str) -> Result<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 9 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "device spec '{whole}': ordinal '{s}' is not a non-negative integer; accepted forms: {ACCEPTED_SPECS}"
            ),
        ));
    }
    Ok(s.parse::<u32>().expect("digits checked"))
}

impl DeviceSpec {
    /// Parses a spec. Case-insensitive; surrounding whitespace is ignored.
    pub fn parse(spec: &str) -> Result<DeviceSpec> {
        let trimmed = spec.trim();
        if trimmed.is_empty() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("empty device spec; accepted forms: {ACCEPTED_SPECS}"),
            ));
        }
        if trimmed.len() > MAX_SPEC_LEN {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "device spec of {} bytes is too long (at most {MAX_SPEC_LEN}); accepted forms: {ACCEPTED_SPECS}",
                    trimmed.len()
                ),
            ));
        }
        let lower = trimmed.to_ascii_lowercase();
        let (name, arg) = match lower.split_once(':') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (lower.as_str(), None),
        };
        match (name, arg) {
            ("cpu", None) => Ok(DeviceSpec::Cpu(0)),
            ("cpu", Some(a)) => Ok(DeviceSpec::Cpu(parse_ordinal(a, trimmed)?)),
            ("cuda" | "gpu", None) => Ok(DeviceSpec::Cuda(CudaSelector::Ordinal(0))),
            ("cuda" | "gpu", Some(a)) if a.starts_with("gpu-") => {
                let uuid = &a[4..];
                let hex: String = uuid.chars().filter(|c| *c != '-').collect();
                if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("device spec '{trimmed}': '{a}' is not a GPU UUID (GPU- followed by 32 hex digits); accepted forms: {ACCEPTED_SPECS}"),
                    ));
                }
                Ok(DeviceSpec::Cuda(CudaSelector::Uuid(uuid.to_string())))
            }
            ("cuda" | "gpu", Some(a)) => Ok(DeviceSpec::Cuda(CudaSelector::Ordinal(parse_ordinal(a, trimmed)?))),
            ("cuda_host" | "pinned", None) => Ok(DeviceSpec::CudaHost),
            ("cuda_host" | "pinned", Some(a)) => {
                if parse_ordinal(a, trimmed)? != 0 {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("device spec '{trimmed}': page-locked host memory has only ordinal 0"),
                    ));
                }
                Ok(DeviceSpec::CudaHost)
            }
            _ => Err(Error::new(
                Status::InvalidArgument,
                format!("unknown device spec '{trimmed}'; accepted forms: {ACCEPTED_SPECS}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        assert_eq!(DeviceSpec::parse("cpu").unwrap(), DeviceSpec::Cpu(0));
        assert_eq!(DeviceSpec::parse(" CPU:0 ").unwrap(), DeviceSpec::Cpu(0));
        assert_eq!(DeviceSpec::parse("cuda").unwrap(), DeviceSpec::Cuda(CudaSelector::Ordinal(0)));
        assert_eq!(DeviceSpec::parse("GPU:3").unwrap(), DeviceSpec::Cuda(CudaSelector::Ordinal(3)));
        assert_eq!(DeviceSpec::parse("cuda_host").unwrap(), DeviceSpec::CudaHost);
        assert_eq!(
            DeviceSpec::parse("cuda:GPU-0123abcd-0000-1111-2222-333344445555").unwrap(),
            DeviceSpec::Cuda(CudaSelector::Uuid("0123abcd-0000-1111-2222-333344445555".into()))
        );
    }

    #[test]
    fn parse_rejects() {
        for bad in ["", "  ", "tpu", "cuda:-1", "cuda:x", "cuda:1:2", "cuda:GPU-12", "cuda_host:1", "cuda:99999999999"]
        {
            let e = DeviceSpec::parse(bad).unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument, "{bad}");
        }
        let junk = "x".repeat(1024);
        let e = DeviceSpec::parse(&junk).unwrap_err();
        assert!(e.message().len() < 300);
    }

    #[test]
    fn display_round_trips() {
        for d in [Device::CPU, Device::cuda(2), Device::CUDA_HOST] {
            let s = d.to_string();
            let p = DeviceSpec::parse(&s).unwrap();
            match (d.kind, p) {
                (DeviceKind::CPU, DeviceSpec::Cpu(0)) => {}
                (DeviceKind::CUDA, DeviceSpec::Cuda(CudaSelector::Ordinal(2))) => {}
                (DeviceKind::CUDA_HOST, DeviceSpec::CudaHost) => {}
                other => panic!("{other:?}"),
            }
        }
    }
}
