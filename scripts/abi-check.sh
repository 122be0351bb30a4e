#!/usr/bin/env bash
# Checks the ABI of the installed libhostfirst against the committed baselines of its SONAME, both ways: what the
# policy calls compatible passes, anything else fails. Run by the test suite (tests/it/abi.rs); the baselines are
# written by scripts/abi-baseline.sh.
#
# Three checks, each in C terms first:
#   1. The C view (abi/<SONAME>.txt, scripts/abi_c_view.py): every function prototype, struct layout (size,
#      alignment, each field's offset, size and C type), typedef, enum constant and macro value of the installed
#      hostfirst.h, as the C compiler sees them. Additions pass; a field appended at the end of an extensible
#      struct (one that begins with size_t struct_size) passes; a renumbered constant or #define, a field inserted
#      or changed, a changed prototype, anything removed fails.
#   2. Symbol versions (abi/hostfirst.map): a function missing from the baseline must carry the open node (the
#      current minor) or the experimental node, never a released one; a function of the baseline keeps its node.
#      The open node itself counts as released once CHANGELOG.md has a release of its minor (a heading
#      `## MAJOR.MINOR.PATCH` without "(unreleased)"): from 1.0.0 on, a new function then needs the next minor
#      (abi/hostfirst.map's comment lists the steps).
#   3. The binary (abi/<SONAME>.abi, libabigail's abidiff on the library's debug info): the same rules for what the
#      compiled library really exports; appends at the end of extensible structs are accepted with a generated
#      `has_data_member_inserted_at = end` suppression, which refuses insertions elsewhere.
#   4. The header against this library, no baseline involved (scripts/abi_c_view.py against-library): every
#      function the header declares (experimental ones too) is exported, and every enum constant has the value
#      the library's own enum gives it (its debug info, read by libabigail's abidw --load-all-types), so a
#      header that is not this library's (a stale one, a function removed from the library, a Rust enum
#      renumbered and the header not regenerated) fails even when the baselines were rewritten from it.
# The experimental tier (HOSTFIRST_EXPERIMENTAL; its node HOSTFIRST_EXPERIMENTAL_MAJOR.MINOR) is listed and never
# compared: it may change in any minor.
#
#   compatible (nothing changed, or additions)        exit 0; additions are listed
#   incompatible, or no baseline for the SONAME         exit 1, with every break in C terms and what to do
#   a tool missing or failing                           exit 2
#
# Usage: scripts/abi-check.sh [--prefix DIR] [--libdir lib] [--baseline FILE] [--c-baseline FILE] [--header FILE]
#                             [--map FILE] [--changelog FILE]
#   --prefix DIR        a tree installed by scripts/install.sh (default: install into a temporary directory)
#   --libdir DIR        its library directory, relative to the prefix (default: lib)
#   --baseline FILE     compare the library against FILE instead of abi/<SONAME>.abi
#   --c-baseline FILE   compare the header's C view against FILE instead of abi/<SONAME>.txt
#   --header FILE       take the C view of FILE instead of the installed include/hostfirst.h
#   --map FILE          the version script whose open and experimental nodes apply (default: abi/hostfirst.map)
#   --changelog FILE    the changelog that says which minors are released (default: CHANGELOG.md)
# The binary comparison reads the types from the installed debug info (libhostfirst.so.X.Y.Z.debug beside the
# library), so neither the build path nor the debug info's own contents (paths, line numbers) matter.
set -euo pipefail

die() { echo "abi-check.sh: $*" >&2; exit 2; }
prefix="" libdir="lib" baseline="" c_baseline="" header="" map="" changelog=""
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; prefix="$2"; shift 2 ;;
        --libdir) [ $# -ge 2 ] || die "--libdir needs a value"; libdir="$2"; shift 2 ;;
        --baseline) [ $# -ge 2 ] || die "--baseline needs a value"; baseline="$(abspath "$2")"; shift 2 ;;
        --c-baseline) [ $# -ge 2 ] || die "--c-baseline needs a value"; c_baseline="$(abspath "$2")"; shift 2 ;;
        --header) [ $# -ge 2 ] || die "--header needs a value"; header="$(abspath "$2")"; shift 2 ;;
        --map) [ $# -ge 2 ] || die "--map needs a value"; map="$(abspath "$2")"; shift 2 ;;
        --changelog) [ $# -ge 2 ] || die "--changelog needs a value"; changelog="$(abspath "$2")"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[ -z "$prefix" ] || prefix="$(cd "$prefix" && pwd)"
cd "$(dirname "$0")/.."
regenerate="bash scripts/abi-baseline.sh"
map="${map:-$PWD/abi/hostfirst.map}"
changelog="${changelog:-$PWD/CHANGELOG.md}"

command -v abidiff >/dev/null 2>&1 \
    || die "abidiff not found: install libabigail (Debian/Ubuntu: apt-get install abigail-tools; scripts/test.sh does)"
command -v readelf >/dev/null 2>&1 || die "readelf not found (binutils)"
command -v python3 >/dev/null 2>&1 || die "python3 not found (the C view, scripts/abi_c_view.py)"
command -v "${CC:-cc}" >/dev/null 2>&1 || die "no C compiler ('${CC:-cc}'; set CC): the C view needs one"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -z "$prefix" ]; then
    prefix="$tmp/prefix"
    bash scripts/install.sh --prefix "$prefix" --libdir "$libdir" --no-cli >&2 || die "scripts/install.sh failed"
fi
lib="$prefix/$libdir/libhostfirst.so"
[ -e "$lib" ] || die "$lib not found: is $prefix a tree installed by scripts/install.sh?"
lib="$(readlink -f "$lib")"
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
[ -n "$soname" ] || die "$lib has no SONAME"
header="${header:-$prefix/include/hostfirst.h}"
[ -f "$header" ] || die "$header not found"

for b in baseline:abi c_baseline:txt; do
    var="${b%%:*}" ext="${b##*:}"
    if [ -z "${!var}" ]; then
        printf -v "$var" '%s' "$PWD/abi/$soname.$ext"
        if [ ! -f "${!var}" ]; then
            others="$(cd abi && ls -- *."$ext" 2>/dev/null | tr '\n' ' ')"
            echo "abi-check.sh: FAILED: no ABI baseline abi/$soname.$ext for $soname (abi/ has: ${others:-nothing})." >&2
            echo "abi-check.sh: a new SONAME needs its baselines, made on purpose, with: $regenerate" >&2
            exit 1
        fi
    fi
done

breaks=0

# 1. The C view.
echo "== the C view of $(basename "$header") against $(basename "$c_baseline")"
python3 scripts/abi_c_view.py report "$header" --soname "$soname" > "$tmp/c-view.txt" || die "the C view failed"
set +e
python3 scripts/abi_c_view.py compare "$c_baseline" "$tmp/c-view.txt" > "$tmp/c-compare.txt"
rc=$?
set -e
[ "$rc" -le 1 ] || die "comparing the C views failed (exit $rc)"
if [ -s "$tmp/c-compare.txt" ]; then cat "$tmp/c-compare.txt"; else echo "  no changes"; fi
[ "$rc" -eq 0 ] || breaks=1

# 2. Symbol versions: new functions only in the open or the experimental node; old ones keep theirs.
nodes="$(sed -n 's/^\(HOSTFIRST_[A-Za-z0-9_.]*\) *{.*/\1/p' "$map")"
open_node="$(printf '%s\n' "$nodes" | grep -v '^HOSTFIRST_EXPERIMENTAL_' | tail -n 1)"
[ -n "$open_node" ] || die "no stable node in $map"
# The open node's minor is released when the changelog has a release of it (`## 1.0.0`, not `## 1.0.1 (unreleased)`).
[ -f "$changelog" ] || die "$changelog not found (it says which minors are released)"
open_minor="${open_node#HOSTFIRST_}"
released="$(grep -E "^## ${open_minor//./\\.}\.[0-9]+[[:space:]]*\$" "$changelog" | head -n 1 | sed 's/^## *//; s/[[:space:]]*$//')" || true
IFS=. read -r o_major o_minor <<<"$open_minor"
next_node="HOSTFIRST_$o_major.$((o_minor + 1))"
echo "== symbol versions (open node $open_node${released:+, released in $released: new functions need $next_node})"
readelf --dyn-syms -W "$lib" | awk '$7 != "UND" && $8 ~ /^hostfirst_/ { print $8 }' | sed 's/@@*/ /' | sort \
    > "$tmp/lib-syms"
sed -n "s/.*<elf-symbol name='\(hostfirst_[^']*\)' version='\([^']*\)'.*/\1 \2/p" "$baseline" | sort > "$tmp/base-syms"
node_breaks=0
while read -r name version; do
    old="$(awk -v n="$name" '$1 == n { print $2 }' "$tmp/base-syms")"
    if [ -z "$old" ]; then
        case "$version" in
            HOSTFIRST_EXPERIMENTAL_*) ;;
            "$open_node")
                if [ -n "$released" ]; then
                    echo "  INCOMPATIBLE: $name is new but carries $open_node, released in $released ($(basename "$changelog")):" \
                        "new functions go into $next_node: bump the version in Cargo.toml to $o_major.$((o_minor + 1)).0," \
                        "freeze $open_node and append $next_node in abi/hostfirst.map (its comment lists the steps)"
                    node_breaks=1
                fi ;;
            *) echo "  INCOMPATIBLE: $name is new but carries $version, a released node: new functions go into" \
                    "$open_node (or the experimental node); fix abi/hostfirst.map"; node_breaks=1 ;;
        esac
    elif [ "$old" != "$version" ]; then
        case "$old$version" in
            HOSTFIRST_EXPERIMENTAL_*HOSTFIRST_EXPERIMENTAL_*) ;;
            *) echo "  INCOMPATIBLE: $name moved from $old to $version (programs linked against $old would not load)"
               node_breaks=1 ;;
        esac
    fi
done < "$tmp/lib-syms"
[ "$node_breaks" -eq 0 ] && echo "  every function carries its node"
[ "$node_breaks" -eq 0 ] || breaks=1

# 3. The binary, with libabigail: experimental functions left out, appends at the end of extensible structs
# (the C view's list) accepted.
echo "== the library's debug info against $(basename "$baseline") (libabigail's abidiff; types named as the Rust" \
    "debug info names them)"
extensible="$(sed -n 's/^struct \(hostfirst_[a-z0-9_]*\): .* extensible$/\1/p; s/^experimental struct \(hostfirst_[a-z0-9_]*\): .* extensible$/\1/p' \
    "$tmp/c-view.txt" | paste -sd '|')"
{
    echo "# Generated by scripts/abi-check.sh: the experimental tier is not compared."
    echo "[suppress_function]"
    echo "  symbol_version_regexp = ^HOSTFIRST_EXPERIMENTAL_"
    if [ -n "$extensible" ]; then
        echo "# Extensible structs (size_t struct_size first) may grow by fields appended at their end."
        echo "[suppress_type]"
        echo "  type_kind = struct"
        echo "  name_regexp = (^|::)($extensible)\$"
        echo "  has_data_member_inserted_at = end"
    fi
} > "$tmp/suppressions"
flags=(--d2 "$(dirname "$lib")" --fail-no-debug-info --suppressions "$tmp/suppressions")
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
    printf '%s\n' "$report"
    echo "  INCOMPATIBLE: abidiff exit $rc: $([ $((rc & 8)) -ne 0 ] && echo 'symbols removed' || echo 'types or signatures changed')"
    breaks=1
else
    set +e
    added="$(abidiff "${flags[@]}" "$baseline" "$lib" 2>&1)"
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then printf '%s\n' "$added"; else echo "  no changes"; fi
    added_rc=$rc
fi

# 4. The header against the library it is installed with.
echo "== $(basename "$header") against $(basename "$lib") itself (declared functions exported; enum values as the" \
    "library's debug info gives them)"
abidw --load-all-types --no-show-locs --no-corpus-path --no-comp-dir-path --no-elf-needed \
    --debug-info-dir "$(dirname "$lib")" --out-file "$tmp/lib-all.abi" "$lib" \
    || die "abidw failed reading $lib and its debug info"
awk '{ print $1 }' "$tmp/lib-syms" > "$tmp/lib-names"
set +e
python3 scripts/abi_c_view.py against-library "$tmp/c-view.txt" "$tmp/lib-names" "$tmp/lib-all.abi"
rc=$?
set -e
[ "$rc" -le 1 ] || die "comparing the header with the library failed (exit $rc)"
[ "$rc" -eq 0 ] || breaks=1

if [ "$breaks" -ne 0 ]; then
    echo "abi-check.sh: FAILED: $lib ($soname) is not ABI-compatible with $(basename "$baseline") /" \
        "$(basename "$c_baseline") (the INCOMPATIBLE lines above)." >&2
    echo "abi-check.sh: a header that disagrees with its own library (check 4) is regenerated, not versioned:" \
        "HOSTFIRST_UPDATE_HEADER=1 cargo test --features test-hooks --test it header::, then rebuild" >&2
    echo "abi-check.sh: if the break is deliberate, bump the version in Cargo.toml (a new SONAME; 0.x: the minor)," \
        "list it in CHANGELOG.md and regenerate the baselines with: $regenerate" >&2
    exit 1
fi
# (added_rc: abidiff's verdict with added symbols; rc was reused by check 4 since.)
if grep -q 'added:' "$tmp/c-compare.txt" || [ "${added_rc:-0}" -ne 0 ]; then
    echo "abi-check.sh: compatible with $(basename "$baseline"), with additions (above); record them with: $regenerate"
else
    echo "abi-check.sh: $soname is ABI-compatible with $(basename "$baseline") (no changes)"
fi
