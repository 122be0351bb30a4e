#!/usr/bin/env bash
# Builds the Python wheel for 64-bit Windows: the hostfirst package (bindings/python, pure ctypes) with the
# Windows build inside, into target/wheels-windows/hostfirst-<version>-cp39-abi3-win_amd64.whl:
#
#   hostfirst/hostfirst.dll        the library of the Windows package (scripts/package-windows.sh), loaded by
#                                  hostfirst/_lib.py before anything else, as the Linux wheel's libhostfirst.so
#   hostfirst/bin/hostfirst.exe    the CLI, started by the `hostfirst` console command (hostfirst/_cli.py puts the
#                                  package directory on its PATH so that it finds hostfirst.dll)
#   hostfirst/_native.pyd          the native extension (hostfirst/_native.c), cross-built with mingw-w64 against
#                                  python3.dll, the stable ABI (scripts/build-python-native.sh --windows)
#
#   bash scripts/wheel-windows.sh          # prints the wheel's path on stdout
#
# cp39-abi3: the extension speaks CPython's stable ABI, so one wheel serves every CPython 3.9+ on x86-64 Windows.
# It has never been installed into a Windows Python (none is available to the test machines), so the extension
# has never been loaded; tests/it/windows.rs checks its tag, its files (the extension imports only python3.dll and
# the C runtime, and exports PyInit__native), that pip accepts it for win_amd64, and runs its CLI, from the
# installed layout, under Wine.
# The tools (setuptools, wheel) live in a venv under target/wheel-windows-tools (made once, from the registry).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "wheel-windows.sh: $*" >&2; exit 1; }

zip="$(bash scripts/package-windows.sh)"
name="$(basename "$zip" .zip)"
pkg="target/windows/stage/$name"
[ -f "$pkg/bin/hostfirst.dll" ] && [ -f "$pkg/bin/hostfirst.exe" ] || die "the Windows package is incomplete ($pkg)"

tools="target/wheel-windows-tools"
want="setuptools>=77 wheel"
if [ "$(cat "$tools/.installed" 2>/dev/null)" != "$want" ]; then
    echo "wheel-windows.sh: installing the wheel tools into $tools" >&2
    rm -rf "$tools"
    "${PYTHON:-python3}" -m venv "$tools"
    # shellcheck disable=SC2086
    "$tools/bin/python" -m pip install -q --disable-pip-version-check $want >&2
    echo "$want" > "$tools/.installed"
fi

stage="target/wheel-windows-stage"
rm -rf "$stage"
mkdir -p "$stage/hostfirst/bin"
cp bindings/python/pyproject.toml bindings/python/setup.py bindings/python/README.md LICENSE-MIT LICENSE-APACHE "$stage/"
# The one line of the metadata that differs from the Linux wheel's: the operating system classifier.
linux_os='"Operating System :: POSIX :: Linux",'
grep -qF "$linux_os" "$stage/pyproject.toml" || die "bindings/python/pyproject.toml has no $linux_os classifier to replace"
sed -i "s|$linux_os|\"Operating System :: Microsoft :: Windows\",|" "$stage/pyproject.toml"
cp bindings/python/hostfirst/*.py bindings/python/hostfirst/py.typed "$stage/hostfirst/"
cp "$pkg/bin/hostfirst.dll" "$stage/hostfirst/hostfirst.dll"
cp "$pkg/bin/hostfirst.exe" "$stage/hostfirst/bin/hostfirst.exe"
PYTHON="$tools/bin/python" bash scripts/build-python-native.sh --windows "$stage/hostfirst/_native.pyd" >&2

out="target/wheels-windows"
rm -rf "$out"
mkdir -p "$out"
# bdist_wheel's --plat-name gives setup.py's PlatformWheel the win_amd64 platform tag.
"$tools/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
    --config-settings=--build-option=--plat-name=win_amd64 -w "$out" "$stage" >&2 || die "pip wheel failed"
wheel="$(ls "$out"/hostfirst-*.whl)"
case "$(basename "$wheel")" in
    hostfirst-*-cp39-abi3-win_amd64.whl) ;;
    *) die "unexpected wheel name $(basename "$wheel") (want cp39-abi3-win_amd64)" ;;
esac
"$tools/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
need = {"hostfirst/hostfirst.dll", "hostfirst/bin/hostfirst.exe", "hostfirst/_lib.py", "hostfirst/_cli.py",
        "hostfirst/_native.pyd", "hostfirst/_fast.py",
        f"{info}/licenses/LICENSE-MIT", f"{info}/licenses/LICENSE-APACHE"}
missing = need - names
if missing:
    sys.exit(f"wheel-windows.sh: the wheel lacks {sorted(missing)}")
meta = zipfile.ZipFile(sys.argv[1]).read(f"{info}/METADATA").decode()
systems = [l for l in meta.splitlines() if l.startswith("Classifier: Operating System ::")]
if systems != ["Classifier: Operating System :: Microsoft :: Windows"]:
    sys.exit(f"wheel-windows.sh: the wheel's operating system classifiers are {systems}")
if any(n.startswith("hostfirst/libhostfirst.so") for n in names):
    sys.exit("wheel-windows.sh: a Linux library slipped into the Windows wheel")
PY
echo "wheel-windows.sh: $wheel (never run on a Windows Python)" >&2
echo "$PWD/$wheel"
