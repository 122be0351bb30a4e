//! Puts: a tensor view (or slice) onto a device as a new buffer, fit-checked before anything is allocated.

use super::buffer::{Buffer, Memory};
use super::parallel::{default_threads, parallel_fill, DEFAULT_CHUNK};
use super::fit;
use crate::device::{Device, DeviceKind};
use crate::error::Result;
use crate::load::TensorView;

/// Where a put goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A named device.
    Device(Device),
    /// The default device, resolved through the default stack (refused in strict mode).
    Default,
}

impl Target {
    /// Resolves to a device; `what` names the tensor for messages.
    pub fn resolve(self, what: &str) -> Result<Device> {
        match self {
            Target::Device(d) => d.validate(),
            Target::Default => crate::scope::resolve_default(what),
        }
    }
}

/// Options of a put.
pub struct PutOptions<'a> {
    /// Reader threads (0: the default, the CPUs available, at most 16).
    pub threads: usize,
    /// Chunk size for reads (0: default 8 MiB).
    pub chunk: usize,
    /// Progress sink (bytes done, total) → true to cancel; called at a bounded rate from the calling thread.
    pub progress: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
}

impl Default for PutOptions<'_> {
    fn default() -> Self {
        PutOptions { threads: 0, chunk: 0, progress: None }
    }
}

/// Puts `view` on `target`: fit check, allocation, copy. On any failure nothing stays allocated.
pub fn put(view: &TensorView, target: Target, opts: PutOptions<'_>) -> Result<Buffer> {
    let what = format!("tensor '{}'", view.name());
    let device = target.resolve(&what)?;
    fit::check(&what, view.nbytes(), device)?;
    let mut buf = Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), device)?;
    fill(view, &mut buf, opts)?;
    Ok(buf)
}

/// Copies the view's bytes into an allocated buffer of the same size.
pub fn fill(view: &TensorView, buf: &mut Buffer, opts: PutOptions<'_>) -> Result<()> {
    let threads = if opts.threads == 0 { default_threads() } else { opts.threads };
    let chunk = if opts.chunk == 0 { DEFAULT_CHUNK } else { opts.chunk };
    let device = buf.device();
    match buf.memory_mut() {
        Memory::Host(_) | Memory::Pinned(_) => {
            let dst = buf.host_bytes_mut().expect("host memory");
            parallel_fill(dst, threads, chunk, |off, d| view.read_at(off, d), opts.progress)
        }
        Memory::Cuda(dev) => {
            debug_assert_eq!(device.kind, DeviceKind::Cuda);
            super::staging::to_cuda(view, dev, threads, chunk, opts.progress)
        }
    }
}
