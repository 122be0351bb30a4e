//! DLPack export of views and buffers (DLPack 1.1, `DLManagedTensorVersioned`).
//!
//! The structs below are written by us from the DLPack specification and are layout-identical to
//! `dlpack.h`'s types; a program that includes `dlpack.h` may cast between them.

use super::args::out_ptr;
use super::buffer::hostfirst_buffer;
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::dlpack;
use crate::error::{Error, Status};
use crate::file::TensorView;
use crate::place::Buffer;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// DLPack major version of the tensors hostfirst exports (`DLPACK_MAJOR_VERSION`).
pub const HOSTFIRST_DLPACK_MAJOR_VERSION: u32 = 1;
/// DLPack minor version of the tensors hostfirst exports (`DLPACK_MINOR_VERSION`).
pub const HOSTFIRST_DLPACK_MINOR_VERSION: u32 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the data must not be written (set for views of mapped files).
pub const HOSTFIRST_DLPACK_FLAG_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the data is a private copy (never set by hostfirst).
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
    /// Always NULL: the data is compact, C order.
    pub strides: *mut i64,
    /// Always 0: `data` points at the first element.
    pub byte_offset: u64,
}

/// Layout-identical to dlpack.h's `DLManagedTensorVersioned` (DLPack >= 1.0).
///
/// Made by `hostfirst_view_to_dlpack` / `hostfirst_buffer_to_dlpack`; the consumer calls `deleter(self)`
/// exactly once when done. Until then it keeps the file mapping (or the buffer's memory) alive on its own,
/// whatever happens to the handle it was made from.
#[repr(C)]
#[derive(Debug)]
pub struct hostfirst_dlpack_managed_tensor_versioned {
    /// {HOSTFIRST_DLPACK_MAJOR_VERSION, HOSTFIRST_DLPACK_MINOR_VERSION}.
    pub version: hostfirst_dlpack_version,
    /// Owned by hostfirst (a registry id); counted by `hostfirst_handle_count` until the deleter runs.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and frees this struct: call it exactly once, then never touch the pointer again.
    /// A NULL argument, or a struct hostfirst did not make, is ignored.
    pub deleter: Option<extern "C" fn(*mut hostfirst_dlpack_managed_tensor_versioned)>,
    /// `HOSTFIRST_DLPACK_FLAG_*` bits: READ_ONLY for views.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: hostfirst_dlpack_tensor,
}

/// What an exported tensor keeps alive.
enum Keep {
    View(#[allow(dead_code)] TensorView),
    Buffer(#[allow(dead_code)] Arc<Mutex<Buffer>>),
}

/// The registry entry of one exported tensor.
pub(crate) struct DlpackExport {
    _keep: Keep,
    _shape: Box<[i64]>,
    managed: usize,
}

/// Marker handle type for exported DLPack tensors (never seen by C as a pointer type).
pub(crate) struct dlpack_export_handle;

impl Handle for dlpack_export_handle {
    type Target = DlpackExport;
    const NAME: &'static str = "DLPack export";
}

extern "C" fn dlpack_deleter(t: *mut hostfirst_dlpack_managed_tensor_versioned) {
    hostfirst_boundary!("hostfirst_dlpack_deleter", default = (), {
        if t.is_null() {
            return;
        }
        // SAFETY: non-NULL; the consumer passes the pointer we returned. We read only manager_ctx, and free
        // the allocation only when the registry confirms it is live and belongs to this very struct.
        let ctx = unsafe { (*t).manager_ctx };
        let Ok(e) = handle::get::<dlpack_export_handle>(ctx as *const dlpack_export_handle, "manager_ctx") else {
            return; // already deleted, or not ours: nothing to free
        };
        if e.managed != t as usize {
            return;
        }
        drop(e);
        if let Ok(Some(_)) = handle::remove::<dlpack_export_handle>(ctx as *mut dlpack_export_handle, "manager_ctx") {
            // SAFETY: allocated by Box::into_raw in `export`, and the registry entry (now removed) proved it
            // was not freed before.
            drop(unsafe { Box::from_raw(t) });
        }
    })
}

fn export(
    keep: Keep,
    data: *mut c_void,
    device: crate::device::Device,
    dtype: crate::dtype::DType,
    shape: &[u64],
    flags: u64,
    what: &str,
) -> crate::error::Result<*mut hostfirst_dlpack_managed_tensor_versioned> {
    let dt = dlpack::dl_dtype_or_err(dtype, what)?;
    let mut dims = dlpack::dl_shape(shape, what)?.into_boxed_slice();
    let (device_type, device_id) = dlpack::dl_device(device);
    let shape_ptr = if dims.is_empty() { std::ptr::null_mut() } else { dims.as_mut_ptr() };
    let managed = Box::into_raw(Box::new(hostfirst_dlpack_managed_tensor_versioned {
        version: hostfirst_dlpack_version { major: dlpack::VERSION.0, minor: dlpack::VERSION.1 },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(dlpack_deleter),
        flags,
        dl_tensor: hostfirst_dlpack_tensor {
            data,
            device: hostfirst_dlpack_device { device_type, device_id },
            ndim: dims.len() as i32,
            dtype: hostfirst_dlpack_dtype { code: dt.code, bits: dt.bits, lanes: dt.lanes },
            shape: shape_ptr,
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
    }));
    let id = handle::insert_new::<dlpack_export_handle>(DlpackExport {
        _keep: keep,
        _shape: dims,
        managed: managed as usize,
    });
    // SAFETY: just allocated above, not yet shared.
    unsafe { (*managed).manager_ctx = id as *mut c_void };
    Ok(managed)
}

/// Exports a view (or row slice) as a DLPack 1.1 managed tensor and writes it to `*out`.
///
/// Zero-copy: `dl_tensor.data` points into the file's read-only mapping (the same pointer as
/// `hostfirst_view_info.data`, with the same SIGBUS hazard), device kDLCPU 0, compact C order (strides NULL,
/// byte_offset 0), `flags` has `HOSTFIRST_DLPACK_FLAG_READ_ONLY`: never write through it. The data may be
/// misaligned for its dtype (see `hostfirst_view_info.alignment`). The tensor keeps the mapping alive until
/// its `deleter` is called, even after the view and file handles are freed; until then it counts in
/// `hostfirst_handle_count`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `UNSUPPORTED` for a dtype DLPack has
/// no code for (none in this version), `VALIDATION_OVERFLOW` for a dimension above INT64_MAX. On failure
/// `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_view_to_dlpack(
    view: *const hostfirst_view,
    out: *mut *mut hostfirst_dlpack_managed_tensor_versioned,
) -> Status {
    hostfirst_boundary!("hostfirst_view_to_dlpack", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let out = out_ptr(out, "out")?;
        let what = format!("{}: tensor '{}'", v.file_display(), v.name());
        let data = v.mapped().as_ptr() as *mut c_void;
        let v = TensorView::clone(&v);
        let (dtype, shape) = (v.dtype(), v.shape().to_vec());
        *out = export(Keep::View(v), data, crate::device::Device::CPU, dtype, &shape, dlpack::FLAG_READ_ONLY, &what)?;
        Ok(())
    })
}

/// Exports a buffer as a DLPack 1.1 managed tensor and writes it to `*out`.
///
/// Zero-copy and writable (`flags` 0): device kDLCUDA with its ordinal for `cuda:N`, kDLCUDAHost 0 for
/// `cuda_host`, kDLCPU 0 for `cpu`; compact C order. The tensor keeps the buffer's memory alive until its
/// `deleter` is called, even after `hostfirst_buffer_free`; until then it counts in `hostfirst_handle_count`.
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `UNSUPPORTED`, `VALIDATION_OVERFLOW` (as for views). On failure
/// `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_to_dlpack(
    buffer: *const hostfirst_buffer,
    out: *mut *mut hostfirst_dlpack_managed_tensor_versioned,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_to_dlpack", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let out = out_ptr(out, "out")?;
        let (data, device, dtype, shape, what) = {
            let g = b.lock().unwrap_or_else(|p| p.into_inner());
            (
                g.address() as usize as *mut c_void,
                g.device(),
                g.dtype(),
                g.shape().to_vec(),
                format!("buffer '{}'", g.name()),
            )
        };
        *out = export(Keep::Buffer(b), data, device, dtype, &shape, 0, &what)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::dtype::DType;
    use std::mem::{offset_of, size_of};

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
