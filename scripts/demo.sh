#!/usr/bin/env bash
# Builds libhostfirst and the hostfirst CLI, then tells the story on data it generates itself.
set -euo pipefail
cd "$(dirname "$0")/.."
have() { command -v "$1" >/dev/null 2>&1; }
# shellcheck source=scripts/apt.sh
. scripts/apt.sh   # apt_install: waits for another apt run's locks, fails saying why
have cc || apt_install gcc

cargo build --release --quiet   # also puts the SONAME link libhostfirst.so.1 beside the library (build.rs)
mkdir -p target/demo
bash cli/build.sh target/demo/hostfirst -Ltarget/release -Wl,-rpath,"$PWD/target/release"
HF=target/demo/hostfirst

echo "== 1. Which backends exist, and why one is missing"
$HF devices

echo
echo "== 2. Host-first loading: a 1 GiB token file opens without reading its data"
TOK=target/demo/story.safetensors
if [ ! -f "$TOK" ]; then
    # 2^29 U16 tokens (1 GiB of random data) plus two small weight tensors, after a hand-written header.
    N=$((1 << 29)); BYTES=$((N * 2)); E=$((256 * 64 * 4)); H=$((64 * 4))
    HDR="{\"__metadata__\":{\"format\":\"tokens\"},\"tokens\":{\"dtype\":\"U16\",\"shape\":[$N],\"data_offsets\":[0,$BYTES]},"
    HDR="$HDR\"embed.weight\":{\"dtype\":\"F32\",\"shape\":[256,64],\"data_offsets\":[$BYTES,$((BYTES + E))]},"
    HDR="$HDR\"head.bias\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[$((BYTES + E)),$((BYTES + E + H))]}}"
    while [ $(( ${#HDR} % 8 )) -ne 0 ]; do HDR="$HDR "; done   # pad like the reference writer: data 8-aligned
    LEN=${#HDR}
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' $((LEN & 255)) $(((LEN >> 8) & 255)) $(((LEN >> 16) & 255)) $(((LEN >> 24) & 255)))" > "$TOK"
    printf '%s' "$HDR" >> "$TOK"
    head -c "$((BYTES + E + H))" /dev/urandom >> "$TOK"
fi
cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude examples-c/host_first.c -o target/demo/host_first \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lhostfirst -lpthread -lm
target/demo/host_first "$TOK" tokens
echo
$HF inspect "$TOK"

echo
echo "== 3. Place the file by rules: 'tokens' stays on the host, everything else goes to the default device"
$HF plan "$TOK" --rule 'tokens=host' --rule '*=default'
$HF load "$TOK" --rule 'tokens=host' --rule '*=default'

echo
echo "== 4. Gather random [64, 1025] token batches onto the default device (one transfer per batch)"
$HF gather "$TOK" tokens --batch 64 --window 1025 --iters 200 --seed 1 --prefault

echo
echo "== 5. Put a 256 MiB slice of the tokens, with a progress bar on a terminal"
$HF put "$TOK" tokens --rows 0:134217728   # no --device: the default device

echo
echo "== 6. A put that cannot fit fails before allocating anything, and says why"
BIG=target/demo/oversized.safetensors
NB=$((1 << 40))   # a 1 TiB tensor in a sparse file: no disk or memory is used
HDR="{\"huge\":{\"dtype\":\"U8\",\"shape\":[$NB],\"data_offsets\":[0,$NB]}}"
while [ $(( ${#HDR} % 8 )) -ne 0 ]; do HDR="$HDR "; done
LEN=${#HDR}
printf "$(printf '\\x%02x\\x%02x\\x00\\x00\\x00\\x00\\x00\\x00' $((LEN & 255)) $(((LEN >> 8) & 255)))" > "$BIG"
printf '%s' "$HDR" >> "$BIG"
truncate -s $((8 + LEN + NB)) "$BIG"
if $HF put "$BIG" huge --device cpu; then echo "unexpected: the oversized put succeeded"; exit 1; fi
rm -f "$BIG"
echo "(the process carries on: nothing was allocated)"
