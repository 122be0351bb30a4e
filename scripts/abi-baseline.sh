#!/usr/bin/env bash
# Regenerates the committed ABI baseline abi/<SONAME>.abi, which scripts/abi-check.sh (run by the test suite,
# tests/it/abi.rs) compares every build against. Run it on purpose, then commit abi/:
#   - after functions were added (the check reports additions but passes; this records them);
#   - after a deliberate break: bump the version in Cargo.toml first (a new SONAME; 0.x: the minor), list the
#     break in CHANGELOG.md, then run this (the old SONAME's baseline is removed);
#   - before a release, --force accepts a break within the unreleased SONAME (see CHANGELOG.md).
#
# It installs a release build into a temporary prefix with scripts/install.sh (stripped library + its .debug)
# and records, with libabigail's abidw, the exported functions, their symbol versions and the C types they use
# (abi/suppressions leaves the Rust internals out; no paths or line numbers are written).
#
# Usage: scripts/abi-baseline.sh [--force] [--prefix DIR]
#   --prefix DIR  use a tree scripts/install.sh already installed (lib/ under DIR) instead of a fresh install
#   --force       overwrite the baseline even if the library breaks it under the same SONAME
set -euo pipefail

die() { echo "abi-baseline.sh: $*" >&2; exit 1; }
prefix="" force=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; prefix="$(cd "$2" && pwd)"; shift 2 ;;
        --force) force=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
cd "$(dirname "$0")/.."
command -v abidw >/dev/null 2>&1 || die "abidw not found: install libabigail (Debian/Ubuntu: apt-get install abigail-tools)"

if [ -z "$prefix" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    prefix="$tmp/prefix"
    bash scripts/install.sh --prefix "$prefix" --libdir lib --no-cli >&2 || die "scripts/install.sh failed"
fi
lib="$(readlink -f "$prefix/lib/libhostfirst.so")"
[ -f "$lib" ] || die "no libhostfirst.so under $prefix/lib"
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
[ -n "$soname" ] || die "$lib has no SONAME"
out="abi/$soname.abi"

if [ -f "$out" ] && [ "$force" = 0 ]; then
    set +e
    bash scripts/abi-check.sh --prefix "$prefix" --baseline "$out"
    rc=$?
    set -e
    [ "$rc" -ne 2 ] || die "the check against the current baseline could not run"
    [ "$rc" -eq 0 ] || die "refusing to overwrite $out: the library breaks it under the same SONAME $soname." \
        "Bump the version in Cargo.toml (new SONAME) for a deliberate break, or pass --force if $soname was never released."
fi

abidw --suppressions abi/suppressions --debug-info-dir "$(dirname "$lib")" \
    --no-show-locs --no-corpus-path --no-comp-dir-path --no-elf-needed --type-id-style hash \
    --out-file "$out.tmp" "$lib"
mv -f "$out.tmp" "$out"
for old in abi/*.abi; do
    [ "$old" = "$out" ] || { rm -f "$old"; echo "abi-baseline.sh: removed $old (another SONAME)" >&2; }
done
echo "abi-baseline.sh: wrote $out ($(grep -c '<elf-symbol ' "$out") exported functions); commit it" >&2
