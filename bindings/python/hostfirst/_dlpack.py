"""DLPack export: PyCapsules around the library's managed tensors (pure ctypes), and the request check."""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

from . import _abi

P = ctypes.POINTER
_py = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)  # own function objects: never touch pythonapi's
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_py.PyCapsule_IsValid.restype = ctypes.c_int
_py.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_py.PyCapsule_GetPointer.restype = ctypes.c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_VERSIONED = b"dltensor_versioned"  # module-lifetime storage: capsules keep pointing at these bytes
KDLCPU = _abi.HOSTFIRST_DLPACK_DEVICE_CPU


def _call_deleter(ptr: int) -> None:
    m = ctypes.cast(ptr, P(_abi.DLPackManagedTensorVersioned)).contents
    if m.deleter:
        _Deleter(m.deleter)(ptr)


@_CapsuleDestructor
def _capsule_destructor(capsule: int) -> None:
    # Runs when the capsule dies. A consumer that took the tensor renamed it to "used_dltensor_versioned"
    # and owns the deleter call; otherwise (never consumed) we release it here.
    try:
        if _py.PyCapsule_IsValid(capsule, _VERSIONED):
            _call_deleter(_py.PyCapsule_GetPointer(capsule, _VERSIONED))
    except Exception:  # noqa: BLE001 - at interpreter exit the module may be half torn down; never raise here
        pass


def capsule(managed_ptr: Any) -> Any:
    return _py.PyCapsule_New(ctypes.cast(managed_ptr, ctypes.c_void_p), _VERSIONED, _capsule_destructor)


def new_out() -> Any:
    return P(_abi.DLPackManagedTensorVersioned)()


def check_request(max_version: Optional[Tuple[int, int]], dl_device: Optional[Tuple[int, int]],
                  copy: Optional[bool], stream: Optional[int], expected_device: Tuple[int, int]) -> None:
    if max_version is None or tuple(max_version)[0] < 1:
        raise BufferError(
            "hostfirst exports versioned DLPack tensors only (DLPack >= 1.0, to carry the read-only flag); "
            "the consumer asked for the legacy unversioned format"
        )
    if dl_device is not None and tuple(dl_device) != tuple(expected_device):
        raise BufferError(f"cannot export to DLPack device {tuple(dl_device)}: the data is on {tuple(expected_device)}")
    if copy:
        raise BufferError("hostfirst exports zero-copy only (copy=True requested)")
    if stream is not None and expected_device[0] == KDLCPU:
        raise BufferError("stream must be None for a CPU tensor")
