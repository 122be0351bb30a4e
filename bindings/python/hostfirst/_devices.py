"""Backends, devices, the default device, scopes and strict mode."""

from __future__ import annotations

import ctypes
import threading
from typing import List, NamedTuple, Union, overload

from . import _abi
from ._core import Device, as_device, c_string, check, text
from ._lib import lib

class Backend(NamedTuple):
    """One backend of the census: status is 'available' or why not ('library_not_found', ...)."""

    name: str
    status: str
    reason: str
    driver_version: str
    device_count: int


class DefaultDevice(NamedTuple):
    """The effective default device, where it came from ('scope', 'process', 'env', 'built_in') and the scope
    depth."""

    device: Device
    source: str
    depth: int


def backends() -> List[Backend]:
    """Every backend hostfirst knows, available or not, with the reason when not."""
    out = []
    for i in range(lib.hostfirst_backend_count()):
        b = _abi.BackendInfo()
        b.struct_size = ctypes.sizeof(b)
        check(lib.hostfirst_backend_describe(i, ctypes.byref(b)))
        # The C names are the constants' suffixes (LIBRARY_NOT_FOUND); Python gives them in lower case.
        out.append(Backend(text(b.name), text(lib.hostfirst_backend_status_name(b.status)).lower(), text(b.reason),
                           text(b.driver_version), b.device_count))
    return out


def devices() -> List[Device]:
    """The devices of every available backend: cpu:0 first, then cuda:0..N-1."""
    n = ctypes.c_size_t()
    check(lib.hostfirst_devices(None, 0, ctypes.byref(n)))
    arr = (_abi.Device * max(n.value, 1))()
    check(lib.hostfirst_devices(arr, n.value, ctypes.byref(n)))
    return [Device._from_c(arr[i]) for i in range(n.value)]


class _Scope:
    """`with hostfirst.default_device("cpu"):` pushes a thread scope on entry and pops it (checked) on exit."""

    def __init__(self, device: Union[Device, str]):
        self.device = as_device(device)
        self._tokens = threading.local()

    def __enter__(self) -> Device:
        tok = ctypes.c_uint64()
        check(lib.hostfirst_scope_push(self.device._c(), ctypes.byref(tok)))
        stack = getattr(self._tokens, "stack", None)
        if stack is None:
            stack = self._tokens.stack = []
        stack.append(tok.value)
        return self.device

    def __exit__(self, *exc: object) -> None:
        check(lib.hostfirst_scope_pop(self._tokens.stack.pop()))


@overload
def default_device(device: None = None) -> DefaultDevice: ...


@overload
def default_device(device: Union[Device, str]) -> "_Scope": ...


def default_device(device: Union[Device, str, None] = None) -> "Union[DefaultDevice, _Scope]":
    """Without an argument: the effective default as DefaultDevice(device, source, depth).
    With a device or spec: a context manager that makes it this thread's default."""
    if device is not None:
        return _Scope(device)
    d, source, depth = _abi.Device(), ctypes.c_uint32(), ctypes.c_uint32()
    check(lib.hostfirst_default_device(ctypes.byref(d), ctypes.byref(source), ctypes.byref(depth)))
    source_name = text(lib.hostfirst_default_source_name(source.value)).lower()  # BUILT_IN -> built_in
    return DefaultDevice(Device._from_c(d), source_name, depth.value)


def set_default_device(device: Union[Device, str, None]) -> None:
    """Sets (or with None clears) the process-wide default device."""
    if device is None:
        check(lib.hostfirst_default_device_clear())
    else:
        check(lib.hostfirst_default_device_set(as_device(device)._c()))


def resolve_target(spec: Union[Device, str]) -> Device:
    """A placement target: a device spec or 'default' (refused with ImplicitPlacementError in strict mode)."""
    d = _abi.Device()
    check(lib.hostfirst_target_parse(c_string(str(spec), "placement target"), ctypes.byref(d)))
    return Device._from_c(d)


class CarriedScope:
    """The calling thread's default and strict flag, to be entered on a worker with `with carried:`."""

    def __init__(self) -> None:
        self._c = _abi.CarriedScope()
        check(lib.hostfirst_scope_capture(ctypes.byref(self._c)))
        self._tokens = threading.local()

    @property
    def device(self) -> Device:
        return Device._from_c(self._c.device)

    def __enter__(self) -> Device:
        tok = ctypes.c_uint64()
        check(lib.hostfirst_scope_enter(ctypes.byref(self._c), ctypes.byref(tok)))
        self._tokens.__dict__.setdefault("stack", []).append(tok.value)
        return self.device

    def __exit__(self, *exc: object) -> None:
        check(lib.hostfirst_scope_leave(self._tokens.stack.pop()))


def capture_scope() -> CarriedScope:
    """The calling thread's default device and strict flag, captured now, for a worker thread to enter:

        carried = hostfirst.capture_scope()
        def work():
            with carried:               # the worker places where its creator would have
                hostfirst.load(path, rules={"*": "default"})
        threading.Thread(target=work).start()

    (hostfirst_scope_capture / hostfirst_scope_enter / hostfirst_scope_leave in the C header)."""
    return CarriedScope()


class strict:
    """`with hostfirst.strict():` makes implicit default placement an error on this thread
    (process=True: for the whole process)."""

    def __init__(self, process: bool = False):
        self.process = process

    def __enter__(self) -> "strict":
        t, p = ctypes.c_int32(), ctypes.c_int32()
        check(lib.hostfirst_strict_get(ctypes.byref(t), ctypes.byref(p)))
        self._prev = p.value if self.process else t.value
        fn = lib.hostfirst_strict_process_set if self.process else lib.hostfirst_strict_thread_set
        check(fn(1))
        return self

    def __exit__(self, *exc: object) -> None:
        fn = lib.hostfirst_strict_process_set if self.process else lib.hostfirst_strict_thread_set
        check(fn(self._prev))


def is_strict() -> bool:
    """True when strict mode is on for this thread or the process."""
    t, p = ctypes.c_int32(), ctypes.c_int32()
    check(lib.hostfirst_strict_get(ctypes.byref(t), ctypes.byref(p)))
    return bool(t.value or p.value)


def handle_count() -> int:
    """How many library handles (files, views, buffers, gathers, loads, plans, ...) are alive in this process
    now: a leak check for tests (the count returns to where it was once every object is gone and collected)."""
    n = ctypes.c_size_t()
    check(lib.hostfirst_handle_count(ctypes.byref(n)))
    return n.value
