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
