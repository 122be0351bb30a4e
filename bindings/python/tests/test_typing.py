"""Typing as users meet it (issue 34): `mypy --strict` over a user's script (tests/typing_user.py) that uses every
public name of hostfirst, hostfirst.numpy and hostfirst.jax, and `Gather.stream` with an `OffsetStream` as the
docstring shows; the script also runs. Under --strict (which implies --no-implicit-reexport) mypy reads
`__all__` only when it is a literal list, and reports calls into untyped functions."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hostfirst
import hostfirst.numpy

HERE = Path(__file__).resolve().parent
FIX = HERE.parents[2] / "tests" / "fixtures"
SCRIPT = HERE / "typing_user.py"
PKG = Path(hostfirst.__file__).resolve().parent


def test_the_script_uses_every_public_name():
    text = SCRIPT.read_text()
    used = set(re.findall(r"\bhostfirst\.(\w+)", text))
    assert set(hostfirst.__all__) <= used, sorted(set(hostfirst.__all__) - used)
    assert {f"numpy.{n}" for n in hostfirst.numpy.__all__} <= set(re.findall(r"\bhostfirst\.(numpy\.\w+)", text))
    jax_names = ["MEMORY_KINDS", "jax_device", "load", "load_file", "parse_target", "save", "save_file", "save_tree",
                 "stream", "to_jax"]
    assert {f"jax.{n}" for n in jax_names} <= set(re.findall(r"\bhostfirst\.(jax\.\w+)", text))
    if _have("jax"):
        from hostfirst import jax as hjax

        assert sorted(hjax.__all__) == sorted(jax_names)


def test_mypy_strict_is_clean_on_a_users_script(tmp_path):
    pytest.importorskip("mypy")
    pytest.importorskip("jax")  # the script imports it; mypy reads its types
    env = dict(os.environ)
    if "site-packages" not in PKG.parts:  # a source tree: show mypy where the package is
        env["MYPYPATH"] = str(PKG.parent)
    (tmp_path / "user.py").write_text(SCRIPT.read_text())
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


DROPIN = HERE / "typing_dropin.py"
SWAP = "from safetensors.flax import load, load_file, save, save_file  # the line the test swaps"


@pytest.mark.parametrize("module", ["safetensors.flax", "hostfirst.jax"])
def test_code_typed_against_safetensors_flax_type_checks_against_hostfirst_jax(tmp_path, module):
    """The drop-in as mypy sees it: a script that passes `mypy --strict` with safetensors.flax passes with
    hostfirst.jax swapped in (load_file without rules is Dict[str, jax.Array], load too, save/save_file take
    what safetensors' take)."""
    pytest.importorskip("mypy")
    pytest.importorskip("jax")
    pytest.importorskip("safetensors")
    text = DROPIN.read_text()
    assert SWAP in text
    env = dict(os.environ)
    if "site-packages" not in PKG.parts:
        env["MYPYPATH"] = str(PKG.parent)
    (tmp_path / "user.py").write_text(text.replace(SWAP, f"from {module} import load, load_file, save, save_file"))
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_users_script_runs():
    pytest.importorskip("jax")
    env = dict(os.environ, PYTHONPATH=str(PKG.parent), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, str(SCRIPT), str(FIX / "tokens.safetensors"), str(FIX / "basic.safetensors")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def _have(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None
