//! Device specs: the text forms (`cpu`, `cuda:1`, `gpu`, `cuda:GPU-<uuid>`, `cuda:MIG-<uuid>`, `cuda_host`)
//! parsed into a [`DeviceSpec`], not yet checked against the census.

use crate::error::{Error, Result, Status};

/// How a CUDA device is selected in a spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaSelector {
    /// By ordinal (`cuda`, `cuda:N`, `gpu:N`).
    Ordinal(u32),
    /// By UUID (`cuda:GPU-xxxxxxxx-...`, or `cuda:MIG-...` for a MIG instance), stable under
    /// `CUDA_VISIBLE_DEVICES` renumbering. Stored lower-case without the `GPU-`/`MIG-` prefix.
    Uuid(String),
}

/// A syntactically valid device spec, not yet checked against the census.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `cpu` or `cpu:N`.
    Cpu(u32),
    /// `cuda`, `cuda:N`, `gpu`, `gpu:N`, `cuda:GPU-<uuid>`, `cuda:MIG-<uuid>`.
    Cuda(CudaSelector),
    /// `cuda_host` (also `cuda_host:0`).
    CudaHost,
}

/// The accepted spec forms, quoted in error messages.
pub const ACCEPTED_SPECS: &str = "cpu, cpu:0, cuda, cuda:N, gpu, gpu:N, cuda:GPU-<uuid>, cuda:MIG-<uuid>, cuda_host";

/// Longest spec we look at; longer input is rejected without being echoed whole.
const MAX_SPEC_LEN: usize = 128;

/// The largest ordinal a spec may name: `hostfirst_device.ordinal` is an `int32_t`, and every device value
/// that `hostfirst_device_format` writes must parse back.
pub const MAX_ORDINAL: u32 = i32::MAX as u32;

fn parse_ordinal(s: &str, whole: &str) -> Result<u32> {
    match s.parse::<u32>() {
        Ok(n) if s.bytes().all(|b| b.is_ascii_digit()) && n <= MAX_ORDINAL => Ok(n),
        _ => Err(Error::new(
            Status::InvalidArgument,
            format!(
                "device spec '{whole}': ordinal '{s}' is not an integer from 0 to {MAX_ORDINAL}; accepted forms: \
                 {ACCEPTED_SPECS}"
            ),
        )),
    }
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
            ("cuda" | "gpu", Some(a)) if a.starts_with("gpu-") || a.starts_with("mig-") => {
                let uuid = &a[4..];
                let hex: String = uuid.chars().filter(|c| *c != '-').collect();
                if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("device spec '{trimmed}': '{a}' is not a GPU UUID (GPU- or MIG- followed by 32 hex digits); accepted forms: {ACCEPTED_SPECS}"),
                    ));
                }
                Ok(DeviceSpec::Cuda(CudaSelector::Uuid(uuid.to_string())))
            }
            ("cuda" | "gpu", Some(a)) => Ok(DeviceSpec::Cuda(CudaSelector::Ordinal(parse_ordinal(a, trimmed)?))),
            ("cuda_host", None) => Ok(DeviceSpec::CudaHost),
            ("cuda_host", Some(a)) => {
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
        assert_eq!(
            DeviceSpec::parse("cuda:MIG-0123abcd-0000-1111-2222-333344445555").unwrap(),
            DeviceSpec::Cuda(CudaSelector::Uuid("0123abcd-0000-1111-2222-333344445555".into()))
        );
    }

    #[test]
    fn parse_rejects() {
        // "pinned" was once an undocumented alias of cuda_host; 1.0 has one name for page-locked memory (a
        // JAX user writing "pinned" means the memory kind "pinned_host", which the Python layer suggests).
        let retired = ["pinned", "pinned:0"];
        for bad in ["", "  ", "tpu", "cuda:-1", "cuda:x", "cuda:1:2", "cuda:GPU-12", "cuda_host:1", "cuda:99999999999"]
            .into_iter()
            .chain(retired)
        {
            let e = DeviceSpec::parse(bad).unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument, "{bad}");
        }
        let junk = "x".repeat(1024);
        let e = DeviceSpec::parse(&junk).unwrap_err();
        assert!(e.message().len() < 300);
    }

    /// Every ordinal a `hostfirst_device` can carry (0..=i32::MAX) parses, leading zeros allowed, so that what
    /// `hostfirst_device_format` writes parses back (10-digit ordinals were refused); larger ones do not.
    #[test]
    fn every_c_ordinal_parses() {
        for (text, n) in [("cuda:1000000000", 1_000_000_000), ("cpu:2147483647", MAX_ORDINAL), ("gpu:0000000000007", 7)]
        {
            let want =
                if text.starts_with("cpu") { DeviceSpec::Cpu(n) } else { DeviceSpec::Cuda(CudaSelector::Ordinal(n)) };
            assert_eq!(DeviceSpec::parse(text).unwrap(), want, "{text}");
        }
        for bad in ["cuda:2147483648", "cuda:4294967296", "cuda:+1", "cuda: 1 2"] {
            assert_eq!(DeviceSpec::parse(bad).unwrap_err().status(), Status::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn display_round_trips() {
        use crate::device::types::{Device, DeviceKind};
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
