"""hostfirst: explicit, host-first placement of tensors (Python ctypes binding of libhostfirst).

    import hostfirst
    hostfirst.backends()                  # every backend, with the reason one is missing
    hostfirst.devices()                   # [Device('cpu:0'), Device('cuda:0'), ...]
    hostfirst.default_device()            # DefaultDevice(device=Device('cuda:0'), source='built-in', depth=0)
    with hostfirst.default_device("cpu"):
        ...
    f = hostfirst.open("tokens.safetensors")  # header only; data mapped read-only
    t = f["tokens"]; t.dtype, t.shape         # zero-copy view; t[0:1024] is a zero-copy row slice
    numpy.from_dlpack(t)                      # zero-copy, read-only (or t.numpy(), bf16/fp8 via ml_dtypes)

    t.to("cuda:0")                            # Buffer on the device, fit-checked; __dlpack__ for torch/jax/cupy
    hostfirst.load(path, rules=[("tokens", "host"), ("*", "default")])

    t.prefault()                              # once, before a training loop gathers from t
    g = hostfirst.Gather("default", "U16", batch=64, window=1025)
    batch = g.run(t, hostfirst.OffsetStream(1337).next(t.shape[0], 1025, 64))   # a Buffer, yours while held
"""

from ._core import lib as native
from ._devices import (
    Backend,
    CarriedScope,
    DefaultDevice,
    Device,
    DeviceInfo,
    backends,
    capture_scope,
    default_device,
    devices,
    handle_count,
    resolve_target,
    set_default_device,
    strict,
)
from ._tensors import Buffer, File, Gather, OffsetStream, Tensor, load, open  # noqa: A004
from ._errors import *  # noqa: F401,F403 - one exception class per status
from ._errors import FormatError, HostfirstError, OutOfMemoryError

__version__ = native.hostfirst_version().decode()
library_path = native._hostfirst_path
