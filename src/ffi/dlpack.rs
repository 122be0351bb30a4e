//! DLPack export of views and buffers (DLPack 1.1): one function per source object, `hostfirst_view_to_dlpack`
//! and `hostfirst_buffer_to_dlpack`, taking the consumer's request as `hostfirst_dlpack_options` (the form,
//! versioned or legacy, by `max_version`; copy; device; stream). This module checks and converts the
//! arguments; what is shared, mapped or copied is decided by the core (`place::export`), and the managed
//! structs, their slots and their release are the core's too (`hostfirst_core::dlpack`). The deleters C calls
//! are here: they are C functions.

use super::args::{bool_arg, init_options, options_struct, out_ptr, read_options};
use super::buffer::hostfirst_buffer;
use super::handle;
use super::view::hostfirst_view;
use crate::dlpack::{self, Deleters, DlDType, DlpackDevice, DlpackVersion, Published, Request};
use crate::dlpack::{ManagedTensor, ManagedTensorVersioned};
use crate::error::{Error, Status};
use crate::place::export::{ConsumerStream, CopyPolicy, Form};
use std::ffi::c_void;
use std::mem::size_of;

/// DLPack major version of the tensors hostfirst exports (`DLPACK_MAJOR_VERSION`).
pub const HOSTFIRST_DLPACK_MAJOR_VERSION: u32 = 1;
/// DLPack minor version of the tensors hostfirst exports (`DLPACK_MINOR_VERSION`).
pub const HOSTFIRST_DLPACK_MINOR_VERSION: u32 = 1;

/// What a DLPack consumer asked for: the arguments of Python's `__dlpack__(*, stream, max_version,
/// dl_device, copy)`, for `hostfirst_view_to_dlpack` and `hostfirst_buffer_to_dlpack`. As for every options
/// struct, zero means the default in every field: a zero-filled struct with `struct_size` set, NULL options
/// and `hostfirst_dlpack_options_init` are the same request, a DLPack 1.1 consumer that passed nothing else
/// (the versioned form, no stream, copy if needed, the data's own device). Then set what the consumer gave:
/// `hostfirst_dlpack_options opts; hostfirst_dlpack_options_init(&opts, sizeof opts); opts.copy =
/// HOSTFIRST_DLPACK_COPY_NEVER;`. A consumer that passed no `max_version` at all (Python's
/// `max_version=None`) takes only the legacy form: set `legacy = 1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_dlpack_options {
    /// `sizeof(hostfirst_dlpack_options)`.
    pub struct_size: usize,
    /// The highest DLPack version the consumer takes, which picks the form: {0, 0} (not given, the default)
    /// or major >= 1, the versioned form (`hostfirst_dlpack_managed_tensor_versioned`, DLPack
    /// {HOSTFIRST_DLPACK_MAJOR_VERSION, HOSTFIRST_DLPACK_MINOR_VERSION}); a version below 1.0 ({0, n}, n > 0),
    /// the legacy form (`hostfirst_dlpack_managed_tensor`).
    pub max_version: DlpackVersion,
    /// The consumer's stream, read when `has_stream` is 1, with DLPack's meaning: 1 the legacy default
    /// stream, 2 the per-thread default stream, > 2 a `CUstream` (cast to an integer), -1 the consumer
    /// synchronises itself; 0 and other negative values are `INVALID_ARGUMENT`. Not given: the legacy default
    /// stream. Only CUDA data uses it (see `hostfirst_buffer_to_dlpack`).
    pub stream: i64,
    /// 1 when `stream` was given (Python: `stream is not None`), else 0.
    pub has_stream: i32,
    /// Share, copy, or refuse to copy: a `hostfirst_dlpack_copy` (default `HOSTFIRST_DLPACK_COPY_IF_NEEDED`);
    /// another value is `INVALID_ARGUMENT`.
    pub copy: c_dlpack_copy,
    /// 1 when `dl_device` was given, else 0.
    pub has_dl_device: i32,
    /// The device the consumer wants the data on (kDLCPU 0, kDLCUDA N, kDLCUDAHost 0); when it is not where the
    /// data lives, the export is a copy there (fit-checked; `UNSUPPORTED` under COPY_NEVER, and for any other
    /// device type).
    pub dl_device: DlpackDevice,
    /// 1: the consumer takes only the legacy form (`hostfirst_dlpack_managed_tensor`, DLPack's
    /// `DLManagedTensor`), as a consumer that passed no `max_version` (Python's `max_version=None`: numpy 1.x,
    /// JAX). 0 (default): the form follows `max_version`. 1 with a `max_version` of 1.0 or more is
    /// `INVALID_ARGUMENT` (the two ask for different forms).
    pub legacy: i32,
}

/// A `hostfirst_dlpack_copy` from C, as the plain integer it is there (printed as `hostfirst_dlpack_copy`:
/// cbindgen.toml `[export] exclude` + `rename`); checked into a [`CopyPolicy`].
#[allow(non_camel_case_types)]
pub type c_dlpack_copy = u32;

/// The defaults (`hostfirst_dlpack_options_init`, NULL options, and the fields past an older `struct_size`):
/// all zero, as for every options struct.
impl Default for hostfirst_dlpack_options {
    fn default() -> Self {
        hostfirst_dlpack_options {
            struct_size: size_of::<hostfirst_dlpack_options>(),
            max_version: DlpackVersion { major: 0, minor: 0 },
            stream: 0,
            has_stream: 0,
            copy: CopyPolicy::IfNeeded as u32,
            has_dl_device: 0,
            dl_device: DlpackDevice { device_type: 0, device_id: 0 },
            legacy: 0,
        }
    }
}

/// The consumer's request, checked.
fn request(opts: *const hostfirst_dlpack_options) -> crate::error::Result<Request> {
    let o = read_options(opts, hostfirst_dlpack_options::default(), "opts")?;
    let copy = CopyPolicy::from_repr(o.copy).ok_or_else(|| {
        Error::new(
            Status::InvalidArgument,
            format!(
                "opts->copy is {}; expected HOSTFIRST_DLPACK_COPY_IF_NEEDED (0), _ALWAYS (1) or _NEVER (2)",
                o.copy
            ),
        )
    })?;
    let d = o.dl_device;
    let (has_dl_device, has_stream) =
        (bool_arg(o.has_dl_device, "opts->has_dl_device")?, bool_arg(o.has_stream, "opts->has_stream")?);
    let legacy = bool_arg(o.legacy, "opts->legacy")?;
    let device = if has_dl_device { Some(dlpack::device_from_dl(d.device_type, d.device_id)?) } else { None };
    let stream = ConsumerStream::from_dlpack(if has_stream { Some(o.stream) } else { None })?;
    let v = o.max_version;
    if legacy && v.major >= 1 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "opts->legacy is {} (the legacy form) but opts->max_version is {{{}, {}}} (the versioned form): \
                 set one of them",
                o.legacy, v.major, v.minor
            ),
        ));
    }
    let pre_1_0 = v.major == 0 && v.minor != 0;
    let form = if legacy || pre_1_0 { Form::Legacy } else { Form::Versioned };
    Ok(Request { form, copy, device, stream })
}

options_struct!(
    hostfirst_dlpack_options,
    first_version_ends_with = legacy,
    fields = [struct_size, max_version, stream, has_stream, copy, has_dl_device, dl_device, legacy]
);

/// Fills `*out` with the default options, all zero: a DLPack 1.1 consumer that passed nothing else (versioned
/// form, no stream, `HOSTFIRST_DLPACK_COPY_IF_NEEDED`, the data's own device), and sets `out->struct_size =
/// struct_size`. Pass `sizeof *out`: `hostfirst_dlpack_options_init(&opts, sizeof opts)`. Writes by the rule
/// of extensible structs (CONVENTIONS). Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a `struct_size`
/// smaller than the struct's 1.0 layout or larger than 4096 (the message names the sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dlpack_options_init(out: *mut hostfirst_dlpack_options, struct_size: usize) -> Status {
    hostfirst_boundary!("hostfirst_dlpack_options_init", {
        init_options(out, struct_size, hostfirst_dlpack_options::default())
    })
}

/// The deleters the managed structs carry: C functions over the core's release.
const DELETERS: Deleters = Deleters { versioned: dlpack_deleter, legacy: dlpack_legacy_deleter };

extern "C" fn dlpack_deleter(t: *mut ManagedTensorVersioned) {
    hostfirst_boundary!(local "hostfirst_dlpack_deleter", default = (), {
        dlpack::release(t as *mut c_void);
    })
}

extern "C" fn dlpack_legacy_deleter(t: *mut ManagedTensor) {
    hostfirst_boundary!(local "hostfirst_dlpack_legacy_deleter", default = (), {
        dlpack::release(t as *mut c_void);
    })
}

/// The outputs of an export, checked before any work: the one for the requested form is required, the other
/// may be NULL.
type Outs<'a> = (Option<&'a mut *mut ManagedTensorVersioned>, Option<&'a mut *mut ManagedTensor>);

fn outs<'a>(
    req: &Request,
    out_versioned: *mut *mut ManagedTensorVersioned,
    out_legacy: *mut *mut ManagedTensor,
) -> crate::error::Result<Outs<'a>> {
    Ok(match req.form {
        Form::Versioned => (Some(out_ptr(out_versioned, "out_versioned")?), super::args::opt_out(out_legacy)),
        Form::Legacy => (super::args::opt_out(out_versioned), Some(out_ptr(out_legacy, "out_legacy")?)),
    })
}

/// Writes the form made into its output and NULL into the other (when given).
fn write(p: Published, (ov, ol): Outs<'_>) {
    let (v, l) = match p {
        Published::Versioned(m) => (m, std::ptr::null_mut()),
        Published::Legacy(m) => (std::ptr::null_mut(), m),
    };
    if let Some(ov) = ov {
        *ov = v;
    }
    if let Some(ol) = ol {
        *ol = l;
    }
}

/// Exports a view (or row slice, or narrowed view) as a DLPack managed tensor for a consumer's request
/// (`opts`; NULL: the defaults of `hostfirst_dlpack_options_init`, a DLPack 1.1 consumer).
///
/// **Outputs.** The form follows `opts->legacy` and `opts->max_version` (see `hostfirst_dlpack_options`): the
/// versioned form (the default) writes a `hostfirst_dlpack_managed_tensor_versioned *` to `*out_versioned`,
/// the legacy form a `hostfirst_dlpack_managed_tensor *` to `*out_legacy`. The output of the requested form is required (`NULL_ARGUMENT`); the other may be NULL,
/// and when given it is set to NULL. From C: `hostfirst_view_to_dlpack(view, NULL, &t, NULL)`.
///
/// **Versioned form** (copy if needed or never): zero-copy. `dl_tensor.data` points into the file's read-only
/// mapping (the same pointer as `hostfirst_view_info.data`, with the same SIGBUS hazard), device kDLCPU 0,
/// byte_offset 0, strides NULL (compact C order) or, for a strided view (`hostfirst_view_narrow` on an inner
/// dimension), the view's element strides; a strided view of a sub-byte dtype (F4, F6), whose strides DLPack
/// cannot express, is exported as a packed copy instead (flag IS_COPIED). `flags` has
/// `HOSTFIRST_DLPACK_FLAG_READ_ONLY`: never write through it. The data may be misaligned for its dtype (see
/// `hostfirst_view_info.alignment`).
///
/// **Legacy form** (`DLManagedTensor`, the Python capsule "dltensor": numpy 1.x, JAX; copy if needed or
/// never). A legacy consumer cannot see a read-only flag, and some write (in-place operations, buffer
/// donation), so the file's read-only mapping never goes out this way. The export is a **private
/// copy-on-write mapping of the view's pages** (`MAP_PRIVATE`, writable): nothing is copied until the consumer
/// writes a page, a write copies that page into the process, and **the file never changes**. Chosen over a
/// copy because it costs a page table instead of a copy of the tensor, and it carries the view's own hazards
/// and no more: pages the consumer has not written still show what other processes write to the file;
/// on Linux, truncating the file makes every page past the new end raise SIGBUS when touched, written or not,
/// and truncating then extending it (a rewrite in place with `O_TRUNC`) gives those pages the file's new
/// content, silently losing what the consumer wrote there (as for `hostfirst_put` with
/// `opts->copy_on_write`); Windows refuses to shrink the file while the export lives. A
/// consumer that needs the data isolated from the file asks for a copy (`HOSTFIRST_DLPACK_COPY_ALWAYS`). A view
/// over memory (`hostfirst_file_open_memory`) has no file to map, and a strided view is not one range of it:
/// both are copied, packed (device kDLCPU either way; `UNSUPPORTED` under COPY_NEVER). `dl_tensor.data` is
/// where the view sits in the first mapped page (alignment as in the file), compact C order.
///
/// **Copies.** `HOSTFIRST_DLPACK_COPY_ALWAYS`, or a `dl_device` other than kDLCPU: a put of the view to that
/// device (an eager copy, fit-checked: `OUT_OF_MEMORY` with `hostfirst_last_error_fit`), flag IS_COPIED in the
/// versioned form; `UNSUPPORTED` under COPY_NEVER. `opts->stream` is validated (0 is `INVALID_ARGUMENT`) but
/// has nothing to order: the view is host memory, and a copy to a device has completed when this returns.
///
/// The tensor keeps what it exports alive until its `deleter` is called, even after the view and file
/// handles are freed; until then it counts in `hostfirst_handle_count`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (bad options), `UNSUPPORTED`, `TRUNCATED` (the file is now shorter
/// than the view), `IO` (mapping failed), `OUT_OF_MEMORY` (a copy that does not fit), `VALIDATION_OVERFLOW`
/// (a dimension above INT64_MAX). On failure both outputs are unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_to_dlpack(
    view: *const hostfirst_view,
    opts: *const hostfirst_dlpack_options,
    out_versioned: *mut *mut ManagedTensorVersioned,
    out_legacy: *mut *mut ManagedTensor,
) -> Status {
    hostfirst_boundary!("hostfirst_view_to_dlpack", {
        let req = request(opts)?;
        let outs = outs(&req, out_versioned, out_legacy)?;
        let v = handle::get::<hostfirst_view>(view, "view")?;
        write(dlpack::export_view(&v, &req, DELETERS)?, outs);
        Ok(())
    })
}

/// Exports a buffer as a DLPack managed tensor for a consumer's request (`opts`; NULL: the defaults of
/// `hostfirst_dlpack_options_init`, a DLPack 1.1 consumer). The outputs as for `hostfirst_view_to_dlpack`
/// (the form by `opts->legacy` and `opts->max_version`; the other output may be NULL). The buffer's own memory is shared (both
/// forms, writable, flags 0), unless `opts->copy` is COPY_ALWAYS or `opts->dl_device` names another device:
/// then the export is a new copy there (fit-checked, IS_COPIED), `UNSUPPORTED` under COPY_NEVER. The tensor
/// keeps the buffer's memory alive until its deleter runs, after `hostfirst_buffer_free` too (a gather batch
/// keeps its place in the ring until then), and counts in `hostfirst_handle_count` until then.
///
/// **The CUDA stream handshake.** For data on `cuda:N`, the consumer's stream (`opts->stream`: 1 or not
/// given: the legacy default stream; 2: the calling thread's per-thread default stream, so call this from the
/// thread that queues the consumer's work, as the DLPack protocol does; > 2: the consumer's `CUstream`, which
/// must belong to the buffer's device; -1: the consumer synchronises itself) is made to wait for the event
/// recorded after hostfirst's last write into the buffer (`cuStreamWaitEvent`; the host is never blocked),
/// so its kernels never read a batch before the copy that produced it has finished. DLPack defines that
/// stream for the export call only, so the deleter never touches a consumer's own stream again (the consumer
/// may have destroyed it by then; CuPy does on garbage collection). When the consumer calls the deleter: for 1
/// and 2 an event is recorded on the device's legacy default stream, which is ordered after the work of every
/// blocking stream, every thread's per-thread default stream included, so the event covers the consumer's
/// work whichever thread runs the deleter, and hostfirst's next write into the buffer (a gather reusing the
/// batch) waits for it on the device (as torch's `record_stream`); if that event cannot be recorded, the batch
/// is never rewritten (its gather drops it from the ring). For a consumer's own `CUstream` nothing is called at
/// release: the next rewrite first waits, on the host, until the whole device is idle (`cuCtxSynchronize`),
/// which covers whatever the consumer queued before releasing; a consumer that wants the rewrite to overlap its
/// later work calls `hostfirst_buffer_record_stream` on its live stream before releasing, or exports for stream
/// 1 or 2. Either way the rewrite never overtakes the consumer's work queued before the release. With -1
/// nothing is done: the consumer owns the ordering. A `CUstream` passed here must be a live stream of the
/// buffer's device during this call (the driver does not check stream handles: a destroyed or foreign one is
/// undefined behaviour, not an error hostfirst can report); it may be destroyed any time after.
///
/// **Deleters and CUDA graph capture.** The deleter's CUDA calls (the event above; freeing the memory when the
/// export held the last reference) run with the calling thread's stream capture mode set to relaxed
/// (`cuThreadExchangeStreamCaptureMode`), so they do not invalidate another framework's graph capture
/// (`torch.cuda.graph` captures in global mode). Where a capture they would conflict with is seen
/// (`cuStreamIsCapturing`: a blocking stream capturing, on any thread, or the deleter thread's per-thread
/// stream), or the driver will not say, the deleter calls nothing more: the release is kept and done at the
/// next hostfirst call that sees no capture (any outermost C call is such a safe point, as is
/// `hostfirst_release_cached_memory`); until then the memory stays allocated and a batch stays out of its
/// ring. A capture on a non-blocking stream (torch's) cannot be seen from outside; the relaxed mode is what
/// keeps the release from disturbing it. Do not run a deleter inside a CUDA host callback (`cuLaunchHostFunc`),
/// where CUDA forbids all driver calls.
///
/// The stream is ignored for host buffers (cpu,
/// cuda_host): their writes have completed when the call that made them returned. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (bad options, stream 0), `UNAVAILABLE` (cuda:N or cuda_host data in
/// a child forked after CUDA was initialised), `UNSUPPORTED`, `OUT_OF_MEMORY` (a copy that does not fit), `DEVICE_ERROR` (a
/// driver failure, e.g. a sticky error of the device's context), `VALIDATION_OVERFLOW`. On failure both
/// outputs are unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_to_dlpack(
    buffer: *const hostfirst_buffer,
    opts: *const hostfirst_dlpack_options,
    out_versioned: *mut *mut ManagedTensorVersioned,
    out_legacy: *mut *mut ManagedTensor,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_to_dlpack", {
        let req = request(opts)?;
        let outs = outs(&req, out_versioned, out_legacy)?;
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        write(dlpack::export_buffer(&b, &req, DELETERS)?, outs);
        Ok(())
    })
}

/// Writes the DLPack `DLDataType` of a `HOSTFIRST_DTYPE_*` value to `*out`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a value that is not a dtype; `UNSUPPORTED` for a dtype
/// DLPack has no code for (none in this version: every safetensors dtype has a DLPack 1.1 code). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_to_dlpack(dtype: super::args::c_dtype, out: *mut DlDType) -> Status {
    hostfirst_boundary!("hostfirst_dtype_to_dlpack", {
        let out = out_ptr(out, "out")?;
        let d = crate::dtype::DType::from_u32(dtype)
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("{dtype} is not a HOSTFIRST_DTYPE_* value")))?;
        let dt = dlpack::dl_dtype_or_err(d, "hostfirst_dtype_to_dlpack")?;
        *out = dt;
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
/// executable, or a libpython it links; on Windows the `python3X.dll` loaded into the process), or None where
/// there is no Python. Looked up, never linked: the library stays usable from C, Go and any Python without a
/// build per CPython version.
fn pycapsule_api() -> Option<&'static PyCapsuleApi> {
    static API: crate::forksafe::InitOnce<Option<PyCapsuleApi>> = crate::forksafe::InitOnce::new();
    API.get_or_init(|| {
        let v = hostfirst_core::os::loaded_symbol(c"PyCapsule_IsValid")?;
        let g = hostfirst_core::os::loaded_symbol(c"PyCapsule_GetPointer")?;
        // SAFETY: both are CPython's stable-ABI functions, `int (PyObject *, const char *)` and
        // `void *(PyObject *, const char *)`; a PyObject pointer is passed as `void *`.
        unsafe {
            Some(PyCapsuleApi {
                is_valid: std::mem::transmute::<*mut c_void, IsValidFn>(v.as_ptr()),
                get_pointer: std::mem::transmute::<*mut c_void, GetPointerFn>(g.as_ptr()),
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
/// `dlsym(RTLD_DEFAULT, ...)` on the first call (on Windows: `GetProcAddress` in each module loaded into the
/// process, which finds them in `python3X.dll`); where they are absent (a Python loaded with `RTLD_LOCAL` by
/// an embedding program) it releases nothing, so check beforehand (from Python:
/// `hasattr(ctypes.CDLL(None), "PyCapsule_IsValid")`; on Windows `hasattr(ctypes.pythonapi,
/// "PyCapsule_IsValid")`) and keep a destructor of your own for that case.
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
                dlpack::release((api.get_pointer)(capsule, c"dltensor_versioned".as_ptr()));
            } else if (api.is_valid)(capsule, c"dltensor".as_ptr()) != 0 {
                dlpack::release((api.get_pointer)(capsule, c"dltensor".as_ptr()));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::dlpack::{DlpackDeviceType, DlpackFlag};
    use crate::dtype::DType;
    use crate::place::Buffer;
    use std::sync::Mutex;

    fn safetensors_bytes() -> Vec<u8> {
        let header = br#"{"x":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]}}"#;
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header);
        v.extend((0u8..16).collect::<Vec<_>>());
        v
    }

    fn opts() -> hostfirst_dlpack_options {
        let mut o = std::mem::MaybeUninit::<hostfirst_dlpack_options>::uninit();
        assert_eq!(hostfirst_dlpack_options_init(o.as_mut_ptr(), size_of::<hostfirst_dlpack_options>()), Status::Ok);
        // SAFETY: initialised by the call above, every field with a valid value.
        unsafe { o.assume_init() }
    }

    #[test]
    fn init_writes_the_defaults() {
        let o = opts();
        assert_eq!(o.struct_size, size_of::<hostfirst_dlpack_options>());
        assert_eq!(o.max_version, DlpackVersion { major: 0, minor: 0 }, "not given: the versioned form");
        assert_eq!((o.has_stream, o.has_dl_device, o.copy, o.legacy), (0, 0, CopyPolicy::IfNeeded as u32, 0));
        assert_eq!(request(&o).unwrap().form, Form::Versioned);
        assert_eq!(
            hostfirst_dlpack_options_init(std::ptr::null_mut(), size_of::<hostfirst_dlpack_options>()),
            Status::NullArgument
        );
    }

    #[test]
    fn view_export_outlives_handles_and_deleter_releases() {
        let f = crate::file::TensorFile::from_bytes(safetensors_bytes()).unwrap();
        let fh = handle::insert_new::<super::super::file::hostfirst_file>(f);
        let v = handle::get::<super::super::file::hostfirst_file>(fh, "f").unwrap().view("x").unwrap();
        let s = v.slice_rows(1, 3).unwrap();
        let vh = handle::insert_new::<hostfirst_view>(s);
        let mut t: *mut ManagedTensorVersioned = std::ptr::null_mut();
        let mut l: *mut ManagedTensor = 0x8 as *mut ManagedTensor;
        assert_eq!(hostfirst_view_to_dlpack(vh, std::ptr::null(), &mut t, &mut l), Status::Ok);
        assert!(l.is_null(), "the output of the form not made is set to NULL");
        handle::remove::<hostfirst_view>(vh, "v").unwrap();
        handle::remove::<super::super::file::hostfirst_file>(fh, "f").unwrap();
        // SAFETY: a live export.
        let m = unsafe { &*t };
        assert_eq!(m.version, DlpackVersion { major: 1, minor: 1 });
        assert_eq!(m.flags, DlpackFlag::ReadOnly as u64);
        assert_eq!(m.dl_tensor.device, DlpackDevice { device_type: DlpackDeviceType::CPU as i32, device_id: 0 });
        // SAFETY: 8 bytes of data (rows 1..3 of 4x2 bf16), kept alive by the export.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(m.dl_tensor.data as *const u8, 8), &[4, 5, 6, 7, 8, 9, 10, 11]);
        }
        (m.deleter.unwrap())(t);
        assert!(!dlpack::release(t as *mut c_void), "the deleter released the export");
    }

    #[test]
    fn legacy_form_by_max_version_and_output_checks() {
        // The form: legacy = 1 or a version below 1.0; {0, 0} (not given) and >= 1.0 are versioned;
        // legacy = 1 with a version >= 1.0 is refused.
        let form = |legacy: i32, major: u32, minor: u32| {
            let o = hostfirst_dlpack_options { legacy, max_version: DlpackVersion { major, minor }, ..opts() };
            request(&o).map(|r| r.form).map_err(|e| e.status())
        };
        assert_eq!(form(0, 0, 0), Ok(Form::Versioned));
        assert_eq!(form(0, 1, 0), Ok(Form::Versioned));
        assert_eq!(form(0, 0, 8), Ok(Form::Legacy));
        assert_eq!(form(1, 0, 0), Ok(Form::Legacy));
        assert_eq!(form(1, 1, 1), Err(Status::InvalidArgument));
        let b = Buffer::alloc("b", DType::F32, &[3], 12, Device::CPU).unwrap();
        let addr = b.address();
        let bh = handle::insert_new::<hostfirst_buffer>(Mutex::new(b));
        let mut o = opts();
        o.legacy = 1;
        let mut l: *mut ManagedTensor = std::ptr::null_mut();
        // The legacy output is the required one now.
        let mut t: *mut ManagedTensorVersioned = std::ptr::null_mut();
        assert_eq!(hostfirst_buffer_to_dlpack(bh, &o, &mut t, std::ptr::null_mut()), Status::NullArgument);
        assert!(t.is_null());
        assert_eq!(hostfirst_buffer_to_dlpack(bh, &o, std::ptr::null_mut(), &mut l), Status::Ok);
        handle::remove::<hostfirst_buffer>(bh, "b").unwrap();
        // SAFETY: live export of a 12-byte cpu buffer.
        let m = unsafe { &mut *l };
        assert_eq!(m.dl_tensor.data as u64, addr);
        // SAFETY: writable, 3 f32 (buffer kept alive by the export).
        unsafe { *(m.dl_tensor.data as *mut f32).add(2) = 1.5 };
        (m.deleter.unwrap())(l);
    }

    #[test]
    fn bad_options_and_handles() {
        let mut t: *mut ManagedTensorVersioned = std::ptr::null_mut();
        let mut o = opts();
        o.copy = 3;
        let f = crate::file::TensorFile::from_bytes(safetensors_bytes()).unwrap();
        let vh = handle::insert_new::<hostfirst_view>(f.view("x").unwrap());
        assert_eq!(hostfirst_view_to_dlpack(vh, &o, &mut t, std::ptr::null_mut()), Status::InvalidArgument);
        let mut o = opts();
        o.has_dl_device = 1;
        o.dl_device.device_type = 7; // kDLVulkan: a DLPack device type hostfirst does not know

        assert_eq!(hostfirst_view_to_dlpack(vh, &o, &mut t, std::ptr::null_mut()), Status::Unsupported);
        handle::remove::<hostfirst_view>(vh, "v").unwrap();
        assert!(t.is_null());
        assert_eq!(hostfirst_view_to_dlpack(vh, std::ptr::null(), &mut t, std::ptr::null_mut()), Status::InvalidHandle);
        assert_eq!(
            hostfirst_view_to_dlpack(std::ptr::null(), std::ptr::null(), &mut t, std::ptr::null_mut()),
            Status::NullArgument
        );
        assert!(t.is_null());
    }

    #[test]
    fn dtype_to_dlpack_and_errors() {
        let mut d = DlDType { code: 0, bits: 0, lanes: 0 };
        assert_eq!(hostfirst_dtype_to_dlpack(DType::F8_E4M3 as u32, &mut d), Status::Ok);
        assert_eq!(d, DlDType { code: 10, bits: 8, lanes: 1 });
        assert_eq!(hostfirst_dtype_to_dlpack(0, &mut d), Status::InvalidArgument);
        assert_eq!(hostfirst_dtype_to_dlpack(1, std::ptr::null_mut()), Status::NullArgument);
    }
}
