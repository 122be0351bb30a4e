"""Runs the tests against the installed hostfirst package (scripts/test.sh: a wheel in a fresh venv, no
HOSTFIRST_LIBRARY), or, for a developer without a venv, against the source tree and the checkout's target/."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
for k in ("HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES"):
    os.environ.pop(k, None)

if os.environ.get("HOSTFIRST_TEST_INSTALLED") == "1":
    assert "HOSTFIRST_LIBRARY" not in os.environ, "the installed package must find its own library"
    import hostfirst

    here = Path(hostfirst.__file__).resolve().parent
    assert here != ROOT / "bindings" / "python" / "hostfirst", f"testing the source tree ({here}), not the wheel"
    assert "site-packages" in here.parts, here
    assert Path(hostfirst.library_path).resolve().parent == here, hostfirst.library_path
else:
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    if "HOSTFIRST_LIBRARY" not in os.environ:
        for profile in ("debug", "release"):
            p = ROOT / "target" / profile / "libhostfirst.so"
            if p.exists():
                os.environ["HOSTFIRST_LIBRARY"] = str(p)
                break
    if os.environ.get("HOSTFIRST_PYTHON_NATIVE", "").strip() != "0":
        # the native extension, into the checkout's target/python-native/ (where hostfirst/_fast.py finds it)
        import shutil
        import subprocess

        if shutil.which(os.environ.get("CC", "cc")):
            subprocess.run(["bash", str(ROOT / "scripts" / "build-python-native.sh")], check=True,
                           capture_output=True, env={**os.environ, "PYTHON": sys.executable})


def compile_c(args):
    """Runs the C compiler ($CC or cc) with -std=c11 -Wall -Wextra -Werror and `args`; skips the test where there
    is none (scripts/test.sh installs one)."""
    import shutil
    import subprocess

    import pytest

    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}); scripts/test.sh installs one")
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", *map(str, args)], check=True, capture_output=True,
                   text=True)
