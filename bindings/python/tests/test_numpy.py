"""numpy's and JAX's protocols on hostfirst tensors, row slices and buffers: np.asarray, jnp.asarray and
jax.device_put give the right dtype, shape and bytes for every dtype both sides hold, zero-copy on the host,
never an object array. Under numpy 1.x (scripts/test.sh's second venv) the same tests exercise numpy 1.26's
own `__array_interface__`/`__array__` path."""

from pathlib import Path

import numpy as np
import pytest

import hostfirst

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
ml_dtypes = pytest.importorskip("ml_dtypes")

EXPECTED = {  # safetensors name -> numpy dtype
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16, "I32": np.int32,
    "U32": np.uint32, "I64": np.int64, "U64": np.uint64, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "C64": np.complex64, "BF16": ml_dtypes.bfloat16, "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E8M0": ml_dtypes.float8_e8m0fnu, "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
}


def tensors():
    out = []
    for fname in ("basic.safetensors", "lowp.safetensors"):
        f = hostfirst.open(FIX / fname)
        out += [f[n] for n in f if f[n].dtype_name in EXPECTED]
    return out


ALL = tensors()
IDS = [f"{t.name}-{t.dtype_name}" for t in ALL]


def test_every_dtype_of_both_sides_is_covered():
    assert {t.dtype_name for t in ALL} == set(EXPECTED)


@pytest.mark.parametrize("t", ALL, ids=IDS)
def test_dtype_is_numpys(t):
    assert isinstance(t.dtype, np.dtype) and t.dtype == np.dtype(EXPECTED[t.dtype_name])


@pytest.mark.parametrize("t", ALL, ids=IDS)
def test_np_asarray_of_a_view_is_zero_copy_and_read_only(t):
    a = np.asarray(t)
    assert a.dtype == np.dtype(EXPECTED[t.dtype_name]) and a.shape == t.shape and a.dtype != object
    assert a.tobytes() == t.tobytes() and not a.flags.writeable
    if t.nbytes:
        assert a.ctypes.data == t.data_ptr
    assert np.array(t).flags.writeable and np.array(t).tobytes() == t.tobytes()  # np.array copies


@pytest.mark.parametrize("t", ALL, ids=IDS)
def test_np_asarray_of_a_cpu_buffer_is_zero_copy_and_writable(t):
    b = t.to("cpu")
    assert b.dtype == t.dtype
    a = np.asarray(b)
    assert a.dtype == t.dtype and a.shape == t.shape and a.flags.writeable and a.tobytes() == t.tobytes()
    if t.nbytes:
        assert a.ctypes.data == b.address


def test_array_interface_v3_for_builtin_dtypes():
    t = hostfirst.open(FIX / "basic.safetensors")["i32"]
    ai = t.__array_interface__
    assert ai == {"version": 3, "shape": (2, 3), "typestr": "<i4", "data": (t.data_ptr, True), "strides": None}
    b = t.to("cpu")
    assert b.__array_interface__["data"] == (b.address, False)
    bf = hostfirst.open(FIX / "lowp.safetensors")["bf16"]
    assert not hasattr(bf, "__array_interface__")  # no typestr names bfloat16: numpy takes __array__
    assert np.asarray(bf).dtype == ml_dtypes.bfloat16


def test_row_slices_and_arrays_keep_the_mapping_alive():
    import gc

    with hostfirst.open(FIX / "tokens.safetensors") as f:
        tokens = f["tokens"]
    ref = np.frombuffer(tokens.tobytes(), np.uint16)
    mid = np.asarray(tokens[100:200])
    del tokens
    gc.collect()
    np.testing.assert_array_equal(mid, ref[100:200])
    assert mid.base is not None


def test_what_numpy_cannot_hold_raises_instead_of_an_object_array():
    f4 = hostfirst.open(FIX / "lowp.safetensors")["f4"]
    assert f4.dtype_name == "F4"  # packed: no numpy dtype (f4.dtype raises TypeError, tests/test_messages.py)
    with pytest.raises(TypeError):
        np.asarray(f4)


def test_array_protocol_arguments():
    t = hostfirst.open(FIX / "basic.safetensors")["i16"]
    assert np.asarray(t, dtype=np.int32).dtype == np.int32
    assert t.__array__().flags.writeable is False
    assert t.__array__(copy=True).flags.writeable
    with pytest.raises(ValueError):
        t.__array__(dtype=np.int32, copy=False)


# ---- JAX ------------------------------------------------------------------------------------------------------
JAX_DTYPES = [t for t in ALL]


@pytest.mark.parametrize("t", JAX_DTYPES, ids=IDS)
def test_jnp_asarray_and_device_put(t):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import hostfirst.jax  # noqa: F401 - registers View and Buffer with JAX

    want = np.asarray(t)
    with jax.enable_x64(True):
        for x in (t, t.to("cpu")):
            for arr in (jnp.asarray(x), jax.device_put(x), jax.device_put(x, jax.devices("cpu")[0])):
                assert isinstance(arr, jax.Array)
                assert arr.dtype == want.dtype and arr.shape == want.shape
                assert np.asarray(arr).tobytes() == want.tobytes()


def test_jax_row_slices():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import hostfirst.jax  # noqa: F401

    tokens = hostfirst.open(FIX / "tokens.safetensors")["tokens"]
    ref = np.frombuffer(tokens.tobytes(), np.uint16)
    for a, b in ((0, 1024), (100, 200), (4000, 4096)):
        np.testing.assert_array_equal(np.asarray(jnp.asarray(tokens[a:b])), ref[a:b])
        np.testing.assert_array_equal(np.asarray(jax.device_put(tokens[a:b])), ref[a:b])
