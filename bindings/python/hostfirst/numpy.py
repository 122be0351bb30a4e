"""hostfirst for numpy users: `load_file`, the drop-in for `safetensors.numpy.load_file`.

    import hostfirst.numpy
    params = hostfirst.numpy.load_file("model.safetensors")   # {name: np.ndarray}, in file order

Same names, dtypes, shapes and values as `safetensors.numpy.load_file` (bf16/fp8 through ml_dtypes), but
nothing is read: every array is a zero-copy, read-only view of the file's mapping (it keeps the mapping alive
on its own). Where you need to write, copy the array (`np.array(a)`) or put the tensor with
`hostfirst.open(path)[name].to("cpu", copy_on_write=True)` (a private writable mapping; the file never changes).
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from ._core import PathLike
from ._safe_open import safe_open

__all__ = ["load_file"]


def load_file(filename: PathLike) -> Dict[str, np.ndarray]:
    """Every tensor of a safetensors file (or a sharded set's index) as a zero-copy, read-only numpy array,
    in file order. TypeError naming the tensor for the packed F4/F6 dtypes, which numpy cannot hold."""
    with safe_open(filename, framework="numpy") as f:
        return {name: f.get_tensor(name) for name in f.offset_keys()}
