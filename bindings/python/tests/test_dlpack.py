"""DLPack negotiation with the real consumers: numpy (versioned on numpy >= 2.1, legacy below) and JAX (legacy),
every dtype both sides hold, both capsule forms, bit-exact; copy honoured or BufferError; a consumer's write
never reaching the file; batches unchanged while a consumer holds them. hostfirst has no DLPack import, so the
other direction is the consumer's array written to a safetensors file and read back through hostfirst."""

import ctypes
import gc
import json
import struct
from pathlib import Path

import numpy as np
import pytest

import hostfirst
from hostfirst import _abi

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
ml_dtypes = pytest.importorskip("ml_dtypes")
NUMPY_2_1 = tuple(map(int, np.__version__.split(".")[:2])) >= (2, 1)


def tensors():
    out = []
    for fname in ("basic.safetensors", "lowp.safetensors"):
        f = hostfirst.open(FIX / fname)
        out += [f[n] for n in f if f[n].dtype_name not in ("F4", "F6_E2M3", "F6_E3M2")]
    return out


ALL = tensors()
IDS = [f"{t.name}-{t.dtype_name}" for t in ALL]


class Legacy:
    """Hands a consumer only the legacy capsule, as a pre-DLPack-1.0 producer would be asked for."""

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, stream=None, **_ignored):
        return self.x.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


def capsule_name(cap):
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return name(cap)


def test_capsule_forms_follow_max_version():
    t = hostfirst.open(FIX / "basic.safetensors")["i32"]
    assert capsule_name(t.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert capsule_name(t.__dlpack__(max_version=(1, 2))) == b"dltensor_versioned"
    assert capsule_name(t.__dlpack__()) == b"dltensor"
    assert capsule_name(t.__dlpack__(max_version=(0, 8))) == b"dltensor"
    b = t.to("cpu")
    assert capsule_name(b.__dlpack__(max_version=(1, 1))) == b"dltensor_versioned"
    assert capsule_name(b.__dlpack__()) == b"dltensor"
    assert b.__dlpack_device__() == t.__dlpack_device__() == (_abi.HOSTFIRST_DLPACK_DEVICE_CPU, 0)


NUMPY_DLPACK = [t for t in ALL if np.dtype(t.dtype).type.__module__ == "numpy"]  # numpy's DLPack: builtins only


@pytest.mark.parametrize("t", NUMPY_DLPACK, ids=[f"{t.name}-{t.dtype_name}" for t in NUMPY_DLPACK])
def test_numpy_both_forms_bit_exact(t):
    forms = [Legacy(t), Legacy(t.to("cpu"))] + ([t, t.to("cpu")] if NUMPY_2_1 else [])
    for x in forms:
        a = np.from_dlpack(x)
        assert a.dtype == t.dtype and a.shape == t.shape and a.tobytes() == t.tobytes()


@pytest.mark.parametrize("t", ALL, ids=IDS)
def test_jax_both_forms_bit_exact(t):
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        for x in (t, t.to("cpu"), Legacy(t)):
            arr = jax.dlpack.from_dlpack(x)
            assert arr.dtype == t.dtype and arr.shape == t.shape
            assert np.asarray(arr).tobytes() == t.tobytes()


@pytest.mark.parametrize("t", ALL, ids=IDS)
def test_the_other_direction_through_a_file(t, tmp_path):
    """numpy's and JAX's arrays, written as safetensors and read back by hostfirst, bit-exact."""
    src = np.asarray(t)
    arrays = [src]
    jax = pytest.importorskip("jax") if NUMPY_2_1 else None
    if jax is not None:
        with jax.enable_x64(True):
            arrays.append(np.asarray(jax.numpy.asarray(src)))
    for k, a in enumerate(arrays):
        header = json.dumps({"x": {"dtype": t.dtype_name, "shape": list(a.shape), "data_offsets": [0, a.nbytes]}})
        header = header.encode() + b" " * (-len(header) % 8)
        p = tmp_path / f"back{k}.safetensors"
        p.write_bytes(struct.pack("<Q", len(header)) + header + a.tobytes())
        back = hostfirst.open(p)["x"]
        assert back.dtype == t.dtype and back.shape == t.shape and np.asarray(back).tobytes() == t.tobytes()


def test_legacy_export_is_copy_on_write_and_never_reaches_the_file(tmp_path):
    p = tmp_path / "w.safetensors"
    p.write_bytes((FIX / "tokens.safetensors").read_bytes())
    before = p.read_bytes()
    t = hostfirst.open(p)["tokens"]
    a = np.from_dlpack(Legacy(t))  # numpy marks legacy imports read-only; torch and JAX may write
    assert a.ctypes.data != t.data_ptr  # not the file's mapping: a private copy-on-write one
    ctypes.memset(a.ctypes.data, 7, a.nbytes)  # a consumer writing in place
    assert (a == 0x0707).all() and (np.asarray(t) != 0x0707).any()
    del a
    gc.collect()
    assert p.read_bytes() == before
    jax = pytest.importorskip("jax") if NUMPY_2_1 else None
    if jax is not None:  # JAX takes the legacy form; donating the buffer into a computation must not write the file
        x = jax.dlpack.from_dlpack(t)
        y = jax.jit(lambda v: v + 1, donate_argnums=0)(x)
        assert int(y[0]) == int(np.asarray(t)[0]) + 1
        del x, y
        gc.collect()
        assert p.read_bytes() == before


def test_versioned_view_export_is_read_only():
    if not NUMPY_2_1:
        pytest.skip("numpy < 2.1 takes only the legacy form")
    t = hostfirst.open(FIX / "basic.safetensors")["f64"]
    a = np.from_dlpack(t)
    assert not a.flags.writeable and a.ctypes.data == t.data_ptr


def test_copy_and_device_requests():
    t = hostfirst.open(FIX / "basic.safetensors")["f32"]
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    cap = t.__dlpack__(max_version=(1, 1), copy=True)
    m = ctypes.cast(get(cap, b"dltensor_versioned"), ctypes.POINTER(_abi.DLPackManagedTensorVersioned)).contents
    assert m.flags & _abi.HOSTFIRST_DLPACK_FLAG_IS_COPIED and m.dl_tensor.data != t.data_ptr
    assert not m.flags & _abi.HOSTFIRST_DLPACK_FLAG_READ_ONLY
    del m, cap
    t.__dlpack__(max_version=(1, 1), copy=False)  # the mapping itself: no copy needed
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 1), copy=False, dl_device=(_abi.HOSTFIRST_DLPACK_DEVICE_CUDA, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 1), dl_device=(_abi.HOSTFIRST_DLPACK_DEVICE_CUDA, 0))  # no CUDA here
    with pytest.raises(hostfirst.InvalidArgumentError):
        t.__dlpack__(max_version=(1, 1), stream=0)  # DLPack forbids 0
    with pytest.raises(TypeError):
        t.__dlpack__(copy="yes")
    if NUMPY_2_1:
        a = np.from_dlpack(t, copy=True)
        assert a.flags.writeable and a.ctypes.data != t.data_ptr and a.tobytes() == t.tobytes()


def test_a_jax_array_from_a_batch_is_unchanged_after_three_more_runs():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import hostfirst.jax  # noqa: F401 - jax.device_put of a Buffer

    tokens = hostfirst.open(FIX / "tokens.safetensors")["tokens"]
    ref = np.asarray(tokens)
    g = hostfirst.Gather("cpu", "uint16", batch=8, window=65)
    stream = hostfirst.OffsetStream(3)
    first = stream.next(len(tokens), 65, 8)
    batch = g.run(tokens, first)
    want = np.stack([ref[o:o + 65] for o in first])
    made = [jax.dlpack.from_dlpack(batch), jnp.asarray(batch), jax.device_put(batch), np.asarray(batch)]
    del batch
    gc.collect()
    for _ in range(3):
        g.run(tokens, stream.next(len(tokens), 65, 8))
    for arr in made:
        np.testing.assert_array_equal(np.asarray(arr), want)
    bound, allocated, held = g.ring()
    assert bound == _abi.HOSTFIRST_GATHER_DEFAULT_RING_BOUND and held >= 1 and allocated >= 2
    del made, arr
    gc.collect()
    assert g.ring()[2] == 0


def test_ring_bound_and_busy():
    tokens = hostfirst.open(FIX / "tokens.safetensors")["tokens"]
    g = hostfirst.Gather("cpu", "u16", batch=2, window=4, ring_bound=2)
    a = g.run(tokens, [0, 1])
    b = g.run(tokens, [2, 3])
    assert a.address != b.address and g.ring() == (2, 2, 2)
    with pytest.raises(hostfirst.Error) as e:
        g.run(tokens, [4, 5])
    assert e.value.status_name == "BUSY" and "ring_bound=" in str(e.value) and "del batch" in str(e.value)
    assert "hostfirst_gather_set_ring_bound" not in str(e.value)  # the C name means nothing to a Python user
    np.testing.assert_array_equal(np.asarray(a), np.asarray(tokens)[[[0, 1, 2, 3], [1, 2, 3, 4]]])
    del a
    gc.collect()
    c = g.run(tokens, [4, 5])  # the released batch is reused
    assert g.ring() == (2, 2, 2) and c.address != b.address
    cur = g.current()
    assert cur.address == c.address
    host = tokens.to("cpu")  # the truncation-proof fast path: gather from a host buffer
    del c, cur
    gc.collect()
    d = g.run(host, [7, 8])
    np.testing.assert_array_equal(np.asarray(d), np.asarray(tokens)[[[7, 8, 9, 10], [8, 9, 10, 11]]])


def _mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _rejections(consumer, t, n):
    """Hands `t` to `consumer` n times, which must refuse it each time with an exception of its own."""
    kinds = set()
    for _ in range(n):
        try:
            consumer(t)
        except SystemError:  # what a ctypes capsule destructor caused: the consumer's exception lost
            raise
        except Exception as e:  # noqa: BLE001 - whatever the consumer raises is its own
            kinds.add(type(e))
        else:
            raise AssertionError(f"{consumer} took {t!r}")
    return kinds


def _consumers():
    out = [("numpy", np.from_dlpack)]
    try:
        import array_api_strict
    except ImportError:  # scripts/test-python.sh installs it in both venvs
        pytest.fail("array_api_strict is not installed")
    return out + [("array_api_strict", array_api_strict.from_dlpack)]


def _write(path, tensors):
    """A safetensors file from {name: (dtype, shape, bytes)}, written by hand (no writer has F6)."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def test_a_rejected_capsule_keeps_the_consumers_exception_and_frees_the_export(tmp_path):
    """numpy has no bf16, array_api_strict none of bf16/fp8/fp6/fp4: each refuses the capsule with its own
    exception, and the library's C capsule destructor frees the export. 10,000 rejections leave handles and
    mappings flat (numpy < 2.1 takes the legacy capsule: a copy-on-write mapping per export)."""
    f6 = hostfirst.open(_write(tmp_path / "f6.safetensors", {"f6_e2m3": ("F6_E2M3", [8], bytes(range(6))),
                                                              "f6_e3m2": ("F6_E3M2", [8], bytes(range(6)))}))
    lowp = hostfirst.open(FIX / "lowp.safetensors")
    assert hostfirst._dlpack.NATIVE_DESTRUCTOR  # the python executable exports the C API
    for who, consumer in _consumers():
        tensors = [lowp["bf16"]] if who == "numpy" else [lowp[n] for n in lowp] + [f6[n] for n in f6]
        for t in tensors:
            _rejections(consumer, t, 10)  # warm-up: the consumers' own caches
            gc.collect()
            handles, maps = hostfirst.handle_count(), _mappings()
            _rejections(consumer, t, 10_000 if t.dtype_name == "BF16" else 1000)
            gc.collect()
            assert hostfirst.handle_count() == handles, (who, t)
            assert _mappings() <= maps + 2, (who, t)  # a leaked export would add one per rejection
