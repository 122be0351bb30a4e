//! DLPack: how hostfirst's dtypes and devices are spelled in the DLPack exchange format (DLPack 1.1), the
//! C-layout structs of an exported tensor, and who owns an export until its consumer releases it.
//!
//! Written from the DLPack specification (`dlpack.h`, DLPack 1.1). The structs below are layout-identical to
//! `dlpack.h`'s types (a program that includes `dlpack.h` may cast between them); the C API exports them under
//! the names `hostfirst_dlpack_*` (cbindgen.toml renames them). What an export shares, maps or copies is
//! decided by [`crate::place::export`]; [`export_view`], [`export_buffer`] and [`release`] make and release
//! the managed structs.

use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use std::ffi::c_void;
use strum::FromRepr;

pub(crate) mod exports;
pub use exports::{export_buffer, export_view, live_exports, release, Deleters, Published, Request};

/// The DLPack ABI version we produce (`DLPACK_MAJOR_VERSION`, `DLPACK_MINOR_VERSION`).
pub const VERSION: (u32, u32) = (1, 1);

/// A bit of `hostfirst_dlpack_managed_tensor_versioned.flags` (dlpack.h's `DLPACK_FLAG_BITMASK_*`). The field
/// itself is a `hostfirst_dlpack_flags` (a `uint64_t`), the OR of these values.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DlpackFlag {
    /// `DLPACK_FLAG_BITMASK_READ_ONLY`: the data must not be written (set for views of mapped files).
    ReadOnly = 1 << 0,
    /// `DLPACK_FLAG_BITMASK_IS_COPIED`: the data is a copy made for this export, owned by the consumer.
    IsCopied = 1 << 1,
    /// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED` (1.1): sub-byte elements each padded to a byte. Never set by
    /// hostfirst: F4 and F6 data is packed as in the file.
    IsSubbyteTypePadded = 1 << 2,
}

/// The flags of a versioned export: an OR of `hostfirst_dlpack_flag` values (`HOSTFIRST_DLPACK_FLAG_*`).
pub type DlpackFlags = u64;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub const FLAG_READ_ONLY: u64 = DlpackFlag::ReadOnly as u64;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`.
pub const FLAG_IS_COPIED: u64 = DlpackFlag::IsCopied as u64;
/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`.
pub const FLAG_IS_SUBBYTE_TYPE_PADDED: u64 = DlpackFlag::IsSubbyteTypePadded as u64;

/// dlpack.h's `DLDeviceType`, the values hostfirst produces and accepts (equal to hostfirst's device kinds).
/// cbindgen:prefix-with-name=false
/// cbindgen:rename-all=prefix:HOSTFIRST_DLPACK_DEVICE_
#[repr(i32)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromRepr)]
pub enum DlpackDeviceType {
    /// `kDLCPU`.
    CPU = 1,
    /// `kDLCUDA`.
    CUDA = 2,
    /// `kDLCUDAHost`.
    CUDA_HOST = 3,
}

/// `DLDeviceType` values used by hostfirst (equal to hostfirst's device kinds).
pub mod device_type {
    /// `kDLCPU`.
    pub const CPU: i32 = super::DlpackDeviceType::CPU as i32;
    /// `kDLCUDA`.
    pub const CUDA: i32 = super::DlpackDeviceType::CUDA as i32;
    /// `kDLCUDAHost`.
    pub const CUDA_HOST: i32 = super::DlpackDeviceType::CUDA_HOST as i32;
}

/// Layout-identical to dlpack.h's `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlpackVersion {
    /// `major`.
    pub major: u32,
    /// `minor`.
    pub minor: u32,
}

/// A `DLDeviceType` as a plain integer: the C API prints it as `hostfirst_dlpack_device_type` (cbindgen.toml
/// `[export] exclude` + `rename`). A struct C fills in (a consumer's `dl_device`) must not hold a Rust enum,
/// since an unknown value would be undefined behaviour; [`device_from_dl`] checks it.
#[allow(non_camel_case_types)]
pub type c_dlpack_device_type = i32;

/// Layout-identical to dlpack.h's `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlpackDevice {
    /// Where the data lives: a `hostfirst_dlpack_device_type` (kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3); checked when
    /// it comes from C.
    pub device_type: c_dlpack_device_type,
    /// The device ordinal (0 for cpu and cuda_host).
    pub device_id: i32,
}

/// Layout-identical to dlpack.h's `DLTensor`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DlpackTensor {
    /// The data: a host pointer (cpu, cuda_host) or a CUDA device address.
    pub data: *mut c_void,
    /// Where the data lives.
    pub device: DlpackDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DlDType,
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
/// Made by `hostfirst_view_to_dlpack` and `hostfirst_buffer_to_dlpack` when the consumer takes DLPack 1.x
/// (`opts->max_version.major >= 1`, the default); the consumer calls `deleter(self)` exactly once when done.
/// Until then it keeps the file mapping (or the buffer's memory) alive on its own, whatever happens to the
/// handle it was made from.
#[repr(C)]
#[derive(Debug)]
pub struct ManagedTensorVersioned {
    /// {HOSTFIRST_DLPACK_MAJOR_VERSION, HOSTFIRST_DLPACK_MINOR_VERSION}.
    pub version: DlpackVersion,
    /// Owned by hostfirst (identifies the export); counted by `hostfirst_handle_count` until the deleter runs.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and frees this struct: call it exactly once, then never touch the pointer again.
    /// A NULL argument, or a struct hostfirst did not make, is ignored. A second call with the same pointer is
    /// ignored too (the struct's memory is never returned to the allocator and is not reused for a new export
    /// until 1024 later exports have been deleted); after that the pointer may name a newer export, which the
    /// second call would release, so do not rely on it.
    pub deleter: Option<extern "C" fn(*mut ManagedTensorVersioned)>,
    /// READ_ONLY for a view's mapping, IS_COPIED for a copy made for the export (`hostfirst_dlpack_flag`).
    pub flags: DlpackFlags,
    /// The tensor.
    pub dl_tensor: DlpackTensor,
}

/// Layout-identical to dlpack.h's `DLManagedTensor`: the unversioned ("legacy") form, which numpy 1.x,
/// JAX and older consumers take (the Python capsule named "dltensor").
///
/// Made by `hostfirst_view_to_dlpack` and `hostfirst_buffer_to_dlpack` for a consumer that takes DLPack 0.x
/// only (`opts->max_version.major == 0`). It has no flags, so a consumer cannot be told that memory is
/// read-only: a view never goes out this way as its file's read-only mapping (see `hostfirst_view_to_dlpack`).
/// Lifetime and deleter as for `hostfirst_dlpack_managed_tensor_versioned`.
#[repr(C)]
#[derive(Debug)]
pub struct ManagedTensor {
    /// The tensor.
    pub dl_tensor: DlpackTensor,
    /// Owned by hostfirst (identifies the export); counted by `hostfirst_handle_count` until the deleter runs.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and frees this struct: call it exactly once, then never touch the pointer again.
    /// A NULL argument, or a struct hostfirst did not make, is ignored. A second call with the same pointer is
    /// ignored too (the struct's memory is never returned to the allocator and is not reused for a new export
    /// until 1024 later exports have been deleted); after that the pointer may name a newer export, which the
    /// second call would release, so do not rely on it.
    pub deleter: Option<extern "C" fn(*mut ManagedTensor)>,
}

/// The DLPack device of a consumer's request (`dl_device`): kDLCPU 0, kDLCUDA N (a present device) or
/// kDLCUDAHost 0; anything else is `UNSUPPORTED`.
pub fn device_from_dl(device_type: i32, device_id: i32) -> Result<Device> {
    match (DlpackDeviceType::from_repr(device_type), device_id) {
        (Some(DlpackDeviceType::CPU), 0) => Ok(Device::CPU),
        (Some(DlpackDeviceType::CUDA_HOST), 0) => Ok(Device::CUDA_HOST),
        (Some(DlpackDeviceType::CUDA), n) if n >= 0 => Device::cuda(n as u32).validate(),
        _ => Err(Error::new(
            Status::Unsupported,
            format!(
                "DLPack device ({device_type}, {device_id}) is not one hostfirst places tensors on (kDLCPU 0, \
                 kDLCUDA N, kDLCUDAHost 0)"
            ),
        )),
    }
}

/// `DLDataTypeCode` values (DLPack 1.1).
pub mod code {
    /// `kDLInt`.
    pub const INT: u8 = 0;
    /// `kDLUInt`.
    pub const UINT: u8 = 1;
    /// `kDLFloat`.
    pub const FLOAT: u8 = 2;
    /// `kDLOpaqueHandle`.
    pub const OPAQUE_HANDLE: u8 = 3;
    /// `kDLBfloat`.
    pub const BFLOAT: u8 = 4;
    /// `kDLComplex`.
    pub const COMPLEX: u8 = 5;
    /// `kDLBool`.
    pub const BOOL: u8 = 6;
    /// `kDLFloat8_e3m4`.
    pub const FLOAT8_E3M4: u8 = 7;
    /// `kDLFloat8_e4m3`.
    pub const FLOAT8_E4M3: u8 = 8;
    /// `kDLFloat8_e4m3b11fnuz`.
    pub const FLOAT8_E4M3B11FNUZ: u8 = 9;
    /// `kDLFloat8_e4m3fn`.
    pub const FLOAT8_E4M3FN: u8 = 10;
    /// `kDLFloat8_e4m3fnuz`.
    pub const FLOAT8_E4M3FNUZ: u8 = 11;
    /// `kDLFloat8_e5m2`.
    pub const FLOAT8_E5M2: u8 = 12;
    /// `kDLFloat8_e5m2fnuz`.
    pub const FLOAT8_E5M2FNUZ: u8 = 13;
    /// `kDLFloat8_e8m0fnu`.
    pub const FLOAT8_E8M0FNU: u8 = 14;
    /// `kDLFloat6_e2m3fn`.
    pub const FLOAT6_E2M3FN: u8 = 15;
    /// `kDLFloat6_e3m2fn`.
    pub const FLOAT6_E3M2FN: u8 = 16;
    /// `kDLFloat4_e2m1fn`.
    pub const FLOAT4_E2M1FN: u8 = 17;
}

/// Layout-identical to dlpack.h's `DLDataType`: (code, bits, lanes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlDType {
    /// A `DLDataTypeCode` (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6,
    /// kDLFloat8_e4m3fn 10, kDLFloat8_e4m3fnuz 11, kDLFloat8_e5m2 12, kDLFloat8_e5m2fnuz 13,
    /// kDLFloat8_e8m0fnu 14, kDLFloat6_e2m3fn 15, kDLFloat6_e3m2fn 16, kDLFloat4_e2m1fn 17).
    pub code: u8,
    /// Bits per element (per lane).
    pub bits: u8,
    /// Vector lanes; always 1 here.
    pub lanes: u16,
}

/// The DLPack spelling of a dtype, or `None` when DLPack has no code for it.
///
/// Every dtype of safetensors 0.8 has one in DLPack 1.1: safetensors' `F8_E4M3` is the "fn" variant (no
/// infinities), `F8_E8M0` is `e8m0fnu`, `F4` is `e2m1fn`, the F6 types are the "fn" ones; sub-byte types are
/// packed (bits 4 / 6, the padded flag unset); `C64` is a complex of two f32 (bits 64).
pub fn dl_dtype(d: DType) -> Option<DlDType> {
    use DType::*;
    let code = match d {
        BOOL => code::BOOL,
        U8 | U16 | U32 | U64 => code::UINT,
        I8 | I16 | I32 | I64 => code::INT,
        F16 | F32 | F64 => code::FLOAT,
        BF16 => code::BFLOAT,
        C64 => code::COMPLEX,
        F8_E5M2 => code::FLOAT8_E5M2,
        F8_E4M3 => code::FLOAT8_E4M3FN,
        F8_E8M0 => code::FLOAT8_E8M0FNU,
        F4 => code::FLOAT4_E2M1FN,
        F6_E2M3 => code::FLOAT6_E2M3FN,
        F6_E3M2 => code::FLOAT6_E3M2FN,
        F8_E4M3FNUZ => code::FLOAT8_E4M3FNUZ,
        F8_E5M2FNUZ => code::FLOAT8_E5M2FNUZ,
    };
    Some(DlDType { code, bits: u8::try_from(d.bits()).ok()?, lanes: 1 })
}

/// [`dl_dtype`], with `UNSUPPORTED` naming the dtype when DLPack cannot express it.
pub fn dl_dtype_or_err(d: DType, what: &str) -> Result<DlDType> {
    dl_dtype(d).ok_or_else(|| {
        Error::new(Status::Unsupported, format!("{what}: dtype {d} has no DLPack type code (DLPack 1.1)"))
    })
}

/// The `DLDevice` (device_type, device_id) of a hostfirst device.
pub fn dl_device(d: Device) -> (i32, i32) {
    let dev = dl_device_of(d);
    (dev.device_type, dev.device_id)
}

/// The `DLDevice` of a hostfirst device.
pub fn dl_device_of(d: Device) -> DlpackDevice {
    let device_type = match d.kind {
        DeviceKind::CPU => DlpackDeviceType::CPU,
        DeviceKind::CUDA => DlpackDeviceType::CUDA,
        DeviceKind::CUDA_HOST => DlpackDeviceType::CUDA_HOST,
    };
    // cpu and cuda_host are device 0 in DLPack; cuda keeps its ordinal.
    let device_id = if d.kind == DeviceKind::CUDA { d.ordinal as i32 } else { 0 };
    DlpackDevice { device_type: device_type as i32, device_id }
}

/// A shape as DLPack's `int64_t` dimensions; `VALIDATION_OVERFLOW` for a dimension above `i64::MAX`.
pub fn dl_shape(shape: &[u64], what: &str) -> Result<Vec<i64>> {
    shape
        .iter()
        .map(|&d| {
            i64::try_from(d).map_err(|_| {
                Error::new(Status::ValidationOverflow, format!("{what}: dimension {d} does not fit DLPack's int64_t"))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ALL_DTYPES;

    #[test]
    fn every_dtype_has_its_spec_code() {
        let expect: &[(DType, u8, u8)] = &[
            (DType::BOOL, 6, 8),
            (DType::U8, 1, 8),
            (DType::I8, 0, 8),
            (DType::I16, 0, 16),
            (DType::U16, 1, 16),
            (DType::I32, 0, 32),
            (DType::U32, 1, 32),
            (DType::I64, 0, 64),
            (DType::U64, 1, 64),
            (DType::F16, 2, 16),
            (DType::BF16, 4, 16),
            (DType::F32, 2, 32),
            (DType::F64, 2, 64),
            (DType::C64, 5, 64),
            (DType::F8_E5M2, 12, 8),
            (DType::F8_E4M3, 10, 8),
            (DType::F8_E8M0, 14, 8),
            (DType::F4, 17, 4),
            (DType::F6_E2M3, 15, 6),
            (DType::F6_E3M2, 16, 6),
            (DType::F8_E4M3FNUZ, 11, 8),
            (DType::F8_E5M2FNUZ, 13, 8),
        ];
        assert_eq!(expect.len(), ALL_DTYPES.len());
        for &(d, c, b) in expect {
            assert_eq!(dl_dtype(d), Some(DlDType { code: c, bits: b, lanes: 1 }), "{d}");
        }
    }

    #[test]
    fn devices_and_shapes() {
        assert_eq!(dl_device(Device::CPU), (1, 0));
        assert_eq!(dl_device(Device::CUDA_HOST), (3, 0));
        assert_eq!(dl_device(Device::cuda(2)), (2, 2));
        assert_eq!(dl_shape(&[3, 4], "t").unwrap(), vec![3, 4]);
        assert_eq!(dl_shape(&[u64::MAX], "t").unwrap_err().status(), Status::ValidationOverflow);
    }
}
