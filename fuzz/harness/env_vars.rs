//! The environment variables hostfirst reads, through the parsers that read them (each variable is read once
//! per process, so the value goes to the parser rather than into the environment): `HOSTFIRST_PLATFORMS`
//! (`device::platforms::Platforms::parse`), `HOSTFIRST_DEFAULT_DEVICE` (`scope::parse_env_default`),
//! `HOSTFIRST_IO` (`engine::env_forces_pool`) and `CUDA_VISIBLE_DEVICES`
//! (`device::cuda::probe::hidden_by_visible_devices`). The input, cut at its first NUL (an environment value
//! has none), is the value of each; it need not be UTF-8. Checks, against the documented rules:
//! - platforms: comma-separated names, white space around them and case ignored; `cpu`, `cuda` and `gpu`
//!   (= `cuda`) known, one warning per unknown name and one when the value is not UTF-8; naming nothing
//!   shows every backend;
//! - default device: blank is unset; not UTF-8 or not a device spec is `INVALID_ARGUMENT` naming the
//!   variable; a spec resolves (`cpu:0` always) or is `UNAVAILABLE` / `NO_SUCH_DEVICE`;
//! - I/O: the pool is forced by `pool` or `pread` only;
//! - CUDA_VISIBLE_DEVICES hides every device when blank, `-1` or `NoDevFiles` (any case).
//!
//! Returns the default-device syntax status: OK (blank, or a spec) or INVALID_ARGUMENT.

use super::reference::{self, Spec};
use hostfirst::device::cuda::probe::hidden_by_visible_devices;
use hostfirst::device::platforms::Platforms;
use hostfirst::{DeviceKind, Status};
use std::ffi::OsStr;

#[cfg(unix)]
fn os(bytes: &[u8]) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(bytes).to_os_string()
}

#[cfg(not(unix))]
fn os(bytes: &[u8]) -> std::ffi::OsString {
    String::from_utf8_lossy(bytes).into_owned().into()
}

pub fn run(data: &[u8]) -> Status {
    let value = &data[..data.iter().position(|&b| b == 0).unwrap_or(data.len())];
    let v = os(value);
    let utf8 = v.to_str();

    // HOSTFIRST_PLATFORMS
    let p = Platforms::parse(Some(&v));
    let text = v.to_string_lossy();
    let names: Vec<String> = text.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect();
    let unknown = names.iter().filter(|n| !matches!(n.as_str(), "cpu" | "cuda" | "gpu")).count();
    assert_eq!(p.warnings.len(), unknown + usize::from(utf8.is_none()), "{text:?}: {:?}", p.warnings);
    assert_eq!(p.value.as_deref(), Some(&*text));
    let shows_cpu = names.is_empty() || names.iter().any(|n| n == "cpu");
    let shows_cuda = names.is_empty() || names.iter().any(|n| n == "cuda" || n == "gpu");
    assert_eq!(p.shows("cpu"), shows_cpu, "{text:?}");
    assert_eq!(p.shows("cuda"), shows_cuda, "{text:?}");
    assert_eq!(p.hidden_reason("cpu").is_none(), shows_cpu);
    assert_eq!(p.hidden_reason("cuda").is_none(), shows_cuda);
    assert_eq!(Platforms::parse(None), Platforms::default());

    // HOSTFIRST_IO
    assert_eq!(
        hostfirst::engine::env_forces_pool(Some(&v)),
        utf8.is_some_and(|s| s.trim() == "pool" || s.trim() == "pread"),
        "HOSTFIRST_IO={text:?}"
    );
    assert!(!hostfirst::engine::env_forces_pool(None));

    // CUDA_VISIBLE_DEVICES (read lossily, as the probe does)
    let t = text.trim();
    let hides = t.is_empty() || t == "-1" || t.eq_ignore_ascii_case("nodevfiles");
    assert_eq!(hidden_by_visible_devices(Some(&text)).is_some(), hides, "CUDA_VISIBLE_DEVICES={text:?}");
    assert!(hidden_by_visible_devices(None).is_none());

    // HOSTFIRST_DEFAULT_DEVICE
    assert!(hostfirst::scope::parse_env_default(None).is_none());
    let got = hostfirst::scope::parse_env_default(Some(&v));
    let Some(s) = utf8 else {
        let e = got.expect("a value that is not UTF-8 is an error").expect_err("not UTF-8");
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("HOSTFIRST_DEFAULT_DEVICE"), "{}", e.message());
        return Status::InvalidArgument;
    };
    if s.trim().is_empty() {
        assert!(got.is_none(), "a blank HOSTFIRST_DEFAULT_DEVICE is unset");
        return Status::Ok;
    }
    let got = got.expect("a value that is not blank is parsed");
    match reference::device_spec(s) {
        None => {
            let e = got.expect_err("not a device spec");
            assert_eq!(e.status(), Status::InvalidArgument);
            assert!(e.message().contains("HOSTFIRST_DEFAULT_DEVICE"), "{}", e.message());
            Status::InvalidArgument
        }
        Some(spec) => {
            match &got {
                Ok(d) => match &spec {
                    Spec::Cpu(n) => assert_eq!((d.kind, d.ordinal), (DeviceKind::CPU, *n)),
                    Spec::CudaOrdinal(n) => assert_eq!((d.kind, d.ordinal), (DeviceKind::CUDA, *n)),
                    Spec::CudaUuid(_) => assert_eq!(d.kind, DeviceKind::CUDA),
                    Spec::CudaHost => assert_eq!(d.kind, DeviceKind::CUDA_HOST),
                },
                Err(e) => {
                    assert!(matches!(e.status(), Status::Unavailable | Status::NoSuchDevice), "{}", e.message());
                    assert!(e.message().contains("HOSTFIRST_DEFAULT_DEVICE"), "{}", e.message());
                }
            }
            if spec == Spec::Cpu(0) {
                assert!(got.is_ok(), "cpu:0 is always present");
            }
            Status::Ok
        }
    }
}
