"""`hostfirst.safe_open`: the API most safetensors users write (`safetensors.safe_open`, 0.8's read API), over
hostfirst's reader.

    with hostfirst.safe_open("model.safetensors", framework="numpy") as f:
        f.keys(), f.metadata()
        w = f.get_tensor("embeddings.word_embeddings.weight")   # an owned, writable numpy array
        part = f.get_slice("embeddings.word_embeddings.weight")[:, 128:256]   # reads only those columns
        everything = f.get_tensors()                             # {name: array}, in file order, one parallel load
        weights = dict(f.prefetch(["a", "b"]))                   # safetensors 0.9: one read plan, in parallel

Values, shapes, dtypes, `keys()` (sorted), `offset_keys()` (file order), `metadata()` (None when the header has
no `__metadata__`, {} when it is empty) and the closed-file errors match `safetensors.safe_open` value for value;
the differences that remain are listed in the Python README ("Differences from safetensors").

Arrays are owned by default, as safetensors' are: filled by hostfirst's readers (`pread`/io_uring, parallel for
large tensors and for `get_tensors`), they never change and never fault when the file is later rewritten,
truncated or replaced. `zero_copy=True` opts into read-only numpy views of the file's mapping instead (nothing
read, nothing copied), with the mapping's hazard: a file truncated under them kills the process with SIGBUS.
"""

from __future__ import annotations

import json
import os
import struct
from collections import deque
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union, cast

import numpy as np

from . import _dtypes, _fast
from ._page_cache import page_cache_value
from ._core import Device, PathLike, check_backend
from ._errors import error_named
from ._owned import copy_named, copy_view, index_named, load_numpy, map_numpy
from ._read_plan import ReadPlan, SliceSpec
from ._targets import parse_target
from ._tensors import File, View

_FRAMEWORKS = {"numpy": "numpy", "np": "numpy", "jax": "jax", "flax": "jax"}
_ELSEWHERE = {"pt": "torch", "torch": "torch", "tf": "TensorFlow", "tensorflow": "TensorFlow", "paddle": "Paddle",
              "mlx": "MLX"}
_HOST_DEVICES = ("cpu", "cpu:0", "default", "host")


def _has_metadata_key(path: str) -> bool:
    """Whether the safetensors header of `path` has a `__metadata__` entry (an empty one included), read from the
    header itself: the library reports entries, and `{}` has none. False for anything that is not one
    safetensors file (a sharded set's index)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return False
            (n,) = struct.unpack("<Q", head)
            if n > os.fstat(fh.fileno()).st_size - 8:
                return False
            header = fh.read(n)
    except OSError:
        return False
    if b'"__metadata__"' not in header:  # the common case: no parse
        return False
    try:
        return "__metadata__" in json.loads(header)
    except ValueError:
        return False


def index_copy(view: View, key: Any) -> np.ndarray:
    """`view[key]` (numpy's basic indexing, and the empty list) as an owned, writable, C-contiguous numpy array:
    only the narrowed range holding the selected elements is read (pread), and an index that selects nothing
    reads nothing. An index on every dimension gives a 0-d array, as safetensors does (never a numpy scalar)."""
    return copy_selection(view, view._select(key))


def copy_selection(view: View, sel: Any, page_cache: str = "keep") -> np.ndarray:
    """`index_copy` of a selection already made (`view._select(key)`): what it selects, read (under `page_cache`,
    see `copy_view`)."""
    if sel.empty is not None:
        return np.empty(sel.empty, _dtypes.require_numpy_dtype(view.dtype_code))
    a = copy_view(sel.view, page_cache)
    if sel.after is None:
        return a
    part = a[sel.after + (Ellipsis,)]  # `...` last: a 0-d array where every dimension is indexed
    return cast(np.ndarray, part if part.flags.c_contiguous else part.copy())


class _Slice:
    """`safe_open(...).get_slice(name)`: the tensor's shape and dtype, and `[...]` reading only what it selects
    (numpy's basic indexing on any dimension: ints, slices with any step, `...`, and the empty list `[]`)."""

    __slots__ = ("_owner", "_view", "_described")

    def __init__(self, owner: "safe_open", tensor: Optional[View], described: Any = None):
        # `described`: the native extension's description of the view (`_fast.Described`, its capsule owning
        # the view); the View object is made from it only when something other than `[...]` needs it
        self._owner, self._view, self._described = owner, tensor, described

    @property
    def _tensor(self) -> View:
        view = self._view
        if view is None:
            view = self._view = View._described(self._described)
        return view

    def _handle(self) -> Optional[int]:
        return cast(Optional[int], self._described[1]) if self._view is None else self._view._h

    def get_shape(self) -> List[int]:
        return list(self._tensor.shape if self._view is not None else self._described[4])

    def get_dtype(self) -> str:
        """The safetensors dtype name ("F32", "BF16", ...)."""
        return self._tensor.dtype_name

    def __getitem__(self, key: Any) -> Any:
        owner = self._owner
        if not owner._mapped and owner.page_cache == "keep":
            # ints, step-1 slices, `...`: one C call (None: below). Under drop or bypass the copy goes through
            # copy_selection, which reads under the policy.
            fast = index_named(self._handle(), key)
            if fast is not None:
                return fast if owner.framework == "numpy" else owner._deliver(fast, self._tensor.name)
        name = self._tensor.name
        if self._owner._mapped:
            part = self._tensor[key]
            if isinstance(part, View):
                part = self._owner._numpy_of(part, name)
            return self._owner._deliver(np.asarray(part), name)
        sel = self._tensor._select(key)  # a bad index raises here, naming the tensor once
        pc = self._owner.page_cache
        return self._owner._deliver(self._owner._owned(lambda: copy_selection(self._tensor, sel, pc), name), name)

    def __repr__(self) -> str:
        return f"<hostfirst slice '{self._tensor.name}' {self._tensor.dtype_name} {list(self._tensor.shape)}>"


class PrefetchHandle:
    """What `safe_open.prefetch` returns (safetensors 0.9's handle): a single-use iterator of `(name, tensor)`
    pairs, each released by the handle as it is yielded; `len()` is the number not yet yielded. `plan` is the
    `ReadPlan` that read them (its numbers stay readable after it is closed)."""

    def __init__(self, pairs: List[Tuple[str, Any]], plan: ReadPlan):
        self._pending = deque(pairs)
        self.plan = plan

    def __len__(self) -> int:
        return len(self._pending)

    def __iter__(self) -> "PrefetchHandle":
        return self

    def __next__(self) -> Tuple[str, Any]:
        if not self._pending:
            raise StopIteration
        return self._pending.popleft()

    def __repr__(self) -> str:
        return f"<hostfirst PrefetchHandle: {len(self._pending)} tensors left>"


class safe_open:  # noqa: N801 - named as safetensors names it
    """Opens a safetensors file (or a sharded set's index) like `safetensors.safe_open`; a context manager.

    `framework`: "numpy" (or "np"): numpy arrays, bf16/fp8 through ml_dtypes; "jax" (or "flax"): jax.Arrays on
    the JAX device of `device`. `device`: for JAX, a hostfirst target ("cpu", "cuda:0", "default": hostfirst's
    default device, HOSTFIRST_DEFAULT_DEVICE, scopes, ...), optionally with a JAX memory kind ("pinned_host",
    "cpu:unpinned_host", "cuda:0:pinned_host"; see `hostfirst.jax`); for numpy a host ("cpu", "default"). 64-bit
    tensors with JAX's x64 mode off warn before they narrow, as `hostfirst.jax.load_file` does. Packed F4/F6
    tensors have no numpy or JAX dtype: TypeError naming them (read them as hostfirst Views via `hostfirst.open`).

    `backend` ("mmap" or "pread", keyword-only): safetensors 0.8's storage choice, checked and accepted; both
    give the same arrays here.

    `page_cache` (keyword-only: "keep", the default; "drop"; "bypass"): what `get_tensors`, `get_tensor` and
    `get_slice(...)[...]` leave in the page cache (the C header's hostfirst_page_cache: a load, or a put to cpu
    per tensor or selection, under the policy). Anything else is InvalidArgumentError naming page_cache. With
    `zero_copy=True` the arrays are the mapping's pages: no policy applies.

    `zero_copy` (keyword-only, default False): False gives owned arrays, as safetensors does: each tensor is read
    (pread/io_uring; parallel for large tensors and `get_tensors`) into memory of its own, writable, and nothing
    done to the file afterwards changes it or can crash the process. True gives read-only numpy views of the
    file's mapping instead: nothing is read or copied, but the views show the new bytes if the file is rewritten
    in place (`open(path, "wb")`, `np.save`) and **a read of a view whose file was truncated kills the process
    with SIGBUS** (no exception can be raised). Use it only for files nothing rewrites while you hold the arrays
    (writers that replace the file with a rename are safe: the views keep the old file). It applies to numpy
    arrays: jax.Arrays are always in JAX's own memory, read with pread (never an alias of the mapping).
    """

    def __init__(self, filename: PathLike, framework: str = "numpy", device: Union[str, Device] = "default", *,
                 backend: str = "mmap", zero_copy: bool = False, page_cache: str = "keep"):
        fw = _FRAMEWORKS.get(framework) if isinstance(framework, str) else None
        if fw is None:
            if isinstance(framework, str) and framework in _ELSEWHERE:
                raise error_named("INVALID_ARGUMENT", f"framework {framework!r}: hostfirst.safe_open gives numpy "
                                  f"('numpy', 'np') and JAX ('jax', 'flax') arrays, not {_ELSEWHERE[framework]} "
                                  "tensors (use safetensors for those, or pass a hostfirst View to "
                                  "from_dlpack)")
            raise error_named("INVALID_ARGUMENT", f"framework {framework!r} is invalid: hostfirst.safe_open gives "
                              "'numpy' (or 'np') and 'jax' (or 'flax') arrays")
        check_backend(backend)
        page_cache_value(page_cache)
        self.page_cache = page_cache
        if fw == "jax":
            parse_target(device)  # a bad device or memory kind fails here, as safetensors checks it at open
        elif str(device).strip().lower() not in _HOST_DEVICES:
            raise error_named("INVALID_ARGUMENT", f"device {str(device)!r} is not supported for framework numpy: "
                              "numpy arrays live in host memory (device='cpu'); for arrays on a device use "
                              "framework='jax'")
        self.framework, self.device, self.backend, self.zero_copy = fw, device, backend, bool(zero_copy)
        self._mapped = self.zero_copy and fw == "numpy"  # JAX arrays are JAX's own memory either way
        self._file = File(filename)
        self._closed = False
        # None or {} when the header has no entries: told apart on the first metadata() (it reads the header
        # again, which a 100k-tensor file makes megabytes: not at open)
        self._metadata: Optional[Dict[str, str]] = dict(self._file.metadata) or None
        self._metadata_checked = self._metadata is not None

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file. Arrays and slices already taken stay valid; every other call raises
        InvalidHandleError (a ValueError) saying the file is closed, as safetensors raises its "File is closed"."""
        if not self._closed:
            self._closed = True
            self._file._release()

    def _open(self) -> File:
        if self._closed:
            raise error_named("INVALID_HANDLE", f"File is closed: {self._file.path}")
        return self._file

    def keys(self) -> List[str]:
        """Tensor names, sorted (as safetensors gives them)."""
        return sorted(self._open())

    def offset_keys(self) -> List[str]:
        """Tensor names in file order (by data offset)."""
        return list(self._open())

    def metadata(self) -> Optional[Dict[str, str]]:
        """The header's `__metadata__`: None when the header has none, {} when it is empty."""
        self._open()
        if not self._metadata_checked:
            self._metadata = {} if _has_metadata_key(self._file.path) else None
            self._metadata_checked = True
        return None if self._metadata is None else dict(self._metadata)

    def get_tensor(self, name: str) -> Any:
        """The whole tensor: a numpy array (numpy) or a jax.Array (jax); owned unless `zero_copy=True`."""
        f = self._open()
        if not self._mapped and self.page_cache == "keep":
            fast = copy_named(f, name)  # the native extension's one call (None: the ctypes path below)
            if fast is not None:
                return self._deliver(fast, name)
        view = f[name]
        if self._mapped:
            return self._deliver(self._numpy_of(view, name), name)
        return self._deliver(self._owned(lambda: copy_view(view, self.page_cache), name), name)

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, {name: array} in file order (safetensors 0.8's `get_tensors`). Owned arrays come from
        one parallel load into one host allocation (for JAX, handed to `device` as one batch)."""
        f = self._open()
        arrays = map_numpy(f) if self._mapped else load_numpy(f, self.page_cache)
        if self.framework == "numpy":
            return dict(arrays)
        return cast(Dict[str, Any], self._jax().host_to_jax(arrays, self.device))

    def read_plan(self, slices: Iterable[SliceSpec], *, max_over_read: Optional[float] = None,
                  threads: int = 0) -> ReadPlan:
        """A declared read plan of this file (`hostfirst.ReadPlan`): `slices` are tensor names or `(name, index)`
        with numpy basic indexing of step 1; inspect its numbers (`needed_bytes`, `read_bytes`, `requests`,
        `peak_memory_bytes`, `over_read`), then pass it to `prefetch` (or call its `read()`)."""
        return ReadPlan(self._open(), slices, max_over_read=max_over_read, threads=threads)

    def prefetch(self, names: Union[None, Iterable[str], ReadPlan] = None, dtype: Any = None,
                 max_inflight: int = 8) -> "PrefetchHandle":
        """safetensors 0.9's bulk load: a single-use iterator of `(name, tensor)` pairs (`dict(f.prefetch(...))`
        takes them all; `len()` gives how many remain). `names`: the tensors (None: every tensor of the file), or
        a `ReadPlan` from `read_plan` (its declared slices, each under its tensor's name). Everything is read by
        one plan, in parallel, before the first pair is returned: the tensors' byte ranges in file order,
        neighbouring ones merged under the over-read cap; the handle's `plan` holds its numbers. Pairs come in the
        order given, duplicates once (None: file order; safetensors leaves the order to its backend). `dtype`, when given, converts each array (`astype`); `max_inflight` (a positive int) is
        accepted as safetensors accepts it (the engine sets its own queue depth)."""
        f = self._open()
        if isinstance(max_inflight, bool) or not isinstance(max_inflight, int) or max_inflight < 1:
            raise error_named("INVALID_ARGUMENT", f"max_inflight is {max_inflight!r}; a positive int")
        if isinstance(names, ReadPlan):
            plan, owned = names, False
        else:
            wanted = list(f) if names is None else list(dict.fromkeys(names))
            for n in wanted:
                if not isinstance(n, str):
                    raise error_named("INVALID_ARGUMENT", f"prefetch names: {n!r} is not a str")
                if n not in f:
                    raise f.missing(n)
            plan, owned = ReadPlan(f, wanted), True
        try:
            pairs = plan.read()
        finally:
            if owned:
                plan.close()
        out = []
        for name, a in pairs:
            if dtype is not None:
                a = a.astype(dtype)
            out.append((name, self._deliver(a, name)))
        return PrefetchHandle(out, plan)

    def get_slice(self, name: str) -> _Slice:
        """A lazy handle: `get_shape()`, `get_dtype()`, and `[...]` with numpy's basic indexing on any dimension,
        reading only the range that holds what it selects."""
        f = self._open()
        native = _fast.native
        if native is not None and not self._mapped and type(name) is str and f._h is not None:
            d = native.view(f._h, name)  # one C call (None: a status other than OK, raised by f[name] below)
            if d is not None:
                return _Slice(self, None, d)
        return _Slice(self, f[name])

    def _numpy_of(self, view: View, name: str) -> np.ndarray:
        """The zero-copy numpy view of the mapping (`zero_copy=True`); TypeError naming the tensor otherwise."""
        return self._owned(view.numpy, name)

    def _owned(self, make: Any, name: str) -> np.ndarray:
        """`make()`, its TypeError (a dtype numpy cannot hold) naming the file and the tensor."""
        try:
            return make()  # type: ignore[no-any-return]
        except TypeError as e:
            raise TypeError(f"{self._file.path}: tensor '{name}': {e}; hostfirst.open(path)[name] gives it as a "
                            "hostfirst View") from None

    def _deliver(self, array: np.ndarray, name: str) -> Any:
        if self.framework == "numpy":
            return array
        return self._jax().to_jax(array, name, self.device)

    @staticmethod
    def _jax() -> Any:
        """hostfirst.jax, imported when the first array is made (ImportError naming pip install hostfirst[jax]
        without JAX), so that opening a file for JAX and listing it need no JAX, as with safetensors."""
        from . import jax as _jax

        return _jax

    def __repr__(self) -> str:
        return f"hostfirst.safe_open('{self._file.path}', framework='{self.framework}')"
