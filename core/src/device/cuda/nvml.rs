//! Free device memory without a CUDA context, through NVML (`libnvidia-ml.so.1`, which the NVIDIA driver
//! installs next to `libcuda.so.1`), opened on first use and kept for the process lifetime.
//!
//! `cuMemGetInfo` needs a context, and creating a device's primary context costs time and a few hundred MiB of
//! its memory: a tool that only wants to print free memory (`hostfirst devices`) should not pay that on every
//! GPU. NVML answers without a context: `nvmlDeviceGetMemoryInfo` for the device NVML finds by the UUID the
//! CUDA driver reported (a MIG instance by its `MIG-` UUID). Where NVML is missing or does not know the device,
//! callers fall back to `cuMemGetInfo` (see [`super::mem_info`]). Only three entry points are used; a missing
//! one disables NVML.

use crate::forksafe::InitOnce;
use std::ffi::{c_char, c_int, CString};

type NvmlReturn = c_int;
type NvmlDevice = *mut std::ffi::c_void;

#[repr(C)]
#[derive(Default)]
struct NvmlMemory {
    total: u64,
    free: u64,
    used: u64,
}

struct Nvml {
    by_uuid: unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn,
    memory: unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> NvmlReturn,
    /// Kept (in a static, never dropped) so the function pointers above never dangle.
    _lib: libloading::Library,
}

/// The library name: the driver's own, never a development link. Loaded as the CUDA driver is: from the system's
/// place (on Windows, System32 only), or on Windows from beside the driver file `HOSTFIRST_CUDA_DRIVER` names.
pub const LIBRARY_NAME: &str = if cfg!(windows) { "nvml.dll" } else { "libnvidia-ml.so.1" };

fn nvml() -> Option<&'static Nvml> {
    static NVML: InitOnce<Option<Nvml>> = InitOnce::new();
    NVML.get_or_init(|| {
        // Loading NVML runs its initialisers, which have no preconditions; it stays loaded for the
        // process lifetime (the library lives in the static `Nvml`, which is never dropped), so the function
        // pointers never dangle. (Not a leaked Box: valgrind's memcheck pass would count that as lost.)
        let source = super::driver::driver_source(std::env::var_os(super::driver::DRIVER_ENV).as_deref()).ok()?;
        let lib = match source {
            super::driver::DriverSource::File(driver) if cfg!(windows) => {
                crate::os::open_library_file(&driver.with_file_name(LIBRARY_NAME)).ok()
            }
            _ => crate::os::open_system_library(LIBRARY_NAME).ok(),
        }?;
        // SAFETY: these are NVML's C signatures (nvml.h): `nvmlReturn_t nvmlInit_v2(void)`,
        // `nvmlDeviceGetHandleByUUID(const char*, nvmlDevice_t*)`, `nvmlDeviceGetMemoryInfo(nvmlDevice_t,
        // nvmlMemory_t*)` with `nvmlMemory_t = { unsigned long long total, free, used }`.
        unsafe {
            let init = *lib.get::<unsafe extern "C" fn() -> NvmlReturn>(b"nvmlInit_v2").ok()?;
            let by_uuid = *lib.get(b"nvmlDeviceGetHandleByUUID").ok()?;
            let memory = *lib.get(b"nvmlDeviceGetMemoryInfo").ok()?;
            (init() == 0).then_some(Nvml { by_uuid, memory, _lib: lib })
        }
    })
    .as_ref()
}

/// (free, total) bytes of the device with this UUID (`GPU-…` or `MIG-…`, as the census reports it), or None
/// when NVML is not available or does not answer.
pub fn memory_by_uuid(uuid: &str) -> Option<(u64, u64)> {
    let n = nvml()?;
    let c = CString::new(uuid).ok()?;
    let mut dev: NvmlDevice = std::ptr::null_mut();
    let mut m = NvmlMemory::default();
    // SAFETY: a NUL-terminated UUID and valid out-pointers; the handle comes from NVML and is only passed back.
    let ok = unsafe { (n.by_uuid)(c.as_ptr(), &mut dev) == 0 && (n.memory)(dev, &mut m) == 0 };
    (ok && m.total > 0).then_some((m.free, m.total))
}
