#!/usr/bin/env bash
# Builds libhostfirst and the hostfirst CLI, then tells the story on data it generates itself.
set -euo pipefail
cd "$(dirname "$0")/.."
have() { command -v "$1" >/dev/null 2>&1; }
have cc || { apt-get update -qq && apt-get install -y -qq gcc >&2; }

cargo build --release --quiet
# The library's SONAME is versioned (docs/PACKAGING.md): give the loader that name beside the build output.
if have readelf; then
    soname="$(readelf -d target/release/libhostfirst.so | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
    [ -z "$soname" ] || ln -sfn libhostfirst.so "target/release/$soname"
fi
mkdir -p target/demo
cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -Iexamples-c/cli examples-c/cli/*.c -o target/demo/hostfirst \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lhostfirst -lpthread -lm
HF=target/demo/hostfirst

echo "== 1. Which backends exist, and why one is missing"
$HF devices

echo
echo "== 2. Host-first loading: a 1 GiB token file opens without reading its data"
TOK=target/demo/tokens.safetensors
if [ ! -f "$TOK" ]; then
    # One U16 tensor of 2^29 tokens (1 GiB of real, random data) after a hand-written header.
    N=$((1 << 29)); BYTES=$((N * 2))
    HDR="{\"__metadata__\":{\"format\":\"tokens\"},\"tokens\":{\"dtype\":\"U16\",\"shape\":[$N],\"data_offsets\":[0,$BYTES]}}"
    while [ $(( ${#HDR} % 8 )) -ne 0 ]; do HDR="$HDR "; done   # pad like the reference writer: data 8-aligned
    LEN=${#HDR}
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' $((LEN & 255)) $(((LEN >> 8) & 255)) $(((LEN >> 16) & 255)) $(((LEN >> 24) & 255)))" > "$TOK"
    printf '%s' "$HDR" >> "$TOK"
    head -c "$BYTES" /dev/urandom >> "$TOK"
fi
cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude examples-c/host_first.c -o target/demo/host_first \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lhostfirst -lpthread -lm
target/demo/host_first "$TOK" tokens
echo
$HF inspect "$TOK"
