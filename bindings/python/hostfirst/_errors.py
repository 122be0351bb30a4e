"""One exception class per hostfirst status, named after the library's own status names.

Every class derives from `hostfirst.Error` (alias `HostfirstError`) and, where a Python user would catch a
builtin, from that builtin too:

    status                                   class                         also a
    NOT_FOUND (a tensor, a key)              NotFoundError                 KeyError
    OUT_OF_RANGE                             OutOfRangeError               IndexError
    OUT_OF_MEMORY (a fit check failed)       OutOfMemoryError              MemoryError
    IO, TRUNCATED, NO_SPACE                  IoError, TruncatedError,      OSError
                                             NoSpaceError
      IO on a path that does not exist       MissingFileError (an IoError) FileNotFoundError
      NOT_FOUND for a remote object (404)    MissingFileError              FileNotFoundError
    PERMISSION_DENIED                        PermissionDeniedError         PermissionError
    INVALID_ARGUMENT, NULL_ARGUMENT,         InvalidArgumentError, ...     ValueError
      INVALID_HANDLE, BUFFER_TOO_SMALL,
      NO_SUCH_DEVICE, UNSUPPORTED
    every malformed-file status              FormatError subclasses        ValueError
    UNAVAILABLE (no driver, no JAX device)   UnavailableError              RuntimeError
    the others (IMPLICIT_PLACEMENT, DEVICE_ERROR, BUSY, ...)               hostfirst.Error only

Status codes and names come from the loaded library (`hostfirst_status_name`), never from literals here.
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Dict, Optional, Type, cast

from ._lib import lib


def _status_table() -> Dict[str, int]:
    """name -> code of every status the library defines (codes are below 256; the library says how many)."""
    unknown = lib.hostfirst_status_name(0xFFFFFFFF)
    names = {}
    for code in range(256):
        name = lib.hostfirst_status_name(code)
        if name != unknown:
            names[name.decode()] = code
    if len(names) != lib.hostfirst_status_count():
        raise ImportError(f"libhostfirst defines {lib.hostfirst_status_count()} statuses, {len(names)} found")
    return names


STATUS: Dict[str, int] = _status_table()  # e.g. STATUS["OUT_OF_MEMORY"]
STATUS_NAMES: Dict[int, str] = {code: name for name, code in STATUS.items()}


class _Documented(type):
    """The metaclass of hostfirst's exceptions: `dir(cls)` lists what hostfirst's classes define (status,
    status_name, message, ...) and not the dozens of methods every exception inherits from BaseException, so
    `help(hostfirst)` documents each class in a few lines. Instances, `isinstance`, pickling and `except`
    clauses are untouched (only the class's own `dir` is narrower)."""

    def __dir__(cls) -> "list[str]":
        own: "set[str]" = set()
        for c in cls.__mro__:
            if c.__module__.startswith("hostfirst"):
                own.update(n for n in c.__dict__ if c is cls or not n.startswith("__"))
        return sorted(own - {"__annotations__", "__weakref__", "__dict__", "__module__", "__doc__"})


class HostfirstError(Exception, metaclass=_Documented):
    """A hostfirst call failed. `status` is the numeric code, `status_name` its name, `message` the detail."""

    status_name = "UNKNOWN"
    status: Optional[int] = None

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status, self.status_name = status, STATUS_NAMES.get(status, "UNKNOWN")

    def __str__(self) -> str:
        return f"{self.status_name}: {self.message}"


Error = HostfirstError


class FormatError(HostfirstError, ValueError):
    """Base class of every malformed-file status (`hostfirst_status_is_format_error`)."""


# One class per status the library defines, by name (`_bind` below gives each its code from the library; a status
# a newer library adds gets a class made at import). Declared here, not made at import, so that type checkers see
# every name `hostfirst.__all__` lists (tests/test_api.py checks that every status of the library has its class).
class NullArgumentError(HostfirstError, ValueError):
    """NULL_ARGUMENT: a required argument was missing (None where the library needs a value)."""
    status_name = "NULL_ARGUMENT"


class InvalidArgumentError(HostfirstError, ValueError):
    """INVALID_ARGUMENT: an argument has a value the call refuses (the message names it)."""
    status_name = "INVALID_ARGUMENT"


class InvalidHandleError(HostfirstError, ValueError):
    """INVALID_HANDLE: the object was closed or freed (a closed file, a freed buffer)."""
    status_name = "INVALID_HANDLE"


class BufferTooSmallError(HostfirstError, ValueError):
    """BUFFER_TOO_SMALL: a destination holds fewer bytes than the data."""
    status_name = "BUFFER_TOO_SMALL"


class NotFoundError(HostfirstError, KeyError):
    """NOT_FOUND: no tensor (or key) of that name; the message names close matches."""
    status_name = "NOT_FOUND"


class OutOfRangeError(HostfirstError, IndexError):
    """OUT_OF_RANGE: an index, offset or window past the end of a tensor."""
    status_name = "OUT_OF_RANGE"


class CancelledError(HostfirstError):
    """CANCELLED: the operation was cancelled (a progress callback, a closed stream)."""
    status_name = "CANCELLED"


class NotReadyError(HostfirstError):
    """NOT_READY: an asynchronous operation has not finished yet."""
    status_name = "NOT_READY"


class AlreadyUsedError(HostfirstError):
    """ALREADY_USED: a one-shot object (an operation's result) was already taken."""
    status_name = "ALREADY_USED"


class UnsupportedError(HostfirstError, ValueError):
    """UNSUPPORTED: the operation does not apply to this device, dtype or kind of object."""
    status_name = "UNSUPPORTED"


class BusyError(HostfirstError):
    """BUSY: every batch of a Gather's ring is held; drop a batch, or make the Gather with a larger ring_bound=."""
    status_name = "BUSY"


class UnmatchedRuleError(HostfirstError):
    """UNMATCHED_RULE: in strict mode, a placement rule that places no tensor."""
    status_name = "UNMATCHED_RULE"


class ScopeMismatchError(HostfirstError):
    """SCOPE_MISMATCH: a default-device scope was left out of order or on another thread."""
    status_name = "SCOPE_MISMATCH"


class ImplicitPlacementError(HostfirstError):
    """IMPLICIT_PLACEMENT: strict mode refused "default" as a placement target."""
    status_name = "IMPLICIT_PLACEMENT"


class UnavailableError(HostfirstError, RuntimeError):
    """UNAVAILABLE: a backend or device is not available here (no driver, no JAX device). Also a RuntimeError,
    which JAX raises for a backend it does not have (`jax.devices("gpu")` without a GPU)."""
    status_name = "UNAVAILABLE"


class NoSuchDeviceError(HostfirstError, ValueError):
    """NO_SUCH_DEVICE: a device ordinal past the devices present."""
    status_name = "NO_SUCH_DEVICE"


class DeviceErrorError(HostfirstError):
    """DEVICE_ERROR: the device driver reported an error (the message has its code and name)."""
    status_name = "DEVICE_ERROR"


class IoError(HostfirstError, OSError):
    """IO: reading a file failed (the message names the file and the system's error)."""
    status_name = "IO"


class TruncatedError(HostfirstError, OSError):
    """TRUNCATED: the file is shorter than its header says (it was truncated after it was opened)."""
    status_name = "TRUNCATED"


class HeaderTooSmallError(FormatError):
    """HEADER_TOO_SMALL: the file is too short to hold a safetensors header."""
    status_name = "HEADER_TOO_SMALL"


class HeaderTooLargeError(FormatError):
    """HEADER_TOO_LARGE: the header length is over the limit."""
    status_name = "HEADER_TOO_LARGE"


class InvalidHeaderLengthError(FormatError):
    """INVALID_HEADER_LENGTH: the header length runs past the end of the file."""
    status_name = "INVALID_HEADER_LENGTH"


class InvalidHeaderUtf8Error(FormatError):
    """INVALID_HEADER_UTF8: the header is not UTF-8."""
    status_name = "INVALID_HEADER_UTF8"


class InvalidHeaderJsonError(FormatError):
    """INVALID_HEADER_JSON: the header is not the JSON safetensors describes (the message says where)."""
    status_name = "INVALID_HEADER_JSON"


class InvalidOffsetError(FormatError):
    """INVALID_OFFSET: a tensor's data offsets are out of order, overlap or leave a gap."""
    status_name = "INVALID_OFFSET"


class DuplicateTensorError(FormatError):
    """DUPLICATE_TENSOR: a tensor name appears twice."""
    status_name = "DUPLICATE_TENSOR"


class ValidationOverflowError(FormatError):
    """VALIDATION_OVERFLOW: a tensor's size overflows 64 bits."""
    status_name = "VALIDATION_OVERFLOW"


class MisalignedSliceError(FormatError):
    """MISALIGNED_SLICE: a slice of a sub-byte dtype (F4, F6) would start or end inside a byte."""
    status_name = "MISALIGNED_SLICE"


class TensorInvalidInfoError(FormatError):
    """TENSOR_INVALID_INFO: a tensor's byte size does not match its dtype and shape."""
    status_name = "TENSOR_INVALID_INFO"


class IncompleteBufferError(FormatError):
    """INCOMPLETE_BUFFER: the data section's size does not match the tensors'."""
    status_name = "INCOMPLETE_BUFFER"


class LimitExceededError(FormatError):
    """LIMIT_EXCEEDED: more tensors, dimensions or name bytes than hostfirst's caps."""
    status_name = "LIMIT_EXCEEDED"


class InvalidIndexError(FormatError):
    """INVALID_INDEX: a sharded set's index does not match its part files."""
    status_name = "INVALID_INDEX"


class NotSafetensorsError(FormatError):
    """NOT_SAFETENSORS: not a safetensors file at all (the message says what it looks like)."""
    status_name = "NOT_SAFETENSORS"


class MetadataLimitExceededError(FormatError):
    """METADATA_LIMIT_EXCEEDED: more __metadata__ entries than hostfirst's cap."""
    status_name = "METADATA_LIMIT_EXCEEDED"


class OtherFormatError(FormatError):
    """OTHER_FORMAT: a file of another format hostfirst knows, opened as this one (the message names the format
    and the call that opens it)."""
    status_name = "OTHER_FORMAT"


class UnsupportedDtypeError(FormatError):
    """UNSUPPORTED_DTYPE: a token file's element type hostfirst cannot hold (object, big-endian, a string dtype)."""
    status_name = "UNSUPPORTED_DTYPE"


class InvalidHeaderError(FormatError):
    """INVALID_HEADER: a token file's header is malformed (a bad magic, field or dtype code)."""
    status_name = "INVALID_HEADER"


class UnsupportedVersionError(FormatError):
    """UNSUPPORTED_VERSION: a token file's format version hostfirst does not read."""
    status_name = "UNSUPPORTED_VERSION"


class UnsupportedLayoutError(FormatError):
    """UNSUPPORTED_LAYOUT: a layout hostfirst refuses (a Fortran-order array of more than one long dimension)."""
    status_name = "UNSUPPORTED_LAYOUT"


class NoSpaceError(HostfirstError, OSError):
    """NO_SPACE: the file system has no room for a file being written (the message has the bytes needed and
    free); the target is left as it was."""
    status_name = "NO_SPACE"


class PermissionDeniedError(HostfirstError, PermissionError):
    """PERMISSION_DENIED: the file or its folder may not be written (or the file system is read-only); the
    target is left as it was."""
    status_name = "PERMISSION_DENIED"


class InternalError(HostfirstError):
    """INTERNAL: a bug in hostfirst (please report it with the message)."""
    status_name = "INTERNAL"


class PanicError(HostfirstError):
    """PANIC: hostfirst caught a panic at its boundary (a bug; the process goes on)."""
    status_name = "PANIC"


class OutOfMemoryError(HostfirstError, MemoryError):
    """A fit check failed before anything was allocated: `needed`, `free`, `total` bytes on `device`."""

    status_name = "OUT_OF_MEMORY"
    needed: Optional[int] = None
    free: Optional[int] = None
    total: Optional[int] = None
    device: Optional[Any] = None  # a hostfirst.Device


class UnmatchedRuleWarning(UserWarning, metaclass=_Documented):
    """A placement rule places no tensor of the file (its pattern matches no name, or an earlier rule takes
    everything it matches), so the tensors it was meant for go where the other rules say. The message is the
    library's, naming the rule and the tensor it was probably meant for. In strict mode the plan is refused
    instead (`UnmatchedRuleError`)."""


class NativeExtensionWarning(RuntimeWarning, metaclass=_Documented):
    """The package's native extension (`hostfirst._native`, shipped in the wheel) is there but could not be
    loaded, so the hot paths (`safe_open(...).get_tensor`, `keys()`, names) run through ctypes: the same results,
    slower per call. The message says why. `HOSTFIRST_PYTHON_NATIVE=0` in the environment chooses the ctypes path
    on purpose, without this warning."""


class MissingFileError(IoError, FileNotFoundError):
    """IO on a path that does not exist, or NOT_FOUND for a remote object (a 404 for an s3://, gs://, az:// or
    http(s):// URL; `status` says which): also a FileNotFoundError (errno ENOENT, `filename`)."""

    def __init__(self, message: str, filename: str, status: Optional[int] = None):
        super().__init__(message, STATUS["IO"] if status is None else status)
        self.errno, self.strerror, self.filename = _errno.ENOENT, "No such file or directory", filename


_BY_STATUS: Dict[int, Type[HostfirstError]] = {}


def _bind() -> None:
    """Gives every class its code; statuses without a class of their own get one made here (format errors
    under FormatError), so a newer library's statuses still raise a class of their own."""
    named = {c.status_name: c for c in list(globals().values())
             if isinstance(c, type) and issubclass(c, HostfirstError) and c.__dict__.get("status_name")}
    for name, code in STATUS.items():
        if code == 0:
            continue
        cls: Optional[Type[HostfirstError]] = named.get(name)
        if cls is None:
            base = FormatError if lib.hostfirst_status_is_format_error(code) else HostfirstError
            cls = cast(Type[HostfirstError], _Documented(
                "".join(p.capitalize() for p in name.split("_")) + "Error", (base,),
                {"status_name": name, "__module__": __name__}))
            globals()[cls.__name__] = cls
        cls.status = code
        _BY_STATUS[code] = cls


_bind()


def error_for(status: int, message: str) -> HostfirstError:
    """The exception for a status code, carrying `message`."""
    return _BY_STATUS.get(status, HostfirstError)(message, status)


def error_named(name: str, message: str) -> HostfirstError:
    """The exception for a status name (e.g. "NOT_FOUND"), for errors raised on the Python side."""
    return error_for(STATUS[name], message)


__all__ = ["Error", "HostfirstError", "FormatError", "MissingFileError", "NativeExtensionWarning", "STATUS", "error_for", "error_named"] + sorted(
    {c.__name__ for c in _BY_STATUS.values()}
)
