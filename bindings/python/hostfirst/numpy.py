"""hostfirst for numpy users: `load_file`, `save_file` and `save`, the drop-ins for `safetensors.numpy`'s.

    import hostfirst.numpy
    params = hostfirst.numpy.load_file("model.safetensors")   # {name: np.ndarray}, in file order

Same names, dtypes, shapes and values as `safetensors.numpy.load_file` (bf16/fp8 through ml_dtypes), but
nothing is read: every array is a zero-copy, read-only view of the file's mapping (it keeps the mapping alive
on its own). Where you need to write, copy the array (`np.array(a)`) or put the tensor with
`hostfirst.open(path)[name].to("cpu", copy_on_write=True)` (a private writable mapping; the file never changes).

    hostfirst.numpy.save_file({"w": w}, "model.safetensors", metadata={"format": "np"})
    blob = hostfirst.numpy.save({"w": w})

`save_file` writes the bytes `safetensors.numpy.save_file` writes (metadata in the dict's order), from the arrays
where they lie (no copy of each array), through a temporary file renamed over the target: never a half-written
file (`sync=False` skips the fsyncs; `max_part_bytes` splits into Hugging Face part files and an index).
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from ._core import PathLike
from ._safe_open import safe_open
from ._save import save, save_file

__all__ = ["load_file", "save", "save_file"]


def load_file(filename: PathLike) -> Dict[str, np.ndarray]:
    """Every tensor of a safetensors file (or a sharded set's index) as a zero-copy, read-only numpy array,
    in file order. TypeError naming the tensor for the packed F4/F6 dtypes, which numpy cannot hold."""
    with safe_open(filename, framework="numpy") as f:
        return {name: f.get_tensor(name) for name in f.offset_keys()}
