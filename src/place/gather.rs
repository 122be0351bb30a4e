//! The data-loader primitive: B windows of T elements from a 1-D host tensor, assembled as a [B, T] batch on
//! a device in one transfer, into a destination that is reused step after step.
//!
//! cpu / cuda_host: the windows are read straight into the destination. cuda:N: they are read into one
//! page-locked staging buffer, then one asynchronous host-to-device copy on the gather's own stream moves
//! the batch, and `run` returns once it has completed. A step allocates nothing.
//!
//! How a window is read depends on the source. A tensor whose pages were mapped by
//! [`TensorView::prefault`] (or one over a memory buffer) is copied from the mapping: a memcpy per window,
//! the fastest way. Otherwise each window is one positioned read (`pread`): a window's first touch of an
//! unpopulated mapping costs a page fault, which on the benchmark machine made a window 1.5-4x slower than
//! a `pread` of it (BENCHMARKS.md, section 3), and a file truncated under the gather gives `TRUNCATED`
//! instead of SIGBUS.

use super::buffer::{Buffer, Memory};
use crate::device::cuda::{PinnedHostMemory, Stream};
use crate::device::fit;
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::TensorView;
use std::sync::{Arc, Mutex};

/// A reusable gather: the [batch, window] destination buffer on its device, plus staging for CUDA.
pub struct Gather {
    device: Device,
    dtype: DType,
    batch: u64,
    window: u64,
    elem: usize,
    dest: Arc<Mutex<Buffer>>,
    staging: Option<PinnedHostMemory>,
    stream: Option<Stream>,
}

impl Gather {
    /// Allocates (after the fit check) a `[batch, window]` destination of `dtype` on `device`, and for CUDA
    /// its staging and stream. Errors: `INVALID_ARGUMENT` (batch or window 0, a sub-byte dtype, size
    /// overflow), `OUT_OF_MEMORY` from the fit check, `DEVICE_ERROR`, `NO_SUCH_DEVICE`.
    pub fn new(device: Device, dtype: DType, batch: u64, window: u64) -> Result<Gather> {
        let device = device.validate()?;
        if batch == 0 || window == 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: batch ({batch}) and window ({window}) must be positive"),
            ));
        }
        if dtype.bits() % 8 != 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: dtype {} is not a whole number of bytes", dtype.name()),
            ));
        }
        let elem = (dtype.bits() / 8) as usize;
        let nbytes = batch
            .checked_mul(window)
            .and_then(|n| n.checked_mul(elem as u64))
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::new(Status::InvalidArgument, format!("gather: {batch} x {window} elements overflow"))
            })?;
        let what = format!("gather batch [{batch}, {window}] {}", dtype.name());
        let staging_bytes = if device.kind == DeviceKind::CUDA { nbytes } else { 0 };
        fit::check(&what, nbytes, device)?;
        if staging_bytes > 0 {
            fit::check(&format!("{what} staging"), staging_bytes, Device::CUDA_HOST)?;
        }
        let dest = Buffer::alloc("batch", dtype, &[batch, window], nbytes, device)?;
        let (staging, stream) = if device.kind == DeviceKind::CUDA {
            (Some(PinnedHostMemory::alloc_on(device.ordinal, nbytes as usize)?), Some(Stream::new(device.ordinal)?))
        } else {
            (None, None)
        };
        Ok(Gather { device, dtype, batch, window, elem, dest: Arc::new(Mutex::new(dest)), staging, stream })
    }

    /// The device of the destination.
    pub fn device(&self) -> Device {
        self.device
    }
    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Rows (B).
    pub fn batch(&self) -> u64 {
        self.batch
    }
    /// Elements per row (T).
    pub fn window(&self) -> u64 {
        self.window
    }
    /// Bytes of one batch.
    pub fn nbytes(&self) -> u64 {
        self.batch * self.window * self.elem as u64
    }
    /// The destination buffer (shared; reused by every run).
    pub fn buffer(&self) -> &Arc<Mutex<Buffer>> {
        &self.dest
    }

    /// Checks `source` and `offsets` for a run.
    fn check(&self, source: &TensorView, offsets: &[u64]) -> Result<()> {
        if source.shape().len() != 1 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: tensor '{}' has shape {:?}; the source must be 1-D", source.name(), source.shape()),
            ));
        }
        if source.dtype() != self.dtype {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "gather: tensor '{}' is {}, the gather was made for {}",
                    source.name(),
                    source.dtype().name(),
                    self.dtype.name()
                ),
            ));
        }
        if offsets.len() as u64 != self.batch {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("gather: {} offsets given for a batch of {}", offsets.len(), self.batch),
            ));
        }
        let len = source.shape()[0];
        if let Some((i, &o)) =
            offsets.iter().enumerate().find(|(_, &o)| o.checked_add(self.window).map_or(true, |e| e > len))
        {
            return Err(Error::new(
                Status::OutOfRange,
                format!(
                    "gather: offset {i} ({o}) + window {} is past the end of tensor '{}' ({len} elements)",
                    self.window,
                    source.name()
                ),
            ));
        }
        Ok(())
    }

    /// Reads the windows at `offsets` (already checked) into `dst`, row after row: memcpy from the mapping
    /// when the source is prefaulted, else one `pread` per window.
    fn fill(&self, source: &TensorView, offsets: &[u64], dst: &mut [u8]) -> Result<()> {
        let row = self.window as usize * self.elem;
        let rows = dst.chunks_exact_mut(row).zip(offsets);
        if source.is_prefaulted() {
            let src = source.mapped();
            for (d, &o) in rows {
                let s = o as usize * self.elem;
                d.copy_from_slice(&src[s..s + row]);
            }
        } else {
            for (d, &o) in rows {
                source.read_at(o * self.elem as u64, d)?;
            }
        }
        Ok(())
    }

    /// Assembles row `i` = `source[offsets[i] .. offsets[i] + window]` for every `i` into the destination.
    /// Returns once the batch is in place (for CUDA: the copy has completed). Errors: `INVALID_ARGUMENT`
    /// (source not 1-D, another dtype, `offsets.len() != batch`), `OUT_OF_RANGE` naming the first offset
    /// whose window runs past the end: with these the destination is unchanged. `TRUNCATED` (the file
    /// shrank since it was opened) or `IO` while reading, `DEVICE_ERROR` while copying: the destination then
    /// holds a partly assembled batch. A prefaulted source is read through the mapping (see
    /// [`TensorView::mapped`] for its truncation hazard); any other is read with `pread`.
    pub fn run(&mut self, source: &TensorView, offsets: &[u64]) -> Result<()> {
        self.check(source, offsets)?;
        let mut dest = self.dest.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = dest.host_bytes_mut() {
            return self.fill(source, offsets, d);
        }
        let mut staging = match self.staging.take() {
            Some(s) => s,
            None => PinnedHostMemory::alloc_on(self.device.ordinal, self.nbytes() as usize)?, // after a failed copy
        };
        if let Err(e) = self.fill(source, offsets, staging.as_mut_slice()) {
            self.staging = Some(staging);
            return Err(e);
        }
        let stream = self.stream.as_ref().expect("a CUDA gather has a stream");
        let Memory::Cuda(mem) = dest.memory() else { unreachable!("non-host memory is CUDA memory") };
        let n = self.nbytes() as usize;
        let inflight = stream.copy_to_device_async(staging, 0, mem, 0, n)?;
        self.staging = Some(inflight.wait()?);
        Ok(())
    }

    /// Copies the current batch into `dst` (at least [`Gather::nbytes`] bytes, else `BUFFER_TOO_SMALL`).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        self.dest.lock().unwrap_or_else(|p| p.into_inner()).copy_to_host(dst)
    }
}

/// splitmix64: the next value of the stream whose state is `*state`.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// nanoGPT's `torch.randint(len - window, (n,))`: `out.len()` start offsets uniform in `[0, len - window)`
/// (each window plus its shifted target fits), drawn from the splitmix64 stream in `*state`, which advances.
/// `INVALID_ARGUMENT` when `window >= len`.
pub fn random_offsets(state: &mut u64, len: u64, window: u64, out: &mut [u64]) -> Result<()> {
    if window >= len {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("random offsets: window {window} must be shorter than the tensor ({len} elements)"),
        ));
    }
    let range = len - window;
    for o in out.iter_mut() {
        // Lemire's multiply-shift: unbiased enough for sampling windows, no division.
        *o = ((splitmix64(state) as u128 * range as u128) >> 64) as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_in_range_and_reproducible() {
        let (mut a, mut b) = (42u64, 42u64);
        let mut x = [0u64; 100];
        let mut y = [0u64; 100];
        random_offsets(&mut a, 1000, 10, &mut x).unwrap();
        random_offsets(&mut b, 1000, 10, &mut y).unwrap();
        assert_eq!(x, y);
        assert!(x.iter().all(|&o| o < 990));
        assert!(x.iter().any(|&o| o != x[0]));
        assert_eq!(random_offsets(&mut a, 10, 10, &mut x).unwrap_err().status(), Status::InvalidArgument);
    }
}
