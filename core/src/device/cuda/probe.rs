//! The CUDA backend's probe: is the driver usable in this process, and which devices does it show. Owned here
//! (the census reads it); also the gate every wrapper call passes ([`api`]), which honours
//! `HOSTFIRST_PLATFORMS`, `CUDA_VISIBLE_DEVICES`, every probe failure and `fork()`.

use super::driver::{
    self, format_driver_version, format_uuid, is_mig_name, Api, CuResult, CUDA_ERROR_NO_DEVICE, CUDA_SUCCESS,
    MIN_DRIVER_VERSION,
};
use crate::device::platforms::platforms;
use crate::device::types::{BackendStatus, Device, DeviceInfo};
use crate::error::{Error, Result, Status};
use crate::forksafe::InitOnce;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

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
    /// A probe result for a backend that is not available.
    pub fn unavailable(status: BackendStatus, reason: String, driver_version: String) -> CudaProbe {
        CudaProbe { status, reason, driver_version, devices: Vec::new() }
    }
}

/// The entry points, once a probe has loaded them (set at most once per process).
static API: InitOnce<Api> = InitOnce::new();
/// The process that initialised the driver (`cuInit`), 0 before.
static INIT_PID: AtomicU32 = AtomicU32::new(0);
/// The process whose probe was running when it forked this one (0: none).
static PROBING_PID: AtomicU32 = AtomicU32::new(0);
/// Probes running now in this process.
static PROBING: AtomicUsize = AtomicUsize::new(0);
/// Set in a child process by `fork()` once the driver was initialised, or while it was being probed.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Called in the child after `fork()` (the library's fork handler, `forksafe.rs`): a child of a process that
/// had initialised the driver, or was probing it at that moment, never uses it.
pub(crate) fn forked_child() {
    if PROBING.load(Ordering::SeqCst) > 0 {
        FORKED.store(true, Ordering::SeqCst);
        PROBING.store(0, Ordering::SeqCst);
        PROBING_PID.store(crate::os::parent_pid(), Ordering::SeqCst);
    }
    if INIT_PID.load(Ordering::SeqCst) != 0 {
        FORKED.store(true, Ordering::SeqCst);
    }
}

/// Records that this process initialised the driver (forked children then know it).
fn note_initialised() {
    INIT_PID.store(std::process::id(), Ordering::SeqCst);
}

/// In a child forked after this process's parent initialised CUDA: why CUDA cannot be used here.
pub fn forked_reason() -> Option<String> {
    if !FORKED.load(Ordering::SeqCst) {
        return None;
    }
    let (parent, when) = match INIT_PID.load(Ordering::SeqCst) {
        0 => (PROBING_PID.load(Ordering::SeqCst), "while that process was initialising CUDA"),
        pid => (pid, "after that process had initialised CUDA"),
    };
    Some(format!(
        "this process (pid {}) was forked from process {parent} {when}, and the CUDA driver cannot be used \
         after fork(); create worker processes before using CUDA or with spawn/exec (multiprocessing 'spawn'); \
         cpu work is unaffected",
        std::process::id(),
    ))
}

/// The CUDA backend's status for this process, probed on first use: hidden by `HOSTFIRST_PLATFORMS` (without
/// loading anything), else [`probe`].
pub fn status() -> &'static CudaProbe {
    static STATUS: InitOnce<CudaProbe> = InitOnce::new();
    STATUS.get_or_init(|| match platforms().hidden_reason("cuda") {
        Some(reason) => CudaProbe::unavailable(BackendStatus::HiddenByEnv, reason, String::new()),
        // A child forked while the parent was probing: never load or initialise the driver here.
        None => match forked_reason() {
            Some(reason) => CudaProbe::unavailable(BackendStatus::InitFailed, reason, String::new()),
            None => {
                PROBING.fetch_add(1, Ordering::SeqCst);
                let p = probe();
                PROBING.fetch_sub(1, Ordering::SeqCst);
                p
            }
        },
    })
}

/// The driver table for the wrapper: only when the probe found CUDA available in this process (so
/// `HOSTFIRST_PLATFORMS`, `CUDA_VISIBLE_DEVICES`, every probe failure and `fork()` are honoured), else
/// `UNAVAILABLE` with the reason.
pub(crate) fn api() -> Result<&'static Api> {
    if let Some(reason) = forked_reason() {
        return Err(Error::new(
            Status::Unavailable,
            format!("the cuda backend is not available: {} ({reason})", BackendStatus::InitFailed.name()),
        ));
    }
    let s = status();
    if s.status != BackendStatus::Available {
        return Err(Error::new(
            Status::Unavailable,
            format!("the cuda backend is not available: {} ({})", s.status.name(), s.reason),
        ));
    }
    API.get().ok_or_else(|| Error::new(Status::Internal, "CUDA is available but no driver table was loaded"))
}

/// The properties of `cuda:<ordinal>` when it is present.
pub fn info(ordinal: u32) -> Option<&'static DeviceInfo> {
    status().devices.iter().find(|d| d.device == Device::cuda(ordinal))
}

/// `Ok` when `cuda:<ordinal>` is a present device, else `NO_SUCH_DEVICE` listing the devices present.
pub(crate) fn check_ordinal(ordinal: u32) -> Result<()> {
    if info(ordinal).is_some() {
        return Ok(());
    }
    let mut present = vec![Device::CPU.to_string()];
    present.extend(status().devices.iter().map(|d| d.device.to_string()));
    present.push("cuda_host".to_string());
    Err(Error::new(
        Status::NoSuchDevice,
        format!("cuda:{ordinal} is not present; devices present: {}", present.join(", ")),
    ))
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

/// What to do when no driver library loads, in the words of this system.
const LIBRARY_HINT: &str = if cfg!(windows) {
    "install the NVIDIA display driver (it puts nvcuda.dll in the System32 directory, the only place searched), \
     or set HOSTFIRST_CUDA_DRIVER to the full path of nvcuda.dll"
} else {
    "install the NVIDIA driver, or add the directory holding libcuda.so.1 to LD_LIBRARY_PATH"
};

/// The reason given when no driver library loads: the names tried, the loader's message, and what to do.
pub fn library_not_found_reason(loader_message: &str) -> String {
    let message = if loader_message.is_empty() { String::new() } else { format!(": {loader_message}") };
    let place = if cfg!(windows) { " in System32" } else { "" };
    format!(
        "the CUDA driver library could not be loaded (tried {}{place}{message}); {LIBRARY_HINT}",
        driver::LIBRARY_NAMES.join(", ")
    )
}

/// The reason given when the driver file `HOSTFIRST_CUDA_DRIVER` names does not load (or the value is not an
/// absolute path: `file` None, `why` says so).
pub fn named_library_reason(file: Option<&std::path::Path>, why: &str) -> String {
    match file {
        Some(f) => format!("the CUDA driver library {}={} could not be loaded: {why}", driver::DRIVER_ENV, f.display()),
        None => format!("the CUDA driver library was not loaded: {why}"),
    }
}

/// Probes the driver without creating a context: checks `CUDA_VISIBLE_DEVICES`, whether the library loads,
/// its version (at least [`MIN_DRIVER_VERSION`]), `cuInit`, and reads each device's properties.
pub fn probe() -> CudaProbe {
    let visible = std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned());
    if let Some(reason) = hidden_by_visible_devices(visible.as_deref()) {
        return CudaProbe::unavailable(BackendStatus::HiddenByEnv, reason, String::new());
    }
    let lib = match driver::library() {
        Ok(lib) => lib,
        Err(driver::LoadFailure::System(e)) => {
            return CudaProbe::unavailable(BackendStatus::LibraryNotFound, library_not_found_reason(&e), String::new())
        }
        Err(driver::LoadFailure::Named(file, why)) => {
            let reason = named_library_reason(file.as_deref(), &why);
            return CudaProbe::unavailable(BackendStatus::LibraryNotFound, reason, String::new());
        }
    };
    let note = match &visible {
        Some(v) => format!(" (CUDA_VISIBLE_DEVICES=\"{v}\")"),
        None => String::new(),
    };
    match std::panic::catch_unwind(|| probe_driver(lib, &note)) {
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
fn bootstrap_version(lib: &'static libloading::Library) -> Option<i32> {
    type F = unsafe extern "C" fn(*mut c_int) -> CuResult;
    // SAFETY: the symbol's C signature is `CUresult cuDriverGetVersion(int*)`, and the pointer is used while
    // the 'static library lives.
    unsafe {
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

fn probe_driver(lib: &'static libloading::Library, note: &str) -> CudaProbe {
    let api = match API.get() {
        Some(a) => a,
        // SAFETY: `lib` is the CUDA driver library; the table declares cuda.h's signatures.
        None => match unsafe { Api::load(lib) } {
            Ok(a) => API.get_or_init(|| a),
            Err(missing) => {
                if let Some(v) = bootstrap_version(lib).filter(|v| *v < MIN_DRIVER_VERSION) {
                    return too_old(v);
                }
                return CudaProbe::unavailable(
                    BackendStatus::InitFailed,
                    format!(
                        "the CUDA driver library loaded but lacks the entry point {missing} (hostfirst needs a driver for CUDA {} or newer)",
                        format_driver_version(MIN_DRIVER_VERSION)
                    ),
                    bootstrap_version(lib).map(format_driver_version).unwrap_or_default(),
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
    note_initialised();

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

    let name = driver::c_buf_to_string(&name);
    let mig = is_mig_name(&name);
    Ok(DeviceInfo {
        device: Device::cuda(ordinal as u32),
        name,
        total_memory: total as u64,
        uuid: format_uuid(&uuid, mig),
        pci_bus_id: driver::c_buf_to_string(&pci).to_ascii_lowercase(),
        compute_capability: (major, minor),
        multiprocessor_count: sms.max(0) as u32,
    })
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
    fn missing_library_reason_is_short_and_says_what_to_do() {
        let r = library_not_found_reason("libcuda.so.1: cannot open shared object file: No such file or directory");
        assert!(r.contains("tried libcuda.so.1, libcuda.so: libcuda.so.1: cannot open"), "{r}");
        assert!(r.contains("LD_LIBRARY_PATH") && r.contains("NVIDIA driver"), "{r}");
        assert!(!r.contains("nvcuda") && !r.contains(".dll"), "no names of other systems: {r}");
        assert!(r.len() < 260, "{} chars: {r}", r.len());
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
