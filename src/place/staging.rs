//! Host → CUDA copies. (Simple version: one pinned chunk at a time; the ring engine replaces it.)

use crate::device::cuda::{DeviceMemory, PinnedHostMemory};
use crate::error::{Error, Result, Status};
use crate::load::TensorView;

/// Copies all of `view` into `dst` through page-locked staging.
pub fn to_cuda(
    view: &TensorView,
    dst: &DeviceMemory,
    _threads: usize,
    chunk: usize,
    mut progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<()> {
    let total = view.nbytes();
    let mut staging = PinnedHostMemory::alloc(chunk.min(total.max(1) as usize))?;
    let mut off = 0u64;
    while off < total {
        let n = (total - off).min(staging.len() as u64) as usize;
        view.read_at(off, &mut staging.as_mut_slice()[..n])?;
        dst.copy_from_host(off as usize, &staging.as_slice()[..n])?;
        off += n as u64;
        if let Some(p) = progress.as_mut() {
            if p(off, total) {
                return Err(Error::new(Status::Cancelled, "cancelled by the progress callback".to_string()));
            }
        }
    }
    Ok(())
}
