//! DLPack export of views and buffers (DLPack 1.1): the versioned form (`DLManagedTensorVersioned`) and
//! the unversioned one (`DLManagedTensor`), with the consumer's request (stream, copy, device) in the `_ex`
//! forms. What is shared, mapped or copied is decided by `place::export`.
//!
//! The structs below are written by us from the DLPack specification and are layout-identical to
//! `dlpack.h`'s types; a program that includes `dlpack.h` may cast between them.

use super::args::{out_ptr, read_options};
use super::buffer::hostfirst_buffer;
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::device::Device;
use crate::dlpack;
use crate::error::{Error, Status};
use crate::place::export::{self, ConsumerStream, CopyPolicy, Export, Form, Keep};
use std::ffi::c_void;

/// DLPack major version of the tensors hostfirst exports (`DLPACK_MAJOR_VERSION`).
pub const HOSTFIRST_DLPACK_MAJOR_VERSION: u32 = 1;
/// DLPack minor version of the tensors hostfirst exports (`DLPACK_MINOR_VERSION`).
pub const HOSTFIRST_DLPACK_MINOR_VERSION: u32 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the data must not be written (set for views of mapped files).
pub const HOSTFIRST_DLPACK_FLAG_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the data is a copy made for this export, owned by the consumer.
pub const HOSTFIRST_DLPACK_FLAG_IS_COPIED: u64 = 2;
/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`: sub-byte elements padded to bytes (never set: F4 and F6
/// data is packed as in the file).
pub const HOSTFIRST_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED: u64 = 4;
/// `kDLCPU`.
pub const HOSTFIRST_DLPACK_DEVICE_CPU: i32 = 1;
/// `kDLCUDA`.
pub const HOSTFIRST_DLPACK_DEVICE_CUDA: i32 = 2;
/// `kDLCUDAHost`.
pub const HOSTFIRST_DLPACK_DEVICE_CUDA_HOST: i32 = 3;

/// Layout-identical to dlpack.h's `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hostfirst_dlpack_version {
    /// `major`.
    pub major: u32,
    /// `minor`.
    pub minor: u32,
}

/// Layout-identical to dlpack.h's `DLDevice` (`device_type` is a `DLDeviceType`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hostfirst_dlpack_device {
    /// `HOSTFIRST_DLPACK_DEVICE_*` (kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3).
    pub device_type: i32,
    /// The device ordinal (0 for cpu and cuda_host).
    pub device_id: i32,
}

/// Layout-identical to dlpack.h's `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hostfirst_dlpack_dtype {
    /// A `DLDataTypeCode` (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6,
    /// kDLFloat8_e4m3fn 10, kDLFloat8_e4m3fnuz 11, kDLFloat8_e5m2 12, kDLFloat8_e5m2fnuz 13,
    /// kDLFloat8_e8m0fnu 14, kDLFloat6_e2m3fn 15, kDLFloat6_e3m2fn 16, kDLFloat4_e2m1fn 17).
    pub code: u8,
    /// Bits per element.
    pub bits: u8,
    /// Lanes (always 1).
    pub lanes: u16,
}

/// Layout-identical to dlpack.h's `DLTensor`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_dlpack_tensor {
    /// The data: a host pointer (cpu, cuda_host) or a CUDA device address.
    pub data: *mut c_void,
    /// Where the data lives.
    pub device: hostfirst_dlpack_device,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: hostfirst_dlpack_dtype,
    /// `ndim` dimensions (NULL when `ndim` is 0); owned by the managed tensor.
    pub shape: *mut i64,
    /// NULL for compact C order (every buffer, every contiguous view); `ndim` element strides for a strided
    /// view (`hostfirst_view_narrow` on an inner dimension) in the versioned form; owned by the managed tensor.
    pub strides: *mut i64,
    /// Always 0: `data` points at the first element.
    pub byte_offset: u64,
}

/// Layout-identical to dlpack.h's `DLManagedTensorVersioned` (DLPack >= 1.0).
///
/// Made by `hostfirst_view_to_dlpack`, `hostfirst_buffer_to_dlpack` and their `_ex` forms; the consumer calls
/// `deleter(self)` exactly once when done. Until then it keeps the file mapping (or the buffer's memory) alive
/// on its own, whatever happens to the handle it was made from.
#[repr(C)]
#[derive(Debug)]
pub struct hostfirst_dlpack_managed_tensor_versioned {
    /// {HOSTFIRST_DLPACK_MAJOR_VERSION, HOSTFIRST_DLPACK_MINOR_VERSION}.
    pub version: hostfirst_dlpack_version,
    /// Owned by hostfirst (a registry id); counted by `hostfirst_handle_count` until the deleter runs.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and frees this struct: call it exactly once, then never touch the pointer again.
    /// A NULL argument, or a struct hostfirst did not make, is ignored. A second call with the same pointer is
    /// ignored too (the struct's memory is never returned to the allocator and is not reused for a new export
    /// until 1024 later exports have been deleted); after that the pointer may name a newer export, which the
    /// second call would release, so do not rely on it.
    pub deleter: Option<extern "C" fn(*mut hostfirst_dlpack_managed_tensor_versioned)>,
    /// `HOSTFIRST_DLPACK_FLAG_*` bits: READ_ONLY for a view's mapping, IS_COPIED for a copy made for the export.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: hostfirst_dlpack_tensor,
}

/// Layout-identical to dlpack.h's `DLManagedTensor`: the unversioned ("legacy") form, which numpy 1.x,
/// JAX and older consumers take (the Python capsule named "dltensor").
///
/// Made by `hostfirst_view_to_dlpack_legacy`, `hostfirst_buffer_to_dlpack_legacy` and the `_ex` forms. It has
/// no flags, so a consumer cannot be told that memory is read-only: a view never goes out this way as its
/// file's read-only mapping (see `hostfirst_view_to_dlpack_legacy`). Lifetime and deleter as for
/// `hostfirst_dlpack_managed_tensor_versioned`.
#[repr(C)]
#[derive(Debug)]
pub struct hostfirst_dlpack_managed_tensor {
    /// The tensor.
    pub dl_tensor: hostfirst_dlpack_tensor,
    /// Owned by hostfirst (a registry id); counted by `hostfirst_handle_count` until the deleter runs.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and frees this struct: call it exactly once, then never touch the pointer again.
    /// A NULL argument, or a struct hostfirst did not make, is ignored. A second call with the same pointer is
    /// ignored too (the struct's memory is never returned to the allocator and is not reused for a new export
    /// until 1024 later exports have been deleted); after that the pointer may name a newer export, which the
    /// second call would release, so do not rely on it.
    pub deleter: Option<extern "C" fn(*mut hostfirst_dlpack_managed_tensor)>,
}

/// `copy` of `hostfirst_dlpack_options`: share where possible, copy or map copy-on-write where the form or
/// the requested device needs it (Python's `copy=None`; the zero default).
pub const HOSTFIRST_DLPACK_COPY_IF_NEEDED: u32 = 0;
/// `copy` of `hostfirst_dlpack_options`: always export a new copy the consumer owns (`copy=True`; flag
/// IS_COPIED in the versioned form).
pub const HOSTFIRST_DLPACK_COPY_ALWAYS: u32 = 1;
/// `copy` of `hostfirst_dlpack_options`: never copy; `UNSUPPORTED` when the request cannot be met without
/// one (`copy=False`).
pub const HOSTFIRST_DLPACK_COPY_NEVER: u32 = 2;

/// What a DLPack consumer asked for: the arguments of Python's `__dlpack__(*, stream, max_version,
/// dl_device, copy)`, for `hostfirst_view_to_dlpack_ex` / `hostfirst_buffer_to_dlpack_ex`. Zero-initialise,
/// set `struct_size = sizeof(hostfirst_dlpack_options)`, then set what the consumer gave: all zeros is a
/// consumer that passed nothing (a legacy consumer, no stream, copy if needed, the data's own device). A
/// smaller `struct_size` from an older header is accepted; later fields take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_dlpack_options {
    /// `sizeof(hostfirst_dlpack_options)`.
    pub struct_size: usize,
    /// The highest DLPack version the consumer takes. Major >= 1: the versioned form; {0, 0} (not given):
    /// the legacy form.
    pub max_version: hostfirst_dlpack_version,
    /// The consumer's stream, read when `has_stream` is nonzero, with DLPack's meaning: 1 the legacy default
    /// stream, 2 the per-thread default stream, > 2 a `CUstream` (cast to an integer), -1 the consumer
    /// synchronises itself; 0 and other negative values are `INVALID_ARGUMENT`. Not given: the legacy default
    /// stream. Only CUDA data uses it (see `hostfirst_buffer_to_dlpack_ex`).
    pub stream: i64,
    /// Nonzero when `stream` was given (Python: `stream is not None`).
    pub has_stream: i32,
    /// `HOSTFIRST_DLPACK_COPY_IF_NEEDED` (0), `_ALWAYS` (1) or `_NEVER` (2).
    pub copy: u32,
    /// Nonzero when `dl_device` was given.
    pub has_dl_device: i32,
    /// The device the consumer wants the data on (kDLCPU 0, kDLCUDA N, kDLCUDAHost 0); when it is not where the
    /// data lives, the export is a copy there (fit-checked; `UNSUPPORTED` under COPY_NEVER).
    pub dl_device: hostfirst_dlpack_device,
}

impl Default for hostfirst_dlpack_options {
    fn default() -> Self {
        hostfirst_dlpack_options {
            struct_size: std::mem::size_of::<hostfirst_dlpack_options>(),
            max_version: hostfirst_dlpack_version { major: 0, minor: 0 },
            stream: 0,
            has_stream: 0,
            copy: HOSTFIRST_DLPACK_COPY_IF_NEEDED,
            has_dl_device: 0,
            dl_device: hostfirst_dlpack_device { device_type: 0, device_id: 0 },
        }
    }
}

/// The export options, checked.
struct Request {
    form: Form,
    copy: CopyPolicy,
    device: Option<Device>,
    stream: ConsumerStream,
}

fn request(opts: *const hostfirst_dlpack_options, form: Option<Form>) -> crate::error::Result<Request> {
    let o = read_options(opts, hostfirst_dlpack_options::default(), "opts")?;
    let copy = match o.copy {
        HOSTFIRST_DLPACK_COPY_IF_NEEDED => CopyPolicy::IfNeeded,
        HOSTFIRST_DLPACK_COPY_ALWAYS => CopyPolicy::Always,
        HOSTFIRST_DLPACK_COPY_NEVER => CopyPolicy::Never,
        c => {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("opts->copy is {c}; expected HOSTFIRST_DLPACK_COPY_IF_NEEDED (0), _ALWAYS (1) or _NEVER (2)"),
            ))
        }
    };
    let device = if o.has_dl_device != 0 { Some(from_dl_device(o.dl_device)?) } else { None };
    let stream = ConsumerStream::from_dlpack(if o.has_stream != 0 { Some(o.stream) } else { None })?;
    let form = form.unwrap_or(if o.max_version.major >= 1 { Form::Versioned } else { Form::Legacy });
    Ok(Request { form, copy, device, stream })
}

fn from_dl_device(d: hostfirst_dlpack_device) -> crate::error::Result<Device> {
    let bad = || {
        Error::new(
            Status::Unsupported,
            format!(
                "DLPack device ({}, {}) is not one hostfirst places tensors on (kDLCPU 0, kDLCUDA N, kDLCUDAHost 0)",
                d.device_type, d.device_id
            ),
        )
    };
    match (d.device_type, d.device_id) {
        (dlpack::device_type::CPU, 0) => Ok(Device::CPU),
        (dlpack::device_type::CUDA_HOST, 0) => Ok(Device::CUDA_HOST),
        (dlpack::device_type::CUDA, n) if n >= 0 => Device::cuda(n as u32).validate(),
        _ => Err(bad()),
    }
}

/// The registry entry of one exported tensor: what it keeps alive, its shape array, the struct it belongs to,
/// and (CUDA) the consumer stream to record a release event on.
pub(crate) struct DlpackExport {
    keep: Keep,
    _shape: Box<[i64]>,
    _strides: Option<Box<[i64]>>,
    managed: usize,
    /// The generation of the slot `managed` when this export took it.
    generation: u64,
    release_on: Option<ConsumerStream>,
}

/// The memory of one managed struct (either form; both start at the slot's address) and, after it, what the
/// deleter checks without trusting the struct: which export owns the slot now and since which reuse.
#[repr(C)]
union ManagedStruct {
    versioned: std::mem::ManuallyDrop<hostfirst_dlpack_managed_tensor_versioned>,
    legacy: std::mem::ManuallyDrop<hostfirst_dlpack_managed_tensor>,
}

#[repr(C)]
struct Slot {
    managed: ManagedStruct,
    /// The registry id of the export using the slot, 0 while it is free.
    owner: usize,
    /// Incremented each time the slot is taken.
    generation: u64,
}

/// How many deleted exports' slots are kept aside before the oldest is reused.
const QUARANTINE: usize = 1024;

/// Every slot ever made (by address) and the free ones, oldest deletion first. Slots are never returned to
/// the allocator, so a deleter called with a pointer to one never reads freed memory; a freed slot is reused
/// only after [`QUARANTINE`] later deletions, so a repeated call soon after the first finds it free.
pub(crate) struct Slots {
    all: std::collections::BTreeSet<usize>,
    free: std::collections::VecDeque<usize>,
}

pub(crate) static DLPACK_SLOTS: crate::forksafe::GlobalMutex<Slots> = crate::forksafe::GlobalMutex::new(Slots {
    all: std::collections::BTreeSet::new(),
    free: std::collections::VecDeque::new(),
});

/// A slot for a new export: the oldest free one past the quarantine, else a new one. Returns its address and
/// its new generation.
fn take_slot() -> (*mut Slot, u64) {
    let mut slots = DLPACK_SLOTS.lock();
    let slot = match slots.free.len() > QUARANTINE {
        true => slots.free.pop_front().expect("non-empty") as *mut Slot,
        false => {
            // SAFETY: every field of `Slot` (raw pointers, `Option<fn>`, integers) is valid all-zero.
            let slot = Box::into_raw(Box::new(unsafe { std::mem::zeroed::<Slot>() }));
            slots.all.insert(slot as usize);
            slot
        }
    };
    // SAFETY: a slot of ours (never freed), not in use (free or new), accessed under the lock.
    let generation = unsafe {
        (*slot).generation += 1;
        (*slot).generation
    };
    (slot, generation)
}

/// Gives a slot back (the export using it was deleted, or never published).
fn free_slot(slot: *mut Slot) {
    let mut slots = DLPACK_SLOTS.lock();
    // SAFETY: a slot of ours, accessed under the lock.
    unsafe { (*slot).owner = 0 };
    slots.free.push_back(slot as usize);
}

impl Drop for DlpackExport {
    fn drop(&mut self) {
        // The deleter has no way to report an error; a failed event record leaves the next rewrite unordered
        // with that consumer only on a driver that is already failing.
        let _ = export::release(&self.keep, self.release_on);
    }
}

/// Marker handle type for exported DLPack tensors (never seen by C as a pointer type).
pub(crate) struct dlpack_export_handle;

impl Handle for dlpack_export_handle {
    type Target = DlpackExport;
    const NAME: &'static str = "DLPack export";
}

/// The deleter of both forms. Never reads the struct it is given: the pointer must be one of hostfirst's
/// slots, used now by an export whose registry entry names that slot and the slot's current generation;
/// anything else (a second call, NULL, a struct hostfirst did not make) is ignored. The slot's memory is
/// never freed, so even a late second call reads nothing freed (see [`Slots`]).
fn delete<T>(t: *mut T) {
    let addr = t as usize;
    let (owner, generation) = {
        let slots = DLPACK_SLOTS.lock();
        if !slots.all.contains(&addr) {
            return; // not ours
        }
        let slot = addr as *const Slot;
        // SAFETY: one of our slots (never freed), read under the lock.
        unsafe { ((*slot).owner, (*slot).generation) }
    };
    if owner == 0 {
        return; // already deleted
    }
    let id = owner as *mut dlpack_export_handle;
    match handle::get::<dlpack_export_handle>(id, "manager_ctx") {
        Ok(e) if e.managed == addr && e.generation == generation => {}
        _ => return,
    }
    // Only the call that removes the registry entry frees the slot (two racing calls: one wins).
    if let Ok(Some(e)) = handle::remove::<dlpack_export_handle>(id, "manager_ctx") {
        drop(e);
        free_slot(addr as *mut Slot);
    }
}

extern "C" fn dlpack_deleter(t: *mut hostfirst_dlpack_managed_tensor_versioned) {
    hostfirst_boundary!(local "hostfirst_dlpack_deleter", default = (), { delete(t) })
}

extern "C" fn dlpack_legacy_deleter(t: *mut hostfirst_dlpack_managed_tensor) {
    hostfirst_boundary!(local "hostfirst_dlpack_legacy_deleter", default = (), { delete(t) })
}

/// The `DLTensor` of an export; `dims` and `strides` (owned by the registry entry) back its shape and strides.
fn dl_tensor(
    e: &Export,
    dims: &mut [i64],
    strides: Option<&mut [i64]>,
    what: &str,
) -> crate::error::Result<hostfirst_dlpack_tensor> {
    let dt = dlpack::dl_dtype_or_err(e.dtype, what)?;
    let (device_type, device_id) = dlpack::dl_device(e.device);
    Ok(hostfirst_dlpack_tensor {
        data: e.data as usize as *mut c_void,
        device: hostfirst_dlpack_device { device_type, device_id },
        ndim: dims.len() as i32,
        dtype: hostfirst_dlpack_dtype { code: dt.code, bits: dt.bits, lanes: dt.lanes },
        shape: if dims.is_empty() { std::ptr::null_mut() } else { dims.as_mut_ptr() },
        strides: strides.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
        byte_offset: 0,
    })
}

/// The exported struct, either form.
enum Published {
    Versioned(*mut hostfirst_dlpack_managed_tensor_versioned),
    Legacy(*mut hostfirst_dlpack_managed_tensor),
}

/// Allocates the managed struct of `form` for `e` and registers it.
fn publish(e: Export, form: Form, what: &str) -> crate::error::Result<Published> {
    let mut dims = dlpack::dl_shape(&e.shape, what)?.into_boxed_slice();
    let mut strides = match &e.strides {
        Some(s) => Some(dlpack::dl_shape(s, what)?.into_boxed_slice()),
        None => None,
    };
    let tensor = dl_tensor(&e, &mut dims, strides.as_deref_mut(), what)?;
    let flags =
        if e.read_only { dlpack::FLAG_READ_ONLY } else { 0 } | if e.copied { dlpack::FLAG_IS_COPIED } else { 0 };
    let (slot, generation) = take_slot();
    let id = handle::insert_new::<dlpack_export_handle>(DlpackExport {
        keep: e.keep,
        _shape: dims,
        _strides: strides,
        managed: slot as usize,
        generation,
        release_on: e.release_on,
    });
    // SAFETY: the slot is ours and not yet published, so nothing else reads or writes it; the struct is
    // written in place at the slot's start (both forms live there).
    let published = unsafe {
        match form {
            Form::Versioned => {
                let m = std::ptr::addr_of_mut!((*slot).managed) as *mut hostfirst_dlpack_managed_tensor_versioned;
                m.write(hostfirst_dlpack_managed_tensor_versioned {
                    version: hostfirst_dlpack_version { major: dlpack::VERSION.0, minor: dlpack::VERSION.1 },
                    manager_ctx: id as *mut c_void,
                    deleter: Some(dlpack_deleter),
                    flags,
                    dl_tensor: tensor,
                });
                Published::Versioned(m)
            }
            Form::Legacy => {
                debug_assert!(!e.read_only, "a read-only mapping never goes out in the legacy form");
                let m = std::ptr::addr_of_mut!((*slot).managed) as *mut hostfirst_dlpack_managed_tensor;
                m.write(hostfirst_dlpack_managed_tensor {
                    dl_tensor: tensor,
                    manager_ctx: id as *mut c_void,
                    deleter: Some(dlpack_legacy_deleter),
                });
                Published::Legacy(m)
            }
        }
    };
    // The deleter accepts the slot from here on.
    let _slots = DLPACK_SLOTS.lock();
    // SAFETY: a slot of ours, written under the lock.
    unsafe { (*slot).owner = id as usize };
    Ok(published)
}

fn view_export(view: *const hostfirst_view, req: Request) -> crate::error::Result<Published> {
    let v = handle::get::<hostfirst_view>(view, "view")?;
    let what = format!("{}: tensor '{}'", v.file_display(), v.name());
    let e = export::export_view(&v, req.form, req.copy, req.device)?;
    publish(e, req.form, &what)
}

fn buffer_export(buffer: *const hostfirst_buffer, req: Request) -> crate::error::Result<Published> {
    let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
    let what = format!("buffer '{}'", b.lock().unwrap_or_else(|p| p.into_inner()).name());
    let e = export::export_buffer(&b, req.copy, req.device, req.stream)?;
    publish(e, req.form, &what)
}

/// Writes whichever form was made into the two outputs (the other gets NULL).
fn write_either(
    p: Published,
    out_versioned: &mut *mut hostfirst_dlpack_managed_tensor_versioned,
    out_legacy: &mut *mut hostfirst_dlpack_managed_tensor,
) {
    match p {
        Published::Versioned(m) => (*out_versioned, *out_legacy) = (m, std::ptr::null_mut()),
        Published::Legacy(m) => (*out_versioned, *out_legacy) = (std::ptr::null_mut(), m),
    }
}

fn versioned(p: Published) -> *mut hostfirst_dlpack_managed_tensor_versioned {
    match p {
        Published::Versioned(m) => m,
        Published::Legacy(_) => unreachable!("the versioned form was asked"),
    }
}

fn legacy(p: Published) -> *mut hostfirst_dlpack_managed_tensor {
    match p {
        Published::Legacy(m) => m,
        Published::Versioned(_) => unreachable!("the legacy form was asked"),
    }
}

/// Exports a view (or row slice, or narrowed view) as a DLPack 1.1 managed tensor (versioned form) and
/// writes it to `*out`.
///
/// Zero-copy: `dl_tensor.data` points into the file's read-only mapping (the same pointer as
/// `hostfirst_view_info.data`, with the same SIGBUS hazard), device kDLCPU 0, byte_offset 0, strides NULL
/// (compact C order) or, for a strided view (`hostfirst_view_narrow` on an inner dimension), the view's
/// element strides; a strided view of a sub-byte dtype (F4, F6), whose strides DLPack cannot express, is
/// exported as a packed copy instead (flag IS_COPIED). `flags` has `HOSTFIRST_DLPACK_FLAG_READ_ONLY`: never write through it. The data may be
/// misaligned for its dtype (see `hostfirst_view_info.alignment`). The tensor keeps the mapping alive until
/// its `deleter` is called, even after the view and file handles are freed; until then it counts in
/// `hostfirst_handle_count`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `UNSUPPORTED` for a dtype DLPack has
/// no code for (none in this version), `VALIDATION_OVERFLOW` for a dimension above INT64_MAX. On failure
/// `*out` is unchanged. Thread-safe. `hostfirst_view_to_dlpack_ex` takes a consumer's full request.
#[no_mangle]
pub extern "C" fn hostfirst_view_to_dlpack(
    view: *const hostfirst_view,
    out: *mut *mut hostfirst_dlpack_managed_tensor_versioned,
) -> Status {
    hostfirst_boundary!("hostfirst_view_to_dlpack", {
        let out = out_ptr(out, "out")?;
        *out = versioned(view_export(view, request(std::ptr::null(), Some(Form::Versioned))?)?);
        Ok(())
    })
}

/// Exports a view (or row slice) in the unversioned DLPack form (`DLManagedTensor`, the Python capsule
/// "dltensor": numpy 1.x, JAX) and writes it to `*out`.
///
/// A legacy consumer cannot see a read-only flag, and some write (in-place operations, buffer donation), so
/// the file's read-only mapping never goes out this way. The export is a **private copy-on-write mapping of
/// the view's pages** (`MAP_PRIVATE`, writable): nothing is copied until the consumer writes a page, a write
/// copies that page into the process, and **the file never changes**. Chosen over a copy because it costs a
/// page table instead of a copy of the tensor, and it carries the view's own hazards and no more: pages the
/// consumer has not written still show what other processes write to the file; truncating the file makes
/// every page past the new end raise SIGBUS when touched, written or not, and truncating then extending it
/// (a rewrite in place with `O_TRUNC`) gives those pages the file's new content, silently losing what the
/// consumer wrote there (as for `hostfirst_put` with `opts->copy_on_write`). A consumer that needs the data isolated from the
/// file asks for a copy (`hostfirst_view_to_dlpack_ex` with `HOSTFIRST_DLPACK_COPY_ALWAYS`). A view over
/// memory (`hostfirst_file_open_memory`) has no file to map, and a strided view (`hostfirst_view_narrow` on
/// an inner dimension) is not one range of it: both are copied, packed (device kDLCPU either way).
///
/// `dl_tensor.data` is where the view sits in the first mapped page (alignment as in the file), device
/// kDLCPU 0, compact C order. The tensor lives until its `deleter` runs, independently of the view and file
/// handles, and counts in `hostfirst_handle_count` until then. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`,
/// `TRUNCATED` (the file is now shorter than the view), `IO` (mapping failed), `OUT_OF_MEMORY` (a copy of a
/// memory view that does not fit), `VALIDATION_OVERFLOW`. On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_to_dlpack_legacy(
    view: *const hostfirst_view,
    out: *mut *mut hostfirst_dlpack_managed_tensor,
) -> Status {
    hostfirst_boundary!("hostfirst_view_to_dlpack_legacy", {
        let out = out_ptr(out, "out")?;
        *out = legacy(view_export(view, request(std::ptr::null(), Some(Form::Legacy))?)?);
        Ok(())
    })
}

/// Exports a view for a consumer's full request (`opts`, NULL: a consumer that passed nothing): the form by
/// `opts->max_version` (major >= 1: versioned, written to `*out_versioned`; otherwise legacy, written to
/// `*out_legacy`; the other output is set to NULL, so pass both), then:
/// - versioned, copy if needed / never: the read-only mapping (as `hostfirst_view_to_dlpack`);
/// - legacy, copy if needed / never: the copy-on-write mapping (as `hostfirst_view_to_dlpack_legacy`; a view
///   over memory is copied when allowed, `UNSUPPORTED` under COPY_NEVER);
/// - COPY_ALWAYS, or a `dl_device` other than kDLCPU: a put of the view to that device (an eager copy,
///   fit-checked: `OUT_OF_MEMORY` with `hostfirst_last_error_fit`), flag IS_COPIED in the versioned form;
///   `UNSUPPORTED` under COPY_NEVER.
///
/// `opts->stream` is validated (0 is `INVALID_ARGUMENT`) but has nothing to order: the view is host memory,
/// and a copy to a device has completed when this returns. Errors also: `INVALID_ARGUMENT` (bad options),
/// those of the functions above. On failure both outputs are unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_to_dlpack_ex(
    view: *const hostfirst_view,
    opts: *const hostfirst_dlpack_options,
    out_versioned: *mut *mut hostfirst_dlpack_managed_tensor_versioned,
    out_legacy: *mut *mut hostfirst_dlpack_managed_tensor,
) -> Status {
    hostfirst_boundary!("hostfirst_view_to_dlpack_ex", {
        let (ov, ol) = (out_ptr(out_versioned, "out_versioned")?, out_ptr(out_legacy, "out_legacy")?);
        write_either(view_export(view, request(opts, None)?)?, ov, ol);
        Ok(())
    })
}

/// Exports a buffer as a DLPack 1.1 managed tensor (versioned form) and writes it to `*out`.
///
/// Zero-copy and writable (`flags` 0): device kDLCUDA with its ordinal for `cuda:N`, kDLCUDAHost 0 for
/// `cuda_host`, kDLCPU 0 for `cpu`; compact C order. The tensor keeps the buffer's memory alive until its
/// `deleter` is called, even after `hostfirst_buffer_free`; until then it counts in `hostfirst_handle_count`,
/// and a gather batch it holds is never rewritten. CUDA: as for a consumer that gave no stream (the legacy
/// default stream waits for hostfirst's last write; see `hostfirst_buffer_to_dlpack_ex`). Errors:
/// `NULL_ARGUMENT`, `INVALID_HANDLE`, `UNSUPPORTED`, `VALIDATION_OVERFLOW` (as for views), `DEVICE_ERROR`;
/// `UNAVAILABLE` for a `cuda:N` buffer in a process that cannot use CUDA (a child forked after CUDA was
/// initialised), as `hostfirst_buffer_copy_to_host` there. On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_to_dlpack(
    buffer: *const hostfirst_buffer,
    out: *mut *mut hostfirst_dlpack_managed_tensor_versioned,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_to_dlpack", {
        let out = out_ptr(out, "out")?;
        *out = versioned(buffer_export(buffer, request(std::ptr::null(), Some(Form::Versioned))?)?);
        Ok(())
    })
}

/// Exports a buffer in the unversioned DLPack form (`DLManagedTensor`, the capsule "dltensor") and writes
/// it to `*out`: the buffer's own memory, shared and writable, exactly as `hostfirst_buffer_to_dlpack` but
/// without version and flags. Lifetime, CUDA stream and errors as there. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_to_dlpack_legacy(
    buffer: *const hostfirst_buffer,
    out: *mut *mut hostfirst_dlpack_managed_tensor,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_to_dlpack_legacy", {
        let out = out_ptr(out, "out")?;
        *out = legacy(buffer_export(buffer, request(std::ptr::null(), Some(Form::Legacy))?)?);
        Ok(())
    })
}

/// Exports a buffer for a consumer's full request (`opts`, NULL: a consumer that passed nothing). The form by
/// `opts->max_version` as for `hostfirst_view_to_dlpack_ex` (pass both outputs; the one not made is set to
/// NULL). The buffer's own memory is shared (both forms, writable), unless `opts->copy` is COPY_ALWAYS or
/// `opts->dl_device` names another device: then the export is a new copy there (fit-checked, IS_COPIED),
/// `UNSUPPORTED` under COPY_NEVER.
///
/// **The CUDA stream handshake.** For data on `cuda:N`, the consumer's stream (`opts->stream`: 1 or not
/// given: the legacy default stream; 2: the calling thread's per-thread default stream, so call this from the
/// thread that queues the consumer's work, as the DLPack protocol does; > 2: the consumer's `CUstream`, which
/// must belong to the buffer's device; -1: the consumer synchronises itself) is made to wait for the event
/// recorded after hostfirst's last write into the buffer (`cuStreamWaitEvent`; the host is never blocked),
/// so its kernels never read a batch before the copy that produced it has finished. When the consumer calls
/// the deleter, an event is recorded on the consumer's stream (for 1 and 2: on the device's legacy default
/// stream, which is ordered after the work of every blocking stream, every thread's per-thread default stream
/// included, so the event covers the consumer's work whichever thread runs the deleter), and hostfirst's next
/// write into the buffer (a gather reusing the batch) waits for it on the device, so the rewrite never
/// overtakes the consumer's work queued before the release (as torch's `record_stream`). If that event cannot
/// be recorded, the batch is never rewritten (its gather drops it from the ring). With -1 neither happens:
/// the consumer owns the ordering. A `CUstream` passed here must stay alive (not destroyed) until the
/// deleter has run, and must be a stream of the buffer's device: the driver does not check stream handles,
/// and a destroyed or foreign one is undefined behaviour (a crash, or the wait or release landing on an
/// unrelated stream), not an error hostfirst can report. The stream is ignored for host buffers (cpu,
/// cuda_host): their writes have completed when the call that made them returned. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (bad options, stream 0), `UNSUPPORTED`, `OUT_OF_MEMORY` (a copy that
/// does not fit), `DEVICE_ERROR` (a driver failure, e.g. a sticky error of the device's context),
/// `VALIDATION_OVERFLOW`. On failure both outputs are unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_to_dlpack_ex(
    buffer: *const hostfirst_buffer,
    opts: *const hostfirst_dlpack_options,
    out_versioned: *mut *mut hostfirst_dlpack_managed_tensor_versioned,
    out_legacy: *mut *mut hostfirst_dlpack_managed_tensor,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_to_dlpack_ex", {
        let (ov, ol) = (out_ptr(out_versioned, "out_versioned")?, out_ptr(out_legacy, "out_legacy")?);
        write_either(buffer_export(buffer, request(opts, None)?)?, ov, ol);
        Ok(())
    })
}

/// Writes the DLPack `DLDataType` of a `HOSTFIRST_DTYPE_*` value to `*out`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a value that is not a dtype; `UNSUPPORTED` for a dtype
/// DLPack has no code for (none in this version: every safetensors dtype has a DLPack 1.1 code). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_to_dlpack(dtype: u32, out: *mut hostfirst_dlpack_dtype) -> Status {
    hostfirst_boundary!("hostfirst_dtype_to_dlpack", {
        let out = out_ptr(out, "out")?;
        let d = crate::dtype::DType::from_u32(dtype)
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("{dtype} is not a HOSTFIRST_DTYPE_* value")))?;
        let dt = dlpack::dl_dtype_or_err(d, "hostfirst_dtype_to_dlpack")?;
        *out = hostfirst_dlpack_dtype { code: dt.code, bits: dt.bits, lanes: dt.lanes };
        Ok(())
    })
}

/// The two CPython functions the capsule destructor needs, found in the running process on first use.
struct PyCapsuleApi {
    is_valid: IsValidFn,
    get_pointer: GetPointerFn,
}

/// `int PyCapsule_IsValid(PyObject *, const char *)`.
type IsValidFn = unsafe extern "C" fn(*mut c_void, *const std::ffi::c_char) -> std::ffi::c_int;
/// `void *PyCapsule_GetPointer(PyObject *, const char *)`.
type GetPointerFn = unsafe extern "C" fn(*mut c_void, *const std::ffi::c_char) -> *mut c_void;

/// `PyCapsule_IsValid` and `PyCapsule_GetPointer` from the process's global symbols (the `python`
/// executable, or a libpython it links), or None where there is no Python. Looked up, never linked: the
/// library stays usable from C, Go and any Python without a build per CPython version.
fn pycapsule_api() -> Option<&'static PyCapsuleApi> {
    static API: crate::forksafe::InitOnce<Option<PyCapsuleApi>> = crate::forksafe::InitOnce::new();
    API.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names has no preconditions.
        let (v, g) = unsafe {
            (
                libc::dlsym(libc::RTLD_DEFAULT, c"PyCapsule_IsValid".as_ptr()),
                libc::dlsym(libc::RTLD_DEFAULT, c"PyCapsule_GetPointer".as_ptr()),
            )
        };
        if v.is_null() || g.is_null() {
            return None;
        }
        // SAFETY: both are CPython's stable-ABI functions, `int (PyObject *, const char *)` and
        // `void *(PyObject *, const char *)`; a PyObject pointer is passed as `void *`.
        unsafe {
            Some(PyCapsuleApi {
                is_valid: std::mem::transmute::<*mut c_void, IsValidFn>(v),
                get_pointer: std::mem::transmute::<*mut c_void, GetPointerFn>(g),
            })
        }
    })
    .as_ref()
}

/// A Python capsule destructor (`PyCapsule_Destructor`) for capsules holding a hostfirst DLPack export, for
/// bindings that make those capsules without a compiled extension (ctypes, cffi in ABI mode).
///
/// Pass it to `PyCapsule_New` as the destructor of a capsule named `"dltensor_versioned"` (holding a
/// `hostfirst_dlpack_managed_tensor_versioned *`) or `"dltensor"` (holding a
/// `hostfirst_dlpack_managed_tensor *`) that this library made. When the capsule dies still carrying that
/// name (no consumer took it: it was never passed on, or the consumer refused it, for instance numpy given a
/// bf16 tensor) the destructor releases the export, as its deleter would. A consumer that took the tensor
/// renames the capsule (`"used_dltensor_versioned"`, `"used_dltensor"`) and calls the deleter itself: then the
/// destructor does nothing. A pointer this library did not export is ignored, and so is a second release.
///
/// It calls no Python code and neither sets nor clears the Python error indicator, so a consumer's own
/// exception stays intact when the capsule dies while it propagates (a destructor written in Python, as a
/// ctypes callback, cannot promise that). It needs the caller's GIL (a capsule destructor has it) and
/// CPython's `PyCapsule_IsValid` and `PyCapsule_GetPointer` among the process's global symbols: the
/// `python` executable exports them, as does a libpython it links. They are looked up with
/// `dlsym(RTLD_DEFAULT, ...)` on the first call; where they are absent (a Python loaded with `RTLD_LOCAL` by
/// an embedding program) it releases nothing, so check beforehand (from Python:
/// `hasattr(ctypes.CDLL(None), "PyCapsule_IsValid")`) and keep a destructor of your own for that case.
/// A NULL `capsule` is ignored. Returns nothing (a destructor's signature); never unwinds.
#[no_mangle]
pub extern "C" fn hostfirst_dlpack_capsule_destructor(capsule: *mut c_void) {
    hostfirst_boundary!("hostfirst_dlpack_capsule_destructor", default = (), {
        let Some(api) = pycapsule_api().filter(|_| !capsule.is_null()) else {
            return;
        };
        // SAFETY: `capsule` is the PyObject the interpreter passes to a capsule destructor, with the GIL
        // held; PyCapsule_IsValid accepts any object and never sets an exception, and PyCapsule_GetPointer
        // on a capsule IsValid just accepted under that name cannot fail (so sets none either).
        unsafe {
            if (api.is_valid)(capsule, c"dltensor_versioned".as_ptr()) != 0 {
                let t = (api.get_pointer)(capsule, c"dltensor_versioned".as_ptr());
                delete(t as *mut hostfirst_dlpack_managed_tensor_versioned);
            } else if (api.is_valid)(capsule, c"dltensor".as_ptr()) != 0 {
                let t = (api.get_pointer)(capsule, c"dltensor".as_ptr());
                delete(t as *mut hostfirst_dlpack_managed_tensor);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::place::Buffer;
    use std::mem::{offset_of, size_of};
    use std::sync::Mutex;

    #[test]
    fn layout_matches_dlpack_h() {
        assert_eq!(size_of::<hostfirst_dlpack_version>(), 8);
        assert_eq!(size_of::<hostfirst_dlpack_device>(), 8);
        assert_eq!(size_of::<hostfirst_dlpack_dtype>(), 4);
        assert_eq!(offset_of!(hostfirst_dlpack_dtype, bits), 1);
        assert_eq!(offset_of!(hostfirst_dlpack_dtype, lanes), 2);
        if size_of::<usize>() == 8 {
            assert_eq!(offset_of!(hostfirst_dlpack_tensor, device), 8);
            assert_eq!(offset_of!(hostfirst_dlpack_tensor, ndim), 16);
            assert_eq!(offset_of!(hostfirst_dlpack_tensor, dtype), 20);
            assert_eq!(offset_of!(hostfirst_dlpack_tensor, shape), 24);
            assert_eq!(offset_of!(hostfirst_dlpack_tensor, strides), 32);
            assert_eq!(offset_of!(hostfirst_dlpack_tensor, byte_offset), 40);
            assert_eq!(size_of::<hostfirst_dlpack_tensor>(), 48);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor_versioned, manager_ctx), 8);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor_versioned, deleter), 16);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor_versioned, flags), 24);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor_versioned, dl_tensor), 32);
            assert_eq!(size_of::<hostfirst_dlpack_managed_tensor_versioned>(), 80);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor, dl_tensor), 0);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor, manager_ctx), 48);
            assert_eq!(offset_of!(hostfirst_dlpack_managed_tensor, deleter), 56);
            assert_eq!(size_of::<hostfirst_dlpack_managed_tensor>(), 64);
        }
    }

    fn safetensors_bytes() -> Vec<u8> {
        let header = br#"{"x":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]}}"#;
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header);
        v.extend((0u8..16).collect::<Vec<_>>());
        v
    }

    #[test]
    fn view_export_outlives_handles_and_deleter_releases() {
        let f = crate::file::TensorFile::from_bytes(safetensors_bytes()).unwrap();
        let fh = handle::insert_new::<super::super::file::hostfirst_file>(f);
        let v = handle::get::<super::super::file::hostfirst_file>(fh, "f").unwrap().view("x").unwrap();
        let s = v.slice_rows(1, 3).unwrap();
        let vh = handle::insert_new::<hostfirst_view>(s);
        let mut t: *mut hostfirst_dlpack_managed_tensor_versioned = std::ptr::null_mut();
        assert_eq!(hostfirst_view_to_dlpack(vh, &mut t), Status::Ok);
        handle::remove::<hostfirst_view>(vh, "v").unwrap();
        handle::remove::<super::super::file::hostfirst_file>(fh, "f").unwrap();
        // SAFETY: a live export.
        let m = unsafe { &*t };
        assert_eq!(m.version, hostfirst_dlpack_version { major: 1, minor: 1 });
        assert_eq!(m.flags, HOSTFIRST_DLPACK_FLAG_READ_ONLY);
        assert_eq!(m.dl_tensor.device, hostfirst_dlpack_device { device_type: 1, device_id: 0 });
        assert_eq!(m.dl_tensor.dtype, hostfirst_dlpack_dtype { code: 4, bits: 16, lanes: 1 });
        assert_eq!(m.dl_tensor.ndim, 2);
        assert!(m.dl_tensor.strides.is_null());
        // SAFETY: ndim dims, and 8 bytes of data (rows 1..3 of 4x2 bf16), kept alive by the export.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(m.dl_tensor.shape, 2), &[2, 2]);
            assert_eq!(std::slice::from_raw_parts(m.dl_tensor.data as *const u8, 8), &[4, 5, 6, 7, 8, 9, 10, 11]);
        }
        let ctx = m.manager_ctx;
        assert!(handle::get::<dlpack_export_handle>(ctx as *const dlpack_export_handle, "c").is_ok());
        (m.deleter.unwrap())(t);
        assert_eq!(
            handle::get::<dlpack_export_handle>(ctx as *const dlpack_export_handle, "c")
                .map(|_| ())
                .unwrap_err()
                .status(),
            Status::InvalidHandle
        );
    }

    #[test]
    fn buffer_export_is_writable_cpu() {
        let b = Buffer::alloc("b", DType::F32, &[3], 12, Device::CPU).unwrap();
        let addr = b.address();
        let bh = handle::insert_new::<hostfirst_buffer>(Mutex::new(b));
        let mut t: *mut hostfirst_dlpack_managed_tensor_versioned = std::ptr::null_mut();
        assert_eq!(hostfirst_buffer_to_dlpack(bh, &mut t), Status::Ok);
        handle::remove::<hostfirst_buffer>(bh, "b").unwrap();
        // SAFETY: live export of a 12-byte cpu buffer.
        let m = unsafe { &mut *t };
        assert_eq!(m.flags, 0);
        assert_eq!(m.dl_tensor.data as u64, addr);
        assert_eq!(m.dl_tensor.dtype, hostfirst_dlpack_dtype { code: 2, bits: 32, lanes: 1 });
        // SAFETY: writable, 3 f32 (buffer kept alive by the export).
        unsafe { *(m.dl_tensor.data as *mut f32).add(2) = 1.5 };
        (m.deleter.unwrap())(t);
    }

    #[test]
    fn dtype_to_dlpack_and_errors() {
        let mut d = hostfirst_dlpack_dtype { code: 0, bits: 0, lanes: 0 };
        assert_eq!(hostfirst_dtype_to_dlpack(DType::F8_E4M3 as u32, &mut d), Status::Ok);
        assert_eq!(d, hostfirst_dlpack_dtype { code: 10, bits: 8, lanes: 1 });
        assert_eq!(hostfirst_dtype_to_dlpack(0, &mut d), Status::InvalidArgument);
        assert_eq!(hostfirst_dtype_to_dlpack(1, std::ptr::null_mut()), Status::NullArgument);
        let mut t: *mut hostfirst_dlpack_managed_tensor_versioned = std::ptr::null_mut();
        assert_eq!(hostfirst_view_to_dlpack(std::ptr::null(), &mut t), Status::NullArgument);
        assert_eq!(hostfirst_view_to_dlpack(0x40 as *const hostfirst_view, &mut t), Status::InvalidHandle);
        assert!(t.is_null());
    }
}
