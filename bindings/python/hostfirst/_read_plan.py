"""Declared read plans over libhostfirst's hostfirst_read_plan_* API: the slices you will read (whole tensors,
or a range of each dimension), turned into file requests before any byte moves, so you can see what they cost.

    with hostfirst.ReadPlan("model.safetensors", ["lm_head.weight", ("embed.weight", (slice(0, 4096), slice(None)))]) as plan:
        plan.needed_bytes, plan.read_bytes, plan.requests, plan.peak_memory_bytes, plan.over_read
        arrays = dict(plan.read())          # {name: numpy array}, the declared slices and nothing else read

Neighbouring ranges (of one tensor, or of tensors next to each other in the file) are read by one request while
the request's pages stay within `max_over_read` times the pages it needs (default 1.25; at least 1.0).
`safe_open.prefetch` (safetensors 0.9's API) runs on the same plans.
"""

from __future__ import annotations

import ctypes
import operator
import weakref
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _abi
from ._core import PathLike, check
from ._errors import error_named
from ._lib import lib
from ._tensors import File

_vp = ctypes.c_void_p

SliceSpec = Union[str, Tuple[str, Any]]


class Request(NamedTuple):
    """One file request of a plan: `length` bytes at `offset` of file `file` (0 for a single file; a part's
    index in a sharded set), serving `slices` of the declared slices."""

    file: int
    offset: int
    length: int
    slices: int


def _ranges(name: str, shape: Tuple[int, ...], key: Any) -> Tuple[List[Tuple[int, int]], Tuple[int, ...]]:
    """Per dimension (start, len) of `key` (a slice, an int, or a tuple of them, one per leading dimension;
    steps of 1 only) on a tensor of `shape`, and the shape of the result (dimensions indexed by an int
    dropped)."""
    keys = key if isinstance(key, tuple) else (key,)
    if len(keys) > len(shape):
        raise error_named("INVALID_ARGUMENT", f"read plan slice of '{name}': {len(keys)} indices for a tensor of "
                          f"{len(shape)} dimensions {list(shape)}")
    ranges: List[Tuple[int, int]] = []
    out: List[int] = []
    for d, n in enumerate(shape):
        k = keys[d] if d < len(keys) else slice(None)
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                raise error_named("INVALID_ARGUMENT", f"read plan slice of '{name}': dimension {d} has step "
                                  f"{step}; a plan reads ranges (step 1)")
            length = max(stop - start, 0)
            ranges.append((start, length))
            out.append(length)
            continue
        try:
            i = operator.index(k)
        except TypeError:
            raise error_named("INVALID_ARGUMENT", f"read plan slice of '{name}': dimension {d}: {k!r} is not a "
                              "slice or an integer") from None
        if not -n <= i < n:
            raise error_named("OUT_OF_RANGE", f"read plan slice of '{name}': index {i} is out of range for "
                              f"dimension {d} of size {n}")
        ranges.append((i % n, 1))
    return ranges, tuple(out)


class ReadPlan:
    """A declared read plan (see the module documentation).

    `file`: a path (opened and closed here) or an open `hostfirst.File` (it stays the caller's). `slices`: each a
    tensor name (the whole tensor) or `(name, key)`, `key` a slice, an int or a tuple of them as in numpy basic
    indexing with step 1 (`("w", (slice(0, 128), slice(None)))`, `("w", 3)`). Two slices may not share bytes.
    `max_over_read`: the over-read cap (None: 1.25; at least 1.0, else InvalidArgumentError naming it).
    `threads`: reader threads of `read()` (0: the CPUs available, at most 16).

    Numbers: `needed_bytes`, `read_bytes`, `requests`, `peak_memory_bytes`, `files`, `over_read`
    (read ÷ needed), `request_list()`. `read()` runs it (as often as you like) into new numpy arrays."""

    def __init__(self, file: Union[File, PathLike], slices: Iterable[SliceSpec], *,
                 max_over_read: Optional[float] = None, threads: int = 0):
        if max_over_read is not None and not (isinstance(max_over_read, (int, float))
                                              and float(max_over_read) >= 1.0):
            raise error_named("INVALID_ARGUMENT", f"max_over_read is {max_over_read!r}: the over-read cap is a "
                              "ratio of pages read to pages needed per request, at least 1.0 (None: 1.25)")
        opened: Optional[File] = None
        if not isinstance(file, File):
            opened = file = File(file)
        try:
            self._make(file, list(slices), max_over_read, int(threads))
        finally:
            if opened is not None:
                opened._release()

    def _make(self, file: File, slices: Sequence[SliceSpec], max_over_read: Optional[float], threads: int) -> None:
        self.path = file.path
        self.names: List[str] = []
        self.shapes: List[Tuple[int, ...]] = []
        self._dtypes: List[Any] = []
        keep: List[Any] = []  # the C arrays, alive until the plan is made
        c_slices = (_abi.ReadPlanSlice * max(len(slices), 1))()
        for i, spec in enumerate(slices):
            name, key = (spec, None) if isinstance(spec, str) else spec
            if not isinstance(name, str):
                raise error_named("INVALID_ARGUMENT", f"read plan slice {i}: {spec!r} is neither a tensor name nor "
                                  "(name, index)")
            view = file[name]
            if key is None:
                ranges: List[Tuple[int, int]] = []
                shape = tuple(view.shape)
            else:
                ranges, shape = _ranges(name, tuple(view.shape), key)
            starts = (ctypes.c_uint64 * max(len(ranges), 1))(*[r[0] for r in ranges])
            lens = (ctypes.c_uint64 * max(len(ranges), 1))(*[r[1] for r in ranges])
            keep += [starts, lens]
            c_slices[i].name = name.encode()
            c_slices[i].rank = len(ranges)
            c_slices[i].starts = ctypes.cast(starts, ctypes.POINTER(ctypes.c_uint64)) if ranges else None
            c_slices[i].lens = ctypes.cast(lens, ctypes.POINTER(ctypes.c_uint64)) if ranges else None
            self.names.append(name)
            self.shapes.append(shape)
            self._dtypes.append(view.dtype)  # TypeError naming the tensor for F4/F6
        opts = _abi.ReadPlanOptions()
        check(lib.hostfirst_read_plan_options_init(ctypes.byref(opts), ctypes.sizeof(opts)))
        opts.max_over_read = float(max_over_read or 0.0)
        opts.threads = threads
        h = _vp()
        check(lib.hostfirst_read_plan_make(file._handle(), c_slices, len(slices), ctypes.byref(opts),
                                           ctypes.byref(h)))
        self._h: Optional[int] = h.value
        self._finalizer = weakref.finalize(self, lib.hostfirst_read_plan_free, h.value)
        st = _abi.ReadPlanStats()
        st.struct_size = ctypes.sizeof(st)
        check(lib.hostfirst_read_plan_describe(self._h, ctypes.byref(st)))
        self.needed_bytes: int = st.needed_bytes
        self.read_bytes: int = st.read_bytes
        self.requests: int = st.requests
        self.peak_memory_bytes: int = st.peak_memory_bytes
        self.files: int = st.files

    @property
    def over_read(self) -> float:
        """Bytes read ÷ bytes needed (1.0 for a plan that needs nothing)."""
        return self.read_bytes / self.needed_bytes if self.needed_bytes else 1.0

    def _handle(self) -> int:
        if self._h is None:
            raise error_named("INVALID_HANDLE", f"the read plan of {self.path} is closed")
        return self._h

    def request_list(self) -> List[Request]:
        """The file requests after coalescing, file by file in offset order."""
        h = self._handle()
        out = []
        for i in range(self.requests):
            r = _abi.ReadPlanRequestInfo()
            r.struct_size = ctypes.sizeof(r)
            check(lib.hostfirst_read_plan_request(h, i, ctypes.byref(r)))
            out.append(Request(r.file, r.offset, r.length, r.slices))
        return out

    def read(self) -> List[Tuple[str, np.ndarray]]:
        """Runs the plan: every declared slice as (name, new owned numpy array), in declaration order; the plan's
        requests are the only reads (`read_bytes` bytes). A file truncated since it was opened raises
        TruncatedError."""
        h = self._handle()
        arrays = [np.empty(int(np.prod(s, dtype=np.int64)) * dt.itemsize, np.uint8)
                  for s, dt in zip(self.shapes, self._dtypes)]
        n = len(arrays)
        dsts = (ctypes.c_void_p * max(n, 1))(*[a.ctypes.data if a.nbytes else None for a in arrays])
        caps = (ctypes.c_uint64 * max(n, 1))(*[a.nbytes for a in arrays])
        check(lib.hostfirst_read_plan_execute(h, dsts, caps, n, None))
        return [(name, a.view(dt).reshape(s)) for name, a, dt, s in zip(self.names, arrays, self._dtypes, self.shapes)]

    def close(self) -> None:
        """Frees the plan (idempotent); arrays already read stay valid."""
        if self._h is not None:
            self._h = None
            self._finalizer()

    def __enter__(self) -> "ReadPlan":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return (f"<hostfirst ReadPlan {len(self.names)} slices of {self.path}: needed {self.needed_bytes} B, "
                f"read {self.read_bytes} B in {self.requests} requests, peak {self.peak_memory_bytes} B>")

