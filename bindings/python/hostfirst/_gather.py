"""The data-loader primitive (Gather) and nanoGPT's random offsets (OffsetStream)."""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

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
    """B windows of T elements of a 1-D host tensor, assembled as a [B, T] batch on `device` in one transfer.

        g = hostfirst.Gather("cuda:0", "uint16", batch=64, window=1025)   # or "cpu", "default"; any dtype form
        tokens.prefault()                      # once: later batches take no page faults
        batch = g.run(tokens, offsets)         # a Buffer: np.asarray / jnp.asarray / __dlpack__ / jax.device_put

    Each `run` returns the batch it filled, a Buffer of its own: it, and anything exported from it (a numpy or
    JAX array made zero-copy, a DLPack capsule), never changes while it lives. The gather fills a batch no one
    holds, from a small ring: a loop that drops each batch before the next run keeps one or two batches and
    allocates nothing per step. When every batch is held at the ring's bound (`ring_bound`, default
    HOSTFIRST_GATHER_DEFAULT_RING_BOUND = 4), `run` raises BusyError and changes nothing. `device` may be
    "default" (resolved now through the default stack)."""

    def __init__(self, device: Union[Device, str], dtype: _dtypes.DTypeLike, batch: int, window: int,
                 ring_bound: Optional[int] = None):
        d = resolve_target(device)
        code = _dtypes.code_of(dtype)
        h = ctypes.c_void_p()
        check(lib.hostfirst_gather_new(d._c(), code, int(batch), int(window), ctypes.byref(h)))
        self._h = h.value
        self._finalizer = weakref.finalize(self, lib.hostfirst_gather_free, h.value)
        if ring_bound is not None:
            check(lib.hostfirst_gather_set_ring_bound(self._h, int(ring_bound)))
        self.device, self.batch, self.window = d, int(batch), int(window)
        self.dtype = _dtypes.reported(code)
        self.dtype_name = _dtypes.NAMES[code]
        self._offsets = (ctypes.c_uint64 * self.batch)()
        self._offsets_np = np.ctypeslib.as_array(self._offsets)

    def run(self, source: Union[Tensor, Buffer, np.ndarray], offsets: Sequence[int]) -> Buffer:
        """Row i = source[offsets[i] : offsets[i] + window] for every i; returns the batch it filled.
        `source`: a Tensor (or a numpy array on one, see `source_tensor`), or a 1-D host Buffer (`t.to("cpu")`:
        the truncation-proof fast path, each window a memcpy). OutOfRangeError names the first offset whose
        window runs past the end."""
        if len(offsets) != self.batch:
            raise ValueError(f"{len(offsets)} offsets for a batch of {self.batch}")
        o = np.asarray(offsets)
        if o.dtype.kind not in "iu":
            raise TypeError(f"offsets must be integers, not {o.dtype}")
        np.copyto(self._offsets_np, o, casting="unsafe")  # a negative offset wraps, and the library refuses it
        out = ctypes.c_void_p()
        if isinstance(source, Buffer):
            check(lib.hostfirst_gather_run_from_buffer(self._h, source._h, self._offsets, self.batch,
                                                       ctypes.byref(out)))
        else:
            check(lib.hostfirst_gather_run_batch(self._h, source_tensor(source)._h, self._offsets, self.batch,
                                                 ctypes.byref(out)))
        return Buffer(out.value)

    def stream(self, source: Union[Tensor, Buffer, np.ndarray], offsets: Iterable[Sequence[int]],
               depth: int = 2) -> Iterator[Buffer]:
        """Yields the batch of each offset array of `offsets` in order, as `run` would, while a background
        thread fills up to `depth` batches ahead (the reads, and for cuda:N the copy to the device) - so the
        next batch is ready when the step that uses this one ends. `offsets`: an iterable of arrays of `batch`
        integers, or one [n, batch] array; it is taken in chunks of up to 256 batches (one C stream each; the
        first batch of a later chunk is read when the previous chunk ends). A batch yielded is a Buffer the
        ring never refills while it lives; drop it when the step is done (a loop that keeps every batch stalls
        the stream, which then raises BusyError). A failed read raises its error when its batch is reached; the
        batches before it are yielded first. Closing the generator (or dropping it) cancels the prefetch. The
        ring bound is raised to depth + 3 if lower (hostfirst_gather_stream_start)."""
        depth = int(depth)
        src: Union[Tensor, Buffer]
        if isinstance(source, Buffer):
            src, start = source, lib.hostfirst_gather_stream_start_from_buffer
        else:
            src, start = source_tensor(source), lib.hostfirst_gather_stream_start
        chunks = _offset_chunks(offsets, self.batch, 256)
        return self._stream(start, src, chunks, depth)

    def _stream(self, start: Any, src: Any, chunks: Iterator[np.ndarray], depth: int) -> Iterator[Buffer]:
        for chunk in chunks:
            n = chunk.shape[0]
            arr = np.ascontiguousarray(chunk, dtype=np.uint64)
            h = ctypes.c_void_p()
            check(start(self._h, src._h, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), n, depth,
                        ctypes.byref(h)))
            fin = weakref.finalize(arr, lib.hostfirst_gather_stream_free, h.value)  # freed on any exit
            try:
                while True:
                    out = ctypes.c_void_p()
                    check(lib.hostfirst_gather_stream_next(h.value, ctypes.byref(out)))
                    if not out.value:
                        break
                    yield Buffer(out.value)
            finally:
                fin()

    def current(self) -> Buffer:
        """The batch the last run filled (before any run, the first batch, zero-filled), as a Buffer of its own."""
        out = ctypes.c_void_p()
        check(lib.hostfirst_gather_batch(self._h, ctypes.byref(out)))
        return Buffer(out.value)

    def ring(self) -> Tuple[int, int, int]:
        """(bound, batches allocated now, batches held by consumers)."""
        bound, allocated, held = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        check(lib.hostfirst_gather_ring(self._h, ctypes.byref(bound), ctypes.byref(allocated), ctypes.byref(held)))
        return bound.value, allocated.value, held.value

    def __repr__(self) -> str:
        return f"Gather([{self.batch}, {self.window}] {self.dtype_name} on '{self.device}')"


def _offset_chunks(offsets: Any, batch: int, most: int) -> Iterator[np.ndarray]:
    """[k, batch] uint64 arrays of at most `most` rows from an iterable of offset arrays (or a 2-D array)."""
    if isinstance(offsets, np.ndarray) and offsets.ndim == 2:
        if offsets.shape[1] != batch:
            raise ValueError(f"offsets of shape {offsets.shape} for a batch of {batch}")
        if offsets.dtype.kind not in "iu":
            raise TypeError(f"offsets must be integers, not {offsets.dtype}")
        for i in range(0, offsets.shape[0], most):
            yield offsets[i:i + most].astype(np.uint64, casting="unsafe")
        return
    rows: List[np.ndarray] = []
    for o in offsets:
        a = np.asarray(o)
        if a.shape != (batch,):
            raise ValueError(f"{a.shape[0] if a.ndim == 1 else a.shape} offsets for a batch of {batch}")
        if a.dtype.kind not in "iu":
            raise TypeError(f"offsets must be integers, not {a.dtype}")
        rows.append(a.astype(np.uint64, casting="unsafe"))  # a negative offset wraps; the library refuses it
        if len(rows) == most:
            yield np.stack(rows)
            rows = []
    if rows:
        yield np.stack(rows)


class OffsetStream:
    """nanoGPT's `torch.randint(len - window, (n,))`, reproducible: successive `next(...)` calls draw from one
    seeded splitmix64 stream (the same numbers as `hostfirst_random_offsets` and the CLI's `--seed`)."""

    def __init__(self, seed: int):
        self._state = ctypes.c_uint64(int(seed))

    def next(self, length: int, window: int, n: int) -> List[int]:
        out = (ctypes.c_uint64 * int(n))()
        check(lib.hostfirst_random_offsets(ctypes.byref(self._state), int(length), int(window), out, int(n)))
        return list(out)
