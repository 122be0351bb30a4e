"""Calling convention helpers shared by every module of the binding."""

import ctypes

from . import _lib
from ._errors import error_for

lib = _lib.load_library()


def check(status):
    """Raises the exception for a non-OK status, with the thread's last error message (and fit numbers)."""
    if status == 0:
        return
    msg = (lib.hostfirst_last_error() or b"").decode("utf-8", "replace")
    err = error_for(status, msg)
    if status == 32:
        fit = _lib.FitInfo()
        if lib.hostfirst_last_fit(ctypes.byref(fit)) == 0:
            err.needed, err.free, err.total = fit.needed, fit.free, fit.total
            err.device = _device_from_c(fit.device) if fit.device.kind else None
    raise err


def _device_from_c(d):
    from ._devices import Device

    return Device._from_c(d)


def text(p):
    return (p or b"").decode("utf-8", "replace")
