"""dtypes as numpy users write and read them.

In: a safetensors name in any case ("U16", "u16", "BF16"), a numpy name ("uint16", "bfloat16",
"float8_e4m3fn"), a numpy scalar type (np.uint16), an np.dtype, or an ml_dtypes type.

Out: `View.dtype` is always an `np.dtype` (bf16 and the fp8 types: ml_dtypes' dtypes); where numpy has none
(the packed sub-byte types F4, F6_E2M3, F6_E3M2, for which numpy stores at least a byte per element; bf16/fp8
without ml_dtypes) reading it raises TypeError naming the tensor. `Buffer.dtype` and `Gather.dtype` are the
numpy dtype wherever numpy has one, else the name (bf16/fp8 without ml_dtypes: their ml_dtypes name, a str;
the packed types: their safetensors name). `.dtype_name` is always the safetensors name.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

import numpy as np

from ._errors import error_named
from ._lib import lib

# safetensors name -> numpy name (the name of numpy's dtype, or of ml_dtypes' for the low-precision types).
NUMPY_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
    "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "F32": "float32", "F64": "float64",
    "C64": "complex64",
    "BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
ML_DTYPES = {"bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu", "float8_e4m3fnuz", "float8_e5m2fnuz"}

DTypeLike = Union[str, "np.dtype[Any]", type]


def _codes() -> Dict[str, int]:
    """safetensors name -> HOSTFIRST_DTYPE_* of every dtype the library knows (codes are small integers)."""
    out = {}
    for code in range(1, 256):
        name = lib.hostfirst_dtype_name(code)
        if name != b"UNKNOWN":
            out[name.decode()] = code
    return out


CODES = _codes()
NAMES = {code: name for name, code in CODES.items()}
_ALIASES: Dict[str, int] = {}
for _st, _code in CODES.items():
    _ALIASES[_st.lower()] = _code
    if _st in NUMPY_NAMES:
        _ALIASES[NUMPY_NAMES[_st]] = _code


def valid_names() -> str:
    return ", ".join(f"{st} ({NUMPY_NAMES[st]})" if st in NUMPY_NAMES else st for st in CODES)


def code_of(dtype: DTypeLike) -> int:
    """HOSTFIRST_DTYPE_* for any accepted spelling; InvalidArgumentError (a ValueError) listing the valid names."""
    if isinstance(dtype, str):
        code = _ALIASES.get(dtype.strip().lower())
        if code is not None:
            return code
    try:
        dt: Optional[np.dtype] = np.dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt is not None and dt.byteorder != ">" and dt.name in _ALIASES:
        return _ALIASES[dt.name]
    what = repr(dtype) + (" (big-endian: safetensors data is little-endian)" if dt is not None and dt.byteorder == ">"
                          else "")
    raise error_named("INVALID_ARGUMENT", f"unknown dtype {what}; valid: {valid_names()}")


def _ml_dtypes() -> Optional[Any]:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def numpy_dtype(code: int) -> Optional["np.dtype[Any]"]:
    """The numpy dtype of a HOSTFIRST_DTYPE_*, or None where there is none (packed types; bf16/fp8 without
    ml_dtypes)."""
    name = NUMPY_NAMES.get(NAMES.get(code, ""))
    if name is None:
        return None
    if name in ML_DTYPES:
        ml = _ml_dtypes()
        return np.dtype(getattr(ml, name)) if ml is not None and hasattr(ml, name) else None
    return np.dtype(name)


def builtin_typestr(code: int) -> Optional[str]:
    """numpy's `__array_interface__` typestr for a dtype numpy has built in ('<u2'); None for the others."""
    name = NUMPY_NAMES.get(NAMES.get(code, ""))
    return None if name is None or name in ML_DTYPES else np.dtype(name).str


def reported(code: int) -> Union["np.dtype[Any]", str]:
    """What `.dtype` reports: the numpy dtype, else the documented name (see the module doc)."""
    dt = numpy_dtype(code)
    if dt is not None:
        return dt
    st = NAMES.get(code, "UNKNOWN")
    return NUMPY_NAMES.get(st, st)


def require_numpy_dtype(code: int) -> "np.dtype[Any]":
    dt = numpy_dtype(code)
    if dt is not None:
        return dt
    st = NAMES.get(code, "UNKNOWN")
    if NUMPY_NAMES.get(st) in ML_DTYPES:
        raise TypeError(f"dtype {st} ({NUMPY_NAMES[st]}) needs the ml_dtypes package for numpy arrays")
    raise TypeError(f"dtype {st} is packed below one byte per element; numpy has no such dtype "
                    "(use __dlpack__ or tobytes())")
