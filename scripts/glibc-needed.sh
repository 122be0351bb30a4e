#!/usr/bin/env bash
# The newest glibc symbol version ELF files need, and whether a glibc satisfies it.
#
#   bash scripts/glibc-needed.sh FILE...              prints e.g. "2.34" (the highest GLIBC_x.y any FILE references)
#   bash scripts/glibc-needed.sh --check FILE...      exits 1 with a message when this machine's glibc is older
#   bash scripts/glibc-needed.sh --list FILE...       prints each file with its highest version and the symbols
#                                                     that need it (to see what keeps a baseline high)
#
# Used by benches/gpu/run.sh (the carried benchmark driver must run on the GPU machine's glibc) and usable for any
# artifact (a wheel's .so, the CLI): manylinux2014 means glibc 2.17, so `glibc-needed.sh lib.so` must print <= 2.17
# there. Needs readelf (binutils).
set -euo pipefail
mode=print
case "${1:-}" in
    --check) mode=check; shift ;;
    --list) mode=list; shift ;;
esac
[ $# -gt 0 ] || { echo "usage: $0 [--check|--list] FILE..." >&2; exit 2; }
command -v readelf >/dev/null || { echo "$0: readelf (binutils) is required" >&2; exit 2; }

highest() { sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1; }
versions() { readelf --wide --version-info "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -u; }

need=0.0
for f in "$@"; do
    [ -f "$f" ] || { echo "$0: $f: no such file" >&2; exit 2; }
    v=$(versions "$f" | highest)
    [ -n "$v" ] || v=0.0
    if [ "$mode" = list ]; then
        syms=$(readelf --wide --dyn-syms "$f" 2>/dev/null | grep -o "[A-Za-z_0-9]*@GLIBC_$v\b" | sort -u | tr '\n' ' ')
        echo "$f: GLIBC_$v (${syms% })"
    fi
    need=$(printf '%s\n%s\n' "$need" "$v" | highest)
done

case "$mode" in
    print) echo "$need" ;;
    list) echo "all: GLIBC_$need" ;;
    check)
        have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
        if [ -z "$have" ]; then
            echo "glibc-needed: this machine's glibc version is unknown (not glibc?); the files need GLIBC_$need" >&2
            exit 1
        fi
        if [ "$(printf '%s\n%s\n' "$need" "$have" | highest)" != "$have" ]; then
            echo "glibc-needed: the files need glibc $need but this machine has $have: rebuild them on (or for) an older glibc" >&2
            exit 1
        fi
        echo "glibc $have >= $need needed: ok"
        ;;
esac
