//! Element types: `hostfirst_dtype_*` (the DLPack spelling, `hostfirst_dtype_to_dlpack`, is in `dlpack.rs` with
//! the other `*_to_dlpack` exports).

use super::{c_str, out_ptr};
use crate::dtype::DType;
use crate::error::{Error, Status};
use std::ffi::c_char;

/// Element type: boolean (1 byte). Values of `HOSTFIRST_DTYPE_*` are stable and never renumbered; 0 is no
/// dtype.
pub const HOSTFIRST_DTYPE_BOOL: u32 = 1;

/// Element type: unsigned 8-bit integer.
pub const HOSTFIRST_DTYPE_U8: u32 = 2;

/// Element type: signed 8-bit integer.
pub const HOSTFIRST_DTYPE_I8: u32 = 3;

/// Element type: signed 16-bit integer.
pub const HOSTFIRST_DTYPE_I16: u32 = 4;

/// Element type: unsigned 16-bit integer.
pub const HOSTFIRST_DTYPE_U16: u32 = 5;

/// Element type: signed 32-bit integer.
pub const HOSTFIRST_DTYPE_I32: u32 = 6;

/// Element type: unsigned 32-bit integer.
pub const HOSTFIRST_DTYPE_U32: u32 = 7;

/// Element type: signed 64-bit integer.
pub const HOSTFIRST_DTYPE_I64: u32 = 8;

/// Element type: unsigned 64-bit integer.
pub const HOSTFIRST_DTYPE_U64: u32 = 9;

/// Element type: IEEE half precision.
pub const HOSTFIRST_DTYPE_F16: u32 = 10;

/// Element type: bfloat16.
pub const HOSTFIRST_DTYPE_BF16: u32 = 11;

/// Element type: IEEE single precision.
pub const HOSTFIRST_DTYPE_F32: u32 = 12;

/// Element type: IEEE double precision.
pub const HOSTFIRST_DTYPE_F64: u32 = 13;

/// Element type: complex with two f32 parts (8 bytes).
pub const HOSTFIRST_DTYPE_C64: u32 = 14;

/// Element type: FP8 E5M2.
pub const HOSTFIRST_DTYPE_F8_E5M2: u32 = 15;

/// Element type: FP8 E4M3 (fn: no infinities).
pub const HOSTFIRST_DTYPE_F8_E4M3: u32 = 16;

/// Element type: FP8 E8M0 (MX scale).
pub const HOSTFIRST_DTYPE_F8_E8M0: u32 = 17;

/// Element type: MXFP4 E2M1, 4 bits per element (two per byte).
pub const HOSTFIRST_DTYPE_F4: u32 = 18;

/// Element type: MXFP6 E2M3, 6 bits per element.
pub const HOSTFIRST_DTYPE_F6_E2M3: u32 = 19;

/// Element type: MXFP6 E3M2, 6 bits per element.
pub const HOSTFIRST_DTYPE_F6_E3M2: u32 = 20;

/// Element type: FP8 E4M3 FNUZ.
pub const HOSTFIRST_DTYPE_F8_E4M3FNUZ: u32 = 21;

/// Element type: FP8 E5M2 FNUZ.
pub const HOSTFIRST_DTYPE_F8_E5M2FNUZ: u32 = 22;

fn dtype_arg(v: u32) -> Option<DType> {
    DType::from_u32(v)
}

/// Returns the safetensors name of a dtype (`"F32"`, `"BF16"`, `"F8_E4M3"`, ...), or NULL for a value that is
/// not a `HOSTFIRST_DTYPE_*` constant. The string is static. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_name(dtype: u32) -> *const c_char {
    hostfirst_boundary!("hostfirst_dtype_name", default = std::ptr::null(), {
        match dtype_arg(dtype) {
            Some(d) => super::static_cstr(d.name()),
            None => std::ptr::null(),
        }
    })
}

/// Returns the size of one element in bits (4 for F4, 6 for the F6 types, otherwise 8, 16, 32 or 64), or 0
/// for a value that is not a `HOSTFIRST_DTYPE_*` constant. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_bits(dtype: u32) -> u32 {
    hostfirst_boundary!("hostfirst_dtype_bits", default = 0, { dtype_arg(dtype).map(|d| d.bits()).unwrap_or(0) })
}

/// Parses a safetensors dtype name (exact, e.g. `"BF16"`) into `*out_dtype`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for an unknown name. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_from_name(name: *const c_char, out_dtype: *mut u32) -> Status {
    hostfirst_boundary!("hostfirst_dtype_from_name", {
        let name = c_str(name, "name")?;
        let out = out_ptr(out_dtype, "out_dtype")?;
        let d = DType::from_name(name)
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("unknown dtype name '{name}'")))?;
        *out = d as u32;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ALL_DTYPES;
    use crate::ffi::file::*;

    #[test]
    fn dtype_constants_match_core() {
        let consts = [
            HOSTFIRST_DTYPE_BOOL,
            HOSTFIRST_DTYPE_U8,
            HOSTFIRST_DTYPE_I8,
            HOSTFIRST_DTYPE_I16,
            HOSTFIRST_DTYPE_U16,
            HOSTFIRST_DTYPE_I32,
            HOSTFIRST_DTYPE_U32,
            HOSTFIRST_DTYPE_I64,
            HOSTFIRST_DTYPE_U64,
            HOSTFIRST_DTYPE_F16,
            HOSTFIRST_DTYPE_BF16,
            HOSTFIRST_DTYPE_F32,
            HOSTFIRST_DTYPE_F64,
            HOSTFIRST_DTYPE_C64,
            HOSTFIRST_DTYPE_F8_E5M2,
            HOSTFIRST_DTYPE_F8_E4M3,
            HOSTFIRST_DTYPE_F8_E8M0,
            HOSTFIRST_DTYPE_F4,
            HOSTFIRST_DTYPE_F6_E2M3,
            HOSTFIRST_DTYPE_F6_E3M2,
            HOSTFIRST_DTYPE_F8_E4M3FNUZ,
            HOSTFIRST_DTYPE_F8_E5M2FNUZ,
        ];
        assert_eq!(consts.len(), ALL_DTYPES.len());
        for (c, d) in consts.iter().zip(ALL_DTYPES) {
            assert_eq!(*c, *d as u32, "{d}");
        }
        assert_eq!(HOSTFIRST_MAX_TENSORS as usize, crate::file::MAX_TENSORS);
        assert_eq!(HOSTFIRST_MAX_SET_TENSORS as usize, crate::file::MAX_SET_TENSORS);
        assert_eq!(HOSTFIRST_MAX_RANK as usize, crate::file::MAX_RANK);
        assert_eq!(HOSTFIRST_MAX_NAME_LEN as usize, crate::file::MAX_NAME_LEN);
    }
}
