"""The calling convention every module shares: `check()` turns a status into an exception (with the fit
numbers and the device for OUT_OF_MEMORY), `Device` (which that needs), and the encoding of strings and paths."""

from __future__ import annotations

import ctypes
import os
import re
from typing import NamedTuple, Tuple, Union

from . import _abi
from ._errors import STATUS, HostfirstError, MissingFileError, OutOfMemoryError, error_for, error_named
from ._lib import lib

_OK = STATUS["OK"]
_OUT_OF_MEMORY = STATUS["OUT_OF_MEMORY"]
_IO = STATUS["IO"]
_NOT_FOUND = STATUS["NOT_FOUND"]

KIND_NAMES = {
    _abi.HOSTFIRST_DEVICE_CPU: "cpu",
    _abi.HOSTFIRST_DEVICE_CUDA: "cuda",
    _abi.HOSTFIRST_DEVICE_CUDA_HOST: "cuda_host",
}


class DeviceInfo(NamedTuple):
    """What `Device.info()` reports: the device's name, total memory in bytes, UUID, PCI bus id, compute
    capability (major, minor) and multiprocessor count (hostfirst_device_describe)."""

    name: str
    total_memory: int
    uuid: str
    pci_bus_id: str
    compute_capability: Tuple[int, int]
    multiprocessor_count: int


PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def text(p: bytes | None) -> str:
    return (p or b"").decode("utf-8", "replace")


def last_error() -> str:
    return text(lib.hostfirst_last_error_message())


def check(status: int) -> None:
    """Raises the exception for a non-OK status, with the thread's last error message (and fit numbers)."""
    if status == _OK:
        return
    err = error_for(status, python_names(last_error()))
    if status == _OUT_OF_MEMORY:
        fit = _abi.FitInfo()
        fit.struct_size = ctypes.sizeof(fit)
        if lib.hostfirst_last_error_fit(ctypes.byref(fit)) == _OK:
            assert isinstance(err, OutOfMemoryError)
            err.needed, err.free, err.total = fit.needed, fit.free, fit.total
            err.device = Device._from_c(fit.device) if fit.device.kind else None
    raise err


# The library's messages name its C functions; Python users call these instead (the format names are
# hostfirst.open's `format=` values).
_C_NAMES = [
    (re.compile(r"hostfirst_file_open_format with HOSTFIRST_FORMAT_([A-Z_]+)"),
     lambda m: f'hostfirst.open(path, format="{m.group(1).lower()}")'),
    (re.compile(r"hostfirst_file_open_raw\b"), lambda m: "hostfirst.open_raw"),
    (re.compile(r"hostfirst_file_open_memory\b"), lambda m: "hostfirst.numpy.load"),
    (re.compile(r"hostfirst_file_open\b"), lambda m: "hostfirst.open"),
]


def python_names(message: str) -> str:
    """A library message with the C functions it recommends replaced by their Python spellings."""
    if "hostfirst_" in message:
        for pattern, repl in _C_NAMES:
            message = pattern.sub(repl, message)
    return message


def c_string(s: str, what: str = "string") -> bytes:
    """UTF-8 bytes for the C API; an embedded NUL is refused with InvalidArgumentError (a ValueError, as
    open() raises)."""
    b = str(s).encode("utf-8", "surrogateescape")
    if b"\0" in b:
        raise error_named("INVALID_ARGUMENT", f"embedded null byte in {what} {str(s)[:40]!r}")
    return b


def c_path(path: PathLike) -> bytes:
    """A path for the C API: str, bytes or os.PathLike; NUL refused with InvalidArgumentError (a ValueError,
    as open() raises). Bytes holding a NUL are most likely a file's contents passed where its path goes: the
    message says so and names the call that takes them. Names that are not UTF-8 go to the library unchanged,
    which refuses them with its own error (InvalidArgumentError)."""
    if isinstance(path, (bytearray, memoryview)):
        raise TypeError(f"a path is str, bytes or os.PathLike, not {type(path).__name__} (for the contents of a "
                        "safetensors file in memory use hostfirst.numpy.load(data) or hostfirst.jax.load(data))")
    p = os.fsencode(path)
    if b"\0" in p:
        if isinstance(path, bytes):
            raise error_named("INVALID_ARGUMENT", f"embedded null byte in a path of {len(path)} bytes: a path "
                              "was expected (bytes holding a NUL are a file's contents, not its name; for a "
                              "safetensors file in memory use hostfirst.numpy.load(data) or "
                              "hostfirst.jax.load(data))")
        raise error_named("INVALID_ARGUMENT", f"embedded null byte in path {os.fsdecode(p)[:40]!r}")
    return p


def check_path(status: int, path: PathLike) -> None:
    """check() for a call that opened `path`: an IO failure on a path that does not exist raises
    MissingFileError, which is also a FileNotFoundError."""
    if is_url(path):
        # A remote object (s3://, gs://, az://, http(s)://): a 404 is NOT_FOUND, also a FileNotFoundError; an IO
        # failure there (a server down, a replaced object) says nothing about a local path.
        if status == _NOT_FOUND:
            raise MissingFileError(last_error(), os.fsdecode(path), status=_NOT_FOUND)
        check(status)
        return
    if status == _IO and not os.path.lexists(os.fsencode(path)):
        raise MissingFileError(last_error(), os.fsdecode(path))
    check(status)


_URL_SCHEMES = (b"s3", b"s3a", b"gs", b"gcs", b"az", b"azure", b"abfs", b"abfss", b"http", b"https")


def is_url(path: PathLike) -> bool:
    """Whether `path` names a remote object, as the library decides (`scheme://...`, a scheme it reads)."""
    p = os.fsencode(path)
    scheme, sep, rest = p.partition(b"://")
    return bool(sep) and bool(rest) and scheme.lower() in _URL_SCHEMES


class Device:
    """A device: `kind` ('cpu', 'cuda', 'cuda_host') and `ordinal`. Compare with == or with a spec string."""

    __slots__ = ("kind_code", "ordinal")
    kind_code: int
    ordinal: int

    def __init__(self, spec: "Device | str"):
        if isinstance(spec, Device):
            self.kind_code, self.ordinal = spec.kind_code, spec.ordinal
            return
        d = _abi.Device()
        check(lib.hostfirst_device_parse(c_string(spec, "device spec"), ctypes.byref(d)))
        self.kind_code, self.ordinal = d.kind, d.ordinal

    @classmethod
    def _from_c(cls, d: _abi.Device) -> "Device":
        self = cls.__new__(cls)
        self.kind_code, self.ordinal = d.kind, d.ordinal
        return self

    def _c(self) -> _abi.Device:
        return _abi.Device(self.kind_code, self.ordinal)

    @property
    def kind(self) -> str:
        return KIND_NAMES.get(self.kind_code, "unknown")

    @property
    def is_host(self) -> bool:
        """True for memory the CPU addresses directly (cpu, cuda_host)."""
        return self.kind_code in (_abi.HOSTFIRST_DEVICE_CPU, _abi.HOSTFIRST_DEVICE_CUDA_HOST)

    @property
    def dlpack_device(self) -> tuple[int, int]:
        """(DLPack device type, ordinal): hostfirst's kinds equal DLPack's."""
        return (self.kind_code, self.ordinal)

    def __str__(self) -> str:
        buf = ctypes.create_string_buffer(32)
        check(lib.hostfirst_device_format(self._c(), buf, 32, None))
        return buf.value.decode()

    def __repr__(self) -> str:
        return f"Device('{self}')"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except (HostfirstError, ValueError):
                return False
        return isinstance(other, Device) and (self.kind_code, self.ordinal) == (other.kind_code, other.ordinal)

    def __hash__(self) -> int:
        return hash((self.kind_code, self.ordinal))

    def info(self) -> DeviceInfo:
        i = _abi.DeviceInfo()
        i.struct_size = ctypes.sizeof(i)
        check(lib.hostfirst_device_describe(self._c(), ctypes.byref(i)))
        return DeviceInfo(
            text(i.name), i.total_memory, text(i.uuid), text(i.pci_bus_id),
            (i.compute_capability_major, i.compute_capability_minor), i.multiprocessor_count,
        )

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes now. For CUDA: from NVML without a context where it can, else this retains the
        device's primary context (see hostfirst_device_memory in hostfirst.h)."""
        free, total = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.hostfirst_device_memory(self._c(), ctypes.byref(free), ctypes.byref(total)))
        return free.value, total.value


def as_device(d: "Device | str") -> Device:
    return d if isinstance(d, Device) else Device(d)


_BACKENDS = ("mmap", "pread")


def check_backend(backend: str) -> None:
    """safetensors 0.8's `backend=`: "mmap" or "pread" (InvalidArgumentError otherwise, as safetensors refuses
    others). Both give the same owned arrays here: hostfirst always reads with pread/io_uring into memory of the
    array's own, so the choice changes nothing but is checked."""
    if backend not in _BACKENDS:
        raise error_named("INVALID_ARGUMENT", f'backend "{backend}" is invalid (expected one of: "mmap", "pread")')
