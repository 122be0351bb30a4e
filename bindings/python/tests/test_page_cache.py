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


def _cached_range(path: Path, start: int, length: int) -> float:
    """The fraction of the pages of bytes [start, start + length) of the file in the page cache now."""
    page = mmap.PAGESIZE
    lo, hi = start // page * page, (start + length + page - 1) // page * page
    vec = (ctypes.c_ubyte * ((hi - lo) // page))()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, hi - lo, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            assert _libc.mincore(ctypes.c_void_p(addr), hi - lo, vec) == 0, os.strerror(ctypes.get_errno())
        finally:
            _libc.munmap(ctypes.c_void_p(addr), hi - lo)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec) / len(vec)


def _data_start(path: Path, name: str) -> int:
    """The file offset of tensor `name`'s first byte (from the safetensors header)."""
    import json
    import struct

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return 8 + n + header[name]["data_offsets"][0]


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
        "safe_open.get_tensor": _safe_open_each,
        "safe_open.get_slice": _safe_open_slices,
        "load_shards": _shards,
        "View.to": lambda p, pc: {k: hostfirst.open(p)[k].to("cpu", page_cache=pc).numpy() for k in
                                  hostfirst.open(p)},
        "hostfirst.load": lambda p, pc: {k: np.asarray(v) for k, v in
                                         hostfirst.load(p, default="cpu", page_cache=pc).items()},
    }


def _safe_open_all(p, pc):
    with hostfirst.safe_open(p, framework="numpy", page_cache=pc) as f:
        return f.get_tensors()


def _safe_open_each(p, pc):
    with hostfirst.safe_open(p, framework="numpy", page_cache=pc) as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def _safe_open_slices(p, pc):
    with hostfirst.safe_open(p, framework="numpy", page_cache=pc) as f:
        return {k: np.concatenate([f.get_slice(k)[: 1 << 21], f.get_slice(k)[1 << 21:]]) for k in f.keys()}


def _shards(p, pc):
    got = hostfirst.load_shards(p, mesh={"x": 2}, rules=[("t*", ("x",))], owned=[0, 1], page_cache=pc)
    return {k: np.concatenate([np.asarray(s.buffer) for s in got if s.name == k]) for k in {s.name for s in got}}


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
        lambda: hostfirst.Gather("cpu", "int32", 2, 16, page_cache=bad),
        lambda: hostfirst.load_shards(str(path), mesh={"x": 2}, rules=[], owned=[0], page_cache=bad),
        lambda: hostfirst.open(str(path))["t0"].to("cpu", page_cache=bad),
    ]
    for call in calls:
        with pytest.raises(hostfirst.InvalidArgumentError, match=r"^INVALID_ARGUMENT: page_cache .* is not a page-cache policy"):
            call()


def test_gathers_leave_the_windows_pages_as_said(big):
    """A batch of 32 windows of 64 KiB over t1: keep leaves the windows' pages cached, drop and bypass at most
    5 % of them; bytes exact."""
    path, tensors = big
    start = _data_start(path, "t1")
    window, batch = 16384, 32
    offsets = [i * ((4 << 20) // batch) + 1000 for i in range(batch)]
    view = hostfirst.open(str(path))["t1"]
    for pc in ("keep", "drop", "bypass"):
        g = hostfirst.Gather("cpu", "int32", batch, window, page_cache=pc)
        _evict(path)
        b = np.asarray(g.run(view, offsets))
        for i, o in enumerate(offsets):
            np.testing.assert_array_equal(b[i], tensors["t1"][o:o + window])
        cached = sum(_cached_range(path, start + 4 * o, 4 * window) for o in offsets) / batch
        if pc == "keep":
            assert cached > 0.95, f"gather keep: {cached:.3f}"
        else:
            assert cached <= 0.05, f"gather {pc}: {cached * 100:.1f} % of the windows' pages stay cached"
