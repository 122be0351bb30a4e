"""Owned host memory for the drop-in entry points (`safe_open`, `hostfirst.numpy`, `hostfirst.jax`): arrays that
no change to the file can reach.

A zero-copy array on a file's mapping dies with SIGBUS when the file is truncated under it (and shows the new bytes
when it is rewritten in place with `O_TRUNC`, as `open(path, "wb")` and `np.save` do): no Python code runs
between the fault and the end of the process. The safetensors package copies every tensor into memory of its own;
its drop-ins here do the same, with hostfirst's engine filling that memory:

- a whole file (or the tensors a plan puts on `cpu`): one `hostfirst_load_run` reads every tensor into one host
  allocation (the load's arena) with parallel `preadv`/io_uring reads, and each numpy array is a slice of one
  array over that arena, owned by the load (freed when the last array is gone);
- one tensor (`get_tensor`, `get_slice`): `pread` into numpy's own memory (`hostfirst_view_copy`), or for a large
  tensor the parallel put to `cpu` (`View.to("cpu")`).

Reads go through `pread`, never the mapping, so a file that shrank raises TruncatedError instead of killing the
process; and once an array is made, nothing in it refers to the file.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

import numpy as np

from . import _abi, _dtypes, _page_cache
from ._core import check
from ._fast import native
from ._lib import lib
from ._tensors import File, RuleList, View, _Carrier, _Load, make_plan

#: From this size on, one tensor is copied by the parallel put (reader threads) instead of one pread.
PARALLEL_BYTES = 16 << 20


def copy_view(view: View, page_cache: str = "keep") -> np.ndarray:
    """An owned, writable numpy copy of `view`'s elements in C order (a strided view's packed bytes); bf16/fp8
    through ml_dtypes. TypeError for the dtypes numpy cannot hold, TruncatedError (never SIGBUS) for a file that
    shrank since it was opened. `page_cache` other than "keep" ("drop", "bypass", checked by the caller): a put
    to cpu under that policy (hostfirst_put_options.page_cache)."""
    if page_cache != "keep" and view.nbytes:
        _dtypes.require_numpy_dtype(view.dtype_code)
        return view.to("cpu", page_cache=page_cache).numpy()
    if native is not None and view.nbytes < PARALLEL_BYTES:
        fast = native.copy(view._h, native_dtypes(), np.ndarray, PARALLEL_BYTES)
        if fast is not None:  # one C call (None: the path below, which raises what it raises)
            return cast(np.ndarray, fast)
    dt = _dtypes.require_numpy_dtype(view.dtype_code)
    if view.nbytes >= PARALLEL_BYTES:
        return view.to("cpu").numpy()  # a Buffer of its own, filled by reader threads; the array keeps it alive
    out = np.empty(view.shape, dt)
    if view.nbytes:
        check(lib.hostfirst_view_copy(view._h, out.ctypes.data, view.nbytes, None))
    return out


class _DtypeTable(Dict[int, "np.dtype[Any]"]):
    """{dtype code: numpy dtype} for the native extension, filled on first use of each code (`__missing__`, which
    the extension calls on a miss): reading an f32 tensor never imports ml_dtypes (about 0.5 s on first import
    here); a bf16/fp8 tensor imports it then. None for a code numpy has no dtype for (not stored: the extension
    then leaves the tensor to the Python path)."""

    def __missing__(self, code: int) -> Optional["np.dtype[Any]"]:
        dt = _dtypes.numpy_dtype(code)
        if dt is not None:
            self[code] = dt
        return dt


_NATIVE_DTYPES = _DtypeTable()  # dtype code -> numpy dtype, the ones numpy can hold, as they are first asked for


def copy_named(file: File, name: Any) -> Optional[np.ndarray]:
    """`copy_view(file[name])` in one call of the native extension (hostfirst/_native.c): an owned, writable,
    C-contiguous array read with pread (hostfirst_view_copy), without making a View or listing the file's names.
    None where the extension is not loaded, or for anything it leaves to `copy_view` (a non-str name, a status
    other than OK, a dtype numpy cannot hold, a tensor of PARALLEL_BYTES or more): the caller then takes the
    ctypes path, which gives the same array or raises what it always raised."""
    if native is None or type(name) is not str or file._h is None:
        return None
    return cast(Optional[np.ndarray], native.owned(file._h, name, native_dtypes(), np.ndarray, PARALLEL_BYTES))


def index_named(view: Optional[int], key: Any) -> Optional[np.ndarray]:
    """`index_copy(view, key)` of the hostfirst_view* `view` (safe_open's `get_slice(name)[key]`) in one call of the native extension for the
    common indices (an int, a step-1 slice, `...`, or a tuple of them): the view narrowed in C, its packed bytes
    copied with pread into an owned, writable, C-contiguous array, the int-indexed dimensions dropped. None where
    the extension is not loaded, or for anything it leaves to the Python path (`View._select`: steps, lists,
    numpy scalars, an index out of range, a dtype numpy cannot hold, PARALLEL_BYTES or more), which gives the
    same array or raises what it always raised."""
    if native is None:
        return None
    return cast(Optional[np.ndarray], native.index(view, key, native_dtypes(), np.ndarray, PARALLEL_BYTES))


def native_dtypes() -> Dict[int, "np.dtype[Any]"]:
    """The table of numpy dtypes the native extension looks codes up in (see `_DtypeTable`)."""
    return _NATIVE_DTYPES


def run_load(file: File, pairs: List[Tuple[str, str]], page_cache: str = "keep") -> _Load:
    """`hostfirst_load_run` of the plan of `pairs` over `file` (fit-checked first; one job per device), leaving
    the page cache as `page_cache` says ("keep", "drop", "bypass"; checked before anything is read)."""
    opts = _page_cache.load_options(page_cache)
    rules = RuleList(pairs)
    ph = make_plan(file, rules)
    lh = ctypes.c_void_p()
    try:
        check(lib.hostfirst_load_run(file._handle(), ph, _page_cache.options_ref(opts), ctypes.byref(lh)))
    finally:
        lib.hostfirst_plan_free(ph)
    return _Load(lh.value)


def host_arrays(load: _Load, wanted: Optional[Sequence[int]] = None, views: bool = False) -> Dict[int, np.ndarray]:
    """numpy arrays over the cpu buffers of a load (those among `wanted`, indices in file order; None: all),
    writable and owned by the load: each is a slice of one array spanning the load's cpu arena (one
    `__array_interface__` for the whole load, then one np.ndarray call per tensor; the table is read in bulk and
    a rank-1 tensor's length is its size over its itemsize, so only shapes of rank 2 and up are read one by
    one). Rows that are not cpu buffers, and dtypes numpy cannot hold, are left out. `views=True`: the load's
    host views instead, as read-only arrays on the file mapping (zero-copy; the load keeps the mapping alive)."""
    c = load.columns()
    idx = np.arange(len(c)) if wanted is None else np.asarray(wanted, dtype=np.intp)
    t = c[idx]
    if views:
        keep = t["k"] == _abi.HOSTFIRST_LOADED_VIEW
    else:
        keep = (t["k"] == _abi.HOSTFIRST_LOADED_BUFFER) & (t["dk"] == _abi.HOSTFIRST_DEVICE_CPU)
    dtypes = {int(code): _dtypes.numpy_dtype(int(code)) for code in np.unique(t["d"][keep])}
    for code, dt in dtypes.items():
        if dt is None:
            keep &= t["d"] != code
    idx, t = idx[keep], t[keep]
    nbytes, address = t["n"], t["a"]
    full = nbytes > 0
    span: Optional[np.ndarray] = None
    lo = 0
    if full.any():
        lo = int(address[full].min())
        hi = int((address + nbytes)[full].max())
        # One allocation (the arena: each part 64-byte aligned; a file's data: tensors back to back) spans no more
        # than its parts and their padding; anything else (a set's part files, pinned buffers) gets an array per
        # tensor, so that no array covers memory the load does not own.
        if hi - lo <= int(nbytes[full].sum()) + 64 * int(full.sum()):
            span = np.asarray(_Carrier(load, {"version": 3, "shape": (hi - lo,), "typestr": "|u1",
                                              "data": (lo, views), "strides": None}))
    out: Dict[int, np.ndarray] = {}
    rest = np.ones(len(t), bool)  # the rows not in a run
    if span is not None:  # runs of like rank-1 tensors at a constant stride: one 2-D array, its rows (made in C)
        for first, k, stride in _runs(t, dtypes):
            dt = dtypes[int(t["d"][first])]
            assert dt is not None
            n = int(nbytes[first])
            block = np.ndarray((k, n // dt.itemsize), dt, span, int(address[first]) - lo, (stride, dt.itemsize))
            out.update(zip(idx[first:first + k].tolist(), block))
            rest[first:first + k] = False
    new = np.ndarray
    t, idx = t[rest], idx[rest]
    for i, code, rank, at, n, addr in zip(idx.tolist(), t["d"].tolist(), t["r"].tolist(), t["s"].tolist(),
                                          t["n"].tolist(), t["a"].tolist()):
        dt = dtypes[code]
        assert dt is not None
        shape = (n // dt.itemsize,) if rank == 1 else tuple((ctypes.c_uint64 * rank).from_address(at)) \
            if rank else ()
        if not n:
            out[i] = np.zeros(shape, dt)
            if views:
                out[i].flags.writeable = False
        elif span is not None:
            out[i] = new(shape, dt, span, addr - lo)
        else:
            one = np.asarray(_Carrier(load, {"version": 3, "shape": (n,), "typestr": "|u1",
                                             "data": (addr, views), "strides": None}))
            out[i] = one.view(dt).reshape(shape)
    return out


def _runs(t: np.ndarray, dtypes: Dict[int, Optional[np.dtype]]) -> List[Tuple[int, int, int]]:
    """(first row, length, byte stride) of each run of at least 8 consecutive rows of the table `t` that are
    rank-1 tensors of one dtype and size, each `stride` bytes after the one before (a stride that is a multiple
    of the itemsize and no smaller than the tensor): such a run's arrays are the rows of one 2-D array, which
    numpy makes in C, instead of one np.ndarray call each (20,000 tensors of f32[1024]: 9 ms instead of 28).
    Found with numpy: a row starts a run unless it is like the row before and the step to it is the step
    before (so every run's steps are equal)."""
    m = len(t)
    if m < 8:
        return []
    code, rank, nbytes, address = t["d"], t["r"], t["n"].astype(np.int64), t["a"].astype(np.int64)
    step = np.diff(address)
    starts = np.ones(m, bool)
    starts[1:] = ~((rank[1:] == 1) & (rank[:-1] == 1) & (code[1:] == code[:-1]) & (nbytes[1:] == nbytes[:-1]) &
                   (nbytes[1:] > 0) & (step >= nbytes[1:]))
    starts[2:] |= step[1:] != step[:-1]
    first = np.flatnonzero(starts)
    length = np.diff(np.append(first, m))
    out = []
    for f, k in zip(first[length >= 8].tolist(), length[length >= 8].tolist()):
        dt = dtypes.get(int(code[f]))
        stride = int(step[f])
        if dt is not None and stride % dt.itemsize == 0:
            out.append((f, k, stride))
    return out


def refuse_unholdable(file: File, load: _Load, names: Sequence[str], what: str,
                      wanted: Optional[Sequence[int]] = None) -> None:
    """TypeError naming the first tensor (of `wanted`, None: all) whose dtype numpy cannot hold (F4, F6;
    bf16/fp8 without ml_dtypes)."""
    codes = load.columns()["d"]
    if wanted is not None:
        codes = codes[np.asarray(wanted, dtype=np.intp)]
    for code in np.unique(codes).tolist():
        if _dtypes.numpy_dtype(code) is None:
            first = int(np.argmax(codes == code))
            name = names[first if wanted is None else wanted[first]]
            try:
                _dtypes.require_numpy_dtype(code)
            except TypeError as e:
                raise TypeError(f"{file.path}: tensor '{name}' ({_dtypes.NAMES.get(code, '?')}): {e}; {what}") \
                    from None


def load_numpy(file: File, page_cache: str = "keep") -> Dict[str, np.ndarray]:
    """Every tensor of `file` as an owned, writable numpy array, in file order, read by one load into one host
    allocation (`page_cache`: see `run_load`). TypeError naming the tensor for a dtype numpy cannot hold."""
    if not len(file):
        _page_cache.page_cache_value(page_cache)
        return {}
    load = run_load(file, [("*", "cpu")], page_cache)
    names = load.names()
    refuse_unholdable(file, load, names, "hostfirst.open(path)[name] gives it as a hostfirst View")
    arrays = host_arrays(load)
    return {name: arrays[i] for i, name in enumerate(names)}


def map_numpy(file: File) -> Dict[str, np.ndarray]:
    """Every tensor of `file` as a read-only numpy view of the file's mapping, in file order (zero_copy=True):
    one load of views (nothing read), the arrays made from its table in bulk. TypeError naming the tensor for a
    dtype numpy cannot hold."""
    if not len(file):
        return {}
    load = run_load(file, [("*", "host")])
    names = load.names()
    refuse_unholdable(file, load, names, "hostfirst.open(path)[name] gives it as a hostfirst View")
    arrays = host_arrays(load, views=True)
    return {name: arrays[i] for i, name in enumerate(names)}


def memory_file(data: Any) -> File:
    """A File over the bytes of a safetensors image in memory (`load(data)`); the File keeps `data` alive."""
    if not isinstance(data, bytes):
        raise TypeError(f"load() takes the bytes of a safetensors file, not {type(data).__name__} "
                        "(bytes(data) makes one)")
    return File._from_memory(data)
