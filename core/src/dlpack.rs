//! DLPack: how hostfirst's dtypes and devices are spelled in the DLPack exchange format (DLPack 1.1).
//!
//! Written from the DLPack specification (`dlpack.h`, DLPack 1.1). The C-layout structs live in
//! `src/ffi/dlpack.rs`; this module is the safe part: type codes, device types and the mapping of every
//! hostfirst dtype.

use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};

/// The DLPack ABI version we produce (`DLPACK_MAJOR_VERSION`, `DLPACK_MINOR_VERSION`).
pub const VERSION: (u32, u32) = (1, 1);

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write the data.
pub const FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the data is a copy the consumer owns.
pub const FLAG_IS_COPIED: u64 = 1 << 1;
/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED` (1.1): sub-byte elements each padded to a byte. Never set by
/// hostfirst: safetensors packs F4 and F6 elements.
pub const FLAG_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// `DLDeviceType` values used by hostfirst (equal to hostfirst's device kinds).
pub mod device_type {
    /// `kDLCPU`.
    pub const CPU: i32 = 1;
    /// `kDLCUDA`.
    pub const CUDA: i32 = 2;
    /// `kDLCUDAHost`.
    pub const CUDA_HOST: i32 = 3;
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

/// A DLPack `DLDataType`: (code, bits, lanes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlDType {
    /// A `DLDataTypeCode`.
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
    let t = match d.kind {
        DeviceKind::CPU => device_type::CPU,
        DeviceKind::CUDA => device_type::CUDA,
        DeviceKind::CUDA_HOST => device_type::CUDA_HOST,
    };
    // cpu and cuda_host are device 0 in DLPack; cuda keeps its ordinal.
    let id = if d.kind == DeviceKind::CUDA { d.ordinal as i32 } else { 0 };
    (t, id)
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
