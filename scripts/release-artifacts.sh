#!/usr/bin/env bash
# Regenerates what a release records about its C API from the tree as it stands, in the one order that works,
# then checks the result. Run it after merging everything that changes exported functions, their doc comments,
# structs or constants (the header is generated from src/ffi; the baselines from the release build of that
# header), and before tagging; then commit include/ and abi/:
#
#   1. include/hostfirst.h          cbindgen, from src/ffi's doc comments (tests/it/header.rs, HOSTFIRST_UPDATE_HEADER=1)
#   2. abi/<SONAME>.abi and .txt    scripts/abi-baseline.sh: a fresh scripts/install.sh release install, its
#                                   libabigail record and the C view of the installed (just regenerated) header
#   3. the checks                   the header, ABI, install and release tests (tests/it/{header,abi,install,release}.rs)
#
# Usage: scripts/release-artifacts.sh [--force] [--no-check]
#   --force     pass --force to scripts/abi-baseline.sh: overwrite the baselines of this SONAME even where the
#               library breaks them. Only for a line that was never released, as at the 1.0.0 cut (the branches
#               merged for it changed the header after the baselines were first made); never once a release of
#               the SONAME is out.
#   --no-check  stop after writing (step 3 is the slow part: it builds the test binary)
# Environment: CARGO (default cargo). Needs what the two steps need: a C compiler, abigail-tools (abidw,
# abidiff), readelf, objcopy, python3; cmake and pkg-config for the install tests.
set -euo pipefail

die() { echo "release-artifacts.sh: $*" >&2; exit 1; }
force=() check=1
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=(--force); shift ;;
        --no-check) check=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
cd "$(dirname "$0")/.."
cargo="${CARGO:-cargo}"

echo "release-artifacts.sh: 1. the header (cbindgen)" >&2
# Only the test that writes it: the other header tests would read the header while it is being rewritten.
HOSTFIRST_UPDATE_HEADER=1 "$cargo" test --features test-hooks --test it header::committed_header_is_current >&2 \
    || die "regenerating include/hostfirst.h failed (the test output above says why)"

echo "release-artifacts.sh: 2. the ABI baselines of the release build" >&2
bash scripts/abi-baseline.sh "${force[@]}" || die "scripts/abi-baseline.sh failed"

if [ "$check" = 1 ]; then
    echo "release-artifacts.sh: 3. the checks" >&2
    "$cargo" test --features test-hooks --test it -- header:: abi:: install:: release:: >&2 \
        || die "the checks failed on the regenerated files"
fi
echo "release-artifacts.sh: done; commit what changed:" >&2
git status --short -- include abi >&2
