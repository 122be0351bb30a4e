"""hostfirst: explicit, host-first placement of tensors (Python ctypes binding of libhostfirst).

    import hostfirst
    hostfirst.backends()                  # every backend, with the reason one is missing
    hostfirst.devices()                   # [Device('cpu:0'), Device('cuda:0'), ...]
    hostfirst.default_device()            # DefaultDevice(device=Device('cuda:0'), source='built-in', depth=0)
    with hostfirst.default_device("cpu"):
        ...
    f = hostfirst.open("tokens.safetensors")  # header only; data mapped read-only
    t = f["tokens"]; t.dtype, t.shape         # dtype('uint16'); zero-copy view; t[0:1024] a zero-copy row slice
    np.asarray(t)                             # zero-copy, read-only (bf16/fp8 via ml_dtypes); np.from_dlpack too

    t.to("cuda:0")                            # Buffer on the device, fit-checked; __dlpack__ for torch/jax/cupy
    hostfirst.load(path, rules={"tokens": "host", "*": "default"})
    hostfirst.jax.load_file(path, rules={"tokens": "host", "*": "default"})   # jax.Arrays and host arrays
    hostfirst.load_shards(path, mesh={"x": 2, "y": 4}, rules=[("*.weight", ("x", "y"))], owned={5: "cpu"})

    t.prefault()                              # once, before a training loop gathers from t
    g = hostfirst.Gather("default", "uint16", batch=64, window=1025)
    batch = g.run(t, hostfirst.OffsetStream(1337).next(t.shape[0], 1025, 64))   # a Buffer, unchanged while held

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
from ._tensors import Buffer, File, Tensor, load, open, rule_pairs  # noqa: A004
from ._gather import Gather, OffsetStream
from ._shard import Shard, load_shards
from ._errors import *  # noqa: F401,F403 - one exception class per status
from ._errors import Error, FormatError, HostfirstError, MissingFileError, OutOfMemoryError, UnmatchedRuleWarning

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


library_path = native._hostfirst_path

if "jax" in _sys.modules:  # JAX already imported: register Tensor and Buffer with it now (see hostfirst.jax)
    from . import jax as _jax  # noqa: F401
