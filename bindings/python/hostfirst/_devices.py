"""Backends, devices, the default device, scopes and strict mode."""

import ctypes
import threading
from collections import namedtuple

from . import _lib
from ._core import check, lib, text

KIND_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host"}

Backend = namedtuple("Backend", "name status reason driver_version device_count")
Backend.__doc__ = "One backend of the census: status is 'available' or why not ('library_not_found', ...)."
DefaultDevice = namedtuple("DefaultDevice", "device source depth")
DefaultDevice.__doc__ = "The effective default device, where it came from ('scope', 'process', 'env', 'built-in') and the scope depth."
DeviceInfo = namedtuple(
    "DeviceInfo", "name total_memory uuid pci_bus_id compute_capability multiprocessor_count"
)


class Device:
    """A device: `kind` ('cpu', 'cuda', 'cuda_host') and `ordinal`. Compare with == or with a spec string."""

    __slots__ = ("kind_code", "ordinal")

    def __init__(self, spec):
        if isinstance(spec, Device):
            self.kind_code, self.ordinal = spec.kind_code, spec.ordinal
            return
        d = _lib.Device()
        check(lib.hostfirst_device_parse(str(spec).encode(), ctypes.byref(d)))
        self.kind_code, self.ordinal = d.kind, d.ordinal

    @classmethod
    def _from_c(cls, d):
        self = cls.__new__(cls)
        self.kind_code, self.ordinal = d.kind, d.ordinal
        return self

    def _c(self):
        return _lib.Device(self.kind_code, self.ordinal)

    @property
    def kind(self):
        return KIND_NAMES.get(self.kind_code, "unknown")

    @property
    def dlpack_device(self):
        """(DLPack device type, ordinal): hostfirst's kinds equal DLPack's."""
        return (self.kind_code, self.ordinal)

    def __str__(self):
        buf = ctypes.create_string_buffer(32)
        check(lib.hostfirst_device_format(self._c(), buf, 32, None))
        return buf.value.decode()

    def __repr__(self):
        return f"Device('{self}')"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = Device(other)
            except Exception:
                return False
        return isinstance(other, Device) and (self.kind_code, self.ordinal) == (other.kind_code, other.ordinal)

    def __hash__(self):
        return hash((self.kind_code, self.ordinal))

    def info(self):
        i = _lib.DeviceInfo()
        i.struct_size = ctypes.sizeof(i)
        check(lib.hostfirst_device_describe(self._c(), ctypes.byref(i)))
        return DeviceInfo(
            text(i.name), i.total_memory, text(i.uuid), text(i.pci_bus_id),
            (i.compute_capability_major, i.compute_capability_minor), i.multiprocessor_count,
        )

    def memory(self):
        """(free, total) bytes now. For CUDA: from NVML without a context where it can, else this retains the
        device's primary context (see hostfirst_device_memory in hostfirst.h)."""
        free, total = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.hostfirst_device_memory(self._c(), ctypes.byref(free), ctypes.byref(total)))
        return free.value, total.value


def as_device(d):
    return d if isinstance(d, Device) else Device(d)


def backends():
    """Every backend hostfirst knows, available or not, with the reason when not."""
    out = []
    for i in range(lib.hostfirst_backend_count()):
        b = _lib.BackendInfo()
        check(lib.hostfirst_backend_describe(i, ctypes.byref(b)))
        out.append(Backend(text(b.name), text(lib.hostfirst_backend_status_name(b.status)), text(b.reason),
                           text(b.driver_version), b.device_count))
    return out


def devices():
    """The devices of every available backend: cpu:0 first, then cuda:0..N-1."""
    n = ctypes.c_size_t()
    check(lib.hostfirst_devices(None, 0, ctypes.byref(n)))
    arr = (_lib.Device * max(n.value, 1))()
    check(lib.hostfirst_devices(arr, n.value, ctypes.byref(n)))
    return [Device._from_c(arr[i]) for i in range(n.value)]


class _Scope:
    """`with hostfirst.default_device("cpu"):` pushes a thread scope on entry and pops it (checked) on exit."""

    def __init__(self, device):
        self.device = as_device(device)
        self._tokens = threading.local()

    def __enter__(self):
        tok = ctypes.c_uint64()
        check(lib.hostfirst_scope_push(self.device._c(), ctypes.byref(tok)))
        stack = getattr(self._tokens, "stack", None)
        if stack is None:
            stack = self._tokens.stack = []
        stack.append(tok.value)
        return self.device

    def __exit__(self, *exc):
        check(lib.hostfirst_scope_pop(self._tokens.stack.pop()))
        return False


def default_device(device=None):
    """Without an argument: the effective default as DefaultDevice(device, source, depth).
    With a device or spec: a context manager that makes it this thread's default."""
    if device is not None:
        return _Scope(device)
    d, source, depth = _lib.Device(), ctypes.c_uint32(), ctypes.c_uint32()
    check(lib.hostfirst_default_device(ctypes.byref(d), ctypes.byref(source), ctypes.byref(depth)))
    return DefaultDevice(Device._from_c(d), text(lib.hostfirst_default_source_name(source.value)), depth.value)


def set_default_device(device):
    """Sets (or with None clears) the process-wide default device."""
    if device is None:
        check(lib.hostfirst_default_device_clear())
    else:
        check(lib.hostfirst_default_device_set(as_device(device)._c()))


def resolve_target(spec):
    """A placement target: a device spec or 'default' (refused with ImplicitPlacementError in strict mode)."""
    d = _lib.Device()
    check(lib.hostfirst_target_parse(str(spec).encode(), ctypes.byref(d)))
    return Device._from_c(d)


class CarriedScope:
    """The calling thread's default and strict flag, to be entered on a worker with `with carried:`."""

    def __init__(self):
        self._c = _lib.CarriedScope()
        check(lib.hostfirst_scope_capture(ctypes.byref(self._c)))
        self._tokens = threading.local()

    @property
    def device(self):
        return Device._from_c(self._c.device)

    def __enter__(self):
        tok = ctypes.c_uint64()
        check(lib.hostfirst_scope_enter(ctypes.byref(self._c), ctypes.byref(tok)))
        self._tokens.__dict__.setdefault("stack", []).append(tok.value)
        return self.device

    def __exit__(self, *exc):
        check(lib.hostfirst_scope_leave(self._tokens.stack.pop()))
        return False


def capture_scope():
    return CarriedScope()


class strict:
    """`with hostfirst.strict():` makes implicit default placement an error on this thread
    (process=True: for the whole process)."""

    def __init__(self, process=False):
        self.process = process

    def __enter__(self):
        t, p = ctypes.c_int32(), ctypes.c_int32()
        check(lib.hostfirst_strict_get(ctypes.byref(t), ctypes.byref(p)))
        self._prev = p.value if self.process else t.value
        fn = lib.hostfirst_strict_process_set if self.process else lib.hostfirst_strict_thread_set
        check(fn(1))
        return self

    def __exit__(self, *exc):
        fn = lib.hostfirst_strict_process_set if self.process else lib.hostfirst_strict_thread_set
        check(fn(self._prev))
        return False


def handle_count():
    n = ctypes.c_size_t()
    check(lib.hostfirst_handle_count(ctypes.byref(n)))
    return n.value
