//! The CUDA driver, reached through cudarc with dynamic loading. (Being written: probe and memory only.)

use super::census::{BackendStatus, DeviceInfo};
use crate::error::{Error, Result, Status};

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

/// Probes the driver without creating a context.
pub fn probe() -> CudaProbe {
    CudaProbe {
        status: BackendStatus::LibraryNotFound,
        reason: "CUDA probing not yet implemented".into(),
        driver_version: String::new(),
        devices: Vec::new(),
    }
}

/// Live (free, total) memory of CUDA device `ordinal` (retains its primary context).
pub fn mem_info(ordinal: u32) -> Result<(u64, u64)> {
    Err(Error::new(Status::Unavailable, format!("cuda:{ordinal}: CUDA is not available")))
}
