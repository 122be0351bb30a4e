"""`hostfirst.safe_open`: the API most safetensors users write (`safetensors.safe_open`), over hostfirst's mapping.

    with hostfirst.safe_open("model.safetensors", framework="numpy") as f:
        f.keys(), f.metadata()
        w = f.get_tensor("embeddings.word_embeddings.weight")   # zero-copy, read-only numpy array
        part = f.get_slice("embeddings.word_embeddings.weight")[:, 128:256]   # reads nothing: a strided view

Values, shapes, dtypes, `keys()` (sorted), `offset_keys()` (file order) and `metadata()` (None when the file
has none) match `safetensors.safe_open` value for value. What differs: numpy arrays are zero-copy views of the
read-only mapping (a write raises; `np.array(a)` copies), where safetensors copies each tensor into new memory;
`get_slice(...)[...]` takes numpy's basic indexing on any dimension (negative bounds included) and reads nothing.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ._core import PathLike
from ._tensors import File, View

_FRAMEWORKS = {"numpy": "numpy", "np": "numpy", "jax": "jax", "flax": "jax"}


class _Slice:
    """`safe_open(...).get_slice(name)`: the tensor's shape and dtype, and `[...]` without reading the rest."""

    def __init__(self, owner: "safe_open", tensor: View):
        self._owner, self._tensor = owner, tensor

    def get_shape(self) -> List[int]:
        return list(self._tensor.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype name ("F32", "BF16", ...)."""
        return self._tensor.dtype_name

    def __getitem__(self, key: Any) -> Any:
        part = self._tensor[key]
        return self._owner._convert(part, self._tensor.name)

    def __repr__(self) -> str:
        return f"<hostfirst slice '{self._tensor.name}' {self._tensor.dtype_name} {list(self._tensor.shape)}>"


class safe_open:  # noqa: N801 - named as safetensors names it
    """Opens a safetensors file (or a sharded set's index) like `safetensors.safe_open`; a context manager.

    `framework`: "numpy" (or "np"): numpy arrays, zero-copy and read-only, bf16/fp8 through ml_dtypes;
    "jax" (or "flax"): jax.Arrays on the JAX device of `device`. `device`: a hostfirst target for JAX arrays,
    "default" (hostfirst's default device: HOSTFIRST_DEFAULT_DEVICE, scopes, ...) unless given; ignored for
    numpy, whose arrays stay on the host. 64-bit tensors with JAX's x64 mode off warn before they narrow, as
    `hostfirst.jax.load_file` does. Packed F4/F6 tensors have no numpy or JAX dtype: TypeError naming them
    (read them as hostfirst Tensors through `hostfirst.open`).
    """

    def __init__(self, filename: PathLike, framework: str = "numpy", device: str = "default"):
        fw = _FRAMEWORKS.get(str(framework).lower())
        if fw is None:
            raise ValueError(f"framework {framework!r}: hostfirst.safe_open gives 'numpy' (or 'np') and 'jax' "
                             "(or 'flax') arrays")
        if fw == "jax":
            from . import jax as _jax  # ImportError saying pip install hostfirst[jax] without JAX

            self._jax: Any = _jax
        self.framework, self.device = fw, device
        self._file = File(filename)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file; arrays already taken stay valid (they keep the mapping alive)."""
        self._file.close()

    def keys(self) -> List[str]:
        """Tensor names, sorted (as safetensors gives them)."""
        return sorted(self._file)

    def offset_keys(self) -> List[str]:
        """Tensor names in file order."""
        return list(self._file)

    def metadata(self) -> Optional[Dict[str, str]]:
        """The header's `__metadata__`, or None when it has none."""
        return dict(self._file.metadata) or None

    def get_tensor(self, name: str) -> Any:
        """The whole tensor: a numpy array on the mapping (numpy), or a jax.Array (jax)."""
        return self._convert(self._file[name], name)

    def get_slice(self, name: str) -> _Slice:
        """A lazy handle: `get_shape()`, `get_dtype()`, and `[...]` with numpy's basic indexing on any
        dimension, reading nothing but what the result needs (a zero-copy view for numpy)."""
        return _Slice(self, self._file[name])

    def _convert(self, part: Any, name: str) -> Any:
        if isinstance(part, View):
            try:
                part = part.numpy()
            except TypeError as e:
                raise TypeError(f"{self._file.path}: tensor '{name}' ({part.dtype_name}): {e}; "
                                "hostfirst.open(path)[name] gives it as a hostfirst View") from None
        if self.framework == "numpy":
            return part
        return self._jax.to_jax(np.asarray(part), name, self.device)

    def __repr__(self) -> str:
        return f"hostfirst.safe_open('{self._file.path}', framework='{self.framework}')"
