"""Finding and loading libhostfirst, and the ctypes declarations of the C API it uses."""

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

# The C header this binding was written against (include/hostfirst.h, HOSTFIRST_VERSION_*).
HEADER_VERSION = (0, 1, 0)
HEADER_VERSION_NUMBER = HEADER_VERSION[0] * 1_000_000 + HEADER_VERSION[1] * 1000 + HEADER_VERSION[2]


def _candidates():
    env = os.environ.get("HOSTFIRST_LIBRARY")
    if env:
        yield Path(env)
        return
    here = Path(__file__).resolve().parent
    names = ["libhostfirst.so", "libhostfirst.dylib", "hostfirst.dll"]
    for n in names:  # shipped inside the package
        yield here / n
    # a source checkout: bindings/python/hostfirst -> repository root
    root = here.parent.parent.parent
    for profile in ("release", "debug"):
        for n in names:
            yield root / "target" / profile / n
    found = ctypes.util.find_library("hostfirst")
    if found:
        yield Path(found)
    for n in names:
        yield Path(n)  # let the dynamic loader search its paths


def load_library():
    errors = []
    for path in _candidates():
        if path.is_absolute() and not path.exists():
            errors.append(f"{path}: not found")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _declare(lib)
        got = lib.hostfirst_version_number()
        if got // 1000 != HEADER_VERSION_NUMBER // 1000:
            raise ImportError(
                f"{path} is libhostfirst {lib.hostfirst_version().decode()} but this binding was written for "
                f"{'.'.join(map(str, HEADER_VERSION))}: versions differ in major or minor"
            )
        lib._hostfirst_path = str(path)
        return lib
    raise ImportError(
        "libhostfirst not found; set HOSTFIRST_LIBRARY to its path. Tried:\n  " + "\n  ".join(errors)
    )


c_status = ctypes.c_uint32


class Device(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("ordinal", ctypes.c_int32)]


class BackendInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("status", ctypes.c_uint32),
        ("reason", ctypes.c_char_p),
        ("driver_version", ctypes.c_char_p),
        ("device_count", ctypes.c_uint32),
    ]


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", Device),
        ("name", ctypes.c_char_p),
        ("total_memory", ctypes.c_uint64),
        ("uuid", ctypes.c_char_p),
        ("pci_bus_id", ctypes.c_char_p),
        ("compute_capability_major", ctypes.c_int32),
        ("compute_capability_minor", ctypes.c_int32),
        ("multiprocessor_count", ctypes.c_uint32),
    ]


class FitInfo(ctypes.Structure):
    _fields_ = [
        ("needed", ctypes.c_uint64),
        ("free", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("device", Device),
    ]


class CarriedScope(ctypes.Structure):
    _fields_ = [("device", Device), ("strict", ctypes.c_int32)]


P = ctypes.POINTER
_SIGNATURES = {
    # name: (restype, argtypes)
    "hostfirst_version": (ctypes.c_char_p, []),
    "hostfirst_version_number": (ctypes.c_uint32, []),
    "hostfirst_status_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    "hostfirst_status_count": (ctypes.c_size_t, []),
    "hostfirst_last_error": (ctypes.c_char_p, []),
    "hostfirst_last_error_status": (c_status, []),
    "hostfirst_last_fit": (c_status, [P(FitInfo)]),
    "hostfirst_handle_count": (c_status, [P(ctypes.c_size_t)]),
    "hostfirst_backend_count": (ctypes.c_size_t, []),
    "hostfirst_backend_describe": (c_status, [ctypes.c_size_t, P(BackendInfo)]),
    "hostfirst_backend_status_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    "hostfirst_census_warning_count": (ctypes.c_size_t, []),
    "hostfirst_census_warning": (ctypes.c_char_p, [ctypes.c_size_t]),
    "hostfirst_devices": (c_status, [P(Device), ctypes.c_size_t, P(ctypes.c_size_t)]),
    "hostfirst_device_describe": (c_status, [Device, P(DeviceInfo)]),
    "hostfirst_device_memory": (c_status, [Device, P(ctypes.c_uint64), P(ctypes.c_uint64)]),
    "hostfirst_device_parse": (c_status, [ctypes.c_char_p, P(Device)]),
    "hostfirst_target_parse": (c_status, [ctypes.c_char_p, P(Device)]),
    "hostfirst_device_format": (c_status, [Device, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)]),
    "hostfirst_default_device": (c_status, [P(Device), P(ctypes.c_uint32), P(ctypes.c_uint32)]),
    "hostfirst_default_source_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    "hostfirst_default_device_set": (c_status, [Device]),
    "hostfirst_default_device_clear": (c_status, []),
    "hostfirst_default_resolve": (c_status, [P(Device)]),
    "hostfirst_scope_push": (c_status, [Device, P(ctypes.c_uint64)]),
    "hostfirst_scope_pop": (c_status, [ctypes.c_uint64]),
    "hostfirst_scope_capture": (c_status, [P(CarriedScope)]),
    "hostfirst_scope_enter": (c_status, [P(CarriedScope), P(ctypes.c_uint64)]),
    "hostfirst_scope_leave": (c_status, [ctypes.c_uint64]),
    "hostfirst_strict_thread_set": (c_status, [ctypes.c_int32]),
    "hostfirst_strict_process_set": (c_status, [ctypes.c_int32]),
    "hostfirst_strict_get": (c_status, [P(ctypes.c_int32), P(ctypes.c_int32)]),
}

# Declared by other modules of this package (loading, placement, DLPack) as they register themselves.
EXTRA_SIGNATURES = {}


def _declare(lib):
    for table in (_SIGNATURES, EXTRA_SIGNATURES):
        for name, (res, args) in table.items():
            fn = getattr(lib, name, None)
            if fn is None:
                continue
            fn.restype = res
            fn.argtypes = args


def declare_more(lib, table):
    EXTRA_SIGNATURES.update(table)
    _declare(lib)


if sys.byteorder != "little":  # safetensors data is little-endian; views are zero-copy
    raise ImportError("hostfirst's Python binding supports little-endian hosts only")
