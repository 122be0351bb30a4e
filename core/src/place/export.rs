//! Handing tensors to consumers (DLPack in both forms, the array interfaces): what an export shares, maps
//! copy-on-write or copies, and the CUDA stream handshake.
//!
//! The rules, and why:
//! - A view exported in the **versioned** form (DLPack >= 1.0) is the file's read-only mapping with the
//!   read-only flag set: zero-copy, and the consumer can see it must not write.
//! - A **legacy** (unversioned) consumer cannot see a read-only flag, and some consumers write (in-place ops,
//!   buffer donation): a write to the read-only mapping would crash the process. So a view goes out through
//!   the legacy form as a private copy-on-write mapping of its pages ([`Buffer::map_private`]): writable,
//!   isolated from the file (a write copies the page into the process; the file never changes), and nothing
//!   is copied until a page is written. It keeps the view's own hazard and no more: pages not yet written
//!   show changes other processes make to the file, and truncation of the file raises SIGBUS on access. A
//!   consumer that needs isolation from the file asks for a copy ([`CopyPolicy::Always`]). A view over a
//!   memory buffer cannot be mapped: it is copied (or refused under [`CopyPolicy::Never`]).
//! - A **strided** view (narrowed on an inner dimension) goes out in the versioned form zero-copy with its
//!   element strides. It is not one range of the file, so it cannot be mapped copy-on-write: the legacy form
//!   (and a sub-byte dtype, whose strides DLPack cannot express) gets a packed copy.
//! - A buffer is writable and owned: both forms share it. Holding an export keeps the buffer (and a gather
//!   batch's place in its ring) alive until the consumer's deleter runs.
//! - CUDA: the consumer's stream waits on the event of hostfirst's last write into the buffer
//!   (`cuStreamWaitEvent`, the host is not blocked; the stream is the consumer's at the export call, when it
//!   must be live). When the export is released, hostfirst's next write into the buffer is ordered after the
//!   consumer's work without touching the consumer's stream again, which may be gone by then (DLPack defines
//!   the stream for the export call only): for the default streams 1 and 2 an event recorded on the legacy
//!   default stream (which covers every blocking stream whichever thread releases), for a consumer's own
//!   stream a wait for the whole device before the rewrite (see [`Buffer::record_release`]).
//! - `cuda:N` and `cuda_host` buffers are not exported in a child forked after CUDA was initialised
//!   (`UNAVAILABLE` naming fork()): the pointer would name memory the child cannot use.
//! - A release's CUDA calls are made in relaxed capture mode, or kept for a safe point while another framework
//!   captures a CUDA graph (see [`crate::device::cuda::capture`]).

use super::buffer::Buffer;
pub use super::consumer::ConsumerStream;
use super::put::{buffer_to, put, PutOptions, Target};
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::View;
use std::sync::{Arc, Mutex};

/// The consumer's `copy` request (the array API's `copy=None/True/False`): the values of
/// `hostfirst_dlpack_options.copy` (C reads it as `hostfirst_dlpack_copy`, checked; an unknown value is
/// `INVALID_ARGUMENT`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::FromRepr)]
pub enum CopyPolicy {
    /// Share where possible; copy, or map copy-on-write, where the form or the requested device needs it
    /// (Python's `copy=None`; the default).
    IfNeeded = 0,
    /// Always export a new copy the consumer owns (`copy=True`; flag IS_COPIED in the versioned form).
    Always = 1,
    /// Never copy: `UNSUPPORTED` when the request cannot be met without one (`copy=False`).
    Never = 2,
}

/// Which DLPack structure the consumer takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `DLManagedTensorVersioned` (DLPack >= 1.0): has flags (read-only, is-copied).
    Versioned,
    /// `DLManagedTensor` (the unversioned form): no flags, so never a read-only mapping.
    Legacy,
}

/// What an export keeps alive until the consumer releases it.
#[derive(Clone)]
pub enum Keep {
    /// The file's read-only mapping (through the view).
    View(View),
    /// A buffer: the exported one (shared), a copy, or a copy-on-write mapping made for the export.
    Buffer(Arc<Mutex<Buffer>>),
}

/// An export, ready to be written out as a DLPack structure.
pub struct Export {
    /// What to keep alive.
    pub keep: Keep,
    /// The data address (host pointer or CUDA device address).
    pub data: u64,
    /// Where the data lives.
    pub device: Device,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// Element strides of a strided view; `None` for compact C order.
    pub strides: Option<Vec<u64>>,
    /// The consumer must not write (the file's read-only mapping).
    pub read_only: bool,
    /// The data is a new copy the consumer owns.
    pub copied: bool,
    /// CUDA: the stream to record a release event on when the export is released.
    pub release_on: Option<ConsumerStream>,
}

fn never(what: &str, why: &str) -> Error {
    Error::new(Status::Unsupported, format!("{what}: copy=never was asked, but {why}"))
}

fn from_buffer(b: Buffer, read_only: bool, copied: bool) -> Export {
    let (data, device, dtype, shape) = (b.address(), b.device(), b.dtype(), b.shape().to_vec());
    Export {
        keep: Keep::Buffer(Arc::new(Mutex::new(b))),
        data,
        device,
        dtype,
        shape,
        strides: None,
        read_only,
        copied,
        release_on: None,
    }
}

/// Exports a view: see the module documentation for the rules. `device`: the consumer's requested device
/// (`None`: where the data is, cpu); another device is reached by a put (a copy, fit-checked).
pub fn export_view(view: &View, form: Form, copy: CopyPolicy, device: Option<Device>) -> Result<Export> {
    let what = format!("{}: tensor '{}'", view.file_display(), view.name());
    let target = device.unwrap_or(Device::CPU);
    if target.kind != DeviceKind::CPU || copy == CopyPolicy::Always {
        if copy == CopyPolicy::Never {
            return Err(never(&what, &format!("the view is in host memory and {target} was asked")));
        }
        let b = put(view, Target::Device(target), PutOptions::default())?;
        return Ok(from_buffer(b, false, true));
    }
    // A file read with owned reads hands out no mapping: a copy.
    if !view.maps() {
        if copy == CopyPolicy::Never {
            return Err(never(
                &what,
                &format!("the file is read with owned reads, never mapped ({})", view.read_engine()),
            ));
        }
        return Ok(from_buffer(put(view, Target::Device(Device::CPU), PutOptions::default())?, false, true));
    }
    // A strided view the form cannot carry zero-copy: a packed copy.
    if !view.is_contiguous() && (form == Form::Legacy || view.dtype().bits() % 8 != 0) {
        if copy == CopyPolicy::Never {
            return Err(never(&what, "a strided view has no zero-copy form for this consumer"));
        }
        return Ok(from_buffer(put(view, Target::Device(Device::CPU), PutOptions::default())?, false, true));
    }
    match form {
        Form::Versioned => Ok(Export {
            data: view.mapped().as_ptr() as u64,
            device: Device::CPU,
            dtype: view.dtype(),
            shape: view.shape().to_vec(),
            strides: if view.is_contiguous() { None } else { Some(view.strides()) },
            read_only: true,
            copied: false,
            release_on: None,
            keep: Keep::View(view.clone()),
        }),
        Form::Legacy => match Buffer::map_private(view, false) {
            Ok(b) => Ok(from_buffer(b, false, false)),
            Err(e) if e.status() == Status::Unsupported => {
                if copy == CopyPolicy::Never {
                    return Err(never(
                        &what,
                        "a legacy consumer cannot be given read-only memory and a view over memory cannot be \
                         mapped copy-on-write",
                    ));
                }
                Ok(from_buffer(put(view, Target::Device(Device::CPU), PutOptions::default())?, false, true))
            }
            Err(e) => Err(e),
        },
    }
}

/// Exports a buffer (both forms share it; see the module documentation). `device`: the consumer's
/// requested device (`None`: where the data is); another device, or [`CopyPolicy::Always`], makes a copy
/// (fit-checked). For CUDA data, `stream`'s consumer waits for hostfirst's last write into the exported
/// memory, and [`Export::release_on`] says where to record the release event.
pub fn export_buffer(
    buf: &Arc<Mutex<Buffer>>,
    copy: CopyPolicy,
    device: Option<Device>,
    stream: ConsumerStream,
) -> Result<Export> {
    crate::device::cuda::capture::safe_point();
    let g = buf.lock().unwrap_or_else(|p| p.into_inner());
    let what = format!("buffer '{}'", g.name());
    // CUDA and cuda_host memory are exported only where this process may use them (not in a child forked
    // after CUDA was initialised), as copy_to_host refuses there: the tensor would name memory this process
    // cannot reach.
    g.check_usable().map_err(|e| e.context("export"))?;
    let target = device.unwrap_or(g.device());
    let copying = target != g.device() || copy == CopyPolicy::Always;
    if copying && copy == CopyPolicy::Never {
        return Err(never(&what, &format!("the buffer is on {} and {target} was asked", g.device())));
    }
    let exported = if copying {
        let b = buffer_to(&g, Target::Device(target))?;
        drop(g);
        Arc::new(Mutex::new(b))
    } else {
        drop(g);
        Arc::clone(buf)
    };
    let e = exported.lock().unwrap_or_else(|p| p.into_inner());
    let cuda = e.device().kind == DeviceKind::CUDA;
    if cuda {
        e.sync_stream(stream)?;
    }
    let out = Export {
        data: e.address(),
        device: e.device(),
        dtype: e.dtype(),
        shape: e.shape().to_vec(),
        strides: None,
        read_only: false,
        copied: copying,
        release_on: if cuda && stream != ConsumerStream::NoSync { Some(stream) } else { None },
        keep: Keep::Buffer(Arc::clone(&exported)),
    };
    drop(e);
    Ok(out)
}

/// The release side for a consumer that names its stream when it lets go (`hostfirst_buffer_record_stream`,
/// often called from a garbage collector's finalizer): [`Buffer::record_stream`] on that live stream, in
/// relaxed capture mode; while another framework's graph capture is seen, no driver call at all
/// ([`Buffer::release_without_driver_calls`]: the next rewrite waits for the device).
pub fn record_consumer_stream(buf: &Arc<Mutex<Buffer>>, consumer: ConsumerStream) -> Result<()> {
    crate::device::cuda::capture::with_relaxed(|capturing| {
        let mut g = buf.lock().unwrap_or_else(|p| p.into_inner());
        if capturing {
            g.release_without_driver_calls(consumer);
            Ok(())
        } else {
            g.record_stream(consumer)
        }
    })
}

/// Drops a reference to a buffer (a handle freed): when it may be the last one of `cuda:N` or `cuda_host`
/// memory, the free goes through [`crate::device::cuda::capture::release_or_defer`] (relaxed capture mode, or
/// kept for a safe point while a capture is seen).
pub fn drop_buffer(buf: Arc<Mutex<Buffer>>) {
    let host = buf.lock().unwrap_or_else(|p| p.into_inner()).device().kind == DeviceKind::CPU;
    if host {
        drop(buf);
    } else {
        crate::device::cuda::capture::release_or_defer(buf);
    }
}

/// Records the release of an export: for a CUDA buffer exported for a consumer stream, what orders
/// hostfirst's next write into the buffer after that consumer's work ([`Buffer::record_release`]: an event on
/// the legacy default stream, or a wait for the device before the rewrite; the consumer's own stream is never
/// touched here). Errors are returned for the caller to report; the release itself always happens.
pub fn release(keep: &Keep, release_on: Option<ConsumerStream>) -> Result<()> {
    match (keep, release_on) {
        (Keep::Buffer(b), Some(s)) => b.lock().unwrap_or_else(|p| p.into_inner()).record_release(s),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_share_unless_a_copy_is_asked() {
        let b = Arc::new(Mutex::new(Buffer::alloc("b", DType::U8, &[4], 4, Device::CPU).unwrap()));
        let e = export_buffer(&b, CopyPolicy::IfNeeded, None, ConsumerStream::Legacy).unwrap();
        assert!(!e.copied && !e.read_only && e.release_on.is_none());
        assert_eq!(e.data, b.lock().unwrap().address());
        assert_eq!(Arc::strong_count(&b), 2, "the export holds the buffer");
        drop(e);
        let c = export_buffer(&b, CopyPolicy::Always, None, ConsumerStream::NoSync).unwrap();
        assert!(c.copied);
        assert_ne!(c.data, b.lock().unwrap().address());
        let e = export_buffer(&b, CopyPolicy::Never, Some(Device::CUDA_HOST), ConsumerStream::Legacy).err().unwrap();
        assert_eq!(e.status(), Status::Unsupported, "{}", e.message());
    }

    #[test]
    fn legacy_view_over_memory_is_copied_or_refused() {
        let header = br#"{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header);
        v.extend([1u8, 2, 3, 4]);
        let f = crate::file::TensorFile::from_bytes(v).unwrap();
        let view = f.view("x").unwrap();
        let e = export_view(&view, Form::Legacy, CopyPolicy::IfNeeded, None).unwrap();
        assert!(e.copied && !e.read_only);
        let e = export_view(&view, Form::Legacy, CopyPolicy::Never, None).err().unwrap();
        assert_eq!(e.status(), Status::Unsupported);
        let e = export_view(&view, Form::Versioned, CopyPolicy::Never, None).unwrap();
        assert!(e.read_only && !e.copied);
    }
}
