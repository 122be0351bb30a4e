#!/usr/bin/env bash
# The GPU section of the benchmarks (issue 6): hostfirst against torch / JAX / safetensors on a real GPU, in the
# same run. Not a test; the test suite never runs it. benches/gpu/README.md has the whole procedure.
#
#   bash benches/gpu/run.sh build              here (needs Rust): builds the benchmark driver into .gpu-carry/
#                                              (git-ignored), the folder the device tool carries to the GPU machine
#   bash benches/gpu/run.sh [ARGS]             on the GPU machine: benches/gpu/run.py with the carried driver
#                                              (ARGS: --gib 8 --reps 5 --only put,cold,peers,gather,seeds --out DIR)
#   bash benches/gpu/run.sh --dry-run [ARGS]   here, without a GPU: the same against the stand-in CUDA driver
#                                              (tests/cuda_stub), a 256 MiB file, torch/JAX peers skipped; it proves
#                                              the harness runs, its numbers are no GPU figures
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.gpu-carry
if [ "${1:-}" = build ]; then
    exe=$(cargo build --release --bench hostfirst-bench --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hostfirst-bench":
        print(m["executable"])' | tail -n 1)
    [ -n "$exe" ] || { echo "run.sh: the build failed (cargo build --release --bench hostfirst-bench)" >&2; exit 1; }
    mkdir -p "$carry"
    cp "$exe" "$carry/hostfirst-bench"
    git rev-parse --short HEAD > "$carry/git-rev"
    echo "built $carry/hostfirst-bench ($(du -h "$carry/hostfirst-bench" | cut -f1)) from $(cat "$carry/git-rev")"
    exit 0
fi
if [ "${1:-}" = --dry-run ]; then
    shift
    bash "$0" build
    dir=target/gpu-dry-run/stand-in
    mkdir -p "$dir"
    cc -shared -fPIC -std=c11 -O1 -Wl,-soname,libcuda.so.1 -o "$dir/libcuda.so.1" tests/cuda_stub/stand_in_cuda.c -lpthread
    ln -sf libcuda.so.1 "$dir/libcuda.so"
    python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q numpy safetensors
    out=target/gpu-dry-run/$(date -u +%Y%m%dT%H%M%SZ)
    python3 benches/gpu/run.py --bench "$carry/hostfirst-bench" --stand-in "$dir" \
        --data target/gpu-dry-run/data --out "$out" "$@"
    exec python3 benches/gpu/report_gpu.py "$out"/gpu-*.json
fi
[ -x "$carry/hostfirst-bench" ] || { echo "run.sh: no $carry/hostfirst-bench: run 'bash benches/gpu/run.sh build' where Rust is, and carry $carry" >&2; exit 1; }
export HOSTFIRST_GIT=$(cat "$carry/git-rev" 2>/dev/null || echo '?')
exec python3 benches/gpu/run.py --bench "$carry/hostfirst-bench" "$@"
