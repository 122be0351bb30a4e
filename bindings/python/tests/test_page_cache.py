"""page_cache="keep" | "drop" | "bypass" on the Python loads (issue 45, point 1): the bytes are exact, drop and
bypass leave at most 5 % of the file in the page cache (mincore over a fresh mapping), keep leaves it cached,
and an unknown value is refused naming the parameter. Linux only (mincore, posix_fadvise); the files live
under target/ (a real disk: tmpfs may refuse O_DIRECT, and bypass then falls back to drop)."""

import ctypes
import mmap
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import hostfirst
import hostfirst.numpy

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page-cache policies are Linux's")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _cached(path: Path) -> float:
    """The fraction of the file's pages in the page cache now (mincore over a fresh read-only mapping, which
    touches no page)."""
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            assert _libc.mincore(ctypes.c_void_p(addr), size, vec) == 0, os.strerror(ctypes.get_errno())
        finally:
            _libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec) / pages


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def big():
    root = Path(__file__).resolve().parents[3] / "target" / "hostfirst-tests" / f"py-page-cache-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(45)
    tensors = {f"t{i}": rng.integers(0, 2**31, size=(4 << 20,), dtype=np.int32) for i in range(4)}  # 64 MiB
    path = root / "big.safetensors"
    hostfirst.numpy.save_file(tensors, str(path))
    return path, tensors


def _loaders():
    return {
        "numpy.load_file": lambda p, pc: hostfirst.numpy.load_file(p, page_cache=pc),
        "safe_open": lambda p, pc: _safe_open_all(p, pc),
        "hostfirst.load": lambda p, pc: {k: np.asarray(v) for k, v in
                                         hostfirst.load(p, default="cpu", page_cache=pc).items()},
    }


def _safe_open_all(p, pc):
    with hostfirst.safe_open(p, framework="numpy", page_cache=pc) as f:
        return f.get_tensors()


@pytest.mark.parametrize("loader", sorted(_loaders()))
def test_policies_leave_the_cache_as_said(big, loader):
    path, tensors = big
    load = _loaders()[loader]
    for pc in ("keep", "drop", "bypass"):
        _evict(path)
        got = load(str(path), pc)
        assert sorted(got) == sorted(tensors)
        for k, v in tensors.items():
            np.testing.assert_array_equal(got[k], v)
        cached = _cached(path)
        if pc == "keep":
            assert cached > 0.95, f"{loader} keep: {cached:.3f}"
        else:
            assert cached <= 0.05, f"{loader} {pc}: {cached * 100:.1f} % of the file stays cached"


def test_jax_load_file_takes_the_policy(big):
    jax_mod = pytest.importorskip("hostfirst.jax", exc_type=ImportError)
    pytest.importorskip("jax")
    path, tensors = big
    _evict(path)
    got = jax_mod.load_file(str(path), default="cpu", page_cache="drop")
    np.testing.assert_array_equal(np.asarray(got["t1"]), tensors["t1"])
    assert _cached(path) <= 0.05
    with pytest.raises(hostfirst.InvalidArgumentError, match="page_cache 'none'"):
        jax_mod.load_file(str(path), page_cache="none")


@pytest.mark.parametrize("bad", ["none", "KEEP", "", 1, None])
def test_an_unknown_policy_is_refused_naming_the_parameter(big, bad):
    path, _ = big
    calls = [
        lambda: hostfirst.numpy.load_file(str(path), page_cache=bad),
        lambda: hostfirst.safe_open(str(path), framework="numpy", page_cache=bad),
        lambda: hostfirst.load(str(path), page_cache=bad),
    ]
    for call in calls:
        with pytest.raises(hostfirst.InvalidArgumentError, match=r"^INVALID_ARGUMENT: page_cache .* is not a page-cache policy"):
            call()
