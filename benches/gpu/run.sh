#!/usr/bin/env bash
# The GPU section of the benchmarks (issue 6): hostfirst against torch / JAX / safetensors on a real GPU, in the
# same run. Not a test; the test suite never runs it. benches/gpu/README.md has the whole procedure.
#
#   bash benches/gpu/run.sh build              here (needs Rust): builds the benchmark driver into .gpu-carry/
#                                              (git-ignored), the folder the device tool carries to the GPU machine,
#                                              with a manifest: its sha256, mode and the newest glibc it needs
#   bash benches/gpu/run.sh [ARGS]             on the GPU machine: checks the carried driver (checksum, executable
#                                              bit - restored when the carry dropped it - and glibc), then
#                                              benches/gpu/run.py with it (ARGS: --gib 8 --reps 5 --budget 480
#                                              --only put,cold,peers,gather,seeds --out DIR)
#   bash benches/gpu/run.sh check              the checks alone (what a GPU machine does before running)
#   bash benches/gpu/run.sh --dry-run [ARGS]   here, without a GPU: the same against the stand-in CUDA driver
#                                              (tests/cuda_stub), a 256 MiB file, torch/JAX peers skipped; it proves
#                                              the harness runs, its numbers are no GPU figures. `--dry-run --only
#                                              check` is run by the test command (tests/it/gpu_harness.rs) and exits
#                                              non-zero when a check fails
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=${HOSTFIRST_GPU_CARRY:-.gpu-carry} # the tests point it elsewhere
if [ "${1:-}" = build ]; then
    # The driver, and the C library the Python checks (benches/gpu/check_py.py) load through HOSTFIRST_LIBRARY.
    exe=$(cargo build --release --lib --bench hostfirst-bench --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hostfirst-bench":
        print(m["executable"])' | tail -n 1)
    [ -n "$exe" ] || { echo "run.sh: the build failed (cargo build --release --lib --bench hostfirst-bench)" >&2; exit 1; }
    mkdir -p "$carry"
    cp "$exe" "$carry/hostfirst-bench"
    chmod 755 "$carry/hostfirst-bench"
    if [ -f target/release/libhostfirst.so ]; then cp target/release/libhostfirst.so "$carry/libhostfirst.so"; fi
    git rev-parse --short HEAD > "$carry/git-rev"
    {
        echo "sha256=$(sha256sum "$carry/hostfirst-bench" | cut -d' ' -f1)"
        echo "mode=755"
        echo "glibc=$(bash scripts/glibc-needed.sh "$carry/hostfirst-bench")"
    } > "$carry/manifest"
    echo "built $carry/hostfirst-bench ($(du -h "$carry/hostfirst-bench" | cut -f1)) from $(cat "$carry/git-rev");" \
        "needs glibc $(sed -n 's/^glibc=//p' "$carry/manifest") or newer (this machine: $(getconf GNU_LIBC_VERSION))"
    exit 0
fi

# Checks the carried driver before anything runs, and prints the path to run: the checksum against the manifest
# (a truncated or stale carry), the executable bit (a carry may drop mode bits: restored, or the file copied to a
# temporary folder where it can be), and that this machine's glibc is at least the one the build needs.
checked_bench() {
    local exe="$carry/hostfirst-bench" want sum need have
    [ -f "$exe" ] || { echo "run.sh: no $exe: run 'bash benches/gpu/run.sh build' where Rust is, and carry $carry" >&2; return 1; }
    if [ -f "$carry/manifest" ]; then
        want=$(sed -n 's/^sha256=//p' "$carry/manifest")
        sum=$(sha256sum "$exe" | cut -d' ' -f1)
        [ "$sum" = "$want" ] || { echo "run.sh: $exe does not match $carry/manifest (sha256 $sum, built $want): carry it again" >&2; return 1; }
        need=$(sed -n 's/^glibc=//p' "$carry/manifest")
        have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
        if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -t. -k1,1n -k2,2n | tail -n 1)" != "$have" ]; then
            echo "run.sh: $exe needs glibc $need, this machine has $have: build it on an older system (or with cargo-zigbuild for that glibc)" >&2
            return 1
        fi
    else
        echo "run.sh: no $carry/manifest (built by an older run.sh): the checksum and glibc are not checked" >&2
    fi
    if [ ! -x "$exe" ]; then
        echo "run.sh: $exe lost its executable bit in the carry; restoring it" >&2
        if ! chmod u+x "$exe" 2>/dev/null; then
            local tmp
            tmp=$(mktemp -d)
            cp "$exe" "$tmp/hostfirst-bench"
            chmod 755 "$tmp/hostfirst-bench"
            exe="$tmp/hostfirst-bench"
        fi
    fi
    echo "$exe"
}
if [ "${1:-}" = --dry-run ]; then
    shift
    bash "$0" build
    dir=target/gpu-dry-run/stand-in
    mkdir -p "$dir"
    cc -shared -fPIC -std=c11 -O1 -Wl,-soname,libcuda.so.1 -o "$dir/libcuda.so.1" tests/cuda_stub/stand_in_cuda.c -lpthread
    ln -sf libcuda.so.1 "$dir/libcuda.so"
    ln -sf libcuda.so.1 "$dir/libnvidia-ml.so.1"
    exe=$(checked_bench)
    # numpy writes the token file; the check section needs none (its Python checks say "skipped" without it).
    case " $* " in
        *" --only check "*) ;;
        *) python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q numpy safetensors \
            || echo "run.sh: numpy/safetensors could not be installed; sections needing them fail" >&2 ;;
    esac
    out=target/gpu-dry-run/$(date -u +%Y%m%dT%H%M%SZ)
    python3 benches/gpu/run.py --bench "$exe" --stand-in "$dir" \
        --data target/gpu-dry-run/data --out "$out" "$@"
    exec python3 benches/gpu/report_gpu.py "$out"/gpu-*.json
fi
exe=$(checked_bench)
if [ "${1:-}" = check ]; then
    echo "$exe"
    exit 0
fi
HOSTFIRST_GIT=$(cat "$carry/git-rev" 2>/dev/null || echo '?')
export HOSTFIRST_GIT
exec python3 benches/gpu/run.py --bench "$exe" "$@"
