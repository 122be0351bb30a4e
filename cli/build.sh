#!/usr/bin/env bash
# Builds the hostfirst CLI (cli/*.c, against include/hostfirst.h only): the one recipe that scripts/demo.sh,
# scripts/install.sh, scripts/wheel.sh and the tests (tests/it/common.rs) all call.
#
# Usage: cli/build.sh OUTPUT [FLAG...]
#   OUTPUT   the program to write; written to a private temporary name first and renamed into place, so a
#            failed build leaves no OUTPUT and two builds at once never run a half-written one
#   FLAG...  extra compiler and linker flags, after the sources: where the library is and how the program
#            finds it at run time (-L DIR, -Wl,-rpath,...), -g, ...
# Environment:
#   CC             the C compiler, split into words (default cc; e.g. "python3 -m ziglang cc -target ...")
#   HOSTFIRST_LIB  the flag that links the library (default -lhostfirst; e.g. -l:libhostfirst.so.1)
set -euo pipefail

die() { echo "cli/build.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: cli/build.sh OUTPUT [FLAG...]"
out="$1"
shift
here="$(cd "$(dirname "$0")" && pwd)"
read -r -a cc <<< "${CC:-cc}"
[ ${#cc[@]} -gt 0 ] || die "CC is empty"
# Windows (MinGW): the CLI's entry point is wmain, which takes its arguments as UTF-16 (cli/main.c says why).
win=()
case "$("${cc[@]}" -dumpmachine 2>/dev/null || true)" in *mingw*|*windows*) win=(-municode) ;; esac
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
"${cc[@]}" -std=c11 -O2 -Wall -Wextra -Werror -I"$here/../include" -I"$here" "$here"/*.c -o "$tmp" "${win[@]}" "$@" \
    "${HOSTFIRST_LIB:--lhostfirst}" -lpthread -lm \
    || die "compiling the hostfirst CLI failed (${cc[*]})"
mv -f "$tmp" "$out"
trap - EXIT
