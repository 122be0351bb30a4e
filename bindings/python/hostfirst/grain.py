"""grain data sources over hostfirst files: `RandomAccessDataSource`s whose batched reads are one gather.

    import grain, hostfirst.grain
    src = hostfirst.grain.TokenWindows("train.bin", window=1025, dtype="uint16")   # nanoGPT's raw tokens
    src = hostfirst.grain.TokenWindows("shard_000.bin", window=1025)               # an llm.c shard, .npy, ...
    src = hostfirst.grain.Sequences("corpus_text_document")                        # Megatron: whole sequences
    ds = grain.MapDataset.source(src).shuffle(seed=0).batch(64)

A source follows grain's protocol: `len(src)`, `src[i]` (one record, a numpy array of its own), and the
batched read `src._getitems(keys)` (grain's `SupportsBatchedReadRandomAccessDataSource`; also spelled
`__getitems__`). Records are copies: nothing a source hands out changes, or keeps a batch of a gather's ring.

What grain calls: its pipelines read one record at a time. `MapDataset.source(src).shuffle().batch(n)`,
`to_iter_dataset().batch(n)` and `DataLoader(operations=[Batch(n)])` all call `src[i]` once per record (grain
0.2's batch pushes `_getitems` down to the source only under an experiment flag, and `MapDataset.source(src)
._getitems(keys)` called directly). So the single-record read is the one that counts: it is a copy of the
record out of a numpy view of the file's mapping (a slice, as a `np.memmap` source reads it; BENCHMARKS.md,
section 14, measures both through grain), and a `_getitems` of more than a few keys is one hostfirst gather
(one submission of all its reads). Like any memmap source, a record read after the file was truncated under
the source kills the process with SIGBUS (replace token files with a rename, as writers do).

Sources pickle by their arguments (grain's worker processes reopen the file) and their `repr` names them
(grain's checkpoints). Thread-safe. grain itself is not needed to use them.
"""

from __future__ import annotations

import operator
import os
import threading
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ._errors import error_named
from ._gather import Gather
from ._tensors import File, View, open, open_raw  # noqa: A004

__all__ = ["Sequences", "TokenWindows"]

#: A batched read of at most this many keys copies each record out of the mapped view (numpy slices, a
#: microsecond or two each); larger ones are one gather (BENCHMARKS.md, section 14, for the crossover).
SMALL_READ = 4


def _host_view(tokens: View) -> Optional[np.ndarray]:
    """The tokens as a read-only numpy array on the file's mapping (zero-copy), or None where numpy cannot hold
    the dtype (then every read is a gather)."""
    try:
        return tokens.numpy()
    except TypeError:
        return None


def _index(index: Any, n: int, what: str) -> int:
    i = operator.index(index)
    if not 0 <= i < n:
        raise error_named("OUT_OF_RANGE", f"{what} {i} is outside 0..{n - 1}")
    return i


def _keys(keys: Sequence[int], n: int, what: str) -> np.ndarray:
    k = np.asarray(keys, dtype=np.int64).reshape(-1)
    if k.size and (k.min() < 0 or k.max() >= n):
        bad = int(k[(k < 0) | (k >= n)][0])
        raise error_named("OUT_OF_RANGE", f"{what} {bad} is outside 0..{n - 1}")
    return k


class _Source:
    _args: Dict[str, Any]
    _dtype: str
    _gathers: Dict[int, Gather]

    def __getstate__(self) -> Dict[str, Any]:
        return dict(self._args)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._args.items())
        return f"hostfirst.grain.{type(self).__name__}({args})"

    def _gather(self, n: int, window: int) -> Gather:
        g = self._gathers.get(n)
        if g is None:
            g = self._gathers[n] = Gather("cpu", self._dtype, batch=n, window=window)
        return g

    def __getitems__(self, keys: Sequence[int]) -> List[np.ndarray]:
        return self._getitems(keys)

    def _getitems(self, keys: Sequence[int]) -> List[np.ndarray]:
        raise NotImplementedError


class TokenWindows(_Source):
    """Fixed windows of a 1-D token tensor: record i = tokens[i * stride : i * stride + window].

    `path`: any file `hostfirst.open` reads (.npy, llm.c shard, safetensors, a Megatron dataset's tokens), or
    with `dtype` a headerless raw file (`hostfirst.open_raw`). `tensor`: the tensor's name (default: the file's
    only tensor, or "tokens"). `stride` defaults to `window` (non-overlapping windows); `stride=1` gives every
    start, as nanoGPT's random offsets draw from."""

    def __init__(self, path: Any, window: int, stride: Optional[int] = None, tensor: Optional[str] = None,
                 dtype: Any = None, offset: int = 0):
        path = os.fspath(path)
        self._args = {"path": path, "window": int(window), "stride": stride, "tensor": tensor, "dtype": dtype,
                      "offset": int(offset)}
        self._file: File = open_raw(path, dtype, offset=offset) if dtype is not None else open(path)
        names = list(self._file)
        name = tensor or (names[0] if len(names) == 1 else "tokens")
        self._tokens = self._file[name]
        if len(self._tokens.shape) != 1:
            raise error_named("INVALID_ARGUMENT", f"tensor {name!r} has shape {self._tokens.shape}; token windows "
                              "need a 1-D tensor")
        self.window, self.stride = int(window), int(stride or window)
        n = self._tokens.shape[0]
        if self.window <= 0 or self.stride <= 0 or self.window > n:
            raise error_named("INVALID_ARGUMENT", f"window {self.window} and stride {self.stride} do not fit {n} "
                              "tokens")
        self._len = (n - self.window) // self.stride + 1
        self._dtype = self._tokens.dtype_name
        self._host = _host_view(self._tokens)
        self._gathers: Dict[int, Gather] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> np.ndarray:
        """Record `index`: a copy of its window out of the mapped tokens (what grain calls per record)."""
        if self._host is None:
            return self._getitems([index])[0]
        start = _index(index, self._len, "record") * self.stride
        return self._host[start:start + self.window].copy()

    def _getitems(self, keys: Sequence[int]) -> List[np.ndarray]:
        """Records `keys`: up to SMALL_READ of them copied out of the mapped tokens, more in one gather."""
        k = _keys(keys, self._len, "record")
        if k.size == 0:
            return []
        host, w = self._host, self.window
        if host is not None and k.size <= SMALL_READ:
            return [host[s:s + w].copy() for s in (k * self.stride).tolist()]
        with self._lock:
            batch = self._gather(k.size, w).run(self._tokens, k * self.stride)
            rows = np.array(batch)  # one copy of the whole batch; the ring's batch goes back at once
            del batch
        return list(rows)


class Sequences(_Source):
    """The whole sequences of a Megatron indexed dataset: record i = sequence i, a 1-D array of its own length.

    `path`: the dataset's .idx, .bin or prefix. A batched read is one padded gather
    (`Gather.run_sequences`) into rows of `max_len` tokens (default: the dataset's longest sequence), each
    returned cut to its length; a sequence longer than `max_len` is cut at it."""

    def __init__(self, path: Any, max_len: Optional[int] = None):
        path = os.fspath(path)
        self._args = {"path": path, "max_len": max_len}
        self._file = open(path, "megatron")
        self._len = int(self._file.metadata["sequence_count"])
        longest = int(self._file.metadata["max_sequence_length"])
        self.max_len = max(1, int(max_len) if max_len is not None else longest)
        self._tokens = self._file["tokens"]
        self._dtype = self._tokens.dtype_name
        self._host = _host_view(self._tokens)
        self._gathers: Dict[int, Gather] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> np.ndarray:
        """Sequence `index` (cut at `max_len`): a copy out of the mapped tokens (what grain calls per record)."""
        if self._host is None:
            return self._getitems([index])[0]
        return self._copy(_index(index, self._len, "sequence"))

    def _copy(self, i: int) -> np.ndarray:
        starts, lengths = self._file.sequence_spans([i])
        start = int(starts[0])
        assert self._host is not None
        return self._host[start:start + min(int(lengths[0]), self.max_len)].copy()

    def _getitems(self, keys: Sequence[int]) -> List[np.ndarray]:
        """Sequences `keys`: up to SMALL_READ of them copied out of the mapped tokens, more in one padded
        gather."""
        k = _keys(keys, self._len, "sequence")
        if k.size == 0:
            return []
        if self._host is not None and k.size <= SMALL_READ:
            return [self._copy(i) for i in k.tolist()]
        with self._lock:
            batch, lengths = self._gather(k.size, self.max_len).run_sequences(self._file, k)
            rows = np.array(batch)
            del batch
        return [rows[i, : int(lengths[i])] for i in range(k.size)]
