"""The data-loader primitive (Gather) and nanoGPT's random offsets (OffsetStream)."""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, List, Sequence, Union

import numpy as np

from . import _dtypes
from ._core import Device, check
from ._devices import resolve_target
from ._lib import lib
from ._tensors import Buffer, Tensor, _Carrier


def source_tensor(x: Union[Tensor, np.ndarray]) -> Tensor:
    """The Tensor to gather from: a Tensor, or a whole-tensor numpy array made from one (the host arrays
    `hostfirst.jax.load_file` returns for host rules, `np.asarray(tensor)`)."""
    if isinstance(x, Tensor):
        return x
    base: Any = x
    while isinstance(base, np.ndarray):
        base = base.base
    owner = getattr(base, "owner", None) if isinstance(base, _Carrier) else None
    if isinstance(x, np.ndarray) and isinstance(owner, Tensor) and x.flags.c_contiguous \
            and x.ctypes.data == owner.data_ptr and x.nbytes == owner.nbytes:
        return owner
    raise TypeError("Gather.run takes a hostfirst Tensor, or a whole-tensor numpy array made from one "
                    "(such as a host entry of hostfirst.jax.load_file)")


class Gather:
    """B windows of T elements of a 1-D host tensor, assembled as a [B, T] batch on `device` in one transfer,
    into one destination reused by every `run` (no allocation per step).

        g = hostfirst.Gather("cuda:0", "uint16", batch=64, window=1025)   # or "cpu", "default"; any dtype form
        tokens.prefault()                      # once: later batches take no page faults
        batch = g.run(tokens, offsets)         # a Buffer; np.asarray(batch) on cpu, __dlpack__ anywhere

    `run` returns the same Buffer every time; its contents change with the next `run`, so copy what must
    outlive a step. `device` may be "default" (resolved now through the default stack)."""

    def __init__(self, device: Union[Device, str], dtype: _dtypes.DTypeLike, batch: int, window: int):
        d = resolve_target(device)
        code = _dtypes.code_of(dtype)
        h = ctypes.c_void_p()
        check(lib.hostfirst_gather_new(d._c(), code, int(batch), int(window), ctypes.byref(h)))
        self._h = h.value
        self._finalizer = weakref.finalize(self, lib.hostfirst_gather_free, h.value)
        self.device, self.batch, self.window = d, int(batch), int(window)
        self.dtype = _dtypes.reported(code)
        self.dtype_name = _dtypes.NAMES[code]
        self._offsets = (ctypes.c_uint64 * self.batch)()
        b = ctypes.c_void_p()
        check(lib.hostfirst_gather_buffer(self._h, ctypes.byref(b)))
        self.buffer = Buffer(b.value, owner=self)  # borrowed: the gather frees it; the Buffer keeps us alive

    def run(self, tensor: Union[Tensor, np.ndarray], offsets: Sequence[int]) -> Buffer:
        """Row i = tensor[offsets[i] : offsets[i] + window] for every i; returns `self.buffer` once in place.
        `tensor`: a Tensor or a numpy array on one (see `source_tensor`). OutOfRangeError names the first
        offset whose window runs past the end."""
        tensor = source_tensor(tensor)
        if len(offsets) != self.batch:
            raise ValueError(f"{len(offsets)} offsets for a batch of {self.batch}")
        for i, o in enumerate(offsets):
            self._offsets[i] = int(o)
        check(lib.hostfirst_gather_run(self._h, tensor._h, self._offsets, self.batch))
        return self.buffer

    def __repr__(self) -> str:
        return f"Gather([{self.batch}, {self.window}] {self.dtype_name} on '{self.device}')"


class OffsetStream:
    """nanoGPT's `torch.randint(len - window, (n,))`, reproducible: successive `next(...)` calls draw from one
    seeded splitmix64 stream (the same numbers as `hostfirst_random_offsets` and the CLI's `--seed`)."""

    def __init__(self, seed: int):
        self._state = ctypes.c_uint64(int(seed))

    def next(self, length: int, window: int, n: int) -> List[int]:
        out = (ctypes.c_uint64 * int(n))()
        check(lib.hostfirst_random_offsets(ctypes.byref(self._state), int(length), int(window), out, int(n)))
        return list(out)
