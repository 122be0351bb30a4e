//! Element types of safetensors tensors.
//!
//! `DType` values cross the C ABI as `uint32_t` (`HOSTFIRST_DTYPE_*`). They are explicit and never renumbered;
//! 0 is reserved as "no dtype". Every dtype the `safetensors` 0.8 crate knows has a value here.
//!
//! The enum below is the one definition: cbindgen exports it as `hostfirst_dtype` (`HOSTFIRST_DTYPE_<variant>`),
//! and the list of values, the names and the mapping from C integers are derived from it (strum).

use std::fmt;
use strum::{FromRepr, IntoStaticStr, VariantArray};

/// Element type of a tensor. Values of `HOSTFIRST_DTYPE_*` are stable and never renumbered; 0 is no dtype.
/// Functions take and return them as `uint32_t` and check values from C.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, FromRepr, IntoStaticStr, VariantArray)]
#[allow(non_camel_case_types)]
pub enum DType {
    /// Boolean, one byte per element.
    BOOL = 1,
    /// Unsigned 8-bit integer.
    U8 = 2,
    /// Signed 8-bit integer.
    I8 = 3,
    /// Signed 16-bit integer.
    I16 = 4,
    /// Unsigned 16-bit integer.
    U16 = 5,
    /// Signed 32-bit integer.
    I32 = 6,
    /// Unsigned 32-bit integer.
    U32 = 7,
    /// Signed 64-bit integer.
    I64 = 8,
    /// Unsigned 64-bit integer.
    U64 = 9,
    /// IEEE half precision.
    F16 = 10,
    /// bfloat16.
    BF16 = 11,
    /// IEEE single precision.
    F32 = 12,
    /// IEEE double precision.
    F64 = 13,
    /// Complex with two f32 parts (8 bytes).
    C64 = 14,
    /// FP8 E5M2.
    F8_E5M2 = 15,
    /// FP8 E4M3 (the "fn" variant: no infinities).
    F8_E4M3 = 16,
    /// FP8 E8M0 (MX scale).
    F8_E8M0 = 17,
    /// MXFP4 (E2M1), 4 bits per element (two per byte).
    F4 = 18,
    /// MXFP6 E2M3, 6 bits per element.
    F6_E2M3 = 19,
    /// MXFP6 E3M2, 6 bits per element.
    F6_E3M2 = 20,
    /// FP8 E4M3 FNUZ.
    F8_E4M3FNUZ = 21,
    /// FP8 E5M2 FNUZ.
    F8_E5M2FNUZ = 22,
}

/// Every dtype, in numeric order.
pub const ALL_DTYPES: &[DType] = DType::VARIANTS;

impl DType {
    /// Bits per element (4 for F4, 6 for the F6 types, otherwise a multiple of 8).
    pub fn bits(self) -> u32 {
        use DType::*;
        match self {
            F4 => 4,
            F6_E2M3 | F6_E3M2 => 6,
            BOOL | U8 | I8 | F8_E5M2 | F8_E4M3 | F8_E8M0 | F8_E4M3FNUZ | F8_E5M2FNUZ => 8,
            I16 | U16 | F16 | BF16 => 16,
            I32 | U32 | F32 => 32,
            I64 | U64 | F64 | C64 => 64,
        }
    }

    /// The safetensors name, e.g. `"BF16"`, `"F8_E4M3"` (the variant's name, and the C name less `HOSTFIRST_DTYPE_`).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Parses a safetensors dtype name (exact, case-sensitive, as in headers).
    pub fn from_name(s: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == s)
    }

    /// Validates an integer from C.
    pub fn from_u32(v: u32) -> Option<DType> {
        DType::from_repr(v)
    }

    /// The matching dtype of the `safetensors` crate.
    pub fn to_safetensors(self) -> safetensors::Dtype {
        use safetensors::Dtype as S;
        use DType::*;
        match self {
            BOOL => S::BOOL,
            U8 => S::U8,
            I8 => S::I8,
            I16 => S::I16,
            U16 => S::U16,
            I32 => S::I32,
            U32 => S::U32,
            I64 => S::I64,
            U64 => S::U64,
            F16 => S::F16,
            BF16 => S::BF16,
            F32 => S::F32,
            F64 => S::F64,
            C64 => S::C64,
            F8_E5M2 => S::F8_E5M2,
            F8_E4M3 => S::F8_E4M3,
            F8_E8M0 => S::F8_E8M0,
            F4 => S::F4,
            F6_E2M3 => S::F6_E2M3,
            F6_E3M2 => S::F6_E3M2,
            F8_E4M3FNUZ => S::F8_E4M3FNUZ,
            F8_E5M2FNUZ => S::F8_E5M2FNUZ,
        }
    }

    /// The hostfirst dtype for a `safetensors` crate dtype; `None` for a dtype added to that crate later.
    pub fn from_safetensors(d: safetensors::Dtype) -> Option<DType> {
        DType::from_name(&d.to_string())
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_unique_sorted_and_round_trip() {
        for (i, d) in ALL_DTYPES.iter().enumerate() {
            assert_eq!(*d as u32, i as u32 + 1, "{d} out of order");
            assert_eq!(DType::from_u32(*d as u32), Some(*d));
            assert_eq!(DType::from_name(d.name()), Some(*d));
            assert_eq!(DType::from_safetensors(d.to_safetensors()), Some(*d));
            assert_eq!(d.bits() as usize, d.to_safetensors().bitsize(), "{d}");
        }
        assert_eq!(DType::from_u32(0), None);
        assert_eq!(DType::from_u32(23), None);
        assert_eq!(DType::from_name("f32"), None);
        assert_eq!(ALL_DTYPES.len(), 22);
    }
}
