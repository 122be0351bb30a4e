//! Element types: `hostfirst_dtype_*` (the DLPack spelling, `hostfirst_dtype_to_dlpack`, is in `dlpack.rs` with
//! the other `*_to_dlpack` exports).

use super::args::{c_dtype, c_str, out_ptr};
use crate::dtype::DType;
use crate::error::{Error, Status};
use std::ffi::c_char;

fn dtype_arg(v: c_dtype) -> Option<DType> {
    DType::from_u32(v)
}

/// Returns the static name of a dtype: its constant without the `HOSTFIRST_DTYPE_` prefix, which is also its
/// safetensors name (`"F32"`, `"BF16"`, `"F8_E4M3"`, ...); `"UNKNOWN"` for a value that is not a
/// `hostfirst_dtype`. Never NULL. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_name(dtype: c_dtype) -> *const c_char {
    hostfirst_boundary!("hostfirst_dtype_name", default = c"UNKNOWN".as_ptr(), {
        match dtype_arg(dtype) {
            Some(d) => super::args::static_cstr(d.name()),
            None => c"UNKNOWN".as_ptr(),
        }
    })
}

/// Returns the size of one element in bits (4 for F4, 6 for the F6 types, otherwise 8, 16, 32 or 64), or 0
/// for a value that is not a `HOSTFIRST_DTYPE_*` constant. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_bits(dtype: c_dtype) -> u32 {
    hostfirst_boundary!("hostfirst_dtype_bits", default = 0, { dtype_arg(dtype).map(|d| d.bits()).unwrap_or(0) })
}

/// Parses a safetensors dtype name (exact, e.g. `"BF16"`) into `*out_dtype`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for an unknown name. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_dtype_from_name(name: *const c_char, out_dtype: *mut DType) -> Status {
    hostfirst_boundary!("hostfirst_dtype_from_name", {
        let name = c_str(name, "name")?;
        let out = out_ptr(out_dtype, "out_dtype")?;
        let d = DType::from_name(name)
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("unknown dtype name '{name}'")))?;
        *out = d;
        Ok(())
    })
}
