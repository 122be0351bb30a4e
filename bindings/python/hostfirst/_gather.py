"""The data-loader primitive (Gather) and nanoGPT's random offsets (OffsetStream)."""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _abi, _dtypes
from ._core import Device, check
from ._devices import resolve_target
from ._errors import HostfirstError, error_named
from ._lib import lib
from ._tensors import Buffer, View, _Carrier

#: What `Gather.stream` takes for its offsets besides one [n, batch] array: an iterable of arrays of `batch`
#: integers each, such as an OffsetStream (which yields numpy arrays) or a list of lists.
Offsets = Iterable[Union[Sequence[int], np.ndarray]]


def source_tensor(x: Union[View, np.ndarray]) -> View:
    """The View to gather from: a View, or a numpy array made from one (the host arrays
    `hostfirst.jax.load_file(..., zero_copy=True)` returns for host rules, `np.asarray(tensor)`) covering whole
    rows of it — the whole tensor or a row range such as `tokens[:n]` (a train/validation split), given as a
    zero-copy row slice of the tensor."""
    if isinstance(x, View):
        return x
    base: Any = x
    while isinstance(base, np.ndarray):
        base = base.base
    owner = getattr(base, "owner", None) if isinstance(base, _Carrier) else None
    if isinstance(x, np.ndarray) and isinstance(owner, View) and x.flags.c_contiguous and owner.strides is None \
            and owner.shape and x.shape[1:] == owner.shape[1:]:
        if x.ctypes.data == owner.data_ptr and x.nbytes == owner.nbytes:
            return owner
        row = owner.nbytes // owner.shape[0] if owner.shape[0] else 0
        start = x.ctypes.data - owner.data_ptr
        if row and start % row == 0 and 0 <= start and start + x.nbytes <= owner.nbytes:
            return owner[start // row: start // row + x.shape[0]]
    raise TypeError("Gather.run takes a hostfirst View, a 1-D host Buffer, or a numpy array on a View's mapping "
                    "that covers whole rows of it (such as a host entry of hostfirst.jax.load_file(..., "
                    "zero_copy=True), or a row range tokens[a:b] of one); an owned copy (load_file's default) is "
                    "not the file: gather from hostfirst.open(path)[name], or load with zero_copy=True")


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
    "default" (resolved now through the default stack).

    `page_cache` ("keep", the default; "drop"; "bypass": direct I/O where the file system allows it): what each run from a file leaves
    in the page cache (hostfirst_gather_set_page_cache; only the windows' pages are sampled and dropped).
    Anything else is InvalidArgumentError naming page_cache."""

    def __init__(self, device: Union[Device, str], dtype: _dtypes.DTypeLike, batch: int, window: int,
                 ring_bound: Optional[int] = None, page_cache: str = "keep"):
        from ._page_cache import page_cache_value

        policy = page_cache_value(page_cache)  # checked before anything is allocated
        d = resolve_target(device)
        code = _dtypes.code_of(dtype)
        h = ctypes.c_void_p()
        check(lib.hostfirst_gather_new(d._c(), code, int(batch), int(window), ctypes.byref(h)))
        self._h = h.value
        self._finalizer = weakref.finalize(self, lib.hostfirst_gather_free, h.value)
        if ring_bound is not None:
            check(lib.hostfirst_gather_set_ring_bound(self._h, int(ring_bound)))
        if policy:
            check(lib.hostfirst_gather_set_page_cache(self._h, policy))
        self.page_cache = page_cache
        self.device, self.batch, self.window = d, int(batch), int(window)
        self.dtype = _dtypes.reported(code)
        self.dtype_name = _dtypes.NAMES[code]
        self._offsets = (ctypes.c_uint64 * self.batch)()
        self._offsets_np = np.ctypeslib.as_array(self._offsets)
        self._layout: Dict[str, Any] = {}  # what every batch shares (Buffer._of_batch)

    def run(self, source: Union[View, Buffer, np.ndarray], offsets: Union[Sequence[int], np.ndarray]) -> Buffer:
        """Row i = source[offsets[i] : offsets[i] + window] for every i; returns the batch it filled.
        `source`: a View (or a numpy array on one, see `source_tensor`), or a 1-D host Buffer (`t.to("cpu")`:
        the truncation-proof fast path, each window a memcpy). OutOfRangeError names the first offset whose
        window runs past the end."""
        if len(offsets) != self.batch:
            raise error_named("INVALID_ARGUMENT", f"{len(offsets)} offsets for a batch of {self.batch}")
        o = np.asarray(offsets)
        if o.dtype.kind not in "iu":
            raise TypeError(f"offsets must be integers, not {o.dtype}")
        # A negative offset becomes one past 2**63 here, which the library refuses (no tensor is that long);
        # the message naming the negative one is made only then.
        np.copyto(self._offsets_np, o, casting="unsafe")
        out = ctypes.c_void_p()
        try:
            if isinstance(source, Buffer):
                status = lib.hostfirst_gather_run_from_buffer(self._h, source._h, self._offsets, self.batch,
                                                              ctypes.byref(out))
            else:
                src = source_tensor(source)  # held: a row range is a view of its own for the call's length
                status = lib.hostfirst_gather_run(self._h, src._h, self._offsets, self.batch, ctypes.byref(out))
            if status:
                _refuse_negative(o)
                check(status)
        except HostfirstError as e:
            if e.status_name != "BUSY":
                raise
            raise self._busy(e) from e
        return Buffer._of_batch(out.value, self._layout)

    def run_sequences(self, dataset: Any, indices: Union[Sequence[int], np.ndarray],
                      pad: int = 0) -> Tuple[Buffer, np.ndarray]:
        """Whole sequences of a Megatron dataset (a File from hostfirst.open on its .idx/.bin/prefix): row i =
        the tokens of sequence indices[i], cut at the window and padded with `pad` (the pad token id) up to it.
        Returns (batch, lengths): the [batch, window] Buffer, as `run` hands it out, and a uint64 array of the
        tokens each row holds (for an attention or loss mask). One gather for the whole batch
        (hostfirst_gather_run_sequences)."""
        if len(indices) != self.batch:
            raise error_named("INVALID_ARGUMENT", f"{len(indices)} indices for a batch of {self.batch}")
        o = np.asarray(indices)
        if o.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, not {o.dtype}")
        if o.dtype.kind == "i" and o.size and o.min() < 0:
            raise error_named("OUT_OF_RANGE", f"sequence index {int(o.min())} is negative")
        np.copyto(self._offsets_np, o, casting="unsafe")
        lengths = np.empty(self.batch, np.uint64)
        out = ctypes.c_void_p()
        try:
            check(lib.hostfirst_gather_run_sequences(self._h, dataset._handle(), self._offsets, self.batch,
                                                     int(pad) & 0xFFFFFFFFFFFFFFFF,
                                                     lengths.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                                                     ctypes.byref(out)))
        except HostfirstError as e:
            if e.status_name != "BUSY":
                raise
            raise self._busy(e) from e
        return Buffer._of_batch(out.value, self._layout), lengths

    def _busy(self, e: HostfirstError) -> HostfirstError:
        """The library's BusyError `e` in Python's terms (its message names the C call that sets the bound)."""
        bound, _, held = self.ring()
        return type(e)(f"all {held} batches of this Gather are held (its ring_bound is {bound}), so "
                       "there is no batch to fill; drop the batches you no longer need (del batch, and the arrays "
                       "made from it) before the next one, or make the Gather with a larger bound: "
                       f"hostfirst.Gather(..., ring_bound={max(2 * bound, bound + 4)})", e.status)

    def stream(self, source: Union[View, Buffer, np.ndarray], offsets: Union[np.ndarray, Offsets],
               depth: int = 2) -> Iterator[Buffer]:
        """Yields the batch of each offset array of `offsets` in order, as `run` would, while a background
        thread fills up to `depth` batches ahead (the reads, and for cuda:N the copy to the device) - so the
        next batch is ready when the step that uses this one ends. `offsets`: an iterable of arrays of `batch`
        integers (read lazily, at most depth + 1 arrays ahead of the batch yielded, so an endless one such as
        an OffsetStream works), or one [n, batch] array (given to the thread whole). The thread never pauses
        between batches: an iterable feeds an open C stream (hostfirst_gather_stream_push), kept depth + 1
        batches ahead. A batch yielded is a Buffer the ring never refills while it lives; drop it when the step
        is done (a loop that keeps every batch stalls the stream, which then raises BusyError). A failed read
        raises its error when its batch is reached; the batches before it are yielded first; an offset out of
        range raises OutOfRangeError when its array is taken from the iterable. Closing the generator (or
        dropping it) cancels the prefetch. The ring bound is raised to depth + 3 if lower
        (hostfirst_gather_stream_start)."""
        depth = int(depth)
        src: Union[View, Buffer]
        if isinstance(source, Buffer):
            src, start = source, lib.hostfirst_gather_stream_start_from_buffer
            open_ = lib.hostfirst_gather_stream_open_from_buffer
        else:
            src, start = source_tensor(source), lib.hostfirst_gather_stream_start
            open_ = lib.hostfirst_gather_stream_open
        if isinstance(offsets, np.ndarray) and offsets.ndim == 2:
            return self._stream_all(start, src, offsets, depth)
        return self._stream_fed(open_, src, iter(offsets), depth)

    def _stream_all(self, start: Any, src: Any, offsets: np.ndarray, depth: int) -> Iterator[Buffer]:
        """Every offset given to the C stream at its start."""
        arr = _whole(offsets, self.batch)
        n = arr.shape[0]
        h = ctypes.c_void_p()
        check(start(self._h, src._h, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), n, depth,
                    ctypes.byref(h)))
        fin = weakref.finalize(arr, lib.hostfirst_gather_stream_free, h.value)  # freed on any exit
        try:
            while True:
                out = ctypes.c_void_p()
                self._next(lib.hostfirst_gather_stream_next, h.value, out)
                if not out.value:
                    break
                yield Buffer._of_batch(out.value, self._layout)
        finally:
            fin()

    def _stream_fed(self, open_: Any, src: Any, it: Iterator[Any], depth: int) -> Iterator[Buffer]:
        """An open C stream (hostfirst_gather_stream_open), pushed one batch at a time, depth + 1 batches ahead
        of the one yielded."""
        h = ctypes.c_void_p()
        check(open_(self._h, src._h, depth, ctypes.byref(h)))
        cell = (ctypes.c_uint64 * self.batch)()
        cell_np = np.ctypeslib.as_array(cell)
        fin = weakref.finalize(cell, lib.hostfirst_gather_stream_free, h.value)  # freed on any exit
        push, nxt = lib.hostfirst_gather_stream_push, lib.hostfirst_gather_stream_next
        pushed = delivered = 0
        more = True
        out = ctypes.c_void_p()
        try:
            while True:
                while more and pushed - delivered < depth + 1:
                    o = next(it, _END)
                    if o is _END:
                        check(lib.hostfirst_gather_stream_end_input(h.value))
                        more = False
                        break
                    np.copyto(cell_np, _one(o, self.batch), casting="unsafe")
                    check(push(h.value, cell, 1))
                    pushed += 1
                out.value = None
                self._next(nxt, h.value, out)
                if not out.value:
                    break
                delivered += 1
                yield Buffer._of_batch(out.value, self._layout)
        finally:
            fin()

    def _next(self, nxt: Any, stream: Optional[int], out: ctypes.c_void_p) -> None:
        """hostfirst_gather_stream_next, its BUSY in Python's terms (see `_busy`)."""
        try:
            check(nxt(stream, ctypes.byref(out)))
        except HostfirstError as e:
            if e.status_name != "BUSY":
                raise
            raise self._busy(e) from e

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


def _refuse_negative(o: np.ndarray) -> None:
    """OUT_OF_RANGE naming the first negative offset (cast to uint64 it would read as 18446744073709551615...)."""
    if o.dtype.kind == "i" and o.size and o.min() < 0:
        i = np.unravel_index(int(np.argmin(o)), o.shape)
        where = ", ".join(str(int(k)) for k in i)
        raise error_named("OUT_OF_RANGE", f"offsets[{where}] is {int(o[i])}: offsets count elements from the "
                                          "start of the tensor and cannot be negative")


def _whole(offsets: np.ndarray, batch: int) -> np.ndarray:
    """A [n, batch] integer array as uint64 (checked: shape, dtype, no negative offset)."""
    if offsets.shape[1] != batch:
        raise error_named("INVALID_ARGUMENT", f"offsets of shape {offsets.shape} for a batch of {batch}")
    if offsets.dtype.kind not in "iu":
        raise TypeError(f"offsets must be integers, not {offsets.dtype}")
    _refuse_negative(offsets)
    return np.ascontiguousarray(offsets, dtype=np.uint64) if offsets.dtype.kind == "u" else \
        offsets.astype(np.uint64, casting="unsafe")


def _one(o: Any, batch: int) -> np.ndarray:
    """One batch's offsets from an iterable's item (checked: shape, dtype, no negative offset)."""
    a = np.asarray(o)
    if a.shape != (batch,):
        raise error_named("INVALID_ARGUMENT",
                          f"{a.shape[0] if a.ndim == 1 else a.shape} offsets for a batch of {batch}")
    if a.dtype.kind not in "iu":
        raise TypeError(f"offsets must be integers, not {a.dtype}")
    _refuse_negative(a)
    return a


_END = object()


class OffsetStream:
    """nanoGPT's `torch.randint(len - window, (n,))`, reproducible: successive draws come from one seeded
    splitmix64 stream (the same numbers as `hostfirst_random_offsets` and the CLI's `--seed`).

        offsets = hostfirst.OffsetStream(1337)
        offsets.next(len(tokens), 1025, 64)                        # a list of 64 offsets
        for o in hostfirst.OffsetStream(1337, len(tokens), window=1025, batch=64):   # endless: break out
            batch = g.run(tokens, o)                                # o: a uint64 numpy array of 64 offsets

    Iterating needs `length`, `window` and `batch` (given here); it draws from the same stream as `next`."""

    def __init__(self, seed: int, length: Optional[int] = None, window: Optional[int] = None,
                 batch: Optional[int] = None):
        self._state = ctypes.c_uint64(int(seed))
        self.length, self.window, self.batch = length, window, batch

    def next(self, length: int, window: int, n: int) -> List[int]:
        """n offsets in [0, length - window], as a list."""
        return [int(o) for o in self._draw(length, window, n)]

    def _draw(self, length: int, window: int, n: int) -> np.ndarray:
        out = np.empty(int(n), dtype=np.uint64)
        check(lib.hostfirst_random_offsets(ctypes.byref(self._state), int(length), int(window),
                                           out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), int(n)))
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.length is None or self.window is None or self.batch is None:
            raise TypeError("iterating an OffsetStream needs its length, window and batch: "
                            "OffsetStream(seed, length, window=..., batch=...); or call next(length, window, n)")
        length, window, batch = self.length, self.window, self.batch

        def draws() -> Iterator[np.ndarray]:
            while True:
                yield self._draw(length, window, batch)

        return draws()
