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
    PERMISSION_DENIED                        PermissionDeniedError         PermissionError
    INVALID_ARGUMENT, NULL_ARGUMENT,         InvalidArgumentError, ...     ValueError
      INVALID_HANDLE, BUFFER_TOO_SMALL,
      NO_SUCH_DEVICE, UNSUPPORTED
    every malformed-file status              FormatError subclasses        ValueError
    the others (IMPLICIT_PLACEMENT, UNAVAILABLE, DEVICE_ERROR, ...)     hostfirst.Error only

Status codes and names come from the loaded library (`hostfirst_status_name`), never from literals here.
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Dict, Optional, Type

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


class HostfirstError(Exception):
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


# One class per status, by name; `_bind` below gives each its code from the library.
class NullArgumentError(HostfirstError, ValueError): status_name = "NULL_ARGUMENT"  # noqa: E701
class InvalidArgumentError(HostfirstError, ValueError): status_name = "INVALID_ARGUMENT"  # noqa: E701
class InvalidHandleError(HostfirstError, ValueError): status_name = "INVALID_HANDLE"  # noqa: E701
class BufferTooSmallError(HostfirstError, ValueError): status_name = "BUFFER_TOO_SMALL"  # noqa: E701
class NotFoundError(HostfirstError, KeyError): status_name = "NOT_FOUND"  # noqa: E701
class OutOfRangeError(HostfirstError, IndexError): status_name = "OUT_OF_RANGE"  # noqa: E701
class CancelledError(HostfirstError): status_name = "CANCELLED"  # noqa: E701
class NotReadyError(HostfirstError): status_name = "NOT_READY"  # noqa: E701
class AlreadyUsedError(HostfirstError): status_name = "ALREADY_USED"  # noqa: E701
class UnsupportedError(HostfirstError, ValueError): status_name = "UNSUPPORTED"  # noqa: E701
class ScopeMismatchError(HostfirstError): status_name = "SCOPE_MISMATCH"  # noqa: E701
class ImplicitPlacementError(HostfirstError): status_name = "IMPLICIT_PLACEMENT"  # noqa: E701
class UnavailableError(HostfirstError): status_name = "UNAVAILABLE"  # noqa: E701
class NoSuchDeviceError(HostfirstError, ValueError): status_name = "NO_SUCH_DEVICE"  # noqa: E701
class DeviceErrorError(HostfirstError): status_name = "DEVICE_ERROR"  # noqa: E701
class IoError(HostfirstError, OSError): status_name = "IO"  # noqa: E701
class TruncatedError(HostfirstError, OSError): status_name = "TRUNCATED"  # noqa: E701
class NoSpaceError(HostfirstError, OSError): status_name = "NO_SPACE"  # noqa: E701
class PermissionDeniedError(HostfirstError, PermissionError): status_name = "PERMISSION_DENIED"  # noqa: E701
class InternalError(HostfirstError): status_name = "INTERNAL"  # noqa: E701
class PanicError(HostfirstError): status_name = "PANIC"  # noqa: E701


class OutOfMemoryError(HostfirstError, MemoryError):
    """A fit check failed before anything was allocated: `needed`, `free`, `total` bytes on `device`."""

    status_name = "OUT_OF_MEMORY"
    needed: Optional[int] = None
    free: Optional[int] = None
    total: Optional[int] = None
    device: Optional[Any] = None  # a hostfirst.Device


class UnmatchedRuleWarning(UserWarning):
    """A placement rule places no tensor of the file (its pattern matches no name, or an earlier rule takes
    everything it matches), so the tensors it was meant for go where the other rules say. The message is the
    library's, naming the rule and the tensor it was probably meant for. In strict mode the plan is refused
    instead (`UnmatchedRuleError`)."""


class MissingFileError(IoError, FileNotFoundError):
    """IO on a path that does not exist: also a FileNotFoundError (errno ENOENT, `filename`)."""

    def __init__(self, message: str, filename: str):
        super().__init__(message, STATUS["IO"])
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
        cls = named.get(name)
        if cls is None:
            base = FormatError if lib.hostfirst_status_is_format_error(code) else HostfirstError
            cls = type("".join(p.capitalize() for p in name.split("_")) + "Error", (base,),
                       {"status_name": name, "__module__": __name__})
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


__all__ = ["Error", "HostfirstError", "FormatError", "MissingFileError", "STATUS", "error_for", "error_named"] + sorted(
    {c.__name__ for c in _BY_STATUS.values()}
)
