"""safetensors 0.8's read API against hostfirst's drop-ins, behaviour by behaviour, in the same test: every case runs
once with `safetensors` and once with `hostfirst` (the same code, given one implementation or the other), and
the two outcomes, reduced to what a user can observe (the value's type, dtype, shape, bytes, writability and
layout, or the kind of error), must be equal. A difference fails the comparison unless it is one of the documented
differences (DIFFERENCES below), whose hostfirst outcome is asserted instead, and each of which is listed under
"Differences from safetensors" in bindings/python/README.md (checked here too).

Errors are compared by the kind a user catches: FileNotFoundError, TypeError, OSError, or the library's own error
(safetensors.SafetensorError; hostfirst.Error, whose classes are also the builtin you would catch: KeyError,
ValueError, IndexError; that difference is documented once, as `errors`)."""

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import hostfirst
import hostfirst.numpy

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "bindings" / "python" / "README.md"
ml_dtypes = pytest.importorskip("ml_dtypes")


class Impl:
    """One implementation of the read API, under the names safetensors gives it."""

    def __init__(self, name, safe_open, np_load_file, np_load, flax, error):
        self.name, self.safe_open, self.np_load_file, self.np_load = name, safe_open, np_load_file, np_load
        self._flax, self.error = flax, error

    @property
    def flax(self):
        pytest.importorskip("jax")
        return self._flax()


def _st_flax():
    import safetensors.flax

    return safetensors.flax


def _hf_flax():
    import hostfirst.jax

    return hostfirst.jax


ST = Impl("safetensors", safetensors.safe_open, safetensors.numpy.load_file, safetensors.numpy.load, _st_flax,
          safetensors.SafetensorError)
HF = Impl("hostfirst", hostfirst.safe_open, hostfirst.numpy.load_file,
          lambda data: hostfirst.numpy.load(data),  # looked up when called: a missing function is a failing case
          _hf_flax, hostfirst.Error)


# ------------------------------------------------------------------------------------------------ the files
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("compat")
    rng = np.random.default_rng(8)
    tensors = {}
    for i, (dt, shape) in enumerate([("bool", (5,)), ("uint8", (3, 4)), ("int8", (7,)), ("int16", (2, 3)),
                                     ("uint16", (6,)), ("int32", (2, 2, 2)), ("uint32", (1,)), ("int64", (3,)),
                                     ("uint64", (2, 1)), ("float16", (4,)), ("float32", (4, 5, 6)),
                                     ("float64", ()), ("complex64", (2,)), ("float32", (0, 3)),
                                     (ml_dtypes.bfloat16, (3, 2))]):
        n = int(np.prod(shape, dtype=int))
        a = rng.standard_normal(n * 2).astype(np.float64).view(np.uint8)[: n * np.dtype(dt).itemsize].view(
            np.uint8 if dt == "bool" else dt).reshape(shape)
        if dt == "bool":
            a = (a & 1).astype(np.bool_)
        tensors[f"z{i}.{np.dtype(dt).name}"] = a  # names whose sorted order is not the file's order
    tensors["x"] = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    out = {"mixed": d / "mixed.safetensors", "empty_md": d / "empty_md.safetensors", "md": d / "md.safetensors",
           "plain": d / "plain.safetensors", "fp8": d / "fp8.safetensors"}
    safetensors.numpy.save_file(tensors, str(out["mixed"]))
    safetensors.numpy.save_file({k: v for k, v in tensors.items() if "bfloat16" not in k}, str(out["plain"]))
    safetensors.numpy.save_file({"f8": np.arange(4, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)},
                                str(out["fp8"]))
    safetensors.numpy.save_file({"a": np.ones(2, np.float32)}, str(out["empty_md"]), metadata={})
    safetensors.numpy.save_file({"a": np.ones(2, np.float32)}, str(out["md"]), metadata={"format": "np", "k": "v"})
    out["short"] = d / "short.safetensors"
    out["short"].write_bytes(b"1234")
    header = b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'  # no closing brace
    header += b" " * (-len(header) % 8)
    out["bad_json"] = d / "bad_json.safetensors"
    out["bad_json"].write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    h = json.dumps({"f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}}).encode()
    h += b" " * (-len(h) % 8)
    out["f6"] = d / "f6.safetensors"
    out["f6"].write_bytes(struct.pack("<Q", len(h)) + h + bytes(3))
    out["dir"] = d / "a_directory"
    out["dir"].mkdir()
    out["missing"] = d / "missing.safetensors"
    return out


# ------------------------------------------------------------------------------------------------ outcomes
def observed(x):
    """What a user can observe of a value, comparable across the two implementations."""
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str if x.dtype.kind != "V" else str(x.dtype), x.shape,
                np.ascontiguousarray(x).tobytes(), x.flags.writeable, x.flags.c_contiguous)
    if isinstance(x, np.generic):
        return ("numpy scalar", x.dtype.str, x.tobytes())
    if type(x).__module__.startswith("jax") or "ArrayImpl" in type(x).__name__:
        a = np.asarray(x)
        return ("jax.Array", str(x.dtype), x.shape, a.tobytes(), sorted(d.platform for d in x.devices()))
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "unordered":  # a dict whose order is not part of the API
        return ("dict, any order", sorted((k, observed(v)) for k, v in x[1].items()))
    if isinstance(x, dict):
        return ("dict", [(k, observed(v)) for k, v in x.items()])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [observed(v) for v in x])
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return ("object", type(x).__name__)


def kind_of_error(e, impl):
    """The kind of error a user catches (see the module doc)."""
    if isinstance(e, FileNotFoundError):
        return "FileNotFoundError"
    if isinstance(e, TypeError):
        return "TypeError"
    if isinstance(e, OSError):
        return "OSError"
    if isinstance(e, impl.error):
        return "library error"
    return type(e).__name__


def outcome(case, impl, files):
    try:
        return ("returns", observed(case(impl, files)))
    except pytest.skip.Exception:
        raise
    except Exception as e:  # noqa: BLE001 - the error is the outcome
        return ("raises", kind_of_error(e, impl))


# ------------------------------------------------------------------------------------------------ the cases
CASES = {}


def case(name, fn):
    CASES[name] = fn


def opened(path_key, method, *args, framework="np", **kw):
    def run(impl, files):
        with impl.safe_open(str(files[path_key]), framework, **kw) as f:
            return getattr(f, method)(*args)
    return run


case("keys: sorted", opened("mixed", "keys"))
case("offset_keys: file order", opened("mixed", "offset_keys"))
def metadata(path_key):
    def run(impl, files):
        with impl.safe_open(str(files[path_key]), "np") as f:
            md = f.metadata()
        return md if md is None else ("unordered", md)  # a dict: its order is not part of the API
    return run


case("metadata: none in the header", metadata("mixed"))
case("metadata: empty", metadata("empty_md"))
case("metadata: entries", metadata("md"))
case("get_tensors: every tensor in file order", opened("mixed", "get_tensors"))
case("get_tensors: framework numpy", opened("mixed", "get_tensors", framework="numpy"))


def every_tensor(method):
    def run(impl, files):
        with impl.safe_open(str(files["mixed"]), "np") as f:
            if method == "get_slice":
                return [(f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for k in f.keys()]
            return [f.get_tensor(k) for k in f.keys()]
    return run


case("get_tensor: every dtype and shape (0-d, empty, bf16)", every_tensor("get_tensor"))
case("get_slice: get_shape and get_dtype", every_tensor("get_slice"))

SLICES = {  # key -> id; on x (4, 5, 6)
    "[1]": np.s_[1], "[-1]": np.s_[-1], "[1:3]": np.s_[1:3], "[:, 2]": np.s_[:, 2], "[:, 1:4]": np.s_[:, 1:4],
    "[..., 2:5]": np.s_[..., 2:5], "[1, ..., 3]": np.s_[1, ..., 3], "[:, :, 1:2]": np.s_[:, :, 1:2],
    "[::2]": np.s_[::2], "[:, ::3, 1]": np.s_[:, ::3, 1], "[1, 2, 3]": np.s_[1, 2, 3], "[...]": np.s_[...],
    "[()]": (), "[np.int64(2)]": np.s_[np.int64(2)], "[[]]": np.s_[[]], "[2:2]": np.s_[2:2], "[3:1]": np.s_[3:1],
    "[0:4, 0:5, 0:6]": np.s_[0:4, 0:5, 0:6],
    # errors on both sides
    "[4] out of range": np.s_[4], "[:, 5] out of range": np.s_[:, 5], "[1, 2, 3, 4] too many": np.s_[1, 2, 3, 4],
    "[None]": np.s_[None],
    # documented differences
    "[1:10] past the end": np.s_[1:10], "[7:] past the end": np.s_[7:], "[::-1]": np.s_[::-1],
    "[:, ::-2]": np.s_[:, ::-2], "[-20::-1]": np.s_[-20::-1], "[1.0]": np.s_[1.0], "[[0, 2]]": np.s_[[0, 2]],
    "[True]": np.s_[True],
}


def sliced(key, framework="np"):
    def run(impl, files):
        with impl.safe_open(str(files["mixed"]), framework) as f:
            return f.get_slice("x")[key]
    return run


for _label, _key in SLICES.items():
    case(f"get_slice: x{_label}", sliced(_key))
case("get_slice: a 1-d tensor [1:4]", lambda impl, files: _slice_of(impl, files, "z4.uint16", np.s_[1:4]))
case("get_slice: a 0-d tensor [()]", lambda impl, files: _slice_of(impl, files, "z11.float64", ()))
case("get_slice: an empty tensor [:, 1:]", lambda impl, files: _slice_of(impl, files, "z13.float32", np.s_[:, 1:]))


def _slice_of(impl, files, name, key):
    with impl.safe_open(str(files["mixed"]), "np") as f:
        return f.get_slice(name)[key]


case("get_tensor: missing name", opened("mixed", "get_tensor", "nope"))
case("get_slice: missing name", opened("mixed", "get_slice", "nope"))
case("open: missing file", lambda impl, files: impl.safe_open(str(files["missing"]), "np"))
case("open: a directory", lambda impl, files: impl.safe_open(str(files["dir"]), "np"))
case("open: too short for a header", lambda impl, files: impl.safe_open(str(files["short"]), "np"))
case("open: header not JSON", lambda impl, files: impl.safe_open(str(files["bad_json"]), "np"))
case("open: pathlib.Path", lambda impl, files: impl.safe_open(files["md"], "np").keys())
case("open: bytes path", lambda impl, files: impl.safe_open(bytes(files["md"]), "np").keys())
case("get_tensor: F6 in numpy", opened("f6", "get_tensor", "f6"))


def after_close(method, *args):
    def run(impl, files):
        f = impl.safe_open(str(files["mixed"]), "np")
        f.__exit__(None, None, None)
        return getattr(f, method)(*args)
    return run


for _m, _a in [("keys", ()), ("offset_keys", ()), ("metadata", ()), ("get_tensor", ("x",)), ("get_slice", ("x",)),
               ("get_tensors", ())]:
    case(f"closed: {_m}", after_close(_m, *_a))


def slice_taken_before_close(impl, files):
    with impl.safe_open(str(files["mixed"]), "np") as f:
        s = f.get_slice("x")
    return s[1:2, 3], s.get_shape()


case("closed: a slice taken before close still reads", slice_taken_before_close)

for _fw in ["np", "numpy", "flax", "jax", "NumPy", "xyz", "", "pt", "torch", "tf", "tensorflow", "paddle", "mlx"]:
    case(f"framework: {_fw!r}", (lambda fw: lambda impl, files: impl.safe_open(str(files["md"]), fw).keys())(_fw))
case("device: numpy on 'cpu'", lambda impl, files: impl.safe_open(str(files["md"]), "np", device="cpu").keys())
case("device: numpy on 'cuda:0'", lambda impl, files: impl.safe_open(str(files["md"]), "np",
                                                                       device="cuda:0").get_tensor("a"))
for _b in ["mmap", "pread", "MMAP", "bad", ""]:
    case(f"backend: safe_open {_b!r}", (lambda b: lambda impl, files: impl.safe_open(
        str(files["mixed"]), "np", backend=b).get_tensor("x"))(_b))
    case(f"backend: numpy.load_file {_b!r}", (lambda b: lambda impl, files: impl.np_load_file(
        str(files["mixed"]), backend=b))(_b))

case("numpy.load_file", lambda impl, files: impl.np_load_file(str(files["mixed"])))
case("numpy.load_file: pathlib.Path", lambda impl, files: impl.np_load_file(files["mixed"]))
case("numpy.load_file: missing file", lambda impl, files: impl.np_load_file(str(files["missing"])))
case("numpy.load_file: F6", lambda impl, files: impl.np_load_file(str(files["f6"])))
case("numpy.load: bytes (no order)", lambda impl, files: ("unordered", impl.np_load(files["plain"].read_bytes())))
case("numpy.load: bf16", lambda impl, files: impl.np_load(files["mixed"].read_bytes())["z14.bfloat16"])
case("get_tensor: fp8", opened("fp8", "get_tensor", "f8"))
case("numpy.load: too short", lambda impl, files: impl.np_load(b"1234"))
case("numpy.load: str", lambda impl, files: impl.np_load("not bytes"))
case("numpy.load: bytearray", lambda impl, files: impl.np_load(bytearray(files["md"].read_bytes())))


def flax(fn):
    """A case on the JAX side, with JAX's x64 mode on (64-bit tensors stay 64-bit on both sides)."""
    def run(impl, files):
        mod = impl.flax
        import jax

        with jax.enable_x64(True):
            return fn(impl, mod, files)
    return run


case("flax.load_file", flax(lambda impl, mod, files: mod.load_file(str(files["mixed"]))))
case("flax.load_file: backend='pread'", flax(lambda impl, mod, files: mod.load_file(str(files["mixed"]),
                                                                                     backend="pread")))
case("flax.load: bytes (no order)", flax(lambda impl, mod, files: ("unordered",
                                                                   mod.load(files["plain"].read_bytes()))))
case("safe_open flax: get_tensor", flax(lambda impl, mod, files: _flax_open(impl, files, "get_tensor", "x")))
case("safe_open flax: get_tensors", flax(lambda impl, mod, files: _flax_open(impl, files, "get_tensors")))
case("safe_open flax: get_slice", flax(lambda impl, mod, files: _flax_open(impl, files, "slice")))


def _flax_open(impl, files, method, *args):
    with impl.safe_open(str(files["mixed"]), "flax") as f:
        if method == "slice":
            return f.get_slice("x")[1:3, ::2]
        return getattr(f, method)(*args)


def flax_x64_off(impl, files):
    """A float64 tensor with JAX's x64 mode off: both give float32 (hostfirst warns first, naming the tensor)."""
    mod = impl.flax
    import jax
    import warnings

    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mod.load_file(str(files["mixed"]))["z11.float64"]


case("flax.load_file: float64 with x64 off", flax_x64_off)

# ------------------------------------------------------------------------------------------------ differences
# case -> hostfirst's outcome where it differs from safetensors' on purpose: ("raises", kind) or ("returns", None)
# (returns what numpy gives: checked against numpy below). The README lists each under its key in backticks.
DIFFERENCES = {
    "get_slice: x[1:10] past the end": ("slice-bounds", ("returns", np.s_[1:10])),
    "get_slice: x[7:] past the end": ("slice-bounds", ("returns", np.s_[7:])),
    "get_slice: x[::-1]": ("slice-negative-step", ("returns", np.s_[::-1])),
    "get_slice: x[:, ::-2]": ("slice-negative-step", ("returns", np.s_[:, ::-2])),
    "get_slice: x[-20::-1]": ("slice-negative-step", ("returns", np.s_[-20::-1])),
    "get_slice: x[3:1]": ("slice-bounds", ("returns", np.s_[3:1])),
    "get_slice: an empty tensor [:, 1:]": ("slice-bounds", ("returns", None)),
    "numpy.load: bf16": ("low-precision", ("returns", None)),
    "get_tensor: fp8": ("low-precision", ("returns", None)),
    "get_slice: x[1.0]": ("slice-index-types", ("raises", "TypeError")),
    "get_slice: x[[0, 2]]": ("slice-index-types", ("raises", "TypeError")),
    "get_slice: x[True]": ("slice-index-types", ("raises", "TypeError")),
    "get_slice: x[None]": ("slice-index-types", ("raises", "TypeError")),
    "open: bytes path": ("paths", ("returns", ("list", ["a"]))),
    "get_tensor: F6 in numpy": ("packed-dtypes", ("raises", "TypeError")),
    "numpy.load_file: F6": ("packed-dtypes", ("raises", "TypeError")),
    "framework: 'pt'": ("framework", ("raises", "library error")),
    "framework: 'torch'": ("framework", ("raises", "library error")),
    "framework: 'paddle'": ("framework", ("raises", "library error")),
    "framework: 'tf'": ("framework", ("raises", "library error")),
    "framework: 'tensorflow'": ("framework", ("raises", "library error")),
    "framework: 'mlx'": ("framework", ("raises", "library error")),
}
GENERAL = ["errors", "arena", "zero-copy", "flax-x64-warning", "load-order", "device",
           "prefetch"]  # not tied to one case (prefetch: safetensors 0.9, not in the 0.8 these tests run)


@pytest.mark.parametrize("name", list(CASES))
def test_hostfirst_does_what_safetensors_does(name, files):
    fn = CASES[name]
    theirs, ours = outcome(fn, ST, files), outcome(fn, HF, files)
    if name not in DIFFERENCES:
        assert ours == theirs, f"{name}: safetensors {theirs[:2] if theirs[0] == 'raises' else 'returns'}, " \
                               f"hostfirst {ours if ours[0] == 'raises' else 'returns something else'}"
        return
    _, (how, what) = DIFFERENCES[name]
    assert ours != theirs, f"{name}: documented as a difference, but both do the same now: update DIFFERENCES"
    assert ours[0] == how, (name, ours, theirs)
    if how == "raises":
        assert ours[1] == what, (name, ours)
    elif isinstance(what, tuple) and what and isinstance(what[0], str):
        assert ours[1] == what, (name, ours)
    elif what is None:  # an array where safetensors raises: checked by the cases' own tests elsewhere
        assert ours[1][0] == "ndarray", (name, ours)
    else:  # numpy's own answer for the index, on the same tensor
        x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
        want = np.ascontiguousarray(x[what])
        got = ours[1]
        assert got[0] == "ndarray" and got[2] == want.shape and got[3] == want.tobytes(), name


def test_every_difference_is_in_the_readme():
    text = README.read_text()
    m = re.search(r"^## Differences from safetensors\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, "bindings/python/README.md has no '## Differences from safetensors' section"
    listed = set(re.findall(r"^- `([a-z0-9-]+)`", m.group(1), re.M))
    wanted = {key for key, _ in DIFFERENCES.values()} | set(GENERAL)
    assert listed == wanted, f"README lists {sorted(listed)}, the tests document {sorted(wanted)}"


def test_the_cases_cover_the_read_api():
    """The cases reach every part of safetensors' read API the issue lists."""
    names = " ".join(CASES)
    for part in ("keys", "offset_keys", "metadata", "get_tensor", "get_slice", "get_tensors", "closed", "framework",
                 "backend", "numpy.load:", "numpy.load_file", "flax.load_file", "flax.load:", "missing"):
        assert part in names, part
    x_slices = [n for n in CASES if n.startswith("get_slice: x")]
    assert len(x_slices) >= 25  # every dimension, ints, steps, ellipsis, empty list, errors
