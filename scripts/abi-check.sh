#!/usr/bin/env bash
# Checks the ABI of the installed libhostfirst against the committed baseline abi/<SONAME>.abi (libabigail's
# abidiff; the baseline is written by scripts/abi-baseline.sh). Run by the test suite (tests/it/abi.rs).
#
#   compatible (nothing changed, or functions added)   exit 0; additions are listed
#   incompatible (a function removed, a signature or a struct/enum it uses changed), or no baseline for the
#   library's SONAME                                   exit 1, with abidiff's report and what to do
#   abidiff missing or failing                         exit 2
#
# Usage: scripts/abi-check.sh [--prefix DIR] [--libdir lib] [--baseline FILE]
#   --prefix DIR     a tree installed by scripts/install.sh (default: install into a temporary directory)
#   --libdir DIR     its library directory, relative to the prefix (default: lib)
#   --baseline FILE  compare against FILE instead of abi/<SONAME>.abi
# The comparison reads the types from the installed debug info (libhostfirst.so.X.Y.Z.debug beside the library),
# so neither the build path nor the debug info's own contents (paths, line numbers) matter: only the exported
# functions, their symbol versions, and the C types they reach.
set -euo pipefail

die() { echo "abi-check.sh: $*" >&2; exit 2; }
prefix="" libdir="lib" baseline=""
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; prefix="$2"; shift 2 ;;
        --libdir) [ $# -ge 2 ] || die "--libdir needs a value"; libdir="$2"; shift 2 ;;
        --baseline) [ $# -ge 2 ] || die "--baseline needs a value"; baseline="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[ -z "$baseline" ] || baseline="$(cd "$(dirname "$baseline")" && pwd)/$(basename "$baseline")"
[ -z "$prefix" ] || prefix="$(cd "$prefix" && pwd)"
cd "$(dirname "$0")/.."
regenerate="bash scripts/abi-baseline.sh"

command -v abidiff >/dev/null 2>&1 \
    || die "abidiff not found: install libabigail (Debian/Ubuntu: apt-get install abigail-tools; scripts/test.sh does)"
command -v readelf >/dev/null 2>&1 || die "readelf not found (binutils)"

if [ -z "$prefix" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    prefix="$tmp/prefix"
    bash scripts/install.sh --prefix "$prefix" --libdir "$libdir" --no-cli >&2 || die "scripts/install.sh failed"
fi
lib="$prefix/$libdir/libhostfirst.so"
[ -e "$lib" ] || die "$lib not found: is $prefix a tree installed by scripts/install.sh?"
lib="$(readlink -f "$lib")"
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
[ -n "$soname" ] || die "$lib has no SONAME"

if [ -z "$baseline" ]; then
    baseline="$PWD/abi/$soname.abi"
    if [ ! -f "$baseline" ]; then
        others="$(cd abi && ls -- *.abi 2>/dev/null | tr '\n' ' ')"
        echo "abi-check.sh: FAILED: no ABI baseline for $soname (abi/ has: ${others:-nothing})." >&2
        echo "abi-check.sh: a new SONAME needs its baseline, made on purpose, with: $regenerate" >&2
        exit 1
    fi
fi

flags=(--d2 "$(dirname "$lib")" --fail-no-debug-info)
# First without added symbols: any change left is incompatible (abidiff sets bit 4 for a changed type or
# signature and bit 8 for a removed symbol, but also bit 4 for a mere addition, hence two runs).
set +e
report="$(abidiff "${flags[@]}" --no-added-syms "$baseline" "$lib" 2>&1)"
rc=$?
set -e
if [ $((rc & 3)) -ne 0 ]; then
    printf '%s\n' "$report" >&2
    die "abidiff failed (exit $rc) comparing $baseline with $lib"
fi
if [ "$rc" -ne 0 ]; then
    printf '%s\n' "$report" >&2
    echo "abi-check.sh: FAILED: $lib ($soname) is not ABI-compatible with $baseline (abidiff exit $rc:" \
        "$([ $((rc & 8)) -ne 0 ] && echo 'symbols removed' || echo 'types or signatures changed'))." >&2
    echo "abi-check.sh: if the break is deliberate, bump the version in Cargo.toml (a new SONAME; 0.x: the minor)," \
        "list it in CHANGELOG.md and regenerate the baseline with: $regenerate" >&2
    exit 1
fi
set +e
added="$(abidiff "${flags[@]}" "$baseline" "$lib" 2>&1)"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    printf '%s\n' "$added"
    echo "abi-check.sh: compatible with $(basename "$baseline"), with additions (above); record them with: $regenerate"
else
    echo "abi-check.sh: $soname is ABI-compatible with $(basename "$baseline") (no changes)"
fi
