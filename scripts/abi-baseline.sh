#!/usr/bin/env bash
# Regenerates the committed ABI baselines of the library's SONAME, which scripts/abi-check.sh (run by the test
# suite, tests/it/abi.rs) compares every build against: abi/<SONAME>.txt, the C view (every prototype, struct
# layout, typedef, enum constant and macro value of include/hostfirst.h in C terms, scripts/abi_c_view.py: the
# report to read), and abi/<SONAME>.abi, libabigail's record of the compiled library. Run it on purpose, then
# commit abi/:
#   - after functions were added (the check reports additions but passes; this records them);
#   - after a deliberate break: bump the version in Cargo.toml first (a new SONAME; 0.x: the minor), list the
#     break in CHANGELOG.md, then run this (the old SONAME's baseline is removed);
#   - before a release, --force accepts a break within the unreleased SONAME (see CHANGELOG.md).
#
# It installs a release build into a temporary prefix with scripts/install.sh (stripped library + its .debug)
# and records, with libabigail's abidw, the exported functions, their symbol versions and the types they use
# (abi/suppressions leaves the functions that are not exported out; no paths or line numbers are written), and
# the C view of the installed header (the C compiler: $CC, default cc).
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
    c_args=()
    [ ! -f "abi/$soname.txt" ] || c_args=(--c-baseline "abi/$soname.txt")
    bash scripts/abi-check.sh --prefix "$prefix" --baseline "$out" "${c_args[@]}"
    rc=$?
    set -e
    [ "$rc" -ne 2 ] || die "the check against the current baseline could not run"
    [ "$rc" -eq 0 ] || die "refusing to overwrite $out: the library breaks it under the same SONAME $soname." \
        "Bump the version in Cargo.toml (new SONAME) for a deliberate break, or pass --force if $soname was never released."
fi

abidw --suppressions abi/suppressions --debug-info-dir "$(dirname "$lib")" \
    --no-show-locs --no-corpus-path --no-comp-dir-path --no-elf-needed --type-id-style hash \
    --out-file "$out.tmp" "$lib"
view="abi/$soname.txt"
python3 scripts/abi_c_view.py report "$prefix/include/hostfirst.h" --soname "$soname" > "$view.tmp" \
    || die "the C view of $prefix/include/hostfirst.h failed"
mv -f "$out.tmp" "$out"
mv -f "$view.tmp" "$view"
for old in abi/*.abi abi/libhostfirst.so.*.txt; do
    [ "$old" = "$out" ] || [ "$old" = "$view" ] || [ ! -e "$old" ] \
        || { rm -f "$old"; echo "abi-baseline.sh: removed $old (another SONAME)" >&2; }
done
echo "abi-baseline.sh: wrote $out ($(grep -c '<elf-symbol ' "$out") exported functions) and $view; commit them" >&2
