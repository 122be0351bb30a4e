//! GPUDirect Storage (cuFile) in the census: the `gds` entry, usable or a typed reason why not.
//!
//! Reading through cuFile waits for hardware; the census does not: it says whether this machine could, and
//! when not, why, in the order a user would fix things:
//!
//! 1. Linux only (`NOT_COMPILED` elsewhere); hidden with cuda by `HOSTFIRST_PLATFORMS` (`HIDDEN_BY_ENV`);
//! 2. WSL (`UNSUPPORTED_PLATFORM`: `/proc/sys/kernel/osrelease` names Microsoft or WSL);
//! 3. libcufile (`LIBRARY_NOT_FOUND`): `libcufile.so.0`, then `libcufile.so`, from the absolute folders of
//!    `LD_LIBRARY_PATH` and the loader's default search, **never from the current folder** (where
//!    `LD_LIBRARY_PATH` has an empty or relative entry, the loader's search could reach it, so only well-known
//!    absolute folders are tried instead);
//! 4. compatibility mode forced (`COMPAT_MODE_FORCED`): `CUFILE_FORCE_COMPAT_MODE=true`, or
//!    `"force_compat_mode": true` in the cufile.json `CUFILE_ENV_PATH_JSON` names (else /etc/cufile.json);
//! 5. the nvidia-fs kernel module (`MODULE_MISSING`: no /proc/driver/nvidia-fs);
//! 6. /run/udev (`UDEV_UNREADABLE`: cuFile finds its storage devices there; containers often lack it);
//! 7. CUDA (the cuda backend's own status when it is not available) and GPUDirect RDMA on at least one device
//!    (`NO_RDMA_SUPPORT`: `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`);
//! 8. `cuFileDriverOpen` (`INIT_FAILED` with cuFile's error; closed again at once).
//!
//! Like CUDA's, the library is loaded only when asked: the census's cpu and cuda entries never load it; the
//! `gds` entry is probed the first time it is described (`hostfirst_backend_describe(2)`, `hostfirst devices`),
//! once per process. Available: `driver_version` is cuFile's version, `device_count` the devices with
//! GPUDirect RDMA.

use super::types::Backend;
use super::types::BackendStatus;
use std::ffi::c_int;
use std::path::PathBuf;

/// The libcufile names, in the order tried.
pub const LIBRARY_NAMES: &[&str] = &["libcufile.so.0", "libcufile.so"];

/// What the probe looks at: the system's folders (a test points `root` elsewhere), the environment, and the
/// CUDA facts (whether cuda is available, and which devices support GPUDirect RDMA).
pub struct Sys<'a> {
    /// Prefix of `/proc/...` and `/run/udev` (`/` on a real system).
    pub root: PathBuf,
    /// The environment.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// `Err(reason)` when the cuda backend is not available, else for each device whether it supports
    /// GPUDirect RDMA.
    pub cuda: &'a dyn Fn() -> Result<Vec<bool>, String>,
}

/// The outcome of a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GdsProbe {
    /// Usable or why not.
    pub status: BackendStatus,
    /// Why not ("" when usable).
    pub reason: String,
    /// cuFile's version `major.minor` when known.
    pub version: String,
    /// Devices with GPUDirect RDMA (0 unless usable).
    pub devices: u32,
}

fn no(status: BackendStatus, reason: String, version: &str) -> GdsProbe {
    GdsProbe { status, reason, version: version.to_string(), devices: 0 }
}

/// The `gds` census entry of this process, probed on first use (see the module documentation) with the
/// census's `cuda` entry (the census calls this; the first call's entry is the process's).
pub fn backend(cuda: &Backend) -> &'static Backend {
    static B: crate::forksafe::InitOnce<Backend> = crate::forksafe::InitOnce::new();
    B.get_or_init(|| {
        let p = probe_process(cuda);
        Backend {
            name: "gds",
            status: p.status,
            reason: p.reason,
            driver_version: p.version,
            device_count: if p.status == BackendStatus::Available { p.devices } else { 0 },
        }
    })
}

fn probe_process(cuda_entry: &Backend) -> GdsProbe {
    if let Some(reason) = super::platforms::platforms().hidden_reason("gds") {
        return no(BackendStatus::HiddenByEnv, reason, "");
    }
    let env = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let cuda = || -> Result<Vec<bool>, String> {
        let b = cuda_entry;
        if b.status != BackendStatus::Available {
            return Err(format!("{} ({})", b.status.name(), b.reason));
        }
        Ok((0..b.device_count).map(super::cuda::gpu_direct_rdma_supported).collect())
    };
    // A test build may point the system's folders elsewhere (tests/it/gds.rs).
    let root = if cfg!(feature = "test-hooks") { env("HOSTFIRST_TEST_GDS_ROOT") } else { None };
    probe(&Sys { root: PathBuf::from(root.unwrap_or_else(|| "/".to_string())), env: &env, cuda: &cuda })
}

/// Probes GPUDirect Storage on `sys` (see the module documentation for the order of the checks).
pub fn probe(sys: &Sys<'_>) -> GdsProbe {
    if !cfg!(target_os = "linux") {
        return no(BackendStatus::NotCompiled, "GPUDirect Storage (cuFile) exists on Linux only".to_string(), "");
    }
    let at = |p: &str| sys.root.join(p.trim_start_matches('/'));
    if let Ok(release) = std::fs::read_to_string(at("/proc/sys/kernel/osrelease")) {
        let lower = release.to_ascii_lowercase();
        if lower.contains("microsoft") || lower.contains("wsl") {
            return no(
                BackendStatus::UnsupportedPlatform,
                format!("this is WSL (kernel {}): GPUDirect Storage is not supported there", release.trim()),
                "",
            );
        }
    }
    let lib = match open_library(&|k| (sys.env)(k)) {
        Ok(l) => l,
        Err(why) => return no(BackendStatus::LibraryNotFound, why, ""),
    };
    let version = lib.version().map(format_version).unwrap_or_default();
    if let Some(why) = compat_forced(sys) {
        return no(BackendStatus::CompatModeForced, why, &version);
    }
    if !at("/proc/driver/nvidia-fs").exists() {
        return no(
            BackendStatus::ModuleMissing,
            "the nvidia-fs kernel module is not loaded (no /proc/driver/nvidia-fs): cuFile would read through \
             host memory in compatibility mode; load it with 'modprobe nvidia-fs' (package nvidia-fs)"
                .to_string(),
            &version,
        );
    }
    if let Err(e) = std::fs::read_dir(at("/run/udev")) {
        return no(
            BackendStatus::UdevUnreadable,
            format!(
                "/run/udev cannot be read ({e}): cuFile finds the storage devices there (in a container, mount \
                 the host's /run/udev read-only)"
            ),
            &version,
        );
    }
    let rdma = match (sys.cuda)() {
        Ok(r) => r,
        Err(why) => {
            return no(
                BackendStatus::NoDevices,
                format!("GPUDirect Storage needs the cuda backend, which is not available: {why}"),
                &version,
            )
        }
    };
    let devices = rdma.iter().filter(|s| **s).count() as u32;
    if devices == 0 {
        return no(
            BackendStatus::NoRdmaSupport,
            format!(
                "no CUDA device supports GPUDirect RDMA (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED is 0 on {} \
                 device{})",
                rdma.len(),
                if rdma.len() == 1 { "" } else { "s" }
            ),
            &version,
        );
    }
    if let Err(e) = lib.open_and_close() {
        return no(BackendStatus::InitFailed, format!("cuFileDriverOpen failed: {e}"), &version);
    }
    GdsProbe { status: BackendStatus::Available, reason: String::new(), version, devices }
}

/// cuFile's version number (`1000 * major + 10 * minor`, as CUDA's) as `major.minor`.
pub fn format_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Why compatibility mode is forced, if it is: the environment first (it overrides the file), then the file.
fn compat_forced(sys: &Sys<'_>) -> Option<String> {
    if let Some(v) = (sys.env)("CUFILE_FORCE_COMPAT_MODE") {
        if matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes") {
            return Some(format!(
                "CUFILE_FORCE_COMPAT_MODE={v} forces cuFile's compatibility mode (reads through host memory, \
                 not GPUDirect)"
            ));
        }
        return None;
    }
    let (path, named) = match (sys.env)("CUFILE_ENV_PATH_JSON") {
        Some(p) => (PathBuf::from(p), true),
        None => (sys.root.join("etc/cufile.json"), false),
    };
    let text = std::fs::read_to_string(&path).ok()?;
    if config_forces_compat(&text) {
        let how = if named { " (CUFILE_ENV_PATH_JSON)" } else { "" };
        return Some(format!(
            "{}{how} sets \"force_compat_mode\": true: cuFile reads through host memory, not GPUDirect",
            path.display()
        ));
    }
    None
}

/// Whether a cufile.json text sets `properties.force_compat_mode` to true. The file allows `//` comments
/// (NVIDIA's own has many); they are removed outside strings before parsing. A file that does not parse
/// forces nothing (cuFile itself would refuse it and say so).
pub fn config_forces_compat(text: &str) -> bool {
    let mut json = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = '\0';
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            }
            if !in_str && c == '/' && prev == '/' {
                cut = i - 1;
                break;
            }
            prev = c;
        }
        json.push_str(&line[..cut]);
        json.push('\n');
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) else { return false };
    v.get("properties").and_then(|p| p.get("force_compat_mode")).and_then(|b| b.as_bool()) == Some(true)
}

/// `CUfileError_t`: cuFile's error and, for CUDA errors, the driver's.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct CuFileError {
    err: c_int,
    cu_err: c_int,
}

/// cuFile's names of the errors `cuFileDriverOpen` returns (cufile.h's `CUfileOpError`).
fn error_name(e: c_int) -> &'static str {
    match e {
        5001 => "CU_FILE_DRIVER_NOT_INITIALIZED",
        5002 => "CU_FILE_DRIVER_INVALID_PROPS",
        5003 => "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
        5004 => "CU_FILE_DRIVER_VERSION_MISMATCH",
        5005 => "CU_FILE_DRIVER_VERSION_READ_ERROR",
        5006 => "CU_FILE_DRIVER_CLOSING",
        5007 => "CU_FILE_PLATFORM_NOT_SUPPORTED",
        5008 => "CU_FILE_IO_NOT_SUPPORTED",
        5009 => "CU_FILE_DEVICE_NOT_SUPPORTED",
        5010 => "CU_FILE_NVFS_DRIVER_ERROR",
        5011 => "CU_FILE_CUDA_DRIVER_ERROR",
        _ => "an error cuFile does not name here",
    }
}

/// The opened library (kept loaded for the process, like CUDA's driver).
struct Lib(&'static libloading::Library);

impl Lib {
    fn version(&self) -> Option<i32> {
        type F = unsafe extern "C" fn(*mut c_int) -> CuFileError;
        // SAFETY: cufile.h declares `CUfileError_t cuFileGetVersion(int *version)`; the library stays loaded.
        unsafe {
            let f: F = *self.0.get::<F>(b"cuFileGetVersion").ok()?;
            let mut v: c_int = 0;
            (f(&mut v).err == 0).then_some(v)
        }
    }

    fn open_and_close(&self) -> Result<(), String> {
        type F = unsafe extern "C" fn() -> CuFileError;
        // SAFETY: cufile.h declares `CUfileError_t cuFileDriverOpen(void)` and `cuFileDriverClose(_v2)(void)`.
        unsafe {
            let open: F = *self.0.get::<F>(b"cuFileDriverOpen").map_err(|e| format!("no cuFileDriverOpen: {e}"))?;
            let r = open();
            if r.err != 0 {
                let cuda = if r.cu_err != 0 { format!(", CUDA error {}", r.cu_err) } else { String::new() };
                return Err(format!("error {} ({}){cuda}", r.err, error_name(r.err)));
            }
            let close = self.0.get::<F>(b"cuFileDriverClose_v2").or_else(|_| self.0.get::<F>(b"cuFileDriverClose"));
            if let Ok(close) = close {
                close();
            }
        }
        Ok(())
    }
}

/// Opens libcufile (once per process), never from the current folder.
fn open_library(env: &dyn Fn(&str) -> Option<String>) -> Result<Lib, String> {
    static LIB: crate::forksafe::InitOnce<Result<libloading::Library, String>> = crate::forksafe::InitOnce::new();
    let r = LIB.get_or_init(|| {
        let library_path = env("LD_LIBRARY_PATH");
        let mut first_error = None;
        for name in LIBRARY_NAMES {
            match crate::os::open_system_library_with(name, library_path.clone().map(Into::into)) {
                Ok(l) => return Ok(l),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let loader = first_error.map(|e| format!(": {e}")).unwrap_or_default();
        Err(format!(
            "libcufile could not be loaded (tried {}{loader}); install NVIDIA GPUDirect Storage \
             (the nvidia-gds package) or add the folder holding libcufile.so.0 to LD_LIBRARY_PATH",
            LIBRARY_NAMES.join(", ")
        ))
    });
    match r.as_ref() {
        Ok(l) => Ok(Lib(l)),
        Err(e) => Err(e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hostfirst-gds-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn wsl_is_found_before_anything_is_loaded() {
        let root = tmp("wsl");
        std::fs::create_dir_all(root.join("proc/sys/kernel")).unwrap();
        std::fs::write(root.join("proc/sys/kernel/osrelease"), "5.15.167.4-microsoft-standard-WSL2\n").unwrap();
        let env = |_: &str| None;
        let cuda = || -> Result<Vec<bool>, String> { panic!("CUDA is not asked on WSL") };
        let p = probe(&Sys { root: root.clone(), env: &env, cuda: &cuda });
        assert_eq!(p.status, BackendStatus::UnsupportedPlatform);
        assert!(p.reason.contains("WSL") && p.reason.contains("5.15.167.4-microsoft-standard-WSL2"), "{}", p.reason);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_config_forces_compat_mode_only_when_it_says_so() {
        let nvidia_like = r#"{
            // a comment "with quotes"
            "logging": { "dir": "/var/log//cufile" },
            "properties": {
                // allow compat mode
                "allow_compat_mode": true,
                "force_compat_mode": true
            }
        }"#;
        assert!(config_forces_compat(nvidia_like));
        assert!(!config_forces_compat(
            &nvidia_like.replace("\"force_compat_mode\": true", "\"force_compat_mode\": false")
        ));
        assert!(!config_forces_compat(r#"{"properties": {"allow_compat_mode": true}}"#));
        assert!(!config_forces_compat("not json"));
    }

    #[test]
    fn versions_read_as_cuda_does() {
        assert_eq!(format_version(1130), "1.13");
        assert_eq!(format_version(12080), "12.8");
    }
}
