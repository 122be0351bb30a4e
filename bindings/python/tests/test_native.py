"""The native extension (hostfirst/_native.c, loaded by hostfirst/_fast.py): the wheel carries it and loads it, it
gives what the ctypes path gives (arrays, names, errors), `safe_open` reads a tensor without listing every name,
and where it cannot load the ctypes path runs with a NativeExtensionWarning (only then)."""

import ctypes
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import hostfirst
from hostfirst import _abi, _fast, _owned

PKG = Path(hostfirst.__file__).resolve().parent
OFF = os.environ.get("HOSTFIRST_PYTHON_NATIVE", "").strip() == "0"


def needs_native():
    if _fast.native is None:
        if OFF:
            pytest.skip("HOSTFIRST_PYTHON_NATIVE=0: the ctypes path on purpose")
        pytest.fail("the native extension is not loaded (the wheel and conftest.py's build carry it)")


def test_the_extension_is_loaded_unless_switched_off():
    if OFF:
        assert _fast.native is None
        return
    needs_native()
    if os.environ.get("HOSTFIRST_TEST_INSTALLED") == "1":  # the wheel's own, beside the package
        assert any(p.parent == PKG for p in _fast._found()), _fast._found()
    assert _fast.native.view_info_size() == ctypes.sizeof(_abi.ViewInfo)


def every_dtype(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {}
    for i, dt in enumerate(["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                            "float16", "float32", "float64", "complex64"]):
        shape = [(), (7,), (3, 5), (2, 3, 4), (0,), (4, 0)][i % 6]
        a = rng.integers(0, 2, size=shape).astype(dt)
        arrays[f"t{i}.é.{dt}"] = a
    path = tmp_path / "every.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    return path, arrays


def both_paths(fn):
    """fn() with the extension, then with the ctypes path (as HOSTFIRST_PYTHON_NATIVE=0 gives it)."""
    native = _fast.native
    try:
        with_native = fn()
        _fast.native = _owned.native = None
        return with_native, fn()
    finally:
        _fast.native = _owned.native = native


def test_get_tensor_and_keys_are_the_ctypes_paths_value_for_value(tmp_path):
    needs_native()
    path, arrays = every_dtype(tmp_path)

    def read():
        with hostfirst.safe_open(path, framework="numpy") as f:
            return f.keys(), f.offset_keys(), {k: f.get_tensor(k) for k in f.keys()}

    (k1, o1, a1), (k2, o2, a2) = both_paths(read)
    assert k1 == k2 == sorted(arrays) and o1 == o2
    for k, want in arrays.items():
        for got in (a1[k], a2[k]):
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), k
            assert got.flags.writeable and got.flags.c_contiguous and got.flags.aligned, k
    a1["t10.é.float32"][...] = 5  # owned: writing one never touches the file or another read
    with hostfirst.safe_open(path, framework="numpy") as f:
        assert np.array_equal(f.get_tensor("t10.é.float32"), arrays["t10.é.float32"])


def test_errors_are_the_ctypes_paths(tmp_path):
    needs_native()
    path, _ = every_dtype(tmp_path)

    def errors():
        out = []
        with hostfirst.safe_open(path, framework="numpy") as f:
            for bad in ("t10.é.float3", "a\0b", 3):
                with pytest.raises(Exception) as e:
                    f.get_tensor(bad)
                out.append((type(e.value), str(e.value)))
        with pytest.raises(hostfirst.InvalidHandleError) as e:
            f.get_tensor("t10.é.float32")
        out.append((type(e.value), str(e.value)))
        return out

    with_native, with_ctypes = both_paths(errors)
    assert with_native == with_ctypes
    assert with_native[0][0] is hostfirst.NotFoundError and "did you mean 't10.é.float32'" in with_native[0][1]


def test_a_truncated_file_raises_truncated_error_on_both_paths(tmp_path):
    needs_native()
    path = tmp_path / "t.safetensors"
    safetensors.numpy.save_file({"a": np.arange(4096, dtype=np.float32)}, str(path))

    def read():
        with hostfirst.safe_open(path, framework="numpy") as f:
            os.truncate(path, os.path.getsize(path) - 8192)
            with pytest.raises(hostfirst.TruncatedError) as e:
                f.get_tensor("a")
        safetensors.numpy.save_file({"a": np.arange(4096, dtype=np.float32)}, str(path))
        return type(e.value)

    assert both_paths(read) == (hostfirst.TruncatedError, hostfirst.TruncatedError)


def test_get_tensor_lists_no_names(tmp_path):
    """Opening a file and reading a few tensors builds none of its names in Python (a 100k-tensor file's open)."""
    needs_native()
    path = tmp_path / "many.safetensors"
    safetensors.numpy.save_file({f"w{i}": np.full(3, i, np.int32) for i in range(1000)}, str(path))
    with hostfirst.safe_open(path, framework="numpy") as f:
        assert np.array_equal(f.get_tensor("w517"), [517] * 3)
        assert f._file._listed is None
        assert f.metadata() is None
        assert f.keys()[:3] == ["w0", "w1", "w10"] and f._file._listed is not None


def run_child(code, pkg_parent, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("HOSTFIRST_PYTHON_NATIVE", "HOSTFIRST_TEST_INSTALLED")}
    e["HOSTFIRST_LIBRARY"] = hostfirst.library_path
    e["PYTHONPATH"] = str(pkg_parent)
    e.update(env)
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                          timeout=120, env=e, cwd=str(pkg_parent))


CHILD = """
import warnings, hashlib
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import hostfirst
    from hostfirst import _fast
    with hostfirst.safe_open({path!r}) as f:
        digest = hashlib.sha256(b"".join(f.get_tensor(k).tobytes() for k in f.keys())).hexdigest()
print(_fast.native is not None, digest, [(c.category.__name__, str(c.message)) for c in w])
"""


LAZY_ML_DTYPES = """
import sys
import numpy as np
import hostfirst
from hostfirst import _safe_open
served = []
real = _safe_open.copy_named
def counted(f, name):
    a = real(f, name)
    served.append(a is not None)
    return a
_safe_open.copy_named = counted
with hostfirst.safe_open({path!r}) as f:
    a = f.get_tensor("f32")
    after_f32 = "ml_dtypes" in sys.modules
    b = f.get_tensor("bf16")
print(after_f32, "ml_dtypes" in sys.modules, a.dtype.str, a.tolist(), b.dtype.name, b.astype(np.float32).tolist(),
      served)
"""


def test_reading_f32_never_imports_ml_dtypes_and_bf16_still_takes_the_native_call(tmp_path):
    """A fresh process's first get_tensor of an f32 tensor imports no ml_dtypes (its first import cost about 0.5 s
    here, which made a one-shot get_all of 20k tensors 5x slower than its later rounds); a bf16 tensor imports it
    then, and both are served by the extension's one call."""
    needs_native()
    ml_dtypes = pytest.importorskip("ml_dtypes")
    path = tmp_path / "two.safetensors"
    bf = np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16)
    safetensors.numpy.save_file({"f32": np.arange(4, dtype=np.float32), "bf16": bf}, str(path))
    r = run_child(LAZY_ML_DTYPES.format(path=str(path)), PKG.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "False True <f4 [0.0, 1.0, 2.0, 3.0] bfloat16 [1.5, -2.0, 0.25] [True, True]", (
        r.stdout + r.stderr)


@pytest.mark.parametrize("case", ["corrupt", "corrupt_but_off", "absent", "absent_but_asked"])
def test_the_fallback_warns_only_when_the_extension_was_expected(tmp_path, case):
    """A copy of the package whose extension is a corrupt file (or absent): the ctypes path gives the same bytes;
    NativeExtensionWarning when the package carries an extension that does not load (or HOSTFIRST_PYTHON_NATIVE=1
    asks for one that is not there), and no warning when HOSTFIRST_PYTHON_NATIVE=0 or none was expected."""
    path, arrays = every_dtype(tmp_path)
    copy = tmp_path / "pkg" / "hostfirst"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("_native.*.so", "_native*.pyd", "__pycache__"))
    if case.startswith("corrupt"):
        (copy / ("_native.pyd" if os.name == "nt" else "_native.abi3.so")).write_bytes(b"not an extension\n" * 64)
    env = {"HOSTFIRST_PYTHON_NATIVE": {"corrupt": "", "corrupt_but_off": "0", "absent": "",
                                       "absent_but_asked": "1"}[case]}
    if case.startswith("absent"):  # and no checkout build either: a copy elsewhere has no target/ above it
        assert not list((copy.parents[2] / "target" / "python-native").glob("_native*"))
    out = run_child(CHILD.format(path=str(path)), copy.parent, **env)
    assert out.returncode == 0, out.stderr
    loaded, digest, caught = out.stdout.strip().split(" ", 2)
    assert loaded == "False"
    import hashlib

    with hostfirst.safe_open(path) as f:
        assert digest == hashlib.sha256(b"".join(f.get_tensor(k).tobytes() for k in f.keys())).hexdigest()
    caught = eval(caught)  # the child's repr of a list of (str, str)
    if case in ("corrupt", "absent_but_asked"):
        assert [c for c, _ in caught] == ["NativeExtensionWarning"], caught
        assert ("could not be loaded" if case == "corrupt" else "is not built") in caught[0][1]
        assert issubclass(hostfirst.NativeExtensionWarning, RuntimeWarning)
    else:
        assert caught == [], caught


def test_no_warning_where_the_extension_loads():
    needs_native()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _fast.load() is not None


def test_open_and_index_list_no_names_on_either_path(tmp_path):
    """`hostfirst.open(path)[name]` and the ctypes path's `get_tensor` look the name up in the library: no name of
    the file is built in Python; a miss still names the close matches, and a closed file still says so."""
    path = tmp_path / "many.safetensors"
    safetensors.numpy.save_file({f"w{i}": np.full(3, i, np.int32) for i in range(1000)}, str(path))

    def read():
        f = hostfirst.open(path)
        got = np.array(f["w517"])
        listed_after_get = f._listed is not None
        with hostfirst.safe_open(path, framework="numpy") as g:
            got2 = g.get_tensor("w42")
            listed_after_get = listed_after_get or g._file._listed is not None
        with pytest.raises(hostfirst.NotFoundError) as miss:
            f["w5170"]
        f.close()
        with pytest.raises(hostfirst.InvalidHandleError):
            f["w1"]
        with pytest.raises(hostfirst.NotFoundError):
            f["nope"]
        return got.tolist(), got2.tolist(), listed_after_get, "did you mean" in str(miss.value) and "'w517'" in str(miss.value)

    with_native, with_ctypes = both_paths(read)
    assert with_native == with_ctypes == ([517] * 3, [42] * 3, False, True)


def test_views_slices_and_copies_are_the_ctypes_paths_and_views_are_freed(tmp_path):
    """`File[name]`, narrowing (`View[...]`, `get_slice(...)[...]`) and copies through the extension: the same
    Views (name, dtype, shape, size, alignment, strides, bytes) and arrays as through ctypes, and every view the
    extension made is freed with its View (the library's handle count returns to where it was)."""
    needs_native()
    path, arrays = every_dtype(tmp_path)
    import gc
    import weakref

    def read():
        out = []
        f = hostfirst.open(path)
        for k in f:
            v = f[k]
            out.append((v.name, v.dtype_code, v.dtype_name, v.shape, v.nbytes, v.alignment, v.strides,
                        v.tobytes(), np.array(v).tolist(), type(v._finalizer) is weakref.finalize))
            if v.ndim == 2 and v.shape[1] > 2:
                n = v[:, 1:3]  # strided: its copy is packed
                out.append((n.shape, n.strides, n.tobytes(), np.array(n).tolist()))
        with hostfirst.safe_open(path, framework="numpy") as g:
            for k in g.keys():
                s = g.get_slice(k)
                if s.get_shape() and s.get_shape()[0] > 1:
                    out.append((k, s[1:].tolist(), s[::2].tolist(), s[-1].tolist()))
        del f, v, n, g, s
        return out

    gc.collect()
    before = hostfirst.handle_count()
    with_native, with_ctypes = both_paths(read)
    gc.collect()
    assert hostfirst.handle_count() == before
    made_by = [row[-1] for row in with_native if len(row) == 10]
    assert made_by and not any(made_by)  # the extension's Views (no weakref.finalize of their own)
    strip = [row[:-1] if len(row) == 10 else row for row in with_native]
    assert strip == [row[:-1] if len(row) == 10 else row for row in with_ctypes]
    assert all(row[-1] for row in with_ctypes if len(row) == 10)


#: Indices the extension parses itself (`_native.index`): ints, step-1 slices, `...`, steps selecting one element.
NATIVE_KEYS = [0, -1, 3, np.s_[1:3], np.s_[:], np.s_[...], (), np.s_[2:2], np.s_[3:1], np.s_[-2:],
               np.s_[1:100], np.s_[:, 1:3], np.s_[:, -1], np.s_[1, 2], np.s_[1, 2, 3], np.s_[..., 4],
               np.s_[..., 1:3], np.s_[1, ..., 2], np.s_[0:4, 0:5, 0:6], np.s_[:, 2:4, 1:5], np.s_[::5],
               np.s_[2:3:-1], np.s_[-1, -1, -1], np.s_[1:2, ..., 1:2], np.s_[..., 0, 0]]
#: Indices it leaves to the Python path (View._select): steps, numpy scalars, lists, and every error.
PYTHON_KEYS = [np.s_[::2], np.s_[::-1, 0], np.s_[:, ::-2], np.int64(2), np.s_[[]], 4, np.s_[:, 5], np.s_[1, 2, 3, 4], None,
               True, 1.0, np.s_[..., ...], np.s_[[0, 2]]]


def test_get_slice_parses_ints_slices_and_ellipsis_in_one_native_call(tmp_path, monkeypatch):
    """`safe_open(...).get_slice(k)[key]` for ints, step-1 slices and `...` narrows and copies in one call of the
    extension, without View._select's Python parsing; every other index (steps, lists, numpy scalars, errors)
    takes the Python path. Arrays (values, dtype, shape, owned, writable, C-contiguous) and errors are the ctypes
    path's, key for key, and every view the extension narrowed is freed."""
    needs_native()
    import gc

    path = tmp_path / "s.safetensors"
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    safetensors.numpy.save_file({"x": x, "s": np.array(7.5, np.float64), "e": np.zeros((3, 0), np.int16)}, str(path))
    calls = []
    real_select = hostfirst.View._select

    def counted(self, key):
        calls.append(key)
        return real_select(self, key)

    monkeypatch.setattr(hostfirst.View, "_select", counted)

    def outcome(f, name, key):
        try:
            a = f.get_slice(name)[key]
        except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
            return (type(e).__name__, str(e))
        return (a.dtype.str, a.shape, a.tolist(), a.flags.writeable, a.flags.c_contiguous)

    def read(keys):
        with hostfirst.safe_open(path, framework="numpy") as f:
            out = [outcome(f, "x", k) for k in keys]
            out += [outcome(f, "s", k) for k in ((), np.s_[...], 0)]
            out += [outcome(f, "e", k) for k in (np.s_[1:], 0, np.s_[:, 0:0])]
        return out

    gc.collect()
    before = hostfirst.handle_count()
    calls.clear()
    native_out = read(NATIVE_KEYS)
    native_calls = len(calls)
    native = _fast.native
    _fast.native = _owned.native = None
    try:
        ctypes_out = read(NATIVE_KEYS)
    finally:
        _fast.native = _owned.native = native
    gc.collect()
    assert hostfirst.handle_count() == before
    assert native_out == ctypes_out
    for k, got in zip(NATIVE_KEYS, native_out):
        assert got[1:3] == (x[k].shape, x[k].tolist()) and got[3:] == (True, True), k
    # only the scalar tensor's `0` (too many indices: an error) took the Python path
    assert native_calls == 1
    with_native, with_ctypes = both_paths(lambda: read(PYTHON_KEYS))
    assert with_native == with_ctypes
    assert any(r[0] == "OutOfRangeError" for r in with_native) and any(r[0] == "TypeError" for r in with_native)
