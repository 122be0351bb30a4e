//! The pinned staging ring as placement uses it. The ring itself (slabs, pool, [`transfer`]) is the engine's
//! device writer side, [`crate::engine::staging`]; here are what it needs of placement: copying a tensor
//! view through it ([`to_cuda`]) and freeing the cached memory of both the ring and resident mode
//! ([`release_cached_memory`]).

use crate::device::cuda::DeviceMemory;
pub use crate::engine::staging::{
    cached_bytes, geometry, transfer, RingConfig, DEFAULT_SLAB_BYTES, DEFAULT_STAGING_BYTES, MIN_SLAB_BYTES,
    POOL_CAP_BYTES,
};
use crate::error::{Error, Result, Status};
use crate::file::View;

/// Frees every cached staging slab and every cached resident registration, and does the DLPack releases kept
/// while a CUDA graph capture was seen (when none is seen now; see [`crate::device::cuda::capture`]). Safe at
/// any time: transfers in progress keep their own slabs and return them (or free them) when they finish.
pub fn release_cached_memory() {
    crate::device::cuda::capture::safe_point();
    crate::engine::staging::release_slabs();
    super::resident::release_all();
}

/// Copies all of `view` into `dst` (which must hold `view.nbytes()` bytes) through the staging ring.
pub fn to_cuda(
    view: &View,
    dst: &DeviceMemory,
    cfg: &RingConfig,
    progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<()> {
    let total = view.nbytes();
    if (dst.len() as u64) < total {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("destination holds {} bytes, the tensor has {total}", dst.len()),
        ));
    }
    transfer(total, dst, cfg, |off, d| view.read_at(off, d), progress)
}
