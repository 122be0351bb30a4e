"""The page-cache policy of a read (issue 45, point 1): `page_cache="keep" | "drop" | "bypass"` on
`hostfirst.numpy.load_file`, `hostfirst.jax.load_file`, `safe_open` and `hostfirst.load`, passed down as the
`page_cache` field of `hostfirst_load_options` (see the C header's `hostfirst_page_cache`)."""

from __future__ import annotations

import ctypes
from typing import Optional

from . import _abi
from ._core import check
from ._errors import error_named
from ._lib import lib

# The C constants HOSTFIRST_PAGE_CACHE_*.
POLICIES = {"keep": 0, "drop": 1, "bypass": 2}


def page_cache_value(page_cache: str) -> int:
    """The C value of a policy name; InvalidArgumentError naming the parameter for anything else."""
    if not isinstance(page_cache, str) or page_cache not in POLICIES:
        raise error_named("INVALID_ARGUMENT",
                          f"page_cache {page_cache!r} is not a page-cache policy: 'keep', 'drop' or 'bypass'")
    return POLICIES[page_cache]


def load_options(page_cache: str) -> Optional[_abi.LoadOptions]:
    """`hostfirst_load_options` carrying the policy (checked), or None for "keep" (the defaults)."""
    value = page_cache_value(page_cache)
    if value == 0:
        return None
    opts = _abi.LoadOptions()
    check(lib.hostfirst_load_options_init(ctypes.byref(opts), ctypes.sizeof(opts)))
    opts.page_cache = value
    return opts


def options_ref(opts: Optional[_abi.LoadOptions]) -> object:
    """What `hostfirst_load_run` takes for `opts`: a pointer to them, or None (NULL: the defaults)."""
    return None if opts is None else ctypes.byref(opts)
