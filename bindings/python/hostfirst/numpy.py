"""hostfirst for numpy users: `load_file`, `load`, `save_file` and `save`, the drop-ins for `safetensors.numpy`'s.

    import hostfirst.numpy
    params = hostfirst.numpy.load_file("model.safetensors")   # {name: np.ndarray}, in file order
    params = hostfirst.numpy.load(open("model.safetensors", "rb").read())   # from the bytes of a file

Same names, dtypes, shapes and values as safetensors (bf16/fp8 through ml_dtypes), and, as with safetensors, every
array is owned and writable: hostfirst reads the whole file with its parallel readers into one allocation the
arrays share (freed with the last of them), so rewriting, truncating or replacing the file afterwards changes
nothing in them and cannot crash the process.

`load_file(path, zero_copy=True)` gives read-only views of the file's mapping instead: nothing is read (opening a
19 GiB token file costs its header), but the arrays show the new bytes when the file is rewritten in place, and
**reading one after the file was truncated kills the process with SIGBUS**: no exception can be raised. Use it only
for files nothing rewrites while you hold the arrays (a writer that writes a new file and renames it over the old
one is safe: the views keep the old file).

    hostfirst.numpy.save_file({"w": w}, "model.safetensors", metadata={"format": "np"})
    blob = hostfirst.numpy.save({"w": w})

`save_file` writes the bytes `safetensors.numpy.save_file` writes (metadata in the dict's order), from the arrays
where they lie (no copy of each array), through a temporary file renamed over the target: never a half-written
file (`sync=False` skips the fsyncs; `max_part_bytes` splits into Hugging Face part files and an index).
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from ._core import PathLike, check_backend
from ._owned import load_numpy, memory_file
from ._page_cache import page_cache_value
from ._safe_open import safe_open
from ._save import save, save_file
from ._tensors import File

__all__ = ["load_file", "load", "save", "save_file"]


def load_file(filename: PathLike, *, backend: str = "mmap", zero_copy: bool = False,
              page_cache: str = "keep") -> Dict[str, np.ndarray]:
    """Every tensor of a safetensors file (or a sharded set's index) as a numpy array, in file order.

    Default: owned, writable arrays, read by hostfirst's parallel readers into one host allocation (no later
    change to the file reaches them). `zero_copy=True`: read-only views of the file's mapping, nothing read;
    a file truncated under them kills the process with SIGBUS on the next read (see the module doc).
    `backend` ("mmap" or "pread"): safetensors 0.8's keyword, checked; both read the same way here.
    `page_cache` ("keep", the default; "drop"; "bypass"): what the read leaves in the page cache (see the C
    header's hostfirst_page_cache): "drop" gives back the file's pages the load brought in, "bypass" reads
    with direct I/O where the file system allows it. Anything else: InvalidArgumentError naming page_cache.
    With zero_copy=True nothing is read, so no policy applies (it is still checked).
    TypeError naming the tensor for the packed F4/F6 dtypes, which numpy cannot hold."""
    check_backend(backend)
    page_cache_value(page_cache)
    if zero_copy:
        with safe_open(filename, framework="numpy", zero_copy=True) as opened:
            return opened.get_tensors()
    f = File(filename)
    try:
        return load_numpy(f, page_cache)
    finally:
        f._release()


def load(data: bytes) -> Dict[str, np.ndarray]:
    """Every tensor of a safetensors image in memory (the bytes of a file) as an owned, writable numpy array,
    in file order (`safetensors.numpy.load`, whose dict is in no particular order). The image is validated as
    files are (a FormatError subclass, a ValueError, names what is wrong); TypeError for anything but bytes."""
    f = memory_file(data)
    try:
        return load_numpy(f)
    finally:
        f._release()
