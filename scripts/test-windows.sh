#!/usr/bin/env bash
# The Windows part of the test suite (scripts/test.sh runs it): builds the Windows package
# (scripts/package-windows.sh) and a DLL with the test hooks, prepares a Wine prefix, and runs the tests of
# tests/it/windows.rs under Wine (what they cover is listed there and in the README's Windows section).
#
#   bash scripts/test-windows.sh [FILTER]     # FILTER: a test name filter (default windows::, all of them)
#
# Wine: Debian 12's wine64 8.0, a prefix of its own under target/win-prefix (made once, about 30 s and 700 MB),
# and one test-only shim installed in that prefix: bcryptprimitives.dll (tests/windows/bcryptprimitives.c), which
# Windows 10+ has and Wine 8.0 lacks, and from which Rust's standard library takes ProcessPrng. The shim is never
# part of the package.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
# shellcheck source=scripts/windows-toolchain.sh
. scripts/windows-toolchain.sh

die() { echo "test-windows.sh: $*" >&2; exit 1; }

zip="$(bash scripts/package-windows.sh)"
[ -f "$zip" ] || die "scripts/package-windows.sh made no zip"
wheel="$(bash scripts/wheel-windows.sh)"
[ -f "$wheel" ] || die "scripts/wheel-windows.sh made no wheel"

# The test build: the same DLL with the test hooks (hostfirst__test_*), kept apart from the package's.
win_cargo build --release -p hostfirst --lib --features test-hooks >&2 || die "the test-hooks build failed"
test_dll_dir="target/windows/test-hooks"
rm -rf "$test_dll_dir"
mkdir -p "$test_dll_dir"
cp "$WIN_OUT/hostfirst.dll" "$WIN_OUT/libhostfirst.dll.a" "$test_dll_dir/"
# The house rules hold for the Windows-only code too: clippy on the Windows target, both crates. (Its
# missing_const_for_thread_local lint misfires on this target, on thread_local!s that are already const.)
win_cargo clippy --release -p hostfirst -p hostfirst-core --features hostfirst/test-hooks -- -D warnings \
    -A clippy::missing_const_for_thread_local >&2 || die "clippy on $WIN_TARGET failed"
built=$SECONDS

# The Wine prefix, once; the shim into its system32 (refreshed when the shim's source changes).
export WINEPREFIX="$PWD/target/win-prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
wineserver="$(dirname "$WINE")/wineserver"
[ -x "$wineserver" ] || wineserver="$(command -v wineserver || true)"
if [ ! -f "$WINEPREFIX/.hostfirst-ready" ]; then
    rm -rf "$WINEPREFIX"
    echo "test-windows.sh: making the Wine prefix $WINEPREFIX" >&2
    "$WINE" wineboot -i >/dev/null 2>&1 || die "wineboot -i failed (WINEPREFIX=$WINEPREFIX)"
    [ -n "$wineserver" ] && "$wineserver" -w
    touch "$WINEPREFIX/.hostfirst-ready"
fi
sys32="$WINEPREFIX/drive_c/windows/system32"
[ -d "$sys32" ] || die "$sys32 is missing: remove $WINEPREFIX and run again"
shim_src=tests/windows/bcryptprimitives.c
if [ ! -f "$sys32/bcryptprimitives.dll" ] || [ "$shim_src" -nt "$sys32/bcryptprimitives.dll" ]; then
    "$WIN_CC" -shared -O2 -Wall -Wextra -Werror -o "$sys32/bcryptprimitives.dll" "$shim_src" -ladvapi32 \
        || die "building the bcryptprimitives shim failed"
fi

# One Wine server for the whole run (each program would otherwise start and stop its own), and Wine's own
# services (services.exe, winedevice.exe, ...) started now with their output on /dev/null: started by a test's
# program they would inherit its output pipes and hold them open, and the test would wait for their end.
# Both are stopped at the end.
if [ -n "$wineserver" ]; then
    "$wineserver" -k 2>/dev/null || true
    "$wineserver" -p </dev/null >/dev/null 2>&1
    trap '"$wineserver" -k 2>/dev/null || true' EXIT
fi
"$WINE" wineboot </dev/null >/dev/null 2>&1 || die "wineboot failed (WINEPREFIX=$WINEPREFIX)"

echo "test-windows.sh: running tests/it/windows.rs under Wine" >&2
HOSTFIRST_WINDOWS_REQUIRED=1 HOSTFIRST_WINDOWS_ZIP="$zip" HOSTFIRST_WINDOWS_WHEEL="$wheel" \
    HOSTFIRST_WINDOWS_TEST_DLL="$PWD/$test_dll_dir/hostfirst.dll" \
    WINE="$WINE" HOSTFIRST_WINDOWS_CC="$WIN_CC" \
    cargo test --features test-hooks --test it "${1:-windows::}" 2>&1
echo "test-windows.sh: done in $((SECONDS - start)) s (toolchain and builds $((built - start)) s, Wine tests $((SECONDS - built)) s)" >&2
