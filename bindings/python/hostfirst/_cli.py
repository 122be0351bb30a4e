"""The `hostfirst` console command: runs the C CLI (cli/, built by cli/build.sh) shipped in the platform wheel,
which finds the bundled libhostfirst beside it through its RUNPATH (on Windows, hostfirst.exe finds hostfirst.dll
in the package directory, which the command puts on PATH for it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parent / "bin" / ("hostfirst.exe" if sys.platform == "win32" else "hostfirst")


def main() -> int:
    if not CLI.is_file():
        sys.stderr.write(
            "hostfirst: the command-line program ships in the platform wheel (bash scripts/wheel.sh) and is not in "
            "this installation; from a checkout, build it as the README says.\n"
        )
        return 127
    if sys.platform == "win32":  # no exec on Windows: a child, with the package's hostfirst.dll on its PATH
        env = dict(os.environ, PATH=str(CLI.parent.parent) + os.pathsep + os.environ.get("PATH", ""))
        return subprocess.call([str(CLI), *sys.argv[1:]], env=env)
    os.execv(str(CLI), ["hostfirst", *sys.argv[1:]])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
