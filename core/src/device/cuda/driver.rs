//! The CUDA driver entry points hostfirst calls, resolved once, up front, from a driver library we open.
//!
//! Why not call `cudarc::driver::sys::cu*` directly? With `dynamic-loading`, each of those resolves its symbol
//! lazily on first call and **panics** when the symbol is missing, and declares the return type as a Rust
//! `enum`, so a driver newer than cudarc's bindings returning an error code the enum lacks would be undefined
//! behaviour. Here every entry point is resolved eagerly, a missing one is an ordinary error naming it, and
//! every result is a plain `u32`. The constants (error codes, flags, attributes) come from cudarc's bindings.
//!
//! Why open the library ourselves instead of `cudarc::driver::sys::culib()`? cudarc tries `libcuda.so` first,
//! and the CUDA toolkit ships a *stub* `libcuda.so` (every call fails with `CUDA_ERROR_STUB_LIBRARY`) that wins
//! when the toolkit's library directory is on `LD_LIBRARY_PATH`. The driver installs `libcuda.so.1`; we try it
//! first ([`LIBRARY_NAMES`]).
//!
//! The table lists exactly the symbols hostfirst calls; the stand-in driver (`tests/cuda_stub/`) implements
//! each of them. They all exist in drivers for CUDA 11.4 and newer ([`MIN_DRIVER_VERSION`]).

use crate::error::{Error, Result, Status};
use crate::forksafe::InitOnce;
use cudarc::driver::sys::{cudaError_enum as E, CUdevice_attribute_enum as A};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// A `CUresult` as the driver returns it. Kept as an integer: never converted to a Rust enum.
pub(crate) type CuResult = c_uint;
/// `CUDA_SUCCESS`.
pub(crate) const CUDA_SUCCESS: CuResult = E::CUDA_SUCCESS as CuResult;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: CuResult = E::CUDA_ERROR_OUT_OF_MEMORY as CuResult;
/// `CUDA_ERROR_NO_DEVICE`.
pub(crate) const CUDA_ERROR_NO_DEVICE: CuResult = E::CUDA_ERROR_NO_DEVICE as CuResult;
/// `CUDA_ERROR_NOT_READY`.
pub(crate) const CUDA_ERROR_NOT_READY: CuResult = E::CUDA_ERROR_NOT_READY as CuResult;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
pub(crate) const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CuResult =
    E::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED as CuResult;

/// The errors after which a context is unusable ("sticky"): every later call in it returns the same error
/// and only a new process recovers. Those the driver's documentation (`cuda.h`, `CUresult`) describes as
/// leaving "the process in an inconsistent state" / "the process must be terminated and relaunched", and the
/// two uncorrectable-hardware errors that do the same in practice (ECC, NVLink). Kept as numbers: some are
/// newer than the bindings' oldest supported driver (`CUDA_ERROR_CONTAINED` 12.4, `_TENSOR_MEMORY_LEAK` 12.8).
const STICKY: &[(CuResult, &str)] = &[
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (226, "CUDA_ERROR_CONTAINED"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (710, "CUDA_ERROR_ASSERT"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, "CUDA_ERROR_INVALID_PC"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE"),
];

/// True for an error that poisons its context (see [`STICKY`]).
pub(crate) fn is_sticky(code: CuResult) -> bool {
    STICKY.iter().any(|(c, _)| *c == code)
}

/// The oldest driver hostfirst accepts, as `cuDriverGetVersion` reports it (1000 * major + 10 * minor): 11.4.
///
/// Why 11.4: `cuDeviceGetUuid_v2` (the UUID nvidia-smi shows, 11.4), `CU_MEMHOSTREGISTER_READ_ONLY` (11.1,
/// needed to pin read-only file mappings) and `cuDevicePrimaryCtxRelease_v2` (11.0) all exist from 11.4 on.
pub const MIN_DRIVER_VERSION: i32 = 11040;

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub(crate) const ATTR_MULTIPROCESSOR_COUNT: c_int = A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as c_int;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub(crate) const ATTR_CC_MAJOR: c_int = A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as c_int;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub(crate) const ATTR_CC_MINOR: c_int = A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as c_int;
/// `CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED`: the device supports `cuMemHostRegister` at all.
pub(crate) const ATTR_HOST_REGISTER_SUPPORTED: c_int = A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED as c_int;
/// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`: the device takes DMA from third-party PCIe devices (NICs,
/// NVMe through nvidia-fs), which GPUDirect Storage needs.
pub(crate) const ATTR_GPU_DIRECT_RDMA_SUPPORTED: c_int = A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED as c_int;
/// `CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED`.
pub(crate) const ATTR_READ_ONLY_HOST_REGISTER_SUPPORTED: c_int =
    A::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED as c_int;

/// `CU_MEMHOSTALLOC_PORTABLE` / `CU_MEMHOSTREGISTER_PORTABLE`: pinned for every context, not only the current.
pub(crate) const HOST_PORTABLE: c_uint = cudarc::driver::sys::CU_MEMHOSTREGISTER_PORTABLE;
/// `CU_MEMHOSTREGISTER_READ_ONLY`: the device only reads the range (required for read-only mappings).
pub(crate) const HOST_REGISTER_READ_ONLY: c_uint = cudarc::driver::sys::CU_MEMHOSTREGISTER_READ_ONLY;
/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
pub(crate) const STREAM_NON_BLOCKING: c_uint =
    cudarc::driver::sys::CUstream_flags_enum::CU_STREAM_NON_BLOCKING as c_uint;
/// `CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC`: cheaper events, used only for completion, whose
/// `cuEventSynchronize` blocks the thread instead of spinning a core.
pub(crate) const EVENT_FLAGS: c_uint = cudarc::driver::sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as c_uint
    | cudarc::driver::sys::CUevent_flags_enum::CU_EVENT_BLOCKING_SYNC as c_uint;

/// The driver library names, tried in this order: the driver's own `libcuda.so.1` first, then the
/// development name (which the toolkit's stub also carries).
#[cfg(not(windows))]
pub const LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
/// The driver library names, tried in this order (from the System32 directory only: see [`library`]).
#[cfg(windows)]
pub const LIBRARY_NAMES: &[&str] = &["nvcuda.dll"];

/// The environment variable that names the driver library file to load (an absolute path) instead of the
/// system's: the only way a driver outside the system's place is loaded on Windows.
pub const DRIVER_ENV: &str = "HOSTFIRST_CUDA_DRIVER";

/// Where the driver library comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverSource {
    /// The system's driver, by [`LIBRARY_NAMES`]: the dynamic loader's search on Unix, the System32 directory
    /// on Windows (never the current directory, the program's directory or `PATH`).
    System,
    /// Exactly the file [`DRIVER_ENV`] names.
    File(std::path::PathBuf),
}

/// Where the driver comes from, given the value of [`DRIVER_ENV`] (unset or empty: the system's), or why that
/// value is refused (a relative path would be searched for, which is what the variable exists to avoid).
pub fn driver_source(value: Option<&std::ffi::OsStr>) -> std::result::Result<DriverSource, String> {
    match value {
        None => Ok(DriverSource::System),
        Some(v) if v.is_empty() => Ok(DriverSource::System),
        Some(v) => {
            let path = std::path::PathBuf::from(v);
            if path.is_absolute() {
                Ok(DriverSource::File(path))
            } else {
                Err(format!(
                    "{DRIVER_ENV}=\"{}\" is not an absolute path; it must name the driver library file itself",
                    path.display()
                ))
            }
        }
    }
}

/// Why the driver library did not load.
#[derive(Clone, Debug)]
pub(crate) enum LoadFailure {
    /// None of [`LIBRARY_NAMES`] loads from the system's place: the loader's message for the first name.
    System(String),
    /// [`DRIVER_ENV`] names a file that does not load (the file, the loader's message), or a value that is not
    /// an absolute path (no file, the reason).
    Named(Option<std::path::PathBuf>, String),
}

/// The loader's reason under libloading's "dlopen failed" / "LoadLibraryExW failed": dlerror's text on Unix,
/// the system error on Windows.
/// Opens the driver library (once per process), or says why it does not load. The file [`DRIVER_ENV`] names
/// when it is set; else the system's, by [`LIBRARY_NAMES`] through [`crate::os::open_system_library`], which on
/// Windows looks in the System32 directory only, so that an `nvcuda.dll` planted in the current directory (a
/// downloaded model's folder) or on `PATH` is never loaded, and on Unix never reaches the current folder through an
/// empty or relative `LD_LIBRARY_PATH` entry.
pub(crate) fn library() -> std::result::Result<&'static libloading::Library, LoadFailure> {
    static LIB: InitOnce<std::result::Result<libloading::Library, LoadFailure>> = InitOnce::new();
    LIB.get_or_init(|| match driver_source(std::env::var_os(DRIVER_ENV).as_deref()) {
        Err(why) => Err(LoadFailure::Named(None, why)),
        Ok(DriverSource::File(path)) => crate::os::open_library_file(&path)
            .map_err(|e| LoadFailure::Named(Some(path.clone()), crate::os::loader_message(&e))),
        Ok(DriverSource::System) => {
            let mut first_error = None;
            for name in LIBRARY_NAMES {
                match crate::os::open_system_library(name) {
                    Ok(lib) => return Ok(lib),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            Err(LoadFailure::System(first_error.unwrap_or_default()))
        }
    })
    .as_ref()
    .map_err(|e| e.clone())
}

/// Opaque driver handles (`CUcontext`, `CUstream`, `CUevent`) as raw pointers.
pub(crate) type RawHandle = *mut c_void;

macro_rules! driver_api {
    ($( $(#[$doc:meta])* $field:ident = $sym:literal : fn($($arg:ty),* $(,)?); )*) => {
        /// The resolved entry points. Function pointers into a library that stays loaded for the process
        /// lifetime (cudarc keeps it in a `static`), so they never dangle.
        pub(crate) struct Api {
            $( $(#[$doc])* pub(crate) $field: unsafe extern "C" fn($($arg),*) -> CuResult, )*
        }

        /// Every symbol the table resolves, in order (the stand-in must export all of them).
        pub const SYMBOLS: &[&str] = &[$($sym),*];

        impl Api {
            /// Resolves every entry point, or names the first one missing.
            ///
            /// # Safety
            /// `lib` must be a CUDA driver whose symbols have the C signatures declared here (those of
            /// `cuda.h`).
            pub(crate) unsafe fn load(lib: &'static libloading::Library) -> std::result::Result<Api, String> {
                Ok(Api {
                    $(
                        // SAFETY: the declared type is the symbol's C signature (caller's contract); the
                        // pointer is copied out of the `Symbol` and stays valid because `lib` is 'static.
                        $field: unsafe {
                            *lib.get::<unsafe extern "C" fn($($arg),*) -> CuResult>($sym.as_bytes())
                                .map_err(|_| $sym.to_string())?
                        },
                    )*
                })
            }
        }
    };
}

driver_api! {
    /// `cuInit(flags)`.
    init = "cuInit": fn(c_uint);
    /// `cuDriverGetVersion(&version)`.
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    /// `cuGetErrorName(code, &str)`.
    get_error_name = "cuGetErrorName": fn(CuResult, *mut *const c_char);
    /// `cuGetErrorString(code, &str)`.
    get_error_string = "cuGetErrorString": fn(CuResult, *mut *const c_char);
    /// `cuDeviceGetCount(&n)`.
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    /// `cuDeviceGet(&dev, ordinal)`.
    device_get = "cuDeviceGet": fn(*mut c_int, c_int);
    /// `cuDeviceGetName(buf, len, dev)`.
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, c_int);
    /// `cuDeviceGetUuid_v2(&uuid, dev)` (the UUID nvidia-smi prints; `CUuuid` is 16 bytes).
    device_get_uuid = "cuDeviceGetUuid_v2": fn(*mut [u8; 16], c_int);
    /// `cuDeviceGetPCIBusId(buf, len, dev)`.
    device_get_pci_bus_id = "cuDeviceGetPCIBusId": fn(*mut c_char, c_int, c_int);
    /// `cuDeviceGetAttribute(&value, attribute, dev)`.
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, c_int);
    /// `cuDeviceTotalMem_v2(&bytes, dev)`.
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, c_int);
    /// `cuDevicePrimaryCtxRetain(&ctx, dev)`.
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut RawHandle, c_int);
    /// `cuCtxSetCurrent(ctx)`.
    ctx_set_current = "cuCtxSetCurrent": fn(RawHandle);
    /// `cuCtxGetCurrent(&ctx)`.
    ctx_get_current = "cuCtxGetCurrent": fn(*mut RawHandle);
    /// `cuMemGetInfo_v2(&free, &total)` (current context's device).
    mem_get_info = "cuMemGetInfo_v2": fn(*mut usize, *mut usize);
    /// `cuMemAlloc_v2(&dptr, bytes)`.
    mem_alloc = "cuMemAlloc_v2": fn(*mut u64, usize);
    /// `cuMemFree_v2(dptr)`.
    mem_free = "cuMemFree_v2": fn(u64);
    /// `cuMemHostAlloc(&ptr, bytes, flags)`.
    mem_host_alloc = "cuMemHostAlloc": fn(*mut *mut c_void, usize, c_uint);
    /// `cuMemFreeHost(ptr)`.
    mem_free_host = "cuMemFreeHost": fn(*mut c_void);
    /// `cuMemHostRegister_v2(ptr, bytes, flags)`.
    mem_host_register = "cuMemHostRegister_v2": fn(*mut c_void, usize, c_uint);
    /// `cuMemHostUnregister(ptr)`.
    mem_host_unregister = "cuMemHostUnregister": fn(*mut c_void);
    /// `cuMemcpyHtoDAsync_v2(dst, src, bytes, stream)`.
    memcpy_htod_async = "cuMemcpyHtoDAsync_v2": fn(u64, *const c_void, usize, RawHandle);
    /// `cuMemcpyDtoH_v2(dst, src, bytes)`.
    memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, u64, usize);
    /// `cuMemcpyDtoHAsync_v2(dst, src, bytes, stream)`.
    memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, u64, usize, RawHandle);
    /// `cuMemcpyDtoDAsync_v2(dst, src, bytes, stream)`.
    memcpy_dtod_async = "cuMemcpyDtoDAsync_v2": fn(u64, u64, usize, RawHandle);
    /// `cuMemsetD8Async(dst, value, bytes, stream)`.
    memset_d8_async = "cuMemsetD8Async": fn(u64, u8, usize, RawHandle);
    /// `cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, bytes, stream)`.
    memcpy_peer_async = "cuMemcpyPeerAsync": fn(u64, RawHandle, u64, RawHandle, usize, RawHandle);
    /// `cuDeviceCanAccessPeer(&can, dev, peer_dev)`.
    device_can_access_peer = "cuDeviceCanAccessPeer": fn(*mut c_int, c_int, c_int);
    /// `cuCtxEnablePeerAccess(peer_ctx, flags)` (for the current context).
    ctx_enable_peer_access = "cuCtxEnablePeerAccess": fn(RawHandle, c_uint);
    /// `cuStreamCreate(&stream, flags)`.
    stream_create = "cuStreamCreate": fn(*mut RawHandle, c_uint);
    /// `cuStreamDestroy_v2(stream)`.
    stream_destroy = "cuStreamDestroy_v2": fn(RawHandle);
    /// `cuStreamSynchronize(stream)`.
    stream_synchronize = "cuStreamSynchronize": fn(RawHandle);
    /// `cuStreamWaitEvent(stream, event, flags)`.
    stream_wait_event = "cuStreamWaitEvent": fn(RawHandle, RawHandle, c_uint);
    /// `cuEventCreate(&event, flags)`.
    event_create = "cuEventCreate": fn(*mut RawHandle, c_uint);
    /// `cuEventRecord(event, stream)`.
    event_record = "cuEventRecord": fn(RawHandle, RawHandle);
    /// `cuEventQuery(event)`.
    event_query = "cuEventQuery": fn(RawHandle);
    /// `cuEventSynchronize(event)`.
    event_synchronize = "cuEventSynchronize": fn(RawHandle);
    /// `cuEventDestroy_v2(event)`.
    event_destroy = "cuEventDestroy_v2": fn(RawHandle);
    /// `cuCtxSynchronize()` (the current context: every stream's work, hostfirst's and others').
    ctx_synchronize = "cuCtxSynchronize": fn();
    /// `cuStreamIsCapturing(stream, &status)` (`CUstreamCaptureStatus`: 0 none, 1 active, 2 invalidated).
    stream_is_capturing = "cuStreamIsCapturing": fn(RawHandle, *mut c_int);
    /// `cuThreadExchangeStreamCaptureMode(&mode)` (`CUstreamCaptureMode`: 0 global, 1 thread-local, 2 relaxed).
    thread_exchange_stream_capture_mode = "cuThreadExchangeStreamCaptureMode": fn(*mut c_int);
}

impl Api {
    /// The driver's name for an error code (`"CUDA_ERROR_OUT_OF_MEMORY"`), or `"CUDA error <n>"` when the
    /// driver does not know it.
    pub(crate) fn error_name(&self, code: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; on success the driver returns a static NUL-terminated string.
        let r = unsafe { (self.get_error_name)(code, &mut p) };
        if r == CUDA_SUCCESS && !p.is_null() {
            // SAFETY: non-NULL static string from the driver.
            return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        }
        format!("CUDA error {code}")
    }

    /// The driver's description of an error code, or "" when it has none.
    pub(crate) fn error_string(&self, code: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: as in `error_name`.
        let r = unsafe { (self.get_error_string)(code, &mut p) };
        if r == CUDA_SUCCESS && !p.is_null() {
            // SAFETY: non-NULL static string from the driver.
            return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        }
        String::new()
    }

    /// `Ok(())` for `CUDA_SUCCESS`, else a `DEVICE_ERROR` whose message is `"<what>: <NAME> (<description>)"`.
    /// `what` names the call, the device and the byte counts.
    pub(crate) fn check(&self, code: CuResult, what: impl FnOnce() -> String) -> Result<()> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        Err(Error::new(Status::DeviceError, self.describe(code, &what())))
    }

    /// `"<what>: <NAME> (<description>)"`, and for a sticky error what it means for the process.
    pub(crate) fn describe(&self, code: CuResult, what: &str) -> String {
        let desc = self.error_string(code);
        let sticky = if is_sticky(code) {
            "; this is a sticky error: the device's CUDA context is now unusable and every later CUDA call in \
             this process will fail the same way; restart the process"
        } else {
            ""
        };
        if desc.is_empty() {
            format!("{what} failed: {}{sticky}", self.error_name(code))
        } else {
            format!("{what} failed: {} ({desc}){sticky}", self.error_name(code))
        }
    }
}

/// Formats a `cuDriverGetVersion` number as `major.minor` (12080 → `"12.8"`).
pub fn format_driver_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Formats a `CUuuid` the way nvidia-smi does: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lower-case hex, or
/// `MIG-…` for a MIG instance.
pub fn format_uuid(bytes: &[u8; 16], mig: bool) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let prefix = if mig { "MIG" } else { "GPU" };
    format!("{prefix}-{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// True when a device name is a MIG instance's: CUDA names them `<GPU name> MIG <profile>`, the profile
/// starting with the slice count (`NVIDIA A100-SXM4-40GB MIG 1g.5gb`, `NVIDIA H100 80GB HBM3 MIG 3g.40gb`).
pub fn is_mig_name(name: &str) -> bool {
    let words: Vec<&str> = name.split_whitespace().collect();
    words.windows(2).any(|w| w[0] == "MIG" && w[1].starts_with(|c: char| c.is_ascii_digit()) && w[1].contains("g."))
}

/// Reads a NUL-terminated string the driver wrote into `buf` (lossy UTF-8, trimmed).
pub(crate) fn c_buf_to_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(format_driver_version(12080), "12.8");
        assert_eq!(format_driver_version(11040), "11.4");
        assert_eq!(format_driver_version(13000), "13.0");
        assert_eq!(format_driver_version(MIN_DRIVER_VERSION), "11.4");
    }

    #[test]
    fn uuid_like_nvidia_smi() {
        let mut b = [0u8; 16];
        for (i, x) in b.iter_mut().enumerate() {
            *x = 0xa0 + i as u8;
        }
        assert_eq!(format_uuid(&b, false), "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
        assert_eq!(format_uuid(&b, true), "MIG-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
        let u = format_uuid(&[0xff; 16], false);
        assert_eq!(u.len(), 40);
        assert_eq!(u, u.to_ascii_lowercase().replace("gpu-", "GPU-"));
    }

    #[test]
    fn mig_names() {
        assert!(is_mig_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb"));
        assert!(is_mig_name("NVIDIA H100 80GB HBM3 MIG 3g.40gb"));
        assert!(!is_mig_name("NVIDIA H100 80GB HBM3"));
        assert!(!is_mig_name("MIGHTY GPU 2"));
        assert!(!is_mig_name("Stand-in GPU MIG"));
    }

    #[test]
    fn sticky_errors() {
        assert!(is_sticky(700) && is_sticky(719) && is_sticky(214));
        // Documented as sticky and missing before issue 23.
        for code in [E::CUDA_ERROR_LAUNCH_TIMEOUT, E::CUDA_ERROR_ASSERT, E::CUDA_ERROR_NVLINK_UNCORRECTABLE] {
            assert!(is_sticky(code as CuResult), "{code:?}");
        }
        assert!(is_sticky(226) && is_sticky(721) && is_sticky(911));
        assert!(!is_sticky(CUDA_ERROR_OUT_OF_MEMORY) && !is_sticky(CUDA_ERROR_NOT_READY) && !is_sticky(1));
        for code in [E::CUDA_ERROR_TIMEOUT, E::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, E::CUDA_ERROR_NOT_PERMITTED] {
            assert!(!is_sticky(code as CuResult), "{code:?} is not sticky");
        }
        // The names match the bindings where the bindings have them.
        for (code, name) in STICKY {
            for e in [E::CUDA_ERROR_ECC_UNCORRECTABLE, E::CUDA_ERROR_ASSERT, E::CUDA_ERROR_EXTERNAL_DEVICE] {
                if e as CuResult == *code {
                    assert_eq!(format!("{e:?}"), *name);
                }
            }
        }
    }

    #[test]
    fn c_buffers() {
        assert_eq!(c_buf_to_string(b"0000:3b:00.0\0garbage"), "0000:3b:00.0");
        assert_eq!(c_buf_to_string(b"no nul"), "no nul");
        assert_eq!(c_buf_to_string(b"\0"), "");
    }

    #[test]
    fn the_driver_env_names_an_absolute_file_or_nothing() {
        use std::ffi::OsStr;
        assert_eq!(driver_source(None), Ok(DriverSource::System));
        assert_eq!(driver_source(Some(OsStr::new(""))), Ok(DriverSource::System));
        let abs = if cfg!(windows) { r"C:\drivers\nvcuda.dll" } else { "/opt/driver/libcuda.so.1" };
        assert_eq!(driver_source(Some(OsStr::new(abs))), Ok(DriverSource::File(abs.into())));
        // A bare name or a relative path would be searched for (the current directory, PATH): refused.
        for rel in ["nvcuda.dll", "libcuda.so.1", "./nvcuda.dll", "drivers/nvcuda.dll"] {
            let e = driver_source(Some(OsStr::new(rel))).unwrap_err();
            assert_eq!(
                e,
                format!("HOSTFIRST_CUDA_DRIVER=\"{rel}\" is not an absolute path; it must name the driver library file itself")
            );
        }
    }

    #[test]
    fn symbols_are_the_driver_names() {
        assert!(SYMBOLS.contains(&"cuMemAlloc_v2"));
        assert!(SYMBOLS.contains(&"cuStreamWaitEvent"));
        assert_eq!(LIBRARY_NAMES.first(), Some(&if cfg!(windows) { "nvcuda.dll" } else { "libcuda.so.1" }));
        assert!(SYMBOLS.contains(&"cuDeviceGetUuid_v2"));
        assert!(SYMBOLS.iter().all(|s| s.starts_with("cu")));
        let mut sorted = SYMBOLS.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), SYMBOLS.len(), "no symbol listed twice");
    }
}
