"""hostfirst.jax.load_file with rules in every form, checked against numpy; the fit check before anything
moves; and the README's JAX story, run exactly as written."""

import gc
import json
import warnings
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import hostfirst  # noqa: E402
import hostfirst.jax  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures"
BASIC = FIX / "basic.safetensors"
CPU = jax.devices("cpu")[0]


def reference():
    f = hostfirst.open(BASIC)
    return {n: np.array(f[n]) for n in f}


@pytest.mark.parametrize("rules", [
    {"i32": "host", "f*": "cpu", "*": "default"},
    ["i32=host", "f*=cpu", "*=default"],
    [("i32", "host"), ("f*", "cpu"), ("*", "default")],
], ids=["dict", "strings", "pairs"])
def test_load_file_rule_forms(rules):
    ref = reference()
    with jax.enable_x64(True), hostfirst.default_device("cpu"):
        out = hostfirst.jax.load_file(BASIC, rules=rules)
    assert list(out) == list(ref)  # file order
    host = out["i32"]
    assert isinstance(host, np.ndarray) and host.flags.writeable  # owned memory, as safetensors gives
    with pytest.raises(TypeError):
        hostfirst._gather.source_tensor(host)  # not on the file mapping
    with jax.enable_x64(True), hostfirst.default_device("cpu"):
        mapped = hostfirst.jax.load_file(BASIC, rules=rules, zero_copy=True)["i32"]
    assert isinstance(mapped, np.ndarray) and not mapped.flags.writeable
    assert mapped.ctypes.data == hostfirst._gather.source_tensor(mapped).data_ptr  # zero-copy: the mapping itself
    for name, want in ref.items():
        got = out[name]
        if name != "i32":
            assert isinstance(got, jax.Array) and got.devices() == {CPU}, name
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.asarray(got).tobytes() == want.tobytes(), name


def test_a_rule_that_places_nothing_warns_before_anything_moves():
    with jax.enable_x64(True), hostfirst.default_device("cpu"), \
            pytest.warns(hostfirst.UnmatchedRuleWarning, match="u1"):
        out = hostfirst.jax.load_file(BASIC, rules={"u1": "host", "*": "default"})  # meant 'u16'
    assert isinstance(out["u16"], jax.Array)  # where '*' sent it: what the warning is about


@pytest.mark.parametrize("rules", [{"i32": "host"}, "i32=host", ["i32=host"], [("i32", "host")]],
                         ids=["dict", "string", "strings", "pairs"])
def test_rules_name_the_exceptions_and_the_rest_goes_to_the_default_device(rules):
    with jax.enable_x64(True), hostfirst.default_device("cpu"):
        out = hostfirst.jax.load_file(BASIC, rules=rules)
    assert isinstance(out["i32"], np.ndarray)
    rest = [v for k, v in out.items() if k != "i32"]
    assert rest and all(isinstance(v, jax.Array) and v.devices() == {CPU} for v in rest)


def test_an_explicit_star_host_rule_and_default_keep_the_rest_on_the_host():
    with jax.enable_x64(True), hostfirst.default_device("cpu"):
        for kw in ({"rules": {"f32": "default", "*": "host"}}, {"rules": {"f32": "cpu"}, "default": "host"}):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no rule that places nothing, the implicit default included
                out = hostfirst.jax.load_file(BASIC, **kw)
            assert isinstance(out["f32"], jax.Array), kw
            assert all(isinstance(v, (np.ndarray, hostfirst.View)) for k, v in out.items() if k != "f32"), kw
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = hostfirst.jax.load_file(BASIC, rules={"*": "cpu"})  # every tensor matched: no default appended
        assert all(isinstance(v, jax.Array) for v in out.values())


def test_load_takes_a_default_and_stays_host_first():
    with hostfirst.default_device("cpu"):
        host = hostfirst.load(BASIC, rules={"f32": "cpu"})
        dev = hostfirst.load(BASIC, rules={"f32": "host"}, default="default")
    assert isinstance(host["f32"], hostfirst.Buffer) and isinstance(host["i32"], hostfirst.View)
    assert isinstance(dev["f32"], hostfirst.View) and isinstance(dev["i32"], hostfirst.Buffer)
    assert dev["i32"].device == "cpu"


def test_a_load_to_devices_only_is_a_pytree_jax_places():
    # hostfirst.load's Buffers take their handles when first used (a subclass of Buffer): JAX still sees them.
    placed = hostfirst.load(BASIC, rules={"*": "cpu"})
    with jax.enable_x64(True):  # the fixture has 64-bit tensors
        out = jax.device_put(placed)
        assert set(out) == set(placed) and all(isinstance(v, jax.Array) for v in out.values())
        for n, v in out.items():
            np.testing.assert_array_equal(np.asarray(v), np.asarray(placed[n]))


def test_64_bit_tensors_are_not_narrowed_silently():
    wide = [n for n in reference() if reference()[n].dtype.itemsize == 8 and reference()[n].dtype.kind in "iuf"]
    assert wide
    with jax.enable_x64(False):
        with pytest.warns(UserWarning, match="x64") as rec:
            hostfirst.jax.load_file(BASIC, rules={"*": "cpu"})
        msg = " ".join(str(w.message) for w in rec)
        assert all(f"'{n}'" in msg for n in wide) and "jax_enable_x64" in msg
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            hostfirst.jax.load_file(BASIC, rules={n: "host" for n in wide} | {"*": "cpu"})  # nothing narrowed
        with hostfirst.strict(), pytest.raises(TypeError, match="strict mode: nothing was moved"):
            hostfirst.jax.load_file(BASIC, rules={"*": "cpu"})
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("error")
        out = hostfirst.jax.load_file(BASIC, rules={"*": "cpu"})
        assert all(out[n].dtype.itemsize == 8 for n in wide)


def test_without_rules_everything_goes_to_the_default_device():
    with jax.enable_x64(True), hostfirst.default_device("cpu"):
        out = hostfirst.jax.load_file(str(BASIC))
    assert all(isinstance(v, jax.Array) and v.devices() == {CPU} for v in out.values())
    with hostfirst.strict():
        with pytest.raises(hostfirst.ImplicitPlacementError):
            hostfirst.jax.load_file(BASIC)


def test_target_to_jax_device():
    assert hostfirst.jax.jax_device(hostfirst.Device("cpu")) == CPU
    assert hostfirst.jax.jax_device(hostfirst.resolve_target("default")) == CPU  # no GPU here


def test_fit_check_before_anything_moves(tmp_path):
    big = tmp_path / "big.safetensors"  # a sparse 1 TiB tensor after a small one
    n = 1 << 40
    header = json.dumps({"small": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "huge": {"dtype": "U8", "shape": [n], "data_offsets": [8, 8 + n]}}).encode()
    header += b" " * (-len(header) % 8)
    with big.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header + b"\0" * 8)
        fh.truncate(8 + len(header) + 8 + n)
    gc.collect()
    before = hostfirst.handle_count()
    with pytest.raises(MemoryError) as e:
        hostfirst.jax.load_file(big, rules={"*": "cpu"})
    err = e.value
    assert isinstance(err, hostfirst.OutOfMemoryError) and err.device == "cpu:0" and err.needed == n + 8
    assert "nothing was moved" in str(err) and "'huge'" in str(err)
    del e, err
    gc.collect()
    assert hostfirst.handle_count() == before
    with pytest.raises(MemoryError):  # an owned host array is memory too: fit-checked
        hostfirst.jax.load_file(big, rules={"huge": "host", "*": "cpu"})
    out = hostfirst.jax.load_file(big, rules={"huge": "host", "*": "cpu"}, zero_copy=True)  # moves nothing
    assert out["huge"].shape == (n,) and isinstance(out["small"], jax.Array)


def test_what_jax_cannot_take_fails_before_moving():
    with pytest.raises(TypeError, match=r"tensor 'f4' \(F4\).*rules=\{'f4': 'host'\}"):
        hostfirst.jax.load_file(FIX / "lowp.safetensors", rules={"*": "cpu"})
    out = hostfirst.jax.load_file(FIX / "lowp.safetensors", rules={"f4": "host", "*": "cpu"})
    f4 = hostfirst.open(FIX / "lowp.safetensors")["f4"]
    assert isinstance(out["f4"], hostfirst.Buffer) and out["f4"].device == "cpu"  # numpy has no packed 4-bit dtype
    assert out["f4"].tobytes() == f4.tobytes()
    zc = hostfirst.jax.load_file(FIX / "lowp.safetensors", rules={"f4": "host", "*": "cpu"}, zero_copy=True)
    assert isinstance(zc["f4"], hostfirst.View)  # the view itself
    assert out["bf16"].dtype == hostfirst.open(FIX / "lowp.safetensors")["bf16"].dtype
    with pytest.raises(hostfirst.Error):  # no CUDA here: hostfirst's plan refuses the device first
        hostfirst.jax.load_file(BASIC, rules={"*": "cuda:0"})


def test_gather_runs_from_the_host_array_load_file_returns():
    owned = hostfirst.jax.load_file(FIX / "tokens.safetensors", rules={"tokens": "host"})["tokens"]
    g = hostfirst.Gather("cpu", owned.dtype, batch=4, window=16)
    with pytest.raises(TypeError, match="zero_copy=True"):  # an owned copy is not the file: the message says how
        g.run(owned, [0, 10, 100, 4000])
    out = hostfirst.jax.load_file(FIX / "tokens.safetensors", rules={"tokens": "host"}, zero_copy=True)
    tokens = out["tokens"]
    g = hostfirst.Gather("cpu", tokens.dtype, batch=4, window=16)
    b = g.run(tokens, [0, 10, 100, 4000])
    np.testing.assert_array_equal(np.asarray(b)[2], tokens[100:116])
    train, val = tokens[:3000], tokens[3000:]  # a split of the host array, without reopening the file
    np.testing.assert_array_equal(np.asarray(g.run(val, [0, 10, 20, 30]))[1], tokens[3010:3026])
    np.testing.assert_array_equal(np.asarray(g.run(train, [5, 6, 7, 8]))[0], tokens[5:21])
    with pytest.raises(hostfirst.OutOfRangeError):
        g.run(train, [0, 0, 0, 2990])  # the window runs past the end of the split, not of the tensor
    with pytest.raises(TypeError, match="whole rows"):
        g.run(tokens[::2], [0, 1, 2, 3])  # strided: not a row range
    with pytest.raises(TypeError):
        g.run(np.zeros(10, np.uint16), [0, 1, 2, 3])


def readme_story():
    """(the one command the README shows for the story's file, the Python block right below it)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- python-jax-story-file:[^>]*-->\n    (\S[^\n]*)\n\n"
                  r"<!-- python-jax-story:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert m, "README's story command and Python block not found (one command, then the block right below)"
    return m.group(1), m.group(2)


def test_readme_jax_story_runs_as_written_after_its_one_command(tmp_path):
    command, code = readme_story()
    assert 8 <= len([line for line in code.splitlines() if line.strip()]) <= 14  # about ten lines
    assert command.startswith("python -c ")
    env = dict(os.environ, PYTHONPATH=str(Path(hostfirst.__file__).resolve().parents[1]))  # installed or source
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `python`: this venv's
    made = subprocess.run(["bash", "-c", command.replace("python ", f"'{sys.executable}' ", 1)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0 and (tmp_path / "story.safetensors").is_file(), made.stderr
    (tmp_path / "story.py").write_text(code)
    out = subprocess.run([sys.executable, "story.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("0 (64, 1025) uint16") and "embed.weight" in lines[0], out.stdout


def test_readme_jax_story_passes_mypy(tmp_path):
    pytest.importorskip("mypy")
    _, code = readme_story()
    (tmp_path / "story.py").write_text(code)
    env = dict(os.environ)
    pkg = Path(hostfirst.__file__).resolve().parent
    if "site-packages" not in pkg.parts:  # a source tree: show mypy where the package is
        env["MYPYPATH"] = str(pkg.parent)
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports", "story.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


def test_cpu_arrays_are_the_load_arena_itself_no_second_copy(tmp_path, monkeypatch):
    """jax.load_file to JAX's CPU: each jax.Array's buffer is the tensor's part of the load's arena (hostfirst's
    parallel readers fill it; JAX aliases it, no second copy), in every memory kind, for a run of like rank-1
    tensors (rows of one 2-D array), a rank-2 tensor and a 1-byte dtype; and the arrays stay right once every
    other reference to the arena is gone (JAX holds it). A 64-bit tensor JAX narrows (x64 off) is a new array."""
    import hostfirst.numpy
    ml_dtypes = pytest.importorskip("ml_dtypes")
    path = tmp_path / "m.safetensors"
    want = {f"row{i}": np.full(1024, i, np.float32) for i in range(12)}
    want.update(w=np.arange(300 * 7, dtype=np.float32).reshape(300, 7), b=np.arange(100, dtype=np.int8),
                h=np.arange(513).astype(ml_dtypes.bfloat16), i=np.arange(33, dtype=np.int64))
    hostfirst.numpy.save_file(want, path)
    arena = {}
    real = hostfirst.jax.host_arrays

    def spy(*args, **kw):
        out = real(*args, **kw)
        arena.update({i: a.ctypes.data for i, a in out.items()})
        return out

    monkeypatch.setattr(hostfirst.jax, "host_arrays", spy)
    for default in ("cpu", "cpu:device", "cpu:pinned_host", "cpu:unpinned_host"):
        arena.clear()
        with jax.enable_x64(True):
            out = hostfirst.jax.load_file(path, default=default)
        assert sorted(out) == sorted(want) and len(arena) == len(want)  # (out: file order)
        for i, (name, a) in enumerate(out.items()):
            assert a.unsafe_buffer_pointer() == arena[i], (default, name)  # the arena, not a copy of it
            assert a.unsafe_buffer_pointer() % 64 == 0, name  # XLA's CPU alignment, without which it copies
    arena.clear()  # (addresses only: the load's numpy arrays are gone already)
    gc.collect()
    for name, a in out.items():  # the arena lives as long as the jax.Arrays on it
        assert np.asarray(a).tobytes() == want[name].tobytes(), name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the x64 narrowing warning, tested above
        narrowed = hostfirst.jax.load_file(path, default="cpu")
    at = list(narrowed).index("i")
    assert narrowed["i"].dtype == np.int32 and narrowed["i"].unsafe_buffer_pointer() != arena[at]
    assert np.asarray(narrowed["i"]).tolist() == list(range(33))
