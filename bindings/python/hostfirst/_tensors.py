"""Host-first loading: files (a read-only mapping of name -> View), zero-copy tensor views and row slices,
numpy arrays (`__array_interface__`, `__array__`), DLPack export, and placement (`View.to`, `load`)."""

from __future__ import annotations

import ctypes
import difflib
import os
import warnings
import weakref
from collections.abc import Mapping
import operator
import sys
import threading
from typing import (Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Set, SupportsIndex, Tuple, Union, cast,
                    overload)

import numpy as np

from . import _abi, _dlpack, _dtypes, _fast
from ._core import Device, PathLike, as_device, c_path, c_string, check, check_path, text
from ._errors import STATUS, UnmatchedRuleWarning, error_named
from ._lib import lib

if sys.version_info >= (3, 10):
    from types import EllipsisType
else:  # pragma: no cover - Python 3.9
    EllipsisType = Any

Rules = Union[Mapping[str, str], Iterable[Union[str, Tuple[str, str]]]]


class _Carrier:
    """Hands numpy one `__array_interface__` and keeps the owner (a View or Buffer) alive as the base."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: Any, interface: Dict[str, Any]):
        self.owner, self.__array_interface__ = owner, interface


class _HostArrayMixin:
    """numpy's protocols for tensors in host memory: `__array_interface__` (v3; numpy 1.x and 2.x, no DLPack
    needed) for the dtypes numpy has built in, `__array__` for every dtype numpy can hold (bf16/fp8 through
    ml_dtypes). Never an object array: a dtype numpy cannot hold raises TypeError."""

    __slots__ = ()
    dtype_code: int
    shape: Tuple[int, ...]
    nbytes: int

    def _host_memory(self) -> Tuple[int, bool]:  # (address, read_only); AttributeError when not host memory
        raise NotImplementedError

    def _byte_strides(self, itemsize: int) -> Optional[Tuple[int, ...]]:  # None: C-contiguous
        return None

    def _interface(self, typestr: str, itemsize: int) -> Dict[str, Any]:
        ptr, read_only = self._host_memory()
        if not ptr:  # numpy refuses NULL data; an empty tensor has no bytes to point at
            ptr = ctypes.addressof(_EMPTY)
        return {"version": 3, "shape": self.shape, "typestr": typestr, "data": (ptr, read_only),
                "strides": self._byte_strides(itemsize)}

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        typestr, itemsize = _typestr(self.dtype_code)
        if typestr is None:  # an ml_dtypes dtype (no typestr names it) or none: __array__ handles it
            raise AttributeError("__array_interface__ (this dtype goes through __array__)")
        return self._interface(typestr, itemsize)

    def numpy(self) -> np.ndarray:
        """A numpy array on the same memory (zero-copy; read-only for file views); bf16/fp8 via ml_dtypes.
        TypeError for device memory (use __dlpack__, or tobytes() to copy) and dtypes numpy cannot hold."""
        try:
            self._host_memory()
        except AttributeError as e:
            raise TypeError(str(e)) from None
        dt = _dtypes.require_numpy_dtype(self.dtype_code)
        typestr = _dtypes.builtin_typestr(self.dtype_code)
        if typestr is not None:
            return np.asarray(_Carrier(self, self._interface(typestr, dt.itemsize)))
        return np.asarray(_Carrier(self, self._interface(f"<u{dt.itemsize}", dt.itemsize))).view(dt)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise error_named("INVALID_ARGUMENT", f"cannot convert {a.dtype} to {np.dtype(dtype)} without a copy")
            return a.astype(dtype)
        return a.copy() if copy else a


_EMPTY = ctypes.c_uint64(0)
_NOT_FOUND = STATUS["NOT_FOUND"]

_TYPESTRS: Dict[int, Tuple[Optional[str], int]] = {}  # dtype code -> (builtin typestr or None, itemsize)


def _typestr(code: int) -> Tuple[Optional[str], int]:
    r = _TYPESTRS.get(code)
    if r is None:
        ts = _dtypes.builtin_typestr(code)
        r = _TYPESTRS[code] = (ts, np.dtype(ts).itemsize if ts else 0)
    return r


def _describe_shape(shape_ptr: Any, rank: int) -> Tuple[int, ...]:
    return tuple(shape_ptr[:rank]) if rank else ()  # one slice of the C array (not one index per dimension)


_DTYPE_NAMES: Dict[int, str] = {}  # dtype code -> hostfirst_dtype_name (fixed strings of the library)
_NUMPY_DTYPES: Dict[int, "np.dtype[Any]"] = {}  # dtype code -> numpy dtype, for those that have one


def _dtype_name(code: int) -> str:
    name = _DTYPE_NAMES.get(code)
    if name is None:
        name = _DTYPE_NAMES[code] = text(lib.hostfirst_dtype_name(code))
    return name


class _Selection(NamedTuple):
    """What an index of a View selects (`View._select`)."""

    view: "View"  # the narrowed view holding every selected element
    after: Optional[Tuple[Any, ...]]  # numpy's index into it for dropped dimensions and steps; None: the view
    empty: Optional[Tuple[int, ...]]  # the shape of an empty result (an index selecting nothing), else None


class View(_HostArrayMixin):
    """A zero-copy, read-only view of one tensor of an open file, or of a part of one.

    `.name .dtype .dtype_name .shape .nbytes .strides`; `np.asarray(t)`, `t.numpy()`, `np.from_dlpack(t)` and
    `jnp.asarray(t)` read the mapping itself (read-only). The tensor, and every array made from it, keeps the
    file mapping alive on its own.

    The mapping is the file: if the file is rewritten in place (`open(path, "wb")`, `np.save`) its new bytes show
    through, and **reading a view or such an array after the file was truncated kills the process with SIGBUS**
    (no exception can be raised). A file replaced by a rename is harmless (the mapping keeps the old one). Where
    a file may change under you, copy: `np.array(t)`, `t.tobytes()` and `t.to("cpu")` read with pread (a
    truncated file raises TruncatedError), as do the drop-ins (`hostfirst.numpy.load_file`, `safe_open`).

    Indexing is numpy's basic indexing, zero-copy: slices with step 1 and `...` on any dimensions give a
    View (`t[0:1024]`, `t[:, 128:256]`, `t[..., :64]`; an inner-dimension slice is strided, and `.to()`,
    `tobytes()` and DLPack give its packed bytes); integer indices and other steps (`t[3]`, `t[:, 0]`,
    `t[::2]`) give a read-only numpy array on the same mapping (numpy holds a dropped dimension or a step;
    the library's views do not).
    """

    __slots__ = ("_h", "_finalizer", "name", "dtype_name", "dtype_code", "shape", "nbytes", "data_ptr",
                 "alignment", "strides", "_copy", "__weakref__")

    def __init__(self, handle: Optional[int]):
        """`handle`: a hostfirst_view* the library returned; this View owns it."""
        self._h = handle
        self._finalizer = weakref.finalize(self, lib.hostfirst_view_free, handle)
        i = _abi.ViewInfo()
        i.struct_size = ctypes.sizeof(i)
        check(lib.hostfirst_view_describe(handle, ctypes.byref(i)))
        self.name = text(i.name)
        self.dtype_code = i.dtype
        self.dtype_name = _dtype_name(i.dtype)
        self.shape = _describe_shape(i.shape, i.rank)
        self.nbytes = i.nbytes
        self.data_ptr = i.data or 0
        self.alignment = i.alignment
        #: Element strides of a strided view (an inner-dimension slice), None for a C-contiguous one.
        self.strides: Optional[Tuple[int, ...]] = _describe_shape(i.strides, i.rank) if i.strides else None
        self._copy: Optional[np.ndarray] = None

    @classmethod
    def _described(cls, d: Any) -> "View":
        """A View from the native extension's description of a view it made (`_fast.Described`): what __init__
        reads with hostfirst_view_describe, in one C call; the capsule it holds frees the view."""
        self = cls.__new__(cls)
        self._finalizer, self._h, self.name, self.dtype_code, self.shape, self.nbytes, data, self.alignment, \
            self.strides = d
        self.data_ptr = data or 0
        self.dtype_name = _dtype_name(self.dtype_code)
        self._copy = None
        return self

    @property
    def dtype(self) -> "np.dtype[Any]":
        """The tensor's numpy dtype (bf16 and fp8: ml_dtypes' dtypes). The packed F4/F6 dtypes have none
        (numpy stores at least a byte per element), nor do bf16/fp8 without ml_dtypes: TypeError naming the
        tensor. `.dtype_name`, the safetensors name ("F4", "BF16"), is there for every dtype."""
        dt = _NUMPY_DTYPES.get(self.dtype_code)
        if dt is None:
            try:
                dt = _NUMPY_DTYPES[self.dtype_code] = _dtypes.require_numpy_dtype(self.dtype_code)
            except TypeError as e:
                raise TypeError(f"tensor '{self.name}' has no numpy dtype: {e}; its .dtype_name is "
                                f"{self.dtype_name!r}") from None
        return dt

    def _host_memory(self) -> Tuple[int, bool]:
        if self.data_ptr or not self.nbytes:
            return self.data_ptr, True
        # A file read with owned reads (a network or user-space file system: File.read_engine) hands out no
        # mapping: the view's packed bytes are read once with pread into memory this View keeps.
        if self._copy is None:
            c = np.empty(self.nbytes, dtype=np.uint8)
            check(lib.hostfirst_view_copy(self._h, c.ctypes.data, self.nbytes, None))
            self._copy = c
        return self._copy.ctypes.data, True

    def _byte_strides(self, itemsize: int) -> Optional[Tuple[int, ...]]:
        if self.strides is None or (not self.data_ptr and self.nbytes):
            return None  # C-contiguous, or the packed copy of a file read with owned reads
        return tuple(s * itemsize for s in self.strides)

    def __repr__(self) -> str:
        return f"View('{self.name}', {self.dtype_name}, shape={self.shape})"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"len() of a scalar tensor ('{self.name}')")
        return self.shape[0]

    @overload
    def __getitem__(self, key: "Union[slice, EllipsisType]") -> "View": ...

    @overload
    def __getitem__(self, key: "Union[SupportsIndex, Tuple[Union[slice, SupportsIndex, EllipsisType], ...]]") \
        -> "Union[View, np.ndarray]": ...

    def __getitem__(self, key: Any) -> "Union[View, np.ndarray]":
        sel = self._select(key)
        if sel.empty is not None:  # an index selecting nothing: numpy's empty result, nothing to read
            return np.empty(sel.empty, _dtypes.require_numpy_dtype(self.dtype_code))
        # (a whole-tensor index gives the tensor itself: a view is immutable)
        if sel.after is None:
            return sel.view
        try:
            a = sel.view.numpy()
        except TypeError as e:
            raise TypeError(f"tensor '{self.name}': integer indices and steps give a numpy array, and {e}; "
                            "slice with step 1 instead (a View)") from None
        return cast(np.ndarray, a[sel.after])

    def _select(self, key: Any) -> "_Selection":
        """numpy's basic indexing as (the narrowed view holding every element the index selects, numpy's index
        into that view for what remains: dropped dimensions and steps, or None when the view is the result). An
        index that selects nothing (an empty list, as `t[[]]`) gives the result's shape in `empty` instead."""
        keys = key if isinstance(key, tuple) else (key,)
        ellipses = 0
        if type(key) is not slice:  # (one slice, the common index, has no list and no ellipsis to look for)
            if any(isinstance(k, (list, np.ndarray)) for k in keys):
                return self._select_empty(keys)
            ellipses = sum(k is Ellipsis for k in keys)
        if ellipses > 1:
            raise error_named("OUT_OF_RANGE", f"tensor '{self.name}': an index can only have a single ellipsis "
                                              "('...')")
        if ellipses:
            at = keys.index(Ellipsis)
            keys = keys[:at] + (slice(None),) * max(0, self.ndim - len(keys) + 1) + keys[at + 1:]
        if len(keys) > self.ndim:
            raise error_named("OUT_OF_RANGE", f"too many indices for tensor '{self.name}': it has {self.ndim} "
                                              "dimensions, "
                             f"{len(keys)} were indexed")
        ranges: List[Tuple[int, int, int]] = []  # (dim, start, length) to narrow
        after: List[Any] = []  # numpy's index into the narrowed view
        numpy_needed = False
        for dim, k in enumerate(keys):
            size = self.shape[dim]
            if isinstance(k, slice):
                start, stop, step = k.indices(size)
                r = range(start, stop, step)
                if not len(r):  # selects nothing (also a negative step that starts before the first element)
                    ranges.append((dim, 0, 0))
                    after.append(slice(None))
                    continue
                ranges.append((dim, min(r[0], r[-1]), abs(r[-1] - r[0]) + 1))
                after.append(slice(None, None, step) if step != 1 else slice(None))
                numpy_needed |= step != 1 and len(r) > 1
            elif isinstance(k, (bool, np.bool_)) or k is None:
                raise TypeError(f"tensor '{self.name}': index {k!r} is not basic indexing by ints, slices and "
                                "'...' (index np.asarray(t) for numpy's other forms)")
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    raise TypeError(f"tensor '{self.name}': indices are ints, slices and '...', not "
                                    f"{type(k).__name__} (index np.asarray(t) for numpy's other forms)") from None
                if not -size <= i < size:
                    raise error_named("OUT_OF_RANGE", f"index {i} is out of range for dimension {dim} of tensor "
                                                      f"'{self.name}' (size {size})")
                ranges.append((dim, i % size, 1))
                after.append(0)
                numpy_needed = True
        view = self
        for dim, start, length in ranges:
            if (start, length) != (0, self.shape[dim]):
                native = _fast.native
                d = None if native is None else native.narrow(view._h, dim, start, length)
                if d is not None:  # one C call (None: the ctypes call below raises the error)
                    view = View._described(d)
                    continue
                out = ctypes.c_void_p()
                check(lib.hostfirst_view_narrow(view._h, dim, start, length, ctypes.byref(out)))
                view = View(out.value)
        return _Selection(view, tuple(after) if numpy_needed else None, None)

    def _select_empty(self, keys: Tuple[Any, ...]) -> "_Selection":
        """An index with lists (numpy's integer-array indexing): only empty ones select nothing without reading
        (`t[[]]`, `t[:, []]`); the result's shape is numpy's, found on a stand-in with this tensor's shape."""
        for k in keys:
            if isinstance(k, (list, np.ndarray)) and (np.size(k) or np.asarray(k).dtype.kind == "b"):
                raise TypeError(f"tensor '{self.name}': index {k!r} is integer-array (fancy) indexing, which reads "
                                "what it selects in any order; take the rows with slices, or index a numpy copy "
                                "(np.array(t)[...])")
        stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=self.shape, strides=(0,) * self.ndim)
        try:
            shape = stand_in[tuple(np.asarray(k, dtype=np.intp) if isinstance(k, (list, np.ndarray)) else k
                                   for k in keys)].shape
        except IndexError as e:
            raise error_named("OUT_OF_RANGE", f"tensor '{self.name}' of shape {list(self.shape)}: {e}") from None
        return _Selection(self, None, shape)

    def prefault(self) -> bool:
        """Maps this tensor's pages now (before a training loop gathers from it), so reads through the mapping
        take no page faults. Returns True when the pages were mapped, False when the system offers only
        read-ahead advice or the tensor is over a memory buffer. Raises OutOfMemoryError (with the fit numbers)
        for a tensor larger than available memory, TruncatedError for a file that shrank."""
        populated = ctypes.c_int32(0)
        check(lib.hostfirst_view_prefault(self._h, ctypes.byref(populated)))
        return populated.value == 1

    def tobytes(self) -> bytes:
        """A copy of the bytes, read with pread (a truncated file raises TruncatedError, never SIGBUS)."""
        buf = ctypes.create_string_buffer(max(self.nbytes, 1))
        check(lib.hostfirst_view_copy(self._h, buf, self.nbytes, None))
        return buf.raw[: self.nbytes]

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_dlpack.KDLCPU, 0)

    def __dlpack__(self, *, stream: Optional[int] = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
        """DLPack export as the consumer asks: max_version >= (1, 0) -> the versioned capsule on the read-only
        mapping (READ_ONLY flag); otherwise the legacy "dltensor" capsule on a private copy-on-write mapping
        (writable, a write never reaches the file). copy=True: a copy; copy=False where a copy is needed, or a
        device it cannot reach: BufferError. See hostfirst_view_to_dlpack in the C header."""
        return _dlpack.export(lib.hostfirst_view_to_dlpack, self._h, stream, max_version, dl_device, copy)

    def to(self, device: Union[Device, str] = "default", *, copy_on_write: bool = False, resident: bool = False,
           threads: int = 0, staging_mib: int = 0, page_cache: str = "keep") -> "Buffer":
        """Puts this tensor on a device ("cpu", "cuda:0", "cuda_host", or "default" through the default stack;
        strict mode refuses "default"): fit-checked before allocating; returns a Buffer (DLPack-exportable).

        `copy_on_write=True` (cpu targets of file views): a private writable mapping of the tensor's pages
        instead of a copy (milliseconds for gigabytes in the page cache; a write never reaches the file, but
        pages not yet written still show other processes' writes to the file, and truncating it raises SIGBUS).
        `resident=True` (CUDA targets): page-lock the mapped range once and copy straight from it (for data
        transferred many times). `threads`: reader threads (0: the CPUs available, at most 16).
        `staging_mib`: page-locked staging for CUDA puts in MiB (0: 256). `page_cache` ("keep", the default;
        "drop"; "bypass"): what the put leaves in the page cache (hostfirst_put_options.page_cache); anything else
        is InvalidArgumentError naming page_cache. See hostfirst_put in the C header."""
        from ._page_cache import page_cache_value  # imports this module

        policy = page_cache_value(page_cache)
        opts = _abi.PutOptions()
        check(lib.hostfirst_put_options_init(ctypes.byref(opts), ctypes.sizeof(opts)))
        opts.page_cache = policy
        opts.copy_on_write, opts.resident = int(bool(copy_on_write)), int(bool(resident))
        if int(threads) < 0 or int(staging_mib) < 0:
            raise error_named("INVALID_ARGUMENT",
                              f"threads ({threads}) and staging_mib ({staging_mib}) must not be negative")
        opts.threads, opts.staging_bytes = int(threads), int(staging_mib) << 20
        out = ctypes.c_void_p()
        if isinstance(device, str) and device.strip().lower() == "default":
            check(lib.hostfirst_put(self._h, None, ctypes.byref(opts), ctypes.byref(out), None))
        else:
            d = as_device(device)._c()
            check(lib.hostfirst_put(self._h, ctypes.byref(d), ctypes.byref(opts), ctypes.byref(out), None))
        return Buffer(out.value)


class Buffer(_HostArrayMixin):
    """Memory owned on one device (cpu, cuda:N, cuda_host) holding a tensor's bytes. `.device .dtype
    .dtype_name .shape .nbytes .address`; `tobytes()` copies back to the host; `__dlpack__` exports it
    (writable); host buffers also speak `__array_interface__`/`__array__` (writable)."""

    device: Device
    name: str
    dtype_code: int
    dtype_name: str
    dtype: Any
    shape: Tuple[int, ...]
    nbytes: int
    address: int

    def __init__(self, handle: Optional[int], _info: Optional[_abi.BufferInfo] = None):
        """`handle`: a hostfirst_buffer* the library returned; this Buffer owns it. `_info`: a
        hostfirst_buffer_info (struct_size set) to describe into, reused across calls by `load`."""
        i = self._own(handle, _info)
        self.__dict__.update(_layout(i))
        self.name = text(i.name)
        self.address = i.address

    @classmethod
    def _of_batch(cls, handle: Optional[int], layout: Dict[str, Any]) -> "Buffer":
        """A Buffer for a batch of a gather: as Buffer(handle), except that what the batches of one gather share
        (device, dtype, shape, size) is decoded once into the gather's `layout` dict and reused after."""
        b = cls.__new__(cls)
        i = b._own(handle, None)
        if layout.get("dtype_code") != i.dtype or layout.get("nbytes") != i.nbytes or \
                len(layout["shape"]) != i.rank:
            layout.clear()
            layout.update(_layout(i))
        b.__dict__.update(layout)
        b.name = text(i.name)
        b.address = i.address
        return b

    def _own(self, handle: Optional[int], info: Optional[_abi.BufferInfo]) -> _abi.BufferInfo:
        """Takes ownership of `handle` (freed with this object, also if describing it fails) and describes it."""
        self._h = handle
        self._release_stream: List[Optional[int]] = [None]
        self._finalizer = weakref.finalize(self, _free_buffer, handle, self._release_stream)
        if info is None:
            info = _abi.BufferInfo()
            info.struct_size = ctypes.sizeof(info)
        check(lib.hostfirst_buffer_describe(handle, ctypes.byref(info)))
        return info

    def _host_memory(self) -> Tuple[int, bool]:
        if not self.device.is_host:
            raise AttributeError(f"{self!r} is in device memory: use __dlpack__ (or tobytes() to copy)")
        return self.address, False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Buffer('{self.name}', {self.dtype_name}, shape={self.shape}, device='{self.device}')"

    def tobytes(self) -> bytes:
        buf = ctypes.create_string_buffer(max(self.nbytes, 1))
        check(lib.hostfirst_buffer_copy_to_host(self._h, buf, self.nbytes))
        return buf.raw[: self.nbytes]

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self.device.dlpack_device

    def __dlpack__(self, *, stream: Optional[int] = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
        """DLPack export of the buffer's own memory (writable), versioned for max_version >= (1, 0), else
        legacy. On CUDA the consumer's `stream` (1: legacy default, 2: per-thread default, > 2: a CUstream,
        -1: the consumer synchronises; None: the legacy default) waits on the device for hostfirst's last
        write, and hostfirst's next write into a released batch waits for the consumer's work: for a CUstream,
        on that stream; for 1 and 2, on the legacy default stream, which is ordered after every blocking stream
        (every thread's per-thread default stream too), since the release may run on another thread. copy as
        for View."""
        return _dlpack.export(lib.hostfirst_buffer_to_dlpack, self._h, stream, max_version, dl_device, copy)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """CUDA Array Interface v3 (CuPy, Numba, torch) for buffers on cuda:N. Reading it makes the legacy
        default stream wait for hostfirst's last write and reports that stream (1) to the consumer, and the
        buffer's release later records the legacy default stream for hostfirst's next write."""
        typestr = _dtypes.builtin_typestr(self.dtype_code)
        if self.device.kind != "cuda" or typestr is None:
            raise AttributeError("__cuda_array_interface__ (CUDA buffers of numpy's builtin dtypes only)")
        check(lib.hostfirst_buffer_sync_stream(self._h, _LEGACY_DEFAULT_STREAM))
        self._release_stream[0] = _LEGACY_DEFAULT_STREAM
        return {"version": 3, "shape": self.shape, "typestr": typestr, "data": (self.address, False),
                "strides": None, "stream": _LEGACY_DEFAULT_STREAM}


_LEGACY_DEFAULT_STREAM = 1  # DLPack's and the CUDA Array Interface's value for CUDA's legacy default stream


def _layout(i: _abi.BufferInfo) -> Dict[str, Any]:
    """A described buffer's device, dtype (code, name, the dtype reported) shape and size, as attributes."""
    return {"device": Device._from_c(i.device), "dtype_code": i.dtype, "dtype_name": _dtype_name(i.dtype),
            "dtype": _dtypes.reported(i.dtype), "shape": _describe_shape(i.shape, i.rank), "nbytes": i.nbytes}


def _free_buffer(handle: Optional[int], release_stream: List[Optional[int]]) -> None:
    if release_stream[0] is not None:  # handed out by address: hostfirst's next write waits for the consumer
        lib.hostfirst_buffer_record_stream(handle, release_stream[0])
    lib.hostfirst_buffer_free(handle)


def _load_names(handle: Optional[int]) -> List[str]:
    """Every tensor name of a load in file order, from one packed buffer (`hostfirst_load_names`)."""
    need = ctypes.c_size_t()
    check(lib.hostfirst_load_names(handle, None, 0, ctypes.byref(need)))
    if not need.value:
        return []
    buf = ctypes.create_string_buffer(need.value)
    check(lib.hostfirst_load_names(handle, buf, need.value, ctypes.byref(need)))
    return buf.raw[: need.value - 1].decode("utf-8", "surrogateescape").split("\0")


class _Load:
    """A hostfirst_load handle, shared by the Buffers of one `load` that have not taken a handle of their own
    yet; freed when the last of them has (or is gone). Its tensors are described in bulk, once, the first time
    one of them is asked for anything but its name (`hostfirst_load_entries`: one call for the whole load)."""

    __slots__ = ("h", "_finalizer", "kind", "buf", "outs", "_entries", "_columns", "__weakref__")

    def __init__(self, handle: Optional[int]):
        self.h = handle
        self._finalizer = weakref.finalize(self, lib.hostfirst_load_free, handle)
        # Output cells reused by every _LoadedBuffer._take (under _take_lock; values are copied out at once).
        self.kind, self.buf = ctypes.c_uint32(), ctypes.c_void_p()
        self.outs = (ctypes.byref(self.kind), ctypes.byref(self.buf), None)
        self._entries: Optional[Any] = None
        self._columns: Optional[np.ndarray] = None

    def names(self) -> List[str]:
        return _load_names(self.h)

    def row(self, i: int) -> Tuple[int, int, int, int, int, int, int, int]:
        """Tensor `i` of the load's table, read once for every tensor (`hostfirst_load_entries`) and turned into
        rows by numpy: (kind, dtype, device kind, device ordinal, rank, shape address, nbytes, address)."""
        return self.table()[i]

    def table(self) -> List[Tuple[int, int, int, int, int, int, int, int]]:
        """Every row (see `row`), in file order."""
        rows = self._entries
        if rows is None:
            a = self.columns()
            with _take_lock:
                rows = self._entries
                if rows is None:
                    rows = self._entries = list(zip(*(a[f].tolist() for f in _COLUMNS)))
        return rows

    def columns(self) -> np.ndarray:
        """The load's table as one numpy structured array, a record per tensor in file order, with the fields
        k (kind), d (dtype), dk, do (device kind, ordinal), r (rank), s (shape address), n (nbytes), a (address)
        (`hostfirst_load_entries`, called once)."""
        a = self._columns
        if a is None:
            with _take_lock:
                a = self._columns
                if a is None:
                    n = ctypes.c_size_t()
                    E = _abi.LoadEntry
                    size = ctypes.sizeof(E)
                    check(lib.hostfirst_load_entries(self.h, None, 0, size, ctypes.byref(n)))
                    t = (E * n.value)()
                    check(lib.hostfirst_load_entries(self.h, t, n.value, size, ctypes.byref(n)))
                    dev = E.device.offset
                    layout = np.dtype({"names": list(_COLUMNS),
                                       "formats": ["<u4", "<u4", "<i4", "<i4", "<u4", "<u8", "<u8", "<u8"],
                                       "offsets": [E.kind.offset, E.dtype.offset, dev, dev + 4, E.rank.offset,
                                                   E.shape.offset, E.nbytes.offset, E.address.offset],
                                       "itemsize": size})
                    a = self._columns = np.frombuffer(memoryview(t).cast("B"), dtype=layout, count=n.value)
        return a


_COLUMNS = ("k", "d", "dk", "do", "r", "s", "n", "a")  # the fields of _Load.columns, in _Load.row's order


_DEVICES: Dict[Tuple[int, int], Device] = {}  # (kind, ordinal) -> Device (an immutable value, shared)
_DTYPE_INFO: Dict[int, Tuple[str, Any]] = {}  # dtype code -> (dtype_name, reported dtype)


def _device(kind: int, ordinal: int) -> Device:
    d = _DEVICES.get((kind, ordinal))
    if d is None:
        d = _DEVICES[(kind, ordinal)] = Device._from_c(_abi.Device(kind, ordinal))
    return d


def _dtype_info(code: int) -> Tuple[str, Any]:
    r = _DTYPE_INFO.get(code)
    if r is None:
        r = _DTYPE_INFO[code] = (_dtype_name(code), _dtypes.reported(code))
    return r


_META = frozenset(("device", "dtype_code", "dtype_name", "dtype", "shape", "nbytes", "address"))
_HANDLE = frozenset(("_h", "_release_stream", "_finalizer"))
_take_lock = threading.RLock()


class _LoadedBuffer(Buffer):
    """A Buffer of `load`. Its description (device, dtype, shape, nbytes, address) comes from the load's bulk
    table the first time it is asked for; it takes a hostfirst_buffer handle of its own (`hostfirst_load_get`)
    only when something needs one (tobytes, DLPack, the CUDA array interface, a gather source). Until then it
    holds the load, and with it the tensor's memory: a load's memory is never released while one of its Buffers
    is alive, and nothing in it changes. numpy's `__array_interface__` needs no handle."""

    def __init__(self, load: _Load, index: int, name: str):  # noqa: super().__init__ is not called: see _take
        self._load: Optional[_Load] = load
        self._index = index
        self.name = name

    def _describe(self) -> None:
        load = self.__dict__.get("_load")
        if load is None:  # the handle was taken: the description came with it
            return
        kind, code, dev_kind, dev_ordinal, rank, shape, nbytes, address = load.row(self._index)
        if kind != _abi.HOSTFIRST_LOADED_BUFFER:
            raise error_named("INVALID_ARGUMENT", f"tensor '{self.name}' of this load is a host view, not a buffer")
        d = self.__dict__
        d["device"] = _device(dev_kind, dev_ordinal)
        d["dtype_code"] = code
        d["dtype_name"], d["dtype"] = _dtype_info(code)
        d["shape"] = tuple((ctypes.c_uint64 * rank).from_address(shape)) if rank else ()
        d["nbytes"] = nbytes
        d["address"] = address

    def _take(self) -> None:
        with _take_lock:
            load = self.__dict__.get("_load")
            if load is None:  # another thread took it
                return
            if "address" not in self.__dict__:
                self._describe()
            load.buf.value = None
            check(lib.hostfirst_load_get(load.h, c_string(self.name), *load.outs))
            if not load.buf.value:
                raise error_named("INVALID_ARGUMENT", f"tensor '{self.name}' of this load is a host view, not a buffer")
            handle = load.buf.value
            self._h = handle
            self._release_stream = [None]
            self._finalizer = weakref.finalize(self, _free_buffer, handle, self._release_stream)
            self._load = None

    def __getattr__(self, attr: str) -> Any:  # only for attributes not set yet
        if attr in _META:
            if self.__dict__.get("_load") is not None:
                with _take_lock:
                    self._describe()
                return self.__dict__[attr]
        elif attr in _HANDLE and self.__dict__.get("_load") is not None:
            self._take()
            return getattr(self, attr)
        raise AttributeError(attr)


class File(Mapping[str, View]):
    """An open file of named tensors: a read-only mapping of tensor name -> View, in file order. A safetensors
    file or sharded set, a NumPy .npy file (one tensor, "data"), an llm.c token shard ("tokens"), a Megatron
    indexed dataset ("tokens", "sequence_lengths", "sequence_pointers", "document_indices") or a headerless raw
    file (`hostfirst.open_raw`).

    `len(f)`, `name in f`, `f[name]`, iteration, `.metadata` (dict of str), `.path`, `.format` ("safetensors",
    "safetensors_index", "npy", "llmc", "megatron", "raw"). Tensors stay valid after the file is closed. Use as
    a context manager or call `close()`; garbage collection closes it too. A missing name raises KeyError
    (NotFoundError) naming the closest names the file has.
    """

    _memory: Optional[bytes] = None  # the image of a File over memory (_from_memory), kept alive with it

    def __init__(self, path: PathLike, format: Optional[str] = None, *, _raw: Optional[Tuple[Any, ...]] = None):
        raw = c_path(path)
        self.path = os.fsdecode(raw)
        h = ctypes.c_void_p()
        if _raw is not None:
            code, shape, offset, name = _raw
            dims = (ctypes.c_uint64 * max(1, len(shape)))(*shape)
            check_path(lib.hostfirst_file_open_raw(raw, code, dims, len(shape), offset, c_string(name, "name"),
                                                   ctypes.byref(h)), raw)
        elif format is None:
            check_path(lib.hostfirst_file_open(raw, ctypes.byref(h)), raw)
        else:
            check_path(lib.hostfirst_file_open_format(raw, format_code(format), ctypes.byref(h)), raw)
        self._adopt(h.value)

    @classmethod
    def _from_memory(cls, data: bytes) -> "File":
        """A File over a safetensors image in `data` (hostfirst_file_open_memory, nothing copied), which the File
        keeps alive. For loads that copy every tensor out (`load(bytes)`): Views of it must not outlive it."""
        self = cls.__new__(cls)
        self.path = "<bytes>"
        h = ctypes.c_void_p()
        check(lib.hostfirst_file_open_memory(data, len(data), ctypes.byref(h)))
        self._memory = data
        self._adopt(h.value)
        return self

    def _adopt(self, handle: Optional[int]) -> None:
        """Takes ownership of an open hostfirst_file handle (freed with this object) and reads its table."""
        self._h: Optional[int] = handle
        h = ctypes.c_void_p(handle)
        self._finalizer = weakref.finalize(self, lib.hostfirst_file_free, h.value)
        fmt = ctypes.c_uint32()
        check(lib.hostfirst_file_format(self._h, ctypes.byref(fmt)))
        self.format: str = text(lib.hostfirst_format_name(fmt.value)).lower()
        n = ctypes.c_size_t()
        check(lib.hostfirst_file_tensor_count(self._h, ctypes.byref(n)))
        self._count = n.value
        self._listed: Optional[Tuple[List[str], Set[str]]] = None  # (names, set of them), listed on first use
        m = ctypes.c_size_t()
        check(lib.hostfirst_file_metadata_count(self._h, ctypes.byref(m)))
        md = {}
        for i in range(m.value):
            k, v = ctypes.c_char_p(), ctypes.c_char_p()
            check(lib.hostfirst_file_metadata_get(self._h, i, ctypes.byref(k), ctypes.byref(v)))
            md[text(k.value)] = text(v.value)
        self.metadata: Dict[str, str] = md

    def sequence_spans(self, indices: Any) -> Tuple[np.ndarray, np.ndarray]:
        """A Megatron dataset's sequences `indices` as (starts, lengths): uint64 arrays, the element offset of
        each sequence's first token in f["tokens"] and its length (hostfirst_file_sequence_spans). Document d
        is sequences f["document_indices"][d] to f["document_indices"][d + 1]."""
        idx = np.ascontiguousarray(np.asarray(indices, dtype=np.int64).reshape(-1))
        if idx.size and idx.min() < 0:
            raise error_named("OUT_OF_RANGE", f"sequence index {int(idx.min())} is negative")
        idx = idx.astype(np.uint64)
        starts, lengths = np.empty(idx.size, np.uint64), np.empty(idx.size, np.uint64)
        u64p = ctypes.POINTER(ctypes.c_uint64)
        check(lib.hostfirst_file_sequence_spans(self._handle(), idx.ctypes.data_as(u64p), idx.size,
                                                starts.ctypes.data_as(u64p), lengths.ctypes.data_as(u64p)))
        return starts, lengths

    def _handle(self) -> int:
        if self._h is None:
            raise error_named("INVALID_HANDLE", f"{self.path}: file is closed")
        return self._h

    def _list(self) -> Tuple[List[str], Set[str]]:
        """The names in file order and as a set, listed once (one call per tensor), the first time asked."""
        listed = self._listed
        if listed is None:
            native = _fast.native
            listed_natively = None if native is None else native.names(self._handle(), self._count)
            if listed_natively is not None:  # one C call (None: a status other than OK, listed below)
                listed = self._listed = (listed_natively, set(listed_natively))
                return listed
            names = []
            p = ctypes.c_char_p()
            pref, name_at, h = ctypes.byref(p), lib.hostfirst_file_tensor_name, self._handle()
            for i in range(self._count):
                check(name_at(h, i, pref))
                names.append(text(p.value))
            listed = self._listed = (names, set(names))
        return listed

    @property
    def _names(self) -> List[str]:
        return self._list()[0]

    @property
    def _set(self) -> Set[str]:
        return self._list()[1]

    @property
    def read_engine(self) -> str:
        """How this file is read (hostfirst_file_read_engine): its file system (name, statfs magic, class), whether
        its views are mapped or read with owned reads (network and user-space file systems: NFS, Lustre, GPFS,
        CephFS, CIFS/SMB, 9p, FUSE, virtiofs) and why, the process's reader, whether io_uring is usable here and
        why not ("io_uring: not usable (io_uring_setup refused ... by this process's seccomp filter ...)"),
        whether O_DIRECT works for it and why not ("refused by ramfs: ..."), and what page_cache="bypass" does
        with it ("page_cache bypass: direct reads (O_DIRECT) ..." or "falls back (O_DIRECT not usable: ...):
        reading through the page cache, then dropping ...").
        HOSTFIRST_MAP=auto|always|never in the environment before opening overrides the choice."""
        n = ctypes.c_size_t()
        check(lib.hostfirst_file_read_engine(self._handle(), None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        check(lib.hostfirst_file_read_engine(self._handle(), buf, len(buf), ctypes.byref(n)))
        return buf.value.decode("utf-8", "replace")

    def missing(self, name: object) -> Exception:
        """The NotFoundError (a KeyError) for a name this file does not have, naming close matches."""
        close = difflib.get_close_matches(str(name), self._names, n=3)
        hint = ("; did you mean " + ", ".join(repr(c) for c in close) + "?") if close else ""
        return error_named("NOT_FOUND", f"no tensor {str(name)!r} in {self.path} ({len(self)} tensors){hint}")

    def __getitem__(self, name: str) -> View:
        # The library looks the name up; the names are listed in Python only for a miss (the close matches), a
        # closed file or a name that is no plain NUL-free str (so a file of 100,000 tensors opens and gives one
        # without listing them).
        if self._h is None or type(name) is not str or "\0" in name:
            if name not in self._set:
                raise self.missing(name)
        native = _fast.native
        d = None if native is None or type(name) is not str else native.view(self._handle(), name)
        if d is not None:  # one C call (None: a status other than OK, which the ctypes call below raises)
            return View._described(d)
        out = ctypes.c_void_p()
        status = lib.hostfirst_file_view(self._handle(), c_string(name, "tensor name"), ctypes.byref(out))
        if status == _NOT_FOUND:
            raise self.missing(name)
        check(status)
        return View(out.value)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        return name in self._set

    def close(self) -> None:
        if self._listed is None and self._h is not None:
            self._list()  # the names stay readable after close, as they always were
        self._release()

    def _release(self) -> None:  # close() without listing the names (for a File no one else sees)
        self._h = None
        self._finalizer()

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"hostfirst.File('{self.path}', {len(self)} tensors)"


def open(path: PathLike, format: Optional[str] = None) -> File:  # noqa: A001 - hostfirst.open, like builtins.open
    """Opens a file of named tensors, recognised by content: safetensors (or a sharded set through its
    *.safetensors.index.json), NumPy .npy, an llm.c token shard, a Megatron indexed dataset (its .idx, its .bin
    or their prefix). Reads the header only and maps the data read-only: its Views are zero-copy views of the
    mapping (see View for what a truncated file does to them). `format` ("safetensors", "npy",
    "llmc", "megatron", "safetensors_index") insists on one: a file of another format raises OtherFormatError
    naming it. Headerless files: `open_raw`. `path`: str, bytes or os.PathLike. Returns a File, a mapping of
    name -> View in file order."""
    return File(path, format)


def open_raw(path: PathLike, dtype: _dtypes.DTypeLike, shape: Optional[Iterable[int]] = None, offset: int = 0,
             name: str = "data") -> File:
    """Opens a headerless file as one tensor `name` of `dtype` and `shape` starting at byte `offset`:
    nanoGPT's `np.memmap("train.bin", dtype=np.uint16, mode="r")` is `hostfirst.open_raw("train.bin",
    "uint16")["data"]`. `shape=None` is 1-D over the whole file after `offset`; a shape's first entry may be
    -1 (rows inferred from the file's size). The file must be exactly offset + the tensor's bytes."""
    code = _dtypes.code_of(dtype)
    dims = [-1] if shape is None else [int(d) for d in shape]
    if any(d < 0 for d in dims[1:]) or (dims and dims[0] < -1):
        raise error_named("INVALID_ARGUMENT", f"shape {tuple(dims)}: only the first entry may be -1 (inferred)")
    infer = 0xFFFFFFFFFFFFFFFF  # HOSTFIRST_FILE_RAW_INFER
    return File(path, _raw=(code, [infer if d == -1 else d for d in dims], int(offset), name))


_FORMATS: Dict[str, int] = {}


def format_code(format: str) -> int:
    """HOSTFIRST_FORMAT_* for a format name ("npy", "llmc", "megatron", "safetensors", ...), from the library."""
    if not _FORMATS:
        unknown = lib.hostfirst_format_name(0xFFFFFFFF)
        for code in range(64):
            name = lib.hostfirst_format_name(code)
            if name != unknown:
                _FORMATS[name.decode().lower()] = code
    found = _FORMATS.get(str(format).lower().replace(".", "").replace("-", "_"))
    if found is None:
        raise error_named("INVALID_ARGUMENT", f"unknown format {format!r}; valid: {', '.join(sorted(_FORMATS))}")
    return found


def rule_pairs(rules: Optional[Rules]) -> List[Tuple[str, str]]:
    """Rules as people write them -> [(pattern, target)], in priority order: a dict {"tokens": "host",
    "*": "default"}, a list of "pattern=target" strings (the CLI's form; the last "=" separates), or a list of
    (pattern, target) pairs, or one "pattern=target" string. Targets: a device spec ("cpu", "cuda:0",
    "cuda_host"), "default" or "host"."""
    if rules is None:
        return []
    if isinstance(rules, (str, bytes)):  # one rule in the CLI's form, not a list of characters
        rules = [rules.decode() if isinstance(rules, bytes) else rules]
    items = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    out = []
    for r in items:
        if isinstance(r, str):
            pattern, sep, target = r.rpartition("=")
            if not sep:
                raise error_named("INVALID_ARGUMENT", f"rule {r!r} is not 'pattern=target'")
        else:
            pattern, target = r
        out.append((str(pattern), str(target)))
    return out


class RuleList:
    """A hostfirst_rules handle holding `rules` (any form `rule_pairs` takes), freed with the object."""

    def __init__(self, rules: Optional[Rules]):
        h = ctypes.c_void_p()
        check(lib.hostfirst_rules_new(ctypes.byref(h)))
        self.h = h.value
        self._finalizer = weakref.finalize(self, lib.hostfirst_rules_free, h.value)
        for pattern, target in rule_pairs(rules):
            check(lib.hostfirst_rules_add(self.h, c_string(pattern, "rule pattern"), c_string(target, "rule target")))


def with_default(file: File, rules: Optional[Rules], default: str) -> List[Tuple[str, str]]:
    """`rules`, then `default` for the tensors no rule matches: ("*", default) is appended when the rules
    leave some tensor unmatched (never otherwise, so it cannot warn as a rule that places nothing). The
    rules name the exceptions; an explicit "*" rule of the caller's takes everything first."""
    pairs = rule_pairs(rules)
    if default.strip().lower() == "host":
        return pairs
    probe = RuleList(pairs)
    ph = ctypes.c_void_p()
    check(lib.hostfirst_plan_make(file._handle(), probe.h, ctypes.byref(ph)))
    try:
        n = ctypes.c_size_t()
        check(lib.hostfirst_plan_tensor_count(ph, ctypes.byref(n)))
        unmatched = False
        for i in range(n.value):
            t = _abi.PlanTensorInfo()
            t.struct_size = ctypes.sizeof(t)
            check(lib.hostfirst_plan_tensor(ph, i, ctypes.byref(t)))
            unmatched |= t.rule < 0
    finally:
        lib.hostfirst_plan_free(ph)
    return pairs + [("*", default)] if unmatched else pairs


def make_plan(file: File, rules: RuleList) -> ctypes.c_void_p:
    """Makes the plan of `rules` over `file` (a new hostfirst_plan handle: the caller frees it) and warns
    (`UnmatchedRuleWarning`, once per rule) about every rule that places no tensor, as the CLI does; in strict
    mode the library refuses such a plan (`UnmatchedRuleError`)."""
    ph = ctypes.c_void_p()
    check(lib.hostfirst_plan_make(file._handle(), rules.h, ctypes.byref(ph)))
    n = ctypes.c_size_t()
    try:
        check(lib.hostfirst_plan_unmatched_rule_count(ph, ctypes.byref(n)))
        for i in range(n.value):
            u = _abi.PlanUnmatchedRuleInfo()
            u.struct_size = ctypes.sizeof(u)
            check(lib.hostfirst_plan_unmatched_rule(ph, i, ctypes.byref(u)))
            warnings.warn(text(u.message), UnmatchedRuleWarning, stacklevel=3)
    except BaseException:
        lib.hostfirst_plan_free(ph)
        raise
    return ph


def _no_views(pairs: List[Tuple[str, str]], default: str) -> bool:
    """True when the plan of `pairs` can hold no host view: no rule targets "host", and every tensor matches
    some rule (`with_default` adds the catch-all for a default other than "host"; else a "*" rule)."""
    if any(t.strip().lower() == "host" for _, t in pairs):
        return False
    return default.strip().lower() != "host" or any(p == "*" for p, _ in pairs)


def load(path: PathLike, rules: Optional[Rules] = None, default: str = "host",
         page_cache: str = "keep") -> Dict[str, Union[View, Buffer]]:
    """Places a whole file by rules (see `rule_pairs` for the forms: dict, "pattern=target" strings, pairs);
    the first match wins, and tensors no rule matches go to `default`: "host" (the default: host first,
    zero-copy views, nothing read) or any target ("default" for the default device, "cpu", "cuda:0").
    Every device is fit-checked before the first byte moves. Returns a dict name -> View (host) or Buffer.

        hostfirst.load(path, rules={"tokens": "host"}, default="default")   # all but tokens on the device

    `page_cache` ("keep", the default; "drop"; "bypass"): what the tensors read to devices leave in the page
    cache (the C header's hostfirst_page_cache); anything else is InvalidArgumentError naming page_cache.
    """
    from . import _page_cache  # imports this module

    opts = _page_cache.load_options(page_cache)
    f = File(path)
    pairs = with_default(f, rules, default)
    r = RuleList(pairs)
    ph, lh = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        ph = make_plan(f, r)
        check(lib.hostfirst_load_run(f._handle(), ph, _page_cache.options_ref(opts), ctypes.byref(lh)))
        if _no_views(pairs, default):
            # Every tensor is a buffer: the names come in one call, each Buffer is described from the load's
            # bulk table when first used and takes a handle only if it needs one (see _LoadedBuffer), so the
            # Python side of a many-tensor load is two C calls and one small object per tensor.
            shared = _Load(lh.value)
            lh = ctypes.c_void_p()  # now freed by `shared`
            return {name: _LoadedBuffer(shared, i, name) for i, name in enumerate(shared.names())}
        out: Dict[str, Union[View, Buffer]] = {}
        # One set of output cells and one info struct for the whole loop (their values are copied out at once;
        # each Buffer or View owns its own new handle).
        kind, buf, view = ctypes.c_uint32(), ctypes.c_void_p(), ctypes.c_void_p()
        outs = (ctypes.byref(kind), ctypes.byref(buf), ctypes.byref(view))
        info = _abi.BufferInfo()
        info.struct_size = ctypes.sizeof(info)
        get = lib.hostfirst_load_get
        for name in _load_names(lh.value):
            check(get(lh, c_string(name), *outs))
            out[name] = Buffer(buf.value, info) if buf.value else View(view.value)
        return out
    finally:
        for h, free in ((lh, lib.hostfirst_load_free), (ph, lib.hostfirst_plan_free)):
            if h.value:
                free(h)
        f._release()
