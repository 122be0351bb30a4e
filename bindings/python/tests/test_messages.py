"""Messages and exceptions as a Python user meets them (issue 43, point 15): every refusal is a hostfirst.Error that
is also the builtin a user catches, names the thing once, and speaks Python (never a C function's name)."""

import ast
import os
from pathlib import Path

import numpy as np
import pytest

import hostfirst
import hostfirst.numpy

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
PKG = Path(hostfirst.__file__).resolve().parent


def test_the_package_raises_no_bare_builtin_where_a_status_fits():
    """No `raise ValueError(...)`/`IndexError`/`KeyError`/`OSError` in the package: each is the hostfirst class
    of its status (InvalidArgumentError, OutOfRangeError, ...), which is also that builtin."""
    bare = []
    for path in sorted(PKG.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    isinstance(node.exc.func, ast.Name) and \
                    node.exc.func.id in ("ValueError", "IndexError", "KeyError", "OSError", "RuntimeError"):
                bare.append(f"{path.name}:{node.lineno}: {node.exc.func.id}")
    assert bare == []


def test_value_errors_are_hostfirst_errors(tmp_path):
    t = hostfirst.open(FIX / "tokens.safetensors")["tokens"]
    g = hostfirst.Gather("cpu", t.dtype, batch=4, window=8)
    with pytest.raises(hostfirst.InvalidArgumentError, match="3 offsets for a batch of 4"):
        g.run(t, [0, 1, 2])
    with pytest.raises(hostfirst.InvalidArgumentError, match="must not be negative"):
        t.to("cpu", threads=-1)
    with pytest.raises(hostfirst.InvalidArgumentError, match="embedded null byte in rule target"):
        hostfirst.load(FIX / "tokens.safetensors", rules={"tokens": "cpu\0"})
    w = hostfirst.Writer(tmp_path / "w.safetensors", sync=False)
    w.add("a", np.zeros(2, np.float32))
    w.close()
    with pytest.raises(hostfirst.InvalidHandleError, match="the writer is closed"):
        w.add("b", np.zeros(2, np.float32))
    for e in (hostfirst.InvalidArgumentError, hostfirst.InvalidHandleError):
        assert issubclass(e, ValueError) and issubclass(e, hostfirst.Error)


def test_unavailable_is_a_runtime_error():
    assert issubclass(hostfirst.UnavailableError, RuntimeError)
    assert issubclass(hostfirst.UnavailableError, hostfirst.Error)
    if not any(b.name == "cuda" and b.status == "available" for b in hostfirst.backends()):
        with pytest.raises(RuntimeError) as e:
            hostfirst.Device("cuda:0")
        assert isinstance(e.value, hostfirst.UnavailableError)


def test_bytes_given_to_load_file_point_to_load():
    data = (FIX / "basic.safetensors").read_bytes()
    with pytest.raises(hostfirst.InvalidArgumentError) as e:
        hostfirst.numpy.load_file(data)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and f"a path of {len(data)} bytes" in msg
    assert "hostfirst.numpy.load(data)" in msg
    with pytest.raises(TypeError, match=r"hostfirst\.numpy\.load\(data\)"):
        hostfirst.numpy.load_file(bytearray(data))
    assert set(hostfirst.numpy.load(data)) == set(hostfirst.numpy.load_file(FIX / "basic.safetensors"))


def test_not_safetensors_names_the_python_call(tmp_path):
    raw = tmp_path / "train.bin"
    raw.write_bytes(np.arange(1000, dtype=np.uint16).tobytes())
    with pytest.raises(hostfirst.NotSafetensorsError) as e:
        hostfirst.numpy.load_file(raw)
    msg = str(e.value)
    assert "hostfirst.open_raw" in msg and "hostfirst_" not in msg, msg
    np.save(tmp_path / "t.npy", np.arange(4, dtype=np.int32))
    with pytest.raises(hostfirst.OtherFormatError) as e:
        hostfirst.open_raw(tmp_path / "t.npy", "int32")
    assert "hostfirst.open" in str(e.value) and "hostfirst_" not in str(e.value), str(e.value)
    with pytest.raises(hostfirst.OtherFormatError) as e:
        hostfirst.open(tmp_path / "t.npy", "safetensors")
    assert 'hostfirst.open(path, format="npy")' in str(e.value), str(e.value)


def test_a_bad_slice_index_names_the_tensor_once():
    for zero_copy in (False, True):
        with hostfirst.safe_open(FIX / "basic.safetensors", framework="numpy", zero_copy=zero_copy) as f:
            with pytest.raises(TypeError) as e:
                f.get_slice("f32")[None]
            assert str(e.value).count("'f32'") == 1, str(e.value)


def test_view_dtype_is_a_numpy_dtype_or_a_type_error():
    f = hostfirst.open(FIX / "basic.safetensors")
    assert all(isinstance(f[n].dtype, np.dtype) for n in f)
    assert f["f32"].dtype == np.float32 and f["f32"][0:1].dtype == np.float32
    f4 = hostfirst.open(FIX / "lowp.safetensors")["f4"]
    assert f4.dtype_name == "F4"
    with pytest.raises(TypeError, match=r"tensor 'f4' has no numpy dtype.*'F4'"):
        f4.dtype


def test_a_misspelt_memory_kind_lists_the_kinds_and_suggests_one():
    from hostfirst._targets import parse_target

    for target, near in [("pined_host", "pinned_host"), ("cpu:pined_host", "cpu:pinned_host"),
                         ("cpu:unpined_host", "cpu:unpinned_host"), ("pinned", "pinned_host")]:
        with pytest.raises(hostfirst.InvalidArgumentError) as e:
            parse_target(target)
        msg = str(e.value)
        assert "device, pinned_host, unpinned_host" in msg and f"Did you mean '{near}'?" in msg, msg
    with pytest.raises(hostfirst.InvalidArgumentError) as e:
        parse_target("tpu")
    assert "pinned_host" in str(e.value) and "Did you mean" not in str(e.value)
    assert parse_target("cuda:3:pinned_host") == ("cuda:3", "pinned_host")  # syntax only: no GPU needed
    assert parse_target("cpu") == ("cpu", None) and parse_target("cuda_host") == ("cuda_host", None)


def test_pinned_is_no_alias_of_cuda_host():
    """'pinned' was an undocumented alias of cuda_host in the library's device parser; page-locked memory has
    one name (cuda_host) and JAX's memory kind is pinned_host."""
    for spec in ("pinned", "pinned:0"):
        with pytest.raises(hostfirst.InvalidArgumentError):
            hostfirst.Device(spec)
        with pytest.raises(hostfirst.InvalidArgumentError):
            hostfirst.load(FIX / "tokens.safetensors", rules={"tokens": spec})


def test_a_misspelt_memory_kind_in_hostfirst_jax():
    pytest.importorskip("jax")
    import hostfirst.jax

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    with pytest.raises(hostfirst.InvalidArgumentError, match="Did you mean 'pinned_host'"):
        hostfirst.jax.load_file(FIX / "basic.safetensors", rules={"f32": "pined_host"})
    with pytest.raises(hostfirst.InvalidArgumentError, match="Did you mean 'cpu:pinned_host'"):
        hostfirst.safe_open(FIX / "basic.safetensors", framework="jax", device="cpu:pined_host")
    assert {"save", "save_file", "save_tree"} <= set(hostfirst.jax.__all__)
