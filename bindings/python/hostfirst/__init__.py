"""hostfirst: explicit, host-first placement of tensors (Python ctypes binding of libhostfirst).

    import hostfirst
    hostfirst.backends()                  # every backend, with the reason one is missing
    hostfirst.devices()                   # [Device('cpu:0'), Device('cuda:0'), ...]
    hostfirst.default_device()            # DefaultDevice(device=Device('cuda:0'), source='built_in', depth=0)
    with hostfirst.default_device("cpu"):
        ...
    f = hostfirst.open("tokens.safetensors")  # header only; data mapped read-only; .npy, llm.c, Megatron too
    hostfirst.open_raw("train.bin", "uint16")["data"]   # nanoGPT's headerless token file
    t = f["tokens"]; t.dtype, t.shape         # dtype('uint16'); zero-copy view; t[0:1024], t[:, 64:128] views
    np.asarray(t)                             # zero-copy, read-only (bf16/fp8 via ml_dtypes); np.from_dlpack too
    with hostfirst.safe_open(path, framework="numpy") as f:   # safetensors 0.8's read API, owned arrays
        f.get_slice("w")[:, 10:20]

    t.to("cuda:0")                            # Buffer on the device, fit-checked; __dlpack__ for torch/jax/cupy
    hostfirst.load(path, rules={"tokens": "cpu"})              # unmatched tensors stay on the host (default="host")
    hostfirst.jax.load_file(path, rules={"tokens": "host"})    # the rest on the default device: jax.Arrays
    hostfirst.numpy.load_file(path)           # the drop-in for safetensors.numpy.load_file (owned arrays;
                                              # zero_copy=True: the mapping, SIGBUS if the file is truncated)
    hostfirst.numpy.save_file(arrays, path)   # and for save_file: no copy of the arrays, never a half-written file
    hostfirst.load_shards(path, mesh={"x": 2, "y": 4}, rules=[("*.weight", ("x", "y"))], owned={5: "cpu"})

    t.prefault()                              # once, before a training loop gathers from t
    g = hostfirst.Gather("default", "uint16", batch=64, window=1025)
    for offsets in hostfirst.OffsetStream(1337, len(t), window=1025, batch=64):
        batch = g.run(t, offsets)             # a Buffer, unchanged while held

Exceptions derive from hostfirst.Error and from the builtin a Python user catches (KeyError, ValueError,
FileNotFoundError, MemoryError, ...): see hostfirst._errors for the mapping.
"""

import sys as _sys

from ._lib import lib as native
from ._core import Device, DeviceInfo
from ._devices import (
    Backend,
    CarriedScope,
    DefaultDevice,
    backends,
    capture_scope,
    default_device,
    devices,
    handle_count,
    resolve_target,
    set_default_device,
    strict,
)
from ._tensors import Buffer, File, View, load, open, open_raw, rule_pairs  # noqa: A004
from ._gather import Gather, OffsetStream
from ._shard import Shard, load_shards
from ._safe_open import safe_open
from ._read_plan import ReadPlan
from ._save import Writer
from ._errors import (  # one exception class per status (see hostfirst._errors for the builtin each also is)
    AlreadyUsedError, BufferTooSmallError, BusyError, CancelledError, DeviceErrorError, DuplicateTensorError,
    Error, FormatError, HeaderTooLargeError, HeaderTooSmallError, HostfirstError, ImplicitPlacementError,
    IncompleteBufferError, InternalError, InvalidArgumentError, InvalidHandleError, InvalidHeaderJsonError,
    InvalidHeaderLengthError, InvalidHeaderUtf8Error, InvalidIndexError, InvalidOffsetError, IoError,
    LimitExceededError, MetadataLimitExceededError, MisalignedSliceError, MissingFileError, NoSuchDeviceError,
    NotFoundError, NotReadyError, NotSafetensorsError, NullArgumentError, OutOfMemoryError, OutOfRangeError,
    PanicError, ScopeMismatchError, TensorInvalidInfoError, TruncatedError, UnavailableError, UnmatchedRuleError,
    UnmatchedRuleWarning, UnsupportedError, ValidationOverflowError, OtherFormatError, UnsupportedDtypeError,
    InvalidHeaderError, UnsupportedVersionError, UnsupportedLayoutError, NoSpaceError, PermissionDeniedError,
    NativeExtensionWarning,
)
from . import numpy  # noqa: E402 - hostfirst.numpy.load_file, after the names it uses
from . import remote  # noqa: E402 - hostfirst.remote.configure (settings of s3://, gs://, az://, http(s):// sources)

__version__ = native.hostfirst_version().decode()


def read_engine() -> str:
    """How this process reads files: "io_uring (...)" where the kernel offers it, else "pread pool (...; why)"
    (hostfirst_read_engine; HOSTFIRST_IO=pool in the environment forces the pool)."""
    import ctypes

    buf = ctypes.create_string_buffer(512)
    n = ctypes.c_size_t()
    from ._core import check

    check(native.hostfirst_read_engine(buf, len(buf), ctypes.byref(n)))
    return buf.value.decode()


#: The path of the libhostfirst this package loaded (the one bundled in the wheel, or HOSTFIRST_LIBRARY's).
library_path: str = str(native._hostfirst_path)

# The public names, as a literal list (type checkers read it: `mypy --strict` sees every name exported), and
# what pydoc documents. `open` is among them, as `os`, `io` and `gzip` list theirs: `from hostfirst import *`
# shadows the builtin open, so import the module (`import hostfirst`) rather than its names.
__all__ = [
    "Backend", "Buffer", "CarriedScope", "DefaultDevice", "Device", "DeviceInfo", "File", "Gather", "OffsetStream",
    "Shard", "View", "Writer", "backends", "capture_scope", "default_device", "devices", "handle_count", "library_path",
    "ReadPlan", "load", "load_shards", "open", "open_raw", "read_engine", "resolve_target", "rule_pairs", "safe_open",
    "set_default_device", "strict", "AlreadyUsedError", "BufferTooSmallError", "BusyError", "CancelledError",
    "DeviceErrorError", "DuplicateTensorError", "Error", "FormatError", "HeaderTooLargeError",
    "HeaderTooSmallError", "HostfirstError", "ImplicitPlacementError", "IncompleteBufferError", "InternalError",
    "InvalidArgumentError", "InvalidHandleError", "InvalidHeaderJsonError", "InvalidHeaderLengthError",
    "InvalidHeaderUtf8Error", "InvalidIndexError", "InvalidOffsetError", "IoError", "LimitExceededError",
    "MetadataLimitExceededError", "MisalignedSliceError", "MissingFileError", "NoSuchDeviceError", "NotFoundError",
    "NotReadyError", "NotSafetensorsError", "NullArgumentError", "OtherFormatError", "OutOfMemoryError",
    "OutOfRangeError",
    "PanicError", "ScopeMismatchError", "TensorInvalidInfoError", "TruncatedError", "UnavailableError",
    "UnmatchedRuleError", "UnmatchedRuleWarning", "UnsupportedDtypeError", "UnsupportedError",
    "UnsupportedLayoutError", "UnsupportedVersionError", "ValidationOverflowError", "InvalidHeaderError",
    "NoSpaceError", "PermissionDeniedError", "NativeExtensionWarning",
]

if "jax" in _sys.modules:  # JAX already imported: register View and Buffer with it now (see hostfirst.jax)
    from . import jax as _jax  # noqa: F401
