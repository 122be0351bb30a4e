"""Finding and loading libhostfirst, and declaring its functions from the signature table (_abi.SIGNATURES).

Search order: the library bundled in this package (a wheel), then `HOSTFIRST_LIBRARY`, then a source checkout's
target/{release,debug}, then the system's loader paths.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path
from typing import Iterator

from . import _abi

if sys.byteorder != "little":  # safetensors data is little-endian; views are zero-copy
    raise ImportError("hostfirst's Python binding supports little-endian hosts only")

HEADER_VERSION = (_abi.HOSTFIRST_VERSION_MAJOR, _abi.HOSTFIRST_VERSION_MINOR, _abi.HOSTFIRST_VERSION_PATCH)
HERE = Path(__file__).resolve().parent
NAMES = ("libhostfirst.so", "libhostfirst.dylib", "hostfirst.dll")


def bundled() -> list[Path]:
    """The library shipped inside this package (a wheel stores it under its SONAME, libhostfirst.so.1)."""
    return sorted(p for p in HERE.glob("libhostfirst.so*") if p.is_file()) + [
        HERE / n for n in NAMES[1:] if (HERE / n).is_file()
    ]


def _candidates() -> Iterator[Path]:
    yield from bundled()
    env = os.environ.get("HOSTFIRST_LIBRARY")
    if env:
        yield Path(env)
        return
    root = HERE.parent.parent.parent  # a source checkout: bindings/python/hostfirst -> repository root
    for profile in ("release", "debug"):
        for n in NAMES:
            yield root / "target" / profile / n
    found = ctypes.util.find_library("hostfirst")
    if found:
        yield Path(found)
    for n in NAMES:
        yield Path(n)  # let the dynamic loader search its paths


def declare(lib: ctypes.CDLL) -> None:
    """Sets restype/argtypes of every function of the table the library exports."""
    for name, (res, args) in _abi.SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args


def load_library() -> ctypes.CDLL:
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
        declare(lib)
        got = lib.hostfirst_version_number()
        if (got // 1_000_000, got // 1000 % 1000) != HEADER_VERSION[:2]:
            raise ImportError(
                f"{path} is libhostfirst {lib.hostfirst_version().decode()} but this binding was written for "
                f"{'.'.join(map(str, HEADER_VERSION))}: versions differ in major or minor"
            )
        setattr(lib, "_hostfirst_path", str(path))
        return lib
    raise ImportError("libhostfirst not found; set HOSTFIRST_LIBRARY to its path. Tried:\n  " + "\n  ".join(errors))


lib = load_library()
