"""Writing safetensors files from Python over libhostfirst's `hostfirst_writer_*`: numpy arrays (and hostfirst
Views and Buffers) are written from where they lie (a copy only for an array that is not C-contiguous
little-endian), through a temporary file renamed over the target (never a half-written file).

`safetensors.numpy.save_file` (0.8, and its main branch) does not copy either: it hands its Rust writer each
array's data pointer and length (`TensorSpec(data_ptr=a.ctypes.data, data_len=a.nbytes)`), byte-swapping only
big-endian arrays into a copy. It does not make a non-contiguous array contiguous (0.8.0 writes a transposed
array's bytes in memory order, so it reads back with its elements moved); this module copies such an array
into C order first.

`Writer` is the general form (pieces, ranks); `save_file` / `save` are the drop-ins for the `safetensors`
functions of the same names (hostfirst.numpy, hostfirst.jax)."""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _abi, _dtypes
from ._core import PathLike, c_path, c_string, check, check_path, text
from ._errors import error_named
from ._lib import lib
from ._tensors import Buffer, View

_u64s = ctypes.c_uint64 * 1
AGREE_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)


def _dims(values: Sequence[int]) -> Tuple[Any, int]:
    arr = (ctypes.c_uint64 * max(len(values), 1))(*[int(v) for v in values])
    return arr, len(values)


def host_bytes(array: Any, name: str) -> np.ndarray:
    """The array as C-contiguous little-endian memory numpy holds (the array itself when it already is: no
    copy), as `safetensors.numpy` lays it out. TypeError naming the tensor for what is not an array of a dtype
    safetensors holds."""
    if not isinstance(array, np.ndarray):
        if hasattr(array, "__array__") or hasattr(array, "__dlpack__"):
            array = np.asarray(array)
        else:
            raise TypeError(f"tensor '{name}': expected a numpy array (or a hostfirst View or Buffer), got "
                            f"{type(array).__name__}")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return np.asarray(array)  # the same object: typed as an ndarray for mypy --strict


def dtype_code(array: np.ndarray, name: str) -> int:
    try:
        return _dtypes.code_of(array.dtype)
    except ValueError as e:
        raise TypeError(f"tensor '{name}': dtype {array.dtype} cannot be saved: {e}") from None


def check_metadata(metadata: Optional[Mapping[str, str]]) -> Optional[List[Tuple[str, str]]]:
    """The metadata as (key, value) pairs; TypeError for anything but a str -> str mapping (as safetensors)."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict of str to str, got {type(metadata).__name__}")
    out = []
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"metadata must be a dict of str to str: {k!r}: {v!r} is not")
        out.append((k, v))
    return out


class Writer:
    """A safetensors writer (`hostfirst_writer`): declare tensors, set metadata, `finish()` once.

        with hostfirst.Writer("model.safetensors") as w:      # finish() on leaving the block without an error
            w.add("wte", array)                               # numpy: written from where it lies
            w.add("tokens", hostfirst.open("t.safetensors")["tokens"])   # a View: read through the engine
            w.metadata({"format": "np"})

    `max_part_bytes` splits the save into Hugging Face part files and an index; `sync=False` skips the fsyncs
    (the target is still replaced by a rename, never written in place). With `world` > 1 the save is
    collective: every rank declares the same tensors (`declare` with the global shape) and adds its pieces
    (`add_piece`); `agree(ok: bool) -> bool` must return whether every rank passed True (an allreduce of a
    logical and, e.g. over MPI or jax.distributed).

    `path` may be a URL (`s3://bucket/key.safetensors`, `gs://`, `az://`): `finish` uploads each file with a
    multipart upload (HOSTFIRST_REMOTE_PART_SIZE, HOSTFIRST_REMOTE_CONCURRENCY) that completes only when the
    whole save is uploaded; any failure aborts it and leaves no object. One process, whole tensors only."""

    def __init__(self, path: PathLike, *, max_part_bytes: int = 0, sync: bool = True, rank: int = 0, world: int = 1,
                 agree: Optional[Callable[[bool], bool]] = None, threads: int = 0, queue_depth: int = 0,
                 chunk_bytes: int = 0, staging_bytes: int = 0):
        o = _abi.WriterOptions()
        check(lib.hostfirst_writer_options_init(ctypes.byref(o), ctypes.sizeof(o)))
        o.max_part_bytes = int(max_part_bytes)
        o.no_sync = 0 if sync else 1
        o.threads, o.queue_depth = int(threads), int(queue_depth)
        o.chunk_bytes, o.staging_bytes = int(chunk_bytes), int(staging_bytes)
        o.rank, o.world = int(rank), int(world)
        self._keep: List[Any] = []  # arrays and buffers whose memory the library reads at finish
        self._agree_fn = None
        self._agree_error: Optional[BaseException] = None
        if agree is not None:
            def call(ok: int, _user: Any) -> int:
                try:
                    return 1 if agree(bool(ok)) else 0
                except BaseException as e:  # noqa: BLE001 - reported after finish returns
                    self._agree_error = e
                    return -1

            self._agree_fn = AGREE_FN(call)
            o.agree = ctypes.cast(self._agree_fn, ctypes.c_void_p)
        h = ctypes.c_void_p()
        check_path(lib.hostfirst_writer_open(c_path(path), ctypes.byref(o), ctypes.byref(h)), os.path.dirname(
            os.fsdecode(path)) or ".")
        self._h: Optional[int] = h.value
        self.info: Optional[Dict[str, Any]] = None
        self._finalizer = weakref.finalize(self, lib.hostfirst_writer_free, h.value)

    @classmethod
    def _on_fd(cls, fd: int, sync: bool = True) -> "Writer":
        self = cls.__new__(cls)
        o = _abi.WriterOptions()
        check(lib.hostfirst_writer_options_init(ctypes.byref(o), ctypes.sizeof(o)))
        o.no_sync = 0 if sync else 1
        h = ctypes.c_void_p()
        check(lib.hostfirst_writer_open_fd(int(fd), ctypes.byref(o), ctypes.byref(h)))
        self._h, self._keep, self._agree_fn, self._agree_error, self.info = h.value, [], None, None, None
        self._finalizer = weakref.finalize(self, lib.hostfirst_writer_free, h.value)
        return self

    def _handle(self) -> int:
        if self._h is None:
            raise error_named("INVALID_HANDLE", "the writer is closed")
        return self._h

    def add(self, name: str, tensor: Any) -> None:
        """Declares `name` with the bytes of `tensor`: a numpy array (or anything np.asarray takes), written from
        where it lies; a hostfirst View (read through the engine at finish); a hostfirst Buffer on any device."""
        n = c_string(name, "tensor name")
        if isinstance(tensor, View):
            check(lib.hostfirst_writer_add_view(self._handle(), n, tensor._h))
            return
        if isinstance(tensor, Buffer):
            check(lib.hostfirst_writer_add_buffer(self._handle(), n, tensor._h))
            return
        a = host_bytes(tensor, name)
        shape, rank = _dims(a.shape)
        check(lib.hostfirst_writer_add_host(self._handle(), n, dtype_code(a, name), shape, rank,
                                            a.ctypes.data_as(ctypes.c_void_p) if a.nbytes else None, a.nbytes))
        self._keep.append(a)

    def declare(self, name: str, dtype: Any, shape: Sequence[int]) -> None:
        """Declares `name` of `dtype` and (global) `shape`, its bytes to come from `add_piece`."""
        dims, rank = _dims(shape)
        check(lib.hostfirst_writer_declare(self._handle(), c_string(name, "tensor name"), _dtypes.code_of(dtype),
                                           dims, rank))

    def add_piece(self, name: str, start: Sequence[int], tensor: Any) -> None:
        """Adds the piece of declared `name` starting at element `start` of each dimension, with the extent and
        bytes of `tensor` (a numpy array, a hostfirst View or Buffer)."""
        n = c_string(name, "tensor name")
        st, rank = _dims(start)
        if isinstance(tensor, View):
            check(lib.hostfirst_writer_add_piece_view(self._handle(), n, st, rank, tensor._h))
            return
        if isinstance(tensor, Buffer):
            check(lib.hostfirst_writer_add_piece_buffer(self._handle(), n, st, rank, tensor._h))
            return
        a = host_bytes(tensor, name)
        ln, lrank = _dims(a.shape)
        if lrank != rank:
            raise error_named("INVALID_ARGUMENT",
                              f"tensor '{name}': a piece of rank {a.ndim} at a start of rank {rank}")
        check(lib.hostfirst_writer_add_piece_host(self._handle(), n, st, ln, rank,
                                                  a.ctypes.data_as(ctypes.c_void_p) if a.nbytes else None, a.nbytes))
        self._keep.append(a)

    def metadata(self, metadata: Optional[Mapping[str, str]]) -> None:
        """Sets `__metadata__` (str -> str, written in the mapping's order; None: none)."""
        pairs = check_metadata(metadata)
        if pairs is None:
            return
        keys = (ctypes.c_char_p * max(len(pairs), 1))(*[c_string(k, "metadata key") for k, _ in pairs])
        values = (ctypes.c_char_p * max(len(pairs), 1))(*[c_string(v, "metadata value") for _, v in pairs])
        check(lib.hostfirst_writer_set_metadata(self._handle(), keys, values, len(pairs)))

    def finish(self) -> Dict[str, Any]:
        """Writes the save (collective with ranks); returns what was written: `parts` (paths), `index`,
        `file_bytes`, `written`, `tensors`. The sources are released either way."""
        info = _abi.WriterInfo()
        info.struct_size = ctypes.sizeof(info)
        try:
            st = lib.hostfirst_writer_finish(self._handle(), ctypes.byref(info))
            if self._agree_error is not None:
                raise self._agree_error
            check(st)
            parts = []
            for i in range(info.parts):
                p = ctypes.c_char_p()
                check(lib.hostfirst_writer_part_path(self._handle(), i, ctypes.byref(p)))
                parts.append(text(p.value))
            self.info = {"parts": parts, "index": text(info.index) if info.index else None,
                         "file_bytes": info.file_bytes, "written": info.written, "tensors": info.tensors}
            return self.info
        finally:
            self._keep.clear()

    def close(self) -> None:
        """Frees the writer (one never finished writes nothing); also done when it is garbage-collected."""
        if self._h is not None:
            self._finalizer()
            self._h = None
            self._keep.clear()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            if exc_type is None and self.info is None:
                self.finish()
        finally:
            self.close()


def _check_dict(tensors: Any) -> None:
    if not isinstance(tensors, Mapping):
        raise TypeError(f"expected a dict of name -> array, got {type(tensors).__name__}")
    for k in tensors:
        if not isinstance(k, str):
            raise TypeError(f"tensor names must be str, got {k!r}")


def save_file(tensors: Dict[str, Any], filename: PathLike, metadata: Optional[Dict[str, str]] = None, *,
              max_part_bytes: int = 0, sync: bool = True) -> None:
    """`safetensors.numpy.save_file`'s drop-in: the same file, byte for byte (metadata in the dict's order),
    written from the arrays where they lie (no copy of each array), through a temporary file in the same
    directory that is synced and renamed over `filename` (never a half-written file; `sync=False` skips the
    fsyncs). `max_part_bytes` splits it into Hugging Face part files and an index. A URL (`s3://bucket/key`,
    `gs://`, `az://`) uploads the same bytes with a multipart upload that completes only when the save does (see
    the README, "Object storage")."""
    _check_dict(tensors)
    pairs = check_metadata(metadata)
    with Writer(filename, max_part_bytes=max_part_bytes, sync=sync) as w:
        for name, t in tensors.items():
            w.add(name, t)
        if pairs is not None:
            w.metadata(dict(pairs))


def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """`safetensors.numpy.save`'s drop-in: the bytes of the file `save_file` would write."""
    _check_dict(tensors)
    pairs = check_metadata(metadata)
    if not hasattr(os, "memfd_create"):  # not Linux (Windows: no writer on descriptors): a file in a temp dir
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "save.safetensors")
            save_file(tensors, p, metadata, sync=False)
            with open(p, "rb") as f:
                return f.read()
    fd = os.memfd_create("hostfirst-save")  # the file in memory, written through the writer's descriptor form
    try:
        w = Writer._on_fd(fd, sync=False)
        try:
            for name, t in tensors.items():
                w.add(name, t)
            if pairs is not None:
                w.metadata(dict(pairs))
            info = w.finish()
        finally:
            w.close()
        os.lseek(fd, 0, os.SEEK_SET)
        chunks, left = [], int(info["file_bytes"])
        while left:
            b = os.read(fd, min(left, 1 << 30))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)
