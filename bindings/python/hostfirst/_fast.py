"""The native extension (`hostfirst._native`, hostfirst/_native.c): the hot Python paths in one C call each.

It is a thin skin over the C ABI, not a second implementation: `bind` hands it the addresses of the hostfirst_*
functions of the library `_lib` loaded with ctypes, and every tensor operation it does is one of their calls.
Where it returns None (any non-OK status, a dtype or a view it does not handle) the caller takes the ctypes path,
which redoes the call and raises what it always raised.

Found like the library: the extension built into this package (a wheel: `_native.abi3.so`, `_native.pyd`), then
a source checkout's `target/python-native/` (built by scripts/build-python-native.sh). `HOSTFIRST_PYTHON_NATIVE=0`
turns it off (the ctypes path, silently); where the package carries it, or `HOSTFIRST_PYTHON_NATIVE=1` asks for
it, and it cannot be loaded, the ctypes path runs and NativeExtensionWarning says why.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Tuple

from ._errors import NativeExtensionWarning
from ._lib import HERE, lib

#: The functions the extension calls, in the order its bind() takes them.
BOUND = ("hostfirst_file_view", "hostfirst_view_describe", "hostfirst_view_copy", "hostfirst_view_free",
         "hostfirst_file_tensor_name", "hostfirst_view_narrow")

#: What `view` and `narrow` return: (owner: a capsule that frees the view with the last reference to it, the
#: hostfirst_view* as an int, name, dtype code, shape, nbytes, data address, alignment, element strides or None).
Described = Tuple[Any, int, str, int, Tuple[int, ...], int, int, int, Optional[Tuple[int, ...]]]


class Native(Protocol):
    """What hostfirst/_native.c exports (for mypy --strict: the module is typed through this)."""

    def bind(self, addresses: "tuple[int, ...]") -> None: ...

    def owned(self, file: Optional[int], name: str, dtypes: Dict[int, Any], ndarray: Any,
              limit: int) -> Optional[Any]: ...

    def names(self, file: Optional[int], count: int) -> Optional[List[str]]: ...

    def copy(self, view: Optional[int], dtypes: Dict[int, Any], ndarray: Any, limit: int) -> Optional[Any]: ...

    def view(self, file: Optional[int], name: str) -> Optional[Described]: ...

    def narrow(self, view: Optional[int], dim: int, start: int, length: int) -> Optional[Described]: ...

    def index(self, view: Optional[int], key: Any, dtypes: Dict[int, Any], ndarray: Any,
              limit: int) -> Optional[Any]: ...

    def view_info_size(self) -> int: ...


def _found() -> List[Path]:
    """The extension's files: this package's own first, then a source checkout's build."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    here = sorted(p for p in HERE.glob("_native.*") if p.name.endswith(suffixes))
    built = HERE.parent.parent.parent / "target" / "python-native"
    return here + sorted(p for p in built.glob("_native.*") if p.name.endswith(suffixes))


def _load(path: Path) -> Native:
    loader = importlib.machinery.ExtensionFileLoader("hostfirst._native", str(path))
    spec = importlib.util.spec_from_file_location("hostfirst._native", str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.bind(tuple(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in BOUND))
    from . import _abi

    if module.view_info_size() != ctypes.sizeof(_abi.ViewInfo):
        raise ImportError(f"its hostfirst_view_info is {module.view_info_size()} bytes, the header's "
                          f"{ctypes.sizeof(_abi.ViewInfo)}")
    return module


def load() -> Optional[Native]:
    """The bound extension, or None (then the ctypes path runs; see the module's docstring for the warning)."""
    choice = os.environ.get("HOSTFIRST_PYTHON_NATIVE", "").strip()
    if choice == "0":
        return None
    found = _found()
    if not found:
        if choice == "1":
            warnings.warn("HOSTFIRST_PYTHON_NATIVE=1 but hostfirst's native extension (_native) is not built "
                          f"beside {HERE}: the ctypes path runs", NativeExtensionWarning, stacklevel=3)
        return None
    try:
        return _load(found[0])
    except Exception as e:  # noqa: BLE001 - any failure to load means the ctypes path, said once
        warnings.warn(f"hostfirst's native extension {found[0]} could not be loaded ({type(e).__name__}: {e}): "
                      "the ctypes path runs (same results, slower per call); HOSTFIRST_PYTHON_NATIVE=0 chooses it "
                      "without this warning", NativeExtensionWarning, stacklevel=3)
        return None


native: Optional[Native] = load()
