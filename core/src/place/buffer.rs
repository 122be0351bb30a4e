//! A buffer: memory owned on one device (cpu, cuda:N, cuda_host) with a dtype and a shape.
//!
//! CUDA buffers also carry what the stream handshake with consumers needs: the event recorded after
//! hostfirst's last write (a consumer's stream waits on it before reading), and what orders hostfirst's next
//! write after the consumers that released the buffer: events recorded when they released it (on the legacy
//! default stream for the default streams, on a consumer's own stream when it asks through
//! [`Buffer::record_stream`]), or a wait for the whole device when a DLPack consumer on a stream of its own
//! released it ([`Buffer::record_release`]). See [`super::export`].
//!
//! `cuda_host` memory was allocated by the CUDA driver: in a child forked after CUDA was initialised it is
//! unavailable ([`Buffer::check_usable`]), as CUDA memory is.

use super::consumer::ConsumerStream;
use super::host::HostAlloc;
use crate::device::cuda::{DeviceMemory, Event, PinnedHostMemory, Stream};
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::{CName, View};
use std::sync::Arc;

/// Where a buffer's bytes live.
pub enum Memory {
    /// Aligned host memory (`cpu`).
    Host(HostAlloc),
    /// Page-locked host memory (`cuda_host`).
    Pinned(PinnedHostMemory),
    /// CUDA device memory (`cuda:N`).
    Cuda(DeviceMemory),
}

/// `nbytes` of memory (zeroed for host kinds) on `device` for the tensor `name`.
fn alloc_memory(name: &str, nbytes: u64, device: Device) -> Result<Memory> {
    let len = usize::try_from(nbytes)
        .map_err(|_| Error::new(Status::OutOfMemory, format!("{name}: {nbytes} bytes does not fit in memory")))?;
    let what = format!("tensor '{name}'");
    Ok(match device.kind {
        DeviceKind::CPU => Memory::Host(HostAlloc::zeroed(len, &what)?),
        DeviceKind::CUDA_HOST => Memory::Pinned(PinnedHostMemory::alloc(len).map_err(|e| e.context(&what))?),
        DeviceKind::CUDA => Memory::Cuda(DeviceMemory::alloc(device.ordinal, len).map_err(|e| e.context(&what))?),
    })
}

impl Memory {
    /// The device holding it.
    pub fn device(&self) -> Device {
        match self {
            Memory::Host(_) => Device::CPU,
            Memory::Pinned(_) => Device::CUDA_HOST,
            Memory::Cuda(d) => Device::cuda(d.ordinal()),
        }
    }

    /// Its address: a host pointer (cpu, cuda_host) or a `CUdeviceptr`, as an integer.
    pub fn address(&self) -> u64 {
        match self {
            Memory::Host(h) => h.as_ptr() as u64,
            Memory::Pinned(p) => p.as_ptr() as u64,
            Memory::Cuda(d) => d.device_ptr(),
        }
    }
}

/// Memory on one device with a dtype and shape. Buffers own their memory and outlive the file they came from.
pub struct Buffer {
    /// The name as C sees it (a NUL in the name given is written `\0`); made from a view, the file's own
    /// name (shared, not copied).
    cname: CName,
    /// The name as given, where it differs from `cname` (it held a NUL).
    raw_name: Option<Box<str>>,
    dtype: DType,
    shape: Arc<[u64]>,
    nbytes: u64,
    mem: Memory,
    /// CUDA: recorded after hostfirst's last asynchronous write (None: every write has completed).
    ready: Option<Event>,
    /// CUDA: (raw consumer stream, event recorded on it when that consumer released the buffer).
    released: Vec<(usize, Event)>,
    /// CUDA: a consumer's release could not be recorded, so hostfirst cannot know when that consumer's work
    /// is done: the buffer must never be rewritten (a gather drops it from its ring).
    release_failed: bool,
    /// CUDA: a DLPack consumer released the buffer from a stream of its own, which hostfirst may not touch at
    /// release time (it may be destroyed by then): the next rewrite first waits for the whole device.
    wait_for_device: bool,
}

impl Buffer {
    /// Allocates (zeroed for host kinds) memory for `nbytes` on `device`. No fit check: see [`crate::device::fit`].
    pub fn alloc(name: &str, dtype: DType, shape: &[u64], nbytes: u64, device: Device) -> Result<Buffer> {
        let mem = alloc_memory(name, nbytes, device)?;
        Ok(Buffer::with_memory(name, dtype, shape, nbytes, mem))
    }

    /// [`Buffer::alloc`] for a view's tensor; the buffer shares the view's name and shape (no copies).
    pub fn alloc_for(view: &View, device: Device) -> Result<Buffer> {
        let mem = alloc_memory(view.name(), view.nbytes(), device)?;
        Ok(Buffer::from_view_memory(view, mem))
    }

    /// A buffer over memory the caller allocated (a load's sub-allocations, see [`super::arena`]) for the
    /// tensor of `view` (its name and shape are shared with the view, not copied).
    pub(crate) fn from_view_memory(view: &View, mem: Memory) -> Buffer {
        Buffer::with_parts(view.name.clone(), None, view.dtype(), Arc::clone(&view.shape), view.nbytes(), mem)
    }

    fn with_memory(name: &str, dtype: DType, shape: &[u64], nbytes: u64, mem: Memory) -> Buffer {
        let (cname, raw_name) = c_name(name);
        Buffer::with_parts(cname, raw_name, dtype, Arc::from(shape), nbytes, mem)
    }

    fn with_parts(
        cname: CName,
        raw_name: Option<Box<str>>,
        dtype: DType,
        shape: Arc<[u64]>,
        nbytes: u64,
        mem: Memory,
    ) -> Buffer {
        Buffer {
            cname,
            raw_name,
            dtype,
            shape,
            nbytes,
            mem,
            ready: None,
            released: Vec::new(),
            release_failed: false,
            wait_for_device: false,
        }
    }

    /// A cpu buffer over a private, writable (copy-on-write) mapping of the view's pages in its file (see
    /// [`HostAlloc::map_file_private`]; `populate` maps them for reading now). No fit check here. A view over
    /// a memory buffer has no file to map, and a strided view is not one range of it: `UNSUPPORTED`.
    pub fn map_private(view: &View, populate: bool) -> Result<Buffer> {
        let what = || format!("{}: tensor '{}'", view.file_display(), view.name());
        let Some((file, offset)) = view.file_and_offset() else {
            return Err(Error::new(
                Status::Unsupported,
                format!("{}: the view is over memory, not a file: there is nothing to map copy-on-write", what()),
            ));
        };
        if !view.is_contiguous() {
            return Err(Error::new(
                Status::Unsupported,
                format!("{}: a strided view is not one range of its file: it cannot be mapped copy-on-write", what()),
            ));
        }
        if !view.maps() {
            return Err(Error::new(
                Status::Unsupported,
                format!("{}: the file is read with owned reads, never mapped ({})", what(), view.read_engine()),
            ));
        }
        let len = usize::try_from(view.nbytes())
            .map_err(|_| Error::new(Status::OutOfMemory, format!("{}: too large to map", what())))?;
        let mem = Memory::Host(HostAlloc::map_file_private(file, offset, len, populate, &what)?);
        Ok(Buffer::from_view_memory(view, mem))
    }

    /// True when the bytes are a private (copy-on-write) mapping of a file ([`Buffer::map_private`]): pages
    /// not yet written still come from the file.
    pub fn is_file_backed(&self) -> bool {
        matches!(&self.mem, Memory::Host(h) if h.is_file_backed())
    }

    /// The tensor name it was made from (or given).
    pub fn name(&self) -> &str {
        self.raw_name.as_deref().unwrap_or(self.cname.as_str())
    }
    /// Its dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Its shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }
    /// The device holding the bytes.
    pub fn device(&self) -> Device {
        self.mem.device()
    }
    /// The memory.
    pub fn memory(&self) -> &Memory {
        &self.mem
    }
    /// The memory, mutably.
    pub fn memory_mut(&mut self) -> &mut Memory {
        &mut self.mem
    }
    /// Host-addressable bytes (cpu and cuda_host), else None (also for cuda_host memory where it is
    /// unavailable: see [`Buffer::check_usable`]).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.mem {
            Memory::Host(h) => Some(h.as_slice()),
            Memory::Pinned(p) => p.check_usable().is_ok().then(|| p.as_slice()),
            Memory::Cuda(_) => None,
        }
    }
    /// Host-addressable bytes, mutably (None as for [`Buffer::host_bytes`]).
    pub fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.mem {
            Memory::Host(h) => Some(h.as_mut_slice()),
            Memory::Pinned(p) => match p.check_usable() {
                Ok(()) => Some(p.as_mut_slice()),
                Err(_) => None,
            },
            Memory::Cuda(_) => None,
        }
    }

    /// `Ok` when this process may use the buffer's memory: always for `cpu`; for `cuda:N` and `cuda_host`, not
    /// in a child forked after CUDA was initialised (`UNAVAILABLE`, naming fork() and the buffer): NVIDIA leaves
    /// the use of memory its interfaces allocated undefined after `fork()`, and page-locked pages may be absent
    /// in the child.
    pub fn check_usable(&self) -> Result<()> {
        let r = match &self.mem {
            Memory::Host(_) => return Ok(()),
            Memory::Pinned(p) => p.check_usable(),
            Memory::Cuda(_) => crate::device::cuda::probe::api().map(|_| ()),
        };
        r.map_err(|e| e.context(format!("buffer '{}' on {}", self.name(), self.device())))
    }
    /// The data address: a host pointer, or the CUDA device address, as an integer.
    pub fn address(&self) -> u64 {
        self.mem.address()
    }

    /// Copies bytes `[offset, offset + dst.len())` of the buffer into caller host memory.
    pub fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(dst.len() as u64).filter(|e| *e <= self.nbytes).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!(
                    "buffer '{}': bytes {offset}..+{} are outside its {} bytes",
                    self.name(),
                    dst.len(),
                    self.nbytes
                ),
            )
        })?;
        let (s, e) = (offset as usize, end as usize);
        self.check_usable()?;
        match &self.mem {
            Memory::Host(h) => dst.copy_from_slice(&h.as_slice()[s..e]),
            Memory::Pinned(p) => dst.copy_from_slice(&p.as_slice()[s..e]),
            Memory::Cuda(d) => crate::engine::device::device_to_host(d, s, dst)?,
        }
        Ok(())
    }

    /// Copies the whole buffer into caller host memory, which must hold `nbytes` (`BUFFER_TOO_SMALL` otherwise).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if (dst.len() as u64) < self.nbytes {
            return Err(Error::new(
                Status::BufferTooSmall,
                format!("buffer '{}' has {} bytes; the destination holds {}", self.name(), self.nbytes, dst.len()),
            ));
        }
        self.read_at(0, &mut dst[..self.nbytes as usize])
    }

    /// CUDA: sets the event that completes with hostfirst's latest asynchronous write into this buffer (it is
    /// re-recorded by the writer; consumers' streams wait on it, see [`Buffer::sync_stream`]).
    pub fn set_ready_event(&mut self, ev: Event) {
        self.ready = Some(ev);
    }

    /// CUDA: the event of hostfirst's latest asynchronous write, if any.
    pub fn ready_event(&self) -> Option<&Event> {
        self.ready.as_ref()
    }

    /// The consumer side of the stream handshake: makes `consumer` wait (on the device; the host is not
    /// blocked) for hostfirst's latest write into this buffer (`cuStreamWaitEvent`). Returns whether a wait
    /// was enqueued: false for host memory (every write has completed when the call that made it returned),
    /// for [`ConsumerStream::NoSync`], and for CUDA buffers hostfirst never wrote asynchronously.
    pub fn sync_stream(&self, consumer: ConsumerStream) -> Result<bool> {
        match (&self.mem, &self.ready, consumer.raw()) {
            (Memory::Cuda(_), Some(ev), Some(raw)) => {
                ev.make_raw_stream_wait(raw).map_err(|e| e.context(format!("buffer '{}'", self.name())))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The release side of the stream handshake (like torch's `record_stream`): records an event on
    /// `consumer` now, after the work it has queued that uses this buffer; before hostfirst next rewrites
    /// the buffer, its copy waits for that event ([`Buffer::wait_for_consumers`]). One event per stream is
    /// kept (a later one covers an earlier). Nothing to do for host memory or [`ConsumerStream::NoSync`].
    ///
    /// Where the event goes: a consumer's own `CUstream` gets it. For the default streams (1 and 2) it goes
    /// on the **legacy** default stream of the buffer's device, because the release often runs on another
    /// thread than the consumer's work (a DLPack deleter called by a garbage collector, an autograd worker, a
    /// framework's callback thread): `CU_STREAM_PER_THREAD` there would name *that* thread's stream, which
    /// knows nothing of the consumer's work. The legacy stream is ordered after all work queued before it on
    /// every blocking stream of the context, and every thread's per-thread default stream is a blocking
    /// stream, so the event covers the consumer's work whichever thread queued it (and, as a cost, other
    /// blocking streams' work too; non-blocking streams are not covered, and a consumer using one passes its
    /// handle).
    ///
    /// If the event cannot be recorded the error is returned and the buffer is marked as never to be
    /// rewritten ([`Buffer::release_failed`]): without the event nothing orders a rewrite after the
    /// consumer's work.
    pub fn record_stream(&mut self, consumer: ConsumerStream) -> Result<()> {
        let (Memory::Cuda(d), Some(_)) = (&self.mem, consumer.raw()) else { return Ok(()) };
        let raw = match consumer {
            ConsumerStream::Legacy | ConsumerStream::PerThread => super::consumer::CU_STREAM_LEGACY,
            other => other.raw().expect("checked above"),
        };
        let recorded = Event::new(d.ordinal()).and_then(|ev| ev.record_on_raw(raw).map(|()| ev));
        match recorded {
            Ok(ev) => {
                self.released.retain(|(s, _)| *s != raw);
                self.released.push((raw, ev));
                Ok(())
            }
            Err(e) => {
                self.release_failed = true;
                Err(e.context(format!(
                    "buffer '{}': recording its release on the consumer's stream (the buffer will not be reused)",
                    self.name()
                )))
            }
        }
    }

    /// The release side of the handshake for a DLPack deleter (see [`super::export::release`]). DLPack defines
    /// the consumer's stream for the export call only: by the time the deleter runs, a consumer's own
    /// `CUstream` may have been destroyed (CuPy destroys streams on garbage collection), and recording on it
    /// would be undefined behaviour. So only streams that live as long as the process are used then: for the
    /// default streams (1 and 2) an event goes on the legacy default stream, as [`Buffer::record_stream`] does;
    /// for a consumer's own stream nothing is called now, and the next rewrite of the buffer first waits for
    /// the whole device (`cuCtxSynchronize`), which covers whatever that consumer queued before releasing.
    /// Nothing to do for host memory or [`ConsumerStream::NoSync`].
    pub fn record_release(&mut self, consumer: ConsumerStream) -> Result<()> {
        match consumer {
            ConsumerStream::Raw(_) => {
                if matches!(self.mem, Memory::Cuda(_)) {
                    self.wait_for_device = true;
                }
                Ok(())
            }
            other => self.record_stream(other),
        }
    }

    /// The release side without any driver call, for where none may be made now (another framework's graph
    /// capture is seen): the next rewrite waits for the whole device instead, as after a release from a
    /// consumer's own stream ([`Buffer::record_release`]). Nothing for host memory or [`ConsumerStream::NoSync`].
    pub fn release_without_driver_calls(&mut self, consumer: ConsumerStream) {
        if consumer != ConsumerStream::NoSync && matches!(self.mem, Memory::Cuda(_)) {
            self.wait_for_device = true;
        }
    }

    /// CUDA: true once a consumer's release could not be recorded ([`Buffer::record_stream`] failed): hostfirst
    /// cannot order a rewrite after that consumer's work, so it never rewrites this buffer.
    pub fn release_failed(&self) -> bool {
        self.release_failed
    }

    /// Before hostfirst rewrites this buffer on `stream`: after a DLPack consumer on a stream of its own
    /// released it ([`Buffer::record_release`]), blocks until the whole device is idle (`cuCtxSynchronize`; an
    /// error of any work of the context is returned here, `DEVICE_ERROR`, and the wait is tried again by the
    /// next rewrite); then makes `stream` wait for every event recorded by [`Buffer::record_stream`]
    /// (`cuStreamWaitEvent`; the host is not blocked), and forgets them. `BUSY` for a buffer whose release could
    /// not be recorded ([`Buffer::release_failed`]): it must not be rewritten.
    pub fn wait_for_consumers(&mut self, stream: &Stream) -> Result<()> {
        if self.release_failed {
            return Err(Error::new(
                Status::Busy,
                format!("buffer '{}': a consumer's release could not be recorded; it is never rewritten", self.name()),
            ));
        }
        if self.wait_for_device {
            if let Memory::Cuda(d) = &self.mem {
                d.context().synchronize().map_err(|e| {
                    e.context(format!(
                        "buffer '{}': waiting for the device before rewriting it (a consumer released it from a \
                         stream of its own)",
                        self.name()
                    ))
                })?;
            }
            self.wait_for_device = false;
        }
        for (_, ev) in &self.released {
            stream.wait_event(ev).map_err(|e| e.context(format!("buffer '{}'", self.name())))?;
        }
        self.released.clear();
        Ok(())
    }

    /// Renames (used when a buffer is made for a named tensor).
    pub fn set_name(&mut self, name: &str) {
        (self.cname, self.raw_name) = c_name(name);
    }

    /// The name as a C string (interior NULs escaped), stable while the buffer lives and is not renamed.
    pub fn c_name(&self) -> &std::ffi::CStr {
        self.cname.as_c_str()
    }
}

/// The C name of `name` (a NUL written `\0`), and `name` itself when that differs.
fn c_name(name: &str) -> (CName, Option<Box<str>>) {
    match CName::from_str(name) {
        Some(c) => (c, None), // one allocation (the usual case)
        None => {
            let escaped = CName::new(name.replace('\0', "\\0")).expect("no NUL is left");
            (escaped, Some(name.into()))
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer('{}', {:?}, {:?}, {} bytes on {})",
            self.name(),
            self.dtype,
            &self.shape[..],
            self.nbytes,
            self.device()
        )
    }
}
