"""hostfirst.numpy.save_file / save (the drop-ins for safetensors.numpy's) and hostfirst.Writer: the same bytes
as the safetensors package for every dtype numpy holds, round trips through hostfirst's reader and
safetensors', metadata checks, part files, views and buffers as sources, and nothing written on errors."""

import os

import numpy as np
import pytest

import hostfirst
import hostfirst.numpy

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def every_dtype():
    out = {
        "bool": np.array([[True, False, True]] * 2),
        "u8": np.arange(12, dtype=np.uint8).reshape(3, 4),
        "i8": -np.arange(6, dtype=np.int8),
        "i16": np.arange(6, dtype=np.int16) * -300,
        "u16": np.arange(6, dtype=np.uint16) * 999,
        "i32": np.arange(6, dtype=np.int32) * -70000,
        "u32": np.arange(6, dtype=np.uint32) * 70000,
        "i64": np.arange(6, dtype=np.int64) * -(1 << 40),
        "u64": np.arange(6, dtype=np.uint64) * (1 << 40),
        "f16": np.linspace(-2, 2, 8, dtype=np.float16),
        "f32": np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 2, 2),
        "f64": np.linspace(-2, 2, 8),
        "c64": (np.arange(4) + 1j * np.arange(4)).astype(np.complex64),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.int32),
    }
    try:
        import ml_dtypes
    except ImportError:
        return out
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        out[name] = np.linspace(-1, 1, 6).astype(getattr(ml_dtypes, name))
    return out


def package_supports(a):
    try:
        return np.array_equal(safetensors_numpy.load(safetensors_numpy.save({"x": a}))["x"], a)
    except Exception:  # noqa: BLE001 - the package has no numpy mapping for ml_dtypes' fp8 (and bf16 in some)
        return False


def test_every_dtype_is_the_packages_bytes_and_reads_back(tmp_path):
    everything = every_dtype()
    # The dtypes the safetensors package saves and loads with numpy: byte for byte; the others (ml_dtypes' fp8,
    # which it cannot load) through hostfirst's own reader below.
    t = {k: v for k, v in everything.items() if package_supports(v)}
    assert len(t) >= 15
    extra = {k: v for k, v in everything.items() if k not in t}
    if extra:
        p = tmp_path / "extra.safetensors"
        hostfirst.numpy.save_file(extra, p)
        back = hostfirst.numpy.load_file(p)
        for name, a in extra.items():
            assert back[name].dtype == a.dtype and np.array_equal(back[name].view(np.uint8), a.view(np.uint8)), name
        p.unlink()
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    hostfirst.numpy.save_file(t, ours, metadata={"format": "np"})
    safetensors_numpy.save_file(t, str(theirs), metadata={"format": "np"})
    assert ours.read_bytes() == theirs.read_bytes()
    assert hostfirst.numpy.save(t, {"format": "np"}) == safetensors_numpy.save(t, {"format": "np"})
    assert hostfirst.numpy.save(t) == safetensors_numpy.save(t)
    back = safetensors_numpy.load_file(str(ours))
    mine = hostfirst.numpy.load_file(ours)
    for name, a in t.items():
        assert back[name].dtype == a.dtype and np.array_equal(back[name], a), name
        assert np.array_equal(mine[name], a), name
    # No temporary file is left beside them.
    assert sorted(os.listdir(tmp_path)) == ["ours.safetensors", "theirs.safetensors"]


def test_arrays_numpy_does_not_hold_contiguous_little_endian():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = {"transposed": base.T, "strided": base[:, ::2], "big_endian": base.astype(">f4"), "fortran": np.asfortranarray(base)}
    for name, a in t.items():
        ours = hostfirst.numpy.save({name: a})
        assert np.array_equal(safetensors_numpy.load(ours)[name], a), name  # C order, little-endian
        theirs = safetensors_numpy.save({name: a})
        # safetensors 0.8 writes a non-contiguous array's memory as it lies (not its C order): where its file
        # holds the array's values, the bytes are the same.
        if np.array_equal(safetensors_numpy.load(theirs)[name], a):
            assert ours == theirs, name


def test_metadata_and_dict_checks():
    with pytest.raises(TypeError):
        hostfirst.numpy.save({"a": np.zeros(2)}, metadata={"k": 1})
    with pytest.raises(TypeError):
        hostfirst.numpy.save({1: np.zeros(2)})
    with pytest.raises(TypeError):
        hostfirst.numpy.save({"a": "not an array"})
    with pytest.raises(TypeError):
        hostfirst.numpy.save([np.zeros(2)])
    # Metadata in the dict's order (the package writes its HashMap's order: compare one key only).
    b = hostfirst.numpy.save({"a": np.zeros(2)}, metadata={"z": "1", "a": "2"})
    assert b.index(b'"z"') < b.index(b'"a":"2"')


def test_bad_names_are_refused_and_nothing_is_written(tmp_path):
    p = tmp_path / "m.safetensors"
    with pytest.raises(hostfirst.InvalidArgumentError):
        hostfirst.numpy.save_file({"__metadata__": np.zeros(2)}, p)
    with pytest.raises(ValueError):
        hostfirst.numpy.save_file({"nul\0": np.zeros(2)}, p)
    assert not p.exists() and os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        hostfirst.numpy.save_file({"a": np.zeros(2)}, tmp_path / "no" / "dir" / "m.safetensors")


def test_writer_views_buffers_pieces_and_parts(tmp_path):
    src = tmp_path / "src.safetensors"
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    hostfirst.numpy.save_file({"w": w}, src)
    f = hostfirst.open(src)
    view = f["w"]
    buf = view.to("cpu")
    out = tmp_path / "out.safetensors"
    with hostfirst.Writer(out) as wr:
        wr.add("view", view)
        wr.add("cols", view[:, 2:4])
        wr.add("buffer", buf)
        wr.declare("tiles", "float32", (8, 8))
        wr.add_piece("tiles", (0, 0), w[:4])
        wr.add_piece("tiles", (4, 0), view[4:])
        wr.metadata({"k": "v"})
    g = hostfirst.numpy.load_file(out)
    assert np.array_equal(g["view"], w) and np.array_equal(g["cols"], w[:, 2:4])
    assert np.array_equal(g["buffer"], w) and np.array_equal(g["tiles"], w)
    # An error inside the block: nothing written.
    bad = tmp_path / "bad.safetensors"
    with pytest.raises(RuntimeError):
        with hostfirst.Writer(bad) as wr:
            wr.add("x", w)
            raise RuntimeError("stop")
    assert not bad.exists()
    # Part files of at most 512 bytes: the Hugging Face names and index, which hostfirst opens.
    t = {f"layer.{i}": np.full((64,), i, dtype=np.float32) for i in range(3)}
    hostfirst.numpy.save_file(t, tmp_path / "set.safetensors", max_part_bytes=512)
    names = sorted(p for p in os.listdir(tmp_path) if p.startswith("set"))
    assert names == ["set-00001-of-00002.safetensors", "set-00002-of-00002.safetensors", "set.safetensors.index.json"]
    got = hostfirst.numpy.load_file(tmp_path / "set.safetensors.index.json")
    assert all(np.array_equal(got[k], v) for k, v in t.items())
    # finish twice
    wr = hostfirst.Writer(tmp_path / "twice.safetensors")
    wr.add("a", w)
    wr.finish()
    with pytest.raises(hostfirst.AlreadyUsedError):
        wr.finish()
    wr.close()


def test_save_errors_are_builtin_exceptions_too():
    assert issubclass(hostfirst.NoSpaceError, OSError) and issubclass(hostfirst.PermissionDeniedError, PermissionError)
    assert hostfirst.NoSpaceError.status != hostfirst.PermissionDeniedError.status


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into any directory")
def test_unwritable_directory_is_permission_denied(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        with pytest.raises(PermissionError):
            hostfirst.numpy.save_file({"a": np.zeros(2)}, d / "m.safetensors")
    finally:
        d.chmod(0o755)
