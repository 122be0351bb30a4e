"""hostfirst: explicit, host-first placement of tensors (Python ctypes binding of libhostfirst).

    import hostfirst
    hostfirst.backends()                  # every backend, with the reason one is missing
    hostfirst.devices()                   # [Device('cpu:0'), Device('cuda:0'), ...]
    hostfirst.default_device()            # DefaultDevice(device=Device('cuda:0'), source='built-in', depth=0)
    with hostfirst.default_device("cpu"):
        ...
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
from ._errors import *  # noqa: F401,F403 - one exception class per status
from ._errors import FormatError, HostfirstError, OutOfMemoryError

__version__ = native.hostfirst_version().decode()
library_path = native._hostfirst_path
