//! The CUDA driver, reached through cudarc with dynamic loading: the census probe, device properties, live
//! memory, and a small safe wrapper (contexts, device and pinned memory, registrations, streams, events,
//! copies) that the placement layer builds on.
//!
//! Rules this module keeps:
//! - Nothing touches the driver before `CUDA_VISIBLE_DEVICES` has been checked and
//!   `cudarc::driver::sys::is_culib_present()` has said the library loads (cudarc panics otherwise).
//! - Every entry point is resolved once, up front ([`driver`]); a missing one is an error, never a panic.
//!   The probe still runs under `catch_unwind` as a last resort.
//! - Taking the census creates no context and allocates nothing. The first call that needs device memory
//!   or `cuMemGetInfo` retains the device's **primary context** (once per device, kept for the process
//!   lifetime, shared with the CUDA runtime and frameworks that use primary contexts).
//! - Wrapper operations make the device's context current only for the duration of the call and then
//!   restore whatever context the calling thread had (the CUDA runtime derives its current device from it).
//!   [`Context::bind`] is the explicit "make it current and leave it" for callers that want that.
//!
//! The wrapper types are documented in [`memory`] and [`stream`] and re-exported here.

pub mod driver;
pub mod memory;
pub mod stream;

use super::census::{census, BackendStatus, DeviceInfo};
use super::Device;
use crate::error::{Error, Result, Status};
use driver::{Api, CuResult, CUDA_ERROR_NO_DEVICE, CUDA_SUCCESS, MIN_DRIVER_VERSION};
use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

pub use driver::{format_driver_version, format_uuid};
pub use memory::{Context, DeviceMemory, HostRegistration, PinnedHostMemory};
pub use stream::{Event, HostBytes, HostBytesMut, InFlight, Stream};

/// What probing the CUDA driver found.
#[derive(Clone, Debug)]
pub struct CudaProbe {
    /// Usable or why not.
    pub status: BackendStatus,
    /// Human reason when not available.
    pub reason: String,
    /// `major.minor` when known.
    pub driver_version: String,
    /// Devices, when available.
    pub devices: Vec<DeviceInfo>,
}

impl CudaProbe {
    fn unavailable(status: BackendStatus, reason: String, driver_version: String) -> CudaProbe {
        CudaProbe { status, reason, driver_version, devices: Vec::new() }
    }
}

/// The entry points, once a probe has loaded them (set at most once per process).
static API: OnceLock<Api> = OnceLock::new();

/// The driver table for the wrapper: only when the census says CUDA is available (so `HOSTFIRST_PLATFORMS`,
/// `CUDA_VISIBLE_DEVICES` and every probe failure are honoured), else `UNAVAILABLE` with the census reason.
pub(crate) fn api() -> Result<&'static Api> {
    let c = census();
    if !c.cuda_available() {
        let why = c
            .backend("cuda")
            .map(|b| format!("{} ({})", b.status.name(), b.reason))
            .unwrap_or_else(|| "not probed".to_string());
        return Err(Error::new(Status::Unavailable, format!("the cuda backend is not available: {why}")));
    }
    API.get().ok_or_else(|| Error::new(Status::Internal, "the CUDA census is available but no driver table was loaded"))
}

/// `Ok` when `cuda:<ordinal>` is a present device, else `NO_SUCH_DEVICE` listing the devices present.
pub(crate) fn check_ordinal(ordinal: u32) -> Result<()> {
    let c = census();
    if c.info(Device::cuda(ordinal)).is_some() {
        return Ok(());
    }
    Err(Error::new(Status::NoSuchDevice, format!("cuda:{ordinal} is not present; devices present: {}", c.present())))
}

/// When `CUDA_VISIBLE_DEVICES` hides every device (empty or blank, `-1`, `NoDevFiles`), the reason saying so.
pub fn hidden_by_visible_devices(value: Option<&str>) -> Option<String> {
    let v = value?;
    let t = v.trim();
    if t.is_empty() || t == "-1" || t.eq_ignore_ascii_case("nodevfiles") {
        Some(format!("hidden by CUDA_VISIBLE_DEVICES=\"{v}\" (it makes no device visible)"))
    } else {
        None
    }
}

/// The reason given when no driver library loads: the names searched and what to do.
pub fn library_not_found_reason() -> String {
    let names = cudarc::get_lib_name_candidates("cuda");
    format!(
        "the CUDA driver library could not be loaded; searched for {} (and the nvcuda equivalents). Install \
         the NVIDIA driver, or add the directory holding libcuda.so.1 to LD_LIBRARY_PATH",
        names.join(", ")
    )
}

/// Probes the driver without creating a context: checks `CUDA_VISIBLE_DEVICES`, whether the library loads,
/// its version (at least [`MIN_DRIVER_VERSION`]), `cuInit`, and reads each device's properties.
pub fn probe() -> CudaProbe {
    let visible = std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned());
    if let Some(reason) = hidden_by_visible_devices(visible.as_deref()) {
        return CudaProbe::unavailable(BackendStatus::HiddenByEnv, reason, String::new());
    }
    // SAFETY: only tries to dlopen the candidate names (and closes them again); no driver call is made.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return CudaProbe::unavailable(BackendStatus::LibraryNotFound, library_not_found_reason(), String::new());
    }
    let note = match &visible {
        Some(v) => format!(" (CUDA_VISIBLE_DEVICES=\"{v}\")"),
        None => String::new(),
    };
    match std::panic::catch_unwind(|| probe_driver(&note)) {
        Ok(p) => p,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".to_string());
            CudaProbe::unavailable(
                BackendStatus::InitFailed,
                format!("probing the CUDA driver panicked: {msg}"),
                String::new(),
            )
        }
    }
}

/// Reads `cuDriverGetVersion` alone, for a library that lacks one of the other entry points.
fn bootstrap_version() -> Option<i32> {
    type F = unsafe extern "C" fn(*mut c_int) -> CuResult;
    // SAFETY: the library is present (checked by the caller of probe_driver); the symbol's C signature is
    // `CUresult cuDriverGetVersion(int*)`, and the pointer is used while `culib()`'s 'static library lives.
    unsafe {
        let lib = cudarc::driver::sys::culib();
        let f: F = *lib.get::<F>(b"cuDriverGetVersion").ok()?;
        let mut v = 0;
        (f(&mut v) == CUDA_SUCCESS).then_some(v)
    }
}

fn too_old(version: i32) -> CudaProbe {
    CudaProbe::unavailable(
        BackendStatus::DriverTooOld,
        format!(
            "the CUDA driver supports CUDA {} (cuDriverGetVersion = {version}); hostfirst needs CUDA {} ({MIN_DRIVER_VERSION}) or newer",
            format_driver_version(version),
            format_driver_version(MIN_DRIVER_VERSION)
        ),
        format_driver_version(version),
    )
}

fn probe_driver(note: &str) -> CudaProbe {
    let api = match API.get() {
        Some(a) => a,
        // SAFETY: `is_culib_present()` returned true; the table declares cuda.h's signatures.
        None => match unsafe { Api::load() } {
            Ok(a) => API.get_or_init(|| a),
            Err(missing) => {
                if let Some(v) = bootstrap_version().filter(|v| *v < MIN_DRIVER_VERSION) {
                    return too_old(v);
                }
                return CudaProbe::unavailable(
                    BackendStatus::InitFailed,
                    format!(
                        "the CUDA driver library loaded but lacks the entry point {missing} (hostfirst needs a driver for CUDA {} or newer)",
                        format_driver_version(MIN_DRIVER_VERSION)
                    ),
                    bootstrap_version().map(format_driver_version).unwrap_or_default(),
                );
            }
        },
    };

    let mut version: c_int = 0;
    // SAFETY: valid out-pointer; cuDriverGetVersion needs no cuInit and no context.
    let r = unsafe { (api.driver_get_version)(&mut version) };
    if r != CUDA_SUCCESS {
        return CudaProbe::unavailable(BackendStatus::InitFailed, api.describe(r, "cuDriverGetVersion"), String::new());
    }
    let version_text = format_driver_version(version);
    if version < MIN_DRIVER_VERSION {
        return too_old(version);
    }

    // SAFETY: flags must be 0; cuInit creates no context.
    let r = unsafe { (api.init)(0) };
    if r == CUDA_ERROR_NO_DEVICE {
        return CudaProbe::unavailable(
            BackendStatus::NoDevices,
            format!("cuInit reports CUDA_ERROR_NO_DEVICE: the CUDA driver {version_text} sees no device{note}"),
            version_text,
        );
    }
    if r != CUDA_SUCCESS {
        return CudaProbe::unavailable(BackendStatus::InitFailed, api.describe(r, "cuInit(0)"), version_text);
    }

    let mut count: c_int = 0;
    // SAFETY: valid out-pointer, after a successful cuInit.
    let r = unsafe { (api.device_get_count)(&mut count) };
    if r != CUDA_SUCCESS {
        return CudaProbe::unavailable(BackendStatus::InitFailed, api.describe(r, "cuDeviceGetCount"), version_text);
    }
    if count <= 0 {
        return CudaProbe::unavailable(
            BackendStatus::NoDevices,
            format!("the CUDA driver {version_text} reports 0 devices{note}"),
            version_text,
        );
    }
    let mut devices = Vec::with_capacity(count as usize);
    for ordinal in 0..count {
        match query_device(api, ordinal) {
            Ok(d) => devices.push(d),
            Err(e) => {
                return CudaProbe::unavailable(
                    BackendStatus::InitFailed,
                    format!("reading the properties of cuda:{ordinal}: {}", e.message()),
                    version_text,
                )
            }
        }
    }
    CudaProbe { status: BackendStatus::Available, reason: String::new(), driver_version: version_text, devices }
}

/// One device's static properties, through calls that need no context.
fn query_device(api: &Api, ordinal: c_int) -> Result<DeviceInfo> {
    let mut dev: c_int = 0;
    // SAFETY (all calls below): valid out-pointers and buffer lengths; device queries need no context.
    api.check(unsafe { (api.device_get)(&mut dev, ordinal) }, || format!("cuDeviceGet({ordinal})"))?;

    let mut name = [0u8; 256];
    api.check(unsafe { (api.device_get_name)(name.as_mut_ptr() as *mut c_char, name.len() as c_int, dev) }, || {
        "cuDeviceGetName".to_string()
    })?;
    let mut uuid = [0u8; 16];
    api.check(unsafe { (api.device_get_uuid)(&mut uuid, dev) }, || "cuDeviceGetUuid_v2".to_string())?;
    let mut pci = [0u8; 64];
    api.check(
        unsafe { (api.device_get_pci_bus_id)(pci.as_mut_ptr() as *mut c_char, pci.len() as c_int, dev) },
        || "cuDeviceGetPCIBusId".to_string(),
    )?;
    let attr = |a: c_int, what: &str| -> Result<i32> {
        let mut v: c_int = 0;
        api.check(unsafe { (api.device_get_attribute)(&mut v, a, dev) }, || format!("cuDeviceGetAttribute({what})"))?;
        Ok(v)
    };
    let major = attr(driver::ATTR_CC_MAJOR, "COMPUTE_CAPABILITY_MAJOR")?;
    let minor = attr(driver::ATTR_CC_MINOR, "COMPUTE_CAPABILITY_MINOR")?;
    let sms = attr(driver::ATTR_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT")?;
    let mut total: usize = 0;
    api.check(unsafe { (api.device_total_mem)(&mut total, dev) }, || "cuDeviceTotalMem_v2".to_string())?;

    Ok(DeviceInfo {
        device: Device::cuda(ordinal as u32),
        name: driver::c_buf_to_string(&name),
        total_memory: total as u64,
        uuid: format_uuid(&uuid),
        pci_bus_id: driver::c_buf_to_string(&pci).to_ascii_lowercase(),
        compute_capability: (major, minor),
        multiprocessor_count: sms.max(0) as u32,
    })
}

/// Live (free, total) memory of CUDA device `ordinal` (`cuMemGetInfo_v2`).
///
/// Needs a context: retains the device's primary context on first use (kept for the process lifetime),
/// makes it current for the call and restores the calling thread's previous context.
pub fn mem_info(ordinal: u32) -> Result<(u64, u64)> {
    let ctx = Context::get(ordinal)?;
    let api = api()?;
    let _current = ctx.enter()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; the device's context is current on this thread.
    let r = unsafe { (api.mem_get_info)(&mut free, &mut total) };
    api.check(r, || format!("cuMemGetInfo_v2(cuda:{ordinal})"))?;
    Ok((free as u64, total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices_that_hide_everything() {
        for v in ["", "  ", "-1", " -1 ", "NoDevFiles", "nodevfiles"] {
            let r = hidden_by_visible_devices(Some(v)).unwrap_or_else(|| panic!("{v:?} hides"));
            assert!(r.contains("CUDA_VISIBLE_DEVICES") && r.contains(&format!("\"{v}\"")), "{r}");
        }
        for v in ["0", "1,0", "GPU-a0a1", "0,-1"] {
            assert_eq!(hidden_by_visible_devices(Some(v)), None, "{v}");
        }
        assert_eq!(hidden_by_visible_devices(None), None);
    }

    #[test]
    fn missing_library_reason_lists_names_and_path_variable() {
        let r = library_not_found_reason();
        assert!(r.contains("libcuda.so, "), "{r}");
        assert!(r.contains("libcuda.so.1"), "{r}");
        assert!(r.contains("LD_LIBRARY_PATH"), "{r}");
    }

    #[test]
    fn probe_without_a_driver_never_panics() {
        // The unit-test machine may or may not have a driver; either way the probe returns a status.
        let p = probe();
        if p.status != BackendStatus::Available {
            assert!(!p.reason.is_empty());
            assert!(p.devices.is_empty());
        }
    }
}
