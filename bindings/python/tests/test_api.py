"""The Python API's fit with numpy/Python habits: dtype spellings, KeyError with close matches, exceptions that
are also the builtin a user catches, paths like open() takes them, status names from the library, one table of
C signatures, finalizers instead of __del__, and the package as installed (py.typed, the bundled library)."""

import ast
import os
import pathlib
import re
from pathlib import Path

import numpy as np
import pytest

import hostfirst
from hostfirst import _abi, _errors

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
PKG = Path(hostfirst.__file__).resolve().parent
HEADER = Path(__file__).resolve().parents[3] / "include" / "hostfirst.h"


@pytest.mark.parametrize("spelling", [np.uint16, np.dtype("uint16"), np.dtype("<u2"), "uint16", "u16", "U16",
                                      " U16 ", "<u2"])
def test_dtype_spellings(spelling):
    g = hostfirst.Gather("cpu", spelling, batch=1, window=2)
    assert g.dtype == np.dtype(np.uint16) and g.dtype_name == "U16"


def test_low_precision_dtype_spellings():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for spelling, name in [(ml_dtypes.bfloat16, "BF16"), ("bfloat16", "BF16"), ("bf16", "BF16"),
                           (np.dtype(ml_dtypes.float8_e4m3fn), "F8_E4M3"), ("float8_e4m3fn", "F8_E4M3"),
                           ("f8_e5m2", "F8_E5M2")]:
        assert hostfirst.Gather("cpu", spelling, batch=1, window=1).dtype_name == name


@pytest.mark.parametrize("bad", ["uint17", np.dtype(">u2"), object, "U"])
def test_unknown_dtype_lists_valid_names(bad):
    with pytest.raises(hostfirst.InvalidArgumentError) as e:
        hostfirst.Gather("cpu", bad, batch=1, window=1)
    assert isinstance(e.value, ValueError)
    msg = str(e.value)
    assert "valid:" in msg and "U16 (uint16)" in msg and "BF16 (bfloat16)" in msg and "F4" in msg


def test_missing_tensor_is_a_key_error_naming_close_matches():
    f = hostfirst.open(FIX / "basic.safetensors")
    with pytest.raises(KeyError) as e:
        f["i33"]
    assert isinstance(e.value, hostfirst.NotFoundError) and isinstance(e.value, hostfirst.Error)
    assert "did you mean 'i32'" in str(e.value) and "basic.safetensors" in str(e.value)
    with pytest.raises(KeyError) as e:
        f["zzzzzz"]
    assert "did you mean" not in str(e.value)
    assert f.get("i33") is None  # Mapping.get relies on KeyError


def test_exception_mapping_to_builtins(tmp_path):
    assert hostfirst.Error is hostfirst.HostfirstError
    with pytest.raises(FileNotFoundError) as e:
        hostfirst.open(tmp_path / "missing.safetensors")
    assert isinstance(e.value, hostfirst.IoError) and e.value.filename.endswith("missing.safetensors")
    assert e.value.errno == 2 and e.value.status_name == "IO"
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((4).to_bytes(8, "little") + b"{x}\x00")
    with pytest.raises(ValueError) as e:
        hostfirst.open(bad)
    assert isinstance(e.value, hostfirst.FormatError)
    with pytest.raises(ValueError):
        hostfirst.Device("tpu")
    with pytest.raises(IndexError):
        hostfirst.Gather("cpu", "u16", batch=1, window=8).run(hostfirst.open(FIX / "tokens.safetensors")["tokens"],
                                                              [4095])
    big = tmp_path / "big.safetensors"  # a sparse file with a 1 TiB tensor: the fit check refuses it
    n = 1 << 40
    header = b'{"huge":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (n, n)
    header += b" " * (-len(header) % 8)
    with big.open("wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header)
        fh.truncate(8 + len(header) + n)
    with pytest.raises(MemoryError) as e:
        hostfirst.open(big)["huge"].to("cpu")
    err = e.value
    assert isinstance(err, hostfirst.OutOfMemoryError) and err.needed == n and err.free < n
    assert err.device == "cpu:0"


def test_paths_like_open(tmp_path):
    src = FIX / "tokens.safetensors"
    for p in (str(src), os.fsencode(src), src, pathlib.PurePath(src)):
        with hostfirst.open(p) as f:
            assert list(f) == ["tokens"]
    with pytest.raises(ValueError, match="embedded null byte"):
        hostfirst.open(str(src) + "\0.evil")
    with pytest.raises(ValueError, match="embedded null byte"):
        hostfirst.open(os.fsencode(src) + b"\0x")
    odd = tmp_path / os.fsdecode(b"\xff\xfe.safetensors")  # not UTF-8: the library refuses it with its error
    odd.write_bytes(src.read_bytes())
    for p in (odd, os.fsencode(odd)):
        with pytest.raises(hostfirst.InvalidArgumentError) as e:
            hostfirst.open(p)
        assert "UTF-8" in str(e.value)
    with pytest.raises(TypeError):
        hostfirst.open(42)


def test_status_names_come_from_the_library():
    lib = hostfirst.native
    assert len(_errors.STATUS) == lib.hostfirst_status_count()
    for name, code in _errors.STATUS.items():
        assert lib.hostfirst_status_name(code).decode() == name
        if code:
            cls = _errors.error_for(code, "m").__class__
            assert cls.status == code and cls.status_name == name and issubclass(cls, hostfirst.Error)
            assert issubclass(cls, hostfirst.FormatError) == bool(lib.hostfirst_status_is_format_error(code))
    assert hostfirst.OutOfMemoryError.status_name == "OUT_OF_MEMORY"


def _package_sources():
    return sorted(PKG.glob("*.py"))


def test_one_table_of_c_signatures_and_no_status_literals():
    header = HEADER.read_text()
    for name in _abi.SIGNATURES:
        assert re.search(rf"\b{name}\(", header), f"{name} is not in include/hostfirst.h"
    for path in _package_sources():
        src = path.read_text()
        tree = ast.parse(src)
        for node in ast.walk(tree):
            # restype/argtypes are set in one place only: _lib.declare() from _abi.SIGNATURES (and the
            # CPython capsule functions of _dlpack, which are not libhostfirst's)
            if isinstance(node, ast.Attribute) and node.attr in ("argtypes", "restype") and \
                    isinstance(node.ctx, ast.Store):
                assert path.name in ("_lib.py", "_dlpack.py"), f"{path.name}:{node.lineno} declares a C signature"
            if isinstance(node, ast.FunctionDef):
                assert node.name != "__del__", f"{path.name}: __del__ (use weakref.finalize)"
            if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and isinstance(c.value, int)
                                                     and c.value > 0 for c in node.comparators):
                left = ast.unparse(node.left)
                assert "status" not in left, f"{path.name}:{node.lineno}: a status compared with a number"


def test_installed_package_is_typed_and_finds_its_library():
    assert (PKG / "py.typed").is_file()
    if os.environ.get("HOSTFIRST_TEST_INSTALLED") == "1":
        lib = Path(hostfirst.library_path)
        assert lib.parent == PKG and lib.name.startswith("libhostfirst.so")


def test_finalizers_free_handles():
    import gc

    gc.collect()
    base = hostfirst.handle_count()
    f = hostfirst.open(FIX / "basic.safetensors")
    ts = [f[n] for n in f]
    b = ts[0].to("cpu")
    assert hostfirst.handle_count() == base + 2 + len(ts)
    del f, ts, b
    gc.collect()
    assert hostfirst.handle_count() == base


def test_the_type_hints_check():
    """py.typed promises hints that hold: mypy --strict over the package as installed (scripts/test-python.sh's
    main venv)."""
    pytest.importorskip("mypy")
    import subprocess
    import sys

    env = dict(os.environ)
    if "site-packages" not in PKG.parts:  # a source tree: show mypy where the package is
        env["MYPYPATH"] = str(PKG.parent)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--no-incremental", "-p", "hostfirst"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=PKG.parents[1])
    assert out.returncode == 0, out.stdout + out.stderr


def test_star_import_gives_the_public_names():
    ns = {}
    exec("from hostfirst import *", ns)
    assert "View" in ns and "safe_open" in ns and "NotFoundError" in ns and "BusyError" in ns
    assert ns["open"] is hostfirst.open  # listed in __all__ as os, io and gzip list theirs (pydoc documents it)
    assert all(hasattr(hostfirst, n) for n in hostfirst.__all__)
    assert not {"error_for", "error_named", "STATUS", "native"} & set(hostfirst.__all__)  # internals stay out


def test_all_is_a_literal_list_type_checkers_can_read():
    """mypy reads __all__ only when it is a literal: every public name as a string in one list expression."""
    tree = ast.parse((PKG / "__init__.py").read_text())
    lists = [n.value for n in tree.body if isinstance(n, ast.Assign) and
             any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
    assert len(lists) == 1 and isinstance(lists[0], ast.List), "__all__ must be one literal list"
    names = [e.value for e in lists[0].elts if isinstance(e, ast.Constant)]
    assert len(names) == len(lists[0].elts) and names == hostfirst.__all__
    # every exception class the library's statuses raise is a public name of its own
    assert {c.__name__ for c in _errors._BY_STATUS.values()} <= set(names)


def test_help_is_short_and_complete():
    """help(hostfirst): every public function (open too) with a docstring, the exception classes without the
    dozens of methods each inherits from BaseException, and no internal helpers."""
    import pydoc

    text = pydoc.render_doc(hostfirst, renderer=pydoc.plaintext)
    # 4,766 lines before (3,900 inherited from builtins); 2,233 once the writer and token files joined
    assert len(text.splitlines()) < 2500, len(text.splitlines())
    functions = text[text.index("\nFUNCTIONS\n"):text.index("\nDATA\n")]
    listed = re.findall(r"^    (\w+)\(", functions, re.M)
    assert "open" in listed and "read_engine" in listed and "capture_scope" in listed and "handle_count" in listed
    assert "error_for" not in listed and "error_named" not in listed
    for name in listed:
        assert getattr(hostfirst, name).__doc__, f"{name} has no docstring"
    err = pydoc.render_doc(hostfirst.NotFoundError, renderer=pydoc.plaintext)
    assert "with_traceback" not in err and "add_note" not in err and "NOT_FOUND" in err
    assert "with_traceback" in dir(hostfirst.NotFoundError("x"))  # instances are untouched


def test_hostfirst_jax_without_jax_says_what_to_install():
    import subprocess
    import sys

    code = ("import sys; sys.modules['jax'] = None\n"  # as if JAX were not installed
            "try:\n    import hostfirst.jax\nexcept ImportError as e:\n    print(e)\n")
    env = dict(os.environ, PYTHONPATH=str(PKG.parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "pip install hostfirst[jax]" in out.stdout, out.stdout + out.stderr


def test_return_types_follow_arguments_for_mypy(tmp_path):
    """Typed overloads: default_device() is a DefaultDevice, default_device(spec) a scope giving a Device;
    t[a:b] is a View. Code using them that way passes mypy, and misuse does not."""
    pytest.importorskip("mypy")
    import subprocess
    import sys

    good = ("import hostfirst\nd = hostfirst.default_device()\nprint(d.device.kind, d.source)\n"
            "with hostfirst.default_device('cpu') as dev:\n    print(dev.ordinal)\n"
            "t = hostfirst.open('x.safetensors')['x']\nprint(t[0:2].nbytes, t[..., 1:].strides)\n")
    bad = "import hostfirst\nprint(hostfirst.default_device('cpu').source)\n"
    env = dict(os.environ)
    if "site-packages" not in PKG.parts:
        env["MYPYPATH"] = str(PKG.parent)
    for name, code, rc in (("good.py", good, 0), ("bad.py", bad, 1)):
        (tmp_path / name).write_text(code)
        out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports", name],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == rc, out.stdout + out.stderr


def test_the_wheel_describes_itself():
    """The installed wheel's metadata: bindings/python/README.md as its description, the [jax] extra."""
    if os.environ.get("HOSTFIRST_TEST_INSTALLED") != "1":
        pytest.skip("checks the installed wheel (scripts/test-python.sh)")
    from importlib.metadata import metadata

    md = metadata("hostfirst")
    assert md["Description-Content-Type"] == "text/markdown"
    body = md.get_payload() or md["Description"]
    assert body.startswith("# hostfirst for Python") and 'pip install "hostfirst[jax]"' in body
    assert "jax" in md.get_all("Provides-Extra")
    assert any(r.startswith("jax") and 'extra == "jax"' in r for r in md.get_all("Requires-Dist"))
