#!/usr/bin/env bash
# Builds the Python package's native extension (bindings/python/hostfirst/_native.c, the abi3 skin over the C
# ABI: one binary for every CPython >= 3.9) with the system C compiler.
#
#   bash scripts/build-python-native.sh [OUT]   # default OUT: target/python-native/_native.abi3.so
#
# It links no libhostfirst (hostfirst/_fast.py hands it the library's functions from ctypes) and no libpython
# (an extension's CPython symbols come from the interpreter that loads it). The headers are those of $PYTHON
# (default python3); where they are missing, Debian's python3-dev is installed (scripts/apt.sh).
# Environment: CC (default cc; scripts/wheel.sh passes zig cc for glibc 2.17), CFLAGS (added), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/python-native/_native.abi3.so}"
py="${PYTHON:-python3}"
inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if [ ! -f "$inc/Python.h" ]; then
    . scripts/apt.sh && apt_install python3-dev   # waits for another apt run's locks (scripts/apt.sh)
    inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
fi
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086  # CC and CFLAGS are command words
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -I"$inc" ${CFLAGS:-} \
    bindings/python/hostfirst/_native.c -o "$out"
echo "$out"
