//! Device specs (`cpu`, `cuda:1`, `gpu`, `cuda:GPU-<uuid>`, `cuda_host`, ...) and dtype names: the input is
//! split at NUL bytes into up to eight strings, each given to `hostfirst_device_parse`,
//! `hostfirst_target_parse`, the core's `DeviceSpec::parse` and `hostfirst_dtype_from_name`; its first eight
//! bytes are also a raw `hostfirst_device` (kind, ordinal) for `hostfirst_device_format` and
//! `hostfirst_device_describe`. Checks:
//! - the syntax verdict equals the reference parser's ([`super::reference::device_spec`]) and the parsed
//!   value is the same;
//! - a malformed spec is `INVALID_ARGUMENT` with a bounded message and nothing written; a well-formed one is
//!   OK (then the device is the one named, and `cpu:0` always is), `UNAVAILABLE` or `NO_SUCH_DEVICE`;
//! - `hostfirst_target_parse` agrees with `hostfirst_device_parse` on everything but `default`;
//! - a dtype name is accepted exactly when it is one of the names `hostfirst_dtype_name` gives;
//! - any valid raw device formats to a spec that parses back to it; an invalid kind or a negative ordinal
//!   is `INVALID_ARGUMENT`.
//!
//! Returns the syntax status of the first string (OK or INVALID_ARGUMENT): it does not depend on the
//! machine's devices.

use super::reference::{self, Spec};
use super::{check_failure, cstring, last_error};
use hostfirst::device::DeviceSpec;
use hostfirst::ffi::*;
use hostfirst::{DType, DeviceKind, Status};

const UNSET: hostfirst_device = hostfirst_device { kind: -7, ordinal: -7 };

fn one(text: &[u8]) -> Status {
    let c = cstring(text);
    let utf8 = std::str::from_utf8(text).ok();
    let want = utf8.and_then(reference::device_spec);
    if let Some(s) = utf8 {
        let got = DeviceSpec::parse(s);
        assert_eq!(got.as_ref().ok().map(reference::from_library), want, "DeviceSpec::parse({s:?})");
        if let Err(e) = got {
            assert_eq!(e.status(), Status::InvalidArgument);
            assert!(e.message().len() <= 1024, "a {}-byte message for a bad spec", e.message().len());
        }
    }

    let mut out = UNSET;
    let st = hostfirst_device_parse(c.as_ptr(), &mut out);
    check_failure(st, "hostfirst_device_parse");
    match &want {
        None => {
            assert_eq!(st, Status::InvalidArgument, "{:?}: {}", c, last_error());
            assert!(last_error().len() <= 1024, "a {}-byte message", last_error().len());
        }
        Some(spec) => {
            assert!(
                matches!(st, Status::Ok | Status::Unavailable | Status::NoSuchDevice),
                "{c:?}: {} ({})",
                st.name(),
                last_error()
            );
            if *spec == Spec::Cpu(0) {
                assert_eq!(st, Status::Ok, "cpu:0 is always present: {}", last_error());
            }
        }
    }
    if st == Status::Ok {
        let kind = match want.as_ref().expect("checked above") {
            Spec::Cpu(n) => {
                assert_eq!(out.ordinal as u32, *n);
                DeviceKind::CPU
            }
            Spec::CudaOrdinal(n) => {
                assert_eq!(out.ordinal as u32, *n);
                DeviceKind::CUDA
            }
            Spec::CudaUuid(_) => DeviceKind::CUDA,
            Spec::CudaHost => {
                assert_eq!(out.ordinal, 0);
                DeviceKind::CUDA_HOST
            }
        };
        assert_eq!(out.kind, kind as i32);
        round_trip(out);
    } else {
        assert_eq!(out, UNSET, "output written on failure");
    }

    let mut t = UNSET;
    let st_t = hostfirst_target_parse(c.as_ptr(), &mut t);
    check_failure(st_t, "hostfirst_target_parse");
    if utf8.is_some_and(|s| s.trim().eq_ignore_ascii_case("default")) {
        assert!(
            matches!(st_t, Status::Ok | Status::ImplicitPlacement | Status::Unavailable | Status::NoSuchDevice),
            "default: {}",
            st_t.name()
        );
    } else {
        assert_eq!(st_t, st, "target_parse vs device_parse for {c:?}");
        assert_eq!(t, out);
    }

    let names = dtype_names();
    let mut d: DType = DType::U8;
    let sd = hostfirst_dtype_from_name(c.as_ptr(), (&mut d) as *mut DType);
    check_failure(sd, "hostfirst_dtype_from_name");
    match utf8.filter(|s| names.contains(s)) {
        Some(s) => {
            assert_eq!(sd, Status::Ok);
            assert_eq!(d.name(), s);
        }
        None => assert_eq!(sd, Status::InvalidArgument, "dtype {c:?}"),
    }
    if want.is_some() {
        Status::Ok
    } else {
        Status::InvalidArgument
    }
}

/// Every dtype name, as `hostfirst_dtype_name` gives them (asked once per process).
fn dtype_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let names: Vec<&'static str> = (0..=255u32)
            .map(|v| {
                // SAFETY: the library returns a static NUL-terminated string.
                unsafe { std::ffi::CStr::from_ptr(hostfirst_dtype_name(v as _)) }.to_str().unwrap()
            })
            .filter(|n| *n != "UNKNOWN")
            .collect();
        assert!(names.len() >= 20, "{names:?}");
        names
    })
}

/// Formats a valid device and parses the text back.
fn round_trip(dev: hostfirst_device) {
    let mut buf = [0 as std::ffi::c_char; 64];
    let mut len = 0usize;
    let st = hostfirst_device_format(dev, buf.as_mut_ptr(), buf.len(), &mut len);
    assert_eq!(st, Status::Ok, "{dev:?}: {}", last_error());
    // SAFETY: the library wrote a NUL-terminated string into `buf`.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().to_string();
    assert_eq!(text.len(), len);
    let back = DeviceSpec::parse(&text).map(|s| reference::from_library(&s));
    let want = match dev.kind {
        1 => Spec::Cpu(dev.ordinal as u32),
        2 => Spec::CudaOrdinal(dev.ordinal as u32),
        _ => Spec::CudaHost,
    };
    assert_eq!(back.ok(), Some(want), "{dev:?} formats as '{text}', which does not parse back to it");
}

fn raw(data: &[u8]) {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    let dev = hostfirst_device {
        kind: i32::from_le_bytes(b[..4].try_into().unwrap()),
        ordinal: i32::from_le_bytes(b[4..].try_into().unwrap()),
    };
    let valid = (1..=3).contains(&dev.kind) && dev.ordinal >= 0;
    let mut len = 0usize;
    let st = hostfirst_device_format(dev, std::ptr::null_mut(), 0, &mut len);
    check_failure(st, "hostfirst_device_format");
    if valid {
        assert_eq!(st, Status::Ok, "{dev:?}: {}", last_error());
        round_trip(dev);
    } else {
        assert_eq!(st, Status::InvalidArgument, "{dev:?}");
    }
    let mut info: hostfirst_device_info = unsafe { std::mem::zeroed() };
    info.struct_size = std::mem::size_of::<hostfirst_device_info>();
    let st = hostfirst_device_describe(dev, &mut info);
    check_failure(st, "hostfirst_device_describe");
    if !valid {
        assert_eq!(st, Status::InvalidArgument);
    }
    if dev.kind == DeviceKind::CPU as i32 && dev.ordinal == 0 {
        assert_eq!(st, Status::Ok, "describing cpu:0: {}", last_error());
    }
    assert_eq!(hostfirst_device_equal(&dev, &dev), 1);
    assert_eq!(hostfirst_device_equal(&dev, std::ptr::null()), 0);
}

pub fn run(data: &[u8]) -> Status {
    raw(data);
    let mut first = None;
    for piece in data.split(|&b| b == 0).take(8) {
        let st = one(piece);
        first.get_or_insert(st);
    }
    first.unwrap_or(Status::InvalidArgument)
}
