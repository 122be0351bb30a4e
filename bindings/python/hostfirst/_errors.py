"""One exception class per hostfirst status, each carrying the library's message."""

# Status values from include/hostfirst.h (hostfirst_status). tests/test_errors.py checks this table against
# hostfirst_status_name() of the loaded library.
STATUS = {
    1: "NULL_ARGUMENT", 2: "INVALID_ARGUMENT", 3: "INVALID_HANDLE", 4: "BUFFER_TOO_SMALL", 5: "NOT_FOUND",
    6: "OUT_OF_RANGE", 7: "CANCELLED", 8: "NOT_READY", 9: "ALREADY_USED", 10: "UNSUPPORTED", 11: "BUSY",
    12: "UNMATCHED_RULE",
    20: "SCOPE_MISMATCH", 21: "IMPLICIT_PLACEMENT",
    30: "UNAVAILABLE", 31: "NO_SUCH_DEVICE", 32: "OUT_OF_MEMORY", 33: "DEVICE_ERROR",
    50: "IO", 51: "TRUNCATED",
    60: "HEADER_TOO_SMALL", 61: "HEADER_TOO_LARGE", 62: "INVALID_HEADER_LENGTH", 63: "INVALID_HEADER_UTF8",
    64: "INVALID_HEADER_JSON", 65: "INVALID_OFFSET", 66: "DUPLICATE_TENSOR", 67: "VALIDATION_OVERFLOW",
    68: "MISALIGNED_SLICE", 69: "TENSOR_INVALID_INFO", 70: "INCOMPLETE_BUFFER", 71: "LIMIT_EXCEEDED",
    72: "INVALID_INDEX", 73: "NOT_SAFETENSORS", 74: "METADATA_LIMIT_EXCEEDED",
    100: "INTERNAL", 101: "PANIC",
}


class HostfirstError(Exception):
    """A hostfirst call failed. `status` is the numeric code, `status_name` its name, `message` the detail."""

    status = None
    status_name = "UNKNOWN"

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
            self.status_name = STATUS.get(status, "UNKNOWN")

    def __str__(self):
        return f"{self.status_name}: {self.message}"


class FormatError(HostfirstError):
    """Base class of every malformed-file status (60-89)."""


def _class_name(name):
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


_BY_STATUS = {}
for _code, _name in STATUS.items():
    _base = FormatError if 60 <= _code < 90 else HostfirstError
    if _name == "OUT_OF_RANGE":
        _bases = (_base, IndexError)
    elif _name in ("NOT_FOUND",):
        _bases = (_base, KeyError)
    elif _name in ("OUT_OF_MEMORY",):
        _bases = (_base, MemoryError)
    elif _name in ("IO", "TRUNCATED"):
        _bases = (_base, OSError)
    elif _name in ("INVALID_ARGUMENT", "NULL_ARGUMENT"):
        _bases = (_base, ValueError)
    else:
        _bases = (_base,)
    _cls = type(_class_name(_name), _bases, {"status": _code, "status_name": _name, "__module__": __name__})
    _BY_STATUS[_code] = _cls
    globals()[_cls.__name__] = _cls


class OutOfMemoryError(_BY_STATUS[32]):  # noqa: F811 - extend the generated class with the fit numbers
    """A fit check failed before anything was allocated: `needed`, `free`, `total` bytes on `device`."""

    needed = free = total = None
    device = None

    def __str__(self):
        return HostfirstError.__str__(self)


_BY_STATUS[32] = OutOfMemoryError


def error_for(status, message):
    cls = _BY_STATUS.get(status, HostfirstError)
    err = cls(message, status)
    return err


__all__ = ["HostfirstError", "FormatError", "OutOfMemoryError", "error_for", "STATUS"] + [
    c.__name__ for c in _BY_STATUS.values()
]
