package hostfirst

/*
#cgo pkg-config: hostfirst
#include <hostfirst.h>
*/
import "C"

// Status is a hostfirst_status code: the outcome of a library call. Values are stable and never renumbered.
//
// A Status is also an error value, so that errors.Is finds the status of a failed call whatever wraps it:
//
//	if errors.Is(err, hostfirst.StatusNotFound) { ... }
//
// (an *Error matches the Status it carries; see Error.Is). StatusOK is never returned as an error.
type Status uint32

// Every status of hostfirst.h's enum hostfirst_status, with the header's value (tests/it/go.rs checks this list
// against the header, and TestStatusesMatchTheHeader compares each value with the C constant through cgo).
const (
	// StatusOK (OK): Success.
	StatusOK Status = 0

	// StatusNullArgument (NULL_ARGUMENT): A required pointer argument was NULL.
	StatusNullArgument Status = 1

	// StatusInvalidArgument (INVALID_ARGUMENT): An argument was out of its domain: an unknown enum integer, a bad
	// device spec, a non-UTF-8 string.
	StatusInvalidArgument Status = 2

	// StatusInvalidHandle (INVALID_HANDLE): A handle was not a live handle of the expected type (freed, stale, or of
	// another type).
	StatusInvalidHandle Status = 3

	// StatusBufferTooSmall (BUFFER_TOO_SMALL): A caller-supplied buffer or array was too small; the required size
	// was reported.
	StatusBufferTooSmall Status = 4

	// StatusNotFound (NOT_FOUND): A named thing (tensor, metadata key, device, rule target) does not exist.
	StatusNotFound Status = 5

	// StatusOutOfRange (OUT_OF_RANGE): An index, row range or offset was outside its bounds.
	StatusOutOfRange Status = 6

	// StatusCancelled (CANCELLED): The operation was cancelled by the caller (progress callback returned non-zero,
	// or a cancel call).
	StatusCancelled Status = 7

	// StatusNotReady (NOT_READY): An asynchronous operation has not finished yet (poll again).
	StatusNotReady Status = 8

	// StatusAlreadyUsed (ALREADY_USED): A consumed object (an async operation already waited on, a builder already
	// used) was used again.
	StatusAlreadyUsed Status = 9

	// StatusUnsupported (UNSUPPORTED): The operation is not supported for this dtype, device or object.
	StatusUnsupported Status = 10

	// StatusBusy (BUSY): Every reusable resource is still held by a consumer (all batches of a gather's ring are
	// exported or referenced); release one, or raise the bound, and retry.
	StatusBusy Status = 11

	// StatusUnmatchedRule (UNMATCHED_RULE): Strict mode: a placement rule places no tensor (its pattern matches
	// none, or earlier rules take every tensor it matches). Outside strict mode such rules are listed by the plan,
	// not refused.
	StatusUnmatchedRule Status = 12

	// StatusScopeMismatch (SCOPE_MISMATCH): A scope pop or leave did not name the innermost scope of this thread, or
	// the thread had no scope.
	StatusScopeMismatch Status = 20

	// StatusImplicitPlacement (IMPLICIT_PLACEMENT): Strict mode is on and the operation would have resolved the
	// implicit default device.
	StatusImplicitPlacement Status = 21

	// StatusUnavailable (UNAVAILABLE): The backend needed for the request is not available (see the census for the
	// reason).
	StatusUnavailable Status = 30

	// StatusNoSuchDevice (NO_SUCH_DEVICE): The device ordinal or UUID does not name a present device.
	StatusNoSuchDevice Status = 31

	// StatusOutOfMemory (OUT_OF_MEMORY): Not enough free memory on the target device; nothing was allocated (see
	// hostfirst_last_error_fit).
	StatusOutOfMemory Status = 32

	// StatusDeviceError (DEVICE_ERROR): The accelerator driver reported an error (its error name is in the message).
	StatusDeviceError Status = 33

	// StatusIO (IO): An operating-system I/O call failed (open, stat, read), or the file changed under us.
	StatusIO Status = 50

	// StatusTruncated (TRUNCATED): The file is shorter than its header says (it may have been truncated).
	StatusTruncated Status = 51

	// StatusNoSpace (NO_SPACE): The file system has no room for what is being written (ENOSPC, or a quota: EDQUOT,
	// EFBIG); a writer leaves the target as it was.
	StatusNoSpace Status = 52

	// StatusPermissionDenied (PERMISSION_DENIED): The operating system refused access: no permission on the file or
	// its directory (EACCES, EPERM), or a read-only file system (EROFS); a writer leaves the target as it was.
	StatusPermissionDenied Status = 53

	// StatusHeaderTooSmall (HEADER_TOO_SMALL): The buffer is shorter than the 8-byte header-length prefix.
	StatusHeaderTooSmall Status = 60

	// StatusHeaderTooLarge (HEADER_TOO_LARGE): The header length exceeds the safetensors limit (100,000,000 bytes).
	StatusHeaderTooLarge Status = 61

	// StatusInvalidHeaderLength (INVALID_HEADER_LENGTH): The header length points past the end of the buffer, or 8 +
	// length overflows.
	StatusInvalidHeaderLength Status = 62

	// StatusInvalidHeaderUTF8 (INVALID_HEADER_UTF8): The header is not valid UTF-8.
	StatusInvalidHeaderUTF8 Status = 63

	// StatusInvalidHeaderJSON (INVALID_HEADER_JSON): The header is not a valid safetensors JSON object (syntax,
	// types, unknown dtype, bad metadata).
	StatusInvalidHeaderJSON Status = 64

	// StatusInvalidOffset (INVALID_OFFSET): Tensor data offsets are not contiguous from 0, overlap, or end before
	// they begin.
	StatusInvalidOffset Status = 65

	// StatusDuplicateTensor (DUPLICATE_TENSOR): The same tensor name appears twice (in a header, or in two part
	// files of a set).
	StatusDuplicateTensor Status = 66

	// StatusValidationOverflow (VALIDATION_OVERFLOW): Shape or size arithmetic overflows.
	StatusValidationOverflow Status = 67

	// StatusMisalignedSlice (MISALIGNED_SLICE): A sub-byte dtype tensor does not end on a byte boundary.
	StatusMisalignedSlice Status = 68

	// StatusTensorInvalidInfo (TENSOR_INVALID_INFO): A tensor's byte span does not equal its shape times its dtype
	// size.
	StatusTensorInvalidInfo Status = 69

	// StatusIncompleteBuffer (INCOMPLETE_BUFFER): The data section is not exactly covered by the tensors (extra or
	// missing bytes).
	StatusIncompleteBuffer Status = 70

	// StatusLimitExceeded (LIMIT_EXCEEDED): A safety cap (tensor count, rank, name length) was exceeded.
	StatusLimitExceeded Status = 71

	// StatusInvalidIndex (INVALID_INDEX): A sharded index (*.safetensors.index.json) is malformed or disagrees with
	// its part files; or a Megatron .idx has a negative sequence length, or document indices that do not run in
	// order from 0 to its sequence count.
	StatusInvalidIndex Status = 72

	// StatusNotSafetensors (NOT_SAFETENSORS): The input is not a safetensors file at all: its first 8 bytes are no
	// possible header length and no JSON object follows them, and it is no other format the open recognises by
	// content (.npy, an llm.c shard, a Megatron index). The message says what it looks like (a zip archive, a Git
	// LFS pointer, text, ...) and, for headerless data, names the raw opener.
	StatusNotSafetensors Status = 73

	// StatusMetadataLimitExceeded (METADATA_LIMIT_EXCEEDED): A file's metadata (a header's __metadata__, an index's
	// metadata, or a set's merged metadata) has more entries than the hostfirst cap
	// (HOSTFIRST_MAX_METADATA_ENTRIES).
	StatusMetadataLimitExceeded Status = 74

	// StatusOtherFormat (OTHER_FORMAT): The file is of a format hostfirst knows, but not the one the call asked for
	// (an .npy file given to the raw opener, a safetensors file opened as llm.c, ...): the message names what it is
	// and the call that opens it.
	StatusOtherFormat Status = 75

	// StatusUnsupportedDType (UNSUPPORTED_DTYPE): The file declares an element type hostfirst cannot hand out as it
	// is: a NumPy object, string, structured, datetime or big-endian dtype, a complex128 or float128 array (the
	// message says which, and how to convert it).
	StatusUnsupportedDType Status = 76

	// StatusInvalidHeader (INVALID_HEADER): The fixed header of a .npy, llm.c or Megatron file is malformed: a bad
	// magic for the format asked for, a .npy header that is not the Python dict NumPy writes (syntax, keys, a
	// negative or non-integer dimension, brackets nested more than 4 deep, a \N{...} escape), an unknown dtype code,
	// a negative count.
	StatusInvalidHeader Status = 77

	// StatusUnsupportedVersion (UNSUPPORTED_VERSION): The file's format version is one hostfirst does not read (.npy
	// other than 1.0, 2.0, 3.0; an llm.c version other than its magic's; a Megatron index version other than 1).
	StatusUnsupportedVersion Status = 78

	// StatusUnsupportedLayout (UNSUPPORTED_LAYOUT): The array is stored in an order hostfirst does not hand out: a
	// .npy file in Fortran (column-major) order with more than one dimension longer than 1 (re-save it C-ordered).
	StatusUnsupportedLayout Status = 79

	// StatusInternal (INTERNAL): An internal invariant failed (a bug in hostfirst).
	StatusInternal Status = 100

	// StatusPanic (PANIC): A panic was caught at the C boundary (a bug in hostfirst or a dependency); the library
	// remains usable.
	StatusPanic Status = 101
)

// statusesC pairs every Status constant with the C header's constant of the same name, for the test that
// compares them (the constants above are plain numbers so that their documentation reads well).
var statusesC = []struct {
	status Status
	c      C.hostfirst_status
	name   string
}{
	{StatusOK, C.HOSTFIRST_STATUS_OK, "OK"},
	{StatusNullArgument, C.HOSTFIRST_STATUS_NULL_ARGUMENT, "NULL_ARGUMENT"},
	{StatusInvalidArgument, C.HOSTFIRST_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
	{StatusInvalidHandle, C.HOSTFIRST_STATUS_INVALID_HANDLE, "INVALID_HANDLE"},
	{StatusBufferTooSmall, C.HOSTFIRST_STATUS_BUFFER_TOO_SMALL, "BUFFER_TOO_SMALL"},
	{StatusNotFound, C.HOSTFIRST_STATUS_NOT_FOUND, "NOT_FOUND"},
	{StatusOutOfRange, C.HOSTFIRST_STATUS_OUT_OF_RANGE, "OUT_OF_RANGE"},
	{StatusCancelled, C.HOSTFIRST_STATUS_CANCELLED, "CANCELLED"},
	{StatusNotReady, C.HOSTFIRST_STATUS_NOT_READY, "NOT_READY"},
	{StatusAlreadyUsed, C.HOSTFIRST_STATUS_ALREADY_USED, "ALREADY_USED"},
	{StatusUnsupported, C.HOSTFIRST_STATUS_UNSUPPORTED, "UNSUPPORTED"},
	{StatusBusy, C.HOSTFIRST_STATUS_BUSY, "BUSY"},
	{StatusUnmatchedRule, C.HOSTFIRST_STATUS_UNMATCHED_RULE, "UNMATCHED_RULE"},
	{StatusScopeMismatch, C.HOSTFIRST_STATUS_SCOPE_MISMATCH, "SCOPE_MISMATCH"},
	{StatusImplicitPlacement, C.HOSTFIRST_STATUS_IMPLICIT_PLACEMENT, "IMPLICIT_PLACEMENT"},
	{StatusUnavailable, C.HOSTFIRST_STATUS_UNAVAILABLE, "UNAVAILABLE"},
	{StatusNoSuchDevice, C.HOSTFIRST_STATUS_NO_SUCH_DEVICE, "NO_SUCH_DEVICE"},
	{StatusOutOfMemory, C.HOSTFIRST_STATUS_OUT_OF_MEMORY, "OUT_OF_MEMORY"},
	{StatusDeviceError, C.HOSTFIRST_STATUS_DEVICE_ERROR, "DEVICE_ERROR"},
	{StatusIO, C.HOSTFIRST_STATUS_IO, "IO"},
	{StatusTruncated, C.HOSTFIRST_STATUS_TRUNCATED, "TRUNCATED"},
	{StatusNoSpace, C.HOSTFIRST_STATUS_NO_SPACE, "NO_SPACE"},
	{StatusPermissionDenied, C.HOSTFIRST_STATUS_PERMISSION_DENIED, "PERMISSION_DENIED"},
	{StatusHeaderTooSmall, C.HOSTFIRST_STATUS_HEADER_TOO_SMALL, "HEADER_TOO_SMALL"},
	{StatusHeaderTooLarge, C.HOSTFIRST_STATUS_HEADER_TOO_LARGE, "HEADER_TOO_LARGE"},
	{StatusInvalidHeaderLength, C.HOSTFIRST_STATUS_INVALID_HEADER_LENGTH, "INVALID_HEADER_LENGTH"},
	{StatusInvalidHeaderUTF8, C.HOSTFIRST_STATUS_INVALID_HEADER_UTF8, "INVALID_HEADER_UTF8"},
	{StatusInvalidHeaderJSON, C.HOSTFIRST_STATUS_INVALID_HEADER_JSON, "INVALID_HEADER_JSON"},
	{StatusInvalidOffset, C.HOSTFIRST_STATUS_INVALID_OFFSET, "INVALID_OFFSET"},
	{StatusDuplicateTensor, C.HOSTFIRST_STATUS_DUPLICATE_TENSOR, "DUPLICATE_TENSOR"},
	{StatusValidationOverflow, C.HOSTFIRST_STATUS_VALIDATION_OVERFLOW, "VALIDATION_OVERFLOW"},
	{StatusMisalignedSlice, C.HOSTFIRST_STATUS_MISALIGNED_SLICE, "MISALIGNED_SLICE"},
	{StatusTensorInvalidInfo, C.HOSTFIRST_STATUS_TENSOR_INVALID_INFO, "TENSOR_INVALID_INFO"},
	{StatusIncompleteBuffer, C.HOSTFIRST_STATUS_INCOMPLETE_BUFFER, "INCOMPLETE_BUFFER"},
	{StatusLimitExceeded, C.HOSTFIRST_STATUS_LIMIT_EXCEEDED, "LIMIT_EXCEEDED"},
	{StatusInvalidIndex, C.HOSTFIRST_STATUS_INVALID_INDEX, "INVALID_INDEX"},
	{StatusNotSafetensors, C.HOSTFIRST_STATUS_NOT_SAFETENSORS, "NOT_SAFETENSORS"},
	{StatusMetadataLimitExceeded, C.HOSTFIRST_STATUS_METADATA_LIMIT_EXCEEDED, "METADATA_LIMIT_EXCEEDED"},
	{StatusOtherFormat, C.HOSTFIRST_STATUS_OTHER_FORMAT, "OTHER_FORMAT"},
	{StatusUnsupportedDType, C.HOSTFIRST_STATUS_UNSUPPORTED_DTYPE, "UNSUPPORTED_DTYPE"},
	{StatusInvalidHeader, C.HOSTFIRST_STATUS_INVALID_HEADER, "INVALID_HEADER"},
	{StatusUnsupportedVersion, C.HOSTFIRST_STATUS_UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION"},
	{StatusUnsupportedLayout, C.HOSTFIRST_STATUS_UNSUPPORTED_LAYOUT, "UNSUPPORTED_LAYOUT"},
	{StatusInternal, C.HOSTFIRST_STATUS_INTERNAL, "INTERNAL"},
	{StatusPanic, C.HOSTFIRST_STATUS_PANIC, "PANIC"},
}

// String is the library's name for the status, such as "NOT_FOUND" ("UNKNOWN" for a value it does not define).
func (s Status) String() string { return C.GoString(C.hostfirst_status_name(s.c())) }

// Error is the status's name, as String: a Status is an error value for errors.Is (see Status).
func (s Status) Error() string { return s.String() }

func (s Status) c() C.hostfirst_status { return C.hostfirst_status(s) }

// IsFormatError reports whether s says a file was malformed or rejected (the file-format range).
func (s Status) IsFormatError() bool { return C.hostfirst_status_is_format_error(s.c()) != 0 }

// StatusCount is the number of distinct statuses the library defines.
func StatusCount() int { return int(C.hostfirst_status_count()) }
