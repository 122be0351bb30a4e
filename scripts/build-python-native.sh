#!/usr/bin/env bash
# Builds the Python package's native extension (bindings/python/hostfirst/_native.c, the abi3 skin over the C
# ABI: one binary for every CPython >= 3.9) with the system C compiler, or for 64-bit Windows with mingw-w64.
#
#   bash scripts/build-python-native.sh [OUT]             # default OUT: target/python-native/_native.abi3.so
#   bash scripts/build-python-native.sh --windows OUT     # OUT: .../_native.pyd (x86_64-w64-mingw32-gcc)
#
# It links no libhostfirst (hostfirst/_fast.py hands it the library's functions from ctypes). On Linux it links
# no libpython either (an extension's CPython symbols come from the interpreter that loads it). On Windows an
# extension imports them from a DLL: python3.dll, the stable ABI's, through an import library made here
# (dlltool) from exactly the symbols the object file needs; the headers are $PYTHON's with
# packaging/python-windows/pyconfig.h (Windows' type sizes and dllimport) in place of their Linux pyconfig.h.
# The headers are those of $PYTHON (default python3); where they are missing, Debian's python3-dev is installed
# (scripts/apt.sh). Environment: CC (default cc, or x86_64-w64-mingw32-gcc with --windows; scripts/wheel.sh
# passes zig cc for glibc 2.17), CFLAGS (added), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
windows=0
if [ "${1:-}" = "--windows" ]; then windows=1; shift; fi
out="${1:-target/python-native/_native.abi3.so}"
py="${PYTHON:-python3}"
src=bindings/python/hostfirst/_native.c
inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if [ ! -f "$inc/Python.h" ]; then
    . scripts/apt.sh && apt_install python3-dev   # waits for another apt run's locks (scripts/apt.sh)
    inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
fi
mkdir -p "$(dirname "$out")"
warn=(-std=c11 -O2 -Wall -Wextra -Werror)
if [ "$windows" = 0 ]; then
    # shellcheck disable=SC2086  # CC and CFLAGS are command words
    ${CC:-cc} "${warn[@]}" -fPIC -shared -Iinclude -I"$inc" ${CFLAGS:-} "$src" -o "$out"
    echo "$out"
    exit 0
fi

cc="${CC:-x86_64-w64-mingw32-gcc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/include"
cp -r "$inc/." "$work/include/"
cp packaging/python-windows/pyconfig.h "$work/include/pyconfig.h"
# shellcheck disable=SC2086
$cc "${warn[@]}" -Iinclude -I"$work/include" ${CFLAGS:-} -c "$src" -o "$work/native.o"
{
    echo "LIBRARY python3.dll"
    echo "EXPORTS"
    # every CPython symbol the object imports; objects (types, exceptions, None) are DATA
    x86_64-w64-mingw32-nm -u "$work/native.o" | sed -n 's/.* __imp_\(.*\)$/\1/p' | sort -u |
        sed -E 's/^(Py[A-Za-z]*_Type|PyExc_[A-Za-z]*|_Py_[A-Za-z]*Struct)$/\1 DATA/'
} > "$work/python3.def"
x86_64-w64-mingw32-dlltool -d "$work/python3.def" -l "$work/libpython3.dll.a" -D python3.dll
$cc -shared -static-libgcc -o "$out" "$work/native.o" "$work/libpython3.dll.a"
# what it needs at run time: python3.dll and the C runtime, nothing else
dump="$(x86_64-w64-mingw32-objdump -p "$out")"   # whole, then searched (grep -q would cut the pipe early)
deps="$(sed -n 's/^\s*DLL Name: //p' <<<"$dump" | sort -u | tr '\n' ' ')"
for d in $deps; do
    case "$d" in python3.dll|msvcrt.dll|KERNEL32.dll|api-ms-win-crt-*.dll) ;;
        *) echo "build-python-native.sh: $out needs $d" >&2; exit 1 ;; esac
done
grep -q "PyInit__native" <<<"$dump" || { echo "build-python-native.sh: no PyInit__native" >&2; exit 1; }
echo "$out"
