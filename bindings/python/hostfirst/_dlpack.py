"""DLPack export: the consumer's request to the library (`hostfirst_*_to_dlpack` with hostfirst_dlpack_options),
and PyCapsules around the managed tensors it returns, versioned or legacy.

The capsules' destructor is the library's own C function (`hostfirst_dlpack_capsule_destructor`), not a
ctypes callback: a consumer that refuses a capsule (numpy given bf16) raises its own exception, and the
capsule dies while that exception propagates; C code that never enters Python leaves it intact and frees the
export, where a Python callback would run with an exception pending (SystemError). The ctypes callback below
remains only for a Python whose C API is not among the process's global symbols (an embedding program that
loaded libpython with RTLD_LOCAL), where the library cannot find PyCapsule_GetPointer."""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional, Tuple

from . import _abi
from ._core import check
from ._errors import NoSuchDeviceError, UnavailableError, UnsupportedError
from ._lib import lib

P = ctypes.POINTER
_py = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)  # own function objects: never touch pythonapi's
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_py.PyCapsule_IsValid.restype = ctypes.c_int
_py.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_py.PyCapsule_GetPointer.restype = ctypes.c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_VERSIONED = b"dltensor_versioned"  # module-lifetime storage: capsules keep pointing at these bytes
_LEGACY = b"dltensor"
KDLCPU = _abi.HOSTFIRST_DLPACK_DEVICE_CPU
_COPY = {None: _abi.HOSTFIRST_DLPACK_COPY_IF_NEEDED, True: _abi.HOSTFIRST_DLPACK_COPY_ALWAYS,
         False: _abi.HOSTFIRST_DLPACK_COPY_NEVER}


def _call_deleter(ptr: int, struct: Any) -> None:
    m = ctypes.cast(ptr, P(struct)).contents
    if m.deleter:
        _Deleter(m.deleter)(ptr)


def _destructor(name: bytes, struct: Any) -> Any:
    @_CapsuleDestructor  # type: ignore[untyped-decorator]
    def destroy(capsule: int) -> None:
        # Runs when the capsule dies. A consumer that took the tensor renamed the capsule ("used_...") and owns
        # the deleter call; otherwise (never consumed) we release the tensor here.
        try:
            if _py.PyCapsule_IsValid(capsule, name):
                _call_deleter(_py.PyCapsule_GetPointer(capsule, name), struct)
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be half torn down; never raise here
            pass

    return destroy


def _native_destructor() -> Optional[int]:
    """The library's C capsule destructor, where it can find CPython's capsule functions (see the module doc)."""
    fn = getattr(lib, "hostfirst_dlpack_capsule_destructor", None)
    try:
        # The process's global symbols; on Windows the Python DLL (the library searches every loaded module there).
        here = ctypes.pythonapi if sys.platform == "win32" else ctypes.CDLL(None)
        found = hasattr(here, "PyCapsule_IsValid") and hasattr(here, "PyCapsule_GetPointer")
    except (OSError, TypeError):
        found = False
    return ctypes.cast(fn, ctypes.c_void_p).value if fn is not None and found else None


NATIVE_DESTRUCTOR = _native_destructor()
_KEEP = (_destructor(_VERSIONED, _abi.DLPackManagedTensorVersioned),
         _destructor(_LEGACY, _abi.DLPackManagedTensor))  # the fallback callbacks, alive as long as the module
_DESTROY_VERSIONED = NATIVE_DESTRUCTOR or ctypes.cast(_KEEP[0], ctypes.c_void_p).value
_DESTROY_LEGACY = NATIVE_DESTRUCTOR or ctypes.cast(_KEEP[1], ctypes.c_void_p).value


def request(stream: Optional[int], max_version: Optional[Tuple[int, int]], dl_device: Optional[Tuple[int, int]],
            copy: Optional[bool]) -> _abi.DLPackOptions:
    """`__dlpack__`'s arguments as the C API's hostfirst_dlpack_options (from hostfirst_dlpack_options_init;
    max_version=None or below (1, 0) is a pre-1.0 consumer: legacy = 1, the legacy form)."""
    o = _abi.DLPackOptions()
    check(lib.hostfirst_dlpack_options_init(ctypes.byref(o), ctypes.sizeof(o)))
    major, minor = (0, 0) if max_version is None else tuple(int(x) for x in tuple(max_version)[:2])
    if (major, minor) < (1, 0):
        o.legacy = 1
    else:
        o.max_version = _abi.DLPackVersion(major, minor)
    if stream is not None:
        o.stream, o.has_stream = int(stream), 1
    if copy not in _COPY:
        raise TypeError(f"copy must be None, True or False, not {copy!r}")
    o.copy = _COPY[copy]
    if dl_device is not None:
        kind, ordinal = tuple(dl_device)
        o.dl_device, o.has_dl_device = _abi.DLPackDevice(int(kind), int(ordinal)), 1
    return o


def export(fn: Any, handle: Optional[int], stream: Optional[int], max_version: Optional[Tuple[int, int]],
           dl_device: Optional[Tuple[int, int]], copy: Optional[bool]) -> Any:
    """Calls `hostfirst_view_to_dlpack` or `hostfirst_buffer_to_dlpack` with the consumer's request and wraps the
    result in the capsule the consumer asked for: "dltensor_versioned" when max_version >= (1, 0), else the
    legacy "dltensor". A request the library cannot serve (a copy refused with copy=False, a device it cannot reach) raises
    BufferError, as the array API asks; so does a dl_device that is absent or unavailable."""
    opts = request(stream, max_version, dl_device, copy)
    versioned, legacy = P(_abi.DLPackManagedTensorVersioned)(), P(_abi.DLPackManagedTensor)()
    status = fn(handle, ctypes.byref(opts), ctypes.byref(versioned), ctypes.byref(legacy))
    try:
        check(status)
    except (UnsupportedError, UnavailableError, NoSuchDeviceError) as e:  # cannot be served as asked
        raise BufferError(str(e)) from e
    if versioned:
        return _py.PyCapsule_New(ctypes.cast(versioned, ctypes.c_void_p), _VERSIONED, _DESTROY_VERSIONED)
    return _py.PyCapsule_New(ctypes.cast(legacy, ctypes.c_void_p), _LEGACY, _DESTROY_LEGACY)
