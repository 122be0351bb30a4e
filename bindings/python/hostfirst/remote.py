"""Process-wide settings of remote sources (s3://, gs://, az://, http(s):// URLs) over libhostfirst's
hostfirst_remote_configure:

    hostfirst.remote.configure(cache_dir="/var/cache/models", max_concurrency=16, max_retries=5)
    arrays = hostfirst.numpy.load_file("s3://bucket/model.safetensors")   # data ranges kept in the cache
    hostfirst.remote.reset()                                              # back to the environment

A setting left as None is not configured: its environment variable decides (HOSTFIRST_REMOTE_CONCURRENCY,
HOSTFIRST_REMOTE_RETRIES, HOSTFIRST_REMOTE_PART_SIZE, HOSTFIRST_REMOTE_TIMEOUT, HOSTFIRST_REMOTE_CACHE,
HOSTFIRST_REMOTE_CACHE_MAX_BYTES), else the library's default. Each call replaces the whole configuration, and
applies to files opened after it.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional, Union

from . import _abi
from ._core import check
from ._errors import error_named
from ._lib import lib

__all__ = ["configure", "reset"]


def _ms(seconds: Optional[float], name: str) -> int:
    if seconds is None:
        return 0
    if not seconds > 0:
        raise error_named("INVALID_ARGUMENT", f"{name} must be a positive number of seconds, not {seconds!r}")
    return max(1, min(int(round(seconds * 1000)), 2**32 - 1))


def configure(*, max_concurrency: Optional[int] = None, max_retries: Optional[int] = None,
              part_size: Optional[int] = None, request_timeout: Optional[float] = None,
              connect_timeout: Optional[float] = None, cache_dir: Union[str, "os.PathLike[str]", None] = None,
              cache_max_bytes: Optional[int] = None) -> None:
    """Sets the settings of remote sources for the whole process (configured > environment > default).

    max_concurrency: concurrent ranged GETs of one read (and parts of one upload), 1 to 1024.
    max_retries: retries of one request (0: none), at most 100.
    part_size: bytes per part of a multipart upload.
    request_timeout, connect_timeout: seconds.
    cache_dir: the local cache folder (made if missing): objects' data ranges are kept there keyed by URL and
        ETag, so a later open of an unchanged object reads them from disk; a replaced object is fetched anew.
    cache_max_bytes: bound on the cache folder; the least recently used chunks are removed past it.

    Raises hostfirst.InvalidArgumentError (a ValueError) for a value out of range, hostfirst.IoError for a
    cache folder that cannot be made; the earlier configuration then stays.
    """
    o = _abi.RemoteOptions()
    check(lib.hostfirst_remote_options_init(ctypes.byref(o), ctypes.sizeof(o)))
    if max_concurrency is not None:
        if not 1 <= max_concurrency < 2**32:  # (0 would mean "not configured"; the library checks the top)
            raise error_named("INVALID_ARGUMENT", f"max_concurrency is {max_concurrency}; from 1 to 1024")
        o.max_concurrency = max_concurrency
    if max_retries is not None:
        if not 0 <= max_retries < 2**31:  # (the library checks the top)
            raise error_named("INVALID_ARGUMENT", f"max_retries is {max_retries}; from 0 to 100")
        o.max_retries = -1 if max_retries == 0 else max_retries
    if part_size is not None:
        if not 0 < part_size < 2**64:
            raise error_named("INVALID_ARGUMENT", f"part_size is {part_size}; a positive number of bytes")
        o.part_size = part_size
    o.request_timeout_ms = _ms(request_timeout, "request_timeout")
    o.connect_timeout_ms = _ms(connect_timeout, "connect_timeout")
    keep = None
    if cache_dir is not None and os.fspath(cache_dir) != "":
        keep = os.fsencode(os.fspath(cache_dir))
        o.cache_dir = keep
    if cache_max_bytes is not None:
        if not 0 < cache_max_bytes < 2**64:
            raise error_named("INVALID_ARGUMENT", f"cache_max_bytes is {cache_max_bytes}; a positive number of bytes")
        o.cache_max_bytes = cache_max_bytes
    check(lib.hostfirst_remote_configure(ctypes.byref(o)))
    del keep


def reset() -> None:
    """Forgets the configured settings: the environment variables and the defaults decide again."""
    check(lib.hostfirst_remote_configure(None))
