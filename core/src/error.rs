//! Status codes and the error type shared by the safe core and the C skin.
//!
//! `Status` values cross the C ABI as `hostfirst_status` and are never renumbered: a retired value stays
//! reserved. Codes are grouped in ranges so callers can test a category ([`Status::is_format`] for the
//! file-format range; C: `hostfirst_status_is_format_error`).
//!
//! The enum below is the one definition of the statuses: cbindgen exports it as `hostfirst_status` with
//! `HOSTFIRST_STATUS_*` values, and the list of values, the names and the mapping from C integers are derived
//! from it (strum).

use std::fmt;
use strum::{FromRepr, IntoStaticStr, VariantArray};

// The one definition of the statuses: cbindgen exports it as `hostfirst_status` (`HOSTFIRST_STATUS_*`); the
// list of values, the names and the mapping from C integers are derived from it (strum).
/// The outcome of every fallible hostfirst call.
///
/// Values are stable and grouped by range: 0 success; 1-19 argument and handle misuse; 20-29 default-device
/// scopes; 30-49 backends, devices, memory and transfers; 50-59 I/O; 60-89 file format; 100+ internal.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, FromRepr, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument was out of its domain: an unknown enum integer, a bad device spec, a non-UTF-8 string.
    InvalidArgument = 2,
    /// A handle was not a live handle of the expected type (freed, stale, or of another type).
    InvalidHandle = 3,
    /// A caller-supplied buffer or array was too small; the required size was reported.
    BufferTooSmall = 4,
    /// A named thing (tensor, metadata key, device, rule target) does not exist.
    NotFound = 5,
    /// An index, row range or offset was outside its bounds.
    OutOfRange = 6,
    /// The operation was cancelled by the caller (progress callback returned non-zero, or a cancel call).
    Cancelled = 7,
    /// An asynchronous operation has not finished yet (poll again).
    NotReady = 8,
    /// A consumed object (an async operation already waited on, a builder already used) was used again.
    AlreadyUsed = 9,
    /// The operation is not supported for this dtype, device or object.
    Unsupported = 10,
    /// Every reusable resource is still held by a consumer (all batches of a gather's ring are exported or
    /// referenced); release one, or raise the bound, and retry.
    Busy = 11,
    /// Strict mode: a placement rule places no tensor (its pattern matches none, or earlier rules take every
    /// tensor it matches). Outside strict mode such rules are listed by the plan, not refused.
    UnmatchedRule = 12,

    /// A scope pop or leave did not name the innermost scope of this thread, or the thread had no scope.
    ScopeMismatch = 20,
    /// Strict mode is on and the operation would have resolved the implicit default device.
    ImplicitPlacement = 21,

    /// The backend needed for the request is not available (see the census for the reason).
    Unavailable = 30,
    /// The device ordinal or UUID does not name a present device.
    NoSuchDevice = 31,
    /// Not enough free memory on the target device; nothing was allocated (see `hostfirst_last_error_fit`).
    OutOfMemory = 32,
    /// The accelerator driver reported an error (its error name is in the message).
    DeviceError = 33,

    /// An operating-system I/O call failed (open, stat, read), or the file changed under us.
    Io = 50,
    /// The file is shorter than its header says (it may have been truncated).
    Truncated = 51,
    /// The file system has no room for what is being written (`ENOSPC`, or a quota: `EDQUOT`, `EFBIG`); a
    /// writer leaves the target as it was.
    NoSpace = 52,
    /// The operating system refused access: no permission on the file or its directory (`EACCES`, `EPERM`),
    /// or a read-only file system (`EROFS`); a writer leaves the target as it was.
    PermissionDenied = 53,

    /// The buffer is shorter than the 8-byte header-length prefix.
    HeaderTooSmall = 60,
    /// The header length exceeds the safetensors limit (100,000,000 bytes).
    HeaderTooLarge = 61,
    /// The header length points past the end of the buffer, or 8 + length overflows.
    InvalidHeaderLength = 62,
    /// The header is not valid UTF-8.
    InvalidHeaderUtf8 = 63,
    /// The header is not a valid safetensors JSON object (syntax, types, unknown dtype, bad metadata).
    InvalidHeaderJson = 64,
    /// Tensor data offsets are not contiguous from 0, overlap, or end before they begin.
    InvalidOffset = 65,
    /// The same tensor name appears twice (in a header, or in two part files of a set).
    DuplicateTensor = 66,
    /// Shape or size arithmetic overflows.
    ValidationOverflow = 67,
    /// A sub-byte dtype tensor does not end on a byte boundary.
    MisalignedSlice = 68,
    /// A tensor's byte span does not equal its shape times its dtype size.
    TensorInvalidInfo = 69,
    /// The data section is not exactly covered by the tensors (extra or missing bytes).
    IncompleteBuffer = 70,
    /// A safety cap (tensor count, rank, name length) was exceeded.
    LimitExceeded = 71,
    /// A sharded index (`*.safetensors.index.json`) is malformed or disagrees with its part files; or a
    /// Megatron `.idx` has a negative sequence length, or document indices that do not run in order from 0 to
    /// its sequence count.
    InvalidIndex = 72,
    /// The input is not a safetensors file at all: its first 8 bytes are no possible header length and no JSON
    /// object follows them, and it is no other format the open recognises by content (`.npy`, an llm.c shard,
    /// a Megatron index). The message says what it looks like (a zip archive, a Git LFS pointer, text, ...) and,
    /// for headerless data, names the raw opener.
    NotSafetensors = 73,
    /// A file's metadata (a header's `__metadata__`, an index's `metadata`, or a set's merged metadata) has
    /// more entries than the hostfirst cap (`HOSTFIRST_MAX_METADATA_ENTRIES`).
    MetadataLimitExceeded = 74,
    /// The file is of a format hostfirst knows, but not the one the call asked for (an `.npy` file given to
    /// the raw opener, a safetensors file opened as llm.c, ...): the message names what it is and the call that
    /// opens it.
    OtherFormat = 75,
    /// The file declares an element type hostfirst cannot hand out as it is: a NumPy object, string,
    /// structured, datetime or big-endian dtype, a complex128 or float128 array (the message says which, and how
    /// to convert it).
    UnsupportedDtype = 76,
    /// The fixed header of a `.npy`, llm.c or Megatron file is malformed: a bad magic for the format asked for,
    /// a `.npy` header that is not the Python dict NumPy writes (syntax, keys, a negative or non-integer
    /// dimension, brackets nested more than 4 deep, a `\N{...}` escape), an unknown dtype code, a negative count.
    InvalidHeader = 77,
    /// The file's format version is one hostfirst does not read (`.npy` other than 1.0, 2.0, 3.0; an llm.c
    /// version other than its magic's; a Megatron index version other than 1).
    UnsupportedVersion = 78,
    /// The array is stored in an order hostfirst does not hand out: a `.npy` file in Fortran (column-major)
    /// order with more than one dimension longer than 1 (re-save it C-ordered).
    UnsupportedLayout = 79,

    /// An internal invariant failed (a bug in hostfirst).
    Internal = 100,
    /// A panic was caught at the C boundary (a bug in hostfirst or a dependency); the library remains usable.
    Panic = 101,
}

/// Every status, in numeric order (used to validate integers from C and by tests).
pub const ALL_STATUSES: &[Status] = Status::VARIANTS;

impl Status {
    /// The stable upper-case name without prefix, e.g. `"OUT_OF_MEMORY"` (the C name less `HOSTFIRST_STATUS_`).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Maps an integer from C to a status; unknown values give `None`.
    pub fn from_u32(v: u32) -> Option<Status> {
        Status::from_repr(v)
    }

    /// True for the file-format range (60-89).
    pub fn is_format(self) -> bool {
        (60..90).contains(&(self as u32))
    }
}

/// The numbers behind a failed fit check: what was needed, what was free, on which device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitFailure {
    /// Bytes the operation needed.
    pub needed: u64,
    /// Bytes free on the device when checked (after the safety margin for host memory).
    pub free: u64,
    /// Total bytes of the device.
    pub total: u64,
    /// The device, as a spec string (`cuda:0`, `cpu:0`, `cuda_host`).
    pub device: String,
}

/// An error: a status plus a message naming the thing (tensor, device, file) and the numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
    fit: Option<FitFailure>,
}

impl Error {
    /// Builds an error with a status and a message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into(), fit: None }
    }

    /// Builds an out-of-memory error carrying the fit-check numbers.
    pub fn out_of_memory(message: impl Into<String>, fit: FitFailure) -> Error {
        Error { status: Status::OutOfMemory, message: message.into(), fit: Some(fit) }
    }

    /// The status code.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The fit-check numbers, for out-of-memory errors raised by a fit check.
    pub fn fit(&self) -> Option<&FitFailure> {
        self.fit.as_ref()
    }

    /// Prefixes the message with context, keeping status and fit numbers.
    pub fn context(mut self, ctx: impl fmt::Display) -> Error {
        self.message = format!("{ctx}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand: `Err(Error::new(status, format!(...)))`.
#[macro_export]
#[doc(hidden)]
macro_rules! bail {
    ($status:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::Status::$status, format!($($arg)*)))
    };
}

/// Shorthand: `Error::new(status, format!(...))`.
#[macro_export]
#[doc(hidden)]
macro_rules! err {
    ($status:ident, $($arg:tt)*) => {
        $crate::error::Error::new($crate::error::Status::$status, format!($($arg)*))
    };
}

/// Formats a byte count as GiB/MiB/KiB with two decimals (binary units), for messages.
pub fn human_bytes(n: u64) -> String {
    const K: f64 = 1024.0;
    let x = n as f64;
    if x >= K * K * K {
        format!("{:.2} GiB", x / (K * K * K))
    } else if x >= K * K {
        format!("{:.2} MiB", x / (K * K))
    } else if x >= K {
        format!("{:.2} KiB", x / K)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_unique_sorted_and_round_trip() {
        let mut prev = None;
        for s in ALL_STATUSES {
            let v = *s as u32;
            if let Some(p) = prev {
                assert!(v > p, "{s:?} out of order");
            }
            prev = Some(v);
            assert_eq!(Status::from_u32(v), Some(*s));
            assert!(!s.name().is_empty());
        }
        assert_eq!(Status::from_u32(12345), None);
        assert_eq!(Status::from_u32(13), None);
        assert_eq!(Status::Ok.name(), "OK");
        assert_eq!(Status::InvalidHeaderUtf8.name(), "INVALID_HEADER_UTF8");
        assert_eq!(Status::OutOfMemory.name(), "OUT_OF_MEMORY");
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(2048), "2.00 KiB");
        assert_eq!(human_bytes(19 * (1 << 30) + (1 << 27)), "19.12 GiB");
    }
}
